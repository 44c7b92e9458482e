//! Two hosts on one wire, each a model `Device` with its own driver and
//! verbs context (`mlx5_tests::hosts`), connected over RoCE v2 (IPv4 and
//! IPv6), RoCE v1, InfiniBand by LID and InfiniBand with a GRH: every
//! opcode that moves data, at the sizes around the path MTU and 64 KiB,
//! every byte checked, every frame's framing checked in the capture; the
//! receiver's SRQ limit event arrives by consumption.

use mlx5_driver::verbs::{
    AsyncEventType, SendFlags, SendWr, Sge, SrqAttr, SrqAttrMask, WcOpcode, WcStatus,
    WorkCompletion, WrOpcode,
};
use mlx5_sim::wire::LinkType;
use mlx5_tests::hosts::*;

/// The SRQ limit armed on the receiver.
const LIMIT: u32 = 20;

/// A pcap capture kept in memory.
#[derive(Clone, Default)]
struct Capture(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Capture {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Capture {
    fn bytes(&self) -> Vec<u8> {
        self.0.lock().unwrap().clone()
    }
}

/// Every captured frame is framed as transport `t` between the two
/// addresses (either direction), with a good ICRC, hop limit 64 (asked for
/// 1 on RoCE; Linux's rule), and on RoCE v2 the UDP source port Linux
/// derives from both QP numbers.
fn check_frames(t: Transport, pcap: &[u8], a: &Addr, b: &Addr, frames: u64) {
    use mlx5_sim::wire::{parse, Encap, Ip};
    let link = if t.ib() {
        LinkType::Infiniband
    } else {
        LinkType::Ethernet
    };
    let (_, records) = mlx5_sim::wire::read_pcap(pcap).unwrap();
    assert_eq!(records.len() as u64, frames, "{t:?}: every frame captured");
    let sport = mlx5_driver::qp::roce_udp_sport(a.qpn, b.qpn);
    let v4 = |g: &[u8; 16]| [g[12], g[13], g[14], g[15]];
    for r in &records {
        let p = parse(link, &r.data).unwrap_or_else(|e| panic!("{t:?}: {e}"));
        assert!(p.icrc_ok, "{t:?}: ICRC");
        let ours = |src: &[u8; 16], dst: &[u8; 16]| {
            (*src, *dst) == (a.gid, b.gid) || (*src, *dst) == (b.gid, a.gid)
        };
        match (t, p.packet.encap) {
            (
                Transport::RoceV2Ipv4,
                Encap::RoceV2 {
                    eth,
                    ip: Ip::V4(ip),
                    udp_sport,
                },
            ) => {
                assert_eq!(ip.ttl, 64, "{t:?}");
                let pair = (ip.src, ip.dst);
                assert!(
                    pair == (v4(&a.gid), v4(&b.gid)) || pair == (v4(&b.gid), v4(&a.gid)),
                    "{t:?}: {pair:?}"
                );
                assert!(eth.dst == a.mac || eth.dst == b.mac);
                assert_eq!(udp_sport, sport, "{t:?}");
            }
            (
                Transport::RoceV2Ipv6,
                Encap::RoceV2 {
                    ip: Ip::V6(g),
                    udp_sport,
                    ..
                },
            ) => {
                assert_eq!(g.hop_limit, 64, "{t:?}");
                assert!(ours(&g.sgid, &g.dgid), "{t:?}");
                assert_eq!(udp_sport, sport, "{t:?}");
            }
            (Transport::RoceV1, Encap::RoceV1 { grh, .. }) => {
                assert_eq!(grh.hop_limit, 64, "{t:?}");
                assert!(ours(&grh.sgid, &grh.dgid), "{t:?}");
            }
            (Transport::IbLid, Encap::Ib { lrh, grh: None }) => {
                let pair = (lrh.slid, lrh.dlid);
                assert!(pair == (a.lid, b.lid) || pair == (b.lid, a.lid), "{t:?}");
            }
            (Transport::IbGrh, Encap::Ib { lrh, grh }) => {
                let pair = (lrh.slid, lrh.dlid);
                assert!(pair == (a.lid, b.lid) || pair == (b.lid, a.lid), "{t:?}");
                // Data packets carry the GRH; the responder's ACKs follow its
                // own path, also global here.
                let g = grh.unwrap_or_else(|| panic!("{t:?}: no GRH"));
                assert!(ours(&g.sgid, &g.dgid), "{t:?}: {g:?}");
            }
            (t, e) => panic!("{t:?}: framed as {e:?}"),
        }
    }
}

#[test]
fn every_transport_every_opcode_every_size_between_two_hosts() {
    big_stack(every_transport_body);
}

fn every_transport_body() {
    let ops = [
        WrOpcode::Send,
        WrOpcode::SendWithImm,
        WrOpcode::RdmaWrite,
        WrOpcode::RdmaWriteWithImm,
    ];
    for t in TRANSPORTS {
        let (wire, mut a, mut b) = pair(t);
        let capture = Capture::default();
        wire.capture(Box::new(capture.clone())).unwrap();
        let mtu = a.addr.mtu.min(b.addr.mtu).bytes() as usize;
        assert_eq!(mtu, if t.ib() { 4096 } else { 1024 }, "{t:?}");
        for i in 0..RECVS {
            b.post_recv(i).unwrap();
        }
        b.ctx
            .modify_srq(
                b.srq.unwrap(),
                &SrqAttr {
                    max_wr: 0,
                    max_sge: 0,
                    srq_limit: LIMIT,
                },
                SrqAttrMask::LIMIT,
            )
            .unwrap();
        let mut consumed = 0usize;
        let mut limit_seen = false;
        let sizes = [0, 1, mtu - 1, mtu, mtu + 1, BIG];
        let mut seed = 0u8;
        for op in ops {
            for len in sizes {
                seed = seed.wrapping_add(1);
                let what = format!("{t:?} {op:?} {len} B");
                let data = pattern(len, seed);
                a.buf.write_bytes(SEND_AT, &data);
                b.buf.write_bytes(WRITE_AT, &vec![0xee; len + 1]);
                let sg = [Sge {
                    addr: a.buf.iova() + SEND_AT as u64,
                    length: len as u32,
                    lkey: a.lkey(),
                }];
                let wr = SendWr {
                    wr_id: u64::from(seed),
                    opcode: op,
                    send_flags: SendFlags::SIGNALED,
                    sg_list: if len == 0 { &[] } else { &sg },
                    imm_data: 0xabc0_0000 | u32::from(seed),
                    remote_addr: b.buf.iova() + WRITE_AT as u64,
                    rkey: b.rkey(),
                    ..SendWr::EMPTY
                };
                a.ctx.post_send(a.qp, &[wr]).unwrap();
                let s = wait_one(&mut a, true, &b.dev)
                    .unwrap_or_else(|| panic!("{what}: no send completion"));
                assert_eq!(
                    (s.status, s.wr_id),
                    (WcStatus::Success, u64::from(seed)),
                    "{what}"
                );
                let consumes = op != WrOpcode::RdmaWrite;
                if consumes {
                    let r = wait_one(&mut b, false, &a.dev)
                        .unwrap_or_else(|| panic!("{what}: no receive completion"));
                    consumed += 1;
                    assert_eq!(r.status, WcStatus::Success, "{what}");
                    assert_eq!(r.qp_num, b.addr.qpn, "{what}");
                    let slot = r.wr_id as usize;
                    if op == WrOpcode::RdmaWriteWithImm {
                        assert_eq!(
                            (r.opcode, r.byte_len, r.imm_data),
                            (WcOpcode::RecvRdmaWithImm, len as u32, Some(wr.imm_data)),
                            "{what}"
                        );
                    } else {
                        let imm = (op == WrOpcode::SendWithImm).then_some(wr.imm_data);
                        assert_eq!(
                            (r.opcode, r.byte_len, r.imm_data),
                            (WcOpcode::Recv, len as u32, imm),
                            "{what}"
                        );
                        let mut got = vec![0u8; len];
                        b.buf.read_bytes(RECV_AT + slot * BIG, &mut got);
                        assert!(got == data, "{what}: received bytes differ");
                    }
                    // The limit event, by consumption: once fewer WQEs than
                    // the limit remain, and not before.
                    let below = RECVS - consumed < LIMIT as usize;
                    let ev = b.ctx.get_async_event();
                    match ev {
                        Ok(e) => {
                            assert_eq!(e.event_type, AsyncEventType::SrqLimitReached, "{what}");
                            assert!(below && !limit_seen, "{what}: {consumed} consumed");
                            b.ctx.ack_async_event(&e).unwrap();
                            limit_seen = true;
                        }
                        Err(_) => assert!(!below || limit_seen, "{what}: no limit event"),
                    }
                }
                if matches!(op, WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm) {
                    let mut got = vec![0u8; len + 1];
                    b.buf.read_bytes(WRITE_AT, &mut got);
                    assert!(got[..len] == data[..], "{what}: written bytes differ");
                    assert_eq!(got[len], 0xee, "{what}: wrote past the end");
                }
                // Nothing on A's receive side.
                let mut wc = [WorkCompletion::EMPTY; 1];
                assert_eq!(a.ctx.poll_cq(a.rcq, &mut wc).unwrap(), 0, "{what}");
            }
        }
        assert!(limit_seen, "{t:?}: the SRQ limit event");
        let st = wire.stats();
        assert_eq!((st.dropped, st.corrupted), (0, 0), "{t:?}: a clean wire");
        let packets: usize =
            ops.len() * sizes.iter().map(|&l| l.div_ceil(mtu).max(1)).sum::<usize>();
        assert!(st.frames as usize >= packets, "{t:?}: {st:?}");
        wire.end_capture().unwrap();
        check_frames(t, &capture.bytes(), &a.addr, &b.addr, st.frames);
        close(a, &format!("{t:?} host 1"));
        close(b, &format!("{t:?} host 2"));
    }
}
