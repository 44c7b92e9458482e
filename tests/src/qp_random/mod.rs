//! The seeded random-operation test of queue pairs and traffic (driver
//! against the model, checked against `model`, a reference of what must
//! happen): QPs, memory keys, CQs and SRQs are created, transitioned,
//! posted to, polled, resized, armed and destroyed at random, and after
//! every step
//!
//! * every completion the driver returns is the one the reference expects
//!   next on that CQ (signaled sends exactly once with their `wr_id`, in
//!   order per QP; receives with their `wr_id`, length, immediate and the
//!   payload byte for byte in the receive buffers, nothing written beyond
//!   it; error and flush completions with their syndromes and `wr_id`s);
//! * every refusal (full queues, too many SGEs, inline too large, a wrong
//!   state, busy objects, a resize, an injected firmware failure) is the
//!   predicted one and changes nothing;
//! * async events (last WQE reached, QP errors, SRQ limit) come exactly
//!   when the reference raises them, in order; CQ events follow arms;
//! * the device's QP states, PSNs, consumer counters and traffic counters
//!   equal the reference's, and RDMA WRITE targets hold exactly the bytes
//!   written.
//!
//! `tests/tests/qp_random.rs` runs it; docs/reliability.md has the numbers.

mod check;
mod model;
mod objects;
mod qps;
mod queues;
mod traffic;

use std::collections::BTreeMap;

use mlx5_driver::cq::Cq;
use mlx5_driver::mkey::Mkey;
use mlx5_driver::qp::{Qp, SendSlot};
use mlx5_driver::srq::Srq;
use mlx5_driver::Hca;
use mlx5_hal::{DmaRegion, Hal};
use mlx5_regs::{CmdStatus, Opcode};
use mlx5_sim::{Device, ExecMode, Profile, SimConfig, SimHal};

use crate::{assert_clean, config, Rng, PROFILES};
pub use model::Counts;
use model::{Fw, Id, Model};

/// The HCA type of the test: a roomy async-event queue (events may wait
/// many steps before the test reads them).
type TestHca = Hca<SimHal, (), 256, 512>;
/// A QP with its send table.
type TestQp = Qp<SimHal, Vec<SendSlot>>;

/// Bytes of one buffer slot (a send's gather list or a receive WQE's
/// scatter list lies inside one slot).
const SLOT: usize = 512;
/// Send source slots.
const SRC_SLOTS: usize = 256;
/// Receive buffer slots.
const RECV_SLOTS: usize = 512;
/// Offset of the receive slots in the buffer.
const RECV_AT: usize = SRC_SLOTS * SLOT;
/// Offset and size of the RDMA WRITE target area.
const RDMA_AT: usize = RECV_AT + RECV_SLOTS * SLOT;
const RDMA_LEN: usize = 16 * 1024;
/// Byte receive buffers hold until written.
const POISON: u8 = 0xee;
/// Device time let pass between steps (synchronous mode): beyond every
/// retry timer the test uses (RNR 0.64–1.28 ms, ACK 1.05–2.1 ms).
const PUMP_US: u64 = 4_000;
/// Longest a step may take in device time, below the shortest timer, so
/// no retry runs inside a step.
const STEP_NS: u64 = 600_000;

/// How often each operation ran, and what happened.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    /// Steps.
    pub steps: u64,
    /// Work requests posted (accepted by the driver).
    pub sends: u64,
    /// Receives posted.
    pub recvs: u64,
    /// Of which to a QP's own receive queue.
    pub own_rq_recvs: u64,
    /// Completions of a QP's own receive queue checked.
    pub own_rq_cqes: u64,
    /// Of which flushes.
    pub own_rq_flushes: u64,
    /// Completions checked.
    pub cqes: u64,
    /// Error completions (not flushes) checked.
    pub errors: u64,
    /// Flush completions checked.
    pub flushes: u64,
    /// Async events checked (QP and SRQ limit).
    pub events: u64,
    /// SRQ limit events (including the driver's `RaiseNow`).
    pub limit_events: u64,
    /// QP events read after the QP was reset (they change nothing).
    pub stale_events: u64,
    /// Refusals predicted and seen (driver or firmware).
    pub refusals: u64,
    /// Injected firmware failures.
    pub faults: u64,
    /// QP transitions done.
    pub transitions: u64,
    /// CQ resizes done (size changed).
    pub resizes: u64,
    /// Traffic counters of the device at the end.
    pub traffic: Counts,
}

