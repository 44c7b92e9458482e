//! Hostile device: the model writes corrupted CQEs, EQEs and
//! command outputs on request (`Device::inject().hostile(kind)`), and the
//! driver must turn each into a typed error or a counted, reported drop —
//! never a panic, an out-of-bounds access or the use of an unchecked index.
//! One test or more per `HostileKind`; `tests_of` maps each kind to its tests
//! in a match the compiler checks for exhaustiveness.

use mlx5_driver::cq::{Cq, CqOptions, Cqe, CqeStatus};
use mlx5_driver::srq::{BadRecvCqe, CompleteError, RecvRequest, Sge, Srq};
use mlx5_driver::unstable;
use mlx5_driver::{Error, Event, Hca};
use mlx5_hal::{DmaRegion, Hal};
use mlx5_regs::{CmdStatus, CqeOpcode, Opcode};
use mlx5_sim::hostile::{HOSTILE_CQE_OPCODE, HOSTILE_EVENT_TYPE, HOSTILE_PAGE_COUNT, HOSTILE_QPN};
use mlx5_sim::{Delivery, Device, HcaState, HostileKind, SimConfig, SimHal};
use mlx5_tests::{bring_up, config};

const BUF: usize = 256;
const QPN: u32 = 0x42;

struct Fixture {
    dev: Device,
    hca: Hca<SimHal>,
    cq: Cq<SimHal>,
    srq: Srq<SimHal>,
    bufs: DmaRegion<SimHal>,
}

fn fixture() -> Fixture {
    let dev = Device::new(SimConfig::default());
    let hca = bring_up(&dev);
    let mut cq = hca.create_cq(63, CqOptions::default()).unwrap();
    let srq = hca.create_srq(15, 1, Some(&mut cq)).unwrap();
    let bufs = dev.hal().alloc_dma(BUF * 16).unwrap();
    Fixture {
        dev,
        hca,
        cq,
        srq,
        bufs,
    }
}

impl Fixture {
    fn post(&mut self, wr_ids: std::ops::Range<u64>) {
        let sges: Vec<[Sge; 1]> = wr_ids
            .clone()
            .map(|id| {
                [Sge {
                    addr: self.bufs.iova() + (id % 16) * BUF as u64,
                    length: BUF as u32,
                    lkey: self.hca.default_lkey(),
                }]
            })
            .collect();
        let reqs: Vec<RecvRequest> = sges
            .iter()
            .zip(wr_ids)
            .map(|(s, wr_id)| RecvRequest { wr_id, sges: s })
            .collect();
        self.srq.post(&reqs).unwrap();
    }

    fn deliver(&self, len: usize) -> Delivery {
        self.dev
            .traffic()
            .deliver(self.srq.srqn(), self.cq.cqn(), QPN, &vec![0xab; len])
            .unwrap()
    }

    fn poll_one(&mut self) -> Cqe {
        let mut out = [Cqe::EMPTY; 4];
        assert_eq!(self.cq.poll(&mut out), 1, "exactly one CQE");
        out[0]
    }

    /// A normal receive still works after the hostile one: it completes a
    /// posted request exactly once.
    fn still_works(&mut self, wr_id: u64) {
        self.post(wr_id..wr_id + 1);
        let before = self.srq.outstanding();
        let rejected = self.srq.rejected_cqes();
        let Delivery::Completed { wqe_index } = self.deliver(64) else {
            panic!("delivery failed")
        };
        let posted = unstable::srq::ring(&self.srq)
            .wr_id(wqe_index)
            .expect("a posted WQE");
        let c = self.poll_one();
        let r = self.srq.complete_cqe(&c).expect("a normal CQE matches");
        assert_eq!(
            (r.wr_id, r.byte_len, r.status),
            (posted, 64, CqeStatus::Success)
        );
        assert_eq!(self.srq.outstanding(), before - 1);
        assert_eq!(self.srq.rejected_cqes(), rejected);
    }

