//! Data-path operations of the QP random test: posting sends and receives,
//! polling and checking every completion and its buffers, events, CQ arms
//! and resizes, SRQ limits.

use mlx5_driver::cq::{Cqe, CqeStatus};
use mlx5_driver::eq::Event;
use mlx5_driver::qp::{
    Payload, PostSendFailure, QpState, SendCompletion, SendError, SendOp, SendOpcode, SendRequest,
};
use mlx5_driver::srq::{LimitArm, PostError, PostFailure, RecvRequest, Sge};
use mlx5_driver::Error;
use mlx5_regs::consts::wqe;
use mlx5_regs::{CmdStatus, CqeOpcode, Opcode};

use super::model::{Exp, ExpEvent, Id, Need, RecvWqe, Seg, Wr};
use super::{Run, POISON, RDMA_LEN, RECV_AT, SLOT};

/// What the test posts before the driver sees it.
struct Planned {
    wr: Wr,
    /// Gather entries as given (zero-length ones included).
    sges: Vec<Sge>,
    inline: bool,
}

impl Run {
    /// A key for `need`: mostly the DMA key, sometimes the reserved lkey, a
    /// created key (with or without the right) or a destroyed one.
    fn choose_key(&mut self, need: Need) -> u32 {
        let dma = self.hca.dma_lkey().expect("DMA key");
        let created: Vec<u32> = self.mkeys.iter().map(|k| k.key()).collect();
        let dead = self.dead_keys.clone();
        if need == Need::Remote {
            let good: Vec<u32> = created
                .iter()
                .copied()
                .filter(|k| self.m.key_ok(*k, Need::Remote))
                .collect();
            if self.rng.below(30) != 0 {
                if let Some(k) = self.pick(&good) {
                    return k;
                }
            }
        }
        match self.rng.below(100) {
            0..=2 => self.m.reserved,
            3 | 4 => self.pick(&created).unwrap_or(dma),
            5 => self.pick(&dead).unwrap_or(dma),
            _ => dma,
        }
    }

