//! The verbs facade's hot paths beside the ring API they wrap and a raw
//! loop, in the same run, on the same platform (rings in the model's DMA
//! memory; the benchmark plays the device by storing CQEs):
//! - `facade_poll_empty/{facade,ring,raw}`: one poll of an empty CQ;
//! - `facade_poll/cq_2^k/{facade,ring,checked,raw}/B`: receive completions
//!   polled B at a time (ring: `CqRing::poll` + `SrqRing::complete`;
//!   checked: the ring API with the facade's checks for one known QP and
//!   SRQ, `mlx5_bench::facade::complete_checked`);
//! - `facade_poll_arriving/{facade,ring,checked}`: receive completions the
//!   device hands over one at a time, polled with 16 slots per call (each
//!   call finds one: a latency-bound loop passing a burst array);
//! - `facade_post/{n}_sge/{k}_per_call/{facade,ring,raw,post_recv}`:
//!   receive posts, k requests per call (ring: `SrqRing::post_list`;
//!   post_recv: `Verbs::post_recv` on a QP's own receive queue, to compare
//!   with `facade`, `post_srq_recv`);
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
    raw_empty, raw_poll_recv, recv_wrs, sges, write_recv_cqes, RawWc, Rig, RingRig,
};
use mlx5_bench::facade_own_rq::OwnRqRig;
use mlx5_bench::facade_recv::{Checking, Complete, RingSide, Trusting, LOOP_P, LOOP_WR};
use mlx5_bench::facade_send::{
    write_req_cqes, RawSq, RingSendRig, SendRig, SendShape, SendWorkload, SEND_WR,
};
use mlx5_bench::RawSrq;
use mlx5_driver::cq::Cqe;
use mlx5_driver::srq::{Sge, SrqGeometry};
use mlx5_driver::verbs::WorkCompletion;
use mlx5_hal::{DmaRegion, Hal};
use mlx5_sim::SimHal;

/// `facade_poll/.../{name}/B` for a ring-API contender: `(log2 CQ
/// entries, completions per iteration, batch)`.
fn ring_poll_contender<C: Complete>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    (log_cq, wr, batch): (u8, u32, usize),
    sge: &[Sge],
    step: C,
) {
    let n = wr as usize;
    g.bench_with_input(BenchmarkId::new(name, batch), &batch, |b, &batch| {
        let mut r = RingSide::new(log_cq, n, 1);
        let mut out = vec![Cqe::EMPTY; batch];
        let mut wr_ids = vec![0u64; batch];
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                r.fill(n, sge);
                r.device_completes(n);
                let t = Instant::now();
                r.poll_block(&mut out, &mut wr_ids, n, &step);
                total += t.elapsed();
            }
            total
        });
    });
}

/// `facade_recv_loop/{name}/B` for a ring-API contender: poll B, repost B.
fn ring_loop_contender<C: Complete>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    batch: usize,
    sge: &[Sge],
    step: C,
) {
    g.bench_with_input(BenchmarkId::new(name, batch), &batch, |b, &batch| {
        let mut r = RingSide::new(8, LOOP_WR as usize, 1);
        r.fill(LOOP_WR as usize, sge);
        let mut out = vec![Cqe::EMPTY; batch];
        let mut wr_ids = vec![0u64; batch];
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                r.device_completes(LOOP_P);
                let t = Instant::now();
                r.loop_block(&mut out, &mut wr_ids, LOOP_P, sge, &step);
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
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        rig.fill(n, &sge);
                        rig.device_completes(n);
                        let t = Instant::now();
                        rig.poll_block(&mut wc, n);
                        total += t.elapsed();
                    }
                    assert_eq!(rig.ctx.stats().unmatched_cqes, 0);
                    total
                });
            });
            ring_poll_contender(&mut g, "ring", (log_cq, wr, batch), &sge, Trusting);
            ring_poll_contender(&mut g, "checked", (log_cq, wr, batch), &sge, Checking);
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

/// `facade_poll_arriving/{name}`: 255 receive CQEs the device hands over
/// one at a time, polled 16 slots per call (every call finds one).
fn ring_arriving_contender<C: Complete>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    sge: &[Sge],
    step: C,
) {
    const N: usize = 255;
    g.bench_function(name, |b| {
        let mut r = RingSide::new(8, N, 1);
        let (mut out, mut wr_ids) = ([Cqe::EMPTY; 16], [0u64; 16]);
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                r.fill(N, sge);
                let held = r.device_completes_held(N);
                let t = Instant::now();
                // SAFETY: `held` was just written into this side's ring.
                let got = unsafe { r.poll_arriving_block(&mut out, &mut wr_ids, &held, N, &step) };
                total += t.elapsed();
                assert_eq!(got, N);
            }
            total
        });
    });
}