    fn finish(self) {
        let Fixture {
            dev,
            hca,
            mut cq,
            srq,
            bufs,
        } = self;
        let user = srq.cqn().is_some();
        hca.destroy_srq(srq, user.then_some(&mut cq))
            .map_err(|e| e.error())
            .unwrap();
        hca.destroy_cq(cq).map_err(|e| e.error()).unwrap();
        hca.teardown().unwrap();
        drop(bufs);
        assert_eq!(dev.pages_held(), 0);
        assert_eq!(dev.objects().total(), 0);
        assert!(dev.iommu_faults().is_empty(), "{:?}", dev.iommu_faults());
    }
}

// ------------------------------------------------------------------- CQEs

#[test]
fn cqe_with_unknown_opcode_is_refused_and_counted() {
    let mut f = fixture();
    f.post(0..4);
    f.dev.inject().hostile(HostileKind::CqeUnknownOpcode);
    f.deliver(64);
    let c = f.poll_one();
    assert_eq!(c.opcode, CqeOpcode(HOSTILE_CQE_OPCODE));
    assert_eq!(
        f.srq.complete_cqe(&c),
        Err(BadRecvCqe::UnexpectedOpcode {
            opcode: HOSTILE_CQE_OPCODE
        })
    );
    assert_eq!(f.srq.rejected_cqes(), 1);
    // Nothing was freed on a CQE the driver could not match.
    assert_eq!(f.srq.outstanding(), 4);
    f.still_works(100);
    f.finish();
}

#[test]
fn cqe_with_wqe_counter_beyond_the_ring_is_refused_and_counted() {
    let mut f = fixture();
    f.post(0..4);
    f.dev.inject().hostile(HostileKind::CqeWqeCounterBeyondRing);
    f.deliver(64);
    let c = f.poll_one();
    assert_eq!(c.wqe_counter, 0xffff);
    assert_eq!(
        f.srq.complete_cqe(&c),
        Err(BadRecvCqe::Wqe(CompleteError::OutOfRange { index: 0xffff }))
    );
    // The low-level path refuses it too.
    assert_eq!(
        f.srq.complete(c.wqe_counter),
        Err(CompleteError::OutOfRange { index: 0xffff })
    );
    // An index inside the ring but never posted (WQE 15 is the sentinel).
    assert_eq!(
        f.srq.complete(15),
        Err(CompleteError::NotPosted { index: 15 })
    );
    assert_eq!(f.srq.rejected_cqes(), 1);
    assert_eq!(f.srq.outstanding(), 4);
    f.still_works(100);
    f.finish();
}

#[test]
fn cqe_with_byte_count_beyond_the_posted_buffer_fails_that_request() {
    let mut f = fixture();
    f.post(7..9);
    f.dev
        .inject()
        .hostile(HostileKind::CqeByteCountBeyondBuffer);
    f.deliver(64);
    let c = f.poll_one();
    assert_eq!(c.byte_len, u32::MAX);
    assert_eq!(
        f.srq.complete_cqe(&c),
        Err(BadRecvCqe::ByteCountBeyondBuffer {
            wr_id: 7,
            byte_len: u32::MAX,
            capacity: BUF as u64
        })
    );
    // The device consumed the WQE: it is freed and the request is reported
    // (its wr_id is in the error), exactly once.
    assert_eq!(f.srq.outstanding(), 1);
    assert_eq!(f.srq.rejected_cqes(), 1);
    assert_eq!(
        f.srq.complete_cqe(&c),
        Err(BadRecvCqe::Wqe(CompleteError::NotPosted {
            index: c.wqe_counter
        }))
    );
    f.still_works(100);
    f.finish();
}

#[test]
fn cqe_naming_an_srq_never_issued_is_refused_and_counted() {
    let mut f = fixture();
    f.post(0..2);
    f.dev.inject().hostile(HostileKind::CqeUnknownSrqn);
    f.deliver(64);
    let c = f.poll_one();
    assert_ne!(c.srqn, f.srq.srqn());
    assert_eq!(
        f.srq.complete_cqe(&c),
        Err(BadRecvCqe::WrongSrq { srqn: c.srqn })
    );
    assert_eq!(f.srq.rejected_cqes(), 1);
    assert_eq!(f.srq.outstanding(), 2);
    f.still_works(100);
    f.finish();
}

