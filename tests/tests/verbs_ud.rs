//! Unreliable datagrams through the verbs facade against the model: two UD
//! QPs of one card and of two hosts on one wire, over RoCE v2 (IPv4 and
//! IPv6), RoCE v1, InfiniBand by LID and with a GRH; the 40 bytes of GRH
//! space checked byte for byte in the receive buffer, the completion's
//! source QP, SLID, SL and flags; a wrong Q_Key dropped silently and
//! counted, the controlled Q_Key bit, a datagram finding no receive dropped
//! and counted, one longer than the MTU refused; many destinations through
//! many address handles from one QP (`verbs_ud_held.rs`: an address handle
//! destroyed while the sends made with it wait to be fetched).

use mlx5_driver::verbs::{
    AhAttr, Errno, GlobalRoute, QpAttr, QpAttrMask, QpState, SendWr, WcStatus, WrOpcode,
};
use mlx5_sim::wire::{LinkType, Wire};
use mlx5_tests::hosts::*;
use mlx5_tests::ud::*;

pub(crate) fn wire_for(t: Transport) -> Wire {
    Wire::new(if t.ib() {
        LinkType::Infiniband
    } else {
        LinkType::Ethernet
    })
}

/// Datagram sizes: 1 byte, a few, the port MTU (1024 on RoCE with the
/// default 1500-byte Ethernet MTU, 4096 on IB).
fn sizes(mtu: usize) -> [usize; 4] {
    [1, 61, 500, mtu]
}

/// `n` datagrams from `a`'s QP `ua` to `b`'s QP `ub` (sizes around the MTU,
/// with and without immediate data), each checked in `b`'s completion and
/// receive buffer, GRH byte for byte.
fn exchange(t: Transport, a: &mut Host, ua: &UdQp, b: &mut Host, ub: &UdQp) {
    let mtu = a.addr.mtu.min(b.addr.mtu) as usize;
    let mtu = 128usize << mtu;
    let ah = a.ctx.create_ah(&a.ah_to(&b.addr)).unwrap();
    for (k, &len) in sizes(mtu).iter().enumerate() {
        for imm in [None, Some(0x0102_0304 + k as u32)] {
            let i = k * 2 + imm.is_some() as usize;
            post_slot(b, ub, i, 0xab);
            let data = pattern(len, i as u8);
            ud_send(a, ua, (ah, ub.qpn, QKEY), &data, imm, i as u64);
            let s = poll(a, true, Some(&b.dev)).expect("send completion");
            assert_eq!(s.status, WcStatus::Success, "{t:?} {len}: {s:?}");
            assert_eq!(s.wr_id, i as u64);
            let wc =
                poll(b, false, Some(&a.dev)).unwrap_or_else(|| panic!("{t:?} {len}: no receive"));
            check_ud_wc(t, &wc, ub.qpn, ua.qpn, len, imm, a.addr.lid);
            assert_eq!(wc.wr_id, i as u64);
            let at = ub.slots_at + i * SLOT;
            let got = read_bytes(b, at, SLOT);
            match expected_grh(t, &a.addr, &b.addr, (len, imm.is_some()), (0, 0), &got) {
                Some(g) => assert_eq!(got[..GRH], g, "{t:?} {len}: GRH"),
                // No GRH: the space is left as it was.
                None => assert_eq!(got[..GRH], [0xab; GRH], "{t:?} {len}: no GRH"),
            }
            assert_eq!(got[GRH..GRH + len], data[..], "{t:?} {len}: payload");
            if GRH + len < SLOT {
                assert_eq!(got[GRH + len], 0xab, "{t:?} {len}: past the datagram");
            }
        }
    }
    a.ctx.destroy_ah(ah).unwrap();
    assert_eq!(a.ctx.destroy_ah(ah), Err(Errno::EINVAL), "stale handle");
}

/// One completion of `h`'s send or receive CQ, letting time pass on
/// `other` too.
pub(crate) fn poll(
    h: &mut Host,
    send: bool,
    other: Option<&mlx5_sim::Device>,
) -> Option<mlx5_driver::verbs::WorkCompletion> {
    let cq = if send { h.scq } else { h.rcq };
    let mut wc = [mlx5_driver::verbs::WorkCompletion::EMPTY; 1];
    for _ in 0..2_000 {
        if h.ctx.poll_cq(cq, &mut wc).unwrap() == 1 {
            return Some(wc[0]);
        }
        h.dev.advance_us(10);
        if let Some(o) = other {
            o.advance_us(10);
        }
    }
    None
}