    fn random_bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n);
        while v.len() < n {
            v.extend_from_slice(&self.rng.next().to_le_bytes());
        }
        v.truncate(n);
        v
    }

    pub(super) fn post_recv(&mut self) {
        let Some(id) = self.pick(&self.srq_ids()) else {
            return;
        };
        let (max_sge, max_wr) = {
            let s = &self.m.srqs[&id];
            (s.max_sge, s.max_wr)
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
        let reqs: Vec<RecvRequest<'_>> = plan
            .iter()
            .zip(&sges)
            .map(|(p, s)| RecvRequest {
                wr_id: p.wr_id,
                sges: s,
            })
            .collect();
        // The driver checks the scatter count, then room.
        let out = self.m.srqs[&id].outstanding();
        let mut expect = Ok(());
        let mut posted = 0;
        for (i, p) in plan.iter().enumerate() {
            let error = if p.segs.len() > max_sge as usize {
                Some(PostError::TooManySges {
                    given: p.segs.len(),
                    max: max_sge as usize,
                })
            } else if out + i as u32 == max_wr {
                Some(PostError::Full)
            } else {
                None
            };
            if let Some(error) = error {
                expect = Err(PostFailure { index: i, error });
                break;
            }
            posted += 1;
        }
        let r = self.srqs.get_mut(&id).expect("driver SRQ").post(&reqs);
        assert_eq!(r, expect, "{}: post_srq_recv of {}", self.at, plan.len());
        if r.is_err() {
            self.stats.refusals += 1;
        }
        self.stats.recvs += posted as u64;
        let mut rest = plan.split_off(posted);
        self.free_recv.extend(rest.drain(..).map(|p| p.slot));
        self.m.srqs.get_mut(&id).unwrap().fifo.extend(plan);
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
    fn resize_to(&mut self, id: Id, n: u32, faults: bool) {
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
        if self.m.cqs[&id].events_due > 0 {
            // Its event is not taken yet: an arm now would repeat the
            // sequence number of the arm that fired (a stale doorbell).
            return;
        }
        self.cqs.get_mut(&id).expect("driver CQ").arm(false);
        let c = self.m.cqs.get_mut(&id).unwrap();
        if !c.q.is_empty() {
            c.events_due += 1;
            c.armed = false;
        } else {
            c.armed = true;
        }
    }

    /// Plan one send work request of QP `qpn` (`None`: no buffer slot free).
    fn plan_wr(&mut self, qpn: u32) -> Option<Planned> {
        let sq = self.m.qps[&qpn].sq.expect("a send queue");
        // RDMA WRITEs mostly when a key with remote write exists.
        let rw_key = self
            .mkeys
            .iter()
            .any(|k| self.m.key_ok(k.key(), Need::Remote));
        let opcode = match self.rng.below(10) {
            6 | 7 if rw_key || self.rng.below(8) == 0 => wqe::OPCODE_RDMA_WRITE,
            8 | 9 if rw_key || self.rng.below(8) == 0 => wqe::OPCODE_RDMA_WRITE_IMM,
            0..=2 | 6 | 8 => wqe::OPCODE_SEND,
            _ => wqe::OPCODE_SEND_IMM,
        };
        let inline = sq.max_inline > 0 && self.rng.below(3) == 0;
        let mut sges = Vec::new();
        let mut slot = None;
        let payload = if inline {
            let len = if self.rng.below(15) == 0 {
                sq.max_inline + 1 + self.rng.below(8) as u32
            } else {
                self.rng.below(sq.max_inline as u64 + 1) as u32
            };
            self.random_bytes(len as usize)
        } else {
            let s = self.free_src.pop()?;
            slot = Some(s);
            let n = if self.rng.below(15) == 0 {
                sq.max_sge as usize + 1
            } else {
                self.rng.below(sq.max_sge.min(4) as u64 + 1) as usize
            };
            let base = self.mem.iova() + (s * SLOT) as u64;
            let mut off = 0;
            for _ in 0..n {
                let len = if self.rng.below(5) == 0 {
                    0
                } else {
                    let max = if self.rng.below(4) == 0 { 120 } else { 40 };
                    1 + self.rng.below(max) as u32
                };
                // The whole list stays in its slot (a refused one too: its
                // bytes are written before the driver refuses it).
                let len = len.min((SLOT as u64 - off) as u32 / 2);
                let lkey = self.choose_key(Need::Read);
                sges.push(Sge {
                    addr: base + off,
                    length: len,
                    lkey,
                });
                off += len as u64;
            }
            let bytes = self.random_bytes(off as usize);
            self.mem.write_bytes(s * SLOT, &bytes);
            bytes
        };
        let remote =
            matches!(opcode, wqe::OPCODE_RDMA_WRITE | wqe::OPCODE_RDMA_WRITE_IMM).then(|| {
                let room = RDMA_LEN.saturating_sub(payload.len()) as u64;
                let raddr = self.m.rdma_base + self.rng.below(room + 1);
                (raddr, self.choose_key(Need::Remote))
            });
        let wr_id = self.next_wr;
        self.next_wr += 1;
        let gather = (!inline).then(|| {
            sges.iter()
                .map(|s| Seg {
                    addr: s.addr,
                    len: s.length,
                    lkey: s.lkey,
                })
                .collect()
        });
        Some(Planned {
            wr: Wr {
                wr_id,
                opcode,
                imm: self.rng.next() as u32,
                remote,
                gather,
                payload,
                signaled: self.rng.below(4) != 0,
                index: 0,
                wqebbs: 0,
                slot,
            },
            sges,
            inline,
        })
    }

    pub(super) fn post_send(&mut self) {
        let with_sq: Vec<u32> = self
            .m
            .qps
            .values()
            .filter(|q| q.sq.is_some())
            .map(|q| q.qpn)
            .collect();
        // Mostly a QP whose connection works (both ends up, connected to
        // each other), so most messages get through.
        let healthy: Vec<u32> = with_sq
            .iter()
            .copied()
            .filter(|n| {
                let q = &self.m.qps[n];
                q.fw == super::model::Fw::Rts
                    && q.view == QpState::Rts
                    && self.m.qps.get(&q.remote).is_some_and(|t| {
                        t.remote == q.qpn
                            && t.srq.is_some()
                            && matches!(t.fw, super::model::Fw::Rtr | super::model::Fw::Rts)
                    })
            })
            .collect();
        let prefer = self.rng.below(8) != 0 && !healthy.is_empty();
        let qpn = match self.pick(if prefer { &healthy } else { &with_sq }) {
            Some(q) => q,
            None => return,
        };
        let k = if self.rng.below(8) == 0 {
            16
        } else {
            1 + self.rng.below(6) as usize
        };
        let mut plan = Vec::new();
        for _ in 0..k {
            match self.plan_wr(qpn) {
                Some(p) => plan.push(p),
                None => break,
            }
        }
        // What the driver accepts: the state first, then per request room,
        // gather count, inline size. Requests that could overrun a CQ are
        // not posted at all (the list is cut before them).
        let q = &self.m.qps[&qpn];
        let sq = q.sq.unwrap();
        let view = q.view;
        let mut out = q.drv_out;
        let mut expect = Ok(());
        let mut accepted = 0;
        let mut call_len = plan.len();
        let send_cq = q.send_cq.unwrap();
        let target_cq = self.m.qps.get(&q.remote).and_then(|t| t.rcq());
        let mut send_room = self.m.cqs[&send_cq].cap as i64 - self.m.reserved(send_cq) as i64;
        let mut recv_room =
            target_cq.map(|c| self.m.cqs[&c].cap as i64 - self.m.reserved(c) as i64);
        if !view.can_post_send() {
            expect = Err(PostSendFailure {
                index: 0,
                error: SendError::BadState { state: view },
            });
        } else {
            for (i, p) in plan.iter().enumerate() {
                let error = if out == sq.max_wr {
                    Some(SendError::Full)
                } else if !p.inline && p.sges.len() > sq.max_sge as usize {
                    Some(SendError::TooManySges {
                        given: p.sges.len(),
                        max: sq.max_sge,
                    })
                } else if p.inline && p.wr.payload.len() > sq.max_inline as usize {
                    Some(SendError::InlineTooLarge {
                        len: p.wr.payload.len(),
                        max: sq.max_inline,
                    })
                } else {
                    None
                };
                if let Some(error) = error {
                    expect = Err(PostSendFailure { index: i, error });
                    call_len = i + 1;
                    break;
                }
                let recv = p.wr.opcode != wqe::OPCODE_RDMA_WRITE && recv_room.is_some();
                let shared = recv && target_cq == Some(send_cq);
                send_room -= 1 + shared as i64;
                if recv && !shared {
                    *recv_room.as_mut().unwrap() -= 1;
                }
                if send_room < 0 || recv_room.is_some_and(|r| r < 0) {
                    call_len = i;
                    break;
                }
                out += 1;
                accepted += 1;
            }
        }
        for p in plan.drain(call_len..) {
            self.free_src.extend(p.wr.slot);
        }
        if plan.is_empty() {
            return;
        }
        // Number the accepted requests as the driver will.
        let mut cur = self.m.qps[&qpn].cur_post;
        for p in plan.iter_mut().take(accepted) {
            p.wr.index = cur;
            p.wr.wqebbs = wqebbs(&p.wr);
            cur = cur.wrapping_add(p.wr.wqebbs);
        }
        if self.threaded && accepted > 0 {
            // Nothing that would wait for a timer: its retry would run on
            // the device thread at a time the test does not know.
            let mut dry = self.m.clone();
            let q = dry.qps.get_mut(&qpn).unwrap();
            q.pending
                .extend(plan.iter().take(accepted).map(|p| p.wr.clone()));
            dry.doorbell(qpn);
            if dry.qps.values().any(|q| q.wait.is_some()) {
                for p in plan.drain(..) {
                    self.free_src.extend(p.wr.slot);
                }
                return;
            }
        }
        let reqs: Vec<SendRequest<'_>> = plan.iter().map(request).collect();
        let pre_len = self.m.cqs[&send_cq].q.len() as u32;
        let r = self.qps.get_mut(&qpn).expect("driver QP").post_send(&reqs);
        assert_eq!(
            r,
            expect,
            "{}: post_send of {} on QP {qpn:#x}",
            self.at,
            reqs.len()
        );
        if r.is_err() {
            self.stats.refusals += 1;
        }
        drop(reqs);
        for p in plan.drain(accepted..) {
            self.free_src.extend(p.wr.slot);
        }
        if plan.is_empty() {
            return;
        }
        self.stats.sends += plan.len() as u64;
        let q = self.m.qps.get_mut(&qpn).unwrap();
        q.cur_post = cur;
        q.drv_out += plan.len() as u32;
        q.pending.extend(plan.into_iter().map(|p| p.wr));
        self.m.doorbell(qpn);
        if self.threaded {
            self.in_flight(send_cq, pre_len);
        }
    }

    /// Threaded mode, right after a doorbell the device thread may not have
    /// taken yet: resize the send CQ (to a size accepted whether the new
    /// completions are already there or not) or poll it.
    fn in_flight(&mut self, cq: Id, pre_len: u32) {
        match self.rng.below(4) {
            0 => {
                let c = &self.m.cqs[&cq];
                let post_len = c.q.len() as u32;
                let old_nent = c.cap + 1;
                let floor = self.m.reserved(cq).max(post_len).max(pre_len);
                if post_len >= old_nent {
                    return;
                }
                let n = floor + self.rng.below(floor as u64 + 64) as u32;
                if (n + 1).next_power_of_two() == old_nent || n == 0 {
                    return;
                }
                self.resize_to(cq, n, false);
            }
            1 => {
                let k = 1 + self.rng.below(16) as usize;
                self.poll_cq(cq, k, false);
            }
            _ => {}
        }
    }

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
                        self.stats.errors += 1;
                    }
                }
                let live_qp = self
                    .qps
                    .get_mut(&qpn)
                    .filter(|_| self.m.qps[&qpn].gen == gen);
                let done = match (live_qp, self.srqs.get_mut(&srq)) {
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
                    self.m.srqs.get_mut(&srq).unwrap().consumed -= 1;
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
            if let Some(n) = self.dead_cq_events.get_mut(&cqn).filter(|n| **n > 0) {
                // Fired before its CQ was destroyed.
                *n -= 1;
                continue;
            }
            let (id, c) = self
                .m
                .cqs
                .iter_mut()
                .find(|(_, c)| c.cqn == cqn)
                .unwrap_or_else(|| panic!("{at}: event for unknown CQ {cqn:#x}"));
            assert!(c.events_due > 0, "{at}: CQ {cqn:#x} event nobody asked for");
            c.events_due -= 1;
            self.cqs.get_mut(id).unwrap().event_received();
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

/// WQEBBs of a send WQE: control, remote address (RDMA), then one unit
/// per non-empty gather entry or the inline header and data in units.
fn wqebbs(w: &Wr) -> u16 {
    let mut ds = 1 + w.remote.is_some() as usize;
    ds += match &w.gather {
        Some(g) => g.iter().filter(|s| s.len > 0).count(),
        None if w.payload.is_empty() => 0,
        None => (4 + w.payload.len()).div_ceil(16),
    };
    (ds * 16).div_ceil(64) as u16
}

fn send_opcode(op: u8) -> SendOpcode {
    match op {
        wqe::OPCODE_SEND => SendOpcode::Send,
        wqe::OPCODE_SEND_IMM => SendOpcode::SendImm,
        wqe::OPCODE_RDMA_WRITE => SendOpcode::RdmaWrite,
        _ => SendOpcode::RdmaWriteImm,
    }
}

fn request(p: &Planned) -> SendRequest<'_> {
    let w = &p.wr;
    let op = match (w.opcode, w.remote) {
        (wqe::OPCODE_SEND, _) => SendOp::Send,
        (wqe::OPCODE_SEND_IMM, _) => SendOp::SendImm { imm: w.imm },
        (wqe::OPCODE_RDMA_WRITE, Some((raddr, rkey))) => SendOp::RdmaWrite { raddr, rkey },
        (_, Some((raddr, rkey))) => SendOp::RdmaWriteImm {
            raddr,
            rkey,
            imm: w.imm,
        },
        _ => unreachable!("RDMA has a remote address"),
    };
    SendRequest {
        wr_id: w.wr_id,
        op,
        payload: if p.inline {
            Payload::Inline(&w.payload)
        } else {
            Payload::Sges(&p.sges)
        },
        signaled: w.signaled,
        solicited: false,
    }
}
