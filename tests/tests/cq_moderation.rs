//! Completion event moderation against the model, at the driver level: an
//! armed CQ's event waits for `cq_max_count` completions since the last
//! event or for `cq_period` microseconds of device time, whichever comes
//! first; the timer restarts at each event (`StartFromEqe`) or at each
//! completion (`StartFromCqe`); both 0 is an event at the first
//! completion. Also: the capability checks (driver before any command,
//! firmware with status and syndrome), and overrun with and without
//! overrun-ignore.

use mlx5_driver::cq::{cmd, Cq, CqModeration, CqOptions, CqPeriodMode};
use mlx5_driver::{Error, Event, Hca};
use mlx5_regs::consts::errno;
use mlx5_regs::layouts::{cqc, modify_cq_in, modify_field_select};
use mlx5_regs::{CmdStatus, Opcode};
use mlx5_sim::syndrome as sy;
use mlx5_sim::{Device, ExecMode, Profile, SimHal, Violation};
use mlx5_tests::{assert_clean, bring_up, device, inject_sends as inject, traced_opcodes, MODES};

/// Completion events for `cqn` on the HCA now (the rest are dropped).
fn events(hca: &Hca<SimHal>, cqn: u32) -> usize {
    hca.poll_events().expect("poll events");
    let mut n = 0;
    while let Some(ev) = hca.next_completion() {
        if ev == (Event::Completion { cqn }) {
            n += 1;
        }
    }
    n
}

/// CQ error events on the async queue: their (cqn, syndrome).
fn cq_errors(hca: &Hca<SimHal>) -> Vec<(u32, u8)> {
    hca.poll_events().expect("poll events");
    let mut v = Vec::new();
    while let Some(ev) = hca.next_event() {
        if let Event::CqError { cqn, syndrome } = ev {
            v.push((cqn, syndrome));
        }
    }
    v
}

/// Synchronous mode: advance device time in `step_us` steps until `cq`'s
/// event arrives; the device time that took, in nanoseconds (`None` after
/// `max_us`).
fn wait_event(
    dev: &Device,
    hca: &Hca<SimHal>,
    cq: &Cq<SimHal>,
    step_us: u64,
    max_us: u64,
) -> Option<u64> {
    let t0 = dev.now_ns();
    loop {
        if events(hca, cq.cqn()) > 0 {
            return Some(dev.now_ns() - t0);
        }
        if dev.now_ns() - t0 > max_us * 1000 {
            return None;
        }
        dev.advance_us(step_us);
    }
}

fn drain(cq: &mut Cq<SimHal>) -> usize {
    mlx5_tests::drain_byte_lens(cq).len()
}

fn modify_cqs(dev: &Device) -> usize {
    traced_opcodes(dev)
        .iter()
        .filter(|&&o| o == Opcode::MODIFY_CQ.0)
        .count()
}

