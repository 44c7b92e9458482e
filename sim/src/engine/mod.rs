//! The traffic engine: send doorbells, send-queue execution, RC flow control
//! (RNR and ACK timers in device time), requester completions, QP errors and
//! flushes. The responder side is in `respond.rs`, WQE parsing in `wqe.rs`,
//! the SRQ receive path shared with `Traffic::deliver` in `recv.rs`.
//!
//! Sources: send doorbell and WQE layout Linux `mlx5r_ring_db` /
//! `mlx5_ib_post_send` (`drivers/infiniband/hw/mlx5/wr.c`), rdma-core
//! `post_send_db` (`providers/mlx5/qp.c`); completions and error syndromes
//! Linux `mlx5_poll_one` / `mlx5_handle_error_cqe`
//! (`drivers/infiniband/hw/mlx5/cq.c`); IB RC semantics (RNR NAK, retry
//! counts, last-WQE-reached) as `ibv_modify_qp(3)` and
//! `ibv_get_async_event(3)` describe them. Choices where the sources are
//! silent: `docs/fidelity.md` §14.

mod blueflame;
mod doorbell;
mod frames;
pub(crate) mod pool;
mod rdma;
mod rdma_wire;
mod receive;
mod recv;
mod requester;
mod respond;
mod ud;
mod wqe;

pub(crate) use blueflame::BfCopy;
pub(crate) use receive::WireQp;
pub(crate) use recv::ScatterError;

use mlx5_regs::consts::{cqe_syndrome, ctx, rq_type, CqeOpcode};
use mlx5_regs::layouts::{cqe64, eqe, err_cqe, qp_events, wqe_ctrl_seg};
use mlx5_regs::EventType;

use crate::qp::{ack_timeout_ns, rnr_timer_ns, QpState, Wait, WaitKind};
use crate::state::State;
use crate::Violation;
use respond::Outcome;
use wqe::{Bad, Data, Wqe};

const M24: u32 = 0x00ff_ffff;

impl State {
    /// An 8-byte write into the BlueFlame area of UAR page `uar` (offset
    /// `off` in the page): a send doorbell carrying the first 8 bytes of the
    /// last WQE's control segment. The QP comes from its `qpn_ds` dword.
    pub(crate) fn send_doorbell(&mut self, uar: u32, off: usize, value: u64) {
        self.stats.doorbells += 1;
        let qpn = ((value as u32) >> 8) & M24;
        let why = match self.objects.qps.get(&qpn) {
            None => Some(format!("unknown QP {qpn:#x}")),
            Some(q) if q.uar != uar => Some(format!(
                "QP {qpn:#x} whose qpc.uar_page is {} (dropped)",
                q.uar
            )),
            Some(q) if q.no_sq => Some(format!("QP {qpn:#x} without a send queue")),
            Some(q) if q.state == QpState::Reset => Some(format!("QP {qpn:#x} in RESET")),
            Some(_) => None,
        };
        if let Some(why) = why {
            self.stats.dropped_doorbells += 1;
            self.records.violations.push(Violation::UarDoorbell(format!(
                "send doorbell {value:#018x} at UAR {uar} offset {off:#x} for {why}"
            )));
            return;
        }
        self.qp_kick(qpn);
    }

