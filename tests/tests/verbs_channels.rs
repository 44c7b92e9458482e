//! Completion vectors, interrupts and completion channels against the
//! model: a consumer thread blocking on channels while a producer thread
//! writes completions through the model (interrupts spread over vectors,
//! one shared vector, or none: the polling fallback), channels with and
//! without CQs, `create_cq_ex`'s checks, bounded blocking waits, and
//! bring-up/teardown with several completion EQs (also in place).

use std::thread;
use std::time::{Duration, Instant};

use mlx5_driver::verbs::{ChannelHandle, CqHandle, CqInitAttrEx, Errno, Verbs, MAX_COMP_CHANNELS};
use mlx5_driver::{Hca, HcaConfig, MAX_COMP_VECTORS};
use mlx5_hal::Hal;
use mlx5_regs::layouts::{cqc, create_cq_in};
use mlx5_regs::Opcode;
use mlx5_sim::{Device, ExecMode, Profile, SimConfig};
use mlx5_tests::{assert_clean, config, Rng, MODES};

use mlx5_tests::verbs_common::{close, drain, Ctx};

const QPN: u32 = 0x4d;
const SECOND: u64 = 1_000_000_000;

fn device(mode: ExecMode, irq_vectors: u16) -> Device {
    let cfg = SimConfig {
        irq_vectors,
        ..SimConfig::default()
    };
    Device::new(match mode {
        ExecMode::Synchronous => cfg,
        ExecMode::Threaded => cfg.threaded(),
    })
}

fn open(dev: &Device, comp_vectors: u8) -> Ctx {
    let cfg = HcaConfig {
        comp_vectors,
        ..config()
    };
    match Hca::bring_up(dev.hal(), cfg) {
        Ok(h) => Verbs::open(h),
        Err(e) => panic!("bring-up failed: {e}"),
    }
}

fn cq_on(ctx: &mut Ctx, ch: Option<ChannelHandle>, vector: u32, cq_context: u64) -> CqHandle {
    let attr = CqInitAttrEx {
        cq_context,
        channel: ch,
        comp_vector: vector,
        ..CqInitAttrEx::new(1023)
    };
    ctx.create_cq_ex(&attr).expect("create_cq_ex").0
}

/// What one consumer saw per CQ.
#[derive(Debug, Default, Clone, Copy)]
struct Seen {
    completions: u64,
    events: u64,
    arms: u64,
    empty_events: u64,
}

/// Block on `ch` until `want` completions of `cqs` were polled: each event
/// is acknowledged, the CQ re-armed, then drained (the verbs loop). A lost
/// wake-up shows as ETIMEDOUT.
fn consume(
    ctx: &mut Ctx,
    ch: ChannelHandle,
    cqs: &[(CqHandle, u64)],
    seen: &mut [Seen],
    want: u64,
) {
    while seen.iter().map(|s| s.completions).sum::<u64>() < want {
        let ev = match ctx.get_cq_event_on(ch, 20 * SECOND) {
            Ok(ev) => ev,
            Err(e) => panic!("lost wake-up: {e} after {seen:?}"),
        };
        let i = cqs
            .iter()
            .position(|&(h, _)| h == ev.cq)
            .expect("an event of a CQ of this channel");
        assert_eq!(ev.cq_context, cqs[i].1, "cq_context comes back");
        seen[i].events += 1;
        ctx.ack_cq_events(ev.cq, 1).unwrap();
        ctx.req_notify_cq(ev.cq, false).unwrap();
        seen[i].arms += 1;
        let n = drain(ctx, ev.cq).len() as u64;
        if n == 0 {
            seen[i].empty_events += 1;
        }
        seen[i].completions += n;
    }
}

/// Read what is left on `ch` without blocking (events of arms whose
/// completions were already drained).
fn sweep(ctx: &mut Ctx, ch: ChannelHandle, cqs: &[(CqHandle, u64)], seen: &mut [Seen]) {
    loop {
        match ctx.get_cq_event_on(ch, 0) {
            Ok(ev) => {
                let i = cqs.iter().position(|&(h, _)| h == ev.cq).unwrap();
                seen[i].events += 1;
                seen[i].empty_events += 1;
                ctx.ack_cq_events(ev.cq, 1).unwrap();
            }
            Err(e) => {
                assert_eq!(e, Errno::EAGAIN);
                return;
            }
        }
    }
}

