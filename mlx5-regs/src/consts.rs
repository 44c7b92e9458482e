//! Opcodes, status codes, event types, CQE opcodes and other firmware
//! constants, with names (docs/firmware.md §2.5, §2.6, §3, §6.3, §7.2). Queue-pair,
//! send-WQE, memory-key and port constants are in the `qp` submodule,
//! re-exported here ([`qp_state`], [`wqe`], [`mkey`], [`OptParam`], ...).

use crate::layout::Layout;
use crate::layouts as l;

mod qp;
pub use qp::*;

/// Linux errno values (x86/generic numbering) used to report failures the way
/// the Linux driver and libibverbs do.
pub mod errno {
    /// No such entry.
    pub const ENOENT: i32 = 2;
    /// I/O error.
    pub const EIO: i32 = 5;
    /// Try again.
    pub const EAGAIN: i32 = 11;
    /// Out of memory.
    pub const ENOMEM: i32 = 12;
    /// Bad address.
    pub const EFAULT: i32 = 14;
    /// Device or resource busy.
    pub const EBUSY: i32 = 16;
    /// Invalid argument.
    pub const EINVAL: i32 = 22;
    /// Function not implemented.
    pub const ENOSYS: i32 = 38;
    /// No message of desired type.
    pub const ENOMSG: i32 = 42;
    /// Invalid request descriptor.
    pub const EBADR: i32 = 53;
    /// Link has been severed.
    pub const ENOLINK: i32 = 67;
    /// Operation not supported.
    pub const EOPNOTSUPP: i32 = 95;
    /// Connection timed out.
    pub const ETIMEDOUT: i32 = 110;
    /// Remote I/O error.
    pub const EREMOTEIO: i32 = 121;
}

/// The printed name of an opcode: the constant's name, or the `mlx5_ifc.h`
/// name given with `as` where that is not a Rust identifier (`2ERR_QP`).
macro_rules! opcode_name {
    ($name:ident) => {
        stringify!($name)
    };
    ($name:ident $s:literal) => {
        $s
    };
}

macro_rules! opcodes {
    ($( $name:ident = $val:literal $(as $str:literal)? $(=> ($inl:ident, $outl:ident))? ),* $(,)?) => {
        /// A firmware command opcode (docs/firmware.md §3). Unknown values are allowed:
        /// a firmware engineer may send anything.
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct Opcode(pub u16);

        #[allow(missing_docs)]
        impl Opcode {
            $( pub const $name: Opcode = Opcode($val); )*

            /// Every opcode this crate knows, in table order.
            pub const ALL: &'static [Opcode] = &[$(Opcode::$name),*];

            /// The `mlx5_ifc.h` name (`CREATE_CQ`, `2ERR_QP`), if known.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $( $val => Some(opcode_name!($name $($str)?)), )*
                    _ => None,
                }
            }

            /// Look an opcode up by name; case and `-`/`_` are not significant
            /// (`create-cq`, `CREATE_CQ`).
            pub fn from_name(name: &str) -> Option<Opcode> {
                Self::ALL.iter().copied().find(|op| {
                    let n = op.name().unwrap_or("");
                    n.len() == name.len()
                        && n.bytes().zip(name.bytes()).all(|(a, b)| {
                            let b = if b == b'-' { b'_' } else { b.to_ascii_uppercase() };
                            a == b
                        })
                })
            }

            /// The input and output layouts of the command, if this crate
            /// describes them.
            pub fn layouts(self) -> Option<(&'static Layout, &'static Layout)> {
                match self.0 {
                    $( $( $val => Some((&l::$inl::LAYOUT, &l::$outl::LAYOUT)), )? )*
                    _ => None,
                }
            }
        }
    };
}