fn poll_arriving(c: &mut Criterion) {
    const N: usize = 255;
    let sge = sges(1);
    let mut g = c.benchmark_group("facade_poll_arriving");
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function("facade", |b| {
        let mut rig = Rig::new(8, N as u32, 1);
        let mut wc = [WorkCompletion::EMPTY; 16];
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                rig.fill(N, &sge);
                let held = rig.device_completes_held(N);
                let t = Instant::now();
                // SAFETY: `held` was just written into this rig's CQ.
                let got = unsafe { rig.poll_arriving_block(&mut wc, &held, N) };
                total += t.elapsed();
                assert_eq!(got, N);
            }
            assert_eq!(rig.ctx.stats().unmatched_cqes, 0);
            total
        });
    });
    ring_arriving_contender(&mut g, "ring", &sge, Trusting);
    ring_arriving_contender(&mut g, "checked", &sge, Checking);
    g.finish();
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
                let wrs = recv_wrs(n, &sge);
                let mut wc = vec![WorkCompletion::EMPTY; 64];
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let t = Instant::now();
                        rig.post_chunks(&wrs, per_call);
                        total += t.elapsed();
                        // Untimed: the device completes them all in order.
                        rig.device_completes(n);
                        rig.poll_block(&mut wc, n);
                    }
                    total
                });
            });
            g.bench_function("post_recv", |b| {
                let mut rig = OwnRqRig::new(8, WR, max_sge);
                let wrs = recv_wrs(n, &sge);
                let mut wc = vec![WorkCompletion::EMPTY; 64];
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let t = Instant::now();
                        rig.post_chunks(&wrs, per_call);
                        total += t.elapsed();
                        // Untimed: the device completes them all in order.
                        rig.complete_all(n, &mut wc);
                    }
                    total
                });
            });
            g.bench_function("ring", |b| {
                let mut r = RingSide::new(1, n, max_sge as usize);
                let wr_ids: Vec<u64> = (0..n as u64).collect();
                let mut order = Vec::with_capacity(n);
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let t = Instant::now();
                        r.post_chunks(&wr_ids, &sge, per_call);
                        total += t.elapsed();
                        // Untimed: complete them all in posting order.
                        let srq = &mut r.r.srq;
                        order.clear();
                        order.extend(
                            (0..srq.geometry().wqe_cnt() as u16)
                                .filter_map(|i| srq.wr_id(i).map(|w| (w, i))),
                        );
                        order.sort();
                        for &(_, i) in &order {
                            srq.complete(i).unwrap();
                        }
                    }
                    total
                });
            });
            g.bench_function("raw", |b| {
                let rig = Rig::new(1, 1, 1);
                let geo = SrqGeometry::for_request(n, max_sge as usize).unwrap();
                let mut raw = RawSrq::new(&rig.dev.hal(), geo);
                let wr_ids: Vec<u64> = (0..n as u64).collect();
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let t = Instant::now();
                        for chunk in wr_ids.chunks(per_call) {
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

fn recv_loop(c: &mut Criterion) {
    const WR: u32 = LOOP_WR;
    const P: usize = LOOP_P;
    let sge = sges(1);
    let mut g = c.benchmark_group("facade_recv_loop");
    g.throughput(Throughput::Elements(P as u64));
    for batch in [1usize, 16, 64] {
        g.bench_with_input(BenchmarkId::new("facade", batch), &batch, |b, &batch| {
            let mut rig = Rig::new(8, WR, 1);
            rig.fill(WR as usize, &sge);
            let wrs = recv_wrs(batch, &sge);
            let mut wc = vec![WorkCompletion::EMPTY; batch];
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    rig.device_completes(P);
                    let t = Instant::now();
                    rig.loop_block(&mut wc, &wrs, P);
                    total += t.elapsed();
                }
                assert_eq!(rig.ctx.stats().unmatched_cqes, 0);
                total
            });
        });
        ring_loop_contender(&mut g, "ring", batch, &sge, Trusting);
        ring_loop_contender(&mut g, "checked", batch, &sge, Checking);
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
                b.iter_custom(|iters| rig.time_posts(&wrs, per_call, iters));
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

/// A UD send post beside the RC one, in one group (the ratio): the same
/// requests, each also carrying an address handle, remote QPN and Q_Key,
/// and a WQE with the 48-byte datagram segment.
fn send_post_ud(c: &mut Criterion) {
    let work = SendWorkload::new(SendShape::Sge1);
    for per_call in [1usize, 16] {
        let mut g = c.benchmark_group(format!("facade_send_ud/1_sge/{per_call}_per_call"));
        g.throughput(Throughput::Elements(SN as u64));
        g.bench_function("rc", |b| {
            let mut rig = SendRig::new(8);
            let wrs = work.wrs();
            b.iter_custom(|iters| rig.time_posts(&wrs, per_call, iters));
        });
        g.bench_function("ud", |b| {
            let (mut rig, ah) = SendRig::new_ud(8, 0x1111_1111);
            let qpn = rig.qpn;
            let wrs = work.ud_wrs(ah, qpn, 0x1111_1111);
            b.iter_custom(|iters| rig.time_posts(&wrs, per_call, iters));
        });
        g.finish();
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
    poll_arriving,
    post,
    recv_loop,
    send_post,
    send_post_ud,
    send_poll
);
criterion_main!(benches);
