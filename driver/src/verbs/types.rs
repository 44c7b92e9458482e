//! The verbs-level value types: handles, attributes, work completions,
//! async events.

use mlx5_regs::consts::cqe_syndrome as syn;

use super::table::Key;
use super::QpHandle;

/// A CQ of a [`super::Verbs`] context. A handle to a destroyed CQ is stale:
/// every call with it fails with `EINVAL`, even after the slot is reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CqHandle(pub(crate) Key);

/// An SRQ of a [`super::Verbs`] context (stale handles: `EINVAL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SrqHandle(pub(crate) Key);

/// `ibv_device_attr` fields this driver can state (docs/firmware.md §7.2, §9.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Largest CQ: `2^log_max_cq_sz − 1`.
    pub max_cqe: u32,
    /// Number of CQs: `2^log_max_cq`.
    pub max_cq: u32,
    /// Number of SRQs: `2^log_max_srq`.
    pub max_srq: u32,
    /// Largest SRQ: `2^log_max_srq_sz − 1` work requests.
    pub max_srq_wr: u32,
    /// Scatter entries per SRQ work request: `max_wqe_sz_rq / 16 − 1`.
    pub max_srq_sge: u32,
    /// `IBV_DEVICE_*` capability flags ([`DeviceAttr::SRQ_RESIZE`] is
    /// never set: mlx5 cannot resize an SRQ).
    pub device_cap_flags: u32,
    /// Physical ports.
    pub phys_port_cnt: u8,
    /// Firmware version `major.minor.subminor` packed as in `fw_ver`.
    pub fw_ver: (u16, u16, u16),
    /// Number of QPs: `2^log_max_qp`.
    pub max_qp: u32,
    /// Largest send ring in basic blocks: `2^log_max_qp_sz` (Linux's
    /// `max_qp_wr`; a work request takes one or more blocks).
    pub max_qp_wr: u32,
    /// Gather entries per send work request that `create_qp` accepts: what
    /// a WQE of `max_wqe_sz_sq` bytes (at most 63 units) holds after the
    /// control and remote-address segments.
    pub max_send_sge: u32,
    /// RDMA reads / atomics a QP accepts at once: `2^log_max_ra_res_qp`.
    pub max_qp_rd_atom: u32,
    /// RDMA reads / atomics a QP issues at once: `2^log_max_ra_req_qp`.
    pub max_qp_init_rd_atom: u32,
    /// RDMA reads / atomics the device accepts at once over all QPs:
    /// `max_qp_rd_atom · max_qp` (Linux `mlx5_ib_query_device`).
    pub max_res_rd_atom: u64,
    /// Atomic support (Linux `get_atomic_caps`): [`AtomicCap::Hca`] when
    /// the atomic page has 8-byte CMP_SWAP and FETCH_ADD on QPs and bring-up
    /// could set host endianness, else [`AtomicCap::None`].
    pub atomic_cap: AtomicCap,
    /// Completion vectors ([`crate::Hca::num_comp_vectors`]): a CQ's
    /// `comp_vector` must be below it.
    pub num_comp_vectors: u32,
}

/// `ibv_atomic_cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum AtomicCap {
    /// `IBV_ATOMIC_NONE`: atomics are not supported.
    None = 0,
    /// `IBV_ATOMIC_HCA`: atomic against other atomics of this device.
    Hca = 1,
    /// `IBV_ATOMIC_GLOB`: atomic against the CPU too (never reported by
    /// mlx5).
    Glob = 2,
}

impl DeviceAttr {
    /// `IBV_DEVICE_PORT_ACTIVE_EVENT`: port active events are reported.
    pub const PORT_ACTIVE_EVENT: u32 = 1 << 10;
    /// `IBV_DEVICE_SRQ_RESIZE` (always clear here).
    pub const SRQ_RESIZE: u32 = 1 << 13;
}

