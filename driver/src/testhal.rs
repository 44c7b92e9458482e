//! A host-memory platform for unit tests: DMA from the global allocator,
//! IOVA = address + offset, no BAR (reads are 0; 64-bit doorbell stores are
//! recorded), a live-region counter.
extern crate std;

use core::ptr::NonNull;
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::vec::Vec;

use mlx5_hal::{Hal, HalError, RawDma, PAGE_SIZE};

#[derive(Clone)]
pub(crate) struct TestHal {
    live: Arc<AtomicUsize>,
    doorbells: Arc<Mutex<Vec<(usize, u64)>>>,
    write_combining: bool,
}

const IOVA_SHIFT: u64 = 0x5500_0000_0000;

impl TestHal {
    pub(crate) fn new() -> Self {
        TestHal {
            live: Arc::new(AtomicUsize::new(0)),
            doorbells: Arc::new(Mutex::new(Vec::new())),
            write_combining: false,
        }
    }
    /// A platform that maps the UAR write-combining (BlueFlame copies).
    pub(crate) fn write_combining() -> Self {
        TestHal {
            write_combining: true,
            ..TestHal::new()
        }
    }
    pub(crate) fn live(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }
    /// Every 64-bit MMIO store so far, as (offset, value).
    pub(crate) fn doorbells(&self) -> Vec<(usize, u64)> {
        self.doorbells.lock().unwrap().clone()
    }
}

// SAFETY: memory comes from the global allocator, zeroed, page aligned and
// unaliased; there is no device; the clock is constant.
unsafe impl Hal for TestHal {
    fn bar0_size(&self) -> usize {
        0
    }
    fn mmio_read32(&self, _offset: usize) -> u32 {
        0
    }
    fn mmio_write32(&self, _offset: usize, _value: u32) {}
    fn mmio_write64(&self, offset: usize, value: u64) {
        self.doorbells.lock().unwrap().push((offset, value));
    }
    fn alloc_dma_raw(&self, size: usize) -> Result<RawDma, HalError> {
        if size == 0 {
            return Err(HalError::InvalidRequest);
        }
        let len = size.div_ceil(PAGE_SIZE) * PAGE_SIZE;
        let layout =
            Layout::from_size_align(len, PAGE_SIZE).map_err(|_| HalError::InvalidRequest)?;
        // SAFETY: non-zero size.
        let p = unsafe { alloc_zeroed(layout) };
        let vaddr = NonNull::new(p).ok_or(HalError::OutOfDmaMemory { requested: size })?;
        self.live.fetch_add(1, Ordering::SeqCst);
        Ok(RawDma {
            vaddr,
            iova: p as u64 + IOVA_SHIFT,
            len,
        })
    }
    unsafe fn free_dma_raw(&self, region: RawDma) {
        let layout = Layout::from_size_align(region.len, PAGE_SIZE).expect("layout");
        // SAFETY: allocated above with this layout (caller contract).
        unsafe { dealloc(region.vaddr.as_ptr(), layout) };
        self.live.fetch_sub(1, Ordering::SeqCst);
    }
    fn now_ns(&self) -> u64 {
        0
    }
    fn delay_us(&self, _us: u32) {}
    fn write_combining(&self) -> bool {
        self.write_combining
    }
}
