//! Queue-pair, send-WQE, memory-key, RoCE and port constants, each named as
//! in its public source: `mlx5_ifc.h` enums, `include/linux/mlx5/qp.h`,
//! `include/linux/mlx5/device.h`, `include/linux/mlx5/driver.h`,
//! `include/rdma/ib_verbs.h`.

use super::EventMask;

impl EventMask {
    /// The QP events Linux routes to a QP (`qp_allowed_event_types`,
    /// `drivers/infiniband/hw/mlx5/qpc.c`) that a driver with RC QPs on an
    /// SRQ needs: communication established, catastrophic, invalid-request
    /// and access errors, last WQE reached. All are in [`Self::LINUX_ASYNC`].
    pub const QP_EVENTS: EventMask = EventMask::COMM_EST
        .union(EventMask::WQ_CATAS_ERROR)
        .union(EventMask::WQ_INVAL_REQ_ERROR)
        .union(EventMask::WQ_ACCESS_ERROR)
        .union(EventMask::SRQ_LAST_WQE);
}

/// QP states in `qpc.state` (`MLX5_QPC_STATE_*`, `mlx5_ifc.h`).
///
/// `include/linux/mlx5/qp.h` numbers SQD 5 and SQ_DRAINING 7, the ifc enum
/// SQD 7; Linux `to_ib_qp_state` (`drivers/infiniband/hw/mlx5/qp.c`) reads
/// both 5 and 7 as SQD, and so does `name` here.
pub mod qp_state {
    /// Reset: the state after `CREATE_QP` and `2RST_QP`.
    pub const RST: u8 = 0x0;
    /// Initialized (after `RST2INIT_QP`).
    pub const INIT: u8 = 0x1;
    /// Ready to receive (after `INIT2RTR_QP`).
    pub const RTR: u8 = 0x2;
    /// Ready to send (after `RTR2RTS_QP`).
    pub const RTS: u8 = 0x3;
    /// Send queue error: the send side stopped on an error.
    pub const SQER: u8 = 0x4;
    /// Error: every outstanding WQE completes with a flush error.
    pub const ERR: u8 = 0x6;
    /// Send queue drained (ifc numbering).
    pub const SQD: u8 = 0x7;
    /// Suspended (live migration).
    pub const SUSPENDED: u8 = 0x9;

    /// The state's name (`mlx5_qp_state_str`), if known.
    pub fn name(state: u8) -> Option<&'static str> {
        Some(match state {
            RST => "RST",
            INIT => "INIT",
            RTR => "RTR",
            RTS => "RTS",
            SQER => "SQER",
            5 | SQD => "SQD",
            ERR => "ERR",
            SUSPENDED => "SUSPENDED",
            _ => return None,
        })
    }
}

/// QP service types in `qpc.st` (`MLX5_QPC_ST_*`, `mlx5_ifc.h`).
pub mod qp_st {
    /// Reliable connected.
    pub const RC: u8 = 0x0;
    /// Unreliable connected.
    pub const UC: u8 = 0x1;
    /// Unreliable datagram.
    pub const UD: u8 = 0x2;
    /// XRC.
    pub const XRC: u8 = 0x3;
    /// DC initiator.
    pub const DCI: u8 = 0x5;
    /// Special QP 0 (subnet management).
    pub const QP0: u8 = 0x7;
    /// Special QP 1 (general services).
    pub const QP1: u8 = 0x8;
    /// Raw datagram (Ethernet).
    pub const RAW_DATAGRAM: u8 = 0x9;
    /// UMR registration QP.
    pub const REG_UMR: u8 = 0xc;
}

/// Path-migration states in `qpc.pm_state` (`MLX5_QPC_PM_STATE_*`,
/// `mlx5_ifc.h`; `MLX5_QP_PM_*`, `include/linux/mlx5/qp.h`).
pub mod pm_state {
    /// Armed.
    pub const ARMED: u8 = 0x0;
    /// Rearm.
    pub const REARM: u8 = 0x1;
    /// Migrated: what Linux sets for kernel QPs (no alternate path).
    pub const MIGRATED: u8 = 0x3;
}

