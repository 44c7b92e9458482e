//! The verbs-compatible facade against the model: the three seed
//! scenarios end to end, `query_device`, stale handles and `close`. The
//! calls one by one, a test per semantic bullet named after the call and
//! the case, are in `verbs_cq.rs` (create, resize, destroy and poll a CQ),
//! `verbs_cq_events.rs` (completion and async events) and `verbs_srq.rs`.
//! SRQ tests run at ISSI 0 (SRQ) and ISSI 1 (RMP). Every test closes the
//! context and checks that the model holds no object, no page, saw no
//! protocol violation and no IOMMU fault (the one exception, a dead device,
//! says so).

use mlx5_driver::verbs::{
    AsyncEventType, DeviceAttr, Errno, EventElement, SrqAttrMask, SrqInitAttr, WcStatus,
    WorkCompletion,
};
use mlx5_sim::{Device, ExecMode, SimConfig};
use mlx5_tests::PROFILES;

use mlx5_tests::verbs_cq_srq_common::*;

#[test]
fn seed_1_resize_cq_100_to_2000_with_a_full_cq_polls_every_completion_in_order() {
    at_issi(1, "seed 1", |dev, ctx| {
        let (cq, cqe) = ctx.create_cq(100).unwrap();
        assert_eq!(cqe, 127);
        fill(dev, ctx, cq, 0, cqe);
        assert_eq!(ctx.resize_cq(cq, 2000).unwrap(), 2047);
        assert_eq!(ctx.cqe(cq).unwrap(), 2047);
        // More after the resize land behind the copied ones.
        fill(dev, ctx, cq, cqe, 1500);
        let got = drain(ctx, cq);
        assert_eq!(byte_lens(&got), (0..cqe + 1500).collect::<Vec<_>>());
        // Injected requester CQEs name no QP of this context: each one comes
        // out, in order, as an unmatched error completion.
        assert!(got.iter().all(|w| w.status == WcStatus::GeneralErr
            && w.vendor_err == WorkCompletion::VENDOR_ERR_UNMATCHED
            && w.qp_num == QPN));
        assert_eq!(ctx.stats().unmatched_cqes, (cqe + 1500) as u64);
        ctx.destroy_cq(cq).unwrap();
    });
}

#[test]
fn seed_2_modify_srq_limit_7_fires_after_the_4th_receive_then_again_after_rearm() {
    at_each_issi("seed 2", |issi, dev, ctx| {
        let bufs = Bufs::new(dev, ctx);
        let (cq, _) = ctx.create_cq(255).unwrap();
        let (srq, attr) = ctx.create_srq(&srq_attr(15, 1)).unwrap();
        assert_eq!(attr.max_wr, 15);
        bufs.post(ctx, srq, 0, 10).unwrap();
        set_limit(ctx, srq, 7);
        assert_eq!(ctx.query_srq(srq).unwrap().srq_limit, 7);
        for i in 1..=3 {
            deliver(dev, ctx, srq, cq, b"hello");
            assert_eq!(limit_events(ctx, srq), 0, "ISSI {issi}: receive {i}");
        }
        deliver(dev, ctx, srq, cq, b"hello");
        let evs = async_events(ctx);
        assert_eq!(
            evs,
            [event(
                AsyncEventType::SrqLimitReached,
                EventElement::Srq(srq)
            )],
            "ISSI {issi}: fires after the 4th receive"
        );
        ctx.ack_async_event(&evs[0]).unwrap();
        assert_eq!(ctx.query_srq(srq).unwrap().srq_limit, 0);
        assert_eq!(wr_ids(&drain(ctx, cq)), [0, 1, 2, 3]);
        // Post more, re-arm, see it fire again.
        bufs.post(ctx, srq, 10, 9).unwrap();
        assert_eq!(ctx.srq(srq).unwrap().outstanding(), 15);
        set_limit(ctx, srq, 12);
        deliver_n(dev, ctx, srq, cq, 3, b"x");
        assert_eq!(limit_events(ctx, srq), 0, "12 left: not below 12");
        deliver(dev, ctx, srq, cq, b"x");
        assert_eq!(limit_events(ctx, srq), 1, "ISSI {issi}: fires again");
        assert_eq!(drain(ctx, cq).len(), 4);
        ctx.destroy_srq(srq).unwrap();
        ctx.destroy_cq(cq).unwrap();
    });
}

#[test]
fn seed_3_destroy_cq_of_100_with_completions_in_it() {
    at_issi(1, "seed 3", |dev, ctx| {
        let (cq, cqe) = ctx.create_cq(100).unwrap();
        assert_eq!(cqe, 127);
        fill(dev, ctx, cq, 0, 100);
        let mut wc = [WorkCompletion::EMPTY; 10];
        assert_eq!(
            ctx.poll_cq(cq, &mut wc).unwrap(),
            10,
            "some polled, 90 left"
        );
        ctx.destroy_cq(cq).unwrap();
        assert_eq!(ctx.cqe(cq), Err(Errno::EINVAL), "handle is stale");
    });
}

