//! [`VfioPlatform::open`]: from a PCI address to an open device.
//!
//! The steps, in order: the sysfs checks (`crate::pci`), the VFIO container
//! (type1 IOMMU), group and device (`vfio-ioctls`), `VFIO_DEVICE_GET_INFO`
//! and the optional `VFIO_DEVICE_RESET`, the BAR0 mapping (`mmap` of the
//! device file at the region offset `VFIO_DEVICE_GET_REGION_INFO` reports),
//! the IOVA ranges (`VFIO_IOMMU_GET_INFO`, `include/uapi/linux/vfio.h`),
//! then memory space and bus mastering on, and interrupts last.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use vfio_bindings::bindings::vfio::{
    VFIO_DEVICE_FLAGS_PCI, VFIO_DEVICE_FLAGS_RESET, VFIO_PCI_BAR0_REGION_INDEX,
    VFIO_PCI_CONFIG_REGION_INDEX, VFIO_REGION_INFO_FLAG_MMAP,
};
use vfio_ioctls::{VfioContainer, VfioDevice};

use super::device::{
    lock, ContainerMapper, Inner, PCI_COMMAND, PCI_COMMAND_MASTER, PCI_COMMAND_MEMORY,
};
use super::{VfioOptions, VfioPlatform, DEFAULT_IOVA_RANGES, MIN_IOVA};
use crate::bar::Bar;
use crate::dma::DmaPool;
use crate::error::{container_error, device_error, Error, Notice};
use crate::iova::clip_ranges;
use crate::irq;
use crate::pci::{self, PciAddress};
use crate::sys;

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
}
