//! The raw send baseline of the `send` benchmark writes exactly what the
//! driver writes: the same WQE bytes, the same doorbell record and the same
//! doorbell values, into the same ring (otherwise the ratio compares
//! different work).

use mlx5_bench::{BenchHal, RawSq};
use mlx5_driver::cq::CqOptions;
use mlx5_driver::qp::{Payload, QpLinks, SendOp, SendQueueCaps, SendRequest, SendSlot};
use mlx5_driver::unstable;
use mlx5_driver::{Hca, HcaConfig};
use mlx5_hal::Hal;
use mlx5_sim::{Device, SimConfig};

fn same_bytes(sges_n: usize, inline: Option<&[u8]>) {
    let dev = Device::new(SimConfig::default());
    let hal = BenchHal::new(dev.hal());
    let hca = Hca::bring_up(hal.clone(), HcaConfig::default()).unwrap();
    let mut cq = hca.create_cq(63, CqOptions::default()).unwrap();
    let caps = SendQueueCaps {
        max_send_wr: 32,
        max_send_sge: sges_n.max(1) as u32,
        max_inline_data: inline.map_or(0, |d| d.len() as u32),
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
    let sges: Vec<_> = (0..sges_n)
        .map(|i| hca.sge(buf.iova() + 256 * i as u64, 64 + i as u32))
        .collect();
    let payload = match inline {
        Some(d) => Payload::Inline(d),
        None => Payload::Sges(&sges),
    };
    let reqs: Vec<SendRequest<'_>> = (0..4u64)
        .map(|i| SendRequest {
            wr_id: i,
            op: SendOp::Send,
            payload,
            signaled: true,
            solicited: false,
        })
        .collect();
    let ring = unstable::qp::send_ring(&qp).unwrap();
    let (base, len) = (ring.base_offset(), g.bytes());
    let bf = ring.doorbell_offset();
    let bf_size = 1usize << hca.caps().log_bf_reg_size;
    // Driver: 3 batches of 4 (three doorbells, alternating halves).
    for _ in 0..3 {
        qp.post_send(&reqs).unwrap();
    }
    let snap = |qp: &mlx5_driver::qp::Qp<BenchHal, Vec<SendSlot>>| {
        let mut v = vec![0u8; len];
        unstable::qp::send_ring(qp)
            .unwrap()
            .region()
            .read_bytes(base, &mut v);
        (v, qp.doorbell_record().read_be32(4))
    };
    let driver = snap(&qp);
    let driver_db = [hal.scratch(0), hal.scratch(bf_size / 16)];
    // Raw: the same 12 requests into the same, cleared ring.
    let ring = unstable::qp::send_ring(&qp).unwrap();
    ring.region().fill(base, len, 0);
    qp.doorbell_record().write_be32(4, 0);
    // SAFETY: the ring and record are live DMA memory of `qp`, which
    // outlives `raw`; the driver posts nothing while it runs.
    let mut raw = unsafe {
        RawSq::new(
            ring.region().as_ptr().add(base),
            g.wqebbs(),
            qp.doorbell_record().as_ptr(),
            qp.qpn(),
            bf,
            bf_size,
        )
    };
    let nonempty: Vec<_> = sges.iter().copied().filter(|s| s.length > 0).collect();
    for _ in 0..3 {
        let mut last = 0;
        for i in 0..4 {
            last = raw.post(i, &nonempty, inline);
        }
        raw.ring(&hal, last);
    }
    let rawsnap = snap(&qp);
    assert_eq!(driver.1, rawsnap.1, "doorbell record");
    assert!(
        driver.0 == rawsnap.0,
        "WQE bytes differ ({sges_n} SGEs, inline {:?})",
        inline.map(|d| d.len())
    );
    assert_eq!(
        [hal.scratch(0), hal.scratch(bf_size / 16)],
        driver_db,
        "doorbell values in both halves"
    );
    hal.divert_doorbells(false);
    hca.destroy_qp(
        qp,
        QpLinks {
            send_cq: Some(&mut cq),
            ..QpLinks::default()
        },
    )
    .map_err(|d| d.error())
    .unwrap();
    hca.destroy_cq(cq).map_err(|d| d.error()).unwrap();
    drop(buf);
    hca.teardown().unwrap();
}

#[test]
fn the_raw_baseline_writes_what_the_driver_writes() {
    same_bytes(1, None);
    same_bytes(4, None);
    same_bytes(0, Some(&[0x5a; 64]));
    same_bytes(0, Some(&[0xa5; 20]));
}
