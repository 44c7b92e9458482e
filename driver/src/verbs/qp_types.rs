//! The value types of the QP verbs: handle, capabilities, states, the
//! attributes of `modify_qp` and their mask, address vectors, send work
//! requests. Numeric values are libibverbs' (`infiniband/verbs.h`).

use core::fmt;

use super::table::Key;
use super::{CqHandle, Errno, Sge, SrqHandle};
pub use crate::qp::Mtu;

/// A QP of a [`super::Verbs`] context (stale handles: `EINVAL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpHandle(pub(crate) Key);

/// `ibv_qp_cap`: what a QP holds. Given to [`super::Verbs::create_qp`],
/// which returns the actual values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpCap {
    /// Outstanding send work requests (0: no send queue).
    pub max_send_wr: u32,
    /// Outstanding receive work requests of the QP's own receive queue
    /// (0: none; ignored with an SRQ, which receives instead).
    pub max_recv_wr: u32,
    /// Gather entries per send work request.
    pub max_send_sge: u32,
    /// Scatter entries per receive work request of the own receive queue
    /// (reported 0 without one).
    pub max_recv_sge: u32,
    /// Inline bytes per send work request.
    pub max_inline_data: u32,
}

/// `ibv_qp_init_attr` for an RC QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInitAttr {
    /// CQ of the send completions.
    pub send_cq: CqHandle,
    /// CQ of the receive completions (may be `send_cq`).
    pub recv_cq: CqHandle,
    /// The SRQ the QP receives into; `None`: the QP receives nothing
    /// (a message that needs a receive WQE is refused by the QP).
    pub srq: Option<SrqHandle>,
    /// Queue sizes.
    pub cap: QpCap,
    /// Every send work request is signaled (`sq_sig_all`).
    pub sq_sig_all: bool,
}

/// `ibv_qp_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum QpState {
    /// `IBV_QPS_RESET`.
    Reset = 0,
    /// `IBV_QPS_INIT`.
    Init = 1,
    /// `IBV_QPS_RTR`.
    Rtr = 2,
    /// `IBV_QPS_RTS`.
    Rts = 3,
    /// `IBV_QPS_SQD`.
    Sqd = 4,
    /// `IBV_QPS_SQE`.
    Sqe = 5,
    /// `IBV_QPS_ERR`.
    Err = 6,
}

impl QpState {
    /// The verbs state of a driver (firmware) state; a value firmware
    /// does not define reads as `Err`.
    pub fn from_driver(s: crate::qp::QpState) -> QpState {
        use crate::qp::QpState as D;
        match s {
            D::Reset => QpState::Reset,
            D::Init => QpState::Init,
            D::Rtr => QpState::Rtr,
            D::Rts => QpState::Rts,
            D::SqDrained => QpState::Sqd,
            D::SqError => QpState::Sqe,
            D::Error | D::Unknown(_) => QpState::Err,
        }
    }
}

