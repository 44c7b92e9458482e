//! The port's GID table: the default link-local entries bring-up
//! programs, entries the caller adds and deletes, and reading them back.
//!
//! On an Ethernet (RoCE) port the table is firmware's RoCE address table:
//! SET_ROCE_ADDRESS writes an entry (GID, source MAC, VLAN, RoCE version
//! and, for v2, the L3 type), writing an all-zero entry deletes it, and
//! QUERY_ROCE_ADDRESS reads one back (`mlx5_ifc.h` `roce_addr_layout`;
//! Linux `mlx5_core_roce_gid_set`, `lib/gid.c`, and `set_roce_addr`,
//! `drivers/infiniband/hw/mlx5/main.c`). Its size is the RoCE capability
//! `roce_address_table_size`.
//!
//! Bring-up programs the default GIDs as ib core does (`make_default_gid`
//! and the reserved default entries of `drivers/infiniband/core/cache.c`):
//! the link-local GID of the port MAC (fe80::/64 with the modified EUI-64),
//! once per RoCE version the device supports, v1 first: index 0 = v1 and
//! index 1 = v2 on a device with both. Those entries are the driver's; the
//! caller adds its own (an IPv4-mapped GID `::ffff:a.b.c.d` or a global
//! IPv6 address for RoCE v2) at any other index, and teardown deletes every
//! entry still programmed.
//!
//! On an InfiniBand port the subnet manager owns the table; the driver
//! reports entry 0, the port GID (default subnet prefix fe80::/64 and the
//! port GUID).

use mlx5_hal::Hal;
use mlx5_regs::consts::{errno, port, roce};

use crate::error::Error;
use crate::hca::Hca;
use crate::loopback::cmd as lb;
use crate::loopback::{LoopbackMode, RoceAddress, RoceVersion};
use crate::stats::CmdObserver;

/// GID table entries the driver tracks (larger tables are used up to this
/// index; ConnectX reports 255 or 256).
pub const MAX_TRACKED_GIDS: u16 = 512;

/// The kind of a GID table entry (`ibv_gid_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GidType {
    /// InfiniBand.
    Ib,
    /// RoCE v1 (Ethernet type 0x8915, GRH).
    RoceV1,
    /// RoCE v2 (UDP port 4791 over IPv4 or IPv6).
    RoceV2,
}

/// One GID table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidEntry {
    /// The GID: an IPv6 address, or `::ffff:a.b.c.d` for an IPv4 address.
    pub gid: [u8; 16],
    /// Entry kind.
    pub gid_type: GidType,
    /// The source MAC packets sent from this entry carry (Ethernet).
    pub mac: [u8; 6],
    /// The VLAN the address belongs to (Ethernet), if any.
    pub vlan: Option<u16>,
}

/// Whether `gid` is an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, Linux
/// `ipv6_addr_v4mapped`): RoCE v2 sends it as IPv4.
pub const fn is_ipv4_mapped(gid: &[u8; 16]) -> bool {
    let mut i = 0;
    while i < 10 {
        if gid[i] != 0 {
            return false;
        }
        i += 1;
    }
    gid[10] == 0xff && gid[11] == 0xff
}

/// The IPv4-mapped GID of an IPv4 address.
pub const fn ipv4_gid(addr: [u8; 4]) -> [u8; 16] {
    [
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, addr[0], addr[1], addr[2], addr[3],
    ]
}

/// Whether `gid` is link-local (fe80::/64).
pub fn is_link_local(gid: &[u8; 16]) -> bool {
    gid[..8] == [0xfe, 0x80, 0, 0, 0, 0, 0, 0]
}

impl GidEntry {
    /// The firmware form: version and L3 type as Linux `set_roce_addr` sets
    /// them (v2: IPv4 for an IPv4-mapped GID, else IPv6; v1: L3 type 0).
    pub(crate) fn to_roce(self) -> Option<RoceAddress> {
        let (version, l3_type) = match self.gid_type {
            GidType::Ib => return None,
            GidType::RoceV1 => (roce::VERSION_1, roce::L3_TYPE_IPV4),
            GidType::RoceV2 if is_ipv4_mapped(&self.gid) => (roce::VERSION_2, roce::L3_TYPE_IPV4),
            GidType::RoceV2 => (roce::VERSION_2, roce::L3_TYPE_IPV6),
        };
        Some(RoceAddress {
            gid: self.gid,
            mac: self.mac,
            version,
            l3_type,
            vlan: self.vlan,
        })
    }