/// Receive-queue types in `qpc.rq_type` (`include/linux/mlx5/qp.h`).
pub mod rq_type {
    /// A receive ring of the QP's own (`MLX5_NON_ZERO_RQ`).
    pub const NON_ZERO: u8 = 0x0;
    /// Receives come from an SRQ or RMP, `qpc.srqn_rmpn_xrqn` (`MLX5_SRQ_RQ`).
    pub const SRQ: u8 = 0x1;
    /// Cyclic RQ (`MLX5_CRQ_RQ`).
    pub const CRQ: u8 = 0x2;
    /// No receive queue at all (`MLX5_ZERO_LEN_RQ`).
    pub const ZERO_LEN: u8 = 0x3;
}

/// Timestamp formats (`mlx5_ifc.h`): `qpc.ts_format` values
/// (`MLX5_TIMESTAMP_FORMAT_*`) and the `sq_ts_format` / `rq_ts_format` /
/// `roce_cap.qp_ts_format` capability values (`MLX5_TIMESTAMP_FORMAT_CAP_*`).
pub mod ts_format {
    /// QPC: free-running timestamps.
    pub const FREE_RUNNING: u8 = 0x0;
    /// QPC: the device default.
    pub const DEFAULT: u8 = 0x1;
    /// QPC: real-time timestamps.
    pub const REAL_TIME: u8 = 0x2;
    /// Capability: free-running only.
    pub const CAP_FREE_RUNNING: u8 = 0x0;
    /// Capability: real-time only.
    pub const CAP_REAL_TIME: u8 = 0x1;
    /// Capability: both.
    pub const CAP_FREE_RUNNING_AND_REAL_TIME: u8 = 0x2;
}

/// Path MTU codes in `qpc.mtu` (`MLX5_QPC_MTU_*`, `mlx5_ifc.h`; the IB MTU
/// encoding).
pub mod mtu {
    /// 256 bytes.
    pub const MTU_256: u8 = 0x1;
    /// 512 bytes.
    pub const MTU_512: u8 = 0x2;
    /// 1024 bytes.
    pub const MTU_1024: u8 = 0x3;
    /// 2048 bytes.
    pub const MTU_2048: u8 = 0x4;
    /// 4096 bytes.
    pub const MTU_4096: u8 = 0x5;
    /// Raw Ethernet QP (no IB MTU).
    pub const RAW_ETHERNET_QP: u8 = 0x7;

    /// Bytes of an MTU code 1..=5.
    pub const fn bytes(code: u8) -> Option<u32> {
        match code {
            MTU_256..=MTU_4096 => Some(128 << code),
            _ => None,
        }
    }

    /// The largest MTU code whose size is at most `bytes` (None below 256).
    pub const fn code_at_most(bytes: u32) -> Option<u8> {
        let mut code = MTU_4096;
        while code >= MTU_256 {
            if (128u32 << code) <= bytes {
                return Some(code);
            }
            code -= 1;
        }
        None
    }
}

bitflags::bitflags! {
    /// `opt_param_mask` of the modify-QP commands (`enum mlx5_qp_optpar`,
    /// `include/linux/mlx5/qp.h`): which optional QPC fields a transition
    /// changes. Linux masks it per transition (`opt_mask` in
    /// `drivers/infiniband/hw/mlx5/qp.c`); RST2INIT takes none.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct OptParam: u32 {
        /// Alternate address path.
        const ALT_ADDR_PATH = 1 << 0;
        /// Remote read enable (`qpc.rre`).
        const RRE = 1 << 1;
        /// Remote atomic enable (`qpc.rae`).
        const RAE = 1 << 2;
        /// Remote write enable (`qpc.rwe`).
        const RWE = 1 << 3;
        /// P_Key index.
        const PKEY_INDEX = 1 << 4;
        /// Q_Key.
        const Q_KEY = 1 << 5;
        /// Minimum RNR NAK timer (`qpc.min_rnr_nak`).
        const RNR_TIMEOUT = 1 << 6;
        /// Primary address path.
        const PRIMARY_ADDR_PATH = 1 << 7;
        /// Initiator RDMA-read depth (`qpc.log_sra_max`).
        const SRA_MAX = 1 << 8;
        /// Responder RDMA-read depth (`qpc.log_rra_max`).
        const RRA_MAX = 1 << 9;
        /// Path-migration state.
        const PM_STATE = 1 << 10;
        /// Retry count.
        const RETRY_COUNT = 1 << 12;
        /// RNR retry count.
        const RNR_RETRY = 1 << 13;
        /// ACK timeout.
        const ACK_TIMEOUT = 1 << 14;
        /// LAG TX port affinity.
        const LAG_TX_AFF = 1 << 15;
        /// Primary port.
        const PRI_PORT = 1 << 16;
        /// DSCP of the primary address path.
        const PRIMARY_ADDR_PATH_DSCP = 1 << 17;
        /// SRQ/RMP/XRQ number (`MLX5_QP_OPTPAR_SRQN`; `RMPN_XRQN` in newer trees).
        const SRQN = 1 << 18;
        /// Receive CQ.
        const CQN_RCV = 1 << 19;
        /// DC handshake.
        const DC_HS = 1 << 20;
        /// DC access key.
        const DC_KEY = 1 << 21;
        /// Offload type.
        const OFFLOAD_TYPE = 1 << 24;
        /// Counter set id.
        const COUNTER_SET_ID = 1 << 25;
    }
}