opcodes! {
    QUERY_HCA_CAP = 0x100 => (query_hca_cap_in, query_hca_cap_out),
    QUERY_ADAPTER = 0x101 => (query_adapter_in, query_adapter_out),
    INIT_HCA = 0x102 => (init_hca_in, init_hca_out),
    TEARDOWN_HCA = 0x103 => (teardown_hca_in, teardown_hca_out),
    ENABLE_HCA = 0x104 => (enable_hca_in, enable_hca_out),
    DISABLE_HCA = 0x105 => (disable_hca_in, disable_hca_out),
    QUERY_PAGES = 0x107 => (query_pages_in, query_pages_out),
    MANAGE_PAGES = 0x108 => (manage_pages_in, manage_pages_out),
    SET_HCA_CAP = 0x109 => (set_hca_cap_in, set_hca_cap_out),
    QUERY_ISSI = 0x10a => (query_issi_in, query_issi_out),
    SET_ISSI = 0x10b => (set_issi_in, set_issi_out),
    SET_DRIVER_VERSION = 0x10d => (set_driver_version_in, set_driver_version_out),
    CREATE_MKEY = 0x200 => (create_mkey_in, create_mkey_out),
    QUERY_MKEY = 0x201 => (query_mkey_in, query_mkey_out),
    DESTROY_MKEY = 0x202 => (destroy_mkey_in, destroy_mkey_out),
    QUERY_SPECIAL_CONTEXTS = 0x203 => (query_special_contexts_in, query_special_contexts_out),
    CREATE_EQ = 0x301 => (create_eq_in, create_eq_out),
    DESTROY_EQ = 0x302 => (destroy_eq_in, destroy_eq_out),
    QUERY_EQ = 0x303 => (query_eq_in, query_eq_out),
    GEN_EQE = 0x304 => (gen_eqe_in, gen_eqe_out),
    CREATE_CQ = 0x400 => (create_cq_in, create_cq_out),
    DESTROY_CQ = 0x401 => (destroy_cq_in, destroy_cq_out),
    QUERY_CQ = 0x402 => (query_cq_in, query_cq_out),
    MODIFY_CQ = 0x403 => (modify_cq_in, modify_cq_out),
    CREATE_QP = 0x500 => (create_qp_in, create_qp_out),
    DESTROY_QP = 0x501 => (destroy_qp_in, destroy_qp_out),
    RST2INIT_QP = 0x502 => (rst2init_qp_in, rst2init_qp_out),
    INIT2RTR_QP = 0x503 => (init2rtr_qp_in, init2rtr_qp_out),
    RTR2RTS_QP = 0x504 => (rtr2rts_qp_in, rtr2rts_qp_out),
    RTS2RTS_QP = 0x505 => (rts2rts_qp_in, rts2rts_qp_out),
    SQERR2RTS_QP = 0x506 => (sqerr2rts_qp_in, sqerr2rts_qp_out),
    QP_2ERR = 0x507 as "2ERR_QP" => (qp_2err_in, qp_2err_out),
    QP_2RST = 0x50a as "2RST_QP" => (qp_2rst_in, qp_2rst_out),
    QUERY_QP = 0x50b => (query_qp_in, query_qp_out),
    SQD_RTS_QP = 0x50c,
    MAD_IFC = 0x50d,
    INIT2INIT_QP = 0x50e => (init2init_qp_in, init2init_qp_out),
    CREATE_SRQ = 0x700 => (create_srq_in, create_srq_out),
    DESTROY_SRQ = 0x701 => (destroy_srq_in, destroy_srq_out),
    QUERY_SRQ = 0x702 => (query_srq_in, query_srq_out),
    ARM_RQ = 0x703 => (arm_rq_in, arm_rq_out),
    QUERY_VPORT_STATE = 0x750 => (query_vport_state_in, query_vport_state_out),
    MODIFY_VPORT_STATE = 0x751,
    QUERY_NIC_VPORT_CONTEXT = 0x754 => (query_nic_vport_context_in, query_nic_vport_context_out),
    MODIFY_NIC_VPORT_CONTEXT = 0x755 => (modify_nic_vport_context_in, modify_nic_vport_context_out),
    QUERY_ROCE_ADDRESS = 0x760 => (query_roce_address_in, query_roce_address_out),
    SET_ROCE_ADDRESS = 0x761 => (set_roce_address_in, set_roce_address_out),
    QUERY_HCA_VPORT_CONTEXT = 0x762 => (query_hca_vport_context_in, query_hca_vport_context_out),
    MODIFY_HCA_VPORT_CONTEXT = 0x763,
    QUERY_HCA_VPORT_GID = 0x764,
    QUERY_HCA_VPORT_PKEY = 0x765 => (query_hca_vport_pkey_in, query_hca_vport_pkey_out),
    ALLOC_PD = 0x800 => (alloc_pd_in, alloc_pd_out),
    DEALLOC_PD = 0x801 => (dealloc_pd_in, dealloc_pd_out),
    ALLOC_UAR = 0x802 => (alloc_uar_in, alloc_uar_out),
    DEALLOC_UAR = 0x803 => (dealloc_uar_in, dealloc_uar_out),
    CONFIG_INT_MODERATION = 0x804,
    ACCESS_REG = 0x805 => (access_register_in, access_register_out),
    NOP = 0x80d => (nop_in, nop_out),
    ALLOC_XRCD = 0x80e => (alloc_xrcd_in, alloc_xrcd_out),
    DEALLOC_XRCD = 0x80f => (dealloc_xrcd_in, dealloc_xrcd_out),
    ALLOC_TRANSPORT_DOMAIN = 0x816,
    DEALLOC_TRANSPORT_DOMAIN = 0x817,
    CREATE_RMP = 0x90c => (create_rmp_in, create_rmp_out),
    MODIFY_RMP = 0x90d => (modify_rmp_in, modify_rmp_out),
    DESTROY_RMP = 0x90e => (destroy_rmp_in, destroy_rmp_out),
    QUERY_RMP = 0x90f => (query_rmp_in, query_rmp_out),
    CREATE_UMEM = 0xa08 => (create_umem_in, create_umem_out),
    DESTROY_UMEM = 0xa0a => (destroy_umem_in, destroy_umem_out),
}

