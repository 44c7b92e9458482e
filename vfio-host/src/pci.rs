//! PCI addresses, ConnectX identification, and the sysfs checks made before
//! VFIO is touched. sysfs is read through a configurable root so the checks
//! (and their error messages) are unit-tested against a fake tree.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::Error;

/// PCI vendor id of Mellanox / NVIDIA networking.
pub const MELLANOX_VENDOR_ID: u16 = 0x15b3;

/// Device ids of the functions this driver is for (docs/firmware.md §1.1):
/// ConnectX-4..8 (and -9/-10 ids) PFs, their VFs, BlueField 1..4, Connect-IB.
pub const CONNECTX_DEVICE_IDS: &[u16] = &[
    // Physical functions: ConnectX-4, -4 Lx, -5, -5 Ex, -6, -6 Dx, -6 Lx, -7, -8, -9, -10.
    0x1013, 0x1015, 0x1017, 0x1019, 0x101b, 0x101d, 0x101f, 0x1021, 0x1023, 0x1025, 0x1027,
    // Virtual functions.
    0x1014, 0x1016, 0x1018, 0x101a, 0x101c, 0x101e,
    // BlueField, BlueField VF, BlueField-2, -3, -4.
    0xa2d2, 0xa2d3, 0xa2d6, 0xa2dc, 0xa2df, // Connect-IB PF and VF.
    0x1011, 0x1012,
];

/// Device ids of virtual functions (Linux `mlx5_core_pci_table` entries
/// marked `MLX5_PCI_DEV_IS_VF`): set `HcaConfig::virtual_function` for
/// them, the driver then skips the PF-only HOST_ENDIANNESS write.
pub const VF_DEVICE_IDS: &[u16] = &[
    0x1012, 0x1014, 0x1016, 0x1018, 0x101a, 0x101c, 0x101e, 0xa2d3,
];

/// True if `device` is a ConnectX virtual function.
pub fn is_virtual_function(device: u16) -> bool {
    VF_DEVICE_IDS.contains(&device)
}

/// True if `vendor:device` is a function this driver supports.
pub fn is_connectx(vendor: u16, device: u16) -> bool {
    vendor == MELLANOX_VENDOR_ID && CONNECTX_DEVICE_IDS.contains(&device)
}

/// A PCI function address, `domain:bus:device.function`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PciAddress {
    /// PCI segment (domain).
    pub domain: u32,
    /// Bus number.
    pub bus: u8,
    /// Device number (0..32).
    pub device: u8,
    /// Function number (0..8).
    pub function: u8,
}

impl FromStr for PciAddress {
    type Err = Error;

    /// Parse `0000:03:00.0` or `03:00.0` (domain 0), hexadecimal fields.
    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = || Error::InvalidAddress {
            input: s.to_string(),
        };
        let hex = |t: &str, max_len: usize| -> Result<u32, Error> {
            if t.is_empty() || t.len() > max_len || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(bad());
            }
            u32::from_str_radix(t, 16).map_err(|_| bad())
        };
        let parts: Vec<&str> = s.split(':').collect();
        let (domain, bus, devfn) = match parts.as_slice() {
            [d, b, df] => (hex(d, 8)?, *b, *df),
            [b, df] => (0, *b, *df),
            _ => return Err(bad()),
        };
        let (dev, func) = devfn.split_once('.').ok_or_else(bad)?;
        let bus = hex(bus, 2)?;
        let dev = hex(dev, 2)?;
        let func = hex(func, 1)?;
        if dev >= 32 || func >= 8 {
            return Err(bad());
        }
        Ok(PciAddress {
            domain,
            bus: bus as u8,
            device: dev as u8,
            function: func as u8,
        })
    }
}

impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

/// What the sysfs checks found about a function that VFIO can open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The function.
    pub addr: PciAddress,
    /// `<root>/bus/pci/devices/<addr>`.
    pub sysfs_path: PathBuf,
    /// PCI vendor id.
    pub vendor: u16,
    /// PCI device id.
    pub device: u16,
    /// IOMMU group number (`/dev/vfio/<group>`).
    pub iommu_group: u32,
}

fn read_hex_id(path: &Path) -> Result<u16, Error> {
    let text = fs::read_to_string(path).map_err(|source| Error::Sysfs {
        path: path.to_path_buf(),
        source,
    })?;
    let t = text.trim();
    u16::from_str_radix(t.trim_start_matches("0x"), 16).map_err(|_| Error::Sysfs {
        path: path.to_path_buf(),
        source: io::Error::new(io::ErrorKind::InvalidData, format!("not a hex id: {t:?}")),
    })
}

