//! Shared receive queues against the model, at ISSI 1 (RMP) and
//! ISSI 0 (SRQ): capacity, post failures, the one-shot limit event through
//! EQ polling, scatter into posted buffers, error CQEs, free-list recycling,
//! destroy ordering, and a clean teardown.

use mlx5_driver::cq::{Cq, CqOptions, Cqe, CqeStatus};
use mlx5_driver::srq::{LimitArm, PostError, PostFailure, RecvRequest, Sge, Srq};
use mlx5_driver::unstable;
use mlx5_driver::{Error, Event, Hca};
use mlx5_hal::{DmaRegion, Hal};
use mlx5_regs::consts::errno;
use mlx5_regs::CqeOpcode;
use mlx5_sim::{Delivery, Device, SimConfig, SimHal};
use mlx5_tests::{assert_clean, bring_up};

const BUF: usize = 256;
const QPN: u32 = 0x99;

/// A device negotiating ISSI 1 (default) or only ISSI 0.
fn device(issi: u16) -> Device {
    Device::new(SimConfig {
        issi_supported: if issi == 0 { 0b01 } else { 0b11 },
        ..SimConfig::default()
    })
}

struct Fixture {
    dev: Device,
    hca: Hca<SimHal>,
    cq: Cq<SimHal>,
    srq: Srq<SimHal>,
    bufs: DmaRegion<SimHal>,
    /// Key of the receive buffers: the default (the DMA key), or the
    /// reserved lkey where a test chooses it.
    lkey: u32,
}

fn fixture(issi: u16, max_wr: u32, max_sge: u32) -> Fixture {
    let dev = device(issi);
    let hca = bring_up(&dev);
    assert_eq!(hca.issi(), issi);
    let mut cq = hca.create_cq(1023, CqOptions::default()).unwrap();
    let srq = hca.create_srq(max_wr, max_sge, Some(&mut cq)).unwrap();
    assert_eq!(srq.is_rmp(), issi == 1);
    let bufs = dev.hal().alloc_dma(BUF * 1024).unwrap();
    let lkey = hca.default_lkey();
    assert_eq!(Some(lkey), hca.dma_lkey());
    Fixture {
        dev,
        hca,
        cq,
        srq,
        bufs,
        lkey,
    }
}

impl Fixture {
    fn sge(&self, wr_id: u64) -> Sge {
        Sge {
            addr: self.bufs.iova() + (wr_id % 1024) * BUF as u64,
            length: BUF as u32,
            lkey: self.lkey,
        }
    }

    /// Post `n` requests with ids `first..first+n`.
    fn post(&mut self, first: u64, n: u64) -> Result<(), PostFailure> {
        let sges: Vec<[Sge; 1]> = (first..first + n).map(|id| [self.sge(id)]).collect();
        let reqs: Vec<RecvRequest> = sges
            .iter()
            .zip(first..)
            .map(|(s, wr_id)| RecvRequest { wr_id, sges: s })
            .collect();
        self.srq.post(&reqs)
    }

    fn deliver(&self, payload: &[u8]) -> Delivery {
        self.dev
            .traffic()
            .deliver(self.srq.srqn(), self.cq.cqn(), QPN, payload)
            .expect("deliver")
    }

    /// Poll every CQE; return (wr_id, cqe) after freeing each WQE.
    fn reap(&mut self) -> Vec<(u64, Cqe)> {
        let mut out = [Cqe::EMPTY; 32];
        let mut got = Vec::new();
        loop {
            let n = self.cq.poll(&mut out);
            if n == 0 {
                return got;
            }
            for c in &out[..n] {
                assert_eq!(c.srqn, self.srq.srqn());
                let wr_id = self.srq.complete(c.wqe_counter).expect("posted WQE");
                got.push((wr_id, *c));
            }
        }
    }

    fn limit_events(&self) -> usize {
        self.hca.poll_events().unwrap();
        let mut n = 0;
        while let Some(ev) = self.hca.next_event() {
            match ev {
                Event::SrqLimit { srqn } => {
                    assert_eq!(srqn, self.srq.srqn());
                    n += 1;
                }
                other => panic!("unexpected event {other:?}"),
            }
        }
        n
    }

