//! Two hosts on one wire (`mlx5_tests::hosts`): a wrong destination (MAC,
//! GID, LID, QPN, P_Key) is dropped by the receiving card; the sender ends
//! in RETRY_EXC_ERR after exactly its retry budget, nothing delivered.

use mlx5_driver::verbs::{QpState, SendFlags, SendWr, Sge, WcStatus, WorkCompletion, WrOpcode};
use mlx5_sim::wire::{LinkType, Wire};
use mlx5_tests::hosts::*;

/// What is wrong in the sender's path.
#[derive(Debug, Clone, Copy)]
enum Wrong {
    /// The destination MAC belongs to nobody.
    Mac,
    /// The destination GID (IP address) is not the peer's.
    Gid,
    /// The destination LID belongs to nobody.
    Lid,
    /// The destination QP does not exist on the peer.
    Qpn,
    /// The sender's P_Key is not a member of the peer's partition.
    Pkey,
}

/// Retries of the wrongly addressed sender.
const RETRIES: u8 = 3;

fn wrong_destination(t: Transport, wrong: Wrong) {
    let what = format!("{t:?} wrong {wrong:?}");
    let wire = Wire::new(if t.ib() {
        LinkType::Infiniband
    } else {
        LinkType::Ethernet
    });
    let mut a = host(t, 1, &wire, 0x10);
    let mut b = host(t, 2, &wire, 0x20);
    let (aa, ba) = (a.addr, b.addr);
    let mtu = aa.mtu.min(ba.mtu);
    let to_a = b.ah_to(&aa);
    connect(&mut b, to_a, &aa, mtu, 7, 0);
    let mut to = ba;
    let mut ah = a.ah_to(&ba);
    let mut pkey_index = 0;
    match wrong {
        Wrong::Mac => ah.dmac = Some([0x02, 0, 0, 0, 0, 0x99]),
        Wrong::Gid if t == Transport::RoceV2Ipv4 => {
            ah.grh.dgid = mlx5_driver::gid::ipv4_gid([198, 18, 0, 99]);
        }
        Wrong::Gid => {
            ah.grh.dgid[15] ^= 0x55;
            ah.dmac = Some(ba.mac);
        }
        Wrong::Lid => ah.dlid = ba.lid + 100,
        Wrong::Qpn => to.qpn = ba.qpn + 0x100,
        Wrong::Pkey => {
            // Entry 1: a full member of another partition.
            a.dev.set_pkey(1, 0x8123);
            pkey_index = 1;
        }
    }
    connect(&mut a, ah, &to, mtu, RETRIES, pkey_index);
    for i in 0..4 {
        b.post_recv(i).unwrap();
    }
    let data = pattern(100, 7);
    a.buf.write_bytes(SEND_AT, &data);
    let sg = [Sge {
        addr: a.buf.iova() + SEND_AT as u64,
        length: 100,
        lkey: a.lkey(),
    }];
    let before = wire.stats().frames;
    let wr = SendWr {
        wr_id: 5,
        opcode: WrOpcode::Send,
        send_flags: SendFlags::SIGNALED,
        sg_list: &sg,
        ..SendWr::EMPTY
    };
    a.ctx.post_send(a.qp, &[wr]).unwrap();
    let s = wait_one(&mut a, true, &b.dev).unwrap_or_else(|| panic!("{what}: no completion"));
    assert_eq!((s.wr_id, s.status), (5, WcStatus::RetryExcErr), "{what}");
    // One transmission and exactly `RETRIES` retransmissions, all dropped.
    assert_eq!(
        wire.stats().frames - before,
        1 + u64::from(RETRIES),
        "{what}: {:?}",
        wire.stats()
    );
    let (q, _) = a.ctx.query_qp(a.qp).unwrap();
    assert_eq!(q.qp_state, QpState::Err, "{what}");
    // Nothing delivered anywhere: no receive completion on either host, the
    // receiver's slots untouched, its QP still ready.
    for _ in 0..50 {
        a.dev.advance_us(100);
        b.dev.advance_us(100);
    }
    let mut wc = [WorkCompletion::EMPTY; 4];
    assert_eq!(b.ctx.poll_cq(b.rcq, &mut wc).unwrap(), 0, "{what}");
    assert_eq!(b.ctx.poll_cq(b.scq, &mut wc).unwrap(), 0, "{what}");
    assert_eq!(a.ctx.poll_cq(a.rcq, &mut wc).unwrap(), 0, "{what}");
    let mut slot = vec![0u8; 100];
    for i in 0..4 {
        b.buf.read_bytes(RECV_AT + i * BIG, &mut slot);
        assert!(slot.iter().all(|&x| x == 0), "{what}: slot {i} written");
    }
    let (q, _) = b.ctx.query_qp(b.qp).unwrap();
    assert_eq!(q.qp_state, QpState::Rts, "{what}");
    close(a, &format!("{what} host 1"));
    close(b, &format!("{what} host 2"));
}

