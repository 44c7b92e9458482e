//! `mlx5 devices`: the ConnectX functions (PCI vendor 0x15b3) sysfs shows,
//! with their bound driver, IOMMU group and what is missing before
//! `--device vfio:ADDR` can open them (docs/hardware.md walks through the
//! same steps).
//!
//! Everything comes from sysfs: `bus/pci/devices/ADDR/{vendor,device}`, the
//! `driver` and `iommu_group` links, and `kernel/iommu_groups/N/devices`
//! for the other members of the group; the group's character device is
//! `/dev/vfio/N`. Both roots can be moved (`--sysfs-root`, `--dev-root`) so
//! tests build a fake tree.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::common::error::CliError;
use crate::common::target::{profile_short, PROFILES};

/// PCI vendor id of Mellanox/NVIDIA networking (docs/firmware.md §1.1).
pub const VENDOR: u16 = 0x15b3;

/// Device names by PCI device id: the supported-devices table of README.md
/// (docs/firmware.md §1.1, from Linux's `mlx5_core_pci_table` and
/// rdma-core's `hca_table`), physical and virtual functions.
const NAMES: &[(u16, &str, bool)] = &[
    (0x1011, "Connect-IB", false),
    (0x1012, "Connect-IB", true),
    (0x1013, "ConnectX-4", false),
    (0x1014, "ConnectX-4", true),
    (0x1015, "ConnectX-4 Lx", false),
    (0x1016, "ConnectX-4 Lx", true),
    (0x1017, "ConnectX-5", false),
    (0x1018, "ConnectX-5", true),
    (0x1019, "ConnectX-5 Ex", false),
    (0x101a, "ConnectX-5 Ex", true),
    (0x101b, "ConnectX-6", false),
    (0x101c, "ConnectX-6", true),
    (0x101d, "ConnectX-6 Dx", false),
    (0x101e, "ConnectX family mlx5Gen", true),
    (0x101f, "ConnectX-6 Lx", false),
    (0x1021, "ConnectX-7", false),
    (0x1023, "ConnectX-8", false),
    (0x1025, "ConnectX-9", false),
    (0x1027, "ConnectX-10", false),
    (0xa2d2, "BlueField", false),
    (0xa2d3, "BlueField", true),
    (0xa2d6, "BlueField-2", false),
    (0xa2dc, "BlueField-3", false),
    (0xa2df, "BlueField-4", false),
];

/// The name of a device id and whether it is a virtual function.
pub fn name(device: u16) -> Option<(&'static str, bool)> {
    NAMES
        .iter()
        .find(|(id, _, _)| *id == device)
        .map(|(_, n, vf)| (*n, *vf))
}

/// The model profile of the same generation (`sim:cx5`), if one exists.
fn model_of(device: u16) -> Option<String> {
    let (n, _) = name(device)?;
    let short = match n {
        "ConnectX-4 Lx" => "cx4lx",
        "ConnectX-5" | "ConnectX-5 Ex" => "cx5",
        "ConnectX-6 Dx" => "cx6dx",
        "ConnectX-7" => "cx7",
        _ => return None,
    };
    PROFILES
        .iter()
        .find(|(s, _)| *s == short)
        .map(|(_, p)| format!("sim:{}", profile_short(*p)))
}

/// Drivers that may hold another function of the group without making it
/// unusable for VFIO: vfio-pci itself, pci-stub and the PCIe port driver
/// (Linux `drivers/vfio/group.c`, driver_managed_dma); docs/hardware.md §2.
const GROUP_OK_DRIVERS: &[&str] = &["vfio-pci", "pci-stub", "pcieport"];

/// One step still missing before VFIO can open a function.
struct Missing {
    what: String,
    fix: Vec<String>,
}

/// What sysfs says about one function.
struct Function {
    addr: String,
    device: u16,
    driver: Option<String>,
    group: Option<u32>,
    missing: Vec<Missing>,
}

