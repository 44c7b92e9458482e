//! `ibv_poll_cq`: CQEs to work completions. Each CQE finds its QP (by QPN)
//! or SRQ (by SRQN) in a map, in a probe or two: no scan of the tables. A
//! receive on a QP's SRQ needs only the QP's route, kept in the map beside
//! the QP's key: the QP itself is reached only for an error completion.

use mlx5_hal::Hal;
use mlx5_regs::CqeOpcode;

use super::numap::NumMap;
use super::qp::QpEntry;
use super::table::{Key, Table};
use super::{
    CqEntry, CqHandle, Errno, SrqEntry, SrqHandle, Verbs, VerbsStats, WcOpcode, WcStatus,
    WorkCompletion,
};
use crate::cq::{CqReader, Cqe, CqeStatus, CqeView, WaitingCqe};
use crate::qp::{BadSendCqe, SendOpcode};
use crate::srq::{BadRecvCqe, Srq};
use crate::stats::CmdObserver;

mod general;
mod recv;
mod send;
use general::unmatched;
use recv::{recv_busy, recv_on, recv_taken, recv_waiting_one};

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
    ///   names, which is free again from here on; on a QP's own receive
    ///   queue, from its oldest outstanding request (the device completes
    ///   them in order, flushes included).
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
        let Some(w) = e.cq.waiting() else {
            return Ok(0);
        };
        // Out of line with few register arguments: the empty path above
        // needs no stack frame (so `poll_busy`, not this part, tests
        // whether more than `w` is waiting: here the test's registers gave
        // the empty path a frame). One completion per call (a
        // latency-bound loop) has its own paths, with no loop to set up;
        // its short way starts from the CQE found waiting here (`w`),
        // without testing the owner byte again. The receive route's short
        // way is tried first on a CQ that has matched a receive; the send
        // route's on the others (a send CQ), each falling back to the
        // general way.
        let routed = e.last_recv.is_some();
        Ok(match wc {
            [one] if routed => self.poll_recv_one(cq, one, w),
            [one] => self.poll_send_one(cq, one, w),
            _ if routed => self.poll_busy(cq, wc, w),
            _ => self.poll_send_busy(cq, wc, w),
        })
    }

    /// `poll_cq` of one completion once CQE `w` is waiting on a CQ that has
    /// matched a receive: the short way ([`recv_waiting_one`]) if the CQE
    /// is a successful receive on that route, else the general way.
    #[inline(never)]
    fn poll_recv_one(&mut self, cq: CqHandle, wc: &mut WorkCompletion, w: WaitingCqe) -> usize {
        let Verbs { cqs, srqs, .. } = self;
        let Some(e) = cqs.get_mut(cq.0) else {
            return 0;
        };
        if recv_waiting_one(e, srqs, wc, w) == 1 {
            return 1;
        }
        self.poll_busy_one(cq, wc)
    }

    /// `poll_cq` of one completion once a CQE is waiting, the general way
    /// ([`Matcher::step`]), with no loop.
    #[inline(never)]
    fn poll_busy_one(&mut self, cq: CqHandle, wc: &mut WorkCompletion) -> usize {
        let Some((ring, route, mut m, _)) = self.split_for_poll(cq) else {
            return 0;
        };
        let (n, _) = ring.read(|rd| {
            let Some(v) = rd.take() else { return 0 };
            m.step(&v, route, wc);
            1
        });
        if n == 1 {
            ring.update_doorbell();
        }
        n
    }

    /// `poll_cq` once CQE `w` is waiting on a CQ that has matched a
    /// receive, each CQE decoded straight into the caller's next slot:
    /// first the short way ([`recv_busy`]), then what is left the general
    /// way ([`Verbs::poll_general`]). The doorbell record is written once,
    /// at the end. When `w` is the only CQE waiting (one more owner-byte
    /// test), it is taken as one completion per call takes it
    /// ([`Verbs::poll_recv_one`]), without setting up the run: a
    /// latency-bound loop passing a burst array usually finds one.
    #[inline(never)]
    fn poll_busy(&mut self, cq: CqHandle, wc: &mut [WorkCompletion], w: WaitingCqe) -> usize {
        let Verbs { cqs, srqs, .. } = self;
        let Some(e) = cqs.get_mut(cq.0) else {
            return 0;
        };
        if !e.cq.has_second() {
            if let [first, ..] = wc {
                return self.poll_recv_one(cq, first, w);
            }
        }
        let (n, done) = recv_busy(e, srqs, wc);
        if done {
            return n;
        }
        n + self.poll_general(cq, &mut wc[n..], n > 0)
    }

    /// The CQ's entry's ring and receive route and, borrowed apart from
    /// them, what matching its CQEs the general way needs (with the CQ's
    /// send route); and the CQ's `wc_flags`.
    #[inline(always)]
    pub(super) fn split_for_poll(
        &mut self,
        cq: CqHandle,
    ) -> Option<(
        &mut crate::cq::Cq<H>,
        &mut RecvRun,
        Matcher<'_, H, QPS, SQ_WQEBBS, SRQS>,
        u64,
    )> {
        let Verbs {
            cqs,
            srqs,
            qps,
            qpns,
            srqns,
            stats,
            ..
        } = self;
        let CqEntry {
            cq: ring,
            last_recv,
            last_send,
            book,
        } = cqs.get_mut(cq.0)?;
        let m = Matcher {
            cq,
            qps,
            qpns,
            srqs,
            srqns,
            stats,
            last_send,
        };
        Some((ring, last_recv, m, book.wc_flags))
    }

    /// `poll_cq`'s general way, out of line: each CQE matched on its own
    /// into the next slot ([`Matcher::step`]), until the slots or the
    /// CQEs run out; returns how many. A receive its route matches becomes
    /// the CQ's `last_recv`, tried first from then on. Publishes the
    /// consumer index if it took anything or `taken` (CQEs the caller took
    /// are not published yet).
    #[inline(never)]
    fn poll_general(&mut self, cq: CqHandle, wc: &mut [WorkCompletion], taken: bool) -> usize {
        let Some((ring, route, mut m, _)) = self.split_for_poll(cq) else {
            return 0;
        };
        let (n, moved) = ring.read(|rd| {
            let mut n = 0;
            for slot in wc.iter_mut() {
                let Some(v) = rd.take() else { break };
                m.step(&v, route, slot);
                n += 1;
            }
            n
        });
        if moved || taken {
            ring.update_doorbell();
        }
        n
    }
}