    /// Execute QP `qpn`'s send queue from its consumer counter up to the
    /// doorbell record's producer counter, as far as the QP state and the
    /// flow control allow. In ERR every posted WQE is flushed.
    pub(crate) fn qp_kick(&mut self, qpn: u32) {
        loop {
            let Some(q) = self.objects.qps.get(&qpn) else {
                return;
            };
            if q.no_sq {
                return;
            }
            match q.state {
                QpState::Rts => {}
                QpState::Err => {
                    self.flush_sq(qpn);
                    return;
                }
                // RST/INIT/RTR/SQER: posted WQEs wait (executed once in RTS).
                _ => return,
            }
            if let Some(w) = q.wait {
                if w.at_ns > self.now_ns() {
                    return;
                }
            }
            let ci = q.sq_ci;
            let Some(avail) = self.sq_posted(qpn, true) else {
                return;
            };
            if avail == 0 {
                return;
            }
            let go_on = match self.parse_wqe(qpn, ci, avail) {
                Err(Bad::Unreadable) => {
                    self.qp_catastrophe(qpn, "send WQE unreadable");
                    false
                }
                Err(Bad::Malformed {
                    opcode,
                    wqebbs,
                    why,
                }) => {
                    self.records
                        .send_errors
                        .push(format!("QP {qpn:#x} WQE {ci:#x}: malformed: {why}"));
                    self.req_error(qpn, ci, wqebbs, opcode, cqe_syndrome::LOCAL_QP_OP_ERR);
                    false
                }
                Ok(w) => self.exec_wqe(qpn, w),
            };
            if !go_on {
                return;
            }
        }
    }

    /// WQEBBs posted beyond the consumer counter. `None`: the doorbell record
    /// is unreadable or names more than the ring; with `strict` that is a
    /// catastrophic error of the QP.
    fn sq_posted(&mut self, qpn: u32, strict: bool) -> Option<u16> {
        let q = self.objects.qps.get(&qpn)?;
        let (dbr, ci, n) = (q.dbr, q.sq_ci, q.sq_size());
        let Ok(pc) = self.rd_be32(dbr + 4, &|| format!("QP doorbell record read qpn {qpn:#x}"))
        else {
            if strict {
                self.qp_catastrophe(qpn, "doorbell record unreadable");
            }
            return None;
        };
        let avail = (pc as u16).wrapping_sub(ci);
        if avail as u32 > n {
            if strict {
                self.records.violations.push(Violation::SendQueue(format!(
                    "QP {qpn:#x}: send counter {:#x} is {avail} WQEBBs ahead of the consumer {ci:#x} on a ring of {n}",
                    pc as u16
                )));
                self.qp_catastrophe(qpn, "producer counter beyond the ring");
            }
            return None;
        }
        Some(avail)
    }

    /// Execute one parsed WQE; true to go on with the next.
    fn exec_wqe(&mut self, qpn: u32, w: Wqe) -> bool {
        if w.opcode == mlx5_regs::consts::wqe::OPCODE_NOP {
            self.req_done(qpn, &w, 0);
            return true;
        }
        if w.fence {
            // The requester runs one WQE at a time and the next only after
            // the previous completed: a fenced WQE finds every earlier
            // READ and atomic done.
            self.stats.fenced_wqes += 1;
        }
        if w.av.is_some() {
            return self.ud_exec(qpn, w);
        }
        if w.is_read_or_atomic() {
            return self.exec_rd_atomic(qpn, w);
        }
        let payload = match self.gather(qpn, &w) {
            Ok(p) => p,
            Err(synd) => {
                self.records.send_errors.push(format!(
                    "QP {qpn:#x} WQE {:#x}: gather refused, syndrome {synd:#x}",
                    w.index
                ));
                self.req_error(qpn, w.index, w.wqebbs, w.opcode, synd);
                return false;
            }
        };
        if self.on_wire() && !self.local_destination(qpn) {
            let go_on = self.wire_exec(qpn, w, &payload);
            self.pool.give_bytes(payload);
            return go_on;
        }
        let outcome = self.respond(qpn, &w, &payload);
        let len = payload.len() as u32;
        self.pool.give_bytes(payload);
        match outcome {
            Outcome::Done => {
                self.stats.messages += 1;
                self.req_done(qpn, &w, len);
                true
            }
            Outcome::Duplicate => {
                self.req_done(qpn, &w, len);
                true
            }
            Outcome::Rnr(code) => {
                self.stats.rnr_naks += 1;
                self.requester_wait(qpn, &w, WaitKind::Rnr, Some(rnr_timer_ns(code)));
                false
            }
            Outcome::NoAck => {
                self.stats.ack_timeouts += 1;
                let t = self
                    .objects
                    .qps
                    .get(&qpn)
                    .and_then(|q| ack_timeout_ns(q.path.ack_timeout));
                self.requester_wait(qpn, &w, WaitKind::Ack, t);
                false
            }
            Outcome::Failed { synd, responder } => {
                self.req_error(qpn, w.index, w.wqebbs, w.opcode, synd);
                if let Some((tq, event)) = responder {
                    if let Some(e) = event {
                        self.qp_event(tq, e);
                    }
                    self.qp_enter_error(tq);
                }
                false
            }
        }
    }

