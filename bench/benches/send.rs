//! The send path against raw baselines in the same run:
//!
//! - `post_send/<payload>/{driver,raw}/<batch>`: `Qp::post_send` of SENDs
//!   with 1 SGE, 4 SGEs or 64 inline bytes, `batch` requests per call (one
//!   doorbell each call), against `RawSq` writing the same WQE bytes, the
//!   doorbell record and the doorbell into the same ring. The QP is a real
//!   one created and connected on the model; its send doorbells are
//!   diverted to a scratch area (`BenchHal::divert_doorbells`) so the model
//!   does not execute the WQEs, and the timed loop measures posting alone.
//!   Between timed loops the benchmark retires the requests by handing the
//!   QP a requester CQE for the last one (as the device would).
//! - `roundtrip_model/{total,model,driver}/<batch>`: a full loopback round
//!   trip on the model, per message: `post_send` (`batch` SENDs of 64
//!   bytes, one doorbell), poll the send CQ and match each CQE, poll the
//!   receive CQ and match each CQE to its SRQ WQE, repost the receives.
//!   `model` is the wall time spent inside the model's MMIO handlers (the
//!   send doorbell executes the WQEs, delivers them and writes both CQEs),
//!   `driver` the rest.
//!
//! - `post_rdma/{write,read,fetch_add,cmp_swap}/<batch>`: RDMA READ and the
//!   atomics posted beside an RDMA WRITE of the same shape (ratios to
//!   `write` in docs/perf.md).
//!
//! The verbs facade's `post_send` (`Verbs::post_send`) is timed in
//! `facade.rs` (`facade_send/...`) with the same payloads and batches.
//!
//! Ratios: `python3 bench/ratios.py` after `cargo bench -p mlx5-bench`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use mlx5_bench::{BenchHal, RawSq};
use mlx5_driver::cq::{Cq, CqOptions, Cqe, CqeStatus};
use mlx5_driver::qp::{Payload, Qp, QpLinks, SendOp, SendQueueCaps, SendRequest, SendSlot};
use mlx5_driver::srq::{RecvRequest, Sge, Srq};
use mlx5_driver::unstable;
use mlx5_driver::{Hca, HcaConfig};
use mlx5_hal::{DmaRegion, Hal};
use mlx5_regs::CqeOpcode;
use mlx5_sim::{Device, SimConfig};

/// The posting payloads.
#[derive(Clone, Copy)]
enum Kind {
    Sge1,
    Sge4,
    Inline64,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Sge1 => "1_sge",
            Kind::Sge4 => "4_sge",
            Kind::Inline64 => "inline_64",
        }
    }
}

/// Requests posted per timed loop (the QP holds this many).
const WRS: u32 = 256;

/// A device, an HCA and a sender QP in RTS whose doorbells are diverted.
struct Sender {
    _dev: Device,
    hal: BenchHal,
    hca: Hca<BenchHal>,
    cq: Option<Cq<BenchHal>>,
    qp: Option<Qp<BenchHal, Vec<SendSlot>>>,
    buf: DmaRegion<BenchHal>,
}

impl Sender {
    fn new(kind: Kind) -> Sender {
        let dev = Device::new(SimConfig::default());
        let hal = BenchHal::new(dev.hal());
        let hca = Hca::bring_up(hal.clone(), HcaConfig::default()).unwrap();
        let mut cq = hca.create_cq(WRS, CqOptions::default()).unwrap();
        let caps = SendQueueCaps {
            max_send_wr: WRS,
            max_send_sge: if matches!(kind, Kind::Sge4) { 4 } else { 1 },
            max_inline_data: if matches!(kind, Kind::Inline64) {
                64
            } else {
                0
            },
        };
        let g = hca.send_queue_geometry(&caps).unwrap();
        assert_eq!(g.max_send_wr, WRS);
        let mut qp = hca
            .create_qp(
                Some(caps),
                QpLinks {
                    send_cq: Some(&mut cq),
                    ..QpLinks::default()
                },
                vec![SendSlot::EMPTY; g.wqebbs()],
            )
            .unwrap();
        hca.connect_loopback_self(&mut qp).unwrap();
        let buf = hal.alloc_dma(4096).unwrap();
        hal.divert_doorbells(true);
        Sender {
            _dev: dev,
            hal,
            hca,
            cq: Some(cq),
            qp: Some(qp),
            buf,
        }
    }

