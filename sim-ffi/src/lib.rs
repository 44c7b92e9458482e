//! # mlx5-sim-ffi: the mlx5 device model behind a narrow, versioned C ABI
//!
//! A virtual machine monitor (QEMU, through a small PCI device of its own)
//! loads this library with `dlopen` and hosts the
//! model ([`mlx5_sim::Device::hosted`]) as a PCI function: BAR0 accesses,
//! DMA through the VMM's callbacks, MSI-X through its interrupt callback,
//! the VMM's virtual clock, and reset. The ABI is `include/mlx5_model.h`;
//! [`ABI_VERSION`] changes whenever it does.
//!
//! Every entry point runs under `catch_unwind`: a panic in the model never
//! unwinds into the VMM. After one the model is dead (reads all ones, writes
//! ignored, [`mlx5_model_failed`] returns 1) and the panic is written to the
//! trace file.
//!
//! Models of one process can share a wire (`wires.rs`): the profile
//! string `cx5,wire=a` (QEMU: `profile=cx5,,wire=a`) joins the model's
//! port to the process's wire `a`, so two PCI functions of one VMM are two
//! hosts joined by a cable (docs/wire.md).

use std::ffi::{c_char, c_int, c_void, CStr};
use std::fs::File;
use std::panic::{catch_unwind, AssertUnwindSafe};

use mlx5_sim::host::DeviceMemory;
use mlx5_sim::wire::LinkType;
use mlx5_sim::{Device, Profile, SimConfig};

mod trace;
mod wires;

/// The ABI version this library implements (`MLX5_MODEL_ABI_VERSION`).
pub const ABI_VERSION: u32 = 1;

/// BAR0 offset of the health counter (`initial_seg.health_counter`).
const HEALTH_COUNTER: u64 = 0x1010;

/// `struct mlx5_model_host`: the VMM's side.
#[repr(C)]
pub struct Mlx5ModelHost {
    /// The ABI version the VMM was built against.
    pub abi_version: u32,
    /// Passed back to every callback.
    pub opaque: *mut c_void,
    /// Copy from guest memory; 0 on success.
    pub dma_read: Option<unsafe extern "C" fn(*mut c_void, u64, *mut c_void, u64) -> c_int>,
    /// Copy to guest memory; 0 on success.
    pub dma_write: Option<unsafe extern "C" fn(*mut c_void, u64, *const c_void, u64) -> c_int>,
    /// 1 if the range is reachable.
    pub dma_mapped: Option<unsafe extern "C" fn(*mut c_void, u64, u64) -> c_int>,
    /// Send an MSI-X vector.
    pub irq: Option<unsafe extern "C" fn(*mut c_void, u32)>,
}

/// `struct mlx5_model_info`: what the VMM needs to build the PCI function.
#[repr(C)]
pub struct Mlx5ModelInfo {
    /// 0x15b3 (Mellanox).
    pub pci_vendor_id: u16,
    /// The profile's PCI device id.
    pub pci_device_id: u16,
    /// 0x0207 (InfiniBand) or 0x0200 (Ethernet): the port type.
    pub pci_class: u16,
    /// MSI-X vectors of the profile.
    pub msix_vectors: u16,
    /// BAR0 size in bytes.
    pub bar0_size: u64,
}

/// The VMM's callbacks, with the opaque pointer they take.
#[derive(Clone, Copy)]
struct Callbacks {
    opaque: *mut c_void,
    dma_read: unsafe extern "C" fn(*mut c_void, u64, *mut c_void, u64) -> c_int,
    dma_write: unsafe extern "C" fn(*mut c_void, u64, *const c_void, u64) -> c_int,
    dma_mapped: unsafe extern "C" fn(*mut c_void, u64, u64) -> c_int,
    irq: unsafe extern "C" fn(*mut c_void, u32),
}

// SAFETY: the header requires the caller to serialise every call for one
// model (QEMU holds its big lock around MMIO, timers and reset), so the
// callbacks and their opaque pointer are only ever used by one thread at a
// time, the contract the VMM gave them.
unsafe impl Send for Callbacks {}

