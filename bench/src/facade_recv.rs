//! The receive side of the facade benchmarks, shared by `benches/facade.rs`
//! (criterion, each contender in its own phase) and
//! `examples/ab_facade_recv.rs` (contenders in alternating blocks): the
//! timed blocks of the verbs facade ([`Rig`]) and of the ring API
//! ([`RingSide`]), so both tools time the same code.
//!
//! A block is what one timing covers: `n` completions polled `B` at a
//! time, the receive loop (poll `B`, repost what was polled), or `n`
//! receives posted `k` per call. Every block is `#[inline(always)]`, so it
//! compiles into the caller's timed region as if written there.

use std::hint::black_box;

use mlx5_driver::cq::Cqe;
use mlx5_driver::srq::{Sge, SrqGeometry};
use mlx5_driver::unstable::srq::SrqRing;
use mlx5_driver::verbs::{RecvWr, WorkCompletion};
use mlx5_sim::SimHal;

use crate::facade::{complete_checked, write_recv_cqes, HeldCqes, Rig, RingRig};

/// The receive loop's SRQ size (`facade_recv_loop`).
pub const LOOP_WR: u32 = 255;
/// Completions per receive-loop block.
pub const LOOP_P: usize = 256;

/// The ring-API contenders' completion step: return the WQE a CQE names to
/// the SRQ and hand back its `wr_id`. `(QP number, SRQ number)` is what
/// the CQEs are expected to name.
pub trait Complete {
    /// Complete the WQE `c` names; its `wr_id`. Panics when the step
    /// refuses the CQE (a benchmark never feeds it a bad one).
    fn complete(&self, srq: &mut SrqRing<SimHal>, c: &Cqe, ids: (u32, u32)) -> u64;
}

/// The ring API as a consumer that knows its QP and SRQ uses it: trust the
/// CQE, `SrqRing::complete` (the `ring` contender).
pub struct Trusting;

impl Complete for Trusting {
    #[inline(always)]
    fn complete(&self, srq: &mut SrqRing<SimHal>, c: &Cqe, _: (u32, u32)) -> u64 {
        srq.complete(c.wqe_counter).unwrap()
    }
}

/// The ring API with the checks the facade makes, for one QP and SRQ
/// known in advance ([`complete_checked`]; the `checked` contender).
pub struct Checking;

impl Complete for Checking {
    #[inline(always)]
    fn complete(&self, srq: &mut SrqRing<SimHal>, c: &Cqe, ids: (u32, u32)) -> u64 {
        complete_checked(srq, c, ids.0, ids.1).unwrap()
    }
}

impl Rig {
    /// Poll until `n` completions have come, `wc.len()` at most per call;
    /// how many came (exactly `n` when the device wrote `n` CQEs).
    #[inline(always)]
    pub fn poll_block(&mut self, wc: &mut [WorkCompletion], n: usize) -> usize {
        let mut got = 0;
        while got < n {
            let k = self.ctx.poll_cq(self.cq, wc).unwrap();
            black_box(&wc[..k]);
            got += k;
        }
        got
    }

    /// Poll, `wc.len()` slots per call, the `n` CQEs of `held`, released
    /// one before each call: every call finds one CQE waiting (a device
    /// completing one request at a time); how many came.
    ///
    /// # Safety
    ///
    /// `held` was written into this rig's CQ ([`Rig::device_completes_held`])
    /// and the CQ was not resized since.
    #[inline(always)]
    pub unsafe fn poll_arriving_block(
        &mut self,
        wc: &mut [WorkCompletion],
        held: &HeldCqes,
        n: usize,
    ) -> usize {
        let mut got = 0;
        for i in 0..n as u32 {
            // SAFETY: the ring `held` names is this rig's CQ's (the
            // caller's contract), alive while the rig is.
            unsafe { held.release(i) };
            let k = self.ctx.poll_cq(self.cq, wc).unwrap();
            black_box(&wc[..k]);
            got += k;
        }
        got
    }

