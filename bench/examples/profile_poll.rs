//! Instruction-count probe for `poll_cq`: the verbs facade, the ring API
//! (`CqRing::poll` + `SrqRing::complete`) and the raw loop, each on an
//! empty CQ and at batch 1 with one receive CQE waiting, and the facade and
//! the ring API polling 16 at a time (`facade_b16`, `ring_b16`: per CQE),
//! and the ring API with the facade's checks for one known QP and SRQ
//! (`checked_one`, `checked_b16`; `mlx5_bench::facade::complete_checked`)
//! (the code the `facade` benchmark times), and the facade and the ring API
//! passing 16 slots while the CQEs arrive one at a time, one waiting per
//! call (`facade_arriving`, `ring_arriving`), and the facade's empty poll
//! with 16 slots (`facade_empty16`), for machines whose timers are too
//! noisy, and the extended-CQ loop (`lazy_one`: one completion per pass;
//! `lazy_b16`: up to 16 per pass, per CQE):
//!
//! ```sh
//! cargo build --release -p mlx5-bench --example profile_poll
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out \
//!     target/release/examples/profile_poll
//! callgrind_annotate --inclusive=yes /tmp/cg.out | grep -E '(facade|ring|checked|raw)_(empty|one|b16|arriving)'
//! ```
//!
//! Each probed function is `#[inline(never)]`; the empty, batch-1 and
//! arriving probes are called `CALLS` times (printed), and the batch-16
//! probes take as many CQEs in all: divide callgrind's inclusive count by
//! it.

use std::hint::black_box;

use mlx5_bench::facade::{
    complete_checked, raw_empty, raw_poll_recv, write_recv_cqes, RawWc, Rig, RingRig,
};
use mlx5_driver::cq::Cqe;
use mlx5_driver::srq::{Sge, SrqGeometry};
use mlx5_driver::verbs::{RecvWr, WcStatus, WorkCompletion};
use mlx5_sim::SimHal;

const ROUNDS: usize = 40;

#[inline(never)]
fn facade_empty(rig: &mut Rig, wc: &mut [WorkCompletion; 1]) -> usize {
    rig.ctx.poll_cq(rig.cq, wc).unwrap()
}

/// The empty poll with 16 slots (the other probes' empty poll passes 1).
#[inline(never)]
fn facade_empty16(rig: &mut Rig, wc: &mut [WorkCompletion; 16]) -> usize {
    rig.ctx.poll_cq(rig.cq, wc).unwrap()
}

#[inline(never)]
fn facade_one(rig: &mut Rig, wc: &mut [WorkCompletion; 1]) -> usize {
    rig.ctx.poll_cq(rig.cq, wc).unwrap()
}

#[inline(never)]
fn ring_empty(r: &mut RingRig<SimHal>, out: &mut [Cqe; 1]) -> usize {
    r.cq.poll(&r.dbr, out)
}

#[inline(never)]
fn ring_one(r: &mut RingRig<SimHal>, out: &mut [Cqe; 1], wr_id: &mut u64) -> usize {
    let n = r.cq.poll(&r.dbr, out);
    if n == 1 {
        *wr_id = r.srq.complete(out[0].wqe_counter).unwrap();
    }
    n
}

#[inline(never)]
fn facade_b16(rig: &mut Rig, wc: &mut [WorkCompletion; 16]) -> usize {
    rig.ctx.poll_cq(rig.cq, wc).unwrap()
}

/// 16 slots, the CQEs arriving one at a time: one waiting per call (each
/// arriving probe checks that it took exactly one).
#[inline(never)]
fn facade_arriving(rig: &mut Rig, wc: &mut [WorkCompletion; 16]) {
    assert_eq!(rig.ctx.poll_cq(rig.cq, wc).unwrap(), 1);
}

/// The extended-CQ loop finding one completion: `start_poll`, the fields
/// a receive loop reads, `next_poll` (none), `end_poll`.
#[inline(never)]
fn lazy_one(rig: &mut Rig) -> u64 {
    let mut p = rig.ctx.start_poll(rig.cq).unwrap();
    let got = p.wr_id() ^ p.read_byte_len() as u64 ^ (p.status() == WcStatus::Success) as u64;
    assert!(p.next_poll().is_err());
    p.end_poll();
    got
}

/// The extended-CQ loop over up to 16 completions (per CQE: divide by the
/// completions taken).
#[inline(never)]
fn lazy_b16(rig: &mut Rig, ids: &mut [u64; 16]) -> usize {
    let Ok(mut p) = rig.ctx.start_poll(rig.cq) else {
        return 0;
    };
    let mut n = 0;
    loop {
        ids[n] = p.wr_id() ^ p.read_byte_len() as u64 ^ (p.status() == WcStatus::Success) as u64;
        n += 1;
        if n == 16 || p.next_poll().is_err() {
            break;
        }
    }
    p.end_poll();
    n
}

#[inline(always)]
fn ring_poll16(r: &mut RingRig<SimHal>, out: &mut [Cqe; 16], wr_id: &mut [u64; 16]) -> usize {
    let n = r.cq.poll(&r.dbr, out);
    for (c, w) in out[..n].iter().zip(wr_id.iter_mut()) {
        *w = r.srq.complete(c.wqe_counter).unwrap();
    }
    n
}

