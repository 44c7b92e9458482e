//! Error paths of the traffic engine: key, PD and bounds violations on both
//! sides (nothing written out of bounds), malformed WQEs, flush CQEs for
//! every outstanding WQE, QP events, transport retry, dropped doorbells.

use crate::common::qp::*;
use crate::common::*;

use mlx5_hal::Hal;
use mlx5_regs::consts::wqe as w;
use mlx5_regs::consts::CqeOpcode;
use mlx5_regs::layouts::*;
use mlx5_regs::{EventType, Opcode};
use mlx5_sim::{Profile, QpState, Violation};

fn pair() -> Pair {
    Pair::new(Profile::ConnectX5, Mode::Fl, false, 7)
}

/// (CQE opcode, syndrome, wqe_counter) of an error CQE.
fn err(c: &[u8; 64]) -> (u8, u8, u16) {
    (
        err_cqe::opcode.get(c),
        err_cqe::syndrome.get(c),
        err_cqe::wqe_counter.get(c),
    )
}

/// QP events on the EQ: (type, qpn).
fn qp_events_of(p: &mut Pair) -> Vec<(u8, u32)> {
    p.events()
        .iter()
        .map(|e| {
            (
                eqe_type(e),
                qp_events::qpn_rqn_sqn.get(eqe::event_data.get(e)),
            )
        })
        .collect()
}

const REQ_ERR: u8 = CqeOpcode::REQ_ERR.0;
const RESP_ERR: u8 = CqeOpcode::RESP_ERR.0;

#[test]
fn bad_lkey_wrong_pd_and_out_of_key_bounds_are_local_protection() {
    for case in 0..4 {
        let mut p = pair();
        p.rmp.post(1);
        let lkey = match case {
            0 => p.key ^ 0x0100_0000, // no such key
            1 => p.key ^ 1,           // wrong variant
            2 => {
                // A key on another PD.
                let pd2 = p.f.alloc_pd();
                let c = mkey_pa_cmd(pd2, 7, true, true, false, false);
                create_mkey(&mut p.f, &c)
            }
            _ => {
                // A key without local read.
                let c = mkey_pa_cmd(p.f.pd, 8, false, true, false, false);
                create_mkey(&mut p.f, &c)
            }
        };
        p.a.post(&p.f, &Wr::send(p.src.iova(), 16, lkey));
        let c = p.wait_cqe(true);
        assert_eq!(err(&c), (REQ_ERR, 0x04, 0), "case {case}");
        assert_eq!(err_cqe::s_wqe_opcode.get(&c), w::OPCODE_SEND);
        assert_eq!(p.f.dev.qp_state(p.a.qpn), Some(QpState::Err));
        // Nothing reached the receiver, its WQE is still there.
        assert!(p.f.poll_cq(&mut p.rcq).is_none());
        assert_eq!(p.f.dev.qp_state(p.b.qpn), Some(QpState::Rts));
        assert!(!p.f.dev.traffic().send_errors().is_empty());
    }
}

#[test]
fn mtt_key_window_bounds_the_gather() {
    let mut p = pair();
    p.rmp.post(2);
    let page = p.src.iova();
    let c = mkey_mtt_cmd(p.f.pd, 0x7000_0000, 4096, &[page], true);
    let key = create_mkey(&mut p.f, &c);
    let data = p.payload(0x10, 32, 4);
    p.a.post(&p.f, &Wr::send(0x7000_0010, 32, key));
    p.wait_cqe(false);
    assert_eq!(p.rmp.received(0, 32), data, "VA translated through the MTT");
    p.wait_cqe(true);
    // One byte past the window.
    p.a.post(&p.f, &Wr::send(0x7000_0ff0, 17, key));
    assert_eq!(err(&p.wait_cqe(true)).1, 0x04);
}

