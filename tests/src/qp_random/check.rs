//! Checking what comes back: every completion against the reference (and
//! the receive buffers byte for byte), completion and async events.

use mlx5_driver::cq::{Cqe, CqeStatus};
use mlx5_driver::eq::Event;
use mlx5_driver::qp::{QpState, SendCompletion, SendOpcode};
use mlx5_regs::consts::wqe;
use mlx5_regs::CqeOpcode;

use super::model::{Exp, ExpEvent, Id, RecvWqe};
use super::{Run, POISON, RECV_AT, SLOT};

impl Run {
    pub(super) fn poll(&mut self) {
        let Some(id) = self.pick(&self.cq_ids()) else {
            return;
        };
        let k = 1 + self.rng.below(16) as usize;
        self.poll_cq(id, k, true);
    }

    /// Poll up to `k` completions of CQ `id` and check each; `exact`: all
    /// the reference expects are in the ring (else a prefix may be).
    pub(super) fn poll_cq(&mut self, id: Id, k: usize, exact: bool) {
        let mut out = [Cqe::EMPTY; 16];
        let n = self
            .cqs
            .get_mut(&id)
            .expect("driver CQ")
            .poll(&mut out[..k]);
        let waiting = self.m.cqs[&id].q.len();
        if exact {
            assert_eq!(
                n,
                k.min(waiting),
                "{}: poll({k}) with {waiting} due",
                self.at
            );
        } else {
            assert!(
                n <= k.min(waiting),
                "{}: poll({k}) gave {n}, {waiting} due",
                self.at
            );
        }
        for c in &out[..n] {
            let e = self.m.cqs.get_mut(&id).unwrap().q.pop_front().unwrap();
            self.check_cqe(c, e);
        }
    }

    fn check_cqe(&mut self, c: &Cqe, e: Exp) {
        self.stats.cqes += 1;
        let at = self.at.clone();
        match e {
            Exp::Req {
                qpn,
                gen,
                wr_id,
                opcode,
                index,
                syndrome,
                retired,
                signaled,
            } => {
                assert!(
                    c.is_requester() && c.qpn == qpn,
                    "{at}: {c:?}, expected {wr_id:#x} of QP {qpn:#x}"
                );
                assert_eq!(c.wqe_counter, index, "{at}: {c:?}");
                match syndrome {
                    None => assert!(
                        c.opcode == CqeOpcode::REQ
                            && c.send_opcode == opcode
                            && c.status == CqeStatus::Success,
                        "{at}: {c:?}"
                    ),
                    Some(s) => {
                        assert!(
                            c.opcode == CqeOpcode::REQ_ERR
                                && matches!(c.status, CqeStatus::Error { syndrome, .. } if syndrome == s),
                            "{at}: {c:?}, expected syndrome {s:#x}"
                        );
                        if s == mlx5_regs::consts::cqe_syndrome::WR_FLUSH_ERR {
                            self.stats.flushes += 1;
                        } else {
                            self.stats.errors += 1;
                        }
                    }
                }
                let Some(dq) = self.qps.get_mut(&qpn) else {
                    return; // destroyed: its CQE matches no QP
                };
                let mq = self.m.qps.get_mut(&qpn).unwrap();
                let r = dq.complete_send(c);
                if mq.gen != gen {
                    // From before a 2RST: it must not match a request
                    // posted since.
                    assert!(r.is_err(), "{at}: a CQE from before 2RST matched {r:?}");
                    return;
                }
                let got = r.unwrap_or_else(|b| panic!("{at}: complete_send: {b:?} for {c:?}"));
                assert_eq!(
                    got,
                    SendCompletion {
                        wr_id,
                        opcode: send_opcode(opcode),
                        status: c.status,
                        wqe_index: index,
                        retired,
                        signaled,
                    },
                    "{at}"
                );
                mq.drv_out -= retired;
                if syndrome.is_some() {
                    mq.view = QpState::Error;
                }
            }
            Exp::Resp {
                qpn,
                gen,
                src_qpn,
                srq,
                srqn,
                recv,
                opcode,
                len,
                imm,
                syndrome,
                payload,
            } => {
                assert!(
                    c.opcode == opcode && c.qpn == qpn && c.srqn == srqn,
                    "{at}: {c:?}, expected {opcode:?} of QP {qpn:#x} SRQ {srqn:#x}"
                );
                match syndrome {
                    None => {
                        assert_eq!(c.status, CqeStatus::Success, "{at}");
                        assert_eq!((c.byte_len, c.src_qpn), (len, src_qpn), "{at}: {c:?}");
                        if opcode != CqeOpcode::RESP_SEND {
                            assert_eq!(c.imm, imm, "{at}: immediate");
                        }
                    }
                    Some(s) => {
                        assert!(
                            matches!(c.status, CqeStatus::Error { syndrome, .. } if syndrome == s),
                            "{at}: {c:?}, expected syndrome {s:#x}"
                        );
                        if s == mlx5_regs::consts::cqe_syndrome::WR_FLUSH_ERR {
                            self.stats.flushes += 1;
                            self.stats.own_rq_flushes += 1;
                        } else {
                            self.stats.errors += 1;
                        }
                    }
                }
                let live_qp = self
                    .qps
                    .get_mut(&qpn)
                    .filter(|_| self.m.qps[&qpn].gen == gen);
                let done = match (live_qp, srq.and_then(|s| self.srqs.get_mut(&s))) {
                    // The QP's own receive queue: the oldest WQE.
                    (Some(dq), None) if srq.is_none() => {
                        let r = dq.complete_own_recv(c);
                        if syndrome.is_some() {
                            self.m.qps.get_mut(&qpn).unwrap().view = QpState::Error;
                        }
                        self.stats.own_rq_cqes += 1;
                        Some(r)
                    }
                    (Some(dq), Some(ds)) => {
                        let r = dq.complete_recv(ds, c);
                        if syndrome.is_some() {
                            self.m.qps.get_mut(&qpn).unwrap().view = QpState::Error;
                        }
                        Some(r)
                    }
                    (None, Some(ds)) => Some(ds.complete_cqe(c)),
                    (_, None) => None,
                };
                if let Some(r) = done {
                    let got =
                        r.unwrap_or_else(|b| panic!("{at}: receive completion {b:?} for {c:?}"));
                    assert_eq!(got.wr_id, recv.wr_id, "{at}: receive wr_id");
                    assert_eq!((got.qpn, got.srqn), (qpn, srqn), "{at}");
                    if syndrome.is_none() && opcode != CqeOpcode::RESP_SEND {
                        assert_eq!(got.imm, imm, "{at}");
                    }
                    match srq {
                        Some(s) => self.m.srqs.get_mut(&s).unwrap().consumed -= 1,
                        None => {
                            let rq = self.m.qps.get_mut(&qpn).and_then(|q| q.rq.as_mut());
                            rq.expect("a live QP's own receive queue").consumed -= 1;
                        }
                    }
                }
                self.check_recv_buffers(&recv, payload.as_deref(), &at);
                self.free_recv.push(recv.slot);
            }
        }
    }

