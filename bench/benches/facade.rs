//! The verbs facade's hot paths beside the ring API they wrap and a raw
//! loop, in the same run, on the same platform (rings in the model's DMA
//! memory; the benchmark plays the device by storing CQEs):
//! - `facade_poll_empty/{facade,ring,raw}`: one poll of an empty CQ;
//! - `facade_poll/cq_2^k/{facade,ring,checked,raw}/B`: receive completions
//!   polled B at a time (ring: `CqRing::poll` + `SrqRing::complete`;
//!   checked: the ring API with the facade's checks for one known QP and
//!   SRQ, `mlx5_bench::facade::complete_checked`);
//! - `facade_post/{n}_sge/{k}_per_call/{facade,ring,raw}`: receive posts,
//!   k requests per call (ring: `SrqRing::post_list`);
//! - `facade_recv_loop/{facade,ring,checked,raw}/B`: poll B, repost B;
//! - `facade_send/{1_sge,4_sge,inline_64}/{k}_per_call/{facade,ring,raw}`:
//!   signaled SENDs, k per call (ring: `Qp::post_send`);
//! - `facade_send_poll/{facade,ring,raw}/B`: requester completions polled
//!   B at a time (ring: `Cq::poll` + `Qp::complete_send`).
//!
//! Ratios: `python3 bench/ratios.py` (facade rows are named `facade`;
//! the script compares them with `ring` and `raw`).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{
    criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion, Throughput,
};
use mlx5_bench::facade::{
    complete_checked, raw_empty, raw_poll_recv, sges, write_recv_cqes, RawWc, Rig, RingRig,
};
use mlx5_bench::facade_send::{
    write_req_cqes, RawSq, RingSendRig, SendRig, SendShape, SendWorkload, SEND_WR,
};
use mlx5_bench::RawSrq;
use mlx5_driver::cq::Cqe;
use mlx5_driver::srq::{Sge, SrqGeometry, SrqRing};
use mlx5_driver::verbs::{RecvWr, WorkCompletion};
use mlx5_hal::{DmaRegion, Hal};
use mlx5_sim::SimHal;

/// Post `n` receives (1 SGE) through the facade, 16 per call.
fn facade_fill(rig: &mut Rig, n: usize, sge: &[Sge]) {
    let wrs: Vec<RecvWr> = (0..16)
        .map(|i| RecvWr {
            wr_id: i,
            sges: sge,
        })
        .collect();
    let mut left = n;
    while left > 0 {
        let k = left.min(16);
        rig.ctx.post_srq_recv(rig.srq, &wrs[..k]).unwrap();
        left -= k;
    }
}

fn ring_fill(r: &mut RingRig<SimHal>, n: usize, sge: &[Sge]) {
    r.srq.post_list((0..n as u64).map(|i| (i, sge))).unwrap();
}

/// The ring-API contenders of the receive benchmarks: `ring` trusts the
/// CQE (`SrqRing::complete`, as a consumer that knows its QP and SRQ uses
/// the ring API); `checked` checks what the facade checks for one known QP
/// and SRQ ([`complete_checked`]). Generic, so each is its own inlined
/// loop (no call through a pointer per CQE).
fn trusting(srq: &mut SrqRing<SimHal>, c: &Cqe, _: (u32, u32)) -> u64 {
    srq.complete(c.wqe_counter).unwrap()
}

fn checking(srq: &mut SrqRing<SimHal>, c: &Cqe, ids: (u32, u32)) -> u64 {
    complete_checked(srq, c, ids.0, ids.1).unwrap()
}

/// One ring-API poll of up to `out.len()` receive CQEs, each completed;
/// how many.
#[inline(always)]
fn ring_poll<F: Fn(&mut SrqRing<SimHal>, &Cqe, (u32, u32)) -> u64>(
    r: &mut RingRig<SimHal>,
    out: &mut [Cqe],
    ids: (u32, u32),
    complete: &F,
) -> usize {
    let k = r.cq.poll(&r.dbr, out);
    for c in &out[..k] {
        black_box(complete(&mut r.srq, c, ids));
    }
    black_box(&out[..k]);
    k
}

