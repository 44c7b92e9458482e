//! CQs and SRQs in the QP random test: created and destroyed (busy ones
//! refused), resized, armed, receives posted, SRQ limits armed; each
//! outcome predicted before the driver is called.

use mlx5_driver::cq::{CqOptions, CqeSize};
use mlx5_driver::srq::{LimitArm, PostError, PostFailure, RecvRequest, Sge};
use mlx5_driver::Error;
use mlx5_regs::{CmdStatus, Opcode};

use super::model::{Id, MCq, MSrq, Need, RecvWqe, Seg};
use super::objects::injected;
use super::{Run, POISON, RECV_AT, SLOT};

/// Live CQs and SRQs at most.
const MAX_CQS: usize = 4;
const MAX_SRQS: usize = 3;

impl Run {
    pub(super) fn create_cq(&mut self) {
        if self.m.cqs.len() >= MAX_CQS {
            return;
        }
        let n = 1 + self.rng.below(200) as u32;
        let cqe_size = if self.rng.below(4) == 0 {
            CqeSize::B128
        } else {
            CqeSize::B64
        };
        let fault = self.maybe_fault(Opcode::CREATE_CQ);
        let opts = CqOptions {
            cqe_size,
            ..Default::default()
        };
        match self.hca.create_cq(n, opts) {
            Ok(cq) => {
                assert!(
                    !fault,
                    "{}: create_cq despite the injected failure",
                    self.at
                );
                let cap = (n + 1).next_power_of_two() - 1;
                assert_eq!(cq.capacity(), cap, "{}: create_cq({n})", self.at);
                let id = self.new_id();
                self.m.cqs.insert(
                    id,
                    MCq {
                        cqn: cq.cqn(),
                        cap,
                        q: Default::default(),
                        armed: false,
                        events_due: 0,
                        users: 0,
                    },
                );
                self.cqs.insert(id, cq);
            }
            Err(e) => {
                assert!(
                    fault && injected(&e, Opcode::CREATE_CQ),
                    "{}: create_cq({n}): {e}",
                    self.at
                );
                self.stats.refusals += 1;
            }
        }
    }

    pub(super) fn destroy_cq(&mut self) {
        let Some(id) = self.pick(&self.cq_ids()) else {
            return;
        };
        let busy = self.m.cqs[&id].users > 0;
        let fault = !busy && self.maybe_fault(Opcode::DESTROY_CQ);
        let cq = self.cqs.remove(&id).expect("driver CQ");
        match self.hca.destroy_cq(cq) {
            Ok(()) => {
                assert!(!busy && !fault, "{}: destroy_cq accepted", self.at);
                // Its completions go with it (of destroyed QPs only: a CQ
                // with users is busy); the receive WQEs they name stay
                // outstanding in their SRQ, whose driver never saw them.
                // An event it fired and nobody took is withdrawn with it.
                let c = self.m.cqs.remove(&id).unwrap();
                for e in &c.q {
                    if let super::model::Exp::Resp { recv, .. } = e {
                        self.free_recv.push(recv.slot);
                    }
                }
            }
            Err(d) => {
                let (cq, e) = d.into_parts();
                if busy {
                    assert!(matches!(e, Error::Busy(_)), "{}: {e}", self.at);
                } else {
                    assert!(
                        fault && injected(&e, Opcode::DESTROY_CQ),
                        "{}: {e}",
                        self.at
                    );
                }
                self.stats.refusals += 1;
                self.cqs.insert(id, cq);
            }
        }
    }

    pub(super) fn create_srq(&mut self) {
        if self.m.srqs.len() >= MAX_SRQS {
            return;
        }
        let issi0 = self.hca.issi() == 0;
        let cq_id = if issi0 {
            match self.pick(&self.cq_ids()) {
                Some(c) => Some(c),
                None => return,
            }
        } else {
            None
        };
        let max_wr = 1 + self.rng.below(64) as u32;
        let max_sge = 1 + self.rng.below(3) as u32;
        let op = if issi0 {
            Opcode::CREATE_SRQ
        } else {
            Opcode::CREATE_RMP
        };
        let fault = self.maybe_fault(op);
        let cq = cq_id.map(|c| self.cqs.get_mut(&c).expect("driver CQ"));
        match self.hca.create_srq(max_wr, max_sge, cq) {
            Ok(srq) => {
                assert!(!fault, "{}: create_srq despite the failure", self.at);
                assert_eq!(
                    srq.max_wr() as u32,
                    (max_wr + 1).next_power_of_two() - 1,
                    "{}: SRQ size",
                    self.at
                );
                assert!(srq.max_sge() as u32 >= max_sge, "{}", self.at);
                if let Some(c) = cq_id {
                    self.m.cqs.get_mut(&c).unwrap().users += 1;
                }
                let id = self.new_id();
                self.m.srqs.insert(
                    id,
                    MSrq {
                        srqn: srq.srqn(),
                        cq: cq_id,
                        max_wr: srq.max_wr() as u32,
                        max_sge: srq.max_sge() as u32,
                        fifo: Default::default(),
                        consumed: 0,
                        lwm: 0,
                        users: 0,
                    },
                );
                self.srqs.insert(id, srq);
            }
            Err(e) => {
                assert!(fault && injected(&e, op), "{}: create_srq: {e}", self.at);
                self.stats.refusals += 1;
            }
        }
    }