/// The check the issue names: a consumer thread blocks on channel 1 (two
/// CQs, vector 0) and then channel 2 (one CQ, vector 1) while a producer
/// thread writes completions through the model's side door in a random
/// interleaving. Every completion is polled, every wait ends with an
/// event (no lost wake-up), and no CQ gets more events than it was armed
/// (one event per arm, the only "extra" event verbs allows being one whose
/// completions an earlier drain already took).
fn threaded_channels(mode: ExecMode, irqs: u16, seed: u64) {
    let what = format!("{mode:?}, {irqs} vectors");
    let dev = device(mode, irqs);
    // Boxed: the context moves to the consumer thread and back.
    let mut ctx = Box::new(open(&dev, 2));
    assert_eq!(ctx.query_device().num_comp_vectors, 2, "{what}");
    let ch1 = ctx.create_comp_channel().unwrap();
    let ch2 = ctx.create_comp_channel().unwrap();
    let a = cq_on(&mut ctx, Some(ch1), 0, 0xa);
    let b = cq_on(&mut ctx, Some(ch1), 0, 0xb);
    let c = cq_on(&mut ctx, Some(ch2), 1, 0xc);
    assert_eq!(ctx.cq(c).unwrap().eqn(), ctx.hca().comp_eqn_of(1).unwrap());
    assert_ne!(ctx.cq(a).unwrap().eqn(), ctx.cq(c).unwrap().eqn());
    for cq in [a, b, c] {
        ctx.req_notify_cq(cq, false).unwrap();
    }
    let cqns = [a, b, c].map(|h| ctx.cq_num(h).unwrap());
    let mut rng = Rng(seed);
    let plan: Vec<usize> = (0..600).map(|_| (rng.next() % 3) as usize).collect();
    let wanted: [u64; 3] = [0, 1, 2].map(|w| plan.iter().filter(|&&x| x == w).count() as u64);
    let want = |w: usize| wanted[w];
    let (want_ab, want_c) = (want(0) + want(1), want(2));

    let producer_dev = dev.clone();
    let producer = thread::spawn(move || {
        for (i, &w) in plan.iter().enumerate() {
            producer_dev
                .traffic()
                .complete_send(cqns[w], QPN, i as u16, i as u32)
                .expect("complete_send");
            if i % 5 == 0 {
                thread::sleep(Duration::from_micros(30));
            }
        }
    });
    let consumer_dev = dev.clone();
    let consumer = thread::Builder::new().stack_size(8 << 20).spawn(move || {
        let mut s1 = [Seen::default(); 2];
        let mut s2 = [Seen::default(); 1];
        for s in s1.iter_mut().chain(s2.iter_mut()) {
            s.arms = 1;
        }
        let on1 = [(a, 0xa), (b, 0xb)];
        let on2 = [(c, 0xc)];
        consume(&mut ctx, ch1, &on1, &mut s1, want_ab);
        consume(&mut ctx, ch2, &on2, &mut s2, want_c);
        // The last arms' doorbells reach the device (threaded mode) before
        // what they fired is read.
        consumer_dev.quiesce();
        sweep(&mut ctx, ch1, &on1, &mut s1);
        sweep(&mut ctx, ch2, &on2, &mut s2);
        (ctx, [s1[0], s1[1], s2[0]])
    });
    let consumer = consumer.expect("spawn consumer");
    producer.join().expect("producer");
    let (mut ctx, seen) = consumer.join().expect("consumer");
    for (w, s) in seen.iter().enumerate() {
        assert_eq!(
            s.completions,
            want(w),
            "{what}: CQ {w} completions {seen:?}"
        );
        assert!(s.events >= 1, "{what}: CQ {w} got no event");
        assert!(
            s.events <= s.arms && s.arms - s.events <= 1,
            "{what}: CQ {w}: one event per arm at most, every fired arm reported: {s:?}"
        );
    }
    // Interrupts went to the vectors of the EQs: completion EQ 0 on vector
    // 1, completion EQ 1 on vector 2 (async on 0); one shared vector; or
    // none delivered.
    let ev = |w: usize| seen[w].events;
    match irqs {
        0 => {
            assert_eq!(ctx.hca().irq_vector_mask(), 0, "{what}");
            assert!(dev.interrupts_undelivered() > 0, "{what}");
        }
        1 => {
            assert_eq!(ctx.hca().irq_vector_mask(), 1, "{what}");
            // Every EQ shares vector 0: at most one interrupt per EQE.
            let n = dev.interrupts(0);
            let eqes = ev(0) + ev(1) + ev(2) + ctx.hca().eqes_consumed().0;
            assert!(n >= 1 && n <= eqes, "{what}: {n} interrupts, {eqes} EQEs");
        }
        _ => {
            assert_eq!(ctx.hca().irq_vector_mask(), 0b111, "{what}");
            let (v1, v2) = (dev.interrupts(1), dev.interrupts(2));
            assert!(v1 >= 1 && v1 <= ev(0) + ev(1), "{what}: vector 1 {v1}");
            assert!(v2 >= 1 && v2 <= ev(2), "{what}: vector 2 {v2}");
            assert_eq!(dev.interrupts(3), 0, "{what}");
        }
    }
    for cq in [a, b, c] {
        ctx.destroy_cq(cq).unwrap();
    }
    ctx.destroy_comp_channel(ch1).unwrap();
    ctx.destroy_comp_channel(ch2).unwrap();
    close(&dev, *ctx, &what);
}

