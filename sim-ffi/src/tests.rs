//! The C ABI driven the way the QEMU device drives it.

use super::*;
use std::sync::atomic::{AtomicU32, Ordering};

static IRQS: AtomicU32 = AtomicU32::new(0);

unsafe extern "C" fn refuse_read(_: *mut c_void, _: u64, _: *mut c_void, _: u64) -> c_int {
    1
}
unsafe extern "C" fn refuse_write(_: *mut c_void, _: u64, _: *const c_void, _: u64) -> c_int {
    1
}
unsafe extern "C" fn never_mapped(_: *mut c_void, _: u64, _: u64) -> c_int {
    0
}
unsafe extern "C" fn count_irq(_: *mut c_void, _: u32) {
    IRQS.fetch_add(1, Ordering::SeqCst);
}

fn host() -> Mlx5ModelHost {
    Mlx5ModelHost {
        abi_version: ABI_VERSION,
        opaque: std::ptr::null_mut(),
        dma_read: Some(refuse_read),
        dma_write: Some(refuse_write),
        dma_mapped: Some(never_mapped),
        irq: Some(count_irq),
    }
}

#[test]
fn create_reports_the_pci_identity_and_refuses_bad_arguments() {
    let h = host();
    let mut info = Mlx5ModelInfo {
        pci_vendor_id: 0,
        pci_device_id: 0,
        pci_class: 0,
        msix_vectors: 0,
        bar0_size: 0,
    };
    // SAFETY: valid strings, host and info.
    let m = unsafe { mlx5_model_create(c"cx5,ib".as_ptr(), std::ptr::null(), &h, &mut info) };
    assert!(!m.is_null());
    assert_eq!(
        (info.pci_vendor_id, info.pci_device_id, info.pci_class),
        (0x15b3, 0x1017, 0x0207)
    );
    assert_eq!(info.bar0_size, 32 << 20);
    assert_eq!(info.msix_vectors, 64);
    // SAFETY: live model.
    unsafe {
        // fw_rev 16.x at offset 0; cmdif_rev 5 (high half) and the sub-minor at offset 4.
        assert_eq!(mlx5_model_mmio_read(m, 0, 0, 4) & 0xffff, 16);
        assert_eq!(mlx5_model_mmio_read(m, 0, 4, 4) >> 16, 5);
        // A bad access reads all ones and is survived.
        assert_eq!(mlx5_model_mmio_read(m, 0, 3, 4), 0xffff_ffff);
        mlx5_model_mmio_write(m, 0, 64 << 20, 4, 0);
        assert_eq!(mlx5_model_failed(m), 0);
        mlx5_model_reset(m);
        mlx5_model_destroy(m);
    }
    for bad in [c"cx9", c"cx5,roce", c"cx5,ib,x", c""] {
        // SAFETY: valid strings and host.
        let m =
            unsafe { mlx5_model_create(bad.as_ptr(), std::ptr::null(), &h, std::ptr::null_mut()) };
        assert!(m.is_null(), "{bad:?}");
    }
    let mut old = host();
    old.abi_version = ABI_VERSION + 1;
    // SAFETY: valid string and host.
    let m = unsafe {
        mlx5_model_create(
            c"cx5".as_ptr(),
            std::ptr::null(),
            &old,
            std::ptr::null_mut(),
        )
    };
    assert!(m.is_null(), "ABI mismatch refused");
    let mut missing = host();
    missing.irq = None;
    // SAFETY: valid string and host.
    let m = unsafe {
        mlx5_model_create(
            c"cx5".as_ptr(),
            std::ptr::null(),
            &missing,
            std::ptr::null_mut(),
        )
    };
    assert!(m.is_null(), "missing callback refused");
}

