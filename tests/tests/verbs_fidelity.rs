//! The facade where the device's behaviour decides: a dead device (every
//! destroy succeeds and frees its object and handle, posts fail with `EIO`
//! at the first request), reused object numbers (a destroyed CQ's pending
//! event never reaches the CQ that gets its number), and the arm rule (a
//! solicited request does not downgrade a next-completion request).

use mlx5_tests::verbs_common::*;

use mlx5_driver::verbs::{AsyncEventType, Errno, PostSendError, RecvWr, SrqInitAttr};
use mlx5_sim::{Profile, Violation};
use mlx5_tests::PROFILES;

#[test]
fn on_a_dead_device_destroys_free_everything_and_posts_fail_with_eio() {
    for p in PROFILES {
        let (dev, mut ctx) = open(p);
        let pair = Pair::new(&dev, &mut ctx, cap(8, 1, 0));
        pair.post_recv(&mut ctx, 0, 4);
        let one = [pair.sge(0, 32)];
        ctx.post_send(pair.a, &[send(1, &one)]).unwrap();
        assert_eq!(poll_n(&dev, &mut ctx, pair.scq, 1).len(), 1, "{p:?}");

        dev.inject().fatal(0x08);
        let ev = ctx.get_async_event().unwrap();
        assert_eq!(ev.event_type, AsyncEventType::DeviceFatal);
        ctx.ack_async_event(&ev).unwrap();
        // Posts: nothing posted, the first request is bad_wr, EIO.
        let wrs = [send(2, &one), send(3, &one)];
        assert_eq!(
            ctx.post_send(pair.a, &wrs).unwrap_err(),
            PostSendError {
                index: 0,
                errno: Errno::EIO
            },
            "{p:?}"
        );
        let e = ctx.post_send(pair.a, &wrs[..1]).unwrap_err();
        assert_eq!((e.index, e.errno), (0, Errno::EIO), "one request, {p:?}");
        let rsge = [pair.sge(RECV_AREA, 64)];
        let e = ctx
            .post_srq_recv(
                pair.srq,
                &[RecvWr {
                    wr_id: 9,
                    sges: &rsge,
                }],
            )
            .unwrap_err();
        assert_eq!((e.index, e.errno), (0, Errno::EIO), "{p:?}");
        // Creating needs the device: EIO.
        assert_eq!(ctx.create_cq(7).unwrap_err(), Errno::EIO);
        // Destroying does not: every object and its handle are freed now,
        // not kept until close.
        let (a, srq, scq) = (pair.a, pair.srq, pair.scq);
        pair.destroy(&mut ctx);
        assert_eq!(ctx.destroy_qp(a).unwrap_err(), Errno::EINVAL, "handle gone");
        assert_eq!(ctx.destroy_srq(srq).unwrap_err(), Errno::EINVAL);
        assert_eq!(ctx.destroy_cq(scq).unwrap_err(), Errno::EINVAL);
        // close reports the death and frees the rest.
        assert_eq!(ctx.close().unwrap_err(), Errno::EIO);
        assert_eq!(dev.dma_bytes_live(), 0, "{p:?}: memory left");
        assert!(
            !dev.violations()
                .iter()
                .any(|v| matches!(v, Violation::FreedWhileInUse(_))),
            "{p:?}"
        );
    }
}

