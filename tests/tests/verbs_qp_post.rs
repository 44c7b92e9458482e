//! `post_send` and send completions of the facade against the model:
//! `bad_wr` and the errno of each refusal (rdma-core's: `ENOMEM`), flush
//! completions carrying each request's `wr_id`, unsignaled requests,
//! completions of many QPs on one CQ, CQEs the device should not have
//! written, the device on its own thread.

use mlx5_tests::verbs_common::*;

use mlx5_driver::verbs::{
    Errno, PostSendError, QpAttr, QpAttrMask, QpState, SendFlags, SendWr, WcOpcode, WcStatus,
    WorkCompletion, WrOpcode,
};
use mlx5_sim::{Device, Profile};
use mlx5_tests::PROFILES;

fn to_state(ctx: &mut Ctx, qp: mlx5_driver::verbs::QpHandle, s: QpState) {
    let attr = QpAttr {
        qp_state: s,
        ..QpAttr::default()
    };
    ctx.modify_qp(qp, &attr, QpAttrMask::STATE).unwrap();
}

fn doorbells(dev: &Device) -> u64 {
    dev.traffic().stats().doorbells
}

fn write<'a>(wr_id: u64, sg: &'a [mlx5_driver::verbs::Sge], p: &Pair) -> SendWr<'a> {
    SendWr {
        opcode: WrOpcode::RdmaWrite,
        remote_addr: p.buf.iova() + 16384,
        rkey: p.rkey(),
        ..send(wr_id, sg)
    }
}

#[test]
fn post_send_refusals_are_enomem_at_the_bad_wr_and_the_rest_stays_posted() {
    let (dev, mut ctx) = open(Profile::ConnectX5);
    let p = Pair::new(&dev, &mut ctx, cap(4, 2, 0));
    assert_eq!(
        (p.cap.max_send_wr, p.cap.max_send_sge, p.cap.max_inline_data),
        (4, 2, 60)
    );
    let one = [p.sge(0, 8)];
    let three = [p.sge(0, 8), p.sge(8, 8), p.sge(16, 8)];
    // Full: the fifth of six.
    let wrs: Vec<SendWr> = (0..6).map(|i| write(i, &one, &p)).collect();
    assert_eq!(
        ctx.post_send(p.a, &wrs).unwrap_err(),
        PostSendError {
            index: 4,
            errno: Errno::ENOMEM
        }
    );
    // Alone on the full queue: the same refusal.
    let e = ctx.post_send(p.a, &[write(6, &one, &p)]).unwrap_err();
    assert_eq!((e.index, e.errno), (0, Errno::ENOMEM));
    assert_eq!(ids(&poll_n(&dev, &mut ctx, p.scq, 4)), [0, 1, 2, 3]);
    // Too many gather entries (more than asked for, though the WQE would
    // hold them), then inline data beyond max_inline_data.
    let big = [0u8; 61];
    let fits = [0u8; 60];
    let wrs = [
        write(10, &one, &p),
        write(11, &three, &p),
        write(12, &one, &p),
    ];
    assert_eq!(ctx.post_send(p.a, &wrs).unwrap_err().index, 1);
    let inline = |wr_id, data| SendWr {
        send_flags: SendFlags::SIGNALED | SendFlags::INLINE,
        inline_data: data,
        ..write(wr_id, &[], &p)
    };
    let wrs = [inline(13, &fits[..]), inline(14, &big[..])];
    let e = ctx.post_send(p.a, &wrs).unwrap_err();
    assert_eq!((e.index, e.errno), (1, Errno::ENOMEM));
    // The same refusals of a request posted alone (the facade's one-request
    // path): ENOMEM at index 0, nothing written, no doorbell.
    let before = doorbells(&dev);
    for wr in [write(15, &three, &p), inline(16, &big[..])] {
        assert_eq!(
            ctx.post_send(p.a, &[wr]).unwrap_err(),
            PostSendError {
                index: 0,
                errno: Errno::ENOMEM
            }
        );
    }
    assert_eq!(doorbells(&dev), before, "nothing rung");
    assert_eq!(ids(&poll_n(&dev, &mut ctx, p.scq, 2)), [10, 13]);
    // The bad one in the second batch of 16: the first 17 are posted.
    let p2 = Pair::new(&dev, &mut ctx, cap(32, 1, 0));
    let mut wrs: Vec<SendWr> = (0..20).map(|i| write(100 + i, &one, &p2)).collect();
    wrs[17].sg_list = &three;
    let before = doorbells(&dev);
    assert_eq!(ctx.post_send(p2.a, &wrs).unwrap_err().index, 17);
    assert_eq!(doorbells(&dev) - before, 2, "one doorbell per 16");
    let s = poll_n(&dev, &mut ctx, p2.scq, 17);
    assert_eq!(ids(&s), (100..117).collect::<Vec<_>>());
    // A stale handle.
    let gone = p2.a;
    p2.destroy(&mut ctx);
    assert_eq!(
        ctx.post_send(gone, &[write(1, &one, &p)]).unwrap_err(),
        PostSendError {
            index: 0,
            errno: Errno::EINVAL
        }
    );
    assert_eq!(ctx.stats().unmatched_cqes, 0);
    p.destroy(&mut ctx);
    close(&dev, ctx, "refusals");
}