#[test]
fn consumer_thread_wakes_once_per_event_with_interrupts_on_several_vectors() {
    for (i, mode) in MODES.into_iter().enumerate() {
        threaded_channels(mode, 4, 0x1234 + i as u64);
    }
}

#[test]
fn consumer_thread_wakes_once_per_event_on_one_shared_vector() {
    for (i, mode) in MODES.into_iter().enumerate() {
        threaded_channels(mode, 1, 0x777 + i as u64);
    }
}

/// Threaded mode only: in synchronous mode the polling back-off runs on
/// the model's virtual clock (`delay_us` advances it without sleeping), so
/// a wait would not leave a producer thread real time to act; the
/// synchronous polling path is covered by the timeout test.
#[test]
fn consumer_thread_wakes_once_per_event_without_interrupts_by_polling() {
    threaded_channels(ExecMode::Threaded, 0, 0x4242);
    threaded_channels(ExecMode::Threaded, 0, 0x4243);
}

#[test]
fn a_cq_without_a_channel_never_delivers_an_event() {
    for mode in MODES {
        let dev = device(mode, 2);
        let mut ctx = open(&dev, 1);
        let ch = ctx.create_comp_channel().unwrap();
        let quiet = cq_on(&mut ctx, None, 0, 7);
        let loud = cq_on(&mut ctx, Some(ch), 0, 8);
        for round in 0..3u32 {
            ctx.req_notify_cq(quiet, false).unwrap();
            ctx.req_notify_cq(loud, false).unwrap();
            for cq in [quiet, loud] {
                let cqn = ctx.cq_num(cq).unwrap();
                dev.traffic()
                    .complete_send(cqn, QPN, round as u16, 1)
                    .unwrap();
            }
            let ev = ctx
                .get_cq_event_on(ch, SECOND)
                .expect("the loud CQ's event");
            assert_eq!((ev.cq, ev.cq_context), (loud, 8));
            ctx.ack_cq_events(loud, 1).unwrap();
            for c in [ch, ctx.context_comp_channel()] {
                assert_eq!(ctx.get_cq_event_on(c, 0).unwrap_err(), Errno::EAGAIN);
            }
            assert_eq!(ctx.get_cq_event().unwrap_err(), Errno::EAGAIN);
            assert_eq!(drain(&mut ctx, quiet).len(), 1, "its completions are there");
            assert_eq!(drain(&mut ctx, loud).len(), 1);
        }
        // The quiet CQ's arms fired on the device: both CQs' events reached
        // the completion EQ (the model also checks each arm's sequence
        // number: a stale one would be a violation), and none of the quiet
        // CQ's was delivered anywhere.
        dev.quiesce();
        for c in [ch, ctx.context_comp_channel()] {
            assert_eq!(ctx.get_cq_event_on(c, 0).unwrap_err(), Errno::EAGAIN);
        }
        assert_eq!(ctx.hca().eqes_consumed().1, 6, "{mode:?}");
        ctx.destroy_cq(quiet).unwrap();
        ctx.destroy_cq(loud).unwrap();
        ctx.destroy_comp_channel(ch).unwrap();
        close(&dev, ctx, &format!("{mode:?} quiet CQ"));
    }
}

