//! `ibv_modify_cq` and CQ error syndromes through the verbs facade: the
//! libibverbs/kernel error values (no command sent for any of them), one
//! completion event per `cq_count` completions of real QP traffic in both
//! execution modes, and async CQ error events that say overrun or access
//! violation.

use mlx5_tests::verbs_common::*;

use mlx5_driver::cq::CqErrorCause;
use mlx5_driver::verbs::{
    AsyncEventDetail, AsyncEventType, CqModerationCaps, Errno, EventElement, ModerateCq,
    ModifyCqAttr,
};
use mlx5_regs::layouts::{cq_error, eqe};
use mlx5_regs::{EventType, Opcode};
use mlx5_sim::{Device, Profile, Violation};
use mlx5_tests::traced_opcodes;

fn moderate(cq_count: u16, cq_period: u16) -> ModifyCqAttr {
    ModifyCqAttr {
        attr_mask: ModifyCqAttr::MODERATE,
        moderate: ModerateCq {
            cq_count,
            cq_period,
        },
    }
}

fn modify_cqs(dev: &Device) -> usize {
    traced_opcodes(dev)
        .iter()
        .filter(|&&o| o == Opcode::MODIFY_CQ.0)
        .count()
}

/// Every refusal of libibverbs + the kernel, in their order, before any
/// command; then a good call sends one MODIFY_CQ with the values.
#[test]
fn modify_cq_refusals_and_values() {
    let (dev, mut ctx) = open(Profile::ConnectX5);
    assert_eq!(
        ctx.cq_moderation_caps(),
        CqModerationCaps {
            max_cq_count: 0xffff,
            max_cq_period: 4095
        }
    );
    let (cq, _) = ctx.create_cq(63).unwrap();
    let before = modify_cqs(&dev);
    for mask in [0u32, ModifyCqAttr::RESERVED, 3, 1 << 31, u32::MAX] {
        let attr = ModifyCqAttr {
            attr_mask: mask,
            ..moderate(1, 1)
        };
        assert_eq!(
            ctx.modify_cq(cq, &attr),
            Err(Errno::EINVAL),
            "mask {mask:#x}"
        );
    }
    assert_eq!(ctx.modify_cq(cq, &moderate(1, 4096)), Err(Errno::EINVAL));
    assert_eq!(
        ctx.modify_cq(cq, &moderate(1, u16::MAX)),
        Err(Errno::EINVAL)
    );
    let (gone, _) = ctx.create_cq(3).unwrap();
    ctx.destroy_cq(gone).unwrap();
    assert_eq!(ctx.modify_cq(gone, &moderate(1, 1)), Err(Errno::EINVAL));
    assert_eq!(modify_cqs(&dev), before, "no command for a refusal");
    ctx.modify_cq(cq, &moderate(0xffff, 4095)).unwrap();
    assert_eq!(modify_cqs(&dev), before + 1);
    let q = ctx.hca().query_cq(ctx.cq(cq).unwrap()).unwrap();
    assert_eq!((q.cq_max_count, q.cq_period), (0xffff, 4095));
    ctx.modify_cq(cq, &moderate(0, 0)).unwrap();
    ctx.destroy_cq(cq).unwrap();
    close(&dev, ctx, "modify_cq refusals");
}

/// Without `cq_moderation`: `EOPNOTSUPP` before any command, zero limits.
#[test]
fn modify_cq_without_the_capability_is_eopnotsupp() {
    let dev = mlx5_tests::device(Profile::ConnectX6Dx, mlx5_sim::ExecMode::Synchronous);
    dev.caps_mut(|c| c.cq_moderation = false);
    let mut ctx = mlx5_driver::verbs::Verbs::open(mlx5_tests::bring_up(&dev));
    assert_eq!(ctx.cq_moderation_caps(), CqModerationCaps::default());
    let (cq, _) = ctx.create_cq(63).unwrap();
    let before = modify_cqs(&dev);
    assert_eq!(ctx.modify_cq(cq, &moderate(4, 10)), Err(Errno::EOPNOTSUPP));
    // The mask is checked first (libibverbs), the capability after.
    assert_eq!(
        ctx.modify_cq(
            cq,
            &ModifyCqAttr {
                attr_mask: 0,
                ..moderate(4, 10)
            }
        ),
        Err(Errno::EINVAL)
    );
    assert_eq!(modify_cqs(&dev), before);
    ctx.destroy_cq(cq).unwrap();
    close(&dev, ctx, "no cap");
}

