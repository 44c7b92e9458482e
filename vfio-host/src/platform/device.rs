//! The state of one open device ([`Inner`]) and its orderly release.
//!
//! Every [`VfioPlatform`](super::VfioPlatform) clone shares one `Inner`:
//! the BAR0 mapping, a config-space handle on the device file, the DMA pool
//! whose IOMMU is the VFIO container ([`ContainerMapper`],
//! `VFIO_IOMMU_MAP_DMA` / `VFIO_IOMMU_UNMAP_DMA` of
//! `include/uapi/linux/vfio.h`), the interrupt vectors and the notices.
//! Teardown runs on the last drop (or `VfioPlatform::close`) in the order
//! that keeps the device from reaching freed memory: interrupts off, bus
//! mastering off in the PCI command register, reset, then the IOMMU
//! mappings removed.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use vfio_ioctls::{VfioContainer, VfioDevice, VfioError};

use crate::bar::Bar;
use crate::dma::{DmaPool, Mapper, PoolError};
use crate::error::{Error, Notice};
use crate::iova::IovaRange;
use crate::irq::IrqSet;
use crate::pci::DeviceInfo;
use crate::sys;

/// PCI command register (config offset 4) bits.
pub(super) const PCI_COMMAND: u64 = 0x04;
pub(super) const PCI_COMMAND_MEMORY: u16 = 1 << 1;
pub(super) const PCI_COMMAND_MASTER: u16 = 1 << 2;

/// The VFIO container as the DMA pool's IOMMU.
pub(super) struct ContainerMapper(pub(super) Arc<VfioContainer>);

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

pub(super) struct Inner {
    pub(super) info: DeviceInfo,
    // Field order is drop order: the BAR mapping and the config-space fd
    // (both on the device file) go before the device, the device before
    // the container.
    pub(super) bar0: Bar,
    /// A duplicate of the device fd, for config-space reads and writes.
    pub(super) config: File,
    pub(super) config_offset: u64,
    pub(super) dma: Mutex<DmaPool<ContainerMapper>>,
    /// The vectors enabled at open; fixed until teardown, so waits take no
    /// lock.
    pub(super) irq: Option<IrqSet>,
    pub(super) notices: Mutex<Vec<Notice>>,
    pub(super) iova_ranges: Vec<IovaRange>,
    pub(super) can_reset: bool,
    pub(super) reset_on_close: bool,
    pub(super) origin: Instant,
    pub(super) torn_down: bool,
    pub(super) device: VfioDevice,
    pub(super) _container: Arc<VfioContainer>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Inner {
    pub(super) fn config_read16(&self, offset: u64) -> Result<u16, Error> {
        let mut b = [0u8; 2];
        self.config
            .read_exact_at(&mut b, self.config_offset + offset)
            .map_err(|source| Error::Os {
                what: "reading PCI config space",
                source,
            })?;
        Ok(u16::from_le_bytes(b))
    }

    pub(super) fn config_write16(&self, offset: u64, value: u16) -> Result<(), Error> {
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
    pub(super) fn teardown(&mut self) -> Result<(), Error> {
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

pub(super) fn pool_error(e: PoolError) -> Error {
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