#[test]
fn cqe_naming_a_qp_never_issued_is_reported_as_the_device_wrote_it() {
    // The driver core has no QPs: the QP number is not an index anywhere,
    // it is masked to 24 bits and handed to the caller unchanged (the verbs
    // facade matches it). Receive and send CQEs both.
    let mut f = fixture();
    f.post(0..1);
    f.dev.inject().hostile(HostileKind::CqeUnknownQpn);
    f.deliver(64);
    let c = f.poll_one();
    assert_eq!(c.qpn, HOSTILE_QPN);
    let r = f.srq.complete_cqe(&c).unwrap();
    assert_eq!((r.wr_id, r.qpn), (0, HOSTILE_QPN));
    f.dev.inject().hostile(HostileKind::CqeUnknownQpn);
    f.dev.traffic().complete_send(f.cq.cqn(), 7, 3, 10).unwrap();
    let c = f.poll_one();
    assert_eq!(
        (c.opcode, c.qpn, c.wqe_counter),
        (CqeOpcode::REQ, HOSTILE_QPN, 3)
    );
    // A requester CQE is not a receive of this SRQ: refused.
    assert_eq!(
        f.srq.complete_cqe(&c),
        Err(BadRecvCqe::WrongSrq { srqn: 0 })
    );
    f.still_works(100);
    f.finish();
}

// ------------------------------------------------- requester (send) CQEs
//
// Through a real QP pair: the sender's `complete_send` refuses the
// corrupted CQE with the right `BadSendCqe` and keeps working
// (`mlx5_tests::hostile_send`).

#[test]
fn send_cqe_naming_a_wqe_never_posted_is_refused_and_the_qp_keeps_working() {
    mlx5_tests::hostile_send::wqe_counter_not_posted();
}

#[test]
fn send_cqe_with_unknown_send_opcode_is_an_opcode_mismatch_and_retires_its_request() {
    mlx5_tests::hostile_send::unknown_wqe_opcode();
}

#[test]
fn duplicated_send_cqe_completes_once_and_the_copy_is_refused() {
    mlx5_tests::hostile_send::duplicated();
}

// ------------------------------------------------------------------- EQEs

#[test]
fn eqe_of_unknown_type_is_kept_as_unknown_and_nothing_else_moves() {
    let f = fixture();
    f.dev.inject().hostile(HostileKind::EqeUnknownType);
    f.dev
        .traffic()
        .raise_simple_event(mlx5_regs::EventType::PORT_CHANGE, 4)
        .unwrap();
    f.hca.poll_events().unwrap();
    match f.hca.next_event() {
        Some(Event::Unknown { event_type, raw }) => {
            assert_eq!(event_type, HOSTILE_EVENT_TYPE);
            assert_eq!(raw[1], HOSTILE_EVENT_TYPE);
        }
        other => panic!("expected Event::Unknown, got {other:?}"),
    }
    assert_eq!(f.hca.next_event(), None);
    assert_eq!(f.hca.next_completion(), None);
    f.finish();
}