/// `ibv_srq_init_attr` (+ the CQ of `ibv_srq_init_attr_ex`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SrqInitAttr {
    /// Work requests the SRQ must hold (1..=`max_srq_wr`).
    pub max_wr: u32,
    /// Scatter entries per work request (0..=`max_srq_sge`).
    pub max_sge: u32,
    /// Ignored at creation, as `ibv_create_srq` documents: the limit is
    /// armed only by [`super::Verbs::modify_srq`].
    pub srq_limit: u32,
    /// The CQ the SRQ is associated with (`IBV_SRQ_INIT_ATTR_CQ`). The CQ
    /// then counts the SRQ as a user and cannot be destroyed before it. At
    /// ISSI 0 it is the CQ named in the SRQ context; without one the
    /// context names an internal CQ (Linux's `devr->c0`).
    pub cq: Option<CqHandle>,
}

/// `ibv_srq_attr`: what an SRQ reports, what `modify_srq` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SrqAttr {
    /// Usable work requests after rounding (`2^k − 1`).
    pub max_wr: u32,
    /// Scatter entries per work request after rounding the WQE stride.
    pub max_sge: u32,
    /// The armed limit; 0 when disarmed or after the limit event.
    pub srq_limit: u32,
}

/// `ibv_srq_attr_mask` bits for [`super::Verbs::modify_srq`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SrqAttrMask(pub u32);

impl SrqAttrMask {
    /// `IBV_SRQ_MAX_WR`: resize (refused on mlx5 with `EINVAL`).
    pub const MAX_WR: SrqAttrMask = SrqAttrMask(1 << 0);
    /// `IBV_SRQ_LIMIT`: arm the limit event.
    pub const LIMIT: SrqAttrMask = SrqAttrMask(1 << 1);

    /// True when every bit of `other` is set.
    pub fn contains(self, other: SrqAttrMask) -> bool {
        self.0 & other.0 == other.0
    }
}

impl core::ops::BitOr for SrqAttrMask {
    type Output = SrqAttrMask;
    fn bitor(self, rhs: SrqAttrMask) -> SrqAttrMask {
        SrqAttrMask(self.0 | rhs.0)
    }
}

/// `ibv_wc_status` (the mapping of libmlx5's `mlx5_handle_error_cqe`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WcStatus {
    /// `IBV_WC_SUCCESS`.
    Success,
    /// `IBV_WC_LOC_LEN_ERR` (syndrome 0x01).
    LocLenErr,
    /// `IBV_WC_LOC_QP_OP_ERR` (0x02).
    LocQpOpErr,
    /// `IBV_WC_LOC_PROT_ERR` (0x04).
    LocProtErr,
    /// `IBV_WC_WR_FLUSH_ERR` (0x05).
    WrFlushErr,
    /// `IBV_WC_MW_BIND_ERR` (0x06).
    MwBindErr,
    /// `IBV_WC_BAD_RESP_ERR` (0x10).
    BadRespErr,
    /// `IBV_WC_LOC_ACCESS_ERR` (0x11).
    LocAccessErr,
    /// `IBV_WC_REM_INV_REQ_ERR` (0x12).
    RemInvReqErr,
    /// `IBV_WC_REM_ACCESS_ERR` (0x13).
    RemAccessErr,
    /// `IBV_WC_REM_OP_ERR` (0x14).
    RemOpErr,
    /// `IBV_WC_RETRY_EXC_ERR` (0x15).
    RetryExcErr,
    /// `IBV_WC_RNR_RETRY_EXC_ERR` (0x16).
    RnrRetryExcErr,
    /// `IBV_WC_REM_ABORT_ERR` (0x22).
    RemAbortErr,
    /// `IBV_WC_GENERAL_ERR`: any other syndrome, and a CQE the facade could
    /// not match (see [`WorkCompletion::VENDOR_ERR_UNMATCHED`]).
    GeneralErr,
}

