//! Send-ring and QP data-path unit tests: the test plays the device,
//! parsing the WQEs the driver wrote and writing CQEs back. This file:
//! sizing, WQE building, doorbells; [`complete`]: completion matching,
//! states, events.

extern crate std;

use std::vec;
use std::vec::Vec;

use super::ring::SendRing;
use super::*;

mod blueflame;
mod complete;
mod inline;
mod recv;
use crate::cq::{Cqe, CqeStatus};
use crate::srq::Sge;
use crate::testhal::TestHal;
use mlx5_regs::CqeOpcode;

const QPN: u32 = 0x1234;
const BF: usize = 0x3800;
const BF_SIZE: usize = 512;

pub(crate) fn geometry(max_wr: u32, max_sge: u32, max_inline: u32) -> SqGeometry {
    SqGeometry::for_request(
        &SendQueueCaps {
            max_send_wr: max_wr,
            max_send_sge: max_sge,
            max_inline_data: max_inline,
        },
        1024,
        15,
    )
    .unwrap()
}

/// A QP in RTS with a send ring of `geo`, built without firmware.
pub(crate) fn qp(hal: &TestHal, geo: SqGeometry) -> Qp<TestHal, Vec<SendSlot>> {
    qp_atomics(hal, geo, false)
}

/// [`qp`] whose ring takes atomics or not.
pub(crate) fn qp_atomics(
    hal: &TestHal,
    geo: SqGeometry,
    atomics: bool,
) -> Qp<TestHal, Vec<SendSlot>> {
    let (mut ring, _) = SendRing::new(hal, geo, usize::MAX, BF, BF_SIZE).unwrap();
    ring.set_qpn(QPN);
    ring.set_atomics(atomics);
    Qp {
        qpn: QPN,
        state: QpState::Rts,
        sq: Some(ring),
        rq: None,
        slots: vec![SendSlot::EMPTY; geo.wqebbs()],
        dbr: mlx5_hal::Hal::alloc_dma(hal, 8).unwrap(),
        hal: hal.clone(),
        cqn_snd: Some(1),
        cqn_rcv: None,
        srqn: None,
        rejected: 0,
        last_wqe_reached: false,
    }
}

/// The device's reading of one WQE: control dwords and the 16-byte units
/// after it, following the ring's wrap.
#[derive(Debug)]
pub(super) struct Wqe {
    index: u16,
    opcode: u8,
    qpn: u32,
    ds: usize,
    fm_ce_se: u8,
    imm: u32,
    units: Vec<[u8; 16]>,
}

/// The QP's send table (for comparing two QPs' bookkeeping).
pub(crate) fn slots(q: &Qp<TestHal, Vec<SendSlot>>) -> &[SendSlot] {
    &q.slots
}

pub(super) fn read_wqe(q: &Qp<TestHal, Vec<SendSlot>>, wqebb: usize) -> Wqe {
    let ring = q.send_ring().unwrap();
    let (r, base) = (ring.region(), ring.base_offset());
    let units = ring.geometry().wqebbs() * 4;
    let unit = |k: usize| {
        let mut u = [0u8; 16];
        r.read_bytes(base + ((wqebb * 4 + k) % units) * 16, &mut u);
        u
    };
    let c = unit(0);
    let w0 = u32::from_be_bytes(c[0..4].try_into().unwrap());
    let w1 = u32::from_be_bytes(c[4..8].try_into().unwrap());
    let ds = (w1 & 0x3f) as usize;
    Wqe {
        index: (w0 >> 8) as u16,
        opcode: w0 as u8,
        qpn: w1 >> 8,
        ds,
        fm_ce_se: c[11],
        imm: u32::from_be_bytes(c[12..16].try_into().unwrap()),
        units: (1..ds).map(unit).collect(),
    }
}

pub(super) fn data_seg(u: &[u8; 16]) -> (u32, u32, u64) {
    (
        u32::from_be_bytes(u[0..4].try_into().unwrap()),
        u32::from_be_bytes(u[4..8].try_into().unwrap()),
        u64::from_be_bytes(u[8..16].try_into().unwrap()),
    )
}

pub(crate) fn sge(i: u32, len: u32) -> Sge {
    Sge {
        addr: 0x10_0000 * i as u64,
        length: len,
        lkey: 0x500 + i,
    }
}

pub(super) fn send<'a>(wr_id: u64, sges: &'a [Sge], signaled: bool) -> SendRequest<'a> {
    SendRequest {
        wr_id,
        op: SendOp::Send,
        payload: Payload::Sges(sges),
        signaled,
        solicited: false,
    }
}

