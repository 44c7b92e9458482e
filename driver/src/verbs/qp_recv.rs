//! `ibv_post_recv`: receive work requests on a QP's own receive queue
//! (rdma-core `providers/mlx5/qp.c` `mlx5_post_recv`; `ibv_post_recv(3)`).

use mlx5_hal::Hal;

use super::{Errno, PostRecvError, QpHandle, RecvWr, Verbs};
use crate::stats::CmdObserver;

impl<
        H: Hal,
        O: CmdObserver,
        const CQS: usize,
        const SRQS: usize,
        const EVENTS: usize,
        const QPS: usize,
        const SQ_WQEBBS: usize,
    > Verbs<H, O, CQS, SRQS, EVENTS, QPS, SQ_WQEBBS>
{
    /// `ibv_post_recv`: post the list in order to the QP's own receive
    /// queue, published with one store of the doorbell record's receive
    /// counter. On the first refusal the error names it (`bad_wr`) and the
    /// ones before it stay posted: `ENOMEM` when `max_recv_wr` requests
    /// are outstanding, `EINVAL` for more scatter entries than
    /// `max_recv_sge` (as `mlx5_post_recv`). `EINVAL` at the first request,
    /// nothing posted: a stale handle, a QP on an SRQ (post to the SRQ,
    /// `ibv_post_recv(3)`) or without a receive queue. `EIO` at the first
    /// request on a dead device. Any QP state is accepted, as libmlx5
    /// does: requests wait for RTR, and in ERR they complete flushed.
    /// Zero-length scatter entries are skipped.
    #[inline(always)]
    pub fn post_recv(&mut self, qp: QpHandle, wrs: &[RecvWr<'_>]) -> Result<(), PostRecvError> {
        let fail = |index, errno| PostRecvError { index, errno };
        let e = self.qps.get_mut(qp.0).ok_or(fail(0, Errno::EINVAL))?;
        self.hca
            .post_recv(&mut e.qp, wrs)
            .map_err(|f| fail(f.index, Errno(f.error.errno())))
    }
}
