//! The device's view of DMA memory: an IOVA space with a translation table.
//!
//! `SimHal::alloc_dma_raw` hands out host memory (page aligned, zeroed) mapped at
//! IOVAs from a random high base derived from the seed, so an IOVA never looks
//! like a host pointer. Regions are separated by unmapped guard gaps and IOVAs
//! are never reused, so a stale or overrunning address faults. The device
//! reaches memory only through [`DmaSpace::read`] / [`DmaSpace::write`]:
//! volatile raw-pointer accesses after translation, never Rust references
//! (the driver writes the same memory concurrently in threaded mode).

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::cell::Cell;
use std::collections::BTreeMap;

use mlx5_hal::PAGE_SIZE;

/// A device access outside the DMA memory the driver allocated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IommuFault {
    /// First device address of the access.
    pub iova: u64,
    /// Length of the access in bytes.
    pub len: usize,
    /// True for a device write.
    pub write: bool,
    /// What the device was doing (e.g. "CQE write cqn 0x401").
    pub context: String,
}

#[derive(Debug)]
struct Region {
    /// The page-aligned start handed out.
    host: usize,
    len: usize,
    /// What the allocator returned (`host` rounded down), for `dealloc`.
    block: usize,
}

/// The allocation behind a region of `len` bytes: a page more than asked,
/// at the allocator's natural alignment, so the zeroed memory comes from
/// `calloc`. A page-aligned `alloc_zeroed` is `posix_memalign` + `memset`,
/// which commits every byte at once (a 1 GiB registration benchmark would
/// take 1 GiB of RAM); `calloc` of a large block maps fresh zero pages that
/// cost nothing until touched.
fn block_layout(len: usize) -> Option<Layout> {
    Layout::from_size_align(len.checked_add(PAGE_SIZE)?, 16).ok()
}

/// Entries of the translation cache (a power of two).
const CACHE_SLOTS: usize = 64;

/// One cached translation: the IOVA page looked up, and the region holding
/// it (IOVA, length, host address). Page `u64::MAX` never matches.
#[derive(Debug, Clone, Copy)]
struct Cached {
    page: u64,
    start: u64,
    len: usize,
    host: usize,
}

const EMPTY_SLOT: Cached = Cached {
    page: u64::MAX,
    start: 0,
    len: 0,
    host: 0,
};

/// IOVA gap left unmapped after each region.
const GUARD: u64 = 16 * PAGE_SIZE as u64;

pub(crate) struct DmaSpace {
    /// Memory a host (a VMM) owns: every device access goes through it and
    /// the owned allocator is off ([`crate::host`]).
    pub external: Option<Box<dyn crate::host::DeviceMemory>>,
    next: u64,
    regions: BTreeMap<u64, Region>,
    /// Recent translations, by IOVA page: the data path touches a few
    /// pages over and over (rings, doorbell records, buffers) among
    /// thousands of mapped regions (the firmware's pages), so most
    /// translations skip the table walk. Cleared when a region is unmapped.
    cache: [Cell<Cached>; CACHE_SLOTS],
    pub live_bytes: usize,
    pub limit: usize,
    pub base: u64,
}