pub(super) fn req_cqe(wqe_counter: u16) -> Cqe {
    Cqe {
        opcode: CqeOpcode::REQ,
        qpn: QPN,
        wqe_counter,
        send_opcode: 0x0a,
        ..Cqe::EMPTY
    }
}

pub(super) fn flush_cqe(wqe_counter: u16) -> Cqe {
    Cqe {
        opcode: CqeOpcode::REQ_ERR,
        status: CqeStatus::Error {
            syndrome: 0x05,
            vendor_syndrome: 0,
        },
        ..req_cqe(wqe_counter)
    }
}

#[test]
fn geometry_rounds_like_rdma_core() {
    // Overhead 48 (control, remote address, atomic).
    // 1 SGE: 48 + 16 = 64 -> one WQEBB; 100 WRs -> 128 WQEBBs.
    let g = geometry(100, 1, 0);
    assert_eq!((g.wqe_size, g.wqebbs(), g.max_send_wr), (64, 128, 128));
    assert_eq!((g.max_send_sge, g.max_inline_data), (1, 12));
    // 4 SGEs: 112 -> 128 bytes; 10 WRs -> 1280 -> 2048 bytes = 32 WQEBBs, 16 WRs.
    let g = geometry(10, 4, 0);
    assert_eq!(
        (g.wqe_size, g.wqebbs(), g.max_send_wr, g.max_send_sge),
        (128, 32, 16, 5)
    );
    // Inline 100: 48 + align16(104) = 160 -> 192 bytes.
    let g = geometry(4, 1, 100);
    assert_eq!(
        (g.wqe_size, g.max_inline_data, g.max_send_sge),
        (192, 140, 9)
    );
    // The largest WQE: 63 units; SGEs beyond it are refused.
    let g = geometry(1, 60, 0);
    assert_eq!(
        (g.wqe_size, g.max_send_sge, g.max_inline_data),
        (1024, 60, 956)
    );
    let limits = |wr, sge, inl, sz, log| {
        SqGeometry::for_request(
            &SendQueueCaps {
                max_send_wr: wr,
                max_send_sge: sge,
                max_inline_data: inl,
            },
            sz,
            log,
        )
    };
    assert_eq!(limits(1, 61, 0, 1024, 15), Err(SqSizeError::TooManySges));
    assert!(limits(1, 1, 956, 1024, 15).is_ok());
    assert_eq!(limits(1, 1, 957, 1024, 15), Err(SqSizeError::WqeTooLarge));
    assert!(limits(1, 13, 0, 256, 15).is_ok());
    assert_eq!(limits(1, 14, 0, 256, 15), Err(SqSizeError::TooManySges));
    assert_eq!(limits(0, 1, 0, 1024, 15), Err(SqSizeError::NoWorkRequests));
    assert_eq!(
        limits(1 << 14, 1, 0, 1024, 13),
        Err(SqSizeError::RingTooLarge)
    );
    assert_eq!(
        limits(1 << 16, 1, 0, 1024, 24),
        Err(SqSizeError::RingTooLarge),
        "4-bit log_sq_size"
    );
    assert!(limits(1 << 13, 1, 0, 1024, 13).is_ok());
}

