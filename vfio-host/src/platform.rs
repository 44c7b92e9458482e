//! [`VfioPlatform`]: one PCI function owned through VFIO, as a [`Hal`].

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use mlx5_hal::{DmaRegion, Hal, HalError, RawDma, MAX_IRQ_VECTORS};
use vfio_bindings::bindings::vfio::{
    VFIO_DEVICE_FLAGS_PCI, VFIO_DEVICE_FLAGS_RESET, VFIO_PCI_BAR0_REGION_INDEX,
    VFIO_PCI_CONFIG_REGION_INDEX, VFIO_REGION_INFO_FLAG_MMAP,
};
use vfio_ioctls::{VfioContainer, VfioDevice, VfioError};

use crate::bar::Bar;
use crate::dma::{DmaPool, DmaStats, Mapper, PoolError};
use crate::error::{container_error, device_error, Error, Notice};
use crate::iova::{clip_ranges, IovaRange};
use crate::irq::{self, Interrupts, IrqSet};
use crate::pci::{self, DeviceInfo, PciAddress};
use crate::sys;

#[cfg(not(target_pointer_width = "64"))]
compile_error!("mlx5-vfio needs a 64-bit target: 64-bit doorbells must be single stores");

/// Lowest IOVA handed out. Keeping the first 1 MiB unmapped makes a zero or
/// small bogus address programmed into the device fault in the IOMMU instead
/// of hitting a buffer.
pub const MIN_IOVA: u64 = 0x10_0000;

/// The IOVA space assumed when the kernel does not report the IOMMU's valid
/// ranges (before Linux 5.4): 39 bits, which every VT-d and AMD-Vi
/// implementation translates, minus the x86 MSI window `0xfee00000..=0xfeefffff`.
pub const DEFAULT_IOVA_RANGES: [IovaRange; 2] = [
    IovaRange::new(0, 0xfee0_0000),
    IovaRange::new(0xfef0_0000, 1 << 39),
];

/// PCI command register (config offset 4) bits.
const PCI_COMMAND: u64 = 0x04;
const PCI_COMMAND_MEMORY: u16 = 1 << 1;
const PCI_COMMAND_MASTER: u16 = 1 << 2;

/// How to open a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VfioOptions {
    /// Accept a function that is not a ConnectX (for tests on other devices,
    /// such as QEMU's `edu`). Default `false`.
    pub allow_non_mellanox: bool,
    /// IOVAs (plus length) stay below this address: the device's DMA mask
    /// (`1 << 28` for QEMU's `edu`). Default `u64::MAX`: only the IOMMU's own
    /// ranges limit.
    pub dma_limit: u64,
    /// Back DMA memory with 2 MiB huge pages when the system has them
    /// reserved (falls back to 4 KiB pages with a [`Notice`] otherwise).
    /// Default `true`.
    pub hugepages: bool,
    /// `VFIO_DEVICE_RESET` on open and on close, when the device supports
    /// it. Default `true`.
    pub reset: bool,
    /// Interrupt vectors to enable at open, at most
    /// [`MAX_IRQ_VECTORS`] (more is capped): MSI-X when the device has it,
    /// else MSI, each vector on its own eventfd (see
    /// [`VfioPlatform::interrupts`]). `0` opts out: no vectors, nothing
    /// asked of the kernel, [`Hal::irq_vectors`] is 0 and the driver polls.
    /// Default [`MAX_IRQ_VECTORS`].
    pub max_irq_vectors: u16,
}

impl Default for VfioOptions {
    fn default() -> Self {
        VfioOptions {
            allow_non_mellanox: false,
            dma_limit: u64::MAX,
            hugepages: true,
            reset: true,
            max_irq_vectors: MAX_IRQ_VECTORS,
        }
    }
}

/// The VFIO container as the DMA pool's IOMMU.
struct ContainerMapper(Arc<VfioContainer>);

