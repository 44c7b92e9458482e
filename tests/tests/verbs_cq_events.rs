//! The facade's events against the model: completion events
//! (`req_notify_cq`, `get_cq_event`, `ack_cq_events`), async events
//! (`get_async_event`, `ack_async_event`) and what an unacknowledged event
//! does to `destroy_cq` and `destroy_srq`. One test per semantic bullet,
//! named after the call and the case; every test closes the context and
//! checks that the model is clean (the one exception, a dead device, says
//! so).

use mlx5_driver::cq::CqErrorCause;
use mlx5_driver::verbs::{
    AsyncEvent, AsyncEventDetail, AsyncEventType, CqHandle, Errno, EventElement, WorkCompletion,
};
use mlx5_regs::EventType;

use mlx5_tests::verbs_cq_srq_common::*;

// ============================================================ completion events

#[test]
fn req_notify_cq_gives_one_event_per_arm() {
    at_issi(1, "one per arm", |dev, ctx| {
        let (cq, _) = ctx.create_cq(63).unwrap();
        fill(dev, ctx, cq, 0, 3);
        assert!(cq_events(ctx).is_empty(), "not armed: no event");
        // Arming with completions past the consumer index fires at once (the
        // arm doorbell carries the index); start from an empty CQ.
        drain(ctx, cq);
        for round in 0..5u32 {
            ctx.req_notify_cq(cq, false).unwrap();
            ctx.req_notify_cq(cq, false).unwrap(); // twice before the event: still one
            fill(dev, ctx, cq, 3 + round * 4, 4);
            assert_eq!(cq_events(ctx), [cq], "round {round}");
            ctx.ack_cq_events(cq, 1).unwrap();
            drain(ctx, cq);
        }
        fill(dev, ctx, cq, 100, 1);
        assert!(cq_events(ctx).is_empty(), "no event without an arm");
        assert_eq!(ctx.get_cq_event().unwrap_err(), Errno::EAGAIN);
        assert!(dev.violations().is_empty(), "{:?}", dev.violations());
        ctx.destroy_cq(cq).unwrap();
    });
}

#[test]
fn req_notify_cq_solicited_only_waits_for_a_solicited_or_error_completion() {
    at_each_issi("solicited", |issi, dev, ctx| {
        let s = Srq::new(dev, ctx, 31);
        s.post(ctx, 0, 10).unwrap();
        ctx.req_notify_cq(s.cq, true).unwrap();
        s.deliver(dev, ctx, b"plain");
        s.deliver(dev, ctx, b"plain");
        assert!(cq_events(ctx).is_empty(), "ISSI {issi}");
        let cqn = ctx.cq_num(s.cq).unwrap();
        dev.traffic()
            .deliver_solicited(ctx.srq_num(s.srq).unwrap(), cqn, QPN, b"s")
            .unwrap();
        assert_eq!(cq_events(ctx), [s.cq]);
        // An error completion wakes a solicited arm too.
        ctx.req_notify_cq(s.cq, true).unwrap();
        dev.traffic()
            .complete_send_error(cqn, QPN, 9, 0x05, 0x33)
            .unwrap();
        assert_eq!(cq_events(ctx), [s.cq]);
        ctx.ack_cq_events(s.cq, 2).unwrap();
        let got = drain(ctx, s.cq);
        assert_eq!(got.len(), 4);
        // (Injected: it names no QP of this context, so it is unmatched;
        // verbs_qp.rs has the real thing.)
        assert_eq!(got[3].vendor_err, WorkCompletion::VENDOR_ERR_UNMATCHED);
        s.destroy(ctx);
    });
}

#[test]
fn ack_cq_events_counts_like_libibverbs() {
    at_issi(1, "ack counting", |dev, ctx| {
        let (a, _) = ctx.create_cq(63).unwrap();
        let (b, _) = ctx.create_cq(63).unwrap();
        for i in 0..3 {
            ctx.req_notify_cq(a, false).unwrap();
            fill(dev, ctx, a, i, 1);
            assert_eq!(ctx.get_cq_event().unwrap(), a);
        }
        ctx.req_notify_cq(b, false).unwrap();
        fill(dev, ctx, b, 0, 1);
        assert_eq!(ctx.get_cq_event().unwrap(), b);
        // Acknowledgements are per CQ and may be batched.
        ctx.ack_cq_events(a, 2).unwrap();
        assert_eq!(ctx.destroy_cq(a).unwrap_err(), Errno::EBUSY, "2 of 3");
        assert_eq!(
            ctx.ack_cq_events(a, 2).unwrap_err(),
            Errno::EINVAL,
            "only 1 left"
        );
        ctx.ack_cq_events(a, 0).unwrap();
        ctx.ack_cq_events(a, 1).unwrap();
        ctx.destroy_cq(a).unwrap();
        assert_eq!(ctx.destroy_cq(b).unwrap_err(), Errno::EBUSY);
        ctx.ack_cq_events(b, 1).unwrap();
        ctx.destroy_cq(b).unwrap();
    });
}

