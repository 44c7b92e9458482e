//! The facade's `post_send` hands its `SendWr`s to the send ring as they
//! are ([`Posted`]): for every opcode, flag and payload the WQE bytes, the
//! send-table entry and the doorbell record must be the ones the driver's
//! own [`SendRequest`] of the same meaning gives.

extern crate std;

use std::vec::Vec;

use super::qp::Posted;
use super::{SendFlags, SendWr, WrOpcode};
use crate::qp::tests::{geometry, qp, qp_atomics, sge, slots};
use crate::qp::{Payload, Qp, SendError, SendOp, SendOpcode, SendRequest, SendSlot, SendWork};
use crate::testhal::TestHal;

/// A driver request with the fence bit (which [`SendRequest`] has not).
struct Fenced<'a>(SendRequest<'a>, bool);

impl SendWork for Fenced<'_> {
    fn wr_id(&self) -> u64 {
        self.0.wr_id()
    }
    fn opcode(&self) -> SendOpcode {
        self.0.opcode()
    }
    fn imm(&self) -> u32 {
        self.0.imm()
    }
    fn remote(&self) -> (u64, u32) {
        self.0.remote()
    }
    fn atomic(&self) -> (u64, u64) {
        self.0.atomic()
    }
    fn fence(&self) -> bool {
        self.1
    }
    fn payload(&self) -> Payload<'_> {
        self.0.payload()
    }
    fn signaled(&self) -> bool {
        self.0.signaled()
    }
    fn solicited(&self) -> bool {
        self.0.solicited()
    }
}

/// The verbs request in the driver's terms, as libibverbs defines each
/// field: the remote fields for the RDMA and atomic opcodes only,
/// `compare_add`/`swap` for the atomics, `imm_data` for the `_WITH_IMM`
/// opcodes only, the gather list unless `INLINE`, the fence bit.
fn request<'a>(wr: &SendWr<'a>, sig_all: bool) -> Fenced<'a> {
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
        WrOpcode::RdmaRead => SendOp::RdmaRead {
            raddr: wr.remote_addr,
            rkey: wr.rkey,
        },
        WrOpcode::AtomicCmpAndSwp => SendOp::AtomicCmpSwap {
            raddr: wr.remote_addr,
            rkey: wr.rkey,
            compare: wr.compare_add,
            swap: wr.swap,
        },
        WrOpcode::AtomicFetchAndAdd => SendOp::AtomicFetchAdd {
            raddr: wr.remote_addr,
            rkey: wr.rkey,
            add: wr.compare_add,
        },
    };
    let r = SendRequest {
        wr_id: wr.wr_id,
        op,
        payload: if wr.send_flags.contains(SendFlags::INLINE) {
            Payload::Inline(wr.inline_data)
        } else {
            Payload::Sges(wr.sg_list)
        },
        signaled: sig_all || wr.send_flags.contains(SendFlags::SIGNALED),
        solicited: wr.send_flags.contains(SendFlags::SOLICITED),
    };
    Fenced(r, wr.send_flags.contains(SendFlags::FENCE))
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

const OPCODES: [WrOpcode; 7] = [
    WrOpcode::RdmaWrite,
    WrOpcode::RdmaWriteWithImm,
    WrOpcode::Send,
    WrOpcode::SendWithImm,
    WrOpcode::RdmaRead,
    WrOpcode::AtomicCmpAndSwp,
    WrOpcode::AtomicFetchAndAdd,
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
            let reads = matches!(
                opcode,
                WrOpcode::RdmaRead | WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
            );
            let atomic = reads && opcode != WrOpcode::RdmaRead;
            // No INLINE on the opcodes whose local buffer is written.
            let wrs: Vec<SendWr<'_>> = (0..16usize)
                .filter(|m| !reads || m & 4 == 0)
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
                        sg_list: if atomic { &sges[..1] } else { &sges[..m % 4] },
                        inline_data: &data[..m * 4],
                        imm_data: 0xdead_0000 + m as u32,
                        remote_addr: 0x1122_3344_5566_7700 + m as u64,
                        rkey: 0xab00 + m as u32,
                        compare_add: 0x0102_0304_0506_0708 + m as u64,
                        swap: 0x1112_1314_1516_1718 + m as u64,
                        ..SendWr::EMPTY
                    }
                })
                .collect();
            let geo = geometry(16, 4, 64);
            let mk = || qp_atomics(&hal, geo, true);
            let (mut one, mut list, mut reference) = (mk(), mk(), mk());
            for wr in &wrs {
                one.post_send_one(&Posted { wr, sig_all }).unwrap();
            }
            list.post_send_iter(wrs.iter().map(|wr| Posted { wr, sig_all }))
                .unwrap();
            let reqs: Vec<Fenced<'_>> = wrs.iter().map(|w| request(w, sig_all)).collect();
            reference.post_send_iter(reqs).unwrap();
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

