//! Reading a CQ ring in one go ([`CqRing::read`]): the ring's geometry and
//! the consumer index in locals for the length of a poll call.
//!
//! A poll loop reads the owner byte with a volatile load and then issues a
//! read barrier, and the compiler must assume either may change any memory
//! it cannot see is private: it reloads the ring's base, mask and shift
//! from the `CqRing` for every CQE. A [`CqReader`] is a copy of them (and
//! of the consumer index) made once, so they stay in registers; the
//! consumer index is stored back when the read ends, and the caller
//! publishes it once per call, as rdma-core's `mlx5_poll_cq` updates the
//! doorbell record once per call (`providers/mlx5/cq.c`).

use mlx5_hal::{barrier, Hal, RingView};

use super::cqe::off;
use super::{sw_owned_byte, CqRing, CqeView};

/// The CQEs of one read of the ring (`Cq::read`): takes them in order, each only if
/// software owns it.
pub struct CqReader<'a> {
    ring: RingView<'a, 64>,
    /// `log2` of the ring's entries: the owner bit of index `ci` is bit
    /// `log` of `ci`.
    log: u32,
    /// The consumer index as this read has moved it.
    ci: u32,
}

impl<'a> CqReader<'a> {
    /// The CQE at the consumer index if software owns it, after the read
    /// barrier that orders its body after the owner byte (docs/firmware.md
    /// §5); `None` when the device has not written it yet. Does not take it.
    #[inline(always)]
    pub fn peek(&self) -> Option<CqeView<'a>> {
        let w = self.ring.entry(self.ci);
        let op_own = w.read_u8::<{ off::OP_OWN }>();
        if !sw_owned_byte(op_own, (self.ci >> self.log) as u8 & 1) {
            return None;
        }
        barrier::dma_rmb();
        Some(CqeView::new(w, op_own))
    }

    /// Take the next CQE if software owns it: the consumer index moves past
    /// it.
    #[inline(always)]
    pub fn take(&mut self) -> Option<CqeView<'a>> {
        self.take_if(Some)
    }

    /// [`CqReader::take_if`] for the CQE `w` found waiting, without
    /// reading its owner byte again: `w` was made by [`CqRing::waiting`]
    /// at this reader's consumer index, which `w` carries. A `w` made at
    /// any other index is declined (`None`, nothing taken); it cannot
    /// name a CQE software has not seen owned since the index last moved.
    #[inline(always)]
    pub fn take_waiting_if<R>(
        &mut self,
        w: WaitingCqe,
        f: impl FnOnce(CqeView<'a>) -> Option<R>,
    ) -> Option<R> {
        if w.ci != self.ci {
            return None;
        }
        // Ownership was seen when `w` was made; the body is read after it.
        // The owner byte is read again for its opcode (keeping it in `w`
        // cost the empty poll a register copy): the device does not write
        // a CQE software owns, and whatever byte is read here goes through
        // the same checks as any CQE's.
        barrier::dma_rmb();
        let e = self.ring.entry(self.ci);
        let op_own = e.read_u8::<{ off::OP_OWN }>();
        self.accept(CqeView::new(e, op_own), f)
    }

    /// Take the next CQE only if software owns it and `f` accepts it
    /// (returns `Some`): a CQE `f` declines stays where it is, for the next
    /// `take` or `take_if` to see again.
    #[inline(always)]
    pub fn take_if<R>(&mut self, f: impl FnOnce(CqeView<'a>) -> Option<R>) -> Option<R> {
        let v = self.peek()?;
        self.accept(v, f)
    }

    /// Hand the owned CQE `v` (at the consumer index) to `f`; the index
    /// moves past it only if `f` accepts it.
    #[inline(always)]
    fn accept<R>(&mut self, v: CqeView<'a>, f: impl FnOnce(CqeView<'a>) -> Option<R>) -> Option<R> {
        let r = f(v)?;
        self.ci = self.ci.wrapping_add(1);
        Some(r)
    }

    /// The consumer index as this read has moved it (not yet published).
    #[inline(always)]
    pub fn consumer_index(&self) -> u32 {
        self.ci
    }
}

/// A CQE found software-owned at the consumer index by
/// [`CqRing::waiting`]: the index it was found at, so a poll that checked
/// ownership to return early on an empty CQ need not check it again
/// ([`CqReader::take_waiting_if`]). Not `Clone`: it is spent on one take.
#[derive(Debug)]
pub struct WaitingCqe {
    ci: u32,
}

impl<H: Hal> CqRing<H> {
    /// The CQE at the consumer index if software owns it: one load of the
    /// owner byte and a compare (the ring's `has_next`), remembered for the
    /// read that takes the CQE.
    #[inline(always)]
    pub fn waiting(&self) -> Option<WaitingCqe> {
        let op_own = self.buf.read_cursor_u8();
        if !sw_owned_byte(op_own, self.next_pass) {
            return None;
        }
        Some(WaitingCqe {
            ci: self.consumer_index,
        })
    }

    /// Read CQEs through a [`CqReader`] handed to `f`, then store the
    /// consumer index it reached. Like [`CqRing::pop`] it does not publish
    /// the index: call [`CqRing::update_doorbell`] once per batch, after
    /// every CQE of it was read. Returns `f`'s result and whether the index
    /// moved.
    #[inline(always)]
    pub fn read<R>(&mut self, f: impl FnOnce(&mut CqReader<'_>) -> R) -> (R, bool) {
        let mut rd = self.reader();
        let r = f(&mut rd);
        let ci = rd.ci;
        let moved = ci != self.consumer_index;
        if moved {
            self.set_ci(ci);
        }
        (r, moved)
    }

    /// A reader at the consumer index.
    #[inline(always)]
    pub(super) fn reader(&self) -> CqReader<'_> {
        CqReader {
            ring: self.buf.view(),
            log: self.log_nent as u32,
            ci: self.consumer_index,
        }
    }
}

/// A pass that keeps its own consumer index (the lazy extended-CQ API,
/// `verbs::CqPoll`): the CQEs it takes are read where they lie until the
/// pass ends, and the index is stored and published once
/// (`end_pass`), as `ibv_end_poll` publishes it.
impl<H: Hal> CqRing<H> {
    /// The CQE at running index `ci` if software owns it, after the read
    /// barrier that orders its body after the owner byte (the same test
    /// as [`CqReader::peek`]).
    #[inline(always)]
    pub(crate) fn peek_at(&self, ci: u32) -> Option<CqeView<'_>> {
        CqReader {
            ring: self.buf.view(),
            log: self.log_nent as u32,
            ci,
        }
        .peek()
    }

    /// The CQE at running index `ci`, which this pass took
    /// ([`CqRing::peek_at`]): software owns it until the pass publishes
    /// an index past it, so its fields are read in place, without another
    /// ownership test.
    #[inline(always)]
    pub(crate) fn taken_at(&self, ci: u32) -> CqeView<'_> {
        let w = self.buf.view().entry(ci);
        let op_own = w.read_u8::<{ off::OP_OWN }>();
        CqeView::new(w, op_own)
    }

    /// End a pass that reached running index `ci`: the consumer index
    /// moves there and is published, after the reads of the CQEs taken;
    /// nothing happens when the pass took nothing.
    #[inline(always)]
    pub(crate) fn end_pass(&mut self, dbr: &super::DoorbellRecord<H>, ci: u32) {
        if ci != self.consumer_index {
            self.set_ci(ci);
            self.update_doorbell(dbr);
        }
    }
}
