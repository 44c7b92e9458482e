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
use crate::gid::{default_gids, GidBook};
use crate::loopback::cmd as lb;
use crate::loopback::{choose_eth, loopback_mtu_for, EthPlan, LoopbackMode};
use crate::loopback::{NicVport, RoceCaps};
use crate::mkey::MkeyAccess;
use crate::qp::Mtu;
use crate::stats::CmdObserver;

/// What RDMA bring-up created or changed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RdmaState {
    pub(crate) dma_mkey: Option<u32>,
    pub(crate) xrcd: Option<u32>,
    pub(crate) loopback: Option<LoopbackMode>,
    pub(crate) mtu: Mtu,
    pub(crate) roce_caps: Option<RoceCaps>,
    pub(crate) nic_vport: Option<NicVport>,
    /// `roce_en` as it is now (after bring-up possibly set it).
    pub(crate) roce_en: bool,
    /// Bring-up set `roce_en` (teardown clears it again).
    roce_enabled_by_us: bool,
    /// GID table entries programmed (teardown deletes them).
    pub(crate) gids: GidBook,
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
            gids: GidBook::new(),
        }
    }

    /// `roce_en` was set by the driver (teardown clears it).
    pub(crate) fn note_roce_enabled(&mut self) {
        self.roce_en = true;
        self.roce_enabled_by_us = true;
    }
}

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
            self.rdma.note_roce_enabled();
        }
        // The default GIDs, v1 then v2 as supported (ib core's reserved
        // default entries; `crate::gid`).
        if let Some(r) = roce {
            for (index, e) in (0u16..).zip(default_gids(vport.mac, r.roce_version)) {
                let addr = e.to_roce().expect("a RoCE entry");
                let _: [u8; lb::SET_ROCE_ADDRESS_OUT] =
                    self.run(lb::set_roce_address(index, Some(&addr))?)?;
                self.rdma
                    .gids
                    .mark(index, Some(e.gid_type == crate::gid::GidType::RoceV2));
                self.rdma.gids.defaults = index + 1;
            }
        }
        self.rdma.loopback = match plan {
            EthPlan::ForceLoopback { .. } => Some(LoopbackMode::ForceLoopback),
            EthPlan::Roce { .. } => self.default_roce_loopback(),
            EthPlan::None => None,
        };
        Ok(())
    }

    /// Undo [`Hca::rdma_bring_up`], every step attempted; errors go to
    /// `note`.
    pub(super) fn rdma_teardown(&mut self, note: &mut impl FnMut(Result<(), Error>)) {
        self.rdma.loopback = None;
        while let Some(index) = self.rdma.gids.last() {
            self.rdma.gids.mark(index, None);
            note(
                lb::set_roce_address(index, None)
                    .map_err(Error::from)
                    .and_then(|i| self.run(i).map(|_: [u8; lb::SET_ROCE_ADDRESS_OUT]| ())),
            );
        }
        self.rdma.gids.defaults = 0;
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