/// A CQ destroyed with a completion event still on the EQ: the CQ that
/// reuses its number never sees that event.
#[test]
fn a_destroyed_cqs_event_never_reaches_the_cq_reusing_its_number() {
    let (dev, mut ctx) = open(Profile::ConnectX6Dx);
    let (old, _) = ctx.create_cq(15).unwrap();
    let cqn = ctx.cq_num(old).unwrap();
    ctx.req_notify_cq(old, false).unwrap();
    dev.traffic().complete_send(cqn, 0x42, 0, 8).unwrap();
    // The event is on the EQ, unread: destroying is allowed.
    ctx.destroy_cq(old).unwrap();
    let (new, _) = ctx.create_cq(15).unwrap();
    assert_eq!(ctx.cq_num(new).unwrap(), cqn, "the model reuses the number");
    assert_eq!(ctx.get_cq_event().unwrap_err(), Errno::EAGAIN);
    // The new CQ's own event still comes, once.
    ctx.req_notify_cq(new, false).unwrap();
    dev.traffic().complete_send(cqn, 0x42, 0, 8).unwrap();
    assert_eq!(ctx.get_cq_event().unwrap(), new);
    ctx.ack_cq_events(new, 1).unwrap();
    assert_eq!(ctx.get_cq_event().unwrap_err(), Errno::EAGAIN);
    assert_eq!(drain(&mut ctx, new).len(), 1);
    // SRQ: a limit event pending at destroy, and its completions left in
    // a CQ, never reach the SRQ that reuses the number.
    let attr = SrqInitAttr {
        max_wr: 15,
        max_sge: 1,
        srq_limit: 0,
        cq: Some(new),
    };
    let (s1, _) = ctx.create_srq(&attr).unwrap();
    let srqn = ctx.srq_num(s1).unwrap();
    let buf = mlx5_hal::Hal::alloc_dma(&dev.hal(), 4096).unwrap();
    let sge = [mlx5_driver::verbs::Sge {
        addr: buf.iova(),
        length: 256,
        lkey: ctx.hca().default_lkey(),
    }];
    ctx.post_srq_recv(
        s1,
        &[RecvWr {
            wr_id: 5,
            sges: &sge,
        }],
    )
    .unwrap();
    dev.traffic().deliver(srqn, cqn, 0x99, b"old").unwrap();
    ctx.modify_srq(
        s1,
        &mlx5_driver::verbs::SrqAttr {
            max_wr: 0,
            max_sge: 0,
            srq_limit: 4,
        },
        mlx5_driver::verbs::SrqAttrMask::LIMIT,
    )
    .unwrap();
    ctx.destroy_srq(s1).unwrap();
    let (s2, _) = ctx.create_srq(&attr).unwrap();
    assert_eq!(ctx.srq_num(s2).unwrap(), srqn, "number reused");
    assert_eq!(ctx.get_async_event().unwrap_err(), Errno::EAGAIN);
    assert!(
        drain(&mut ctx, new).is_empty(),
        "the old SRQ's completion is gone"
    );
    ctx.destroy_srq(s2).unwrap();
    ctx.destroy_cq(new).unwrap();
    drop(buf);
    close(&dev, ctx, "stale events");
}

/// `req_notify_cq(false)` then `req_notify_cq(true)` before the event:
/// still armed for the next completion (Linux `mlx5_ib_arm_cq`).
#[test]
fn a_solicited_request_does_not_downgrade_a_next_completion_request() {
    let (dev, mut ctx) = open(Profile::ConnectX5);
    let (cq, _) = ctx.create_cq(15).unwrap();
    let cqn = ctx.cq_num(cq).unwrap();
    ctx.req_notify_cq(cq, false).unwrap();
    ctx.req_notify_cq(cq, true).unwrap();
    dev.traffic().complete_send(cqn, 0x42, 0, 8).unwrap();
    assert_eq!(ctx.get_cq_event().unwrap(), cq, "a plain completion fires");
    ctx.ack_cq_events(cq, 1).unwrap();
    assert_eq!(drain(&mut ctx, cq).len(), 1);
    // After the event a solicited-only request waits for a solicited one.
    ctx.req_notify_cq(cq, true).unwrap();
    dev.traffic().complete_send(cqn, 0x42, 1, 8).unwrap();
    assert_eq!(ctx.get_cq_event().unwrap_err(), Errno::EAGAIN);
    assert_eq!(drain(&mut ctx, cq).len(), 1);
    ctx.destroy_cq(cq).unwrap();
    close(&dev, ctx, "arm rule");
}
