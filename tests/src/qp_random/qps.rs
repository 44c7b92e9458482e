//! Queue pairs in the QP random test: created and destroyed (with the
//! wrong links now and then), transitioned from any state, connected,
//! queried; each outcome predicted before the driver is called.

use mlx5_driver::qp::{
    InitAttr, QpAccess, QpLinks, QpState, RecvQueueCaps, RtsAttr, SendQueueCaps, SendSlot,
    Transition,
};
use mlx5_driver::Error;
use mlx5_regs::{CmdStatus, Opcode};

use super::model::{Fw, MQp, MRq, Sq};
use super::objects::injected;
use super::{Run, TestQp};

/// Live QPs at most.
const MAX_QPS: usize = 6;

impl Run {
    pub(super) fn create_qp(&mut self) {
        if self.m.qps.len() >= MAX_QPS {
            return;
        }
        let cqs = self.cq_ids();
        let srqs = self.srq_ids();
        // 0: sender, 1: receive-only, 2 and 3: both; a receiver takes its
        // WQEs from an SRQ or (one in three, or without an SRQ) from its
        // own receive queue.
        let shape = self.rng.below(4).min(2);
        let has_sq = shape != 1;
        let own_rq = shape != 0 && (srqs.is_empty() || self.rng.below(3) == 0);
        let srq = if shape == 0 || own_rq {
            None
        } else {
            self.pick(&srqs)
        };
        let rq_req = own_rq.then(|| RecvQueueCaps {
            max_recv_wr: 1 + self.rng.below(32) as u32,
            max_recv_sge: 1 + self.rng.below(4) as u32,
        });
        let rq_geo = rq_req.map(|r| {
            self.hca
                .recv_queue_geometry(&r)
                .unwrap_or_else(|e| panic!("{}: geometry of {r:?}: {e}", self.at))
        });
        let Some(first) = self.pick(&cqs) else {
            return;
        };
        let (send_cq, recv_cq) = match (has_sq, srq.is_some() || own_rq) {
            (true, false) => (Some(first), None),
            (false, _) => (None, Some(first)),
            (true, true) => {
                // Shared or separate receive CQ.
                let second = self.pick(&cqs).unwrap();
                (Some(first), (second != first).then_some(second))
            }
        };
        let req = SendQueueCaps {
            max_send_wr: 1 + self.rng.below(24) as u32,
            max_send_sge: 1 + self.rng.below(4) as u32,
            max_inline_data: if self.rng.below(3) == 0 {
                0
            } else {
                1 + self.rng.below(120) as u32
            },
        };
        let geo = if has_sq {
            let g = self
                .hca
                .send_queue_geometry(&req)
                .unwrap_or_else(|e| panic!("{}: geometry of {req:?}: {e}", self.at));
            check_geometry(&req, &g, self.hca.caps().max_wqe_sz_sq, &self.at);
            Some(g)
        } else {
            None
        };
        let table = vec![SendSlot::EMPTY; geo.map_or(0, |g| g.wqebbs())];
        let fault = self.maybe_fault(Opcode::CREATE_QP);
        let r = {
            let mut send = send_cq.map(|c| self.cqs.remove(&c).expect("driver CQ"));
            let mut recv = recv_cq.map(|c| self.cqs.remove(&c).expect("driver CQ"));
            let mut s = srq.map(|s| self.srqs.remove(&s).expect("driver SRQ"));
            let links = QpLinks {
                send_cq: send.as_mut(),
                recv_cq: recv.as_mut(),
                srq: s.as_mut(),
            };
            let r = self
                .hca
                .create_qp_with(has_sq.then_some(req), rq_req, links, table);
            for (id, c) in [(send_cq, send), (recv_cq, recv)] {
                if let (Some(id), Some(c)) = (id, c) {
                    self.cqs.insert(id, c);
                }
            }
            if let (Some(id), Some(x)) = (srq, s) {
                self.srqs.insert(id, x);
            }
            r
        };
        let qp = match r {
            Ok(qp) => qp,
            Err(e) => {
                assert!(
                    fault && injected(&e, Opcode::CREATE_QP),
                    "{}: create_qp: {e}",
                    self.at
                );
                self.stats.refusals += 1;
                return;
            }
        };
        assert!(!fault, "{}: create_qp despite the failure", self.at);
        let qpn = qp.qpn();
        for c in [send_cq, recv_cq].into_iter().flatten() {
            self.m.cqs.get_mut(&c).unwrap().users += 1;
        }
        if let Some(s) = srq {
            self.m.srqs.get_mut(&s).unwrap().users += 1;
        }
        self.m.qps.insert(
            qpn,
            MQp {
                qpn,
                gen: 0,
                sq: geo.map(|g| Sq {
                    max_wr: g.max_send_wr,
                    max_sge: g.max_send_sge,
                    max_inline: g.max_inline_data,
                    wqebbs: g.wqebbs() as u32,
                }),
                send_cq,
                recv_cq,
                srq,
                rq: rq_geo.map(|g| MRq {
                    max_wr: g.max_recv_wr,
                    max_sge: g.max_recv_sge,
                    ..MRq::default()
                }),
                fw: Fw::Reset,
                view: QpState::Reset,
                rwe: false,
                rre: false,
                rae: false,
                rd_res: None,
                remote: 0,
                send_psn: 0,
                rcv_psn: 0,
                min_rnr: 0,
                retry_cnt: 0,
                rnr_retry: 0,
                pending: Default::default(),
                wait: None,
                uncovered: 0,
                drv_out: 0,
                cur_post: 0,
                sq_ci: 0,
                last_wqe: false,
            },
        );
        let psn = self.rng.below(1 << 24) as u32;
        self.plan_psn.insert(qpn, psn);
        self.qps.insert(qpn, qp);
    }

