//! # mlx5-hal: the only door between the mlx5 driver and a machine
//!
//! The driver (`mlx5-driver`) never touches hardware directly. Everything it
//! needs from a platform goes through the [`Hal`] trait defined here:
//!
//! * **MMIO on BAR0**: 32-bit big-endian register reads and writes at a byte
//!   offset (the initialization segment, the command doorbell, the health
//!   buffer) and 64-bit big-endian doorbell writes (UAR pages).
//! * **DMA memory**: zeroed, 4 KiB-aligned, contiguous regions, each with a CPU
//!   pointer and a *device address* (IOVA). The two are never assumed equal.
//!   Regions are owned by the RAII handle [`DmaRegion`], which frees on drop.
//! * **Time**: a monotonic nanosecond clock and a short delay, so every wait in
//!   the driver can be bounded without `std::time`.
//! * **Interrupts** (optional): how many interrupt vectors the platform
//!   delivers from the device, and a bounded wait for some of them
//!   ([`Hal::irq_vectors`], [`Hal::wait_irq`]). A platform without them keeps
//!   the defaults and the driver polls, exactly as it does anyway.
//!
//! Memory ordering between the CPU and the device is expressed with the named
//! barriers of the [`barrier`] module, implemented per architecture.
//!
//! Implementations in this workspace: the Linux VFIO platform (`mlx5-vfio`),
//! the device model (`mlx5-sim`), and the identity-mapped bare-metal example in
//! `docs/bare-metal.md`.
//!
//! The crate is `no_std`, allocation-free and has no dependencies. The
//! optional `host` feature (needs `std`) adds `host::HostHal`, a platform of
//! plain host memory for unit tests.
//!
//! ## Example: a platform, and what the driver asks of it
//!
//! The smallest honest platform: no device behind it (BAR0 reads as zero and
//! ignores writes), DMA memory from the allocator at device addresses unlike
//! the CPU's, and a virtual clock. A real one maps BAR0 and programs an IOMMU
//! (`mlx5-vfio`) or hands out identity-mapped memory (`mlx5-bare-metal`).
//!
//! ```
//! use std::alloc::{alloc_zeroed, dealloc, Layout};
//! use std::ptr::NonNull;
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use std::sync::Arc;
//!
//! use mlx5_hal::{Hal, HalError, RawDma, PAGE_SIZE};
//!
//! #[derive(Clone, Default)]
//! struct NoDevice {
//!     clock_ns: Arc<AtomicU64>,
//! }
//!
//! /// A region's device address: its CPU address moved by a fixed offset, so
//! /// code that mixes up the two fails.
//! const IOVA_OFFSET: u64 = 1 << 40;
//!
//! fn layout(len: usize) -> Layout {
//!     Layout::from_size_align(len, PAGE_SIZE).expect("page-aligned layout")
//! }
//!
//! // SAFETY: there is no device, so nothing but the CPU touches memory; DMA
//! // regions are zeroed, page-aligned, contiguous and owned until
//! // `free_dma_raw`; the clock never goes backwards.
//! unsafe impl Hal for NoDevice {
//!     fn bar0_size(&self) -> usize {
//!         0x1000
//!     }
//!     fn mmio_read32(&self, _offset: usize) -> u32 {
//!         0
//!     }
//!     fn mmio_write32(&self, _offset: usize, _value: u32) {}
//!     fn mmio_write64(&self, _offset: usize, _value: u64) {}
//!     fn alloc_dma_raw(&self, size: usize) -> Result<RawDma, HalError> {
//!         if size == 0 {
//!             return Err(HalError::InvalidRequest);
//!         }
//!         let len = size.div_ceil(PAGE_SIZE) * PAGE_SIZE;
//!         // SAFETY: the layout's size is not zero.
//!         let vaddr = NonNull::new(unsafe { alloc_zeroed(layout(len)) })
//!             .ok_or(HalError::OutOfDmaMemory { requested: size })?;
//!         let iova = vaddr.as_ptr() as u64 + IOVA_OFFSET;
//!         Ok(RawDma { vaddr, iova, len })
//!     }
//!     unsafe fn free_dma_raw(&self, region: RawDma) {
//!         // SAFETY: the caller passes a region `alloc_dma_raw` made with this
//!         // layout, once.
//!         unsafe { dealloc(region.vaddr.as_ptr(), layout(region.len)) }
//!     }
//!     fn now_ns(&self) -> u64 {
//!         self.clock_ns.load(Ordering::Relaxed)
//!     }
//!     fn delay_us(&self, us: u32) {
//!         self.clock_ns.fetch_add(u64::from(us) * 1000, Ordering::Relaxed);
//!     }
//! }
//!
//! let hal = NoDevice::default();
//! // A region is rounded up to whole pages, frees itself on drop, and is
//! // read and written only through volatile, big-endian accessors.
//! let ring = hal.alloc_dma(100)?;
//! assert_eq!(ring.len(), PAGE_SIZE);
//! assert_ne!(ring.iova(), ring.as_ptr() as u64);
//! ring.write_be32(8, 0x1234_5678);
//! assert_eq!(ring.read_u8(8), 0x12);
//! assert_eq!(ring.read_be32(8), 0x1234_5678);
//! assert_eq!(hal.alloc_dma(0).err(), Some(HalError::InvalidRequest));
//! // Every wait of the driver is bounded by this clock.
//! let start = hal.now_ns();
//! hal.delay_us(5);
//! assert_eq!(hal.now_ns() - start, 5_000);
//! # Ok::<(), HalError>(())
//! ```
#![no_std]
#![deny(missing_docs)]