impl Callbacks {
    fn send_irq(&self, vector: u16) {
        // SAFETY: the VMM's interrupt callback, valid until destroy; calls
        // are serialised by the VMM (header contract).
        unsafe { (self.irq)(self.opaque, u32::from(vector)) }
    }
}

impl DeviceMemory for Callbacks {
    fn read(&self, iova: u64, buf: &mut [u8]) -> bool {
        // SAFETY: `buf` is valid for `buf.len()` bytes of writes; the callback
        // copies at most that many (its contract in mlx5_model.h).
        unsafe {
            (self.dma_read)(self.opaque, iova, buf.as_mut_ptr().cast(), buf.len() as u64) == 0
        }
    }
    fn write(&self, iova: u64, data: &[u8]) -> bool {
        // SAFETY: `data` is valid for `data.len()` bytes of reads.
        unsafe { (self.dma_write)(self.opaque, iova, data.as_ptr().cast(), data.len() as u64) == 0 }
    }
    fn mapped(&self, iova: u64, len: usize) -> bool {
        // SAFETY: plain values; the callback only checks the VMM's mappings.
        unsafe { (self.dma_mapped)(self.opaque, iova, len as u64) != 0 }
    }
}

/// `struct mlx5_model`: the hosted device and its trace file.
pub struct Mlx5Model {
    dev: Device,
    trace: Option<trace::TraceFile>,
    failed: bool,
    /// Its place on a wire of the process (`,wire=NAME`).
    wire: Option<wires::Member>,
}

/// What a profile string asks for.
#[derive(Debug, PartialEq, Eq)]
struct ProfileSpec {
    profile: Profile,
    /// 0 InfiniBand, 1 Ethernet (`port_type`).
    port_type: u8,
    /// The process's wire to join.
    wire: Option<String>,
}

/// Parse `cx5`, `cx5,ib`, `cx7,eth`, each optionally followed by
/// `,wire=NAME` (a non-empty name of letters, digits, `-` and `_`).
fn parse_profile(s: &str) -> Option<ProfileSpec> {
    let (s, wire) = match s.split_once(",wire=") {
        Some((p, name)) => {
            let ok = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !ok {
                return None;
            }
            (p, Some(name.to_string()))
        }
        None => (s, None),
    };
    let mut parts = s.split(',');
    let profile = match parts.next()? {
        "cx4lx" => Profile::ConnectX4Lx,
        "cx5" => Profile::ConnectX5,
        "cx6dx" => Profile::ConnectX6Dx,
        "cx7" => Profile::ConnectX7,
        _ => return None,
    };
    let port_type = match parts.next() {
        None | Some("eth") => 1,
        Some("ib") => 0,
        Some(_) => return None,
    };
    parts.next().is_none().then_some(ProfileSpec {
        profile,
        port_type,
        wire,
    })
}

/// The ABI version of this library.
#[no_mangle]
pub extern "C" fn mlx5_model_abi_version() -> u32 {
    ABI_VERSION
}

