//! Fuzz harnesses of the send side and of the wire (see [`crate::fuzz`]
//! for how targets and properties share them).
//!
//! * [`send_cqes`]: a hostile device writes requester and responder CQEs
//!   into a CQ that a send queue and an SRQ share; the driver's rings match
//!   them against what was posted.
//! * [`wire_frames`]: frames arriving from a peer, as bytes: the frame
//!   parser of `mlx5_sim::wire` and a device's receive path take any byte
//!   string without panicking.

use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::sync::{Arc, Mutex};

use mlx5_driver::cq::{Cqe, CqeSize};
use mlx5_driver::qp::{
    Payload, SendError, SendOp, SendQueueCaps, SendRequest, SendSlot, SqGeometry,
};
use mlx5_driver::srq::{CompleteError, Sge, SrqGeometry};
use mlx5_driver::unstable::cq::CqRing;
use mlx5_driver::unstable::qp::SendRing;
use mlx5_driver::unstable::srq::SrqRing;
use mlx5_hal::host::HostHal;
use mlx5_hal::Hal;
use mlx5_regs::consts::CqeOpcode;
use mlx5_regs::layouts::cqe64;
use mlx5_sim::wire::{self, LinkType, PortId};

use crate::fuzz::simfw::hosts::{Conn, Hosts, Transport};
use crate::fuzz::{b_len, Bytes};

const QPN: u32 = 0x123;

