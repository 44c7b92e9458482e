//! EQ polling: wrap-around with no lost or duplicated event, no overrun
//! under bursts larger than the EQ, typed events, overflow accounting.

use mlx5_driver::eq::{Event, QpEvent};
use mlx5_driver::Hca;
use mlx5_regs::layouts::{eqe, qp_events};
use mlx5_regs::EventType;
use mlx5_sim::SimHal;
use mlx5_sim::{Device, ExecMode, Profile};
use mlx5_tests::{assert_clean, bring_up, config, device, MODES};

/// An HCA whose async-event queue holds a whole EQ's worth of events.
fn roomy(dev: &Device) -> Hca<SimHal, (), 16, 512> {
    Hca::bring_up_with(dev.hal(), config(), ()).unwrap()
}

/// An EQE of a QP event type (queue type 0 = QP) carrying `seq` as the QP
/// number.
fn seq_eqe(seq: u32) -> [u8; 64] {
    let mut e = [0u8; 64];
    eqe::event_type.set(&mut e, EventType::COMM_EST.0).unwrap();
    let data = eqe::event_data.get_mut(&mut e);
    qp_events::qpn_rqn_sqn.set(data, seq & 0xff_ffff).unwrap();
    e
}

fn drain<H: mlx5_hal::Hal, O: mlx5_driver::CmdObserver, const C: usize, const A: usize>(
    hca: &Hca<H, O, C, A>,
    got: &mut Vec<u32>,
) {
    while let Some(ev) = hca.next_event() {
        match ev {
            Event::Qp { qpn, event } => {
                assert_eq!(event, QpEvent::CommEstablished);
                got.push(qpn);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[test]
fn eq_wraps_many_times_without_loss_or_duplicates() {
    for mode in MODES {
        let dev = device(Profile::ConnectX5, mode);
        let hca = roomy(&dev);
        let n = 1u32 << config().async_eq_log_size;
        let total = 10 * n + 17;
        let mut got = Vec::new();
        let mut seq = 0;
        while seq < total {
            // Bursts of 3/4 of the EQ between polls.
            for _ in 0..(3 * n / 4).min(total - seq) {
                dev.traffic().raise_event(seq_eqe(seq)).unwrap();
                seq += 1;
            }
            dev.quiesce();
            hca.poll_events().unwrap();
            // Threaded mode: the consumer-index doorbell is a posted write
            // the device thread applies later; let it land before the next
            // burst (real hardware: nanoseconds).
            dev.quiesce();
            drain(&hca, &mut got);
        }
        dev.quiesce();
        hca.poll_events().unwrap();
        drain(&hca, &mut got);
        let expect: Vec<u32> = (0..total).collect();
        assert_eq!(got, expect, "{mode:?}: every event once, in order");
        assert_eq!(hca.eqes_consumed().0, total as u64, "{mode:?}");
        assert_eq!(hca.event_overflows(), (0, 0));
        hca.teardown().unwrap();
        assert_clean(&dev, &format!("{mode:?}"));
    }
}

#[test]
fn burst_larger_than_the_eq_while_polling_never_overruns() {
    let dev = device(Profile::ConnectX5, ExecMode::Threaded);
    let hca = roomy(&dev);
    let n = 1u32 << config().async_eq_log_size;
    let total = 4 * n;
    let consumed = std::sync::atomic::AtomicU32::new(0);
    let mut got = Vec::new();
    std::thread::scope(|s| {
        s.spawn(|| {
            // The producer keeps at most 3/4 of the EQ outstanding between
            // what it raised and what the driver has *consumed*: the driver
            // must report its consumer index as it goes (every 64 EQEs),
            // not only at the end of a poll, or the model sees an overrun.
            let start = std::time::Instant::now();
            for seq in 0..total {
                while seq - consumed.load(std::sync::atomic::Ordering::Acquire) >= 3 * n / 4 {
                    if start.elapsed().as_secs() > 60 {
                        return;
                    }
                    std::thread::yield_now();
                }
                dev.traffic().raise_event(seq_eqe(seq)).unwrap();
            }
        });
        let start = std::time::Instant::now();
        while got.len() < total as usize {
            assert!(start.elapsed().as_secs() < 60, "stuck at {}", got.len());
            hca.poll_events().unwrap();
            dev.quiesce(); // the consumer-index doorbell has landed
            drain(&hca, &mut got);
            consumed.store(got.len() as u32, std::sync::atomic::Ordering::Release);
        }
    });
    assert_eq!(got, (0..total).collect::<Vec<_>>());
    assert!(dev.violations().is_empty(), "{:#?}", dev.violations());
    hca.teardown().unwrap();
    assert_clean(&dev, "burst");
}

#[test]
fn full_event_queue_reports_lost_events_in_order() {
    let dev = Device::new(mlx5_sim::SimConfig::default());
    let hca: Hca<_, (), 16, 8> = Hca::bring_up_with(dev.hal(), config(), ()).unwrap();
    for seq in 0..20 {
        dev.traffic().raise_event(seq_eqe(seq)).unwrap();
    }
    hca.poll_events().unwrap();
    let mut evs = Vec::new();
    while let Some(e) = hca.next_event() {
        evs.push(e);
    }
    assert_eq!(evs.len(), 9, "{evs:?}");
    for (i, e) in evs[..8].iter().enumerate() {
        assert!(
            matches!(e, Event::Qp { qpn, .. } if *qpn == i as u32),
            "{e:?}"
        );
    }
    assert_eq!(evs[8], Event::EventsLost { count: 12 });
    assert_eq!(hca.event_overflows(), (0, 12));
    // After draining, new events flow again.
    dev.traffic().raise_event(seq_eqe(99)).unwrap();
    hca.poll_events().unwrap();
    assert!(matches!(hca.next_event(), Some(Event::Qp { qpn: 99, .. })));
    hca.teardown().unwrap();
    assert_clean(&dev, "overflow");
}

#[test]
fn every_event_type_is_decoded() {
    let dev = device(Profile::ConnectX5, ExecMode::Synchronous);
    let hca = bring_up(&dev);
    let mk = |t: EventType, sub: u8| {
        let mut e = [0u8; 64];
        eqe::event_type.set(&mut e, t.0).unwrap();
        eqe::event_sub_type.set(&mut e, sub).unwrap();
        e
    };
    let mut port = mk(EventType::PORT_CHANGE, 4);
    port[0x28] = 1 << 4;
    let mut cqerr = mk(EventType::CQ_ERROR, 0);
    cqerr[0x21..0x24].copy_from_slice(&[0, 0, 0x42]);
    cqerr[0x2b] = 1;
    let mut limit = mk(EventType::SRQ_RQ_LIMIT, 0);
    limit[0x39..0x3c].copy_from_slice(&[0, 1, 0x23]);
    let mut catas = mk(EventType::SRQ_CATAS_ERROR, 0);
    catas[0x3b] = 7;
    // Type 0x13 is a QP event: byte 0x34 = 0 (QP), the QPN at 0x38, as the
    // model and firmware write it for an SRQ-attached QP entering ERR.
    let mut last = mk(EventType::SRQ_LAST_WQE, 0);
    last[0x39..0x3c].copy_from_slice(&[0, 2, 0x08]);
    // The same type about an RQ object (queue type 1): not a QP event.
    let mut last_rq = last;
    last_rq[0x34] = 1;
    let mut catas_qp = mk(EventType::WQ_CATAS_ERROR, 0);
    catas_qp[0x3b] = 9;
    let internal = mk(EventType::INTERNAL_ERROR, 0);
    for e in [port, cqerr, limit, catas, last, last_rq, catas_qp] {
        dev.traffic().raise_event(e).unwrap();
    }
    // The async EQ does not subscribe to INTERNAL_ERROR (neither Linux nor
    // rdma-core does; a dead device shows in the health buffer), but the
    // type still decodes.
    assert!(dev.traffic().raise_event(internal).is_err());
    assert_eq!(mlx5_driver::eq::decode(&internal), Event::InternalError);
    dev.quiesce();
    hca.poll_events().unwrap();
    let evs: Vec<Event> = std::iter::from_fn(|| hca.next_event()).collect();
    assert_eq!(
        evs,
        vec![
            Event::PortChange {
                port: 1,
                subtype: 4
            },
            Event::CqError {
                cqn: 0x42,
                syndrome: 1
            },
            Event::SrqLimit { srqn: 0x123 },
            Event::SrqCatastrophic { srqn: 7 },
            Event::Qp {
                qpn: 0x208,
                event: QpEvent::LastWqeReached
            },
            Event::Queue {
                event_type: EventType::SRQ_LAST_WQE,
                number: 0x208,
                queue_type: 1
            },
            Event::Qp {
                qpn: 9,
                event: QpEvent::CatastrophicError
            },
        ]
    );
    hca.teardown().unwrap();
    assert_clean(&dev, "decode");
}