#[test]
fn message_beyond_the_receive_buffer_is_length_error_on_both_sides() {
    let mut p = pair();
    p.rmp.post(2);
    p.payload(0, 300, 1);
    // Byte 256 of WQE 0's buffer is the guard: must stay untouched.
    p.rmp.data.write_bytes(0, &[0xee; 300]);
    p.a.post(&p.f, &Wr::send(p.src.iova(), 300, p.key));
    let r = p.wait_cqe(false);
    assert_eq!(err(&r), (RESP_ERR, 0x01, 0), "RESP_ERR names the WQE");
    assert_eq!(err_cqe::srqn.get(&r), p.rmp.n);
    assert_eq!(err(&p.wait_cqe(true)), (REQ_ERR, 0x12, 0));
    assert_eq!(p.rmp.received(0, 300), vec![0xee; 300], "nothing written");
    assert_eq!(p.f.dev.qp_state(p.a.qpn), Some(QpState::Err));
    assert_eq!(p.f.dev.qp_state(p.b.qpn), Some(QpState::Err));
    let ev = qp_events_of(&mut p);
    assert_eq!(ev, vec![(EventType::SRQ_LAST_WQE.0, p.b.qpn)]);
}

#[test]
fn receive_key_violation_is_protection_error_and_remote_op_error() {
    let mut p = pair();
    // WQE 0 scatters through a key of another PD; WQE 1 beyond a window.
    let pd2 = p.f.alloc_pd();
    let c = mkey_pa_cmd(pd2, 9, true, true, false, false);
    let foreign = create_mkey(&mut p.f, &c);
    p.rmp.set_seg(0, p.rmp.data.iova(), 256, foreign);
    p.rmp.post(1);
    p.a.post(&p.f, &Wr::send(p.src.iova(), 16, p.key));
    assert_eq!(err(&p.wait_cqe(false)), (RESP_ERR, 0x04, 0));
    assert_eq!(err(&p.wait_cqe(true)), (REQ_ERR, 0x14, 0));
    // A data segment outside DMA memory: IOMMU fault recorded, no write.
    let mut p = pair();
    p.rmp.set_seg(0, 0x1000, 256, p.key);
    p.rmp.post(1);
    p.a.post(&p.f, &Wr::send(p.src.iova(), 16, p.key));
    assert_eq!(err(&p.wait_cqe(false)), (RESP_ERR, 0x04, 0));
    assert!(p
        .f
        .dev
        .iommu_faults()
        .iter()
        .any(|x| x.iova == 0x1000 && x.write));
}

#[test]
fn bad_rkey_and_key_without_remote_write_are_remote_access_errors() {
    for case in 0..2 {
        let mut p = pair();
        let dst = p.f.hal.alloc_dma(4096).unwrap();
        dst.write_bytes(0, &[0x77; 64]);
        let rkey = match case {
            0 => p.key ^ 0x0200_0000,
            _ => {
                let c = mkey_pa_cmd(p.f.pd, 3, true, true, true, false); // no rw
                create_mkey(&mut p.f, &c)
            }
        };
        p.payload(0, 64, 2);
        let wr = Wr {
            opcode: w::OPCODE_RDMA_WRITE,
            remote: Some((dst.iova(), rkey)),
            ..Wr::send(p.src.iova(), 64, p.key)
        };
        p.a.post(&p.f, &wr);
        assert_eq!(err(&p.wait_cqe(true)), (REQ_ERR, 0x13, 0), "case {case}");
        let mut got = [0u8; 64];
        dst.read_bytes(0, &mut got);
        assert_eq!(got, [0x77; 64], "case {case}: nothing written");
        assert_eq!(p.f.dev.qp_state(p.b.qpn), Some(QpState::Err));
        let ev = qp_events_of(&mut p);
        assert!(
            ev.contains(&(EventType::WQ_ACCESS_ERROR.0, p.b.qpn)),
            "{ev:?}"
        );
        assert!(ev.contains(&(EventType::SRQ_LAST_WQE.0, p.b.qpn)));
        p.f.keep.push(dst);
    }
}