    pub(super) fn destroy_qp(&mut self) {
        let Some(qpn) = self.pick(&self.qpns()) else {
            return;
        };
        self.destroy_qp_n(qpn, true);
    }

    pub(super) fn destroy_qp_for_finish(&mut self, qpn: u32) {
        self.destroy_qp_n(qpn, false);
    }

    fn destroy_qp_n(&mut self, qpn: u32, faults: bool) {
        // Now and then the wrong links: refused before any command.
        let wrong = faults && self.rng.below(25) == 0;
        let fault = faults && !wrong && self.maybe_fault(Opcode::DESTROY_QP);
        let qp = self.qps.remove(&qpn).expect("driver QP");
        let mut taken = self.take_links(qpn);
        let r = self.hca.destroy_qp(qp, taken.links(wrong));
        self.put_links(taken);
        match r {
            Ok(_) => {
                assert!(
                    !fault && !wrong,
                    "{}: destroy_qp {qpn:#x} accepted",
                    self.at
                );
                // Its CQEs not yet polled are removed from its CQs (a
                // receive one frees its SRQ WQE) and its events not yet
                // taken are withdrawn: its number may go to the next QP.
                let (slots, _) = self.m.remove_qp_cqes(qpn);
                self.free_recv.extend(slots);
                self.m
                    .events
                    .retain(|e| !matches!(e, super::model::ExpEvent::Qp(n, _) if *n == qpn));
                let q = self.m.qps.remove(&qpn).expect("model QP");
                for c in [q.send_cq, q.recv_cq].into_iter().flatten() {
                    self.m.cqs.get_mut(&c).unwrap().users -= 1;
                }
                if let Some(x) = q.srq {
                    self.m.srqs.get_mut(&x).unwrap().users -= 1;
                }
                // Unexecuted work requests vanish with it (no completion).
                self.free_src
                    .extend(q.pending.iter().filter_map(|w| w.slot));
                self.plan_psn.remove(&qpn);
            }
            Err(d) => {
                let (qp, e) = d.into_parts();
                if wrong {
                    assert!(matches!(e, Error::InvalidArgument(_)), "{}: {e}", self.at);
                } else {
                    assert!(
                        fault && injected(&e, Opcode::DESTROY_QP),
                        "{}: destroy_qp: {e}",
                        self.at
                    );
                }
                self.stats.refusals += 1;
                self.qps.insert(qpn, qp);
            }
        }
    }