/// Send-WQE constants (`include/linux/mlx5/qp.h`, `device.h`) and the
/// composition of the control segment's first two dwords (`wqe_ctrl_seg`).
pub mod wqe {
    /// Basic block: a send WQE is 1..=16 of them (`MLX5_SEND_WQE_BB`).
    pub const SEND_WQE_BB: usize = 64;
    /// Segment unit: `ds` counts these (`MLX5_SEND_WQE_DS`).
    pub const SEND_WQE_DS: usize = 16;
    /// Most basic blocks in one WQE (`MLX5_SEND_WQE_MAX_WQEBBS`).
    pub const SEND_WQE_MAX_WQEBBS: usize = 16;

    /// Opcode: no operation (`MLX5_OPCODE_NOP`).
    pub const OPCODE_NOP: u8 = 0x00;
    /// Opcode: send with invalidate (`MLX5_OPCODE_SEND_INVAL`).
    pub const OPCODE_SEND_INVAL: u8 = 0x01;
    /// Opcode: RDMA write (`MLX5_OPCODE_RDMA_WRITE`).
    pub const OPCODE_RDMA_WRITE: u8 = 0x08;
    /// Opcode: RDMA write with immediate (`MLX5_OPCODE_RDMA_WRITE_IMM`).
    pub const OPCODE_RDMA_WRITE_IMM: u8 = 0x09;
    /// Opcode: send (`MLX5_OPCODE_SEND`).
    pub const OPCODE_SEND: u8 = 0x0a;
    /// Opcode: send with immediate (`MLX5_OPCODE_SEND_IMM`).
    pub const OPCODE_SEND_IMM: u8 = 0x0b;
    /// Opcode: large send offload (`MLX5_OPCODE_LSO`).
    pub const OPCODE_LSO: u8 = 0x0e;
    /// Opcode: RDMA read (`MLX5_OPCODE_RDMA_READ`).
    pub const OPCODE_RDMA_READ: u8 = 0x10;
    /// Opcode: atomic compare and swap (`MLX5_OPCODE_ATOMIC_CS`).
    pub const OPCODE_ATOMIC_CS: u8 = 0x11;
    /// Opcode: atomic fetch and add (`MLX5_OPCODE_ATOMIC_FA`).
    pub const OPCODE_ATOMIC_FA: u8 = 0x12;
    /// Opcode: masked compare and swap (`MLX5_OPCODE_ATOMIC_MASKED_CS`).
    pub const OPCODE_ATOMIC_MASKED_CS: u8 = 0x14;
    /// Opcode: masked fetch and add (`MLX5_OPCODE_ATOMIC_MASKED_FA`).
    pub const OPCODE_ATOMIC_MASKED_FA: u8 = 0x15;
    /// Opcode: bind memory window (`MLX5_OPCODE_BIND_MW`).
    pub const OPCODE_BIND_MW: u8 = 0x18;
    /// Opcode: user-mode memory registration (`MLX5_OPCODE_UMR`).
    pub const OPCODE_UMR: u8 = 0x25;

