//! `poll_cq`'s short way on a send CQ: the requester CQEs of the QP the
//! CQ last retired a request of (its send route, [`SendRun`]), matched
//! without a map probe and retired with the QP's send ring in registers
//! ([`crate::qp::Qp::send_completer`]), as the receive route takes a
//! receive CQ's stream. Anything else (an error, another QP, a CQE that
//! does not match) is left in place for the general way, which refuses
//! and counts it.

use mlx5_hal::Hal;

use super::*;
use crate::qp::SendCompleter;

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
    /// `poll_cq` of one completion once CQE `w` is waiting on a CQ that
    /// has not matched a receive: the send route's short way
    /// ([`send_waiting_one`]), else the general way.
    #[inline(never)]
    pub(super) fn poll_send_one(
        &mut self,
        cq: CqHandle,
        wc: &mut WorkCompletion,
        w: WaitingCqe,
    ) -> usize {
        let Verbs { cqs, qps, .. } = self;
        let Some(e) = cqs.get_mut(cq.0) else {
            return 0;
        };
        if send_waiting_one(e, qps, wc, w) == 1 {
            return 1;
        }
        self.poll_busy_one(cq, wc)
    }

    /// `poll_cq` once CQE `w` is waiting on a CQ that has not matched a
    /// receive: first the send route's short way ([`send_busy`]), then
    /// what is left the general way; the doorbell record is written once.
    /// When `w` is the only CQE waiting it is taken as one completion per
    /// call takes it ([`Verbs::poll_send_one`]).
    #[inline(never)]
    pub(super) fn poll_send_busy(
        &mut self,
        cq: CqHandle,
        wc: &mut [WorkCompletion],
        w: WaitingCqe,
    ) -> usize {
        let Verbs { cqs, qps, .. } = self;
        let Some(e) = cqs.get_mut(cq.0) else {
            return 0;
        };
        if !e.cq.has_second() {
            if let [first, ..] = wc {
                return self.poll_send_one(cq, first, w);
            }
        }
        let (n, done) = send_busy(e, qps, wc);
        if done {
            return n;
        }
        n + self.poll_general(cq, &mut wc[n..], n > 0)
    }
}

/// The send route's short way for one completion, on a CQ with CQE `w`
/// waiting: 1, with the consumer index published, if `w` is a successful
/// requester CQE of the route's QP that retires an outstanding request
/// ([`send_on`]); else 0 with nothing taken.
#[inline(always)]
fn send_waiting_one<H: Hal, const QPS: usize, const W: usize>(
    e: &mut CqEntry<H>,
    qps: &mut Table<QpEntry<H, W>, QPS>,
    wc: &mut WorkCompletion,
    w: WaitingCqe,
) -> usize {
    let r = e.last_send;
    let Some(mut c) = qps.get_mut(r.key).and_then(|q| q.qp.send_completer()) else {
        return 0;
    };
    let (n, _) = e.cq.read(|rd| {
        rd.take_waiting_if(w, |v| send_on(&v, r.qpn, wc, &mut c))
            .is_some() as usize
    });
    drop(c);
    if n == 1 {
        e.cq.update_doorbell();
    }
    n
}

/// The send route's short way on a CQ with a CQE waiting: the CQEs that
/// are successful requester CQEs of the route's QP ([`send_on`]). Returns
/// how many it took and whether the call is done: every slot filled or
/// the CQ empty, the consumer index then published. When not done, what
/// it took is not published yet.
#[inline(never)]
fn send_busy<H: Hal, const QPS: usize, const W: usize>(
    e: &mut CqEntry<H>,
    qps: &mut Table<QpEntry<H, W>, QPS>,
    wc: &mut [WorkCompletion],
) -> (usize, bool) {
    let r = e.last_send;
    let n = match qps.get_mut(r.key).and_then(|q| q.qp.send_completer()) {
        Some(mut c) => {
            e.cq.read(|rd| {
                let mut n = 0;
                for slot in wc.iter_mut() {
                    if rd.take_if(|v| send_on(&v, r.qpn, slot, &mut c)).is_none() {
                        break;
                    }
                    n += 1;
                }
                n
            })
            .0
        }
        None => 0,
    };
    let done = n == wc.len() || (n > 0 && !e.cq.has_next());
    if done {
        e.cq.update_doorbell();
    }
    (n, done)
}

/// One CQE of the send route: `Some` when it is a successful requester
/// CQE (REQ) of QP `qpn` whose WQE `c` retires (outstanding, posted with
/// the send opcode the CQE names), with the completion written into
/// `out`; `None`, with nothing changed, otherwise. The route was made by
/// [`Matcher::send`] for this CQ as the QP's send CQ, so these are the
/// checks of the general way for such a CQE.
#[inline(always)]
fn send_on(
    v: &CqeView<'_>,
    qpn: u32,
    out: &mut WorkCompletion,
    c: &mut SendCompleter<'_>,
) -> Option<()> {
    *out = send_taken(v, qpn, c)?;
    Some(())
}

/// [`send_on`]'s checks and retirement, the completion returned.
#[inline(always)]
fn send_taken(v: &CqeView<'_>, qpn: u32, c: &mut SendCompleter<'_>) -> Option<WorkCompletion> {
    if v.opcode() != CqeOpcode::REQ {
        return None;
    }
    let sop_drop_qpn = v.sop_drop_qpn();
    if sop_drop_qpn & 0x00ff_ffff != qpn {
        return None;
    }
    let (wr_id, opcode) = c.try_complete(v.wqe_counter(), (sop_drop_qpn >> 24) as u8)?;
    Some(WorkCompletion {
        wr_id,
        opcode: wc_opcode(opcode),
        byte_len: v.byte_len(),
        qp_num: qpn,
        ..WorkCompletion::EMPTY
    })
}

impl<H: Hal, const QPS: usize, const W: usize, const SRQS: usize> Matcher<'_, H, QPS, W, SRQS> {
    /// The send route's short way for one CQE `v` ([`send_taken`]): the
    /// completion, when it is a successful requester CQE of the QP the
    /// CQ's send route names that retires an outstanding request; `None`
    /// with nothing changed otherwise.
    #[inline(always)]
    pub(super) fn send_route(&mut self, v: &CqeView<'_>) -> Option<WorkCompletion> {
        let r = *self.last_send;
        let mut c = self.qps.get_mut(r.key)?.qp.send_completer()?;
        send_taken(v, r.qpn, &mut c)
    }

    /// [`Matcher::send_route`] into `out`: true when taken, false with
    /// nothing changed.
    #[inline(always)]
    pub(super) fn send_route_into(&mut self, v: &CqeView<'_>, out: &mut WorkCompletion) -> bool {
        let r = *self.last_send;
        match self.qps.get_mut(r.key).and_then(|q| q.qp.send_completer()) {
            Some(mut c) => send_on(v, r.qpn, out, &mut c).is_some(),
            None => false,
        }
    }
}
