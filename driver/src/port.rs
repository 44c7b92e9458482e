//! What a port reports about itself (`ibv_query_port`, `ibv_query_pkey`):
//! state, MTU, link layer, LID and subnet manager on InfiniBand, table
//! sizes, speed and width. Read fresh from firmware on each call:
//! QUERY_VPORT_STATE, QUERY_NIC_VPORT_CONTEXT and the PTYS register on
//! Ethernet (Linux `mlx5_query_port_roce`); QUERY_HCA_VPORT_CONTEXT and the
//! PTYS and PMTU registers on InfiniBand (Linux `mlx5_query_hca_port`);
//! QUERY_HCA_VPORT_PKEY for the P_Key table (`mlx5_query_hca_vport_pkey`).

use mlx5_hal::Hal;
use mlx5_regs::consts::ptys::{eth, ib_width as w};
use mlx5_regs::consts::{op_mod, port, ptys, reg_id};
use mlx5_regs::layouts::{
    access_register_in, cmd_hca_cap, pmtu_reg, ptys_reg, query_hca_vport_pkey_in,
    query_hca_vport_pkey_out, query_vport_state_in, query_vport_state_out,
};
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
    /// Active speed ([`speed`], `IB_SPEED_*`): from the PTYS register, as
    /// Linux mlx5_ib reports it (an Ethernet link mode translated to the IB
    /// speed and width of the same rate).
    pub active_speed: u8,
    /// Active width ([`width`], `IB_WIDTH_*`), from PTYS.
    pub active_width: u8,
}

/// The default partition key (full membership), entry 0 of every port.
pub const DEFAULT_PKEY: u16 = 0xffff;

/// `ibv_port_attr.active_speed` values (`IB_SPEED_*`, `enum ib_port_speed`).
pub mod speed {
    /// 2.5 Gb/s per lane.
    pub const SDR: u8 = 1;
    /// 5 Gb/s.
    pub const DDR: u8 = 2;
    /// 10 Gb/s.
    pub const QDR: u8 = 4;
    /// 10 Gb/s, 64b/66b.
    pub const FDR10: u8 = 8;
    /// 14 Gb/s.
    pub const FDR: u8 = 16;
    /// 25 Gb/s.
    pub const EDR: u8 = 32;
    /// 50 Gb/s.
    pub const HDR: u8 = 64;
    /// 100 Gb/s.
    pub const NDR: u8 = 128;
}

/// `ibv_port_attr.active_width` values (`IB_WIDTH_*`, `enum ib_port_width`).
pub mod width {
    /// One lane.
    pub const W1X: u8 = 1;
    /// Two lanes.
    pub const W2X: u8 = 16;
    /// Four lanes.
    pub const W4X: u8 = 2;
    /// Eight lanes.
    pub const W8X: u8 = 4;
    /// Twelve lanes.
    pub const W12X: u8 = 8;
}

