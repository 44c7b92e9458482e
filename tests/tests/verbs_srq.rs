//! The facade's SRQ calls against the model, at ISSI 0 (SRQ) and ISSI 1
//! (RMP): `create_srq`, `modify_srq` and `query_srq` (the limit event),
//! `post_srq_recv`. One test per semantic bullet, named after the call and
//! the case; every test closes the context and checks that the model is
//! clean.

use mlx5_driver::verbs::{
    AsyncEventType, Errno, EventElement, RecvWr, SrqAttr, SrqAttrMask, SrqInitAttr, WorkCompletion,
};
use mlx5_regs::{EventType, Opcode};
use mlx5_sim::Delivery;

use mlx5_tests::verbs_cq_srq_common::*;

// ============================================================ create_srq

#[test]
fn create_srq_outside_the_bounds_is_einval_and_reports_the_actual_values() {
    at_each_issi("create_srq bounds", |issi, dev, ctx| {
        let a = ctx.query_device();
        let before = dev.objects();
        for (wr, sge) in [(0, 1), (a.max_srq_wr + 1, 1), (15, a.max_srq_sge + 1)] {
            assert_eq!(
                ctx.create_srq(&srq_attr(wr, sge)).unwrap_err(),
                Errno::EINVAL,
                "ISSI {issi}: max_wr {wr} max_sge {sge}"
            );
        }
        assert_eq!(
            dev.objects().srqs + dev.objects().rmps,
            before.srqs + before.rmps
        );
        let (s1, got) = ctx.create_srq(&srq_attr(10, 2)).unwrap();
        assert_eq!(
            got,
            SrqAttr {
                max_wr: 15,
                max_sge: 3,
                srq_limit: 0
            }
        );
        let (s2, got) = ctx
            .create_srq(&srq_attr(a.max_srq_wr, a.max_srq_sge))
            .unwrap();
        assert_eq!(got.max_wr, a.max_srq_wr);
        assert!(got.max_sge >= a.max_srq_sge);
        assert_eq!(ctx.query_srq(s2).unwrap(), got);
        ctx.destroy_srq(s1).unwrap();
        ctx.destroy_srq(s2).unwrap();
    });
}

#[test]
fn create_srq_with_a_limit_does_not_arm_it() {
    at_each_issi("create_srq limit", |issi, dev, ctx| {
        let bufs = Bufs::new(dev, ctx);
        let (cq, _) = ctx.create_cq(63).unwrap();
        let (srq, got) = ctx
            .create_srq(&SrqInitAttr {
                srq_limit: 5,
                ..srq_attr(15, 1)
            })
            .unwrap();
        assert_eq!(got.srq_limit, 0);
        assert_eq!(ctx.query_srq(srq).unwrap().srq_limit, 0);
        bufs.post(ctx, srq, 0, 6).unwrap();
        deliver_n(dev, ctx, srq, cq, 6, b"x");
        assert_eq!(limit_events(ctx, srq), 0, "ISSI {issi}: never armed");
        drain(ctx, cq);
        ctx.destroy_srq(srq).unwrap();
        ctx.destroy_cq(cq).unwrap();
    });
}

#[test]
fn create_srq_at_issi0_without_a_cq_names_an_internal_cq_destroyed_at_close() {
    at_issi(0, "internal cq", |dev, ctx| {
        let base = dev.objects().cqs;
        let (s1, _) = ctx.create_srq(&srq_attr(15, 1)).unwrap();
        assert_eq!(dev.objects().cqs, base + 1, "the internal CQ");
        let (s2, _) = ctx.create_srq(&srq_attr(15, 1)).unwrap();
        assert_eq!(dev.objects().cqs, base + 1, "shared by every SRQ");
        ctx.destroy_srq(s1).unwrap();
        ctx.destroy_srq(s2).unwrap();
        assert_eq!(
            dev.objects().cqs,
            base + 1,
            "kept until close, like devr->c0"
        );
    });
    at_issi(1, "no internal cq", |dev, ctx| {
        let base = dev.objects().cqs;
        let (s, _) = ctx.create_srq(&srq_attr(15, 1)).unwrap();
        assert_eq!(dev.objects().cqs, base, "an RMP names no CQ");
        ctx.destroy_srq(s).unwrap();
    });
}

// ============================================================ modify_srq / query_srq

