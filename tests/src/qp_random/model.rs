//! The reference of the QP random test: what the device and the driver must
//! do, written from the model's specification (docs/fidelity.md §9, §10 and
//! §14: send execution, loopback delivery, RNR and transport retries,
//! errors, flushes, events) and the IB semantics it cites, not from the
//! model's code. Pure data: the test drives the driver and this reference
//! side by side and compares every completion, event, refusal and the
//! device's QP state after every step.
//!
//! One simplification the test arranges rather than models: a retry timer
//! never expires inside a step. In synchronous mode the test lets device
//! time pass only between steps ([`Model::pump`], `Device::advance_us` past
//! every timer), so each waiting QP retries exactly once per pump, in QP
//! number order (the device's order). In threaded mode nothing is posted
//! that would wait.

use std::collections::{BTreeMap, VecDeque};

use mlx5_driver::eq::QpEvent;
use mlx5_regs::consts::{cqe_syndrome as syn, wqe};
use mlx5_regs::CqeOpcode;

/// A stable id of a CQ or SRQ in one run.
pub type Id = usize;

/// A QP's state as firmware has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fw {
    /// RESET.
    Reset,
    /// INIT.
    Init,
    /// RTR.
    Rtr,
    /// RTS.
    Rts,
    /// ERR.
    Err,
}

/// Rights of a memory key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rights {
    /// Local read (send gather).
    pub lr: bool,
    /// Local write (receive scatter).
    pub lw: bool,
    /// Remote write (RDMA WRITE target).
    pub rw: bool,
}

/// What a key is used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Send gather.
    Read,
    /// Receive scatter.
    Write,
    /// RDMA WRITE target.
    Remote,
}

/// One scatter/gather entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seg {
    /// Device address.
    pub addr: u64,
    /// Bytes.
    pub len: u32,
    /// Key.
    pub lkey: u32,
}

/// A posted send work request.
#[derive(Debug, Clone)]
pub struct Wr {
    /// The caller's id.
    pub wr_id: u64,
    /// `MLX5_OPCODE_*`.
    pub opcode: u8,
    /// Immediate data.
    pub imm: u32,
    /// RDMA: remote address and key.
    pub remote: Option<(u64, u32)>,
    /// Gather list (`None`: inline).
    pub gather: Option<Vec<Seg>>,
    /// The message bytes.
    pub payload: Vec<u8>,
    /// Asked for a completion.
    pub signaled: bool,
    /// WQE index (producer counter at the WQE).
    pub index: u16,
    /// WQEBBs of the WQE.
    pub wqebbs: u16,
    /// Source slot of the gather buffers, freed once the WQE is done.
    pub slot: Option<usize>,
}

impl Wr {
    fn rdma(&self) -> bool {
        matches!(
            self.opcode,
            wqe::OPCODE_RDMA_WRITE | wqe::OPCODE_RDMA_WRITE_IMM
        )
    }
}

/// A posted receive WQE.
#[derive(Debug, Clone)]
pub struct RecvWqe {
    /// The caller's id.
    pub wr_id: u64,
    /// Scatter list (every length ≥ 1).
    pub segs: Vec<Seg>,
    /// Buffer slot.
    pub slot: usize,
}

