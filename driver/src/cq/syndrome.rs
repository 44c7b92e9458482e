//! Error CQE syndromes as a type (`syndrome` at CQE byte 0x37; values of
//! Linux `include/linux/mlx5/cq.h`, mapped to verbs statuses the way
//! `drivers/infiniband/hw/mlx5/cq.c` `mlx5_handle_error_cqe` and rdma-core
//! `providers/mlx5/cq.c` do).

use mlx5_regs::consts::cq_error_syndrome;
use mlx5_regs::consts::cqe_syndrome as syn;

/// Why a work request completed in error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CqeError {
    /// 0x01: the message did not fit the receive buffers (or the local
    /// gather list was too long).
    LocalLength,
    /// 0x02: a malformed WQE or an operation the QP cannot do.
    LocalQpOperation,
    /// 0x04: a local key check failed (missing key, wrong PD, out of
    /// bounds).
    LocalProtection,
    /// 0x05: flushed: the QP was in error when the work request was
    /// processed (or it was outstanding when the QP entered error).
    WrFlush,
    /// 0x06: memory-window bind error.
    MwBind,
    /// 0x10: unexpected response from the responder.
    BadResponse,
    /// 0x11: local access error.
    LocalAccess,
    /// 0x12: the responder refused the request (e.g. a message longer than
    /// its receive buffer).
    RemoteInvalidRequest,
    /// 0x13: the responder's key check failed (rkey, rights, bounds).
    RemoteAccess,
    /// 0x14: the responder could not complete the operation.
    RemoteOperation,
    /// 0x15: transport retries exhausted (no acknowledgement).
    TransportRetryExceeded,
    /// 0x16: receiver-not-ready retries exhausted.
    RnrRetryExceeded,
    /// 0x22: the remote side aborted.
    RemoteAborted,
    /// A syndrome the sources do not name (verbs: general error).
    Other(u8),
}

impl CqeError {
    /// The typed syndrome of a raw CQE `syndrome` byte.
    ///
    /// ```
    /// use mlx5_driver::cq::CqeError;
    /// assert_eq!(CqeError::from_syndrome(0x05), CqeError::WrFlush);
    /// assert_eq!(CqeError::from_syndrome(0x77), CqeError::Other(0x77));
    /// assert_eq!(CqeError::RnrRetryExceeded.syndrome(), 0x16);
    /// ```
    pub const fn from_syndrome(s: u8) -> CqeError {
        match s {
            syn::LOCAL_LENGTH_ERR => CqeError::LocalLength,
            syn::LOCAL_QP_OP_ERR => CqeError::LocalQpOperation,
            syn::LOCAL_PROT_ERR => CqeError::LocalProtection,
            syn::WR_FLUSH_ERR => CqeError::WrFlush,
            syn::MW_BIND_ERR => CqeError::MwBind,
            syn::BAD_RESP_ERR => CqeError::BadResponse,
            syn::LOCAL_ACCESS_ERR => CqeError::LocalAccess,
            syn::REMOTE_INVAL_REQ_ERR => CqeError::RemoteInvalidRequest,
            syn::REMOTE_ACCESS_ERR => CqeError::RemoteAccess,
            syn::REMOTE_OP_ERR => CqeError::RemoteOperation,
            syn::TRANSPORT_RETRY_EXC_ERR => CqeError::TransportRetryExceeded,
            syn::RNR_RETRY_EXC_ERR => CqeError::RnrRetryExceeded,
            syn::REMOTE_ABORTED_ERR => CqeError::RemoteAborted,
            other => CqeError::Other(other),
        }
    }

    /// The raw syndrome byte.
    pub const fn syndrome(self) -> u8 {
        match self {
            CqeError::LocalLength => syn::LOCAL_LENGTH_ERR,
            CqeError::LocalQpOperation => syn::LOCAL_QP_OP_ERR,
            CqeError::LocalProtection => syn::LOCAL_PROT_ERR,
            CqeError::WrFlush => syn::WR_FLUSH_ERR,
            CqeError::MwBind => syn::MW_BIND_ERR,
            CqeError::BadResponse => syn::BAD_RESP_ERR,
            CqeError::LocalAccess => syn::LOCAL_ACCESS_ERR,
            CqeError::RemoteInvalidRequest => syn::REMOTE_INVAL_REQ_ERR,
            CqeError::RemoteAccess => syn::REMOTE_ACCESS_ERR,
            CqeError::RemoteOperation => syn::REMOTE_OP_ERR,
            CqeError::TransportRetryExceeded => syn::TRANSPORT_RETRY_EXC_ERR,
            CqeError::RnrRetryExceeded => syn::RNR_RETRY_EXC_ERR,
            CqeError::RemoteAborted => syn::REMOTE_ABORTED_ERR,
            CqeError::Other(s) => s,
        }
    }

    /// True for the completions rdma-core treats as quiet (flush and
    /// transport retry): expected while a QP is torn down.
    pub const fn is_flush(self) -> bool {
        matches!(self, CqeError::WrFlush)
    }
}

/// Why firmware put a CQ in error: the syndrome of a CQ error event (type
/// 0x04, byte 0x2b; Linux `MLX5_CQ_ERROR_SYNDROME_*`, docs/firmware.md §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CqErrorCause {
    /// 1: a completion found the CQ full (`cqc.status` 0x9); the CQ was
    /// created without overrun-ignore.
    Overrun,
    /// 2: firmware could not write a completion or read the doorbell record
    /// (`cqc.status` 0xa).
    AccessViolation,
    /// A syndrome the sources do not name.
    Other(u8),
}

impl CqErrorCause {
    /// The cause a raw syndrome byte names.
    ///
    /// ```
    /// use mlx5_driver::cq::CqErrorCause;
    /// assert_eq!(CqErrorCause::from_syndrome(1), CqErrorCause::Overrun);
    /// assert_eq!(CqErrorCause::from_syndrome(2), CqErrorCause::AccessViolation);
    /// assert_eq!(CqErrorCause::from_syndrome(9), CqErrorCause::Other(9));
    /// ```
    pub const fn from_syndrome(s: u8) -> CqErrorCause {
        match s {
            cq_error_syndrome::CQ_OVERRUN => CqErrorCause::Overrun,
            cq_error_syndrome::CQ_ACCESS_VIOLATION => CqErrorCause::AccessViolation,
            other => CqErrorCause::Other(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::CqeError;

    #[test]
    fn every_syndrome_round_trips() {
        for s in 0..=255u8 {
            assert_eq!(CqeError::from_syndrome(s).syndrome(), s);
        }
        let named = (0..=255u8)
            .filter(|&s| !matches!(CqeError::from_syndrome(s), CqeError::Other(_)))
            .count();
        assert_eq!(named, 13, "the 13 syndromes of cq.h");
    }
}