/// `facade_poll/.../{name}/B` for a ring-API contender: `(log2 CQ
/// entries, completions per iteration, batch)`.
fn ring_poll_contender<F: Fn(&mut SrqRing<SimHal>, &Cqe, (u32, u32)) -> u64>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    (log_cq, wr, batch): (u8, u32, usize),
    sge: &[Sge],
    complete: F,
) {
    let n = wr as usize;
    g.bench_with_input(BenchmarkId::new(name, batch), &batch, |b, &batch| {
        let rig = Rig::new(1, 1, 1);
        let geo = SrqGeometry::for_request(n, 1).unwrap();
        let mut r = RingRig::new(&rig.dev.hal(), log_cq, geo);
        let ids = (rig.qpn, rig.srqn);
        let mut out = vec![Cqe::EMPTY; batch];
        let mut wqe = 0u32;
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                ring_fill(&mut r, n, sge);
                let ci = r.cq.consumer_index();
                write_recv_cqes(&r.cq, ci, ids.0, ids.1, wqe, wr + 1, n);
                wqe = (wqe + wr) % (wr + 1);
                let t = Instant::now();
                let mut got = 0;
                while got < n {
                    got += ring_poll(&mut r, &mut out, ids, &complete);
                }
                total += t.elapsed();
            }
            total
        });
    });
}

/// `facade_recv_loop/{name}/B` for a ring-API contender: poll B, repost B.
fn ring_loop_contender<F: Fn(&mut SrqRing<SimHal>, &Cqe, (u32, u32)) -> u64>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    batch: usize,
    sge: &[Sge],
    complete: F,
) {
    g.bench_with_input(BenchmarkId::new(name, batch), &batch, |b, &batch| {
        let rig = Rig::new(1, 1, 1);
        let geo = SrqGeometry::for_request(LOOP_WR as usize, 1).unwrap();
        let mut r = RingRig::new(&rig.dev.hal(), 8, geo);
        let ids = (rig.qpn, rig.srqn);
        ring_fill(&mut r, LOOP_WR as usize, sge);
        let mut out = vec![Cqe::EMPTY; batch];
        let mut wqe = 0u32;
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let ci = r.cq.consumer_index();
                write_recv_cqes(&r.cq, ci, ids.0, ids.1, wqe, LOOP_WR + 1, LOOP_P);
                wqe = (wqe + LOOP_P as u32) % (LOOP_WR + 1);
                let t = Instant::now();
                let mut got = 0;
                while got < LOOP_P {
                    let k = ring_poll(&mut r, &mut out, ids, &complete);
                    r.srq.post_list((0..k as u64).map(|i| (i, sge))).unwrap();
                    got += k;
                }
                total += t.elapsed();
            }
            total
        });
    });
}

fn poll_empty(c: &mut Criterion) {
    let mut g = c.benchmark_group("facade_poll_empty");
    let mut rig = Rig::new(8, 255, 1);
    let hal = rig.dev.hal();
    let geo = SrqGeometry::for_request(255, 1).unwrap();
    let mut ring = RingRig::new(&hal, 8, geo);
    let mut wc = [WorkCompletion::EMPTY; 16];
    let mut out = [Cqe::EMPTY; 16];
    g.bench_function("facade", |b| {
        b.iter(|| black_box(rig.ctx.poll_cq(rig.cq, black_box(&mut wc)).unwrap()))
    });
    g.bench_function("ring", |b| {
        b.iter(|| black_box(ring.cq.poll(&ring.dbr, black_box(&mut out))))
    });
    let p = ring.cq.region().as_ptr();
    g.bench_function("raw", |b| {
        // SAFETY: `p` is the live ring of 2^8 CQEs of `ring`.
        b.iter(|| black_box(unsafe { raw_empty(black_box(p), 8, black_box(0)) }))
    });
    g.finish();
}

