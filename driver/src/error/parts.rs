//! `Display`, [`core::error::Error`] and the conversion into [`Error`] of
//! the driver's smaller error types: posting, matching CQEs, error
//! completions, CQ resize, send-queue sizing, and the platform and layout
//! errors of `mlx5-hal` and `mlx5-regs`.

use core::fmt;

use mlx5_hal::HalError;
use mlx5_regs::RegError;

use super::Error;
use crate::cq::{CqeError, ResizeCopyError};
use crate::qp::{BadSendCqe, PostSendFailure, SendError, SqSizeError};
use crate::srq::{BadRecvCqe, CompleteError, PostError, PostFailure};

impl From<HalError> for Error {
    fn from(e: HalError) -> Self {
        Error::Dma(e)
    }
}

impl From<RegError> for Error {
    fn from(e: RegError) -> Self {
        Error::Layout(e)
    }
}

impl From<PostFailure> for Error {
    fn from(e: PostFailure) -> Self {
        Error::RecvPost(e)
    }
}

/// A refusal of the SRQ ring's `post`, which posts one request: it is
/// request 0.
impl From<PostError> for Error {
    fn from(error: PostError) -> Self {
        Error::RecvPost(PostFailure { index: 0, error })
    }
}

impl From<PostSendFailure> for Error {
    fn from(e: PostSendFailure) -> Self {
        Error::SendPost(e)
    }
}

/// A refusal of the send ring's `write`, which writes one request: it
/// is request 0.
impl From<SendError> for Error {
    fn from(error: SendError) -> Self {
        Error::SendPost(PostSendFailure { index: 0, error })
    }
}

impl From<BadRecvCqe> for Error {
    fn from(e: BadRecvCqe) -> Self {
        Error::BadRecvCqe(e)
    }
}

impl From<CompleteError> for Error {
    fn from(e: CompleteError) -> Self {
        Error::BadRecvCqe(BadRecvCqe::Wqe(e))
    }
}

impl From<BadSendCqe> for Error {
    fn from(e: BadSendCqe) -> Self {
        Error::BadSendCqe(e)
    }
}

impl From<CqeError> for Error {
    fn from(e: CqeError) -> Self {
        Error::Completion(e)
    }
}

impl From<ResizeCopyError> for Error {
    fn from(e: ResizeCopyError) -> Self {
        Error::ResizeCopy(e)
    }
}

impl From<SqSizeError> for Error {
    fn from(e: SqSizeError) -> Self {
        Error::SqSize(e)
    }
}

impl fmt::Display for PostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PostError::Full => f.write_str("every receive WQE is posted"),
            PostError::TooManySges { given, max } => {
                write!(f, "{given} scatter entries, a WQE holds {max}")
            }
            PostError::DeviceDead => f.write_str("the device is dead"),
            PostError::NoReceiveQueue => f.write_str("the QP has no receive queue of its own"),
        }
    }
}

impl fmt::Display for PostFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "receive post stopped at request {}: {}",
            self.index, self.error
        )
    }
}

impl fmt::Display for CompleteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            CompleteError::OutOfRange { index } => {
                write!(f, "WQE index {index} is outside the ring")
            }
            CompleteError::NotPosted { index } => write!(f, "WQE {index} is not posted"),
        }
    }
}

impl fmt::Display for BadRecvCqe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("receive CQE refused: ")?;
        match *self {
            BadRecvCqe::WrongQp { qpn } => write!(f, "it names QP {qpn:#x}"),
            BadRecvCqe::WrongSrq { srqn } => write!(f, "it names SRQ {srqn:#x}"),
            BadRecvCqe::UnexpectedOpcode { opcode } => {
                write!(f, "opcode {opcode:#x} is not a receive")
            }
            BadRecvCqe::Wqe(e) => write!(f, "{e}"),
            BadRecvCqe::ByteCountBeyondBuffer {
                wr_id,
                byte_len,
                capacity,
            } => write!(
                f,
                "{byte_len} bytes for request {wr_id:#x}, whose buffers hold {capacity}"
            ),
        }
    }
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SendError::Full => f.write_str("max_send_wr work requests are outstanding"),
            SendError::TooManySges { given, max } => {
                write!(f, "{given} gather entries, the QP allows {max}")
            }
            SendError::InlineTooLarge { len, max } => {
                write!(f, "{len} inline bytes, the QP allows {max}")
            }
            SendError::BadState { state } => {
                write!(f, "the QP is in state {state:?} (send needs RTS or SQD)")
            }
            SendError::NoSendQueue => f.write_str("the QP has no send queue"),
            SendError::DeviceDead => f.write_str("the device is dead"),
            SendError::AtomicsUnsupported => {
                f.write_str("the device does not execute the IB atomics")
            }
            SendError::BadAtomicBuffer => {
                f.write_str("an atomic needs one local buffer of at least 8 bytes")
            }
            SendError::InlineNotAllowed => {
                f.write_str("inline data on an RDMA READ or atomic, whose buffer is written")
            }
            SendError::WrongTransport => f.write_str(
                "the request's transport differs from the QP's (datagram vs connected, or RDMA on UD)",
            ),
        }
    }
}

