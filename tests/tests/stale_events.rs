//! Stale events and reused object numbers. Firmware (and the model) hands
//! a destroyed CQ's, SRQ's or QP's number to the next object created; an
//! event still on an EQ for the destroyed object must never reach the
//! successor. The driver dispatches the EQs at every destroy and withdraws
//! the destroyed object's events (Linux removes the object from its table
//! and synchronises the EQ before freeing it).

use mlx5_driver::cq::{Cq, CqOptions, Cqe};
use mlx5_driver::{Event, Hca};
use mlx5_regs::EventType;
use mlx5_sim::{Device, ExecMode, Profile, SimHal};
use mlx5_tests::seeds::{say, Seeded};
use mlx5_tests::{assert_clean, bring_up, device, Rng};

/// One live CQ of the reference: its driver object and the events its
/// current incarnation may still get.
struct Live {
    cq: Cq<SimHal>,
    armed: bool,
    /// Completion events raised for this incarnation, not yet read.
    events_due: u32,
    /// A CQ error raised for this incarnation, not yet read.
    error_due: bool,
    /// CQEs written and not polled.
    unpolled: u32,
    errored: bool,
}

#[derive(Debug, Default)]
struct Stats {
    destroyed_with_pending: u64,
    reused: u64,
    events: u64,
}

fn drain_events(hca: &Hca<SimHal>, live: &mut [Live], at: &str, st: &mut Stats) {
    hca.poll_events().unwrap();
    while let Some(ev) = hca.next_completion() {
        let Event::Completion { cqn } = ev else {
            panic!("{at}: {ev:?}");
        };
        let l = live
            .iter_mut()
            .find(|l| l.cq.cqn() == cqn)
            .unwrap_or_else(|| panic!("{at}: event for CQ {cqn:#x}, which does not exist"));
        assert!(
            l.events_due > 0,
            "{at}: completion event for CQ {cqn:#x} that its current incarnation never caused"
        );
        l.events_due -= 1;
        st.events += 1;
    }
    while let Some(ev) = hca.next_event() {
        let Event::CqError { cqn, .. } = ev else {
            panic!("{at}: {ev:?}");
        };
        let l = live
            .iter_mut()
            .find(|l| l.cq.cqn() == cqn)
            .unwrap_or_else(|| panic!("{at}: CQ error for CQ {cqn:#x}, which does not exist"));
        assert!(
            l.error_due,
            "{at}: CQ error the current CQ {cqn:#x} never had"
        );
        l.error_due = false;
        st.events += 1;
    }
}

fn one_seed(seed: u64, mode: ExecMode, ops: usize) -> Stats {
    let dev: Device = device(Profile::ConnectX5, mode);
    let hca = bring_up(&dev);
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut live: Vec<Live> = Vec::new();
    let mut st = Stats::default();
    let mut seq = 0u32;
    let mut freed: Vec<u32> = Vec::new();
    for step in 0..ops {
        let at = format!("seed {seed} {mode:?} step {step}");
        match rng.below(10) {
            // Create (the model hands out the lowest free number).
            0 | 1 if live.len() < 6 => {
                let cq = hca.create_cq(7, CqOptions::default()).unwrap();
                if freed.contains(&cq.cqn()) {
                    st.reused += 1;
                }
                live.push(Live {
                    cq,
                    armed: false,
                    events_due: 0,
                    error_due: false,
                    unpolled: 0,
                    errored: false,
                });
            }
            // Arm for the next completion.
            2 | 3 if !live.is_empty() => {
                let i = rng.below(live.len() as u64) as usize;
                let l = &mut live[i];
                if !l.armed && !l.errored && l.events_due == 0 {
                    // Poll first: an arm with CQEs past the index fires at once.
                    let mut out = [Cqe::EMPTY; 16];
                    while l.cq.poll(&mut out) > 0 {}
                    l.unpolled = 0;
                    hca.arm_cq(&mut l.cq, false).unwrap();
                    l.armed = true;
                    // Threaded mode: the doorbell reaches the device before
                    // the next completion is written.
                    dev.quiesce();
                }
            }
            // Completions (an overrun past capacity puts the CQ in error).
            4..=6 if !live.is_empty() => {
                let i = rng.below(live.len() as u64) as usize;
                let n = 1 + rng.below(4) as u32;
                let l = &mut live[i];
                for _ in 0..n {
                    if l.errored {
                        break;
                    }
                    dev.traffic()
                        .complete_send(l.cq.cqn(), 0x77, seq as u16, seq)
                        .unwrap();
                    seq += 1;
                    if l.unpolled > l.cq.capacity() {
                        l.errored = true;
                        l.error_due = true;
                        l.armed = false;
                        break;
                    }
                    l.unpolled += 1;
                    if l.armed {
                        l.armed = false;
                        l.events_due += 1;
                    }
                }
            }
            // Destroy, often with its events still on the EQ.
            7 | 8 if !live.is_empty() => {
                let i = rng.below(live.len() as u64) as usize;
                let l = live.swap_remove(i);
                if l.events_due > 0 || l.error_due {
                    st.destroyed_with_pending += 1;
                }
                freed.push(l.cq.cqn());
                hca.destroy_cq(l.cq).map_err(|e| e.error()).unwrap();
            }
            // Read events; each must belong to a live CQ's own incarnation.
            _ => drain_events(&hca, &mut live, &at, &mut st),
        }
    }
    drain_events(&hca, &mut live, &format!("seed {seed} end"), &mut st);
    for l in &live {
        assert_eq!(l.events_due, 0, "seed {seed}: an event never came");
        assert!(!l.error_due, "seed {seed}: a CQ error never came");
    }
    for l in live {
        hca.destroy_cq(l.cq).map_err(|e| e.error()).unwrap();
    }
    hca.teardown().unwrap();
    assert_eq!(dev.pages_held(), 0);
    assert_eq!(dev.objects().total(), 0);
    // The overruns were provoked; nothing else went wrong.
    let other: Vec<_> = dev
        .violations()
        .into_iter()
        .filter(|v| !matches!(v, mlx5_sim::Violation::CqOverrun { .. }))
        .collect();
    assert!(other.is_empty(), "seed {seed}: {other:?}");
    assert!(dev.iommu_faults().is_empty());
    st
}