fn vfio_errno(e: &VfioError) -> i32 {
    match e {
        VfioError::IommuDmaMap(s) | VfioError::IommuDmaUnmap(s) => s.errno(),
        VfioError::InvalidDmaUnmapSize => libc::EINVAL,
        _ => libc::EIO,
    }
}

impl Mapper for ContainerMapper {
    unsafe fn map(&self, iova: u64, len: usize, vaddr: *mut u8) -> Result<(), i32> {
        // SAFETY: the caller's contract (`Mapper::map`) is the contract of
        // `vfio_dma_map`: the range stays mapped until unmapped and is only
        // accessed through volatile raw pointers.
        unsafe { self.0.vfio_dma_map(iova, len, vaddr) }.map_err(|e| vfio_errno(&e))
    }

    fn unmap(&self, iova: u64, len: usize) -> Result<(), i32> {
        self.0.vfio_dma_unmap(iova, len).map_err(|e| vfio_errno(&e))
    }
}

struct Inner {
    info: DeviceInfo,
    // Field order is drop order: the BAR mapping and the config-space fd
    // (both on the device file) go before the device, the device before
    // the container.
    bar0: Bar,
    /// A duplicate of the device fd, for config-space reads and writes.
    config: File,
    config_offset: u64,
    dma: Mutex<DmaPool<ContainerMapper>>,
    /// The vectors enabled at open; fixed until teardown, so waits take no
    /// lock.
    irq: Option<IrqSet>,
    notices: Mutex<Vec<Notice>>,
    iova_ranges: Vec<IovaRange>,
    can_reset: bool,
    reset_on_close: bool,
    origin: Instant,
    torn_down: bool,
    device: VfioDevice,
    _container: Arc<VfioContainer>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Inner {
    fn config_read16(&self, offset: u64) -> Result<u16, Error> {
        let mut b = [0u8; 2];
        self.config
            .read_exact_at(&mut b, self.config_offset + offset)
            .map_err(|source| Error::Os {
                what: "reading PCI config space",
                source,
            })?;
        Ok(u16::from_le_bytes(b))
    }

    fn config_write16(&self, offset: u64, value: u16) -> Result<(), Error> {
        self.config
            .write_all_at(&value.to_le_bytes(), self.config_offset + offset)
            .map_err(|source| Error::Os {
                what: "writing PCI config space",
                source,
            })
    }

    /// Quiesce and release: interrupts off, bus mastering off (no more DMA),
    /// reset, then every IOMMU mapping removed. Returns the first failure but
    /// always attempts every step. Never panics.
    fn teardown(&mut self) -> Result<(), Error> {
        if self.torn_down {
            return Ok(());
        }
        self.torn_down = true;
        let mut first: Result<(), Error> = Ok(());
        if let Some(irqs) = self.irq.take() {
            if let Err(source) = irqs.disable(&self.device) {
                first = first.and(Err(Error::Os {
                    what: "disabling interrupts (VFIO_DEVICE_SET_IRQS, count 0)",
                    source,
                }));
            }
        }
        match self.config_read16(PCI_COMMAND) {
            Ok(cmd) => {
                if let Err(e) = self.config_write16(PCI_COMMAND, cmd & !PCI_COMMAND_MASTER) {
                    first = first.and(Err(e));
                }
            }
            Err(e) => first = first.and(Err(e)),
        }
        if self.reset_on_close && self.can_reset {
            if let Err(source) = sys::device_reset(&self.device) {
                first = first.and(Err(Error::Os {
                    what: "VFIO_DEVICE_RESET on close",
                    source,
                }));
            }
        }
        if let Err(e) = lock(&self.dma).release_all() {
            first = first.and(Err(pool_error(e)));
        }
        first
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            log::error!("mlx5-vfio: closing {}: {e}", self.info.addr);
        }
    }
}