#[test]
fn destroy_comp_channel_is_ebusy_while_a_cq_uses_it() {
    let dev = device(ExecMode::Synchronous, 1);
    let mut ctx = open(&dev, 1);
    let ch = ctx.create_comp_channel().unwrap();
    let cq1 = cq_on(&mut ctx, Some(ch), 0, 1);
    let cq2 = cq_on(&mut ctx, Some(ch), 0, 2);
    assert_eq!(ctx.destroy_comp_channel(ch).unwrap_err(), Errno::EBUSY);
    ctx.destroy_cq(cq1).unwrap();
    assert_eq!(ctx.destroy_comp_channel(ch).unwrap_err(), Errno::EBUSY);
    ctx.destroy_cq(cq2).unwrap();
    ctx.destroy_comp_channel(ch).unwrap();
    // Stale now: destroying again, reading or binding a CQ is EINVAL.
    assert_eq!(ctx.destroy_comp_channel(ch).unwrap_err(), Errno::EINVAL);
    assert_eq!(ctx.get_cq_event_on(ch, 0).unwrap_err(), Errno::EINVAL);
    let attr = CqInitAttrEx {
        channel: Some(ch),
        ..CqInitAttrEx::new(15)
    };
    assert_eq!(ctx.create_cq_ex(&attr).unwrap_err(), Errno::EINVAL);
    // The context's own channel lives as long as the context.
    let own = ctx.context_comp_channel();
    assert_eq!(ctx.destroy_comp_channel(own).unwrap_err(), Errno::EINVAL);
    // A fixed table: ENOMEM when full, room again after a destroy.
    let made: Vec<_> = (0..MAX_COMP_CHANNELS)
        .map(|_| ctx.create_comp_channel().unwrap())
        .collect();
    assert_eq!(ctx.create_comp_channel().unwrap_err(), Errno::ENOMEM);
    ctx.destroy_comp_channel(made[3]).unwrap();
    let again = ctx.create_comp_channel().unwrap();
    assert_ne!(again, made[3], "a new handle, the old one stays stale");
    close(&dev, ctx, "channels");
}

#[test]
fn comp_vector_not_below_num_comp_vectors_is_einval() {
    let dev = device(ExecMode::Synchronous, 4);
    let mut ctx = open(&dev, 3);
    assert_eq!(ctx.query_device().num_comp_vectors, 3);
    for v in [3u32, 4, 255, u32::MAX] {
        let attr = CqInitAttrEx {
            comp_vector: v,
            ..CqInitAttrEx::new(15)
        };
        assert_eq!(ctx.create_cq_ex(&attr).unwrap_err(), Errno::EINVAL, "{v}");
    }
    for v in 0..3u8 {
        let attr = CqInitAttrEx {
            comp_vector: v as u32,
            ..CqInitAttrEx::new(15)
        };
        let (cq, n) = ctx.create_cq_ex(&attr).unwrap();
        assert_eq!(n, 15);
        assert_eq!(
            Some(ctx.cq(cq).unwrap().eqn()),
            ctx.hca().comp_eqn_of(v),
            "vector {v} is its completion EQ"
        );
        ctx.destroy_cq(cq).unwrap();
    }
    assert_eq!(ctx.hca().comp_eqn_of(3), None);
    close(&dev, ctx, "comp_vector");
}

/// The `cqc.oi` bit of the last CREATE_CQ the model ran.
fn last_create_cq_oi(dev: &Device) -> bool {
    let t = dev.trace();
    let e = t
        .iter()
        .rev()
        .find(|e| e.op() == Opcode::CREATE_CQ)
        .expect("a CREATE_CQ");
    cqc::oi.get(create_cq_in::cq_context.get(&e.input))
}

