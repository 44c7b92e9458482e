//! The own receive queue without firmware: sizing as rdma-core, the WQE
//! bytes, the doorbell record's receive counter, `bad_wr` semantics and
//! in-order completion.

extern crate std;
use std::vec;
use std::vec::Vec;

use super::super::recv::{RecvQueueCaps, RecvRing, RqGeometry, RqSizeError};
use super::super::ring::SendRing;
use super::super::*;
use super::{geometry, sge, QPN};
use crate::cq::{Cqe, CqeStatus};
use crate::srq::{BadRecvCqe, CompleteError, PostError, PostFailure, RecvRequest};
use crate::testhal::TestHal;
use mlx5_hal::{DmaRegion, Hal};
use mlx5_regs::CqeOpcode;

const BF: usize = 0x3800;

fn rq_geo(wr: u32, sge: u32) -> RqGeometry {
    RqGeometry::for_request(
        &RecvQueueCaps {
            max_recv_wr: wr,
            max_recv_sge: sge,
        },
        512,
        15,
    )
    .unwrap()
}

/// A QP in RTS with a send ring and an own receive ring laid before it.
fn qp_rq(hal: &TestHal, rq: RqGeometry) -> Qp<TestHal, Vec<SendSlot>> {
    let geo = geometry(8, 1, 0);
    let (mut ring, _, base) =
        SendRing::after_recv(hal, geo, rq.bytes(), usize::MAX, BF, 512).unwrap();
    ring.set_qpn(QPN);
    Qp {
        qpn: QPN,
        state: QpState::Rts,
        sq: Some(ring),
        rq: Some(RecvRing::new(hal, rq, base, None).unwrap()),
        slots: vec![SendSlot::EMPTY; geo.wqebbs()],
        dbr: hal.alloc_dma(8).unwrap(),
        hal: hal.clone(),
        cqn_snd: Some(1),
        cqn_rcv: Some((1, false)),
        srqn: None,
        rejected: 0,
        last_wqe_reached: false,
        ud: false,
    }
}

fn buf(q: &Qp<TestHal, Vec<SendSlot>>) -> &DmaRegion<TestHal> {
    q.sq.as_ref().unwrap().region()
}

fn seg(q: &Qp<TestHal, Vec<SendSlot>>, wqe: usize, i: usize) -> (u32, u32, u64) {
    let rq = q.rq.as_ref().unwrap();
    let at = rq.base_offset() + wqe * rq.geometry().stride() + i * 16;
    let b = buf(q);
    (b.read_be32(at), b.read_be32(at + 4), b.read_be64(at + 8))
}

fn recv_cqe(wqe_counter: u16, byte_len: u32) -> Cqe {
    Cqe {
        opcode: CqeOpcode::RESP_SEND,
        qpn: QPN,
        wqe_counter,
        byte_len,
        ..Cqe::EMPTY
    }
}

#[test]
fn sizes_round_as_rdma_core() {
    // 3 SGEs: 48 -> 64-byte WQEs holding 4; 10 WRs -> 16.
    let g = rq_geo(10, 3);
    assert_eq!(
        (g.stride(), g.wqe_cnt(), g.max_recv_wr, g.max_recv_sge),
        (64, 16, 16, 4)
    );
    // The ring is at least 64 bytes: 1 WR of 1 SGE gets 4 WQEs of 16 bytes.
    let g = rq_geo(1, 1);
    assert_eq!(
        (g.stride(), g.max_recv_wr, g.max_recv_sge, g.bytes()),
        (16, 4, 1, 64)
    );
    // 0 SGEs counts as 1.
    assert_eq!(rq_geo(4, 0), rq_geo(4, 1));
    let size = |wr, sge| {
        RqGeometry::for_request(
            &RecvQueueCaps {
                max_recv_wr: wr,
                max_recv_sge: sge,
            },
            512,
            10,
        )
    };
    assert_eq!(size(0, 1), Err(RqSizeError::NoWorkRequests));
    assert_eq!(size(1025, 1), Err(RqSizeError::TooManyWorkRequests));
    assert_eq!(size(1024, 1).unwrap().max_recv_wr, 1024);
    assert_eq!(size(4, 33), Err(RqSizeError::WqeTooLarge));
    assert_eq!(size(4, 32).unwrap().max_recv_sge, 32);
    // 17..32 SGEs round to 512 bytes; above max_wqe_sz_rq once rounded.
    assert_eq!(
        RqGeometry::for_request(
            &RecvQueueCaps {
                max_recv_wr: 4,
                max_recv_sge: 17,
            },
            300,
            10,
        ),
        Err(RqSizeError::WqeTooLarge)
    );
}

