//! QPs and the other objects' rules in the facade: `EBUSY` for CQs and
//! SRQs in use, destroy and reset removing a QP's leftovers from its CQs,
//! solicited completion events, QP async events with their handles and
//! acknowledgement.

use mlx5_tests::verbs_common::*;

use mlx5_driver::verbs::{
    AccessFlags, AsyncEvent, AsyncEventType, Errno, EventElement, QpAttr, QpAttrMask, QpHandle,
    QpInitAttr, QpState, SendFlags, SendWr, WcStatus, WrOpcode,
};
use mlx5_regs::layouts::{eqe, qp_events};
use mlx5_regs::EventType;
use mlx5_sim::Profile;
use mlx5_tests::PROFILES;

fn to_state(ctx: &mut Ctx, qp: QpHandle, s: QpState) {
    let attr = QpAttr {
        qp_state: s,
        ..QpAttr::default()
    };
    ctx.modify_qp(qp, &attr, QpAttrMask::STATE).unwrap();
}

#[test]
fn destroy_cq_and_srq_are_ebusy_while_a_qp_uses_them() {
    let (dev, mut ctx) = open(Profile::ConnectX5);
    let p = Pair::unconnected(&dev, &mut ctx, cap(8, 1, 0));
    let objects = dev.objects();
    for cq in [p.scq, p.rcq] {
        assert_eq!(ctx.destroy_cq(cq).unwrap_err(), Errno::EBUSY);
    }
    assert_eq!(ctx.destroy_srq(p.srq).unwrap_err(), Errno::EBUSY);
    assert_eq!(dev.objects(), objects, "nothing destroyed");
    // A QP without an SRQ still holds its receive CQ; one without a send
    // queue its send CQ (ib core counts both).
    let (c1, _) = ctx.create_cq(15).unwrap();
    let (c2, _) = ctx.create_cq(15).unwrap();
    let (no_srq, _) = ctx
        .create_qp(&QpInitAttr {
            send_cq: c1,
            recv_cq: c2,
            srq: None,
            cap: cap(4, 1, 0),
            sq_sig_all: false,
        })
        .unwrap();
    let (c3, _) = ctx.create_cq(15).unwrap();
    let (no_sq, _) = ctx
        .create_qp(&QpInitAttr {
            send_cq: c3,
            recv_cq: c1,
            srq: Some(p.srq),
            cap: cap(0, 0, 0),
            sq_sig_all: false,
        })
        .unwrap();
    for cq in [c1, c2, c3] {
        assert_eq!(ctx.destroy_cq(cq).unwrap_err(), Errno::EBUSY);
    }
    ctx.destroy_qp(no_srq).unwrap();
    ctx.destroy_cq(c2).unwrap();
    assert_eq!(
        ctx.destroy_cq(c1).unwrap_err(),
        Errno::EBUSY,
        "no_sq receives on it"
    );
    ctx.destroy_qp(no_sq).unwrap();
    ctx.destroy_cq(c1).unwrap();
    ctx.destroy_cq(c3).unwrap();
    // The pair's objects go once its QPs are gone (Pair::destroy: QPs
    // first).
    p.destroy(&mut ctx);
    close(&dev, ctx, "ebusy");
}