/// The last component of the target of the symlink `path`, or `None` if the
/// link does not exist.
fn link_name(path: &Path) -> Result<Option<String>, Error> {
    match fs::read_link(path) {
        Ok(target) => Ok(target.file_name().map(|n| n.to_string_lossy().into_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(Error::Sysfs {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Check, through the sysfs tree at `sysfs_root` (normally `/sys`), that the
/// function exists, is a ConnectX (unless `allow_non_mellanox`), has an IOMMU
/// group and is bound to `vfio-pci`. The checks run in this order so that
/// the first error is the one to fix first (binding to vfio-pci fails while
/// the IOMMU is off).
pub fn check_device(
    sysfs_root: &Path,
    addr: &PciAddress,
    allow_non_mellanox: bool,
) -> Result<DeviceInfo, Error> {
    let name = addr.to_string();
    let dir = sysfs_root.join("bus/pci/devices").join(&name);
    if !dir.is_dir() {
        return Err(Error::DeviceNotFound {
            addr: name,
            path: dir,
        });
    }
    let vendor = read_hex_id(&dir.join("vendor"))?;
    let device = read_hex_id(&dir.join("device"))?;
    if !allow_non_mellanox && !is_connectx(vendor, device) {
        return Err(Error::NotConnectX {
            addr: name,
            vendor,
            device,
        });
    }
    let group = link_name(&dir.join("iommu_group"))?;
    let Some(group) = group else {
        return Err(Error::NoIommuGroup { addr: name });
    };
    let iommu_group: u32 = group.parse().map_err(|_| Error::Sysfs {
        path: dir.join("iommu_group"),
        source: io::Error::new(
            io::ErrorKind::InvalidData,
            format!("IOMMU group {group:?} is not a number"),
        ),
    })?;
    let driver = link_name(&dir.join("driver"))?;
    if driver.as_deref() != Some("vfio-pci") {
        return Err(Error::NotBoundToVfio { addr: name, driver });
    }
    Ok(DeviceInfo {
        addr: *addr,
        sysfs_path: dir,
        vendor,
        device,
        iommu_group,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn virtual_functions_are_the_vf_ids_of_the_supported_set() {
        assert!(is_virtual_function(0x1018) && is_virtual_function(0x101e));
        assert!(!is_virtual_function(0x1017) && !is_virtual_function(0x1021));
        for id in VF_DEVICE_IDS {
            assert!(CONNECTX_DEVICE_IDS.contains(id), "{id:#x}");
        }
    }

    /// A throw-away fake `/sys` under the system temp directory.
    struct FakeSys {
        root: PathBuf,
    }

    impl FakeSys {
        fn new(tag: &str) -> Self {
            let root = std::env::temp_dir()
                .join(format!("mlx5-vfio-fakesys-{}-{tag}", std::process::id()));
            let _ = fs::remove_dir_all(&root);
            fs::create_dir_all(root.join("bus/pci/devices")).unwrap();
            fs::create_dir_all(root.join("bus/pci/drivers/vfio-pci")).unwrap();
            fs::create_dir_all(root.join("bus/pci/drivers/mlx5_core")).unwrap();
            fs::create_dir_all(root.join("kernel/iommu_groups/17")).unwrap();
            FakeSys { root }
        }

        fn device(&self, addr: &str, vendor: &str, device: &str) -> PathBuf {
            let d = self.root.join("bus/pci/devices").join(addr);
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("vendor"), format!("{vendor}\n")).unwrap();
            fs::write(d.join("device"), format!("{device}\n")).unwrap();
            d
        }

        fn group(&self, dev: &Path) {
            symlink(
                self.root.join("kernel/iommu_groups/17"),
                dev.join("iommu_group"),
            )
            .unwrap();
        }

        fn bind(&self, dev: &Path, driver: &str) {
            symlink(
                self.root.join("bus/pci/drivers").join(driver),
                dev.join("driver"),
            )
            .unwrap();
        }
    }

    impl Drop for FakeSys {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.root);
        }
    }

    fn addr(s: &str) -> PciAddress {
        s.parse().unwrap()
    }

    #[test]
    fn addresses_parse_and_print_canonically() {
        let a = addr("0000:03:00.0");
        assert_eq!(
            a,
            PciAddress {
                domain: 0,
                bus: 3,
                device: 0,
                function: 0
            }
        );
        assert_eq!(a.to_string(), "0000:03:00.0");
        assert_eq!(addr("af:1f.7").to_string(), "0000:af:1f.7");
        assert_eq!(addr("10000:3B:00.1").to_string(), "10000:3b:00.1");
        for bad in [
            "",
            "03:00",
            "0000:03:00",
            "0000:03:20.0",
            "0000:03:00.8",
            "0000:g3:00.0",
            "0000:003:00.0",
            "1:2:3:4.0",
            "03:00.0 ",
        ] {
            let e = bad.parse::<PciAddress>().unwrap_err();
            assert!(
                matches!(&e, Error::InvalidAddress { input } if input == bad),
                "{bad:?}"
            );
            assert!(e.to_string().contains("e.g. 0000:03:00.0"));
        }
    }

    #[test]
    fn connectx_ids() {
        assert!(is_connectx(0x15b3, 0x1017));
        assert!(is_connectx(0x15b3, 0x101e));
        assert!(is_connectx(0x15b3, 0xa2dc));
        assert!(is_connectx(0x15b3, 0x1011));
        assert!(!is_connectx(0x15b3, 0x1003), "ConnectX-3 is mlx4, not mlx5");
        assert!(!is_connectx(0x1234, 0x11e8), "QEMU edu");
        assert!(!is_connectx(0x8086, 0x1017));
    }

    #[test]
    fn a_bound_connectx_passes_every_check() {
        let s = FakeSys::new("ok");
        let d = s.device("0000:03:00.0", "0x15b3", "0x101d");
        s.group(&d);
        s.bind(&d, "vfio-pci");
        let info = check_device(&s.root, &addr("0000:03:00.0"), false).unwrap();
        assert_eq!(info.vendor, 0x15b3);
        assert_eq!(info.device, 0x101d);
        assert_eq!(info.iommu_group, 17);
        assert_eq!(info.sysfs_path, d);
    }

    #[test]
    fn missing_device_says_where_it_looked() {
        let s = FakeSys::new("missing");
        let e = check_device(&s.root, &addr("0000:04:00.0"), false).unwrap_err();
        assert!(matches!(e, Error::DeviceNotFound { .. }));
        let m = e.to_string();
        assert!(m.contains("no PCI function 0000:04:00.0"), "{m}");
        assert!(m.contains("bus/pci/devices/0000:04:00.0"), "{m}");
        assert!(m.contains("lspci"), "{m}");
    }

    #[test]
    fn non_connectx_is_refused_unless_the_caller_opts_out() {
        let s = FakeSys::new("edu");
        let d = s.device("0000:00:03.0", "0x1234", "0x11e8");
        s.group(&d);
        s.bind(&d, "vfio-pci");
        let e = check_device(&s.root, &addr("0000:00:03.0"), false).unwrap_err();
        assert!(matches!(
            e,
            Error::NotConnectX {
                vendor: 0x1234,
                device: 0x11e8,
                ..
            }
        ));
        let m = e.to_string();
        assert!(
            m.contains("0000:00:03.0 is 1234:11e8, not a ConnectX"),
            "{m}"
        );
        let info = check_device(&s.root, &addr("0000:00:03.0"), true).unwrap();
        assert_eq!((info.vendor, info.device), (0x1234, 0x11e8));
    }

    #[test]
    fn no_iommu_group_explains_how_to_turn_the_iommu_on() {
        let s = FakeSys::new("nogroup");
        let d = s.device("0000:03:00.0", "0x15b3", "0x1017");
        s.bind(&d, "mlx5_core");
        let e = check_device(&s.root, &addr("0000:03:00.0"), false).unwrap_err();
        assert!(matches!(e, Error::NoIommuGroup { .. }));
        let m = e.to_string();
        for needle in [
            "no IOMMU group",
            "intel_iommu=on",
            "amd_iommu=on",
            "iommu=pt",
        ] {
            assert!(m.contains(needle), "{needle:?} missing from: {m}");
        }
    }

    #[test]
    fn bound_to_mlx5_core_explains_unbind_override_and_bind() {
        let s = FakeSys::new("mlx5core");
        let d = s.device("0000:03:00.0", "0x15b3", "0x1017");
        s.group(&d);
        s.bind(&d, "mlx5_core");
        let e = check_device(&s.root, &addr("0000:03:00.0"), false).unwrap_err();
        assert!(matches!(&e, Error::NotBoundToVfio { driver: Some(d), .. } if d == "mlx5_core"));
        let m = e.to_string();
        for needle in [
            "is bound to mlx5_core, not vfio-pci",
            "echo 0000:03:00.0 > /sys/bus/pci/drivers/mlx5_core/unbind",
            "echo vfio-pci > /sys/bus/pci/devices/0000:03:00.0/driver_override",
            "echo 0000:03:00.0 > /sys/bus/pci/drivers/vfio-pci/bind",
        ] {
            assert!(m.contains(needle), "{needle:?} missing from: {m}");
        }
    }

    #[test]
    fn unbound_device_skips_the_unbind_step() {
        let s = FakeSys::new("unbound");
        let d = s.device("0000:03:00.1", "0x15b3", "0x1018");
        s.group(&d);
        let e = check_device(&s.root, &addr("0000:03:00.1"), false).unwrap_err();
        assert!(matches!(e, Error::NotBoundToVfio { driver: None, .. }));
        let m = e.to_string();
        assert!(m.contains("not bound to any driver"), "{m}");
        assert!(!m.contains("unbind"), "{m}");
        assert!(
            m.contains("echo 0000:03:00.1 > /sys/bus/pci/drivers/vfio-pci/bind"),
            "{m}"
        );
    }

    #[test]
    fn unreadable_ids_are_reported_with_the_file() {
        let s = FakeSys::new("garbage");
        s.device("0000:03:00.0", "zzz", "0x1017");
        let e = check_device(&s.root, &addr("0000:03:00.0"), false).unwrap_err();
        let m = e.to_string();
        assert!(matches!(e, Error::Sysfs { .. }));
        assert!(m.contains("0000:03:00.0/vendor"), "{m}");
    }
}
