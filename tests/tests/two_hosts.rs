//! Two hosts on one wire, each a model `Device` with its own driver and
//! verbs context: each side learns its own address the way a program on a
//! real host does (`query_port`, `query_gid_table`, `add_gid` for an IPv4
//! address), hands it to the peer "out of band", and connects an RC QP to
//! it over RoCE v2 (IPv4 and IPv6), RoCE v1, InfiniBand by LID and
//! InfiniBand with a GRH. Every opcode that moves data, at the sizes around
//! the path MTU and 64 KiB, every byte checked; the receiver's SRQ limit
//! event arrives by consumption. A wrong destination (MAC, GID, LID, QPN,
//! P_Key) is dropped by the receiving card: the sender ends in
//! RETRY_EXC_ERR after exactly its retry budget, nothing delivered.

use mlx5_driver::qp::Mtu;
use mlx5_driver::verbs::{
    AccessFlags, AhAttr, AsyncEventType, CqHandle, GidEntry, GidTableEntry, GidType, GlobalRoute,
    LinkLayer, Mr, PortState, QpAttr, QpAttrMask, QpCap, QpHandle, QpInitAttr, QpState, RecvWr,
    SendFlags, SendWr, Sge, SrqAttr, SrqAttrMask, SrqHandle, SrqInitAttr, Verbs, WcOpcode,
    WcStatus, WorkCompletion, WrOpcode,
};
use mlx5_hal::{DmaRegion, Hal};
use mlx5_sim::wire::{LinkType, Wire};
use mlx5_sim::{Device, Profile, SimConfig, SimHal};

type Ctx = Verbs<SimHal>;

/// How the hosts reach each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    RoceV2Ipv4,
    RoceV2Ipv6,
    RoceV1,
    IbLid,
    IbGrh,
}

const TRANSPORTS: [Transport; 5] = [
    Transport::RoceV2Ipv4,
    Transport::RoceV2Ipv6,
    Transport::RoceV1,
    Transport::IbLid,
    Transport::IbGrh,
];

impl Transport {
    fn ib(self) -> bool {
        matches!(self, Transport::IbLid | Transport::IbGrh)
    }
}

/// Bytes of the largest message.
const BIG: usize = 64 * 1024;
/// Receive WQEs posted on each SRQ (its `max_wr`).
const RECVS: usize = 31;
/// The SRQ limit armed on the receiver.
const LIMIT: u32 = 20;
/// Buffer layout: send area, RDMA WRITE target, then one 64 KiB receive
/// slot per receive WQE.
const SEND_AT: usize = 0;
const WRITE_AT: usize = BIG;
const RECV_AT: usize = 2 * BIG;
const BUF: usize = RECV_AT + RECVS * BIG;

/// What one side hands the other out of band (rc_pingpong's exchange,
/// plus the MAC: this driver has no neighbour table).
#[derive(Debug, Clone, Copy)]
struct Addr {
    qpn: u32,
    psn: u32,
    gid: [u8; 16],
    mac: [u8; 6],
    lid: u16,
    mtu: Mtu,
}

struct Host {
    dev: Device,
    ctx: Ctx,
    scq: CqHandle,
    rcq: CqHandle,
    srq: SrqHandle,
    qp: QpHandle,
    buf: DmaRegion<SimHal>,
    mr: Option<Mr>,
    /// The source GID index this host sends from.
    sgid_index: u8,
    /// What it tells its peer.
    addr: Addr,
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed) ^ (i >> 9) as u8)
        .collect()
}

