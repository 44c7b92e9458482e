//! The other QP shapes, driver against model: a QP with a send ring and an
//! SRQ connected to itself with one CQ for both sides (responder and
//! requester CQEs on the same CQ, told apart by `Cqe::is_requester`), and
//! a full-duplex pair sharing one SRQ and one receive CQ, messages in both
//! directions. Every port set-up, both modes, payloads checked byte for
//! byte, teardown clean.

use mlx5_driver::cq::{Cq, CqOptions, Cqe};
use mlx5_driver::qp::{Payload, Qp, QpLinks, SendOp, SendQueueCaps, SendRequest, SendSlot};
use mlx5_driver::srq::{RecvRequest, Srq};
use mlx5_driver::Hca;
use mlx5_sim::SimHal;
use mlx5_tests::qp::{assert_torn_down, payload, payload_seq, wait_cqes, Bufs, RigConfig};
use mlx5_tests::{bring_up, MODES};

type DuplexQp = Qp<SimHal, Vec<SendSlot>>;

fn duplex_qp(
    hca: &Hca<SimHal>,
    send_cq: &mut Cq<SimHal>,
    recv_cq: Option<&mut Cq<SimHal>>,
    srq: &mut Srq<SimHal>,
) -> DuplexQp {
    let caps = SendQueueCaps::default();
    let g = hca.send_queue_geometry(&caps).unwrap();
    hca.create_qp(
        Some(caps),
        QpLinks {
            send_cq: Some(send_cq),
            recv_cq,
            srq: Some(srq),
        },
        vec![SendSlot::EMPTY; g.wqebbs()],
    )
    .unwrap()
}

fn post_recvs(hca: &Hca<SimHal>, srq: &mut Srq<SimHal>, dst: &Bufs, ids: std::ops::Range<u64>) {
    let sges: Vec<[_; 1]> = ids
        .clone()
        .map(|id| [hca.sge(dst.iova(id as usize % dst.count()), dst.size() as u32)])
        .collect();
    let reqs: Vec<RecvRequest> = sges
        .iter()
        .zip(ids)
        .map(|(s, wr_id)| RecvRequest { wr_id, sges: s })
        .collect();
    srq.post(&reqs).unwrap();
}

fn send(hca: &Hca<SimHal>, qp: &mut DuplexQp, src: &Bufs, seq: u64, len: usize) {
    let slot = seq as usize % src.count();
    src.write(slot, &payload(seq, len));
    let sge = [hca.sge(src.iova(slot), len as u32)];
    qp.post_send(&[SendRequest {
        wr_id: seq,
        op: SendOp::Send,
        payload: Payload::Sges(&sge),
        signaled: true,
        solicited: false,
    }])
    .unwrap();
}

fn self_connected(cfg: RigConfig) {
    let what = format!("{} self", cfg.name());
    let dev = cfg.device();
    let hca = bring_up(&dev);
    let mut cq = hca.create_cq(63, CqOptions::default()).unwrap();
    let mut srq = hca.create_srq(31, 1, Some(&mut cq)).unwrap();
    let mut qp = duplex_qp(&hca, &mut cq, None, &mut srq);
    assert_eq!(qp.recv_cqn(), Some(cq.cqn()), "{what}: one CQ for both");
    hca.connect_loopback_self(&mut qp).unwrap();
    assert_eq!(dev.qp(qp.qpn()).unwrap().remote_qpn, qp.qpn());
    let (src, dst) = (Bufs::new(&dev, 8, 128), Bufs::new(&dev, 8, 128));
    post_recvs(&hca, &mut srq, &dst, 0..8);
    for seq in 0..8 {
        send(&hca, &mut qp, &src, seq, 16 + 13 * seq as usize);
    }
    let (mut recv, mut sent) = (Vec::new(), Vec::new());
    for c in wait_cqes(&hca, &mut cq, 16) {
        if c.is_requester() {
            sent.push(qp.complete_send(&c).unwrap().wr_id);
        } else {
            let r = qp.complete_recv(&mut srq, &c).unwrap();
            assert_eq!((r.qpn, r.src_qpn), (qp.qpn(), qp.qpn()), "{what}");
            let data = dst.read(r.wr_id as usize % 8, r.byte_len as usize);
            let seq = payload_seq(&data);
            assert!(data == payload(seq, 16 + 13 * seq as usize), "{what}");
            recv.push(seq);
        }
    }
    assert_eq!((recv, sent), ((0..8).collect(), (0..8).collect()), "{what}");
    hca.destroy_qp(
        qp,
        QpLinks {
            send_cq: Some(&mut cq),
            srq: Some(&mut srq),
            ..QpLinks::default()
        },
    )
    .map_err(|e| e.error())
    .unwrap();
    let user = srq.cqn().is_some().then_some(&mut cq);
    hca.destroy_srq(srq, user).map_err(|e| e.error()).unwrap();
    hca.destroy_cq(cq).map_err(|e| e.error()).unwrap();
    src.assert_guards(&what);
    dst.assert_guards(&what);
    drop((src, dst));
    hca.teardown().unwrap();
    assert_torn_down(&dev, &what);
}