/// A responder QP without remote write does not support RDMA WRITE: NAK
/// invalid request, as rxe's `check_op_valid` answers (the vendor's verbs
/// manual lists a remote QP's `qp_access_flags` among REM_INV_REQ_ERR's
/// causes); the responder raises WQ_INVAL_REQ_ERROR and enters ERR.
#[test]
fn write_to_a_qp_without_remote_write_is_an_invalid_request() {
    let mut p = pair();
    let dst = p.f.hal.alloc_dma(4096).unwrap();
    dst.write_bytes(0, &[0x77; 64]);
    let c = modify_cmd(
        Opcode::RTS2RTS_QP,
        p.b.qpn,
        mlx5_regs::consts::OptParam::RWE,
        |_| {},
    );
    p.f.ok(&c, 16);
    p.payload(0, 64, 2);
    let wr = Wr {
        opcode: w::OPCODE_RDMA_WRITE,
        remote: Some((dst.iova(), p.key)),
        ..Wr::send(p.src.iova(), 64, p.key)
    };
    p.a.post(&p.f, &wr);
    assert_eq!(err(&p.wait_cqe(true)), (REQ_ERR, 0x12, 0));
    let mut got = [0u8; 64];
    dst.read_bytes(0, &mut got);
    assert_eq!(got, [0x77; 64], "nothing written");
    assert_eq!(p.f.dev.qp_state(p.b.qpn), Some(QpState::Err));
    let ev = qp_events_of(&mut p);
    assert!(
        ev.contains(&(EventType::WQ_INVAL_REQ_ERROR.0, p.b.qpn)),
        "{ev:?}"
    );
    assert!(!ev.iter().any(|e| e.0 == EventType::WQ_ACCESS_ERROR.0));
    p.f.keep.push(dst);
}

/// A SEND to a QP whose RMP is in error (a catastrophe) finds no receive
/// WQE: RNR NAK, as for an empty one (rxe `get_srq_wqe`), never a
/// completion at the responder; a requester with `rnr_retry` 2 ends with
/// RNR retry exceeded and the responder QP stays in RTS.
#[test]
fn send_to_a_qp_whose_srq_is_in_error_is_answered_rnr() {
    let mut p = Pair::new(Profile::ConnectX5, Mode::Fl, false, 2);
    // A second pair on the same RMP (a QP cannot join an RMP in error).
    let mut a = create_qp(&mut p.f, Some(4), None, p.scq.cqn, 0);
    let b = create_qp(&mut p.f, None, Some(p.rmp.n), 0, p.rcq.cqn);
    connect(&mut p.f, Mode::Fl, &a, &b, 2);
    // WQE 0's next pointer leads out of the ring: the second consumption
    // is the RMP's catastrophe.
    let mut next = [0u8; 16];
    srq_next_seg::next_wqe_index.set(&mut next, 500).unwrap();
    p.rmp.buf.write_bytes(0, &next);
    p.rmp.post(4);
    p.a.post(&p.f, &Wr::send(p.src.iova(), 16, p.key));
    assert_eq!(
        cqe64::opcode.get(&p.wait_cqe(false)),
        CqeOpcode::RESP_SEND.0
    );
    p.wait_cqe(true);
    p.a.post(&p.f, &Wr::send(p.src.iova(), 16, p.key));
    // The catastrophe itself: the responder cannot read its WQE.
    assert_eq!(err(&p.wait_cqe(true)).1, 0x14);
    let ev = p.events();
    assert!(ev
        .iter()
        .any(|e| eqe_type(e) == EventType::SRQ_CATAS_ERROR.0));
    assert_eq!(p.f.dev.qp_state(p.b.qpn), Some(QpState::Err));
    // Flushes of the first pair, then the second pair's SEND.
    while p.f.poll_cq(&mut p.scq).is_some() {}
    while p.f.poll_cq(&mut p.rcq).is_some() {}
    let rnr_before = p.f.dev.traffic().stats().rnr_naks;
    a.post(&p.f, &Wr::send(p.src.iova(), 16, p.key));
    let c = p.wait_cqe(true);
    assert_eq!(err(&c), (REQ_ERR, 0x16, 0));
    assert_eq!(
        p.f.dev.traffic().stats().rnr_naks - rnr_before,
        3,
        "first try + 2 retries"
    );
    assert_eq!(p.f.dev.qp_state(b.qpn), Some(QpState::Rts));
    assert!(p.f.poll_cq(&mut p.rcq).is_none(), "no responder CQE");
}

