//! Control path on the device model in synchronous mode (commands run inside
//! the doorbell write), split into driver and model time with the model's
//! instrumentation (`Device::cmd_doorbell_time`: wall time spent inside
//! command-doorbell processing).
//!
//! For every measurement three ids are recorded in the same run:
//! `total` (wall time), `model` (time inside the model's command
//! processing) and `driver` (total − model: the driver's own work plus the
//! platform's clock/lock calls it makes).
//!
//! - `cmd/<name>`: one `Hca::exec` round trip. NOP (input and output
//!   inline), QUERY_ISSI (output in 1 mailbox block), QUERY_HCA_CAP (4112-byte
//!   output: 8 mailbox blocks).
//! - `lifecycle/bring_up`, `lifecycle/teardown`: `Hca::bring_up` to ready
//!   and `Hca::teardown`, per run (a fresh model each time, created untimed).
//! - `resize_cq_model/<n>`: `Hca::resize_cq` of a CQ holding `n` unpolled
//!   CQEs (written by the model, untimed) to twice its size: the command,
//!   the copy of the `n` CQEs and the ring swap.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use mlx5_driver::cq::CqOptions;
use mlx5_driver::unstable::encode;
use mlx5_driver::{Hca, HcaConfig};
use mlx5_regs::consts::op_mod;
use mlx5_sim::{Device, SimConfig};

/// What a measurement returns: total and model time.
#[derive(Clone, Copy, Default)]
struct Split {
    total: Duration,
    model: Duration,
}

impl Split {
    fn add(&mut self, other: Split) {
        self.total += other.total;
        self.model += other.model;
    }
}

/// Time `f`, and the model time it caused.
fn split<R>(dev: &Device, f: impl FnOnce() -> R) -> (R, Split) {
    let (m0, _) = dev.cmd_doorbell_time();
    let t = Instant::now();
    let r = f();
    let total = t.elapsed();
    let (m1, _) = dev.cmd_doorbell_time();
    (
        r,
        Split {
            total,
            model: m1 - m0,
        },
    )
}

/// Register the three ids of one measurement. `run(iters)` returns the
/// summed split of `iters` runs.
fn three<F: FnMut(u64) -> Split>(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    param: Option<usize>,
    mut run: F,
) {
    for part in ["total", "model", "driver"] {
        let mut pick = |iters| {
            let s = run(iters);
            match part {
                "total" => s.total,
                "model" => s.model,
                _ => s.total.saturating_sub(s.model),
            }
        };
        match param {
            Some(p) => g.bench_with_input(BenchmarkId::new(part, p), &p, |b, _| {
                b.iter_custom(&mut pick)
            }),
            None => g.bench_function(part, |b| b.iter_custom(&mut pick)),
        };
    }
}

fn commands(c: &mut Criterion) {
    let dev = Device::new(SimConfig::default());
    let hca = Hca::bring_up(dev.hal(), HcaConfig::default()).unwrap();
    let cases: [(&str, Vec<u8>, usize); 3] = [
        ("nop_inline", encode::nop().to_vec(), encode::NOP_OUT),
        (
            "query_issi_1_block",
            encode::query_issi().to_vec(),
            encode::QUERY_ISSI_OUT,
        ),
        (
            "query_hca_cap_8_blocks",
            encode::query_hca_cap(op_mod::CAP_GENERAL, true).to_vec(),
            encode::QUERY_HCA_CAP_OUT,
        ),
    ];
    for (name, input, out_len) in cases {
        let mut g = c.benchmark_group(format!("cmd/{name}"));
        g.throughput(Throughput::Elements(1));
        let mut out = vec![0u8; out_len];
        three(&mut g, None, |iters| {
            let (_, s) = split(&dev, || {
                for _ in 0..iters {
                    hca.exec(&input, &mut out).unwrap();
                }
            });
            black_box(&out);
            s
        });
        g.finish();
    }
    hca.teardown().unwrap();
}

fn lifecycle(c: &mut Criterion) {
    let mut g = c.benchmark_group("lifecycle/bring_up");
    g.sample_size(20);
    g.throughput(Throughput::Elements(1));
    three(&mut g, None, |iters| {
        let mut sum = Split::default();
        for _ in 0..iters {
            let dev = Device::new(SimConfig::default());
            let (hca, s) = split(&dev, || {
                Hca::bring_up(dev.hal(), HcaConfig::default()).unwrap()
            });
            sum.add(s);
            hca.teardown().unwrap();
        }
        sum
    });
    g.finish();

    let mut g = c.benchmark_group("lifecycle/teardown");
    g.sample_size(20);
    g.throughput(Throughput::Elements(1));
    three(&mut g, None, |iters| {
        let mut sum = Split::default();
        for _ in 0..iters {
            let dev = Device::new(SimConfig::default());
            let hca = Hca::bring_up(dev.hal(), HcaConfig::default()).unwrap();
            let (r, s) = split(&dev, || hca.teardown());
            r.unwrap();
            assert_eq!(dev.pages_held(), 0);
            sum.add(s);
        }
        sum
    });
    g.finish();
}

fn resize_on_model(c: &mut Criterion) {
    let mut g = c.benchmark_group("resize_cq_model");
    g.sample_size(10);
    let dev = Device::new(SimConfig::default());
    let hca = Hca::bring_up(dev.hal(), HcaConfig::default()).unwrap();
    for n in [64usize, 4096, 65536] {
        g.throughput(Throughput::Elements(n as u64));
        three(&mut g, Some(n), |iters| {
            let mut sum = Split::default();
            for _ in 0..iters {
                let mut cq = hca.create_cq(n as u32 + 1, CqOptions::default()).unwrap();
                for i in 0..n {
                    dev.traffic()
                        .complete_send(cq.cqn(), 0x99, i as u16, 64)
                        .unwrap();
                }
                let (r, s) = split(&dev, || hca.resize_cq(&mut cq, 2 * (n as u32 + 2)));
                r.unwrap();
                assert_eq!(cq.pending(), n);
                sum.add(s);
                hca.destroy_cq(cq).map_err(|e| e.error()).unwrap();
            }
            sum
        });
    }
    g.finish();
    hca.teardown().unwrap();
}

criterion_group!(benches, commands, lifecycle, resize_on_model);
criterion_main!(benches);
