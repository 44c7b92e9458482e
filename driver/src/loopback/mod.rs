//! Loopback addressing: how two RC QPs of this function reach each other
//! with no peer and no subnet manager of our own, chosen at bring-up from
//! the capabilities and undone at teardown.
//!
//! The choice follows Linux software steering (`dr_send_allow_fl`,
//! `drivers/net/ethernet/mellanox/mlx5/core/steering/sws/dr_send.c`) and
//! rdma-core's copy of it (`providers/mlx5/dr_send.c`):
//!
//! * InfiniBand port: address the QPs by the port's own LID
//!   (QUERY_HCA_VPORT_CONTEXT; the port must be Active, which needs a subnet
//!   manager on the fabric) → [`LoopbackMode::Ib`].
//! * Ethernet port, RoCE disabled in the vport context and force loopback
//!   allowed while disabled (general or RoCE capability page) → force
//!   loopback with nothing to configure → [`LoopbackMode::ForceLoopback`].
//! * Force loopback allowed while RoCE is enabled → enable RoCE
//!   (MODIFY_NIC_VPORT_CONTEXT `roce_en`, as rdma-core's VFIO driver does
//!   after INIT_HCA) → force loopback.
//! * Otherwise, with RoCE: enable RoCE and address the QPs to the port's
//!   default link-local GID (the RoCE v2 entry when the device supports v2,
//!   else v1; [`crate::gid`]) and MAC → [`LoopbackMode::Roce`].
//!
//! Bring-up programs the default GIDs on every Ethernet port with RoCE,
//! whatever the mode ([`crate::gid`]). When RoCE gets enabled later (a GID
//! added, a QP connected over RoCE) on a device that allows force loopback
//! only with RoCE disabled, the mode becomes [`LoopbackMode::Roce`].
//! Teardown deletes the GID entries and sets `roce_en` back if the driver
//! changed them. [`Hca::loopback_rtr`] fills the INIT→RTR attributes for a peer QP
//! of this function whatever the mode.

pub(crate) mod cmd;

use mlx5_hal::Hal;
use mlx5_regs::consts::errno;

use crate::error::Error;
use crate::hca::Hca;
use crate::qp::{roce_udp_sport, AddressPath, Mtu, RtrAttr};
use crate::stats::CmdObserver;
pub use cmd::{HcaVport, NicVport, RoceAddress, RoceCaps};

/// RoCE wire version of a GID entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoceVersion {
    /// RoCE v1 (Ethernet type 0x8915).
    V1,
    /// RoCE v2 (UDP/IP; the QP path carries a UDP source port).
    V2,
}

/// How this function's QPs reach each other, chosen at bring-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LoopbackMode {
    /// Force-loopback RC QPs (`ads.fl = 1`): no GID, MAC or LID.
    ForceLoopback,
    /// RoCE with the port's own GID and MAC.
    Roce {
        /// GID table index programmed at bring-up (the source GID index).
        gid_index: u16,
        /// The GID (link-local, from the MAC).
        gid: [u8; 16],
        /// The port's MAC.
        mac: [u8; 6],
        /// The entry's RoCE version.
        version: RoceVersion,
    },
    /// InfiniBand by the port's own LID.
    Ib {
        /// The LID.
        lid: u16,
    },
}

/// What bring-up decided for an Ethernet port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EthPlan {
    /// Force loopback; `enable_roce`: set `roce_en` first.
    ForceLoopback { enable_roce: bool },
    /// RoCE with a GID entry; `enable_roce`: set `roce_en` first.
    Roce { enable_roce: bool },
    /// No way to connect RC QPs on this port.
    None,
}

/// The Ethernet decision of the module docs: `general_fl` is the general
/// capability `fl_rc_qp_when_roce_disabled`, `roce` the RoCE page (when the
/// general capability `roce` is set), `roce_en` the vport's current value.
pub(crate) fn choose_eth(general_fl: bool, roce: Option<&RoceCaps>, roce_en: bool) -> EthPlan {
    let fl_disabled = general_fl || roce.is_some_and(|r| r.fl_when_disabled);
    let fl_enabled = roce.is_some_and(|r| r.fl_when_enabled);
    if !roce_en && fl_disabled {
        EthPlan::ForceLoopback { enable_roce: false }
    } else if fl_enabled {
        EthPlan::ForceLoopback {
            enable_roce: !roce_en,
        }
    } else if roce.is_some() {
        EthPlan::Roce {
            enable_roce: !roce_en,
        }
    } else {
        EthPlan::None
    }
}

/// Hop limit of loopback RoCE paths (Linux uses 64 when asked for less
/// than 2).
const HOP_LIMIT: u8 = 64;
/// RNR NAK timer of loopback responders (code 12 = 0.64 ms, rdma-core's
/// tests).
const MIN_RNR_TIMER: u8 = 12;