    /// A random transition of a random QP, with its predicted outcome.
    pub(super) fn transition(&mut self) {
        let Some(qpn) = self.pick(&self.qpns()) else {
            return;
        };
        let t = match self.rng.below(10) {
            0 | 1 => Transition::Rst2Init,
            2 | 3 => Transition::Init2Rtr,
            4..=6 => Transition::Rtr2Rts,
            7 | 8 => Transition::ToError,
            _ => Transition::ToReset,
        };
        let peer = self.pick(&self.qpns()).unwrap();
        self.do_transition(qpn, t, peer, true);
    }

    /// Take a QP in RESET to RTS: mostly paired with another QP in RESET
    /// (both connected to each other), or connected to itself (it needs a
    /// send queue and an SRQ to talk to itself), else to any QP.
    pub(super) fn connect(&mut self) {
        // A QP in error is reset first (the usual way back into service).
        let failed: Vec<u32> = self
            .m
            .qps
            .values()
            .filter(|q| q.view == QpState::Error)
            .map(|q| q.qpn)
            .collect();
        if let Some(f) = self.pick(&failed) {
            self.do_transition(f, Transition::ToReset, f, false);
        }
        let reset: Vec<u32> = self
            .m
            .qps
            .values()
            .filter(|q| q.view == QpState::Reset)
            .map(|q| q.qpn)
            .collect();
        let Some(a) = self.pick(&reset) else {
            return;
        };
        // Partners that can take what `a` sends (an SRQ) come first.
        let q = &self.m.qps[&a];
        let can_self = q.sq.is_some() && q.receives();
        let sends = q.sq.is_some();
        let others: Vec<u32> = reset.iter().copied().filter(|&q| q != a).collect();
        let takers: Vec<u32> = others
            .iter()
            .copied()
            .filter(|n| !sends || self.m.qps[n].receives())
            .collect();
        let b = match self.rng.below(20) {
            0..=13 if !takers.is_empty() => self.pick(&takers).unwrap(),
            0..=15 if !others.is_empty() => self.pick(&others).unwrap(),
            0..=18 if can_self => a,
            _ => self.pick(&self.qpns()).unwrap(),
        };
        let both = a != b && self.m.qps[&b].view == QpState::Reset;
        let steps = [
            Transition::Rst2Init,
            Transition::Init2Rtr,
            Transition::Rtr2Rts,
        ];
        for t in steps {
            self.do_transition(a, t, b, false);
            if both {
                self.do_transition(b, t, a, false);
            }
        }
    }

    pub(super) fn fail_for_finish(&mut self, qpn: u32) {
        self.do_transition(qpn, Transition::ToError, qpn, false);
    }