macro_rules! bits {
    ($(#[$m:meta])* $name:ident { $($(#[$d:meta])* $c:ident = $v:expr,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
        pub struct $name(pub u32);

        impl $name {
            $($(#[$d])* pub const $c: $name = $name($v);)*

            /// True when every bit of `other` is set.
            pub const fn contains(self, other: $name) -> bool {
                self.0 & other.0 == other.0
            }

            /// True when any bit of `other` is set.
            pub const fn intersects(self, other: $name) -> bool {
                self.0 & other.0 != 0
            }
        }

        impl core::ops::BitOr for $name {
            type Output = $name;
            fn bitor(self, rhs: $name) -> $name {
                $name(self.0 | rhs.0)
            }
        }
    };
}

bits! {
    /// `ibv_access_flags` (of a QP or a memory region).
    AccessFlags {
        /// `IBV_ACCESS_LOCAL_WRITE`.
        LOCAL_WRITE = 1 << 0,
        /// `IBV_ACCESS_REMOTE_WRITE`.
        REMOTE_WRITE = 1 << 1,
        /// `IBV_ACCESS_REMOTE_READ`.
        REMOTE_READ = 1 << 2,
        /// `IBV_ACCESS_REMOTE_ATOMIC`.
        REMOTE_ATOMIC = 1 << 3,
        /// `IBV_ACCESS_MW_BIND`.
        MW_BIND = 1 << 4,
        /// `IBV_ACCESS_ZERO_BASED`.
        ZERO_BASED = 1 << 5,
        /// `IBV_ACCESS_ON_DEMAND`.
        ON_DEMAND = 1 << 6,
        /// `IBV_ACCESS_HUGETLB`.
        HUGETLB = 1 << 7,
        /// `IBV_ACCESS_RELAXED_ORDERING` (the first optional bit: ignored
        /// where unsupported, as libibverbs does).
        RELAXED_ORDERING = 1 << 20,
    }
}

impl AccessFlags {
    /// The optional range (`IBV_ACCESS_OPTIONAL_RANGE`, bits 20..=29).
    pub const OPTIONAL_RANGE: AccessFlags = AccessFlags(0x3ff0_0000);
    /// The flags a QP takes (`LOCAL_WRITE` through `MW_BIND`; only the
    /// remote rights reach firmware).
    pub(crate) const QP_FLAGS: AccessFlags = AccessFlags(0x1f);
}

bits! {
    /// `ibv_qp_attr_mask`: which fields of [`QpAttr`] a `modify_qp` sets.
    QpAttrMask {
        /// `IBV_QP_STATE`.
        STATE = 1 << 0,
        /// `IBV_QP_CUR_STATE`.
        CUR_STATE = 1 << 1,
        /// `IBV_QP_EN_SQD_ASYNC_NOTIFY`.
        EN_SQD_ASYNC_NOTIFY = 1 << 2,
        /// `IBV_QP_ACCESS_FLAGS`.
        ACCESS_FLAGS = 1 << 3,
        /// `IBV_QP_PKEY_INDEX`.
        PKEY_INDEX = 1 << 4,
        /// `IBV_QP_PORT`.
        PORT = 1 << 5,
        /// `IBV_QP_QKEY`.
        QKEY = 1 << 6,
        /// `IBV_QP_AV`.
        AV = 1 << 7,
        /// `IBV_QP_PATH_MTU`.
        PATH_MTU = 1 << 8,
        /// `IBV_QP_TIMEOUT`.
        TIMEOUT = 1 << 9,
        /// `IBV_QP_RETRY_CNT`.
        RETRY_CNT = 1 << 10,
        /// `IBV_QP_RNR_RETRY`.
        RNR_RETRY = 1 << 11,
        /// `IBV_QP_RQ_PSN`.
        RQ_PSN = 1 << 12,
        /// `IBV_QP_MAX_QP_RD_ATOMIC`.
        MAX_QP_RD_ATOMIC = 1 << 13,
        /// `IBV_QP_ALT_PATH`.
        ALT_PATH = 1 << 14,
        /// `IBV_QP_MIN_RNR_TIMER`.
        MIN_RNR_TIMER = 1 << 15,
        /// `IBV_QP_SQ_PSN`.
        SQ_PSN = 1 << 16,
        /// `IBV_QP_MAX_DEST_RD_ATOMIC`.
        MAX_DEST_RD_ATOMIC = 1 << 17,
        /// `IBV_QP_PATH_MIG_STATE`.
        PATH_MIG_STATE = 1 << 18,
        /// `IBV_QP_CAP`.
        CAP = 1 << 19,
        /// `IBV_QP_DEST_QPN`.
        DEST_QPN = 1 << 20,
    }
}

impl QpAttrMask {
    /// RESET→INIT of an RC QP: state, P_Key index, port, access flags
    /// (`ibv_modify_qp(3)`'s required attributes, as rdma-core's
    /// `rc_pingpong` passes them).
    pub const RC_INIT: QpAttrMask = QpAttrMask(
        QpAttrMask::STATE.0
            | QpAttrMask::PKEY_INDEX.0
            | QpAttrMask::PORT.0
            | QpAttrMask::ACCESS_FLAGS.0,
    );
    /// INIT→RTR of an RC QP: the path (address vector, MTU), the peer's QP
    /// number and first PSN, the responder depth and the RNR timer.
    pub const RC_RTR: QpAttrMask = QpAttrMask(
        QpAttrMask::STATE.0
            | QpAttrMask::AV.0
            | QpAttrMask::PATH_MTU.0
            | QpAttrMask::DEST_QPN.0
            | QpAttrMask::RQ_PSN.0
            | QpAttrMask::MAX_DEST_RD_ATOMIC.0
            | QpAttrMask::MIN_RNR_TIMER.0,
    );
    /// RTR→RTS of an RC QP: the ACK timeout, the retry counts, the own
    /// first PSN and the requester depth.
    pub const RC_RTS: QpAttrMask = QpAttrMask(
        QpAttrMask::STATE.0
            | QpAttrMask::TIMEOUT.0
            | QpAttrMask::RETRY_CNT.0
            | QpAttrMask::RNR_RETRY.0
            | QpAttrMask::SQ_PSN.0
            | QpAttrMask::MAX_QP_RD_ATOMIC.0,
    );
    /// RESET→INIT of a UD QP: state, P_Key index, port, Q_Key (ib core's
    /// `qp_state_table`, UD column; rdma-core's `ud_pingpong`).
    pub const UD_INIT: QpAttrMask = QpAttrMask(
        QpAttrMask::STATE.0 | QpAttrMask::PKEY_INDEX.0 | QpAttrMask::PORT.0 | QpAttrMask::QKEY.0,
    );
    /// INIT→RTR of a UD QP: the state alone.
    pub const UD_RTR: QpAttrMask = QpAttrMask::STATE;
    /// RTR→RTS of a UD QP: the state and the first send PSN.
    pub const UD_RTS: QpAttrMask = QpAttrMask(QpAttrMask::STATE.0 | QpAttrMask::SQ_PSN.0);
    /// The three transitions that make a UD QP ready, each with its mask.
    pub const UD_ACTIVATE: [(QpState, QpAttrMask); 3] = [
        (QpState::Init, QpAttrMask::UD_INIT),
        (QpState::Rtr, QpAttrMask::UD_RTR),
        (QpState::Rts, QpAttrMask::UD_RTS),
    ];
    /// The three transitions that connect an RC QP, each with its mask:
    /// one [`QpAttr`] holding every field, `qp_state` set per step.
    pub const RC_CONNECT: [(QpState, QpAttrMask); 3] = [
        (QpState::Init, QpAttrMask::RC_INIT),
        (QpState::Rtr, QpAttrMask::RC_RTR),
        (QpState::Rts, QpAttrMask::RC_RTS),
    ];
}

bits! {
    /// `ibv_send_flags`.
    SendFlags {
        /// `IBV_SEND_FENCE`: the device starts the request only after every
        /// earlier RDMA READ and atomic of the QP completed.
        FENCE = 1 << 0,
        /// `IBV_SEND_SIGNALED`: a completion on success too.
        SIGNALED = 1 << 1,
        /// `IBV_SEND_SOLICITED`: the responder's completion is solicited.
        SOLICITED = 1 << 2,
        /// `IBV_SEND_INLINE`: the bytes of [`SendWr::inline_data`] are
        /// copied into the work request.
        INLINE = 1 << 3,
        /// `IBV_SEND_IP_CSUM` (UD and raw packet QPs only; ignored on RC).
        IP_CSUM = 1 << 4,
    }
}

/// `ibv_global_route`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GlobalRoute {
    /// Destination GID.
    pub dgid: [u8; 16],
    /// Flow label (20 bits); 0 lets the RoCE v2 UDP source port be derived
    /// from both QP numbers, as Linux does.
    pub flow_label: u32,
    /// Source GID table index.
    pub sgid_index: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
}

/// `ibv_ah_attr`, plus two mlx5 extensions: the force-loopback bit and the
/// destination MAC of a RoCE peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AhAttr {
    /// The global route (RoCE: required; InfiniBand: with `is_global`).
    pub grh: GlobalRoute,
    /// Destination LID (InfiniBand).
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Source path bits (not used: 0).
    pub src_path_bits: u8,
    /// Static rate (not used: 0, the port's rate).
    pub static_rate: u8,
    /// `grh` is valid.
    pub is_global: bool,
    /// Port, 1-based.
    pub port_num: u8,
    /// Force loopback (`ads.fl`, an mlx5 extension): the peer is a QP of
    /// this function, no GID, MAC or LID; allowed when the device's
    /// loopback mode is force loopback ([`super::Verbs::loopback_ah`]).
    pub force_loopback: bool,
    /// The RoCE peer's MAC (an mlx5 extension: libibverbs resolves it
    /// through the kernel's neighbour table, which a driver without an IP
    /// stack does not have). Required for a RoCE destination GID that is
    /// not link-local; for a link-local GID, `None` derives it from the GID
    /// (Linux `rdma_get_ll_mac`). Ignored on InfiniBand.
    pub dmac: Option<[u8; 6]>,
}

/// `ibv_qp_attr`: the fields of an RC QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpAttr {
    /// Target state (`STATE`).
    pub qp_state: QpState,
    /// Assumed current state (`CUR_STATE`).
    pub cur_qp_state: QpState,
    /// Path MTU (`PATH_MTU`).
    pub path_mtu: Mtu,
    /// Remote access rights (`ACCESS_FLAGS`).
    pub qp_access_flags: AccessFlags,
    /// Partition key index (`PKEY_INDEX`).
    pub pkey_index: u16,
    /// Port (`PORT`).
    pub port_num: u8,
    /// The peer's address (`AV`).
    pub ah_attr: AhAttr,
    /// The peer's QP number (`DEST_QPN`, 24 bits).
    pub dest_qp_num: u32,
    /// First receive PSN (`RQ_PSN`, 24 bits).
    pub rq_psn: u32,
    /// First send PSN (`SQ_PSN`, 24 bits).
    pub sq_psn: u32,
    /// RDMA reads / atomics issued at once (`MAX_QP_RD_ATOMIC`).
    pub max_rd_atomic: u8,
    /// RDMA reads / atomics accepted at once (`MAX_DEST_RD_ATOMIC`).
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code, 0..=31 (`MIN_RNR_TIMER`).
    pub min_rnr_timer: u8,
    /// Ack timeout code, 0..=31 (`TIMEOUT`).
    pub timeout: u8,
    /// Transport retries, 0..=7 (`RETRY_CNT`).
    pub retry_cnt: u8,
    /// RNR retries, 0..=7, 7 = forever (`RNR_RETRY`).
    pub rnr_retry: u8,
    /// The QP's sizes (reported by `query_qp`; `CAP` is refused by
    /// `modify_qp` for RC, as ib core does).
    pub cap: QpCap,
    /// The Q_Key of a UD QP (`QKEY`): datagrams carrying another are
    /// dropped.
    pub qkey: u32,
}