    fn finish(self, what: &str) {
        let Fixture {
            dev,
            hca,
            mut cq,
            srq,
            bufs,
            ..
        } = self;
        drop(bufs);
        let cqn_user = srq.cqn().is_some();
        hca.destroy_srq(srq, cqn_user.then_some(&mut cq))
            .map_err(|e| e.error())
            .unwrap();
        hca.destroy_cq(cq).map_err(|e| e.error()).unwrap();
        hca.teardown().unwrap();
        assert_clean(&dev, what);
    }
}

#[test]
fn fills_to_exactly_capacity_and_the_next_post_fails_naming_it() {
    for issi in [0, 1] {
        let mut f = fixture(issi, 10, 1);
        assert_eq!(f.srq.max_wr(), 15, "10 rounds up to 2^4 - 1");
        assert_eq!(
            f.post(0, 20),
            Err(PostFailure {
                index: 15,
                error: PostError::Full
            })
        );
        assert_eq!(
            f.srq.outstanding(),
            15,
            "the 15 before the failure stay posted"
        );
        // They are really posted: the device consumes all 15.
        for _ in 0..15 {
            assert!(matches!(f.deliver(b"x"), Delivery::Completed { .. }));
        }
        assert_eq!(f.deliver(b"x"), Delivery::Dropped);
        assert_eq!(f.dev.traffic().dropped(), 1);
        assert_eq!(f.reap().len(), 15);
        f.finish("capacity");
    }
}

#[test]
fn too_many_scatter_entries_fail_that_request_only() {
    let mut f = fixture(1, 31, 2);
    assert_eq!(f.srq.max_sge(), 3, "stride 64: 3 data segments");
    let (a, b) = ([f.sge(0)], [f.sge(1)]);
    let big = [f.sge(2), f.sge(3), f.sge(4), f.sge(5)];
    let reqs = [
        RecvRequest { wr_id: 0, sges: &a },
        RecvRequest { wr_id: 1, sges: &b },
        RecvRequest {
            wr_id: 2,
            sges: &big,
        },
        RecvRequest { wr_id: 3, sges: &a },
    ];
    let err = f.srq.post(&reqs).unwrap_err();
    assert_eq!(
        err,
        PostFailure {
            index: 2,
            error: PostError::TooManySges { given: 4, max: 3 }
        }
    );
    assert_eq!(f.srq.outstanding(), 2);
    f.finish("sges");
}

#[test]
fn limit_fires_strictly_below_not_at_equality_and_is_one_shot() {
    for issi in [0, 1] {
        // rdma-core's test: post 10, limit 7, the event after the 4th receive.
        let mut f = fixture(issi, 15, 1);
        f.post(0, 10).unwrap();
        assert_eq!(f.hca.arm_srq_limit(&mut f.srq, 7).unwrap(), LimitArm::Armed);
        assert_eq!(f.hca.query_srq(&f.srq).unwrap().lwm, 7);
        for i in 0..3 {
            f.deliver(b"hello");
            assert_eq!(f.limit_events(), 0, "ISSI {issi}: receive {}", i + 1);
        }
        f.deliver(b"hello");
        assert_eq!(
            f.limit_events(),
            1,
            "ISSI {issi}: fires after the 4th receive"
        );
        assert_eq!(
            f.hca.query_srq(&f.srq).unwrap().lwm,
            0,
            "one-shot: disarmed"
        );
        f.deliver(b"hello");
        assert_eq!(f.limit_events(), 0, "no second event without re-arming");
        // Post more, re-arm, see it again.
        f.reap();
        f.post(100, 10).unwrap();
        assert_eq!(f.srq.outstanding(), 15);
        assert_eq!(
            f.hca.arm_srq_limit(&mut f.srq, 12).unwrap(),
            LimitArm::Armed
        );
        for _ in 0..3 {
            f.deliver(b"x");
        }
        assert_eq!(f.limit_events(), 0, "12 left = limit 12: not yet");
        f.deliver(b"x");
        assert_eq!(f.limit_events(), 1);
        f.finish("limit");
    }
}