/// Real RC traffic in loopback: with `cq_count` N on the receive CQ, one
/// completion event per N receives, re-arming after each event.
#[test]
fn one_event_per_cq_count_receives_of_real_traffic() {
    for threaded in [false, true] {
        for n in [1u16, 3, 4] {
            let (dev, mut ctx) = if threaded {
                open_threaded(Profile::ConnectX5)
            } else {
                open(Profile::ConnectX5)
            };
            let p = Pair::new(&dev, &mut ctx, cap(64, 1, 0));
            ctx.modify_cq(p.rcq, &moderate(n, 0)).unwrap();
            p.post_recv(&mut ctx, 0, 60);
            ctx.req_notify_cq(p.rcq, false).unwrap();
            let total = 5 * n as u64;
            let mut events = 0;
            for i in 0..total {
                let sg = [p.sge(0, 16)];
                ctx.post_send(p.a, &[send(1000 + i, &sg)]).unwrap();
                assert_eq!(poll_n(&dev, &mut ctx, p.scq, 1).len(), 1);
                let got = poll_n(&dev, &mut ctx, p.rcq, 1);
                assert_eq!(ids(&got), [i], "threaded {threaded} n {n}");
                let evs = cq_events(&mut ctx);
                if (i + 1) % n as u64 == 0 {
                    assert_eq!(evs, [p.rcq], "threaded {threaded} n {n}: receive {}", i + 1);
                    events += 1;
                    ctx.ack_cq_events(p.rcq, 1).unwrap();
                    ctx.req_notify_cq(p.rcq, false).unwrap();
                } else {
                    assert_eq!(evs, [], "threaded {threaded} n {n}: receive {}", i + 1);
                }
            }
            assert_eq!(events, 5);
            p.destroy(&mut ctx);
            close(&dev, ctx, &format!("threaded {threaded} n {n}"));
        }
    }
}

/// A CQ that overruns: the async event is `CqErr` and says overrun.
#[test]
fn cq_overrun_async_event_says_overrun() {
    let (dev, mut ctx) = open(Profile::ConnectX5);
    let (cq, n) = ctx.create_cq(1).unwrap();
    assert_eq!(n, 1);
    let cqn = ctx.cq_num(cq).unwrap();
    for i in 0..3u16 {
        dev.traffic().complete_send(cqn, 0x11, i, 8).unwrap();
    }
    let ev = ctx.get_async_event().unwrap();
    assert_eq!(ev.event_type, AsyncEventType::CqErr);
    assert_eq!(ev.element, EventElement::Cq(cq));
    assert_eq!(ev.detail, AsyncEventDetail::CqError(CqErrorCause::Overrun));
    assert_eq!(ctx.get_async_event(), Err(Errno::EAGAIN));
    ctx.ack_async_event(&ev).unwrap();
    ctx.destroy_cq(cq).unwrap();
    ctx.close().unwrap();
    let v = dev.violations();
    assert!(
        v.len() == 1 && matches!(v[0], Violation::CqOverrun { .. }),
        "{v:#?}"
    );
}

/// `create_cq_ex` with `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN`: the same
/// overflow raises no async event, and the device keeps writing.
#[test]
fn ignore_overrun_cq_raises_no_async_event() {
    use mlx5_driver::verbs::CqInitAttrEx;
    let (dev, mut ctx) = open(Profile::ConnectX5);
    let attr = CqInitAttrEx {
        comp_mask: CqInitAttrEx::MASK_FLAGS,
        flags: CqInitAttrEx::FLAG_IGNORE_OVERRUN,
        ..CqInitAttrEx::new(1)
    };
    let (cq, n) = ctx.create_cq_ex(&attr).unwrap();
    assert_eq!(n, 1);
    let cqn = ctx.cq_num(cq).unwrap();
    for i in 0..5u16 {
        dev.traffic().complete_send(cqn, 0x11, i, 8).unwrap();
    }
    assert_eq!(ctx.get_async_event(), Err(Errno::EAGAIN));
    let q = ctx.hca().query_cq(ctx.cq(cq).unwrap()).unwrap();
    assert_eq!((q.status, q.producer_counter), (0, 5));
    ctx.destroy_cq(cq).unwrap();
    close(&dev, ctx, "ignore overrun");
}