/// A completion the CQ must return next.
#[derive(Debug, Clone)]
pub enum Exp {
    /// Requester (REQ or REQ_ERR).
    Req {
        /// Sending QP.
        qpn: u32,
        /// Its incarnation (bumped by every 2RST).
        gen: u32,
        /// `wr_id` of the request.
        wr_id: u64,
        /// Send opcode posted.
        opcode: u8,
        /// WQE index.
        index: u16,
        /// Error syndrome, `None` on success.
        syndrome: Option<u8>,
        /// Work requests the CQE retires (1 + unsignaled ones before it).
        retired: u32,
        /// The request was signaled.
        signaled: bool,
    },
    /// Responder (RESP_* or RESP_ERR).
    Resp {
        /// Receiving QP.
        qpn: u32,
        /// Its incarnation.
        gen: u32,
        /// Sending QP.
        src_qpn: u32,
        /// The SRQ (id) and number.
        srq: Id,
        /// SRQ number.
        srqn: u32,
        /// The receive WQE.
        recv: RecvWqe,
        /// CQE opcode.
        opcode: CqeOpcode,
        /// Message length (success).
        len: u32,
        /// Immediate data (IMM opcodes).
        imm: u32,
        /// Error syndrome.
        syndrome: Option<u8>,
        /// Bytes that must be in the receive buffers (SEND, SEND_IMM).
        payload: Option<Vec<u8>>,
    },
}

/// An async event the driver must report next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpEvent {
    /// A QP event.
    Qp(u32, QpEvent),
    /// SRQ limit reached (SRQ number).
    Limit(u32),
}

/// A CQ.
#[derive(Debug, Clone)]
pub struct MCq {
    /// CQ number.
    pub cqn: u32,
    /// `Cq::capacity()`.
    pub cap: u32,
    /// Completions in the ring, oldest first.
    pub q: VecDeque<Exp>,
    /// Armed, no completion since.
    pub armed: bool,
    /// Completion events owed.
    pub events_due: u32,
    /// QPs and ISSI-0 SRQs reporting to it.
    pub users: u32,
}

/// An SRQ.
#[derive(Debug, Clone)]
pub struct MSrq {
    /// SRQ (RMP) number.
    pub srqn: u32,
    /// The CQ an ISSI-0 SRQ names.
    pub cq: Option<Id>,
    /// `Srq::max_wr()`.
    pub max_wr: u32,
    /// `Srq::max_sge()`.
    pub max_sge: u32,
    /// Posted, not consumed (the device's order).
    pub fifo: VecDeque<RecvWqe>,
    /// Consumed, completion not yet handed to the driver.
    pub consumed: u32,
    /// Armed limit (0: none).
    pub lwm: u32,
    /// Attached QPs.
    pub users: u32,
}

impl MSrq {
    /// What `Srq::outstanding()` says.
    pub fn outstanding(&self) -> u32 {
        self.fifo.len() as u32 + self.consumed
    }
}

/// Why a head WQE waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitKind {
    /// RNR NAK.
    Rnr,
    /// No ACK.
    Ack,
}

/// A waiting head WQE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    /// Why.
    pub kind: WaitKind,
    /// Retries left (`None`: forever).
    pub left: Option<u8>,
}

/// The send queue's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sq {
    /// Outstanding work requests allowed.
    pub max_wr: u32,
    /// Gather entries per request.
    pub max_sge: u32,
    /// Inline bytes per request.
    pub max_inline: u32,
    /// Ring size in WQEBBs.
    pub wqebbs: u32,
}

/// A QP.
#[derive(Debug, Clone)]
pub struct MQp {
    /// QP number.
    pub qpn: u32,
    /// Incarnation: bumped by every 2RST.
    pub gen: u32,
    /// Send queue.
    pub sq: Option<Sq>,
    /// Send CQ.
    pub send_cq: Option<Id>,
    /// The CQ given as `recv_cq` (not the send CQ).
    pub recv_cq: Option<Id>,
    /// SRQ.
    pub srq: Option<Id>,
    /// Firmware state.
    pub fw: Fw,
    /// The state the driver reports (`Qp::state`), as a `QpState`.
    pub view: mlx5_driver::qp::QpState,
    /// Remote write allowed (RST2INIT).
    pub rwe: bool,
    /// Peer (INIT2RTR).
    pub remote: u32,
    /// Next PSN sent.
    pub send_psn: u32,
    /// Next PSN expected.
    pub rcv_psn: u32,
    /// RNR timer code given to requesters.
    pub min_rnr: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (7: forever).
    pub rnr_retry: u8,
    /// Posted, not executed.
    pub pending: VecDeque<Wr>,
    /// The head waits.
    pub wait: Option<Wait>,
    /// Unsignaled successes since the last CQE.
    pub uncovered: u32,
    /// `Qp::outstanding_sends()`.
    pub drv_out: u32,
    /// The driver's producer counter.
    pub cur_post: u16,
    /// The device's consumer counter.
    pub sq_ci: u16,
    /// `Qp::last_wqe_reached()`.
    pub last_wqe: bool,
}