impl Stats {
    /// Add another run's figures.
    pub fn add(&mut self, o: &Stats) {
        self.steps += o.steps;
        self.sends += o.sends;
        self.recvs += o.recvs;
        self.own_rq_recvs += o.own_rq_recvs;
        self.own_rq_cqes += o.own_rq_cqes;
        self.own_rq_flushes += o.own_rq_flushes;
        self.cqes += o.cqes;
        self.errors += o.errors;
        self.flushes += o.flushes;
        self.events += o.events;
        self.limit_events += o.limit_events;
        self.stale_events += o.stale_events;
        self.refusals += o.refusals;
        self.faults += o.faults;
        self.transitions += o.transitions;
        self.resizes += o.resizes;
        self.traffic.messages += o.traffic.messages;
        self.traffic.rnr_naks += o.traffic.rnr_naks;
        self.traffic.ack_timeouts += o.traffic.ack_timeouts;
        self.traffic.flushed += o.traffic.flushed;
        self.traffic.reads += o.traffic.reads;
        self.traffic.atomics += o.traffic.atomics;
        self.traffic.own_rq_rnr_naks += o.traffic.own_rq_rnr_naks;
    }
}

/// One run: the device, the driver's objects and the reference.
pub struct Run {
    dev: Device,
    hca: TestHca,
    mem: DmaRegion<SimHal>,
    rng: Rng,
    m: Model,
    cqs: BTreeMap<Id, Cq<SimHal>>,
    srqs: BTreeMap<Id, Srq<SimHal>>,
    qps: BTreeMap<u32, TestQp>,
    /// The PSN each QP will send from at its next RTR2RTS.
    plan_psn: BTreeMap<u32, u32>,
    mkeys: Vec<Mkey>,
    dead_keys: Vec<u32>,
    next_id: Id,
    next_wr: u64,
    free_src: Vec<usize>,
    free_recv: Vec<usize>,
    threaded: bool,
    limit_on_arm: bool,
    tag: String,
    at: String,
    /// What the run did.
    pub stats: Stats,
}

/// The device of a seed: profile, ISSI, port type and the limit-on-arm
/// behaviour vary with it.
fn device_for(seed: u64, mode: ExecMode) -> (Device, String, bool) {
    let profile = PROFILES[(seed % 4) as usize];
    let issi0 = seed % 7 == 3;
    let cfg = SimConfig {
        issi_supported: if issi0 { 0b01 } else { 0b11 },
        seed,
        ..SimConfig::profile(profile)
    };
    let dev = Device::new(match mode {
        ExecMode::Synchronous => cfg,
        ExecMode::Threaded => cfg.threaded(),
    });
    let ib = seed % 5 == 4 && profile != Profile::ConnectX4Lx;
    let on_arm = seed % 3 != 2;
    dev.caps_mut(|c| {
        if ib {
            c.port_type = 0;
        }
        c.limit_event_on_arm = on_arm;
    });
    let tag = format!(
        "seed {seed} {mode:?} {profile:?} ISSI {} {} limit-on-arm {on_arm}",
        if issi0 { 0 } else { 1 },
        if ib { "IB" } else { "Ethernet" },
    );
    (dev, tag, on_arm)
}