/// With `cq_max_count` N (no period), exactly one event per N completions,
/// in both execution modes, whether the completions are polled at once or
/// left in the CQ: the count runs from the previous event.
#[test]
fn count_n_gives_one_event_per_n_completions() {
    for mode in MODES {
        for n in [1u16, 2, 3, 5, 8] {
            let dev = device(Profile::ConnectX5, mode);
            let hca = bring_up(&dev);
            let mut cq = hca.create_cq(255, CqOptions::default()).unwrap();
            hca.modify_cq_moderation(&cq, 0, n).unwrap();
            assert_eq!(hca.query_cq(&cq).unwrap().cq_max_count, n);
            let mut seq = 0;
            for round in 0..6 {
                hca.arm_cq(&mut cq, false).unwrap();
                dev.quiesce();
                for k in 1..n {
                    inject(&dev, &cq, &mut seq, 1);
                    assert_eq!(
                        events(&hca, cq.cqn()),
                        0,
                        "{mode:?} n {n} round {round}: {k} of {n}"
                    );
                }
                inject(&dev, &cq, &mut seq, 1);
                assert_eq!(
                    events(&hca, cq.cqn()),
                    1,
                    "{mode:?} n {n} round {round}: the n-th"
                );
                // Odd rounds leave their completions in the CQ for the
                // next round to poll.
                if round % 2 == 0 {
                    let waiting = if round == 0 { n } else { 2 * n };
                    assert_eq!(drain(&mut cq), waiting as usize);
                }
            }
            // A burst of 3N + 1 to an armed CQ is one event (one per arm);
            // the 2N + 1 after it count for the next arm, which fires at
            // once; after that, N more are needed again.
            drain(&mut cq);
            hca.arm_cq(&mut cq, false).unwrap();
            dev.quiesce();
            inject(&dev, &cq, &mut seq, 3 * n as u32 + 1);
            assert_eq!(
                events(&hca, cq.cqn()),
                1,
                "{mode:?} n {n}: one event per arm"
            );
            hca.arm_cq(&mut cq, false).unwrap();
            dev.quiesce();
            assert_eq!(
                events(&hca, cq.cqn()),
                1,
                "{mode:?} n {n}: 2N + 1 since the event"
            );
            drain(&mut cq);
            hca.arm_cq(&mut cq, false).unwrap();
            dev.quiesce();
            inject(&dev, &cq, &mut seq, n as u32 - 1);
            assert_eq!(events(&hca, cq.cqn()), 0, "{mode:?} n {n}: counting again");
            inject(&dev, &cq, &mut seq, 1);
            assert_eq!(events(&hca, cq.cqn()), 1, "{mode:?} n {n}");
            drain(&mut cq);
            hca.destroy_cq(cq).unwrap();
            hca.teardown().unwrap();
            assert_clean(&dev, &format!("{mode:?} n {n}"));
        }
    }
}

/// Both values 0 (the default, and after switching moderation off): an
/// event for the first completion after each arm.
#[test]
fn zero_count_and_period_is_an_event_per_completion() {
    let dev = device(Profile::ConnectX5, ExecMode::Synchronous);
    let hca = bring_up(&dev);
    let mut cq = hca.create_cq(63, CqOptions::default()).unwrap();
    hca.modify_cq_moderation(&cq, 0, 16).unwrap();
    hca.modify_cq_moderation(&cq, 0, 0).unwrap();
    let mut seq = 0;
    for _ in 0..4 {
        hca.arm_cq(&mut cq, false).unwrap();
        inject(&dev, &cq, &mut seq, 1);
        assert_eq!(events(&hca, cq.cqn()), 1);
        drain(&mut cq);
    }
    hca.destroy_cq(cq).unwrap();
    hca.teardown().unwrap();
    assert_clean(&dev, "zero");
}

/// Period only, timer restarting at each event: the event comes
/// `cq_period` µs of device time after the previous event, not before, and
/// completions in between do not push it back.
#[test]
fn period_from_eqe_fires_a_period_after_the_previous_event() {
    let dev = device(Profile::ConnectX5, ExecMode::Synchronous);
    let hca = bring_up(&dev);
    let mut cq = hca.create_cq(63, CqOptions::default()).unwrap();
    hca.modify_cq_moderation(&cq, 300, 0).unwrap();
    let mut seq = 0;
    // A first event starts the timer at a known time.
    hca.arm_cq(&mut cq, false).unwrap();
    inject(&dev, &cq, &mut seq, 1);
    assert!(wait_event(&dev, &hca, &cq, 10, 1000).is_some());
    let fired = dev.now_ns();
    drain(&mut cq);
    hca.arm_cq(&mut cq, false).unwrap();
    inject(&dev, &cq, &mut seq, 1);
    dev.advance_us(150);
    assert_eq!(events(&hca, cq.cqn()), 0, "150 µs after the event");
    inject(&dev, &cq, &mut seq, 1);
    assert!(wait_event(&dev, &hca, &cq, 5, 1000).is_some());
    let after = (dev.now_ns() - fired) / 1000;
    assert!(
        (299..=306).contains(&after),
        "event {after} µs after the previous one, period 300"
    );
    assert_eq!(drain(&mut cq), 2);
    hca.destroy_cq(cq).unwrap();
    hca.teardown().unwrap();
    assert_clean(&dev, "period from EQE");
}