/// A CQ error event with syndrome 2 says access violation; other async
/// events carry no detail.
#[test]
fn cq_access_violation_async_event_says_so() {
    let (dev, mut ctx) = open(Profile::ConnectX5);
    let (cq, _) = ctx.create_cq(7).unwrap();
    let mut e = [0u8; 64];
    eqe::event_type.set(&mut e, EventType::CQ_ERROR.0).unwrap();
    let d = eqe::event_data.get_mut(&mut e);
    cq_error::cqn.set(d, ctx.cq_num(cq).unwrap()).unwrap();
    cq_error::syndrome.set(d, 2).unwrap();
    dev.traffic().raise_event(e).unwrap();
    dev.traffic()
        .raise_simple_event(EventType::PORT_CHANGE, 4)
        .unwrap();
    let a = ctx.get_async_event().unwrap();
    assert_eq!(
        a.detail,
        AsyncEventDetail::CqError(CqErrorCause::AccessViolation)
    );
    let b = ctx.get_async_event().unwrap();
    assert_eq!(b.event_type, AsyncEventType::PortActive);
    assert_eq!(b.detail, AsyncEventDetail::None);
    ctx.ack_async_event(&a).unwrap();
    ctx.ack_async_event(&b).unwrap();
    ctx.destroy_cq(cq).unwrap();
    close(&dev, ctx, "access violation");
}

/// `scqe_break_moderation_en` (not set by Linux, so built here as a raw
/// CREATE_CQ): refused without the capability with status and syndrome;
/// with it, a solicited receive raises the event at once although the
/// count is far off, while plain and error completions stay moderated.
#[test]
fn solicited_completion_breaks_moderation_only_with_scqe_break() {
    use mlx5_driver::cq::{CqModeration, CqPeriodMode, CqeSize};
    use mlx5_driver::pagelist::PageList;
    use mlx5_driver::unstable::cq::cmd::{self, CqParams};
    use mlx5_driver::{Error, Event};
    use mlx5_hal::Hal;
    use mlx5_regs::doorbell::{
        cq_arm_doorbell, cq_arm_word, uar_page_offset, CQ_ARM_NEXT, UAR_CQ_DOORBELL,
    };
    use mlx5_regs::layouts::{cqc, create_cq_in};
    use mlx5_regs::CmdStatus;

    let (dev, mut ctx) = open(Profile::ConnectX5);
    let p = Pair::unconnected(&dev, &mut ctx, cap(8, 1, 0));
    p.post_recv(&mut ctx, 0, 8);
    let srqn = ctx.srq_num(p.srq).unwrap();
    let hal = dev.hal();
    let ring = hal.alloc_dma(4096).unwrap();
    let dbr = hal.alloc_dma(64).unwrap();
    let hca = ctx.hca();
    let mut input = vec![0u8; cmd::create_cq_len(1)];
    let len = cmd::create_cq(
        &mut input,
        &CqParams {
            log_size: 6,
            cqe_size: CqeSize::B64,
            uar_page: hca.uar(),
            eqn: hca.comp_eqn(),
            dbr_addr: dbr.iova(),
            pages: PageList {
                first: ring.iova(),
                log_page_size: 0,
                count: 1,
            },
            overrun_ignore: false,
            moderation: Some(CqModeration {
                period: 0,
                max_count: 100,
                mode: CqPeriodMode::StartFromEqe,
            }),
        },
    )
    .unwrap();
    cqc::scqe_break_moderation_en
        .set(create_cq_in::cq_context.get_mut(&mut input), true)
        .unwrap();
    let mut out = [0u8; cmd::CREATE_CQ_OUT];
    dev.caps_mut(|c| c.scqe_break_moderation = false);
    assert_eq!(
        hca.exec(&input[..len], &mut out).unwrap_err(),
        Error::Command {
            opcode: Opcode::CREATE_CQ,
            op_mod: 0,
            status: CmdStatus::BAD_PARAM_ERR,
            syndrome: mlx5_sim::syndrome::CQ_SCQE_BREAK_CAP,
        }
    );
    dev.caps_mut(|c| c.scqe_break_moderation = true);
    hca.exec(&input[..len], &mut out).unwrap();
    let cqn = cmd::parse_create_cq(&out);
    let events = || {
        hca.poll_events().unwrap();
        let mut n = 0;
        while let Some(ev) = hca.next_completion() {
            n += usize::from(ev == Event::Completion { cqn });
        }
        n
    };
    hal.mmio_write64(
        uar_page_offset(hca.uar()) + UAR_CQ_DOORBELL,
        cq_arm_doorbell(cq_arm_word(0, CQ_ARM_NEXT, 0), cqn),
    );
    dev.traffic().complete_send(cqn, 0x11, 0, 8).unwrap();
    dev.traffic()
        .complete_send_error(cqn, 0x11, 1, 0x05, 0)
        .unwrap();
    dev.traffic().deliver(srqn, cqn, 0x11, b"plain").unwrap();
    assert_eq!(events(), 0, "three completions of 100, none solicited");
    dev.traffic()
        .deliver_solicited(srqn, cqn, 0x11, b"se")
        .unwrap();
    assert_eq!(events(), 1, "the solicited receive breaks moderation");
    let destroy = cmd::destroy_cq(cqn).unwrap();
    let mut dout = [0u8; cmd::DESTROY_CQ_OUT];
    hca.exec(&destroy, &mut dout).unwrap();
    p.destroy(&mut ctx);
    drop(ring);
    drop(dbr);
    close(&dev, ctx, "scqe break");
}