impl core::fmt::Debug for Opcode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n}({:#x})", self.0),
            None => write!(f, "UNKNOWN({:#x})", self.0),
        }
    }
}

impl core::fmt::Display for Opcode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "opcode {:#x}", self.0),
        }
    }
}

/// Command status in byte 0 of a command's output (docs/firmware.md §2.6).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmdStatus(pub u8);

#[allow(missing_docs)]
impl CmdStatus {
    pub const OK: CmdStatus = CmdStatus(0x00);
    pub const INT_ERR: CmdStatus = CmdStatus(0x01);
    pub const BAD_OP_ERR: CmdStatus = CmdStatus(0x02);
    pub const BAD_PARAM_ERR: CmdStatus = CmdStatus(0x03);
    pub const BAD_SYS_STATE_ERR: CmdStatus = CmdStatus(0x04);
    pub const BAD_RES_ERR: CmdStatus = CmdStatus(0x05);
    pub const RES_BUSY: CmdStatus = CmdStatus(0x06);
    pub const NOT_READY: CmdStatus = CmdStatus(0x07);
    pub const LIM_ERR: CmdStatus = CmdStatus(0x08);
    pub const BAD_RES_STATE_ERR: CmdStatus = CmdStatus(0x09);
    pub const IX_ERR: CmdStatus = CmdStatus(0x0a);
    pub const NO_RES_ERR: CmdStatus = CmdStatus(0x0f);
    pub const BAD_QP_STATE_ERR: CmdStatus = CmdStatus(0x10);
    pub const BAD_PKT_ERR: CmdStatus = CmdStatus(0x30);
    pub const BAD_SIZE_OUTS_CQES_ERR: CmdStatus = CmdStatus(0x40);
    pub const BAD_INP_LEN_ERR: CmdStatus = CmdStatus(0x50);
    pub const BAD_OUTP_LEN_ERR: CmdStatus = CmdStatus(0x51);