#[test]
fn post_send_before_rts_is_enomem_and_rings_nothing() {
    let (dev, mut ctx) = open(Profile::ConnectX7);
    let p = Pair::unconnected(&dev, &mut ctx, cap(8, 1, 0));
    let one = [p.sge(0, 8)];
    let wrs = [send(1, &one)];
    let refused = |ctx: &mut Ctx, what: &str| {
        let before = doorbells(&dev);
        let e = ctx.post_send(p.a, &wrs).unwrap_err();
        assert_eq!((e.index, e.errno), (0, Errno::ENOMEM), "{what}");
        assert_eq!(doorbells(&dev), before, "{what}: nothing rung");
    };
    refused(&mut ctx, "RESET");
    // INIT, RTR: one step at a time through the helper's attributes.
    ctx.connect_loopback(p.b, p.b).unwrap();
    let ah = ctx.loopback_ah().unwrap();
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        ..QpAttr::default()
    };
    ctx.modify_qp(p.a, &init, QpAttrMask::RC_INIT).unwrap();
    refused(&mut ctx, "INIT");
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        ah_attr: ah,
        dest_qp_num: ctx.qp_num(p.b).unwrap(),
        min_rnr_timer: 12,
        ..QpAttr::default()
    };
    ctx.modify_qp(p.a, &rtr, QpAttrMask::RC_RTR).unwrap();
    refused(&mut ctx, "RTR");
    // ERR reached without RTS: still refused (rdma-core).
    to_state(&mut ctx, p.a, QpState::Err);
    refused(&mut ctx, "ERR from RTR");
    // After RESET again too.
    to_state(&mut ctx, p.a, QpState::Reset);
    refused(&mut ctx, "RESET again");
    while let Ok(ev) = ctx.get_async_event() {
        ctx.ack_async_event(&ev).unwrap();
    }
    p.destroy(&mut ctx);
    close(&dev, ctx, "before rts");
}

