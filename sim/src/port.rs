//! The port as the firmware keeps it: the NIC vport context (RoCE enable,
//! local-loopback controls, MTU, MAC), the RoCE GID table and the IB port view
//! (LID, state). PRM "NIC_Vport Context" / "HCA_Vport Context"; Linux
//! `drivers/net/ethernet/mellanox/mlx5/core/vport.c` and `lib/gid.c`.

use std::collections::BTreeMap;

use crate::dma::mix;

/// One programmed GID table entry (`roce_addr_layout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidEntry {
    /// The GID (`source_l3_address`).
    pub gid: [u8; 16],
    /// Source MAC.
    pub mac: [u8; 6],
    /// VLAN id, when `vlan_valid`.
    pub vlan: Option<u16>,
    /// `MLX5_ROCE_L3_TYPE_*`: 0 IPv4, 1 IPv6.
    pub l3_type: u8,
    /// `MLX5_ROCE_VERSION_*`: 0 v1, 2 v2.
    pub version: u8,
}

/// Vport and port state.
#[derive(Debug, Clone)]
pub(crate) struct Port {
    pub roce_en: bool,
    pub disable_uc_local_lb: bool,
    pub disable_mc_local_lb: bool,
    /// Ethernet MTU of the vport (bytes).
    pub mtu: u16,
    pub mac: [u8; 6],
    /// IB LID of the port (IB port type).
    pub lid: u16,
    /// Operational MTU of an IB port in bytes (PMTU `oper_mtu`; 4096 at
    /// power-on, the subnet may run less: `Device::set_ib_port_mtu`).
    pub ib_mtu: u16,
    pub gids: BTreeMap<u16, GidEntry>,
    /// The P_Key table: entry 0 is the default full-membership key.
    pub pkeys: BTreeMap<u16, u16>,
    /// The wire the port is joined to.
    pub wire: Option<(crate::wire::Wire, crate::wire::PortId)>,
    /// IPv4 identification of the next RoCE v2 packet.
    pub ip_id: u16,
    /// Frame buffers reused by the packet path.
    pub tx_buf: Vec<u8>,
    pub rx_buf: Vec<u8>,
}

/// Largest Ethernet MTU the model's vport accepts (the mlx5 netdev maximum
/// for a 9216-byte hardware MTU, Linux `mlx5e` `max_mtu`).
pub(crate) const MAX_ETH_MTU: u16 = 9978;
/// Default vport MTU.
pub(crate) const DEFAULT_ETH_MTU: u16 = 1500;

impl Port {
    /// Power-on port state: RoCE disabled, MTU 1500, a seed-derived locally
    /// administered MAC (02:c9:...) and LID.
    pub fn new(seed: u64) -> Port {
        let h = mix(seed ^ 0x7070);
        let mac = [
            0x02,
            0xc9,
            (h >> 8) as u8,
            (h >> 16) as u8,
            (h >> 24) as u8,
            (h >> 32) as u8,
        ];
        Port {
            roce_en: false,
            disable_uc_local_lb: false,
            disable_mc_local_lb: false,
            mtu: DEFAULT_ETH_MTU,
            mac,
            lid: 1 + ((h >> 40) & 0x3ff) as u16,
            ib_mtu: 4096,
            gids: BTreeMap::new(),
            pkeys: BTreeMap::from([(0, 0xffff)]),
            wire: None,
            ip_id: 0,
            tx_buf: Vec::new(),
            rx_buf: Vec::new(),
        }
    }

    /// Largest IB MTU code (1..=5) usable on this port: IB ports their
    /// operational MTU (PMTU `oper_mtu`); on
    /// Ethernet the largest IB MTU that fits the vport MTU minus the RoCE
    /// headers (Linux `iboe_get_mtu`, `include/rdma/ib_addr.h`).
    pub fn max_mtu_code(&self, ib_port: bool) -> u8 {
        if ib_port {
            return mlx5_regs::consts::mtu::code_at_most(self.ib_mtu as u32).unwrap_or(0);
        }
        // GRH 40 + BTH 12 + DETH 8 + ICRC 4 (+ UDP/IP overhead folded in).
        let room = (self.mtu as u32).saturating_sub(40 + 12 + 8 + 4);
        mlx5_regs::consts::mtu::code_at_most(room).unwrap_or(0)
    }

    /// The node/port GUID (EUI-64 of the MAC).
    pub fn guid(&self) -> u64 {
        let m = self.mac;
        u64::from_be_bytes([m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]])
    }
}

/// What the port's PTYS register reports: a ConnectX-5 port, 100 GbE on a
/// copper cable on Ethernet, EDR 4x on InfiniBand; the link is always up.
pub(crate) mod link {
    use mlx5_regs::consts::ptys::{eth, ib_speed, ib_width};

    const fn bits(list: &[u32]) -> u32 {
        let mut m = 0;
        let mut i = 0;
        while i < list.len() {
            m |= 1 << list[i];
            i += 1;
        }
        m
    }

    /// Legacy `eth_proto_capability`: the 1/10/25/40/50/100 GbE modes of a
    /// 100 GbE ConnectX-5.
    pub const ETH_PROTO_CAPABILITY: u32 = bits(&[
        eth::B1000BASE_KX,
        eth::B10GBASE_KR,
        eth::B10GBASE_CR,
        eth::B10GBASE_SR,
        eth::B25GBASE_CR,
        eth::B25GBASE_KR,
        eth::B25GBASE_SR,
        eth::B40GBASE_CR4,
        eth::B40GBASE_KR4,
        eth::B40GBASE_SR4,
        eth::B40GBASE_LR4,
        eth::B50GBASE_CR2,
        eth::B50GBASE_KR2,
        eth::B100GBASE_CR4,
        eth::B100GBASE_SR4,
        eth::B100GBASE_KR4,
        eth::B100GBASE_LR4,
    ]);
    /// `eth_proto_oper`: 100GBASE-CR4.
    pub const ETH_PROTO_OPER: u32 = 1 << eth::B100GBASE_CR4;
    /// `ib_proto_capability`: SDR to EDR.
    pub const IB_PROTO_CAPABILITY: u16 = ib_speed::SDR
        | ib_speed::DDR
        | ib_speed::QDR
        | ib_speed::FDR10
        | ib_speed::FDR
        | ib_speed::EDR;
    /// `ib_link_width_capability`: 1x, 2x and 4x.
    pub const IB_WIDTH_CAPABILITY: u16 = ib_width::W1X | ib_width::W2X | ib_width::W4X;
    /// `ib_proto_oper`: EDR.
    pub const IB_PROTO_OPER: u16 = ib_speed::EDR;
    /// `ib_link_width_oper`: 4x.
    pub const IB_WIDTH_OPER: u16 = ib_width::W4X;
}