    /// Name of a send opcode (`MLX5_OPCODE_*` without the prefix), if known;
    /// also names the opcode in a requester CQE's `sop_opcode`.
    pub fn opcode_name(opcode: u8) -> Option<&'static str> {
        Some(match opcode {
            OPCODE_NOP => "NOP",
            OPCODE_SEND_INVAL => "SEND_INVAL",
            OPCODE_RDMA_WRITE => "RDMA_WRITE",
            OPCODE_RDMA_WRITE_IMM => "RDMA_WRITE_IMM",
            OPCODE_SEND => "SEND",
            OPCODE_SEND_IMM => "SEND_IMM",
            OPCODE_LSO => "LSO",
            OPCODE_RDMA_READ => "RDMA_READ",
            OPCODE_ATOMIC_CS => "ATOMIC_CS",
            OPCODE_ATOMIC_FA => "ATOMIC_FA",
            OPCODE_ATOMIC_MASKED_CS => "ATOMIC_MASKED_CS",
            OPCODE_ATOMIC_MASKED_FA => "ATOMIC_MASKED_FA",
            OPCODE_BIND_MW => "BIND_MW",
            OPCODE_UMR => "UMR",
            _ => return None,
        })
    }

    /// `fm_ce_se`: write a CQE for this WQE (`MLX5_WQE_CTRL_CQ_UPDATE`).
    pub const CTRL_CQ_UPDATE: u8 = 2 << 2;
    /// `fm_ce_se`: write a CQE and an EQE (`MLX5_WQE_CTRL_CQ_UPDATE_AND_EQE`).
    pub const CTRL_CQ_UPDATE_AND_EQE: u8 = 3 << 2;
    /// `fm_ce_se`: solicited event at the responder (`MLX5_WQE_CTRL_SOLICITED`).
    pub const CTRL_SOLICITED: u8 = 1 << 1;
    /// `fm_ce_se` fence: none (`MLX5_FENCE_MODE_NONE`).
    pub const FENCE_MODE_NONE: u8 = 0 << 5;
    /// `fm_ce_se` fence: initiator small fence (`MLX5_FENCE_MODE_INITIATOR_SMALL`).
    pub const FENCE_MODE_INITIATOR_SMALL: u8 = 1 << 5;
    /// `fm_ce_se` fence: fence (`MLX5_FENCE_MODE_FENCE`).
    pub const FENCE_MODE_FENCE: u8 = 2 << 5;
    /// `fm_ce_se` fence: strong ordering (`MLX5_FENCE_MODE_STRONG_ORDERING`).
    pub const FENCE_MODE_STRONG_ORDERING: u8 = 3 << 5;
    /// `fm_ce_se` fence: small and fence (`MLX5_FENCE_MODE_SMALL_AND_FENCE`).
    pub const FENCE_MODE_SMALL_AND_FENCE: u8 = 4 << 5;

    /// `qpn_ds` bits holding the WQE size in 16-byte units (`MLX5_WQE_CTRL_DS_MASK`).
    pub const CTRL_DS_MASK: u32 = 0x3f;
    /// Shift of the QP number in `qpn_ds` (`MLX5_WQE_CTRL_QPN_SHIFT`).
    pub const CTRL_QPN_SHIFT: u32 = 8;
    /// Shift of the WQE index in `opmod_idx_opcode` (`MLX5_WQE_CTRL_WQE_INDEX_SHIFT`).
    pub const CTRL_WQE_INDEX_SHIFT: u32 = 8;
    /// Shift of the opcode modifier in `opmod_idx_opcode`.
    pub const CTRL_OPMOD_SHIFT: u32 = 24;

    /// Flag in an inline segment's byte count (`MLX5_INLINE_SEG`, `device.h`).
    pub const INLINE_SEG: u32 = 0x8000_0000;

    /// Dword 0 of the control segment: `opmod << 24 | index << 8 | opcode`
    /// (Linux `mlx5r_finish_wqe`, `drivers/infiniband/hw/mlx5/wr.c`).
    pub const fn opmod_idx_opcode(opmod: u8, wqe_index: u16, opcode: u8) -> u32 {
        ((opmod as u32) << CTRL_OPMOD_SHIFT)
            | ((wqe_index as u32) << CTRL_WQE_INDEX_SHIFT)
            | opcode as u32
    }

    /// Dword 1 of the control segment: `qpn << 8 | ds` (`ds` in 16-byte
    /// units, at most 0x3f). Bits above 24 of `qpn` are dropped.
    pub const fn qpn_ds(qpn: u32, ds: u8) -> u32 {
        ((qpn & 0x00ff_ffff) << CTRL_QPN_SHIFT) | (ds as u32 & CTRL_DS_MASK)
    }

    /// Split dword 0 into (opmod, WQE index, opcode).
    pub const fn split_opmod_idx_opcode(v: u32) -> (u8, u16, u8) {
        (
            (v >> CTRL_OPMOD_SHIFT) as u8,
            (v >> CTRL_WQE_INDEX_SHIFT) as u16,
            v as u8,
        )
    }

    /// Split dword 1 into (QP number, ds).
    pub const fn split_qpn_ds(v: u32) -> (u32, u8) {
        (v >> CTRL_QPN_SHIFT, (v & CTRL_DS_MASK) as u8)
    }

    /// Basic blocks a WQE of `ds` 16-byte units occupies (`DIV_ROUND_UP(ds *
    /// MLX5_SEND_WQE_DS, MLX5_SEND_WQE_BB)`).
    pub const fn wqebbs(ds: u8) -> usize {
        (ds as usize * SEND_WQE_DS).div_ceil(SEND_WQE_BB)
    }
}