#[test]
fn reads_and_atomics_are_laid_out_as_rdma_core_writes_them_and_refused_when_they_cannot_be() {
    let hal = TestHal::new();
    let mut q = qp_atomics(&hal, geometry(8, 4, 16), true);
    let buf = [sge(7, 8)];
    let cas = SendWr {
        opcode: WrOpcode::AtomicCmpAndSwp,
        send_flags: SendFlags::SIGNALED | SendFlags::FENCE,
        sg_list: &buf,
        remote_addr: 0x1000,
        rkey: 0x55,
        compare_add: 1,
        swap: 2,
        ..SendWr::EMPTY
    };
    q.post_send_one(&Posted {
        wr: &cas,
        sig_all: false,
    })
    .unwrap();
    let ring = q.send_ring().unwrap();
    let mut w = [0u8; 64];
    ring.region().read_bytes(ring.base_offset(), &mut w);
    let be32 = |o: usize| u32::from_be_bytes(w[o..o + 4].try_into().unwrap());
    let be64 = |o: usize| u64::from_be_bytes(w[o..o + 8].try_into().unwrap());
    assert_eq!(be32(0) & 0xff, 0x11, "ATOMIC_CS");
    assert_eq!(be32(4) & 0x3f, 4, "ctrl + raddr + atomic + data");
    assert_eq!(w[11], 0x80 | 0x08, "fence mode 4, CQ update");
    assert_eq!((be64(16), be32(24)), (0x1000, 0x55), "raddr segment");
    assert_eq!((be64(32), be64(40)), (2, 1), "swap, then compare");
    assert_eq!(
        (be32(48), be32(52), be64(56)),
        (8, buf[0].lkey, buf[0].addr),
        "8-byte data segment"
    );
    // Refusals, each with nothing written.
    let before = image(&q);
    let two = [sge(1, 8), sge(2, 8)];
    let short = [sge(1, 4)];
    for (wr, want) in [
        (
            SendWr {
                sg_list: &two,
                ..cas
            },
            SendError::BadAtomicBuffer,
        ),
        (
            SendWr {
                sg_list: &short,
                ..cas
            },
            SendError::BadAtomicBuffer,
        ),
        (
            SendWr {
                sg_list: &[],
                ..cas
            },
            SendError::BadAtomicBuffer,
        ),
        (
            SendWr {
                opcode: WrOpcode::RdmaRead,
                send_flags: SendFlags::INLINE,
                inline_data: &[1, 2, 3],
                ..cas
            },
            SendError::InlineNotAllowed,
        ),
    ] {
        assert_eq!(
            q.post_send_one(&Posted {
                wr: &wr,
                sig_all: false
            }),
            Err(want)
        );
        assert_eq!(want.errno(), mlx5_regs::consts::errno::EINVAL);
    }
    assert_eq!(image(&q), before, "nothing written, no doorbell");
    // A device without the IB atomics: refused; READ still goes.
    let mut plain = qp(&hal, geometry(8, 4, 16));
    assert_eq!(
        plain.post_send_one(&Posted {
            wr: &cas,
            sig_all: false
        }),
        Err(SendError::AtomicsUnsupported)
    );
    let read = SendWr {
        opcode: WrOpcode::RdmaRead,
        ..cas
    };
    plain
        .post_send_one(&Posted {
            wr: &read,
            sig_all: false,
        })
        .unwrap();
}
