//! The traffic engine end to end through raw WQEs and doorbells: loopback in
//! every mode with payloads checked byte for byte, requester and responder
//! CQEs, RDMA WRITE, inline data, ring wrap, RNR, the SRQ limit by
//! consumption, threaded mode, CQE version 1.

use crate::common::qp::*;
use crate::common::*;

use mlx5_hal::Hal;
use mlx5_regs::consts::wqe as w;
use mlx5_regs::consts::CqeOpcode;
use mlx5_regs::layouts::*;
use mlx5_regs::EventType;
use mlx5_sim::{Profile, QpState};

fn check_send(p: &mut Pair, len: usize, seed: u8) {
    let data = p.payload(0, len, seed);
    let idx = p.a.post(&p.f, &Wr::send(p.src.iova(), len as u32, p.key));
    let r = p.wait_cqe(false);
    assert_eq!(cqe64::opcode.get(&r), CqeOpcode::RESP_SEND.0);
    assert_eq!(cqe64::byte_cnt.get(&r), len as u32);
    assert_eq!(cqe64::qpn.get(&r), p.b.qpn, "receiving QPN");
    assert_eq!(cqe64::srqn.get(&r), p.rmp.n, "SRQ number (CQE version 0)");
    assert_eq!(cqe64::flags_rqpn.get(&r) & 0xff_ffff, p.a.qpn, "sender");
    let wqe = cqe64::wqe_counter.get(&r) as usize;
    assert_eq!(p.rmp.received(wqe, len), data, "payload byte for byte");
    let s = p.wait_cqe(true);
    assert_eq!(cqe64::opcode.get(&s), CqeOpcode::REQ.0);
    assert_eq!(cqe64::sop_opcode.get(&s), w::OPCODE_SEND);
    assert_eq!(cqe64::qpn.get(&s), p.a.qpn);
    assert_eq!(cqe64::wqe_counter.get(&s), idx);
}

#[test]
fn loopback_send_in_every_mode() {
    for (profile, mode) in [
        (Profile::ConnectX5, Mode::Fl),
        (Profile::ConnectX6Dx, Mode::FlRoce),
        (Profile::ConnectX7, Mode::FlRoce),
        (Profile::ConnectX4Lx, Mode::Roce),
        (Profile::ConnectX5, Mode::Ib),
    ] {
        let mut p = Pair::new(profile, mode, false, 7);
        p.rmp.post(4);
        for (k, len) in [1usize, 200, 256].into_iter().enumerate() {
            check_send(&mut p, len, k as u8);
        }
        let info = p.f.dev.qp(p.a.qpn).unwrap();
        assert_eq!(info.state, QpState::Rts);
        assert_eq!(info.force_loopback, matches!(mode, Mode::Fl | Mode::FlRoce));
        assert_eq!(info.next_send_psn, 0x111 + 3, "{mode:?}: one packet each");
        assert_eq!(p.f.dev.qp(p.b.qpn).unwrap().next_rcv_psn, 0x111 + 3);
        let st = p.f.dev.traffic().stats();
        assert_eq!((st.messages, st.side_door_uses), (3, 0), "{mode:?}");
        assert!(
            p.f.dev.violations().is_empty(),
            "{:?}",
            p.f.dev.violations()
        );
    }
}

#[test]
fn roce_mode_reports_the_l3_type_and_ib_mode_the_slid() {
    let mut p = Pair::new(Profile::ConnectX4Lx, Mode::Roce, false, 7);
    p.rmp.post(1);
    p.a.post(&p.f, &Wr::send(p.src.iova(), 8, p.key));
    let r = p.wait_cqe(false);
    assert_eq!(cqe64::flags_rqpn.get(&r) >> 24 & 3, 1, "RoCE v2 IPv6");
    let mut p = Pair::new(Profile::ConnectX5, Mode::Ib, false, 7);
    p.rmp.post(1);
    p.a.post(&p.f, &Wr::send(p.src.iova(), 8, p.key));
    let r = p.wait_cqe(false);
    assert_eq!(cqe64::slid.get(&r), p.f.dev.port_lid());
    assert_eq!(cqe64::flags_rqpn.get(&r) >> 24, 0);
}