pub mod barrier;
mod copy;
mod dma;
#[cfg(feature = "host")]
pub mod host;
mod ring;

pub use dma::{DmaRegion, DmaWindow, DmaWindows, RawDma};
pub use ring::{RingLayout, RingRegion, RingView};

/// Size of a page as the device sees it (`MLX5_ADAPTER_PAGE_SHIFT = 12`,
/// docs/firmware.md §4.2). Every DMA region is aligned to at least this.
pub const PAGE_SIZE: usize = 4096;

/// Most interrupt vectors a platform reports ([`Hal::irq_vectors`]): the
/// vectors are named by the bits of a `u64` in [`Hal::wait_irq`].
pub const MAX_IRQ_VECTORS: u16 = 64;

/// Errors a platform can report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HalError {
    /// No DMA memory of the requested size could be provided.
    OutOfDmaMemory {
        /// Bytes that were asked for.
        requested: usize,
    },
    /// The request was malformed (for example a zero-sized allocation).
    InvalidRequest,
    /// The platform's own machinery failed (an ioctl, a mapping) with this
    /// OS error number.
    Platform {
        /// The positive OS error number (`errno`).
        errno: i32,
    },
    /// The platform does not offer this (for example interrupts: the default
    /// [`Hal::wait_irq`]).
    Unsupported,
}

impl core::fmt::Display for HalError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            HalError::OutOfDmaMemory { requested } => {
                write!(f, "out of DMA memory ({requested} bytes requested)")
            }
            HalError::InvalidRequest => f.write_str("invalid DMA request"),
            HalError::Platform { errno } => write!(f, "platform error (errno {errno})"),
            HalError::Unsupported => f.write_str("not supported by this platform"),
        }
    }
}

impl core::error::Error for HalError {}

/// The platform a driver instance runs on.
///
/// A `Hal` value is a cheap handle (a reference, an `Arc`, a zero-sized type):
/// the driver clones it into every [`DmaRegion`] so that regions can free
/// themselves on drop.
///
/// # Safety
///
/// Implementors promise, for as long as any clone of the value lives:
///
/// 1. **MMIO.** `mmio_*` access BAR0 of the one device this value stands for.
///    `offset` is a byte offset into BAR0; values are converted from/to the
///    device's big-endian byte order by the implementation. Accesses are single
///    volatile loads/stores of the stated width, never split, merged, cached or
///    reordered with each other by the implementation. An offset outside BAR0
///    or not aligned to the access width may panic; it must never touch other
///    memory.
/// 2. **DMA.** [`Hal::alloc_dma_raw`] returns memory that is zero-filled,
///    aligned to [`PAGE_SIZE`], contiguous in both the CPU view and the
///    device view (IOVA), not aliased by any other live allocation, valid for
///    volatile reads and writes of `len` bytes through `vaddr`, and reachable
///    by the device at `iova .. iova + len` until it is passed to
///    [`Hal::free_dma_raw`]. The memory is coherent with the device cache-wise:
///    the barriers of [`barrier`] are the only ordering a driver must add.
/// 3. **The device cannot reach other memory.** Device writes land only in
///    memory returned by `alloc_dma_raw` (an IOMMU, a model's checked address
///    space, or, on identity-mapped bare metal, a driver that programs only
///    such addresses). This is what makes the MMIO methods safe to call: the
///    device can only disturb memory that the driver accesses through raw
///    pointers with volatile operations, never through Rust references.
/// 4. **Time.** [`Hal::now_ns`] never goes backwards. [`Hal::delay_us`]
///    returns after roughly the given time (it may be longer, or advance a
///    virtual clock instead of sleeping, as long as `now_ns` reflects it).
/// 5. **Interrupts.** If [`Hal::irq_vectors`] returns `n > 0`, vectors
///    `0..n` are the device's interrupt vectors (MSI-X table entries, or the
///    device's own numbering on a platform without PCI) in the numbering the
///    device is programmed with (an EQ's `intr` field), and
///    [`Hal::wait_irq`] latches every interrupt of those vectors that fires
///    after the platform set them up, so none is lost between two waits.
pub unsafe trait Hal: Clone {
    /// Size of BAR0 in bytes.
    fn bar0_size(&self) -> usize;