/// The IB speed and width of a legacy PTYS Ethernet link mode, as Linux
/// reports a RoCE port (`translate_eth_legacy_proto_oper`,
/// `drivers/infiniband/hw/mlx5/main.c`); a value that is not exactly one
/// known mode reads as QDR 4x, Linux's default.
pub const fn eth_proto_to_ib(eth_proto_oper: u32) -> (u8, u8) {
    const fn m(bit: u32) -> u32 {
        1 << bit
    }
    let o = eth_proto_oper;
    if o == m(eth::B1000BASE_CX_SGMII)
        || o == m(eth::B1000BASE_KX)
        || o == m(eth::B100BASE_TX)
        || o == m(eth::B1000BASE_T)
    {
        (speed::SDR, width::W1X)
    } else if o == m(eth::B10GBASE_T)
        || o == m(eth::B10GBASE_CX4)
        || o == m(eth::B10GBASE_KX4)
        || o == m(eth::B10GBASE_KR)
        || o == m(eth::B10GBASE_CR)
        || o == m(eth::B10GBASE_SR)
        || o == m(eth::B10GBASE_ER)
    {
        (speed::QDR, width::W1X)
    } else if o == m(eth::B25GBASE_CR) || o == m(eth::B25GBASE_KR) || o == m(eth::B25GBASE_SR) {
        (speed::EDR, width::W1X)
    } else if o == m(eth::B40GBASE_CR4)
        || o == m(eth::B40GBASE_KR4)
        || o == m(eth::B40GBASE_SR4)
        || o == m(eth::B40GBASE_LR4)
    {
        (speed::QDR, width::W4X)
    } else if o == m(eth::B50GBASE_CR2) || o == m(eth::B50GBASE_KR2) || o == m(eth::B50GBASE_SR2) {
        (speed::HDR, width::W1X)
    } else if o == m(eth::B56GBASE_R4) {
        (speed::FDR, width::W4X)
    } else if o == m(eth::B100GBASE_CR4)
        || o == m(eth::B100GBASE_SR4)
        || o == m(eth::B100GBASE_KR4)
        || o == m(eth::B100GBASE_LR4)
    {
        (speed::EDR, width::W4X)
    } else {
        (speed::QDR, width::W4X)
    }
}

/// The verbs width of PTYS `ib_link_width_oper`: the narrowest lane set
/// bit, 4x when none is (Linux `translate_active_width`).
pub const fn ib_width_of(ib_link_width_oper: u16) -> u8 {
    let v = ib_link_width_oper;
    if v & w::W1X != 0 {
        width::W1X
    } else if v & w::W2X != 0 {
        width::W2X
    } else if v & w::W4X != 0 {
        width::W4X
    } else if v & w::W8X != 0 {
        width::W8X
    } else if v & w::W12X != 0 {
        width::W12X
    } else {
        width::W4X
    }
}

/// An IB MTU in bytes as the PMTU register gives it (Linux
/// `mlx5_mtu_to_ib_mtu`).
const fn mtu_of_bytes(bytes: u16) -> Option<Mtu> {
    match bytes {
        256 => Some(Mtu::B256),
        512 => Some(Mtu::B512),
        1024 => Some(Mtu::B1024),
        2048 => Some(Mtu::B2048),
        4096 => Some(Mtu::B4096),
        _ => None,
    }
}

/// Length of an ACCESS_REG read of PTYS, input and output.
const PTYS_LEN: usize = access_register_in::SIZE + ptys_reg::SIZE;
/// Length of an ACCESS_REG read of PMTU, input and output.
const PMTU_LEN: usize = access_register_in::SIZE + pmtu_reg::SIZE;

