//! The facade's `post_send` hands its `SendWr`s to the send ring as they
//! are ([`Posted`]): for every opcode, flag and payload the WQE bytes, the
//! send-table entry and the doorbell record must be the ones the driver's
//! own [`SendRequest`] of the same meaning gives.

extern crate std;

use std::vec::Vec;

use super::qp::Posted;
use super::{SendFlags, SendWr, WrOpcode};
use crate::qp::tests::{geometry, qp, sge, slots};
use crate::qp::{Payload, Qp, SendError, SendOp, SendRequest, SendSlot};
use crate::testhal::TestHal;

/// The verbs request in the driver's terms, as libibverbs defines each
/// field: the RDMA fields for the RDMA writes only, `imm_data` for the
/// `_WITH_IMM` opcodes only, the gather list unless `INLINE`.
fn request<'a>(wr: &SendWr<'a>, sig_all: bool) -> SendRequest<'a> {
    let op = match wr.opcode {
        WrOpcode::Send => SendOp::Send,
        WrOpcode::SendWithImm => SendOp::SendImm { imm: wr.imm_data },
        WrOpcode::RdmaWrite => SendOp::RdmaWrite {
            raddr: wr.remote_addr,
            rkey: wr.rkey,
        },
        WrOpcode::RdmaWriteWithImm => SendOp::RdmaWriteImm {
            raddr: wr.remote_addr,
            rkey: wr.rkey,
            imm: wr.imm_data,
        },
    };
    SendRequest {
        wr_id: wr.wr_id,
        op,
        payload: if wr.send_flags.contains(SendFlags::INLINE) {
            Payload::Inline(wr.inline_data)
        } else {
            Payload::Sges(wr.sg_list)
        },
        signaled: sig_all || wr.send_flags.contains(SendFlags::SIGNALED),
        solicited: wr.send_flags.contains(SendFlags::SOLICITED),
    }
}

/// Everything of a QP's send side the device or a completion reads.
fn image(q: &Qp<TestHal, Vec<SendSlot>>) -> (Vec<u8>, Vec<SendSlot>, u64, u16) {
    let ring = q.send_ring().unwrap();
    let mut bytes = std::vec![0u8; ring.geometry().bytes()];
    ring.region().read_bytes(ring.base_offset(), &mut bytes);
    (
        bytes,
        slots(q).to_vec(),
        q.doorbell_record().read_be64(0),
        ring.producer_counter(),
    )
}

const OPCODES: [WrOpcode; 4] = [
    WrOpcode::RdmaWrite,
    WrOpcode::RdmaWriteWithImm,
    WrOpcode::Send,
    WrOpcode::SendWithImm,
];

#[test]
fn every_verbs_request_gives_the_wqe_of_its_driver_request() {
    let hal = TestHal::new();
    // A zero-length entry is skipped but counts; the RDMA and immediate
    // fields are set on every request, so the opcodes that do not use them
    // prove they are not read.
    let sges = [sge(1, 100), sge(2, 0), sge(3, 300)];
    let data: Vec<u8> = (0..64u8).collect();
    let flag_bits = [
        SendFlags::SIGNALED,
        SendFlags::SOLICITED,
        SendFlags::INLINE,
        SendFlags::FENCE,
    ];
    for sig_all in [false, true] {
        for (o, &opcode) in OPCODES.iter().enumerate() {
            let wrs: Vec<SendWr<'_>> = (0..16usize)
                .map(|m| {
                    let mut send_flags = SendFlags(0);
                    for (b, &f) in flag_bits.iter().enumerate() {
                        if m & (1 << b) != 0 {
                            send_flags = send_flags | f;
                        }
                    }
                    SendWr {
                        wr_id: (o * 100 + m) as u64,
                        opcode,
                        send_flags,
                        sg_list: &sges[..m % 4],
                        inline_data: &data[..m * 4],
                        imm_data: 0xdead_0000 + m as u32,
                        remote_addr: 0x1122_3344_5566_7700 + m as u64,
                        rkey: 0xab00 + m as u32,
                    }
                })
                .collect();
            let geo = geometry(16, 4, 64);
            let (mut one, mut list, mut reference) = (qp(&hal, geo), qp(&hal, geo), qp(&hal, geo));
            for wr in &wrs {
                one.post_send_one(&Posted { wr, sig_all }).unwrap();
            }
            list.post_send_iter(wrs.iter().map(|wr| Posted { wr, sig_all }))
                .unwrap();
            let reqs: Vec<SendRequest<'_>> = wrs.iter().map(|w| request(w, sig_all)).collect();
            reference.post_send(&reqs).unwrap();
            let want = image(&reference);
            for (got, how) in [(image(&one), "one at a time"), (image(&list), "as a list")] {
                let what = std::format!("{opcode:?} {how}, sq_sig_all {sig_all}");
                let first_diff = got.0.iter().zip(&want.0).position(|(a, b)| a != b);
                assert_eq!(first_diff, None, "first WQE byte that differs, {what}");
                assert_eq!(got.1, want.1, "send table, {what}");
                assert_eq!(
                    (got.2, got.3),
                    (want.2, want.3),
                    "doorbell record, counter, {what}"
                );
            }
        }
    }
}

#[test]
fn a_single_request_is_refused_like_the_list_form_and_writes_nothing() {
    let hal = TestHal::new();
    let mut q = qp(&hal, geometry(2, 4, 16));
    // The facade enforces the gather entries asked for, below what a WQE
    // holds.
    q.limit_send_sges(2);
    assert_eq!(q.send_ring().unwrap().max_sges(), 2);
    let sges = [sge(1, 8), sge(2, 8), sge(3, 8)];
    let big = [0u8; 128];
    let three = SendWr {
        sg_list: &sges,
        ..SendWr::EMPTY
    };
    let inline = SendWr {
        send_flags: SendFlags::INLINE,
        inline_data: &big,
        ..SendWr::EMPTY
    };
    let before = image(&q);
    let post =
        |q: &mut Qp<TestHal, Vec<SendSlot>>, wr| q.post_send_one(&Posted { wr, sig_all: false });
    assert_eq!(
        post(&mut q, &three),
        Err(SendError::TooManySges { given: 3, max: 2 })
    );
    assert!(matches!(
        post(&mut q, &inline),
        Err(SendError::InlineTooLarge { len: 128, .. })
    ));
    assert_eq!(image(&q), before, "nothing written, no doorbell");
    // The same refusal in the list form names the request; the one before
    // it is posted.
    let two = SendWr {
        sg_list: &sges[..2],
        ..SendWr::EMPTY
    };
    let e = q
        .post_send_iter([&two, &three].map(|wr| Posted { wr, sig_all: false }))
        .unwrap_err();
    assert_eq!(
        (e.index, e.error),
        (1, SendError::TooManySges { given: 3, max: 2 })
    );
    assert_eq!(q.outstanding_sends(), 1);
    // Full after max_send_wr.
    post(&mut q, &two).unwrap();
    assert_eq!(post(&mut q, &two), Err(SendError::Full));
    // A limit above what a WQE holds stays at the geometry's.
    q.limit_send_sges(100);
    assert_eq!(
        q.send_ring().unwrap().max_sges(),
        geometry(2, 4, 16).max_send_sge
    );
}