impl MQp {
    /// The CQ receive completions go to.
    pub fn rcq(&self) -> Option<Id> {
        self.srq.and(self.recv_cq.or(self.send_cq))
    }
}

/// Counters to compare with the device's `TrafficStats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Messages delivered.
    pub messages: u64,
    /// RNR NAKs.
    pub rnr_naks: u64,
    /// ACK timeouts.
    pub ack_timeouts: u64,
    /// Flush CQEs.
    pub flushed: u64,
}

/// The whole reference.
#[derive(Debug, Clone)]
pub struct Model {
    /// The reserved lkey.
    pub reserved: u32,
    /// Live keys.
    pub keys: BTreeMap<u32, Rights>,
    /// CQs.
    pub cqs: BTreeMap<Id, MCq>,
    /// SRQs.
    pub srqs: BTreeMap<Id, MSrq>,
    /// QPs by number (the device retries waiting QPs in this order).
    pub qps: BTreeMap<u32, MQp>,
    /// Async events due, in order.
    pub events: VecDeque<ExpEvent>,
    /// Path MTU in bytes.
    pub mtu: u32,
    /// RDMA target area: device address and the bytes it must hold.
    pub rdma_base: u64,
    /// The bytes of the RDMA target area.
    pub rdma: Vec<u8>,
    /// Send source slots freed by execution (the test recycles them).
    pub freed_src: Vec<usize>,
    /// Traffic counters.
    pub counts: Counts,
}

/// Mask of a PSN.
const PSN: u32 = 0x00ff_ffff;

impl Model {
    /// Is `key` good for `need` right now?
    pub fn key_ok(&self, key: u32, need: Need) -> bool {
        if key == self.reserved {
            // Identity translation; sends need qpc.rlky, which the driver sets.
            return need != Need::Remote;
        }
        self.keys.get(&key).is_some_and(|r| match need {
            Need::Read => r.lr,
            Need::Write => r.lw,
            Need::Remote => r.rw,
        })
    }

    fn push_cqe(&mut self, cq: Option<Id>, e: Exp) {
        let Some(c) = cq.and_then(|c| self.cqs.get_mut(&c)) else {
            return;
        };
        assert!(
            (c.q.len() as u32) <= c.cap,
            "test bug: CQ {:#x} would overrun ({} waiting, capacity {})",
            c.cqn,
            c.q.len(),
            c.cap
        );
        c.q.push_back(e);
        if c.armed {
            c.armed = false;
            c.events_due += 1;
        }
    }

    /// A doorbell of QP `qpn` (every WQE it published is in `pending`).
    pub fn doorbell(&mut self, qpn: u32) {
        self.kick(qpn, false);
    }

    /// Device time passed beyond every retry timer: each waiting QP
    /// retries once, in QP-number order.
    pub fn pump(&mut self) {
        let due: Vec<u32> = self
            .qps
            .iter()
            .filter(|(_, q)| q.wait.is_some())
            .map(|(n, _)| *n)
            .collect();
        for qpn in due {
            self.kick(qpn, true);
        }
    }

    /// Run QP `qpn`'s send queue as far as its state and flow control
    /// allow; `due`: its retry timer expired.
    fn kick(&mut self, qpn: u32, due: bool) {
        loop {
            let Some(q) = self.qps.get(&qpn) else {
                return;
            };
            if q.sq.is_none() {
                return;
            }
            match q.fw {
                Fw::Rts => {}
                Fw::Err => {
                    self.flush(qpn);
                    return;
                }
                _ => return,
            }
            if q.wait.is_some() && !due {
                return;
            }
            if q.pending.is_empty() || !self.exec_head(qpn) {
                return;
            }
        }
    }