/// A send ring and an SRQ completing on one CQ whose entries the device
/// (the input) writes: plausible CQEs built from fields (a requester or
/// responder opcode, mostly this QP, mostly a posted index) and arbitrary
/// bytes, each with the ownership bit of its pass, between the driver's
/// posts and polls. Every requester CQE goes through
/// [`SendRing::complete`], every other through the SRQ. Checks: a matched
/// requester CQE names an outstanding WQE at its own index and retires
/// exactly the requests up to it, in posting order; a refused one changes
/// nothing; an SRQ WQE is handed back only if posted, once; the counters
/// always equal posts minus completions.
pub fn send_cqes(data: &[u8]) {
    let mut b = Bytes(data);
    let hal = HostHal::new(1 << 18);
    let caps = SendQueueCaps {
        max_send_wr: 1 + b.u8() as u32 % 32,
        max_send_sge: 1 + b.u8() as u32 % 3,
        max_inline_data: if b.u8() & 1 == 0 { 0 } else { 60 },
    };
    let Ok(geo) = SqGeometry::for_request(&caps, 1024, 15) else {
        return;
    };
    let (mut sq, _pages) = SendRing::new(&hal, geo, 64, 0x800, 512).expect("send ring");
    sq.set_qpn(QPN);
    let mut slots = vec![SendSlot::EMPTY; geo.wqebbs()];
    let Some(srq_geo) = SrqGeometry::for_request(1 + b.u8() as usize % 32, 1) else {
        return;
    };
    let mut srq = SrqRing::new(&hal, srq_geo).expect("srq ring");
    let log = 1 + b.u8() % 6;
    let mut cq = CqRing::new(&hal, log, CqeSize::B64).expect("cq ring");
    let nent = cq.nent();
    // What the driver posted: send requests in order (wr_id, index), SRQ
    // WQEs by index.
    let mut sent: VecDeque<(u64, u16)> = VecDeque::new();
    let mut recvs: BTreeMap<u16, u64> = BTreeMap::new();
    let mut next_id = 0u64;
    // The device's CQE producer counter.
    let mut pi = 0u32;
    let mut steps = 0;
    while !b.is_empty() && steps < 256 {
        steps += 1;
        match b.u8() % 6 {
            0 => {
                let sge = Sge {
                    addr: 0x1000,
                    length: b.u16() as u32,
                    lkey: 1,
                };
                let inline = [0x5a; 60];
                let payload = match b.u8() % 3 {
                    0 => Payload::Sges(std::slice::from_ref(&sge)),
                    1 => Payload::Inline(&inline[..b.u8() as usize % 61]),
                    _ => Payload::Sges(&[]),
                };
                let op = match b.u8() % 4 {
                    0 => SendOp::Send,
                    1 => SendOp::SendImm { imm: 7 },
                    2 => SendOp::RdmaWrite {
                        raddr: 0x2000,
                        rkey: 3,
                    },
                    _ => SendOp::RdmaWriteImm {
                        raddr: 0x2000,
                        rkey: 3,
                        imm: 9,
                    },
                };
                let req = SendRequest {
                    wr_id: next_id,
                    op,
                    payload,
                    signaled: b.u8() & 1 == 1,
                    solicited: false,
                };
                let index = sq.producer_counter();
                match sq.write(&mut slots, &req) {
                    Ok(_) => {
                        sent.push_back((next_id, index));
                        next_id += 1;
                    }
                    Err(SendError::Full) => assert_eq!(sent.len() as u32, geo.max_send_wr),
                    Err(_) => {} // a request the ring's limits refuse
                }
            }
            1 => {
                let sge = Sge {
                    addr: 0x3000,
                    length: 1 + b.u16() as u32,
                    lkey: 1,
                };
                if let Ok(idx) = srq.post(next_id, &[sge]) {
                    assert!(recvs.insert(idx, next_id).is_none(), "SRQ WQE posted twice");
                    next_id += 1;
                }
            }
            2 | 3 => {
                // The device writes the next CQE with the owner bit of its pass.
                let mut c = [0u8; 64];
                if b.u8() & 3 == 0 {
                    let raw = b.take(64);
                    c[..raw.len()].copy_from_slice(raw);
                } else {
                    let opcode = match b.u8() % 5 {
                        0 | 1 => CqeOpcode::REQ.0,
                        2 => CqeOpcode::REQ_ERR.0,
                        3 => CqeOpcode::RESP_SEND.0,
                        _ => b.u8() & 0xf,
                    };
                    cqe64::opcode.set(&mut c, opcode).expect("4 bits");
                    let qpn = if b.u8() & 7 == 0 { b.u16() as u32 } else { QPN };
                    cqe64::qpn.set(&mut c, qpn).expect("24 bits");
                    let counter = match (b.u8() % 3, sent.front()) {
                        (0, _) | (_, None) => b.u16(),
                        (1, Some(&(_, i))) => i,
                        _ => sent[b.u8() as usize % sent.len()].1,
                    };
                    cqe64::wqe_counter.set(&mut c, counter).expect("16 bits");
                    cqe64::sop_opcode
                        .set(&mut c, b.u8() % 0x12)
                        .expect("8 bits");
                }
                cqe64::owner
                    .set(&mut c, (pi >> log) & 1 == 1)
                    .expect("1 bit");
                let at = cq.base_offset() + (pi as usize % nent) * 64;
                cq.region().write_bytes(at, &c);
                pi = pi.wrapping_add(1);
            }
            4 => {
                let before = cq.consumer_index();
                let mut n = 0;
                while let Some(c) = cq.pop() {
                    n += 1;
                    route(&c, &mut sq, &slots, &mut sent, &mut srq, &mut recvs);
                }
                assert_eq!(cq.consumer_index(), before.wrapping_add(n));
            }
            _ => {
                // A CQE bytes at an arbitrary offset of a slot (a torn write).
                let slot = b.u8() as usize % nent;
                let off = b.u8() as usize % 64;
                let len = 1 + b_len(&mut b, 64 - off);
                let bytes = b.take(len).to_vec();
                cq.region()
                    .write_bytes(cq.base_offset() + slot * 64 + off, &bytes);
            }
        }
        assert_eq!(sq.outstanding() as usize, sent.len());
        assert_eq!(srq.outstanding(), recvs.len());
    }
}

/// One CQE from the device, routed as a poll loop does.
fn route(
    c: &Cqe,
    sq: &mut SendRing<HostHal>,
    slots: &[SendSlot],
    sent: &mut VecDeque<(u64, u16)>,
    srq: &mut SrqRing<HostHal>,
    recvs: &mut BTreeMap<u16, u64>,
) {
    if c.is_requester() {
        if c.qpn != QPN {
            return; // another QP's: the facade counts it, nothing here moves
        }
        let before = sq.outstanding();
        match sq.complete(slots, c.wqe_counter) {
            Ok((slot, retired)) => {
                assert!(
                    retired >= 1 && retired <= before,
                    "retired {retired} of {before}"
                );
                let mut last = None;
                for _ in 0..retired {
                    last = sent.pop_front();
                }
                assert_eq!(
                    last,
                    Some((slot.wr_id, c.wqe_counter)),
                    "the matched WQE is the last retired, at the CQE's index"
                );
            }
            Err(_) => assert_eq!(sq.outstanding(), before, "a refused CQE moved the ring"),
        }
    } else {
        match srq.complete(c.wqe_counter) {
            Ok(wr_id) => assert_eq!(recvs.remove(&c.wqe_counter), Some(wr_id)),
            Err(CompleteError::NotPosted { index }) => assert!(!recvs.contains_key(&index)),
            Err(CompleteError::OutOfRange { .. }) => {}
            Err(e) => panic!("a refusal this harness does not know: {e:?}"),
        }
    }
}

