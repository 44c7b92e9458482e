//! The SRQ verbs: create, modify (limit), query, post, destroy.

use mlx5_hal::Hal;

use super::{
    AsyncEvent, AsyncEventType, CqHandle, Errno, EventElement, PostSrqError, RecvWr, SrqAttr,
    SrqAttrMask, SrqHandle, SrqInitAttr, Verbs,
};
use crate::cq::CqOptions;
use crate::srq::{LimitArm, Srq};
use crate::stats::CmdObserver;

#[derive(Debug, Clone, Copy, Default)]
pub(super) struct SrqBook {
    /// The CQ given at creation.
    pub(super) cq: Option<CqHandle>,
    /// SRQ_ERR seen: posts fail with EIO.
    pub(super) error: bool,
    /// QPs attached (`usecnt`).
    pub(super) qp_users: u32,
    pub(super) async_reported: u32,
    pub(super) async_acked: u32,
}

pub(super) struct SrqEntry<H: Hal> {
    pub(super) srq: Srq<H>,
    pub(super) book: SrqBook,
}

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
    // ------------------------------------------------------------ SRQs

    /// `ibv_create_srq`: `max_wr` in 1..=`max_srq_wr`, `max_sge` up to
    /// `max_srq_sge`, else `EINVAL`. Returns the handle and the actual
    /// attributes after rounding; the limit is not armed (`srq_limit` reads
    /// 0). An RMP at ISSI 1; at ISSI 0 an SRQ whose context names
    /// `attr.cq` or the internal CQ.
    pub fn create_srq(&mut self, attr: &SrqInitAttr) -> Result<(SrqHandle, SrqAttr), Errno> {
        let dev = self.query_device();
        if attr.max_wr == 0 || attr.max_wr > dev.max_srq_wr || attr.max_sge > dev.max_srq_sge {
            return Err(Errno::EINVAL);
        }
        if let Some(h) = attr.cq {
            self.cq_entry(h)?;
        }
        if self.srqs.len() >= SRQS {
            return Err(Errno::ENOMEM);
        }
        let srq = if self.hca.issi() == 0 {
            let cq = match attr.cq {
                Some(h) => &mut self.cqs.get_mut(h.0).ok_or(Errno::EINVAL)?.cq,
                None => {
                    if self.internal_cq.is_none() {
                        self.internal_cq = Some(self.hca.create_cq(1, CqOptions::default())?);
                    }
                    self.internal_cq.as_mut().ok_or(Errno::EINVAL)?
                }
            };
            self.hca.create_srq(attr.max_wr, attr.max_sge, Some(cq))?
        } else {
            self.hca.create_srq(attr.max_wr, attr.max_sge, None)?
        };
        let out = SrqAttr {
            max_wr: srq.max_wr() as u32,
            max_sge: srq.max_sge() as u32,
            srq_limit: 0,
        };
        let entry = SrqEntry {
            srq,
            book: SrqBook {
                cq: attr.cq,
                ..SrqBook::default()
            },
        };
        let srqn = entry.srq.srqn();
        match self.srqs.insert(entry) {
            Ok(k) => {
                self.srqns.insert(srqn, k);
                if let Some(c) = attr.cq.and_then(|h| self.cqs.get_mut(h.0)) {
                    c.book.srq_users += 1;
                }
                Ok((SrqHandle(k), out))
            }
            Err(entry) => {
                // Not reached (checked above); undo rather than leak.
                let cq = match (entry.srq.cqn().is_some(), attr.cq) {
                    (false, _) => None,
                    (true, Some(h)) => self.cqs.get_mut(h.0).map(|c| &mut c.cq),
                    (true, None) => self.internal_cq.as_mut(),
                };
                let _ = self.hca.destroy_srq(entry.srq, cq);
                Err(Errno::ENOMEM)
            }
        }
    }

    /// The SRQ number (`ibv_get_srq_num`); receive CQEs carry it.
    pub fn srq_num(&self, srq: SrqHandle) -> Result<u32, Errno> {
        Ok(self.srq_entry(srq)?.srq.srqn())
    }

    /// The driver's SRQ object (read-only: geometry, ring, counters).
    pub fn srq(&self, srq: SrqHandle) -> Result<&Srq<H>, Errno> {
        Ok(&self.srq_entry(srq)?.srq)
    }

    /// `ibv_modify_srq` (docs/firmware.md §9.5, §9.6). [`SrqAttrMask::LIMIT`] arms the
    /// limit event with `attr.srq_limit` (0 disarms; a new value replaces
    /// the old; above the SRQ's `max_wr`: `EINVAL`). If the limit is above
    /// the work requests outstanding the event is delivered at once.
    /// [`SrqAttrMask::MAX_WR`] is refused with `EINVAL` as on mlx5, and a
    /// mask holding it (or an unknown bit) is refused as a whole: on any
    /// failure the SRQ is unchanged.
    pub fn modify_srq(
        &mut self,
        srq: SrqHandle,
        attr: &SrqAttr,
        mask: SrqAttrMask,
    ) -> Result<(), Errno> {
        let e = self.srqs.get_mut(srq.0).ok_or(Errno::EINVAL)?;
        let known = SrqAttrMask::MAX_WR | SrqAttrMask::LIMIT;
        if mask.0 & !known.0 != 0 || mask.contains(SrqAttrMask::MAX_WR) {
            return Err(Errno::EINVAL);
        }
        if !mask.contains(SrqAttrMask::LIMIT) {
            return Ok(());
        }
        if attr.srq_limit as usize > e.srq.max_wr() {
            return Err(Errno::EINVAL);
        }
        if self.hca.arm_srq_limit(&mut e.srq, attr.srq_limit)? == LimitArm::RaiseNow {
            // Firmware did not fire although the limit is above what is
            // outstanding; the driver disarmed it, the event is ours to give.
            self.push_event(AsyncEvent {
                event_type: AsyncEventType::SrqLimitReached,
                element: EventElement::Srq(srq),
                detail: super::AsyncEventDetail::None,
            });
        }
        Ok(())
    }

    /// `ibv_query_srq`: the actual `max_wr` and `max_sge`, and the limit as
    /// firmware holds it (0 when disarmed or after the limit event).
    pub fn query_srq(&self, srq: SrqHandle) -> Result<SrqAttr, Errno> {
        let e = self.srq_entry(srq)?;
        let state = self.hca.query_srq(&e.srq)?;
        Ok(SrqAttr {
            max_wr: e.srq.max_wr() as u32,
            max_sge: e.srq.max_sge() as u32,
            srq_limit: state.lwm as u32,
        })
    }

    /// `ibv_post_srq_recv`: post the list in order. On the first failure
    /// (`ENOMEM` full, `EINVAL` too many scatter entries, `EIO` SRQ in
    /// error or the device dead — then at the first request, as
    /// `mlx5_ib_post_srq_recv`) the error names the request; the ones
    /// before it stay posted. A slot is free again only once its
    /// completion was polled.
    #[inline(always)]
    pub fn post_srq_recv(
        &mut self,
        srq: SrqHandle,
        wrs: &[RecvWr<'_>],
    ) -> Result<(), PostSrqError> {
        let fail = |index, errno| PostSrqError { index, errno };
        // The checks in post_send's order: nothing to post, a dead device
        // (EIO at the first request, as mlx5_ib_post_srq_recv), the handle.
        if wrs.is_empty() {
            return Ok(());
        }
        if self.hca.is_dead() {
            return Err(fail(0, Errno::EIO));
        }
        let e = self.srqs.get_mut(srq.0).ok_or(fail(0, Errno::EINVAL))?;
        if e.book.error {
            return Err(fail(0, Errno::EIO));
        }
        self.hca
            .post_srq_recv(&mut e.srq, wrs)
            .map_err(|f| fail(f.index, Errno(f.error.errno())))
    }

    /// `ibv_destroy_srq`. `EBUSY`, nothing changed: a QP is attached (ib
    /// core's `usecnt`), or an async event of the SRQ was read and not
    /// acknowledged (libibverbs would block forever).
    /// Unread events of the SRQ are discarded, and its completions still in
    /// this context's CQs are removed (firmware reuses the SRQ number; left
    /// there they would complete a WQE of the SRQ that gets it next). On a
    /// dead device the destroy succeeds and frees the SRQ (Linux).
    pub fn destroy_srq(&mut self, srq: SrqHandle) -> Result<(), Errno> {
        let b = self.srq_entry(srq)?.book;
        if b.qp_users > 0 || b.async_reported != b.async_acked {
            return Err(Errno::EBUSY);
        }
        let e = self.srqs.take(srq.0).ok_or(Errno::EINVAL)?;
        let srqn = e.srq.srqn();
        let cq = match (e.srq.cqn().is_some(), b.cq) {
            (false, _) => None,
            (true, Some(h)) => self.cqs.get_mut(h.0).map(|c| &mut c.cq),
            (true, None) => self.internal_cq.as_mut(),
        };
        match self.hca.destroy_srq(e.srq, cq) {
            Ok(()) => {
                self.srqs.retire(srq.0);
                self.srqns.remove(srqn);
                if let Some(c) = b.cq.and_then(|h| self.cqs.get_mut(h.0)) {
                    c.book.srq_users = c.book.srq_users.saturating_sub(1);
                }
                for (_, c) in self.cqs.iter_mut() {
                    c.cq.discard_srq(srqn);
                }
                if let Some(c) = self.internal_cq.as_mut() {
                    c.discard_srq(srqn);
                }
                self.purge_events(EventElement::Srq(srq));
                Ok(())
            }
            Err(failed) => {
                let (back, err) = failed.into_parts();
                self.srqs.restore(srq.0, SrqEntry { srq: back, book: b });
                Err(err.into())
            }
        }
    }
}
