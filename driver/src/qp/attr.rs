//! QP states and the attributes of each state transition, as types: a
//! transition takes exactly the fields it needs (the RC column of the IB
//! `qp_state_table`, Linux `drivers/infiniband/core/verbs.c`; the QPC fields
//! Linux `__mlx5_ib_modify_qp` and rdma-core's DevX RC test fill).

/// A QP state (`qpc.state`, `MLX5_QPC_STATE_*` of `mlx5_ifc.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpState {
    /// 0: reset (after CREATE_QP and 2RST).
    Reset,
    /// 1: initialised.
    Init,
    /// 2: ready to receive.
    Rtr,
    /// 3: ready to send.
    Rts,
    /// 4: send queue error.
    SqError,
    /// 5 or 7: send queue drained (`qp.h` says 5, `mlx5_ifc.h` 7; Linux
    /// reads both as SQD).
    SqDrained,
    /// 6: error.
    Error,
    /// Any other value firmware reported.
    Unknown(u8),
}

impl QpState {
    /// Decode `qpc.state`.
    pub const fn from_raw(v: u8) -> QpState {
        match v {
            0 => QpState::Reset,
            1 => QpState::Init,
            2 => QpState::Rtr,
            3 => QpState::Rts,
            4 => QpState::SqError,
            5 | 7 => QpState::SqDrained,
            6 => QpState::Error,
            x => QpState::Unknown(x),
        }
    }

    /// The `qpc.state` value (`SqDrained` as 7, the `mlx5_ifc.h` value).
    pub const fn raw(self) -> u8 {
        match self {
            QpState::Reset => 0,
            QpState::Init => 1,
            QpState::Rtr => 2,
            QpState::Rts => 3,
            QpState::SqError => 4,
            QpState::SqDrained => 7,
            QpState::Error => 6,
            QpState::Unknown(x) => x,
        }
    }

    /// States in which send work requests may be posted: RTS (executed),
    /// SQD/SQE (queued), ERR (flushed with a completion each). RESET, INIT
    /// and RTR refuse them, as the IB specification requires.
    pub const fn can_post_send(self) -> bool {
        matches!(
            self,
            QpState::Rts | QpState::SqDrained | QpState::SqError | QpState::Error
        )
    }
}

/// The state transitions the driver issues, with the states each is
/// allowed from (Linux `__mlx5_ib_modify_qp` `optab` for RC; 2ERR and 2RST
/// from every state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// RST2INIT_QP.
    Rst2Init,
    /// INIT2RTR_QP.
    Init2Rtr,
    /// RTR2RTS_QP.
    Rtr2Rts,
    /// 2ERR_QP.
    ToError,
    /// 2RST_QP.
    ToReset,
}

impl Transition {
    /// May a QP in `from` take this transition?
    pub const fn allowed_from(self, from: QpState) -> bool {
        match self {
            Transition::Rst2Init => matches!(from, QpState::Reset),
            Transition::Init2Rtr => matches!(from, QpState::Init),
            Transition::Rtr2Rts => matches!(from, QpState::Rtr),
            Transition::ToError | Transition::ToReset => true,
        }
    }

    /// The state after it.
    pub const fn target(self) -> QpState {
        match self {
            Transition::Rst2Init => QpState::Init,
            Transition::Init2Rtr => QpState::Rtr,
            Transition::Rtr2Rts => QpState::Rts,
            Transition::ToError => QpState::Error,
            Transition::ToReset => QpState::Reset,
        }
    }

    /// The command's `mlx5_ifc.h` name.
    pub const fn command(self) -> &'static str {
        match self {
            Transition::Rst2Init => "RST2INIT_QP",
            Transition::Init2Rtr => "INIT2RTR_QP",
            Transition::Rtr2Rts => "RTR2RTS_QP",
            Transition::ToError => "2ERR_QP",
            Transition::ToReset => "2RST_QP",
        }
    }
}

/// Path MTU (`qpc.mtu`, `MLX5_QPC_MTU_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mtu {
    /// 256 bytes (code 1).
    B256 = 1,
    /// 512 bytes.
    B512 = 2,
    /// 1024 bytes.
    B1024 = 3,
    /// 2048 bytes.
    B2048 = 4,
    /// 4096 bytes.
    B4096 = 5,
}

