//! Test helper: two modelled hosts joined by a `Wire`, each with one RC QP
//! (a send ring and an RMP), connected to each other over RoCE v2 (IPv4 or
//! IPv6), RoCE v1 or IB. Test code playing the driver; not the driver.
#![allow(dead_code)]

use mlx5_hal::Hal;
use mlx5_regs::consts::{roce, OptParam};
use mlx5_regs::layouts::*;
use mlx5_regs::{EventMask, Opcode};
use mlx5_sim::wire::{LinkType, Wire};
use mlx5_sim::{Profile, SimConfig};

use super::qp::{
    create_qp, dma_key, gid_of, modify_cmd, rst2init, set_roce_en, TQp, TRmp, RMP_LOG,
};
use super::wire::Wr;
use super::{inp, Fw, Out, Region, TCq, TEq};

/// How the two hosts reach each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// RoCE v2 over IPv4 (IPv4-mapped GIDs).
    RoceV2Ipv4,
    /// RoCE v2 over IPv6 (link-local GIDs).
    RoceV2Ipv6,
    /// RoCE v1 (Ethernet 0x8915 + GRH).
    RoceV1,
    /// InfiniBand by LID.
    Ib,
}

pub const ALL: [Transport; 4] = [
    Transport::RoceV2Ipv4,
    Transport::RoceV2Ipv6,
    Transport::RoceV1,
    Transport::Ib,
];

/// Bytes of each host's big receive buffer (one per RMP WQE, 64 KiB each).
pub const BIG: usize = 64 * 1024;

/// One host: a device, its EQ, CQs, a PA key, an RMP whose WQEs scatter
/// into 64 KiB slots of `big`, a QP on it with a send ring, a send buffer.
pub struct Host {
    pub f: Fw,
    pub eq: TEq,
    pub scq: TCq,
    pub rcq: TCq,
    pub key: u32,
    pub rmp: TRmp,
    pub qp: TQp,
    pub big: Region,
    pub src: Region,
    pub gid: [u8; 16],
}

fn ipv4_gid(host: u8) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&[198, 18, 0, host]);
    g
}

/// SET_ROCE_ADDRESS of entry 0.
fn set_gid0(f: &mut Fw, gid: [u8; 16], version: u8, l3: u8) -> Out {
    let mac = f.dev.port_mac();
    let mut i = inp(Opcode::SET_ROCE_ADDRESS, set_roce_address_in::SIZE);
    let a = set_roce_address_in::roce_address.get_mut(&mut i);
    roce_addr_layout::source_l3_address
        .get_mut(a)
        .copy_from_slice(&gid);
    roce_addr_layout::source_mac_47_32
        .set(a, u16::from_be_bytes([mac[0], mac[1]]))
        .unwrap();
    roce_addr_layout::source_mac_31_0
        .set(a, u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]]))
        .unwrap();
    roce_addr_layout::roce_l3_type.set(a, l3).unwrap();
    roce_addr_layout::roce_version.set(a, version).unwrap();
    f.exec(&i, set_roce_address_out::SIZE)
}