#[test]
fn flush_completions_carry_every_wr_id_in_order_signaled_or_not() {
    for prof in PROFILES {
        let (dev, mut ctx) = open(prof);
        let p = Pair::new(&dev, &mut ctx, cap(16, 1, 0));
        // b has no receive WQE: the first SEND waits on RNR (retried
        // forever), the rest wait behind it.
        let one = [p.sge(0, 8)];
        let mut wrs = Vec::new();
        for i in 0..6u64 {
            let mut w = if i.is_multiple_of(2) {
                send(i, &one)
            } else {
                write(i, &one, &p)
            };
            if i == 2 || i == 3 {
                w.send_flags = SendFlags(0);
            }
            wrs.push(w);
        }
        ctx.post_send(p.a, &wrs).unwrap();
        dev.advance_us(5000);
        assert!(drain(&mut ctx, p.scq).is_empty(), "{prof:?}: stuck on RNR");
        to_state(&mut ctx, p.a, QpState::Err);
        let s = poll_n(&dev, &mut ctx, p.scq, 6);
        assert_eq!(ids(&s), [0, 1, 2, 3, 4, 5], "{prof:?}");
        assert!(s.iter().all(|w| w.status == WcStatus::WrFlushErr));
        assert_eq!(
            s.iter().map(|w| w.opcode).collect::<Vec<_>>(),
            [
                WcOpcode::Send,
                WcOpcode::RdmaWrite,
                WcOpcode::Send,
                WcOpcode::RdmaWrite,
                WcOpcode::Send,
                WcOpcode::RdmaWrite
            ],
            "the posted opcode, errors too"
        );
        // Posting in ERR (after RTS) is accepted and flushed at once.
        ctx.post_send(p.a, &[send(77, &one), write(78, &one, &p)])
            .unwrap();
        let s = poll_n(&dev, &mut ctx, p.scq, 2);
        assert_eq!(ids(&s), [77, 78]);
        assert!(s.iter().all(|w| w.status == WcStatus::WrFlushErr));
        assert_eq!(ctx.qp(p.a).unwrap().outstanding_sends(), 0);
        assert_eq!(ctx.stats().unmatched_cqes, 0);
        while let Ok(ev) = ctx.get_async_event() {
            ctx.ack_async_event(&ev).unwrap();
        }
        p.destroy(&mut ctx);
        close(&dev, ctx, "flush");
    }
}

#[test]
fn unsignaled_requests_are_retired_by_the_next_signaled_one_and_sq_sig_all_signals_all() {
    let (dev, mut ctx) = open(Profile::ConnectX6Dx);
    let p = Pair::new(&dev, &mut ctx, cap(4, 1, 0));
    let one = [p.sge(0, 8)];
    for round in 0..5u64 {
        let mut wrs: Vec<SendWr> = (0..4).map(|i| write(round * 10 + i, &one, &p)).collect();
        for w in &mut wrs[..3] {
            w.send_flags = SendFlags(0);
        }
        ctx.post_send(p.a, &wrs).unwrap();
        let s = poll_n(&dev, &mut ctx, p.scq, 1);
        assert_eq!(ids(&s), [round * 10 + 3], "one completion for four");
        assert_eq!(
            ctx.qp(p.a).unwrap().outstanding_sends(),
            0,
            "all four retired"
        );
    }
    // sq_sig_all: every request completes, SIGNALED or not.
    let (cq, _) = ctx.create_cq(63).unwrap();
    let attr = mlx5_driver::verbs::QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: cap(8, 1, 0),
        sq_sig_all: true,
    };
    let (q, _) = ctx.create_qp(&attr).unwrap();
    ctx.connect_loopback(q, q).unwrap();
    // Writes into its own memory through the pair's key.
    let wrs: Vec<SendWr> = (0..5)
        .map(|i| SendWr {
            send_flags: SendFlags(0),
            ..write(i, &one, &p)
        })
        .collect();
    ctx.post_send(q, &wrs).unwrap();
    assert_eq!(ids(&poll_n(&dev, &mut ctx, cq, 5)), [0, 1, 2, 3, 4]);
    ctx.destroy_qp(q).unwrap();
    ctx.destroy_cq(cq).unwrap();
    p.destroy(&mut ctx);
    close(&dev, ctx, "unsignaled");
}