#[test]
fn destroy_and_reset_remove_a_qps_unpolled_completions_and_return_its_srq_wqes() {
    for prof in PROFILES {
        let (dev, mut ctx) = open(prof);
        let p = Pair::new(&dev, &mut ctx, cap(8, 1, 0));
        // A second pair c → d on the same CQs and SRQ.
        let attr = QpInitAttr {
            send_cq: p.scq,
            recv_cq: p.rcq,
            srq: Some(p.srq),
            cap: cap(8, 1, 0),
            sq_sig_all: false,
        };
        let (c, _) = ctx.create_qp(&attr).unwrap();
        let (d, _) = ctx.create_qp(&attr).unwrap();
        ctx.connect_loopback(c, d).unwrap();
        p.post_recv(&mut ctx, 0, 12);
        let one = [p.sge(0, 8)];
        for i in 0..3 {
            ctx.post_send(p.a, &[send(100 + i, &one)]).unwrap();
            ctx.post_send(c, &[send(200 + i, &one)]).unwrap();
        }
        let srq_out = ctx.srq(p.srq).unwrap().outstanding();
        assert_eq!(srq_out, 12, "consumed but not polled");
        ctx.destroy_qp(p.b).unwrap();
        assert_eq!(
            ctx.srq(p.srq).unwrap().outstanding(),
            9,
            "{prof:?}: b's three receives returned their WQEs"
        );
        let r = drain(&mut ctx, p.rcq);
        let qdn = ctx.qp_num(d).unwrap();
        assert_eq!(r.len(), 3, "{prof:?}: only d's receives remain");
        assert!(r
            .iter()
            .all(|w| w.qp_num == qdn && w.status == WcStatus::Success));
        assert_eq!(ids(&r), [1, 3, 5], "d's, in order");
        // Reset a: its send completions go, c's stay.
        to_state(&mut ctx, p.a, QpState::Reset);
        let s = drain(&mut ctx, p.scq);
        assert_eq!(ids(&s), [200, 201, 202], "{prof:?}");
        assert_eq!(ctx.stats().unmatched_cqes, 0);
        // Destroy c with completions pending: they go too.
        ctx.post_send(c, &[send(300, &one)]).unwrap();
        ctx.destroy_qp(c).unwrap();
        assert!(drain(&mut ctx, p.scq).is_empty());
        assert_eq!(drain(&mut ctx, p.rcq).len(), 1, "d received it");
        for ev in async_events(&mut ctx) {
            ctx.ack_async_event(&ev).unwrap();
        }
        ctx.destroy_qp(d).unwrap();
        ctx.destroy_qp(p.a).unwrap();
        ctx.destroy_srq(p.srq).unwrap();
        ctx.destroy_cq(p.scq).unwrap();
        ctx.destroy_cq(p.rcq).unwrap();
        let mut p = p;
        ctx.dereg_mr(p.mr.take().unwrap())
            .map_err(|(_, e)| e)
            .unwrap();
        close(&dev, ctx, "clean");
    }
}

#[test]
fn solicited_only_arms_fire_for_solicited_and_error_completions_not_plain_ones() {
    for prof in PROFILES {
        let (dev, mut ctx) = open(prof);
        let p = Pair::new(&dev, &mut ctx, cap(16, 1, 0));
        p.post_recv(&mut ctx, 0, 8);
        let small = [p.sge(0, 8)];
        let wr = |wr_id, op, flags| SendWr {
            opcode: op,
            send_flags: flags,
            remote_addr: p.buf.iova() + 16384,
            rkey: p.rkey(),
            ..send(wr_id, &small)
        };
        let signaled = SendFlags::SIGNALED;
        let solicited = SendFlags::SIGNALED | SendFlags::SOLICITED;
        ctx.req_notify_cq(p.rcq, true).unwrap();
        ctx.req_notify_cq(p.scq, true).unwrap();
        // Plain SEND, plain SEND with immediate, RDMA WRITEs: no event on
        // either CQ (successful send completions are never solicited).
        ctx.post_send(
            p.a,
            &[
                wr(1, WrOpcode::Send, signaled),
                wr(2, WrOpcode::SendWithImm, signaled),
                wr(3, WrOpcode::RdmaWrite, solicited),
                wr(4, WrOpcode::RdmaWriteWithImm, signaled),
            ],
        )
        .unwrap();
        assert_eq!(poll_n(&dev, &mut ctx, p.rcq, 3).len(), 3);
        assert_eq!(poll_n(&dev, &mut ctx, p.scq, 4).len(), 4);
        assert!(
            cq_events(&mut ctx).is_empty(),
            "{prof:?}: nothing solicited"
        );
        // A solicited SEND wakes the receive CQ only.
        ctx.post_send(p.a, &[wr(5, WrOpcode::Send, solicited)])
            .unwrap();
        assert_eq!(cq_events(&mut ctx), [p.rcq], "{prof:?}");
        ctx.ack_cq_events(p.rcq, 1).unwrap();
        drain(&mut ctx, p.rcq);
        drain(&mut ctx, p.scq);
        // So does a solicited RDMA WRITE with immediate.
        ctx.req_notify_cq(p.rcq, true).unwrap();
        ctx.post_send(p.a, &[wr(6, WrOpcode::RdmaWriteWithImm, solicited)])
            .unwrap();
        assert_eq!(cq_events(&mut ctx), [p.rcq]);
        ctx.ack_cq_events(p.rcq, 1).unwrap();
        drain(&mut ctx, p.rcq);
        drain(&mut ctx, p.scq);
        // A receive error (a message longer than the buffer) wakes the
        // receive CQ, the requester's error the send CQ.
        ctx.req_notify_cq(p.rcq, true).unwrap();
        let long = [p.sge(0, SLOT as u32 + 1)];
        ctx.post_send(p.a, &[send(7, &long)]).unwrap();
        let mut evs = cq_events(&mut ctx);
        evs.sort_by_key(|h| *h != p.rcq);
        assert_eq!(evs, [p.rcq, p.scq], "{prof:?}: both errors wake");
        let r = drain(&mut ctx, p.rcq);
        assert_eq!((r.len(), r[0].status), (1, WcStatus::LocLenErr));
        let s = drain(&mut ctx, p.scq);
        assert_eq!(s[0].wr_id, 7);
        assert_ne!(s[0].status, WcStatus::Success);
        ctx.ack_cq_events(p.rcq, 1).unwrap();
        ctx.ack_cq_events(p.scq, 1).unwrap();
        for ev in async_events(&mut ctx) {
            ctx.ack_async_event(&ev).unwrap();
        }
        p.destroy(&mut ctx);
        close(&dev, ctx, "solicited");
    }
}