/// Period only, timer restarting at each completion (`StartFromCqe`): the
/// event comes `cq_period` µs after the last completion; a completion
/// before that pushes it back.
#[test]
fn period_from_cqe_fires_a_period_after_the_last_completion() {
    let dev = device(Profile::ConnectX5, ExecMode::Synchronous);
    let hca = bring_up(&dev);
    let mut cq = hca.create_cq(63, CqOptions::default()).unwrap();
    let m = CqModeration {
        period: 300,
        max_count: 0,
        mode: CqPeriodMode::StartFromCqe,
    };
    hca.modify_cq_moderation_mode(&cq, &m).unwrap();
    let q = hca.query_cq(&cq).unwrap();
    assert_eq!((q.cq_period, q.cq_max_count), (300, 0));
    let mut seq = 0;
    hca.arm_cq(&mut cq, false).unwrap();
    inject(&dev, &cq, &mut seq, 1);
    dev.advance_us(200);
    assert_eq!(events(&hca, cq.cqn()), 0, "200 µs after the completion");
    inject(&dev, &cq, &mut seq, 1);
    let last = dev.now_ns();
    dev.advance_us(200);
    assert_eq!(
        events(&hca, cq.cqn()),
        0,
        "400 µs after the first, 200 after the last"
    );
    assert!(wait_event(&dev, &hca, &cq, 5, 1000).is_some());
    let after = (dev.now_ns() - last) / 1000;
    assert!(
        (300..=306).contains(&after),
        "event {after} µs after the last completion"
    );
    hca.destroy_cq(cq).unwrap();
    hca.teardown().unwrap();
    assert_clean(&dev, "period from CQE");
}

/// The driver's own delays pass device time: a pending moderation timer
/// fires inside `Hal::delay_us` in synchronous mode, not before its time.
#[test]
fn the_timer_fires_during_the_platform_delay() {
    use mlx5_hal::Hal;
    let dev = device(Profile::ConnectX5, ExecMode::Synchronous);
    let hca = bring_up(&dev);
    let mut cq = hca.create_cq(63, CqOptions::default()).unwrap();
    let m = CqModeration {
        period: 100,
        max_count: 0,
        mode: CqPeriodMode::StartFromCqe,
    };
    hca.modify_cq_moderation_mode(&cq, &m).unwrap();
    hca.arm_cq(&mut cq, false).unwrap();
    let mut seq = 0;
    inject(&dev, &cq, &mut seq, 1);
    let t0 = dev.now_ns();
    let hal = dev.hal();
    let mut waited = None;
    for _ in 0..50 {
        hal.delay_us(10);
        if events(&hca, cq.cqn()) == 1 {
            waited = Some((dev.now_ns() - t0) / 1000);
            break;
        }
    }
    let w = waited.expect("the timer fired");
    assert!((100..=112).contains(&w), "after {w} µs of delays");
    drain(&mut cq);
    hca.destroy_cq(cq).unwrap();
    hca.teardown().unwrap();
    assert_clean(&dev, "delay");
}

/// Count and period: whichever comes first.
#[test]
fn count_and_period_whichever_first() {
    let dev = device(Profile::ConnectX5, ExecMode::Synchronous);
    let hca = bring_up(&dev);
    let m = CqModeration {
        period: 500,
        max_count: 4,
        mode: CqPeriodMode::StartFromCqe,
    };
    // Moderation from creation, as mlx5e creates its CQs.
    let mut cq = hca
        .create_cq(
            63,
            CqOptions {
                moderation: Some(m),
                ..Default::default()
            },
        )
        .unwrap();
    let q = hca.query_cq(&cq).unwrap();
    assert_eq!((q.cq_period, q.cq_max_count), (500, 4));
    let mut seq = 0;
    // The count first: four completions at once.
    hca.arm_cq(&mut cq, false).unwrap();
    inject(&dev, &cq, &mut seq, 4);
    assert_eq!(events(&hca, cq.cqn()), 1, "count reached");
    drain(&mut cq);
    // The period first: two completions, then quiet.
    hca.arm_cq(&mut cq, false).unwrap();
    inject(&dev, &cq, &mut seq, 2);
    let t = dev.now_ns();
    dev.advance_us(450);
    assert_eq!(events(&hca, cq.cqn()), 0);
    assert!(wait_event(&dev, &hca, &cq, 5, 1000).is_some());
    let after = (dev.now_ns() - t) / 1000;
    assert!(
        (500..=506).contains(&after),
        "period expired after {after} µs"
    );
    drain(&mut cq);
    hca.destroy_cq(cq).unwrap();
    hca.teardown().unwrap();
    assert_clean(&dev, "whichever first");
}

