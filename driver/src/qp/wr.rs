//! Send work requests, the caller's send table and the errors of posting
//! and completing (the types of the send path; the ring itself is
//! internal).

use mlx5_regs::consts::wqe;

use crate::srq::Sge;

/// Send WQE opcodes (`MLX5_OPCODE_*`, `include/linux/mlx5/device.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
#[non_exhaustive]
pub enum SendOpcode {
    /// RDMA WRITE (0x08).
    RdmaWrite = wqe::OPCODE_RDMA_WRITE,
    /// RDMA WRITE with immediate (0x09).
    RdmaWriteImm = wqe::OPCODE_RDMA_WRITE_IMM,
    /// SEND (0x0a).
    Send = wqe::OPCODE_SEND,
    /// SEND with immediate (0x0b).
    SendImm = wqe::OPCODE_SEND_IMM,
    /// RDMA READ (0x10).
    RdmaRead = wqe::OPCODE_RDMA_READ,
    /// Atomic compare and swap on 8 bytes (0x11).
    AtomicCmpSwap = wqe::OPCODE_ATOMIC_CS,
    /// Atomic fetch and add on 8 bytes (0x12).
    AtomicFetchAdd = wqe::OPCODE_ATOMIC_FA,
}

impl SendOpcode {
    /// Whether the WQE carries immediate data (SEND_IMM, RDMA_WRITE_IMM).
    #[inline(always)]
    pub const fn has_imm(self) -> bool {
        matches!(self, SendOpcode::SendImm | SendOpcode::RdmaWriteImm)
    }

    /// Whether the WQE is an RDMA write, which carries a remote-address
    /// segment (RDMA_WRITE, RDMA_WRITE_IMM).
    #[inline(always)]
    pub const fn is_rdma_write(self) -> bool {
        matches!(self, SendOpcode::RdmaWrite | SendOpcode::RdmaWriteImm)
    }

    /// Whether the WQE carries a remote-address segment (the RDMA writes,
    /// RDMA READ and the atomics; Linux `set_raddr_seg`).
    #[inline(always)]
    pub const fn has_raddr(self) -> bool {
        !matches!(self, SendOpcode::Send | SendOpcode::SendImm)
    }

    /// Whether the WQE is an atomic, which carries an atomic segment and
    /// one 8-byte local buffer (Linux `set_atomic_seg`).
    #[inline(always)]
    pub const fn is_atomic(self) -> bool {
        matches!(self, SendOpcode::AtomicCmpSwap | SendOpcode::AtomicFetchAdd)
    }

    /// Whether the responder answers with data (RDMA READ, the atomics):
    /// the local SGEs are written, not read.
    #[inline(always)]
    pub const fn reads_remote(self) -> bool {
        matches!(
            self,
            SendOpcode::RdmaRead | SendOpcode::AtomicCmpSwap | SendOpcode::AtomicFetchAdd
        )
    }

    /// The opcode a table slot recorded (anything else reads as SEND; the
    /// table is written by this driver only).
    fn from_raw(v: u8) -> SendOpcode {
        match v {
            wqe::OPCODE_RDMA_WRITE => SendOpcode::RdmaWrite,
            wqe::OPCODE_RDMA_WRITE_IMM => SendOpcode::RdmaWriteImm,
            wqe::OPCODE_SEND_IMM => SendOpcode::SendImm,
            wqe::OPCODE_RDMA_READ => SendOpcode::RdmaRead,
            wqe::OPCODE_ATOMIC_CS => SendOpcode::AtomicCmpSwap,
            wqe::OPCODE_ATOMIC_FA => SendOpcode::AtomicFetchAdd,
            _ => SendOpcode::Send,
        }
    }
}

