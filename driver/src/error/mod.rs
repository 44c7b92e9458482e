//! Typed errors of the driver core, each with a Linux-style errno.
//!
//! [`Error`] is the one error a library user needs: every other error type
//! of the driver (a post that stopped, a CQE the device should not have
//! written, a refused destroy, a platform or layout error) converts into it
//! with `From`, so `?` works across the whole API. Every error type
//! implements [`core::error::Error`], so `Box<dyn Error>` works too.
//!
//! ```
//! use mlx5_driver::srq::{PostError, PostFailure};
//! use mlx5_driver::Error;
//! fn post() -> Result<(), PostFailure> {
//!     Err(PostFailure { index: 3, error: PostError::Full })
//! }
//! fn caller() -> Result<(), Error> {
//!     post()?;
//!     Ok(())
//! }
//! let e = caller().unwrap_err();
//! assert_eq!(e.errno(), 12); // ENOMEM, as ibv_post_srq_recv
//! assert_eq!(e.to_string(), "receive post stopped at request 3: every receive WQE is posted");
//! ```

mod destroy;
mod parts;

use core::fmt;

use mlx5_hal::HalError;
use mlx5_regs::consts::errno;
use mlx5_regs::{CmdStatus, DeliveryStatus, Opcode, RegError};

use crate::cq::{CqeError, ResizeCopyError};
use crate::qp::{BadSendCqe, PostSendFailure, QpState, RqSizeError, SqSizeError};
use crate::srq::{BadRecvCqe, PostFailure};

pub use destroy::DestroyError;

/// Why the driver considers the device dead (docs/firmware.md §1.3, Linux
/// `mlx5_health_check_fatal_sensors` order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FatalReason {
    /// `health_buffer.fw_ver` reads `0xffffffff`: PCI is gone.
    PciDead,
    /// `nic_interface` reads DISABLED.
    NicDisabled,
    /// `nic_interface` reads SW_RESET.
    SwReset,
    /// The health buffer carries a non-zero syndrome.
    Syndrome,
    /// The heartbeat counter stopped for longer than the configured limit.
    HeartbeatStopped,
}

