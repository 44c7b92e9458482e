//! What a port reports about itself (`ibv_query_port`, `ibv_query_pkey`):
//! state, MTU, link layer, LID and subnet manager on InfiniBand, table
//! sizes. Read fresh from firmware on each call: QUERY_VPORT_STATE and
//! QUERY_NIC_VPORT_CONTEXT on Ethernet (Linux `mlx5_query_port_roce`),
//! QUERY_HCA_VPORT_CONTEXT on InfiniBand (Linux `mlx5_query_hca_port`).

use mlx5_hal::Hal;
use mlx5_regs::consts::{errno, port};
use mlx5_regs::layouts::{cmd_hca_cap, query_vport_state_in, query_vport_state_out};
use mlx5_regs::Opcode;

use crate::cmd::encode::header_into;
use crate::error::Error;
use crate::hca::Hca;
use crate::loopback::cmd as lb;
use crate::loopback::HcaVport;
use crate::qp::Mtu;
use crate::stats::CmdObserver;

/// `ibv_port_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortState {
    /// 1: down.
    Down,
    /// 2: initialized (no subnet manager yet).
    Init,
    /// 3: armed.
    Armed,
    /// 4: active.
    Active,
    /// Any other value firmware reported.
    Other(u8),
}

impl PortState {
    /// Decode an IB port state (`vport_state`).
    pub const fn from_raw(v: u8) -> PortState {
        match v {
            1 => PortState::Down,
            2 => PortState::Init,
            3 => PortState::Armed,
            4 => PortState::Active,
            x => PortState::Other(x),
        }
    }
}

/// The port's link layer (`IBV_LINK_LAYER_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkLayer {
    /// InfiniBand.
    Infiniband,
    /// Ethernet (RoCE).
    Ethernet,
}

/// `ibv_port_attr`: the fields this driver reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortAttr {
    /// Logical state.
    pub state: PortState,
    /// Physical state (`IB_PORT_PHYS_STATE_*`: 5 LinkUp, 3 Disabled).
    pub phys_state: u8,
    /// Largest MTU of the port.
    pub max_mtu: Mtu,
    /// MTU in use.
    pub active_mtu: Mtu,
    /// Link layer.
    pub link_layer: LinkLayer,
    /// The port's LID (InfiniBand; 0 on Ethernet).
    pub lid: u16,
    /// The subnet manager's LID (InfiniBand; 0 on Ethernet).
    pub sm_lid: u16,
    /// The subnet manager's service level.
    pub sm_sl: u8,
    /// LID mask control.
    pub lmc: u8,
    /// GID table entries ([`Hca::gid_table_len`]).
    pub gid_tbl_len: u16,
    /// P_Key table entries (1 on Ethernet, as Linux reports RoCE ports).
    pub pkey_tbl_len: u16,
    /// Largest message (2^`log_max_msg`).
    pub max_msg_sz: u32,
    /// Active speed (`IB_SPEED_*`); 0: not reported (the port's PTYS
    /// register is not read).
    pub active_speed: u8,
    /// Active width (`IB_WIDTH_*`); 0: not reported (PTYS is not read).
    pub active_width: u8,
}

/// The default partition key (full membership), entry 0 of every port.
pub const DEFAULT_PKEY: u16 = 0xffff;

/// P_Key table entries of an IB port: 128 << `pkey_table_size` (Linux
/// `mlx5_to_sw_pkey_sz`).
fn ib_pkey_table_len(raw_caps: &[u8]) -> u16 {
    let log = cmd_hca_cap::pkey_table_size.get(raw_caps);
    if log > 8 {
        0
    } else {
        (128u32 << log).min(u16::MAX as u32) as u16
    }
}

/// GID table entries of an IB port: 8 << `gid_table_size` (Linux
/// `mlx5_get_gid_table_len`).
pub(crate) fn ib_gid_table_len(raw_caps: &[u8]) -> u16 {
    let log = cmd_hca_cap::gid_table_size.get(raw_caps);
    if log > 4 {
        0
    } else {
        8 << log
    }
}