    /// Execute a READ or atomic WQE: on the wire, or inside this card. The
    /// requester runs one WQE at a time, so a fenced WQE always finds the
    /// READs and atomics before it complete (`IBV_SEND_FENCE` holds).
    fn exec_rd_atomic(&mut self, qpn: u32, w: Wqe) -> bool {
        let log_msg_max = self.objects.qps.get(&qpn).map_or(0, |q| q.log_msg_max);
        if w.len() > 1u64 << log_msg_max {
            self.req_error(
                qpn,
                w.index,
                w.wqebbs,
                w.opcode,
                cqe_syndrome::LOCAL_LENGTH_ERR,
            );
            return false;
        }
        if self.on_wire() && !self.local_destination(qpn) {
            return self.wire_exec(qpn, w, &[]);
        }
        let (out, bytes) = self.loopback_rd_atomic(qpn, &w);
        match out {
            Outcome::Done | Outcome::Duplicate => {
                if let Err(synd) = self.requester_write_back(qpn, &w, &bytes) {
                    self.req_error(qpn, w.index, w.wqebbs, w.opcode, synd);
                    return false;
                }
                self.stats.messages += 1;
                let len = if w.opcode == mlx5_regs::consts::wqe::OPCODE_RDMA_READ {
                    w.len() as u32
                } else {
                    8
                };
                self.req_done(qpn, &w, len);
                true
            }
            Outcome::Rnr(_) | Outcome::NoAck => {
                self.stats.ack_timeouts += 1;
                let t = self
                    .objects
                    .qps
                    .get(&qpn)
                    .and_then(|q| ack_timeout_ns(q.path.ack_timeout));
                self.requester_wait(qpn, &w, WaitKind::Ack, t);
                false
            }
            Outcome::Failed { synd, responder } => {
                self.req_error(qpn, w.index, w.wqebbs, w.opcode, synd);
                if let Some((tq, event)) = responder {
                    if let Some(e) = event {
                        self.qp_event(tq, e);
                    }
                    self.qp_enter_error(tq);
                }
                false
            }
        }
    }

    /// The message bytes of a SEND / RDMA WRITE: inline data, or gathered
    /// through the SGEs' keys (reserved lkey only with `qpc.rlky`; memory
    /// keys of the QP's PD with `lr`). Error = CQE syndrome.
    pub(super) fn gather(&mut self, qpn: u32, w: &Wqe) -> Result<Vec<u8>, u8> {
        let q = self
            .objects
            .qps
            .get(&qpn)
            .ok_or(cqe_syndrome::LOCAL_QP_OP_ERR)?;
        let (pd, rlky, log_msg_max) = (q.pd, q.rlky, q.log_msg_max);
        if w.len() > 1u64 << log_msg_max {
            return Err(cqe_syndrome::LOCAL_LENGTH_ERR);
        }
        let sges = match &w.data {
            Data::Inline(b) => return Ok(b.clone()),
            Data::Sges(v) => v,
        };
        let index = w.index;
        let what = || format!("send gather qpn {qpn:#x} WQE {index:#x}");
        let mut out = self.pool.bytes();
        out.reserve(w.len() as usize);
        let mut plan = self.pool.plan();
        let done = self.gather_into(sges, pd, rlky, &mut plan, &mut out, &what);
        self.pool.give_plan(plan);
        match done {
            Ok(()) => Ok(out),
            Err(e) => {
                self.pool.give_bytes(out);
                Err(e)
            }
        }
    }