#[test]
fn send_imm_write_and_write_imm() {
    let mut p = Pair::new(Profile::ConnectX5, Mode::Fl, false, 7);
    p.rmp.post(2);
    // SEND_IMM: immediate in the responder CQE, solicited bit carried.
    let data = p.payload(0, 64, 9);
    let wr = Wr {
        opcode: w::OPCODE_SEND_IMM,
        imm: 0x1234_5678,
        solicited: true,
        ..Wr::send(p.src.iova(), 64, p.key)
    };
    p.a.post(&p.f, &wr);
    let r = p.wait_cqe(false);
    assert_eq!(cqe64::opcode.get(&r), CqeOpcode::RESP_SEND_IMM.0);
    assert_eq!(cqe64::imm_inval_pkey.get(&r), 0x1234_5678);
    assert_eq!(p.rmp.received(0, 64), data);
    assert_eq!(cqe64::sop_opcode.get(&p.wait_cqe(true)), w::OPCODE_SEND_IMM);
    // RDMA WRITE into the receiver's region through the rkey: no receive
    // WQE consumed, no responder CQE.
    let dst = p.f.hal.alloc_dma(4096).unwrap();
    let data = p.payload(4096, 300, 1);
    let wr = Wr {
        opcode: w::OPCODE_RDMA_WRITE,
        remote: Some((dst.iova() + 100, p.key)),
        ..Wr::send(p.src.iova() + 4096, 300, p.key)
    };
    p.a.post(&p.f, &wr);
    assert_eq!(
        cqe64::sop_opcode.get(&p.wait_cqe(true)),
        w::OPCODE_RDMA_WRITE
    );
    let mut got = vec![0u8; 300];
    dst.read_bytes(100, &mut got);
    assert_eq!(got, data);
    assert!(p.f.poll_cq(&mut p.rcq).is_none());
    // RDMA WRITE with immediate: consumes one receive WQE, RESP_WR_IMM with
    // the write's length and the immediate; nothing scattered into it.
    let wr = Wr {
        opcode: w::OPCODE_RDMA_WRITE_IMM,
        imm: 0xfeed,
        remote: Some((dst.iova(), p.key)),
        ..Wr::send(p.src.iova() + 4096, 50, p.key)
    };
    p.a.post(&p.f, &wr);
    let r = p.wait_cqe(false);
    assert_eq!(cqe64::opcode.get(&r), CqeOpcode::RESP_WR_IMM.0);
    assert_eq!(cqe64::byte_cnt.get(&r), 50);
    assert_eq!(cqe64::imm_inval_pkey.get(&r), 0xfeed);
    assert_eq!(cqe64::wqe_counter.get(&r), 1);
    assert_eq!(p.rmp.received(1, 4), vec![0; 4], "nothing scattered");
    dst.read_bytes(0, &mut got[..50]);
    assert_eq!(&got[..50], &data[..50]);
    p.f.keep.push(dst);
}

#[test]
fn inline_data_unsignaled_and_ring_wrap() {
    let mut p = Pair::new(Profile::ConnectX5, Mode::Fl, false, 7);
    p.rmp.post(16);
    // 16-WQEBB ring: unsignaled singles, then WQEs of 2 WQEBBs (inline 100
    // bytes) that cross the ring end.
    for k in 0..15u8 {
        let wr = Wr {
            signaled: false,
            inline: Some(vec![k; 10]),
            sges: vec![],
            ..Wr::send(0, 0, 0)
        };
        p.a.post(&p.f, &wr);
    }
    for k in 0..15usize {
        let r = p.wait_cqe(false);
        assert_eq!(cqe64::byte_cnt.get(&r), 10);
        assert_eq!(p.rmp.received(k, 10), vec![k as u8; 10]);
    }
    assert!(p.f.poll_cq(&mut p.scq).is_none(), "unsignaled: no CQE");
    let big: Vec<u8> = (0..100u8).collect();
    let wr = Wr {
        inline: Some(big.clone()),
        sges: vec![],
        ..Wr::send(0, 0, 0)
    };
    let idx = p.a.post(&p.f, &wr);
    assert_eq!(idx, 15, "starts in the last WQEBB and wraps");
    let r = p.wait_cqe(false);
    assert_eq!(
        p.rmp.received(cqe64::wqe_counter.get(&r) as usize, 100),
        big
    );
    // The signaled CQE names the WQE index; it covers the unsignaled ones.
    assert_eq!(cqe64::wqe_counter.get(&p.wait_cqe(true)), 15);
    assert_eq!(p.f.dev.qp(p.a.qpn).unwrap().sq_consumer, 17);
}