fn pool_error(e: PoolError) -> Error {
    match e {
        PoolError::Unknown { .. } => Error::DmaRegionUnsupported {
            why: "not a live DMA region of this device",
        },
        PoolError::Shared => Error::DmaRegionUnsupported {
            why: "the region is carved from a shared 2 MiB huge-page mapping; only regions with their \
                  own mapping (4 KiB pages, or 2 MiB and larger) can be revoked",
        },
        PoolError::Unmap(errno) => Error::Os {
            what: "VFIO_IOMMU_UNMAP_DMA",
            source: io::Error::from_raw_os_error(errno),
        },
    }
}

/// A PCI function owned through VFIO: BAR0, DMA memory behind the IOMMU,
/// a clock, and interrupts on eventfds. It implements [`Hal`] for the mlx5
/// driver.
///
/// Cloning is cheap (an [`Arc`]); every [`DmaRegion`] holds a clone. The
/// device is quiesced and released when the last clone is dropped, or
/// explicitly with [`VfioPlatform::close`].
///
/// Besides the big-endian [`Hal`] MMIO methods that the mlx5 driver uses,
/// [`VfioPlatform::mmio_read32_le`] and friends access the same BAR0 mapping
/// with little-endian registers, for devices other than a ConnectX (the
/// QEMU `edu` device of the VFIO test). Both go through one bounds-checked
/// volatile accessor, so the test of one proves the mapping of the other.
#[derive(Clone)]
pub struct VfioPlatform {
    inner: Arc<Inner>,
}