    /// Execute the head WQE of RTS QP `s`; true to go on with the next.
    fn exec_head(&mut self, s: u32) -> bool {
        let w = self.qps[&s].pending[0].clone();
        if let Some(g) = &w.gather {
            if g.iter()
                .any(|x| x.len > 0 && !self.key_ok(x.lkey, Need::Read))
            {
                self.req_error(s, syn::LOCAL_PROT_ERR);
                return false;
            }
        }
        let Some(t) = self.route(s) else {
            self.counts.ack_timeouts += 1;
            self.wait(s, WaitKind::Ack);
            return false;
        };
        if w.rdma() {
            let (_, rkey) = w.remote.expect("RDMA has a remote address");
            if !self.qps[&t].rwe || !self.key_ok(rkey, Need::Remote) {
                self.fail(s, syn::REMOTE_ACCESS_ERR, t, Some(QpEvent::AccessError));
                return false;
            }
        }
        let mut recv = None;
        if w.opcode != wqe::OPCODE_RDMA_WRITE {
            let Some(srq) = self.qps[&t].srq else {
                self.fail(
                    s,
                    syn::REMOTE_INVAL_REQ_ERR,
                    t,
                    Some(QpEvent::InvalidRequest),
                );
                return false;
            };
            let sq = self.srqs.get_mut(&srq).expect("a QP's SRQ exists");
            let Some(r) = sq.fifo.pop_front() else {
                self.counts.rnr_naks += 1;
                self.wait(s, WaitKind::Rnr);
                return false;
            };
            sq.consumed += 1;
            recv = Some((srq, r));
        }
        let len = w.payload.len() as u32;
        if let (Some((srq, r)), false) = (&recv, w.rdma()) {
            if let Err(length) = self.scatter_check(&r.segs, len) {
                let (rs, ss) = if length {
                    (syn::LOCAL_LENGTH_ERR, syn::REMOTE_INVAL_REQ_ERR)
                } else {
                    (syn::LOCAL_PROT_ERR, syn::REMOTE_OP_ERR)
                };
                let tq = &self.qps[&t];
                let e = Exp::Resp {
                    qpn: t,
                    gen: tq.gen,
                    src_qpn: s,
                    srq: *srq,
                    srqn: self.srqs[srq].srqn,
                    recv: r.clone(),
                    opcode: CqeOpcode::RESP_ERR,
                    len: 0,
                    imm: 0,
                    syndrome: Some(rs),
                    payload: None,
                };
                self.push_cqe(tq.rcq(), e);
                self.check_limit(*srq);
                self.fail(s, ss, t, None);
                return false;
            }
        }
        if let (true, Some((raddr, _))) = (w.rdma(), w.remote) {
            let at = (raddr - self.rdma_base) as usize;
            self.rdma[at..at + w.payload.len()].copy_from_slice(&w.payload);
        }
        let npkts = len.div_ceil(self.mtu).max(1);
        if let Some(q) = self.qps.get_mut(&s) {
            q.send_psn = (q.send_psn + npkts) & PSN;
        }
        if let Some(q) = self.qps.get_mut(&t) {
            q.rcv_psn = (q.rcv_psn + npkts) & PSN;
        }
        if let Some((srq, r)) = recv {
            let tq = &self.qps[&t];
            let (opcode, payload) = match w.opcode {
                wqe::OPCODE_SEND => (CqeOpcode::RESP_SEND, Some(w.payload.clone())),
                wqe::OPCODE_SEND_IMM => (CqeOpcode::RESP_SEND_IMM, Some(w.payload.clone())),
                _ => (CqeOpcode::RESP_WR_IMM, None),
            };
            let e = Exp::Resp {
                qpn: t,
                gen: tq.gen,
                src_qpn: s,
                srq,
                srqn: self.srqs[&srq].srqn,
                recv: r,
                opcode,
                len,
                imm: if opcode == CqeOpcode::RESP_SEND {
                    0
                } else {
                    w.imm
                },
                syndrome: None,
                payload,
            };
            self.push_cqe(tq.rcq(), e);
            self.check_limit(srq);
        }
        self.counts.messages += 1;
        self.req_done(s);
        true
    }