    pub(super) fn destroy_srq(&mut self) {
        let Some(id) = self.pick(&self.srq_ids()) else {
            return;
        };
        self.destroy_srq_id(id, true);
    }

    pub(super) fn destroy_srq_for_finish(&mut self, id: Id) {
        self.destroy_srq_id(id, false);
    }

    fn destroy_srq_id(&mut self, id: Id, faults: bool) {
        let busy = self.m.srqs[&id].users > 0;
        let op = if self.hca.issi() == 0 {
            Opcode::DESTROY_SRQ
        } else {
            Opcode::DESTROY_RMP
        };
        let fault = faults && !busy && self.maybe_fault(op);
        let srq = self.srqs.remove(&id).expect("driver SRQ");
        let cq_id = self.m.srqs[&id].cq;
        let cq = cq_id.map(|c| self.cqs.get_mut(&c).expect("driver CQ"));
        match self.hca.destroy_srq(srq, cq) {
            Ok(()) => {
                assert!(!busy && !fault, "{}: destroy_srq accepted", self.at);
                let s = self.m.srqs.remove(&id).expect("model SRQ");
                // Its limit events not yet taken are withdrawn with it (its
                // number may go to the next SRQ).
                self.m
                    .events
                    .retain(|e| *e != super::model::ExpEvent::Limit(s.srqn));
                if let Some(c) = s.cq {
                    self.m.cqs.get_mut(&c).unwrap().users -= 1;
                }
                // Posted buffers come back; consumed ones with a completion
                // still in a CQ are freed when it is polled (it names an SRQ
                // that is gone).
                self.free_recv.extend(s.fifo.iter().map(|r| r.slot));
            }
            Err(d) => {
                let (srq, e) = d.into_parts();
                if busy {
                    assert!(matches!(e, Error::Busy(_)), "{}: {e}", self.at);
                } else {
                    assert!(fault && injected(&e, op), "{}: {e}", self.at);
                }
                self.stats.refusals += 1;
                self.srqs.insert(id, srq);
            }
        }
    }