#[test]
fn arming_above_the_outstanding_count_fires_at_once_and_zero_disarms() {
    for issi in [0, 1] {
        let mut f = fixture(issi, 15, 1);
        f.post(0, 3).unwrap();
        let r = f.hca.arm_srq_limit(&mut f.srq, 5).unwrap();
        // The model raises it itself; had it not, the driver would say RaiseNow.
        assert_eq!(r, LimitArm::Armed);
        assert_eq!(f.limit_events(), 1, "ISSI {issi}: immediate event");
        assert_eq!(f.hca.query_srq(&f.srq).unwrap().lwm, 0);
        // Limit 0 disarms: no event however low it gets.
        f.hca.arm_srq_limit(&mut f.srq, 2).unwrap();
        assert_eq!(
            f.hca.arm_srq_limit(&mut f.srq, 0).unwrap(),
            LimitArm::Disarmed
        );
        for _ in 0..3 {
            f.deliver(b"x");
        }
        assert_eq!(f.limit_events(), 0);
        // Re-arming replaces the previous value.
        f.reap();
        f.post(10, 10).unwrap();
        f.hca.arm_srq_limit(&mut f.srq, 2).unwrap();
        f.hca.arm_srq_limit(&mut f.srq, 8).unwrap();
        assert_eq!(f.hca.query_srq(&f.srq).unwrap().lwm, 8);
        for _ in 0..3 {
            f.deliver(b"x");
        }
        assert_eq!(f.limit_events(), 1, "fires below 8, not below 2");
        // Above the capacity: refused, nothing changes.
        let err = f.hca.arm_srq_limit(&mut f.srq, 16).unwrap_err();
        assert_eq!(err.errno(), errno::EINVAL);
        f.finish("arm");
    }
}

#[test]
fn payloads_land_in_the_posted_buffers_and_errors_are_decoded() {
    // With the default key (the DMA key) and, as an explicit choice, the
    // reserved lkey.
    for (issi, reserved) in [(0, false), (1, false), (0, true), (1, true)] {
        let mut f = fixture(issi, 63, 1);
        if reserved {
            f.lkey = f.hca.reserved_lkey();
        }
        f.post(0, 8).unwrap();
        let msgs: Vec<Vec<u8>> = (0..7u8)
            .map(|i| vec![i ^ 0x5a; 10 + 30 * i as usize])
            .collect();
        for m in &msgs {
            assert!(matches!(f.deliver(m), Delivery::Completed { .. }));
        }
        // Too long for a 256-byte buffer: local length error CQE.
        assert!(matches!(
            f.deliver(&[7u8; 300]),
            Delivery::LengthError { .. }
        ));
        let got = f.reap();
        assert_eq!(got.len(), 8);
        for (i, (wr_id, c)) in got.iter().take(7).enumerate() {
            assert_eq!(*wr_id, i as u64, "completions in posting order");
            assert_eq!(c.opcode, CqeOpcode::RESP_SEND);
            assert_eq!(c.status, CqeStatus::Success);
            assert_eq!(c.byte_len as usize, msgs[i].len());
            assert_eq!(c.qpn, QPN);
            let mut data = vec![0u8; msgs[i].len()];
            f.bufs.read_bytes(*wr_id as usize * BUF, &mut data);
            assert_eq!(data, msgs[i], "scatter of message {i}");
        }
        let (wr_id, err) = got[7];
        assert_eq!(wr_id, 7);
        assert_eq!(err.opcode, CqeOpcode::RESP_ERR);
        assert!(matches!(
            err.status,
            CqeStatus::Error { syndrome: 0x01, .. }
        ));
        f.finish("scatter");
    }
}

#[test]
fn completed_wqes_return_to_the_free_list_even_out_of_order() {
    for issi in [0, 1] {
        let mut f = fixture(issi, 7, 1);
        let mut next_id = 0u64;
        let mut seen = Vec::new();
        for round in 0..200 {
            let room = (f.srq.max_wr() - f.srq.outstanding()) as u64;
            f.post(next_id, room).unwrap();
            next_id += room;
            for _ in 0..(1 + round % 5) {
                f.deliver(b"ping");
            }
            let mut got = f.reap();
            // Free them newest first: the free list must cope.
            got.reverse();
            seen.extend(got.iter().map(|(id, _)| *id));
        }
        seen.sort_unstable();
        seen.dedup();
        assert!(seen.len() > 500, "ISSI {issi}");
        assert!(f.dev.violations().is_empty(), "{:?}", f.dev.violations());
        f.finish("recycling");
    }
}