    fn from_roce(a: &RoceAddress) -> GidEntry {
        GidEntry {
            gid: a.gid,
            gid_type: if a.version == roce::VERSION_2 {
                GidType::RoceV2
            } else {
                GidType::RoceV1
            },
            mac: a.mac,
            vlan: a.vlan,
        }
    }
}

/// Which entries the driver programmed: the defaults (indices below
/// `defaults`) and the caller's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GidBook {
    programmed: [u64; (MAX_TRACKED_GIDS / 64) as usize],
    /// Of those, the RoCE v2 entries.
    v2: [u64; (MAX_TRACKED_GIDS / 64) as usize],
    /// Default entries at indices `0..defaults`.
    pub(crate) defaults: u16,
}

impl GidBook {
    pub(crate) const fn new() -> Self {
        GidBook {
            programmed: [0; (MAX_TRACKED_GIDS / 64) as usize],
            v2: [0; (MAX_TRACKED_GIDS / 64) as usize],
            defaults: 0,
        }
    }

    pub(crate) fn is_set(&self, index: u16) -> bool {
        index < MAX_TRACKED_GIDS && self.programmed[index as usize / 64] & (1 << (index % 64)) != 0
    }

    pub(crate) fn is_v2(&self, index: u16) -> bool {
        self.is_set(index) && self.v2[index as usize / 64] & (1 << (index % 64)) != 0
    }

    /// Record entry `index` as programmed (`Some(v2)`) or deleted (`None`).
    pub(crate) fn mark(&mut self, index: u16, entry: Option<bool>) {
        let (w, b) = (index as usize / 64, 1u64 << (index % 64));
        match entry {
            Some(v2) => {
                self.programmed[w] |= b;
                if v2 {
                    self.v2[w] |= b;
                } else {
                    self.v2[w] &= !b;
                }
            }
            None => {
                self.programmed[w] &= !b;
                self.v2[w] &= !b;
            }
        }
    }

    /// The highest programmed index, for teardown.
    pub(crate) fn last(&self) -> Option<u16> {
        (0..MAX_TRACKED_GIDS).rev().find(|&i| self.is_set(i))
    }
}

/// The default GID entries of a port with MAC `mac` on a device whose RoCE
/// capability lists `versions` (bit 0 v1, bit 2 v2), in index order.
pub(crate) fn default_gids(mac: [u8; 6], versions: u8) -> impl Iterator<Item = GidEntry> {
    let gid = lb::link_local_gid(mac);
    [
        (versions & roce::VERSION_1_CAP != 0, GidType::RoceV1),
        (versions & roce::VERSION_2_CAP != 0, GidType::RoceV2),
    ]
    .into_iter()
    .filter(|(on, _)| *on)
    .map(move |(_, gid_type)| GidEntry {
        gid,
        gid_type,
        mac,
        vlan: None,
    })
}

impl<H: Hal, O: CmdObserver, const CE: usize, const AE: usize> Hca<H, O, CE, AE> {
    /// Entries of the port's GID table: the RoCE address table size on an
    /// Ethernet port with RoCE, 8 << the general capability
    /// `gid_table_size` on InfiniBand (Linux `mlx5_get_gid_table_len`), 0
    /// without either.
    pub fn gid_table_len(&self) -> u16 {
        let caps = self.caps();
        if caps.port_type == port::TYPE_IB {
            crate::port::ib_gid_table_len(&caps.raw)
        } else {
            self.roce_caps().map_or(0, |r| r.address_table_size)
        }
    }

    /// How many default entries bring-up programmed (indices `0..n`).
    pub fn default_gid_count(&self) -> u16 {
        self.rdma.gids.defaults
    }

    fn check_gid_index(&self, index: u16) -> Result<(), Error> {
        if self.caps().port_type == port::TYPE_IB {
            return Err(Error::Unsupported {
                what: "GID table changes on an InfiniBand port (the subnet manager owns it)",
                errno: errno::EOPNOTSUPP,
            });
        }
        if self.roce_caps().is_none() {
            return Err(Error::Unsupported {
                what: "GID table: the device has no RoCE capability",
                errno: errno::EOPNOTSUPP,
            });
        }
        if index >= self.gid_table_len() || index >= MAX_TRACKED_GIDS {
            return Err(Error::InvalidArgument(
                "GID index beyond the port's GID table (roce_address_table_size)",
            ));
        }
        if index < self.rdma.gids.defaults {
            return Err(Error::InvalidArgument(
                "GID index holds a default link-local entry the driver programmed at bring-up",
            ));
        }
        Ok(())
    }