    /// Read the SGEs' bytes into `out`, through `plan` (scratch).
    fn gather_into(
        &mut self,
        sges: &[wqe::Sge],
        pd: u32,
        rlky: bool,
        plan: &mut Vec<(u64, u64)>,
        out: &mut Vec<u8>,
        what: &dyn Fn() -> String,
    ) -> Result<(), u8> {
        for s in sges.iter() {
            plan.clear();
            if s.lkey == self.resd_lkey {
                if !rlky {
                    return Err(cqe_syndrome::LOCAL_PROT_ERR);
                }
                plan.push((s.addr, s.len));
            } else {
                self.key_translate_into(
                    s.lkey,
                    pd,
                    s.addr,
                    s.len,
                    crate::mkey::Access::LocalRead,
                    plan,
                )
                .map_err(|_| cqe_syndrome::LOCAL_PROT_ERR)?;
            }
            self.check_mapped(plan, false, what)
                .map_err(|_| cqe_syndrome::LOCAL_PROT_ERR)?;
            for &(iova, n) in plan.iter() {
                let at = out.len();
                out.resize(at + n as usize, 0);
                self.rd(iova, &mut out[at..], what)
                    .map_err(|_| cqe_syndrome::LOCAL_PROT_ERR)?;
            }
        }
        Ok(())
    }

    /// The WQE completed: advance, and a requester CQE if it was signaled.
    pub(super) fn req_done(&mut self, qpn: u32, w: &Wqe, len: u32) {
        let Some(q) = self.objects.qps.get_mut(&qpn) else {
            return;
        };
        q.sq_ci = q.sq_ci.wrapping_add(w.wqebbs);
        q.wait = None;
        if !w.signaled {
            return;
        }
        let (cqn, v1, uidx) = (q.cqn_snd, q.cqe_v1(), q.user_index);
        let mut c = [0u8; 64];
        cqe64::opcode.set(&mut c, CqeOpcode::REQ.0).expect("4-bit");
        cqe64::sop_opcode.set(&mut c, w.opcode).expect("8-bit");
        cqe64::qpn.set(&mut c, qpn).expect("24-bit");
        cqe64::wqe_counter.set(&mut c, w.index).expect("16-bit");
        cqe64::byte_cnt.set(&mut c, len).expect("32-bit");
        if v1 {
            cqe64::srqn.set(&mut c, uidx).expect("24-bit");
        }
        if let Some(cqn) = cqn {
            self.cq_push(cqn, c, false);
        }
    }

    /// An error CQE for the WQE at `index` (opcode `opcode`, `wqebbs` long),
    /// then the QP enters ERR (which flushes what follows).
    pub(super) fn req_error(&mut self, qpn: u32, index: u16, wqebbs: u16, opcode: u8, synd: u8) {
        if let Some(q) = self.objects.qps.get_mut(&qpn) {
            q.sq_ci = index.wrapping_add(wqebbs);
            q.wait = None;
            q.wire.tx = None;
        }
        self.push_req_err(qpn, index, opcode, synd);
        self.qp_enter_error(qpn);
    }

    fn push_req_err(&mut self, qpn: u32, index: u16, opcode: u8, synd: u8) {
        let Some(q) = self.objects.qps.get(&qpn) else {
            return;
        };
        let (cqn, v1, uidx) = (q.cqn_snd, q.cqe_v1(), q.user_index);
        let mut c = [0u8; 64];
        err_cqe::opcode
            .set(&mut c, CqeOpcode::REQ_ERR.0)
            .expect("4-bit");
        err_cqe::syndrome.set(&mut c, synd).expect("8-bit");
        err_cqe::s_wqe_opcode.set(&mut c, opcode).expect("8-bit");
        err_cqe::qpn.set(&mut c, qpn).expect("24-bit");
        err_cqe::wqe_counter.set(&mut c, index).expect("16-bit");
        if v1 {
            err_cqe::srqn.set(&mut c, uidx).expect("24-bit");
        }
        if synd == cqe_syndrome::WR_FLUSH_ERR {
            self.stats.flushed += 1;
        }
        if let Some(cqn) = cqn {
            self.cq_push(cqn, c, true);
        }
    }