    const TABLE: &'static [(u8, &'static str, &'static str, i32)] = &[
        (0x00, "OK", "OK", 0),
        (0x01, "INT_ERR", "internal error", errno::EIO),
        (0x02, "BAD_OP_ERR", "bad operation", errno::EINVAL),
        (0x03, "BAD_PARAM_ERR", "bad parameter", errno::EINVAL),
        (0x04, "BAD_SYS_STATE_ERR", "bad system state", errno::EIO),
        (0x05, "BAD_RES_ERR", "bad resource", errno::EINVAL),
        (0x06, "RES_BUSY", "resource busy", errno::EBUSY),
        (0x07, "NOT_READY", "FW not ready", errno::EAGAIN),
        (0x08, "LIM_ERR", "limits exceeded", errno::ENOMEM),
        (
            0x09,
            "BAD_RES_STATE_ERR",
            "bad resource state",
            errno::EINVAL,
        ),
        (0x0a, "IX_ERR", "bad index", errno::EINVAL),
        (0x0f, "NO_RES_ERR", "no resources", errno::EAGAIN),
        (0x10, "BAD_QP_STATE_ERR", "bad QP state", errno::EINVAL),
        (0x30, "BAD_PKT_ERR", "bad packet (discarded)", errno::EINVAL),
        (
            0x40,
            "BAD_SIZE_OUTS_CQES_ERR",
            "bad size, too many outstanding CQEs",
            errno::EINVAL,
        ),
        (0x50, "BAD_INP_LEN_ERR", "bad input length", errno::EIO),
        (0x51, "BAD_OUTP_LEN_ERR", "bad output length", errno::EIO),
    ];

    fn entry(self) -> Option<&'static (u8, &'static str, &'static str, i32)> {
        Self::TABLE.iter().find(|e| e.0 == self.0)
    }

    /// Every status this crate names.
    pub fn all() -> impl Iterator<Item = CmdStatus> {
        Self::TABLE.iter().map(|e| CmdStatus(e.0))
    }

    /// `MLX5_CMD_STAT_*` name without the prefix, if known.
    pub fn name(self) -> Option<&'static str> {
        self.entry().map(|e| e.1)
    }

    /// Look a status up by its name (`BAD_PARAM_ERR`, case-insensitive).
    pub fn from_name(name: &str) -> Option<CmdStatus> {
        Self::TABLE
            .iter()
            .find(|e| e.1.eq_ignore_ascii_case(name))
            .map(|e| CmdStatus(e.0))
    }

    /// The Linux `cmd.c` text for the status.
    pub fn text(self) -> &'static str {
        self.entry().map_or("unknown status", |e| e.2)
    }

    /// The positive errno Linux (`cmd_status_to_err`) maps the status to;
    /// unknown statuses map to `EIO`.
    pub fn errno(self) -> i32 {
        self.entry().map_or(errno::EIO, |e| e.3)
    }
}

impl core::fmt::Debug for CmdStatus {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n}({:#x})", self.0),
            None => write!(f, "UNKNOWN_STATUS({:#x})", self.0),
        }
    }
}

impl core::fmt::Display for CmdStatus {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:?} ({})", self, self.text())
    }
}

/// Delivery status in the command queue entry (`status_own >> 1`, docs/firmware.md §2.5):
/// a transport failure, the command did not run.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeliveryStatus(pub u8);

#[allow(missing_docs)]
impl DeliveryStatus {
    pub const OK: DeliveryStatus = DeliveryStatus(0x0);
    pub const SIGNATURE_ERR: DeliveryStatus = DeliveryStatus(0x1);
    pub const TOKEN_ERR: DeliveryStatus = DeliveryStatus(0x2);
    pub const BAD_BLOCK_NUMBER: DeliveryStatus = DeliveryStatus(0x3);
    pub const OUTPUT_POINTER_NOT_ALIGNED: DeliveryStatus = DeliveryStatus(0x4);
    pub const INPUT_POINTER_NOT_ALIGNED: DeliveryStatus = DeliveryStatus(0x5);
    pub const FW_INTERNAL_ERR: DeliveryStatus = DeliveryStatus(0x6);
    pub const INPUT_LEN_ERR: DeliveryStatus = DeliveryStatus(0x7);
    pub const OUTPUT_LEN_ERR: DeliveryStatus = DeliveryStatus(0x8);
    pub const RESERVED_NOT_ZERO: DeliveryStatus = DeliveryStatus(0x9);
    pub const BAD_CMD_TYPE: DeliveryStatus = DeliveryStatus(0x10);

