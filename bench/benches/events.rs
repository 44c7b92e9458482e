//! Event-queue polling against a raw ownership-check loop in the same run.
//!
//! - `eq_poll/empty`: one poll of an EQ with nothing in it.
//!   `driver` = `EventQueue::poll` (the EQ-level poll: no lock, no health
//!   check), `raw` = read the owner byte at the consumer index and compare.
//!   `hca_model` = `Hca::poll_events` on the device model (takes the core
//!   lock, reads the health buffer and heartbeat through MMIO and polls
//!   both EQs): what an application calling the Hca-level poll pays.
//! - `eq_poll/busy`: ns per event for a full ring (1024 completion EQEs)
//!   polled with budget 1024. `driver` = `EventQueue::poll` decoding each
//!   event into an `Event` and handing it to a closure (CI doorbell every 64
//!   and the re-arm at the end, through the platform's MMIO), `raw` = owner
//!   check, read barrier, event type and CQ number, the same doorbells.
//!   `hca_model` = 32 port-change events raised on the model (untimed), then
//!   `Hca::poll_events` + draining `next_event` (timed), per event.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use mlx5_bench::{eqe_off, prefill_eq};
use mlx5_driver::eq::{Event, EventQueue, CI_UPDATE_INTERVAL};
use mlx5_driver::{Hca, HcaConfig};
use mlx5_hal::host::HostHal;
use mlx5_hal::{barrier, DmaRegion, Hal};
use mlx5_regs::doorbell;
use mlx5_regs::EventType;
use mlx5_sim::{Device, SimConfig};

const LOG_SIZE: u8 = 10;
const UAR: u32 = 1;

fn new_eq(hal: &HostHal) -> EventQueue<HostHal> {
    let mut buf = [0u8; 4112];
    let (mut eq, _) = EventQueue::prepare(hal, LOG_SIZE, UAR, 1, &mut buf).unwrap();
    eq.created(hal, 7);
    eq
}

/// The raw loop: owner check, read barrier, type and CQ number, CI
/// doorbell every `CI_UPDATE_INTERVAL` entries and an arm at the end.
struct RawEq {
    ci: u32,
}

impl RawEq {
    #[inline(always)]
    fn poll(&mut self, hal: &HostHal, ring: &DmaRegion<HostHal>, budget: u32) -> u32 {
        let p = ring.as_ptr();
        let mask = (1u32 << LOG_SIZE) - 1;
        let uar = doorbell::uar_page_offset(UAR);
        let mut n = 0;
        let mut since = 0;
        while n < budget {
            let e = (self.ci & mask) as usize * 64;
            // SAFETY: (whole block) `e + 64 <= ring length` (slot < 2^LOG_SIZE);
            // live DMA memory, aligned volatile reads.
            let (ty, cqn) = unsafe {
                let owner = p.add(e + eqe_off::OWNER).read_volatile() & 1;
                if owner as u32 != (self.ci >> LOG_SIZE) & 1 {
                    break;
                }
                barrier::dma_rmb();
                let ty = p.add(e + eqe_off::EVENT_TYPE).read_volatile();
                let cqn = u32::from_be((p.add(e + eqe_off::CQN) as *const u32).read_volatile());
                (ty, cqn & 0xff_ffff)
            };
            black_box((ty, cqn));
            self.ci = self.ci.wrapping_add(1);
            n += 1;
            since += 1;
            if since == CI_UPDATE_INTERVAL {
                barrier::mmio_wmb();
                hal.mmio_write32(
                    uar + doorbell::UAR_EQ_DOORBELL_NO_ARM,
                    doorbell::eq_doorbell(7, self.ci),
                );
                since = 0;
            }
        }
        if n > 0 {
            barrier::mmio_wmb();
            hal.mmio_write32(
                uar + doorbell::UAR_EQ_DOORBELL_ARM,
                doorbell::eq_doorbell(7, self.ci),
            );
        }
        n
    }
}

fn eq_poll_empty(c: &mut Criterion) {
    let mut g = c.benchmark_group("eq_poll/empty");
    g.throughput(Throughput::Elements(1));
    let hal = HostHal::new(2 * 4096);
    g.bench_function("driver", |b| {
        let mut eq = new_eq(&hal);
        b.iter(|| {
            black_box(eq.poll(&hal, 1024, |ev| {
                black_box(ev);
            }))
        })
    });
    g.bench_function("raw", |b| {
        let eq = new_eq(&hal);
        let mut raw = RawEq { ci: 0 };
        b.iter(|| black_box(raw.poll(&hal, eq.region(), 1024)))
    });
    g.bench_function("hca_model", |b| {
        let dev = Device::new(SimConfig::default());
        let hca = Hca::bring_up(dev.hal(), HcaConfig::default()).unwrap();
        b.iter(|| black_box(hca.poll_events().unwrap()));
        hca.teardown().unwrap();
    });
    g.finish();
}

fn eq_poll_busy(c: &mut Criterion) {
    let mut g = c.benchmark_group("eq_poll/busy");
    let n = 1u32 << LOG_SIZE;
    g.throughput(Throughput::Elements(n as u64));
    let hal = HostHal::new(2 * 4096);
    g.bench_function("driver", |b| {
        let mut eq = new_eq(&hal);
        let mut pass = 0;
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                prefill_eq(eq.region(), LOG_SIZE, pass);
                pass += 1;
                let t = Instant::now();
                let got = eq.poll(&hal, n, |ev| {
                    if let Event::Completion { cqn } = ev {
                        black_box(cqn);
                    }
                });
                total += t.elapsed();
                assert_eq!(got.eqes, n);
            }
            total
        })
    });
    g.bench_function("raw", |b| {
        let eq = new_eq(&hal);
        let mut raw = RawEq { ci: 0 };
        let mut pass = 0;
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                prefill_eq(eq.region(), LOG_SIZE, pass);
                pass += 1;
                let t = Instant::now();
                let got = raw.poll(&hal, eq.region(), n);
                total += t.elapsed();
                assert_eq!(got, n);
            }
            total
        })
    });
    g.finish();

    let mut g = c.benchmark_group("eq_poll/busy_hca_model");
    const EVENTS: u32 = 32;
    g.throughput(Throughput::Elements(EVENTS as u64));
    g.bench_function("hca_model", |b| {
        let dev = Device::new(SimConfig::default());
        let hca = Hca::bring_up(dev.hal(), HcaConfig::default()).unwrap();
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                for _ in 0..EVENTS {
                    dev.traffic()
                        .raise_simple_event(EventType::PORT_CHANGE, 4)
                        .unwrap();
                }
                let t = Instant::now();
                let r = hca.poll_events().unwrap();
                let mut got = 0;
                while let Some(ev) = hca.next_event() {
                    black_box(ev);
                    got += 1;
                }
                total += t.elapsed();
                assert_eq!((r.eqes, got), (EVENTS, EVENTS));
            }
            total
        });
        hca.teardown().unwrap();
    });
    g.finish();
}

criterion_group!(benches, eq_poll_empty, eq_poll_busy);
criterion_main!(benches);
