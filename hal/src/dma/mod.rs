//! DMA regions: memory shared with a device that writes it concurrently.
//!
//! The rule enforced here: no Rust reference (`&`/`&mut`) is ever created to
//! DMA memory. Every access is a volatile load or store through a raw pointer,
//! bounds-checked against the region. Multi-byte values are stored big-endian
//! because every mlx5 structure is big-endian.
//!
//! This module holds the owning region ([`DmaRegion`], [`RawDma`]) with its
//! per-access checked accessors and bulk copies; `window` holds the
//! once-checked views ([`DmaWindow`], [`DmaWindows`]) the data path uses;
//! `tests` holds the unit tests of both, with the host-memory test platform
//! that the ring layouts' tests borrow.

use core::ptr::NonNull;

use crate::Hal;

mod window;

pub use window::{DmaWindow, DmaWindows};

/// A DMA allocation as a platform hands it out: CPU pointer, device address
/// and length. Plain data; [`DmaRegion`] is the owning form.
#[derive(Debug)]
pub struct RawDma {
    /// CPU-visible address of the first byte.
    pub vaddr: NonNull<u8>,
    /// Device-visible address (IOVA) of the first byte.
    pub iova: u64,
    /// Length in bytes (a multiple of [`crate::PAGE_SIZE`]).
    pub len: usize,
}

/// An owned, zero-initialised DMA region that is freed when dropped.
///
/// Accessors take `&self` even when they write: the device writes the region
/// behind the CPU's back anyway, so the region behaves like a register block
/// with interior mutability. The type is `Send` (the memory can move between
/// threads with its owner) but not `Sync` (two CPU threads must not access it
/// at once without the owner's own locking).
pub struct DmaRegion<H: Hal> {
    hal: H,
    raw: RawDma,
}

// SAFETY: a `DmaRegion` owns its memory exclusively (no other CPU-side handle
// exists), and all access goes through volatile raw-pointer operations, so
// moving the owner to another thread moves every access with it. The platform
// handle is required to be `Send` too.
unsafe impl<H: Hal + Send> Send for DmaRegion<H> {}

impl<H: Hal> DmaRegion<H> {
    /// Take ownership of a raw allocation.
    ///
    /// # Safety
    ///
    /// `raw` must have been returned by `hal.alloc_dma_raw` (or a clone's), must not
    /// be owned by anything else, and must not have been freed.
    pub unsafe fn from_raw(hal: H, raw: RawDma) -> Self {
        DmaRegion { hal, raw }
    }

    /// Device address (IOVA) of the first byte. Program the device with this,
    /// never with a CPU pointer.
    #[inline(always)]
    pub fn iova(&self) -> u64 {
        self.raw.iova
    }

    /// Device address of the byte at `offset`.
    #[inline(always)]
    pub fn iova_at(&self, offset: usize) -> u64 {
        assert!(offset <= self.raw.len, "DMA offset out of range");
        self.raw.iova + offset as u64
    }

