//! Port and vport commands of the loopback set-up: the RoCE capability
//! page, the NIC vport context (MAC, MTU, `roce_en`), the RoCE GID table
//! (SET_ROCE_ADDRESS) and the HCA vport context of an InfiniBand port (LID,
//! port state). Layouts: `mlx5_ifc.h` (`roce_cap`, `nic_vport_context`,
//! `modify_nic_vport_context_in`, `set_roce_address_in`,
//! `hca_vport_context`).

use mlx5_regs::consts::op_mod;
use mlx5_regs::layouts::*;
use mlx5_regs::{Opcode, RegError};

use crate::cmd::encode::header_into;

/// The RoCE capability page fields the loopback choice reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RoceCaps {
    /// Force-loopback RC QPs allowed while RoCE is disabled.
    pub fl_when_disabled: bool,
    /// Force-loopback RC QPs allowed while RoCE is enabled.
    pub fl_when_enabled: bool,
    /// Supported RoCE versions, a bit mask (bit 0 v1, bit 2 v2).
    pub roce_version: u8,
    /// GID table entries.
    pub address_table_size: u16,
    /// QP timestamp formats with RoCE on (same encoding as `sq_ts_format`).
    pub qp_ts_format: u8,
}

/// QUERY_HCA_CAP of the RoCE page (op_mod `4 << 1 | current`).
pub fn query_roce_caps() -> [u8; query_hca_cap_in::SIZE] {
    crate::cmd::encode::query_hca_cap(op_mod::CAP_ROCE, true)
}

/// Parse the RoCE page out of a QUERY_HCA_CAP output.
pub fn parse_roce_caps(out: &[u8]) -> RoceCaps {
    let c = crate::cmd::encode::parse_query_hca_cap(out);
    RoceCaps {
        fl_when_disabled: roce_cap::fl_rc_qp_when_roce_disabled.get(c),
        fl_when_enabled: roce_cap::fl_rc_qp_when_roce_enabled.get(c),
        roce_version: roce_cap::roce_version.get(c),
        address_table_size: roce_cap::roce_address_table_size.get(c),
        qp_ts_format: roce_cap::qp_ts_format.get(c),
    }
}

/// What the driver reads from its own NIC vport context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NicVport {
    /// `roce_en`.
    pub roce_en: bool,
    /// The permanent MAC address.
    pub mac: [u8; 6],
    /// The vport MTU in bytes (0 if not reported).
    pub mtu: u16,
}

/// Output length of QUERY_NIC_VPORT_CONTEXT.
pub const QUERY_NIC_VPORT_CONTEXT_OUT: usize = query_nic_vport_context_out::SIZE;

/// QUERY_NIC_VPORT_CONTEXT of the function's own vport.
pub fn query_nic_vport_context() -> [u8; query_nic_vport_context_in::SIZE] {
    let mut b = [0u8; query_nic_vport_context_in::SIZE];
    header_into(&mut b, Opcode::QUERY_NIC_VPORT_CONTEXT, 0);
    b
}

/// Parse QUERY_NIC_VPORT_CONTEXT output (the MAC is bytes 2..8 of the
/// 8-byte `permanent_address`, as Linux `mlx5_query_nic_vport_mac_address`
/// reads it).
pub fn parse_nic_vport_context(out: &[u8]) -> NicVport {
    let v = query_nic_vport_context_out::nic_vport_context.get(out);
    let a = nic_vport_context::permanent_address.get(v);
    let hi = mac_address_layout::mac_addr_47_32.get(a).to_be_bytes();
    let lo = mac_address_layout::mac_addr_31_0.get(a).to_be_bytes();
    NicVport {
        roce_en: nic_vport_context::roce_en.get(v),
        mac: [hi[0], hi[1], lo[0], lo[1], lo[2], lo[3]],
        mtu: nic_vport_context::mtu.get(v),
    }
}

/// Output length of MODIFY_NIC_VPORT_CONTEXT.
pub const MODIFY_NIC_VPORT_CONTEXT_OUT: usize = modify_nic_vport_context_out::SIZE;

/// MODIFY_NIC_VPORT_CONTEXT selecting `roce_en` only (Linux
/// `mlx5_nic_vport_update_roce_state`).
pub fn set_roce_en(enable: bool) -> Result<[u8; modify_nic_vport_context_in::SIZE], RegError> {
    let mut b = [0u8; modify_nic_vport_context_in::SIZE];
    header_into(&mut b, Opcode::MODIFY_NIC_VPORT_CONTEXT, 0);
    modify_nic_vport_field_select::roce_en.set(
        modify_nic_vport_context_in::field_select.get_mut(&mut b),
        true,
    )?;
    nic_vport_context::roce_en.set(
        modify_nic_vport_context_in::nic_vport_context.get_mut(&mut b),
        enable,
    )?;
    Ok(b)
}