#[test]
fn a_command_whose_dma_the_host_refuses_is_an_iommu_fault_in_the_trace() {
    let h = host();
    let path = std::env::temp_dir().join(format!("mlx5-sim-ffi-trace-{}.log", std::process::id()));
    let cpath = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: valid strings and host.
    let m = unsafe { mlx5_model_create(c"cx5".as_ptr(), cpath.as_ptr(), &h, std::ptr::null_mut()) };
    assert!(!m.is_null());
    // SAFETY: live model.
    unsafe {
        let now = 5_000_000_000;
        mlx5_model_mmio_write(m, now, 0x10, 4, 0);
        mlx5_model_mmio_write(m, now, 0x14, 4, 0x1000);
        mlx5_model_mmio_write(m, now, 0x18, 4, 1);
        assert_eq!(mlx5_model_failed(m), 0);
        mlx5_model_destroy(m);
    }
    let text = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(text.contains("IOMMU-FAULT"), "{text}");
    assert!(text.contains("STATE hca=Disabled pages_held=0"), "{text}");
    assert!(text.ends_with("DESTROY\n"), "{text}");
}

/// A model made from `profile` with the refusing host, or NULL.
fn create(profile: &std::ffi::CStr) -> *mut Mlx5Model {
    let h = host();
    // SAFETY: valid string and host; no info wanted.
    unsafe { mlx5_model_create(profile.as_ptr(), std::ptr::null(), &h, std::ptr::null_mut()) }
}

#[test]
fn profile_strings_name_a_wire() {
    let spec = parse_profile("cx5,ib,wire=fabric-0").unwrap();
    assert_eq!(
        (spec.port_type, spec.wire.as_deref()),
        (0, Some("fabric-0"))
    );
    assert_eq!(
        parse_profile("cx7,wire=a_1").unwrap().wire.as_deref(),
        Some("a_1")
    );
    assert_eq!(parse_profile("cx5,eth").unwrap().wire, None);
    for bad in [
        "cx5,wire=",
        "cx5,wire=a b",
        "cx5,wire=a,ib",
        "cx9,wire=a",
        "wire=a",
    ] {
        assert!(parse_profile(bad).is_none(), "{bad}");
    }
}

#[test]
fn models_naming_one_wire_share_it_and_its_clock() {
    let a = create(c"cx5,wire=shared-clock");
    let b = create(c"cx5,wire=shared-clock");
    assert!(!a.is_null() && !b.is_null());
    // An InfiniBand port cannot join an Ethernet wire.
    assert!(create(c"cx5,ib,wire=shared-clock").is_null());
    // SAFETY: live models, one thread.
    unsafe {
        let (da, db) = (&(*a).dev, &(*b).dev);
        assert_ne!(da.port_mac(), db.port_mac(), "two functions, two MACs");
        let solo = create(c"cx5");
        assert_eq!(
            (*solo).dev.port_mac(),
            Device::new(SimConfig::default()).port_mac(),
            "a model on no wire keeps the default seed"
        );
        mlx5_model_destroy(solo);
        let now = 10_000_000_000;
        assert_eq!(mlx5_model_next_deadline(a), -1);
        // A posted doorbell on b (UAR page 16, never allocated): a's
        // deadline is the wire's, so a's timer alone runs b's work.
        let uar = 16 * 4096;
        mlx5_model_mmio_write(b, now, uar + 0x20, 4, 0x1234);
        let due = mlx5_model_next_deadline(b);
        assert!(due > now as i64);
        assert_eq!(mlx5_model_next_deadline(a), due);
        assert!(db.violations().is_empty(), "posted, not yet run");
        mlx5_model_tick(a, due as u64);
        assert_eq!(db.violations().len(), 1, "run by a's tick");
        assert_eq!(mlx5_model_next_deadline(a), -1);
        // An access to a brings b's clock along.
        mlx5_model_mmio_read(a, now + 5_000_000_000, 0x1010, 4);
        assert_eq!(db.now_ns(), now + 5_000_000_000);
        mlx5_model_destroy(a);
        mlx5_model_destroy(b);
    }
    // The last member gone, the name starts a new wire (of any link type).
    let c = create(c"cx5,ib,wire=shared-clock");
    assert!(!c.is_null());
    // SAFETY: live model.
    unsafe { mlx5_model_destroy(c) };
}
