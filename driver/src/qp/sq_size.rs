//! The size of a send queue: what the caller asks (`max_send_wr`,
//! `max_send_sge`, `max_inline_data`) turned into a ring of WQEBBs and the
//! capacities reported back, as rdma-core `mlx5_calc_sq_size` /
//! `sq_overhead` and Linux `calc_sq_size` compute them.

use mlx5_regs::consts::wqe;

/// Bytes in a send basic block (`MLX5_SEND_WQE_BB`).
pub const WQEBB: usize = wqe::SEND_WQE_BB;
/// Bytes in a WQE unit (`MLX5_SEND_WQE_DS`).
pub(crate) const UNIT: usize = wqe::SEND_WQE_DS;
/// Units in a WQEBB.
pub(crate) const BB_UNITS: usize = WQEBB / UNIT;
/// Largest WQE in units: `qpn_ds.ds` is 6 bits.
pub const MAX_DS: usize = 63;
/// Bytes of the control, remote-address and atomic segments: the per-WQE
/// overhead for the operations this driver posts (rdma-core `sq_overhead`
/// with `send_ops_flags` SEND, SEND_WITH_IMM, RDMA_WRITE,
/// RDMA_WRITE_WITH_IMM, RDMA_READ, ATOMIC_CMP_AND_SWP and
/// ATOMIC_FETCH_AND_ADD: the atomics' 16 + 16 + 16).
pub const SQ_OVERHEAD: usize = 48;
/// Bytes a send WQE of an RC QP reserves before its data in a plain
/// libmlx5 `ibv_create_qp` (no `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`): the
/// largest operation rdma-core's `sq_overhead` then provides for is the
/// memory-window bind: control (16), UMR control (48), mkey context (64)
/// and 64 more. The facade sizes its RC rings with it so `max_send_wr` and
/// `max_inline_data` read back what libmlx5 reports for the same request.
pub const PLAIN_RC_OVERHEAD: usize = 192;
/// The segments of a UD WQE before its data: control (16) and datagram
/// (48) (rdma-core `sq_overhead` for `IBV_QPT_UD`).
pub const UD_OVERHEAD: usize = 64;
/// Largest send ring: `log_sq_size` is a 4-bit field.
const MAX_LOG_WQEBBS: u8 = 15;

/// What the caller asks a send queue to hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendQueueCaps {
    /// Outstanding work requests (at least 1).
    pub max_send_wr: u32,
    /// Gather entries per work request.
    pub max_send_sge: u32,
    /// Inline bytes per work request.
    pub max_inline_data: u32,
}

impl Default for SendQueueCaps {
    fn default() -> Self {
        SendQueueCaps {
            max_send_wr: 64,
            max_send_sge: 1,
            max_inline_data: 0,
        }
    }
}

/// Why a send queue size was refused (each is `EINVAL` in verbs, ring too
/// large `ENOMEM` as in Linux `calc_sq_size`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SqSizeError {
    /// `max_send_wr` is 0.
    NoWorkRequests,
    /// More gather entries than a WQE of `max_wqe_sz_sq` bytes holds.
    TooManySges,
    /// The WQE would exceed `max_wqe_sz_sq` (or 63 units).
    WqeTooLarge,
    /// The ring would exceed `2^log_max_qp_sz` WQEBBs (or 2^15).
    RingTooLarge,
}

/// The geometry of a send ring, rounded as mlx5 does (rdma-core
/// `mlx5_calc_send_wqe` / `mlx5_calc_sq_size`; Linux `calc_sq_size`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqGeometry {
    /// log2 of the ring size in WQEBBs (`qpc.log_sq_size`).
    pub log_wqebbs: u8,
    /// Bytes reserved per work request: a multiple of 64.
    pub wqe_size: usize,
    /// Work requests that may be outstanding: `ring bytes / wqe_size`.
    pub max_send_wr: u32,
    /// Gather entries a work request may carry (what fits in `wqe_size`,
    /// at least what was asked).
    pub max_send_sge: u32,
    /// Inline bytes a work request may carry (at least what was asked).
    pub max_inline_data: u32,
}

impl SqGeometry {
    /// Size a send ring for `req` on a device whose send WQEs may be
    /// `max_wqe_sz_sq` bytes and whose rings `2^log_max_qp_sz` WQEBBs:
    ///
    /// * overhead 48 bytes (control + remote address + atomic);
    /// * WQE = max(overhead + 16·SGEs, overhead + align16(4 + inline)),
    ///   refused above `max_wqe_sz_sq` (and above 63 units, the `ds` limit),
    ///   then rounded up to 64 bytes;
    /// * ring = roundup_pow2(`max_send_wr` · WQE) bytes; capacity = ring / WQE.
    ///
    /// ```
    /// use mlx5_driver::qp::{SendQueueCaps, SqGeometry};
    /// let g = SqGeometry::for_request(
    ///     &SendQueueCaps { max_send_wr: 10, max_send_sge: 2, max_inline_data: 0 }, 1024, 15).unwrap();
    /// assert_eq!((g.wqe_size, g.wqebbs(), g.max_send_wr, g.max_send_sge), (128, 32, 16, 5));
    /// ```
    pub fn for_request(
        req: &SendQueueCaps,
        max_wqe_sz_sq: u16,
        log_max_qp_sz: u8,
    ) -> Result<SqGeometry, SqSizeError> {
        Self::for_transport(req, false, max_wqe_sz_sq, log_max_qp_sz)
    }