/// One GID table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoceAddress {
    /// The GID.
    pub gid: [u8; 16],
    /// The source MAC.
    pub mac: [u8; 6],
    /// `roce_version` (0 v1, 2 v2).
    pub version: u8,
    /// `roce_l3_type` (0 IPv4, 1 IPv6).
    pub l3_type: u8,
    /// The VLAN the entry belongs to (`vlan_valid`, `vlan_id`), if any.
    pub vlan: Option<u16>,
}

/// Output length of SET_ROCE_ADDRESS.
pub const SET_ROCE_ADDRESS_OUT: usize = set_roce_address_out::SIZE;

/// SET_ROCE_ADDRESS of entry `index`; `None` clears it (zero GID and MAC,
/// Linux `mlx5_ib_del_gid`).
pub fn set_roce_address(
    index: u16,
    addr: Option<&RoceAddress>,
) -> Result<[u8; set_roce_address_in::SIZE], RegError> {
    let mut b = [0u8; set_roce_address_in::SIZE];
    header_into(&mut b, Opcode::SET_ROCE_ADDRESS, 0);
    set_roce_address_in::roce_address_index.set(&mut b, index)?;
    if let Some(a) = addr {
        let r = set_roce_address_in::roce_address.get_mut(&mut b);
        roce_addr_layout::source_l3_address
            .get_mut(r)
            .copy_from_slice(&a.gid);
        roce_addr_layout::source_mac_47_32.set(r, u16::from_be_bytes([a.mac[0], a.mac[1]]))?;
        roce_addr_layout::source_mac_31_0.set(
            r,
            u32::from_be_bytes([a.mac[2], a.mac[3], a.mac[4], a.mac[5]]),
        )?;
        roce_addr_layout::roce_version.set(r, a.version)?;
        roce_addr_layout::roce_l3_type.set(r, a.l3_type)?;
        if let Some(id) = a.vlan {
            roce_addr_layout::vlan_valid.set(r, true)?;
            roce_addr_layout::vlan_id.set(r, id)?;
        }
    }
    Ok(b)
}

/// Output length of QUERY_ROCE_ADDRESS.
pub const QUERY_ROCE_ADDRESS_OUT: usize = query_roce_address_out::SIZE;

/// QUERY_ROCE_ADDRESS of entry `index`.
pub fn query_roce_address(index: u16) -> Result<[u8; query_roce_address_in::SIZE], RegError> {
    let mut b = [0u8; query_roce_address_in::SIZE];
    header_into(&mut b, Opcode::QUERY_ROCE_ADDRESS, 0);
    query_roce_address_in::roce_address_index.set(&mut b, index)?;
    Ok(b)
}

/// Parse QUERY_ROCE_ADDRESS output; `None` for an empty entry (zero GID).
pub fn parse_roce_address(out: &[u8]) -> Option<RoceAddress> {
    let r = query_roce_address_out::roce_address.get(out);
    let mut gid = [0u8; 16];
    gid.copy_from_slice(roce_addr_layout::source_l3_address.get(r));
    if gid == [0; 16] {
        return None;
    }
    let hi = roce_addr_layout::source_mac_47_32.get(r).to_be_bytes();
    let lo = roce_addr_layout::source_mac_31_0.get(r).to_be_bytes();
    Some(RoceAddress {
        gid,
        mac: [hi[0], hi[1], lo[0], lo[1], lo[2], lo[3]],
        version: roce_addr_layout::roce_version.get(r),
        l3_type: roce_addr_layout::roce_l3_type.get(r),
        vlan: roce_addr_layout::vlan_valid
            .get(r)
            .then(|| roce_addr_layout::vlan_id.get(r)),
    })
}

/// What the driver reads from the HCA vport context of an IB port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HcaVport {
    /// The port's LID.
    pub lid: u16,
    /// `vport_state` (4 = Active).
    pub vport_state: u8,
    /// `port_physical_state` (5 = LinkUp).
    pub phys_state: u8,
    /// The subnet manager's LID.
    pub sm_lid: u16,
    /// The subnet manager's service level.
    pub sm_sl: u8,
    /// LID mask control.
    pub lmc: u8,
    /// The port GUID.
    pub port_guid: u64,
}

/// Output length of QUERY_HCA_VPORT_CONTEXT.
pub const QUERY_HCA_VPORT_CONTEXT_OUT: usize = query_hca_vport_context_out::SIZE;

/// QUERY_HCA_VPORT_CONTEXT of the own vport; `port_num` is set only on
/// dual-port devices (Linux `mlx5_query_hca_vport_context`).
pub fn query_hca_vport_context(
    num_ports: u8,
    port: u8,
) -> Result<[u8; query_hca_vport_context_in::SIZE], RegError> {
    let mut b = [0u8; query_hca_vport_context_in::SIZE];
    header_into(&mut b, Opcode::QUERY_HCA_VPORT_CONTEXT, 0);
    if num_ports == 2 {
        query_hca_vport_context_in::port_num.set(&mut b, port)?;
    }
    Ok(b)
}