/// splitmix64, for seed-derived values.
pub(crate) fn mix(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl DmaSpace {
    pub fn new(seed: u64, limit: usize) -> DmaSpace {
        // Bits 55:48 = 0xa5: far above any canonical user-space pointer, and
        // 32 random bits at 43:12 so two seeds give different layouts.
        let base = 0x00a5_0000_0000_0000 | ((mix(seed) & 0xffff_ffff) << 12);
        DmaSpace {
            external: None,
            next: base,
            regions: BTreeMap::new(),
            cache: [const { Cell::new(EMPTY_SLOT) }; CACHE_SLOTS],
            live_bytes: 0,
            limit,
            base,
        }
    }

    /// Allocate `size` bytes (rounded up to pages). Returns (host, iova, len).
    pub fn alloc(&mut self, size: usize) -> Option<(usize, u64, usize)> {
        if self.external.is_some() {
            return None;
        }
        let len = size.div_ceil(PAGE_SIZE) * PAGE_SIZE;
        if self.live_bytes.checked_add(len)? > self.limit {
            return None;
        }
        let layout = block_layout(len)?;
        // SAFETY: the layout's size is non-zero and valid (checked above).
        let block = unsafe { alloc_zeroed(layout) };
        if block.is_null() {
            return None;
        }
        let host = (block as usize).next_multiple_of(PAGE_SIZE);
        let iova = self.next;
        self.next += len as u64 + GUARD;
        self.regions.insert(
            iova,
            Region {
                host,
                len,
                block: block as usize,
            },
        );
        self.live_bytes += len;
        Some((host, iova, len))
    }

    /// Unmap and free the region at `iova`. Returns false if there is none.
    pub fn free(&mut self, iova: u64, host: usize, len: usize) -> bool {
        let block = match self.regions.get(&iova) {
            Some(r) if r.host == host && r.len == len => r.block,
            _ => return false,
        };
        self.regions.remove(&iova);
        for c in &self.cache {
            c.set(EMPTY_SLOT);
        }
        self.live_bytes -= len;
        let layout = block_layout(len).expect("valid layout");
        // SAFETY: the block was allocated in `alloc` with this layout and the
        // region is removed from the table, so the device can no longer
        // reach it.
        unsafe { dealloc(block as *mut u8, layout) };
        true
    }

    /// Host pointer for `iova .. iova + len` if the whole range lies in one
    /// mapped region.
    fn translate(&self, iova: u64, len: usize) -> Option<*mut u8> {
        let page = iova / PAGE_SIZE as u64;
        let slot = &self.cache[page as usize % CACHE_SLOTS];
        let c = slot.get();
        let (start, rlen, host) = if c.page == page {
            (c.start, c.len, c.host)
        } else {
            let (&start, r) = self.regions.range(..=iova).next_back()?;
            if iova - start < r.len as u64 {
                slot.set(Cached {
                    page,
                    start,
                    len: r.len,
                    host: r.host,
                });
            }
            (start, r.len, r.host)
        };
        let off = iova - start;
        if off.checked_add(len as u64)? > rlen as u64 {
            return None;
        }
        Some((host + off as usize) as *mut u8)
    }

    /// Every mapped region as (IOVA, length), in address order.
    pub fn regions(&self) -> Vec<(u64, usize)> {
        self.regions.iter().map(|(&a, r)| (a, r.len)).collect()
    }

    /// True if the range is mapped.
    pub fn mapped(&self, iova: u64, len: usize) -> bool {
        if let Some(m) = &self.external {
            return m.mapped(iova, len);
        }
        self.translate(iova, len).is_some()
    }

    /// Device read. `None` = IOMMU fault (the caller records it).
    pub fn read(&self, iova: u64, buf: &mut [u8]) -> Option<()> {
        if let Some(m) = &self.external {
            return m.read(iova, buf).then_some(());
        }
        let p = self.translate(iova, buf.len())?;
        if buf.len() == 4 && iova.is_multiple_of(4) {
            // SAFETY: `p` points at 4 mapped, 4-aligned bytes (host and IOVA
            // share the page offset); volatile because the driver writes
            // concurrently. One load so a doorbell record never tears.
            let v = unsafe { (p as *const u32).read_volatile() };
            buf.copy_from_slice(&v.to_ne_bytes());
            return Some(());
        }
        // Bytes up to an 8-byte boundary, then 8-byte volatile words, then
        // the tail: the same bytes as a byte loop, an eighth of the loads.
        let head = p.align_offset(8).min(buf.len());
        let words = (buf.len() - head) / 8;
        for (i, b) in buf[..head].iter_mut().enumerate() {
            // SAFETY: `p + i` lies in the mapped range checked by `translate`.
            *b = unsafe { p.add(i).read_volatile() };
        }
        for w in 0..words {
            let at = head + 8 * w;
            // SAFETY: `p + at .. p + at + 8` lies in the mapped range and
            // `p + at` is 8-byte aligned (`head` aligned it).
            let v = unsafe { (p.add(at) as *const u64).read_volatile() };
            buf[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        }
        let tail = head + 8 * words;
        for (i, b) in buf.iter_mut().enumerate().skip(tail) {
            // SAFETY: `p + i` lies in the mapped range checked by `translate`.
            *b = unsafe { p.add(i).read_volatile() };
        }
        Some(())
    }

    /// Device write. `None` = IOMMU fault.
    pub fn write(&self, iova: u64, data: &[u8]) -> Option<()> {
        if let Some(m) = &self.external {
            return m.write(iova, data).then_some(());
        }
        let p = self.translate(iova, data.len())?;
        let head = p.align_offset(8).min(data.len());
        let words = (data.len() - head) / 8;
        for (i, b) in data[..head].iter().enumerate() {
            // SAFETY: `p + i` lies in the mapped range checked by `translate`.
            unsafe { p.add(i).write_volatile(*b) };
        }
        for w in 0..words {
            let at = head + 8 * w;
            let v = u64::from_ne_bytes(data[at..at + 8].try_into().expect("8 bytes"));
            // SAFETY: `p + at .. p + at + 8` lies in the mapped range and
            // `p + at` is 8-byte aligned (`head` aligned it).
            unsafe { (p.add(at) as *mut u64).write_volatile(v) };
        }
        for (i, b) in data.iter().enumerate().skip(head + 8 * words) {
            // SAFETY: `p + i` lies in the mapped range checked by `translate`.
            unsafe { p.add(i).write_volatile(*b) };
        }
        Some(())
    }
}

impl Drop for DmaSpace {
    fn drop(&mut self) {
        for (_, r) in std::mem::take(&mut self.regions) {
            let layout = block_layout(r.len).expect("valid layout");
            // SAFETY: every region's block came from `alloc_zeroed` with
            // this layout; the device is gone, so nothing can access it. A
            // driver still holding a `DmaRegion` of a dropped device would be
            // a use-after-free, which `SimHal` prevents by keeping the device
            // alive while any handle (and so any region) exists.
            unsafe { dealloc(r.block as *mut u8, layout) };
        }
    }
}
