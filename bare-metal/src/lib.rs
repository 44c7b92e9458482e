//! # mlx5-bare-metal: the platform for an identity-mapped machine
//!
//! A worked [`mlx5_hal::Hal`] for unikernels and appliances that own the
//! machine: no IOMMU, device address = physical address, DMA memory from a
//! static pool the image reserves, time from the TSC.
//!
//! ```no_run
//! use mlx5_bare_metal::{DmaPool, IdentityHal};
//!
//! // 4 MiB of DMA memory in the image's .bss (1024 pages of 4 KiB).
//! static POOL: DmaPool<1024> = DmaPool::new();
//!
//! // BAR0 address from PCI config space (mapped uncached by the unikernel),
//! // its size, the TSC frequency from the platform, and how virtual
//! // addresses map to physical ones (identity here).
//! let bar0 = 0xf000_0000 as *mut u8;
//! // SAFETY: the caller owns the function at that BAR, it is mapped
//! // uncached for 32 MiB, the pool is identity-mapped, and bus mastering is on.
//! let hal = unsafe { IdentityHal::new(bar0, 32 << 20, &POOL, 2_400_000_000, 0) };
//! // let hca = mlx5_driver::Hca::bring_up(hal, Default::default())?;
//! # let _ = hal;
//! ```
//!
//! The same platform runs on a host array standing in for BAR0, as this
//! crate's tests run it (no device answers the registers):
//!
//! ```
//! use mlx5_bare_metal::{DmaPool, IdentityHal};
//! use mlx5_hal::{Hal, HalError, PAGE_SIZE};
//!
//! static POOL: DmaPool<16> = DmaPool::new();
//! let bar0: &'static mut [u64] = Box::leak(vec![0u64; 512].into_boxed_slice());
//! // SAFETY: the "BAR" is a host array nothing else uses, alive for the
//! // rest of the program; the pool is static and identity-mapped; no device
//! // is there to write anywhere.
//! let hal = unsafe { IdentityHal::new(bar0.as_mut_ptr().cast(), 4096, &POOL, 1_000_000_000, 0) };
//!
//! // Registers are big-endian, and an access outside BAR0 panics.
//! hal.mmio_write32(0x18, 1);
//! assert_eq!(hal.mmio_read32(0x18), 1);
//!
//! // DMA memory comes from the pool; its device address is its physical
//! // address, here its virtual one.
//! let before = POOL.free_pages();
//! let region = hal.alloc_dma(3 * PAGE_SIZE)?;
//! assert_eq!(region.iova(), region.as_ptr() as u64);
//! assert_eq!(POOL.free_pages(), before - 3);
//! drop(region);
//! assert_eq!(POOL.free_pages(), before);
//! assert!(hal.alloc_dma(17 * PAGE_SIZE).is_err(), "more than the pool holds");
//! # Ok::<(), HalError>(())
//! ```
//!
//! The pool is a first-fit page allocator guarded by a spin lock; it needs
//! no heap. Interrupts are optional: with an [`IrqHook`]
//! ([`IdentityHal::with_irq`]) the driver's blocking waits sleep in the
//! integrator's wait; without one they poll. Everything here is `no_std`; CI builds it for
//! `x86_64-unknown-none`. See `docs/bare-metal.md`.
#![no_std]
#![deny(missing_docs)]

use core::cell::UnsafeCell;
use core::ptr::NonNull;

use mlx5_hal::{Hal, HalError, RawDma, MAX_IRQ_VECTORS, PAGE_SIZE};

mod cell;
pub use cell::StaticCell;

/// One 4 KiB page of the pool.
#[repr(C, align(4096))]
pub struct Page(UnsafeCell<[u8; PAGE_SIZE]>);

/// A static pool of `PAGES` pages handed out as contiguous DMA regions.
pub struct DmaPool<const PAGES: usize> {
    pages: [Page; PAGES],
    used: spin::Mutex<[bool; PAGES]>,
}