fn poll_batches(c: &mut Criterion) {
    let sge = sges(1);
    // (log2 CQ entries, SRQ WQEs = completions per iteration)
    for (log_cq, wr) in [(8u8, 255u32), (16, 32767)] {
        let mut g = c.benchmark_group(format!("facade_poll/cq_2^{log_cq}"));
        g.throughput(Throughput::Elements(wr as u64));
        if log_cq > 10 {
            g.sample_size(10);
        }
        let n = wr as usize;
        for batch in [1usize, 16, 64] {
            g.bench_with_input(BenchmarkId::new("facade", batch), &batch, |b, &batch| {
                let mut rig = Rig::new(log_cq, wr, 1);
                let mut wc = vec![WorkCompletion::EMPTY; batch];
                let mut wqe = 0u32;
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        facade_fill(&mut rig, n, &sge);
                        let ci = rig.ctx.cq(rig.cq).unwrap().consumer_index();
                        rig.write_recv_cqes(ci, wqe, n);
                        wqe = (wqe + wr) % (wr + 1);
                        let t = Instant::now();
                        let mut got = 0;
                        while got < n {
                            let k = rig.ctx.poll_cq(rig.cq, &mut wc).unwrap();
                            black_box(&wc[..k]);
                            got += k;
                        }
                        total += t.elapsed();
                    }
                    assert_eq!(rig.ctx.stats().unmatched_cqes, 0);
                    total
                });
            });
            ring_poll_contender(&mut g, "ring", (log_cq, wr, batch), &sge, trusting);
            ring_poll_contender(&mut g, "checked", (log_cq, wr, batch), &sge, checking);
            g.bench_with_input(BenchmarkId::new("raw", batch), &batch, |b, &batch| {
                let rig = Rig::new(1, 1, 1);
                let hal = rig.dev.hal();
                let geo = SrqGeometry::for_request(wr as usize, 1).unwrap();
                let r = RingRig::new(&hal, log_cq, geo);
                let dbr: DmaRegion<SimHal> = hal.alloc_dma(8).unwrap();
                let wrids: Vec<u64> = (0..geo.wqe_cnt() as u64).collect();
                let mut out = vec![RawWc::default(); batch];
                let (mut ci, mut wqe) = (0u32, 0u32);
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        write_recv_cqes(&r.cq, ci, rig.qpn, rig.srqn, wqe, wr + 1, n);
                        wqe = (wqe + wr) % (wr + 1);
                        let p = r.cq.region().as_ptr();
                        let t = Instant::now();
                        let mut got = 0;
                        while got < n {
                            // SAFETY: the live ring of 2^log_cq CQEs, an
                            // 8-byte record, a table of 2^k entries.
                            let k = unsafe {
                                raw_poll_recv(
                                    p,
                                    log_cq as u32,
                                    &mut ci,
                                    dbr.as_ptr() as *mut u32,
                                    &wrids,
                                    &mut out,
                                )
                            };
                            black_box(&out[..k]);
                            got += k;
                        }
                        total += t.elapsed();
                    }
                    total
                });
            });
        }
        g.finish();
    }
}

fn post(c: &mut Criterion) {
    const WR: u32 = 255;
    let n = WR as usize;
    for nsge in [1usize, 4] {
        let sge = sges(nsge);
        for per_call in [1usize, 16] {
            let mut g = c.benchmark_group(format!("facade_post/{nsge}_sge/{per_call}_per_call"));
            g.throughput(Throughput::Elements(n as u64));
            // One spare scatter entry so the terminator is written as well.
            let max_sge = nsge as u32 + 1;
            g.bench_function("facade", |b| {
                let mut rig = Rig::new(8, WR, max_sge);
                let wrs: Vec<RecvWr> = (0..n as u64)
                    .map(|i| RecvWr {
                        wr_id: i,
                        sges: &sge,
                    })
                    .collect();
                let mut wqe = 0u32;
                let mut wc = vec![WorkCompletion::EMPTY; 64];
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let t = Instant::now();
                        for chunk in wrs.chunks(per_call) {
                            rig.ctx.post_srq_recv(rig.srq, black_box(chunk)).unwrap();
                        }
                        total += t.elapsed();
                        // Untimed: the device completes them all in order.
                        let ci = rig.ctx.cq(rig.cq).unwrap().consumer_index();
                        rig.write_recv_cqes(ci, wqe, n);
                        wqe = (wqe + WR) % (WR + 1);
                        let mut got = 0;
                        while got < n {
                            got += rig.ctx.poll_cq(rig.cq, &mut wc).unwrap();
                        }
                    }
                    total
                });
            });
            g.bench_function("ring", |b| {
                let rig = Rig::new(1, 1, 1);
                let geo = SrqGeometry::for_request(n, max_sge as usize).unwrap();
                let mut r = RingRig::new(&rig.dev.hal(), 1, geo);
                let mut order = Vec::with_capacity(n);
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let t = Instant::now();
                        for chunk in (0..n as u64).collect::<Vec<_>>().chunks(per_call) {
                            r.srq
                                .post_list(chunk.iter().map(|&i| (i, black_box(&sge[..]))))
                                .unwrap();
                        }
                        total += t.elapsed();
                        order.clear();
                        order.extend(
                            (0..geo.wqe_cnt() as u16)
                                .filter_map(|i| r.srq.wr_id(i).map(|w| (w, i))),
                        );
                        order.sort();
                        for &(_, i) in &order {
                            r.srq.complete(i).unwrap();
                        }
                    }
                    total
                });
            });
            g.bench_function("raw", |b| {
                let rig = Rig::new(1, 1, 1);
                let geo = SrqGeometry::for_request(n, max_sge as usize).unwrap();
                let mut raw = RawSrq::new(&rig.dev.hal(), geo);
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let t = Instant::now();
                        for chunk in (0..n as u64).collect::<Vec<_>>().chunks(per_call) {
                            for &i in chunk {
                                raw.post(i, black_box(&sge));
                            }
                            raw.ring();
                        }
                        total += t.elapsed();
                        black_box(&raw);
                    }
                    total
                });
            });
            g.finish();
        }
    }
}