impl VfioPlatform {
    /// Open the PCI function at `addr` (`0000:03:00.0`) through VFIO.
    ///
    /// Checks (through `/sys`) that it exists, is a ConnectX unless
    /// `options.allow_non_mellanox`, has an IOMMU group and is bound to
    /// vfio-pci; opens the container (type1 IOMMU), group and device; resets
    /// the device if supported and asked; enables memory space and bus
    /// mastering; maps BAR0; and seeds the IOVA allocator from the IOMMU's
    /// valid ranges clipped to `[MIN_IOVA, options.dma_limit)`.
    pub fn open(addr: &str, options: VfioOptions) -> Result<Self, Error> {
        let addr: PciAddress = addr.parse()?;
        let info = pci::check_device(Path::new("/sys"), &addr, options.allow_non_mellanox)?;
        let container = Arc::new(VfioContainer::new(None).map_err(container_error)?);
        let device = VfioDevice::new(&info.sysfs_path, container.clone(), false)
            .map_err(|e| device_error(e, info.iommu_group))?;
        let mut notices = Vec::new();

        let flags = sys::device_flags(&device).map_err(|source| Error::Os {
            what: "VFIO_DEVICE_GET_INFO",
            source,
        })?;
        if flags & VFIO_DEVICE_FLAGS_PCI == 0 {
            return Err(Error::Os {
                what: "VFIO_DEVICE_GET_INFO",
                source: io::Error::new(io::ErrorKind::InvalidData, "not a vfio-pci device"),
            });
        }
        let can_reset = flags & VFIO_DEVICE_FLAGS_RESET != 0;
        if options.reset {
            if !can_reset {
                notices.push(Notice::ResetUnsupported);
            } else if let Err(e) = sys::device_reset(&device) {
                notices.push(Notice::ResetFailed {
                    errno: e.raw_os_error().unwrap_or(libc::EIO),
                });
            }
        }

        // A second handle on the device file, so config space can be read and
        // written with pread/pwrite (vfio-ioctls' region_read swallows errors).
        // SAFETY: the fd belongs to `device`, which is alive for the whole
        // borrow; `try_clone_to_owned` dups it, so the new File owns its own fd.
        let borrowed = unsafe { BorrowedFd::borrow_raw(device.as_raw_fd()) };
        let config = File::from(borrowed.try_clone_to_owned().map_err(|source| Error::Os {
            what: "dup of the VFIO device fd",
            source,
        })?);
        let config_offset = device.get_region_offset(VFIO_PCI_CONFIG_REGION_INDEX);

        let bar_flags = device.get_region_flags(VFIO_PCI_BAR0_REGION_INDEX);
        let bar_size = device.get_region_size(VFIO_PCI_BAR0_REGION_INDEX);
        let bar_offset = device.get_region_offset(VFIO_PCI_BAR0_REGION_INDEX);
        if bar_flags & VFIO_REGION_INFO_FLAG_MMAP == 0
            || bar_size == 0
            || bar_size > isize::MAX as u64
        {
            return Err(Error::BarNotMappable {
                flags: bar_flags,
                size: bar_size,
            });
        }
        // SAFETY: a fresh shared mapping of the device file at the offset the
        // kernel gave for BAR0 and of its size; the kernel picks the address,
        // so no existing object is affected. The mapping is owned by `Bar`.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bar_size as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                config.as_raw_fd(),
                bar_offset as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::os("mmap of BAR0"));
        }
        let bar0 = Bar {
            ptr: NonNull::new(p.cast()).ok_or_else(|| Error::os("mmap of BAR0"))?,
            len: bar_size as usize,
        };

        let reported = sys::iommu_info(&*container)
            .ok()
            .and_then(|b| sys::parse_iommu_info(&b))
            .and_then(|i| i.ranges)
            .filter(|r| !r.is_empty());
        let ranges = match reported {
            Some(r) => r,
            None => {
                notices.push(Notice::DefaultIovaRanges);
                DEFAULT_IOVA_RANGES.to_vec()
            }
        };
        let iova_ranges = clip_ranges(&ranges, MIN_IOVA, options.dma_limit);
        if iova_ranges.is_empty() {
            return Err(Error::NoIovaSpace {
                dma_limit: options.dma_limit,
            });
        }
        for n in &notices {
            log::warn!("mlx5-vfio: {addr}: {n}");
        }

        let mut inner = Inner {
            info,
            bar0,
            config,
            config_offset,
            dma: Mutex::new(DmaPool::new(
                ContainerMapper(container.clone()),
                &iova_ranges,
                options.hugepages,
            )),
            irq: None,
            notices: Mutex::new(notices),
            iova_ranges,
            can_reset,
            reset_on_close: options.reset,
            origin: Instant::now(),
            torn_down: false,
            device,
            _container: container,
        };
        // From here on, a failure drops `inner`, which quiesces the device.
        let cmd = inner.config_read16(PCI_COMMAND)?;
        inner.config_write16(PCI_COMMAND, cmd | PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER)?;
        let now = inner.config_read16(PCI_COMMAND)?;
        if now & (PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER)
            != PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER
        {
            return Err(Error::Os {
                what: "enabling memory space and bus mastering",
                source: io::Error::other(format!(
                    "PCI command register reads {now:#06x} after writing the enable bits"
                )),
            });
        }
        // Interrupts last: an MSI is a memory write by the device, so bus
        // mastering must be on; teardown disables them first.
        let mut irq_notices = Vec::new();
        inner.irq = irq::enable(&inner.device, options.max_irq_vectors, &mut irq_notices);
        for n in irq_notices {
            log::warn!("mlx5-vfio: {addr}: {n}");
            lock(&inner.notices).push(n);
        }
        Ok(VfioPlatform {
            inner: Arc::new(inner),
        })
    }

    /// What the sysfs checks found (address, ids, IOMMU group).
    pub fn device_info(&self) -> &DeviceInfo {
        &self.inner.info
    }

    /// The IOVA ranges DMA memory is allocated from (IOMMU ranges clipped to
    /// the floor and the DMA limit).
    pub fn iova_ranges(&self) -> &[IovaRange] {
        &self.inner.iova_ranges
    }

    /// True if the device supports `VFIO_DEVICE_RESET`.
    pub fn reset_supported(&self) -> bool {
        self.inner.can_reset
    }

    /// Everything the platform wanted the user to know so far (huge page
    /// fallback, reset support, default IOVA ranges).
    pub fn notices(&self) -> Vec<Notice> {
        lock(&self.inner.notices).clone()
    }

    /// How DMA memory is spread over huge pages, 4 KiB pages and IOVA space.
    pub fn dma_stats(&self) -> DmaStats {
        lock(&self.inner.dma).stats()
    }

    /// The PCI command register (config offset 4).
    pub fn pci_command(&self) -> Result<u16, Error> {
        self.inner.config_read16(PCI_COMMAND)
    }

    /// Read the little-endian 32-bit register at `offset` of BAR0, for
    /// devices whose registers are little-endian (not a ConnectX: use
    /// [`Hal::mmio_read32`] there). Same mapping, checks and single volatile
    /// access as the [`Hal`] methods; panics outside BAR0 or unaligned.
    pub fn mmio_read32_le(&self, offset: usize) -> u32 {
        u32::from_le(self.inner.bar0.read32(offset))
    }

    /// Write a little-endian 32-bit register of BAR0 (see
    /// [`VfioPlatform::mmio_read32_le`]).
    pub fn mmio_write32_le(&self, offset: usize, value: u32) {
        self.inner.bar0.write32(offset, value.to_le())
    }

    /// Read a little-endian 64-bit register of BAR0 as one 8-byte load (see
    /// [`VfioPlatform::mmio_read32_le`]).
    pub fn mmio_read64_le(&self, offset: usize) -> u64 {
        u64::from_le(self.inner.bar0.read64(offset))
    }

    /// Write a little-endian 64-bit register of BAR0 as one 8-byte store (see
    /// [`VfioPlatform::mmio_read32_le`]).
    pub fn mmio_write64_le(&self, offset: usize, value: u64) {
        self.inner.bar0.write64(offset, value.to_le())
    }

    /// Remove the IOMMU mapping of a live region so the device can no longer
    /// reach it; the memory stays valid for the CPU (and its IOVA reserved)
    /// until the region is dropped. Use it to quarantine memory after a
    /// device error, or to prove isolation. Works for regions with their own
    /// mapping (4 KiB-page regions, and regions of 2 MiB or more).
    pub fn revoke_dma(&self, region: &DmaRegion<VfioPlatform>) -> Result<(), Error> {
        if !Arc::ptr_eq(&region.hal().inner, &self.inner) {
            return Err(Error::DmaRegionUnsupported {
                why: "the region belongs to another device",
            });
        }
        lock(&self.inner.dma)
            .revoke(region.iova(), region.len())
            .map_err(pool_error)
    }

    /// The interrupts enabled at open: their kind, how many vectors
    /// ([`Hal::irq_vectors`]) and how many the device offers. `None` when
    /// [`VfioOptions::max_irq_vectors`] was 0 or nothing could be enabled
    /// (then [`VfioPlatform::notices`] has a [`Notice::NoInterrupts`]).
    ///
    /// The vectors stay enabled until [`VfioPlatform::close`] (or the last
    /// drop), which disables them before the device is reset. Every
    /// interrupt of a vector is latched in its eventfd until a
    /// [`Hal::wait_irq`] for that vector reports it.
    pub fn interrupts(&self) -> Option<Interrupts> {
        self.inner.irq.as_ref().map(|i| i.info)
    }

    /// The eventfd interrupt vector `vector` signals, for a program that
    /// waits in its own event loop (`epoll`, `mio`, an async runtime)
    /// beside its other descriptors instead of in [`Hal::wait_irq`]. It
    /// becomes readable when the vector fires; reading it (8 bytes) clears
    /// it, as `wait_irq` does. After a wake-up, read it, then take the
    /// events without blocking (`Hca::poll_events`, or the verbs calls with
    /// a timeout of 0); the driver's event queues are armed again by that
    /// poll. `None` without interrupts or past the last vector.
    ///
    /// The descriptor belongs to the platform: it stays open until
    /// [`VfioPlatform::close`] (or the last drop), which closes it. Do not
    /// close it yourself.
    pub fn irq_fd(&self, vector: u16) -> Option<std::os::fd::RawFd> {
        self.inner.irq.as_ref()?.vectors.raw_fd(vector)
    }

    /// Quiesce and release the device now, reporting any failure: interrupts
    /// off, bus mastering off, reset (if supported and enabled in the
    /// options), IOMMU mappings removed, BAR unmapped, VFIO files closed.
    /// Fails with [`Error::StillInUse`] (and changes nothing) while other
    /// clones or DMA regions are alive. Dropping the last handle does the
    /// same, logging failures instead of returning them.
    pub fn close(self) -> Result<(), Error> {
        match Arc::try_unwrap(self.inner) {
            Err(inner) => Err(Error::StillInUse {
                handles: Arc::strong_count(&inner) - 1,
            }),
            Ok(mut inner) => inner.teardown(),
        }
    }

    fn absorb_notices(&self, pool: &mut DmaPool<ContainerMapper>) {
        let new = pool.take_notices();
        if !new.is_empty() {
            lock(&self.inner.notices).extend(new);
        }
    }
}

