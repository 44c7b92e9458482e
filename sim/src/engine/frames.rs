//! The outer headers of a QP's packets, built from its address path and
//! the port as a ConnectX puts them on the wire (RoCE v2 over IPv4/IPv6,
//! RoCE v1, IB with or without GRH), and the address checks a receiving
//! card makes (IBTA vol. 1 §9.6; Annex A16/A17; rxe `rxe_recv.c`
//! `check_addr`, `check_keys`).

use mlx5_regs::consts::{port, roce};

use crate::state::State;
use crate::wire::{Encap, Eth, Grh, Ip, Ipv4, Lrh, Vlan};

/// The P_Key of the port's table entry `index`: entry 0 holds the default
/// full-membership key (what Linux and rxe use); the others are invalid
/// (0) until a test programs them ([`crate::Device::set_pkey`]).
pub(crate) fn pkey_of(st: &State, index: u16) -> u16 {
    st.port.pkeys.get(&index).copied().unwrap_or(0)
}

/// Whether a packet's P_Key matches ours: the low 15 bits equal, at least
/// one full member, and neither the invalid key (IBTA vol. 1 §10.9.3).
pub(crate) fn pkey_match(ours: u16, theirs: u16) -> bool {
    ours & 0x7fff != 0 && ours & 0x7fff == theirs & 0x7fff && (ours | theirs) & 0x8000 != 0
}

/// The UDP source port when the path does not set one: Linux
/// `rdma_calc_flow_label` + `rdma_flow_label_to_udp_sport`
/// (`include/rdma/ib_verbs.h`), symmetric in the two QPNs.
pub(crate) fn udp_sport_for(lqpn: u32, rqpn: u32) -> u16 {
    let v = u64::from(lqpn) * u64::from(rqpn);
    let v = v ^ (v >> 20) ^ (v >> 40);
    let label = (v & 0xfffff) as u32;
    let low = (label & 0x3fff) ^ ((label & 0xfc000) >> 14);
    (low | 0xc000) as u16
}

/// Where a packet goes, as a QP's address path or a UD address vector
/// names it: the fields the outer headers are built from.
pub(crate) struct Dest {
    /// IB: a GRH follows the LRH.
    pub ib_grh: bool,
    /// IB: the destination LID and service level.
    pub dlid: u16,
    pub sl: u8,
    /// RoCE: the source GID table entry, the next hop's MAC and the VLAN
    /// priority.
    pub sgid_index: u16,
    pub rmac: [u8; 6],
    pub pcp: u8,
    /// GRH / IP fields.
    pub tclass: u8,
    pub flow_label: u32,
    pub hop_limit: u8,
    pub rgid: [u8; 16],
    /// RoCE v2: the UDP source port (0: derived from the two QPNs).
    pub udp_sport: u16,
    pub remote_qpn: u32,
}

impl State {
    /// The outer headers of packets QP `qpn` sends to its peer; `None` when
    /// the path names no programmed source GID (the QP cannot send).
    pub(crate) fn encap_for(&mut self, qpn: u32) -> Option<Encap> {
        let q = self.objects.qps.get(&qpn)?;
        let p = q.path;
        let d = Dest {
            ib_grh: p.grh,
            dlid: p.rlid,
            sl: p.sl,
            sgid_index: u16::from(p.src_addr_index),
            rmac: p.rmac,
            pcp: 0,
            tclass: p.tclass,
            flow_label: p.flow_label,
            hop_limit: p.hop_limit,
            rgid: p.rgid,
            udp_sport: p.udp_sport,
            remote_qpn: q.remote_qpn,
        };
        self.encap_to(qpn, &d)
    }