#[test]
fn modify_srq_limit_above_the_outstanding_count_fires_at_once() {
    for issi in [0, 1] {
        for firmware_fires in [true, false] {
            let dev = device(issi);
            dev.caps_mut(|c| c.limit_event_on_arm = firmware_fires);
            let mut ctx = open(&dev);
            let bufs = Bufs::new(&dev, &ctx);
            let (srq, _) = ctx.create_srq(&srq_attr(15, 1)).unwrap();
            bufs.post(&mut ctx, srq, 0, 3).unwrap();
            set_limit(&mut ctx, srq, 5);
            let what = format!("ISSI {issi}, firmware fires on arm: {firmware_fires}");
            assert_eq!(limit_events(&mut ctx, srq), 1, "{what}");
            assert_eq!(ctx.query_srq(srq).unwrap().srq_limit, 0, "{what}");
            assert_eq!(limit_events(&mut ctx, srq), 0, "{what}: once");
            ctx.destroy_srq(srq).unwrap();
            drop(bufs);
            close(&dev, ctx, &what);
        }
    }
}

#[test]
fn modify_srq_limit_zero_disarms_and_a_new_value_replaces_the_old() {
    at_each_issi("disarm/replace", |issi, dev, ctx| {
        let s = Srq::new(dev, ctx, 15);
        s.post(ctx, 0, 12).unwrap();
        set_limit(ctx, s.srq, 8);
        set_limit(ctx, s.srq, 0);
        assert_eq!(ctx.query_srq(s.srq).unwrap().srq_limit, 0);
        s.deliver_n(dev, ctx, 6);
        assert_eq!(s.limit_events(ctx), 0, "ISSI {issi}: disarmed");
        // 6 outstanding: arm 2, then replace with 5.
        set_limit(ctx, s.srq, 2);
        set_limit(ctx, s.srq, 5);
        assert_eq!(ctx.query_srq(s.srq).unwrap().srq_limit, 5);
        s.deliver(dev, ctx, b"x");
        assert_eq!(s.limit_events(ctx), 0, "5 left: not below 5");
        s.deliver(dev, ctx, b"x");
        assert_eq!(s.limit_events(ctx), 1, "below 5, not waiting for 2");
        drain(ctx, s.cq);
        s.destroy(ctx);
    });
}

#[test]
fn modify_srq_limit_above_capacity_max_wr_or_both_bits_is_einval_and_nothing_changes() {
    at_each_issi("modify refused", |issi, dev, ctx| {
        let s = Srq::new(dev, ctx, 15);
        s.post(ctx, 0, 10).unwrap();
        set_limit(ctx, s.srq, 4);
        let arms = || commands(dev, Opcode::ARM_RQ) + commands(dev, Opcode::MODIFY_RMP);
        let arms_before = arms();
        let bigger = SrqAttr {
            max_wr: 100,
            srq_limit: 6,
            max_sge: 1,
        };
        assert_eq!(
            ctx.modify_srq(s.srq, &limit(16), SrqAttrMask::LIMIT),
            Err(Errno::EINVAL),
            "limit above the 15 it holds"
        );
        assert_eq!(
            ctx.modify_srq(s.srq, &bigger, SrqAttrMask::MAX_WR),
            Err(Errno::EINVAL),
            "no SRQ resize on mlx5"
        );
        assert_eq!(
            ctx.modify_srq(s.srq, &bigger, SrqAttrMask::MAX_WR | SrqAttrMask::LIMIT),
            Err(Errno::EINVAL),
            "refused as a whole"
        );
        assert_eq!(
            ctx.modify_srq(s.srq, &bigger, SrqAttrMask(1 << 5)),
            Err(Errno::EINVAL)
        );
        assert_eq!(arms(), arms_before, "no command");
        assert_eq!(
            ctx.query_srq(s.srq).unwrap(),
            SrqAttr {
                max_wr: 15,
                max_sge: 1,
                srq_limit: 4
            },
            "ISSI {issi}: unchanged"
        );
        // The old limit 4 still governs: not at 6 left, at 3 left.
        s.deliver_n(dev, ctx, 4);
        assert_eq!(s.limit_events(ctx), 0);
        s.deliver_n(dev, ctx, 3);
        assert_eq!(s.limit_events(ctx), 1);
        drain(ctx, s.cq);
        s.destroy(ctx);
    });
}

#[test]
fn query_srq_reads_zero_after_the_limit_event_until_rearmed() {
    at_each_issi("query after event", |issi, dev, ctx| {
        let s = Srq::new(dev, ctx, 15);
        s.post(ctx, 0, 8).unwrap();
        set_limit(ctx, s.srq, 6);
        assert_eq!(ctx.query_srq(s.srq).unwrap().srq_limit, 6);
        s.deliver_n(dev, ctx, 3);
        assert_eq!(s.limit_events(ctx), 1);
        assert_eq!(ctx.query_srq(s.srq).unwrap().srq_limit, 0, "ISSI {issi}");
        s.deliver(dev, ctx, b"x");
        assert_eq!(s.limit_events(ctx), 0);
        assert_eq!(ctx.query_srq(s.srq).unwrap().srq_limit, 0);
        set_limit(ctx, s.srq, 3);
        assert_eq!(ctx.query_srq(s.srq).unwrap().srq_limit, 3);
        drain(ctx, s.cq);
        s.destroy(ctx);
    });
}