/// What a CQE naming a QP needs to know of it, stored beside the QP's key
/// in the QPN map: the receive CQ and the SRQ are fixed when the QP is
/// created (neither can be destroyed while the QP uses it), so a receive
/// is matched without reaching the QP.
#[derive(Debug, Clone, Copy)]
pub(super) struct QpRoute {
    /// The QP's table key.
    pub(super) key: Key,
    /// The CQ its receives complete on.
    pub(super) recv_cq: CqHandle,
    /// Its SRQ's key (a placeholder without an SRQ).
    pub(super) srq: Key,
    /// Its SRQ's number, [`QpRoute::NO_SRQN`] without one (a CQE's SRQ
    /// number has 24 bits, so it never matches).
    pub(super) srqn: u32,
}

impl QpRoute {
    /// No SRQ.
    pub(super) const NO_SRQN: u32 = u32::MAX;

    /// What free map entries hold (never looked up).
    pub(super) const NONE: QpRoute = QpRoute {
        key: Key::NONE,
        recv_cq: CqHandle(Key::NONE),
        srq: Key::NONE,
        srqn: QpRoute::NO_SRQN,
    };

    /// The route of a QP stored under `key`, receiving on `recv_cq` through
    /// `srq` (with its number) if it has one.
    pub(super) fn new(key: Key, recv_cq: CqHandle, srq: Option<(SrqHandle, u32)>) -> Self {
        let (srq, srqn) = srq.map_or((Key::NONE, Self::NO_SRQN), |(h, n)| (h.0, n));
        QpRoute {
            key,
            recv_cq,
            srq,
            srqn,
        }
    }
}