/// Create a model; NULL on a bad profile, a missing callback, an ABI
/// mismatch or a panic.
///
/// # Safety
///
/// `profile` is a NUL-terminated string; `trace_path` is NULL or one;
/// `host` points at a filled `mlx5_model_host` whose callbacks stay valid
/// until [`mlx5_model_destroy`]; `info` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5_model_create(
    profile: *const c_char,
    trace_path: *const c_char,
    host: *const Mlx5ModelHost,
    info: *mut Mlx5ModelInfo,
) -> *mut Mlx5Model {
    if profile.is_null() || host.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    let profile = unsafe { CStr::from_ptr(profile) }
        .to_string_lossy()
        .into_owned();
    let trace_path = if trace_path.is_null() {
        None
    } else {
        // SAFETY: non-null and NUL-terminated by the caller's contract.
        let path = unsafe { CStr::from_ptr(trace_path) };
        Some(path.to_string_lossy().into_owned())
    };
    // SAFETY: non-null, and points at a filled struct by the contract.
    let h = unsafe { &*host };
    let (Some(dma_read), Some(dma_write), Some(dma_mapped), Some(irq)) =
        (h.dma_read, h.dma_write, h.dma_mapped, h.irq)
    else {
        return std::ptr::null_mut();
    };
    if h.abi_version != ABI_VERSION {
        return std::ptr::null_mut();
    }
    let cb = Callbacks {
        opaque: h.opaque,
        dma_read,
        dma_write,
        dma_mapped,
        irq,
    };
    let made = catch_unwind(move || {
        let spec = parse_profile(&profile)?;
        let irq_cb = cb;
        let make = |seed: u64| {
            let dev = Device::hosted(
                SimConfig {
                    seed,
                    ..SimConfig::profile(spec.profile)
                },
                Box::new(cb),
                Box::new(move |v| irq_cb.send_irq(v)),
            );
            dev.caps_mut(|c| c.port_type = spec.port_type);
            dev
        };
        let (dev, wire) = match &spec.wire {
            None => (make(SimConfig::default().seed), None),
            Some(name) => {
                let link = if spec.port_type == 0 {
                    LinkType::Infiniband
                } else {
                    LinkType::Ethernet
                };
                let (dev, member) = wires::join(name, link, make)?;
                (dev, Some(member))
            }
        };
        let trace = match trace_path {
            Some(path) => Some(trace::TraceFile::new(File::create(path).ok()?, &profile)),
            None => None,
        };
        Some(Mlx5Model {
            dev,
            trace,
            failed: false,
            wire,
        })
    });
    let Ok(Some(model)) = made else {
        return std::ptr::null_mut();
    };
    if !info.is_null() {
        let caps = model.dev.caps();
        let i = Mlx5ModelInfo {
            pci_vendor_id: 0x15b3,
            pci_device_id: caps.pci_device_id,
            pci_class: if caps.port_type == 0 { 0x0207 } else { 0x0200 },
            msix_vectors: caps.msix_vectors,
            bar0_size: 1u64 << (u32::from(caps.uar_sz) + 12),
        };
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { info.write(i) };
    }
    Box::into_raw(Box::new(model))
}

/// Run `f` on the model unless it failed; a panic marks it failed.
///
/// # Safety
///
/// `m` is NULL or a live pointer from [`mlx5_model_create`], used by one
/// thread at a time.
unsafe fn with_model<T>(m: *mut Mlx5Model, dead: T, f: impl FnOnce(&mut Mlx5Model) -> T) -> T {
    if m.is_null() {
        return dead;
    }
    // SAFETY: live and exclusively ours for this call (contract above).
    let model = unsafe { &mut *m };
    if model.failed {
        return dead;
    }
    match catch_unwind(AssertUnwindSafe(|| f(model))) {
        Ok(v) => v,
        Err(e) => {
            model.failed = true;
            let what = e
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| e.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic".into());
            if let Some(t) = model.trace.as_mut() {
                t.line(&format!("MODEL PANIC (device dead from here): {what}"));
            }
            dead
        }
    }
}

/// A BAR0 read of `size` (4 or 8) bytes at host time `now_ns`.
///
/// # Safety
///
/// `m` is NULL or live, calls serialised.
#[no_mangle]
pub unsafe extern "C" fn mlx5_model_mmio_read(
    m: *mut Mlx5Model,
    now_ns: u64,
    offset: u64,
    size: u32,
) -> u64 {
    let ones = if size >= 8 {
        u64::MAX
    } else {
        (1u64 << (8 * size.min(7))) - 1
    };
    // SAFETY: forwarded contract.
    unsafe {
        with_model(m, ones, |md| {
            md.bring_peers_to(now_ns);
            let v = md.dev.host_mmio_read(now_ns, offset, size);
            if offset == HEALTH_COUNTER && size == 4 {
                // A driver's health poller (Linux: every 2 s, `poll_health`).
                if let Some(t) = md.trace.as_mut() {
                    t.line(&format!("HEALTH-POLL at {now_ns} ns counter {v:#x}"));
                }
            }
            md.after_access();
            v
        })
    }
}

