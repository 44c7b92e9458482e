//! Requester-CQE matching (unsignaled runs, wrap, hostile CQEs, flush),
//! the state rules, 2RST, QP events.

extern crate std;

use std::vec::Vec;

use super::super::*;
use super::{flush_cqe, geometry, qp, req_cqe, send, sge, QPN};
use crate::cq::{Cqe, CqeError, CqeStatus};
use crate::eq::Event;
use crate::testhal::TestHal;
use mlx5_regs::{CqeOpcode, EventType};

#[test]
fn a_signaled_cqe_retires_the_unsignaled_ones_before_it_across_laps() {
    let hal = TestHal::new();
    let g = geometry(8, 1, 0);
    let mut q = qp(&hal, g);
    let s = [sge(1, 1)];
    let mut next = 0u64;
    let mut counter = 0u16;
    // Many laps of the 8-slot ring: groups of 3 unsignaled + 1 signaled
    // (under Miri, where each post costs tens of milliseconds, 10 laps).
    let groups = if cfg!(miri) { 20 } else { 200 };
    for _ in 0..groups {
        let reqs: Vec<SendRequest<'_>> = (0..4).map(|k| send(next + k, &s, k == 3)).collect();
        q.post_send(&reqs).unwrap();
        let last = counter.wrapping_add(3);
        let c = q.complete_send(&req_cqe(last)).unwrap();
        assert_eq!(c.wr_id, next + 3);
        assert_eq!((c.retired, c.signaled, c.wqe_index), (4, true, last));
        assert_eq!(c.opcode, SendOpcode::Send);
        assert_eq!(c.status, CqeStatus::Success);
        assert_eq!(q.outstanding_sends(), 0);
        next += 4;
        counter = counter.wrapping_add(4);
    }
    assert_eq!(q.rejected_cqes(), 0);
}

#[test]
#[cfg_attr(
    miri,
    ignore = "70,000 WQEs of counter arithmetic: about ten minutes under Miri; the WQE and CQE accesses are the other tests'"
)]
fn the_16_bit_wqe_counter_wraps() {
    let hal = TestHal::new();
    let mut q = qp(&hal, geometry(4, 1, 0));
    let s = [sge(1, 1)];
    for i in 0..70_000u32 {
        q.post_send(&[send(i as u64, &s, true)]).unwrap();
        let c = q.complete_send(&req_cqe(i as u16)).unwrap();
        assert_eq!(c.wr_id, i as u64);
    }
    assert_eq!(
        q.send_ring().unwrap().producer_counter(),
        (70_000u32 % 65536) as u16
    );
}

#[test]
fn untrusted_cqes_are_refused_without_side_effects() {
    let hal = TestHal::new();
    let g = geometry(8, 4, 0);
    let mut q = qp(&hal, g);
    let two = [sge(1, 1), sge(2, 2), sge(3, 3), sge(4, 4)];
    // WQE 0 takes two WQEBBs (0 and 1); WQE 2 one.
    q.post_send(&[send(10, &two, false), send(11, &two[..1], true)])
        .unwrap();
    let bad = |q: &mut Qp<TestHal, Vec<SendSlot>>, c: Cqe| q.complete_send(&c).unwrap_err();
    assert_eq!(
        bad(&mut q, req_cqe(1)),
        BadSendCqe::NotOutstanding { wqe_counter: 1 },
        "mid-WQE"
    );
    assert_eq!(
        bad(&mut q, req_cqe(3)),
        BadSendCqe::NotOutstanding { wqe_counter: 3 },
        "never posted"
    );
    assert_eq!(
        bad(&mut q, req_cqe(0xfff0 | 2)),
        BadSendCqe::NotOutstanding {
            wqe_counter: 0xfff2
        },
        "right slot, wrong lap"
    );
    assert_eq!(
        bad(
            &mut q,
            Cqe {
                qpn: QPN + 1,
                ..req_cqe(2)
            }
        ),
        BadSendCqe::WrongQp { qpn: QPN + 1 }
    );
    assert_eq!(
        bad(
            &mut q,
            Cqe {
                opcode: CqeOpcode::RESP_SEND,
                ..req_cqe(2)
            }
        ),
        BadSendCqe::NotRequester { opcode: 2 }
    );
    assert_eq!(q.rejected_cqes(), 5);
    assert_eq!(q.outstanding_sends(), 2, "nothing retired");
    let c = q.complete_send(&req_cqe(2)).unwrap();
    assert_eq!((c.wr_id, c.retired), (11, 2));
    assert_eq!(
        bad(&mut q, req_cqe(2)),
        BadSendCqe::NotOutstanding { wqe_counter: 2 },
        "a duplicate"
    );
    assert_eq!(
        bad(&mut q, req_cqe(0)),
        BadSendCqe::NotOutstanding { wqe_counter: 0 },
        "already retired by the later CQE"
    );
}

