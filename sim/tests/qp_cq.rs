//! Completion queues under real traffic: resize while messages flow (no
//! completion lost, duplicated or reordered), overrun of a send CQ, and the
//! hostile requester-CQE kinds applied to engine-written CQEs.

use crate::common::qp::*;
use crate::common::*;

use mlx5_hal::Hal;
use mlx5_regs::consts::wqe as w;
use mlx5_regs::consts::CqeOpcode;
use mlx5_regs::layouts::*;
use mlx5_regs::{EventType, Opcode};
use mlx5_sim::hostile::HOSTILE_WQE_OPCODE;
use mlx5_sim::{HostileKind, Profile, QpState, Violation};

fn resize_cmd(cq: &TCq, new: &Region, log_size: u8) -> Vec<u8> {
    let npas = new.len() / 4096;
    let mut i = inp(Opcode::MODIFY_CQ, modify_cq_in::pas.len_with(npas));
    cmd_in::op_mod.set(&mut i, 1).unwrap();
    modify_cq_in::cqn.set(&mut i, cq.cqn).unwrap();
    resize_field_select::resize_field_select
        .set(
            modify_cq_in::modify_field_select_resize_field_select.get_mut(&mut i),
            7,
        )
        .unwrap();
    let c = modify_cq_in::cq_context.get_mut(&mut i);
    cqc::log_cq_size.set(c, log_size).unwrap();
    for k in 0..npas {
        modify_cq_in::pas
            .set(&mut i, k, new.iova() + 4096 * k as u64)
            .unwrap();
    }
    i
}

#[test]
fn receive_and_send_cq_resize_while_messages_flow() {
    for threaded in [false, true] {
        let mut p = Pair::new(Profile::ConnectX5, Mode::Fl, threaded, 7);
        p.rmp.post(16);
        let mut sent = Vec::new();
        for k in 0..3u8 {
            let data = p.payload(k as usize * 64, 64, k);
            p.a.post(&p.f, &Wr::send(p.src.iova() + k as u64 * 64, 64, p.key));
            sent.push(data);
        }
        // Resize both CQs with completions outstanding; more traffic follows.
        let new_r = p.f.new_cq_buf(7, 0);
        let new_s = p.f.new_cq_buf(7, 0);
        for k in 3..6u8 {
            let data = p.payload(k as usize * 64, 64, k);
            p.a.post(&p.f, &Wr::send(p.src.iova() + k as u64 * 64, 64, p.key));
            sent.push(data);
            if k == 4 {
                p.f.ok(&resize_cmd(&p.rcq, &new_r, 7), 16);
                p.f.ok(&resize_cmd(&p.scq, &new_s, 7), 16);
            }
        }
        let mut got = Vec::new();
        let mut send_idx = Vec::new();
        for (cq, nb, recv) in [(&mut p.rcq, new_r, true), (&mut p.scq, new_s, false)] {
            let mut nb = Some(nb);
            let mut n = 0;
            for _ in 0..20_000 {
                let Some(c) = p.f.poll_cq(cq) else {
                    p.f.hal.delay_us(20);
                    if n == 6 {
                        break;
                    }
                    continue;
                };
                if cqe64::opcode.get(&c) == CqeOpcode::RESIZE_CQ.0 {
                    // Continue in the new buffer with the new size.
                    cq.buf = nb.take().expect("one resize CQE");
                    cq.log_size = 7;
                    continue;
                }
                n += 1;
                if recv {
                    got.push(cqe64::wqe_counter.get(&c));
                } else {
                    send_idx.push(cqe64::wqe_counter.get(&c));
                }
            }
            assert!(nb.is_none(), "the resize CQE was seen");
        }
        assert_eq!(got, (0..6).collect::<Vec<u16>>(), "threaded {threaded}");
        assert_eq!(send_idx, (0..6).collect::<Vec<u16>>());
        for (k, data) in sent.iter().enumerate() {
            assert_eq!(&p.rmp.received(k, 64), data);
        }
    }
}

#[test]
fn send_cq_overrun_loses_completions_and_raises_cq_error() {
    let mut p = Pair::new(Profile::ConnectX5, Mode::Fl, false, 7);
    let nop = Wr {
        opcode: w::OPCODE_NOP,
        sges: vec![],
        ..Wr::send(0, 0, 0)
    };
    for _ in 0..5 {
        let mut last = 0;
        for _ in 0..16 {
            last = p.a.put(&nop);
        }
        p.a.ring_db(&p.f, last);
    }
    assert!(p
        .f
        .dev
        .violations()
        .iter()
        .any(|v| matches!(v, Violation::CqOverrun { cqn } if *cqn == p.scq.cqn)));
    let ev = p.events();
    assert!(ev.iter().any(|e| eqe_type(e) == EventType::CQ_ERROR.0));
    // The QP itself carries on (the model keeps QP state on CQ overrun).
    assert_eq!(p.f.dev.qp_state(p.a.qpn), Some(QpState::Rts));
    assert_eq!(p.f.dev.qp(p.a.qpn).unwrap().sq_consumer, 80);
}

#[test]
fn hostile_kinds_apply_to_engine_requester_cqes() {
    let mut p = Pair::new(Profile::ConnectX5, Mode::Fl, false, 7);
    p.rmp.post(4);
    let inj = p.f.dev.inject();
    inj.hostile(HostileKind::SendCqeWqeCounterNotPosted);
    p.a.post(&p.f, &Wr::send(p.src.iova(), 8, p.key));
    // The receive CQE is untouched (the kind applies to requester CQEs).
    assert_eq!(cqe64::wqe_counter.get(&p.wait_cqe(false)), 0);
    assert_eq!(cqe64::wqe_counter.get(&p.wait_cqe(true)), 0x8000);
    p.f.dev
        .inject()
        .hostile(HostileKind::SendCqeUnknownWqeOpcode);
    p.a.post(&p.f, &Wr::send(p.src.iova(), 8, p.key));
    p.wait_cqe(false);
    let c = p.wait_cqe(true);
    assert_eq!(
        (cqe64::sop_opcode.get(&c), cqe64::wqe_counter.get(&c)),
        (HOSTILE_WQE_OPCODE, 1)
    );
    p.f.dev.inject().hostile(HostileKind::SendCqeDuplicated);
    p.a.post(&p.f, &Wr::send(p.src.iova(), 8, p.key));
    p.wait_cqe(false);
    let a = p.wait_cqe(true);
    let b = p.wait_cqe(true);
    assert_eq!(cqe64::wqe_counter.get(&a), 2);
    assert_eq!(a[..63], b[..63], "the same CQE twice (owner bit aside)");
    assert!(p.f.poll_cq(&mut p.scq).is_none());
    assert_eq!(p.f.dev.inject().hostile_pending(), 0);
}