impl Default for QpAttr {
    fn default() -> Self {
        QpAttr {
            qp_state: QpState::Reset,
            cur_qp_state: QpState::Reset,
            path_mtu: Mtu::B1024,
            qp_access_flags: AccessFlags(0),
            pkey_index: 0,
            port_num: 0,
            ah_attr: AhAttr::default(),
            dest_qp_num: 0,
            rq_psn: 0,
            sq_psn: 0,
            max_rd_atomic: 0,
            max_dest_rd_atomic: 0,
            min_rnr_timer: 0,
            timeout: 0,
            retry_cnt: 0,
            rnr_retry: 0,
            cap: QpCap::default(),
            qkey: 0,
        }
    }
}

/// `ibv_wr_opcode`: the operations this driver posts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum WrOpcode {
    /// `IBV_WR_RDMA_WRITE`.
    RdmaWrite = 0,
    /// `IBV_WR_RDMA_WRITE_WITH_IMM`.
    RdmaWriteWithImm = 1,
    /// `IBV_WR_SEND`.
    Send = 2,
    /// `IBV_WR_SEND_WITH_IMM`.
    SendWithImm = 3,
    /// `IBV_WR_RDMA_READ`: read `remote_addr` (through `rkey`) into the
    /// gather list, which the device writes.
    RdmaRead = 4,
    /// `IBV_WR_ATOMIC_CMP_AND_SWP`: at the 8-byte aligned `remote_addr`,
    /// store `swap` if the value equals `compare_add`; the original value
    /// lands in the one 8-byte gather entry.
    AtomicCmpAndSwp = 5,
    /// `IBV_WR_ATOMIC_FETCH_AND_ADD`: add `compare_add` to the 8-byte
    /// aligned `remote_addr` (wrapping); the original value lands in the
    /// one 8-byte gather entry.
    AtomicFetchAndAdd = 6,
}