impl Host {
    /// Host `n` on `wire`: a ConnectX-5 (host 1) or ConnectX-4 Lx (host 2)
    /// Ethernet port, or a ConnectX-5 InfiniBand port; its own address as
    /// a program learns it.
    fn new(t: Transport, n: u8, wire: &Wire, psn: u32) -> Host {
        let profile = if n == 2 && !t.ib() {
            Profile::ConnectX4Lx
        } else {
            Profile::ConnectX5
        };
        let dev = Device::new(SimConfig {
            seed: 0x7a0_0000 + u64::from(n),
            ..SimConfig::profile(profile)
        });
        if t.ib() {
            dev.caps_mut(|c| c.port_type = 0);
        }
        let mut ctx: Ctx = Verbs::open(mlx5_tests::bring_up(&dev));
        dev.connect(wire).unwrap();

        let port = ctx.query_port(1).unwrap();
        assert_eq!(port.state, PortState::Active, "{t:?}");
        let ll = if t.ib() {
            LinkLayer::Infiniband
        } else {
            LinkLayer::Ethernet
        };
        assert_eq!(port.link_layer, ll);
        assert!(port.gid_tbl_len > 0);
        assert_eq!(ctx.query_pkey(1, 0).unwrap(), 0xffff);

        let (sgid_index, gid, mac) = if t.ib() {
            assert_ne!(port.lid, 0);
            assert_eq!(port.lid, dev.port_lid());
            (0, ctx.query_gid(1, 0).unwrap(), [0; 6])
        } else {
            let mut table = [GidTableEntry {
                gid: [0; 16],
                gid_index: 0,
                port_num: 0,
                gid_type: GidType::Ib,
            }; 8];
            let k = ctx.query_gid_table(&mut table).unwrap();
            let defaults = &table[..k];
            // Bring-up's default link-local GIDs: v1 at 0, v2 at 1.
            assert_eq!(k, 2, "{defaults:?}");
            let mac = ctx.query_gid_ex(1, 0).unwrap().unwrap().mac;
            assert_eq!(mac, dev.port_mac());
            let of = |ty| defaults.iter().find(|e| e.gid_type == ty).unwrap();
            match t {
                Transport::RoceV2Ipv4 => {
                    let index = ctx.hca().default_gid_count();
                    let gid = mlx5_driver::gid::ipv4_gid([198, 18, 0, n]);
                    let entry = GidEntry {
                        gid,
                        gid_type: GidType::RoceV2,
                        mac,
                        vlan: None,
                    };
                    ctx.add_gid(1, index, &entry).unwrap();
                    assert_eq!(ctx.query_gid_ex(1, index).unwrap(), Some(entry));
                    (index as u8, gid, mac)
                }
                Transport::RoceV2Ipv6 => {
                    let e = of(GidType::RoceV2);
                    (e.gid_index as u8, e.gid, mac)
                }
                _ => {
                    let e = of(GidType::RoceV1);
                    (e.gid_index as u8, e.gid, mac)
                }
            }
        };

        let (scq, _) = ctx.create_cq(255).unwrap();
        let (rcq, _) = ctx.create_cq(255).unwrap();
        let (srq, _) = ctx
            .create_srq(&SrqInitAttr {
                max_wr: RECVS as u32,
                max_sge: 1,
                srq_limit: 0,
                cq: Some(rcq),
            })
            .unwrap();
        let (qp, _) = ctx
            .create_qp(&QpInitAttr {
                send_cq: scq,
                recv_cq: rcq,
                srq: Some(srq),
                cap: QpCap {
                    max_send_wr: 8,
                    max_send_sge: 1,
                    ..QpCap::default()
                },
                sq_sig_all: false,
            })
            .unwrap();
        let buf = dev.hal().alloc_dma(BUF).unwrap();
        let mr = ctx
            .reg_mr(
                buf.iova(),
                BUF as u64,
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
            )
            .unwrap();
        let addr = Addr {
            qpn: ctx.qp_num(qp).unwrap(),
            psn,
            gid,
            mac,
            lid: port.lid,
            mtu: port.active_mtu,
        };
        Host {
            dev,
            ctx,
            scq,
            rcq,
            srq,
            qp,
            buf,
            mr: Some(mr),
            sgid_index,
            addr,
        }
    }

    fn lkey(&self) -> u32 {
        self.mr.as_ref().unwrap().lkey()
    }

    fn rkey(&self) -> u32 {
        self.mr.as_ref().unwrap().rkey()
    }

    /// Post receive WQE `i` (64 KiB slot `i`).
    fn post_recv(&mut self, i: usize) {
        let sg = [Sge {
            addr: self.buf.iova() + (RECV_AT + i * BIG) as u64,
            length: BIG as u32,
            lkey: self.lkey(),
        }];
        self.ctx
            .post_srq_recv(
                self.srq,
                &[RecvWr {
                    wr_id: i as u64,
                    sges: &sg,
                }],
            )
            .unwrap();
    }

    /// The address vector toward `peer` over `t`.
    fn ah_to(&self, t: Transport, peer: &Addr) -> AhAttr {
        let grh = GlobalRoute {
            dgid: peer.gid,
            flow_label: 0,
            sgid_index: self.sgid_index,
            // Linux turns a hop limit below 2 into 64.
            hop_limit: 1,
            traffic_class: 0,
        };
        match t {
            Transport::IbLid => AhAttr {
                dlid: peer.lid,
                port_num: 1,
                ..AhAttr::default()
            },
            Transport::IbGrh => AhAttr {
                dlid: peer.lid,
                is_global: true,
                grh: GlobalRoute {
                    hop_limit: 64,
                    ..grh
                },
                port_num: 1,
                ..AhAttr::default()
            },
            // The IPv6 peer is reached by its link-local GID, whose MAC
            // derives from it; the others name the MAC explicitly.
            Transport::RoceV2Ipv6 => AhAttr {
                is_global: true,
                grh,
                port_num: 1,
                ..AhAttr::default()
            },
            _ => AhAttr {
                is_global: true,
                grh,
                port_num: 1,
                dmac: Some(peer.mac),
                ..AhAttr::default()
            },
        }
    }