#[test]
fn a_cq_named_by_an_issi0_srq_cannot_be_destroyed_until_the_srq_is_gone() {
    let f = fixture(0, 15, 1);
    let Fixture {
        dev,
        hca,
        cq,
        srq,
        bufs,
        ..
    } = f;
    let (mut cq, err) = hca.destroy_cq(cq).unwrap_err().into_parts();
    assert!(matches!(err, Error::Busy(_)));
    assert_eq!(err.errno(), errno::EBUSY);
    // Still working.
    dev.traffic().complete_send(cq.cqn(), 1, 0, 0).unwrap();
    assert!(cq.poll_one().is_some());
    hca.destroy_srq(srq, Some(&mut cq))
        .map_err(|e| e.error())
        .unwrap();
    hca.destroy_cq(cq).map_err(|e| e.error()).unwrap();
    drop(bufs);
    hca.teardown().unwrap();
    assert_clean(&dev, "destroy order");
}

#[test]
fn create_limits_follow_the_device() {
    for issi in [0, 1] {
        let dev = device(issi);
        let hca = bring_up(&dev);
        let mut cq = hca.create_cq(15, CqOptions::default()).unwrap();
        let caps = *hca.caps();
        let max_wr = (1u32 << caps.log_max_srq_sz) - 1;
        let max_sge = caps.max_wqe_sz_rq as u32 / 16 - 1;
        for (wr, sge) in [(0, 1), (max_wr + 1, 1), (15, max_sge + 1)] {
            let err = hca
                .create_srq(wr, sge, Some(&mut cq))
                .err()
                .expect("refused");
            assert_eq!(err.errno(), errno::EINVAL, "max_wr {wr} max_sge {sge}");
        }
        let srq = hca.create_srq(max_wr, max_sge, Some(&mut cq)).unwrap();
        assert_eq!(srq.max_wr() as u32, max_wr);
        assert!(srq.max_sge() as u32 >= max_sge);
        hca.destroy_srq(srq, Some(&mut cq))
            .map_err(|e| e.error())
            .unwrap();
        hca.destroy_cq(cq).map_err(|e| e.error()).unwrap();
        hca.teardown().unwrap();
        assert_clean(&dev, "srq limits");
    }
}

#[test]
fn when_firmware_does_not_fire_on_arm_the_driver_says_raise_now_and_disarms_it() {
    for issi in [0, 1] {
        let dev = device(issi);
        dev.caps_mut(|c| c.limit_event_on_arm = false);
        let hca = bring_up(&dev);
        let mut cq = hca.create_cq(63, CqOptions::default()).unwrap();
        let mut srq = hca.create_srq(15, 1, Some(&mut cq)).unwrap();
        let bufs = dev.hal().alloc_dma(4096 * 4).unwrap();
        let sges: Vec<[Sge; 1]> = (0..3u64)
            .map(|i| {
                [Sge {
                    addr: bufs.iova() + i * 4096,
                    length: 4096,
                    lkey: hca.default_lkey(),
                }]
            })
            .collect();
        let reqs: Vec<RecvRequest> = sges
            .iter()
            .enumerate()
            .map(|(i, s)| RecvRequest {
                wr_id: i as u64,
                sges: s,
            })
            .collect();
        srq.post(&reqs).unwrap();
        assert_eq!(hca.arm_srq_limit(&mut srq, 5).unwrap(), LimitArm::RaiseNow);
        assert_eq!(
            hca.query_srq(&srq).unwrap().lwm,
            0,
            "driver disarmed firmware"
        );
        hca.poll_events().unwrap();
        assert_eq!(hca.next_event(), None, "firmware raised nothing");
        // Nothing later either: the event is the caller's to deliver, once.
        dev.traffic()
            .deliver(srq.srqn(), cq.cqn(), 1, b"x")
            .unwrap();
        hca.poll_events().unwrap();
        assert_eq!(hca.next_event(), None);
        // Below the count it is an ordinary arm, and firmware fires on consumption.
        srq.complete(cq.poll_one().unwrap().wqe_counter).unwrap();
        assert_eq!(hca.arm_srq_limit(&mut srq, 2).unwrap(), LimitArm::Armed);
        dev.traffic()
            .deliver(srq.srqn(), cq.cqn(), 1, b"x")
            .unwrap();
        hca.poll_events().unwrap();
        assert_eq!(hca.next_event(), Some(Event::SrqLimit { srqn: srq.srqn() }));
        drop(bufs);
        hca.destroy_srq(srq, Some(&mut cq))
            .map_err(|e| e.error())
            .unwrap();
        hca.destroy_cq(cq).map_err(|e| e.error()).unwrap();
        hca.teardown().unwrap();
        assert_clean(&dev, "raise now");
    }
}