impl Run {
    /// Bring a device of `seed` up in `mode`.
    pub fn new(seed: u64, mode: ExecMode) -> Run {
        let (dev, tag, limit_on_arm) = device_for(seed, mode);
        let hca: TestHca = Hca::bring_up_with(dev.hal(), config(), ())
            .unwrap_or_else(|e| panic!("{tag}: bring-up: {e}"));
        let mem = dev
            .hal()
            .alloc_dma(RDMA_AT + RDMA_LEN)
            .expect("test buffers");
        mem.fill(0, RDMA_AT + RDMA_LEN, POISON);
        let mut keys = BTreeMap::new();
        let dma = hca.dma_lkey().expect("every profile is RDMA capable");
        keys.insert(
            dma,
            model::Rights {
                lr: true,
                lw: true,
                rw: false,
                rr: false,
                a: false,
            },
        );
        let m = Model {
            reserved: hca.reserved_lkey(),
            keys,
            cqs: BTreeMap::new(),
            srqs: BTreeMap::new(),
            qps: BTreeMap::new(),
            events: Default::default(),
            mtu: hca.loopback_mtu().bytes(),
            rdma_base: mem.iova() + RDMA_AT as u64,
            rdma: vec![POISON; RDMA_LEN],
            freed_src: Vec::new(),
            counts: Counts::default(),
        };
        Run {
            threaded: mode == ExecMode::Threaded,
            dev,
            hca,
            mem,
            rng: Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1),
            m,
            cqs: BTreeMap::new(),
            srqs: BTreeMap::new(),
            qps: BTreeMap::new(),
            plan_psn: BTreeMap::new(),
            mkeys: Vec::new(),
            dead_keys: Vec::new(),
            next_id: 0,
            next_wr: 1,
            free_src: (0..SRC_SLOTS).rev().collect(),
            free_recv: (0..RECV_SLOTS).rev().collect(),
            limit_on_arm,
            tag,
            at: String::new(),
            stats: Stats::default(),
        }
    }

    /// Run `steps` random steps, then drain, destroy everything, tear down
    /// and check the model is clean.
    pub fn run(mut self, steps: usize) -> Stats {
        for step in 0..steps {
            self.step(step);
        }
        self.finish()
    }

    fn step(&mut self, step: usize) {
        let op = self.rng.below(48);
        self.at = format!("{} step {step} op {op}", self.tag);
        let t0 = self.dev.now_ns();
        match op {
            0 | 1 => self.create_cq(),
            2 => self.destroy_cq(),
            3 | 4 => self.resize_cq(),
            5 => self.arm_cq(),
            6 | 7 => self.create_srq(),
            8 => self.destroy_srq(),
            9..=13 | 46 | 47 => self.post_recv(),
            14 | 15 => self.arm_limit(),
            16 | 17 => self.create_qp(),
            18 => self.destroy_qp(),
            19 | 20 => self.transition(),
            21..=24 => self.connect(),
            25..=33 => self.post_send(),
            34..=38 => self.poll(),
            39 | 40 => self.events(),
            41 => self.create_key(),
            42 => self.destroy_key(),
            43 => self.query_qp(),
            _ => self.poll(),
        }
        if !self.threaded {
            let took = self.dev.now_ns() - t0;
            assert!(
                took < STEP_NS,
                "{}: the step took {took} ns of device time: a retry timer may have run inside it",
                self.at
            );
        }
        self.settle();
        self.check_device();
        self.stats.steps += 1;
    }

    /// Synchronous mode: let device time pass beyond every timer (each
    /// waiting QP retries once). Threaded mode: wait until the device
    /// thread has done everything queued.
    fn settle(&mut self) {
        if self.threaded {
            self.dev.quiesce();
        } else {
            self.dev.advance_us(PUMP_US);
            self.m.pump();
        }
        self.free_src.append(&mut self.m.freed_src);
    }

    /// Arm a one-shot failure of the next `opcode` command, 1 time in 30.
    fn maybe_fault(&mut self, opcode: Opcode) -> bool {
        if self.rng.below(30) == 0 {
            self.dev
                .inject()
                .fail_next(opcode.0, CmdStatus::BAD_PARAM_ERR.0, 0xfa17);
            self.stats.faults += 1;
            true
        } else {
            false
        }
    }

    fn new_id(&mut self) -> Id {
        self.next_id += 1;
        self.next_id
    }

    fn pick<T: Copy>(&mut self, v: &[T]) -> Option<T> {
        (!v.is_empty()).then(|| v[self.rng.below(v.len() as u64) as usize])
    }

    fn cq_ids(&self) -> Vec<Id> {
        self.m.cqs.keys().copied().collect()
    }

    fn srq_ids(&self) -> Vec<Id> {
        self.m.srqs.keys().copied().collect()
    }

    fn qpns(&self) -> Vec<u32> {
        self.m.qps.keys().copied().collect()
    }

    /// The device and the driver agree with the reference.
    fn check_device(&mut self) {
        let at = &self.at;
        let stats = self.dev.traffic().stats();
        let c = self.m.counts;
        assert_eq!(
            (
                stats.messages,
                stats.rnr_naks,
                stats.ack_timeouts,
                stats.flushed
            ),
            (c.messages, c.rnr_naks, c.ack_timeouts, c.flushed),
            "{at}: device traffic counters (messages, RNR NAKs, ACK timeouts, flushes)"
        );
        assert_eq!(stats.reads_served, c.reads, "{at}: RDMA READs served");
        assert_eq!(stats.atomics_executed, c.atomics, "{at}: atomics executed");
        assert_eq!(stats.side_door_uses, 0, "{at}: the side door is not used");
        for (qpn, q) in &self.m.qps {
            let info = self.dev.qp(*qpn).expect("the device has the QP");
            let fw = match q.fw {
                Fw::Reset => mlx5_sim::QpState::Reset,
                Fw::Init => mlx5_sim::QpState::Init,
                Fw::Rtr => mlx5_sim::QpState::Rtr,
                Fw::Rts => mlx5_sim::QpState::Rts,
                Fw::Err => mlx5_sim::QpState::Err,
            };
            assert_eq!(info.state, fw, "{at}: QP {qpn:#x} state");
            assert_eq!(info.waiting, q.wait.is_some(), "{at}: QP {qpn:#x} waits");
            assert_eq!(
                (info.next_send_psn, info.next_rcv_psn, info.sq_consumer),
                (q.send_psn, q.rcv_psn, q.sq_ci),
                "{at}: QP {qpn:#x} PSNs (send, receive) and consumer counter"
            );
            let d = &self.qps[qpn];
            assert_eq!(d.state(), q.view, "{at}: QP {qpn:#x} driver state");
            assert_eq!(
                d.outstanding_sends(),
                q.drv_out,
                "{at}: QP {qpn:#x} outstanding sends"
            );
            assert_eq!(
                d.last_wqe_reached(),
                q.last_wqe,
                "{at}: QP {qpn:#x} last WQE"
            );
            assert_eq!(
                d.outstanding_recvs(),
                q.rq.as_ref().map_or(0, |r| r.outstanding()),
                "{at}: QP {qpn:#x} outstanding own receives"
            );
        }
        for (id, s) in &self.m.srqs {
            let d = &self.srqs[id];
            assert_eq!(
                d.outstanding() as u32,
                s.outstanding(),
                "{at}: SRQ {:#x} outstanding",
                s.srqn
            );
        }
        for (id, c) in &self.m.cqs {
            let d = &self.cqs[id];
            assert_eq!(d.capacity(), c.cap, "{at}: CQ {:#x} capacity", c.cqn);
            assert_eq!(
                d.pending(),
                c.q.len(),
                "{at}: CQ {:#x} completions waiting",
                c.cqn
            );
        }
        let mut now = vec![0u8; RDMA_LEN];
        self.mem.read_bytes(RDMA_AT, &mut now);
        if now != self.m.rdma {
            let first = (0..RDMA_LEN).find(|&i| now[i] != self.m.rdma[i]).unwrap();
            panic!(
                "{at}: RDMA target area differs at byte {first:#x}: {:#04x}, expected {:#04x}",
                now[first], self.m.rdma[first]
            );
        }
        let v = self.dev.violations();
        assert!(v.is_empty(), "{at}: protocol violations {v:#?}");
        let f = self.dev.iommu_faults();
        assert!(f.is_empty(), "{at}: IOMMU faults {f:#?}");
    }

    /// Move every QP to ERR, take every completion and event, destroy
    /// everything, tear down: the model must be clean.
    fn finish(mut self) -> Stats {
        self.at = format!("{} finish", self.tag);
        for qpn in self.qpns() {
            self.fail_for_finish(qpn);
        }
        self.settle();
        loop {
            let mut any = false;
            for id in self.cq_ids() {
                while !self.m.cqs[&id].q.is_empty() {
                    self.poll_cq(id, 16, true);
                    any = true;
                }
            }
            self.events();
            self.settle();
            if !any && self.m.cqs.values().all(|c| c.q.is_empty()) {
                break;
            }
        }
        self.check_device();
        for qpn in self.qpns() {
            self.destroy_qp_for_finish(qpn);
        }
        for id in self.srq_ids() {
            self.destroy_srq_for_finish(id);
        }
        for id in self.cq_ids() {
            let cq = self.cqs.remove(&id).expect("driver CQ");
            self.hca
                .destroy_cq(cq)
                .map_err(|d| d.error())
                .unwrap_or_else(|e| panic!("{}: destroy_cq: {e}", self.at));
            self.m.cqs.remove(&id);
        }
        for k in std::mem::take(&mut self.mkeys) {
            self.hca
                .destroy_mkey(k)
                .map_err(|d| d.error())
                .unwrap_or_else(|e| panic!("{}: destroy_mkey: {e}", self.at));
        }
        self.stats.traffic = self.m.counts;
        let Run {
            dev,
            hca,
            mem,
            stats,
            at,
            ..
        } = self;
        drop(mem);
        hca.teardown()
            .unwrap_or_else(|e| panic!("{at}: teardown: {e}"));
        assert_clean(&dev, &at);
        stats
    }
}

/// Run one seed for `steps` steps in `mode`.
pub fn run(seed: u64, mode: ExecMode, steps: usize) -> Stats {
    Run::new(seed, mode).run(steps)
}