    /// Length in bytes.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.raw.len
    }

    /// Always false: platforms never return empty regions.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.raw.len == 0
    }

    /// Raw CPU pointer to the first byte, for hot paths that do their own
    /// volatile access. Never turn it into a reference.
    #[inline(always)]
    pub fn as_ptr(&self) -> *mut u8 {
        self.raw.vaddr.as_ptr()
    }

    /// The platform this region belongs to.
    pub fn hal(&self) -> &H {
        &self.hal
    }

    #[inline(always)]
    fn ptr_at(&self, offset: usize, size: usize, align: usize) -> *mut u8 {
        // The checks stay on every access; only their failure paths are out
        // of line (`#[cold]`), so the hot path is a compare and a branch and
        // does not spill the panic message's arguments to the stack.
        if offset
            .checked_add(size)
            .is_none_or(|end| end > self.raw.len)
        {
            out_of_range(offset, size, self.raw.len);
        }
        if !offset.is_multiple_of(align) {
            unaligned(offset);
        }
        // SAFETY: `offset + size <= len` was just checked, so the result stays
        // inside the allocation described by `raw`.
        unsafe { self.raw.vaddr.as_ptr().add(offset) }
    }

    /// Read the byte at `offset`.
    #[inline(always)]
    pub fn read_u8(&self, offset: usize) -> u8 {
        let p = self.ptr_at(offset, 1, 1);
        // SAFETY: `p` is in bounds (checked by `ptr_at`) of memory the platform
        // guarantees valid for volatile access while the region lives.
        unsafe { p.read_volatile() }
    }

    /// Write the byte at `offset`.
    #[inline(always)]
    pub fn write_u8(&self, offset: usize, value: u8) {
        let p = self.ptr_at(offset, 1, 1);
        // SAFETY: as in `read_u8`.
        unsafe { p.write_volatile(value) }
    }

    /// Read the big-endian 16-bit value at `offset` (2-byte aligned).
    #[inline(always)]
    pub fn read_be16(&self, offset: usize) -> u16 {
        let p = self.ptr_at(offset, 2, 2) as *const u16;
        // SAFETY: in bounds and 2-byte aligned (checked; the region base is
        // page aligned), valid for volatile access.
        u16::from_be(unsafe { p.read_volatile() })
    }

    /// Write a big-endian 16-bit value at `offset` (2-byte aligned).
    #[inline(always)]
    pub fn write_be16(&self, offset: usize, value: u16) {
        let p = self.ptr_at(offset, 2, 2) as *mut u16;
        // SAFETY: as in `read_be16`.
        unsafe { p.write_volatile(value.to_be()) }
    }

    /// Read the big-endian 32-bit value at `offset` (4-byte aligned).
    #[inline(always)]
    pub fn read_be32(&self, offset: usize) -> u32 {
        let p = self.ptr_at(offset, 4, 4) as *const u32;
        // SAFETY: in bounds and 4-byte aligned (checked), valid for volatile
        // access.
        u32::from_be(unsafe { p.read_volatile() })
    }

    /// Write a big-endian 32-bit value at `offset` (4-byte aligned).
    #[inline(always)]
    pub fn write_be32(&self, offset: usize, value: u32) {
        let p = self.ptr_at(offset, 4, 4) as *mut u32;
        // SAFETY: as in `read_be32`.
        unsafe { p.write_volatile(value.to_be()) }
    }

    /// Read the big-endian 64-bit value at `offset` (8-byte aligned).
    #[inline(always)]
    pub fn read_be64(&self, offset: usize) -> u64 {
        let p = self.ptr_at(offset, 8, 8) as *const u64;
        // SAFETY: in bounds and 8-byte aligned (checked), valid for volatile
        // access.
        u64::from_be(unsafe { p.read_volatile() })
    }

    /// Write a big-endian 64-bit value at `offset` (8-byte aligned).
    #[inline(always)]
    pub fn write_be64(&self, offset: usize, value: u64) {
        let p = self.ptr_at(offset, 8, 8) as *mut u64;
        // SAFETY: as in `read_be64`.
        unsafe { p.write_volatile(value.to_be()) }
    }

    /// Copy `dst.len()` bytes starting at `offset` out of the region: byte
    /// loads up to an 8-byte boundary, then 8-byte volatile loads, then
    /// the tail (mailboxes and whole CQEs move a word at a time).
    pub fn read_bytes(&self, offset: usize, dst: &mut [u8]) {
        let base = self.ptr_at(offset, dst.len(), 1);
        let head = base.align_offset(8).min(dst.len());
        let (h, rest) = dst.split_at_mut(head);
        for (i, byte) in h.iter_mut().enumerate() {
            // SAFETY: `base + i` is in bounds because `offset + dst.len()` was
            // checked against the region length.
            *byte = unsafe { base.add(i).read_volatile() };
        }
        let mut words = rest.chunks_exact_mut(8);
        let mut at = head;
        for w in &mut words {
            // SAFETY: `base + at` is 8-byte aligned (past the head) and
            // `at + 8 <= dst.len()`, inside the checked range.
            let v = unsafe { (base.add(at) as *const u64).read_volatile() };
            w.copy_from_slice(&v.to_ne_bytes());
            at += 8;
        }
        for (i, byte) in words.into_remainder().iter_mut().enumerate() {
            // SAFETY: in bounds, as above.
            *byte = unsafe { base.add(at + i).read_volatile() };
        }
    }

    /// Copy `src` into the region starting at `offset`, a word at a time
    /// where aligned (see [`DmaRegion::read_bytes`]).
    pub fn write_bytes(&self, offset: usize, src: &[u8]) {
        let base = self.ptr_at(offset, src.len(), 1);
        let head = base.align_offset(8).min(src.len());
        let (h, rest) = src.split_at(head);
        for (i, byte) in h.iter().enumerate() {
            // SAFETY: as in `read_bytes`.
            unsafe { base.add(i).write_volatile(*byte) };
        }
        let mut words = rest.chunks_exact(8);
        let mut at = head;
        for w in &mut words {
            let v = u64::from_ne_bytes(w.try_into().expect("8-byte chunk"));
            // SAFETY: aligned and in bounds, as in `read_bytes`.
            unsafe { (base.add(at) as *mut u64).write_volatile(v) };
            at += 8;
        }
        for (i, byte) in words.remainder().iter().enumerate() {
            // SAFETY: as in `read_bytes`.
            unsafe { base.add(at + i).write_volatile(*byte) };
        }
    }

    /// Set `len` bytes starting at `offset` to `value`, a word at a time
    /// where aligned.
    pub fn fill(&self, offset: usize, len: usize, value: u8) {
        let base = self.ptr_at(offset, len, 1);
        let head = base.align_offset(8).min(len);
        let word = u64::from_ne_bytes([value; 8]);
        let mut at = 0;
        while at < head {
            // SAFETY: as in `read_bytes`.
            unsafe { base.add(at).write_volatile(value) };
            at += 1;
        }
        while at + 8 <= len {
            // SAFETY: aligned (past the head) and in bounds.
            unsafe { (base.add(at) as *mut u64).write_volatile(word) };
            at += 8;
        }
        while at < len {
            // SAFETY: as in `read_bytes`.
            unsafe { base.add(at).write_volatile(value) };
            at += 1;
        }
    }

    /// Copy `count` entries of `S` bytes from `src` (starting at
    /// `src_offset`) into this region (starting at `offset`), XOR-ing every
    /// entry with `mask` on the way; an all-zero mask is a plain copy.
    ///
    /// Both ranges are bounds-checked once, must be 8-byte aligned and, when
    /// `src` is this region, must not overlap (all checked: a panic, never a
    /// torn copy). The accesses are volatile 8-byte words (a plain loop:
    /// the CQ resize copy runs once per resize). No order among the stores
    /// is promised: publish to a concurrent reader with a barrier and a
    /// separate store afterwards.
    #[inline]
    pub fn copy_entries_from<const S: usize>(
        &self,
        offset: usize,
        src: &DmaRegion<H>,
        src_offset: usize,
        count: usize,
        mask: &[u8; S],
    ) {
        let Some(bytes) = count.checked_mul(S) else {
            out_of_range(offset, usize::MAX, self.raw.len)
        };
        let d = self.ptr_at(offset, bytes, 8);
        let s = src.ptr_at(src_offset, bytes, 8);
        if (d as usize) < s as usize + bytes && (s as usize) < d as usize + bytes {
            overlapping(src_offset, offset, bytes);
        }
        // SAFETY: both ranges were bounds-checked against their regions
        // (live while `self` and `src` are borrowed) and are 8-byte aligned;
        // they do not overlap (checked just above).
        unsafe { crate::copy::copy_entries_xor::<S>(d, s, count, mask) }
    }
}