    /// The peer of `s` if a packet reaches it and it accepts it: it exists,
    /// receives (RTR/RTS), is connected back and expects `s`'s PSN.
    fn route(&self, s: u32) -> Option<u32> {
        let q = &self.qps[&s];
        let t = self.qps.get(&q.remote)?;
        (matches!(t.fw, Fw::Rtr | Fw::Rts) && t.remote == s && t.rcv_psn == q.send_psn)
            .then_some(q.remote)
    }

    /// Err(true): longer than the list; Err(false): a key refuses. Every
    /// entry's key is checked, also those the message does not reach.
    fn scatter_check(&self, segs: &[Seg], len: u32) -> Result<(), bool> {
        let mut left = len;
        for s in segs {
            if !self.key_ok(s.lkey, Need::Write) {
                return Err(false);
            }
            left -= s.len.min(left);
        }
        if left > 0 {
            return Err(true);
        }
        Ok(())
    }

    fn take_head(&mut self, s: u32) -> (Wr, u32) {
        let q = self.qps.get_mut(&s).expect("live QP");
        let w = q.pending.pop_front().expect("a head WQE");
        q.sq_ci = q.sq_ci.wrapping_add(w.wqebbs);
        q.wait = None;
        let retired = 1 + q.uncovered;
        q.uncovered = 0;
        if let Some(slot) = w.slot {
            self.freed_src.push(slot);
        }
        (w, retired)
    }

    fn req_cqe(&mut self, s: u32, w: &Wr, retired: u32, syndrome: Option<u8>) {
        let q = &self.qps[&s];
        let e = Exp::Req {
            qpn: s,
            gen: q.gen,
            wr_id: w.wr_id,
            opcode: w.opcode,
            index: w.index,
            syndrome,
            retired,
            signaled: w.signaled,
        };
        self.push_cqe(q.send_cq, e);
    }

    fn req_done(&mut self, s: u32) {
        let (w, retired) = self.take_head(s);
        if w.signaled {
            self.req_cqe(s, &w, retired, None);
        } else if let Some(q) = self.qps.get_mut(&s) {
            // Executed, no CQE: the next CQE retires it too.
            q.uncovered = retired;
        }
    }

    fn req_error(&mut self, s: u32, syndrome: u8) {
        let (w, retired) = self.take_head(s);
        self.req_cqe(s, &w, retired, Some(syndrome));
        self.enter_error(s);
    }

    /// The head fails with `syndrome` at the requester; the responder `t`
    /// raises `event` (if any) and enters ERR too.
    fn fail(&mut self, s: u32, syndrome: u8, t: u32, event: Option<QpEvent>) {
        self.req_error(s, syndrome);
        if let Some(e) = event {
            self.events.push_back(ExpEvent::Qp(t, e));
        }
        self.enter_error(t);
    }

    fn wait(&mut self, s: u32, kind: WaitKind) {
        let q = self.qps.get_mut(&s).expect("live QP");
        let initial = match kind {
            WaitKind::Rnr if q.rnr_retry == 7 => None,
            WaitKind::Rnr => Some(q.rnr_retry),
            WaitKind::Ack => Some(q.retry_cnt),
        };
        let left = match q.wait {
            Some(w) if w.kind == kind => w.left,
            _ => initial,
        };
        if left == Some(0) {
            let syndrome = match kind {
                WaitKind::Rnr => syn::RNR_RETRY_EXC_ERR,
                WaitKind::Ack => syn::TRANSPORT_RETRY_EXC_ERR,
            };
            self.req_error(s, syndrome);
            return;
        }
        q.wait = Some(Wait {
            kind,
            left: left.map(|l| l - 1),
        });
    }