const FIXED: [u64; 4] = [1, 2, 3, 1000];

/// Thousands of create / arm / complete / destroy / read sequences: a
/// destroyed CQ's pending completion or error event never reaches the CQ
/// that reuses its number.
#[test]
fn a_destroyed_cqs_pending_event_never_reaches_its_successor() {
    let seeded = Seeded::new(
        module_path!(),
        "a_destroyed_cqs_pending_event_never_reaches_its_successor",
        &FIXED,
    );
    let all = seeded.run(|seed| one_seed(seed, ExecMode::Synchronous, 3000));
    let pend: u64 = all.iter().map(|(_, s)| s.destroyed_with_pending).sum();
    let reused: u64 = all.iter().map(|(_, s)| s.reused).sum();
    let events: u64 = all.iter().map(|(_, s)| s.events).sum();
    say(&format!(
        "stale events: {} seeds, {pend} CQs destroyed with events pending, {reused} numbers reused, {events} events delivered",
        all.len()
    ));
    assert!(
        pend > 100 && reused > 100,
        "{pend} {reused}: the sequences test too little"
    );
}

/// The same with the device on its own thread (fewer steps).
#[test]
fn a_destroyed_cqs_pending_event_never_reaches_its_successor_threaded() {
    let seeded = Seeded::new(
        module_path!(),
        "a_destroyed_cqs_pending_event_never_reaches_its_successor_threaded",
        &FIXED[..2],
    );
    seeded.run(|seed| one_seed(seed, ExecMode::Threaded, 600));
}

/// SRQ and QP events still on the EQ at destroy never reach the SRQ or QP
/// that reuses the number.
#[test]
fn srq_and_qp_events_of_a_destroyed_object_are_withdrawn() {
    let dev = device(Profile::ConnectX5, ExecMode::Synchronous);
    let hca = bring_up(&dev);
    let mut cq = hca.create_cq(63, CqOptions::default()).unwrap();
    // SRQ: a limit event pending at destroy.
    let srq = hca.create_srq(15, 1, Some(&mut cq)).unwrap();
    let srqn = srq.srqn();
    let mut e = [0u8; 64];
    e[1] = EventType::SRQ_RQ_LIMIT.0;
    e[0x39..0x3c].copy_from_slice(&srqn.to_be_bytes()[1..]);
    e[0x34] = 1;
    dev.traffic().raise_event(e).unwrap();
    hca.destroy_srq(srq, Some(&mut cq))
        .map_err(|e| e.error())
        .unwrap();
    let srq2 = hca.create_srq(15, 1, Some(&mut cq)).unwrap();
    assert_eq!(srq2.srqn(), srqn, "number reused");
    hca.poll_events().unwrap();
    assert_eq!(hca.next_event(), None, "the old SRQ's limit event is gone");
    // QP: a catastrophic-error event pending at destroy.
    let links = mlx5_driver::qp::QpLinks {
        send_cq: Some(&mut cq),
        recv_cq: None,
        srq: None,
    };
    let g = hca
        .send_queue_geometry(&mlx5_driver::qp::SendQueueCaps::default())
        .unwrap();
    let slots = vec![mlx5_driver::qp::SendSlot::EMPTY; g.wqebbs()];
    let qp = hca
        .create_qp(Some(Default::default()), links, slots)
        .unwrap();
    let qpn = qp.qpn();
    let mut e = [0u8; 64];
    e[1] = EventType::WQ_CATAS_ERROR.0;
    e[0x39..0x3c].copy_from_slice(&qpn.to_be_bytes()[1..]);
    dev.traffic().raise_event(e).unwrap();
    let links = mlx5_driver::qp::QpLinks {
        send_cq: Some(&mut cq),
        recv_cq: None,
        srq: None,
    };
    let slots = hca.destroy_qp(qp, links).map_err(|e| e.error()).unwrap();
    let links = mlx5_driver::qp::QpLinks {
        send_cq: Some(&mut cq),
        recv_cq: None,
        srq: None,
    };
    let qp2 = hca
        .create_qp(Some(Default::default()), links, slots)
        .unwrap();
    assert_eq!(qp2.qpn(), qpn, "number reused");
    hca.poll_events().unwrap();
    assert_eq!(hca.next_event(), None, "the old QP's event is gone");
    let links = mlx5_driver::qp::QpLinks {
        send_cq: Some(&mut cq),
        recv_cq: None,
        srq: None,
    };
    hca.destroy_qp(qp2, links).map_err(|e| e.error()).unwrap();
    hca.destroy_srq(srq2, Some(&mut cq))
        .map_err(|e| e.error())
        .unwrap();
    hca.destroy_cq(cq).map_err(|e| e.error()).unwrap();
    hca.teardown().unwrap();
    assert_clean(&dev, "srq/qp stale events");
}