impl std::fmt::Debug for VfioPlatform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VfioPlatform")
            .field("addr", &format_args!("{}", self.inner.info.addr))
            .field("bar0_len", &format_args!("{:#x}", self.inner.bar0.len))
            .finish_non_exhaustive()
    }
}

// SAFETY: the obligations of `Hal`, one by one:
// 1. MMIO: every `mmio_*` goes to `Bar`, the mmap of BAR0 of the one VFIO
//    device this value owns (region index 0 at the kernel-given offset,
//    checked mappable). `Bar::at` panics for offsets outside BAR0 or not
//    aligned to the width, so no other memory is touched. Each method is one
//    volatile load/store of exactly the stated width (u32, or u64 as one
//    store on the 64-bit targets this crate compiles for), so accesses are
//    neither split, merged, cached nor reordered by this code; the byte order
//    is converted with `from_be`/`to_be`.
// 2. DMA: `alloc_dma_raw` comes from `DmaPool::alloc`: fresh anonymous mmaps
//    (zeroed by the kernel) or carved pieces zeroed with volatile stores;
//    page aligned; one host mapping and one IOVA block per region, so
//    contiguous in both views; never handed out twice while live (the IOVA
//    allocator and the chunk sub-allocators refuse overlaps); mapped
//    read/write in the IOMMU with `VFIO_IOMMU_MAP_DMA` before it is returned
//    and unmapped only in `free_dma_raw` (or at teardown, after the last clone
//    is gone). x86_64 and aarch64 VFIO DMA is cache-coherent for the
//    write-back pages used here.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opening_a_missing_function_fails_before_touching_vfio() {
        // Domain ffff does not exist on any machine this runs on.
        let e = VfioPlatform::open("ffff:ff:1f.7", VfioOptions::default()).unwrap_err();
        assert!(matches!(e, Error::DeviceNotFound { .. }), "{e}");
        let e = VfioPlatform::open("not-an-address", VfioOptions::default()).unwrap_err();
        assert!(matches!(e, Error::InvalidAddress { .. }), "{e}");
    }

    #[test]
    fn default_options_are_the_safe_ones() {
        let o = VfioOptions::default();
        assert!(!o.allow_non_mellanox);
        assert!(o.hugepages && o.reset);
        assert_eq!(o.max_irq_vectors, MAX_IRQ_VECTORS);
        assert_eq!(o.dma_limit, u64::MAX);
        // The default IOVA space avoids the x86 MSI window.
        let msi = IovaRange::new(0xfee0_0000, 0xfef0_0000);
        assert!(DEFAULT_IOVA_RANGES
            .iter()
            .all(|r| r.end <= msi.start || r.start >= msi.end));
    }
}