/// What a send work request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendOp {
    /// SEND: consumes one receive WQE at the responder.
    Send,
    /// SEND with immediate data (the responder's CQE carries `imm`).
    SendImm {
        /// Immediate data (the value the responder's CQE reads back).
        imm: u32,
    },
    /// RDMA WRITE to `raddr` through `rkey`; consumes no receive WQE.
    RdmaWrite {
        /// Remote address.
        raddr: u64,
        /// Remote key (needs remote-write rights).
        rkey: u32,
    },
    /// RDMA WRITE with immediate: the data lands at `raddr` and one receive
    /// WQE is consumed for the immediate.
    RdmaWriteImm {
        /// Remote address.
        raddr: u64,
        /// Remote key (needs remote-write rights).
        rkey: u32,
        /// Immediate data.
        imm: u32,
    },
    /// RDMA READ of the payload's length from `raddr` into the payload's
    /// gather entries (which the device writes).
    RdmaRead {
        /// Remote address.
        raddr: u64,
        /// Remote key (needs remote-read rights).
        rkey: u32,
    },
    /// Atomic compare and swap of the 8 bytes at `raddr` (8-byte aligned):
    /// `swap` is stored when they equal `compare`; the original value
    /// lands in the payload's one 8-byte gather entry.
    AtomicCmpSwap {
        /// Remote address (8-byte aligned).
        raddr: u64,
        /// Remote key (needs remote-atomic rights).
        rkey: u32,
        /// Compared with the remote value.
        compare: u64,
        /// Stored when equal.
        swap: u64,
    },
    /// Atomic fetch and add of `add` to the 8 bytes at `raddr` (8-byte
    /// aligned, wrapping); the original value lands in the payload's one
    /// 8-byte gather entry.
    AtomicFetchAdd {
        /// Remote address (8-byte aligned).
        raddr: u64,
        /// Remote key (needs remote-atomic rights).
        rkey: u32,
        /// Added to the remote value.
        add: u64,
    },
}

impl SendOp {
    /// The WQE opcode.
    pub const fn opcode(&self) -> SendOpcode {
        match self {
            SendOp::Send => SendOpcode::Send,
            SendOp::SendImm { .. } => SendOpcode::SendImm,
            SendOp::RdmaWrite { .. } => SendOpcode::RdmaWrite,
            SendOp::RdmaWriteImm { .. } => SendOpcode::RdmaWriteImm,
            SendOp::RdmaRead { .. } => SendOpcode::RdmaRead,
            SendOp::AtomicCmpSwap { .. } => SendOpcode::AtomicCmpSwap,
            SendOp::AtomicFetchAdd { .. } => SendOpcode::AtomicFetchAdd,
        }
    }
}

/// Where the bytes of a send come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload<'a> {
    /// A gather list: the device reads the buffers through their keys.
    /// Zero-length entries are skipped (not written), as Linux and
    /// rdma-core do; they still count against the SGE limit.
    Sges(&'a [Sge]),
    /// Inline data: copied into the WQE now, so the buffer can be reused
    /// as soon as the post returns; no key is involved.
    Inline(&'a [u8]),
}

/// One send work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendRequest<'a> {
    /// Returned with the completion.
    pub wr_id: u64,
    /// The operation.
    pub op: SendOp,
    /// The data.
    pub payload: Payload<'a>,
    /// Ask for a completion on success (`IBV_SEND_SIGNALED`). Errors always
    /// complete.
    pub signaled: bool,
    /// Set the solicited-event bit (`IBV_SEND_SOLICITED`).
    pub solicited: bool,
}

