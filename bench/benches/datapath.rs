//! Data-path hot loops against raw baselines in the same run:
//! - `poll_cq`: the driver's CqRing::poll vs. a raw loop that checks the same
//!   ownership byte and reads the same CQE fields from the same ring;
//! - `post_srq_recv`: SrqRing::post + doorbell vs. a raw loop writing the same
//!   WQE bytes and doorbell record.
//!
//! Ratios: `python3 bench/ratios.py` after `cargo bench -p mlx5-bench`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use mlx5_bench::{prefill_cq, RawSrq};
use mlx5_driver::cq::{Cqe, CqeSize};
use mlx5_driver::srq::{Sge, SrqGeometry};
use mlx5_driver::unstable::cq::{CqRing, DoorbellRecord};
use mlx5_driver::unstable::srq::SrqRing;
use mlx5_hal::host::HostHal;
use mlx5_hal::{barrier, DmaRegion};

/// What the raw baseline reads from each CQE (the same fields `Cqe` holds).
/// The fields are consumed through `black_box`, which the dead-code lint
/// cannot see.
#[allow(dead_code)]
#[derive(Default, Clone, Copy)]
struct RawCqe {
    op_own: u8,
    syndrome_word: u32,
    byte_cnt: u32,
    wqe_counter: u16,
    qpn: u32,
    srqn: u32,
    imm: u32,
}

/// The raw loop: ownership test, read barrier, fields, doorbell per batch.
fn raw_poll(
    ring: *const u8,
    log_nent: u32,
    stride: usize,
    ci: &mut u32,
    dbr: *mut u32,
    out: &mut [RawCqe],
) -> usize {
    let mask = (1u32 << log_nent) - 1;
    let mut n = 0;
    while n < out.len() {
        let cqe = (*ci & mask) as usize * stride + stride - 64;
        // SAFETY: (whole block) `cqe + 64 <= ring length`; the ring is live
        // DMA memory; all reads are volatile and aligned.
        unsafe {
            let op_own = ring.add(cqe + 0x3f).read_volatile();
            if op_own >> 4 == 0xf || (op_own & 1) as u32 != (*ci >> log_nent) & 1 {
                break;
            }
            barrier::dma_rmb();
            let rd32 = |o: usize| u32::from_be((ring.add(cqe + o) as *const u32).read_volatile());
            let syndrome_word = if op_own >> 4 == 13 || op_own >> 4 == 14 {
                rd32(0x34)
            } else {
                0
            };
            out[n] = RawCqe {
                op_own,
                syndrome_word,
                byte_cnt: rd32(0x2c),
                wqe_counter: u16::from_be((ring.add(cqe + 0x3c) as *const u16).read_volatile()),
                qpn: rd32(0x38) & 0xff_ffff,
                srqn: rd32(0x20) & 0xff_ffff,
                imm: rd32(0x24),
            };
        }
        *ci = ci.wrapping_add(1);
        n += 1;
    }
    if n > 0 {
        barrier::dma_rmb();
        // SAFETY: the doorbell record is 8 live bytes of DMA memory.
        unsafe { dbr.write_volatile((*ci & 0xff_ffff).to_be()) };
    }
    n
}

fn poll_cq(c: &mut Criterion) {
    let hal = HostHal::new(0);
    // 256 entries (16 KiB: hot in L1/L2) and 2^20 entries (64 MiB: beyond cache).
    for log_nent in [8u8, 20] {
        let mut group = c.benchmark_group(format!("poll_cq/ring_2^{log_nent}"));
        group.throughput(Throughput::Elements(1 << log_nent));
        if log_nent > 10 {
            group.sample_size(10);
        }
        for batch in [1usize, 16, 32, 64] {
            group.bench_with_input(BenchmarkId::new("driver", batch), &batch, |b, &batch| {
                let mut ring = CqRing::new(&hal, log_nent, CqeSize::B64).unwrap();
                let dbr = DoorbellRecord::new(&hal).unwrap();
                let mut out = vec![Cqe::EMPTY; batch];
                let mut pass = 0u32;
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        prefill_cq(&ring, pass << log_nent);
                        pass += 1;
                        let t = Instant::now();
                        let mut got = 0;
                        while got < 1 << log_nent {
                            let n = ring.poll(&dbr, &mut out);
                            got += n;
                            black_box(&out[..n]);
                        }
                        total += t.elapsed();
                    }
                    total
                });
            });
            group.bench_with_input(BenchmarkId::new("raw", batch), &batch, |b, &batch| {
                let ring = CqRing::new(&hal, log_nent, CqeSize::B64).unwrap();
                let dbr: DmaRegion<HostHal> = mlx5_hal::Hal::alloc_dma(&hal, 8).unwrap();
                let mut out = vec![RawCqe::default(); batch];
                let mut pass = 0u32;
                let mut ci = 0u32;
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        prefill_cq(&ring, pass << log_nent);
                        pass += 1;
                        let t = Instant::now();
                        let mut got = 0;
                        while got < 1 << log_nent {
                            let n = raw_poll(
                                ring.region().as_ptr(),
                                log_nent as u32,
                                64,
                                &mut ci,
                                dbr.as_ptr() as *mut u32,
                                &mut out,
                            );
                            got += n;
                            black_box(&out[..n]);
                        }
                        total += t.elapsed();
                    }
                    total
                });
            });
        }
        group.finish();
    }
}

fn post_srq_recv(c: &mut Criterion) {
    let hal = HostHal::new(0);
    const MAX_WR: usize = 255;
    const BATCH: usize = 32;
    for nsge in [1usize, 4] {
        let mut group = c.benchmark_group(format!("post_srq_recv/{nsge}_sge"));
        group.throughput(Throughput::Elements(MAX_WR as u64));
        let sges: Vec<Sge> = (0..nsge as u64)
            .map(|i| Sge {
                addr: 0x10_0000 + i * 4096,
                length: 1024,
                lkey: 0x42,
            })
            .collect();
        // One spare scatter entry so the terminator is written as well.
        let geo = SrqGeometry::for_request(MAX_WR, nsge + 1).unwrap();
        group.bench_function("driver", |b| {
            let mut srq = SrqRing::new(&hal, geo).unwrap();
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let t = Instant::now();
                    for i in 0..MAX_WR {
                        black_box(srq.post(i as u64, &sges).unwrap());
                        if i % BATCH == BATCH - 1 {
                            srq.ring_doorbell();
                        }
                    }
                    srq.ring_doorbell();
                    total += t.elapsed();
                    // Untimed: complete everything in posting order.
                    let first = (0..geo.wqe_cnt() as u16).filter(|i| srq.wr_id(*i).is_some());
                    let mut posted: Vec<(u64, u16)> =
                        first.map(|i| (srq.wr_id(i).unwrap(), i)).collect();
                    posted.sort();
                    for (_, i) in posted {
                        srq.complete(i).unwrap();
                    }
                }
                total
            });
        });
        group.bench_function("raw", |b| {
            let mut raw = RawSrq::new(&hal, geo);
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let t = Instant::now();
                    for i in 0..MAX_WR {
                        raw.post(i as u64, &sges);
                        if i % BATCH == BATCH - 1 {
                            raw.ring();
                        }
                    }
                    raw.ring();
                    total += t.elapsed();
                    black_box(&raw);
                }
                total
            });
        });
        group.finish();
    }
}

criterion_group!(benches, poll_cq, post_srq_recv);
criterion_main!(benches);