    /// Post receives to an SRQ or (one in three, when there is one) to a
    /// QP's own receive queue. Not to an own queue whose QP is in ERR: the
    /// device flushes those when it next reads the doorbell record, a
    /// moment the step-level reference does not pin down.
    pub(super) fn post_recv(&mut self) {
        let own: Vec<u32> = (self.m.qps.values())
            .filter(|q| q.rq.is_some() && q.fw != super::model::Fw::Err)
            .map(|q| q.qpn)
            .collect();
        let target = match self.pick(&self.srq_ids()) {
            Some(id) if own.is_empty() || self.rng.below(3) != 0 => RecvTarget::Srq(id),
            _ => match self.pick(&own) {
                Some(qpn) => RecvTarget::Qp(qpn),
                None => return,
            },
        };
        let (max_sge, max_wr, out) = match target {
            RecvTarget::Srq(id) => {
                let s = &self.m.srqs[&id];
                (s.max_sge, s.max_wr, s.outstanding())
            }
            RecvTarget::Qp(qpn) => {
                let r = self.m.qps[&qpn].rq.as_ref().unwrap();
                (r.max_sge, r.max_wr, r.outstanding())
            }
        };
        let k = 1 + self.rng.below(8) as usize;
        let mut plan: Vec<RecvWqe> = Vec::new();
        let mut sges: Vec<Vec<Sge>> = Vec::new();
        for _ in 0..k {
            let Some(slot) = self.free_recv.pop() else {
                break;
            };
            let n = if self.rng.below(15) == 0 {
                max_sge as usize + 1
            } else {
                1 + self.rng.below(max_sge as u64) as usize
            };
            let base = self.mem.iova() + (RECV_AT + slot * SLOT) as u64;
            let mut off = 0u64;
            let mut segs = Vec::new();
            for _ in 0..n {
                // Mostly large enough for what the senders send (up to
                // 4 × 120 bytes, mostly below 80); now and then small.
                let max = if self.rng.below(8) == 0 {
                    32
                } else {
                    (SLOT / n).min(256) as u64
                };
                let len = 1 + self.rng.below(max) as u32;
                let lkey = self.choose_key(Need::Write);
                segs.push(Seg {
                    addr: base + off,
                    len,
                    lkey,
                });
                off += len as u64;
            }
            self.mem.fill(RECV_AT + slot * SLOT, SLOT, POISON);
            sges.push(
                segs.iter()
                    .map(|s| Sge {
                        addr: s.addr,
                        length: s.len,
                        lkey: s.lkey,
                    })
                    .collect(),
            );
            plan.push(RecvWqe {
                wr_id: self.next_wr,
                segs,
                slot,
            });
            self.next_wr += 1;
        }
        if let RecvTarget::Qp(qpn) = target {
            // Each WQE of an own receive queue ends in a completion or a
            // flush on the QP's receive CQ: never more than it has room for.
            let room = self.m.qps[&qpn].rcq().map_or(0, |c| {
                let cq = &self.m.cqs[&c];
                cq.cap.saturating_sub(self.m.reserved(c)) as usize
            });
            if plan.len() > room {
                self.free_recv.extend(plan.drain(room..).map(|p| p.slot));
                sges.truncate(room);
            }
            if plan.is_empty() {
                return;
            }
        }
        let reqs: Vec<RecvRequest<'_>> = plan
            .iter()
            .zip(&sges)
            .map(|(p, s)| RecvRequest {
                wr_id: p.wr_id,
                sges: s,
            })
            .collect();
        // The SRQ checks the scatter count, then room; the QP's own queue
        // room, then the scatter count.
        let mut expect = Ok(());
        let mut posted = 0;
        for (i, p) in plan.iter().enumerate() {
            let too_many = (p.segs.len() > max_sge as usize).then_some(PostError::TooManySges {
                given: p.segs.len(),
                max: max_sge as usize,
            });
            let full = (out + i as u32 == max_wr).then_some(PostError::Full);
            let error = match target {
                RecvTarget::Srq(_) => too_many.or(full),
                RecvTarget::Qp(_) => full.or(too_many),
            };
            if let Some(error) = error {
                expect = Err(PostFailure { index: i, error });
                break;
            }
            posted += 1;
        }
        let r = match target {
            RecvTarget::Srq(id) => self.srqs.get_mut(&id).expect("driver SRQ").post(&reqs),
            RecvTarget::Qp(qpn) => {
                let qp = self.qps.get_mut(&qpn).expect("driver QP");
                self.hca.post_recv(qp, &reqs)
            }
        };
        assert_eq!(
            r,
            expect,
            "{}: post_recv of {} to {target:?}",
            self.at,
            plan.len()
        );
        if r.is_err() {
            self.stats.refusals += 1;
        }
        self.stats.recvs += posted as u64;
        let mut rest = plan.split_off(posted);
        self.free_recv.extend(rest.drain(..).map(|p| p.slot));
        match target {
            RecvTarget::Srq(id) => self.m.srqs.get_mut(&id).unwrap().fifo.extend(plan),
            RecvTarget::Qp(qpn) => {
                self.stats.own_rq_recvs += posted as u64;
                let rq = self.m.qps.get_mut(&qpn).unwrap().rq.as_mut().unwrap();
                rq.fifo.extend(plan);
            }
        }
    }