// SAFETY: page memory is only reached through regions handed out under the
// `used` lock, each to exactly one owner, and only with raw-pointer volatile
// accesses (the mlx5-hal DmaRegion rule); the bookkeeping is behind a lock.
unsafe impl<const PAGES: usize> Sync for DmaPool<PAGES> {}

impl<const PAGES: usize> DmaPool<PAGES> {
    /// An empty pool (usable in a `static`).
    pub const fn new() -> Self {
        DmaPool {
            pages: [const { Page(UnsafeCell::new([0; PAGE_SIZE])) }; PAGES],
            used: spin::Mutex::new([false; PAGES]),
        }
    }

    /// Pages not handed out.
    pub fn free_pages(&self) -> usize {
        self.used.lock().iter().filter(|u| !**u).count()
    }

    fn base(&self) -> *mut u8 {
        self.pages.as_ptr() as *mut u8
    }

    /// Take `n` contiguous pages, first fit; returns the first page index.
    fn take(&self, n: usize) -> Option<usize> {
        let mut used = self.used.lock();
        let mut run = 0;
        for i in 0..PAGES {
            if used[i] {
                run = 0;
                continue;
            }
            run += 1;
            if run == n {
                let first = i + 1 - n;
                used[first..=i].iter_mut().for_each(|u| *u = true);
                return Some(first);
            }
        }
        None
    }

    fn give_back(&self, first: usize, n: usize) {
        let mut used = self.used.lock();
        for u in &mut used[first..first + n] {
            assert!(*u, "double free of DMA pool page");
            *u = false;
        }
    }
}

impl<const PAGES: usize> Default for DmaPool<PAGES> {
    fn default() -> Self {
        Self::new()
    }
}

/// Object-safe view of a pool of any size, so the platform type does not
/// carry the pool size.
pub trait PagePool: Sync {
    /// Allocate `n` contiguous zeroed pages; CPU pointer of the first.
    fn alloc_pages(&self, n: usize) -> Option<NonNull<u8>>;
    /// Free `n` pages starting at `ptr` (from `alloc_pages`).
    fn free_pages_at(&self, ptr: NonNull<u8>, n: usize);
}

impl<const PAGES: usize> PagePool for DmaPool<PAGES> {
    fn alloc_pages(&self, n: usize) -> Option<NonNull<u8>> {
        if n == 0 || n > PAGES {
            return None;
        }
        let first = self.take(n)?;
        // SAFETY: `first + n <= PAGES`, so the offset stays inside `pages`.
        let p = unsafe { self.base().add(first * PAGE_SIZE) };
        for i in 0..n * PAGE_SIZE {
            // SAFETY: in bounds (above); the pages were just taken under the
            // lock, so nobody else (CPU or device) uses them yet.
            unsafe { p.add(i).write_volatile(0) };
        }
        NonNull::new(p)
    }

    fn free_pages_at(&self, ptr: NonNull<u8>, n: usize) {
        let off = ptr.as_ptr() as usize - self.base() as usize;
        assert!(off.is_multiple_of(PAGE_SIZE) && off / PAGE_SIZE + n <= PAGES);
        self.give_back(off / PAGE_SIZE, n);
    }
}

/// The integrator's interrupt delivery, for [`IdentityHal::with_irq`]:
/// the unikernel programs the function's MSI-X table (or its interrupt
/// controller) itself and hands the driver a wait on those vectors.
///
/// `wait` has the contract of [`Hal::wait_irq`]: it returns the vectors of
/// its mask that fired since they were last returned (and forgets them),
/// or 0 after about `timeout_ns`; an interrupt that fires between two
/// calls stays latched (an interrupt handler that sets a bit in an atomic
/// word, and a wait that sleeps with `hlt`/`wfi` until the bit or a timer
/// comes, is enough). Without a hook the driver polls its event queues.
#[derive(Clone, Copy, Debug)]
pub struct IrqHook {
    /// Vectors routed to the wait (`eqc.intr` values `0..vectors`), at most
    /// [`MAX_IRQ_VECTORS`].
    pub vectors: u16,
    /// Wait for any vector of the mask; returns the vectors that fired.
    pub wait: fn(vectors: u64, timeout_ns: u64) -> u64,
}

