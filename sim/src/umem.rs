//! User memory (UMEM) objects: a registered memory region described by
//! translation entries, which DevX clients name in the CQ, RMP (WQ) and QP
//! contexts instead of a page list (`*_umem_id`, `*_umem_offset`,
//! `*_umem_valid`; rdma-core `providers/mlx5/mlx5_vfio.c`
//! `_vfio_devx_umem_reg`, `providers/mlx5/mlx5_ifc.h` `umem`).

use crate::objects::QBuf;

/// MTT permission bits (rdma-core `MLX5_MTT_READ`, `MLX5_MTT_WRITE`).
pub(crate) const MTT_READ: u64 = 1;
pub(crate) const MTT_WRITE: u64 = 2;

/// A UMEM: `pages[i]` is the device address of page `i` (2^`page_shift`
/// bytes, contiguous in the IOVA space) with its permission bits; the
/// region starts `page_offset` bytes into page 0.
#[derive(Debug, Clone)]
pub(crate) struct Umem {
    pub pages: Vec<u64>,
    pub perms: Vec<u64>,
    pub page_shift: u32,
    pub page_offset: u64,
}

impl Umem {
    /// Bytes the region spans.
    pub fn size(&self) -> u64 {
        ((self.pages.len() as u64) << self.page_shift) - self.page_offset
    }

    /// Do `len` bytes at `off` lie inside the region, on pages that allow
    /// reading (and writing, when `write`)?
    fn covers(&self, off: u64, len: u64, write: bool) -> bool {
        let Some(end) = off.checked_add(len) else {
            return false;
        };
        if len == 0 || end > self.size() {
            return false;
        }
        let first = (self.page_offset + off) >> self.page_shift;
        let last = (self.page_offset + end - 1) >> self.page_shift;
        let need = if write {
            MTT_READ | MTT_WRITE
        } else {
            MTT_READ
        };
        (first..=last).all(|p| self.perms[p as usize] & need == need)
    }

    /// The queue buffer of `len` bytes at `off`, if the region holds it.
    pub fn buf(&self, off: u64, len: u64, write: bool) -> Option<QBuf> {
        self.covers(off, len, write).then(|| QBuf {
            pas: self.pages.as_slice().into(),
            page_shift: self.page_shift,
            offset: self.page_offset + off,
        })
    }

    /// The device address of a `len`-byte record at `off` (inside one
    /// page), if the region holds it.
    pub fn addr(&self, off: u64, len: u64, write: bool) -> Option<u64> {
        if !self.covers(off, len, write) {
            return None;
        }
        let o = self.page_offset + off;
        let page = (o >> self.page_shift) as usize;
        let within = o & ((1u64 << self.page_shift) - 1);
        (within + len <= 1u64 << self.page_shift).then(|| self.pages[page] + within)
    }

    /// Does the region use device memory in `[lo, hi)`?
    pub fn overlaps(&self, lo: u64, hi: u64) -> bool {
        let sz = 1u64 << self.page_shift;
        self.pages
            .iter()
            .any(|&p| p < hi && p.saturating_add(sz) > lo)
    }
}