impl Host {
    fn new(t: Transport, n: u8, rmp_lwm: u16) -> Host {
        let profile = if t == Transport::Ib {
            Profile::ConnectX5
        } else {
            Profile::ConnectX4Lx
        };
        let cfg = SimConfig {
            seed: 0x5eed_0000 + u64::from(n),
            ..SimConfig::profile(profile)
        };
        let mut f = Fw::new(cfg);
        if t == Transport::Ib {
            f.dev.caps_mut(|c| c.port_type = 0);
        }
        f.init(1);
        f.uar = f.alloc_uar();
        f.pd = f.alloc_pd();
        let gid = match t {
            Transport::Ib => [0; 16],
            Transport::RoceV2Ipv4 => ipv4_gid(n),
            _ => gid_of(f.dev.port_mac()),
        };
        if t != Transport::Ib {
            assert!(set_roce_en(&mut f, true).ok());
            let (version, l3) = match t {
                Transport::RoceV2Ipv4 => (roce::VERSION_2, roce::L3_TYPE_IPV4),
                Transport::RoceV2Ipv6 => (roce::VERSION_2, roce::L3_TYPE_IPV6),
                _ => (roce::VERSION_1, roce::L3_TYPE_IPV6),
            };
            assert!(set_gid0(&mut f, gid, version, l3).ok());
        }
        let eq = f.create_eq(7, EventMask::LINUX_ASYNC.bits());
        let scq = f.create_cq(8, eq.eqn);
        let rcq = f.create_cq(8, eq.eqn);
        let key = dma_key(&mut f);
        let rmp = TRmp::new(&mut f, key, rmp_lwm);
        let big = f.hal.alloc_dma(BIG << RMP_LOG).unwrap();
        for i in 0..(1usize << RMP_LOG) {
            rmp.set_seg(i, big.iova() + (i * BIG) as u64, BIG as u32, key);
        }
        let qp = create_qp(&mut f, Some(6), Some(rmp.n), scq.cqn, rcq.cqn);
        let src = f.hal.alloc_dma(BIG + 4096).unwrap();
        Host {
            f,
            eq,
            scq,
            rcq,
            key,
            rmp,
            qp,
            big,
            src,
            gid,
        }
    }