#[inline(never)]
fn ring_b16(r: &mut RingRig<SimHal>, out: &mut [Cqe; 16], wr_id: &mut [u64; 16]) -> usize {
    ring_poll16(r, out, wr_id)
}

/// As [`facade_arriving`].
#[inline(never)]
fn ring_arriving(r: &mut RingRig<SimHal>, out: &mut [Cqe; 16], wr_id: &mut [u64; 16]) {
    assert_eq!(ring_poll16(r, out, wr_id), 1);
}

#[inline(never)]
fn checked_one(r: &mut RingRig<SimHal>, out: &mut [Cqe; 1], ids: (u32, u32)) -> u64 {
    let n = r.cq.poll(&r.dbr, out);
    assert_eq!(n, 1);
    complete_checked(&mut r.srq, &out[0], ids.0, ids.1).unwrap()
}

#[inline(never)]
fn checked_b16(
    r: &mut RingRig<SimHal>,
    out: &mut [Cqe; 16],
    wr_id: &mut [u64; 16],
    ids: (u32, u32),
) -> usize {
    let n = r.cq.poll(&r.dbr, out);
    for (c, w) in out[..n].iter().zip(wr_id.iter_mut()) {
        *w = complete_checked(&mut r.srq, c, ids.0, ids.1).unwrap();
    }
    n
}

#[inline(never)]
fn raw_empty_probe(ring: *const u8, log: u32, ci: u32) -> bool {
    // SAFETY: the caller passes the live ring of a `RingRig` of 2^log CQEs.
    unsafe { raw_empty(ring, log, ci) }
}

#[inline(never)]
fn raw_one(
    ring: *const u8,
    log: u32,
    ci: &mut u32,
    dbr: *mut u32,
    wrids: &[u64],
    out: &mut [RawWc; 1],
) -> usize {
    // SAFETY: a live ring of 2^log CQEs, an 8-byte record, a 2^k table.
    unsafe { raw_poll_recv(ring, log, ci, dbr, wrids, out) }
}

/// SRQ size and CQEs per round.
const WR: u32 = 255;

/// Post `WR` receives (`wr_id`s `0..WR`) through the facade, one per
/// call, and the same through the ring API, one doorbell-record store.
fn refill(rig: &mut Rig, ring: &mut RingRig<SimHal>, sge: &[Sge]) {
    for i in 0..WR {
        let wr = [RecvWr {
            wr_id: i as u64,
            sges: sge,
        }];
        rig.ctx.post_srq_recv(rig.srq, &wr).unwrap();
        ring.srq.post(i as u64, sge).unwrap();
    }
    ring.srq.ring_doorbell();
}

/// Post `WR` receives through the facade only.
fn refill_facade(rig: &mut Rig, sge: &[Sge]) {
    for i in 0..WR {
        let wr = [RecvWr {
            wr_id: i as u64,
            sges: sge,
        }];
        rig.ctx.post_srq_recv(rig.srq, &wr).unwrap();
    }
}