#[test]
fn a_good_cqe_with_another_opcode_is_refused_but_retires_its_wqe() {
    let hal = TestHal::new();
    let mut q = qp(&hal, geometry(8, 1, 0));
    let s = [sge(1, 1)];
    q.post_send(&[send(1, &s, false), send(2, &s, true), send(3, &s, true)])
        .unwrap();
    let mut c = req_cqe(1);
    c.send_opcode = 0x7f;
    assert_eq!(
        q.complete_send(&c),
        Err(BadSendCqe::OpcodeMismatch {
            wr_id: 2,
            opcode: 0x7f,
            posted: SendOpcode::Send
        })
    );
    assert_eq!((q.rejected_cqes(), q.outstanding_sends()), (1, 1));
    // RDMA writes are reported with their own opcode.
    let w = [SendRequest {
        op: SendOp::RdmaWriteImm {
            raddr: 0,
            rkey: 1,
            imm: 0,
        },
        ..send(4, &s, true)
    }];
    q.post_send(&w).unwrap();
    let mut c = req_cqe(3);
    c.send_opcode = 0x09;
    let done = q.complete_send(&c).unwrap();
    assert_eq!(
        (done.wr_id, done.retired, done.opcode),
        (4, 2, SendOpcode::RdmaWriteImm)
    );
    // An error CQE's opcode byte is not relied on (Linux does not read it).
    q.post_send(&s.map(|_| send(5, &s, true))).unwrap();
    let mut c = flush_cqe(4);
    c.send_opcode = 0;
    assert_eq!(q.complete_send(&c).unwrap().wr_id, 5);
}

#[test]
fn flush_cqes_name_every_request_and_mark_the_qp_in_error() {
    let hal = TestHal::new();
    let mut q = qp(&hal, geometry(8, 1, 0));
    let s = [sge(1, 1)];
    let reqs: Vec<SendRequest<'_>> = (0..5).map(|i| send(100 + i, &s, i % 2 == 0)).collect();
    q.post_send(&reqs).unwrap();
    // The QP went to ERR: one flush CQE per outstanding WQE, signaled or not.
    for i in 0..5u16 {
        let c = q.complete_send(&flush_cqe(i)).unwrap();
        assert_eq!(c.wr_id, 100 + i as u64);
        assert_eq!(c.retired, 1);
        assert_eq!(c.error(), Some(CqeError::WrFlush));
        assert_eq!(c.signaled, i % 2 == 0);
    }
    assert_eq!(q.state(), QpState::Error);
    // Posting in ERR is allowed (the device flushes it).
    q.post_send(&reqs[..1]).unwrap();
    let c = q.complete_send(&flush_cqe(5)).unwrap();
    assert_eq!(c.wr_id, 100);
}

#[test]
fn a_batched_error_cqe_retires_everything_up_to_it() {
    let hal = TestHal::new();
    let mut q = qp(&hal, geometry(8, 1, 0));
    let s = [sge(1, 1)];
    let reqs: Vec<SendRequest<'_>> = (0..4).map(|i| send(i, &s, false)).collect();
    q.post_send(&reqs).unwrap();
    let mut c = flush_cqe(3);
    c.status = CqeStatus::Error {
        syndrome: 0x04,
        vendor_syndrome: 0x33,
    };
    let done = q.complete_send(&c).unwrap();
    assert_eq!((done.wr_id, done.retired), (3, 4));
    assert_eq!(done.error(), Some(CqeError::LocalProtection));
    assert_eq!(q.outstanding_sends(), 0);
}

#[test]
fn posting_is_refused_in_reset_init_and_rtr_and_without_a_send_queue() {
    let hal = TestHal::new();
    let mut q = qp(&hal, geometry(4, 1, 0));
    let s = [sge(1, 1)];
    for st in [QpState::Reset, QpState::Init, QpState::Rtr] {
        q.state = st;
        let e = q.post_send(&[send(1, &s, true)]).unwrap_err();
        assert_eq!(
            e,
            PostSendFailure {
                index: 0,
                error: SendError::BadState { state: st }
            }
        );
        assert_eq!(e.error.errno(), 22);
    }
    assert!(hal.doorbells().is_empty());
    q.state = QpState::Rts;
    q.sq = None;
    assert_eq!(
        q.post_send(&[send(1, &s, true)]).unwrap_err().error,
        SendError::NoSendQueue
    );
    assert_eq!(q.complete_send(&req_cqe(0)), Err(BadSendCqe::NoSendQueue));
}