impl WcStatus {
    /// The status of an error CQE with `syndrome`.
    pub fn from_syndrome(syndrome: u8) -> WcStatus {
        match syndrome {
            syn::LOCAL_LENGTH_ERR => WcStatus::LocLenErr,
            syn::LOCAL_QP_OP_ERR => WcStatus::LocQpOpErr,
            syn::LOCAL_PROT_ERR => WcStatus::LocProtErr,
            syn::WR_FLUSH_ERR => WcStatus::WrFlushErr,
            syn::MW_BIND_ERR => WcStatus::MwBindErr,
            syn::BAD_RESP_ERR => WcStatus::BadRespErr,
            syn::LOCAL_ACCESS_ERR => WcStatus::LocAccessErr,
            syn::REMOTE_INVAL_REQ_ERR => WcStatus::RemInvReqErr,
            syn::REMOTE_ACCESS_ERR => WcStatus::RemAccessErr,
            syn::REMOTE_OP_ERR => WcStatus::RemOpErr,
            syn::TRANSPORT_RETRY_EXC_ERR => WcStatus::RetryExcErr,
            syn::RNR_RETRY_EXC_ERR => WcStatus::RnrRetryExcErr,
            syn::REMOTE_ABORTED_ERR => WcStatus::RemAbortErr,
            _ => WcStatus::GeneralErr,
        }
    }
}

/// `ibv_wc_opcode` for the completions this driver produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WcOpcode {
    /// `IBV_WC_SEND`: a SEND or SEND with immediate completed.
    Send,
    /// `IBV_WC_RDMA_WRITE`: an RDMA WRITE (with or without immediate)
    /// completed.
    RdmaWrite,
    /// `IBV_WC_RDMA_READ`: an RDMA READ completed (`byte_len` = the bytes
    /// read).
    RdmaRead,
    /// `IBV_WC_COMP_SWAP`: an atomic compare and swap completed (the
    /// original value is in its local buffer).
    CompSwap,
    /// `IBV_WC_FETCH_ADD`: an atomic fetch and add completed (the original
    /// value is in its local buffer).
    FetchAdd,
    /// `IBV_WC_RECV`: a receive (send, send with immediate, send with
    /// invalidate).
    Recv,
    /// `IBV_WC_RECV_RDMA_WITH_IMM`.
    RecvRdmaWithImm,
}

/// `ibv_wc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The `wr_id` of the work request: a receive's from the SRQ slot the
    /// CQE names, a send's from the QP's send table.
    pub wr_id: u64,
    /// Success or the error.
    pub status: WcStatus,
    /// What completed.
    pub opcode: WcOpcode,
    /// Vendor syndrome of an error CQE, or
    /// [`WorkCompletion::VENDOR_ERR_UNMATCHED`].
    pub vendor_err: u32,
    /// Bytes received (a send completion: what its CQE holds, defined by
    /// hardware only for RDMA READ).
    pub byte_len: u32,
    /// Immediate data (`IBV_WC_WITH_IMM`), as the CQE holds it.
    pub imm_data: Option<u32>,
    /// Invalidated rkey (`IBV_WC_WITH_INV`).
    pub invalidated_rkey: Option<u32>,
    /// Local QP number.
    pub qp_num: u32,
    /// SRQ number of a receive completion.
    pub srq_num: Option<u32>,
    /// A receive's sender QP number (`flags_rqpn` bits 23:0; meaningful
    /// for UD).
    pub src_qp: u32,
    /// A receive's source LID (InfiniBand; 0 on RoCE).
    pub slid: u16,
    /// A receive's service level (`flags_rqpn` bits 27:24, as rdma-core
    /// reads them).
    pub sl: u8,
    /// A receive's P_Key index (the CQE's `imm_inval_pkey` low 16 bits
    /// when it carries no immediate or rkey; rdma-core's field).
    pub pkey_index: u16,
    /// `wc_flags`: [`super::WC_GRH`] (a UD receive whose buffer starts
    /// with the packet's GRH), [`super::WC_WITH_IMM`],
    /// [`super::WC_WITH_INV`].
    pub wc_flags: u32,
}

impl WorkCompletion {
    /// `vendor_err` of a CQE the facade could not match to a posted work
    /// request (unknown SRQ number, WQE never posted, unexpected opcode): the
    /// device is not trusted, so such a CQE becomes a `GeneralErr`
    /// completion and is counted in [`super::VerbsStats::unmatched_cqes`].
    /// Outside the 8-bit range of firmware vendor syndromes.
    pub const VENDOR_ERR_UNMATCHED: u32 = 0x1_0000;