/// Two hosts of transport `t` on one wire, one UD QP with `QKEY` each
/// (the wire is returned so it outlives the hosts).
fn two_hosts(t: Transport) -> (Wire, Host, Host, UdQp, UdQp) {
    let wire = wire_for(t);
    let mut a = host(t, 1, &wire, 0);
    let mut b = host(t, 2, &wire, 0);
    let ua = ud_qp(&mut a, QKEY, UD_SLOTS_AT);
    let ub = ud_qp(&mut b, QKEY, UD_SLOTS_AT);
    (wire, a, b, ua, ub)
}

/// `a`'s next send completion, which must be a success.
fn sent_ok(a: &mut Host, b: &Host) {
    let s = poll(a, true, Some(&b.dev)).expect("a send completion");
    assert_eq!(s.status, WcStatus::Success, "{s:?}");
}

pub(crate) fn close_all(mut h: Host, qps: &[UdQp], what: &str) {
    for u in qps {
        h.ctx.destroy_qp(u.qp).unwrap();
    }
    mlx5_tests::hosts::close(h, what);
}

#[test]
fn ud_between_two_qps_of_one_card_on_every_transport() {
    for t in TRANSPORTS {
        big_stack(move || {
            let wire = wire_for(t);
            let mut a = host(t, 1, &wire, 0);
            let u1 = ud_qp(&mut a, QKEY, UD_SLOTS_AT);
            let u2 = ud_qp(&mut a, QKEY, UD_SLOTS_AT + 16 * SLOT);
            // A Host is both sides here: split the borrow by value.
            let a_addr = a.addr;
            let ah = a.ctx.create_ah(&a.ah_to(&a_addr)).unwrap();
            for (i, len) in [(0usize, 7usize), (1, 300)] {
                post_slot(&mut a, &u2, i, 0xab);
                let data = pattern(len, 9);
                ud_send(&mut a, &u1, (ah, u2.qpn, QKEY), &data, None, i as u64);
                let s = poll(&mut a, true, None).unwrap();
                assert_eq!(s.status, WcStatus::Success, "{t:?}");
                let wc = poll(&mut a, false, None).expect("loopback receive");
                check_ud_wc(t, &wc, u2.qpn, u1.qpn, len, None, a_addr.lid);
                let got = read_bytes(&a, u2.slots_at + i * SLOT, GRH + len);
                match expected_grh(t, &a_addr, &a_addr, (len, false), (0, 0), &got) {
                    Some(g) => assert_eq!(got[..GRH], g, "{t:?}: GRH"),
                    None => assert_eq!(got[..GRH], [0xab; GRH], "{t:?}"),
                }
                assert_eq!(got[GRH..], data[..], "{t:?}");
            }
            // Nothing left the card.
            assert_eq!(a.dev.traffic().stats().wire_tx, 0, "{t:?}");
            assert_eq!(a.dev.traffic().stats().ud_delivered, 2, "{t:?}");
            a.ctx.destroy_ah(ah).unwrap();
            close_all(a, &[u1, u2], &format!("{t:?} one card"));
        });
    }
}

#[test]
fn ud_between_two_hosts_on_every_transport() {
    for t in TRANSPORTS {
        big_stack(move || {
            let (_wire, mut a, mut b, ua, ub) = two_hosts(t);
            exchange(t, &mut a, &ua, &mut b, &ub);
            exchange(t, &mut b, &ub, &mut a, &ua);
            assert!(a.dev.traffic().stats().wire_tx >= 8, "{t:?}");
            assert_eq!(
                a.dev.traffic().stats().acks_sent,
                0,
                "{t:?}: UD sends no ACK"
            );
            assert_eq!(b.dev.traffic().stats().acks_sent, 0, "{t:?}");
            close_all(a, &[ua], &format!("{t:?} host a"));
            close_all(b, &[ub], &format!("{t:?} host b"));
        });
    }
}