#[test]
fn transitions_are_allowed_only_from_their_state() {
    use Transition::*;
    let states = [
        QpState::Reset,
        QpState::Init,
        QpState::Rtr,
        QpState::Rts,
        QpState::SqError,
        QpState::SqDrained,
        QpState::Error,
    ];
    for s in states {
        assert_eq!(Rst2Init.allowed_from(s), s == QpState::Reset, "{s:?}");
        assert_eq!(Init2Rtr.allowed_from(s), s == QpState::Init, "{s:?}");
        assert_eq!(Rtr2Rts.allowed_from(s), s == QpState::Rtr, "{s:?}");
        assert!(ToError.allowed_from(s) && ToReset.allowed_from(s), "{s:?}");
    }
    assert_eq!(
        [Rst2Init, Init2Rtr, Rtr2Rts, ToError, ToReset].map(|t| t.target()),
        [
            QpState::Init,
            QpState::Rtr,
            QpState::Rts,
            QpState::Error,
            QpState::Reset
        ]
    );
    assert_eq!(Init2Rtr.command(), "INIT2RTR_QP");
}

#[test]
fn reset_zeroes_counters_table_and_doorbell_record() {
    let hal = TestHal::new();
    let mut q = qp(&hal, geometry(4, 1, 0));
    let s = [sge(1, 1)];
    q.post_send(&[send(1, &s, true), send(2, &s, true)])
        .unwrap();
    assert_eq!(q.doorbell_record().read_be32(4), 2);
    q.reset_rings();
    assert_eq!(q.doorbell_record().read_be64(0), 0);
    assert_eq!(q.outstanding_sends(), 0);
    assert_eq!(q.send_ring().unwrap().producer_counter(), 0);
    assert!(q.slots.iter().all(|s| *s == SendSlot::EMPTY));
    // The old CQEs match nothing now.
    assert!(q.complete_send(&req_cqe(1)).is_err());
    q.post_send(&[send(3, &s, true)]).unwrap();
    assert_eq!(q.complete_send(&req_cqe(0)).unwrap().wr_id, 3);
}

#[test]
fn qp_events_are_routed_by_qpn_and_errors_change_the_state() {
    let hal = TestHal::new();
    let mut q = qp(&hal, geometry(4, 1, 0));
    let ev = |t: EventType, qpn: u32| Event::Qp {
        qpn,
        event: QpEvent::from_event_type(t).unwrap(),
    };
    assert_eq!(
        q.handle_event(&ev(EventType::COMM_EST, QPN)),
        Some(QpEvent::CommEstablished)
    );
    assert_eq!(q.state(), QpState::Rts, "comm established changes nothing");
    assert_eq!(
        q.handle_event(&ev(EventType::WQ_CATAS_ERROR, QPN + 1)),
        None
    );
    assert_eq!(q.handle_event(&Event::SrqLimit { srqn: QPN }), None);
    assert_eq!(q.state(), QpState::Rts);
    for (t, e) in [
        (EventType::WQ_CATAS_ERROR, QpEvent::CatastrophicError),
        (EventType::WQ_INVAL_REQ_ERROR, QpEvent::InvalidRequest),
        (EventType::WQ_ACCESS_ERROR, QpEvent::AccessError),
    ] {
        q.state = QpState::Rts;
        assert_eq!(q.handle_event(&ev(t, QPN)), Some(e));
        assert_eq!(q.state(), QpState::Error);
    }
    assert!(!q.last_wqe_reached());
    assert_eq!(
        q.handle_event(&ev(EventType::SRQ_LAST_WQE, QPN)),
        Some(QpEvent::LastWqeReached)
    );
    assert!(q.last_wqe_reached());
}

#[test]
fn an_event_read_after_the_qp_was_reset_changes_nothing() {
    // Raised while the QP was in error, read after the driver reset it: a
    // QP in RESET or INIT raises no events, so it is from before.
    let hal = TestHal::new();
    let mut q = qp(&hal, geometry(4, 1, 0));
    for state in [QpState::Reset, QpState::Init] {
        q.state = state;
        for event in [QpEvent::AccessError, QpEvent::LastWqeReached] {
            let ev = Event::Qp { qpn: QPN, event };
            assert_eq!(q.handle_event(&ev), Some(event), "still this QP's");
            assert_eq!(q.state(), state);
            assert!(!q.last_wqe_reached());
        }
    }
    q.state = QpState::Rtr;
    let ev = Event::Qp {
        qpn: QPN,
        event: QpEvent::AccessError,
    };
    q.handle_event(&ev);
    assert_eq!(q.state(), QpState::Error, "a receiving QP takes it");
}

#[test]
fn every_send_posts_and_completes_without_heap_growth() {
    // The hot path touches only the ring, the table and the record: the
    // platform sees no allocation after creation.
    let hal = TestHal::new();
    let mut q = qp(&hal, geometry(64, 2, 32));
    let live = hal.live();
    let s = [sge(1, 8), sge(2, 8)];
    // Under Miri, where each post costs tens of milliseconds, past the
    // ring's 64 slots once.
    let n = if cfg!(miri) { 100 } else { 1000u64 };
    for i in 0..n {
        q.post_send(&[send(i, &s, true)]).unwrap();
        q.complete_send(&req_cqe(i as u16)).unwrap();
    }
    assert_eq!(hal.live(), live);
}
