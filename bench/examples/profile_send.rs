//! Instruction-count probe for `Qp::post_send` against the raw WQE-write
//! loop (the code the `post_send` benchmark times), for machines whose
//! timers are too noisy to compare a few nanoseconds:
//!
//! ```sh
//! cargo build --release -p mlx5-bench --example profile_send
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/cgs.out \
//!     target/release/examples/profile_send sge1 16
//! callgrind_annotate /tmp/cgs.out | grep -E 'driver_post|raw_post'
//! ```
//!
//! Arguments: `sge1`, `sge4` or `inline64`, then the batch (requests per
//! call, one doorbell each). Each posting function is `#[inline(never)]`
//! and posts one batch; divide its instructions by the number of requests
//! printed.

use std::hint::black_box;

use mlx5_bench::{BenchHal, RawSq};
use mlx5_driver::cq::{CqOptions, Cqe, CqeStatus};
use mlx5_driver::qp::{Payload, Qp, QpLinks, SendOp, SendQueueCaps, SendRequest, SendSlot};
use mlx5_driver::srq::Sge;
use mlx5_driver::unstable;
use mlx5_driver::{Hca, HcaConfig};
use mlx5_hal::Hal;
use mlx5_regs::CqeOpcode;
use mlx5_sim::{Device, SimConfig};

type TestQp = Qp<BenchHal, Vec<SendSlot>>;

#[inline(never)]
fn driver_post(qp: &mut TestQp, reqs: &[SendRequest<'_>]) {
    qp.post_send(reqs).unwrap();
}

#[inline(never)]
fn raw_post(raw: &mut RawSq, hal: &BenchHal, n: usize, sges: &[Sge], inline: Option<&[u8]>) {
    let mut last = 0;
    for i in 0..n {
        last = raw.post(i as u64, sges, inline);
    }
    raw.ring(hal, last);
}

fn main() {
    let mut args = std::env::args().skip(1);
    let kind = args.next().unwrap_or_else(|| "sge1".into());
    let batch: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(16);
    let (nsge, inline_len) = match kind.as_str() {
        "sge4" => (4, 0),
        "inline64" => (0, 64),
        _ => (1, 0),
    };
    let dev = Device::new(SimConfig::default());
    let hal = BenchHal::new(dev.hal());
    let hca = Hca::bring_up(hal.clone(), HcaConfig::default()).unwrap();
    let mut cq = hca.create_cq(256, CqOptions::default()).unwrap();
    let caps = SendQueueCaps {
        max_send_wr: 256,
        max_send_sge: nsge.max(1) as u32,
        max_inline_data: inline_len,
    };
    let g = hca.send_queue_geometry(&caps).unwrap();
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
    hal.divert_doorbells(true);
    let buf = hal.alloc_dma(4096).unwrap();
    let sges: Vec<Sge> = (0..nsge)
        .map(|i| hca.sge(buf.iova() + 256 * i as u64, 64))
        .collect();
    let data = [0x5au8; 64];
    let inline = (inline_len > 0).then_some(&data[..]);
    let payload = match inline {
        Some(d) => Payload::Inline(d),
        None => Payload::Sges(&sges),
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
    let rounds = 100;
    let per_round = 256 / batch;
    for _ in 0..rounds {
        for _ in 0..per_round {
            driver_post(&mut qp, &reqs);
        }
        let ring = unstable::qp::send_ring(&qp).unwrap();
        let last = ring
            .producer_counter()
            .wrapping_sub((ring.geometry().wqe_size / 64) as u16);
        let cqe = Cqe {
            opcode: CqeOpcode::REQ,
            status: CqeStatus::Success,
            wqe_counter: last,
            qpn: qp.qpn(),
            send_opcode: mlx5_regs::consts::wqe::OPCODE_SEND,
            ..Cqe::EMPTY
        };
        black_box(qp.complete_send(&cqe).unwrap());
    }
    let ring = unstable::qp::send_ring(&qp).unwrap();
    // SAFETY: the QP's ring and record are live DMA memory that outlive
    // `raw`; the driver posts nothing while it runs.
    let mut raw = unsafe {
        RawSq::new(
            ring.region().as_ptr().add(ring.base_offset()),
            g.wqebbs(),
            qp.doorbell_record().as_ptr(),
            qp.qpn(),
            ring.doorbell_offset(),
            1 << hca.caps().log_bf_reg_size,
        )
    };
    for _ in 0..rounds * per_round {
        raw_post(&mut raw, &hal, batch, &sges, inline);
    }
    println!(
        "{kind} batch {batch}: {} requests through each",
        rounds * per_round * batch
    );
    black_box(hal.scratch(0));
}