/// Parse QUERY_HCA_VPORT_CONTEXT output.
pub fn parse_hca_vport_context(out: &[u8]) -> HcaVport {
    let v = query_hca_vport_context_out::hca_vport_context.get(out);
    HcaVport {
        lid: hca_vport_context::lid.get(v),
        vport_state: hca_vport_context::vport_state.get(v),
        phys_state: hca_vport_context::port_physical_state.get(v),
        sm_lid: hca_vport_context::sm_lid.get(v),
        sm_sl: hca_vport_context::sm_sl.get(v),
        lmc: hca_vport_context::lmc.get(v),
        port_guid: hca_vport_context::port_guid.get(v),
    }
}

/// The link-local GID Linux programs by default for a port with MAC `mac`:
/// `fe80::/64` with the EUI-64 of the MAC (`ff:fe` inserted in the middle,
/// the universal/local bit flipped; `make_default_gid`,
/// `drivers/infiniband/core/cache.c`).
pub const fn link_local_gid(mac: [u8; 6]) -> [u8; 16] {
    [
        0xfe,
        0x80,
        0,
        0,
        0,
        0,
        0,
        0,
        mac[0] ^ 0x02,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn be32(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
    }

    #[test]
    fn roce_en_selects_one_field() {
        let b = set_roce_en(true).unwrap();
        assert_eq!(b.len(), 512);
        assert_eq!(u16::from_be_bytes([b[0], b[1]]), 0x755);
        assert_eq!(be32(&b, 0x0c), 1 << 1, "field_select bit 1 = roce_en");
        assert_eq!(b[0x103], 1, "roce_en: byte 0x103 bit 0");
        assert!(b[0x10..0x103].iter().all(|&x| x == 0));
        assert_eq!(set_roce_en(false).unwrap()[0x103], 0);
    }

    #[test]
    fn gid_entry_bytes() {
        let mac = [0x02, 0xc9, 0x00, 0x11, 0x22, 0x33];
        let gid = link_local_gid(mac);
        assert_eq!(
            gid,
            [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0xc9, 0x00, 0xff, 0xfe, 0x11, 0x22, 0x33]
        );
        let a = RoceAddress {
            gid,
            mac,
            version: 2,
            l3_type: 1,
            vlan: None,
        };
        let b = set_roce_address(0, Some(&a)).unwrap();
        assert_eq!(b.len(), 48);
        assert_eq!(u16::from_be_bytes([b[0], b[1]]), 0x761);
        assert_eq!(&b[0x10..0x20], &gid);
        assert_eq!(&b[0x22..0x28], &mac);
        assert_eq!(b[0x2a] & 0x0f, 1, "l3 type IPv6");
        assert_eq!(b[0x2b], 2, "RoCE v2");
        let clear = set_roce_address(0, None).unwrap();
        assert!(clear[0x08..].iter().all(|&x| x == 0));
        let b = set_roce_address(5, None).unwrap();
        assert_eq!(u16::from_be_bytes([b[8], b[9]]), 5);
        let tagged = RoceAddress {
            vlan: Some(0x123),
            ..a
        };
        let b = set_roce_address(1, Some(&tagged)).unwrap();
        assert_eq!(&b[0x20..0x22], &[0x11, 0x23], "vlan_valid + vlan_id");
        let mut out = [0u8; QUERY_ROCE_ADDRESS_OUT];
        out[0x10..0x30].copy_from_slice(&b[0x10..0x30]);
        assert_eq!(parse_roce_address(&out), Some(tagged));
        assert_eq!(parse_roce_address(&[0u8; QUERY_ROCE_ADDRESS_OUT]), None);
        let q = query_roce_address(9).unwrap();
        assert_eq!(u16::from_be_bytes([q[0], q[1]]), 0x760);
        assert_eq!(u16::from_be_bytes([q[8], q[9]]), 9);
    }

    #[test]
    fn vport_contexts_parse() {
        let mut out = [0u8; QUERY_NIC_VPORT_CONTEXT_OUT];
        out[0x13] = 1; // roce_en: dword 0x10 bit 0
        out[0x36..0x38].copy_from_slice(&1500u16.to_be_bytes());
        out[0x106..0x10c].copy_from_slice(&[2, 0xc9, 1, 2, 3, 4]);
        let v = parse_nic_vport_context(&out);
        assert_eq!(
            v,
            NicVport {
                roce_en: true,
                mac: [2, 0xc9, 1, 2, 3, 4],
                mtu: 1500
            }
        );
        let mut out = [0u8; QUERY_HCA_VPORT_CONTEXT_OUT];
        out[0x70..0x72].copy_from_slice(&0x17u16.to_be_bytes());
        out[0x10 + 0x23] = 4;
        assert_eq!(
            parse_hca_vport_context(&out),
            HcaVport {
                lid: 0x17,
                vport_state: 4,
                phys_state: 0,
                sm_lid: 0,
                sm_sl: 0,
                lmc: 0,
                port_guid: 0,
            }
        );
        let q = query_hca_vport_context(2, 1).unwrap();
        assert_eq!(u16::from_be_bytes([q[0], q[1]]), 0x762);
        assert_eq!(q[0x09] & 0x0f, 1, "port_num on dual-port devices");
        assert_eq!(query_hca_vport_context(1, 1).unwrap()[0x09], 0);
    }
}