impl fmt::Display for PostSendFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "send post stopped at request {}: {}",
            self.index, self.error
        )
    }
}

impl fmt::Display for BadSendCqe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("send CQE refused: ")?;
        match *self {
            BadSendCqe::WrongQp { qpn } => write!(f, "it names QP {qpn:#x}"),
            BadSendCqe::NotRequester { opcode } => {
                write!(f, "opcode {opcode:#x} is not a requester completion")
            }
            BadSendCqe::NoSendQueue => f.write_str("the QP has no send queue"),
            BadSendCqe::NotOutstanding { wqe_counter } => {
                write!(f, "WQE {wqe_counter} is not outstanding")
            }
            BadSendCqe::OpcodeMismatch {
                wr_id,
                opcode,
                posted,
            } => write!(
                f,
                "request {wr_id:#x} was posted as {posted:?}, the CQE says opcode {opcode:#x}"
            ),
        }
    }
}

impl fmt::Display for SqSizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SqSizeError::NoWorkRequests => "max_send_wr is 0",
            SqSizeError::TooManySges => "more gather entries than a WQE of max_wqe_sz_sq holds",
            SqSizeError::WqeTooLarge => "the WQE would exceed max_wqe_sz_sq",
            SqSizeError::RingTooLarge => "the ring would exceed 2^log_max_qp_sz WQEBBs",
        })
    }
}

impl fmt::Display for ResizeCopyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ResizeCopyError::NotSoftwareOwned { index } => write!(
                f,
                "entry {index} of the old ring is still hardware-owned before the RESIZE_CQ CQE"
            ),
            ResizeCopyError::ResizeCqeMissing => f.write_str(
                "no RESIZE_CQ CQE in the old ring (or more CQEs than the new ring holds)",
            ),
            ResizeCopyError::CqeSizeMismatch => {
                f.write_str("the new ring's CQE size differs from the old one's")
            }
        }
    }
}

impl fmt::Display for CqeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self {
            CqeError::LocalLength => "local length error",
            CqeError::LocalQpOperation => "local QP operation error",
            CqeError::LocalProtection => "local protection error",
            CqeError::WrFlush => "work request flushed",
            CqeError::MwBind => "memory window bind error",
            CqeError::BadResponse => "bad response",
            CqeError::LocalAccess => "local access error",
            CqeError::RemoteInvalidRequest => "remote invalid request",
            CqeError::RemoteAccess => "remote access error",
            CqeError::RemoteOperation => "remote operation error",
            CqeError::TransportRetryExceeded => "transport retry counter exceeded",
            CqeError::RnrRetryExceeded => "RNR retry counter exceeded",
            CqeError::RemoteAborted => "remote aborted",
            CqeError::Other(_) => "error",
        };
        write!(f, "{what} (syndrome {:#04x})", self.syndrome())
    }
}

impl core::error::Error for PostError {}
impl core::error::Error for CompleteError {}
impl core::error::Error for SendError {}
impl core::error::Error for SqSizeError {}
impl core::error::Error for ResizeCopyError {}
impl core::error::Error for CqeError {}
impl core::error::Error for BadSendCqe {}