#[test]
fn malformed_wqes_are_local_qp_operation_errors() {
    for case in 0..5 {
        let mut p = pair();
        p.rmp.post(1);
        let mut b = Wr::send(p.src.iova(), 16, p.key).bytes(p.a.qpn, 0);
        match case {
            0 => b[7] &= 0xc0,                              // DS 0
            1 => b[4..7].copy_from_slice(&[0, 0x12, 0x34]), // another QPN
            2 => b[1..3].copy_from_slice(&[0, 9]),          // wrong index
            3 => b[3] = w::OPCODE_ATOMIC_MASKED_CS,         // not modelled
            _ => b[7] = (b[7] & 0xc0) | 0x3f,               // 16 WQEBBs, 1 posted
        }
        p.a.write_wqe(&b);
        // A good WQE behind it carries the doorbell (which names the QP).
        let next = p.a.post(&p.f, &Wr::send(p.src.iova(), 16, p.key));
        assert_eq!(err(&p.wait_cqe(true)), (REQ_ERR, 0x02, 0), "case {case}");
        assert_eq!(err(&p.wait_cqe(true)), (REQ_ERR, 0x05, next), "flushed");
        assert_eq!(p.f.dev.qp_state(p.a.qpn), Some(QpState::Err));
        assert!(p.f.poll_cq(&mut p.rcq).is_none(), "case {case}");
        assert!(p.f.dev.traffic().send_errors()[0].contains("malformed"));
    }
}

#[test]
fn err_flushes_every_outstanding_wqe_signaled_or_not() {
    let mut p = pair();
    // No receive: the first SEND waits on RNR, three more queue behind it.
    let mut idx = Vec::new();
    for k in 0..4 {
        let wr = Wr {
            signaled: k % 2 == 0,
            ..Wr::send(p.src.iova(), 8, p.key)
        };
        idx.push(p.a.post(&p.f, &wr));
    }
    p.f.hal.delay_us(2000);
    assert!(p.f.poll_cq(&mut p.scq).is_none());
    p.f.ok(&qpn_cmd(Opcode::QP_2ERR, p.a.qpn), 16);
    for &i in &idx {
        let c = p.wait_cqe(true);
        assert_eq!(err(&c), (REQ_ERR, 0x05, i));
        assert_eq!(err_cqe::s_wqe_opcode.get(&c), w::OPCODE_SEND);
    }
    // Posted while in ERR: flushed at once.
    let i = p.a.post(&p.f, &Wr::send(p.src.iova(), 8, p.key));
    assert_eq!(err(&p.wait_cqe(true)), (REQ_ERR, 0x05, i));
    assert_eq!(p.f.dev.traffic().stats().flushed, 5);
    // The sender has no SRQ: no last-WQE event. The receiver's 2ERR has one.
    assert!(qp_events_of(&mut p).is_empty());
    p.f.ok(&qpn_cmd(Opcode::QP_2ERR, p.b.qpn), 16);
    p.f.ok(&qpn_cmd(Opcode::QP_2ERR, p.b.qpn), 16);
    assert_eq!(
        qp_events_of(&mut p),
        vec![(EventType::SRQ_LAST_WQE.0, p.b.qpn)],
        "once, on entering ERR"
    );
    // Back to RST and up again: the ring restarts at 0.
    for q in [&mut p.a, &mut p.b] {
        p.f.ok(&qpn_cmd(Opcode::QP_2RST, q.qpn), 16);
        q.pc = 0;
        q.dbr.write_be32(4, 0);
    }
    let (a, b) = (&p.a, &p.b);
    connect(&mut p.f, Mode::Fl, a, b, 7);
    p.rmp.post(1);
    let data = p.payload(0, 8, 8);
    p.a.post(&p.f, &Wr::send(p.src.iova(), 8, p.key));
    p.wait_cqe(false);
    assert_eq!(p.rmp.received(0, 8), data);
}

