//! `ibv_poll_cq`: CQEs to work completions. Each CQE finds its QP (by QPN)
//! or SRQ (by SRQN) in a map, in a probe or two: no scan of the tables.

use mlx5_hal::Hal;
use mlx5_regs::CqeOpcode;

use super::numap::NumMap;
use super::qp::QpEntry;
use super::table::Table;
use super::{CqHandle, Errno, SrqEntry, Verbs, VerbsStats, WcOpcode, WcStatus, WorkCompletion};
use crate::cq::{Cqe, CqeStatus};
use crate::qp::{BadSendCqe, SendOpcode};
use crate::srq::BadRecvCqe;
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
    /// `ibv_poll_cq`: up to `wc.len()` completions, oldest first; returns
    /// how many.
    ///
    /// * A send completion's `wr_id` is the work request's, from its QP's
    ///   send table; `opcode` is `Send` or `RdmaWrite` as posted, also for
    ///   errors and flushes. A signaled completion also retires the
    ///   unsignaled requests before it, which report nothing.
    /// * A receive completion's `wr_id` comes from the SRQ slot the CQE
    ///   names, which is free again from here on.
    /// * A CQE the facade cannot match to a posted work request (unknown QP
    ///   or SRQ, a CQ the QP does not use, a WQE not outstanding, an
    ///   unexpected opcode, more bytes than the buffers posted) becomes a
    ///   `GeneralErr` completion with
    ///   [`WorkCompletion::VENDOR_ERR_UNMATCHED`] (`wr_id` 0, or the
    ///   request's when the device did consume it) and is counted in
    ///   [`VerbsStats::unmatched_cqes`].
    ///
    /// An empty CQ costs the handle check and one owner-byte check, inlined
    /// into the caller (a busy-polling loop's common case); the rest is out
    /// of line. Each CQE is decoded straight into the caller's slot and the
    /// doorbell record is written once per call.
    #[inline(always)]
    pub fn poll_cq(&mut self, cq: CqHandle, wc: &mut [WorkCompletion]) -> Result<usize, Errno> {
        let e = self.cqs.get(cq.0).ok_or(Errno::EINVAL)?;
        if !e.cq.has_next() {
            return Ok(0);
        }
        // Out of line with four register arguments: the empty path above
        // needs no stack frame.
        Ok(self.poll_busy(cq, wc))
    }

    /// `poll_cq` once a CQE is waiting: each decoded straight into the
    /// caller's next slot.
    #[inline(never)]
    fn poll_busy(&mut self, cq: CqHandle, wc: &mut [WorkCompletion]) -> usize {
        let Verbs {
            cqs,
            srqs,
            qps,
            qpns,
            srqns,
            stats,
            ..
        } = self;
        let Some(e) = cqs.get_mut(cq.0) else {
            return 0;
        };
        let mut m = Matcher {
            cq,
            qps,
            qpns,
            srqs,
            srqns,
            stats,
        };
        let mut slots = wc.iter_mut();
        e.cq.poll_each(slots.len(), |c| {
            if let Some(s) = slots.next() {
                m.translate(c, s);
            }
        })
    }
}

/// What matching a CQE needs, borrowed from the context.
struct Matcher<'a, H: Hal, const QPS: usize, const W: usize, const SRQS: usize> {
    cq: CqHandle,
    qps: &'a mut Table<QpEntry<H, W>, QPS>,
    qpns: &'a NumMap<QPS>,
    srqs: &'a mut Table<SrqEntry<H>, SRQS>,
    srqns: &'a NumMap<SRQS>,
    stats: &'a mut VerbsStats,
}

