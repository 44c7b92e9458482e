//! Two hosts on one wire for the driver-against-model tests: each a model
//! `Device` with its own driver and verbs context, learning its own address
//! the way a program on a real host does (`query_port`, `query_gid_table`,
//! `add_gid` for an IPv4 address) and connecting an RC QP to the peer's
//! over RoCE v2 (IPv4 and IPv6), RoCE v1, InfiniBand by LID or with a GRH.

use mlx5_driver::qp::Mtu;
use mlx5_driver::verbs::{
    AccessFlags, AhAttr, CqHandle, GidEntry, GidTableEntry, GidType, GlobalRoute, LinkLayer, Mr,
    PortState, QpAttr, QpAttrMask, QpCap, QpHandle, QpInitAttr, RecvWr, Sge, SrqHandle,
    SrqInitAttr, Verbs, WorkCompletion,
};
use mlx5_hal::{DmaRegion, Hal};
use mlx5_sim::wire::{LinkType, Wire};
use mlx5_sim::{Device, Profile, SimConfig, SimHal};

/// A verbs context on the model.
pub type Ctx = Verbs<SimHal>;

/// How the hosts reach each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// RoCE v2 over IPv4: an IPv4-mapped GID each side adds, the MAC named.
    RoceV2Ipv4,
    /// RoCE v2 over IPv6: the default link-local v2 GIDs, the MAC derived.
    RoceV2Ipv6,
    /// RoCE v1: the default link-local v1 GIDs, the MAC named.
    RoceV1,
    /// InfiniBand by LID.
    IbLid,
    /// InfiniBand with a GRH (LID and port GID).
    IbGrh,
}

/// Every transport.
pub const TRANSPORTS: [Transport; 5] = [
    Transport::RoceV2Ipv4,
    Transport::RoceV2Ipv6,
    Transport::RoceV1,
    Transport::IbLid,
    Transport::IbGrh,
];

impl Transport {
    /// An InfiniBand transport.
    pub fn ib(self) -> bool {
        matches!(self, Transport::IbLid | Transport::IbGrh)
    }
}

/// Bytes of the largest message.
pub const BIG: usize = 64 * 1024;
/// Receive WQEs posted on each SRQ (its `max_wr`).
pub const RECVS: usize = 31;
/// Buffer layout: send area, RDMA WRITE target, then one 64 KiB receive
/// slot per receive WQE. The send area's offset.
pub const SEND_AT: usize = 0;
/// The RDMA WRITE target's offset.
pub const WRITE_AT: usize = BIG;
/// The first receive slot's offset.
pub const RECV_AT: usize = 2 * BIG;
/// Bytes of each host's buffer.
pub const BUF: usize = RECV_AT + RECVS * BIG;

/// What one side hands the other out of band (rc_pingpong's exchange,
/// plus the MAC: this driver has no neighbour table).
#[derive(Debug, Clone, Copy)]
pub struct Addr {
    /// The QP number.
    pub qpn: u32,
    /// The first PSN it sends.
    pub psn: u32,
    /// Its GID (RoCE: the source entry's; IB: the port GID).
    pub gid: [u8; 16],
    /// Its MAC (RoCE).
    pub mac: [u8; 6],
    /// Its LID (IB).
    pub lid: u16,
    /// Its port's active MTU.
    pub mtu: Mtu,
}

/// One host: a device, its verbs context, two CQs, an SRQ, a QP on it, a
/// registered buffer.
pub struct Host {
    /// The device.
    pub dev: Device,
    /// Its verbs context.
    pub ctx: Ctx,
    /// The send CQ.
    pub scq: CqHandle,
    /// The receive CQ.
    pub rcq: CqHandle,
    /// The SRQ ([`RECVS`] WQEs).
    pub srq: SrqHandle,
    /// The QP.
    pub qp: QpHandle,
    /// The buffer ([`BUF`] bytes).
    pub buf: DmaRegion<SimHal>,
    /// Its registration (local and remote write).
    pub mr: Option<Mr>,
    /// The source GID index this host sends from.
    pub sgid_index: u8,
    /// What it tells its peer.
    pub addr: Addr,
}

/// `len` bytes of a pattern that differs per `seed`.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed) ^ (i >> 9) as u8)
        .collect()
}

impl Host {
    /// Host `n` on `wire`: a ConnectX-5 (host 1) or ConnectX-4 Lx (host 2)
    /// Ethernet port, or a ConnectX-5 InfiniBand port; its own address as
    /// a program learns it.
    pub fn new(t: Transport, n: u8, wire: &Wire, psn: u32) -> Host {
        Host::with_mode(t, n, Some(wire), psn, false)
    }

    /// Host `n` as [`Host::new`] makes it, on `wire` when one is given
    /// (else not yet on any), its device threaded when `threaded`.
    pub fn with_mode(t: Transport, n: u8, wire: Option<&Wire>, psn: u32, threaded: bool) -> Host {
        let profile = if n == 2 && !t.ib() {
            Profile::ConnectX4Lx
        } else {
            Profile::ConnectX5
        };
        let cfg = SimConfig {
            seed: 0x7a0_0000 + u64::from(n),
            ..SimConfig::profile(profile)
        };
        let dev = Device::new(if threaded { cfg.threaded() } else { cfg });
        if t.ib() {
            dev.caps_mut(|c| c.port_type = 0);
        }
        let mut ctx: Ctx = Verbs::open(crate::bring_up(&dev));
        if let Some(wire) = wire {
            dev.connect(wire).unwrap();
        }

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

    /// The buffer's local key.
    pub fn lkey(&self) -> u32 {
        self.mr.as_ref().unwrap().lkey()
    }

    /// The buffer's remote key.
    pub fn rkey(&self) -> u32 {
        self.mr.as_ref().unwrap().rkey()
    }

    /// Post receive WQE `i` (64 KiB slot `i`).
    pub fn post_recv(&mut self, i: usize) {
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
    pub fn ah_to(&self, t: Transport, peer: &Addr) -> AhAttr {
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
    pub fn connect(&mut self, ah: AhAttr, peer: &Addr, mtu: Mtu, retry_cnt: u8, pkey_index: u16) {
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
        for (state, mask) in QpAttrMask::RC_CONNECT {
            let a = QpAttr {
                qp_state: state,
                ..base
            };
            if let Err(e) = self.ctx.modify_qp(self.qp, &a, mask) {
                panic!("to {state:?}: {e} ({:?})", self.ctx.last_error());
            }
        }
    }

    /// Destroy everything, close the context, and check the model is
    /// clean: no object, no page, no GID entry, `roce_en` set back.
    pub fn close(mut self, what: &str) {
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
        crate::assert_clean(&self.dev, what);
        assert!(self.dev.gid_entries().is_empty(), "{what}: GIDs left");
        assert!(!self.dev.roce_enabled(), "{what}: roce_en set back");
    }
}

/// Poll the send (or receive) CQ of `h` for one completion, letting device time pass on both
/// hosts (bounded).
pub fn wait_one(h: &mut Host, send: bool, other: &Device) -> Option<WorkCompletion> {
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
pub fn pair(t: Transport) -> (Wire, Host, Host) {
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

/// Run `f` on a thread with room for two verbs contexts on its stack.
pub fn big_stack(f: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new()
        .stack_size(64 << 20)
        .spawn(f)
        .unwrap()
        .join()
        .unwrap();
}