#[test]
fn a_wrong_destination_is_dropped_and_the_sender_exhausts_its_retries() {
    big_stack(|| {
        for (t, wrong) in [
            (Transport::RoceV2Ipv4, Wrong::Mac),
            (Transport::RoceV1, Wrong::Mac),
            (Transport::RoceV2Ipv4, Wrong::Gid),
            (Transport::RoceV2Ipv6, Wrong::Gid),
            (Transport::RoceV1, Wrong::Gid),
            (Transport::IbGrh, Wrong::Gid),
            (Transport::IbLid, Wrong::Lid),
            (Transport::RoceV2Ipv4, Wrong::Qpn),
            (Transport::IbLid, Wrong::Qpn),
            (Transport::RoceV2Ipv4, Wrong::Pkey),
            (Transport::IbLid, Wrong::Pkey),
        ] {
            wrong_destination(t, wrong);
        }
    });
}

/// The right partition through a P_Key index other than 0: each host
/// programs the same key at a different index, reads it back with
/// `query_pkey` and connects its QP through that index; the message is
/// delivered intact.
#[test]
fn qps_on_a_pkey_index_above_zero_reach_a_peer_in_the_same_partition() {
    big_stack(|| {
        for t in [Transport::IbLid, Transport::RoceV2Ipv4] {
            let what = format!("{t:?}");
            let wire = Wire::new(if t.ib() {
                LinkType::Infiniband
            } else {
                LinkType::Ethernet
            });
            let mut a = host(t, 1, &wire, 0x10);
            let mut b = host(t, 2, &wire, 0x20);
            let (aa, ba) = (a.addr, b.addr);
            let mtu = aa.mtu.min(ba.mtu);
            // RoCE ports have one P_Key entry (Linux); the partition key
            // rides in entry 0 there, so only IB uses indexes above 0.
            let (ia, ib) = if t.ib() { (1, 2) } else { (0, 0) };
            if t.ib() {
                a.dev.set_pkey(ia, 0x8123);
                b.dev.set_pkey(ib, 0x8123);
                assert_eq!(a.ctx.query_pkey(1, ia).unwrap(), 0x8123, "{what}");
                assert_eq!(b.ctx.query_pkey(1, ib).unwrap(), 0x8123, "{what}");
            }
            let to_a = b.ah_to(&aa);
            connect(&mut b, to_a, &aa, mtu, 7, ib);
            let to_b = a.ah_to(&ba);
            connect(&mut a, to_b, &ba, mtu, 7, ia);
            b.post_recv(0).unwrap();
            let data = pattern(100, 9);
            a.buf.write_bytes(SEND_AT, &data);
            let sg = [Sge {
                addr: a.buf.iova() + SEND_AT as u64,
                length: 100,
                lkey: a.lkey(),
            }];
            let wr = SendWr {
                wr_id: 5,
                opcode: WrOpcode::Send,
                send_flags: SendFlags::SIGNALED,
                sg_list: &sg,
                ..SendWr::EMPTY
            };
            a.ctx.post_send(a.qp, &[wr]).unwrap();
            let s = wait_one(&mut a, true, &b.dev).expect("send completion");
            assert_eq!((s.wr_id, s.status), (5, WcStatus::Success), "{what}");
            let r = wait_one(&mut b, false, &a.dev).expect("receive completion");
            assert_eq!((r.status, r.byte_len), (WcStatus::Success, 100), "{what}");
            let mut got = vec![0u8; 100];
            b.buf.read_bytes(RECV_AT, &mut got);
            assert_eq!(got, data, "{what}");
            close(a, &format!("{what} host 1"));
            close(b, &format!("{what} host 2"));
        }
    });
}