/// A route receives were matched on: the CQE's QP and SRQ numbers and the
/// SRQ's key. A CQ keeps the last one ([`CqEntry::last_recv`]) to match a
/// stream of receives without a lookup, as rdma-core's `mlx5_poll_one`
/// keeps the current QP and SRQ across a batch (`providers/mlx5/cq.c`).
/// Valid while the QP lives: cleaning the QP's CQEs (on destroy and on a
/// move to RESET) clears it.
#[derive(Debug, Clone, Copy)]
pub(super) struct RecvRun {
    qpn: u32,
    srqn: u32,
    srq: Key,
}

impl RecvRun {
    /// No route: a QPN of 32 bits set never matches a CQE's 24.
    pub(super) const NONE: RecvRun = RecvRun {
        qpn: u32::MAX,
        srqn: u32::MAX,
        srq: Key::NONE,
    };

    /// A route, not [`RecvRun::NONE`].
    #[inline(always)]
    pub(super) fn is_some(&self) -> bool {
        self.qpn != u32::MAX
    }

    /// The route of QP `qpn` receiving through SRQ `srqn` (stored under
    /// `srq`).
    fn new(qpn: u32, srqn: u32, srq: Key) -> Self {
        RecvRun { qpn, srqn, srq }
    }
}

/// The QP a send CQ last retired a request of: its number and table key,
/// tried before the QPN map for the next requester CQE (a send CQ's
/// stream usually names one QP). Valid while the QP lives: cleaning the
/// QP's CQEs (on destroy and on a move to RESET) clears it.
#[derive(Debug, Clone, Copy)]
pub(super) struct SendRun {
    qpn: u32,
    key: Key,
}

impl SendRun {
    /// No QP: a QPN of 32 bits set never matches a CQE's 24.
    pub(super) const NONE: SendRun = SendRun {
        qpn: u32::MAX,
        key: Key::NONE,
    };
}

/// What matching a CQE needs, borrowed from the context, and the CQ's
/// send route.
pub(super) struct Matcher<'a, H: Hal, const QPS: usize, const W: usize, const SRQS: usize> {
    cq: CqHandle,
    qps: &'a mut Table<QpEntry<H, W>, QPS>,
    qpns: &'a NumMap<QpRoute, QPS>,
    srqs: &'a mut Table<SrqEntry<H>, SRQS>,
    srqns: &'a NumMap<Key, SRQS>,
    stats: &'a mut VerbsStats,
    last_send: &'a mut SendRun,
}