#[test]
fn unreachable_peer_and_psn_mismatch_exhaust_transport_retries() {
    // The sender is ahead of the PSN the receiver expects (a gap): the
    // responder's NAK names a PSN the sender never sent, so no ACK, and
    // retry_count 7 then 0x15.
    let mut p = pair();
    p.rmp.post(1);
    // Make the PSNs disagree by moving the receiver back through RST.
    p.f.ok(&qpn_cmd(Opcode::QP_2RST, p.b.qpn), 16);
    p.f.ok(&rst2init(p.b.qpn), 16);
    let i = init2rtr(&p.f, Mode::Fl, p.b.qpn, p.a.qpn, 0x100);
    p.f.ok(&i, 16);
    p.a.post(&p.f, &Wr::send(p.src.iova(), 8, p.key));
    for _ in 0..100 {
        p.f.hal.delay_us(100_000);
    }
    assert_eq!(err(&p.wait_cqe(true)), (REQ_ERR, 0x15, 0));
    assert_eq!(
        p.f.dev.traffic().stats().ack_timeouts,
        8,
        "first try + 7 retries"
    );
    assert!(p.f.poll_cq(&mut p.rcq).is_none());
}

#[test]
fn a_message_behind_the_expected_psn_is_a_duplicate_acked_not_delivered() {
    // The sender (PSN 0x111) is behind the receiver (0x999): every packet
    // is a duplicate, so the responder ACKs again and delivers nothing;
    // the requester completes (IB RC: it cannot tell), no retry.
    let mut p = pair();
    p.rmp.post(1);
    p.f.ok(&qpn_cmd(Opcode::QP_2RST, p.b.qpn), 16);
    p.f.ok(&rst2init(p.b.qpn), 16);
    let i = init2rtr(&p.f, Mode::Fl, p.b.qpn, p.a.qpn, 0x999);
    p.f.ok(&i, 16);
    p.a.post(&p.f, &Wr::send(p.src.iova(), 8, p.key));
    let c = p.wait_cqe(true);
    assert_eq!(cqe64::opcode.get(&c), CqeOpcode::REQ.0);
    let s = p.f.dev.traffic().stats();
    assert_eq!((s.duplicates, s.ack_timeouts, s.messages), (1, 0, 0));
    p.f.hal.delay_us(1000);
    assert!(p.f.poll_cq(&mut p.rcq).is_none(), "nothing delivered");
    assert_eq!(p.f.dev.qp(p.a.qpn).unwrap().next_send_psn, 0x112);
}

#[test]
fn send_to_a_qp_without_receive_queue_is_remote_invalid_request() {
    let mut p = pair();
    // A second sender-shaped QP (zero-length RQ) as the peer.
    let c = create_qp(&mut p.f, Some(2), None, p.scq.cqn, 0);
    let mut a = create_qp(&mut p.f, Some(2), None, p.scq.cqn, 0);
    connect(&mut p.f, Mode::Fl, &a, &c, 7);
    a.post(&p.f, &Wr::send(p.src.iova(), 8, p.key));
    assert_eq!(err(&p.wait_cqe(true)), (REQ_ERR, 0x12, 0));
    assert_eq!(p.f.dev.qp_state(c.qpn), Some(QpState::Err));
    let ev = qp_events_of(&mut p);
    assert_eq!(ev, vec![(EventType::WQ_INVAL_REQ_ERROR.0, c.qpn)]);
}

#[test]
fn doorbells_on_the_wrong_uar_or_for_unknown_qps_are_dropped() {
    let mut p = pair();
    p.rmp.post(1);
    let other = p.f.alloc_uar();
    p.a.uar = other;
    p.a.post(&p.f, &Wr::send(p.src.iova(), 8, p.key));
    p.f.hal.delay_us(1000);
    assert!(p.f.poll_cq(&mut p.rcq).is_none(), "dropped");
    let v = p.f.dev.violations();
    assert!(
        matches!(&v[..], [Violation::UarDoorbell(s)] if s.contains("uar_page")),
        "{v:?}"
    );
    // The next doorbell on the right UAR executes both WQEs posted so far.
    p.a.uar = p.f.uar;
    p.rmp.post(1);
    p.a.post(&p.f, &Wr::send(p.src.iova(), 8, p.key));
    p.wait_cqe(false);
    p.wait_cqe(false);
    assert_eq!(p.f.dev.traffic().stats().dropped_doorbells, 1);
}