    /// RESET → INIT → RTR (toward `peer` by `ah`) → RTS.
    fn connect(&mut self, ah: AhAttr, peer: &Addr, mtu: Mtu, retry_cnt: u8, pkey_index: u16) {
        use QpAttrMask as M;
        let base = QpAttr {
            port_num: 1,
            pkey_index,
            qp_access_flags: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
            ah_attr: ah,
            path_mtu: mtu,
            dest_qp_num: peer.qpn,
            rq_psn: peer.psn,
            sq_psn: self.addr.psn,
            min_rnr_timer: 12,
            timeout: 10,
            retry_cnt,
            rnr_retry: 7,
            max_rd_atomic: 0,
            max_dest_rd_atomic: 0,
            ..QpAttr::default()
        };
        let steps = [
            (
                QpState::Init,
                M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS,
            ),
            (
                QpState::Rtr,
                M::STATE
                    | M::AV
                    | M::PATH_MTU
                    | M::DEST_QPN
                    | M::RQ_PSN
                    | M::MAX_DEST_RD_ATOMIC
                    | M::MIN_RNR_TIMER,
            ),
            (
                QpState::Rts,
                M::STATE
                    | M::TIMEOUT
                    | M::RETRY_CNT
                    | M::RNR_RETRY
                    | M::SQ_PSN
                    | M::MAX_QP_RD_ATOMIC,
            ),
        ];
        for (state, mask) in steps {
            let a = QpAttr {
                qp_state: state,
                ..base
            };
            if let Err(e) = self.ctx.modify_qp(self.qp, &a, mask) {
                panic!("to {state:?}: {e} ({:?})", self.ctx.last_error());
            }
        }
    }

    fn close(mut self, what: &str) {
        self.ctx.destroy_qp(self.qp).unwrap();
        self.ctx.destroy_srq(self.srq).unwrap();
        self.ctx.destroy_cq(self.scq).unwrap();
        self.ctx.destroy_cq(self.rcq).unwrap();
        self.ctx
            .dereg_mr(self.mr.take().unwrap())
            .map_err(|(_, e)| e)
            .unwrap();
        drop(self.buf);
        if let Err(e) = self.ctx.close() {
            panic!("{what}: close: {e}");
        }
        mlx5_tests::assert_clean(&self.dev, what);
        assert!(self.dev.gid_entries().is_empty(), "{what}: GIDs left");
        assert!(!self.dev.roce_enabled(), "{what}: roce_en set back");
    }
}

/// Poll the send (or receive) CQ of `h` for one completion, letting device time pass on both
/// hosts (bounded).
fn wait_one(h: &mut Host, send: bool, other: &Device) -> Option<WorkCompletion> {
    let cq = if send { h.scq } else { h.rcq };
    let mut wc = [WorkCompletion::EMPTY; 1];
    for _ in 0..20_000 {
        if h.ctx.poll_cq(cq, &mut wc).unwrap() == 1 {
            return Some(wc[0]);
        }
        h.dev.advance_us(100);
        other.advance_us(100);
    }
    None
}

/// Two hosts on a new wire, connected.
fn pair(t: Transport) -> (Wire, Host, Host) {
    let wire = Wire::new(if t.ib() {
        LinkType::Infiniband
    } else {
        LinkType::Ethernet
    });
    let mut a = Host::new(t, 1, &wire, 0xff_fff0);
    let mut b = Host::new(t, 2, &wire, 0x1234);
    let (aa, ba) = (a.addr, b.addr);
    let mtu = aa.mtu.min(ba.mtu);
    a.connect(a.ah_to(t, &ba), &ba, mtu, 7, 0);
    b.connect(b.ah_to(t, &aa), &aa, mtu, 7, 0);
    (wire, a, b)
}

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

/// Run `f` on a thread with room for two verbs contexts on its stack.
fn big_stack(f: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new()
        .stack_size(64 << 20)
        .spawn(f)
        .unwrap()
        .join()
        .unwrap();
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
            b.post_recv(i);
        }
        b.ctx
            .modify_srq(
                b.srq,
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
        a.close(&format!("{t:?} host 1"));
        b.close(&format!("{t:?} host 2"));
    }
}

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
    let mut a = Host::new(t, 1, &wire, 0x10);
    let mut b = Host::new(t, 2, &wire, 0x20);
    let (aa, ba) = (a.addr, b.addr);
    let mtu = aa.mtu.min(ba.mtu);
    b.connect(b.ah_to(t, &aa), &aa, mtu, 7, 0);
    let mut to = ba;
    let mut ah = a.ah_to(t, &ba);
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
    a.connect(ah, &to, mtu, RETRIES, pkey_index);
    for i in 0..4 {
        b.post_recv(i);
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
    a.close(&format!("{what} host 1"));
    b.close(&format!("{what} host 2"));
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