#[test]
fn completion_event_for_a_cq_never_issued_matches_no_cq() {
    let mut f = fixture();
    f.post(0..2);
    f.hca.arm_cq(&mut f.cq, false).unwrap();
    f.dev.inject().hostile(HostileKind::EqeUnknownCqn);
    f.deliver(64);
    f.hca.poll_events().unwrap();
    let ev = f.hca.next_completion().expect("the completion EQE");
    let Event::Completion { cqn } = ev else {
        panic!("expected a completion event, got {ev:?}");
    };
    assert_ne!(cqn, f.cq.cqn(), "the EQE names a CQ never issued");
    // The consumer's dispatch finds no CQ for it and drops it; the real CQ
    // is untouched: its CQE is there. The driver could not count the event
    // for the real CQ (the EQE named another); the consumer, who saw its
    // CQ's completion arrive, counts it, and a new arm works.
    let c = f.poll_one();
    assert!(f.srq.complete_cqe(&c).is_ok());
    f.cq.count_lost_event();
    f.hca.arm_cq(&mut f.cq, false).unwrap();
    f.deliver(64);
    f.hca.poll_events().unwrap();
    assert_eq!(
        f.hca.next_completion(),
        Some(Event::Completion { cqn: f.cq.cqn() })
    );
    let c = f.poll_one();
    assert!(f.srq.complete_cqe(&c).is_ok());
    f.finish();
}

#[test]
fn cq_error_event_for_a_cq_never_issued_is_reported_not_applied() {
    let f = fixture();
    f.dev.inject().hostile(HostileKind::EqeUnknownCqn);
    // Overrun a second CQ with overrun detection: its CQ_ERROR EQE is the
    // one corrupted.
    let victim = f.hca.create_cq(1, CqOptions::default()).unwrap();
    for i in 0..3 {
        f.dev
            .traffic()
            .complete_send(victim.cqn(), 1, i, 0)
            .unwrap();
    }
    f.hca.poll_events().unwrap();
    match f.hca.next_event() {
        Some(Event::CqError { cqn, syndrome: 1 }) => {
            assert_ne!(cqn, victim.cqn());
            assert_ne!(cqn, f.cq.cqn());
        }
        other => panic!("expected a CQ error event, got {other:?}"),
    }
    f.hca.destroy_cq(victim).map_err(|e| e.error()).unwrap();
    f.finish();
}

#[test]
fn srq_limit_event_for_an_srq_never_issued_matches_no_srq() {
    let mut f = fixture();
    f.post(0..4);
    f.dev.inject().hostile(HostileKind::EqeUnknownSrqn);
    f.hca.arm_srq_limit(&mut f.srq, 4).unwrap();
    f.deliver(64);
    f.hca.poll_events().unwrap();
    match f.hca.next_event() {
        Some(Event::SrqLimit { srqn }) => assert_ne!(srqn, f.srq.srqn()),
        other => panic!("expected an SRQ limit event, got {other:?}"),
    }
    assert_eq!(f.hca.next_event(), None);
    let c = f.poll_one();
    assert!(f.srq.complete_cqe(&c).is_ok());
    f.finish();
}

// -------------------------------------------------------- command outputs

/// A failed bring-up leaves the model with nothing: no page, no object, the
/// HCA disabled.
fn assert_unwound(dev: &Device) {
    assert_eq!(dev.pages_held(), 0, "pages left");
    assert_eq!(dev.objects().total(), 0, "objects left {:?}", dev.objects());
    assert_eq!(dev.hca_state(), HcaState::Disabled);
    assert!(dev.iommu_faults().is_empty(), "{:?}", dev.iommu_faults());
}