    /// Program GID table entry `index` (SET_ROCE_ADDRESS): RoCE v1 or v2,
    /// an IPv6 address or an IPv4-mapped one (`::ffff:a.b.c.d`, sent as
    /// IPv4 by RoCE v2), the source MAC and VLAN. Replaces what the index
    /// held. RoCE is enabled on the vport first if it is off (firmware
    /// connects RoCE QPs only with `roce_en`). The entry is deleted at
    /// teardown unless [`Hca::del_gid`] deleted it before.
    ///
    /// Refused: an InfiniBand port, a device without RoCE, an index beyond
    /// the table or one of the default entries, a RoCE version the device
    /// does not support, a zero GID, a VLAN id above 4095.
    pub fn add_gid(&mut self, index: u16, entry: &GidEntry) -> Result<(), Error> {
        self.check_gid_index(index)?;
        let Some(addr) = entry.to_roce() else {
            return Err(Error::InvalidArgument(
                "an InfiniBand GID entry on an Ethernet port",
            ));
        };
        if entry.gid == [0; 16] {
            return Err(Error::InvalidArgument(
                "a zero GID (the empty entry; use del_gid)",
            ));
        }
        if entry.vlan.is_some_and(|v| v > 0xfff) {
            return Err(Error::InvalidArgument("VLAN id above 4095"));
        }
        let versions = self.roce_caps().map_or(0, |r| r.roce_version);
        let cap = match entry.gid_type {
            GidType::RoceV1 => roce::VERSION_1_CAP,
            _ => roce::VERSION_2_CAP,
        };
        if versions & cap == 0 {
            return Err(Error::Unsupported {
                what: "GID entry of a RoCE version the device does not support",
                errno: errno::EOPNOTSUPP,
            });
        }
        self.enable_roce()?;
        let _: [u8; lb::SET_ROCE_ADDRESS_OUT] =
            self.run(lb::set_roce_address(index, Some(&addr))?)?;
        self.rdma
            .gids
            .mark(index, Some(entry.gid_type == GidType::RoceV2));
        Ok(())
    }

    /// Delete GID table entry `index` that [`Hca::add_gid`] programmed
    /// (SET_ROCE_ADDRESS with an all-zero entry, as Linux `mlx5_ib_del_gid`).
    pub fn del_gid(&mut self, index: u16) -> Result<(), Error> {
        self.check_gid_index(index)?;
        if !self.rdma.gids.is_set(index) {
            return Err(Error::InvalidArgument(
                "GID index not programmed by add_gid",
            ));
        }
        let _: [u8; lb::SET_ROCE_ADDRESS_OUT] = self.run(lb::set_roce_address(index, None)?)?;
        self.rdma.gids.mark(index, None);
        Ok(())
    }

    /// Whether entry `index` is programmed, by bring-up or by
    /// [`Hca::add_gid`] (no command; an InfiniBand port has entry 0).
    pub fn gid_programmed(&self, index: u16) -> bool {
        if self.caps().port_type == port::TYPE_IB {
            return index == 0;
        }
        self.rdma.gids.is_set(index)
    }

    /// Read GID table entry `index`; `None` for an empty entry. Ethernet:
    /// QUERY_ROCE_ADDRESS. InfiniBand: entry 0 is the port GID (fe80::/64
    /// and the port GUID, from QUERY_HCA_VPORT_CONTEXT); the others read
    /// as empty.
    pub fn query_gid(&self, index: u16) -> Result<Option<GidEntry>, Error> {
        if index >= self.gid_table_len() {
            return Err(Error::InvalidArgument(
                "GID index beyond the port's GID table",
            ));
        }
        if self.caps().port_type == port::TYPE_IB {
            if index != 0 {
                return Ok(None);
            }
            let v = self.query_hca_vport()?;
            let mut gid = [0u8; 16];
            gid[..2].copy_from_slice(&[0xfe, 0x80]);
            gid[8..].copy_from_slice(&v.port_guid.to_be_bytes());
            return Ok(Some(GidEntry {
                gid,
                gid_type: GidType::Ib,
                mac: [0; 6],
                vlan: None,
            }));
        }
        let out: [u8; lb::QUERY_ROCE_ADDRESS_OUT] = self.run(lb::query_roce_address(index)?)?;
        Ok(lb::parse_roce_address(&out).map(|a| GidEntry::from_roce(&a)))
    }