fn main() {
    const LOG: u8 = 8;
    let mut rig = Rig::new(LOG, WR, 1);
    let hal = rig.dev.hal();
    let geo = SrqGeometry::for_request(WR as usize, 1).unwrap();
    let mut ring = RingRig::new(&hal, LOG, geo);
    let mut cring = RingRig::new(&hal, LOG, geo);
    let mut c_wqe = 0u32;
    let raw_ring = RingRig::new(&hal, LOG, geo);
    let raw_dbr = mlx5_hal::Hal::alloc_dma(&hal, 8).unwrap();
    let wrids: Vec<u64> = (0..geo.wqe_cnt() as u64).collect();
    let sge = [Sge {
        addr: 0x10_0000,
        length: 1024,
        lkey: 0x42,
    }];
    let mut wc = [WorkCompletion::EMPTY; 1];
    let mut out = [Cqe::EMPTY; 1];
    let mut raw_out = [RawWc::default(); 1];
    let mut wc16 = [WorkCompletion::EMPTY; 16];
    let mut out16 = [Cqe::EMPTY; 16];
    let mut ids16 = [0u64; 16];
    let (mut f_wqe, mut r_wqe) = (0u32, 0u32);
    let mut raw_ci = 0u32;
    let mut calls = 0usize;
    for _ in 0..ROUNDS {
        // Facade: fill the SRQ, the device completes every WQE in order.
        for i in 0..WR {
            let wr = [RecvWr {
                wr_id: i as u64,
                sges: &sge,
            }];
            rig.ctx.post_srq_recv(rig.srq, &wr).unwrap();
        }
        let ci = rig.ctx.cq(rig.cq).unwrap().consumer_index();
        rig.write_recv_cqes(ci, f_wqe, WR as usize);
        f_wqe = (f_wqe + WR) % (WR + 1);
        // Ring API: the same.
        for i in 0..WR {
            ring.srq.post(i as u64, &sge).unwrap();
        }
        ring.srq.ring_doorbell();
        let ci = ring.cq.consumer_index();
        write_recv_cqes(&ring.cq, ci, rig.qpn, rig.srqn, r_wqe, WR + 1, WR as usize);
        r_wqe = (r_wqe + WR) % (WR + 1);
        write_recv_cqes(
            &raw_ring.cq,
            raw_ci,
            rig.qpn,
            rig.srqn,
            raw_ci,
            WR + 1,
            WR as usize,
        );
        let mut wr_id = 0;
        for _ in 0..WR {
            assert_eq!(facade_one(&mut rig, &mut wc), 1);
            assert_eq!(ring_one(&mut ring, &mut out, &mut wr_id), 1);
            assert_eq!(
                raw_one(
                    raw_ring.cq.region().as_ptr(),
                    LOG as u32,
                    &mut raw_ci,
                    raw_dbr.as_ptr() as *mut u32,
                    &wrids,
                    &mut raw_out
                ),
                1
            );
            black_box((&wc, wr_id, &raw_out));
            // Empty from here on until the next round's CQEs: one call
            // each per completion, so the counts divide alike.
        }
        for _ in 0..WR {
            assert_eq!(facade_empty(&mut rig, &mut wc), 0);
            assert_eq!(facade_empty16(&mut rig, &mut wc16), 0);
            assert_eq!(ring_empty(&mut ring, &mut out), 0);
            assert!(raw_empty_probe(
                raw_ring.cq.region().as_ptr(),
                LOG as u32,
                raw_ci
            ));
            calls += 1;
        }
        // Batch 16: the same completions again, 16 at a time.
        refill(&mut rig, &mut ring, &sge);
        let ci = rig.ctx.cq(rig.cq).unwrap().consumer_index();
        rig.write_recv_cqes(ci, f_wqe, WR as usize);
        f_wqe = (f_wqe + WR) % (WR + 1);
        let ci = ring.cq.consumer_index();
        write_recv_cqes(&ring.cq, ci, rig.qpn, rig.srqn, r_wqe, WR + 1, WR as usize);
        r_wqe = (r_wqe + WR) % (WR + 1);
        let (mut f, mut r) = (0, 0);
        while f < WR as usize {
            f += facade_b16(&mut rig, &mut wc16);
            black_box(&wc16);
        }
        while r < WR as usize {
            r += ring_b16(&mut ring, &mut out16, &mut ids16);
            black_box(&ids16);
        }
        // The extended-CQ loop: 16 at a time, then one per pass.
        refill_facade(&mut rig, &sge);
        let ci = rig.ctx.cq(rig.cq).unwrap().consumer_index();
        rig.write_recv_cqes(ci, f_wqe, WR as usize);
        f_wqe = (f_wqe + WR) % (WR + 1);
        let mut f = 0;
        while f < WR as usize {
            f += lazy_b16(&mut rig, &mut ids16);
            black_box(&ids16);
        }
        refill_facade(&mut rig, &sge);
        for _ in 0..WR {
            let ci = rig.ctx.cq(rig.cq).unwrap().consumer_index();
            rig.write_recv_cqes(ci, f_wqe, 1);
            f_wqe = (f_wqe + 1) % (WR + 1);
            black_box(lazy_one(&mut rig));
        }
        // 16 slots, the device writing one CQE before each call.
        refill(&mut rig, &mut ring, &sge);
        for _ in 0..WR {
            let ci = rig.ctx.cq(rig.cq).unwrap().consumer_index();
            rig.write_recv_cqes(ci, f_wqe, 1);
            f_wqe = (f_wqe + 1) % (WR + 1);
            facade_arriving(&mut rig, &mut wc16);
            let ci = ring.cq.consumer_index();
            write_recv_cqes(&ring.cq, ci, rig.qpn, rig.srqn, r_wqe, WR + 1, 1);
            r_wqe = (r_wqe + 1) % (WR + 1);
            ring_arriving(&mut ring, &mut out16, &mut ids16);
            black_box((&wc16, &ids16));
        }
        // The ring API with the facade's checks: batch 1, then batch 16.
        let ids = (rig.qpn, rig.srqn);
        let mut fill = |cring: &mut RingRig<SimHal>| {
            for i in 0..WR {
                cring.srq.post(i as u64, &sge).unwrap();
            }
            cring.srq.ring_doorbell();
            let ci = cring.cq.consumer_index();
            write_recv_cqes(&cring.cq, ci, ids.0, ids.1, c_wqe, WR + 1, WR as usize);
            c_wqe = (c_wqe + WR) % (WR + 1);
        };
        fill(&mut cring);
        for _ in 0..WR {
            black_box(checked_one(&mut cring, &mut out, ids));
        }
        fill(&mut cring);
        let mut c = 0;
        while c < WR as usize {
            c += checked_b16(&mut cring, &mut out16, &mut ids16, ids);
            black_box(&ids16);
        }
    }
    assert_eq!(rig.ctx.stats().unmatched_cqes, 0);
    println!("{calls} calls of each probe (facade/ring/raw, empty and one; facade/ring arriving); {calls} CQEs through the batch-16 probes");
}
