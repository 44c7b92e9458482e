//! [`VfioPlatform`]: one PCI function owned through VFIO, as a [`Hal`].
//!
//! Here: the options ([`VfioOptions`]), the IOVA constants, the handle and
//! its public methods. `open` opens a device (container, group, device, BAR0
//! mapping, bus mastering, interrupts); `device` holds the shared state and
//! the teardown; `hal` implements [`Hal`] on it.

use std::sync::Arc;

// The docs here link to `Hal`, implemented in `hal`; no code in this file
// names it.
#[cfg(doc)]
use mlx5_hal::Hal;
use mlx5_hal::{DmaRegion, MAX_IRQ_VECTORS};

use crate::dma::DmaStats;
use crate::error::{Error, Notice};
use crate::iova::IovaRange;
use crate::irq::Interrupts;
use crate::pci::DeviceInfo;

use device::{lock, pool_error, Inner, PCI_COMMAND};

mod device;
mod hal;
mod open;

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

    /// How many interrupts the kernel took on each enabled vector so far
    /// (entry `i`: vector `i`), from the `vfio-msix[i](<address>)` lines
    /// of `/proc/interrupts` ([`crate::irq_counts`]): proof that the
    /// device's messages reached the kernel, independent of this
    /// platform's waits. Empty without interrupts; an error only when
    /// `/proc/interrupts` cannot be read. Call it before
    /// [`VfioPlatform::close`]: the kernel drops the lines when the vectors
    /// are disabled.
    pub fn kernel_irq_counts(&self) -> std::io::Result<Vec<u64>> {
        let Some(irq) = self.inner.irq.as_ref() else {
            return Ok(Vec::new());
        };
        let text = std::fs::read_to_string("/proc/interrupts")?;
        Ok(crate::irq_counts::parse_proc_interrupts(
            &text,
            irq.info.kind,
            &self.inner.info.addr.to_string(),
            irq.info.vectors,
        ))
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
}

impl std::fmt::Debug for VfioPlatform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VfioPlatform")
            .field("addr", &format_args!("{}", self.inner.info.addr))
            .field("bar0_len", &format_args!("{:#x}", self.inner.bar0.len))
            .finish_non_exhaustive()
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