#[test]
fn a_wrong_qkey_is_dropped_silently_and_a_controlled_qkey_sends_the_qps_own() {
    big_stack(|| {
        let t = Transport::RoceV2Ipv4;
        let (_wire, mut a, mut b, ua, ub) = two_hosts(t);
        let ah = a.ctx.create_ah(&a.ah_to(&b.addr)).unwrap();
        post_slot(&mut b, &ub, 0, 0);
        // The wrong key: sent and completed (no ACK to miss), never received.
        ud_send(&mut a, &ua, (ah, ub.qpn, QKEY ^ 1), b"nope", None, 1);
        let s = poll(&mut a, true, Some(&b.dev)).unwrap();
        assert_eq!(s.status, WcStatus::Success);
        assert!(poll(&mut b, false, Some(&a.dev)).is_none(), "delivered");
        assert_eq!(b.dev.traffic().stats().ud_qkey_drops, 1);
        // Bit 31: the sender's QP's own Q_Key (QKEY) goes out instead.
        ud_send(&mut a, &ua, (ah, ub.qpn, 0x8000_0000), b"mine", None, 2);
        sent_ok(&mut a, &b);
        let wc = poll(&mut b, false, Some(&a.dev)).expect("controlled key delivered");
        check_ud_wc(t, &wc, ub.qpn, ua.qpn, 4, None, 0);
        assert_eq!(wc.wr_id, 0, "the WQE the wrong key left posted");
        // No receive posted: dropped and counted, the sender unaffected.
        ud_send(&mut a, &ua, (ah, ub.qpn, QKEY), b"lost", None, 3);
        sent_ok(&mut a, &b);
        assert!(poll(&mut b, false, Some(&a.dev)).is_none());
        assert_eq!(b.dev.traffic().stats().ud_no_recv_drops, 1);
        // A datagram to a QP that does not exist: dropped.
        ud_send(&mut a, &ua, (ah, 0xabcd, QKEY), b"none", None, 4);
        sent_ok(&mut a, &b);
        assert_eq!(b.dev.traffic().stats().ud_dropped, 1);
        a.ctx.destroy_ah(ah).unwrap();
        close_all(a, &[ua], "qkey a");
        close_all(b, &[ub], "qkey b");
    });
}

#[test]
fn a_datagram_longer_than_the_mtu_fails_with_a_local_length_error() {
    for t in [Transport::RoceV2Ipv4, Transport::IbLid] {
        big_stack(move || {
            let (_wire, mut a, mut b, ua, ub) = two_hosts(t);
            let mtu = 128usize << (a.addr.mtu as usize);
            let ah = a.ctx.create_ah(&a.ah_to(&b.addr)).unwrap();
            post_slot(&mut b, &ub, 0, 0);
            ud_send(
                &mut a,
                &ua,
                (ah, ub.qpn, QKEY),
                &pattern(mtu + 1, 1),
                None,
                7,
            );
            let s = poll(&mut a, true, Some(&b.dev)).unwrap();
            assert_eq!(s.status, WcStatus::LocLenErr, "{t:?}: {s:?}");
            assert_eq!(s.wr_id, 7);
            assert!(
                poll(&mut b, false, Some(&a.dev)).is_none(),
                "{t:?}: nothing sent"
            );
            assert_eq!(a.dev.traffic().stats().wire_tx, 0, "{t:?}");
            a.ctx.destroy_ah(ah).unwrap();
            close_all(a, &[ua], "mtu a");
            close_all(b, &[ub], "mtu b");
        });
    }
}