/// Every failure the driver core reports.
///
/// Each variant maps to a positive errno with [`Error::errno`], using the
/// mapping of Linux `mlx5_core` (docs/firmware.md §2.5, §2.6).
///
/// ```
/// use mlx5_driver::Error;
/// use mlx5_regs::{CmdStatus, Opcode};
/// let e = Error::Command { opcode: Opcode::CREATE_EQ, op_mod: 0,
///                          status: CmdStatus::BAD_PARAM_ERR, syndrome: 0x1234 };
/// assert_eq!(e.errno(), 22);
/// let text = format!("{e}");
/// assert!(text.contains("CREATE_EQ") && text.contains("BAD_PARAM_ERR") && text.contains("0x1234"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// Firmware executed the command and returned a non-zero status.
    Command {
        /// The command.
        opcode: Opcode,
        /// Its op_mod.
        op_mod: u16,
        /// Output byte 0.
        status: CmdStatus,
        /// Output bytes 4..8 (opaque firmware diagnostic).
        syndrome: u32,
    },
    /// The command was not delivered (entry `status_own >> 1` ≠ 0).
    Delivery {
        /// The command.
        opcode: Opcode,
        /// Its op_mod.
        op_mod: u16,
        /// The delivery status.
        status: DeliveryStatus,
    },
    /// Firmware did not return ownership within the command's timeout. The
    /// slot stays out of use until firmware gives it back.
    Timeout {
        /// The command.
        opcode: Opcode,
        /// Its op_mod.
        op_mod: u16,
        /// How long the driver waited.
        waited_ns: u64,
    },
    /// The initializing bit of the init segment never cleared.
    FirmwareInitTimeout {
        /// How long the driver waited.
        waited_ns: u64,
    },
    /// The device is dead (health buffer); every later call fails fast with
    /// this error.
    Fatal {
        /// `health_buffer.synd` (0 if the reason is not a syndrome).
        health_syndrome: u8,
        /// `health_buffer.ext_synd`.
        ext_syndrome: u16,
        /// What the driver saw.
        reason: FatalReason,
    },
    /// The platform could not provide DMA memory.
    Dma(HalError),
    /// A value did not fit a firmware field.
    Layout(RegError),
    /// `cmdif_rev` of the init segment is not 5.
    UnsupportedCmdIf {
        /// The revision read.
        rev: u16,
    },
    /// The command queue geometry is one Linux refuses (docs/firmware.md §2.1).
    BadCmdQueue {
        /// `log_cmdq_size`.
        log_size: u8,
        /// `log_cmdq_stride`.
        log_stride: u8,
    },
    /// A command (input or output) is longer than the preallocated mailboxes.
    CommandTooLarge {
        /// The command.
        opcode: Opcode,
        /// Requested length in bytes.
        len: usize,
        /// Largest supported length.
        max: usize,
    },
    /// An argument is out of range (a buffer shorter than a command header,
    /// an EQ size above the capability, ...).
    InvalidArgument(&'static str),
    /// The object is still in use by another (a CQ an SRQ reports to), or
    /// has events read but not acknowledged; nothing was changed.
    Busy(&'static str),
    /// The device lacks the capability (`cq_resize`, `cq_moderation`, ...).
    Unsupported {
        /// What is missing.
        what: &'static str,
        /// The errno libibverbs/mlx5 reports for it (`ENOSYS` for CQ resize,
        /// `EOPNOTSUPP` for moderation).
        errno: i32,
    },
    /// Firmware did not leave the old CQ ring as docs/firmware.md §8 describes after a
    /// resize (no RESIZE_CQ CQE, or an entry still hardware-owned on the
    /// way): the CQ uses the new ring, completions before it may be lost.
    ResizeCopy(ResizeCopyError),
    /// The page manager is at its configured capacity or DMA memory ran out
    /// while giving pages to firmware.
    OutOfPages {
        /// Pages that could not be provided.
        requested: usize,
    },
    /// Firmware returned something malformed (a page the driver never gave,
    /// more pages than requested, ...).
    BadResponse {
        /// The command.
        opcode: Opcode,
        /// What was wrong.
        what: &'static str,
    },
    /// The device supports no ISSI this driver speaks.
    IssiNotSupported {
        /// `supported_issi_dw0`.
        supported: u32,
    },
    /// A queue pair is in the wrong state for the call; nothing was sent
    /// to firmware.
    QpState {
        /// The QP.
        qpn: u32,
        /// Its state as the driver knows it.
        state: QpState,
        /// What was refused (the command it would have sent).
        op: &'static str,
    },
    /// A send queue size the device cannot hold (Linux `calc_sq_size`).
    SqSize(SqSizeError),
    /// A receive queue size the device cannot hold (rdma-core
    /// `mlx5_calc_rq_size`).
    RqSize(RqSizeError),
    /// Teardown could not take every page back from firmware.
    ReclaimStalled {
        /// Pages firmware still holds.
        pages_left: usize,
    },
    /// A receive post stopped ([`crate::srq::Srq::post`]): the requests
    /// before `index` are posted.
    RecvPost(PostFailure),
    /// A send post stopped ([`crate::qp::Qp::post_send`]): the requests
    /// before `index` are posted.
    SendPost(PostSendFailure),
    /// A receive CQE the SRQ or QP refused to match (an untrusted device
    /// wrote something it was never asked for).
    BadRecvCqe(BadRecvCqe),
    /// A requester CQE the QP refused to match.
    BadSendCqe(BadSendCqe),
    /// A work request completed in error (the CQE's syndrome), for callers
    /// that turn an error completion into an error with `?`.
    Completion(CqeError),
    /// A fixed-capacity table of the driver is full (no heap to grow it).
    TableFull {
        /// Which table.
        what: &'static str,
        /// Its capacity.
        capacity: usize,
    },
}

impl Error {
    /// Positive errno value, as Linux `mlx5_core` / rdma-core would report.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Command { status, .. } => status.errno(),
            Error::Delivery { status, .. } => status.errno(),
            Error::Timeout { .. } | Error::FirmwareInitTimeout { .. } => errno::ETIMEDOUT,
            Error::ReclaimStalled { .. } => errno::ETIMEDOUT,
            // Linux fails creates/queries with -ENOLINK once the device is in
            // internal-error state (docs/firmware.md §4.3).
            Error::Fatal { .. } => errno::ENOLINK,
            Error::Dma(HalError::OutOfDmaMemory { .. }) => errno::ENOMEM,
            Error::Dma(HalError::InvalidRequest) => errno::EINVAL,
            Error::Dma(HalError::Platform { errno }) => *errno,
            Error::Dma(HalError::Unsupported) => errno::EOPNOTSUPP,
            // A platform error this driver version does not know.
            Error::Dma(_) => errno::EIO,
            Error::Layout(_) | Error::InvalidArgument(_) => errno::EINVAL,
            Error::Busy(_) => errno::EBUSY,
            Error::Unsupported { errno, .. } => *errno,
            Error::ResizeCopy(_) => errno::EIO,
            Error::UnsupportedCmdIf { .. } | Error::BadCmdQueue { .. } => errno::EINVAL,
            Error::CommandTooLarge { .. } => errno::EINVAL,
            Error::OutOfPages { .. } => errno::ENOMEM,
            Error::BadResponse { .. } => errno::EIO,
            Error::IssiNotSupported { .. } => errno::EOPNOTSUPP,
            Error::QpState { .. } => errno::EINVAL,
            Error::SqSize(SqSizeError::RingTooLarge) => errno::ENOMEM,
            Error::SqSize(_) => errno::EINVAL,
            Error::RqSize(_) => errno::EINVAL,
            Error::RecvPost(f) => f.error.errno(),
            Error::SendPost(f) => f.error.errno(),
            Error::BadRecvCqe(_) | Error::BadSendCqe(_) | Error::Completion(_) => errno::EIO,
            Error::TableFull { .. } => errno::ENOMEM,
        }
    }

    /// The opcode this error is about, if it is about a command.
    pub fn opcode(&self) -> Option<Opcode> {
        match *self {
            Error::Command { opcode, .. }
            | Error::Delivery { opcode, .. }
            | Error::Timeout { opcode, .. }
            | Error::CommandTooLarge { opcode, .. }
            | Error::BadResponse { opcode, .. } => Some(opcode),
            _ => None,
        }
    }

    /// True when the device is dead and nothing more can be done with it.
    pub fn is_fatal(&self) -> bool {
        matches!(self, Error::Fatal { .. })
    }
}

