//! The reference's send engine: doorbells, execution of the head WQE
//! (gather, route, RDMA rights, receive WQE, scatter), RNR and ACK waits,
//! errors, flushes, last-WQE and limit events (docs/fidelity.md §14.5–§14.8,
//! §10 for the limit).

use mlx5_driver::eq::QpEvent;
use mlx5_regs::consts::{cqe_syndrome as syn, wqe};
use mlx5_regs::CqeOpcode;

use super::{Exp, ExpEvent, Fw, Id, Model, Need, RdRes, ResKind, Seg, Wait, WaitKind, Wr};

/// Mask of a PSN.
const PSN: u32 = 0x00ff_ffff;

impl Model {
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
        if w.read() || w.atomic() {
            return self.exec_read_atomic(s, &w);
        }
        if let Some(g) = &w.gather {
            if g.iter()
                .any(|x| x.len > 0 && !self.key_ok(x.lkey, Need::Read))
            {
                self.req_error(s, syn::LOCAL_PROT_ERR);
                return false;
            }
        }
        let len = w.payload.len() as u32;
        let npkts = len.div_ceil(self.mtu).max(1);
        let Some((t, duplicate)) = self.route(s, npkts) else {
            self.counts.ack_timeouts += 1;
            self.wait(s, WaitKind::Ack);
            return false;
        };
        if duplicate {
            // Every packet behind the responder's PSN: ACKed again, not
            // delivered; the requester completes.
            if let Some(q) = self.qps.get_mut(&s) {
                q.send_psn = (q.send_psn + npkts) & PSN;
            }
            self.req_done(s);
            return true;
        }
        if w.rdma() {
            let (_, rkey) = w.remote.expect("RDMA has a remote address");
            // A zero-length RDMA WRITE names no memory: the rkey is not
            // checked (IBTA, rxe `check_rkey`), the QP's right is.
            let key_needed = !w.payload.is_empty();
            // A QP without remote write does not support the operation:
            // invalid request (rxe `check_op_valid`); a key refusal is a
            // remote access error.
            if !self.qps[&t].rwe {
                self.fail(
                    s,
                    syn::REMOTE_INVAL_REQ_ERR,
                    t,
                    Some(QpEvent::InvalidRequest),
                );
                return false;
            }
            if key_needed && !self.key_ok(rkey, Need::Remote) {
                self.fail(s, syn::REMOTE_ACCESS_ERR, t, Some(QpEvent::AccessError));
                return false;
            }
        }
        let mut recv = None;
        if w.opcode != wqe::OPCODE_RDMA_WRITE {
            // The receive WQE: from the responder's SRQ or its own receive
            // queue; neither is an invalid request, none posted an RNR NAK.
            let srq = self.qps[&t].srq;
            let taken = match srq {
                Some(srq) => {
                    let sq = self.srqs.get_mut(&srq).expect("a QP's SRQ exists");
                    let r = sq.fifo.pop_front();
                    sq.consumed += u32::from(r.is_some());
                    r
                }
                None => {
                    let Some(rq) = self.qps.get_mut(&t).unwrap().rq.as_mut() else {
                        self.fail(
                            s,
                            syn::REMOTE_INVAL_REQ_ERR,
                            t,
                            Some(QpEvent::InvalidRequest),
                        );
                        return false;
                    };
                    let r = rq.fifo.pop_front();
                    rq.consumed += u32::from(r.is_some());
                    r
                }
            };
            let Some(r) = taken else {
                self.counts.rnr_naks += 1;
                self.counts.own_rq_rnr_naks += u64::from(srq.is_none());
                self.wait(s, WaitKind::Rnr);
                return false;
            };
            recv = Some((srq, r));
        }
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
                    srqn: self.srqn_of(*srq),
                    recv: r.clone(),
                    opcode: CqeOpcode::RESP_ERR,
                    len: 0,
                    imm: 0,
                    syndrome: Some(rs),
                    payload: None,
                };
                self.push_cqe(tq.rcq(), e);
                if let Some(srq) = *srq {
                    self.check_limit(srq);
                }
                self.fail(s, ss, t, None);
                return false;
            }
        }
        if let (true, Some((raddr, _))) = (w.rdma(), w.remote) {
            let at = (raddr - self.rdma_base) as usize;
            self.rdma[at..at + w.payload.len()].copy_from_slice(&w.payload);
        }
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
                srqn: self.srqn_of(srq),
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
            if let Some(srq) = srq {
                self.check_limit(srq);
            }
        }
        self.counts.messages += 1;
        self.req_done(s);
        true
    }

    /// Execute the RDMA READ or atomic at the head of `s` (docs/fidelity.md
    /// §19): route; a repeated request is answered from the responder's
    /// saved one (none: invalid request), a READ served again from memory,
    /// an atomic with its saved original value; else the responder's right
    /// (`rre` / `rae`), an atomic's alignment, the key's right (a
    /// zero-length READ names no memory), execution, the request saved,
    /// both PSNs advanced; then the requester writes what came back through
    /// its local keys (local protection error after the responder served).
    fn exec_read_atomic(&mut self, s: u32, w: &Wr) -> bool {
        let len = if w.atomic() {
            8
        } else {
            w.payload.len() as u32
        };
        let npkts = if w.atomic() {
            1
        } else {
            len.div_ceil(self.mtu).max(1)
        };
        let Some((t, duplicate)) = self.route(s, npkts) else {
            self.counts.ack_timeouts += 1;
            self.wait(s, WaitKind::Ack);
            return false;
        };
        let (raddr, rkey) = w.remote.expect("a READ or atomic has a remote address");
        let first = self.qps[&s].send_psn;
        let saved = if duplicate {
            match self.qps[&t].rd_res {
                Some(r)
                    if ((first.wrapping_sub(r.first) << 8) as i32 >> 8) >= 0
                        && first.wrapping_sub(r.first) & PSN < r.npkts =>
                {
                    Some(r.kind)
                }
                _ => {
                    self.fail(
                        s,
                        syn::REMOTE_INVAL_REQ_ERR,
                        t,
                        Some(QpEvent::InvalidRequest),
                    );
                    return false;
                }
            }
        } else {
            None
        };
        let back = match saved {
            Some(ResKind::Atomic(_)) => 8,
            Some(ResKind::Read(_, key, l)) => {
                if let Some((synd, event)) = self.read_refusal(t, key, l) {
                    self.fail(s, synd, t, Some(event));
                    return false;
                }
                l
            }
            None if w.read() => {
                if let Some((synd, event)) = self.read_refusal(t, rkey, len) {
                    self.fail(s, synd, t, Some(event));
                    return false;
                }
                let kind = ResKind::Read(raddr, rkey, len);
                self.save(t, first, npkts, kind);
                len
            }
            None => {
                if !self.qps[&t].rae {
                    // Atomics not enabled on the QP: invalid request.
                    self.fail(
                        s,
                        syn::REMOTE_INVAL_REQ_ERR,
                        t,
                        Some(QpEvent::InvalidRequest),
                    );
                    return false;
                }
                if raddr % 8 != 0 {
                    self.fail(
                        s,
                        syn::REMOTE_INVAL_REQ_ERR,
                        t,
                        Some(QpEvent::InvalidRequest),
                    );
                    return false;
                }
                if !self.key_ok(rkey, Need::Atomic) {
                    self.fail(s, syn::REMOTE_ACCESS_ERR, t, Some(QpEvent::AccessError));
                    return false;
                }
                let at = (raddr - self.rdma_base) as usize;
                let mut b = [0u8; 8];
                b.copy_from_slice(&self.rdma[at..at + 8]);
                // Host endianness (bring-up set it, as Linux does).
                let orig = u64::from_le_bytes(b);
                let (swap_add, compare) = w.operands;
                let new = if w.opcode == wqe::OPCODE_ATOMIC_CS {
                    (orig == compare).then_some(swap_add)
                } else {
                    Some(orig.wrapping_add(swap_add))
                };
                if let Some(v) = new {
                    self.rdma[at..at + 8].copy_from_slice(&v.to_le_bytes());
                }
                self.counts.atomics += 1;
                self.save(t, first, npkts, ResKind::Atomic(orig));
                8
            }
        };
        if w.read() && back > 0 {
            self.counts.reads += 1;
        }
        if let Some(q) = self.qps.get_mut(&s) {
            q.send_psn = (q.send_psn + npkts) & PSN;
        }
        // The requester writes what came back through its entries.
        let segs = w.gather.as_deref().unwrap_or(&[]);
        let mut left = back;
        for x in segs {
            if left == 0 {
                break;
            }
            if x.len > 0 && !self.key_ok(x.lkey, Need::Write) {
                self.req_error(s, syn::LOCAL_PROT_ERR);
                return false;
            }
            left -= x.len.min(left);
        }
        if left != 0 {
            self.req_error(s, syn::LOCAL_LENGTH_ERR);
            return false;
        }
        self.counts.messages += 1;
        self.req_done(s);
        true
    }

    /// The responder `t` serves a READ of `len` bytes through `key`.
    /// Why responder `t` refuses a READ through `key`, if it does: no `rre`
    /// on the QP is an invalid request (rxe `check_op_valid`), a key
    /// without the right or the range a remote access error.
    fn read_refusal(&self, t: u32, key: u32, len: u32) -> Option<(u8, QpEvent)> {
        if !self.qps[&t].rre {
            Some((syn::REMOTE_INVAL_REQ_ERR, QpEvent::InvalidRequest))
        } else if len != 0 && !self.key_ok(key, Need::RemoteRead) {
            Some((syn::REMOTE_ACCESS_ERR, QpEvent::AccessError))
        } else {
            None
        }
    }

    /// Responder `t` saves a served request and advances its PSN.
    fn save(&mut self, t: u32, first: u32, npkts: u32, kind: ResKind) {
        if let Some(q) = self.qps.get_mut(&t) {
            q.rd_res = Some(RdRes { first, npkts, kind });
            q.rcv_psn = (q.rcv_psn + npkts) & PSN;
        }
    }

    /// The peer of `s` if a packet reaches it and it answers: it exists,
    /// receives (RTR/RTS), is connected back, and expects `s`'s PSN
    /// (false) or has already seen every one of the message's `npkts` PSNs
    /// (true: a duplicate). A message ahead of it gets no usable answer.
    fn route(&self, s: u32, npkts: u32) -> Option<(u32, bool)> {
        let q = &self.qps[&s];
        let t = self.qps.get(&q.remote)?;
        if !(matches!(t.fw, Fw::Rtr | Fw::Rts) && t.remote == s) {
            return None;
        }
        let last = (q.send_psn + npkts - 1) & PSN;
        let behind = ((last.wrapping_sub(t.rcv_psn) << 8) as i32 >> 8) < 0;
        if t.rcv_psn == q.send_psn {
            Some((q.remote, false))
        } else if behind {
            Some((q.remote, true))
        } else {
            None
        }
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
        q.rd_res = None;
        let srq = q.srq.is_some();
        self.flush(qpn);
        self.flush_rq(qpn);
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

    /// One responder flush CQE per WQE of the QP's own receive queue, in
    /// order, after its send queue's (an SRQ's WQEs are not the QP's to
    /// flush).
    fn flush_rq(&mut self, qpn: u32) {
        let Some(q) = self.qps.get_mut(&qpn) else {
            return;
        };
        let (gen, rcq) = (q.gen, q.rcq());
        let Some(rq) = q.rq.as_mut() else {
            return;
        };
        let flushed: Vec<_> = rq.fifo.drain(..).collect();
        rq.consumed += flushed.len() as u32;
        for r in flushed {
            self.counts.flushed += 1;
            let e = Exp::Resp {
                qpn,
                gen,
                src_qpn: 0,
                srq: None,
                srqn: 0,
                recv: r,
                opcode: CqeOpcode::RESP_ERR,
                len: 0,
                imm: 0,
                syndrome: Some(syn::WR_FLUSH_ERR),
                payload: None,
            };
            self.push_cqe(rcq, e);
        }
    }

    /// The SRQ number a receive completion names (0: the QP's own queue).
    fn srqn_of(&self, srq: Option<Id>) -> u32 {
        srq.map_or(0, |s| self.srqs[&s].srqn)
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
}