    /// The receive loop: poll up to `wc.len()`, repost as many from `wrs`
    /// (at least `wc.len()` long), until `n` completions have come.
    #[inline(always)]
    pub fn loop_block(&mut self, wc: &mut [WorkCompletion], wrs: &[RecvWr<'_>], n: usize) -> usize {
        let mut got = 0;
        while got < n {
            let k = self.ctx.poll_cq(self.cq, wc).unwrap();
            black_box(&wc[..k]);
            self.ctx.post_srq_recv(self.srq, &wrs[..k]).unwrap();
            got += k;
        }
        got
    }

    /// Poll (16 per call) until `n` completions have come; their `wr_id`s
    /// in order (untimed checks).
    pub fn drain(&mut self, n: usize) -> Vec<u64> {
        let mut wc = [WorkCompletion::EMPTY; 16];
        let mut ids = Vec::with_capacity(n);
        while ids.len() < n {
            let k = self.ctx.poll_cq(self.cq, &mut wc).unwrap();
            ids.extend(wc[..k].iter().map(|w| w.wr_id));
        }
        assert_eq!(self.ctx.stats().unmatched_cqes, 0);
        ids
    }

    /// Post `wrs` through `post_srq_recv`, `per_call` per call.
    #[inline(always)]
    pub fn post_chunks(&mut self, wrs: &[RecvWr<'_>], per_call: usize) {
        for chunk in wrs.chunks(per_call) {
            self.ctx.post_srq_recv(self.srq, black_box(chunk)).unwrap();
        }
    }
}

/// A ring-API contender: a CQ ring and an SRQ ring ([`RingRig`]) on a
/// minimal model, whose QP and SRQ numbers the CQEs the benchmark writes
/// name, and the WQE the device completes next.
pub struct RingSide {
    /// The model and a context on it (kept alive; its QP and SRQ numbers
    /// are the ones the CQEs name).
    pub rig: Rig,
    /// The rings.
    pub r: RingRig<SimHal>,
    /// `(QP number, SRQ number)` the CQEs name.
    pub ids: (u32, u32),
    next_wqe: u32,
}

impl RingSide {
    /// A CQ ring of `2^log_cq` entries and an SRQ ring for `srq_wr`
    /// requests of `max_sge` entries.
    pub fn new(log_cq: u8, srq_wr: usize, max_sge: usize) -> RingSide {
        let rig = Rig::new(1, 1, 1);
        let geo = SrqGeometry::for_request(srq_wr, max_sge).expect("geometry");
        let r = RingRig::new(&rig.dev.hal(), log_cq, geo);
        RingSide {
            ids: (rig.qpn, rig.srqn),
            rig,
            r,
            next_wqe: 0,
        }
    }

    /// Post `n` receives with `wr_id`s `0..n` and scatter list `sge`, one
    /// doorbell-record store.
    pub fn fill(&mut self, n: usize, sge: &[Sge]) {
        self.r
            .srq
            .post_list((0..n as u64).map(|i| (i, sge)))
            .unwrap();
    }

    /// Play the device: `n` receive CQEs at the CQ's consumer index, for
    /// the SRQ's WQEs in the order they were posted (continuing where the
    /// last call stopped).
    pub fn device_completes(&mut self, n: usize) {
        let ci = self.r.cq.consumer_index();
        let cnt = self.r.srq.geometry().wqe_cnt() as u32;
        let (qpn, srqn) = self.ids;
        write_recv_cqes(&self.r.cq, ci, qpn, srqn, self.next_wqe, cnt, n);
        self.next_wqe = (self.next_wqe + n as u32) % cnt;
    }

    /// [`RingSide::device_completes`] with the CQEs held back
    /// ([`HeldCqes`]).
    pub fn device_completes_held(&mut self, n: usize) -> HeldCqes {
        let ci = self.r.cq.consumer_index();
        self.device_completes(n);
        HeldCqes::hold(&self.r.cq, ci, n)
    }

    /// Poll and complete ([`Trusting`], 16 per call) until `n` completions
    /// have come; their `wr_id`s in order (untimed checks).
    pub fn drain(&mut self, n: usize) -> Vec<u64> {
        let (mut out, mut wr_ids) = ([Cqe::EMPTY; 16], [0u64; 16]);
        let mut ids = Vec::with_capacity(n);
        while ids.len() < n {
            let k = self.poll(&mut out, &mut wr_ids, &Trusting);
            ids.extend_from_slice(&wr_ids[..k]);
        }
        ids
    }

    /// One poll of up to `out.len()` CQEs (`CqRing::poll`), each completed
    /// by `step`, its `wr_id` stored into `wr_ids` (as long as `out`); how
    /// many.
    #[inline(always)]
    pub fn poll<C: Complete>(&mut self, out: &mut [Cqe], wr_ids: &mut [u64], step: &C) -> usize {
        let k = self.r.cq.poll(&self.r.dbr, out);
        for (c, w) in out[..k].iter().zip(wr_ids.iter_mut()) {
            *w = step.complete(&mut self.r.srq, c, self.ids);
        }
        black_box(&wr_ids[..k]);
        k
    }

    /// [`RingSide::poll`] until `n` completions have come; how many.
    #[inline(always)]
    pub fn poll_block<C: Complete>(
        &mut self,
        out: &mut [Cqe],
        wr_ids: &mut [u64],
        n: usize,
        step: &C,
    ) -> usize {
        let mut got = 0;
        while got < n {
            got += self.poll(out, wr_ids, step);
        }
        got
    }

    /// [`RingSide::poll`] of the `n` CQEs of `held`, released one before
    /// each call (as [`Rig::poll_arriving_block`]); how many came.
    ///
    /// # Safety
    ///
    /// `held` was written into this side's CQ ring
    /// ([`RingSide::device_completes_held`]).
    #[inline(always)]
    pub unsafe fn poll_arriving_block<C: Complete>(
        &mut self,
        out: &mut [Cqe],
        wr_ids: &mut [u64],
        held: &HeldCqes,
        n: usize,
        step: &C,
    ) -> usize {
        let mut got = 0;
        for i in 0..n as u32 {
            // SAFETY: the ring `held` names is this side's (the caller's
            // contract), alive while the side is.
            unsafe { held.release(i) };
            got += self.poll(out, wr_ids, step);
        }
        got
    }

    /// The receive loop: [`RingSide::poll`], repost as many (`wr_id`s
    /// `0..k`, `SrqRing::post_list`), until `n` completions have come.
    #[inline(always)]
    pub fn loop_block<C: Complete>(
        &mut self,
        out: &mut [Cqe],
        wr_ids: &mut [u64],
        n: usize,
        sge: &[Sge],
        step: &C,
    ) -> usize {
        let mut got = 0;
        while got < n {
            let k = self.poll(out, wr_ids, step);
            self.r
                .srq
                .post_list((0..k as u64).map(|i| (i, sge)))
                .unwrap();
            got += k;
        }
        got
    }

    /// Post one receive per `wr_ids` entry, `per_call` per
    /// `SrqRing::post_list` (one doorbell-record store each).
    #[inline(always)]
    pub fn post_chunks(&mut self, wr_ids: &[u64], sge: &[Sge], per_call: usize) {
        for chunk in wr_ids.chunks(per_call) {
            self.r
                .srq
                .post_list(chunk.iter().map(|&i| (i, black_box(sge))))
                .unwrap();
        }
    }

    /// [`RingSide::post_chunks`] through `SrqRing::post` per request and
    /// `SrqRing::ring_doorbell` per `per_call` requests.
    #[inline(always)]
    pub fn post_each_chunks(&mut self, wr_ids: &[u64], sge: &[Sge], per_call: usize) {
        for chunk in wr_ids.chunks(per_call) {
            for &i in chunk {
                self.r.srq.post(i, black_box(sge)).unwrap();
            }
            self.r.srq.ring_doorbell();
        }
    }
}