/// Short scatter lists end with the device's `terminate_scatter_list_mkey`
/// when it offers one (Linux), else with 0x100; the model counts which
/// terminator each receive met.
#[test]
fn the_terminator_is_the_device_key_when_offered() {
    for offered in [true, false] {
        for issi in [0, 1] {
            let dev = device(issi);
            dev.caps_mut(|c| c.terminate_scatter_list_mkey = offered);
            let hca = bring_up(&dev);
            let term = hca.srq_terminator();
            if offered {
                assert_eq!(term, hca.terminate_scatter_list_mkey());
                assert_ne!(term, 0x100);
            } else {
                assert_eq!(term, 0x100);
            }
            let mut cq = hca.create_cq(63, CqOptions::default()).unwrap();
            // Two scatter entries per WQE, one used: every WQE terminated.
            let mut srq = hca.create_srq(15, 2, Some(&mut cq)).unwrap();
            assert_eq!(unstable::srq::ring(&srq).terminator(), term);
            let bufs = dev.hal().alloc_dma(BUF * 8).unwrap();
            let sges: Vec<[Sge; 1]> = (0..4u64)
                .map(|i| {
                    [Sge {
                        addr: bufs.iova() + i * BUF as u64,
                        length: BUF as u32,
                        lkey: hca.reserved_lkey(),
                    }]
                })
                .collect();
            let reqs: Vec<RecvRequest> = sges
                .iter()
                .zip(0..)
                .map(|(s, wr_id)| RecvRequest { wr_id, sges: s })
                .collect();
            srq.post(&reqs).unwrap();
            for _ in 0..4 {
                let d = dev
                    .traffic()
                    .deliver(srq.srqn(), cq.cqn(), QPN, &[7u8; 100])
                    .unwrap();
                assert!(matches!(d, Delivery::Completed { .. }), "{d:?}");
            }
            let s = dev.traffic().stats();
            let want = if offered { (4, 0) } else { (0, 4) };
            assert_eq!(
                (s.terminators_device_key, s.terminators_invalid_lkey),
                want,
                "offered {offered} ISSI {issi}"
            );
            let mut out = [Cqe::EMPTY; 8];
            assert_eq!(cq.poll(&mut out), 4);
            for c in &out[..4] {
                assert_eq!(c.byte_len, 100);
                srq.complete(c.wqe_counter).unwrap();
            }
            hca.destroy_srq(srq, Some(&mut cq))
                .map_err(|e| e.error())
                .unwrap();
            hca.destroy_cq(cq).map_err(|e| e.error()).unwrap();
            drop(bufs);
            hca.teardown().unwrap();
            assert_clean(&dev, &format!("offered {offered} ISSI {issi}"));
        }
    }
}

/// Firmware raising the limit event late — after the driver's query found
/// the limit still armed, before its disarm — and the driver's own fallback
/// must not both deliver: exactly one event, firmware's, and the arm says
/// `Armed` (before the fix: `RaiseNow` plus firmware's event, two).
#[test]
fn a_late_firmware_limit_event_is_delivered_exactly_once() {
    for issi in [0, 1] {
        let mut f = fixture(issi, 15, 1);
        f.post(0, 2).unwrap();
        f.dev.inject().srq_limit_late(1);
        let arm = f.hca.arm_srq_limit(&mut f.srq, 5).unwrap();
        assert_eq!(arm, LimitArm::Armed, "ISSI {issi}: firmware's event counts");
        assert_eq!(f.limit_events(), 1, "ISSI {issi}");
        assert_eq!(f.hca.query_srq(&f.srq).unwrap().lwm, 0);
        // And a later on-time arm still behaves as before.
        let arm = f.hca.arm_srq_limit(&mut f.srq, 6).unwrap();
        assert_eq!(arm, LimitArm::Armed);
        assert_eq!(f.limit_events(), 1, "ISSI {issi}: the on-time event");
        f.finish(&format!("late limit ISSI {issi}"));
    }
}
