//! Memory keys.
//!
//! The driver creates physical-address keys only (access mode PA,
//! `length64`, start 0): the key covers the whole device address space and
//! a scatter/gather address is the device address (the IOVA under an
//! IOMMU) as is, the way Linux's kernel DMA key works (`mlx5_ib_get_dma_mr`,
//! `drivers/infiniband/hw/mlx5/mr.c`; `mlx5e_create_mkey`,
//! `drivers/net/ethernet/mellanox/mlx5/core/en_common.c`). A key is
//! `(mkey_index << 8) | variant`; the local and remote key are the same
//! value.
//!
//! Bring-up creates one such key with local read and write on the HCA's PD
//! (the "DMA key", [`Hca::dma_lkey`]): it is what receives and sends use by
//! default. [`Hca::create_mkey`] makes others on demand, e.g. one with
//! remote write for an RDMA WRITE target. The reserved lkey
//! ([`Hca::reserved_lkey`]) stays available as an explicit choice; whether
//! firmware honours it in every context is only known on hardware (Linux
//! no longer uses it).

pub mod cmd;

use core::sync::atomic::Ordering;

use mlx5_hal::Hal;

use crate::error::{DestroyError, Error};
use crate::hca::Hca;
use crate::srq::Sge;
use crate::stats::CmdObserver;

bitflags::bitflags! {
    /// Access rights of a memory key (`mkc.lr`, `lw`, `rr`, `rw`, `a`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct MkeyAccess: u8 {
        /// The device may read local memory through the key (sends).
        const LOCAL_READ = 1 << 0;
        /// The device may write local memory through the key (receives).
        const LOCAL_WRITE = 1 << 1;
        /// A peer may RDMA READ through the key.
        const REMOTE_READ = 1 << 2;
        /// A peer may RDMA WRITE through the key.
        const REMOTE_WRITE = 1 << 3;
        /// A peer may run atomics through the key.
        const REMOTE_ATOMIC = 1 << 4;
    }
}

/// A memory key created by [`Hca::create_mkey`]. It holds no memory of its
/// own; destroy it with [`Hca::destroy_mkey`] (TEARDOWN_HCA removes any
/// left).
#[derive(Debug, PartialEq, Eq)]
pub struct Mkey {
    key: u32,
    access: MkeyAccess,
}

impl Mkey {
    /// The key: both the lkey of local scatter/gather entries and the rkey a
    /// peer uses.
    pub fn key(&self) -> u32 {
        self.key
    }

    /// The rights it was created with.
    pub fn access(&self) -> MkeyAccess {
        self.access
    }
}

impl<H: Hal, O: CmdObserver, const CE: usize, const AE: usize> Hca<H, O, CE, AE> {
    /// Create a physical-address key with `access` on the HCA's PD. Needs
    /// at least one right.
    pub fn create_mkey(&self, access: MkeyAccess) -> Result<Mkey, Error> {
        if access.is_empty() {
            return Err(Error::InvalidArgument("a memory key needs access rights"));
        }
        let key = self.create_pa_mkey(access)?;
        Ok(Mkey { key, access })
    }

    /// CREATE_MKEY in PA mode; returns the key.
    pub(crate) fn create_pa_mkey(&self, access: MkeyAccess) -> Result<u32, Error> {
        // A rolling 8-bit variant, so a stale key of a destroyed index does
        // not match a new one (Linux `assign_mkey_variant`).
        let variant = self
            .mkey_variant()
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_add(1);
        let input = cmd::create_mkey_pa(self.pd(), access, variant)?;
        let mut out = [0u8; cmd::CREATE_MKEY_OUT];
        self.exec(&input, &mut out)?;
        Ok(mlx5_regs::consts::mkey::key(
            cmd::parse_create_mkey(&out),
            variant,
        ))
    }

    /// Destroy a key from [`Hca::create_mkey`]; on failure it is handed
    /// back inside the [`DestroyError`].
    pub fn destroy_mkey(&self, mkey: Mkey) -> Result<(), DestroyError<Mkey>> {
        match self.destroy_mkey_raw(mkey.key) {
            Ok(()) => Ok(()),
            Err(e) => Err(DestroyError::new(mkey, e)),
        }
    }

    pub(crate) fn destroy_mkey_raw(&self, key: u32) -> Result<(), Error> {
        let input = cmd::destroy_mkey(key)?;
        let mut out = [0u8; cmd::DESTROY_MKEY_OUT];
        self.exec(&input, &mut out)
    }

    /// The key to use by default for local buffers in receive and send
    /// scatter/gather lists: the DMA key made at bring-up, or the reserved
    /// lkey on a device that has no RDMA support (no DMA key was made).
    pub fn default_lkey(&self) -> u32 {
        self.dma_lkey().unwrap_or(self.reserved_lkey())
    }

    /// A scatter/gather entry for `length` bytes at device address `addr`
    /// with [`Hca::default_lkey`].
    pub fn sge(&self, addr: u64, length: u32) -> Sge {
        Sge {
            addr,
            length,
            lkey: self.default_lkey(),
        }
    }
}