impl<H: Hal, O: CmdObserver, const CE: usize, const AE: usize> Hca<H, O, CE, AE> {
    /// QUERY_HCA_VPORT_CONTEXT of the own vport (port 1).
    pub(crate) fn query_hca_vport(&self) -> Result<HcaVport, Error> {
        let input = lb::query_hca_vport_context(self.caps().num_ports, 1)?;
        let out: [u8; lb::QUERY_HCA_VPORT_CONTEXT_OUT] = self.run(input)?;
        Ok(lb::parse_hca_vport_context(&out))
    }

    /// `ibv_query_port`: what port `port` (1-based) reports now.
    pub fn query_port(&self, port_num: u8) -> Result<PortAttr, Error> {
        let caps = self.caps();
        if port_num == 0 || port_num > caps.num_ports.max(1) {
            return Err(Error::InvalidArgument("port outside 1..=num_ports"));
        }
        let max_msg_sz = 1u32
            .checked_shl(caps.log_max_msg as u32)
            .unwrap_or(u32::MAX);
        if caps.port_type == port::TYPE_IB {
            let v = self.query_hca_vport()?;
            return Ok(PortAttr {
                state: PortState::from_raw(v.vport_state),
                phys_state: v.phys_state,
                // ConnectX IB ports run 4096-byte MTUs; the PMTU register
                // is not read.
                max_mtu: Mtu::B4096,
                active_mtu: Mtu::B4096,
                link_layer: LinkLayer::Infiniband,
                lid: v.lid,
                sm_lid: v.sm_lid,
                sm_sl: v.sm_sl,
                lmc: v.lmc,
                gid_tbl_len: self.gid_table_len(),
                pkey_tbl_len: ib_pkey_table_len(&caps.raw),
                max_msg_sz,
                active_speed: 0,
                active_width: 0,
            });
        }
        let mut input = [0u8; query_vport_state_in::SIZE];
        header_into(&mut input, Opcode::QUERY_VPORT_STATE, 0);
        let out: [u8; query_vport_state_out::SIZE] = self.run(input)?;
        let up = query_vport_state_out::state.get(&out) == 1;
        let nic: [u8; lb::QUERY_NIC_VPORT_CONTEXT_OUT] = self.run(lb::query_nic_vport_context())?;
        let mtu =
            Mtu::for_ethernet(lb::parse_nic_vport_context(&nic).mtu as u32).unwrap_or(Mtu::B256);
        Ok(PortAttr {
            state: if up {
                PortState::Active
            } else {
                PortState::Down
            },
            phys_state: if up { port::PHYS_STATE_LINK_UP } else { 3 },
            max_mtu: mtu,
            active_mtu: mtu,
            link_layer: LinkLayer::Ethernet,
            lid: 0,
            sm_lid: 0,
            sm_sl: 0,
            lmc: 0,
            gid_tbl_len: self.gid_table_len(),
            pkey_tbl_len: 1,
            max_msg_sz,
            active_speed: 0,
            active_width: 0,
        })
    }

    /// `ibv_query_pkey`: entry `index` of port `port_num`'s P_Key table.
    /// Ethernet ports have one entry, the default key 0xffff (Linux
    /// reports RoCE ports so). InfiniBand: entry 0 is the default key; the
    /// others need QUERY_HCA_VPORT_PKEY, which this driver does not send
    /// (`EOPNOTSUPP`).
    pub fn query_pkey(&self, port_num: u8, index: u16) -> Result<u16, Error> {
        let caps = self.caps();
        if port_num == 0 || port_num > caps.num_ports.max(1) {
            return Err(Error::InvalidArgument("port outside 1..=num_ports"));
        }
        let len = if caps.port_type == port::TYPE_IB {
            ib_pkey_table_len(&caps.raw)
        } else {
            1
        };
        if index >= len {
            return Err(Error::InvalidArgument(
                "P_Key index beyond the port's table",
            ));
        }
        if index == 0 {
            return Ok(DEFAULT_PKEY);
        }
        Err(Error::Unsupported {
            what: "P_Key entries other than 0 (QUERY_HCA_VPORT_PKEY is not sent)",
            errno: errno::EOPNOTSUPP,
        })
    }
}
