//! `ibv_reg_mr` / `ibv_dereg_mr` over the driver's memory keys.
//!
//! A region is a translated (MTT) key over exactly `[addr, addr + length)`
//! ([`crate::Hca::register`]): the device refuses an access through its
//! lkey or rkey outside those bytes, without the right, or from another
//! PD. Its virtual address is the device address (no `ZERO_BASED`). The
//! rights are what the key grants; local read is always granted, as in
//! IB. The all-memory DMA key is never handed out here.

use mlx5_hal::Hal;

use super::{AccessFlags, Errno, Verbs};
use crate::mkey::{Mkey, MkeyAccess};
use crate::stats::CmdObserver;

/// A registered memory region (`ibv_mr`). Owned: hand it back to
/// [`Verbs::dereg_mr`]; one not deregistered lives until the device is
/// torn down.
#[derive(Debug)]
pub struct Mr {
    mkey: Mkey,
    addr: u64,
    length: u64,
    access: AccessFlags,
}

impl Mr {
    /// The local key, for gather and scatter entries.
    pub fn lkey(&self) -> u32 {
        self.mkey.key()
    }

    /// The remote key, for a peer's RDMA (the same value on mlx5).
    pub fn rkey(&self) -> u32 {
        self.mkey.key()
    }

    /// Device address of the region.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Length in bytes.
    pub fn length(&self) -> u64 {
        self.length
    }

    /// The rights as registered (optional bits the device lacks dropped).
    pub fn access(&self) -> AccessFlags {
        self.access
    }
}

impl<
        H: Hal,
        O: CmdObserver,
        const CQS: usize,
        const SRQS: usize,
        const EVENTS: usize,
        const QPS: usize,
        const SQ_WQEBBS: usize,
    > Verbs<H, O, CQS, SRQS, EVENTS, QPS, SQ_WQEBBS>
{
    /// `ibv_reg_mr`: a key with `access` for `length` bytes at device
    /// address `addr`. Checked as libibverbs and the kernel do
    /// (`ib_check_mr_access`, `ib_umem_get`):
    ///
    /// * bits of the optional range are dropped (this device supports
    ///   none), `HUGETLB` is a hint;
    /// * `REMOTE_WRITE` or `REMOTE_ATOMIC` without `LOCAL_WRITE`, a bit
    ///   libibverbs does not define, `length` 0, or a region that wraps the
    ///   address space: `EINVAL`;
    /// * `ON_DEMAND` (no paging support), `MW_BIND` (no memory windows),
    ///   `ZERO_BASED` (the region's address is its device address):
    ///   `EOPNOTSUPP`;
    /// * a region needing more pages than one CREATE_MKEY of this driver
    ///   carries (over 62 GiB, [`crate::mkey::cmd::MAX_MTT_ENTRIES`]):
    ///   `EINVAL`, as Linux's `ib_reg_mr` beyond `max_mr_size`.
    pub fn reg_mr(&mut self, addr: u64, length: u64, access: AccessFlags) -> Result<Mr, Errno> {
        use AccessFlags as A;
        let access = AccessFlags(access.0 & !A::OPTIONAL_RANGE.0);
        let known = (A::HUGETLB.0 << 1) - 1;
        if access.0 & !known != 0
            || (access.intersects(A::REMOTE_WRITE | A::REMOTE_ATOMIC)
                && !access.contains(A::LOCAL_WRITE))
        {
            return Err(Errno::EINVAL);
        }
        if access.intersects(A::ON_DEMAND | A::MW_BIND | A::ZERO_BASED) {
            return Err(Errno::EOPNOTSUPP);
        }
        if length == 0 || addr.checked_add(length).is_none() {
            return Err(Errno::EINVAL);
        }
        let mut rights = MkeyAccess::LOCAL_READ;
        for (f, r) in [
            (A::LOCAL_WRITE, MkeyAccess::LOCAL_WRITE),
            (A::REMOTE_READ, MkeyAccess::REMOTE_READ),
            (A::REMOTE_WRITE, MkeyAccess::REMOTE_WRITE),
            (A::REMOTE_ATOMIC, MkeyAccess::REMOTE_ATOMIC),
        ] {
            if access.contains(f) {
                rights |= r;
            }
        }
        if crate::mkey::cmd::MttLayout::for_region(addr, length).is_none() {
            return Err(Errno::EINVAL);
        }
        let mkey = self.hca.register(addr, length, rights)?;
        Ok(Mr {
            mkey,
            addr,
            length,
            access,
        })
    }

    /// `ibv_dereg_mr`. On failure the region is handed back, still
    /// registered.
    // No heap to box into: handing the object back on failure is the point.
    #[allow(clippy::result_large_err)]
    pub fn dereg_mr(&mut self, mr: Mr) -> Result<(), (Mr, Errno)> {
        let Mr {
            mkey,
            addr,
            length,
            access,
        } = mr;
        self.hca.destroy_mkey(mkey).map_err(|failed| {
            let (mkey, e) = failed.into_parts();
            (
                Mr {
                    mkey,
                    addr,
                    length,
                    access,
                },
                Errno::from(e),
            )
        })
    }
}