impl core::error::Error for PostFailure {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl core::error::Error for PostSendFailure {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl core::error::Error for BadRecvCqe {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            BadRecvCqe::Wqe(e) => Some(e),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every error type of the crate is a `core::error::Error`.
    #[test]
    fn every_error_type_is_a_core_error() {
        fn is_error<E: core::error::Error>() {}
        is_error::<Error>();
        is_error::<crate::error::DestroyError<()>>();
        is_error::<PostError>();
        is_error::<PostFailure>();
        is_error::<CompleteError>();
        is_error::<BadRecvCqe>();
        is_error::<SendError>();
        is_error::<PostSendFailure>();
        is_error::<SqSizeError>();
        is_error::<BadSendCqe>();
        is_error::<ResizeCopyError>();
        is_error::<CqeError>();
        is_error::<crate::verbs::Errno>();
        is_error::<crate::verbs::PostSendError>();
        is_error::<crate::verbs::PostSrqError>();
        is_error::<crate::verbs::PostRecvError>();
        is_error::<crate::qp::RqSizeError>();
        is_error::<mlx5_hal::HalError>();
        is_error::<mlx5_regs::RegError>();
    }
    use crate::qp::{QpState, SendOpcode};
    use mlx5_regs::consts::errno;

    /// Every error type converts into [`Error`] with the errno verbs
    /// reports, and its text names what went wrong.
    #[test]
    fn each_error_converts_with_its_errno() {
        let cases: [(Error, i32, &str); 13] = [
            (PostError::Full.into(), errno::ENOMEM, "every receive WQE"),
            (
                PostFailure {
                    index: 2,
                    error: PostError::TooManySges { given: 5, max: 3 },
                }
                .into(),
                errno::EINVAL,
                "request 2: 5 scatter entries",
            ),
            (SendError::Full.into(), errno::ENOMEM, "request 0"),
            (
                PostSendFailure {
                    index: 1,
                    error: SendError::BadState {
                        state: QpState::Init,
                    },
                }
                .into(),
                errno::EINVAL,
                "request 1: the QP is in state Init",
            ),
            (
                SendError::InlineTooLarge { len: 300, max: 256 }.into(),
                errno::ENOMEM,
                "300 inline bytes",
            ),
            (
                CompleteError::NotPosted { index: 9 }.into(),
                errno::EIO,
                "WQE 9 is not posted",
            ),
            (
                BadRecvCqe::WrongSrq { srqn: 0x12 }.into(),
                errno::EIO,
                "SRQ 0x12",
            ),
            (
                BadSendCqe::OpcodeMismatch {
                    wr_id: 7,
                    opcode: 0x0a,
                    posted: SendOpcode::RdmaWrite,
                }
                .into(),
                errno::EIO,
                "posted as RdmaWrite",
            ),
            (
                CqeError::WrFlush.into(),
                errno::EIO,
                "flushed (syndrome 0x05)",
            ),
            (
                ResizeCopyError::ResizeCqeMissing.into(),
                errno::EIO,
                "no RESIZE_CQ CQE",
            ),
            (
                SqSizeError::RingTooLarge.into(),
                errno::ENOMEM,
                "2^log_max_qp_sz",
            ),
            (
                HalError::OutOfDmaMemory { requested: 4096 }.into(),
                errno::ENOMEM,
                "4096 bytes",
            ),
            (
                RegError::Overflow {
                    field: "log_cq_size",
                    width: 5,
                    value: 40,
                }
                .into(),
                errno::EINVAL,
                "log_cq_size",
            ),
        ];
        for (e, want, text) in cases {
            assert_eq!(e.errno(), want, "{e:?}");
            let shown = alloc_free_text(&e);
            assert!(shown.contains(text), "{shown:?} lacks {text:?}");
        }
    }

    /// The wrapped error is the `source` of the driver error.
    #[test]
    fn wrapped_errors_are_the_source() {
        use core::error::Error as _;
        let e: Error = PostFailure {
            index: 0,
            error: PostError::Full,
        }
        .into();
        let src = e.source().expect("a source");
        assert_eq!(
            alloc_free_text(src),
            "receive post stopped at request 0: every receive WQE is posted"
        );
        let inner = src.source().expect("the post error");
        assert_eq!(alloc_free_text(inner), "every receive WQE is posted");
        assert!(Error::Busy("x").source().is_none());
    }

    /// Format into a fixed buffer (the crate is `no_std` without alloc).
    fn alloc_free_text(e: &dyn fmt::Display) -> heapless::String<256> {
        use core::fmt::Write;
        let mut s = heapless::String::new();
        write!(s, "{e}").expect("fits");
        s
    }
}