#[test]
fn one_qp_reaches_many_destinations_through_many_address_handles() {
    big_stack(|| {
        let t = Transport::RoceV2Ipv6;
        let wire = wire_for(t);
        let mut a = host(t, 1, &wire, 0);
        let mut b = host(t, 2, &wire, 0);
        let ua = ud_qp(&mut a, QKEY, UD_SLOTS_AT);
        // Eight receivers on host b, each with its own slots.
        let dests: Vec<UdQp> = (0..8)
            .map(|k| ud_qp(&mut b, QKEY, UD_SLOTS_AT + k * 2 * SLOT))
            .collect();
        // Eight handles to the same host, each with its own traffic class
        // and flow label: the GRH each receive gets names its handle.
        let base = a.ah_to(&b.addr);
        let ahs: Vec<_> = (0..8u32)
            .map(|k| {
                let attr = AhAttr {
                    grh: GlobalRoute {
                        traffic_class: (k as u8) << 2,
                        flow_label: 0x100 + k,
                        ..base.grh
                    },
                    ..base
                };
                a.ctx.create_ah(&attr).unwrap()
            })
            .collect();
        for d in &dests {
            post_slot(&mut b, d, 0, 0);
        }
        // One list of eight requests, one per destination.
        let data: Vec<Vec<u8>> = (0..8).map(|k| pattern(100 + k, k as u8)).collect();
        for (k, d) in data.iter().enumerate() {
            a.buf.write_bytes(SEND_AT + k * 8192, d);
        }
        let sges: Vec<_> = (0..8)
            .map(|k| {
                [mlx5_driver::verbs::Sge {
                    addr: a.buf.iova() + (SEND_AT + k * 8192) as u64,
                    length: data[k].len() as u32,
                    lkey: a.lkey(),
                }]
            })
            .collect();
        let wrs: Vec<SendWr> = (0..8)
            .map(|k| SendWr {
                wr_id: k as u64,
                opcode: WrOpcode::Send,
                sg_list: &sges[k],
                ah: Some(ahs[k]),
                remote_qpn: dests[k].qpn,
                remote_qkey: QKEY,
                ..SendWr::EMPTY
            })
            .collect();
        a.ctx.post_send(ua.qp, &wrs).unwrap();
        for k in 0..8 {
            let s = poll(&mut a, true, Some(&b.dev)).unwrap();
            assert_eq!((s.status, s.wr_id), (WcStatus::Success, k as u64));
        }
        let mut seen = [false; 8];
        for _ in 0..8 {
            let wc = poll(&mut b, false, Some(&a.dev)).unwrap();
            let k = dests.iter().position(|d| d.qpn == wc.qp_num).unwrap();
            seen[k] = true;
            check_ud_wc(t, &wc, dests[k].qpn, ua.qpn, data[k].len(), None, 0);
            let got = read_bytes(&b, dests[k].slots_at, GRH + data[k].len());
            let g = expected_grh(
                t,
                &a.addr,
                &b.addr,
                (data[k].len(), false),
                ((k as u8) << 2, 0x100 + k as u32),
                &got,
            )
            .unwrap();
            assert_eq!(got[..GRH], g, "destination {k}: GRH");
            assert_eq!(got[GRH..], data[k][..], "destination {k}");
        }
        assert_eq!(seen, [true; 8]);
        // A stale handle in a list: the requests before it are posted.
        a.ctx.destroy_ah(ahs[3]).unwrap();
        for d in &dests[..2] {
            post_slot(&mut b, d, 1, 0);
        }
        let err = a.ctx.post_send(ua.qp, &wrs[1..5]).unwrap_err();
        assert_eq!((err.index, err.errno), (2, Errno::EINVAL));
        // A UD QP takes no RDMA opcode.
        let write = SendWr {
            opcode: WrOpcode::RdmaWrite,
            ..wrs[0]
        };
        assert_eq!(
            a.ctx.post_send(ua.qp, &[write]).unwrap_err().errno,
            Errno::EINVAL
        );
        for (k, ah) in ahs.iter().enumerate() {
            if k != 3 {
                a.ctx.destroy_ah(*ah).unwrap();
            }
        }
        close_all(a, &[ua], "many a");
        close_all(b, &dests, "many b");
    });
}