/// The last path component of a symlink's target, `None` if no link.
fn link_name(p: &Path) -> io::Result<Option<String>> {
    match fs::read_link(p) {
        Ok(t) => Ok(t.file_name().map(|n| n.to_string_lossy().into_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

fn hex_id(p: &Path) -> Option<u16> {
    let t = fs::read_to_string(p).ok()?;
    u16::from_str_radix(t.trim().trim_start_matches("0x"), 16).ok()
}

fn unbind_bind(addr: &str, driver: Option<&str>) -> Vec<String> {
    let mut v = vec!["modprobe vfio-pci".to_string()];
    if let Some(d) = driver {
        v.push(format!("echo {addr} > /sys/bus/pci/drivers/{d}/unbind"));
    }
    v.push(format!(
        "echo vfio-pci > /sys/bus/pci/devices/{addr}/driver_override"
    ));
    v.push(format!("echo {addr} > /sys/bus/pci/drivers/vfio-pci/bind"));
    v
}

/// What is missing for one function, in the order to fix it (binding to
/// vfio-pci fails while the IOMMU is off).
fn missing(sys: &Path, dev_root: &Path, f: &Function) -> Vec<Missing> {
    let mut out = Vec::new();
    let Some(group) = f.group else {
        out.push(Missing {
            what: "no IOMMU group: the IOMMU is off".into(),
            fix: vec![
                "enable VT-d (Intel) or AMD-Vi (AMD) in the firmware setup".into(),
                "add intel_iommu=on iommu=pt (Intel) or amd_iommu=on iommu=pt (AMD) to the kernel command line, then reboot".into(),
            ],
        });
        if f.driver.as_deref() != Some("vfio-pci") {
            out.push(Missing {
                what: format!(
                    "bound to {}, not vfio-pci (after the IOMMU is on)",
                    f.driver.as_deref().unwrap_or("no driver")
                ),
                fix: unbind_bind(&f.addr, f.driver.as_deref()),
            });
        }
        return out;
    };
    if f.driver.as_deref() != Some("vfio-pci") {
        out.push(Missing {
            what: format!(
                "bound to {}, not vfio-pci",
                f.driver.as_deref().unwrap_or("no driver")
            ),
            fix: unbind_bind(&f.addr, f.driver.as_deref()),
        });
    }
    // The other functions of the group: VFIO refuses a group one of whose
    // members a host driver holds ("group is not viable").
    let members = sys.join(format!("kernel/iommu_groups/{group}/devices"));
    let mut others: Vec<(String, String)> = fs::read_dir(&members)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let a = e.file_name().to_string_lossy().into_owned();
            if a == f.addr {
                return None;
            }
            let d = link_name(&sys.join("bus/pci/devices").join(&a).join("driver")).ok()??;
            (!GROUP_OK_DRIVERS.contains(&d.as_str())).then_some((a, d))
        })
        .collect();
    others.sort();
    for (a, d) in others {
        out.push(Missing {
            what: format!("{a} in the same IOMMU group {group} is bound to {d}"),
            fix: vec![format!("echo {a} > /sys/bus/pci/drivers/{d}/unbind")],
        });
    }
    // The group's device node exists once a member is bound to vfio-pci.
    if f.driver.as_deref() == Some("vfio-pci") {
        let node = dev_root.join(format!("vfio/{group}"));
        let shown = format!("/dev/vfio/{group}");
        match fs::OpenOptions::new().read(true).write(true).open(&node) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => out.push(Missing {
                what: format!("{shown} does not exist"),
                fix: vec!["modprobe vfio-pci".into()],
            }),
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => out.push(Missing {
                what: format!("{shown} is not readable and writable by this user"),
                fix: vec![
                    format!("chown $USER {shown} (or a udev rule; root works)"),
                    "ulimit -l unlimited (VFIO pins every DMA page)".into(),
                ],
            }),
            // EBUSY: the group is already open.
            Err(e) if e.raw_os_error() == Some(16) => out.push(Missing {
                what: format!("{shown} is open in another process (a VM, another mlx5 run)"),
                fix: vec![format!("find it with: fuser -v {shown}")],
            }),
            Err(e) => out.push(Missing {
                what: format!("cannot open {shown}: {e}"),
                fix: vec!["see docs/hardware.md §4".into()],
            }),
        }
    }
    out
}

/// Every function of vendor 0x15b3 under `sys` (sorted by address).
fn scan(sys: &Path, dev_root: &Path) -> Result<Vec<Function>, CliError> {
    let dir = sys.join("bus/pci/devices");
    let entries = fs::read_dir(&dir).map_err(|e| CliError::NoDevice {
        what: format!("cannot list PCI devices in {}: {e}", dir.display()),
        hint: "mlx5 devices reads sysfs (Linux); on other systems use the model: --device sim"
            .into(),
    })?;
    let mut out = Vec::new();
    for e in entries.flatten() {
        let p = e.path();
        if hex_id(&p.join("vendor")) != Some(VENDOR) {
            continue;
        }
        let Some(device) = hex_id(&p.join("device")) else {
            continue;
        };
        let addr = e.file_name().to_string_lossy().into_owned();
        let mut f = Function {
            device,
            driver: link_name(&p.join("driver")).ok().flatten(),
            group: link_name(&p.join("iommu_group"))
                .ok()
                .flatten()
                .and_then(|g| g.parse().ok()),
            missing: Vec::new(),
            addr,
        };
        f.missing = missing(sys, dev_root, &f);
        out.push(f);
    }
    out.sort_by(|a, b| a.addr.cmp(&b.addr));
    Ok(out)
}

fn to_json(f: &Function) -> Value {
    let named = name(f.device);
    json!({
        "address": f.addr,
        "vendor_id": format!("{VENDOR:#06x}"),
        "device_id": format!("{:#06x}", f.device),
        "name": named.map(|(n, _)| n),
        "function": named.map(|(_, vf)| if vf { "virtual" } else { "physical" }),
        "supported": named.is_some(),
        "driver": f.driver,
        "iommu_group": f.group,
        "vfio_group_device": f.group.map(|g| format!("/dev/vfio/{g}")),
        "ready": named.is_some() && f.missing.is_empty(),
        "missing": f.missing.iter().map(|m| json!({"what": m.what, "fix": m.fix})).collect::<Vec<_>>(),
        "device_option": format!("vfio:{}", f.addr),
        "model": model_of(f.device),
    })
}

/// `mlx5 devices`.
pub fn run(sys: &Path, dev_root: &Path, json_mode: bool) -> (Value, Result<(), CliError>) {
    let funcs = match scan(sys, dev_root) {
        Ok(f) => f,
        Err(e) => return (Value::Null, Err(e)),
    };
    if !json_mode {
        print_text(&funcs);
    }
    let list: Vec<Value> = funcs.iter().map(to_json).collect();
    (
        json!({"sysfs_root": PathBuf::from(sys).display().to_string(), "devices": list}),
        Ok(()),
    )
}

fn print_text(funcs: &[Function]) {
    if funcs.is_empty() {
        outln!("no ConnectX function (PCI vendor 15b3) found; `--device sim` runs on the model");
        return;
    }
    outln!(
        "{:<14} {:<6} {:<32} {:<10} {:<6} ready",
        "address",
        "id",
        "device",
        "driver",
        "iommu"
    );
    for f in funcs {
        let n = match name(f.device) {
            Some((n, vf)) => format!("{n}{}", if vf { " VF" } else { "" }),
            None => "unknown (not supported)".into(),
        };
        let ready = if name(f.device).is_none() {
            "no"
        } else if f.missing.is_empty() {
            "yes"
        } else {
            "no"
        };
        outln!(
            "{:<14} {:<6} {:<32} {:<10} {:<6} {ready}",
            f.addr,
            format!("{:04x}", f.device),
            n,
            f.driver.as_deref().unwrap_or("-"),
            f.group.map_or("-".into(), |g| g.to_string()),
        );
    }
    for f in funcs {
        outln!();
        if f.missing.is_empty() && name(f.device).is_some() {
            outln!("{}: ready: mlx5 selftest --device vfio:{}", f.addr, f.addr);
            continue;
        }
        if name(f.device).is_none() {
            outln!(
                "{}: device id {:04x} is not in the supported list (README.md)",
                f.addr,
                f.device
            );
        }
        for m in &f.missing {
            outln!("{}: missing: {}", f.addr, m.what);
            for c in &m.fix {
                outln!("    {c}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_supported_id_has_a_name() {
        for id in mlx5_vfio::pci::CONNECTX_DEVICE_IDS {
            assert!(name(*id).is_some(), "{id:#06x}");
        }
        assert_eq!(NAMES.len(), mlx5_vfio::pci::CONNECTX_DEVICE_IDS.len());
    }

    #[test]
    fn each_profile_generation_maps_to_its_model() {
        assert_eq!(model_of(0x1017).as_deref(), Some("sim:cx5"));
        assert_eq!(model_of(0x1015).as_deref(), Some("sim:cx4lx"));
        assert_eq!(model_of(0x101d).as_deref(), Some("sim:cx6dx"));
        assert_eq!(model_of(0x1021).as_deref(), Some("sim:cx7"));
        assert_eq!(model_of(0x1023), None);
    }
}
