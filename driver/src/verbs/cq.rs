//! The CQ verbs: create, resize, destroy, completion events, poll.

use mlx5_hal::Hal;

use super::poll::{RecvRun, SendRun};
use super::{ChannelHandle, CqHandle, Errno, EventElement, Verbs};
use crate::cq::{Cq, CqOptions};
use crate::stats::CmdObserver;

/// Verbs bookkeeping of a CQ (copyable so a failed destroy can restore it).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct CqBook {
    /// SRQs created with this CQ (`usecnt`).
    pub(super) srq_users: u32,
    /// QPs using this CQ, once per role: send CQ, receive CQ (`usecnt`).
    pub(super) qp_users: u32,
    /// Completion events taken from the EQ, not yet read.
    pub(super) events_pending: u32,
    /// Order of the oldest pending event among all CQs.
    pub(super) pending_seq: u64,
    /// Completion events read with `get_cq_event` (`comp_events_reported`).
    pub(super) events_reported: u32,
    /// Completion events acknowledged (`comp_events_completed`).
    pub(super) events_acked: u32,
    /// Async events read / acknowledged.
    pub(super) async_reported: u32,
    pub(super) async_acked: u32,
    /// The channel its completion events go to (`None`: nowhere).
    pub(super) channel: Option<ChannelHandle>,
    /// The caller's `cq_context`.
    pub(super) context: u64,
    /// `IBV_WC_EX_WITH_*`: the fields the lazy poll reads from each CQE
    /// ([`super::CqInitAttrEx::wc_flags`]; the standard ones for
    /// [`Verbs::create_cq`]).
    pub(super) wc_flags: u64,
}

pub(super) struct CqEntry<H: Hal> {
    pub(super) cq: Cq<H>,
    pub(super) book: CqBook,
    /// The route of the last receive `poll_cq` matched on this CQ, tried
    /// first for the next CQEs (cleared when a QP's CQEs are cleaned).
    pub(super) last_recv: RecvRun,
    /// The QP of the last requester CQE `poll_cq` matched on this CQ,
    /// tried first for the next (cleared when a QP's CQEs are cleaned).
    pub(super) last_send: SendRun,
}

impl<H: Hal> CqEntry<H> {
    /// An entry with no receive matched yet.
    pub(super) fn new(cq: Cq<H>, book: CqBook) -> Self {
        CqEntry {
            cq,
            book,
            last_recv: RecvRun::NONE,
            last_send: SendRun::NONE,
        }
    }
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
    // ------------------------------------------------------------ CQs

    /// `ibv_create_cq`: a CQ of at least `cqe` entries (1..=`max_cqe`, else
    /// `EINVAL`) on completion vector 0, delivering its completion events
    /// to the context's channel ([`Verbs::context_comp_channel`], read by
    /// [`Verbs::get_cq_event`]). Returns the handle and the actual number
    /// of entries, `2^k − 1` (mlx5 rounds `cqe + 1` up to a power of two).
    /// `ENOMEM` when the table or DMA memory is exhausted.
    /// [`Verbs::create_cq_ex`] takes a channel (or none), a `cq_context`,
    /// a vector and flags.
    pub fn create_cq(&mut self, cqe: u32) -> Result<(CqHandle, u32), Errno> {
        if cqe == 0 || cqe > self.hca.caps().max_cqe() {
            return Err(Errno::EINVAL);
        }
        let book = CqBook {
            channel: Some(self.context_comp_channel()),
            wc_flags: super::CqInitAttrEx::WC_STANDARD_FLAGS,
            ..CqBook::default()
        };
        self.create_cq_with(cqe, CqOptions::default(), book)
    }

    /// The CQ's current number of entries (`cq->cqe`).
    pub fn cqe(&self, cq: CqHandle) -> Result<u32, Errno> {
        Ok(self.cq_entry(cq)?.cq.capacity())
    }

    /// The driver's CQ object (read-only: geometry, ring, consumer index).
    pub fn cq(&self, cq: CqHandle) -> Result<&Cq<H>, Errno> {
        Ok(&self.cq_entry(cq)?.cq)
    }