#[cold]
#[inline(never)]
fn out_of_range(offset: usize, size: usize, len: usize) -> ! {
    panic!("DMA access {offset:#x}+{size} outside region of {len:#x} bytes")
}

#[cold]
#[inline(never)]
fn overlapping(src: usize, dst: usize, len: usize) -> ! {
    panic!("DMA copy of {len:#x} bytes from {src:#x} to {dst:#x}: the ranges overlap")
}

#[cold]
#[inline(never)]
fn unaligned(offset: usize) -> ! {
    panic!("unaligned DMA access at {offset:#x}")
}

impl<H: Hal> Drop for DmaRegion<H> {
    fn drop(&mut self) {
        let raw = RawDma {
            vaddr: self.raw.vaddr,
            iova: self.raw.iova,
            len: self.raw.len,
        };
        // SAFETY: the region came from this platform's `alloc_dma_raw` (contract of
        // `from_raw`), is freed exactly once here, and the owner drops it only
        // after the firmware object using it is gone (driver invariant).
        unsafe { self.hal.free_dma_raw(raw) };
    }
}

impl<H: Hal> core::fmt::Debug for DmaRegion<H> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DmaRegion")
            .field("iova", &format_args!("{:#x}", self.raw.iova))
            .field("len", &self.raw.len)
            .finish()
    }
}

#[cfg(test)]
pub(crate) mod tests;