    /// The head WQE got an RNR NAK or no ACK: wait for the timer, or fail
    /// once the retries are used up (`rnr_retry` 7 = forever).
    fn requester_wait(&mut self, qpn: u32, w: &Wqe, kind: WaitKind, timer: Option<u64>) {
        let now = self.now_ns();
        let Some(q) = self.objects.qps.get_mut(&qpn) else {
            return;
        };
        let initial = match kind {
            WaitKind::Rnr if q.rnr_retry == 7 => None,
            WaitKind::Rnr => Some(q.rnr_retry),
            WaitKind::Ack => Some(q.retry_count),
        };
        let left = q
            .wait
            .filter(|x| x.kind == kind)
            .map(|x| x.left)
            .unwrap_or(initial);
        if left == Some(0) {
            let synd = match kind {
                WaitKind::Rnr => cqe_syndrome::RNR_RETRY_EXC_ERR,
                WaitKind::Ack => cqe_syndrome::TRANSPORT_RETRY_EXC_ERR,
            };
            self.req_error(qpn, w.index, w.wqebbs, w.opcode, synd);
            return;
        }
        q.wait = Some(Wait {
            kind,
            at_ns: timer.map_or(u64::MAX, |t| now.saturating_add(t)),
            left: left.map(|l| l - 1),
        });
    }

    /// Move a QP to ERR: flush its send queue (one flush CQE per posted
    /// WQE, signaled or not) and, for an SRQ-attached QP newly in error,
    /// raise the last-WQE-reached event.
    pub(crate) fn qp_enter_error(&mut self, qpn: u32) {
        let Some(q) = self.objects.qps.get_mut(&qpn) else {
            return;
        };
        let was = q.state;
        q.state = QpState::Err;
        q.wait = None;
        q.wire = WireQp::default();
        let srq_attached = q.rq_type == rq_type::SRQ;
        self.flush_sq(qpn);
        self.flush_rq(qpn);
        if was != QpState::Err && srq_attached {
            self.qp_event(qpn, EventType::SRQ_LAST_WQE);
        }
    }

    /// One RESP_ERR / WR_FLUSH CQE per WQE posted to the QP's own receive
    /// ring beyond the consumer, in order (an SRQ's WQEs are not the QP's
    /// to flush).
    fn flush_rq(&mut self, qpn: u32) {
        let mut avail = self.rq_available(qpn);
        while avail > 0 {
            let Some(ci) = self
                .objects
                .qps
                .get_mut(&qpn)
                .and_then(|q| q.rq.as_mut())
                .map(|r| {
                    r.ci = r.ci.wrapping_add(1);
                    r.ci.wrapping_sub(1)
                })
            else {
                return;
            };
            self.stats.flushed += 1;
            self.resp_err_cqe(qpn, 0, ci, cqe_syndrome::WR_FLUSH_ERR);
            avail -= 1;
        }
    }

    /// Receive WQEs posted to a QP in ERR are flushed as the device sees
    /// the doorbell record move (no MMIO doorbell announces them; Linux
    /// `ib_drain_rq` relies on the flush of a receive posted in ERR).
    pub(crate) fn rq_flush_due(&mut self) {
        let mut due = std::mem::take(&mut self.due_scratch);
        due.clear();
        due.extend(
            self.objects
                .qps
                .iter()
                .filter(|(_, q)| q.state == QpState::Err && q.rq.is_some())
                .map(|(n, _)| *n),
        );
        for &qpn in &due {
            self.flush_rq(qpn);
        }
        self.due_scratch = due;
    }