/// A consumer blocked on a completion channel wakes when the moderation
/// timer lets the event out (device time in synchronous mode, the device
/// thread's clock in threaded mode), not before: a shorter wait times out.
#[test]
fn blocking_channel_wait_wakes_at_the_moderation_timer() {
    use mlx5_driver::verbs::CqInitAttrEx;
    for threaded in [false, true] {
        let (dev, mut ctx) = if threaded {
            open_threaded(Profile::ConnectX5)
        } else {
            open(Profile::ConnectX5)
        };
        let ch = ctx.create_comp_channel().unwrap();
        let attr = CqInitAttrEx {
            channel: Some(ch),
            cq_context: 77,
            ..CqInitAttrEx::new(63)
        };
        let (cq, _) = ctx.create_cq_ex(&attr).unwrap();
        let cqn = ctx.cq_num(cq).unwrap();
        ctx.modify_cq(cq, &moderate(0, 4095)).unwrap();
        // The first event starts the timer (it restarts at each event);
        // t0 is taken after it, so the bounds below leave room for the
        // time a loaded machine takes between the two.
        ctx.req_notify_cq(cq, false).unwrap();
        let t_first = dev.now_ns();
        dev.traffic().complete_send(cqn, 0x11, 0, 8).unwrap();
        let ev = ctx.get_cq_event_on(ch, 1_000_000_000).unwrap();
        assert_eq!((ev.cq, ev.cq_context), (cq, 77));
        ctx.ack_cq_events(cq, 1).unwrap();
        let t0 = dev.now_ns();
        ctx.req_notify_cq(cq, false).unwrap();
        dev.traffic().complete_send(cqn, 0x11, 1, 8).unwrap();
        match ctx.get_cq_event_on(ch, 500_000) {
            Err(e) => {
                assert_eq!(
                    e,
                    Errno::ETIMEDOUT,
                    "threaded {threaded}: 500 µs into a 4.1 ms period"
                );
                let ev = ctx.get_cq_event_on(ch, 1_000_000_000).unwrap();
                assert_eq!(ev.cq, cq);
                let waited = dev.now_ns() - t0;
                assert!(
                    waited >= 2_000_000,
                    "threaded {threaded}: woke after {waited} ns of a 4.1 ms period"
                );
            }
            Ok(ev) => {
                // Threaded, the device's clock is real time: a thread kept
                // off the CPU for longer than the period (a loaded machine)
                // finds the event already out. Legitimate only if the whole
                // period since the first event, which came after t_first,
                // has passed.
                assert!(threaded, "synchronous: an event 500 µs into the period");
                assert_eq!(ev.cq, cq);
                let since = dev.now_ns() - t_first;
                assert!(
                    since >= 4_095_000,
                    "an event {since} ns after the first completion, period 4.1 ms"
                );
            }
        }
        ctx.ack_cq_events(cq, 1).unwrap();
        assert_eq!(drain(&mut ctx, cq).len(), 2);
        ctx.destroy_cq(cq).unwrap();
        ctx.destroy_comp_channel(ch).unwrap();
        close(&dev, ctx, &format!("blocking threaded {threaded}"));
    }
}