    /// The receive buffers hold the payload in scatter order and nothing
    /// else was written (the rest still holds the poison byte).
    fn check_recv_buffers(&self, r: &RecvWqe, payload: Option<&[u8]>, at: &str) {
        let mut buf = vec![0u8; SLOT];
        self.mem.read_bytes(RECV_AT + r.slot * SLOT, &mut buf);
        let base = self.mem.iova() + (RECV_AT + r.slot * SLOT) as u64;
        let mut expect = vec![POISON; SLOT];
        let mut left = payload.unwrap_or(&[]);
        for s in &r.segs {
            let n = (s.len as usize).min(left.len());
            let off = (s.addr - base) as usize;
            expect[off..off + n].copy_from_slice(&left[..n]);
            left = &left[n..];
        }
        assert!(left.is_empty(), "{at}: payload longer than the buffers");
        if buf != expect {
            let i = (0..SLOT).find(|&i| buf[i] != expect[i]).unwrap();
            panic!(
                "{at}: receive wr_id {:#x} buffer byte {i}: {:#04x}, expected {:#04x}",
                r.wr_id, buf[i], expect[i]
            );
        }
    }

    /// Take every event: completion events must follow arms, async events
    /// must be exactly the reference's, in order; QP events go to their QP.
    pub(super) fn events(&mut self) {
        let at = self.at.clone();
        self.hca
            .poll_events()
            .unwrap_or_else(|e| panic!("{at}: poll_events: {e}"));
        while let Some(ev) = self.hca.next_completion() {
            let Event::Completion { cqn } = ev else {
                panic!("{at}: completion queue gave {ev:?}");
            };
            let (_, c) = self
                .m
                .cqs
                .iter_mut()
                .find(|(_, c)| c.cqn == cqn)
                .unwrap_or_else(|| panic!("{at}: event for unknown CQ {cqn:#x}"));
            assert!(c.events_due > 0, "{at}: CQ {cqn:#x} event nobody asked for");
            c.events_due -= 1;
        }
        for c in self.m.cqs.values() {
            assert_eq!(c.events_due, 0, "{at}: CQ {:#x} event missing", c.cqn);
        }
        let mut got = Vec::new();
        while let Some(ev) = self.hca.next_event() {
            got.push(ev);
        }
        let expect: Vec<ExpEvent> = self.m.events.drain(..).collect();
        let mapped: Vec<Option<ExpEvent>> = got
            .iter()
            .map(|e| match *e {
                Event::Qp { qpn, event } => Some(ExpEvent::Qp(qpn, event)),
                Event::SrqLimit { srqn } => Some(ExpEvent::Limit(srqn)),
                _ => None,
            })
            .collect();
        let expect_some: Vec<Option<ExpEvent>> = expect.iter().copied().map(Some).collect();
        assert_eq!(mapped, expect_some, "{at}: async events {got:?}");
        for ev in &got {
            self.stats.events += 1;
            match *ev {
                Event::Qp { qpn, event } => {
                    let Some(dq) = self.qps.get_mut(&qpn) else {
                        continue;
                    };
                    assert_eq!(dq.handle_event(ev), Some(event), "{at}");
                    let q = self.m.qps.get_mut(&qpn).unwrap();
                    if matches!(q.view, QpState::Reset | QpState::Init) {
                        // Raised before its last reset: changes nothing.
                        self.stats.stale_events += 1;
                        continue;
                    }
                    if event.is_error() {
                        q.view = QpState::Error;
                    }
                    if event == mlx5_driver::eq::QpEvent::LastWqeReached {
                        q.last_wqe = true;
                    }
                }
                _ => self.stats.limit_events += 1,
            }
        }
    }
}

fn send_opcode(op: u8) -> SendOpcode {
    match op {
        wqe::OPCODE_SEND => SendOpcode::Send,
        wqe::OPCODE_SEND_IMM => SendOpcode::SendImm,
        wqe::OPCODE_RDMA_WRITE => SendOpcode::RdmaWrite,
        wqe::OPCODE_RDMA_READ => SendOpcode::RdmaRead,
        wqe::OPCODE_ATOMIC_CS => SendOpcode::AtomicCmpSwap,
        wqe::OPCODE_ATOMIC_FA => SendOpcode::AtomicFetchAdd,
        _ => SendOpcode::RdmaWriteImm,
    }
}