#[test]
fn get_cq_event_returns_events_of_several_cqs_oldest_first() {
    at_issi(1, "several cqs", |dev, ctx| {
        let cqs: Vec<CqHandle> = (0..4).map(|_| ctx.create_cq(15).unwrap().0).collect();
        for &cq in &cqs {
            ctx.req_notify_cq(cq, false).unwrap();
        }
        for &cq in cqs.iter().rev() {
            fill(dev, ctx, cq, 0, 1);
        }
        let got = cq_events(ctx);
        assert_eq!(got, cqs.iter().rev().copied().collect::<Vec<_>>());
        for &cq in &cqs {
            ctx.ack_cq_events(cq, 1).unwrap();
            ctx.destroy_cq(cq).unwrap();
        }
    });
}

// ============================================================ events and destroy

#[test]
fn destroy_cq_with_a_read_unacknowledged_completion_event_is_ebusy_until_acked() {
    at_issi(1, "destroy unacked", |dev, ctx| {
        let (cq, _) = ctx.create_cq(15).unwrap();
        ctx.req_notify_cq(cq, false).unwrap();
        fill(dev, ctx, cq, 0, 1);
        assert_eq!(ctx.get_cq_event().unwrap(), cq);
        assert_eq!(ctx.destroy_cq(cq).unwrap_err(), Errno::EBUSY);
        // Nothing changed: the completion is still there, the CQ re-arms.
        expect_numbers(ctx, cq, [0]);
        ctx.req_notify_cq(cq, false).unwrap();
        fill(dev, ctx, cq, 1, 1);
        assert_eq!(cq_events(ctx), [cq]);
        ctx.ack_cq_events(cq, 2).unwrap();
        ctx.destroy_cq(cq).unwrap();
    });
}

#[test]
fn destroy_cq_with_an_unacknowledged_cq_error_event_is_ebusy() {
    at_issi(1, "destroy cq error", |dev, ctx| {
        let (cq, _) = ctx.create_cq(15).unwrap();
        dev.traffic()
            .raise_event(eqe_cq_error(ctx.cq_num(cq).unwrap()))
            .unwrap();
        let evs = async_events(ctx);
        assert_eq!(
            evs,
            [AsyncEvent {
                event_type: AsyncEventType::CqErr,
                element: EventElement::Cq(cq),
                // The injected EQE says syndrome 1.
                detail: AsyncEventDetail::CqError(CqErrorCause::Overrun),
            }]
        );
        assert_eq!(ctx.destroy_cq(cq).unwrap_err(), Errno::EBUSY);
        ctx.ack_async_event(&evs[0]).unwrap();
        ctx.destroy_cq(cq).unwrap();
    });
}

#[test]
fn destroy_cq_discards_its_unread_events() {
    at_issi(1, "destroy discards", |dev, ctx| {
        let (a, _) = ctx.create_cq(15).unwrap();
        let (b, _) = ctx.create_cq(15).unwrap();
        ctx.req_notify_cq(a, false).unwrap();
        ctx.req_notify_cq(b, false).unwrap();
        fill(dev, ctx, a, 0, 1);
        fill(dev, ctx, b, 0, 1);
        dev.traffic()
            .raise_event(eqe_cq_error(ctx.cq_num(a).unwrap()))
            .unwrap();
        // Pull the events off the EQ without reading them (b is emptied
        // first: an arm over unpolled completions fires at once).
        drain(ctx, b);
        ctx.req_notify_cq(b, false).unwrap();
        ctx.destroy_cq(a).unwrap();
        assert_eq!(cq_events(ctx), [b], "a's event went with it");
        assert!(async_events(ctx).is_empty(), "so did its CQ error");
        ctx.ack_cq_events(b, 1).unwrap();
        ctx.destroy_cq(b).unwrap();
    });
}

