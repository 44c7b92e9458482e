//! `ibv_poll_cq`: CQEs to work completions. Each CQE finds its QP (by QPN)
//! or SRQ (by SRQN) in a map, in a probe or two: no scan of the tables.

use mlx5_hal::Hal;
use mlx5_regs::CqeOpcode;

use super::numap::NumMap;
use super::qp::QpEntry;
use super::table::Table;
use super::{CqHandle, Errno, SrqEntry, Verbs, VerbsStats, WcOpcode, WcStatus, WorkCompletion};
use crate::cq::{Cq, Cqe, CqeStatus};
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
        let Verbs {
            cqs,
            srqs,
            qps,
            qpns,
            srqns,
            stats,
            ..
        } = self;
        let e = cqs.get_mut(cq.0).ok_or(Errno::EINVAL)?;
        if !e.cq.has_next() {
            return Ok(0);
        }
        let m = Matcher {
            cq,
            qps,
            qpns,
            srqs,
            srqns,
            stats,
        };
        Ok(poll_busy(&mut e.cq, m, wc))
    }
}

/// `poll_cq` once a CQE is waiting: each decoded straight into the
/// caller's next slot.
#[inline(never)]
fn poll_busy<H: Hal, const QPS: usize, const W: usize, const SRQS: usize>(
    cq: &mut Cq<H>,
    mut m: Matcher<'_, H, QPS, W, SRQS>,
    wc: &mut [WorkCompletion],
) -> usize {
    let mut slots = wc.iter_mut();
    cq.poll_each(slots.len(), |c| {
        if let Some(s) = slots.next() {
            *s = m.translate(c);
        }
    })
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
    /// One CQE as a work completion.
    #[inline]
    fn translate(&mut self, c: &Cqe) -> WorkCompletion {
        let mut wc = WorkCompletion {
            qp_num: c.qpn,
            byte_len: c.byte_len,
            ..WorkCompletion::EMPTY
        };
        if let CqeStatus::Error {
            syndrome,
            vendor_syndrome,
        } = c.status
        {
            wc.status = WcStatus::from_syndrome(syndrome);
            wc.vendor_err = vendor_syndrome as u32;
        }
        let qp = self.qpns.get(c.qpn).and_then(|k| self.qps.get_mut(k));
        if c.is_requester() {
            let Some(e) = qp.filter(|e| e.book.send_cq == self.cq) else {
                return unmatched(self.stats, wc, 0);
            };
            return match e.qp.complete_send(c) {
                Ok(s) => {
                    wc.wr_id = s.wr_id;
                    wc.opcode = match s.opcode {
                        SendOpcode::Send | SendOpcode::SendImm => WcOpcode::Send,
                        SendOpcode::RdmaWrite | SendOpcode::RdmaWriteImm => WcOpcode::RdmaWrite,
                    };
                    wc
                }
                Err(BadSendCqe::OpcodeMismatch { wr_id, .. }) => unmatched(self.stats, wc, wr_id),
                Err(_) => unmatched(self.stats, wc, 0),
            };
        }
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
            _ => return unmatched(self.stats, wc, 0),
        };
        wc.srq_num = Some(c.srqn);
        let r = match qp {
            // A QP of this context: on its receive CQ, through its SRQ.
            Some(e) => {
                let srq = e
                    .book
                    .srq
                    .filter(|_| e.book.recv_cq == self.cq)
                    .and_then(|h| self.srqs.get_mut(h.0));
                match srq {
                    Some(s) => e.qp.complete_recv(&mut s.srq, c),
                    None => return unmatched(self.stats, wc, 0),
                }
            }
            // No QP of this context names it (a message injected by a
            // test, say): the SRQ it names.
            None => match self.srqns.get(c.srqn).and_then(|k| self.srqs.get_mut(k)) {
                Some(s) => s.srq.complete_cqe(c),
                None => return unmatched(self.stats, wc, 0),
            },
        };
        match r {
            Ok(r) => {
                wc.wr_id = r.wr_id;
                wc
            }
            Err(BadRecvCqe::ByteCountBeyondBuffer { wr_id, .. }) => {
                unmatched(self.stats, wc, wr_id)
            }
            Err(_) => unmatched(self.stats, wc, 0),
        }
    }
}

/// A CQE that matched nothing: counted, reported as an error.
#[cold]
fn unmatched(stats: &mut VerbsStats, mut wc: WorkCompletion, wr_id: u64) -> WorkCompletion {
    stats.unmatched_cqes += 1;
    wc.status = WcStatus::GeneralErr;
    wc.vendor_err = WorkCompletion::VENDOR_ERR_UNMATCHED;
    wc.wr_id = wr_id;
    wc
}