#[test]
fn huge_capability_logs_fail_bring_up_with_a_typed_error() {
    let dev = Device::new(SimConfig::default());
    dev.inject().hostile(HostileKind::CapsHugeLogs);
    match Hca::bring_up(dev.hal(), config()) {
        Err(Error::BadResponse { opcode, what }) => {
            assert_eq!(opcode, Opcode::QUERY_HCA_CAP);
            assert!(what.contains("log_max"), "{what}");
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("bring-up accepted huge capability logs"),
    }
    assert_eq!(dev.inject().hostile_pending(), 0);
    assert_unwound(&dev);
}

#[test]
fn uar_index_beyond_bar0_fails_bring_up_before_any_doorbell() {
    let dev = Device::new(SimConfig::default());
    dev.inject().hostile(HostileKind::ObjectNumberNeverIssued);
    match Hca::bring_up(dev.hal(), config()) {
        Err(Error::BadResponse { opcode, .. }) => assert_eq!(opcode, Opcode::ALLOC_UAR),
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("bring-up used a UAR beyond BAR0"),
    }
    assert_unwound(&dev);
}

#[test]
fn cq_and_srq_numbers_never_issued_surface_as_typed_errors() {
    let dev = Device::new(SimConfig::default());
    let hca = bring_up(&dev);
    dev.inject().hostile(HostileKind::ObjectNumberNeverIssued);
    let cq = hca.create_cq(7, CqOptions::default()).unwrap();
    // The driver cannot know the number is a lie; firmware refuses every
    // command on it with a typed error and the object is handed back.
    let q = hca.query_cq(&cq);
    assert!(
        matches!(
            q,
            Err(Error::Command {
                status: CmdStatus::BAD_RES_ERR,
                ..
            })
        ),
        "{q:?}"
    );
    let Err(failed) = hca.destroy_cq(cq) else {
        panic!("destroy of a lie succeeded")
    };
    let (cq, e) = failed.into_parts();
    assert!(matches!(
        e,
        Error::Command {
            status: CmdStatus::BAD_RES_ERR,
            ..
        }
    ));
    dev.inject().hostile(HostileKind::ObjectNumberNeverIssued);
    let srq = hca.create_srq(3, 1, None).unwrap();
    let Err(failed) = hca.destroy_srq(srq, None) else {
        panic!("destroy of a lie succeeded")
    };
    let (srq, e) = failed.into_parts();
    assert!(matches!(
        e,
        Error::Command {
            status: CmdStatus::BAD_RES_ERR,
            ..
        }
    ));
    // The real SRQ still uses the PD: DEALLOC_PD is refused with a typed
    // error, every later teardown step still runs, TEARDOWN_HCA destroys the
    // real objects and every page comes back. The driver's queue memory is
    // freed only after that (the objects are dropped last).
    match hca.teardown() {
        Err(Error::Command { opcode, status, .. }) => {
            assert_eq!(
                (opcode, status),
                (Opcode::DEALLOC_PD, CmdStatus::BAD_RES_STATE_ERR)
            )
        }
        other => panic!(
            "unexpected teardown result {:?}",
            other.map(|r| r.pages_left)
        ),
    }
    drop((cq, srq));
    assert_eq!(dev.hca_state(), HcaState::Disabled);
    assert_eq!(dev.objects().total(), 0);
    assert_eq!(dev.pages_held(), 0);
}

#[test]
fn page_count_beyond_memory_fails_bring_up_before_giving_a_page() {
    let dev = Device::new(SimConfig::default());
    dev.inject().hostile(HostileKind::PageCountBeyondMemory);
    match Hca::bring_up(dev.hal(), config()) {
        Err(Error::OutOfPages { requested }) => {
            assert_eq!(requested, HOSTILE_PAGE_COUNT as usize)
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("bring-up accepted 8 TiB of pages"),
    }
    // No MANAGE_PAGES give was sent.
    assert!(!dev
        .trace()
        .iter()
        .any(|t| t.opcode == Opcode::MANAGE_PAGES.0 && t.op_mod == 1));
    assert_unwound(&dev);
}

#[test]
fn page_request_beyond_memory_is_answered_cannot_give_and_counted() {
    let dev = Device::new(SimConfig::default());
    let hca = bring_up(&dev);
    let held = hca.pages_held_by_firmware();
    dev.inject().page_request(HOSTILE_PAGE_COUNT);
    hca.poll_events().unwrap();
    let s = hca.page_stats();
    assert_eq!((s.refused_counts, s.give_failures), (1, 1));
    assert_eq!(hca.pages_held_by_firmware(), held, "nothing given");
    assert_eq!(dev.pages_required().2, 0, "the request was cancelled");
    hca.teardown().unwrap();
    assert_eq!(dev.pages_held(), 0);
}

fn bad_page_return(kind: HostileKind) {
    let dev = Device::new(SimConfig::default());
    let hca = bring_up(&dev);
    let held = hca.pages_held_by_firmware();
    assert_eq!(dev.pages_held(), held);
    // Firmware offers 4 pages back; its answer to the take lies.
    dev.inject().hostile(kind);
    dev.inject().page_request(-4);
    hca.poll_events().unwrap();
    let s = hca.page_stats();
    assert_eq!(s.bad_returns, 1, "{kind:?}");
    assert_eq!(s.reclaimed, 0, "{kind:?}: nothing freed on a lie");
    assert_eq!(hca.pages_held_by_firmware(), held);
    assert_eq!(dev.pages_held(), held);
    // The pages come back properly at teardown.
    let r = hca.teardown().unwrap();
    assert_eq!(r.pages_left, 0);
    assert_eq!(dev.pages_held(), 0);
}

#[test]
fn pages_never_given_in_a_take_answer_are_refused_and_counted() {
    bad_page_return(HostileKind::PagesNeverGiven);
}

#[test]
fn more_pages_than_asked_for_in_a_take_answer_are_refused_and_counted() {
    bad_page_return(HostileKind::PagesMoreThanRequested);
}

/// The tests of each kind. The match has no `_` arm, so a `HostileKind`
/// added to the model without a test here does not compile; the list is
/// checked by the compiler, not kept in step by hand.
fn tests_of(kind: HostileKind) -> &'static [fn()] {
    use HostileKind::*;
    match kind {
        CqeUnknownOpcode => &[cqe_with_unknown_opcode_is_refused_and_counted],
        CqeWqeCounterBeyondRing => &[cqe_with_wqe_counter_beyond_the_ring_is_refused_and_counted],
        CqeByteCountBeyondBuffer => {
            &[cqe_with_byte_count_beyond_the_posted_buffer_fails_that_request]
        }
        CqeUnknownQpn => &[cqe_naming_a_qp_never_issued_is_reported_as_the_device_wrote_it],
        CqeUnknownSrqn => &[cqe_naming_an_srq_never_issued_is_refused_and_counted],
        SendCqeWqeCounterNotPosted => {
            &[send_cqe_naming_a_wqe_never_posted_is_refused_and_the_qp_keeps_working]
        }
        SendCqeUnknownWqeOpcode => {
            &[send_cqe_with_unknown_send_opcode_is_an_opcode_mismatch_and_retires_its_request]
        }
        SendCqeDuplicated => &[duplicated_send_cqe_completes_once_and_the_copy_is_refused],
        EqeUnknownType => &[eqe_of_unknown_type_is_kept_as_unknown_and_nothing_else_moves],
        EqeUnknownCqn => &[
            completion_event_for_a_cq_never_issued_matches_no_cq,
            cq_error_event_for_a_cq_never_issued_is_reported_not_applied,
        ],
        EqeUnknownSrqn => &[srq_limit_event_for_an_srq_never_issued_matches_no_srq],
        CapsHugeLogs => &[huge_capability_logs_fail_bring_up_with_a_typed_error],
        ObjectNumberNeverIssued => &[
            uar_index_beyond_bar0_fails_bring_up_before_any_doorbell,
            cq_and_srq_numbers_never_issued_surface_as_typed_errors,
        ],
        PageCountBeyondMemory => &[page_count_beyond_memory_fails_bring_up_before_giving_a_page],
        PagesNeverGiven => &[pages_never_given_in_a_take_answer_are_refused_and_counted],
        PagesMoreThanRequested => {
            &[more_pages_than_asked_for_in_a_take_answer_are_refused_and_counted]
        }
    }
}

#[test]
fn every_kind_is_covered() {
    // `ALL` names every kind once, and each has at least one test (the
    // exhaustive match above proves the reverse direction at compile time).
    let mut seen = std::collections::HashSet::new();
    for k in HostileKind::ALL {
        assert!(seen.insert(k), "{k:?} twice in HostileKind::ALL");
        assert!(!tests_of(k).is_empty(), "{k:?} has no test");
    }
}