#[test]
fn ud_modify_qp_takes_the_ud_masks_and_refuses_the_rc_ones() {
    big_stack(|| {
        let t = Transport::RoceV2Ipv6;
        let wire = wire_for(t);
        let mut a = host(t, 1, &wire, 0);
        let (qp, _) = a
            .ctx
            .create_qp_of_type(
                &mlx5_driver::verbs::QpInitAttr {
                    send_cq: a.scq,
                    recv_cq: a.rcq,
                    srq: a.srq,
                    cap: mlx5_driver::verbs::QpCap {
                        max_send_wr: 4,
                        max_send_sge: 1,
                        ..Default::default()
                    },
                    sq_sig_all: false,
                },
                mlx5_driver::verbs::QpType::Ud,
            )
            .unwrap();
        let init = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            qkey: QKEY,
            ..QpAttr::default()
        };
        // The RC mask (access flags, no Q_Key) is not UD's.
        assert_eq!(
            a.ctx.modify_qp(qp, &init, QpAttrMask::RC_INIT),
            Err(Errno::EINVAL)
        );
        // Missing the Q_Key.
        let no_qkey = QpAttrMask(QpAttrMask::UD_INIT.0 & !QpAttrMask::QKEY.0);
        assert_eq!(a.ctx.modify_qp(qp, &init, no_qkey), Err(Errno::EINVAL));
        // A port that does not exist.
        let bad_port = QpAttr {
            port_num: 9,
            ..init
        };
        assert_eq!(
            a.ctx.modify_qp(qp, &bad_port, QpAttrMask::UD_INIT),
            Err(Errno::EINVAL)
        );
        a.ctx.modify_qp(qp, &init, QpAttrMask::UD_INIT).unwrap();
        // Sends are refused before RTS.
        let rtr = QpAttr {
            qp_state: QpState::Rtr,
            ..init
        };
        assert_eq!(
            a.ctx.modify_qp(qp, &rtr, QpAttrMask::RC_RTR),
            Err(Errno::EINVAL)
        );
        a.ctx.modify_qp(qp, &rtr, QpAttrMask::UD_RTR).unwrap();
        let rts = QpAttr {
            qp_state: QpState::Rts,
            sq_psn: 7,
            ..init
        };
        assert_eq!(
            a.ctx.modify_qp(qp, &rts, QpAttrMask::STATE),
            Err(Errno::EINVAL)
        );
        a.ctx.modify_qp(qp, &rts, QpAttrMask::UD_RTS).unwrap();
        let (q, _) = a.ctx.query_qp(qp).unwrap();
        assert_eq!((q.qp_state, q.qkey, q.sq_psn), (QpState::Rts, QKEY, 7));
        assert_eq!(a.ctx.qp_type(qp).unwrap(), mlx5_driver::verbs::QpType::Ud);
        // An RC send on a UD QP: no address handle.
        let wr = SendWr { ..SendWr::EMPTY };
        assert_eq!(a.ctx.post_send(qp, &[wr]).unwrap_err().errno, Errno::EINVAL);
        a.ctx.destroy_qp(qp).unwrap();
        mlx5_tests::hosts::close(a, "modify");
    });
}

#[test]
fn create_ah_refuses_what_the_port_cannot_reach() {
    big_stack(|| {
        let t = Transport::RoceV2Ipv4;
        let wire = wire_for(t);
        let mut a = host(t, 1, &wire, 0);
        let peer = a.addr;
        let good = a.ah_to(&peer);
        // A GID index beyond the table, an empty entry, no GRH on RoCE
        // (the wrong link layer's address), no port, force loopback.
        let bad = [
            AhAttr {
                grh: GlobalRoute {
                    sgid_index: 200,
                    ..good.grh
                },
                ..good
            },
            AhAttr {
                grh: GlobalRoute {
                    sgid_index: 5,
                    ..good.grh
                },
                ..good
            },
            AhAttr {
                is_global: false,
                dlid: 3,
                ..good
            },
            AhAttr {
                port_num: 2,
                ..good
            },
            AhAttr {
                force_loopback: true,
                ..good
            },
        ];
        for attr in bad {
            assert_eq!(a.ctx.create_ah(&attr), Err(Errno::EINVAL), "{attr:?}");
        }
        let ah = a.ctx.create_ah(&good).unwrap();
        let expect =
            mlx5_driver::qp::AddressVector::from_path(&mlx5_driver::qp::AddressPath::Roce {
                port: 1,
                sgid_index: good.grh.sgid_index,
                dgid: peer.gid,
                dmac: peer.mac,
                hop_limit: 64,
                udp_sport: 0xc000,
                traffic_class: 0,
                flow_label: 0,
                sl: 0,
                roce_v2: true,
            })
            .unwrap();
        assert_eq!(a.ctx.ah_address_vector(ah).unwrap(), expect);
        // The datagram segment a send with it carries (struct mlx5_av).
        let seg = expect.segment(0x12_3456, 0x1111_1111);
        assert_eq!(seg[0..4], [0x11; 4], "qkey");
        assert_eq!(
            seg[8..12],
            [0x80, 0x12, 0x34, 0x56],
            "dqp_dct with the extended AV bit"
        );
        assert_eq!(seg[14..16], [0xc0, 0x00], "RoCE v2 UDP source port");
        assert_eq!(seg[20..26], peer.mac, "rmac");
        assert_eq!(seg[27], 64, "hop limit");
        assert_eq!(seg[28] & 0x40, 0x40, "GRH bit of grh_gid_fl");
        assert_eq!(
            seg[28..32],
            (0x4000_0000u32 | (u32::from(good.grh.sgid_index) << 20)).to_be_bytes()
        );
        assert_eq!(seg[32..48], peer.gid, "rgid");
        a.ctx.destroy_ah(ah).unwrap();
        mlx5_tests::hosts::close(a, "create_ah");
    });
}