#[test]
fn every_opcode_builds_its_segments() {
    let hal = TestHal::new();
    let mut q = qp(&hal, geometry(16, 4, 64));
    let sges = [sge(1, 100), sge(2, 200)];
    let reqs = [
        SendRequest {
            wr_id: 1,
            op: SendOp::Send,
            payload: Payload::Sges(&sges),
            signaled: true,
            solicited: true,
        },
        SendRequest {
            wr_id: 2,
            op: SendOp::SendImm { imm: 0xdead_beef },
            payload: Payload::Sges(&sges[..1]),
            signaled: false,
            solicited: false,
        },
        SendRequest {
            wr_id: 3,
            op: SendOp::RdmaWrite {
                raddr: 0x1122_3344_5566_7788,
                rkey: 0xabcd,
            },
            payload: Payload::Sges(&sges),
            signaled: true,
            solicited: false,
        },
        SendRequest {
            wr_id: 4,
            op: SendOp::RdmaWriteImm {
                raddr: 0x8000,
                rkey: 0x77,
                imm: 5,
            },
            payload: Payload::Sges(&sges[1..]),
            signaled: true,
            solicited: false,
        },
    ];
    q.post_send(&reqs).unwrap();
    let w = read_wqe(&q, 0);
    assert_eq!((w.index, w.opcode, w.qpn, w.ds), (0, 0x0a, QPN, 3));
    assert_eq!(w.fm_ce_se, 0x08 | 0x02, "signaled + solicited");
    assert_eq!(data_seg(&w.units[0]), (100, 0x501, 0x10_0000));
    assert_eq!(data_seg(&w.units[1]), (200, 0x502, 0x20_0000));
    let w = read_wqe(&q, 1);
    assert_eq!(
        (w.index, w.opcode, w.ds, w.fm_ce_se, w.imm),
        (1, 0x0b, 2, 0, 0xdead_beef)
    );
    let w = read_wqe(&q, 2);
    assert_eq!((w.index, w.opcode, w.ds, w.imm), (2, 0x08, 4, 0));
    let raddr = u64::from_be_bytes(w.units[0][0..8].try_into().unwrap());
    let rkey = u32::from_be_bytes(w.units[0][8..12].try_into().unwrap());
    assert_eq!((raddr, rkey), (0x1122_3344_5566_7788, 0xabcd));
    assert_eq!(&w.units[0][12..16], &[0; 4], "raddr reserved dword");
    assert_eq!(data_seg(&w.units[1]).0, 100);
    // ctrl + raddr + 2 data = 64 bytes: one WQEBB each so far.
    let w = read_wqe(&q, 3);
    assert_eq!((w.index, w.opcode, w.ds, w.imm), (3, 0x09, 3, 5));
    assert_eq!(data_seg(&w.units[1]), (200, 0x502, 0x20_0000));
    assert_eq!(q.send_ring().unwrap().producer_counter(), 4);
    assert_eq!(q.outstanding_sends(), 4);
}

#[test]
fn zero_length_sges_are_skipped_but_counted_against_the_limit() {
    let hal = TestHal::new();
    let mut q = qp(&hal, geometry(8, 3, 0));
    let max = q.send_geometry().unwrap().max_send_sge as usize;
    let mut sges = vec![sge(9, 0); max];
    sges[1] = sge(3, 64);
    q.post_send(&[send(7, &sges, true)]).unwrap();
    let w = read_wqe(&q, 0);
    assert_eq!(w.ds, 2, "only the non-empty entry is written");
    assert_eq!(data_seg(&w.units[0]), (64, 0x503, 0x30_0000));
    // No data at all: a zero-length SEND is the control segment alone.
    q.post_send(&[send(8, &[], true)]).unwrap();
    assert_eq!(read_wqe(&q, 1).ds, 1);
    sges.push(sge(4, 1));
    let e = q.post_send(&[send(9, &sges, true)]).unwrap_err();
    assert_eq!(
        e,
        PostSendFailure {
            index: 0,
            error: SendError::TooManySges {
                given: max + 1,
                max: max as u32
            }
        }
    );
    assert_eq!(q.outstanding_sends(), 2, "nothing of the refused request");
}

#[test]
fn inline_data_is_copied_with_its_header_and_checked_against_the_limit() {
    let hal = TestHal::new();
    let mut q = qp(&hal, geometry(8, 1, 60));
    let max = q.send_geometry().unwrap().max_inline_data as usize;
    assert_eq!(max, 76, "128-byte WQE: 128 - 48 - 4");
    let data: Vec<u8> = (0..max as u8).collect();
    q.post_send(&[SendRequest {
        wr_id: 1,
        op: SendOp::SendImm { imm: 9 },
        payload: Payload::Inline(&data),
        signaled: true,
        solicited: false,
    }])
    .unwrap();
    let w = read_wqe(&q, 0);
    assert_eq!(w.ds, 1 + (4 + max).div_ceil(16));
    let hdr = u32::from_be_bytes(w.units[0][0..4].try_into().unwrap());
    assert_eq!(hdr, 0x8000_0000 | max as u32);
    let bytes: Vec<u8> = w
        .units
        .iter()
        .flatten()
        .copied()
        .skip(4)
        .take(max)
        .collect();
    assert_eq!(bytes, data);
    assert_eq!(q.send_ring().unwrap().producer_counter(), 2, "128 bytes");
    let big = vec![0u8; max + 1];
    let r = q.post_send(&[SendRequest {
        payload: Payload::Inline(&big),
        ..send(2, &[], true)
    }]);
    assert_eq!(
        r.unwrap_err().error,
        SendError::InlineTooLarge {
            len: max + 1,
            max: max as u32
        }
    );
    // Empty inline: no inline segment at all (rdma-core).
    q.post_send(&[SendRequest {
        payload: Payload::Inline(&[]),
        ..send(3, &[], true)
    }])
    .unwrap();
    assert_eq!(read_wqe(&q, 2).ds, 1);
}

