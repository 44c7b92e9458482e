//! A send ring's completer: the ring's retire state in registers for a
//! run of requester CQEs that a poll loop has already matched to this QP
//! (the CQ's cached route), as rdma-core's `mlx5_poll_one` keeps the
//! current QP across a batch (`providers/mlx5/cq.c`). It takes only what
//! succeeds: anything else is left for [`super::SendRing::complete`]'s
//! general way, which refuses and counts it.

use super::{SendRing, SendSlot};
use crate::qp::{Qp, SendOpcode};
use mlx5_hal::Hal;

/// The retire state of one send ring, borrowed for a run of CQEs
/// ([`Qp::send_completer`]); the tail is stored back when it is dropped.
pub(crate) struct SendCompleter<'a> {
    slots: &'a [SendSlot],
    /// `wqebbs - 1`: a WQE counter masked to its slot.
    bb_mask: usize,
    /// Work requests posted (free-running; nothing is posted during the run).
    head: u32,
    /// Work requests retired, as this run has moved it.
    tail: u32,
    home: &'a mut u32,
}

impl SendCompleter<'_> {
    /// Retire the request whose WQE starts at `wqe_counter` (and the
    /// unsignaled ones before it) if it is outstanding and was posted with
    /// send opcode `opcode` (the CQE's `sop_drop_qpn` top byte): its
    /// `wr_id` and opcode. Otherwise `None`, with nothing changed. The
    /// checks are [`SendRing::complete`]'s and the opcode check of
    /// [`Qp::complete_send`] for a successful CQE.
    #[inline(always)]
    pub(crate) fn try_complete(
        &mut self,
        wqe_counter: u16,
        opcode: u8,
    ) -> Option<(u64, SendOpcode)> {
        let s = self.slots.get(wqe_counter as usize & self.bb_mask)?;
        let age = s.seq.wrapping_sub(self.tail);
        if s.index != wqe_counter || age >= self.head.wrapping_sub(self.tail) || s.opcode != opcode
        {
            return None;
        }
        self.tail = s.seq.wrapping_add(1);
        Some((s.wr_id, s.opcode()))
    }
}

impl Drop for SendCompleter<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        *self.home = self.tail;
    }
}

impl<H: Hal> SendRing<H> {
    /// This ring's completer over `slots` (its request table).
    #[inline(always)]
    fn completer<'a>(&'a mut self, slots: &'a [SendSlot]) -> SendCompleter<'a> {
        SendCompleter {
            slots,
            bb_mask: self.bb_mask,
            head: self.head,
            tail: self.tail,
            home: &mut self.tail,
        }
    }
}

impl<H: Hal, T: AsMut<[SendSlot]>> Qp<H, T> {
    /// The send ring's completer, for requester CQEs already matched to
    /// this QP (its number, this QP's send CQ); `None` without a send
    /// queue. Successful completions do not change the QP's state, so
    /// nothing else of the QP is needed.
    #[inline(always)]
    pub(crate) fn send_completer(&mut self) -> Option<SendCompleter<'_>> {
        let Qp { sq, slots, .. } = self;
        Some(sq.as_mut()?.completer(slots.as_mut()))
    }
}
