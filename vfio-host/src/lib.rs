//! # mlx5-vfio: the Linux VFIO platform for the mlx5 driver
//!
//! [`VfioPlatform`] owns one PCI function through the kernel's `vfio-pci`
//! driver and implements [`mlx5_hal::Hal`] for it, so the mlx5 driver runs in
//! user space on a real ConnectX:
//!
//! * **Open** by PCI address: sysfs checks with actionable errors (not a
//!   ConnectX, no IOMMU group, not bound to vfio-pci, permissions), then the
//!   VFIO container (type1 IOMMU), group and device through `vfio-ioctls`.
//!   The device is reset (`VFIO_DEVICE_RESET`) when it supports it, memory
//!   space and bus mastering are enabled in the PCI command register.
//! * **MMIO**: BAR0 is mmapped from the device file and accessed only with
//!   bounds-checked single volatile loads/stores; big-endian for the
//!   [`mlx5_hal::Hal`] methods, little-endian through
//!   [`VfioPlatform::mmio_read32_le`] and friends for other devices (the
//!   QEMU `edu` device of the VFIO test uses those, over the same mapping).
//! * **DMA**: [`iova::IovaAllocator`] hands out device addresses from the
//!   IOMMU's valid IOVA ranges (`VFIO_IOMMU_GET_INFO`) clipped to
//!   [`VfioOptions::dma_limit`] and to [`MIN_IOVA`]; memory comes from 2 MiB
//!   huge pages when reserved, else 4 KiB pages (with a [`Notice`]), and is
//!   mapped with `VFIO_IOMMU_MAP_DMA`. IOVAs are never host addresses.
//! * **Interrupts**: at open, up to [`mlx5_hal::MAX_IRQ_VECTORS`] MSI-X
//!   vectors (MSI when the device has no MSI-X), each on its own eventfd;
//!   [`mlx5_hal::Hal::wait_irq`] is a bounded `ppoll` over them that reports
//!   each firing once ([`VfioPlatform::interrupts`];
//!   [`VfioOptions::max_irq_vectors`] `= 0` opts out and the driver polls);
//!   [`VfioPlatform::kernel_irq_counts`] reads what the kernel counted on
//!   each vector.
//! * **Close**: interrupts off, bus mastering off, reset, IOMMU mappings
//!   removed, files closed; on the last drop or with [`VfioPlatform::close`].
//!
//! `docs/hardware.md` tells how to prepare a machine; `tests/vfio-qemu/run.sh`
//! proves this crate against the real kernel VFIO stack in a QEMU guest
//! (emulated Intel IOMMU + `edu` device) with `examples/edu_probe.rs`.
//!
//! ## Example
//!
//! Opening needs a ConnectX bound to `vfio-pci` (`docs/hardware.md`;
//! `mlx5 devices` lists candidates). What comes before the device runs
//! anywhere: the address is checked before any file is opened, and the sysfs
//! checks say what to fix.
//!
//! ```
//! use std::path::Path;
//!
//! use mlx5_vfio::pci::{check_device, is_connectx};
//! use mlx5_vfio::{Error, PciAddress, VfioOptions, VfioPlatform};
//!
//! // `bus:device.function` means domain 0.
//! let addr: PciAddress = "3b:00.1".parse()?;
//! assert_eq!(addr.to_string(), "0000:3b:00.1");
//! assert!(is_connectx(0x15b3, 0x1017), "a ConnectX-5");
//!
//! // A malformed address is refused before the system is touched.
//! let open = VfioPlatform::open("3b:00", VfioOptions::default());
//! assert!(matches!(open, Err(Error::InvalidAddress { .. })));
//!
//! // The sysfs checks, here on a tree without that function: the error names
//! // the directory it looked for and how to list the functions.
//! match check_device(Path::new("/nonexistent-sysfs"), &addr, false) {
//!     Err(e @ Error::DeviceNotFound { .. }) => {
//!         assert!(e.to_string().contains("lspci -D -d 15b3:"), "{e}")
//!     }
//!     other => panic!("{other:?}"),
//! }
//! # Ok::<(), Error>(())
//! ```

extern crate alloc;

mod bar;
mod dma;
mod error;
pub mod iova;
mod irq;
pub mod irq_counts;
pub mod pci;
mod platform;
mod sys;

pub use dma::{DmaStats, HUGE_PAGE_SIZE};
pub use error::{Error, Notice};
pub use irq::{Interrupts, IrqKind};
pub use pci::{DeviceInfo, PciAddress};
pub use platform::{VfioOptions, VfioPlatform, DEFAULT_IOVA_RANGES, MIN_IOVA};
pub use sys::{parse_iommu_info, IommuInfo};