    /// Fill the send buffer with a pattern of `len` bytes; returns it.
    pub fn payload(&self, len: usize, seed: u8) -> Vec<u8> {
        let v: Vec<u8> = (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
            .collect();
        self.src.write_bytes(0, &v);
        v
    }

    /// What RMP WQE `i` received (first `len` bytes of its slot).
    pub fn received(&self, i: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.big.read_bytes(i * BIG, &mut v);
        v
    }

    /// A SEND of the first `len` bytes of the send buffer.
    pub fn send_wr(&self, len: u32) -> Wr {
        let mut wr = Wr::send(self.src.iova(), len, self.key);
        if len == 0 {
            // A zero byte count in a data segment means 2 GiB (PRM).
            wr.sges.clear();
        }
        wr
    }

    /// Scatter/gather list of the first `len` bytes of the send buffer.
    pub fn sges(&self, len: u32) -> Vec<(u64, u32, u32)> {
        if len == 0 {
            Vec::new()
        } else {
            vec![(self.src.iova(), len, self.key)]
        }
    }
}

/// Connection parameters of one side.
#[derive(Debug, Clone, Copy)]
pub struct Conn {
    pub mtu: u8,
    pub ack_timeout: u8,
    pub retry_count: u8,
    pub rnr_retry: u8,
    pub pkey_index: u16,
}

impl Default for Conn {
    fn default() -> Self {
        Conn {
            mtu: 3,
            ack_timeout: 14,
            retry_count: 7,
            rnr_retry: 7,
            pkey_index: 0,
        }
    }
}

/// Two hosts on one wire, their QPs connected to each other.
pub struct Hosts {
    pub t: Transport,
    pub wire: Wire,
    pub a: Host,
    pub b: Host,
}

/// What host `to` is addressed by: (GID, MAC, LID).
pub struct Addr {
    pub gid: [u8; 16],
    pub mac: [u8; 6],
    pub lid: u16,
}

impl Host {
    pub fn addr(&self) -> Addr {
        Addr {
            gid: self.gid,
            mac: self.f.dev.port_mac(),
            lid: self.f.dev.port_lid(),
        }
    }
}

/// RST2INIT, INIT2RTR toward `peer` (QPN `rqpn`, address `to`), RTR2RTS.
pub fn connect_qp(h: &mut Host, t: Transport, rqpn: u32, to: &Addr, psns: (u32, u32), c: Conn) {
    let qpn = h.qp.qpn;
    let mut init = rst2init(qpn);
    ads::pkey_index
        .set(
            qpc::primary_address_path.get_mut(rst2init_qp_in::qpc.get_mut(&mut init)),
            c.pkey_index,
        )
        .unwrap();
    h.f.ok(&init, 16);
    let i = modify_cmd(Opcode::INIT2RTR_QP, qpn, OptParam::empty(), |q| {
        qpc::mtu.set(q, c.mtu).unwrap();
        qpc::log_msg_max.set(q, 30).unwrap();
        qpc::remote_qpn.set(q, rqpn).unwrap();
        qpc::next_rcv_psn.set(q, psns.1).unwrap();
        qpc::min_rnr_nak.set(q, 12).unwrap();
        let a = qpc::primary_address_path.get_mut(q);
        ads::vhca_port_num.set(a, 1).unwrap();
        if t == Transport::Ib {
            ads::rlid.set(a, to.lid).unwrap();
        } else {
            ads::rgid_rip.get_mut(a).copy_from_slice(&to.gid);
            let m = to.mac;
            ads::rmac_47_32
                .set(a, u16::from_be_bytes([m[0], m[1]]))
                .unwrap();
            ads::rmac_31_0
                .set(a, u32::from_be_bytes([m[2], m[3], m[4], m[5]]))
                .unwrap();
            ads::src_addr_index.set(a, 0).unwrap();
            ads::hop_limit.set(a, 64).unwrap();
        }
        qpc::rre.set(q, true).unwrap();
        qpc::rwe.set(q, true).unwrap();
    });
    h.f.ok(&i, 16);
    let i = modify_cmd(Opcode::RTR2RTS_QP, qpn, OptParam::empty(), |q| {
        ads::ack_timeout
            .set(qpc::primary_address_path.get_mut(q), c.ack_timeout)
            .unwrap();
        qpc::retry_count.set(q, c.retry_count).unwrap();
        qpc::rnr_retry.set(q, c.rnr_retry).unwrap();
        qpc::next_send_psn.set(q, psns.0).unwrap();
    });
    h.f.ok(&i, 16);
}

impl Hosts {
    /// Two hosts on a new wire, connected with `c`; `a` sends from PSN
    /// `psn_a`, `b` from `psn_b`. The RMPs have every WQE posted.
    pub fn new(t: Transport, c: Conn, psn_a: u32, psn_b: u32) -> Hosts {
        let link = if t == Transport::Ib {
            LinkType::Infiniband
        } else {
            LinkType::Ethernet
        };
        let wire = Wire::new(link);
        let mut a = Host::new(t, 1, 0);
        let mut b = Host::new(t, 2, 0);
        a.f.dev.connect(&wire).unwrap();
        b.f.dev.connect(&wire).unwrap();
        let (aa, ba) = (a.addr(), b.addr());
        let (qa, qb) = (a.qp.qpn, b.qp.qpn);
        connect_qp(&mut a, t, qb, &ba, (psn_a, psn_b), c);
        connect_qp(&mut b, t, qa, &aa, (psn_b, psn_a), c);
        a.rmp.post(1 << RMP_LOG);
        b.rmp.post(1 << RMP_LOG);
        Hosts { t, wire, a, b }
    }

    /// Move A's QP back to RESET and connect it again to `rqpn` at `to`
    /// (a test's wrong destination).
    pub fn reconnect_a(&mut self, rqpn: u32, to: &Addr, c: Conn, psns: (u32, u32)) {
        let q = self.a.qp.qpn;
        self.a.f.ok(&super::qp::qpn_cmd(Opcode::QP_2RST, q), 16);
        self.a.qp.pc = 0;
        connect_qp(&mut self.a, self.t, rqpn, to, psns, c);
    }

    /// Poll `h`'s send (or receive) CQ until a CQE arrives, letting device
    /// time pass on both hosts (bounded).
    pub fn wait_cqe(&mut self, on_a: bool, send: bool) -> Option<[u8; 64]> {
        for _ in 0..200_000 {
            let h = if on_a { &mut self.a } else { &mut self.b };
            let cq = if send { &mut h.scq } else { &mut h.rcq };
            if let Some(c) = h.f.poll_cq(cq) {
                return Some(c);
            }
            self.a.f.hal.delay_us(100);
            self.b.f.hal.delay_us(100);
        }
        None
    }
}