#[test]
fn a_qp_connected_to_itself_with_one_cq_for_both_sides() {
    for mode in MODES {
        for cfg in RigConfig::every_port(mode) {
            self_connected(cfg);
        }
    }
}

/// Two QPs with send rings on their own send CQs, one SRQ and one receive
/// CQ shared: 20 SENDs each way, interleaved; each receive is matched by
/// the QP it names and must come from the other one, in order.
fn full_duplex(cfg: RigConfig) {
    let what = format!("{} duplex", cfg.name());
    let dev = cfg.device();
    let hca = bring_up(&dev);
    let mut scq_a = hca.create_cq(63, CqOptions::default()).unwrap();
    let mut scq_b = hca.create_cq(63, CqOptions::default()).unwrap();
    let mut rcq = hca.create_cq(127, CqOptions::default()).unwrap();
    let mut srq = hca.create_srq(63, 1, Some(&mut rcq)).unwrap();
    let mut a = duplex_qp(&hca, &mut scq_a, Some(&mut rcq), &mut srq);
    let mut b = duplex_qp(&hca, &mut scq_b, Some(&mut rcq), &mut srq);
    assert_eq!(
        (rcq.users(), srq.users()),
        (2 + srq.cqn().is_some() as u32, 2)
    );
    hca.connect_loopback_pair(&mut a, &mut b).unwrap();
    let (src, dst) = (Bufs::new(&dev, 64, 128), Bufs::new(&dev, 64, 128));
    post_recvs(&hca, &mut srq, &dst, 0..40);
    // a sends even numbers, b odd ones, interleaved.
    for k in 0..20u64 {
        send(&hca, &mut a, &src, 2 * k, 100);
        send(&hca, &mut b, &src, 2 * k + 1, 100);
    }
    let (mut at_a, mut at_b) = (Vec::new(), Vec::new());
    let recvs: Vec<Cqe> = wait_cqes(&hca, &mut rcq, 40);
    for c in &recvs {
        let (qp_is_a, r) = if c.qpn == a.qpn() {
            (true, a.complete_recv(&mut srq, c).unwrap())
        } else {
            (false, b.complete_recv(&mut srq, c).unwrap())
        };
        let data = dst.read(r.wr_id as usize % 64, 100);
        let seq = payload_seq(&data);
        assert!(data == payload(seq, 100), "{what}: payload {seq}");
        let from = if qp_is_a { b.qpn() } else { a.qpn() };
        assert_eq!(r.src_qpn, from, "{what}");
        if qp_is_a {
            at_a.push(seq);
        } else {
            at_b.push(seq);
        }
    }
    let odd: Vec<u64> = (0..20).map(|k| 2 * k + 1).collect();
    let even: Vec<u64> = (0..20).map(|k| 2 * k).collect();
    assert_eq!((at_a, at_b), (odd.clone(), even.clone()), "{what}");
    let sent = |qp: &mut DuplexQp, cq: &mut Cq<SimHal>| -> Vec<u64> {
        wait_cqes(&hca, cq, 20)
            .iter()
            .map(|c| qp.complete_send(c).unwrap().wr_id)
            .collect()
    };
    assert_eq!(sent(&mut a, &mut scq_a), even, "{what}");
    assert_eq!(sent(&mut b, &mut scq_b), odd, "{what}");
    for (qp, scq) in [(a, &mut scq_a), (b, &mut scq_b)] {
        hca.destroy_qp(
            qp,
            QpLinks {
                send_cq: Some(scq),
                recv_cq: Some(&mut rcq),
                srq: Some(&mut srq),
            },
        )
        .map_err(|e| e.error())
        .unwrap();
    }
    let user = srq.cqn().is_some().then_some(&mut rcq);
    hca.destroy_srq(srq, user).map_err(|e| e.error()).unwrap();
    for cq in [scq_a, scq_b, rcq] {
        hca.destroy_cq(cq).map_err(|e| e.error()).unwrap();
    }
    drop((src, dst));
    hca.teardown().unwrap();
    assert_torn_down(&dev, &what);
}

#[test]
fn a_full_duplex_pair_on_one_srq_in_both_directions() {
    for mode in MODES {
        for cfg in RigConfig::every_port(mode) {
            full_duplex(cfg);
        }
    }
}
