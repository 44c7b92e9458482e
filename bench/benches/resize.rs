//! The copy phase of a CQ resize against a plain copy of the same bytes.
//!
//! `resize_copy/<n>`: `driver` = `CqRing::copy_into_resized` moving `n`
//! unpolled 64-byte CQEs (then the RESIZE_CQ CQE) from the old ring to the
//! new one (owner bytes checked, one read barrier per chunk, whole entries
//! copied with the owner bit rewritten for the new size); `plain_copy` = one
//! `copy_nonoverlapping` of the same `n · 64` bytes between the same two
//! rings. Throughput is reported in bytes; the target is driver ≥ 50 % of
//! the plain copy's throughput (ratio ≤ 2.0x).
//!
//! `resize_copy_flip/<n>`: the same, with the old ring in its second pass and
//! the new ring twice as large, so every copied CQE's owner bit changes (the
//! case where the copy cannot be a plain byte copy).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use mlx5_bench::prefill_resize;
use mlx5_driver::cq::CqeSize;
use mlx5_driver::unstable::cq::CqRing;
use mlx5_hal::host::HostHal;

const SIZES: [usize; 6] = [64, 256, 1024, 4096, 16384, 65536];

/// Benchmark `copy_into_resized(old → new)` and the plain copy of the same
/// bytes (from the consumer index's slot of `old` to the slot after it in
/// `new`).
fn bench_pair(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    old: &CqRing<HostHal>,
    new: &mut CqRing<HostHal>,
    n: usize,
) {
    g.throughput(Throughput::Bytes(n as u64 * 64));
    g.bench_with_input(BenchmarkId::new("driver", n), &n, |b, &n| {
        b.iter(|| assert_eq!(old.copy_into_resized(new), Ok(n)))
    });
    let src_slot = old.consumer_index() as usize & (old.nent() - 1);
    let dst_slot = (old.consumer_index() as usize + 1) & (new.nent() - 1);
    g.bench_with_input(BenchmarkId::new("hal_copy", n), &n, |b, &n| {
        let mask = [0u8; 64];
        b.iter(|| {
            new.region().copy_entries_from::<64>(
                new.base_offset() + dst_slot * 64,
                old.region(),
                old.base_offset() + src_slot * 64,
                n,
                &mask,
            )
        })
    });
    g.bench_with_input(BenchmarkId::new("plain_copy", n), &n, |b, &n| {
        let src = old.region().as_ptr();
        let dst = new.region().as_ptr();
        b.iter(|| {
            // SAFETY: both rings are live DMA regions; the `n` entries from
            // either slot stay inside them (no wrap: checked by the setup)
            // and the two regions do not overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    src.add(src_slot * 64),
                    dst.add(dst_slot * 64),
                    n * 64,
                )
            };
            black_box(dst);
        })
    });
}

fn resize_copy(c: &mut Criterion) {
    let hal = HostHal::new(0);
    let mut g = c.benchmark_group("resize_copy");
    for n in SIZES {
        // Old ring: n + 1 entries at least (the resize CQE); new: n + 2.
        let log_old = (n + 1).next_power_of_two().trailing_zeros() as u8;
        let log_new = (n + 2).next_power_of_two().trailing_zeros() as u8;
        if n >= 16384 {
            g.sample_size(20);
        }
        let old = CqRing::new(&hal, log_old, CqeSize::B64).unwrap();
        prefill_resize(&old, 0, n);
        let mut new = CqRing::new(&hal, log_new, CqeSize::B64).unwrap();
        bench_pair(&mut g, &old, &mut new, n);
    }
    g.finish();
}

fn resize_copy_flip(c: &mut Criterion) {
    let hal = HostHal::new(0);
    let mut g = c.benchmark_group("resize_copy_flip");
    for n in SIZES {
        let log_old = (n + 1).next_power_of_two().trailing_zeros() as u8;
        if n >= 16384 {
            g.sample_size(20);
        }
        let mut old = CqRing::new(&hal, log_old, CqeSize::B64).unwrap();
        // Consume one whole pass so the copy starts at index nent (owner 1)
        // and lands at nent + 1 of a ring twice as large (owner 0).
        mlx5_bench::prefill_cq(&old, 0);
        while old.pop().is_some() {}
        assert_eq!(old.consumer_index() as usize, old.nent());
        prefill_resize(&old, old.consumer_index(), n);
        let mut new = CqRing::new(&hal, log_old + 1, CqeSize::B64).unwrap();
        bench_pair(&mut g, &old, &mut new, n);
    }
    g.finish();
}

criterion_group!(benches, resize_copy, resize_copy_flip);
criterion_main!(benches);