/// The platform: BAR0 by pointer, DMA from a static pool, TSC time, and
/// optionally interrupts ([`IrqHook`]).
#[derive(Clone, Copy)]
pub struct IdentityHal {
    bar0: NonNull<u8>,
    bar0_len: usize,
    pool: &'static dyn PagePool,
    tsc_hz: u64,
    phys_offset: u64,
    irq: Option<&'static IrqHook>,
}

// SAFETY: the BAR pointer is device memory shared by design (the driver
// serialises command submission itself); the pool is `Sync`.
unsafe impl Send for IdentityHal {}
// SAFETY: as above; every method takes `&self` and touches either MMIO
// (single volatile accesses) or the locked pool.
unsafe impl Sync for IdentityHal {}

/// The pool of [`IdentityHal::UNSET`]: no page, ever.
struct NoPages;

impl PagePool for NoPages {
    fn alloc_pages(&self, _n: usize) -> Option<NonNull<u8>> {
        None
    }
    fn free_pages_at(&self, _ptr: NonNull<u8>, _n: usize) {
        unreachable!("NoPages hands out no page, so none comes back")
    }
}

impl IdentityHal {
    /// A platform that reaches nothing: no BAR0 (every MMIO access panics
    /// on the bounds check before touching memory), no DMA memory (every
    /// allocation fails), a clock. The placeholder of an `Hca` made in a
    /// `static` with `Hca::new_down`, replaced at
    /// `Hca::bring_up_in_place`.
    pub const UNSET: IdentityHal = IdentityHal {
        bar0: NonNull::dangling(),
        bar0_len: 0,
        pool: &NoPages,
        tsc_hz: 1,
        phys_offset: 0,
        irq: None,
    };

    /// Build the platform.
    ///
    /// # Safety
    ///
    /// - `bar0` maps BAR0 of one mlx5 function, uncached, for `bar0_len`
    ///   bytes, for as long as any copy of the value lives, and nothing else
    ///   drives that function.
    /// - Pool memory's physical address is its virtual address minus
    ///   `phys_offset` (0 when identity-mapped), and the device may DMA to it
    ///   (bus mastering enabled).
    /// - Without an IOMMU nothing stops the device from writing elsewhere:
    ///   the driver only programs addresses of regions it allocated here.
    ///
    /// Panics if `bar0` is null or not 8-byte aligned (a BAR is page
    /// aligned; the 64-bit doorbell store needs the alignment).
    pub unsafe fn new(
        bar0: *mut u8,
        bar0_len: usize,
        pool: &'static dyn PagePool,
        tsc_hz: u64,
        phys_offset: u64,
    ) -> Self {
        assert!(
            (bar0 as usize).is_multiple_of(8),
            "BAR0 pointer {bar0:p} not 8-byte aligned"
        );
        IdentityHal {
            bar0: NonNull::new(bar0).expect("BAR0 pointer is null"),
            bar0_len,
            pool,
            tsc_hz: tsc_hz.max(1),
            phys_offset,
            irq: None,
        }
    }

    /// The same platform with interrupts: the driver puts its EQs on the
    /// hook's vectors and sleeps in its `wait` instead of polling
    /// (`Hca::wait_for_events`). Without it (the default) waits poll with
    /// a back-off. Set it before bring-up: the EQs get their vectors then.
    /// The hook is a `static` (every copy of the platform, one per DMA
    /// region, stays one pointer larger only).
    pub const fn with_irq(mut self, hook: &'static IrqHook) -> Self {
        self.irq = Some(hook);
        self
    }

    fn reg(&self, offset: usize, width: usize) -> *mut u8 {
        assert!(
            offset.is_multiple_of(width) && offset + width <= self.bar0_len,
            "MMIO access {offset:#x} outside BAR0 or unaligned"
        );
        // SAFETY: in bounds of the BAR mapping (checked above).
        unsafe { self.bar0.as_ptr().add(offset) }
    }
}