    fn sges(&self, kind: Kind) -> Vec<Sge> {
        let n = if matches!(kind, Kind::Sge4) { 4 } else { 1 };
        (0..n)
            .map(|i| self.hca.sge(self.buf.iova() + 256 * i as u64, 64))
            .collect()
    }

    /// `iters` rounds of `WRS` requests posted `reqs.len()` per call,
    /// timed; each round retired untimed with one requester CQE for the
    /// last WQE (posted with `opcode`), which covers the ones before it.
    fn time_posts(&mut self, reqs: &[SendRequest<'_>], iters: u64, opcode: u8) -> Duration {
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            let qp = self.qp.as_mut().unwrap();
            let t = Instant::now();
            for _ in 0..WRS as usize / reqs.len() {
                qp.post_send(black_box(reqs)).unwrap();
            }
            total += t.elapsed();
            // The last WQE starts one WQE size before the producer counter.
            let ring = unstable::qp::send_ring(qp).unwrap();
            let per = (ring.geometry().wqe_size / 64) as u16;
            let last = ring.producer_counter().wrapping_sub(per);
            self.retire(last, opcode);
        }
        total
    }

    /// Retire everything posted: the requester CQE the device would write
    /// for the last WQE (`index`, posted with `opcode`) covers the requests
    /// before it.
    fn retire(&mut self, index: u16, opcode: u8) {
        let qp = self.qp.as_mut().unwrap();
        let cqe = Cqe {
            opcode: CqeOpcode::REQ,
            status: CqeStatus::Success,
            wqe_counter: index,
            qpn: qp.qpn(),
            send_opcode: opcode,
            ..Cqe::EMPTY
        };
        let c = qp.complete_send(&cqe).unwrap();
        black_box(c);
        assert_eq!(qp.outstanding_sends(), 0);
    }

    fn finish(mut self) {
        self.hal.divert_doorbells(false);
        let mut cq = self.cq.take().unwrap();
        let qp = self.qp.take().unwrap();
        self.hca
            .destroy_qp(
                qp,
                QpLinks {
                    send_cq: Some(&mut cq),
                    ..QpLinks::default()
                },
            )
            .map_err(|d| d.error())
            .unwrap();
        self.hca.destroy_cq(cq).map_err(|d| d.error()).unwrap();
        let Sender { hca, buf, .. } = self;
        drop(buf);
        hca.teardown().unwrap();
    }
}

fn post_send(c: &mut Criterion) {
    let inline = [0x5au8; 64];
    for kind in [Kind::Sge1, Kind::Sge4, Kind::Inline64] {
        let mut group = c.benchmark_group(format!("post_send/{}", kind.name()));
        group.throughput(Throughput::Elements(WRS as u64));
        for batch in [1usize, 16] {
            group.bench_with_input(BenchmarkId::new("driver", batch), &batch, |b, &batch| {
                let mut s = Sender::new(kind);
                let sges = s.sges(kind);
                let payload = match kind {
                    Kind::Inline64 => Payload::Inline(&inline),
                    _ => Payload::Sges(&sges),
                };
                let reqs: Vec<SendRequest<'_>> = (0..batch as u64)
                    .map(|i| SendRequest {
                        wr_id: i,
                        op: SendOp::Send,
                        payload,
                        signaled: true,
                        solicited: false,
                    })
                    .collect();
                let send = mlx5_regs::consts::wqe::OPCODE_SEND;
                b.iter_custom(|iters| s.time_posts(&reqs, iters, send));
                black_box(s.hal.scratch(0));
                drop(reqs);
                s.finish();
            });
            group.bench_with_input(BenchmarkId::new("raw", batch), &batch, |b, &batch| {
                let s = Sender::new(kind);
                let sges = s.sges(kind);
                let qp = s.qp.as_ref().unwrap();
                let ring = unstable::qp::send_ring(qp).unwrap();
                let g = ring.geometry();
                // SAFETY: the QP's ring and doorbell record are live DMA
                // memory of `s`, which outlives `raw`; the driver does not
                // post while the baseline runs.
                let mut raw = unsafe {
                    RawSq::new(
                        ring.region().as_ptr().add(ring.base_offset()),
                        g.wqebbs(),
                        qp.doorbell_record().as_ptr(),
                        qp.qpn(),
                        ring.doorbell_offset(),
                        1 << s.hca.caps().log_bf_reg_size,
                    )
                };
                let data = match kind {
                    Kind::Inline64 => Some(&inline[..]),
                    _ => None,
                };
                b.iter_custom(|iters| {
                    let t = Instant::now();
                    for _ in 0..iters {
                        for i in 0..WRS as usize / batch {
                            let mut last = 0;
                            for k in 0..batch {
                                last = raw.post((i * batch + k) as u64, &sges, data);
                            }
                            raw.ring(&s.hal, last);
                        }
                    }
                    t.elapsed()
                });
                black_box(s.hal.scratch(0));
                s.finish();
            });
        }
        group.finish();
    }
}