impl<H: Hal, const QPS: usize, const W: usize, const SRQS: usize> Matcher<'_, H, QPS, W, SRQS> {
    /// The one CQE-consuming step, as rdma-core's `mlx5_poll_one`
    /// (`providers/mlx5/cq.c`) serves both `ibv_poll_cq` and the lazy
    /// `ibv_cq_ex` API: CQE `v` as a work completion in `out`, matched
    /// through the CQ's cached routes first (`route`: the QP and SRQ the
    /// last receive matched, kept across calls; the send route: the QP the
    /// last requester CQE named), the maps otherwise. `poll_cq`'s batch
    /// paths ([`recv_busy`], [`recv_waiting_one`]) are this step's receive
    /// route with the SRQ's ring held in registers.
    #[inline(always)]
    pub(super) fn step(&mut self, v: &CqeView<'_>, route: &mut RecvRun, out: &mut WorkCompletion) {
        if let Some(r) = self.translate(v, *route, out) {
            *route = r;
        }
    }

    /// One CQE as a work completion, written into `out`. The two common
    /// cases are straight-line: a successful send completion, and a
    /// successful receive that its QP's route matches (a dataplane's
    /// stream), which reads only the five fields it needs; that receive's
    /// route is returned, for `poll_cq`'s short way ([`recv_busy`]) to try on the next
    /// CQEs. Everything else (errors, flushes, CQEs that do not match) is
    /// finished out of line.
    #[inline(always)]
    fn translate(
        &mut self,
        v: &CqeView<'_>,
        route: RecvRun,
        out: &mut WorkCompletion,
    ) -> Option<RecvRun> {
        let op = v.opcode();
        if op == CqeOpcode::REQ {
            let c = v.decode_requester();
            *out = WorkCompletion {
                qp_num: c.qpn,
                byte_len: c.byte_len,
                ..WorkCompletion::EMPTY
            };
            if !self.send(&c, out) {
                unmatched(self.stats, out);
            }
            return None;
        }
        if !is_receive(op) {
            self.general(v, out);
            return None;
        }
        let qpn = v.sop_drop_qpn() & 0x00ff_ffff;
        let srqn = v.srqn();
        // Matched from the route alone: a QP of this context receiving on
        // this CQ through the SRQ the CQE names. Every check
        // `Qp::complete_recv` makes holds by the route's construction; the
        // SRQ checks the rest (the WQE posted, the byte count).
        let srq = if qpn == route.qpn && srqn == route.srqn {
            // The CQ's route: made by this step for this CQ.
            route.srq
        } else {
            match self
                .qpns
                .get(qpn)
                .filter(|r| r.recv_cq == self.cq && r.srqn == srqn)
            {
                Some(r) => r.srq,
                None => {
                    self.general(v, out);
                    return None;
                }
            }
        };
        let Some(s) = self.srqs.get_mut(srq) else {
            self.general(v, out);
            return None;
        };
        let byte_len = v.byte_len();
        let (wr_id, matched) = received(s.srq.complete_matched(
            v.wqe_counter(),
            byte_len,
            op != CqeOpcode::RESP_WR_IMM,
        ));
        let imm = v.imm();
        *out = recv_completion(op, wr_id, byte_len, imm, qpn, srqn);
        receive_fields(out, v.flags_rqpn(), v.slid(), op, imm);
        if !matched {
            unmatched(self.stats, out);
            return None;
        }
        Some(RecvRun::new(qpn, srqn, srq))
    }

    /// The lazy extended-CQ API's short way ([`super::CqPoll`]): CQE `v`
    /// as a completion if it is a successful receive on `route` whose SRQ
    /// takes its WQE ([`recv_taken`], without the fields the lazy API
    /// reads from the CQE itself) or a successful requester CQE on the
    /// CQ's send route ([`Matcher::send_route`]); `None`, with nothing
    /// changed, otherwise (then [`Matcher::step`] takes it the general
    /// way).
    #[inline(always)]
    pub(super) fn lazy_route(&mut self, v: &CqeView<'_>, route: RecvRun) -> Option<WorkCompletion> {
        if v.opcode() == CqeOpcode::REQ {
            return self.send_route(v);
        }
        let s = self.srqs.get_mut(route.srq)?;
        recv_taken(v, route, |wqe, len, check| {
            s.srq.try_complete(wqe, len, check)
        })
    }

    /// [`Matcher::lazy_route`] into `out` (the lazy API's next
    /// completion): true when taken, false with nothing changed.
    #[inline(always)]
    pub(super) fn lazy_route_into(
        &mut self,
        v: &CqeView<'_>,
        route: RecvRun,
        out: &mut WorkCompletion,
    ) -> bool {
        if v.opcode() == CqeOpcode::REQ {
            return self.send_route_into(v, out);
        }
        match self.srqs.get_mut(route.srq) {
            Some(s) => recv_on::<false>(v, route, out, |wqe, len, check| {
                s.srq.try_complete(wqe, len, check)
            })
            .is_some(),
            None => false,
        }
    }

    /// A requester CQE: its QP (on this CQ as the send CQ) retires the
    /// request. False when it does not match; `wc.wr_id` is then the
    /// request's when the device did consume it, else 0.
    #[inline(always)]
    fn send(&mut self, c: &Cqe, wc: &mut WorkCompletion) -> bool {
        // The send route first, then the QPN map. The route remembers a
        // QP only once it is known to complete its sends on this CQ, so
        // the send route's short way (`send_on`) need not check that.
        let (key, fresh) = if self.last_send.qpn == c.qpn {
            (self.last_send.key, false)
        } else {
            match self.qpns.get(c.qpn) {
                Some(r) => (r.key, true),
                None => return false,
            }
        };
        let qp = self.qps.get_mut(key);
        let Some(e) = qp.filter(|e| e.book.send_cq == self.cq) else {
            return false;
        };
        if fresh {
            *self.last_send = SendRun { qpn: c.qpn, key };
        }
        match e.qp.complete_send(c) {
            Ok(s) => {
                wc.wr_id = s.wr_id;
                wc.opcode = wc_opcode(s.opcode);
                true
            }
            Err(BadSendCqe::OpcodeMismatch { wr_id, .. }) => {
                wc.wr_id = wr_id;
                false
            }
            Err(_) => false,
        }
    }
}

