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
//!   [`VfioOptions::max_irq_vectors`] `= 0` opts out and the driver polls).
//! * **Close**: interrupts off, bus mastering off, reset, IOMMU mappings
//!   removed, files closed; on the last drop or with [`VfioPlatform::close`].
//!
//! `docs/hardware.md` tells how to prepare a machine; `tests/vfio-qemu/run.sh`
//! proves this crate against the real kernel VFIO stack in a QEMU guest
//! (emulated Intel IOMMU + `edu` device) with `examples/edu_probe.rs`.

extern crate alloc;

mod bar;
mod dma;
mod error;
pub mod iova;
mod irq;
pub mod pci;
mod platform;
mod sys;

pub use dma::{DmaStats, HUGE_PAGE_SIZE};
pub use error::{Error, Notice};
pub use irq::{Interrupts, IrqKind};
pub use pci::{DeviceInfo, PciAddress};
pub use platform::{VfioOptions, VfioPlatform, DEFAULT_IOVA_RANGES, MIN_IOVA};
pub use sys::{parse_iommu_info, IommuInfo};