#[test]
fn wqes_wrap_around_the_ring_end() {
    let hal = TestHal::new();
    // 128-byte WQEs (4 SGEs), 4 WQEBBs: two 2-WQEBB WQEs fill the ring.
    let g = geometry(2, 4, 50);
    assert_eq!((g.wqebbs(), g.wqe_size, g.max_send_wr), (4, 128, 2));
    let mut q = qp(&hal, g);
    let small = [sge(1, 8)];
    let four = [sge(1, 11), sge(2, 22), sge(3, 33), sge(4, 44)];
    // One 1-WQEBB WQE moves the producer to 1, then retire it.
    q.post_send(&[send(0, &small, true)]).unwrap();
    q.complete_send(&req_cqe(0)).unwrap();
    q.post_send(&[send(1, &small, true)]).unwrap();
    q.post_send(&[send(2, &small, true)]).unwrap();
    q.complete_send(&req_cqe(1)).unwrap();
    q.complete_send(&req_cqe(2)).unwrap();
    // Producer at 3: a 6-unit WQE starts in the last WQEBB and wraps.
    q.post_send(&[send(3, &four, true)]).unwrap();
    let w = read_wqe(&q, 3);
    assert_eq!((w.index, w.ds), (3, 5));
    let lens: Vec<u32> = w.units.iter().map(|u| data_seg(u).0).collect();
    assert_eq!(
        lens,
        [11, 22, 33, 44],
        "the fourth segment continues at WQEBB 0"
    );
    assert_eq!(q.send_ring().unwrap().producer_counter(), 5);
    // Inline data wrapping too: producer 5 → slot 1, 50 bytes fit; then
    // 3 inline WQEs until one starts at slot 3 again.
    q.complete_send(&req_cqe(3)).unwrap();
    let data: Vec<u8> = (100..150).collect();
    let inl = |id| SendRequest {
        payload: Payload::Inline(&data),
        ..send(id, &[], true)
    };
    q.post_send(&[inl(4)]).unwrap(); // 5..7
    q.complete_send(&req_cqe(5)).unwrap();
    q.post_send(&[inl(5)]).unwrap(); // 7..9: starts in slot 3, wraps
    let w = read_wqe(&q, 3);
    assert_eq!(w.index, 7);
    let bytes: Vec<u8> = w.units.iter().flatten().copied().skip(4).take(50).collect();
    assert_eq!(bytes, data);
}

#[test]
fn a_full_queue_refuses_the_request_and_keeps_the_ones_before() {
    let hal = TestHal::new();
    let g = geometry(4, 1, 0);
    let mut q = qp(&hal, g);
    let s = [sge(1, 1)];
    let reqs: Vec<SendRequest<'_>> = (0..6).map(|i| send(i, &s, true)).collect();
    let e = q.post_send(&reqs).unwrap_err();
    assert_eq!(
        e,
        PostSendFailure {
            index: 4,
            error: SendError::Full
        }
    );
    assert_eq!(e.error.errno(), 12);
    assert_eq!(q.outstanding_sends(), 4);
    // One doorbell for the four posted: the last WQE's first 8 bytes, and
    // the doorbell record holds the producer counter.
    let db = hal.doorbells();
    assert_eq!(db.len(), 1);
    let last = read_wqe(&q, 3);
    assert_eq!(db[0].0, BF);
    assert_eq!(db[0].1 >> 32, (3 << 8) | 0x0a);
    assert_eq!(db[0].1 as u32, (QPN << 8) | last.ds as u32);
    assert_eq!(q.doorbell_record().read_be32(4), 4);
    assert_eq!(
        q.doorbell_record().read_be32(0),
        0,
        "receive counter untouched"
    );
    // A completion frees room; the doorbell goes to the other half.
    q.complete_send(&req_cqe(1)).unwrap();
    q.post_send(&reqs[4..6]).unwrap();
    let db = hal.doorbells();
    assert_eq!(db[1].0, BF + BF_SIZE / 2, "alternating halves");
    assert_eq!(db[1].1 >> 40, 5, "WQE index of the last one");
    q.complete_send(&req_cqe(5)).unwrap();
    q.post_send(&reqs[..1]).unwrap();
    assert_eq!(hal.doorbells()[2].0, BF, "and back");
    // Nothing posted: no doorbell.
    q.post_send(&[]).unwrap();
    assert_eq!(hal.doorbells().len(), 3);
}