/// The work completion opcode of a send posted with `op`.
#[inline(always)]
fn wc_opcode(op: SendOpcode) -> WcOpcode {
    match op {
        SendOpcode::Send | SendOpcode::SendImm => WcOpcode::Send,
        SendOpcode::RdmaWrite | SendOpcode::RdmaWriteImm => WcOpcode::RdmaWrite,
        SendOpcode::RdmaRead => WcOpcode::RdmaRead,
        SendOpcode::AtomicCmpSwap => WcOpcode::CompSwap,
        SendOpcode::AtomicFetchAdd => WcOpcode::FetchAdd,
    }
}

/// A successful responder opcode the facade completes: RESP_WR_IMM (1),
/// RESP_SEND (2), RESP_SEND_IMM (3), RESP_SEND_INV (4).
#[inline(always)]
fn is_receive(op: CqeOpcode) -> bool {
    op.0.wrapping_sub(CqeOpcode::RESP_WR_IMM.0) <= 3
}

/// The work completion of a successful receive with opcode `op` (one of
/// [`is_receive`]'s).
#[inline(always)]
fn recv_completion(
    op: CqeOpcode,
    wr_id: u64,
    byte_len: u32,
    imm: u32,
    qpn: u32,
    srqn: u32,
) -> WorkCompletion {
    let write_imm = op == CqeOpcode::RESP_WR_IMM;
    WorkCompletion {
        wr_id,
        status: WcStatus::Success,
        opcode: if write_imm {
            WcOpcode::RecvRdmaWithImm
        } else {
            WcOpcode::Recv
        },
        vendor_err: 0,
        byte_len,
        imm_data: (write_imm || op == CqeOpcode::RESP_SEND_IMM).then_some(imm),
        invalidated_rkey: (op == CqeOpcode::RESP_SEND_INV).then_some(imm),
        qp_num: qpn,
        srq_num: Some(srqn),
        src_qp: 0,
        slid: 0,
        sl: 0,
        pkey_index: 0,
        wc_flags: 0,
    }
}

/// The fields of a receive completion that a connected QP leaves 0 and a
/// UD QP fills (rdma-core `handle_responder`): the sender's QP, SL and
/// LID, the GRH flag, the P_Key index (the CQE's `imm_inval_pkey` when no
/// immediate or rkey takes it), and `wc_flags`.
#[inline(always)]
fn receive_fields(wc: &mut WorkCompletion, flags_rqpn: u32, slid: u16, op: CqeOpcode, imm: u32) {
    if op == CqeOpcode::RESP_SEND {
        wc.pkey_index = imm as u16;
    }
    wc.src_qp = flags_rqpn & 0x00ff_ffff;
    wc.sl = ((flags_rqpn >> 24) & 0xf) as u8;
    wc.slid = slid;
    let mut f = 0;
    if (flags_rqpn >> 28) & 3 != 0 {
        f |= super::WC_GRH;
    }
    match (wc.imm_data, wc.invalidated_rkey) {
        (Some(_), _) => f |= super::WC_WITH_IMM,
        (None, Some(_)) => f |= super::WC_WITH_INV,
        (None, None) => {}
    }
    wc.wc_flags = f;
}

/// A receive's outcome: its `wr_id` (also when the device consumed the
/// WQE but its byte count is beyond the buffers; 0 when nothing matched)
/// and whether it matched.
#[inline(always)]
fn received(r: Result<u64, BadRecvCqe>) -> (u64, bool) {
    match r {
        Ok(wr_id) => (wr_id, true),
        Err(BadRecvCqe::ByteCountBeyondBuffer { wr_id, .. }) => (wr_id, false),
        Err(_) => (0, false),
    }
}