/// A QP in RTS (peer 0x123, never reached) with `rlky` and `log_msg_max`.
fn lone_sender(p: &mut Pair, rlky: bool, log_msg_max: u8) -> TQp {
    let ring = p.f.hal.alloc_dma(4096).unwrap();
    let dbr = p.f.hal.alloc_dma(4096).unwrap();
    let mut i = qp_cmd(&p.f, Some((2, &ring)), None, p.scq.cqn, 0, &dbr);
    qpc::rlky
        .set(create_qp_in::qpc.get_mut(&mut i), rlky)
        .unwrap();
    let qpn = create_qp_out::qpn.get(&p.f.ok(&i, create_qp_out::SIZE));
    p.f.ok(&rst2init(qpn), 16);
    let c = modify_cmd(
        Opcode::INIT2RTR_QP,
        qpn,
        mlx5_regs::consts::OptParam::empty(),
        |c| {
            qpc::mtu.set(c, 3).unwrap();
            qpc::log_msg_max.set(c, log_msg_max).unwrap();
            qpc::remote_qpn.set(c, 0x123).unwrap();
            set_path(&p.f, Mode::Fl, qpc::primary_address_path.get_mut(c));
        },
    );
    p.f.ok(&c, 16);
    p.f.ok(&rtr2rts(qpn, 0, 7), 16);
    TQp {
        qpn,
        ring: Some(ring),
        dbr,
        log_sq: 2,
        pc: 0,
        uar: p.f.uar,
        bf: 0x800,
    }
}

#[test]
fn reserved_lkey_needs_rlky_and_message_size_is_bounded() {
    let mut p = pair();
    p.rmp.post(2);
    let resd = p.f.dev.reserved_lkey();
    let data = p.payload(0, 8, 1);
    p.a.post(&p.f, &Wr::send(p.src.iova(), 8, resd));
    p.wait_cqe(false);
    assert_eq!(p.rmp.received(0, 8), data, "rlky = 1: reserved lkey = IOVA");
    p.wait_cqe(true);
    let mut q = lone_sender(&mut p, false, 30);
    q.post(&p.f, &Wr::send(p.src.iova(), 8, resd));
    assert_eq!(err(&p.wait_cqe(true)), (REQ_ERR, 0x04, 0), "rlky = 0");
    let mut q = lone_sender(&mut p, true, 3);
    q.post(&p.f, &Wr::send(p.src.iova(), 9, p.key));
    assert_eq!(
        err(&p.wait_cqe(true)),
        (REQ_ERR, 0x01, 0),
        "beyond 2^log_msg_max"
    );
}

#[test]
fn producer_beyond_the_ring_is_a_catastrophic_error() {
    let mut p = pair();
    let nop = Wr {
        opcode: w::OPCODE_NOP,
        sges: vec![],
        ..Wr::send(0, 0, 0)
    };
    p.a.post(&p.f, &nop);
    p.wait_cqe(true);
    // The doorbell record claims 40 more WQEBBs on a 16-WQEBB ring.
    p.a.pc = 41;
    p.a.ring_db(&p.f, 0);
    assert_eq!(p.f.dev.qp_state(p.a.qpn), Some(QpState::Err));
    let v = p.f.dev.violations();
    assert!(
        v.iter()
            .any(|v| matches!(v, Violation::SendQueue(s) if s.contains("ahead"))),
        "{v:?}"
    );
    let ev = qp_events_of(&mut p);
    assert_eq!(ev, vec![(EventType::WQ_CATAS_ERROR.0, p.a.qpn)]);
}