#[test]
fn destroy_srq_with_an_unacknowledged_limit_event_is_ebusy_and_unread_ones_are_discarded() {
    at_each_issi("destroy_srq events", |issi, dev, ctx| {
        let bufs = Bufs::new(dev, ctx);
        let (a, _) = ctx.create_srq(&srq_attr(15, 1)).unwrap();
        let (b, _) = ctx.create_srq(&srq_attr(15, 1)).unwrap();
        bufs.post(ctx, a, 0, 1).unwrap();
        bufs.post(ctx, b, 10, 1).unwrap();
        set_limit(ctx, a, 5);
        set_limit(ctx, b, 5);
        let ev = ctx.get_async_event().unwrap();
        assert_eq!(ev.element, EventElement::Srq(a), "ISSI {issi}");
        assert_eq!(ctx.destroy_srq(a), Err(Errno::EBUSY));
        assert_eq!(ctx.srq(a).unwrap().outstanding(), 1, "a untouched");
        ctx.ack_async_event(&ev).unwrap();
        assert_eq!(ctx.ack_async_event(&ev), Err(Errno::EINVAL), "acked twice");
        ctx.destroy_srq(a).unwrap();
        // b's event is unread: it goes with b.
        ctx.destroy_srq(b).unwrap();
        assert!(async_events(ctx).is_empty());
    });
}

// ============================================================ async events

#[test]
fn get_async_event_reports_each_kind_and_each_must_be_acknowledged() {
    at_each_issi("async kinds", |issi, dev, ctx| {
        let (cq, _) = ctx.create_cq(15).unwrap();
        let (srq, _) = ctx.create_srq(&srq_attr(15, 1)).unwrap();
        let srqn = ctx.srq_num(srq).unwrap();
        let t = dev.traffic();
        t.raise_event(eqe_queue(EventType::SRQ_RQ_LIMIT, srqn))
            .unwrap();
        t.raise_event(eqe_queue(EventType::SRQ_CATAS_ERROR, srqn))
            .unwrap();
        t.raise_event(eqe_cq_error(ctx.cq_num(cq).unwrap()))
            .unwrap();
        // Last WQE reached names the QP (queue type 0), not the SRQ.
        t.raise_event(eqe_qp(EventType::SRQ_LAST_WQE, 0x321))
            .unwrap();
        t.raise_event(eqe_port(1, 4)).unwrap();
        t.raise_event(eqe_port(1, 1)).unwrap();
        // About nobody (no CQ 0xabcd; QP 0x321 above is not a QP of this
        // context; type 0x13 about an RQ object, which the facade never
        // makes): counted, not reported.
        t.raise_event(eqe_cq_error(0xabcd)).unwrap();
        t.raise_event(eqe_queue(EventType::SRQ_LAST_WQE, 0x321))
            .unwrap();
        let evs = async_events(ctx);
        use AsyncEventType as T;
        assert_eq!(
            evs.iter()
                .map(|e| (e.event_type, e.element))
                .collect::<Vec<_>>(),
            [
                (T::SrqLimitReached, EventElement::Srq(srq)),
                (T::SrqErr, EventElement::Srq(srq)),
                (T::CqErr, EventElement::Cq(cq)),
                (T::PortActive, EventElement::Port(1)),
                (T::PortErr, EventElement::Port(1)),
            ],
            "ISSI {issi}"
        );
        assert_eq!(ctx.stats().unroutable_events, 3);
        assert_eq!(ctx.destroy_srq(srq), Err(Errno::EBUSY));
        assert_eq!(ctx.destroy_cq(cq), Err(Errno::EBUSY));
        ack_all(ctx, &evs);
        for ev in &evs {
            assert_eq!(
                ctx.ack_async_event(ev),
                Err(Errno::EINVAL),
                "{ev:?} acked twice"
            );
        }
        ctx.destroy_srq(srq).unwrap();
        ctx.destroy_cq(cq).unwrap();
    });
}

#[test]
fn get_async_event_reports_device_fatal_once_and_calls_then_fail_with_eio() {
    let dev = device(1);
    let mut ctx = open(&dev);
    let (cq, _) = ctx.create_cq(15).unwrap();
    dev.inject().fatal(0x07);
    let ev = ctx.get_async_event().unwrap();
    assert_eq!(ev, event(AsyncEventType::DeviceFatal, EventElement::Device));
    ctx.ack_async_event(&ev).unwrap();
    assert_eq!(
        ctx.get_async_event(),
        Err(Errno::EIO),
        "once; then the device is gone"
    );
    assert_eq!(ctx.create_cq(15).unwrap_err(), Errno::EIO);
    assert_eq!(ctx.req_notify_cq(cq, false), Err(Errno::EIO));
    assert_eq!(ctx.close().unwrap_err(), Errno::EIO);
    // The one test that cannot end clean: a dead device answers no
    // command, so its objects and pages are simply abandoned.
    assert!(dev.is_fatal());
}

#[test]
fn get_async_event_with_nothing_pending_is_eagain_and_acking_an_unread_event_is_einval() {
    at_issi(1, "eagain", |_, ctx| {
        assert_eq!(ctx.get_async_event(), Err(Errno::EAGAIN));
        let fake = event(AsyncEventType::PortActive, EventElement::Port(1));
        assert_eq!(ctx.ack_async_event(&fake), Err(Errno::EINVAL));
    });
}
