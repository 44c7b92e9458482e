//! The driver keeps each CQ's arm sequence number in step with its
//! completion events by itself (`Hca::arm_cq`): the caller never tells it
//! an event came, whether it reads the event, leaves it queued, loses it to
//! a full queue, or re-arms before polling the event queues. The strict
//! model refuses a stale arm (one repeating the number of the event it
//! already raised) as a protocol violation, so every test here ends with
//! no violation and one event per arm.

use mlx5_driver::cq::{Cq, CqOptions};
use mlx5_driver::{Error, Event, Hca};
use mlx5_sim::{Device, SimConfig, SimHal};
use mlx5_tests::{assert_clean, config, drain_byte_lens as drain, inject_sends as inject, MODES};

/// Completion events for `cqn` taken from the HCA after a poll.
fn events_for<const CE: usize>(hca: &Hca<SimHal, (), CE>, cqn: u32) -> usize {
    hca.poll_events().expect("poll events");
    let mut n = 0;
    while let Some(ev) = hca.next_completion() {
        if ev == (Event::Completion { cqn }) {
            n += 1;
        }
    }
    n
}

/// The caller only reads events: the sequence number goes up by one per
/// event, past the 2-bit wrap, and every arm yields its event.
#[test]
fn one_event_per_arm_without_caller_bookkeeping() {
    for mode in MODES {
        let dev = mlx5_tests::device(mlx5_sim::Profile::ConnectX5, mode);
        let hca = mlx5_tests::bring_up(&dev);
        let mut cq = hca.create_cq(63, CqOptions::default()).unwrap();
        let mut seq = 0;
        for round in 0..10u32 {
            hca.arm_cq(&mut cq, false).unwrap();
            // The previous round's event is counted at this arm.
            assert_eq!(cq.arm_sequence(), round, "{mode:?}: one step per event");
            inject(&dev, &cq, &mut seq, 2);
            dev.quiesce();
            assert_eq!(events_for(&hca, cq.cqn()), 1, "{mode:?} round {round}");
            assert_eq!(drain(&mut cq).len(), 2);
        }
        // The tenth event counted; a re-arm with no event in between keeps
        // the number.
        hca.arm_cq(&mut cq, false).unwrap();
        hca.arm_cq(&mut cq, true).unwrap();
        assert_eq!(cq.arm_sequence(), 10);
        hca.destroy_cq(cq).unwrap();
        hca.teardown().unwrap();
        assert_clean(&dev, &format!("{mode:?}"));
    }
}

/// The caller never reads the events (nor polls the event queues): each
/// arm consumes the completion EQ first, so an event already written is
/// counted and the next arm is not stale.
#[test]
fn rearm_before_polling_events_is_not_stale() {
    let dev = Device::new(SimConfig::default());
    let hca = mlx5_tests::bring_up(&dev);
    let mut cq = hca.create_cq(63, CqOptions::default()).unwrap();
    let mut seq = 0;
    for round in 0..6u32 {
        hca.arm_cq(&mut cq, false).unwrap();
        inject(&dev, &cq, &mut seq, 1);
        assert_eq!(drain(&mut cq).len(), 1);
        // The EQE of this arm is still on the EQ: no poll_events yet.
        assert_eq!(cq.arm_sequence(), round);
    }
    hca.arm_cq(&mut cq, false).unwrap();
    assert_eq!(cq.arm_sequence(), 6, "the sixth event counted at this arm");
    assert!(dev.violations().is_empty(), "{:#?}", dev.violations());
    assert_eq!(events_for(&hca, cq.cqn()), 6, "every event still delivered");
    hca.destroy_cq(cq).unwrap();
    hca.teardown().unwrap();
    assert_clean(&dev, "re-arm before polling");
}

/// Events lost to a full completion-event queue (capacity 2 here) are
/// still counted for the arm sequence: arms stay valid and each yields an
/// event.
#[test]
fn events_lost_to_a_full_queue_still_count() {
    let dev = Device::new(SimConfig::default());
    let hca: Hca<SimHal, (), 2> = Hca::bring_up_with(dev.hal(), config(), ()).unwrap();
    let mut cqs: Vec<Cq<SimHal>> = (0..2)
        .map(|_| hca.create_cq(15, CqOptions::default()).unwrap())
        .collect();
    let mut seqs = [0u32; 2];
    for _ in 0..5 {
        for (cq, seq) in cqs.iter_mut().zip(&mut seqs) {
            hca.arm_cq(cq, false).unwrap();
            inject(&dev, cq, seq, 1);
            drain(cq);
        }
        hca.poll_events().unwrap();
    }
    for cq in &cqs {
        assert_eq!(
            cq.arm_sequence(),
            4,
            "five events each, the last not yet counted"
        );
    }
    let (lost, _) = hca.event_overflows();
    assert!(lost > 0, "the queue of 2 overflowed");
    // The next arm of each counts the fifth event and fires a sixth; the
    // arm after that counts the sixth: no arm was stale, none was lost.
    for (cq, seq) in cqs.iter_mut().zip(&mut seqs) {
        hca.arm_cq(cq, false).unwrap();
        assert_eq!(cq.arm_sequence(), 5);
        inject(&dev, cq, seq, 1);
        drain(cq);
    }
    for cq in cqs.iter_mut() {
        hca.arm_cq(cq, false).unwrap();
        assert_eq!(cq.arm_sequence(), 6);
    }
    assert!(dev.violations().is_empty(), "{:#?}", dev.violations());
    for cq in cqs {
        hca.destroy_cq(cq).unwrap();
    }
    hca.teardown().unwrap();
    assert_clean(&dev, "lost events");
}

/// The HCA remembers at most `CE` armed CQs; one more is refused with
/// ENOMEM (nothing rung) until an armed CQ is destroyed.
#[test]
fn armed_cq_table_is_bounded_by_ce() {
    let dev = Device::new(SimConfig::default());
    let hca: Hca<SimHal, (), 2> = Hca::bring_up_with(dev.hal(), config(), ()).unwrap();
    let mut a = hca.create_cq(15, CqOptions::default()).unwrap();
    let mut b = hca.create_cq(15, CqOptions::default()).unwrap();
    let mut c = hca.create_cq(15, CqOptions::default()).unwrap();
    hca.arm_cq(&mut a, false).unwrap();
    hca.arm_cq(&mut b, false).unwrap();
    let e = hca.arm_cq(&mut c, false).unwrap_err();
    assert!(matches!(e, Error::TableFull { capacity: 2, .. }), "{e:?}");
    assert_eq!(e.errno(), 12, "ENOMEM");
    hca.arm_cq(&mut a, true).expect("an armed CQ re-arms");
    hca.destroy_cq(b).unwrap();
    hca.arm_cq(&mut c, false).expect("room after a destroy");
    let mut seq = 0;
    inject(&dev, &c, &mut seq, 1);
    assert_eq!(events_for(&hca, c.cqn()), 1);
    drain(&mut c);
    hca.destroy_cq(a).unwrap();
    hca.destroy_cq(c).unwrap();
    hca.teardown().unwrap();
    assert_clean(&dev, "bounded table");
}