    /// A blank completion to initialise the caller's array.
    pub const EMPTY: WorkCompletion = WorkCompletion {
        wr_id: 0,
        status: WcStatus::Success,
        opcode: WcOpcode::Send,
        vendor_err: 0,
        byte_len: 0,
        imm_data: None,
        invalidated_rkey: None,
        qp_num: 0,
        srq_num: None,
        src_qp: 0,
        slid: 0,
        sl: 0,
        pkey_index: 0,
        wc_flags: 0,
    };
}

/// [`WorkCompletion::EMPTY`].
impl Default for WorkCompletion {
    fn default() -> Self {
        WorkCompletion::EMPTY
    }
}

/// `ibv_event_type` for the events this driver reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AsyncEventType {
    /// `IBV_EVENT_CQ_ERR` (CQ overrun or access violation).
    CqErr,
    /// `IBV_EVENT_SRQ_ERR`: the SRQ is in error; posts fail with `EIO`.
    SrqErr,
    /// `IBV_EVENT_SRQ_LIMIT_REACHED`: the limit fired (and is now 0).
    SrqLimitReached,
    /// `IBV_EVENT_QP_LAST_WQE_REACHED`: an SRQ-attached QP in error will
    /// take no more SRQ WQEs (element `Qp`).
    QpLastWqeReached,
    /// `IBV_EVENT_QP_FATAL`: work queue catastrophic error; the QP is in
    /// error.
    QpFatal,
    /// `IBV_EVENT_QP_REQ_ERR`: invalid request from the peer; the QP is in
    /// error.
    QpReqErr,
    /// `IBV_EVENT_QP_ACCESS_ERR`: remote access violation; the QP is in
    /// error.
    QpAccessErr,
    /// `IBV_EVENT_COMM_EST`: the first packet arrived in RTR.
    CommEst,
    /// `IBV_EVENT_SQ_DRAINED`.
    SqDrained,
    /// `IBV_EVENT_PATH_MIG`.
    PathMig,
    /// `IBV_EVENT_PATH_MIG_ERR`.
    PathMigErr,
    /// `IBV_EVENT_PORT_ACTIVE`.
    PortActive,
    /// `IBV_EVENT_PORT_ERR` (port down).
    PortErr,
    /// `IBV_EVENT_LID_CHANGE`.
    LidChange,
    /// `IBV_EVENT_PKEY_CHANGE`.
    PkeyChange,
    /// `IBV_EVENT_GID_CHANGE`.
    GidChange,
    /// `IBV_EVENT_CLIENT_REREGISTER`.
    ClientReregister,
    /// `IBV_EVENT_DEVICE_FATAL`: the device is dead; calls fail with `EIO`.
    DeviceFatal,
}

/// The object an async event is about (the union of `ibv_async_event`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventElement {
    /// A CQ of this context.
    Cq(CqHandle),
    /// An SRQ of this context.
    Srq(SrqHandle),
    /// A QP of this context.
    Qp(QpHandle),
    /// A port number.
    Port(u8),
    /// The device.
    Device,
}

/// `ibv_async_event`. Every event read with
/// [`super::Verbs::get_async_event`] must be acknowledged with
/// [`super::Verbs::ack_async_event`] before its CQ, SRQ or QP can be
/// destroyed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsyncEvent {
    /// What happened.
    pub event_type: AsyncEventType,
    /// To what.
    pub element: EventElement,
    /// What the device said beyond the type (libibverbs has no field for
    /// it; the mlx5 event carries it).
    pub detail: AsyncEventDetail,
}

/// The part of an async event `ibv_async_event` cannot carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum AsyncEventDetail {
    /// Nothing more.
    #[default]
    None,
    /// [`AsyncEventType::CqErr`]: overrun or access violation (the CQ
    /// error event's syndrome).
    CqError(crate::cq::CqErrorCause),
}
