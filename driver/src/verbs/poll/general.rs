//! The general way of a CQE (`poll_cq`'s cold half): error statuses
//! (which also move a QP to ERR), CQEs the cached route does not match,
//! opcodes the facade does not expect; every CQE the fast route leaves
//! lands here, as rdma-core's `mlx5_poll_one` falls back from its
//! fast cases.

use mlx5_hal::Hal;

use super::*;

impl<H: Hal, const QPS: usize, const W: usize, const SRQS: usize> Matcher<'_, H, QPS, W, SRQS> {
    /// Any CQE, the general way: error statuses (which also move a QP to
    /// ERR), CQEs the route does not match, opcodes the facade does not
    /// expect.
    #[inline(never)]
    pub(super) fn general(&mut self, v: &CqeView<'_>, out: &mut WorkCompletion) {
        let c = v.decode();
        *out = WorkCompletion {
            qp_num: c.qpn,
            byte_len: c.byte_len,
            ..WorkCompletion::EMPTY
        };
        let matched = if c.is_requester() {
            self.send(&c, out)
        } else {
            let m = self.recv(&c, out);
            receive_fields(out, v.flags_rqpn(), v.slid(), c.opcode, c.imm);
            m
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

    /// A responder CQE: its QP (on this CQ as the receive CQ, through its
    /// SRQ), or the SRQ it names when no QP of this context names it,
    /// frees the WQE and gives its `wr_id`. False when it does not match.
    #[inline(always)]
    pub(super) fn recv(&mut self, c: &Cqe, wc: &mut WorkCompletion) -> bool {
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
        let r = match self.qpns.get(c.qpn).and_then(|r| self.qps.get_mut(r.key)) {
            // A QP of this context on its own receive queue (in order).
            Some(e) if e.book.srq.is_none() && e.book.recv_cq == self.cq => {
                wc.srq_num = None;
                e.qp.complete_own_recv(c)
            }
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
        let (wr_id, matched) = received(r.map(|r| r.wr_id));
        wc.wr_id = wr_id;
        matched
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
pub(super) fn unmatched(stats: &mut VerbsStats, wc: &mut WorkCompletion) {
    stats.unmatched_cqes += 1;
    wc.status = WcStatus::GeneralErr;
    wc.vendor_err = WorkCompletion::VENDOR_ERR_UNMATCHED;
}