/// What the send ring reads of a work request while it writes the WQE.
///
/// The ring (its `write`, under [`super::Qp::post_send_iter`]) is
/// written against this trait, so a request of another shape (the verbs
/// facade's `SendWr`) goes into the WQE as it is, with one opcode dispatch
/// and no conversion into a [`SendRequest`] first.
///
/// The WQE's layout follows [`SendWork::opcode`] alone: the ring reads
/// [`SendWork::imm`] only for the opcodes with immediate data,
/// [`SendWork::remote`] only for the opcodes with a remote-address segment
/// (RDMA writes, READ, atomics) and [`SendWork::atomic`] only for the
/// atomics, and checks the payload against the QP's limits itself, so no
/// implementation can make it write a WQE the opcode does not describe.
pub trait SendWork {
    /// Returned with the completion.
    fn wr_id(&self) -> u64;
    /// The WQE opcode.
    fn opcode(&self) -> SendOpcode;
    /// Immediate data (read for SEND_IMM and RDMA_WRITE_IMM only).
    fn imm(&self) -> u32;
    /// Remote address and key (read for the opcodes with a remote-address
    /// segment only).
    fn remote(&self) -> (u64, u32);
    /// The atomic operands (swap or add, compare), read for the atomics
    /// only (Linux `set_atomic_seg`: FETCH_ADD carries the addend first and
    /// a zero compare).
    #[inline(always)]
    fn atomic(&self) -> (u64, u64) {
        (0, 0)
    }
    /// `IBV_SEND_FENCE`: the device starts this request only after every
    /// earlier RDMA READ and atomic completed (fence mode FENCE).
    #[inline(always)]
    fn fence(&self) -> bool {
        false
    }
    /// The control segment's `fm_ce_se` byte: a completion on success
    /// ([`SendWork::signaled`]), the solicited bit
    /// ([`SendWork::solicited`]) and the fence mode ([`SendWork::fence`]).
    /// Override only to compute the same byte faster (the verbs facade
    /// looks its flags up in a table).
    #[inline(always)]
    fn fm_ce_se(&self) -> u8 {
        (if self.signaled() { wqe::CTRL_CQ_UPDATE } else { 0 })
            | if self.solicited() {
                wqe::CTRL_SOLICITED
            } else {
                0
            }
            // rdma-core's `MLX5_WQE_CTRL_FENCE` (fence mode 4).
            | if self.fence() {
                wqe::FENCE_MODE_SMALL_AND_FENCE
            } else {
                0
            }
    }
    /// The data.
    fn payload(&self) -> Payload<'_>;
    /// Ask for a completion on success.
    fn signaled(&self) -> bool;
    /// Set the solicited-event bit.
    fn solicited(&self) -> bool;
}

impl SendWork for SendRequest<'_> {
    #[inline(always)]
    fn wr_id(&self) -> u64 {
        self.wr_id
    }

    #[inline(always)]
    fn opcode(&self) -> SendOpcode {
        self.op.opcode()
    }

    #[inline(always)]
    fn imm(&self) -> u32 {
        match self.op {
            SendOp::SendImm { imm } | SendOp::RdmaWriteImm { imm, .. } => imm,
            _ => 0,
        }
    }

    #[inline(always)]
    fn remote(&self) -> (u64, u32) {
        match self.op {
            SendOp::RdmaWrite { raddr, rkey }
            | SendOp::RdmaWriteImm { raddr, rkey, .. }
            | SendOp::RdmaRead { raddr, rkey }
            | SendOp::AtomicCmpSwap { raddr, rkey, .. }
            | SendOp::AtomicFetchAdd { raddr, rkey, .. } => (raddr, rkey),
            SendOp::Send | SendOp::SendImm { .. } => (0, 0),
        }
    }

    #[inline(always)]
    fn atomic(&self) -> (u64, u64) {
        match self.op {
            SendOp::AtomicCmpSwap { compare, swap, .. } => (swap, compare),
            SendOp::AtomicFetchAdd { add, .. } => (add, 0),
            _ => (0, 0),
        }
    }

    #[inline(always)]
    fn payload(&self) -> Payload<'_> {
        self.payload
    }

    #[inline(always)]
    fn signaled(&self) -> bool {
        self.signaled
    }

    #[inline(always)]
    fn solicited(&self) -> bool {
        self.solicited
    }
}