/// Memory keys (`mlx5_ifc.h` `MLX5_MKC_ACCESS_MODE_*`;
/// `include/linux/mlx5/driver.h` key helpers).
pub mod mkey {
    /// Access mode: physical addresses, no translation (Linux DMA MR).
    pub const ACCESS_MODE_PA: u8 = 0x0;
    /// Access mode: memory translation table.
    pub const ACCESS_MODE_MTT: u8 = 0x1;
    /// Access mode: key/length/address lists.
    pub const ACCESS_MODE_KLMS: u8 = 0x2;
    /// Access mode: fixed-size KLMs.
    pub const ACCESS_MODE_KSM: u8 = 0x3;
    /// Access mode: software-owned ICM.
    pub const ACCESS_MODE_SW_ICM: u8 = 0x4;
    /// Access mode: device memory.
    pub const ACCESS_MODE_MEMIC: u8 = 0x5;
    /// Access mode: crossing another vHCA's key.
    pub const ACCESS_MODE_CROSSING: u8 = 0x6;

    /// Split an access mode into (`access_mode_4_2`, `access_mode_1_0`).
    pub const fn split_access_mode(mode: u8) -> (u8, u8) {
        ((mode >> 2) & 0x7, mode & 0x3)
    }

    /// Join `access_mode_4_2` and `access_mode_1_0`.
    pub const fn access_mode(mode_4_2: u8, mode_1_0: u8) -> u8 {
        ((mode_4_2 & 0x7) << 2) | (mode_1_0 & 0x3)
    }

    /// `mkc.qpn` of a key not bound to a QP (Linux writes 0xffffff).
    pub const QPN_ANY: u32 = 0x00ff_ffff;

    /// MTT entry permission bits read + write, used when `pg_access` = 1
    /// (rdma-core `MLX5_MTT_PRESENT`, `providers/mlx5/mlx5_vfio.h`).
    pub const MTT_PRESENT: u64 = 3;

    /// The key of `mkey_index` with variant byte `mkey_7_0`
    /// (`mlx5_idx_to_mkey` | variant).
    pub const fn key(mkey_index: u32, mkey_7_0: u8) -> u32 {
        (mkey_index << 8) | mkey_7_0 as u32
    }

    /// The index of a key: what `DESTROY_MKEY` and `QUERY_MKEY` take
    /// (`mlx5_mkey_to_idx`).
    pub const fn index(key: u32) -> u32 {
        key >> 8
    }

    /// The variant byte of a key (`mlx5_mkey_variant`).
    pub const fn variant(key: u32) -> u8 {
        key as u8
    }
}