/// ACCESS_REG read of register `id` with `local_port` (and, for PTYS, the
/// protocol `proto_mask`) in the register data.
fn access_reg_read<const N: usize>(
    id: u16,
    local_port: u8,
    proto_mask: u8,
) -> Result<[u8; N], Error> {
    let mut b = [0u8; N];
    header_into(&mut b, Opcode::ACCESS_REG, op_mod::ACCESS_REG_READ);
    access_register_in::register_id.set(&mut b, id)?;
    let data = &mut b[access_register_in::SIZE..];
    // PTYS and PMTU both keep local_port in bits 15:8 of their first dword.
    ptys_reg::local_port.set(data, local_port)?;
    if id == reg_id::PTYS {
        ptys_reg::proto_mask.set(data, proto_mask)?;
    }
    Ok(b)
}

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
            let ptys = self.query_ptys(port_num, ptys::PROTO_IB)?;
            let (max_mtu, active_mtu) = self.query_pmtu(port_num)?;
            return Ok(PortAttr {
                state: PortState::from_raw(v.vport_state),
                phys_state: v.phys_state,
                max_mtu,
                active_mtu,
                link_layer: LinkLayer::Infiniband,
                lid: v.lid,
                sm_lid: v.sm_lid,
                sm_sl: v.sm_sl,
                lmc: v.lmc,
                gid_tbl_len: self.gid_table_len(),
                pkey_tbl_len: ib_pkey_table_len(&caps.raw),
                max_msg_sz,
                // Linux passes ib_proto_oper through as the speed.
                active_speed: ptys_reg::ib_proto_oper.get(&ptys) as u8,
                active_width: ib_width_of(ptys_reg::ib_link_width_oper.get(&ptys)),
            });
        }
        let mut input = [0u8; query_vport_state_in::SIZE];
        header_into(&mut input, Opcode::QUERY_VPORT_STATE, 0);
        let out: [u8; query_vport_state_out::SIZE] = self.run(input)?;
        let up = query_vport_state_out::state.get(&out) == 1;
        let nic: [u8; lb::QUERY_NIC_VPORT_CONTEXT_OUT] = self.run(lb::query_nic_vport_context())?;
        let mtu =
            Mtu::for_ethernet(lb::parse_nic_vport_context(&nic).mtu as u32).unwrap_or(Mtu::B256);
        let ptys = self.query_ptys(port_num, ptys::PROTO_EN)?;
        let (active_speed, active_width) = eth_proto_to_ib(ptys_reg::eth_proto_oper.get(&ptys));
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
            active_speed,
            active_width,
        })
    }

    /// The PTYS register of `port_num` for protocol `proto_mask`
    /// (Linux `mlx5_query_port_ptys`); the register data returned.
    fn query_ptys(&self, port_num: u8, proto_mask: u8) -> Result<[u8; ptys_reg::SIZE], Error> {
        let out: [u8; PTYS_LEN] = self.run(access_reg_read::<PTYS_LEN>(
            reg_id::PTYS,
            port_num,
            proto_mask,
        )?)?;
        let mut reg = [0u8; ptys_reg::SIZE];
        reg.copy_from_slice(&out[access_register_in::SIZE..]);
        Ok(reg)
    }

    /// The port's largest and operational MTU from PMTU (Linux
    /// `mlx5_query_port_max_mtu` / `mlx5_query_port_oper_mtu`).
    fn query_pmtu(&self, port_num: u8) -> Result<(Mtu, Mtu), Error> {
        let out: [u8; PMTU_LEN] =
            self.run(access_reg_read::<PMTU_LEN>(reg_id::PMTU, port_num, 0)?)?;
        let reg = &out[access_register_in::SIZE..];
        let bad = Error::BadResponse {
            opcode: Opcode::ACCESS_REG,
            what: "PMTU of an InfiniBand port not an IB MTU (256..=4096)",
        };
        let max = mtu_of_bytes(pmtu_reg::max_mtu.get(reg)).ok_or(bad)?;
        let oper = mtu_of_bytes(pmtu_reg::oper_mtu.get(reg)).ok_or(bad)?;
        Ok((max, oper))
    }

    /// `ibv_query_pkey`: entry `index` of port `port_num`'s P_Key table.
    /// Ethernet ports have one entry, the default key 0xffff (Linux
    /// reports RoCE ports so). InfiniBand: the entry as firmware keeps it
    /// (QUERY_HCA_VPORT_PKEY; 0 for an entry never programmed).
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
        if caps.port_type != port::TYPE_IB {
            return Ok(DEFAULT_PKEY);
        }
        let mut input = [0u8; query_hca_vport_pkey_in::SIZE];
        header_into(&mut input, Opcode::QUERY_HCA_VPORT_PKEY, 0);
        // port_num only on dual-port devices, as for the vport context.
        if caps.num_ports == 2 {
            query_hca_vport_pkey_in::port_num.set(&mut input, port_num)?;
        }
        query_hca_vport_pkey_in::pkey_index.set(&mut input, index)?;
        const OUT: usize = query_hca_vport_pkey_out::SIZE + 4;
        let out: [u8; OUT] = self.run(input)?;
        Ok(query_hca_vport_pkey_out::pkey.get(&out, 0).unwrap_or(0) as u16)
    }
}
