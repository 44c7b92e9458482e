//! Errors and notices of the VFIO platform, worded so that a user can act on
//! them: each says what is wrong and the command that fixes it.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use vfio_ioctls::VfioError;

use crate::irq::IrqKind;

/// Everything that can go wrong while opening or using a VFIO device.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The PCI address is not of the form `DDDD:BB:DD.F` (or `BB:DD.F`).
    InvalidAddress {
        /// What was given.
        input: String,
    },
    /// No such PCI function in sysfs.
    DeviceNotFound {
        /// The PCI address.
        addr: String,
        /// The sysfs directory that does not exist.
        path: PathBuf,
    },
    /// The function is not a ConnectX (vendor 0x15b3 and a known device id),
    /// and the caller did not opt out of the check.
    NotConnectX {
        /// The PCI address.
        addr: String,
        /// PCI vendor id found.
        vendor: u16,
        /// PCI device id found.
        device: u16,
    },
    /// The function has no IOMMU group: the IOMMU is off (or absent).
    NoIommuGroup {
        /// The PCI address.
        addr: String,
    },
    /// The function is not bound to `vfio-pci`.
    NotBoundToVfio {
        /// The PCI address.
        addr: String,
        /// The driver it is bound to, if any (`mlx5_core`, ...).
        driver: Option<String>,
    },
    /// `/dev/vfio/vfio` does not exist: the vfio modules are not loaded.
    VfioUnavailable {
        /// The missing path.
        path: PathBuf,
    },
    /// Opening a VFIO file was refused.
    PermissionDenied {
        /// The file (`/dev/vfio/vfio` or `/dev/vfio/<group>`).
        path: PathBuf,
    },
    /// Another process holds the VFIO group open.
    GroupBusy {
        /// `/dev/vfio/<group>`.
        path: PathBuf,
    },
    /// Another device in the IOMMU group is bound to a host driver.
    GroupNotViable {
        /// The IOMMU group number.
        group: u32,
    },
    /// BAR0 cannot be mmapped (no `VFIO_REGION_INFO_FLAG_MMAP`) or is empty.
    BarNotMappable {
        /// The region flags the kernel reported.
        flags: u32,
        /// The region size the kernel reported.
        size: u64,
    },
    /// The IOMMU ranges clipped to the DMA limit leave no usable IOVA.
    NoIovaSpace {
        /// The configured DMA address limit.
        dma_limit: u64,
    },
    /// Reading sysfs failed for a reason other than a missing file.
    Sysfs {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// A `vfio-ioctls` call failed.
    Vfio {
        /// What was being done.
        what: &'static str,
        /// The error from `vfio-ioctls`.
        source: vfio_ioctls::VfioError,
    },
    /// A system call failed.
    Os {
        /// What was being done.
        what: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// The request does not apply to this DMA region.
    DmaRegionUnsupported {
        /// Why.
        why: &'static str,
    },
    /// `close` was called while other handles (clones, DMA regions) live.
    StillInUse {
        /// How many other handles.
        handles: usize,
    },
}

const BIND_HOWTO: &str = "echo <addr> > /sys/bus/pci/drivers/<driver>/unbind; \
echo vfio-pci > /sys/bus/pci/devices/<addr>/driver_override; \
echo <addr> > /sys/bus/pci/drivers/vfio-pci/bind";

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidAddress { input } => write!(
                f,
                "'{input}' is not a PCI address; expected domain:bus:device.function, e.g. 0000:03:00.0 (see lspci -D)"
            ),
            Error::DeviceNotFound { addr, path } => write!(
                f,
                "no PCI function {addr} ({} does not exist); list functions with lspci -D -d 15b3:",
                path.display()
            ),
            Error::NotConnectX {
                addr,
                vendor,
                device,
            } => write!(
                f,
                "{addr} is {vendor:04x}:{device:04x}, not a ConnectX (vendor 15b3 with a ConnectX-4..8, \
                 BlueField or Connect-IB device id); pick the right address from lspci -D -d 15b3:"
            ),
            Error::NoIommuGroup { addr } => write!(
                f,
                "{addr} has no IOMMU group, so VFIO cannot use it: the IOMMU is off. Enable VT-d/AMD-Vi in \
                 the firmware setup and add intel_iommu=on (Intel) or amd_iommu=on (AMD), plus iommu=pt, \
                 to the kernel command line (e.g. GRUB_CMDLINE_LINUX in /etc/default/grub, then update-grub \
                 and reboot); check with ls /sys/kernel/iommu_groups"
            ),
            Error::NotBoundToVfio { addr, driver } => {
                let bind = BIND_HOWTO.replace("<addr>", addr);
                match driver {
                    Some(d) => write!(
                        f,
                        "{addr} is bound to {d}, not vfio-pci; hand it to vfio-pci as root (modprobe vfio-pci first): {}",
                        bind.replace("<driver>", d)
                    ),
                    None => write!(
                        f,
                        "{addr} is not bound to any driver; bind it to vfio-pci as root (modprobe vfio-pci first): {}",
                        bind.split_once("; ").map_or(bind.as_str(), |(_, rest)| rest)
                    ),
                }
            }
            Error::VfioUnavailable { path } => write!(
                f,
                "{} does not exist: the VFIO modules are not loaded; run modprobe vfio-pci",
                path.display()
            ),
            Error::PermissionDenied { path } => write!(
                f,
                "permission denied opening {p}: run as root, or give your user the device \
                 (chown $USER {p}, or a udev rule for the vfio group) and raise the locked-memory \
                 limit for DMA (ulimit -l unlimited, or memlock in /etc/security/limits.conf)",
                p = path.display()
            ),
            Error::GroupBusy { path } => write!(
                f,
                "{} is busy: another process (a VM, another driver instance) has the device open; stop it first",
                path.display()
            ),
            Error::GroupNotViable { group } => write!(
                f,
                "IOMMU group {group} is not viable: every device in /sys/kernel/iommu_groups/{group}/devices \
                 must be bound to vfio-pci or to no driver; unbind the others (or move the card to a slot with \
                 its own group, or enable ACS)"
            ),
            Error::BarNotMappable { flags, size } => write!(
                f,
                "BAR0 cannot be mapped (region flags {flags:#x}, size {size:#x}); the kernel must be built \
                 with CONFIG_VFIO_PCI_MMAP and the BAR must be a memory BAR"
            ),
            Error::NoIovaSpace { dma_limit } => write!(
                f,
                "the IOMMU's valid IOVA ranges leave nothing below the DMA limit {dma_limit:#x}"
            ),
            Error::Sysfs { path, source } => {
                write!(f, "cannot read {}: {source}", path.display())
            }
            Error::Vfio { what, source } => write!(f, "VFIO: {what}: {source}"),
            Error::Os { what, source } => write!(f, "{what}: {source}"),
            Error::DmaRegionUnsupported { why } => write!(f, "DMA region: {why}"),
            Error::StillInUse { handles } => write!(
                f,
                "cannot close: {handles} other handle(s) to the device (clones or DMA regions) are still alive"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Sysfs { source, .. } | Error::Os { source, .. } => Some(source),
            Error::Vfio { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl Error {
    pub(crate) fn os(what: &'static str) -> Self {
        Error::Os {
            what,
            source: io::Error::last_os_error(),
        }
    }
}

/// The container-open failures a user can act on, as their own variants.
pub(crate) fn container_error(e: VfioError) -> Error {
    match e {
        VfioError::OpenContainer(source) => match source.kind() {
            io::ErrorKind::NotFound => Error::VfioUnavailable {
                path: "/dev/vfio/vfio".into(),
            },
            io::ErrorKind::PermissionDenied => Error::PermissionDenied {
                path: "/dev/vfio/vfio".into(),
            },
            _ => Error::Vfio {
                what: "opening /dev/vfio/vfio",
                source: VfioError::OpenContainer(source),
            },
        },
        source => Error::Vfio {
            what: "setting up the VFIO container",
            source,
        },
    }
}

/// The group/device-open failures a user can act on, as their own variants.
pub(crate) fn device_error(e: VfioError, group: u32) -> Error {
    let path = Path::new("/dev/vfio").join(group.to_string());
    match e {
        VfioError::OpenGroup(source, id) => match (source.kind(), source.raw_os_error()) {
            (io::ErrorKind::PermissionDenied, _) => Error::PermissionDenied { path },
            (io::ErrorKind::NotFound, _) => Error::VfioUnavailable { path },
            (_, Some(libc::EBUSY)) => Error::GroupBusy { path },
            _ => Error::Vfio {
                what: "opening the VFIO group",
                source: VfioError::OpenGroup(source, id),
            },
        },
        VfioError::GroupViable => Error::GroupNotViable { group },
        source => Error::Vfio {
            what: "opening the VFIO device",
            source,
        },
    }
}

/// Something a user should know that does not stop the platform.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Notice {
    /// 2 MiB huge pages could not be mapped; DMA memory uses 4 KiB pages.
    HugePagesUnavailable {
        /// The errno of the failed `mmap(MAP_HUGETLB)`.
        errno: i32,
    },
    /// The kernel did not report valid IOVA ranges; a default was used.
    DefaultIovaRanges,
    /// The device does not support `VFIO_DEVICE_RESET`.
    ResetUnsupported,
    /// `VFIO_DEVICE_RESET` failed.
    ResetFailed {
        /// The errno.
        errno: i32,
    },
    /// Pinning DMA memory failed with ENOMEM: the locked-memory limit is low.
    MemlockLimit,
    /// Interrupts were asked for ([`crate::VfioOptions::max_irq_vectors`])
    /// but none could be enabled: the device offers no MSI-X or MSI vector
    /// with eventfd signalling, or the kernel refused every count. The
    /// platform reports 0 vectors and the driver polls.
    NoInterrupts {
        /// The errno of the last failed `VFIO_DEVICE_*_IRQ*` call or of
        /// `eventfd`; `None` when the device simply has no MSI-X or MSI.
        errno: Option<i32>,
    },
    /// The kernel refused as many vectors as wanted; fewer were enabled.
    FewerIrqVectors {
        /// MSI-X or MSI.
        kind: IrqKind,
        /// Vectors wanted: the device's count capped by the options.
        wanted: u16,
        /// Vectors enabled.
        enabled: u16,
    },
}

impl fmt::Display for Notice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Notice::HugePagesUnavailable { errno } => write!(
                f,
                "huge pages not configured (mmap MAP_HUGETLB 2 MiB failed: {}); DMA memory falls back to \
                 4 KiB pages. To use huge pages: echo 512 > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages \
                 (or hugepages=512 on the kernel command line)",
                io::Error::from_raw_os_error(*errno)
            ),
            Notice::DefaultIovaRanges => f.write_str(
                "the IOMMU did not report its valid IOVA ranges (kernel older than 5.4); using the default \
                 1 MiB..512 GiB minus the x86 MSI window 0xfee00000..0xfeefffff",
            ),
            Notice::ResetUnsupported => {
                f.write_str("the device does not support VFIO_DEVICE_RESET; it is not reset on open/close")
            }
            Notice::ResetFailed { errno } => write!(
                f,
                "VFIO_DEVICE_RESET failed: {}",
                io::Error::from_raw_os_error(*errno)
            ),
            Notice::MemlockLimit => f.write_str(
                "pinning DMA memory failed with ENOMEM: raise the locked-memory limit (ulimit -l unlimited) \
                 or run as root",
            ),
            Notice::NoInterrupts { errno: None } => f.write_str(
                "the device offers no MSI-X or MSI vectors with eventfd signalling; no interrupts, the \
                 driver polls",
            ),
            Notice::NoInterrupts { errno: Some(e) } => write!(
                f,
                "enabling MSI-X/MSI interrupts failed ({}); no interrupts, the driver polls",
                io::Error::from_raw_os_error(*e)
            ),
            Notice::FewerIrqVectors {
                kind,
                wanted,
                enabled,
            } => write!(
                f,
                "the kernel refused {wanted} {kind} vectors; {enabled} enabled (the host may be short of \
                 interrupt vectors)"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn has(m: &str, needles: &[&str]) {
        for n in needles {
            assert!(m.contains(n), "{n:?} missing from: {m}");
        }
    }

    #[test]
    fn permission_denied_names_the_file_and_the_fixes() {
        let m = Error::PermissionDenied {
            path: "/dev/vfio/42".into(),
        }
        .to_string();
        has(
            &m,
            &[
                "permission denied opening /dev/vfio/42",
                "run as root",
                "chown $USER /dev/vfio/42",
                "ulimit -l",
            ],
        );
    }

    #[test]
    fn vfio_missing_busy_and_not_viable_say_what_to_do() {
        has(
            &Error::VfioUnavailable {
                path: "/dev/vfio/vfio".into(),
            }
            .to_string(),
            &["/dev/vfio/vfio does not exist", "modprobe vfio-pci"],
        );
        has(
            &Error::GroupBusy {
                path: "/dev/vfio/7".into(),
            }
            .to_string(),
            &["/dev/vfio/7 is busy", "another process"],
        );
        has(
            &Error::GroupNotViable { group: 7 }.to_string(),
            &[
                "group 7 is not viable",
                "/sys/kernel/iommu_groups/7/devices",
                "vfio-pci",
            ],
        );
        has(
            &Error::StillInUse { handles: 2 }.to_string(),
            &["2 other handle(s)"],
        );
    }

    #[test]
    fn hugepage_notice_says_it_falls_back_and_how_to_reserve_pages() {
        let m = Notice::HugePagesUnavailable {
            errno: libc::ENOMEM,
        }
        .to_string();
        has(
            &m,
            &[
                "huge pages not configured",
                "falls back to 4 KiB pages",
                "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages",
                "hugepages=512",
            ],
        );
        has(&Notice::MemlockLimit.to_string(), &["ulimit -l"]);
        has(
            &Notice::NoInterrupts {
                errno: Some(libc::ENOSPC),
            }
            .to_string(),
            &["enabling MSI-X/MSI interrupts failed", "the driver polls"],
        );
        has(
            &Notice::NoInterrupts { errno: None }.to_string(),
            &["no MSI-X or MSI vectors", "the driver polls"],
        );
        has(
            &Notice::FewerIrqVectors {
                kind: IrqKind::MsiX,
                wanted: 64,
                enabled: 16,
            }
            .to_string(),
            &["refused 64 MSI-X vectors", "16 enabled"],
        );
    }

    #[test]
    fn vfio_open_errors_become_actionable_errors() {
        let denied = io::Error::from_raw_os_error(libc::EACCES);
        match device_error(VfioError::OpenGroup(denied, "5".into()), 5) {
            Error::PermissionDenied { path } => assert_eq!(path, Path::new("/dev/vfio/5")),
            e => panic!("{e}"),
        }
        let busy = io::Error::from_raw_os_error(libc::EBUSY);
        assert!(matches!(
            device_error(VfioError::OpenGroup(busy, "5".into()), 5),
            Error::GroupBusy { .. }
        ));
        assert!(matches!(
            device_error(VfioError::GroupViable, 5),
            Error::GroupNotViable { group: 5 }
        ));
        let missing = io::Error::from_raw_os_error(libc::ENOENT);
        match container_error(VfioError::OpenContainer(missing)) {
            Error::VfioUnavailable { path } => assert_eq!(path, Path::new("/dev/vfio/vfio")),
            e => panic!("{e}"),
        }
        let denied = io::Error::from_raw_os_error(libc::EACCES);
        assert!(matches!(
            container_error(VfioError::OpenContainer(denied)),
            Error::PermissionDenied { .. }
        ));
    }

    #[test]
    fn sources_are_chained() {
        use std::error::Error as _;
        let e = Error::Os {
            what: "mmap of BAR0",
            source: io::Error::from_raw_os_error(libc::EINVAL),
        };
        assert!(e.source().is_some());
        assert!(e.to_string().starts_with("mmap of BAR0: "));
        assert!(Error::NoIommuGroup { addr: "x".into() }.source().is_none());
    }
}