#[test]
fn create_cq_ex_checks_mask_flags_and_wc_flags_as_rdma_core_mlx5() {
    type A = CqInitAttrEx;
    let dev = device(ExecMode::Synchronous, 1);
    let mut ctx = open(&dev, 1);
    let max = ctx.query_device().max_cqe;
    let with = |f: fn(&mut A)| {
        let mut a = A::new(15);
        f(&mut a);
        a
    };
    let cases: [(A, Errno, &str); 7] = [
        (A::new(0), Errno::EINVAL, "cqe 0"),
        (A::new(max + 1), Errno::EINVAL, "cqe above max_cqe"),
        (
            with(|a| a.comp_mask = A::MASK_PD),
            Errno::EINVAL,
            "parent domain",
        ),
        (
            with(|a| a.comp_mask = 1 << 5),
            Errno::EINVAL,
            "unknown comp_mask",
        ),
        (
            with(|a| {
                a.comp_mask = A::MASK_FLAGS;
                a.flags = 1 << 2;
            }),
            Errno::EINVAL,
            "unknown flag",
        ),
        (
            with(|a| a.wc_flags = 1 << 8),
            Errno::EOPNOTSUPP,
            "customer VLAN",
        ),
        (
            with(|a| a.wc_flags = A::WC_STANDARD_FLAGS | 1 << 11),
            Errno::EOPNOTSUPP,
            "wallclock timestamp",
        ),
    ];
    let creates = dev.trace().len();
    for (attr, errno, what) in cases {
        assert_eq!(ctx.create_cq_ex(&attr).unwrap_err(), errno, "{what}");
    }
    assert_eq!(dev.trace().len(), creates, "refused before any command");
    // Accepted: flags ignored without MASK_FLAGS, single-threaded, the
    // standard completion fields, ignore-overrun with `cq_oi`.
    let ok = [
        with(|a| a.flags = 0xff),
        with(|a| {
            a.comp_mask = A::MASK_FLAGS;
            a.flags = A::FLAG_SINGLE_THREADED;
        }),
        with(|a| a.wc_flags = A::WC_STANDARD_FLAGS),
    ];
    for attr in ok {
        let (cq, n) = ctx.create_cq_ex(&attr).unwrap();
        assert_eq!(n, 15);
        assert!(!last_create_cq_oi(&dev));
        ctx.destroy_cq(cq).unwrap();
    }
    let oi = with(|a| {
        a.comp_mask = A::MASK_FLAGS;
        a.flags = A::FLAG_IGNORE_OVERRUN | A::FLAG_SINGLE_THREADED;
    });
    let (cq, _) = ctx.create_cq_ex(&oi).unwrap();
    assert!(last_create_cq_oi(&dev), "IGNORE_OVERRUN sets cqc.oi");
    ctx.destroy_cq(cq).unwrap();
    close(&dev, ctx, "create_cq_ex");

    // Without the capability: EOPNOTSUPP (mlx5_ib), nothing created.
    let dev = device(ExecMode::Synchronous, 1);
    dev.caps_mut(|c| c.cq_oi = false);
    let mut ctx = open(&dev, 1);
    assert_eq!(ctx.create_cq_ex(&oi).unwrap_err(), Errno::EOPNOTSUPP);
    close(&dev, ctx, "create_cq_ex without cq_oi");
}

#[test]
fn blocking_waits_end_after_their_timeout() {
    for mode in MODES {
        for irqs in [0u16, 1, 4] {
            let what = format!("{mode:?}, {irqs} vectors");
            let dev = device(mode, irqs);
            let mut ctx = open(&dev, 2);
            let ch = ctx.create_comp_channel().unwrap();
            let cq = cq_on(&mut ctx, Some(ch), 1, 5);
            ctx.req_notify_cq(cq, false).unwrap();
            let hal = dev.hal();
            for timeout in [1_000u64, 2_000_000, 20_000_000] {
                let (t0, wall) = (hal.now_ns(), Instant::now());
                assert_eq!(
                    ctx.get_cq_event_on(ch, timeout).unwrap_err(),
                    Errno::ETIMEDOUT,
                    "{what}"
                );
                let waited = hal.now_ns() - t0;
                assert!(waited >= timeout, "{what}: waited {waited} of {timeout}");
                assert!(
                    wall.elapsed() < Duration::from_secs(2),
                    "{what}: bounded in real time"
                );
                assert_eq!(
                    ctx.get_async_event_timeout(timeout).unwrap_err(),
                    Errno::ETIMEDOUT,
                    "{what}"
                );
            }
            assert_eq!(ctx.get_cq_event_on(ch, 0).unwrap_err(), Errno::EAGAIN);
            assert_eq!(ctx.get_async_event_timeout(0).unwrap_err(), Errno::EAGAIN);
            // An event that is there already is returned without waiting.
            let cqn = ctx.cq_num(cq).unwrap();
            dev.traffic().complete_send(cqn, QPN, 0, 1).unwrap();
            dev.quiesce();
            let ev = ctx.get_cq_event_on(ch, 20 * SECOND).unwrap();
            assert_eq!((ev.cq, ev.cq_context), (cq, 5), "{what}");
            ctx.ack_cq_events(cq, 1).unwrap();
            // An async event wakes the async wait (port change, sub type 4).
            dev.traffic()
                .raise_simple_event(mlx5_regs::EventType::PORT_CHANGE, 4)
                .unwrap();
            let e = ctx.get_async_event_timeout(20 * SECOND).unwrap();
            ctx.ack_async_event(&e).unwrap();
            ctx.destroy_cq(cq).unwrap();
            ctx.destroy_comp_channel(ch).unwrap();
            close(&dev, ctx, &what);
        }
    }
}