/// Total and model time of a measurement.
#[derive(Clone, Copy, Default)]
struct Split {
    total: Duration,
    model: Duration,
}

/// A loopback pair on the model: a sender QP and a receive-only QP on an
/// SRQ, receives posted.
struct Pair {
    _dev: Device,
    hal: BenchHal,
    hca: Hca<BenchHal>,
    scq: Cq<BenchHal>,
    rcq: Cq<BenchHal>,
    srq: Srq<BenchHal>,
    a: Qp<BenchHal, Vec<SendSlot>>,
    b: Qp<BenchHal>,
    buf: DmaRegion<BenchHal>,
    sge: Sge,
}

/// Receive WQEs kept posted.
const RECVS: u32 = 255;

impl Pair {
    fn new() -> Pair {
        let dev = Device::new(SimConfig::default());
        let hal = BenchHal::new(dev.hal());
        let hca = Hca::bring_up(hal.clone(), HcaConfig::default()).unwrap();
        let mut scq = hca.create_cq(255, CqOptions::default()).unwrap();
        let mut rcq = hca.create_cq(255, CqOptions::default()).unwrap();
        let issi0 = hca.issi() == 0;
        let mut srq = hca.create_srq(RECVS, 1, issi0.then_some(&mut rcq)).unwrap();
        let caps = SendQueueCaps {
            max_send_wr: 64,
            max_send_sge: 1,
            max_inline_data: 0,
        };
        let g = hca.send_queue_geometry(&caps).unwrap();
        let mut a = hca
            .create_qp(
                Some(caps),
                QpLinks {
                    send_cq: Some(&mut scq),
                    ..QpLinks::default()
                },
                vec![SendSlot::EMPTY; g.wqebbs()],
            )
            .unwrap();
        let mut b = hca
            .create_qp(
                None,
                QpLinks {
                    recv_cq: Some(&mut rcq),
                    srq: Some(&mut srq),
                    ..QpLinks::default()
                },
                [],
            )
            .unwrap();
        hca.connect_loopback_pair(&mut a, &mut b).unwrap();
        let buf = hal.alloc_dma(64 * (RECVS as usize + 1)).unwrap();
        for i in 0..RECVS as u64 {
            let sge = [hca.sge(buf.iova() + 64 * (i + 1), 64)];
            srq.post(&[RecvRequest {
                wr_id: i,
                sges: &sge,
            }])
            .unwrap();
        }
        let sge = hca.sge(buf.iova(), 64);
        Pair {
            _dev: dev,
            hal,
            hca,
            scq,
            rcq,
            srq,
            a,
            b,
            buf,
            sge,
        }
    }