    /// The outer headers of packets from QP `qpn` to `d`; `None` when `d`
    /// names no programmed source GID.
    pub(crate) fn encap_to(&mut self, qpn: u32, d: &Dest) -> Option<Encap> {
        if self.caps.port_type == port::TYPE_IB {
            let grh = d.ib_grh.then(|| Grh {
                tclass: d.tclass,
                flow_label: d.flow_label,
                hop_limit: d.hop_limit,
                sgid: self.port_gid0(),
                dgid: d.rgid,
            });
            return Some(Encap::Ib {
                lrh: Lrh {
                    vl: 0,
                    sl: d.sl,
                    dlid: d.dlid,
                    slid: self.port.lid,
                },
                grh,
            });
        }
        let g = *self.port.gids.get(&d.sgid_index)?;
        let eth = Eth {
            dst: d.rmac,
            src: g.mac,
            vlan: g.vlan.map(|id| Vlan {
                pcp: d.pcp,
                dei: false,
                id,
            }),
        };
        let grh = Grh {
            tclass: d.tclass,
            flow_label: d.flow_label,
            hop_limit: d.hop_limit,
            sgid: g.gid,
            dgid: d.rgid,
        };
        if g.version != roce::VERSION_2 {
            return Some(Encap::RoceV1 { eth, grh });
        }
        let sport = if d.udp_sport != 0 {
            d.udp_sport
        } else {
            udp_sport_for(qpn, d.remote_qpn)
        };
        let ip = if g.l3_type == roce::L3_TYPE_IPV4 {
            self.port.ip_id = self.port.ip_id.wrapping_add(1);
            Ip::V4(Ipv4 {
                src: ipv4_of(&g.gid),
                dst: ipv4_of(&d.rgid),
                tos: d.tclass,
                ttl: d.hop_limit,
                id: self.port.ip_id,
            })
        } else {
            Ip::V6(grh)
        };
        Some(Encap::RoceV2 {
            eth,
            ip,
            udp_sport: sport,
        })
    }

    /// The port GID an IB GRH carries as its source: the subnet prefix
    /// fe80::/64 with the port GUID.
    pub(super) fn port_gid0(&self) -> [u8; 16] {
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[1] = 0x80;
        g[8..].copy_from_slice(&self.port.guid().to_be_bytes());
        g
    }

    /// A card keeps a frame addressed to it: the destination MAC is the
    /// port's and the destination IP/GID one of its GID entries of the
    /// frame's RoCE version (Ethernet), or the DLID is the port's LID (IB).
    pub(crate) fn addressed_to_us(&self, e: &Encap) -> bool {
        match e {
            Encap::Ib { lrh, grh } => {
                self.caps.port_type == port::TYPE_IB
                    && lrh.dlid == self.port.lid
                    && grh.is_none_or(|g| g.dgid == self.port_gid0())
            }
            Encap::RoceV2 { eth, ip, .. } => {
                let dgid = match ip {
                    Ip::V4(v4) => ipv4_mapped(v4.dst),
                    Ip::V6(g) => g.dgid,
                };
                self.roce_ours(eth, &dgid, roce::VERSION_2)
            }
            Encap::RoceV1 { eth, grh } => self.roce_ours(eth, &grh.dgid, roce::VERSION_1),
        }
    }

    fn roce_ours(&self, eth: &Eth, dgid: &[u8; 16], version: u8) -> bool {
        self.caps.port_type != port::TYPE_IB
            && self.port.roce_en
            && eth.dst == self.port.mac
            && self
                .port
                .gids
                .values()
                .any(|g| g.gid == *dgid && g.version == version && g.mac == self.port.mac)
    }

    /// For RC, the packet's source is the QP's peer (rxe `check_addr`):
    /// source IP/GID = the path's destination GID, or SLID = its DLID.
    pub(crate) fn sent_by_peer_of(&self, qpn: u32, e: &Encap) -> bool {
        let Some(q) = self.objects.qps.get(&qpn) else {
            return false;
        };
        let p = &q.path;
        match e {
            Encap::Ib { lrh, .. } => lrh.slid == p.rlid,
            Encap::RoceV2 { ip: Ip::V4(v4), .. } => ipv4_mapped(v4.src) == p.rgid,
            Encap::RoceV2 { ip: Ip::V6(g), .. } | Encap::RoceV1 { grh: g, .. } => g.sgid == p.rgid,
        }
    }
}

/// The IPv4 address inside an IPv4-mapped GID (`::ffff:a.b.c.d`).
pub(super) fn ipv4_of(gid: &[u8; 16]) -> [u8; 4] {
    [gid[12], gid[13], gid[14], gid[15]]
}

/// The IPv4-mapped GID of an IPv4 address.
fn ipv4_mapped(a: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&a);
    g
}

/// `flags_rqpn` bits 25:24 of a RoCE receive completion: the L3 header
/// the packet came with (0 GRH = v1 and IB, 1 IPv6, 2 IPv4;
/// `MLX5_CQE_ROCE_L3_HEADER_TYPE_*`).
pub(crate) fn l3_bits_of(e: &Encap) -> u32 {
    match e {
        Encap::RoceV2 { ip: Ip::V4(_), .. } => 2 << 24,
        Encap::RoceV2 { ip: Ip::V6(_), .. } => 1 << 24,
        _ => 0,
    }
}