#[test]
fn qp_async_events_name_the_qp_and_block_its_destroy_until_acknowledged() {
    use AsyncEventType as T;
    for prof in PROFILES {
        let (dev, mut ctx) = open(prof);
        let p = Pair::new(&dev, &mut ctx, cap(8, 1, 0));
        // b takes away remote write; a RDMA WRITE to it is an invalid
        // request at b, an operation the QP does not support (rxe
        // `check_op_valid`); the QP fails and, being on an SRQ, takes no
        // more WQEs.
        let rr = QpAttr {
            qp_access_flags: AccessFlags::REMOTE_READ,
            ..QpAttr::default()
        };
        ctx.modify_qp(p.b, &rr, QpAttrMask::ACCESS_FLAGS).unwrap();
        let one = [p.sge(0, 8)];
        let w = SendWr {
            opcode: WrOpcode::RdmaWrite,
            remote_addr: p.buf.iova() + 16384,
            rkey: p.rkey(),
            ..send(1, &one)
        };
        ctx.post_send(p.a, &[w, send(2, &one)]).unwrap();
        let s = poll_n(&dev, &mut ctx, p.scq, 2);
        assert_eq!(
            s.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
            [(1, WcStatus::RemInvReqErr), (2, WcStatus::WrFlushErr)],
            "{prof:?}"
        );
        let evs = async_events(&mut ctx);
        let b = EventElement::Qp(p.b);
        let a = EventElement::Qp(p.a);
        // a failed as a requester: only its own last-WQE event (it is on
        // the SRQ too) besides b's two.
        let of = |el| {
            evs.iter()
                .filter(|e| e.element == el)
                .map(|e| e.event_type)
                .collect::<Vec<_>>()
        };
        assert_eq!(of(b), [T::QpReqErr, T::QpLastWqeReached], "{prof:?}");
        assert_eq!(of(a), [T::QpLastWqeReached], "{prof:?}");
        assert_eq!(ctx.query_qp(p.b).unwrap().0.qp_state, QpState::Err);
        assert_eq!(
            ctx.qp(p.b).unwrap().state(),
            mlx5_driver::qp::QpState::Error
        );
        assert_eq!(ctx.destroy_qp(p.b).unwrap_err(), Errno::EBUSY);
        let b_evs: Vec<_> = evs.iter().filter(|e| e.element == b).collect();
        ctx.ack_async_event(b_evs[0]).unwrap();
        assert_eq!(ctx.destroy_qp(p.b).unwrap_err(), Errno::EBUSY, "one of two");
        ctx.ack_async_event(b_evs[1]).unwrap();
        assert_eq!(ctx.ack_async_event(b_evs[1]).unwrap_err(), Errno::EINVAL);
        let qbn = ctx.qp_num(p.b).unwrap();
        ctx.destroy_qp(p.b).unwrap();
        assert_eq!(
            ctx.ack_async_event(b_evs[0]).unwrap_err(),
            Errno::EINVAL,
            "stale handle"
        );
        // An event naming the destroyed QP is not reported.
        let mut raw = [0u8; 64];
        eqe::event_type
            .set(&mut raw, EventType::WQ_CATAS_ERROR.0)
            .unwrap();
        let d = eqe::event_data.get_mut(&mut raw);
        qp_events::qpn_rqn_sqn.set(d, qbn).unwrap();
        let unroutable = ctx.stats().unroutable_events;
        dev.traffic().raise_event(raw).unwrap();
        assert!(async_events(&mut ctx).is_empty());
        assert_eq!(ctx.stats().unroutable_events, unroutable + 1);
        for ev in evs.iter().filter(|e| e.element == a) {
            ctx.ack_async_event(ev).unwrap();
        }
        ctx.destroy_qp(p.a).unwrap();
        // A QP without an SRQ that is sent a SEND: invalid request.
        let attr = QpInitAttr {
            send_cq: p.scq,
            recv_cq: p.rcq,
            srq: None,
            cap: cap(8, 1, 0),
            sq_sig_all: false,
        };
        let (c, _) = ctx.create_qp(&attr).unwrap();
        let (sender, _) = ctx
            .create_qp(&QpInitAttr {
                srq: Some(p.srq),
                ..attr
            })
            .unwrap();
        ctx.connect_loopback(sender, c).unwrap();
        ctx.post_send(sender, &[send(3, &one)]).unwrap();
        let s = poll_n(&dev, &mut ctx, p.scq, 1);
        assert_eq!((s[0].wr_id, s[0].status), (3, WcStatus::RemInvReqErr));
        let evs = async_events(&mut ctx);
        let of_c: Vec<_> = evs
            .iter()
            .filter(|e| e.element == EventElement::Qp(c))
            .map(|e| e.event_type)
            .collect();
        assert_eq!(of_c, [T::QpReqErr], "{prof:?}: no last-WQE without an SRQ");
        for ev in &evs {
            ctx.ack_async_event(ev).unwrap();
        }
        // A catastrophic error of a QP (raised by hand: the model raises it
        // only for a broken send ring) is `QpFatal` with its handle.
        to_state(&mut ctx, c, QpState::Reset);
        ctx.connect_loopback(c, c).unwrap();
        let mut raw = [0u8; 64];
        eqe::event_type
            .set(&mut raw, EventType::WQ_CATAS_ERROR.0)
            .unwrap();
        qp_events::qpn_rqn_sqn
            .set(eqe::event_data.get_mut(&mut raw), ctx.qp_num(c).unwrap())
            .unwrap();
        dev.traffic().raise_event(raw).unwrap();
        let evs = async_events(&mut ctx);
        assert_eq!(
            evs,
            [AsyncEvent {
                event_type: T::QpFatal,
                element: EventElement::Qp(c),
                detail: mlx5_driver::verbs::AsyncEventDetail::None,
            }]
        );
        assert_eq!(ctx.qp(c).unwrap().state(), mlx5_driver::qp::QpState::Error);
        ctx.ack_async_event(&evs[0]).unwrap();
        // Moving an SRQ-attached QP to ERR: last WQE reached, once.
        to_state(&mut ctx, sender, QpState::Reset);
        ctx.connect_loopback(sender, sender).unwrap();
        to_state(&mut ctx, sender, QpState::Err);
        to_state(&mut ctx, sender, QpState::Err);
        let evs = async_events(&mut ctx);
        assert_eq!(
            evs,
            [AsyncEvent {
                event_type: T::QpLastWqeReached,
                element: EventElement::Qp(sender),
                detail: mlx5_driver::verbs::AsyncEventDetail::None,
            }]
        );
        // Unread events of a destroyed QP are discarded with it.
        ctx.ack_async_event(&evs[0]).unwrap();
        to_state(&mut ctx, sender, QpState::Reset);
        ctx.connect_loopback(sender, sender).unwrap();
        to_state(&mut ctx, sender, QpState::Err);
        ctx.destroy_qp(sender).unwrap();
        assert!(async_events(&mut ctx).is_empty());
        ctx.destroy_qp(c).unwrap();
        let mut p = p;
        ctx.destroy_srq(p.srq).unwrap();
        ctx.destroy_cq(p.scq).unwrap();
        ctx.destroy_cq(p.rcq).unwrap();
        ctx.dereg_mr(p.mr.take().unwrap())
            .map_err(|(_, e)| e)
            .unwrap();
        close(&dev, ctx, "qp events");
    }
}