#[test]
fn several_wqes_one_doorbell_and_nop() {
    let mut p = Pair::new(Profile::ConnectX5, Mode::Fl, false, 7);
    p.rmp.post(3);
    let nop = Wr {
        opcode: w::OPCODE_NOP,
        sges: vec![],
        ..Wr::send(0, 0, 0)
    };
    p.a.put(&nop);
    p.payload(0, 16, 3);
    p.a.put(&Wr::send(p.src.iova(), 16, p.key));
    let last = p.a.put(&Wr::send(p.src.iova(), 16, p.key));
    p.a.ring_db(&p.f, last);
    let c = p.wait_cqe(true);
    assert_eq!(
        (cqe64::sop_opcode.get(&c), cqe64::wqe_counter.get(&c)),
        (w::OPCODE_NOP, 0)
    );
    for k in 1..3 {
        assert_eq!(cqe64::wqe_counter.get(&p.wait_cqe(true)), k);
        p.wait_cqe(false);
    }
    assert_eq!(p.f.dev.traffic().stats().doorbells, 1);
}

#[test]
fn rnr_waits_then_delivers_once_receives_are_posted() {
    let mut p = Pair::new(Profile::ConnectX5, Mode::Fl, false, 7);
    let data = p.payload(0, 32, 5);
    for _ in 0..3 {
        p.a.post(&p.f, &Wr::send(p.src.iova(), 32, p.key));
    }
    // No receive posted: RNR NAKs, the sender keeps retrying (7 = forever)
    // each time the driver touches the device after the 0.64 ms timer.
    for _ in 0..200 {
        p.f.hal.delay_us(500);
    }
    assert!(p.f.poll_cq(&mut p.scq).is_none());
    assert!(p.f.dev.qp(p.a.qpn).unwrap().waiting);
    let naks = p.f.dev.traffic().stats().rnr_naks;
    assert!(
        (100..=201).contains(&naks),
        "retried in virtual time ({naks})"
    );
    p.rmp.post(3);
    for k in 0..3 {
        let r = p.wait_cqe(false);
        assert_eq!(p.rmp.received(k, 32), data);
        assert_eq!(cqe64::wqe_counter.get(&r), k as u16);
        assert_eq!(cqe64::wqe_counter.get(&p.wait_cqe(true)), k as u16);
    }
    assert_eq!(p.f.dev.qp(p.a.qpn).unwrap().state, QpState::Rts);
}

#[test]
fn rnr_retry_exceeded_completes_with_0x16() {
    let mut p = Pair::new(Profile::ConnectX5, Mode::Fl, false, 2);
    p.a.post(&p.f, &Wr::send(p.src.iova(), 32, p.key));
    let c = p.wait_cqe(true);
    assert_eq!(err_cqe::opcode.get(&c), CqeOpcode::REQ_ERR.0);
    assert_eq!(err_cqe::syndrome.get(&c), 0x16);
    assert_eq!(
        p.f.dev.traffic().stats().rnr_naks,
        3,
        "first try + 2 retries"
    );
    assert_eq!(p.f.dev.qp_state(p.a.qpn), Some(QpState::Err));
}

fn limit_events(p: &mut Pair) -> Vec<u32> {
    p.events()
        .iter()
        .filter(|e| eqe_type(e) == EventType::SRQ_RQ_LIMIT.0)
        .map(|e| qp_events::qpn_rqn_sqn.get(eqe::event_data.get(e)))
        .collect()
}

