//! Two modelled hosts on one wire: RC SENDs and RDMA WRITEs segmented into
//! MTU-sized packets over RoCE v2 (IPv4, IPv6), RoCE v1 and IB, delivered
//! byte for byte with the responder's CQE, acknowledged back to the
//! requester; both directions.

use crate::common::hosts::{Conn, Hosts, ALL, BIG};
use crate::common::wire::Wr;
use mlx5_regs::consts::wqe as w;
use mlx5_regs::consts::CqeOpcode;
use mlx5_regs::layouts::{cqe64, err_cqe};

const MTU: u32 = 1024;
const SIZES: [u32; 6] = [0, 1, MTU - 1, MTU, MTU + 1, BIG as u32];

/// `from` sends `len` bytes to the other host; returns (send CQE, receive CQE).
fn send_one(h: &mut Hosts, a_to_b: bool, len: u32, seed: u8, wqe: usize) {
    let (src, dst) = if a_to_b {
        (&mut h.a, &h.b)
    } else {
        (&mut h.b, &h.a)
    };
    let _ = dst;
    let data = src.payload(len as usize, seed);
    let wr = src.send_wr(len);
    src.qp.post(&src.f, &wr);
    let sc = h.wait_cqe(a_to_b, true).expect("send CQE");
    assert_eq!(
        cqe64::opcode.get(&sc),
        CqeOpcode::REQ.0,
        "{:?} {len}: send CQE {:#x} syndrome {:#x}",
        h.t,
        cqe64::opcode.get(&sc),
        err_cqe::syndrome.get(&sc)
    );
    let rc = h.wait_cqe(!a_to_b, false).expect("receive CQE");
    assert_eq!(
        cqe64::opcode.get(&rc),
        CqeOpcode::RESP_SEND.0,
        "{:?} {len}",
        h.t
    );
    assert_eq!(cqe64::byte_cnt.get(&rc), len, "{:?} {len}", h.t);
    let idx = cqe64::wqe_counter.get(&rc) as usize;
    assert_eq!(idx, wqe, "{:?} {len}: RMP WQE", h.t);
    let dst = if a_to_b { &h.b } else { &h.a };
    assert_eq!(dst.received(idx, len as usize), data, "{:?} {len}", h.t);
}

#[test]
fn sends_are_segmented_and_delivered_every_transport_both_ways() {
    for t in ALL {
        let mut h = Hosts::new(t, Conn::default(), 0xff_fffe, 0x12_3456);
        for (k, &len) in SIZES.iter().enumerate() {
            send_one(&mut h, true, len, k as u8, k);
            send_one(&mut h, false, len, 0x80 | k as u8, k);
        }
        // Packets: per direction 1 + 1 + 1 + 1 + 2 + 64, each acknowledged once.
        let a = h.a.f.dev.traffic().stats();
        let b = h.b.f.dev.traffic().stats();
        let pkts = 1 + 1 + 1 + 1 + 2 + 64;
        assert_eq!(a.wire_tx, pkts + 6, "{t:?}: A's frames (packets + ACKs)");
        assert_eq!(b.wire_tx, pkts + 6, "{t:?}");
        assert_eq!((a.retransmissions, b.retransmissions), (0, 0), "{t:?}");
        assert_eq!((a.wire_dropped, b.wire_dropped), (0, 0), "{t:?}");
        assert_eq!(a.messages_received, 6);
        assert_eq!(h.wire.stats().frames, 2 * (pkts + 6), "{t:?}");
    }
}

#[test]
fn rdma_writes_land_at_the_remote_address() {
    for t in ALL {
        let mut h = Hosts::new(t, Conn::default(), 5, 7);
        for (k, &len) in SIZES.iter().enumerate() {
            let data = h.a.payload(len as usize, k as u8);
            let at = h.b.big.iova() + 3 * BIG as u64;
            let wr = Wr {
                opcode: w::OPCODE_RDMA_WRITE,
                signaled: true,
                remote: Some((at, h.b.key)),
                sges: h.a.sges(len),
                ..Wr::default()
            };
            h.a.qp.post(&h.a.f, &wr);
            let sc = h.wait_cqe(true, true).expect("send CQE");
            assert_eq!(cqe64::opcode.get(&sc), CqeOpcode::REQ.0, "{t:?} {len}");
            assert_eq!(h.b.received(3, len as usize), data, "{t:?} {len}");
        }
        // A plain WRITE consumes no receive WQE and writes no CQE.
        assert!(h.b.f.poll_cq(&mut h.b.rcq).is_none(), "{t:?}");
    }
}