/// Threaded mode: the device thread's timer raises the event, never before
/// the period; the count raises it with the completion that reaches it.
#[test]
fn threaded_device_times_the_period_and_counts() {
    let dev = device(Profile::ConnectX5, ExecMode::Threaded);
    let hca = bring_up(&dev);
    let mut cq = hca.create_cq(63, CqOptions::default()).unwrap();
    let m = CqModeration {
        period: 4000,
        max_count: 3,
        mode: CqPeriodMode::StartFromCqe,
    };
    hca.modify_cq_moderation_mode(&cq, &m).unwrap();
    let mut seq = 0;
    for _ in 0..2 {
        hca.arm_cq(&mut cq, false).unwrap();
        dev.quiesce();
        // Taken before the completion: the device's clock is real time.
        let t0 = std::time::Instant::now();
        inject(&dev, &cq, &mut seq, 1);
        let mut got = 0;
        while got == 0 && t0.elapsed() < std::time::Duration::from_secs(5) {
            std::thread::sleep(std::time::Duration::from_micros(200));
            got = events(&hca, cq.cqn());
        }
        let took = t0.elapsed();
        assert_eq!(got, 1, "the timer fired");
        assert!(
            took >= std::time::Duration::from_micros(4000),
            "not before the period: {took:?}"
        );
        drain(&mut cq);
        // The count: the third completion writes the event with it.
        hca.arm_cq(&mut cq, false).unwrap();
        dev.quiesce();
        inject(&dev, &cq, &mut seq, 3);
        assert_eq!(events(&hca, cq.cqn()), 1, "count reached");
        drain(&mut cq);
    }
    hca.destroy_cq(cq).unwrap();
    hca.teardown().unwrap();
    assert_clean(&dev, "threaded");
}

/// A solicited-only arm waits for a solicited (or error) completion, and
/// that completion is moderated like any other (no
/// `scqe_break_moderation_en`): the event comes when the count is reached.
#[test]
fn solicited_arm_is_moderated_too() {
    let dev = device(Profile::ConnectX5, ExecMode::Synchronous);
    let hca = bring_up(&dev);
    let mut cq = hca.create_cq(63, CqOptions::default()).unwrap();
    hca.modify_cq_moderation(&cq, 0, 3).unwrap();
    hca.arm_cq(&mut cq, true).unwrap();
    let mut seq = 0;
    inject(&dev, &cq, &mut seq, 3);
    assert_eq!(events(&hca, cq.cqn()), 0, "no solicited completion yet");
    dev.traffic()
        .complete_send_error(cq.cqn(), 0x77, 9, 0x05, 0)
        .unwrap();
    assert_eq!(
        events(&hca, cq.cqn()),
        1,
        "error CQE, four since the last event"
    );
    drain(&mut cq);
    hca.arm_cq(&mut cq, true).unwrap();
    dev.traffic()
        .complete_send_error(cq.cqn(), 0x77, 10, 0x05, 0)
        .unwrap();
    assert_eq!(
        events(&hca, cq.cqn()),
        0,
        "one error CQE: the count is not reached"
    );
    inject(&dev, &cq, &mut seq, 2);
    assert_eq!(
        events(&hca, cq.cqn()),
        1,
        "the third completion lets it out"
    );
    drain(&mut cq);
    hca.destroy_cq(cq).unwrap();
    hca.teardown().unwrap();
    assert_clean(&dev, "solicited");
}

