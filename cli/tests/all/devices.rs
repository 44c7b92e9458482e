//! `mlx5 devices` on a fake sysfs tree: one ConnectX-5 bound to mlx5_core,
//! one ConnectX-6 Dx bound to vfio-pci (and its group's device node), one
//! ConnectX-7 without an IOMMU group, and a non-Mellanox function that must
//! not be listed.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use crate::common::mlx5_stdin;
use serde_json::Value;

struct Fake {
    root: PathBuf,
}

impl Fake {
    fn new(tag: &str) -> Fake {
        let root =
            std::env::temp_dir().join(format!("mlx5-cli-devices-{}-{tag}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        for d in [
            "sys/bus/pci/devices",
            "sys/bus/pci/drivers/mlx5_core",
            "sys/bus/pci/drivers/vfio-pci",
            "sys/bus/pci/drivers/e1000e",
            "dev/vfio",
        ] {
            fs::create_dir_all(root.join(d)).unwrap();
        }
        Fake { root }
    }
    fn sys(&self) -> PathBuf {
        self.root.join("sys")
    }
    fn dev(&self, addr: &str, vendor: &str, device: &str) -> PathBuf {
        let d = self.sys().join("bus/pci/devices").join(addr);
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("vendor"), format!("{vendor}\n")).unwrap();
        fs::write(d.join("device"), format!("{device}\n")).unwrap();
        d
    }
    fn bind(&self, d: &Path, driver: &str) {
        symlink(
            self.sys().join("bus/pci/drivers").join(driver),
            d.join("driver"),
        )
        .unwrap();
    }
    fn group(&self, d: &Path, g: u32) {
        let gd = self.sys().join(format!("kernel/iommu_groups/{g}/devices"));
        fs::create_dir_all(&gd).unwrap();
        symlink(gd.parent().unwrap(), d.join("iommu_group")).unwrap();
        symlink(d, gd.join(d.file_name().unwrap())).unwrap();
    }
    fn args(&self) -> [String; 4] {
        [
            "--sysfs-root".into(),
            self.sys().display().to_string(),
            "--dev-root".into(),
            self.root.join("dev").display().to_string(),
        ]
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

fn build(tag: &str) -> Fake {
    let f = Fake::new(tag);
    let a = f.dev("0000:03:00.0", "0x15b3", "0x1017");
    f.bind(&a, "mlx5_core");
    f.group(&a, 12);
    let b = f.dev("0000:04:00.0", "0x15b3", "0x101d");
    f.bind(&b, "vfio-pci");
    f.group(&b, 13);
    fs::write(f.root.join("dev/vfio/13"), "").unwrap();
    let c = f.dev("0000:05:00.0", "0x15b3", "0x1021");
    f.bind(&c, "mlx5_core");
    let n = f.dev("0000:00:1f.6", "0x8086", "0x15bb");
    f.bind(&n, "e1000e");
    f
}

fn run(f: &Fake, json: bool) -> (i32, String, String) {
    let mut args: Vec<String> = vec!["devices".into()];
    args.extend(f.args());
    if json {
        args.push("--json".into());
    }
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = mlx5_stdin(&a, "");
    (
        o.status.code().unwrap(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn text_lists_each_function_with_what_is_missing() {
    let f = build("text");
    let (code, out, err) = run(&f, false);
    assert_eq!(code, 0, "{out}{err}");
    let row = |addr: &str| {
        out.lines()
            .find(|l| l.starts_with(addr))
            .unwrap()
            .to_string()
    };
    let a = row("0000:03:00.0");
    assert!(
        a.contains("ConnectX-5") && a.contains("mlx5_core") && a.contains(" 12 "),
        "{a}"
    );
    assert!(a.trim_end().ends_with("no"), "{a}");
    let b = row("0000:04:00.0");
    assert!(b.contains("ConnectX-6 Dx") && b.contains("vfio-pci"), "{b}");
    assert!(b.trim_end().ends_with("yes"), "{b}");
    let c = row("0000:05:00.0");
    assert!(c.contains("ConnectX-7") && c.contains(" - "), "{c}");
    assert!(!out.contains("0000:00:1f.6"), "non-Mellanox listed:\n{out}");
    for want in [
        "0000:03:00.0: missing: bound to mlx5_core, not vfio-pci",
        "    echo 0000:03:00.0 > /sys/bus/pci/drivers/mlx5_core/unbind",
        "    echo vfio-pci > /sys/bus/pci/devices/0000:03:00.0/driver_override",
        "    echo 0000:03:00.0 > /sys/bus/pci/drivers/vfio-pci/bind",
        "0000:04:00.0: ready: mlx5 selftest --device vfio:0000:04:00.0",
        "0000:05:00.0: missing: no IOMMU group: the IOMMU is off",
    ] {
        assert!(out.lines().any(|l| l == want), "{want:?} not in:\n{out}");
    }
    // The IOMMU comes before the binding for the function without a group.
    let iommu = out.find("0000:05:00.0: missing: no IOMMU").unwrap();
    let bind = out.find("0000:05:00.0: missing: bound to").unwrap();
    assert!(iommu < bind);
}

#[test]
fn json_has_driver_group_and_missing_steps() {
    let f = build("json");
    let (code, out, err) = run(&f, true);
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["ok"], true);
    let d = v["devices"].as_array().unwrap();
    assert_eq!(d.len(), 3, "{v:#}");
    assert_eq!(d[0]["address"], "0000:03:00.0");
    assert_eq!(d[0]["vendor_id"], "0x15b3");
    assert_eq!(d[0]["device_id"], "0x1017");
    assert_eq!(d[0]["name"], "ConnectX-5");
    assert_eq!(d[0]["function"], "physical");
    assert_eq!(d[0]["driver"], "mlx5_core");
    assert_eq!(d[0]["iommu_group"], 12);
    assert_eq!(d[0]["ready"], false);
    assert_eq!(d[0]["model"], "sim:cx5");
    let m = d[0]["missing"].as_array().unwrap();
    assert_eq!(m.len(), 1, "{m:?}");
    assert!(m[0]["what"].as_str().unwrap().contains("not vfio-pci"));
    assert_eq!(d[1]["driver"], "vfio-pci");
    assert_eq!(d[1]["iommu_group"], 13);
    assert_eq!(d[1]["vfio_group_device"], "/dev/vfio/13");
    assert_eq!(d[1]["ready"], true);
    assert_eq!(d[1]["missing"].as_array().unwrap().len(), 0);
    assert_eq!(d[2]["iommu_group"], Value::Null);
    assert_eq!(d[2]["ready"], false);
    let m = d[2]["missing"].as_array().unwrap();
    assert!(m[0]["what"].as_str().unwrap().contains("IOMMU"), "{m:?}");
    assert!(m[0]["fix"][1].as_str().unwrap().contains("intel_iommu=on"));
}

#[test]
fn missing_device_node_and_busy_group_member_are_reported() {
    let f = build("group");
    fs::remove_file(f.root.join("dev/vfio/13")).unwrap();
    // Another function of group 13 held by a host driver.
    let o = f.dev("0000:04:00.1", "0x8086", "0x1521");
    f.bind(&o, "e1000e");
    let gd = f.sys().join("kernel/iommu_groups/13/devices/0000:04:00.1");
    symlink(&o, gd).unwrap();
    let (code, out, _) = run(&f, false);
    assert_eq!(code, 0);
    for want in [
        "0000:04:00.0: missing: 0000:04:00.1 in the same IOMMU group 13 is bound to e1000e",
        "    echo 0000:04:00.1 > /sys/bus/pci/drivers/e1000e/unbind",
        "0000:04:00.0: missing: /dev/vfio/13 does not exist",
    ] {
        assert!(out.lines().any(|l| l == want), "{want:?} not in:\n{out}");
    }
}

#[test]
fn unreadable_sysfs_exits_3() {
    let o = mlx5_stdin(&["devices", "--sysfs-root", "/nonexistent-mlx5-sysfs"], "");
    assert_eq!(o.status.code(), Some(3));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("cannot list PCI devices"), "{err}");
}