#[test]
fn the_platform_latches_each_vector_until_a_wait_takes_it() {
    let dev = device(ExecMode::Synchronous, 4);
    let mut ctx = open(&dev, 3);
    let hal = dev.hal();
    assert_eq!(hal.irq_vectors(), 4);
    // Completion EQ 2 is on vector 1 + 2 mod 3 = 3.
    let cq = cq_on(&mut ctx, None, 2, 0);
    ctx.req_notify_cq(cq, false).unwrap();
    let cqn = ctx.cq_num(cq).unwrap();
    dev.traffic().complete_send(cqn, QPN, 0, 1).unwrap();
    assert_eq!(dev.interrupts(3), 1);
    assert_eq!(
        hal.wait_irq(0b0110, 1_000).unwrap(),
        0,
        "other vectors: none"
    );
    assert_eq!(hal.wait_irq(0b1111, 1_000).unwrap(), 0b1000, "latched");
    assert_eq!(hal.wait_irq(0b1000, 1_000).unwrap(), 0, "reported once");
    // The EQ is not re-armed until the driver polls it: a second event
    // writes an EQE without an interrupt; the poll's arm then finds
    // nothing unreported.
    assert_eq!(drain(&mut ctx, cq).len(), 1);
    ctx.req_notify_cq(cq, false).unwrap();
    dev.traffic().complete_send(cqn, QPN, 1, 1).unwrap();
    assert_eq!(
        dev.interrupts(3),
        2,
        "re-armed by the poll inside req_notify_cq"
    );
    assert_eq!(hal.wait_irq(1 << 3, 1_000).unwrap(), 1 << 3);
    assert_eq!(drain(&mut ctx, cq).len(), 1);
    ctx.destroy_cq(cq).unwrap();
    close(&dev, ctx, "latch");
}

#[test]
fn several_completion_eqs_come_up_and_go_down_leaving_nothing() {
    for profile in [Profile::ConnectX4Lx, Profile::ConnectX5, Profile::ConnectX7] {
        for mode in MODES {
            let what = format!("{profile:?} {mode:?}");
            let dev = Device::new(match mode {
                ExecMode::Synchronous => SimConfig::profile(profile),
                ExecMode::Threaded => SimConfig::profile(profile).threaded(),
            });
            let caps = dev.caps();
            let hca = Hca::bring_up(
                dev.hal(),
                HcaConfig {
                    comp_vectors: u8::MAX,
                    ..config()
                },
            )
            .expect("bring-up");
            let device_limit = (1usize << caps.log_max_eq) - 1;
            let n = MAX_COMP_VECTORS.min(device_limit);
            assert_eq!(hca.num_comp_vectors() as usize, n, "{what}");
            assert_eq!(dev.objects().eqs, n + 1, "{what}");
            let eqns: Vec<u8> = (0..n as u8).map(|v| hca.comp_eqn_of(v).unwrap()).collect();
            let mut sorted = eqns.clone();
            sorted.dedup();
            assert_eq!(sorted.len(), n, "{what}: distinct EQs");
            assert_eq!(hca.comp_eqn(), eqns[0]);
            let report = hca.teardown().expect("teardown");
            assert_eq!(report.pages_left, 0);
            assert_clean(&dev, &what);
        }
    }
    // `max_num_eqs`, when the device sets it, bounds the count instead.
    let dev = Device::new(SimConfig::default());
    dev.caps_mut(|c| c.max_num_eqs = 3);
    let cfg = HcaConfig {
        comp_vectors: 8,
        ..config()
    };
    let hca = Hca::bring_up(dev.hal(), cfg).expect("bring-up");
    assert_eq!(hca.num_comp_vectors(), 2);
    hca.teardown().unwrap();
    assert_clean(&dev, "max_num_eqs");
}