    /// `batch` messages there and back: post, take the send completions,
    /// take the receives, repost them.
    #[inline(never)]
    fn round(&mut self, reqs: &[SendRequest<'_>], cqes: &mut [Cqe]) {
        self.a.post_send(reqs).unwrap();
        let n = reqs.len();
        let mut got = 0;
        while got < n {
            let k = self.scq.poll(&mut cqes[..n - got]);
            for c in &cqes[..k] {
                black_box(self.a.complete_send(c).unwrap());
            }
            got += k;
        }
        let mut got = 0;
        while got < n {
            let k = self.rcq.poll(&mut cqes[..n - got]);
            for c in &cqes[..k] {
                let r = self.b.complete_recv(&mut self.srq, c).unwrap();
                let sge = [self.hca.sge(self.buf.iova() + 64 * (r.wr_id + 1), 64)];
                self.srq
                    .post(&[RecvRequest {
                        wr_id: r.wr_id,
                        sges: &sge,
                    }])
                    .unwrap();
            }
            got += k;
        }
    }

    fn finish(self) {
        let Pair {
            hca,
            mut scq,
            mut rcq,
            mut srq,
            a,
            b,
            buf,
            ..
        } = self;
        hca.destroy_qp(
            a,
            QpLinks {
                send_cq: Some(&mut scq),
                ..QpLinks::default()
            },
        )
        .map_err(|d| d.error())
        .unwrap();
        hca.destroy_qp(
            b,
            QpLinks {
                recv_cq: Some(&mut rcq),
                srq: Some(&mut srq),
                ..QpLinks::default()
            },
        )
        .map_err(|d| d.error())
        .unwrap();
        let issi0 = hca.issi() == 0;
        hca.destroy_srq(srq, issi0.then_some(&mut rcq))
            .map_err(|d| d.error())
            .unwrap();
        hca.destroy_cq(scq).map_err(|d| d.error()).unwrap();
        hca.destroy_cq(rcq).map_err(|d| d.error()).unwrap();
        drop(buf);
        hca.teardown().unwrap();
    }
}

fn roundtrip(c: &mut Criterion) {
    let mut group = c.benchmark_group("roundtrip_model");
    for batch in [1usize, 16] {
        group.throughput(Throughput::Elements(batch as u64));
        for part in ["total", "model", "driver"] {
            group.bench_with_input(BenchmarkId::new(part, batch), &batch, |b, &batch| {
                let mut p = Pair::new();
                let sge = [p.sge];
                let reqs: Vec<SendRequest<'_>> = (0..batch as u64)
                    .map(|i| SendRequest {
                        wr_id: i,
                        op: SendOp::Send,
                        payload: Payload::Sges(&sge),
                        signaled: true,
                        solicited: false,
                    })
                    .collect();
                let mut cqes = [Cqe::EMPTY; 16];
                b.iter_custom(|iters| {
                    let m0 = p.hal.model_time();
                    let t = Instant::now();
                    for _ in 0..iters {
                        p.round(&reqs, &mut cqes);
                    }
                    let s = Split {
                        total: t.elapsed(),
                        model: p.hal.model_time() - m0,
                    };
                    match part {
                        "total" => s.total,
                        "model" => s.model,
                        _ => s.total.saturating_sub(s.model),
                    }
                });
                drop(reqs);
                p.finish();
            });
        }
    }
    group.finish();
}

/// `post_rdma/<op>/<batch>`: RDMA READ, FETCH_ADD and CMP_SWAP posted
/// beside an RDMA WRITE of the same shape (one 64-byte gather entry; the
/// atomics' one 8-byte entry), `batch` per call, doorbells diverted as in
/// `post_send`. The ratio to `write` is the cost of the READ/atomic WQE
/// layout (remote address, atomic segment) over the WRITE's.
fn post_rdma(c: &mut Criterion) {
    type Op = (&'static str, fn(u64, u32) -> SendOp, u32);
    let ops: [Op; 4] = [
        ("write", |raddr, rkey| SendOp::RdmaWrite { raddr, rkey }, 64),
        ("read", |raddr, rkey| SendOp::RdmaRead { raddr, rkey }, 64),
        (
            "fetch_add",
            |raddr, rkey| SendOp::AtomicFetchAdd {
                raddr,
                rkey,
                add: 1,
            },
            8,
        ),
        (
            "cmp_swap",
            |raddr, rkey| SendOp::AtomicCmpSwap {
                raddr,
                rkey,
                compare: 1,
                swap: 2,
            },
            8,
        ),
    ];
    let mut group = c.benchmark_group("post_rdma");
    group.throughput(Throughput::Elements(WRS as u64));
    for (name, make, len) in ops {
        for batch in [1usize, 16] {
            let id = BenchmarkId::new(name, batch);
            group.bench_with_input(id, &batch, |b, &batch| {
                let mut s = Sender::new(Kind::Sge1);
                let sges = [s.hca.sge(s.buf.iova(), len)];
                let op = make(s.buf.iova() + 1024, 0x1234);
                let opcode = op.opcode() as u8;
                let reqs: Vec<SendRequest<'_>> = (0..batch as u64)
                    .map(|i| SendRequest {
                        wr_id: i,
                        op,
                        payload: Payload::Sges(&sges),
                        signaled: true,
                        solicited: false,
                    })
                    .collect();
                b.iter_custom(|iters| s.time_posts(&reqs, iters, opcode));
                black_box(s.hal.scratch(0));
                drop(reqs);
                s.finish();
            });
        }
    }
    group.finish();
}

criterion_group!(benches, post_send, roundtrip, post_rdma);
criterion_main!(benches);