    /// [`SqGeometry::for_request`] for a connected QP (`datagram` false:
    /// 48 bytes of segments before the data) or a UD QP (true: the control
    /// and datagram segments, 64 bytes; rdma-core `sq_overhead`).
    pub fn for_transport(
        req: &SendQueueCaps,
        datagram: bool,
        max_wqe_sz_sq: u16,
        log_max_qp_sz: u8,
    ) -> Result<SqGeometry, SqSizeError> {
        let overhead = if datagram { UD_OVERHEAD } else { SQ_OVERHEAD };
        Self::with_overhead(req, overhead, max_wqe_sz_sq, log_max_qp_sz)
    }

    /// [`SqGeometry::for_request`] with `overhead` bytes of segments
    /// before the data (rdma-core `sq_overhead`: [`SQ_OVERHEAD`] for the
    /// operations this driver posts, [`PLAIN_RC_OVERHEAD`] for what a plain
    /// libmlx5 `create_qp` reserves on RC, 64 bytes on UD). An
    /// overhead below [`SQ_OVERHEAD`] or not a multiple of 16 would not
    /// hold every WQE this driver builds: [`SqSizeError::WqeTooLarge`].
    ///
    /// ```
    /// use mlx5_driver::qp::{SendQueueCaps, SqGeometry, PLAIN_RC_OVERHEAD};
    /// // libmlx5's answer to a plain create_qp of 10 WRs, 1 SGE.
    /// let g = SqGeometry::with_overhead(
    ///     &SendQueueCaps { max_send_wr: 10, max_send_sge: 1, max_inline_data: 0 },
    ///     PLAIN_RC_OVERHEAD, 1024, 15).unwrap();
    /// assert_eq!((g.wqe_size, g.wqebbs(), g.max_send_wr, g.max_inline_data), (256, 64, 16, 60));
    /// ```
    pub fn with_overhead(
        req: &SendQueueCaps,
        overhead: usize,
        max_wqe_sz_sq: u16,
        log_max_qp_sz: u8,
    ) -> Result<SqGeometry, SqSizeError> {
        if overhead < SQ_OVERHEAD || !overhead.is_multiple_of(UNIT) {
            return Err(SqSizeError::WqeTooLarge);
        }
        if req.max_send_wr == 0 {
            return Err(SqSizeError::NoWorkRequests);
        }
        let max_desc = (max_wqe_sz_sq as usize).min(MAX_DS * UNIT);
        let max_gather = max_desc.saturating_sub(overhead) / UNIT;
        if req.max_send_sge as usize > max_gather {
            return Err(SqSizeError::TooManySges);
        }
        let gather = overhead + req.max_send_sge as usize * UNIT;
        let inline = if req.max_inline_data > 0 {
            overhead + (4 + req.max_inline_data as usize).next_multiple_of(UNIT)
        } else {
            0
        };
        let total = gather.max(inline);
        if total > max_desc {
            return Err(SqSizeError::WqeTooLarge);
        }
        let wqe_size = total.next_multiple_of(WQEBB);
        let ring = (req.max_send_wr as u64 * wqe_size as u64).next_power_of_two();
        let wqebbs = ring / WQEBB as u64;
        let limit = log_max_qp_sz.min(MAX_LOG_WQEBBS);
        if wqebbs > 1u64 << limit {
            return Err(SqSizeError::RingTooLarge);
        }
        // What a WQE of `wqe_size` bytes really holds (never beyond 63 units).
        let usable = wqe_size.min(MAX_DS * UNIT);
        Ok(SqGeometry {
            log_wqebbs: wqebbs.trailing_zeros() as u8,
            wqe_size,
            max_send_wr: (ring / wqe_size as u64) as u32,
            max_send_sge: ((usable - overhead) / UNIT) as u32,
            // A WQE of only the overhead holds no inline data (rdma-core's
            // `wqe_size - sq_overhead - 4` goes negative there).
            max_inline_data: usable.saturating_sub(overhead + 4) as u32,
        })
    }

    /// Ring size in WQEBBs: also the length the caller's [`SendSlot`](super::SendSlot) table
    /// must have.
    pub const fn wqebbs(&self) -> usize {
        1 << self.log_wqebbs
    }

    /// Ring size in bytes.
    pub const fn bytes(&self) -> usize {
        self.wqebbs() * WQEBB
    }
}