#[test]
fn in_place_bring_up_with_several_vectors_blocks_and_closes_clean() {
    static_ctx_case(ExecMode::Synchronous);
    static_ctx_case(ExecMode::Threaded);
}

fn static_ctx_case(mode: ExecMode) {
    let dev = device(mode, 3);
    let mut ctx: Box<Ctx> = Box::new(Verbs::new_down(Hca::new_down(dev.hal(), ())));
    let cfg = HcaConfig {
        comp_vectors: 3,
        ..config()
    };
    ctx.open_in_place(dev.hal(), cfg).unwrap();
    assert_eq!(ctx.query_device().num_comp_vectors, 3);
    let ch = ctx.create_comp_channel().unwrap();
    let cq = cq_on(&mut ctx, Some(ch), 2, 42);
    ctx.req_notify_cq(cq, false).unwrap();
    let cqn = ctx.cq_num(cq).unwrap();
    let producer_dev = dev.clone();
    let producer = thread::spawn(move || {
        thread::sleep(Duration::from_millis(5));
        producer_dev
            .traffic()
            .complete_send(cqn, QPN, 0, 1)
            .unwrap();
    });
    let ev = ctx.get_cq_event_on(ch, 20 * SECOND).expect("woken");
    producer.join().unwrap();
    assert_eq!(ev.cq_context, 42);
    ctx.ack_cq_events(cq, 1).unwrap();
    // Vector 2's EQ is completion EQ 2 of 2 vectors 1..=2: vector 1 + 2 % 2.
    assert_eq!(dev.interrupts(1), 1, "{mode:?}");
    ctx.close_in_place().unwrap();
    assert_clean(&dev, "in place");
}

/// The model's EQ arm rule: an armed EQ interrupts once on its next EQE and
/// then stays quiet (FIRED) until armed again; an arm whose consumer index
/// leaves EQEs unreported fires at once; the driver's poll arms with
/// nothing left, so the EQ is quiet-armed again.
#[test]
fn an_eq_interrupts_once_per_arm_and_an_arm_over_unread_eqes_fires_at_once() {
    use mlx5_driver::cq::CqOptions;
    use mlx5_regs::doorbell::{eq_doorbell, uar_page_offset, UAR_EQ_DOORBELL_ARM};
    let dev = device(ExecMode::Synchronous, 4);
    let hca = Hca::bring_up(dev.hal(), config()).expect("bring-up");
    let eqn = hca.comp_eqn();
    let mut cqs: Vec<_> = (0..3)
        .map(|_| hca.create_cq(7, CqOptions::default()).unwrap())
        .collect();
    for cq in cqs.iter_mut() {
        hca.arm_cq(cq, false).unwrap();
    }
    let fire = |i: usize| {
        dev.traffic()
            .complete_send(cqs[i].cqn(), QPN, 0, 1)
            .unwrap();
    };
    fire(0);
    assert_eq!(dev.interrupts(1), 1, "EQE on the armed EQ");
    fire(1);
    assert_eq!(dev.interrupts(1), 1, "FIRED: no second interrupt");
    // Arm again without consuming (ci 0, two EQEs unreported): at once.
    let at = uar_page_offset(hca.uar()) + UAR_EQ_DOORBELL_ARM;
    dev.hal().mmio_write32(at, eq_doorbell(eqn, 0));
    assert_eq!(dev.interrupts(1), 2, "arm over unread EQEs fires");
    // The driver consumes both and arms with nothing left: quiet until
    // the next EQE, which interrupts again.
    hca.poll_events().unwrap();
    assert_eq!(hca.eqes_consumed().1, 2);
    assert_eq!(dev.interrupts(1), 2);
    fire(2);
    assert_eq!(dev.interrupts(1), 3);
    hca.poll_events().unwrap();
    while hca.next_completion().is_some() {}
    for cq in cqs {
        hca.destroy_cq(cq).unwrap();
    }
    hca.teardown().unwrap();
    assert_clean(&dev, "arm rule");
}