/// Without `cq_moderation` the driver refuses before any command
/// (`EOPNOTSUPP`); firmware refuses the raw command with BAD_OP.
#[test]
fn without_the_capability_nothing_is_sent_and_firmware_refuses() {
    let dev = device(Profile::ConnectX5, ExecMode::Synchronous);
    dev.caps_mut(|c| c.cq_moderation = false);
    let hca = bring_up(&dev);
    let cq = hca.create_cq(15, CqOptions::default()).unwrap();
    let before = traced_opcodes(&dev).len();
    let e = hca.modify_cq_moderation(&cq, 10, 10).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
    assert_eq!(e.errno(), errno::EOPNOTSUPP);
    let m = CqModeration {
        period: 10,
        max_count: 1,
        mode: CqPeriodMode::StartFromEqe,
    };
    assert_eq!(
        hca.modify_cq_moderation_mode(&cq, &m).unwrap_err().errno(),
        errno::EOPNOTSUPP
    );
    let opts = CqOptions {
        moderation: Some(m),
        ..Default::default()
    };
    assert_eq!(
        hca.create_cq(15, opts).err().unwrap().errno(),
        errno::EOPNOTSUPP
    );
    assert_eq!(traced_opcodes(&dev).len(), before, "no command sent");
    let raw = cmd::modify_cq_moderation(cq.cqn(), 10, 10).unwrap();
    let mut out = [0u8; cmd::MODIFY_CQ_OUT];
    assert_eq!(
        hca.exec(&raw, &mut out).unwrap_err(),
        Error::Command {
            opcode: Opcode::MODIFY_CQ,
            op_mod: 0,
            status: CmdStatus::BAD_OP_ERR,
            syndrome: sy::CQ_MODERATION_CAP,
        }
    );
    hca.destroy_cq(cq).unwrap();
    hca.teardown().unwrap();
    assert_clean(&dev, "no cap");
}