impl<H: Hal, O: CmdObserver, const CE: usize, const AE: usize> Hca<H, O, CE, AE> {
    /// The INIT→RTR attributes that connect QP `local_qpn` to QP `peer_qpn`
    /// of this function in the bring-up's [`LoopbackMode`]: the address path
    /// (force loopback; own GID, MAC, GID index and the RoCE v2 UDP source
    /// port Linux derives from both QP numbers; own LID), the loopback MTU,
    /// `rq_psn = peer_sq_psn`, RNR timer 12, no RDMA reads.
    /// [`Error::Unsupported`] when bring-up found no loopback mode.
    pub fn loopback_rtr(
        &self,
        local_qpn: u32,
        peer_qpn: u32,
        peer_sq_psn: u32,
    ) -> Result<RtrAttr, Error> {
        let port = 1;
        let path = match self.loopback_mode() {
            Some(LoopbackMode::ForceLoopback) => AddressPath::ForceLoopback { port },
            Some(LoopbackMode::Roce {
                gid_index,
                gid,
                mac,
                version,
            }) => AddressPath::Roce {
                port,
                sgid_index: gid_index as u8,
                dgid: gid,
                dmac: mac,
                hop_limit: HOP_LIMIT,
                udp_sport: match version {
                    RoceVersion::V2 => roce_udp_sport(local_qpn, peer_qpn),
                    RoceVersion::V1 => 0,
                },
                traffic_class: 0,
                flow_label: 0,
            },
            Some(LoopbackMode::Ib { lid }) => AddressPath::Ib {
                port,
                dlid: lid,
                sl: 0,
            },
            None => {
                return Err(Error::Unsupported {
                    what: "loopback addressing (no force loopback, RoCE or IB port)",
                    errno: errno::EOPNOTSUPP,
                })
            }
        };
        Ok(RtrAttr {
            path,
            mtu: self.loopback_mtu(),
            dest_qpn: peer_qpn,
            rq_psn: peer_sq_psn,
            min_rnr_timer: MIN_RNR_TIMER,
            max_dest_rd_atomic: 0,
        })
    }
}

/// The path MTU of loopback QPs: 1024 bytes unless the port's Ethernet MTU
/// allows less (0 = not reported).
pub(crate) fn loopback_mtu_for(eth_mtu: u16) -> Mtu {
    if eth_mtu == 0 {
        return Mtu::B1024;
    }
    match Mtu::for_ethernet(eth_mtu as u32) {
        Some(m) if m < Mtu::B1024 => m,
        Some(_) => Mtu::B1024,
        None => Mtu::B256,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(dis: bool, en: bool, version: u8) -> RoceCaps {
        RoceCaps {
            fl_when_disabled: dis,
            fl_when_enabled: en,
            roce_version: version,
            address_table_size: 256,
            qp_ts_format: 0,
        }
    }

    #[test]
    fn the_documented_choice_per_profile() {
        // ConnectX-4 Lx: no force-loopback caps, RoCE off → RoCE.
        assert_eq!(
            choose_eth(false, Some(&page(false, false, 5)), false),
            EthPlan::Roce { enable_roce: true }
        );
        // ConnectX-5: general fl_rc_qp_when_roce_disabled, RoCE off → FL as is.
        assert_eq!(
            choose_eth(true, Some(&page(false, false, 5)), false),
            EthPlan::ForceLoopback { enable_roce: false }
        );
        // ConnectX-6 Dx / 7: FL only when enabled → enable RoCE, FL.
        assert_eq!(
            choose_eth(false, Some(&page(false, true, 5)), false),
            EthPlan::ForceLoopback { enable_roce: true }
        );
        // Already enabled: nothing to change.
        assert_eq!(
            choose_eth(false, Some(&page(false, true, 5)), true),
            EthPlan::ForceLoopback { enable_roce: false }
        );
        assert_eq!(
            choose_eth(true, Some(&page(false, false, 5)), true),
            EthPlan::Roce { enable_roce: false },
            "FL-when-disabled does not help once RoCE is on"
        );
        // The RoCE page's own "disabled" bit counts too.
        assert_eq!(
            choose_eth(false, Some(&page(true, false, 1)), false),
            EthPlan::ForceLoopback { enable_roce: false }
        );
        assert_eq!(choose_eth(false, None, false), EthPlan::None);
        assert_eq!(
            choose_eth(true, None, false),
            EthPlan::ForceLoopback { enable_roce: false }
        );
    }

    #[test]
    fn loopback_mtu_is_1024_unless_the_port_is_smaller() {
        assert_eq!(loopback_mtu_for(0), Mtu::B1024);
        assert_eq!(loopback_mtu_for(1500), Mtu::B1024);
        assert_eq!(loopback_mtu_for(9000), Mtu::B1024);
        assert_eq!(loopback_mtu_for(700), Mtu::B512);
        assert_eq!(loopback_mtu_for(100), Mtu::B256);
    }
}
