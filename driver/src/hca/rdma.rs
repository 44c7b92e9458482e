//! The RDMA part of bring-up and teardown: the DMA key, the XRC domain and
//! the loopback addressing ([`crate::loopback`]).
//!
//! Done only when the function can carry RC traffic
//! ([`crate::Caps::rdma_capable`]). Each step records what it did as soon
//! as firmware accepted it, so a failure later in bring-up (or teardown)
//! undoes exactly that: the GID entry cleared, `roce_en` set back,
//! DEALLOC_XRCD, DESTROY_MKEY, in that order, before DEALLOC_PD.

use mlx5_hal::Hal;
use mlx5_regs::consts::port;

use super::Hca;
use crate::cmd::encode;
use crate::error::Error;
use crate::loopback::cmd as lb;
use crate::loopback::{choose_eth, gid_entry, loopback_mtu_for, EthPlan, LoopbackMode};
use crate::loopback::{NicVport, RoceCaps};
use crate::mkey::MkeyAccess;
use crate::qp::Mtu;
use crate::stats::CmdObserver;

/// What RDMA bring-up created or changed.
#[derive(Debug, Clone, Copy)]
pub(super) struct RdmaState {
    pub(super) dma_mkey: Option<u32>,
    pub(super) xrcd: Option<u32>,
    pub(super) loopback: Option<LoopbackMode>,
    pub(super) mtu: Mtu,
    pub(super) roce_caps: Option<RoceCaps>,
    pub(super) nic_vport: Option<NicVport>,
    /// `roce_en` as it is now (after bring-up possibly set it).
    pub(super) roce_en: bool,
    /// Bring-up set `roce_en` (teardown clears it again).
    roce_enabled_by_us: bool,
    /// GID table entry bring-up programmed (teardown clears it).
    gid_programmed: Option<u16>,
}

impl Default for RdmaState {
    fn default() -> Self {
        Self::new()
    }
}

impl RdmaState {
    /// Nothing made yet.
    pub(super) const fn new() -> Self {
        RdmaState {
            dma_mkey: None,
            xrcd: None,
            loopback: None,
            mtu: Mtu::B1024,
            roce_caps: None,
            nic_vport: None,
            roce_en: false,
            roce_enabled_by_us: false,
            gid_programmed: None,
        }
    }
}

/// GID table entry the driver programs in mode RoCE (index 0: Linux
/// reserves the first entries for the default GIDs).
const LOOPBACK_GID_INDEX: u16 = 0;

impl<H: Hal, O: CmdObserver, const CE: usize, const AE: usize> Hca<H, O, CE, AE> {
    /// The RDMA bring-up steps (see the module docs).
    pub(super) fn rdma_bring_up(&mut self) -> Result<(), Error> {
        let caps = *self.caps();
        if !caps.rdma_capable() {
            return Ok(());
        }
        // The DMA key: local read and write on the HCA's PD.
        let key = self.create_pa_mkey(MkeyAccess::LOCAL_READ | MkeyAccess::LOCAL_WRITE)?;
        self.rdma.dma_mkey = Some(key);

        // Linux gives every SRQ-attached kernel QP an XRC domain
        // (`xrcdn0`, `mlx5_ib_dev_res_init`) when the device has `xrc`.
        if caps.xrc {
            let out: [u8; encode::ALLOC_XRCD_OUT] = self.run(encode::alloc_xrcd())?;
            self.rdma.xrcd = Some(encode::parse_alloc_xrcd(&out));
        }

        if caps.port_type == port::TYPE_IB {
            let input = lb::query_hca_vport_context(caps.num_ports, 1)?;
            let out: [u8; lb::QUERY_HCA_VPORT_CONTEXT_OUT] = self.run(input)?;
            let v = lb::parse_hca_vport_context(&out);
            self.rdma.loopback = Some(LoopbackMode::Ib { lid: v.lid });
            return Ok(());
        }

        if caps.roce {
            let out: [u8; encode::QUERY_HCA_CAP_OUT] = self.run(lb::query_roce_caps())?;
            self.rdma.roce_caps = Some(lb::parse_roce_caps(&out));
        }
        let out: [u8; lb::QUERY_NIC_VPORT_CONTEXT_OUT] = self.run(lb::query_nic_vport_context())?;
        let vport = lb::parse_nic_vport_context(&out);
        self.rdma.nic_vport = Some(vport);
        self.rdma.roce_en = vport.roce_en;
        self.rdma.mtu = loopback_mtu_for(vport.mtu);
        let roce = self.rdma.roce_caps;
        let plan = choose_eth(
            caps.fl_rc_qp_when_roce_disabled,
            roce.as_ref(),
            vport.roce_en,
        );
        let enable = match plan {
            EthPlan::ForceLoopback { enable_roce } | EthPlan::Roce { enable_roce } => enable_roce,
            EthPlan::None => false,
        };
        if enable {
            let _: [u8; lb::MODIFY_NIC_VPORT_CONTEXT_OUT] = self.run(lb::set_roce_en(true)?)?;
            self.rdma.roce_enabled_by_us = true;
            self.rdma.roce_en = true;
        }
        self.rdma.loopback = match (plan, roce) {
            (EthPlan::ForceLoopback { .. }, _) => Some(LoopbackMode::ForceLoopback),
            (EthPlan::Roce { .. }, Some(r)) => {
                let (addr, version) = gid_entry(vport.mac, &r);
                let input = lb::set_roce_address(LOOPBACK_GID_INDEX, Some(&addr))?;
                let _: [u8; lb::SET_ROCE_ADDRESS_OUT] = self.run(input)?;
                self.rdma.gid_programmed = Some(LOOPBACK_GID_INDEX);
                Some(LoopbackMode::Roce {
                    gid_index: LOOPBACK_GID_INDEX,
                    gid: addr.gid,
                    mac: vport.mac,
                    version,
                })
            }
            _ => None,
        };
        Ok(())
    }

    /// Undo [`Hca::rdma_bring_up`], every step attempted; errors go to
    /// `note`.
    pub(super) fn rdma_teardown(&mut self, note: &mut impl FnMut(Result<(), Error>)) {
        self.rdma.loopback = None;
        if let Some(index) = self.rdma.gid_programmed.take() {
            note(
                lb::set_roce_address(index, None)
                    .map_err(Error::from)
                    .and_then(|i| self.run(i).map(|_: [u8; lb::SET_ROCE_ADDRESS_OUT]| ())),
            );
        }
        if core::mem::take(&mut self.rdma.roce_enabled_by_us) {
            self.rdma.roce_en = false;
            note(lb::set_roce_en(false).map_err(Error::from).and_then(|i| {
                self.run(i)
                    .map(|_: [u8; lb::MODIFY_NIC_VPORT_CONTEXT_OUT]| ())
            }));
        }
        if let Some(xrcd) = self.rdma.xrcd.take() {
            note(
                encode::dealloc_xrcd(xrcd)
                    .map_err(Error::from)
                    .and_then(|i| self.run(i).map(|_: [u8; encode::DEALLOC_XRCD_OUT]| ())),
            );
        }
        if let Some(key) = self.rdma.dma_mkey.take() {
            note(self.destroy_mkey_raw(key));
        }
    }
}