struct OpName(Opcode);
impl fmt::Display for OpName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::Command {
                opcode,
                op_mod,
                status,
                syndrome,
            } => write!(
                f,
                "{} op_mod {op_mod:#x} failed: status {status}, syndrome {syndrome:#x}",
                OpName(opcode)
            ),
            Error::Delivery {
                opcode,
                op_mod,
                status,
            } => write!(
                f,
                "{} op_mod {op_mod:#x} not delivered: delivery status {status:?}",
                OpName(opcode)
            ),
            Error::Timeout {
                opcode,
                op_mod,
                waited_ns,
            } => write!(
                f,
                "{} op_mod {op_mod:#x} timed out after {} ms",
                OpName(opcode),
                waited_ns / 1_000_000
            ),
            Error::FirmwareInitTimeout { waited_ns } => write!(
                f,
                "firmware still initializing after {} ms",
                waited_ns / 1_000_000
            ),
            Error::Fatal {
                health_syndrome,
                ext_syndrome,
                reason,
            } => {
                write!(
                    f,
                    "device fatal ({reason:?}): health syndrome {health_syndrome:#04x}"
                )?;
                if let Some(n) = mlx5_regs::consts::health_syndrome_name(health_syndrome) {
                    write!(f, " ({n})")?;
                }
                write!(f, ", ext syndrome {ext_syndrome:#06x}")
            }
            Error::Dma(e) => write!(f, "DMA: {e}"),
            Error::Layout(e) => write!(f, "layout: {e}"),
            Error::UnsupportedCmdIf { rev } => {
                write!(f, "command interface revision {rev} (need 5)")
            }
            Error::BadCmdQueue {
                log_size,
                log_stride,
            } => write!(
                f,
                "unsupported command queue geometry: log_size {log_size}, log_stride {log_stride}"
            ),
            Error::CommandTooLarge { opcode, len, max } => write!(
                f,
                "{}: {len} bytes exceed the {max}-byte mailbox capacity",
                OpName(opcode)
            ),
            Error::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
            Error::Busy(what) => write!(f, "busy: {what}"),
            Error::Unsupported { what, errno } => {
                write!(f, "not supported by the device: {what} (errno {errno})")
            }
            Error::ResizeCopy(e) => write!(f, "CQ resize: {e}; completions may be lost"),
            Error::OutOfPages { requested } => {
                write!(f, "cannot provide {requested} firmware pages")
            }
            Error::BadResponse { opcode, what } => {
                write!(f, "{}: malformed response: {what}", OpName(opcode))
            }
            Error::IssiNotSupported { supported } => {
                write!(f, "no usable ISSI (supported_issi_dw0 {supported:#x})")
            }
            Error::QpState { qpn, state, op } => {
                write!(f, "QP {qpn:#x} is in state {state:?}: {op} refused")
            }
            Error::SqSize(e) => write!(f, "send queue size: {e}"),
            Error::RqSize(e) => write!(f, "receive queue size: {e}"),
            Error::ReclaimStalled { pages_left } => {
                write!(f, "page reclaim stalled with {pages_left} pages left")
            }
            Error::RecvPost(e) => write!(f, "{e}"),
            Error::SendPost(e) => write!(f, "{e}"),
            Error::BadRecvCqe(e) => write!(f, "{e}"),
            Error::BadSendCqe(e) => write!(f, "{e}"),
            Error::Completion(e) => write!(f, "work request completed in error: {e}"),
            Error::TableFull { what, capacity } => {
                write!(f, "table full: {what} (capacity {capacity})")
            }
        }
    }
}

impl core::error::Error for Error {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Error::Dma(e) => Some(e),
            Error::Layout(e) => Some(e),
            Error::ResizeCopy(e) => Some(e),
            Error::SqSize(e) => Some(e),
            Error::RqSize(e) => Some(e),
            Error::RecvPost(e) => Some(e),
            Error::SendPost(e) => Some(e),
            Error::BadRecvCqe(e) => Some(e),
            Error::BadSendCqe(e) => Some(e),
            Error::Completion(e) => Some(e),
            _ => None,
        }
    }
}
