//! Completion event moderation against the model, at the driver level: an
//! armed CQ's event waits for `cq_max_count` completions since the last
//! event or for `cq_period` microseconds of device time, whichever comes
//! first; the timer restarts at each event (`StartFromEqe`) or at each
//! completion (`StartFromCqe`); both 0 is an event at the first
//! completion. The refusals and overrun: `cq_moderation_refusals.rs`.

use mlx5_driver::cq::{Cq, CqModeration, CqOptions, CqPeriodMode};
use mlx5_driver::{Event, Hca};
use mlx5_sim::{Device, ExecMode, Profile, SimHal};
use mlx5_tests::{assert_clean, bring_up, device, inject_sends as inject, MODES};

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