/// The driver's range and mode checks, before any command.
#[test]
fn period_above_4095_and_unsupported_modes_are_refused_before_sending() {
    let dev = device(Profile::ConnectX4Lx, ExecMode::Synchronous);
    let hca = bring_up(&dev);
    assert!(hca.caps().cq_moderation);
    assert!(!hca.caps().cq_period_mode_modify && !hca.caps().cq_period_start_from_cqe);
    let cq = hca.create_cq(15, CqOptions::default()).unwrap();
    let before = modify_cqs(&dev);
    let e = hca.modify_cq_moderation(&cq, 4096, 1).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    assert_eq!(e.errno(), errno::EINVAL);
    // Changing the mode needs cq_period_mode_modify (mlx5e's ethtool path).
    let eqe = CqModeration {
        period: 8,
        max_count: 8,
        mode: CqPeriodMode::StartFromEqe,
    };
    assert_eq!(
        hca.modify_cq_moderation_mode(&cq, &eqe)
            .unwrap_err()
            .errno(),
        errno::EOPNOTSUPP
    );
    // CQE-based timing needs cq_period_start_from_cqe, at creation too.
    let cqe = CqModeration {
        mode: CqPeriodMode::StartFromCqe,
        ..eqe
    };
    let opts = CqOptions {
        moderation: Some(cqe),
        ..Default::default()
    };
    assert_eq!(
        hca.create_cq(15, opts).err().unwrap().errno(),
        errno::EOPNOTSUPP
    );
    let big = CqOptions {
        moderation: Some(CqModeration {
            period: 5000,
            ..eqe
        }),
        ..Default::default()
    };
    assert_eq!(hca.create_cq(15, big).err().unwrap().errno(), errno::EINVAL);
    assert_eq!(modify_cqs(&dev), before, "no MODIFY_CQ sent");
    // The EQE-based mode at creation needs no extra capability.
    let ok = hca
        .create_cq(
            15,
            CqOptions {
                moderation: Some(eqe),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(hca.query_cq(&ok).unwrap().cq_max_count, 8);
    hca.modify_cq_moderation(&cq, 4095, 0xffff).unwrap();
    hca.destroy_cq(ok).unwrap();
    hca.destroy_cq(cq).unwrap();
    hca.teardown().unwrap();
    assert_clean(&dev, "ranges");
}

/// A raw MODIFY_CQ op_mod 0 with `sel` and `mode`, and its refusal.
fn raw_modify(hca: &Hca<SimHal>, cqn: u32, sel: u32, mode: u8) -> Result<(), Error> {
    let mut b = cmd::modify_cq_moderation(cqn, 1, 1).unwrap();
    modify_field_select::modify_field_select
        .set(
            modify_cq_in::modify_field_select_resize_field_select.get_mut(&mut b),
            sel,
        )
        .unwrap();
    cqc::cq_period_mode
        .set(modify_cq_in::cq_context.get_mut(&mut b), mode)
        .unwrap();
    let mut out = [0u8; cmd::MODIFY_CQ_OUT];
    hca.exec(&b, &mut out)
}

fn refused(status: CmdStatus, syndrome: u32) -> Error {
    Error::Command {
        opcode: Opcode::MODIFY_CQ,
        op_mod: 0,
        status,
        syndrome,
    }
}

/// Firmware's own refusals of MODIFY_CQ op_mod 0, with status and syndrome.
#[test]
fn firmware_refuses_bad_moderation_commands() {
    for p in [Profile::ConnectX5, Profile::ConnectX4Lx] {
        let dev = device(p, ExecMode::Synchronous);
        let hca = bring_up(&dev);
        let cq = hca.create_cq(15, CqOptions::default()).unwrap();
        let n = cq.cqn();
        let bad_sel = refused(CmdStatus::BAD_PARAM_ERR, sy::CQ_MODIFY_SELECT);
        assert_eq!(
            raw_modify(&hca, n, 0, 0).unwrap_err(),
            bad_sel,
            "{p:?}: empty select"
        );
        assert_eq!(
            raw_modify(&hca, n, 1 << 3, 0).unwrap_err(),
            bad_sel,
            "{p:?}: unknown bit"
        );
        assert_eq!(
            raw_modify(&hca, n + 1, 3, 0).unwrap_err(),
            refused(CmdStatus::BAD_RES_ERR, sy::CQ_NOT_FOUND)
        );
        if p == Profile::ConnectX4Lx {
            // No cq_period_mode_modify: the PERIOD_MODE bit is refused.
            assert_eq!(raw_modify(&hca, n, 0x13, 0).unwrap_err(), bad_sel);
        } else {
            raw_modify(&hca, n, 0x13, 1).unwrap();
            let mode = refused(CmdStatus::BAD_PARAM_ERR, sy::CQ_PERIOD_MODE_CAP);
            assert_eq!(
                raw_modify(&hca, n, 0x10, 2).unwrap_err(),
                mode,
                "reserved mode"
            );
            dev.caps_mut(|c| c.cq_period_start_from_cqe = false);
            assert_eq!(
                raw_modify(&hca, n, 0x10, 1).unwrap_err(),
                mode,
                "mode 1 without the cap"
            );
        }
        hca.destroy_cq(cq).unwrap();
        hca.teardown().unwrap();
        assert_clean(&dev, &format!("{p:?}"));
    }
}

/// Overrun without overrun-ignore: the CQ error event says overrun
/// (syndrome 1) and the CQ stops. With it: no event, the device writes on.
#[test]
fn overrun_with_and_without_overrun_ignore() {
    for mode in MODES {
        let dev = device(Profile::ConnectX5, mode);
        let hca = bring_up(&dev);
        let cq = hca.create_cq(1, CqOptions::default()).unwrap();
        assert_eq!(cq.capacity(), 1);
        let mut seq = 0;
        inject(&dev, &cq, &mut seq, 3);
        assert_eq!(
            cq_errors(&hca),
            [(cq.cqn(), 1)],
            "{mode:?}: overrun reported"
        );
        assert_eq!(
            hca.query_cq(&cq).unwrap().status,
            0x9,
            "cqc.status overflow"
        );
        assert!(dev
            .violations()
            .iter()
            .all(|v| matches!(v, Violation::CqOverrun { .. })));
        hca.destroy_cq(cq).unwrap();

        let oi = CqOptions {
            overrun_ignore: true,
            ..Default::default()
        };
        let cq = hca.create_cq(1, oi).unwrap();
        inject(&dev, &cq, &mut seq, 7);
        assert_eq!(cq_errors(&hca), [], "{mode:?}: no error with oi");
        let q = hca.query_cq(&cq).unwrap();
        assert_eq!((q.status, q.producer_counter), (0, 7), "{mode:?}: wrote on");
        hca.destroy_cq(cq).unwrap();
        hca.teardown().unwrap();
        let v = dev.violations();
        assert_eq!(v.len(), 1, "{mode:?}: only the first CQ's overrun: {v:#?}");
    }
}