    /// Whether programmed entry `index` is RoCE v2 (no command).
    pub fn gid_is_roce_v2(&self, index: u16) -> bool {
        self.rdma.gids.is_v2(index)
    }

    /// Enable RoCE on the vport (MODIFY_NIC_VPORT_CONTEXT `roce_en`) if it
    /// is off; teardown disables it again. Firmware connects RoCE QPs only
    /// with RoCE enabled: [`Hca::add_gid`] and the verbs facade call this
    /// before they need it; an `Hca` user connecting a QP over RoCE on a
    /// port where bring-up left it off (force loopback) calls it first. If
    /// bring-up chose force loopback and the device allows it only with
    /// RoCE disabled, [`Hca::loopback_mode`] becomes RoCE through the
    /// default GID (v2 if supported).
    pub fn enable_roce(&mut self) -> Result<(), Error> {
        if self.rdma.roce_en {
            return Ok(());
        }
        let _: [u8; lb::MODIFY_NIC_VPORT_CONTEXT_OUT] = self.run(lb::set_roce_en(true)?)?;
        self.rdma.note_roce_enabled();
        let fl_ok = self.roce_caps().is_some_and(|r| r.fl_when_enabled);
        if self.rdma.loopback == Some(LoopbackMode::ForceLoopback) && !fl_ok {
            self.rdma.loopback = self.default_roce_loopback();
        }
        Ok(())
    }

    /// The RoCE loopback mode over the default GIDs: the v2 entry if the
    /// device has one, else v1.
    pub(crate) fn default_roce_loopback(&self) -> Option<LoopbackMode> {
        let r = self.roce_caps()?;
        let mac = self.nic_vport()?.mac;
        let n = self.rdma.gids.defaults;
        if n == 0 {
            return None;
        }
        let v2 = r.roce_version & roce::VERSION_2_CAP != 0;
        Some(LoopbackMode::Roce {
            gid_index: n - 1,
            gid: lb::link_local_gid(mac),
            mac,
            version: if v2 { RoceVersion::V2 } else { RoceVersion::V1 },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_mapped_gids_are_sent_as_ipv4() {
        let g = ipv4_gid([198, 18, 0, 1]);
        assert!(is_ipv4_mapped(&g));
        let e = GidEntry {
            gid: g,
            gid_type: GidType::RoceV2,
            mac: [2, 0, 0, 0, 0, 1],
            vlan: Some(7),
        };
        let a = e.to_roce().unwrap();
        assert_eq!((a.version, a.l3_type, a.vlan), (2, 0, Some(7)));
        assert_eq!(GidEntry::from_roce(&a), e);
        let ll = lb::link_local_gid([2, 0, 0, 0, 0, 1]);
        assert!(!is_ipv4_mapped(&ll) && is_link_local(&ll));
        let a = GidEntry { gid: ll, ..e }.to_roce().unwrap();
        assert_eq!((a.version, a.l3_type), (2, 1));
        let a = GidEntry {
            gid_type: GidType::RoceV1,
            ..e
        }
        .to_roce()
        .unwrap();
        assert_eq!((a.version, a.l3_type), (0, 0));
        assert!(GidEntry {
            gid_type: GidType::Ib,
            ..e
        }
        .to_roce()
        .is_none());
    }

    #[test]
    fn defaults_are_v1_then_v2_as_supported() {
        let mac = [2, 0xc9, 0, 0, 0, 1];
        let types = |v| default_gids(mac, v).map(|e| e.gid_type);
        assert!(types(0b101).eq([GidType::RoceV1, GidType::RoceV2]));
        assert!(types(0b100).eq([GidType::RoceV2]));
        assert!(types(0b001).eq([GidType::RoceV1]));
        assert!(default_gids(mac, 0b101).all(|e| e.gid == lb::link_local_gid(mac)));
    }

    #[test]
    fn the_book_tracks_indices() {
        let mut b = GidBook::new();
        assert_eq!(b.last(), None);
        b.mark(3, Some(false));
        b.mark(300, Some(true));
        assert!(b.is_set(3) && b.is_set(300) && !b.is_set(4));
        assert!(!b.is_v2(3) && b.is_v2(300));
        assert_eq!(b.last(), Some(300));
        b.mark(300, None);
        assert!(!b.is_v2(300));
        assert_eq!(b.last(), Some(3));
        assert!(!b.is_set(MAX_TRACKED_GIDS));
    }
}