#[test]
fn receive_ring_comes_first_in_the_qp_buffer() {
    let hal = TestHal::new();
    let q = qp_rq(&hal, rq_geo(10, 3));
    let rq = q.rq.as_ref().unwrap();
    let sq = q.sq.as_ref().unwrap();
    assert_eq!(sq.base_offset(), rq.base_offset() + 16 * 64);
}

#[test]
fn wqes_hold_non_empty_entries_then_the_terminator_and_the_counter_is_published() {
    let hal = TestHal::new();
    let mut q = qp_rq(&hal, rq_geo(4, 3));
    let two = [sge(1, 100), sge(2, 0), sge(3, 50)];
    let full = [sge(4, 1), sge(5, 2), sge(6, 3), sge(7, 4)];
    q.post_recv(&[
        RecvRequest {
            wr_id: 10,
            sges: &two,
        },
        RecvRequest {
            wr_id: 11,
            sges: &full,
        },
    ])
    .unwrap();
    // WQE 0: the zero-length entry skipped, then the terminator.
    assert_eq!(seg(&q, 0, 0), (100, 0x501, 0x10_0000));
    assert_eq!(seg(&q, 0, 1), (50, 0x503, 0x30_0000));
    assert_eq!(seg(&q, 0, 2), (0, 0x100, 0));
    // WQE 1: full, no terminator.
    for i in 0..4 {
        assert_eq!(
            seg(&q, 1, i),
            (i as u32 + 1, 0x504 + i as u32, 0x10_0000 * (i as u64 + 4))
        );
    }
    assert_eq!(q.dbr.read_be32(0), 2, "receive counter in dword 0");
    assert_eq!(q.dbr.read_be32(4), 0, "send counter untouched");
    assert_eq!(q.outstanding_recvs(), 2);
}

#[test]
fn a_refused_request_stops_the_list_and_the_ones_before_stay_posted() {
    let hal = TestHal::new();
    let mut q = qp_rq(&hal, rq_geo(4, 1));
    let one = [sge(1, 64)];
    let three = [sge(1, 1), sge(2, 1), sge(3, 1)];
    let r = |wr_id, sges| RecvRequest { wr_id, sges };
    // Too many SGEs at index 1: request 0 posted.
    assert_eq!(
        q.post_recv(&[r(0, &one[..]), r(1, &three[..]), r(2, &one[..])]),
        Err(PostFailure {
            index: 1,
            error: PostError::TooManySges { given: 3, max: 1 }
        })
    );
    assert_eq!((q.outstanding_recvs(), q.dbr.read_be32(0)), (1, 1));
    // Full at index 3 (4 WQEs).
    let list: Vec<RecvRequest> = (1..6).map(|i| r(i, &one[..])).collect();
    assert_eq!(
        q.post_recv(&list),
        Err(PostFailure {
            index: 3,
            error: PostError::Full
        })
    );
    assert_eq!((q.outstanding_recvs(), q.dbr.read_be32(0)), (4, 4));
    // A refusal of the first request changes nothing.
    let before = buf(&q).read_be64(0);
    assert_eq!(q.post_recv(&[r(9, &one[..])]).unwrap_err().index, 0);
    assert_eq!((q.outstanding_recvs(), q.dbr.read_be32(0)), (4, 4));
    assert_eq!(buf(&q).read_be64(0), before);
    // Completed in order, with their wr_ids; then room again.
    for (n, want) in [0u64, 1, 2, 3].into_iter().enumerate() {
        let c = q.complete_own_recv(&recv_cqe(n as u16, 64)).unwrap();
        assert_eq!((c.wr_id, c.srqn, c.status), (want, 0, CqeStatus::Success));
    }
    q.post_recv(&[r(7, &one[..])]).unwrap();
    assert_eq!(q.dbr.read_be32(0), 5);
}