/// The receive loop's SRQ size and completions per iteration.
const LOOP_WR: u32 = 255;
const LOOP_P: usize = 256;

fn recv_loop(c: &mut Criterion) {
    const WR: u32 = LOOP_WR;
    const P: usize = LOOP_P;
    let sge = sges(1);
    let mut g = c.benchmark_group("facade_recv_loop");
    g.throughput(Throughput::Elements(P as u64));
    for batch in [1usize, 16, 64] {
        g.bench_with_input(BenchmarkId::new("facade", batch), &batch, |b, &batch| {
            let mut rig = Rig::new(8, WR, 1);
            facade_fill(&mut rig, WR as usize, &sge);
            let wrs: Vec<RecvWr> = (0..batch as u64)
                .map(|i| RecvWr {
                    wr_id: i,
                    sges: &sge,
                })
                .collect();
            let mut wc = vec![WorkCompletion::EMPTY; batch];
            let mut wqe = 0u32;
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let ci = rig.ctx.cq(rig.cq).unwrap().consumer_index();
                    rig.write_recv_cqes(ci, wqe, P);
                    wqe = (wqe + P as u32) % (WR + 1);
                    let t = Instant::now();
                    let mut got = 0;
                    while got < P {
                        let k = rig.ctx.poll_cq(rig.cq, &mut wc).unwrap();
                        black_box(&wc[..k]);
                        rig.ctx.post_srq_recv(rig.srq, &wrs[..k]).unwrap();
                        got += k;
                    }
                    total += t.elapsed();
                }
                assert_eq!(rig.ctx.stats().unmatched_cqes, 0);
                total
            });
        });
        ring_loop_contender(&mut g, "ring", batch, &sge, trusting);
        ring_loop_contender(&mut g, "checked", batch, &sge, checking);
        g.bench_with_input(BenchmarkId::new("raw", batch), &batch, |b, &batch| {
            let rig = Rig::new(1, 1, 1);
            let hal = rig.dev.hal();
            let geo = SrqGeometry::for_request(WR as usize, 1).unwrap();
            let r = RingRig::new(&hal, 8, geo);
            let mut raw = RawSrq::new(&hal, geo);
            for i in 0..WR as u64 {
                raw.post(i, &sge);
            }
            raw.ring();
            let dbr: DmaRegion<SimHal> = hal.alloc_dma(8).unwrap();
            let mut out = vec![RawWc::default(); batch];
            let (mut ci, mut wqe) = (0u32, 0u32);
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    write_recv_cqes(&r.cq, ci, rig.qpn, rig.srqn, wqe, WR + 1, P);
                    wqe = (wqe + P as u32) % (WR + 1);
                    let p = r.cq.region().as_ptr();
                    let t = Instant::now();
                    let mut got = 0;
                    while got < P {
                        // SAFETY: the live ring of 2^8 CQEs, an 8-byte
                        // record, 256 wr_ids.
                        let k = unsafe {
                            raw_poll_recv(
                                p,
                                8,
                                &mut ci,
                                dbr.as_ptr() as *mut u32,
                                &raw.wrids,
                                &mut out,
                            )
                        };
                        black_box(&out[..k]);
                        for i in 0..k as u64 {
                            raw.post(i, &sge);
                        }
                        raw.ring();
                        got += k;
                    }
                    total += t.elapsed();
                }
                total
            });
        });
    }
    g.finish();
}

/// Requests per iteration (all fit in the queue at once).
const SN: usize = SEND_WR as usize;