/// One entry of the caller's send table (one per WQEBB of the ring).
///
/// The caller owns the table (an array, a static, a `Vec`: anything that is
/// `AsMut<[SendSlot]>`) and hands it to the QP at creation; the driver writes
/// an entry for the slot each WQE starts at and reads it back when a CQE
/// names that WQE. No heap in the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SendSlot {
    /// The caller's id.
    pub wr_id: u64,
    /// Running work-request number of the WQE.
    pub(super) seq: u32,
    /// 16-bit WQE index (`cur_post`) of the WQE.
    pub(super) index: u16,
    /// `MLX5_OPCODE_*`.
    pub(super) opcode: u8,
    /// Signaled.
    pub(super) signaled: bool,
}

impl SendSlot {
    /// An unused entry (for initialising tables); equal to
    /// `SendSlot::default()`.
    pub const EMPTY: SendSlot = SendSlot {
        wr_id: 0,
        seq: 0,
        index: 0,
        opcode: 0,
        signaled: false,
    };

    /// The opcode the work request was posted with.
    pub fn opcode(&self) -> SendOpcode {
        SendOpcode::from_raw(self.opcode)
    }

    /// Whether the work request asked for a completion.
    pub fn signaled(&self) -> bool {
        self.signaled
    }
}

/// Why one work request was not posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendError {
    /// `max_send_wr` work requests are outstanding (`ENOMEM` in verbs).
    Full,
    /// More gather entries than the QP allows (`EINVAL`).
    TooManySges {
        /// Entries given.
        given: usize,
        /// Entries allowed.
        max: u32,
    },
    /// More inline bytes than the QP allows (`ENOMEM`, as rdma-core).
    InlineTooLarge {
        /// Bytes given.
        len: usize,
        /// Bytes allowed.
        max: u32,
    },
    /// The QP is in a state that takes no send work requests (RESET, INIT,
    /// RTR; `EINVAL`).
    BadState {
        /// The QP's state.
        state: super::QpState,
    },
    /// The QP was created without a send queue (`EINVAL`).
    NoSendQueue,
    /// The device is dead (fatal health): nothing is posted (`EIO`, as
    /// `mlx5_ib_post_send` on an internal error).
    DeviceDead,
    /// An atomic on a device without the IB atomics (`EINVAL`, rdma-core's
    /// `atomics_enabled` check).
    AtomicsUnsupported,
    /// An atomic whose local buffer is not one gather entry of at least 8
    /// bytes (`EINVAL`).
    BadAtomicBuffer,
    /// Inline data on an RDMA READ or an atomic, whose local buffer the
    /// device writes (`EINVAL`).
    InlineNotAllowed,
}

impl SendError {
    /// The errno libibverbs/mlx5 reports for it.
    pub const fn errno(&self) -> i32 {
        use mlx5_regs::consts::errno;
        match self {
            SendError::Full | SendError::InlineTooLarge { .. } => errno::ENOMEM,
            SendError::TooManySges { .. }
            | SendError::BadState { .. }
            | SendError::NoSendQueue
            | SendError::AtomicsUnsupported
            | SendError::BadAtomicBuffer
            | SendError::InlineNotAllowed => errno::EINVAL,
            SendError::DeviceDead => errno::EIO,
        }
    }
}

/// Why a requester CQE was not matched to a posted work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BadSendCqe {
    /// The CQE names another QP.
    WrongQp {
        /// QP number in the CQE.
        qpn: u32,
    },
    /// Not a requester opcode (REQ / REQ_ERR).
    NotRequester {
        /// The 4-bit CQE opcode.
        opcode: u8,
    },
    /// The QP has no send queue.
    NoSendQueue,
    /// `wqe_counter` is not the start of an outstanding WQE (never posted,
    /// already completed, or the middle of a longer WQE).
    NotOutstanding {
        /// The index the CQE gave.
        wqe_counter: u16,
    },
    /// A successful requester CQE names another send opcode than the WQE
    /// it completes was posted with. The device did complete the WQE, so it
    /// is retired: its `wr_id` is here for the caller to complete the
    /// request with an error.
    OpcodeMismatch {
        /// The request's `wr_id`.
        wr_id: u64,
        /// The opcode byte the CQE gave.
        opcode: u8,
        /// The opcode posted.
        posted: SendOpcode,
    },
}