#[test]
fn srq_limit_by_consumption_through_real_qps() {
    // rdma-core tests/test_srq.py: 10 receives, limit 7, the event after
    // the 4th SEND and not before; re-arm and repeat.
    let mut p = Pair::new(Profile::ConnectX5, Mode::Fl, false, 7);
    p.rmp.post(10);
    p.rmp.arm(&mut p.f, 7);
    for k in 0..4 {
        assert!(limit_events(&mut p).is_empty(), "before send {}", k + 1);
        check_send(&mut p, 16, k);
    }
    assert_eq!(limit_events(&mut p), vec![p.rmp.n]);
    p.rmp.post(4); // 10 available again
    p.rmp.arm(&mut p.f, 7);
    for k in 0..3 {
        check_send(&mut p, 16, k);
        assert!(limit_events(&mut p).is_empty());
    }
    check_send(&mut p, 16, 9);
    assert_eq!(limit_events(&mut p), vec![p.rmp.n]);
    assert_eq!(p.f.dev.traffic().side_door_uses(), 0);
}

#[test]
fn threaded_mode_exchange_and_rnr() {
    let mut p = Pair::new(Profile::ConnectX6Dx, Mode::FlRoce, true, 7);
    p.rmp.post(2);
    for k in 0..2 {
        check_send(&mut p, 100, k);
    }
    // Receiver empty: the message waits on the device thread's timer.
    let data = p.payload(0, 40, 7);
    p.a.post(&p.f, &Wr::send(p.src.iova(), 40, p.key));
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert!(p.f.poll_cq(&mut p.rcq).is_none());
    p.rmp.post(1);
    let r = p.wait_cqe(false);
    assert_eq!(
        p.rmp.received(cqe64::wqe_counter.get(&r) as usize, 40),
        data
    );
    p.wait_cqe(true);
}

#[test]
fn self_connected_qp_and_cqe_version_1() {
    let mut f = up_profile(Profile::ConnectX5, false);
    let mut eq = f.create_eq(7, mlx5_regs::EventMask::LINUX_ASYNC.bits());
    let mut cq = f.create_cq(6, eq.eqn);
    let key = dma_key(&mut f);
    let mut rmp = TRmp::new(&mut f, key, 0);
    // Both a send ring and the RMP, user_index 0x42: version-1 CQEs.
    let ring = f.hal.alloc_dma(4096).unwrap();
    let dbr = f.hal.alloc_dma(4096).unwrap();
    let mut i = qp_cmd(&f, Some((2, &ring)), Some(rmp.n), cq.cqn, cq.cqn, &dbr);
    qpc::user_index
        .set(create_qp_in::qpc.get_mut(&mut i), 0x42)
        .unwrap();
    let qpn = create_qp_out::qpn.get(&f.ok(&i, create_qp_out::SIZE));
    let mut q = TQp {
        qpn,
        ring: Some(ring),
        dbr,
        log_sq: 2,
        pc: 0,
        uar: f.uar,
        bf: 0x800,
    };
    f.ok(&rst2init(qpn), 16);
    let c = init2rtr(&f, Mode::Fl, qpn, qpn, 5);
    f.ok(&c, 16);
    f.ok(&rtr2rts(qpn, 5, 7), 16);
    assert_eq!(f.dev.qp(qpn).unwrap().cqe_version, 1);
    rmp.post(1);
    let src = f.hal.alloc_dma(4096).unwrap();
    src.write_bytes(0, b"to myself");
    q.post(&f, &Wr::send(src.iova(), 9, key));
    let r = f.poll_cq(&mut cq).unwrap();
    assert_eq!(cqe64::opcode.get(&r), CqeOpcode::RESP_SEND.0);
    assert_eq!(cqe64::srqn.get(&r), 0x42, "user index at byte 0x20");
    assert_eq!(cqe64::flags_rqpn.get(&r) & 0xff_ffff, qpn);
    assert_eq!(rmp.received(0, 9), b"to myself");
    let s = f.poll_cq(&mut cq).unwrap();
    assert_eq!((cqe64::opcode.get(&s), cqe64::srqn.get(&s)), (0, 0x42));
    assert!(f.drain_eq(&mut eq).is_empty());
    f.keep.extend([src]);
}