impl<H: Hal, const QPS: usize, const W: usize, const SRQS: usize> Matcher<'_, H, QPS, W, SRQS> {
    /// One CQE as a work completion, written into `out`. The common case
    /// (a successful completion that matches) is straight-line; error
    /// statuses and unmatched CQEs are finished out of line.
    #[inline(always)]
    fn translate(&mut self, c: &Cqe, out: &mut WorkCompletion) {
        // Straight into the caller's slot: no completion staged on the
        // stack and copied.
        *out = WorkCompletion {
            qp_num: c.qpn,
            byte_len: c.byte_len,
            ..WorkCompletion::EMPTY
        };
        let matched = if c.is_requester() {
            self.send(c, out)
        } else {
            self.recv(c, out)
        };
        if let CqeStatus::Error {
            syndrome,
            vendor_syndrome,
        } = c.status
        {
            error_status(out, syndrome, vendor_syndrome);
        }
        if !matched {
            unmatched(self.stats, out);
        }
    }

    /// A requester CQE: its QP (on this CQ as the send CQ) retires the
    /// request. False when it does not match; `wc.wr_id` is then the
    /// request's when the device did consume it, else 0.
    #[inline(always)]
    fn send(&mut self, c: &Cqe, wc: &mut WorkCompletion) -> bool {
        let qp = self.qpns.get(c.qpn).and_then(|k| self.qps.get_mut(k));
        let Some(e) = qp.filter(|e| e.book.send_cq == self.cq) else {
            return false;
        };
        match e.qp.complete_send(c) {
            Ok(s) => {
                wc.wr_id = s.wr_id;
                wc.opcode = match s.opcode {
                    SendOpcode::Send | SendOpcode::SendImm => WcOpcode::Send,
                    SendOpcode::RdmaWrite | SendOpcode::RdmaWriteImm => WcOpcode::RdmaWrite,
                };
                true
            }
            Err(BadSendCqe::OpcodeMismatch { wr_id, .. }) => {
                wc.wr_id = wr_id;
                false
            }
            Err(_) => false,
        }
    }

    /// A responder CQE: its QP (on this CQ as the receive CQ, through its
    /// SRQ), or the SRQ it names when no QP of this context names it,
    /// frees the WQE and gives its `wr_id`. False when it does not match.
    #[inline(always)]
    fn recv(&mut self, c: &Cqe, wc: &mut WorkCompletion) -> bool {
        wc.opcode = match c.opcode {
            CqeOpcode::RESP_SEND | CqeOpcode::RESP_ERR => WcOpcode::Recv,
            CqeOpcode::RESP_SEND_IMM => {
                wc.imm_data = Some(c.imm);
                WcOpcode::Recv
            }
            CqeOpcode::RESP_SEND_INV => {
                wc.invalidated_rkey = Some(c.imm);
                WcOpcode::Recv
            }
            CqeOpcode::RESP_WR_IMM => {
                wc.imm_data = Some(c.imm);
                WcOpcode::RecvRdmaWithImm
            }
            _ => return false,
        };
        wc.srq_num = Some(c.srqn);
        let r = match self.qpns.get(c.qpn).and_then(|k| self.qps.get_mut(k)) {
            // A QP of this context: on its receive CQ, through its SRQ.
            Some(e) => {
                let srq = e
                    .book
                    .srq
                    .filter(|_| e.book.recv_cq == self.cq)
                    .and_then(|h| self.srqs.get_mut(h.0));
                match srq {
                    Some(s) => e.qp.complete_recv(&mut s.srq, c),
                    None => return false,
                }
            }
            // No QP of this context names it (a message injected by a
            // test, say): the SRQ it names.
            None => match self.srqns.get(c.srqn).and_then(|k| self.srqs.get_mut(k)) {
                Some(s) => s.srq.complete_cqe(c),
                None => return false,
            },
        };
        match r {
            Ok(r) => {
                wc.wr_id = r.wr_id;
                true
            }
            Err(BadRecvCqe::ByteCountBeyondBuffer { wr_id, .. }) => {
                wc.wr_id = wr_id;
                false
            }
            Err(_) => false,
        }
    }
}

/// The status of an error CQE.
#[cold]
#[inline(never)]
fn error_status(wc: &mut WorkCompletion, syndrome: u8, vendor_syndrome: u8) {
    wc.status = WcStatus::from_syndrome(syndrome);
    wc.vendor_err = vendor_syndrome as u32;
}

/// A CQE that matched nothing: counted, reported as an error (`wr_id`
/// as the path left it: the request's when the device consumed it, else 0).
#[cold]
#[inline(never)]
fn unmatched(stats: &mut VerbsStats, wc: &mut WorkCompletion) {
    stats.unmatched_cqes += 1;
    wc.status = WcStatus::GeneralErr;
    wc.vendor_err = WorkCompletion::VENDOR_ERR_UNMATCHED;
}