    pub(super) fn arm_limit(&mut self) {
        let Some(id) = self.pick(&self.srq_ids()) else {
            return;
        };
        let (max_wr, out) = {
            let s = &self.m.srqs[&id];
            (s.max_wr, s.outstanding())
        };
        let l = self.rng.below(max_wr as u64 + 2) as u32;
        let op = if self.hca.issi() == 0 {
            Opcode::ARM_RQ
        } else {
            Opcode::MODIFY_RMP
        };
        let fault = l <= max_wr && self.maybe_fault(op);
        let srq = self.srqs.get_mut(&id).expect("driver SRQ");
        let r = self.hca.arm_srq_limit(srq, l);
        let at = &self.at;
        if l > max_wr {
            assert!(matches!(r, Err(Error::InvalidArgument(_))), "{at}: {r:?}");
            self.stats.refusals += 1;
            return;
        }
        if fault {
            assert!(
                matches!(r, Err(Error::Command { opcode, status, .. })
                    if opcode == op && status == CmdStatus::BAD_PARAM_ERR),
                "{at}: {r:?}"
            );
            self.stats.refusals += 1;
            return;
        }
        let got = r.unwrap_or_else(|e| panic!("{at}: arm_srq_limit({l}): {e}"));
        self.m.srqs.get_mut(&id).unwrap().lwm = l;
        if l == 0 {
            assert_eq!(got, LimitArm::Disarmed, "{at}");
        } else {
            if self.limit_on_arm {
                self.m.check_limit(id);
            }
            if out >= l || self.limit_on_arm {
                assert_eq!(got, LimitArm::Armed, "{at}: limit {l}, {out} outstanding");
            } else {
                // Firmware did not fire on arm; the driver disarmed it and
                // the caller raises the event.
                assert_eq!(
                    got,
                    LimitArm::RaiseNow,
                    "{at}: limit {l}, {out} outstanding"
                );
                self.m.srqs.get_mut(&id).unwrap().lwm = 0;
                self.stats.limit_events += 1;
            }
        }
        if self.rng.below(3) == 0 {
            let q = self
                .hca
                .query_srq(&self.srqs[&id])
                .unwrap_or_else(|e| panic!("{}: query_srq: {e}", self.at));
            assert_eq!(
                q.lwm as u32, self.m.srqs[&id].lwm,
                "{}: the limit reads back",
                self.at
            );
        }
    }

    pub(super) fn resize_cq(&mut self) {
        let Some(id) = self.pick(&self.cq_ids()) else {
            return;
        };
        let n = 1 + self.rng.below(300) as u32;
        self.resize_to(id, n, true);
    }

    /// Resize CQ `id` to `n` entries with the outcome predicted; skipped
    /// when an accepted resize would leave less room than the work already
    /// posted may need.
    pub(super) fn resize_to(&mut self, id: Id, n: u32, faults: bool) {
        let c = &self.m.cqs[&id];
        let waiting = c.q.len() as u32;
        let old_nent = c.cap + 1;
        let new_nent = (n + 1).next_power_of_two();
        let reserved = self.m.reserved(id);
        let same = new_nent == old_nent;
        let refused = waiting > new_nent || waiting >= old_nent;
        // Accepted, the new ring must hold what may still come (or be
        // exactly full with nothing more to come).
        let fits = reserved < new_nent || (reserved == waiting && waiting == new_nent);
        if !same && !refused && !fits {
            return;
        }
        let fault = faults && !same && self.maybe_fault(Opcode::MODIFY_CQ);
        let cq = self.cqs.get_mut(&id).expect("driver CQ");
        let r = self.hca.resize_cq(cq, n);
        let at = &self.at;
        if same {
            assert_eq!(r, Ok(()), "{at}: resize to the same size");
        } else if fault {
            assert!(
                matches!(r, Err(Error::Command { opcode: Opcode::MODIFY_CQ, status, .. })
                    if status == CmdStatus::BAD_PARAM_ERR),
                "{at}: {r:?}"
            );
            self.stats.refusals += 1;
        } else if refused {
            assert!(
                matches!(r, Err(Error::Command { opcode: Opcode::MODIFY_CQ, status, .. })
                    if status == CmdStatus::BAD_SIZE_OUTS_CQES_ERR),
                "{at}: resize to {new_nent} with {waiting} waiting in {old_nent}: {r:?}"
            );
            self.stats.refusals += 1;
        } else {
            assert_eq!(
                r,
                Ok(()),
                "{at}: resize to {new_nent} with {waiting} waiting in {old_nent}"
            );
            self.m.cqs.get_mut(&id).unwrap().cap = new_nent - 1;
            self.stats.resizes += 1;
        }
    }

    pub(super) fn arm_cq(&mut self) {
        let Some(id) = self.pick(&self.cq_ids()) else {
            return;
        };
        // The HCA counts the CQ's completion events (taken by the test or
        // not), so the arm never repeats the sequence number of an arm
        // that fired.
        let cq = self.cqs.get_mut(&id).expect("driver CQ");
        self.hca
            .arm_cq(cq, false)
            .unwrap_or_else(|e| panic!("{}: arm_cq: {e}", self.at));
        let c = self.m.cqs.get_mut(&id).unwrap();
        if !c.q.is_empty() {
            c.events_due += 1;
            c.armed = false;
        } else {
            c.armed = true;
        }
    }
}

/// Where a receive is posted.
#[derive(Debug, Clone, Copy)]
enum RecvTarget {
    /// An SRQ.
    Srq(super::model::Id),
    /// A QP's own receive queue.
    Qp(u32),
}