#[test]
fn seed_1_and_req_notify_cq_on_every_profile_with_the_device_on_its_own_thread() {
    for profile in PROFILES {
        let dev = mlx5_tests::device(profile, ExecMode::Threaded);
        let mut ctx = open(&dev);
        let (cq, cqe) = ctx.create_cq(100).unwrap();
        fill(&dev, &ctx, cq, 0, cqe);
        assert_eq!(ctx.resize_cq(cq, 2000).unwrap(), 2047, "{profile:?}");
        fill(&dev, &ctx, cq, cqe, 100);
        expect_numbers(&mut ctx, cq, 0..cqe + 100);
        for round in 0..3 {
            ctx.req_notify_cq(cq, false).unwrap();
            dev.quiesce(); // the arm doorbell is the device thread's to run
            fill(&dev, &ctx, cq, round, 2);
            dev.quiesce();
            assert_eq!(cq_events(&mut ctx), [cq], "{profile:?} round {round}");
            ctx.ack_cq_events(cq, 1).unwrap();
            drain(&mut ctx, cq);
        }
        ctx.destroy_cq(cq).unwrap();
        close(&dev, ctx, "threaded");
    }
}

// ============================================================ query_device

#[test]
fn query_device_reports_the_attributes_mlx5_derives_and_no_srq_resize() {
    for profile in PROFILES {
        let dev = Device::new(SimConfig::profile(profile));
        let ctx = open(&dev);
        let caps = dev.caps();
        let a = ctx.query_device();
        assert_eq!(a.max_cqe, (1u32 << caps.log_max_cq_sz) - 1, "{profile:?}");
        assert_eq!(a.max_cq, 1u32 << caps.log_max_cq);
        assert_eq!(a.max_srq, 1u32 << caps.log_max_srq);
        assert_eq!(a.max_srq_wr, (1u32 << caps.log_max_srq_sz) - 1);
        assert_eq!(a.max_srq_sge, caps.max_wqe_sz_rq as u32 / 16 - 1);
        assert_eq!(a.device_cap_flags & DeviceAttr::SRQ_RESIZE, 0);
        assert_eq!(a.phys_port_cnt, caps.num_ports);
        assert_eq!(a.fw_ver, caps.fw_rev);
        close(&dev, ctx, "query_device");
    }
}

// ============================================================ handles

#[test]
fn every_call_with_a_stale_handle_is_einval_even_after_the_slot_is_reused() {
    at_each_issi("stale handles", |issi, dev, ctx| {
        let bufs = Bufs::new(dev, ctx);
        let (old_cq, _) = ctx.create_cq(15).unwrap();
        let (old_srq, _) = ctx.create_srq(&srq_attr(15, 1)).unwrap();
        ctx.destroy_cq(old_cq).unwrap();
        ctx.destroy_srq(old_srq).unwrap();
        let (cq, _) = ctx.create_cq(15).unwrap();
        let (srq, _) = ctx.create_srq(&srq_attr(15, 1)).unwrap();
        fill(dev, ctx, cq, 0, 2);
        bufs.post(ctx, srq, 0, 2).unwrap();
        let mut wc = [WorkCompletion::EMPTY; 4];
        let e = Errno::EINVAL;
        assert_eq!(ctx.poll_cq(old_cq, &mut wc).unwrap_err(), e);
        assert_eq!(ctx.resize_cq(old_cq, 100).unwrap_err(), e);
        assert_eq!(ctx.req_notify_cq(old_cq, false).unwrap_err(), e);
        assert_eq!(ctx.ack_cq_events(old_cq, 0).unwrap_err(), e);
        assert_eq!(ctx.destroy_cq(old_cq).unwrap_err(), e);
        assert_eq!(ctx.cqe(old_cq).unwrap_err(), e);
        assert_eq!(ctx.query_srq(old_srq).unwrap_err(), e);
        assert_eq!(
            ctx.modify_srq(old_srq, &limit(1), SrqAttrMask::LIMIT)
                .unwrap_err(),
            e
        );
        assert_eq!(bufs.post(ctx, old_srq, 5, 1), post_err(0, e));
        assert_eq!(ctx.destroy_srq(old_srq).unwrap_err(), e);
        assert_eq!(
            ctx.create_srq(&SrqInitAttr {
                cq: Some(old_cq),
                ..srq_attr(15, 1)
            })
            .unwrap_err(),
            e
        );
        // The new objects are untouched.
        assert_eq!(ctx.cqe(cq).unwrap(), 15);
        assert_eq!(byte_lens(&drain(ctx, cq)), [0, 1], "ISSI {issi}");
        assert_eq!(ctx.srq(srq).unwrap().outstanding(), 2);
        ctx.destroy_srq(srq).unwrap();
        ctx.destroy_cq(cq).unwrap();
    });
}

#[test]
fn close_destroys_whatever_is_left_in_dependency_order() {
    at_each_issi("close with objects", |_, dev, ctx| {
        let s = Srq::naming_cq(dev, ctx, 15);
        ctx.create_srq(&srq_attr(7, 1)).unwrap();
        s.post(ctx, 0, 3).unwrap();
        s.deliver(dev, ctx, b"left behind");
        ctx.req_notify_cq(s.cq, false).unwrap();
    });
}