/// Read the time-stamp counter.
#[cfg(target_arch = "x86_64")]
fn ticks() -> u64 {
    // SAFETY: RDTSC has no memory effects and is available on every x86_64.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Read the virtual counter (CNTVCT_EL0) on aarch64.
#[cfg(target_arch = "aarch64")]
fn ticks() -> u64 {
    let v: u64;
    // SAFETY: reading CNTVCT_EL0 has no side effects; EL0 access is enabled
    // on every platform a unikernel runs this on.
    unsafe { core::arch::asm!("mrs {}, cntvct_el0", out(reg) v, options(nomem, nostack)) };
    v
}

// SAFETY: (1) MMIO: single volatile accesses inside the caller-promised BAR
// mapping, bounds- and alignment-checked, converted from/to big-endian.
// (2) DMA: pool pages are page aligned, zeroed on allocation, contiguous in
// virtual and (identity mapping, `new` contract) physical space, handed to
// one owner until freed. (3) No IOMMU: the `new` contract makes the driver
// the guard. (4) The TSC/counter is monotonic on the platforms supported.
unsafe impl Hal for IdentityHal {
    fn bar0_size(&self) -> usize {
        self.bar0_len
    }

    fn mmio_read32(&self, offset: usize) -> u32 {
        let p = self.reg(offset, 4) as *const u32;
        // SAFETY: in bounds, aligned, device memory mapped per `new`.
        u32::from_be(unsafe { p.read_volatile() })
    }

    fn mmio_write32(&self, offset: usize, value: u32) {
        let p = self.reg(offset, 4) as *mut u32;
        // SAFETY: as in `mmio_read32`.
        unsafe { p.write_volatile(value.to_be()) }
    }

    fn mmio_write64(&self, offset: usize, value: u64) {
        let p = self.reg(offset, 8) as *mut u64;
        // SAFETY: as in `mmio_read32`; one 64-bit store.
        unsafe { p.write_volatile(value.to_be()) }
    }

    fn alloc_dma_raw(&self, size: usize) -> Result<RawDma, HalError> {
        if size == 0 {
            return Err(HalError::InvalidRequest);
        }
        let n = size.div_ceil(PAGE_SIZE);
        let vaddr = self
            .pool
            .alloc_pages(n)
            .ok_or(HalError::OutOfDmaMemory { requested: size })?;
        Ok(RawDma {
            vaddr,
            iova: vaddr.as_ptr() as u64 - self.phys_offset,
            len: n * PAGE_SIZE,
        })
    }

    unsafe fn free_dma_raw(&self, region: RawDma) {
        self.pool
            .free_pages_at(region.vaddr, region.len / PAGE_SIZE);
    }

    fn now_ns(&self) -> u64 {
        (ticks() as u128 * 1_000_000_000 / self.tsc_hz as u128) as u64
    }

    fn delay_us(&self, us: u32) {
        let end = self.now_ns() + us as u64 * 1000;
        while self.now_ns() < end {
            core::hint::spin_loop();
        }
    }

    fn irq_vectors(&self) -> u16 {
        self.irq.map_or(0, |h| h.vectors.min(MAX_IRQ_VECTORS))
    }

    fn wait_irq(&self, vectors: u64, timeout_ns: u64) -> Result<u64, HalError> {
        match self.irq {
            Some(h) => Ok((h.wait)(vectors, timeout_ns)),
            None => Err(HalError::Unsupported),
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    static POOL: DmaPool<16> = DmaPool::new();

    /// The test "BAR" is `u64`-backed: 8-byte aligned like a real BAR
    /// (Miri caught 64-bit doorbell stores into a `u32` array).
    fn hal(bar: &'static mut [u64]) -> IdentityHal {
        let len = bar.len();
        hal_raw(bar.as_mut_ptr(), len)
    }

    /// From a raw pointer, so a test can keep reading the "BAR" through the
    /// same pointer (a pointer taken from a shared borrow before `hal(bar)`
    /// reborrowed it mutably is invalid: Miri, Stacked Borrows).
    fn hal_raw(bar: *mut u64, words: usize) -> IdentityHal {
        // SAFETY: the "BAR" is a leaked host array; the pool is static;
        // there is no device.
        unsafe { IdentityHal::new(bar as *mut u8, words * 8, &POOL, 1_000_000_000, 0) }
    }

    static LATCHED: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

    fn test_wait(vectors: u64, _timeout_ns: u64) -> u64 {
        LATCHED.fetch_and(!vectors, core::sync::atomic::Ordering::AcqRel) & vectors
    }

    #[test]
    fn interrupts_come_from_the_hook_or_not_at_all() {
        let bar = std::boxed::Box::leak(std::vec![0u64; 512].into_boxed_slice());
        let h = hal(bar);
        assert_eq!(h.irq_vectors(), 0, "no hook: the driver polls");
        assert_eq!(h.wait_irq(1, 0).unwrap_err(), HalError::Unsupported);
        static HOOK: IrqHook = IrqHook {
            vectors: 200,
            wait: test_wait,
        };
        let h = h.with_irq(&HOOK);
        assert_eq!(h.irq_vectors(), MAX_IRQ_VECTORS, "clamped");
        LATCHED.store(0b101, core::sync::atomic::Ordering::Release);
        assert_eq!(h.wait_irq(0b001, 0).unwrap(), 0b001);
        assert_eq!(
            h.wait_irq(0b111, 0).unwrap(),
            0b100,
            "the rest stays latched"
        );
        assert_eq!(h.wait_irq(0b111, 0).unwrap(), 0);
    }

    #[test]
    fn unset_reaches_nothing() {
        let hal = IdentityHal::UNSET;
        assert_eq!(hal.bar0_size(), 0);
        assert_eq!(
            hal.alloc_dma_raw(4096).unwrap_err(),
            HalError::OutOfDmaMemory { requested: 4096 }
        );
        let mmio = std::panic::catch_unwind(|| IdentityHal::UNSET.mmio_read32(0));
        assert!(mmio.is_err(), "MMIO outside the (empty) BAR0 panics");
    }

    #[test]
    fn pool_hands_out_contiguous_zeroed_pages_and_takes_them_back() {
        let bar = std::boxed::Box::leak(std::vec![0u64; 512].into_boxed_slice());
        let h = hal(bar);
        let before = POOL.free_pages();
        let a = h.alloc_dma(3 * PAGE_SIZE).unwrap();
        let b = h.alloc_dma(1).unwrap();
        assert_eq!(a.len(), 3 * PAGE_SIZE);
        assert_eq!(b.iova(), a.iova() + 3 * PAGE_SIZE as u64, "first fit");
        assert_eq!(a.iova() % PAGE_SIZE as u64, 0);
        a.write_be32(8, 0xdead_beef);
        drop(a);
        let c = h.alloc_dma(2 * PAGE_SIZE).unwrap();
        assert_eq!(c.read_be32(8), 0, "reused pages are zeroed again");
        assert!(h.alloc_dma(64 * PAGE_SIZE).is_err(), "larger than the pool");
        drop((b, c));
        assert_eq!(POOL.free_pages(), before);
    }

    #[test]
    fn mmio_is_big_endian_and_bounds_checked() {
        let bar = std::boxed::Box::leak(std::vec![0u64; 512].into_boxed_slice());
        let ptr = bar.as_mut_ptr();
        let h = hal_raw(ptr, 512);
        h.mmio_write32(0x18, 1);
        // SAFETY: reading back the leaked test array.
        assert_eq!(unsafe { (ptr as *const u32).add(6).read() }, 1u32.to_be());
        assert_eq!(h.mmio_read32(0x18), 1);
        h.mmio_write64(0x20, 0x0102_0304_0506_0708);
        assert_eq!(h.mmio_read32(0x20), 0x0102_0304);
        assert_eq!(h.mmio_read32(0x24), 0x0506_0708);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h.mmio_read32(4096)));
        assert!(r.is_err());
    }

    #[test]
    fn time_advances() {
        let bar = std::boxed::Box::leak(std::vec![0u64; 2].into_boxed_slice());
        let h = hal(bar);
        let t0 = h.now_ns();
        h.delay_us(50);
        assert!(h.now_ns() >= t0 + 50_000);
    }
}