/// A `Write` whose bytes can be read back (the wire's capture sink).
#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("sink").extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Frames from a peer: the input through [`wire::parse`] on both link
/// types, then, on two modelled hosts joined by a wire (transport chosen
/// by the input), frames a device receives: the input itself, and real
/// frames of a SEND and its ACK (captured) with their transport header
/// and payload rewritten from the input and rebuilt with a valid ICRC (so
/// they pass the integrity checks and reach the transport), or with bytes
/// flipped. Checks: nothing panics, and both devices still answer a NOP
/// command afterwards (the model keeps serving its driver).
pub fn wire_frames(data: &[u8]) {
    for link in [LinkType::Ethernet, LinkType::Infiniband] {
        if let Ok(p) = wire::parse(link, data) {
            assert!(p.packet.payload.len() <= data.len());
        }
    }
    let mut b = Bytes(data);
    let t = match b.u8() % 4 {
        0 => Transport::RoceV2Ipv4,
        1 => Transport::RoceV2Ipv6,
        2 => Transport::RoceV1,
        _ => Transport::Ib,
    };
    let link = if t == Transport::Ib {
        LinkType::Infiniband
    } else {
        LinkType::Ethernet
    };
    let mut h = Hosts::new(t, Conn::default(), 0, 0);
    let sink = Sink::default();
    h.wire.capture(Box::new(sink.clone())).expect("capture");
    let wr = h.a.send_wr(32);
    h.a.qp.post(&h.a.f, &wr);
    assert!(
        h.wait_cqe(true, true).is_some(),
        "the template SEND completes"
    );
    h.wire.end_capture().expect("end capture");
    let pcap = sink.0.lock().expect("sink").clone();
    let (_, records) = wire::read_pcap(&pcap[..]).expect("pcap");
    let templates: Vec<Vec<u8>> = records.into_iter().map(|r| r.data).collect();
    assert!(!templates.is_empty(), "a SEND puts frames on the wire");
    // Whole input as one frame, from either side.
    h.wire.send(PortId(b.u8() as usize & 1), 0, data);
    h.wire.pump();
    let mut frames = 0;
    while !b.is_empty() && frames < 16 {
        frames += 1;
        let from = PortId(b.u8() as usize & 1);
        let tpl = &templates[b.u8() as usize % templates.len()];
        let frame = match b.u8() % 3 {
            0 => {
                let mut f = tpl.clone();
                for _ in 0..1 + b.u8() % 4 {
                    let at = b.u16() as usize % f.len();
                    f[at] ^= b.u8() | 1;
                }
                f
            }
            1 => {
                let n = b.u16() as usize % 2048;
                b.take(n).to_vec()
            }
            _ => {
                let Ok(p) = wire::parse(link, tpl) else {
                    continue;
                };
                let mut pkt = p.packet;
                match b.u8() % 4 {
                    0 => pkt.bth.psn = (pkt.bth.psn + b.u8() as u32) & 0xff_ffff,
                    1 => pkt.bth.dest_qp = u32::from(b.u16()) & 0xff_ffff,
                    2 => pkt.bth.opcode = b.u8(),
                    _ => pkt.bth.pkey = b.u16(),
                }
                if let Some(r) = pkt.ext.reth.as_mut() {
                    if b.u8() & 1 == 1 {
                        r.va = r.va.wrapping_add(b.u16() as u64);
                        r.dma_len = b.u16() as u32;
                    }
                }
                let n = b.u16() as usize % 1100;
                let payload = b.take(n).to_vec();
                pkt.payload = &payload;
                let mut out = vec![0u8; pkt.frame_len()];
                match pkt.build(&mut out) {
                    Ok(n) => out[..n].to_vec(),
                    Err(_) => continue,
                }
            }
        };
        h.wire.send(from, 0, &frame);
        h.wire.pump();
        h.a.f.hal.delay_us(50);
        h.b.f.hal.delay_us(50);
    }
    for f in [&mut h.a.f, &mut h.b.f] {
        let nop = crate::fuzz::simfw::inp(mlx5_regs::Opcode::NOP, mlx5_regs::layouts::nop_in::SIZE);
        let slot = f.slot;
        let o = f.try_exec(slot, &nop, mlx5_regs::layouts::nop_out::SIZE);
        assert!(
            o.is_some() || f.dev.is_fatal(),
            "the model stopped answering"
        );
    }
}