    /// Read the big-endian 32-bit register at `offset` of BAR0 and return it in
    /// host order.
    fn mmio_read32(&self, offset: usize) -> u32;

    /// Write `value` big-endian to the 32-bit register at `offset` of BAR0.
    fn mmio_write32(&self, offset: usize, value: u32);

    /// Write `value` big-endian to the 64-bit doorbell at `offset` of BAR0 as a
    /// single store: the byte at `offset` is the most significant byte of
    /// `value`. Used for UAR doorbells, whose two halves must arrive together.
    fn mmio_write64(&self, offset: usize, value: u64);

    /// Allocate `size` bytes of zeroed, page-aligned, contiguous DMA memory.
    /// `size` is rounded up to a multiple of [`PAGE_SIZE`] by the
    /// implementation; the returned [`RawDma::len`] is the rounded size.
    ///
    /// A platform implements this pair (`alloc_dma_raw`, `free_dma_raw`);
    /// drivers and applications call [`Hal::alloc_dma`], which wraps the
    /// region in a [`DmaRegion`] that frees itself on drop.
    fn alloc_dma_raw(&self, size: usize) -> Result<RawDma, HalError>;

    /// Give back a region obtained from [`Hal::alloc_dma_raw`].
    ///
    /// # Safety
    ///
    /// `region` must come from `alloc_dma_raw` on this platform (or a clone of it),
    /// must not have been freed already, and the device must no longer be
    /// programmed to access it (the firmware object that used it is destroyed).
    /// No pointer derived from `region.vaddr` may be used afterwards.
    unsafe fn free_dma_raw(&self, region: RawDma);

    /// Monotonic time in nanoseconds since an arbitrary origin.
    fn now_ns(&self) -> u64;

    /// Wait about `us` microseconds (busy-wait, sleep or virtual time).
    fn delay_us(&self, us: u32);

    /// Whether BAR0's UAR pages are mapped write-combining, so that
    /// consecutive [`Hal::mmio_write64`] stores into a BlueFlame buffer
    /// reach the device as one burst and [`barrier::mmio_flush`] sends it.
    /// The driver then writes a small WQE whole into the buffer
    /// (BlueFlame). The default, `false`, makes it ring the 8-byte doorbell
    /// only, as rdma-core does when the UAR is not mapped write-combining
    /// (`MLX5_DB_METHOD_DB`).
    fn write_combining(&self) -> bool {
        false
    }

    /// Number of interrupt vectors the platform delivers from the device, at
    /// most [`MAX_IRQ_VECTORS`]. The default, 0, means none: the driver
    /// polls its event queues and never calls [`Hal::wait_irq`].
    fn irq_vectors(&self) -> u16 {
        0
    }

    /// Wait until at least one of the vectors in the bitmask `vectors` (bit
    /// `i` is vector `i`) has fired, or until about `timeout_ns` has passed
    /// (as [`Hal::delay_us`] measures time: `now_ns` reflects the wait).
    ///
    /// Returns the vectors of `vectors` that fired since they were last
    /// returned, and clears them (an interrupt is reported once, as an
    /// eventfd read reports it); 0 when the time ran out. Interrupts of
    /// vectors not in `vectors` stay latched for a later call. The default
    /// returns [`HalError::Unsupported`].
    fn wait_irq(&self, vectors: u64, timeout_ns: u64) -> Result<u64, HalError> {
        let _ = (vectors, timeout_ns);
        Err(HalError::Unsupported)
    }

    /// Allocate DMA memory owned by an RAII [`DmaRegion`] (through
    /// [`Hal::alloc_dma_raw`]; the region calls [`Hal::free_dma_raw`] when
    /// dropped).
    fn alloc_dma(&self, size: usize) -> Result<DmaRegion<Self>, HalError>
    where
        Self: Sized,
    {
        let raw = self.alloc_dma_raw(size)?;
        // SAFETY: `raw` was just returned by `alloc_dma_raw` of this platform and
        // is handed to nobody else, which is the contract of `from_raw`.
        Ok(unsafe { DmaRegion::from_raw(self.clone(), raw) })
    }
}