    /// QP `qpn` enters ERR: its send queue is flushed, and an SRQ-attached
    /// QP newly in error raises last-WQE-reached.
    pub fn enter_error(&mut self, qpn: u32) {
        let Some(q) = self.qps.get_mut(&qpn) else {
            return;
        };
        let was = q.fw;
        q.fw = Fw::Err;
        q.wait = None;
        let srq = q.srq.is_some();
        self.flush(qpn);
        if was != Fw::Err && srq {
            self.events
                .push_back(ExpEvent::Qp(qpn, QpEvent::LastWqeReached));
        }
    }

    /// One flush CQE per WQE posted and not executed.
    fn flush(&mut self, qpn: u32) {
        while self.qps.get(&qpn).is_some_and(|q| !q.pending.is_empty()) {
            self.counts.flushed += 1;
            self.req_error_no_state(qpn);
        }
    }

    fn req_error_no_state(&mut self, s: u32) {
        let (w, retired) = self.take_head(s);
        self.req_cqe(s, &w, retired, Some(syn::WR_FLUSH_ERR));
    }

    /// A consumption (or an arm) left fewer WQEs than the armed limit.
    pub fn check_limit(&mut self, srq: Id) {
        let s = self.srqs.get_mut(&srq).expect("live SRQ");
        if s.lwm > 0 && (s.fifo.len() as u32) < s.lwm {
            s.lwm = 0;
            self.events.push_back(ExpEvent::Limit(s.srqn));
        }
    }

    /// The driver removed QP `qpn`'s unpolled completions from its CQs
    /// (`qp_to_reset_and_clean`, as Linux does at 2RST); a receive
    /// completion's WQE went back to its SRQ. Returns the receive buffer
    /// slots freed and how many completions were removed.
    pub fn remove_qp_cqes(&mut self, qpn: u32) -> (Vec<usize>, u32) {
        let q = &self.qps[&qpn];
        let mut cqs = vec![q.send_cq, q.rcq()];
        cqs.dedup();
        let mut slots = Vec::new();
        let mut removed = 0;
        for c in cqs.into_iter().flatten() {
            let Some(cq) = self.cqs.get_mut(&c) else {
                continue;
            };
            let old = std::mem::take(&mut cq.q);
            for e in old {
                match e {
                    Exp::Req { qpn: n, .. } if n == qpn => removed += 1,
                    Exp::Resp {
                        qpn: n, srq, recv, ..
                    } if n == qpn => {
                        if let Some(s) = self.srqs.get_mut(&srq) {
                            s.consumed -= 1;
                        }
                        slots.push(recv.slot);
                        removed += 1;
                    }
                    e => cq.q.push_back(e),
                }
            }
        }
        (slots, removed)
    }

    /// CQEs this CQ may still receive from work already posted: every
    /// unexecuted send of a QP reporting to it (a success, an error or a
    /// flush each), and every unexecuted message to a QP receiving on it.
    pub fn future_cqes(&self, cq: Id) -> u32 {
        let mut n = 0;
        for q in self.qps.values() {
            if q.send_cq == Some(cq) {
                n += q.pending.len() as u32;
            }
            let to_here = self.qps.get(&q.remote).is_some_and(|t| t.rcq() == Some(cq));
            if to_here {
                n += q
                    .pending
                    .iter()
                    .filter(|w| w.opcode != wqe::OPCODE_RDMA_WRITE)
                    .count() as u32;
            }
        }
        n
    }

    /// Completions waiting plus those that may still come.
    pub fn reserved(&self, cq: Id) -> u32 {
        self.cqs[&cq].q.len() as u32 + self.future_cqes(cq)
    }
}
