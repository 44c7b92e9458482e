//! Memory keys.
//!
//! Two kinds, as Linux's mlx5 driver has (`drivers/infiniband/hw/mlx5/mr.c`):
//!
//! * **Translated (MTT) keys**, [`Hca::register`]: a key over exactly
//!   `[addr, addr + len)` of device memory with exactly the requested
//!   rights, translated by the device through a page list sent with
//!   CREATE_MKEY (`reg_create`). An access outside the range, without the
//!   right, or on another PD fails on the device. This is what
//!   `ibv_reg_mr` makes and the only kind of key a peer should be given.
//! * **Physical-address keys** (access mode PA, `length64`, start 0): the
//!   key covers the whole device address space and an address is the
//!   device address as is (`mlx5_ib_get_dma_mr`; `mlx5e_create_mkey`).
//!   Bring-up makes one with local read and write only (the "DMA key",
//!   [`Hca::dma_lkey`]), the default lkey of receives and sends.
//!   [`Hca::create_mkey`] makes more; it refuses remote rights, since a
//!   PA key with them is what Linux warns of as an "unsafe global rkey"
//!   (`drivers/infiniband/core/verbs.c`): any peer holding it reaches all
//!   memory the device can.
//!
//! A key is `(mkey_index << 8) | variant`; the local and remote key are the
//! same value. The variant rolls with every key made (Linux
//! `assign_mkey_variant`), so a key of a destroyed index does not open the
//! next key to reuse that index (256 keys later it would: an 8-bit
//! variant is all the card checks). The reserved lkey
//! ([`Hca::reserved_lkey`]) stays available as an explicit choice; whether
//! firmware honours it in every context is only known on hardware (Linux
//! no longer uses it).

pub(crate) mod cmd;

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
        /// Every remote right.
        const REMOTE_ALL = Self::REMOTE_READ.bits() | Self::REMOTE_WRITE.bits() | Self::REMOTE_ATOMIC.bits();
    }
}

/// A memory key created by [`Hca::create_mkey`] or [`Hca::register`]. It
/// holds no memory of its own; destroy it with [`Hca::destroy_mkey`]
/// (TEARDOWN_HCA removes any left).
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
    /// Create a physical-address key with `access` on the HCA's PD: local
    /// rights only (at least one); a remote right is refused, since the key
    /// would open all device memory to a peer (use [`Hca::register`]).
    pub fn create_mkey(&self, access: MkeyAccess) -> Result<Mkey, Error> {
        if access.is_empty() {
            return Err(Error::InvalidArgument("a memory key needs access rights"));
        }
        if access.intersects(MkeyAccess::REMOTE_ALL) {
            return Err(Error::InvalidArgument(
                "a physical-address key reaches all memory: remote rights need a registered range",
            ));
        }
        let key = self.create_pa_mkey(access)?;
        Ok(Mkey { key, access })
    }

    /// Register `[addr, addr + len)` of device memory (contiguous, e.g. a
    /// `DmaRegion` or part of one) as a translated key with exactly
    /// `access` on the HCA's PD: the key opens those bytes and no others.
    /// Its virtual address is the device address, so a scatter/gather
    /// entry or a peer's `remote_addr` names the bytes by their device
    /// address. One CREATE_MKEY; pages chosen as [`cmd::MttLayout`]
    /// describes, with `pg_access` when the device has capability `pg`.
    /// `len` 0, a range that wraps, or one needing more than
    /// [`cmd::MAX_MTT_ENTRIES`] pages: `InvalidArgument`.
    pub fn register(&self, addr: u64, len: u64, access: MkeyAccess) -> Result<Mkey, Error> {
        if access.is_empty() {
            return Err(Error::InvalidArgument("a memory key needs access rights"));
        }
        let layout = cmd::MttLayout::for_region(addr, len).ok_or(Error::InvalidArgument(
            "a registration needs 1 to 62 GiB that do not wrap the address space",
        ))?;
        let k = cmd::MttKey {
            pd: self.pd(),
            access,
            variant: self.next_mkey_variant(),
            start: addr,
            len,
            pg_access: self.caps().pg,
        };
        let mut input = [0u8; cmd::CREATE_MKEY_MTT_MAX];
        let n = cmd::create_mkey_mtt(&mut input, &k, &layout)?;
        let mut out = [0u8; cmd::CREATE_MKEY_OUT];
        self.exec(&input[..n], &mut out)?;
        Ok(Mkey {
            key: mlx5_regs::consts::mkey::key(cmd::parse_create_mkey(&out), k.variant),
            access,
        })
    }

    /// A rolling 8-bit variant, so a stale key of a destroyed index does
    /// not match a new one (Linux `assign_mkey_variant`).
    fn next_mkey_variant(&self) -> u8 {
        self.mkey_variant()
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_add(1)
    }

    /// CREATE_MKEY in PA mode; returns the key.
    pub(crate) fn create_pa_mkey(&self, access: MkeyAccess) -> Result<u32, Error> {
        let variant = self.next_mkey_variant();
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