/// RoCE address and capability values (`include/linux/mlx5/device.h`).
pub mod roce {
    /// `roce_addr_layout.roce_version`: RoCE v1 (`MLX5_ROCE_VERSION_1`).
    pub const VERSION_1: u8 = 0;
    /// `roce_addr_layout.roce_version`: RoCE v2 (`MLX5_ROCE_VERSION_2`).
    pub const VERSION_2: u8 = 2;
    /// `roce_cap.roce_version` bit: v1 supported (`MLX5_ROCE_VERSION_1_CAP`).
    pub const VERSION_1_CAP: u8 = 1 << VERSION_1;
    /// `roce_cap.roce_version` bit: v2 supported (`MLX5_ROCE_VERSION_2_CAP`).
    pub const VERSION_2_CAP: u8 = 1 << VERSION_2;
    /// `roce_addr_layout.roce_l3_type`: IPv4 (`MLX5_ROCE_L3_TYPE_IPV4`).
    pub const L3_TYPE_IPV4: u8 = 0;
    /// `roce_addr_layout.roce_l3_type`: IPv6 (`MLX5_ROCE_L3_TYPE_IPV6`).
    pub const L3_TYPE_IPV6: u8 = 1;
}

/// Port values: `cmd_hca_cap.port_type` (`MLX5_CAP_PORT_TYPE_*`, `mlx5_ifc.h`)
/// and the IB port states `hca_vport_context` reports (`enum ib_port_state`,
/// `enum ib_port_phys_state`, `include/rdma/ib_verbs.h`).
pub mod port {
    /// `port_type`: InfiniBand.
    pub const TYPE_IB: u8 = 0x0;
    /// `port_type`: Ethernet.
    pub const TYPE_ETH: u8 = 0x1;
    /// `vport_state`: down (`IB_PORT_DOWN`).
    pub const STATE_DOWN: u8 = 1;
    /// `vport_state`: initialized (`IB_PORT_INIT`).
    pub const STATE_INIT: u8 = 2;
    /// `vport_state`: armed (`IB_PORT_ARMED`).
    pub const STATE_ARMED: u8 = 3;
    /// `vport_state`: active (`IB_PORT_ACTIVE`).
    pub const STATE_ACTIVE: u8 = 4;
    /// `port_physical_state`: link up (`IB_PORT_PHYS_STATE_LINK_UP`).
    pub const PHYS_STATE_LINK_UP: u8 = 5;
}

/// PTYS register values (`mlx5_ifc.h` `ptys_reg`; Linux
/// `include/linux/mlx5/port.h`).
pub mod ptys {
    /// `proto_mask`: InfiniBand (`MLX5_PTYS_IB`).
    pub const PROTO_IB: u8 = 1 << 0;
    /// `proto_mask`: Ethernet (`MLX5_PTYS_EN`).
    pub const PROTO_EN: u8 = 1 << 2;

    /// Bit numbers of the legacy `eth_proto_*` fields (`enum mlx5e_link_mode`).
    pub mod eth {
        #![allow(missing_docs)]
        pub const B1000BASE_CX_SGMII: u32 = 0;
        pub const B1000BASE_KX: u32 = 1;
        pub const B10GBASE_CX4: u32 = 2;
        pub const B10GBASE_KX4: u32 = 3;
        pub const B10GBASE_KR: u32 = 4;
        pub const B20GBASE_KR2: u32 = 5;
        pub const B40GBASE_CR4: u32 = 6;
        pub const B40GBASE_KR4: u32 = 7;
        pub const B56GBASE_R4: u32 = 8;
        pub const B10GBASE_CR: u32 = 12;
        pub const B10GBASE_SR: u32 = 13;
        pub const B10GBASE_ER: u32 = 14;
        pub const B40GBASE_SR4: u32 = 15;
        pub const B40GBASE_LR4: u32 = 16;
        pub const B50GBASE_SR2: u32 = 18;
        pub const B100GBASE_CR4: u32 = 20;
        pub const B100GBASE_SR4: u32 = 21;
        pub const B100GBASE_KR4: u32 = 22;
        pub const B100GBASE_LR4: u32 = 23;
        pub const B100BASE_TX: u32 = 24;
        pub const B1000BASE_T: u32 = 25;
        pub const B10GBASE_T: u32 = 26;
        pub const B25GBASE_CR: u32 = 27;
        pub const B25GBASE_KR: u32 = 28;
        pub const B25GBASE_SR: u32 = 29;
        pub const B50GBASE_CR2: u32 = 30;
        pub const B50GBASE_KR2: u32 = 31;
    }