    /// Transition `qpn` (INIT2RTR connects it to `peer`); predict the
    /// driver's refusal (from the state it knows), firmware's (from the
    /// real state) or an injected failure.
    fn do_transition(&mut self, qpn: u32, t: Transition, peer: u32, faults: bool) {
        let q = &self.m.qps[&qpn];
        let view = q.view;
        let fw = q.fw;
        let op = match t {
            Transition::Rst2Init => Opcode::RST2INIT_QP,
            Transition::Init2Rtr => Opcode::INIT2RTR_QP,
            Transition::Rtr2Rts => Opcode::RTR2RTS_QP,
            Transition::ToError => Opcode::QP_2ERR,
            Transition::ToReset => Opcode::QP_2RST,
        };
        let driver_ok = t.allowed_from(view);
        let fw_ok = match t {
            Transition::Rst2Init => fw == Fw::Reset,
            Transition::Init2Rtr => fw == Fw::Init,
            Transition::Rtr2Rts => fw == Fw::Rtr,
            _ => true,
        };
        let wrong = t == Transition::ToReset && faults && self.rng.below(25) == 0;
        let fault = faults && driver_ok && fw_ok && !wrong && self.maybe_fault(op);
        let access = QpAccess {
            remote_read: true,
            remote_write: self.rng.below(12) != 0,
            remote_atomic: self.rng.below(4) != 0,
        };
        let rq_psn = {
            let p = &self.m.qps[&peer];
            let psn = if p.fw == Fw::Rts || p.fw == Fw::Err {
                p.send_psn
            } else {
                self.plan_psn[&peer]
            };
            // Now and then a PSN the peer does not send: past it, the
            // peer's messages are duplicates (ACKed, not delivered); before
            // it, they are ahead (no ACK).
            if self.rng.below(20) == 0 {
                if self.rng.below(2) == 0 {
                    (psn + 1) & 0xff_ffff
                } else {
                    psn.wrapping_sub(1) & 0xff_ffff
                }
            } else {
                psn
            }
        };
        let min_rnr = [12u8, 13, 14][self.rng.below(3) as usize];
        let rts = RtsAttr {
            sq_psn: self.plan_psn[&qpn],
            timeout: 8 + self.rng.below(2) as u8,
            retry_cnt: if self.rng.below(3) == 0 {
                self.rng.below(7) as u8
            } else {
                7
            },
            rnr_retry: if self.rng.below(4) == 0 {
                self.rng.below(7) as u8
            } else {
                7
            },
            max_rd_atomic: 0,
        };
        let mut rtr = self
            .hca
            .loopback_rtr(qpn, peer, rq_psn)
            .unwrap_or_else(|e| panic!("{}: loopback_rtr: {e}", self.at));
        rtr.min_rnr_timer = min_rnr;
        let init = InitAttr {
            access,
            ..InitAttr::default()
        };
        let mut taken = self.take_links(qpn);
        let mut removed = None;
        let qp: &mut TestQp = self.qps.get_mut(&qpn).expect("driver QP");
        let r = match t {
            Transition::Rst2Init => self.hca.qp_to_init(qp, &init),
            Transition::Init2Rtr => self.hca.qp_to_rtr(qp, &rtr),
            Transition::Rtr2Rts => self.hca.qp_to_rts(qp, &rts),
            Transition::ToError => self.hca.qp_to_error(qp),
            Transition::ToReset => self
                .hca
                .qp_to_reset_and_clean(qp, taken.links(wrong))
                .map(|n| removed = Some(n)),
        };
        self.put_links(taken);
        let at = &self.at;
        if driver_ok && wrong {
            assert!(matches!(r, Err(Error::InvalidArgument(_))), "{at}: {r:?}");
            self.stats.refusals += 1;
            return;
        }
        if !driver_ok {
            assert_eq!(
                r,
                Err(Error::QpState {
                    qpn,
                    state: view,
                    op: t.command()
                }),
                "{at}: {} from {view:?}",
                t.command()
            );
            self.stats.refusals += 1;
            return;
        }
        if fault {
            assert!(
                matches!(&r, Err(e) if injected(e, op)),
                "{at}: {} with a failure: {r:?}",
                t.command()
            );
            self.stats.refusals += 1;
            return;
        }
        if !fw_ok {
            assert!(
                matches!(r, Err(Error::Command { opcode, status, .. })
                    if opcode == op && status == CmdStatus::BAD_QP_STATE_ERR),
                "{at}: {} with firmware in {fw:?}: {r:?}",
                t.command()
            );
            self.stats.refusals += 1;
            return;
        }
        r.unwrap_or_else(|e| panic!("{at}: {}: {e}", t.command()));
        self.stats.transitions += 1;
        let m = &mut self.m;
        match t {
            Transition::Rst2Init => {
                let q = m.qps.get_mut(&qpn).unwrap();
                q.fw = Fw::Init;
                q.rwe = access.remote_write;
                q.rre = access.remote_read;
                q.rae = access.remote_atomic;
            }
            Transition::Init2Rtr => {
                let q = m.qps.get_mut(&qpn).unwrap();
                q.fw = Fw::Rtr;
                q.remote = peer;
                q.rcv_psn = rq_psn;
                q.min_rnr = min_rnr;
            }
            Transition::Rtr2Rts => {
                let q = m.qps.get_mut(&qpn).unwrap();
                q.fw = Fw::Rts;
                q.send_psn = rts.sq_psn;
                q.retry_cnt = rts.retry_cnt;
                q.rnr_retry = rts.rnr_retry;
                m.doorbell(qpn);
            }
            Transition::ToError => m.enter_error(qpn),
            Transition::ToReset => {
                let (slots, n) = m.remove_qp_cqes(qpn);
                assert_eq!(
                    removed,
                    Some(n),
                    "{}: CQEs removed from the QP's CQs at reset",
                    self.at
                );
                self.free_recv.extend(slots);
                let q = m.qps.get_mut(&qpn).unwrap();
                q.fw = Fw::Reset;
                q.wait = None;
                q.rd_res = None;
                let slots: Vec<usize> = q.pending.drain(..).filter_map(|w| w.slot).collect();
                self.free_src.extend(slots);
                q.sq_ci = 0;
                q.cur_post = 0;
                q.drv_out = 0;
                q.uncovered = 0;
                q.remote = 0;
                q.send_psn = 0;
                q.rcv_psn = 0;
                q.gen += 1;
                q.last_wqe = false;
                let psn = self.rng.below(1 << 24) as u32;
                self.plan_psn.insert(qpn, psn);
            }
        }
        self.m.qps.get_mut(&qpn).unwrap().view = t.target();
    }