impl Mtu {
    /// Bytes.
    pub const fn bytes(self) -> u32 {
        128 << (self as u32)
    }

    /// The largest IB MTU whose RoCE packet fits an Ethernet MTU of
    /// `eth_mtu` bytes (96 bytes of GRH, UDP, BTH, extended headers and ICRC,
    /// Linux `iboe_get_mtu`); `None` below 256.
    pub const fn for_ethernet(eth_mtu: u32) -> Option<Mtu> {
        let room = eth_mtu.saturating_sub(96);
        if room >= 4096 {
            Some(Mtu::B4096)
        } else if room >= 2048 {
            Some(Mtu::B2048)
        } else if room >= 1024 {
            Some(Mtu::B1024)
        } else if room >= 512 {
            Some(Mtu::B512)
        } else if room >= 256 {
            Some(Mtu::B256)
        } else {
            None
        }
    }
}

/// Remote access rights of a QP (`qpc.rre`, `rwe`, `rae`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpAccess {
    /// Remote RDMA read.
    pub remote_read: bool,
    /// Remote RDMA write (needed on the responder of RDMA WRITE).
    pub remote_write: bool,
    /// Remote atomics.
    pub remote_atomic: bool,
}

/// RESET → INIT: port, partition key index, access rights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitAttr {
    /// Port, 1-based (1..=`num_ports`).
    pub port: u8,
    /// Partition key index.
    pub pkey_index: u16,
    /// Remote access rights.
    pub access: QpAccess,
}

impl Default for InitAttr {
    /// Port 1, pkey index 0, remote read and write (what DPDK, rdma-core's
    /// DevX test and Linux software steering set).
    fn default() -> Self {
        InitAttr {
            port: 1,
            pkey_index: 0,
            access: QpAccess {
                remote_read: true,
                remote_write: true,
                remote_atomic: false,
            },
        }
    }
}

/// How the peer is addressed (`qpc.primary_address_path`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AddressPath {
    /// Force loopback (`ads.fl = 1`): a QP of this function, no GID, MAC or
    /// LID (RC only, allowed per the `fl_rc_qp_when_roce_*` capabilities).
    ForceLoopback {
        /// Port, 1-based.
        port: u8,
    },
    /// RoCE: the peer's GID and MAC, the source GID table entry.
    Roce {
        /// Port, 1-based.
        port: u8,
        /// Source GID table index (`src_addr_index`).
        sgid_index: u8,
        /// Destination GID.
        dgid: [u8; 16],
        /// Destination MAC.
        dmac: [u8; 6],
        /// Hop limit (Linux: 64 when asked for less than 2).
        hop_limit: u8,
        /// UDP source port (RoCE v2; 0 for v1).
        udp_sport: u16,
        /// Traffic class.
        traffic_class: u8,
        /// Flow label (20 bits).
        flow_label: u32,
    },
    /// InfiniBand: the peer's LID, no GRH.
    Ib {
        /// Port, 1-based.
        port: u8,
        /// Destination LID.
        dlid: u16,
        /// Service level.
        sl: u8,
    },
    /// InfiniBand with a global route header: the peer's LID and GID.
    IbGlobal {
        /// Port, 1-based.
        port: u8,
        /// Destination LID.
        dlid: u16,
        /// Service level.
        sl: u8,
        /// Source GID table index.
        sgid_index: u8,
        /// Destination GID.
        dgid: [u8; 16],
        /// Hop limit.
        hop_limit: u8,
        /// Traffic class.
        traffic_class: u8,
        /// Flow label (20 bits).
        flow_label: u32,
    },
}

impl AddressPath {
    /// The port of the path.
    pub const fn port(&self) -> u8 {
        match *self {
            AddressPath::ForceLoopback { port }
            | AddressPath::Roce { port, .. }
            | AddressPath::Ib { port, .. }
            | AddressPath::IbGlobal { port, .. } => port,
        }
    }
}

/// INIT → RTR: the peer and the receive side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtrAttr {
    /// How to reach the peer.
    pub path: AddressPath,
    /// Path MTU.
    pub mtu: Mtu,
    /// The peer's QP number (`remote_qpn`).
    pub dest_qpn: u32,
    /// Expected first PSN: the peer's `sq_psn` (`next_rcv_psn`).
    pub rq_psn: u32,
    /// RNR NAK timer code sent to a requester that finds no receive WQE
    /// (IB encoding, 0..=31; 12 = 0.64 ms as in rdma-core's tests).
    pub min_rnr_timer: u8,
    /// RDMA reads / atomics this QP accepts at once (`log_rra_max` =
    /// ceil(log2)); 0 for none.
    pub max_dest_rd_atomic: u8,
}