    /// `ib_proto_*` bits: the lane speed, the same values as the verbs
    /// `IB_SPEED_*` (Linux passes `ib_proto_oper` through as `active_speed`).
    pub mod ib_speed {
        #![allow(missing_docs)]
        pub const SDR: u16 = 1 << 0;
        pub const DDR: u16 = 1 << 1;
        pub const QDR: u16 = 1 << 2;
        pub const FDR10: u16 = 1 << 3;
        pub const FDR: u16 = 1 << 4;
        pub const EDR: u16 = 1 << 5;
        pub const HDR: u16 = 1 << 6;
        pub const NDR: u16 = 1 << 7;
    }

    /// `ib_link_width_*` bits (`enum mlx5_ib_width`,
    /// `drivers/infiniband/hw/mlx5/main.c`).
    pub mod ib_width {
        #![allow(missing_docs)]
        pub const W1X: u16 = 1 << 0;
        pub const W2X: u16 = 1 << 1;
        pub const W4X: u16 = 1 << 2;
        pub const W8X: u16 = 1 << 3;
        pub const W12X: u16 = 1 << 4;
    }
}

/// Other QP context values.
pub mod qp_ctx {
    /// `qpc.user_index` that keeps version-0 CQEs when cap `cqe_version` = 1
    /// (`MLX5_IB_DEFAULT_UIDX`, `drivers/infiniband/hw/mlx5/mlx5_ib.h`).
    pub const DEFAULT_USER_INDEX: u32 = 0x00ff_ffff;
    /// Dword of the QP doorbell record holding the receive counter (`MLX5_RCV_DBR`).
    pub const RCV_DBR: usize = 0;
    /// Dword of the QP doorbell record holding the send counter (`MLX5_SND_DBR`).
    pub const SND_DBR: usize = 1;
}

/// The atomic capability page and the QPC's `atomic_mode`
/// (`include/linux/mlx5/device.h`, `drivers/infiniband/hw/mlx5/qp.c`).
pub mod atomic {
    /// `atomic_operations` bit: 8-byte compare and swap (`MLX5_ATOMIC_OPS_CMP_SWAP`).
    pub const OPS_CMP_SWAP: u16 = 1 << 0;
    /// `atomic_operations` bit: 8-byte fetch and add (`MLX5_ATOMIC_OPS_FETCH_ADD`).
    pub const OPS_FETCH_ADD: u16 = 1 << 1;
    /// `atomic_operations` bit: masked compare and swap (`MLX5_ATOMIC_OPS_MASKED_CMP_SWAP`).
    pub const OPS_MASKED_CMP_SWAP: u16 = 1 << 2;
    /// `atomic_operations` bit: masked fetch and add (`MLX5_ATOMIC_OPS_MASKED_FETCH_ADD`).
    pub const OPS_MASKED_FETCH_ADD: u16 = 1 << 3;
    /// `atomic_size_qp` bit: 8-byte operands (`MLX5_ATOMIC_SIZE_QP_8BYTES`).
    pub const SIZE_QP_8BYTES: u16 = 1 << 3;
    /// `atomic_req_8B_endianness_mode`: big endian (the reset value).
    pub const REQ_MODE_BE: u8 = 0;
    /// `atomic_req_8B_endianness_mode`: host endianness
    /// (`MLX5_ATOMIC_REQ_MODE_HOST_ENDIANNESS`), what Linux sets.
    pub const REQ_MODE_HOST_ENDIANNESS: u8 = 1;
    /// `qpc.atomic_mode`: IB-compatible 8-byte atomics (`MLX5_ATOMIC_MODE_IB_COMP`),
    /// what Linux `get_atomic_mode` picks without extended atomics.
    pub const MODE_IB_COMP: u8 = 1;
}