fn send_post(c: &mut Criterion) {
    for shape in SendShape::ALL {
        let work = SendWorkload::new(shape);
        for per_call in [1usize, 16] {
            let name = shape.bench_name();
            let mut g = c.benchmark_group(format!("facade_send/{name}/{per_call}_per_call"));
            g.throughput(Throughput::Elements(SN as u64));
            g.bench_function("facade", |b| {
                let mut rig = SendRig::new(8);
                let wrs = work.wrs();
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let p0 = rig.producer();
                        let t = Instant::now();
                        rig.post_chunks(&wrs, per_call);
                        total += t.elapsed();
                        // Untimed: one CQE for the last WQE retires them all.
                        rig.retire(p0, SN);
                    }
                    assert_eq!(rig.ctx.stats().unmatched_cqes, 0);
                    total
                });
            });
            g.bench_function("ring", |b| {
                let mut r = RingSendRig::new(8);
                let reqs = work.reqs();
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let p0 = r.producer();
                        let t = Instant::now();
                        r.post_chunks(&reqs, per_call);
                        total += t.elapsed();
                        r.retire(p0, SN);
                    }
                    total
                });
            });
            g.bench_function("raw", |b| {
                let r = SendRig::new(8);
                let hal = r.ctx.hca().hal().clone();
                let mut raw = RawSq::new(&hal, 256, r.qpn);
                let (sge, inl) = (work.sges(), work.inline());
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let t = Instant::now();
                        for chunk in (0..SN as u64).collect::<Vec<_>>().chunks(per_call) {
                            for &i in chunk {
                                raw.post(i, black_box(sge), black_box(inl));
                            }
                            raw.ring();
                        }
                        total += t.elapsed();
                        black_box(&raw);
                    }
                    total
                });
            });
            g.finish();
        }
    }
}

fn send_poll(c: &mut Criterion) {
    let work = SendWorkload::new(SendShape::Sge1);
    let mut g = c.benchmark_group("facade_send_poll");
    g.throughput(Throughput::Elements(SN as u64));
    for batch in [1usize, 16, 64] {
        g.bench_with_input(BenchmarkId::new("facade", batch), &batch, |b, &batch| {
            let mut rig = SendRig::new(8);
            let wrs = work.wrs();
            let mut wc = vec![WorkCompletion::EMPTY; batch];
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let p0 = rig.producer();
                    rig.ctx.post_send(rig.qp, &wrs).unwrap();
                    rig.write_cqes(p0, 1, SN);
                    let t = Instant::now();
                    let mut got = 0;
                    while got < SN {
                        let k = rig.ctx.poll_cq(rig.cq, &mut wc).unwrap();
                        black_box(&wc[..k]);
                        got += k;
                    }
                    total += t.elapsed();
                }
                assert_eq!(rig.ctx.stats().unmatched_cqes, 0);
                total
            });
        });
        g.bench_with_input(BenchmarkId::new("ring", batch), &batch, |b, &batch| {
            let mut r = RingSendRig::new(8);
            let reqs = work.reqs();
            let mut out = vec![Cqe::EMPTY; batch];
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let p0 = r.producer();
                    r.qp.post_send(&reqs).unwrap();
                    r.write_cqes(p0, 1, SN);
                    let t = Instant::now();
                    let mut got = 0;
                    while got < SN {
                        let k = r.cq.poll(&mut out);
                        for c in &out[..k] {
                            black_box(r.qp.complete_send(c).unwrap());
                        }
                        got += k;
                    }
                    total += t.elapsed();
                }
                total
            });
        });
        g.bench_with_input(BenchmarkId::new("raw", batch), &batch, |b, &batch| {
            let rig = Rig::new(1, 1, 1);
            let hal = rig.dev.hal();
            let geo = SrqGeometry::for_request(1, 1).unwrap();
            let r = RingRig::new(&hal, 8, geo);
            let dbr: DmaRegion<SimHal> = hal.alloc_dma(8).unwrap();
            let wrids: Vec<u64> = (0..256).collect();
            let mut out = vec![RawWc::default(); batch];
            let (mut ci, mut wqe) = (0u32, 0u16);
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    write_req_cqes(&r.cq, ci, rig.qpn, wqe, 1, SN);
                    wqe = wqe.wrapping_add(SN as u16);
                    let p = r.cq.region().as_ptr();
                    let t = Instant::now();
                    let mut got = 0;
                    while got < SN {
                        // SAFETY: the live ring of 2^8 CQEs, an 8-byte
                        // record, 256 wr_ids.
                        let k = unsafe {
                            raw_poll_recv(p, 8, &mut ci, dbr.as_ptr() as *mut u32, &wrids, &mut out)
                        };
                        black_box(&out[..k]);
                        got += k;
                    }
                    total += t.elapsed();
                }
                total
            });
        });
    }
    g.finish();
}

criterion_group!(
    benches,
    poll_empty,
    poll_batches,
    post,
    recv_loop,
    send_post,
    send_poll
);
criterion_main!(benches);