    const TABLE: &'static [(u8, &'static str, i32)] = &[
        (0x0, "OK", 0),
        (0x1, "SIGNATURE_ERR", errno::EBADR),
        (0x2, "TOKEN_ERR", errno::EBADR),
        (0x3, "BAD_BLOCK_NUMBER", errno::EFAULT),
        (0x4, "OUTPUT_POINTER_NOT_ALIGNED", errno::EFAULT),
        (0x5, "INPUT_POINTER_NOT_ALIGNED", errno::EFAULT),
        (0x6, "FW_INTERNAL_ERR", errno::EIO),
        (0x7, "INPUT_LEN_ERR", errno::ENOMSG),
        (0x8, "OUTPUT_LEN_ERR", errno::ENOMSG),
        (0x9, "RESERVED_NOT_ZERO", errno::ENOMSG),
        (0x10, "BAD_CMD_TYPE", errno::ENOMSG),
    ];

    /// Name, if known.
    pub fn name(self) -> Option<&'static str> {
        Self::TABLE.iter().find(|e| e.0 == self.0).map(|e| e.1)
    }

    /// The errno Linux (`deliv_status_to_err`) maps it to; unknown → `EINVAL`.
    pub fn errno(self) -> i32 {
        Self::TABLE
            .iter()
            .find(|e| e.0 == self.0)
            .map_or(errno::EINVAL, |e| e.2)
    }
}

impl core::fmt::Debug for DeliveryStatus {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n}({:#x})", self.0),
            None => write!(f, "UNKNOWN_DELIVERY({:#x})", self.0),
        }
    }
}

/// Event type in byte 1 of an EQE (docs/firmware.md §6.3).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct EventType(pub u8);

macro_rules! event_types {
    ($($name:ident = $v:literal),* $(,)?) => {
        #[allow(missing_docs)]
        impl EventType {
            $( pub const $name: EventType = EventType($v); )*
            /// `MLX5_EVENT_TYPE_*` name without the prefix, if known.
            pub fn name(self) -> Option<&'static str> {
                match self.0 { $( $v => Some(stringify!($name)), )* _ => None }
            }
        }
    };
}

event_types! {
    COMP = 0x00, PATH_MIG = 0x01, COMM_EST = 0x02, SQ_DRAINED = 0x03, CQ_ERROR = 0x04,
    WQ_CATAS_ERROR = 0x05, PATH_MIG_FAILED = 0x07, INTERNAL_ERROR = 0x08, PORT_CHANGE = 0x09,
    CMD = 0x0a, PAGE_REQUEST = 0x0b, PAGE_FAULT = 0x0c, NIC_VPORT_CHANGE = 0x0d,
    ESW_FUNCTIONS_CHANGED = 0x0e, VHCA_STATE_CHANGE = 0x0f, WQ_INVAL_REQ_ERROR = 0x10,
    WQ_ACCESS_ERROR = 0x11, SRQ_CATAS_ERROR = 0x12, SRQ_LAST_WQE = 0x13, SRQ_RQ_LIMIT = 0x14,
    GPIO_EVENT = 0x15, PORT_MODULE_EVENT = 0x16, TEMP_WARN_EVENT = 0x17, XRQ_ERROR = 0x18,
    REMOTE_CONFIG = 0x19, DB_BF_CONGESTION = 0x1a, STALL_EVENT = 0x1b, DCT_DRAINED = 0x1c,
    DCT_KEY_VIOLATION = 0x1d, DROPPED_PACKET_LOGGED = 0x1f, FPGA_ERROR = 0x20,
    FPGA_QP_ERROR = 0x21, GENERAL_EVENT = 0x22, MONITOR_COUNTER = 0x24, PPS_EVENT = 0x25,
    DEVICE_TRACER = 0x26, OBJECT_CHANGE = 0x27,
}

impl EventType {
    /// The bit selecting this type in word 0 of `create_eq_in.event_bitmask`
    /// (types 0..63).
    pub const fn mask_bit(self) -> u64 {
        1u64 << (self.0 & 63)
    }
}