// ============================================================ post_srq_recv

#[test]
fn post_srq_recv_when_full_is_enomem_naming_the_request_and_earlier_ones_stay_posted() {
    at_each_issi("post full", |issi, dev, ctx| {
        let s = Srq::new(dev, ctx, 7);
        // One request per call (a path of its own), then a list.
        for id in 0..3 {
            s.post(ctx, id, 1).unwrap();
        }
        assert_eq!(
            s.post(ctx, 3, 10),
            post_err(4, Errno::ENOMEM),
            "ISSI {issi}: 3 + 4 fill the 7"
        );
        assert_eq!(
            s.post(ctx, 7, 1),
            post_err(0, Errno::ENOMEM),
            "ISSI {issi}: one request on a full SRQ"
        );
        s.deliver_n(dev, ctx, 7);
        assert_eq!(s.deliver(dev, ctx, b"x"), Delivery::Dropped);
        assert_eq!(wr_ids(&drain(ctx, s.cq)), (0..7).collect::<Vec<_>>());
        s.destroy(ctx);
    });
}

#[test]
fn post_srq_recv_with_too_many_scatter_entries_is_einval_naming_the_request() {
    at_each_issi("post sges", |issi, dev, ctx| {
        let bufs = Bufs::new(dev, ctx);
        let (srq, attr) = ctx.create_srq(&srq_attr(15, 1)).unwrap();
        assert_eq!(attr.max_sge, 1);
        let one = [bufs.sge(0)];
        let two = [bufs.sge(1), bufs.sge(2)];
        let wrs = [
            RecvWr {
                wr_id: 0,
                sges: &one,
            },
            RecvWr {
                wr_id: 1,
                sges: &two,
            },
            RecvWr {
                wr_id: 2,
                sges: &one,
            },
        ];
        assert_eq!(ctx.post_srq_recv(srq, &wrs), post_err(1, Errno::EINVAL));
        assert_eq!(ctx.srq(srq).unwrap().outstanding(), 1, "ISSI {issi}");
        // One request per call: refused alone, nothing posted.
        assert_eq!(
            ctx.post_srq_recv(srq, &wrs[1..2]),
            post_err(0, Errno::EINVAL)
        );
        assert_eq!(ctx.srq(srq).unwrap().outstanding(), 1, "ISSI {issi}");
        ctx.post_srq_recv(srq, &wrs[2..]).unwrap();
        assert_eq!(ctx.srq(srq).unwrap().outstanding(), 2, "ISSI {issi}");
        ctx.destroy_srq(srq).unwrap();
    });
}

#[test]
fn post_srq_recv_slot_frees_only_when_its_completion_is_polled() {
    at_each_issi("slot frees on poll", |issi, dev, ctx| {
        let s = Srq::new(dev, ctx, 3);
        s.post(ctx, 0, 3).unwrap();
        s.deliver(dev, ctx, b"a");
        s.deliver(dev, ctx, b"b");
        // Consumed by the device, completions not polled: still full.
        assert_eq!(
            s.post(ctx, 3, 1).unwrap_err().errno,
            Errno::ENOMEM,
            "ISSI {issi}"
        );
        let mut wc = [WorkCompletion::EMPTY; 1];
        assert_eq!(ctx.poll_cq(s.cq, &mut wc).unwrap(), 1);
        assert_eq!(wc[0].wr_id, 0);
        s.post(ctx, 3, 1).unwrap();
        assert_eq!(s.post(ctx, 4, 1).unwrap_err().errno, Errno::ENOMEM);
        assert_eq!(wr_ids(&drain(ctx, s.cq)), [1]);
        s.post(ctx, 4, 1).unwrap();
        s.destroy(ctx);
    });
}

#[test]
fn post_srq_recv_on_an_srq_in_error_is_eio() {
    at_each_issi("post eio", |issi, dev, ctx| {
        let bufs = Bufs::new(dev, ctx);
        let (srq, _) = ctx.create_srq(&srq_attr(15, 1)).unwrap();
        let srqn = ctx.srq_num(srq).unwrap();
        dev.traffic()
            .raise_event(eqe_queue(EventType::SRQ_CATAS_ERROR, srqn))
            .unwrap();
        let evs = async_events(ctx);
        assert_eq!(evs, [event(AsyncEventType::SrqErr, EventElement::Srq(srq))]);
        assert_eq!(
            bufs.post(ctx, srq, 0, 2),
            post_err(0, Errno::EIO),
            "ISSI {issi}"
        );
        assert_eq!(ctx.destroy_srq(srq), Err(Errno::EBUSY), "event not acked");
        ack_all(ctx, &evs);
        ctx.destroy_srq(srq).unwrap();
    });
}
