//! The [`Hal`] implementation of [`VfioPlatform`]: MMIO on the BAR0
//! mapping, DMA from the device's pool, the monotonic clock, and interrupt
//! waits on the vectors' eventfds. Its `// SAFETY:` comment argues each
//! obligation of `Hal` from the parts in the sibling modules: `Bar`
//! (`crate::bar`), the pool (`crate::dma`) and the open sequence (`open`).

use std::time::{Duration, Instant};

use mlx5_hal::{Hal, HalError, RawDma};

use super::device::{lock, pool_error, ContainerMapper};
use super::VfioPlatform;
use crate::dma::DmaPool;

impl VfioPlatform {
    fn absorb_notices(&self, pool: &mut DmaPool<ContainerMapper>) {
        let new = pool.take_notices();
        if !new.is_empty() {
            lock(&self.inner.notices).extend(new);
        }
    }
}

// SAFETY: the obligations of `Hal`, one by one:
// 1. MMIO: every `mmio_*` goes to `Bar`, the mmap of BAR0 of the one VFIO
//    device this value owns (region index 0 at the kernel-given offset,
//    checked mappable: `VfioPlatform::open`, in `open.rs`). `Bar::at` (in
//    `crate::bar`) panics for offsets outside BAR0 or not aligned to the
//    width, so no other memory is touched. Each method is one volatile
//    load/store of exactly the stated width (u32, or u64 as one store on the
//    64-bit targets this crate compiles for), so accesses are neither split,
//    merged, cached nor reordered by this code; the byte order is converted
//    with `from_be`/`to_be`.
// 2. DMA: `alloc_dma_raw` comes from `DmaPool::alloc` (in `crate::dma`):
//    fresh anonymous mmaps (zeroed by the kernel) or carved pieces zeroed
//    with volatile stores; page aligned; one host mapping and one IOVA block
//    per region, so contiguous in both views; never handed out twice while
//    live (the IOVA allocator and the chunk sub-allocators refuse overlaps);
//    mapped read/write in the IOMMU with `VFIO_IOMMU_MAP_DMA` before it is
//    returned and unmapped only in `free_dma_raw` (or at teardown, after the
//    last clone is gone: `Inner::teardown`, in `device.rs`). x86_64 and
//    aarch64 VFIO DMA is cache-coherent for the write-back pages used here.
// 3. Isolation: the device sits behind the IOMMU (VFIO type1 refuses a
//    group without one), whose only mappings are the pool's live regions:
//    device writes can land nowhere else.
// 4. Time: `now_ns` is `Instant` (CLOCK_MONOTONIC on Linux) since a fixed
//    origin, so it never goes backwards; `delay_us` spins or sleeps on the
//    same clock for at least the requested time.
unsafe impl Hal for VfioPlatform {
    fn bar0_size(&self) -> usize {
        self.inner.bar0.len
    }

    #[inline(always)]
    fn mmio_read32(&self, offset: usize) -> u32 {
        u32::from_be(self.inner.bar0.read32(offset))
    }

    #[inline(always)]
    fn mmio_write32(&self, offset: usize, value: u32) {
        self.inner.bar0.write32(offset, value.to_be())
    }

    #[inline(always)]
    fn mmio_write64(&self, offset: usize, value: u64) {
        self.inner.bar0.write64(offset, value.to_be())
    }

    fn alloc_dma_raw(&self, size: usize) -> Result<RawDma, HalError> {
        let mut pool = lock(&self.inner.dma);
        let r = pool.alloc(size);
        self.absorb_notices(&mut pool);
        r
    }

    unsafe fn free_dma_raw(&self, region: RawDma) {
        if let Err(e) = lock(&self.inner.dma).free(region.iova, region.len) {
            log::error!(
                "mlx5-vfio: free_dma_raw of {:#x}+{:#x}: {}",
                region.iova,
                region.len,
                pool_error(e)
            );
        }
    }

    fn now_ns(&self) -> u64 {
        self.inner.origin.elapsed().as_nanos() as u64
    }

    fn irq_vectors(&self) -> u16 {
        self.inner.irq.as_ref().map_or(0, |i| i.vectors.len())
    }

    /// `ppoll` on the eventfds of the vectors in `vectors` for at most
    /// `timeout_ns`, then a read of each that fired (which clears it).
    /// Bits at or above [`Hal::irq_vectors`] are ignored; a mask naming no
    /// vector is [`HalError::InvalidRequest`]; without interrupts,
    /// [`HalError::Unsupported`]; a failed `ppoll` or `read` is
    /// [`HalError::Platform`] with its errno. Signals do not end the wait
    /// early. Allocates nothing.
    fn wait_irq(&self, vectors: u64, timeout_ns: u64) -> Result<u64, HalError> {
        match &self.inner.irq {
            Some(i) => i.vectors.wait(vectors, timeout_ns),
            None => Err(HalError::Unsupported),
        }
    }

    fn delay_us(&self, us: u32) {
        let d = Duration::from_micros(u64::from(us));
        if us < 100 {
            // A sleep this short mostly measures the scheduler: spin instead.
            let start = Instant::now();
            while start.elapsed() < d {
                std::hint::spin_loop();
            }
        } else {
            std::thread::sleep(d);
        }
    }
}