    /// One REQ_ERR / WR_FLUSH CQE per WQE posted beyond the consumer.
    fn flush_sq(&mut self, qpn: u32) {
        if self.objects.qps.get(&qpn).is_none_or(|q| q.no_sq) {
            return;
        }
        let Some(mut avail) = self.sq_posted(qpn, false) else {
            return;
        };
        while avail > 0 {
            let Some(ci) = self.objects.qps.get(&qpn).map(|q| q.sq_ci) else {
                return;
            };
            let Ok(first) = self.read_wqebb(qpn, ci) else {
                return;
            };
            let ds = wqe_ctrl_seg::ds.get(&first);
            let mut n = mlx5_regs::consts::wqe::wqebbs(ds) as u16;
            if n == 0 || n > avail {
                n = 1;
            }
            let opcode = wqe_ctrl_seg::opcode.get(&first);
            if let Some(q) = self.objects.qps.get_mut(&qpn) {
                q.sq_ci = ci.wrapping_add(n);
            }
            self.push_req_err(qpn, ci, opcode, cqe_syndrome::WR_FLUSH_ERR);
            avail -= n;
        }
    }

    /// A catastrophic send-queue error (ring or doorbell record unreadable,
    /// producer beyond the ring): WQ_CATAS_ERROR and ERR.
    fn qp_catastrophe(&mut self, qpn: u32, why: &str) {
        self.records.violations.push(Violation::SendQueue(format!(
            "QP {qpn:#x}: {why}: catastrophic error"
        )));
        self.qp_event(qpn, EventType::WQ_CATAS_ERROR);
        self.qp_enter_error(qpn);
    }

    /// A QP-affiliated asynchronous event (EQE byte 0x34 type 0 = QP, byte
    /// 0x38 = QPN; Linux `rsc_event_notifier`, `drivers/infiniband/hw/mlx5/qpc.c`).
    pub(crate) fn qp_event(&mut self, qpn: u32, t: EventType) {
        let mut e = State::make_eqe(t, 0);
        let d = eqe::event_data.get_mut(&mut e);
        qp_events::r#type
            .set(d, ctx::EVENT_QUEUE_TYPE_QP)
            .expect("8-bit");
        qp_events::qpn_rqn_sqn.set(d, qpn).expect("24-bit");
        self.raise(e);
    }

    /// Retry every QP whose RNR/ACK timer has expired.
    pub(crate) fn qp_run_due(&mut self) {
        let now = self.now_ns();
        let mut due = std::mem::take(&mut self.due_scratch);
        due.clear();
        due.extend(
            self.objects
                .qps
                .iter()
                .filter(|(_, q)| q.wait.is_some_and(|w| w.at_ns <= now))
                .map(|(n, _)| *n),
        );
        for &qpn in &due {
            self.qp_kick(qpn);
        }
        self.due_scratch = due;
    }

    /// Device time of the next QP timer.
    pub(crate) fn qp_next_due(&self) -> Option<u64> {
        self.objects
            .qps
            .values()
            .filter_map(|q| q.wait.map(|w| w.at_ns))
            .filter(|&t| t != u64::MAX)
            .min()
    }

    /// 2RST: the QP forgets its connection and send-queue position.
    pub(crate) fn qp_reset(&mut self, qpn: u32) {
        if let Some(q) = self.objects.qps.get_mut(&qpn) {
            q.state = QpState::Reset;
            q.wait = None;
            q.wire = WireQp::default();
            q.sq_ci = 0;
            if let Some(r) = q.rq.as_mut() {
                r.ci = 0;
            }
            q.mtu = 0;
            q.log_msg_max = 0;
            q.remote_qpn = 0;
            q.next_rcv_psn = 0;
            q.next_send_psn = 0;
            q.path = Default::default();
        }
    }
}