impl core::fmt::Debug for EventType {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n}({:#x})", self.0),
            None => write!(f, "UNKNOWN_EVENT({:#x})", self.0),
        }
    }
}

bitflags::bitflags! {
    /// Word 0 of the `CREATE_EQ` event bitmask: which event types an EQ
    /// receives (docs/firmware.md §6.1, §6.3).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct EventMask: u64 {
        #[allow(missing_docs)] const PATH_MIG = 1 << 0x01;
        #[allow(missing_docs)] const COMM_EST = 1 << 0x02;
        #[allow(missing_docs)] const SQ_DRAINED = 1 << 0x03;
        #[allow(missing_docs)] const CQ_ERROR = 1 << 0x04;
        #[allow(missing_docs)] const WQ_CATAS_ERROR = 1 << 0x05;
        #[allow(missing_docs)] const PATH_MIG_FAILED = 1 << 0x07;
        #[allow(missing_docs)] const INTERNAL_ERROR = 1 << 0x08;
        #[allow(missing_docs)] const PORT_CHANGE = 1 << 0x09;
        #[allow(missing_docs)] const CMD = 1 << 0x0a;
        #[allow(missing_docs)] const PAGE_REQUEST = 1 << 0x0b;
        #[allow(missing_docs)] const WQ_INVAL_REQ_ERROR = 1 << 0x10;
        #[allow(missing_docs)] const WQ_ACCESS_ERROR = 1 << 0x11;
        #[allow(missing_docs)] const SRQ_CATAS_ERROR = 1 << 0x12;
        #[allow(missing_docs)] const SRQ_LAST_WQE = 1 << 0x13;
        #[allow(missing_docs)] const SRQ_RQ_LIMIT = 1 << 0x14;
    }
}

impl EventMask {
    /// Linux `MLX5_ASYNC_EVENT_MASK` without the capability-dependent bits
    /// (= 0x1f02be, docs/firmware.md §6.3).
    pub const LINUX_ASYNC: EventMask = EventMask::from_bits_truncate(0x1f_02be);
}

/// CQE opcodes (`op_own` bits 7:4, docs/firmware.md §7.2).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CqeOpcode(pub u8);

#[allow(missing_docs)]
impl CqeOpcode {
    pub const REQ: CqeOpcode = CqeOpcode(0);
    pub const RESP_WR_IMM: CqeOpcode = CqeOpcode(1);
    pub const RESP_SEND: CqeOpcode = CqeOpcode(2);
    pub const RESP_SEND_IMM: CqeOpcode = CqeOpcode(3);
    pub const RESP_SEND_INV: CqeOpcode = CqeOpcode(4);
    pub const RESIZE_CQ: CqeOpcode = CqeOpcode(5);
    pub const NO_PACKET: CqeOpcode = CqeOpcode(6);
    pub const SIG_ERR: CqeOpcode = CqeOpcode(12);
    pub const REQ_ERR: CqeOpcode = CqeOpcode(13);
    pub const RESP_ERR: CqeOpcode = CqeOpcode(14);
    pub const INVALID: CqeOpcode = CqeOpcode(15);

    /// Name, if known.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0 => "REQ",
            1 => "RESP_WR_IMM",
            2 => "RESP_SEND",
            3 => "RESP_SEND_IMM",
            4 => "RESP_SEND_INV",
            5 => "RESIZE_CQ",
            6 => "NO_PACKET",
            12 => "SIG_ERR",
            13 => "REQ_ERR",
            14 => "RESP_ERR",
            15 => "INVALID",
            _ => return None,
        })
    }
}

impl core::fmt::Debug for CqeOpcode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n}({})", self.0),
            None => write!(f, "UNKNOWN_CQE_OPCODE({})", self.0),
        }
    }
}