/// RTR → RTS: the send side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtsAttr {
    /// First PSN sent (`next_send_psn`); the peer's `rq_psn` must match.
    pub sq_psn: u32,
    /// Ack timeout code (4.096 µs · 2^t, 0..=31).
    pub timeout: u8,
    /// Transport retries (0..=7).
    pub retry_cnt: u8,
    /// RNR retries (0..=7; 7 retries forever).
    pub rnr_retry: u8,
    /// RDMA reads / atomics this QP issues at once (`log_sra_max` =
    /// ceil(log2)); 0 for none.
    pub max_rd_atomic: u8,
}

impl Default for RtsAttr {
    /// PSN 0, timeout 14, 7 transport retries, RNR retries forever, no
    /// RDMA reads (rdma-core's DevX RC test values).
    fn default() -> Self {
        RtsAttr {
            sq_psn: 0,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 0,
        }
    }
}

/// `ceil(log2(n))` for the RDMA-read depths (Linux `fls(n − 1)`), 0 for 0.
pub(crate) const fn log2_ceil(n: u8) -> u8 {
    if n <= 1 {
        0
    } else {
        (8 - (n - 1).leading_zeros()) as u8
    }
}

/// The RoCE v2 UDP source port Linux derives for a QP pair when no flow
/// label is given: a flow label from both QP numbers (symmetric, so both
/// sides agree), folded into the 14 bits above 0xC000
/// (`rdma_calc_flow_label`, `rdma_flow_label_to_udp_sport`,
/// `include/rdma/ib_verbs.h`).
pub const fn roce_udp_sport(lqpn: u32, rqpn: u32) -> u16 {
    let mut v = lqpn as u64 * rqpn as u64;
    v ^= v >> 20;
    v ^= v >> 40;
    let label = (v & 0xf_ffff) as u32;
    let low = (label & 0x3fff) ^ ((label & 0xf_c000) >> 14);
    (low | 0xc000) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_and_sqd_has_two_codes() {
        for v in 0..16u8 {
            let s = QpState::from_raw(v);
            if v == 5 {
                assert_eq!(s, QpState::SqDrained);
            } else {
                assert_eq!(s.raw(), v);
            }
        }
        assert!(QpState::Rts.can_post_send() && QpState::Error.can_post_send());
        assert!(!QpState::Reset.can_post_send() && !QpState::Rtr.can_post_send());
    }

    #[test]
    fn mtu_codes_and_ethernet_fit() {
        assert_eq!(Mtu::B1024 as u8, 3);
        assert_eq!(Mtu::B4096.bytes(), 4096);
        assert_eq!(Mtu::for_ethernet(1500), Some(Mtu::B1024));
        assert_eq!(Mtu::for_ethernet(9000), Some(Mtu::B4096));
        assert_eq!(Mtu::for_ethernet(4200), Some(Mtu::B4096));
        assert_eq!(Mtu::for_ethernet(4191), Some(Mtu::B2048));
        assert_eq!(Mtu::for_ethernet(300), None);
    }

    #[test]
    fn log2_ceil_is_fls_of_n_minus_1() {
        assert_eq!(
            [0u8, 1, 2, 3, 4, 5, 8, 9, 16, 255].map(log2_ceil),
            [0, 0, 1, 2, 2, 3, 3, 4, 4, 8]
        );
    }

    #[test]
    fn udp_sport_is_symmetric_and_in_the_roce_range() {
        for (a, b) in [(0x10u32, 0x11u32), (0x123, 0x456), (0xffffff, 1), (7, 7)] {
            let p = roce_udp_sport(a, b);
            assert_eq!(p, roce_udp_sport(b, a));
            assert!(p >= 0xc000);
        }
        // 0x10 · 0x11 = 0x110: no folding above bit 14.
        assert_eq!(roce_udp_sport(0x10, 0x11), 0xc110);
        // 0x4000 · 1: bit 14 folds into bit 0.
        assert_eq!(roce_udp_sport(0x4000, 1), 0xc001);
    }
}