#[test]
fn completions_must_name_the_oldest_wqe_and_fit_its_buffers() {
    let hal = TestHal::new();
    let mut q = qp_rq(&hal, rq_geo(4, 1));
    let one = [sge(1, 64)];
    let r = |wr_id| RecvRequest {
        wr_id,
        sges: &one[..],
    };
    assert_eq!(
        q.complete_own_recv(&recv_cqe(0, 1)),
        Err(BadRecvCqe::Wqe(CompleteError::NotPosted { index: 0 })),
        "nothing outstanding"
    );
    q.post_recv(&[r(1), r(2)]).unwrap();
    assert_eq!(
        q.complete_own_recv(&recv_cqe(1, 1)),
        Err(BadRecvCqe::Wqe(CompleteError::NotPosted { index: 1 })),
        "not the oldest"
    );
    assert!(matches!(
        q.complete_own_recv(&Cqe {
            srqn: 5,
            ..recv_cqe(0, 1)
        }),
        Err(BadRecvCqe::WrongSrq { srqn: 5 })
    ));
    assert!(matches!(
        q.complete_own_recv(&Cqe {
            qpn: QPN + 1,
            ..recv_cqe(0, 1)
        }),
        Err(BadRecvCqe::WrongQp { .. })
    ));
    assert_eq!(q.rejected_cqes(), 4);
    assert_eq!(
        q.complete_own_recv(&recv_cqe(0, 65)),
        Err(BadRecvCqe::ByteCountBeyondBuffer {
            wr_id: 1,
            byte_len: 65,
            capacity: 64
        })
    );
    // A flush completes the next one and puts the QP in error.
    let flush = Cqe {
        opcode: CqeOpcode::RESP_ERR,
        status: CqeStatus::Error {
            syndrome: 0x05,
            vendor_syndrome: 0,
        },
        ..recv_cqe(1, 0)
    };
    assert_eq!(q.complete_own_recv(&flush).unwrap().wr_id, 2);
    assert_eq!(q.state(), QpState::Error);
    // 2RST: counters back to zero.
    q.reset_rings();
    assert_eq!((q.outstanding_recvs(), q.dbr.read_be32(0)), (0, 0));
}

#[test]
fn a_qp_without_its_own_receive_queue_refuses_post_recv() {
    let hal = TestHal::new();
    let mut q = super::qp(&hal, geometry(8, 1, 0));
    let one = [sge(1, 64)];
    assert_eq!(
        q.post_recv(&[RecvRequest {
            wr_id: 1,
            sges: &one
        }]),
        Err(PostFailure {
            index: 0,
            error: PostError::NoReceiveQueue
        })
    );
    assert_eq!(q.dbr.read_be32(0), 0);
    assert!(q.complete_own_recv(&recv_cqe(0, 1)).is_err());
}

#[test]
fn lists_and_single_requests_record_the_capacity_the_device_reads() {
    // Lengths as the device reads them: the low 31 bits, 0 meaning 2 GiB;
    // zero-length entries skipped. The same from a list (the ring view's
    // path, with its out-of-line rewrite) and one request at a time.
    let hal = TestHal::new();
    let lists: [&[(u32, u32)]; 4] = [
        &[(1, 0x8000_0001)],
        &[(1, 0x8000_0000), (2, 0)],
        &[(1, 10), (2, 20)],
        &[(1, 0), (2, 7), (3, 0)],
    ];
    let want = [1u64, 1 << 31, 30, 7];
    for one_by_one in [false, true] {
        let mut q = qp_rq(&hal, rq_geo(4, 3));
        let sges: Vec<Vec<_>> = lists
            .iter()
            .map(|l| l.iter().map(|&(i, len)| sge(i, len)).collect())
            .collect();
        let reqs: Vec<RecvRequest> = sges
            .iter()
            .enumerate()
            .map(|(i, s)| RecvRequest {
                wr_id: i as u64,
                sges: s,
            })
            .collect();
        if one_by_one {
            for r in &reqs {
                q.post_recv(core::slice::from_ref(r)).unwrap();
            }
        } else {
            q.post_recv(&reqs).unwrap();
        }
        assert_eq!(q.dbr.read_be32(0), 4);
        // WQE 3: the one non-empty entry, then the terminator.
        assert_eq!(seg(&q, 3, 0), (7, 0x502, 0x20_0000));
        assert_eq!(seg(&q, 3, 1), (0, 0x100, 0));
        assert_eq!(seg(&q, 1, 1), (0, 0x100, 0), "terminator after 2 GiB");
        for (n, &cap) in want.iter().enumerate() {
            assert_eq!(
                q.complete_own_recv(&recv_cqe(n as u16, cap as u32 + 1)),
                Err(BadRecvCqe::ByteCountBeyondBuffer {
                    wr_id: n as u64,
                    byte_len: cap as u32 + 1,
                    capacity: cap
                }),
                "request {n}, one by one: {one_by_one}"
            );
        }
    }
}