/// Error CQE syndromes (docs/firmware.md §7.2).
#[allow(missing_docs)]
pub mod cqe_syndrome {
    pub const LOCAL_LENGTH_ERR: u8 = 0x01;
    pub const LOCAL_QP_OP_ERR: u8 = 0x02;
    pub const LOCAL_PROT_ERR: u8 = 0x04;
    pub const WR_FLUSH_ERR: u8 = 0x05;
    pub const MW_BIND_ERR: u8 = 0x06;
    pub const BAD_RESP_ERR: u8 = 0x10;
    pub const LOCAL_ACCESS_ERR: u8 = 0x11;
    pub const REMOTE_INVAL_REQ_ERR: u8 = 0x12;
    pub const REMOTE_ACCESS_ERR: u8 = 0x13;
    pub const REMOTE_OP_ERR: u8 = 0x14;
    pub const TRANSPORT_RETRY_EXC_ERR: u8 = 0x15;
    pub const RNR_RETRY_EXC_ERR: u8 = 0x16;
    pub const REMOTE_ABORTED_ERR: u8 = 0x22;
}

/// CQ error event syndromes (EQE type 0x04, docs/firmware.md §6.3).
#[allow(missing_docs)]
pub mod cq_error_syndrome {
    pub const CQ_OVERRUN: u8 = 1;
    pub const CQ_ACCESS_VIOLATION: u8 = 2;
}

/// `op_mod` values and other per-command selectors (docs/firmware.md §3).
#[allow(missing_docs)]
pub mod op_mod {
    /// QUERY_HCA_CAP: `op_mod = (cap_type << 1) | mode`.
    pub const HCA_CAP_MAX: u16 = 0;
    pub const HCA_CAP_CUR: u16 = 1;
    pub const CAP_GENERAL: u16 = 0;
    pub const CAP_ODP: u16 = 2;
    pub const CAP_ATOMIC: u16 = 3;
    pub const CAP_ROCE: u16 = 4;
    pub const CAP_GENERAL_2: u16 = 0x20;
    /// `op_mod` of QUERY_HCA_CAP for a capability type and mode.
    pub const fn query_hca_cap(cap_type: u16, current: bool) -> u16 {
        (cap_type << 1) | current as u16
    }
    /// `op_mod` of SET_HCA_CAP for a capability type.
    pub const fn set_hca_cap(cap_type: u16) -> u16 {
        cap_type << 1
    }
    pub const QUERY_PAGES_BOOT: u16 = 1;
    pub const QUERY_PAGES_INIT: u16 = 2;
    pub const QUERY_PAGES_REGULAR: u16 = 3;
    pub const MANAGE_PAGES_ALLOC_FAIL: u16 = 0;
    pub const MANAGE_PAGES_GIVE: u16 = 1;
    pub const MANAGE_PAGES_TAKE: u16 = 2;
    pub const MODIFY_CQ_MODERATION: u16 = 0;
    pub const MODIFY_CQ_RESIZE: u16 = 1;
    pub const ARM_RQ_SRQ: u16 = 1;
    pub const ARM_RQ_XRQ: u16 = 2;
    pub const ACCESS_REG_WRITE: u16 = 0;
    pub const ACCESS_REG_READ: u16 = 1;
    /// TEARDOWN_HCA `profile` field values.
    pub const TEARDOWN_GRACEFUL: u16 = 0;
    pub const TEARDOWN_FORCE_CLOSE: u16 = 1;
    pub const TEARDOWN_PREPARE_FAST: u16 = 2;
}

/// Register ids for ACCESS_REG (docs/firmware.md §3).
pub mod reg_id {
    /// HOST_ENDIANNESS register.
    pub const HOST_ENDIANNESS: u16 = 0x7004;
    /// Default timeouts register.
    pub const DTOR: u16 = 0xc00e;
    /// Port MTU register (`MLX5_REG_PMTU`).
    pub const PMTU: u16 = 0x5003;
    /// Port type and speed register (`MLX5_REG_PTYS`).
    pub const PTYS: u16 = 0x5004;
}

bitflags::bitflags! {
    /// MODIFY_CQ op_mod 0 `modify_field_select` (K:cq.h).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct ModifyCqFields: u32 {
        #[allow(missing_docs)] const PERIOD = 1 << 0;
        #[allow(missing_docs)] const COUNT = 1 << 1;
        #[allow(missing_docs)] const OVERRUN = 1 << 2;
        #[allow(missing_docs)] const PERIOD_MODE = 1 << 4;
    }
}