/// `ibv_send_wr`. The list is a slice (no `next` pointer); `remote_addr`
/// and `rkey` (libibverbs' `wr.rdma` and `wr.atomic`) are used by the RDMA
/// and atomic opcodes only, `compare_add` and `swap` by the atomics,
/// `imm_data` by the `_WITH_IMM` ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub opcode: WrOpcode,
    /// `IBV_SEND_*` flags.
    pub send_flags: SendFlags,
    /// The gather list (device addresses and keys); not read with
    /// [`SendFlags::INLINE`].
    pub sg_list: &'a [Sge],
    /// The bytes of an inline send ([`SendFlags::INLINE`]): libibverbs
    /// copies them from the gather list's virtual addresses, which the
    /// device addresses here are not, so they are given as a slice.
    pub inline_data: &'a [u8],
    /// Immediate data, as the responder's completion reports it.
    pub imm_data: u32,
    /// Remote address of an RDMA write, READ or atomic.
    pub remote_addr: u64,
    /// Remote key of an RDMA write, READ or atomic.
    pub rkey: u32,
    /// `wr.atomic.compare_add`: the compare operand of CMP_AND_SWP, the
    /// addend of FETCH_AND_ADD.
    pub compare_add: u64,
    /// `wr.atomic.swap`: the value CMP_AND_SWP stores.
    pub swap: u64,
    /// `wr.ud.ah`: a UD send's destination ([`super::Verbs::create_ah`]);
    /// ignored by connected QPs.
    pub ah: Option<super::AhHandle>,
    /// `wr.ud.remote_qpn`: the destination QP of a UD send (24 bits).
    pub remote_qpn: u32,
    /// `wr.ud.remote_qkey`: the destination's Q_Key; with bit 31 set the
    /// QP's own Q_Key is sent instead (a controlled Q_Key).
    pub remote_qkey: u32,
}

impl SendWr<'static> {
    /// A signaled SEND of nothing, to fill in with `..SendWr::EMPTY`.
    pub const EMPTY: SendWr<'static> = SendWr {
        wr_id: 0,
        opcode: WrOpcode::Send,
        send_flags: SendFlags::SIGNALED,
        sg_list: &[],
        inline_data: &[],
        imm_data: 0,
        remote_addr: 0,
        rkey: 0,
        compare_add: 0,
        swap: 0,
        ah: None,
        remote_qpn: 0,
        remote_qkey: 0,
    };
}

/// A `post_send` that stopped: `index` is the first work request not
/// posted (libibverbs' `bad_wr`); the ones before it are posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostSendError {
    /// Index of the failed work request in the list.
    pub index: usize,
    /// `ENOMEM` (queue full, too many gather entries, inline data too
    /// large, QP not ready to send), `EINVAL` (stale handle).
    pub errno: Errno,
}

impl core::error::Error for PostSendError {}

impl fmt::Display for PostSendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "post_send: request {} failed: {}",
            self.index, self.errno
        )
    }
}
