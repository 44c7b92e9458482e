//! The copy phase of a CQ resize against a plain copy of the same bytes.
//!
//! `resize_copy/<n>`: `driver` = `CqRing::copy_into_resized` moving `n`
//! unpolled 64-byte CQEs (then the RESIZE_CQ CQE) from the old ring to the
//! new one (ownership check + read barrier per entry, owner bit rewritten
//! for the new size, body before owner byte); `plain_copy` = one
//! `copy_nonoverlapping` of the same `n · 64` bytes between the same two
//! rings. Throughput is reported in bytes; the target is driver ≥ 50 % of
//! the plain copy's throughput (ratio ≤ 2.0x).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use mlx5_bench::prefill_resize;
use mlx5_driver::cq::{CqRing, CqeSize};
use mlx5_hal::host::HostHal;

fn resize_copy(c: &mut Criterion) {
    let hal = HostHal::new(0);
    let mut g = c.benchmark_group("resize_copy");
    for n in [64usize, 256, 1024, 4096, 16384, 65536] {
        // Old ring: n + 1 entries at least (the resize CQE); new: n + 2.
        let log_old = (n + 1).next_power_of_two().trailing_zeros() as u8;
        let log_new = (n + 2).next_power_of_two().trailing_zeros() as u8;
        if n >= 16384 {
            g.sample_size(20);
        }
        g.throughput(Throughput::Bytes(n as u64 * 64));
        let old = CqRing::new(&hal, log_old, CqeSize::B64).unwrap();
        prefill_resize(&old, n);
        let mut new = CqRing::new(&hal, log_new, CqeSize::B64).unwrap();
        g.bench_with_input(BenchmarkId::new("driver", n), &n, |b, &n| {
            b.iter(|| assert_eq!(old.copy_into_resized(&mut new), Ok(n)))
        });
        g.bench_with_input(BenchmarkId::new("plain_copy", n), &n, |b, &n| {
            let src = old.region().as_ptr();
            let dst = new.region().as_ptr();
            b.iter(|| {
                // SAFETY: both rings are live DMA regions of at least
                // (n + 2) · 64 bytes; they do not overlap.
                unsafe { std::ptr::copy_nonoverlapping(src, dst.add(64), n * 64) };
                black_box(dst);
            })
        });
    }
    g.finish();
}

criterion_group!(benches, resize_copy);
criterion_main!(benches);
