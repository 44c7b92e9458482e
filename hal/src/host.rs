//! `HostHal`: a platform made of ordinary host memory, for unit tests and
//! examples (feature `host`, which needs `std`).
//!
//! DMA regions come from the global allocator, zeroed and page aligned, at
//! IOVAs deliberately unlike their host addresses (a fixed high base plus a
//! bump counter). BAR0 is a plain array of registers that records every
//! 64-bit doorbell write. The clock is virtual: `delay_us` advances it.
//! There is no device behind it: tests play the device by writing DMA memory.

extern crate std;

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::sync::{Arc, Mutex};
use std::vec::Vec;

use crate::{Hal, HalError, RawDma, PAGE_SIZE};

#[derive(Default)]
struct State {
    bar: Vec<u32>,
    doorbells64: Vec<(usize, u64)>,
    next_iova: u64,
    live: Vec<(u64, usize, usize)>, // (iova, host address, len)
    clock_ns: u64,
    dma_limit: Option<usize>,
    dma_in_use: usize,
}

/// Host-memory platform; cheap to clone (shared state).
#[derive(Clone)]
pub struct HostHal {
    state: Arc<Mutex<State>>,
}

/// First IOVA handed out: high, and never a plausible host address.
pub const HOST_IOVA_BASE: u64 = 0x00de_ad00_0000_0000;

impl HostHal {
    /// The shared state, also after a test panicked while holding it (so a
    /// failing test does not turn into an abort in a destructor).
    fn st(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A platform with a BAR0 of `bar0_size` bytes (registers read as 0).
    pub fn new(bar0_size: usize) -> Self {
        HostHal {
            state: Arc::new(Mutex::new(State {
                bar: std::vec![0; bar0_size / 4],
                next_iova: HOST_IOVA_BASE,
                ..Default::default()
            })),
        }
    }

    /// Limit the total DMA memory handed out (to test out-of-memory paths).
    pub fn set_dma_limit(&self, bytes: Option<usize>) {
        self.st().dma_limit = bytes;
    }

    /// Live DMA regions.
    pub fn live_regions(&self) -> usize {
        self.st().live.len()
    }

    /// Every 64-bit MMIO write so far, as (offset, value).
    pub fn doorbells64(&self) -> Vec<(usize, u64)> {
        self.st().doorbells64.clone()
    }

    /// Host pointer for a device address inside a live region (tests play
    /// the device with it, through raw volatile accesses only).
    pub fn host_ptr(&self, iova: u64) -> Option<*mut u8> {
        let st = self.st();
        st.live.iter().find_map(|&(base, host, len)| {
            (iova >= base && iova < base + len as u64)
                .then(|| (host + (iova - base) as usize) as *mut u8)
        })
    }
}

// SAFETY: (1) BAR0 is a plain array inside this value; offsets are bounds- and
// alignment-checked (panic otherwise). (2) DMA memory comes from the global
// allocator: zeroed, page aligned, contiguous, unaliased, valid until freed.
// (3) There is no device; only test code reaches DMA memory, through raw
// pointers. (4) The virtual clock only moves forward.
unsafe impl Hal for HostHal {
    fn bar0_size(&self) -> usize {
        self.st().bar.len() * 4
    }

    fn mmio_read32(&self, offset: usize) -> u32 {
        assert!(
            offset.is_multiple_of(4),
            "unaligned MMIO read at {offset:#x}"
        );
        self.st().bar[offset / 4]
    }

    fn mmio_write32(&self, offset: usize, value: u32) {
        assert!(
            offset.is_multiple_of(4),
            "unaligned MMIO write at {offset:#x}"
        );
        self.st().bar[offset / 4] = value;
    }

    fn mmio_write64(&self, offset: usize, value: u64) {
        assert!(
            offset.is_multiple_of(8),
            "unaligned 64-bit MMIO write at {offset:#x}"
        );
        let mut st = self.st();
        st.bar[offset / 4] = (value >> 32) as u32;
        st.bar[offset / 4 + 1] = value as u32;
        st.doorbells64.push((offset, value));
    }

    fn alloc_dma_raw(&self, size: usize) -> Result<RawDma, HalError> {
        if size == 0 {
            return Err(HalError::InvalidRequest);
        }
        let len = size.div_ceil(PAGE_SIZE) * PAGE_SIZE;
        let mut st = self.st();
        if st
            .dma_limit
            .is_some_and(|limit| st.dma_in_use + len > limit)
        {
            return Err(HalError::OutOfDmaMemory { requested: size });
        }
        let layout =
            Layout::from_size_align(len, PAGE_SIZE).map_err(|_| HalError::InvalidRequest)?;
        // SAFETY: `layout` has a non-zero size.
        let p = unsafe { alloc_zeroed(layout) };
        let vaddr =
            core::ptr::NonNull::new(p).ok_or(HalError::OutOfDmaMemory { requested: size })?;
        let iova = st.next_iova;
        st.next_iova += len as u64 + PAGE_SIZE as u64; // a guard gap between regions
        st.live.push((iova, p as usize, len));
        st.dma_in_use += len;
        Ok(RawDma { vaddr, iova, len })
    }

    unsafe fn free_dma_raw(&self, region: RawDma) {
        let mut st = self.st();
        let pos = st
            .live
            .iter()
            .position(|&(iova, _, _)| iova == region.iova)
            .expect("freeing a region this platform did not hand out");
        st.live.swap_remove(pos);
        st.dma_in_use -= region.len;
        let layout = Layout::from_size_align(region.len, PAGE_SIZE).expect("layout");
        // SAFETY: allocated in `alloc_dma_raw` with this layout; the caller
        // guarantees it is freed once and no longer used.
        unsafe { dealloc(region.vaddr.as_ptr(), layout) };
    }

    fn now_ns(&self) -> u64 {
        self.st().clock_ns
    }

    fn delay_us(&self, us: u32) {
        self.st().clock_ns += us as u64 * 1000;
    }
}