bitflags::bitflags! {
    /// MODIFY_CQ op_mod 1 `resize_field_select` (docs/firmware.md §8).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct ResizeCqFields: u32 {
        #[allow(missing_docs)] const LOG_CQ_SIZE = 1 << 0;
        #[allow(missing_docs)] const PAGE_OFFSET = 1 << 1;
        #[allow(missing_docs)] const LOG_PAGE_SIZE = 1 << 2;
    }
}

/// Values of context fields (docs/firmware.md §6.1, §7.1, §9).
#[allow(missing_docs)]
pub mod ctx {
    /// `cqc.cqe_sz`.
    pub const CQE_SIZE_64: u8 = 0;
    pub const CQE_SIZE_128: u8 = 1;
    /// `cqc.st` / `eqc.st`.
    pub const ST_SOLICITED_ARMED: u8 = 0x6;
    pub const ST_ARMED: u8 = 0x9;
    pub const ST_FIRED: u8 = 0xa;
    pub const ST_ALWAYS_ARMED: u8 = 0xb;
    /// `cqc.status`.
    pub const CQ_STATUS_OK: u8 = 0;
    pub const CQ_STATUS_OVERFLOW: u8 = 0x9;
    pub const CQ_STATUS_WRITE_FAIL: u8 = 0xa;
    /// `rmpc.state`.
    pub const RMP_STATE_RDY: u8 = 1;
    pub const RMP_STATE_ERR: u8 = 3;
    /// `srqc.state`.
    pub const SRQ_STATE_GOOD: u8 = 0;
    pub const SRQ_STATE_ERROR: u8 = 1;
    /// Command queue entry `type`: PCIe command-interface transport.
    pub const CMD_TRANSPORT_PCIE: u8 = 7;
    /// Command interface revision the driver speaks (`cmdif_rev`).
    pub const CMD_IF_REV: u16 = 5;
    /// Initial owner value of every EQE (`MLX5_EQE_OWNER_INIT_VAL`).
    pub const EQE_OWNER_INIT: u8 = 1;
    /// Initial `op_own` of every CQE: opcode INVALID, owner 0.
    pub const CQE_OP_OWN_INIT: u8 = 0xf0;
    /// Spare EQEs: the consumer index must be reported at least this often.
    pub const NUM_SPARE_EQE: u32 = 0x80;
    /// Invalid lkey terminating a short scatter list (`MLX5_INVALID_LKEY`).
    pub const INVALID_LKEY: u32 = 0x100;
    /// `nic_interface` values.
    pub const NIC_IFC_FULL_DRIVER: u8 = 0;
    pub const NIC_IFC_DISABLED: u8 = 1;
    pub const NIC_IFC_NO_DRAM_NIC: u8 = 2;
    pub const NIC_IFC_SW_RESET: u8 = 7;
    /// `qp_events.type` (`MLX5_EVENT_QUEUE_TYPE_*`).
    pub const EVENT_QUEUE_TYPE_QP: u8 = 0;
    pub const EVENT_QUEUE_TYPE_RQ: u8 = 1;
    pub const EVENT_QUEUE_TYPE_SQ: u8 = 2;
    pub const EVENT_QUEUE_TYPE_DCT: u8 = 6;
}

/// Health syndromes (`health_buffer.synd`, docs/firmware.md §1.3).
pub fn health_syndrome_name(synd: u8) -> Option<&'static str> {
    Some(match synd {
        0x01 => "FW_INTERNAL_ERR",
        0x07 => "DEAD_IRISC",
        0x08 => "HW_FATAL_ERR",
        0x09 => "FW_CRC_ERR",
        0x0a => "ICM_FETCH_PCI_ERR",
        0x0b => "ICM_PAGE_ERR",
        0x0c => "ASYNCHRONOUS_EQ_BUF_OVERRUN",
        0x0d => "EQ_IN_ERR",
        0x0e => "EQ_INV",
        0x0f => "FFSER_ERR",
        0x10 => "HIGH_TEMP_ERR",
        0x12 => "ICM_PCI_POISONED_ERR",
        0x13 => "TRUST_LOCKDOWN_ERR",
        _ => return None,
    })
}