    /// The CQ number firmware assigned.
    pub fn cq_num(&self, cq: CqHandle) -> Result<u32, Errno> {
        Ok(self.cq_entry(cq)?.cq.cqn())
    }

    /// `ibv_resize_cq` (docs/firmware.md §8): at least `cqe` entries; returns the
    /// actual number. Unpolled completions are kept in order; an armed CQ
    /// stays armed. A size that rounds to the current one succeeds without a
    /// command. `EINVAL`: `cqe` outside 1..=`max_cqe`, or fewer entries than
    /// the completions now in the CQ (firmware status 0x40). `ENOMEM`: no
    /// memory for the new ring. `ENOSYS`: no `cq_resize` capability. After a
    /// failure the CQ is exactly as it was.
    pub fn resize_cq(&mut self, cq: CqHandle, cqe: u32) -> Result<u32, Errno> {
        if cqe == 0 || cqe > self.hca.caps().max_cqe() {
            return Err(Errno::EINVAL);
        }
        let e = self.cqs.get_mut(cq.0).ok_or(Errno::EINVAL)?;
        let current = e.cq.capacity();
        if (cqe as u64 + 1).next_power_of_two() == current as u64 + 1 {
            return Ok(current);
        }
        self.hca.resize_cq(&mut e.cq, cqe)?;
        Ok(e.cq.capacity())
    }

    /// `ibv_destroy_cq`. Unpolled completions and a pending arm do not
    /// prevent it. `EBUSY`, nothing changed, the CQ keeps working: an SRQ
    /// was created with this CQ or a QP uses it (ib core's `usecnt`); or a
    /// completion event or async event of it was read and not acknowledged
    /// (libibverbs would block forever here).
    /// Unread events of the CQ are discarded with it.
    pub fn destroy_cq(&mut self, cq: CqHandle) -> Result<(), Errno> {
        let b = self.cq_entry(cq)?.book;
        if b.srq_users > 0
            || b.qp_users > 0
            || b.events_reported != b.events_acked
            || b.async_reported != b.async_acked
        {
            return Err(Errno::EBUSY);
        }
        let e = self.cqs.take(cq.0).ok_or(Errno::EINVAL)?;
        match self.hca.destroy_cq(e.cq) {
            Ok(()) => {
                self.cqs.retire(cq.0);
                self.unbind_channel(e.book.channel);
                self.purge_events(EventElement::Cq(cq));
                Ok(())
            }
            Err(failed) => {
                let (back, err) = failed.into_parts();
                self.cqs.restore(cq.0, CqEntry::new(back, e.book));
                Err(err.into())
            }
        }
    }

    /// `ibv_req_notify_cq`: one completion event for the next completion
    /// (`solicited_only`: the next solicited or error completion), through
    /// [`crate::Hca::arm_cq`], which keeps the arm sequence number in step
    /// with the CQ's events (libmlx5's `mlx5_cq_event` bookkeeping, done by
    /// the driver). Pending events are routed to their CQs first.
    pub fn req_notify_cq(&mut self, cq: CqHandle, solicited_only: bool) -> Result<(), Errno> {
        self.cq_entry(cq)?;
        self.pump()?;
        let e = self.cqs.get_mut(cq.0).ok_or(Errno::EINVAL)?;
        self.hca.arm_cq(&mut e.cq, solicited_only)?;
        Ok(())
    }

    /// `ibv_ack_cq_events`: acknowledge `n` events of `cq` (they may be
    /// acknowledged in one call). Acknowledging more than were read is
    /// `EINVAL` and changes nothing (libibverbs returns nothing and its
    /// destroy would then hang).
    pub fn ack_cq_events(&mut self, cq: CqHandle, n: u32) -> Result<(), Errno> {
        let e = self.cqs.get_mut(cq.0).ok_or(Errno::EINVAL)?;
        let unacked = e.book.events_reported.wrapping_sub(e.book.events_acked);
        if n > unacked {
            return Err(Errno::EINVAL);
        }
        e.book.events_acked = e.book.events_acked.wrapping_add(n);
        Ok(())
    }
}