/// A BAR0 write of `size` (4 or 8) bytes at host time `now_ns`.
///
/// # Safety
///
/// `m` is NULL or live, calls serialised.
#[no_mangle]
pub unsafe extern "C" fn mlx5_model_mmio_write(
    m: *mut Mlx5Model,
    now_ns: u64,
    offset: u64,
    size: u32,
    value: u64,
) {
    // SAFETY: forwarded contract.
    unsafe {
        with_model(m, (), |md| {
            md.bring_peers_to(now_ns);
            md.dev.host_mmio_write(now_ns, offset, size, value);
            md.after_access();
        })
    }
}

/// Advance to `now_ns` and run what fell due.
///
/// # Safety
///
/// `m` is NULL or live, calls serialised.
#[no_mangle]
pub unsafe extern "C" fn mlx5_model_tick(m: *mut Mlx5Model, now_ns: u64) {
    // SAFETY: forwarded contract.
    unsafe {
        with_model(m, (), |md| {
            md.bring_peers_to(now_ns);
            md.dev.host_tick(now_ns);
            md.after_access();
        })
    }
}

/// Host time of the next timed work, or -1.
///
/// # Safety
///
/// `m` is NULL or live, calls serialised.
#[no_mangle]
pub unsafe extern "C" fn mlx5_model_next_deadline(m: *mut Mlx5Model) -> i64 {
    // SAFETY: forwarded contract.
    unsafe {
        with_model(m, -1, |md| {
            // A member of a wire wakes at the wire's earliest deadline.
            let peers = md.wire.as_ref().map(|w| w.peers()).unwrap_or_default();
            std::iter::once(&md.dev)
                .chain(&peers)
                .filter_map(Device::host_next_deadline_ns)
                .min()
                .map_or(-1, |t| i64::try_from(t).unwrap_or(i64::MAX))
        })
    }
}

/// System reset or function-level reset.
///
/// # Safety
///
/// `m` is NULL or live, calls serialised.
#[no_mangle]
pub unsafe extern "C" fn mlx5_model_reset(m: *mut Mlx5Model) {
    // SAFETY: forwarded contract.
    unsafe {
        with_model(m, (), |md| {
            let r = md.dev.host_reset();
            if let Some(t) = md.trace.as_mut() {
                t.line(&format!("RESET {r:?}"));
            }
            md.after_access();
        })
    }
}

/// 1 once a panic was caught (the model is dead), else 0.
///
/// # Safety
///
/// `m` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn mlx5_model_failed(m: *mut Mlx5Model) -> c_int {
    if m.is_null() {
        return 1;
    }
    // SAFETY: live by the contract.
    c_int::from(unsafe { &*m }.failed)
}

/// Destroy the model (writes the final state to the trace).
///
/// # Safety
///
/// `m` is NULL or a pointer from [`mlx5_model_create`] not yet destroyed;
/// it is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn mlx5_model_destroy(m: *mut Mlx5Model) {
    if m.is_null() {
        return;
    }
    // SAFETY: ours (contract), reclaimed once.
    let mut model = unsafe { Box::from_raw(m) };
    if let Some(w) = model.wire.take() {
        w.leave();
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        model.after_access();
        if let Some(t) = model.trace.as_mut() {
            t.line("DESTROY");
            let _ = t.flush();
        }
        drop(model);
    }));
}

impl Mlx5Model {
    /// Bring the other members of this model's wire to the host's time
    /// `now_ns` (and run what fell due on them) before this one acts, so
    /// what it sends arrives at the time it is sent.
    fn bring_peers_to(&self, now_ns: u64) {
        if let Some(w) = &self.wire {
            for peer in w.peers() {
                peer.host_tick(now_ns);
            }
        }
    }

    /// Write new trace entries and changed counters.
    fn after_access(&mut self) {
        if let Some(t) = self.trace.as_mut() {
            t.update(&self.dev);
        }
    }
}

impl Drop for Mlx5Model {
    fn drop(&mut self) {
        if let Some(t) = self.trace.as_mut() {
            let _ = t.flush();
        }
    }
}

#[cfg(test)]
mod tests;