    /// QUERY_QP shows firmware's state; now and then the driver takes it.
    pub(super) fn query_qp(&mut self) {
        let Some(qpn) = self.pick(&self.qpns()) else {
            return;
        };
        let fw = self.m.qps[&qpn].fw;
        let expect = match fw {
            Fw::Reset => QpState::Reset,
            Fw::Init => QpState::Init,
            Fw::Rtr => QpState::Rtr,
            Fw::Rts => QpState::Rts,
            Fw::Err => QpState::Error,
        };
        let refresh = self.rng.below(2) == 0;
        let qp = self.qps.get_mut(&qpn).expect("driver QP");
        if refresh {
            let s = self
                .hca
                .refresh_qp_state(qp)
                .unwrap_or_else(|e| panic!("{}: refresh_qp_state: {e}", self.at));
            assert_eq!(s, expect, "{}: refresh_qp_state", self.at);
            self.m.qps.get_mut(&qpn).unwrap().view = expect;
        } else {
            let q = self
                .hca
                .query_qp(qp)
                .unwrap_or_else(|e| panic!("{}: query_qp: {e}", self.at));
            let mq = &self.m.qps[&qpn];
            assert_eq!(q.state, expect, "{}: query_qp state", self.at);
            assert_eq!(
                (q.next_send_psn, q.next_rcv_psn, q.hw_sq_wqebb_counter),
                (mq.send_psn, mq.rcv_psn, mq.sq_ci),
                "{}: query_qp PSNs and consumer counter",
                self.at
            );
        }
    }
}

/// The send queue's rounding, computed independently (rdma-core
/// `mlx5_calc_send_wqe` / `mlx5_calc_sq_size`): 48 bytes of control,
/// remote-address and atomic segments, 16 per SGE, the inline header and data in
/// 16-byte units, rounded to 64; the ring a power of two of bytes.
fn check_geometry(
    req: &SendQueueCaps,
    g: &mlx5_driver::qp::SqGeometry,
    max_wqe_sz_sq: u16,
    at: &str,
) {
    let gather = 48 + 16 * req.max_send_sge as usize;
    let inline = if req.max_inline_data > 0 {
        48 + (4 + req.max_inline_data as usize).next_multiple_of(16)
    } else {
        0
    };
    let desc = gather.max(inline);
    assert!(desc <= max_wqe_sz_sq as usize, "{at}: request too large");
    let wqe = desc.next_multiple_of(64);
    let ring = (req.max_send_wr as usize * wqe).next_power_of_two();
    assert_eq!(g.wqe_size, wqe, "{at}: {req:?}");
    assert_eq!(g.wqebbs(), ring / 64, "{at}: {req:?}");
    assert_eq!(g.max_send_wr as usize, ring / wqe, "{at}: {req:?}");
    assert_eq!(g.max_send_sge as usize, (wqe.min(1008) - 48) / 16, "{at}");
    assert_eq!(g.max_inline_data as usize, wqe.min(1008) - 52, "{at}");
}
