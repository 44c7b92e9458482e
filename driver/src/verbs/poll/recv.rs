//! `poll_cq`'s short way on a receive CQ: the receives of the QP and SRQ
//! the CQ last matched (its receive route, [`RecvRun`]), taken with the
//! SRQ's ring in registers ([`Srq::completer`]); the lazy extended-CQ
//! API's receive step ([`recv_taken`]). Anything else is left in place for
//! the general way, which refuses and counts it.

use mlx5_hal::Hal;

use super::*;

/// `poll_cq`'s short way for one completion, on a CQ with CQE `w`
/// waiting: 1, with the consumer index published, if `w` is a successful
/// receive on the route the CQ last matched ([`recv_on`]); else 0 with
/// nothing taken.
#[inline(always)]
pub(super) fn recv_waiting_one<H: Hal, const SRQS: usize>(
    e: &mut CqEntry<H>,
    srqs: &mut Table<SrqEntry<H>, SRQS>,
    wc: &mut WorkCompletion,
    w: WaitingCqe,
) -> usize {
    let r = e.last_recv;
    let Some(s) = srqs.get_mut(r.srq) else {
        return 0;
    };
    let srq = &mut s.srq;
    let (n, _) = e.cq.read(|rd| {
        rd.take_waiting_if(w, |v| {
            recv_on::<true>(&v, r, wc, |wqe, len, check| {
                srq.try_complete(wqe, len, check)
            })
        })
        .is_some() as usize
    });
    if n == 1 {
        e.cq.update_doorbell();
    }
    n
}

/// `poll_cq`'s short way on a CQ with a CQE waiting: the CQEs that are
/// successful receives on the route the CQ last matched ([`recv_run`]).
/// Returns how many it took and whether the call is done: every slot
/// filled or the CQ empty, the consumer index then published. When not
/// done, what it took is not published yet.
#[inline(never)]
pub(super) fn recv_busy<H: Hal, const SRQS: usize>(
    e: &mut CqEntry<H>,
    srqs: &mut Table<SrqEntry<H>, SRQS>,
    wc: &mut [WorkCompletion],
) -> (usize, bool) {
    let r = e.last_recv;
    let n = match srqs.get_mut(r.srq) {
        Some(s) => e.cq.read(|rd| recv_run(rd, &mut s.srq, r, wc)).0,
        None => 0,
    };
    let done = n == wc.len() || (n > 0 && !e.cq.has_next());
    if done {
        e.cq.update_doorbell();
    }
    (n, done)
}

/// Take, into the front of `wc`, the CQEs from the reader's consumer
/// index on that are successful receives on route `r` whose WQE (in `srq`,
/// the route's SRQ) is posted and holds the bytes: the common stream of a
/// receive CQ, with the SRQ's ring in registers ([`Srq::completer`]).
/// Stops, leaving it in place, at the first CQE that is anything else, for
/// the general path to match, refuse and count; returns how many it took.
/// The checks are those of [`Matcher::translate`]'s route path, where `r`
/// was made for this CQ.
#[inline(always)]
fn recv_run<H: Hal>(
    rd: &mut CqReader<'_>,
    srq: &mut Srq<H>,
    r: RecvRun,
    wc: &mut [WorkCompletion],
) -> usize {
    let mut c = srq.completer();
    let mut n = 0;
    for slot in wc.iter_mut() {
        if rd
            .take_if(|v| {
                recv_on::<true>(&v, r, slot, |w, len, check| c.try_complete(w, len, check))
            })
            .is_none()
        {
            break;
        }
        n += 1;
    }
    n
}

/// One CQE of [`recv_run`]: `Some` when it is a successful receive on `r`
/// and `complete` (an SRQ's `try_complete`) takes its WQE, with the
/// completion written into `out` (the fields of [`receive_fields`] only if
/// `FILL`: the lazy API reads those from the CQE when asked); `None`, with
/// nothing changed, otherwise.
#[inline(always)]
pub(super) fn recv_on<const FILL: bool>(
    v: &CqeView<'_>,
    r: RecvRun,
    out: &mut WorkCompletion,
    complete: impl FnOnce(u16, u32, bool) -> Option<u64>,
) -> Option<()> {
    let op = v.opcode();
    if !is_receive(op) || !v.names(r.qpn, r.srqn) {
        return None;
    }
    let byte_len = v.byte_len();
    // RDMA WRITE with immediate scatters nothing into the WQE.
    let wr_id = complete(v.wqe_counter(), byte_len, op != CqeOpcode::RESP_WR_IMM)?;
    let imm = v.imm();
    *out = recv_completion(op, wr_id, byte_len, imm, r.qpn, r.srqn);
    if FILL {
        receive_fields(out, v.flags_rqpn(), v.slid(), op, imm);
    }
    Some(())
}

/// [`recv_on`] without the fields of [`receive_fields`], the completion
/// returned (for a caller that has no slot for it yet).
#[inline(always)]
pub(super) fn recv_taken(
    v: &CqeView<'_>,
    r: RecvRun,
    complete: impl FnOnce(u16, u32, bool) -> Option<u64>,
) -> Option<WorkCompletion> {
    let op = v.opcode();
    if !is_receive(op) || !v.names(r.qpn, r.srqn) {
        return None;
    }
    let byte_len = v.byte_len();
    let wr_id = complete(v.wqe_counter(), byte_len, op != CqeOpcode::RESP_WR_IMM)?;
    Some(recv_completion(op, wr_id, byte_len, v.imm(), r.qpn, r.srqn))
}