#[test]
fn completions_of_many_qps_on_one_cq_find_their_qp() {
    let (dev, mut ctx) = open(Profile::ConnectX5);
    let (scq, _) = ctx.create_cq(1023).unwrap();
    let p = Pair::new(&dev, &mut ctx, cap(8, 1, 0));
    let one = [p.sge(0, 8)];
    let mut qps = Vec::new();
    for _ in 0..12 {
        let attr = mlx5_driver::verbs::QpInitAttr {
            send_cq: scq,
            recv_cq: scq,
            srq: None,
            cap: cap(16, 1, 0),
            sq_sig_all: false,
        };
        let (q, _) = ctx.create_qp(&attr).unwrap();
        ctx.connect_loopback(q, q).unwrap();
        qps.push(q);
    }
    let mut expect: Vec<(u32, u64)> = Vec::new();
    for round in 0..6u64 {
        for (k, &q) in qps.iter().enumerate() {
            if (k as u64 + round).is_multiple_of(3) {
                continue;
            }
            let id = (k as u64) << 32 | round;
            ctx.post_send(q, &[write(id, &one, &p)]).unwrap();
            expect.push((ctx.qp_num(q).unwrap(), id));
        }
    }
    let s = poll_n(&dev, &mut ctx, scq, expect.len());
    let got: Vec<(u32, u64)> = s.iter().map(|w| (w.qp_num, w.wr_id)).collect();
    assert_eq!(got, expect);
    for q in qps {
        ctx.destroy_qp(q).unwrap();
    }
    ctx.destroy_cq(scq).unwrap();
    p.destroy(&mut ctx);
    close(&dev, ctx, "many qps");
}

#[test]
fn send_cqes_the_device_should_not_have_written_are_unmatched_and_harmless() {
    let (dev, mut ctx) = open(Profile::ConnectX5);
    let p = Pair::new(&dev, &mut ctx, cap(8, 1, 0));
    let qpn = ctx.qp_num(p.a).unwrap();
    let rcqn = ctx.cq_num(p.rcq).unwrap();
    let scqn = ctx.cq_num(p.scq).unwrap();
    // A's QPN on a CQ it does not send to; a WQE index never posted.
    dev.traffic().complete_send(rcqn, qpn, 0, 0).unwrap();
    dev.traffic().complete_send(scqn, qpn, 5, 0).unwrap();
    let bad: Vec<WorkCompletion> = drain(&mut ctx, p.rcq)
        .into_iter()
        .chain(drain(&mut ctx, p.scq))
        .collect();
    assert_eq!(bad.len(), 2);
    assert!(bad.iter().all(|w| w.status == WcStatus::GeneralErr
        && w.vendor_err == WorkCompletion::VENDOR_ERR_UNMATCHED
        && w.wr_id == 0));
    assert_eq!(ctx.stats().unmatched_cqes, 2);
    // A goes on as if nothing happened.
    let one = [p.sge(0, 8)];
    ctx.post_send(p.a, &[write(9, &one, &p)]).unwrap();
    let s = poll_n(&dev, &mut ctx, p.scq, 1);
    assert_eq!((s[0].wr_id, s[0].status), (9, WcStatus::Success));
    p.destroy(&mut ctx);
    close(&dev, ctx, "hostile");
}

#[test]
fn traffic_with_the_device_on_its_own_thread() {
    let (dev, mut ctx) = open_threaded(Profile::ConnectX6Dx);
    let p = Pair::new(&dev, &mut ctx, cap(32, 1, 16));
    let one = [p.sge(0, 64)];
    let mut next_recv = 0;
    for round in 0..20u64 {
        p.post_recv(&mut ctx, next_recv, 8);
        next_recv += 8;
        let wrs: Vec<SendWr> = (0..8).map(|i| send(round * 8 + i, &one)).collect();
        ctx.post_send(p.a, &wrs).unwrap();
        let s = poll_n(&dev, &mut ctx, p.scq, 8);
        assert_eq!(ids(&s), (round * 8..round * 8 + 8).collect::<Vec<_>>());
        let r = poll_n(&dev, &mut ctx, p.rcq, 8);
        assert_eq!(ids(&r), (round * 8..round * 8 + 8).collect::<Vec<_>>());
    }
    assert_eq!(ctx.stats().unmatched_cqes, 0);
    p.destroy(&mut ctx);
    close(&dev, ctx, "threaded");
}
