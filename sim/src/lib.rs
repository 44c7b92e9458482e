//! # mlx5-sim: a strict software model of ConnectX (mlx5) firmware
//!
//! The model is the other side of the wire for the `mlx5-driver`: it exposes
//! BAR0 (initialization segment, health buffer, UAR pages) and a DMA address
//! space through [`SimHal`], an implementation of [`mlx5_hal::Hal`], and
//! behaves like the firmware described in `docs/firmware.md` (PRM, `mlx5_ifc.h`, Linux and rdma-core):
//! command queue with mailboxes, tokens and signatures (§2), the HCA state
//! machine and page management (§4), UAR doorbells (§5), EQs (§6), CQs with
//! arming, overrun and resize (§7, §8), SRQs at ISSI 0 and RMPs at ISSI 1
//! with the limit event (§9), and RC queue pairs with memory keys, XRC
//! domains, the vport/RoCE commands and a traffic engine: send doorbells,
//! WQE parsing, loopback delivery (force loopback, RoCE, IB), SRQ
//! consumption, requester/responder/error/flush CQEs, RNR and retry timers
//! (`docs/fidelity.md` §14), and a frame codec for RoCE v2, RoCE v1 and
//! InfiniBand with a `Wire` that joins the ports of several devices
//! ([`wire`], [`Device::connect`]).
//!
//! It is **strict**: whatever firmware refuses, the model refuses with the
//! firmware's status and a syndrome naming the check ([`syndrome`]). Test
//! hooks: [`Device::inject`] (fault injection), [`Device::traffic`] (messages
//! from the wire, send completions, events), accounting
//! ([`Device::objects`], [`Device::pages_held`]) and a command trace
//! ([`Device::trace`]). `docs/fidelity.md` lists every modelling choice.
//!
//! Two execution modes ([`ExecMode`]): synchronous (a command runs inside the
//! doorbell write; virtual clock) and threaded (a device thread processes
//! doorbells on its own; real clock). [`host`] hosts the model in a virtual
//! machine monitor instead: DMA, interrupts and the clock are the VMM's.
//!
//! ## Example
//!
//! The model is a platform: a driver (or this example) reads its BAR0 and
//! writes its DMA memory through [`SimHal`], and the model answers as the
//! firmware would. The `mlx5-driver` crate page brings an HCA up on it.
//!
//! ```
//! use mlx5_hal::Hal;
//! use mlx5_sim::{Device, Profile, SimConfig};
//!
//! let dev = Device::new(SimConfig::profile(Profile::ConnectX5));
//! let hal = dev.hal();
//! // The initialization segment (docs/firmware.md §1.2): command interface
//! // revision 5 in the upper half of the word at 0x04, and the
//! // `initializing` bit (bit 31 at 0x1fc), which firmware clears when it is
//! // ready for a command queue. Time is virtual: the delays cost nothing.
//! assert_eq!(hal.mmio_read32(0x04) >> 16, 5);
//! let mut waited_ms = 0;
//! while hal.mmio_read32(0x1fc) >> 31 != 0 {
//!     hal.delay_us(1000);
//!     waited_ms += 1;
//!     assert!(waited_ms < 10_000, "firmware never became ready");
//! }
//! // Fault injection: firmware dies, as a driver's health check would see.
//! dev.inject().fatal(0x1);
//! assert!(dev.is_fatal());
//! // Nothing was created or given, and no rule of the firmware was broken.
//! assert_eq!(dev.objects().total(), 0);
//! assert_eq!(dev.pages_held(), 0);
//! assert!(dev.violations().is_empty());
//! ```

mod caps;
mod clock;
mod cmdif;
mod cmds;
mod device_wire;
mod dma;
mod engine;
mod errors;
mod hal;
pub mod host;
pub mod hostile;
mod inject;
mod irq;
mod mkey;
mod mmio;
mod moderation;
mod objects;
mod port;
mod qp;
mod records;
mod reset;
mod state;
pub mod syndrome;
mod trace;
mod traffic;
mod udp_link;
mod umem;
pub mod wire;

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

pub use caps::{Caps, Profile, RoceCaps};
pub use dma::IommuFault;
pub use errors::{SimError, Violation};
pub use hal::SimHal;
pub use hostile::HostileKind;
pub use inject::{Corruption, Injector};
pub use objects::ObjectCounts;
pub use port::GidEntry;
pub use qp::QpState;
pub use reset::ResetReport;
pub use trace::TraceEntry;
pub use traffic::{Delivery, Traffic, TrafficStats};
pub use udp_link::{LinkError, LinkStats, UdpLink};

use state::State;

/// How the device processes doorbells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecMode {
    /// Commands and doorbells run inside the MMIO write that rings them;
    /// the clock is virtual (`delay_us` advances it instantly).
    Synchronous,
    /// A device thread processes doorbells and timed work on its own; the
    /// clock is the real monotonic clock.
    Threaded,
}

/// Configuration of a simulated device.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Capability profile.
    pub profile: Profile,
    /// Execution mode.
    pub mode: ExecMode,
    /// The initializing bit (BAR0 0x1fc bit 31) stays set this long after
    /// creation (device time).
    pub fw_init_delay_us: u64,
    /// `supported_issi_dw0` bitmask: 0b11 = ISSI 0 and 1, 0b01 = ISSI 0 only.
    pub issi_supported: u32,
    /// Seed for the IOVA base and other randomised values.
    pub seed: u64,
    /// Maximum bytes of DMA memory the platform hands out.
    pub dma_limit: usize,
    /// Interrupt vectors the platform enabled and delivers
    /// ([`SimHal`]'s `irq_vectors`, within the device's MSI-X vectors).
    /// Default 1: every EQ shares one vector, as on a platform that
    /// enabled a single MSI-X vector. 0 models a platform without
    /// interrupts (the driver polls).
    pub irq_vectors: u16,
    /// Whether the platform maps the UAR pages write-combining
    /// ([`SimHal`]'s `write_combining`): the driver then copies small WQEs
    /// into the BlueFlame buffers, which the model checks against the WQE
    /// in memory. Default true; false models an uncached mapping (8-byte
    /// doorbells only).
    pub write_combining: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            profile: Profile::ConnectX5,
            mode: ExecMode::Synchronous,
            fw_init_delay_us: 1000,
            issi_supported: 0b11,
            seed: 0x5eed_1234,
            dma_limit: 1 << 30,
            irq_vectors: 1,
            write_combining: true,
        }
    }
}

impl SimConfig {
    /// Default configuration with another profile.
    pub fn profile(p: Profile) -> Self {
        SimConfig {
            profile: p,
            ..SimConfig::default()
        }
    }
    /// The same configuration in threaded mode.
    pub fn threaded(self) -> Self {
        SimConfig {
            mode: ExecMode::Threaded,
            ..self
        }
    }
}

/// A snapshot of a QP (`Device::qp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInfo {
    /// QP state.
    pub state: QpState,
    /// Peer QP number (set at INIT2RTR).
    pub remote_qpn: u32,
    /// The primary address path has `fl` (force loopback) set.
    pub force_loopback: bool,
    /// Next PSN the QP sends.
    pub next_send_psn: u32,
    /// Next PSN the QP expects.
    pub next_rcv_psn: u32,
    /// Send consumer counter (WQEBBs executed or flushed).
    pub sq_consumer: u16,
    /// The head send WQE waits for an RNR or ACK timer.
    pub waiting: bool,
    /// SRQ/RMP the QP receives through.
    pub srqn: Option<u32>,
    /// CQE version of the QP's completions (0, or 1 with a user index).
    pub cqe_version: u8,
}

/// Firmware state machine (docs/firmware.md §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HcaState {
    /// Before ENABLE_HCA (or after DISABLE_HCA).
    Disabled,
    /// After ENABLE_HCA, before INIT_HCA.
    Enabled,
    /// After INIT_HCA.
    Initialized,
    /// After TEARDOWN_HCA.
    TornDown,
}

pub(crate) struct Shared {
    /// The wire the port is joined to (set once by [`Device::connect`]).
    pub wire: std::sync::OnceLock<wire::Wire>,
    pub st: Mutex<State>,
    pub cv: Condvar,
    pub cmd_work: hal::CmdWork,
    pub idle: hal::IdleClock,
}

impl Shared {
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }
}

struct KeepAlive {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        self.shared.lock().shutdown = true;
        self.shared.cv.notify_all();
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
    }
}

/// The simulated device. Cheap to clone (shared inside).
#[derive(Clone)]
pub struct Device {
    pub(crate) shared: Arc<Shared>,
    _keep: Arc<KeepAlive>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device").finish_non_exhaustive()
    }
}

impl Device {
    /// Create a device; in threaded mode this starts the device thread.
    pub fn new(cfg: SimConfig) -> Device {
        let threaded = cfg.mode == ExecMode::Threaded;
        let shared = Arc::new(Shared {
            wire: std::sync::OnceLock::new(),
            st: Mutex::new(State::new(cfg)),
            cv: Condvar::new(),
            cmd_work: hal::CmdWork::default(),
            idle: hal::IdleClock::default(),
        });
        let thread = if threaded {
            let s = shared.clone();
            Some(
                std::thread::Builder::new()
                    .name("mlx5-sim-device".into())
                    .spawn(move || device_thread(s))
                    .expect("spawn device thread"),
            )
        } else {
            None
        };
        let keep = Arc::new(KeepAlive {
            shared: shared.clone(),
            thread: Mutex::new(thread),
        });
        Device {
            shared,
            _keep: keep,
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.lock()
    }

    /// The platform the driver runs on.
    pub fn hal(&self) -> SimHal {
        SimHal::new(self.clone())
    }

    /// Edit the capabilities (before bring-up).
    pub fn caps_mut<R>(&self, f: impl FnOnce(&mut Caps) -> R) -> R {
        let mut st = self.lock();
        let r = f(&mut st.caps);
        st.caps_changed();
        r
    }

    /// A copy of the current capabilities (MAX values).
    pub fn caps(&self) -> Caps {
        self.lock().caps.clone()
    }

    /// Live firmware objects.
    pub fn objects(&self) -> ObjectCounts {
        self.lock().object_counts()
    }

    /// Objects that were still alive when TEARDOWN_HCA ran (the firmware
    /// destroyed them), if a teardown happened.
    pub fn leaked_at_teardown(&self) -> Option<ObjectCounts> {
        self.lock().leaked_at_teardown
    }

    /// 4 KiB pages the firmware currently holds.
    pub fn pages_held(&self) -> usize {
        self.lock().pages.held.len()
    }

    /// Pages still wanted: (boot, init, regular). Negative regular = pages the
    /// firmware wants to give back.
    pub fn pages_required(&self) -> (i32, i32, i32) {
        let st = self.lock();
        (
            st.pages.boot_needed,
            st.pages.init_needed,
            st.pages.regular_needed,
        )
    }

    /// Function-level reset (PCIe FLR; what `VFIO_DEVICE_RESET` triggers,
    /// see [`SimHal::reset`]): every firmware object, every page firmware
    /// held, the command queue address and a fatal state are dropped; the
    /// HCA is Disabled and firmware initialises again (initializing bit set
    /// for `fw_init_delay_us`). DMA memory stays the host's; it may be
    /// freed afterwards. Returns what was dropped.
    pub fn function_reset(&self) -> ResetReport {
        let r = self.lock().function_reset();
        self.shared.cv.notify_all();
        r
    }

    /// Function resets so far.
    pub fn resets(&self) -> u64 {
        self.lock().resets
    }

    /// Firmware state.
    pub fn hca_state(&self) -> HcaState {
        self.lock().hca
    }

    /// The string the driver gave with SET_DRIVER_VERSION since power-on or
    /// the last reset (`None` if it sent none).
    pub fn driver_version(&self) -> Option<String> {
        self.lock().driver_version.clone()
    }

    /// Current ISSI.
    pub fn issi(&self) -> u16 {
        self.lock().issi
    }

    /// True once a fatal health syndrome is set.
    pub fn is_fatal(&self) -> bool {
        self.lock().health.fatal.is_some()
    }

    /// Bytes of DMA memory the platform handed out and not yet freed (a
    /// driver that forgot a ring, or kept pages firmware still held,
    /// leaves this above what the test itself holds).
    pub fn dma_bytes_live(&self) -> usize {
        self.lock().dma.live_bytes
    }

    /// Every IOMMU fault so far.
    pub fn iommu_faults(&self) -> Vec<IommuFault> {
        self.lock().records.faults.clone()
    }

    /// Every protocol violation so far.
    pub fn violations(&self) -> Vec<Violation> {
        self.lock().records.violations.clone()
    }

    /// Pages found modified on reclaim (`Violation::PageScribbled`).
    pub fn page_scribbles(&self) -> Vec<(u64, usize)> {
        self.lock()
            .records
            .violations
            .iter()
            .filter_map(|v| match v {
                Violation::PageScribbled { iova, offset } => Some((*iova, *offset)),
                _ => None,
            })
            .collect()
    }

    /// Every command so far (and stalled ones).
    pub fn trace(&self) -> Vec<TraceEntry> {
        self.lock().records.trace.clone()
    }

    /// Forget the trace.
    pub fn clear_trace(&self) {
        self.lock().records.trace.clear();
    }

    /// A copy of every mapped DMA region as (IOVA, bytes), in address
    /// order: what a test compares before and after traffic to show which
    /// bytes the device (or the driver) changed.
    pub fn dma_snapshot(&self) -> Vec<(u64, Vec<u8>)> {
        let s = self.lock();
        s.dma
            .regions()
            .into_iter()
            .map(|(iova, len)| {
                let mut b = vec![0u8; len];
                s.dma.read(iova, &mut b).expect("a mapped region reads");
                (iova, b)
            })
            .collect()
    }

    /// The IOVA base of the DMA space (for tests).
    pub fn iova_base(&self) -> u64 {
        self.lock().dma.base
    }

    /// The reserved lkey QUERY_SPECIAL_CONTEXTS reports.
    pub fn reserved_lkey(&self) -> u32 {
        self.lock().resd_lkey
    }

    /// State of QP `qpn`, if it exists.
    pub fn qp_state(&self, qpn: u32) -> Option<QpState> {
        self.lock().objects.qps.get(&qpn).map(|q| q.state)
    }

    /// A snapshot of QP `qpn` (state, connection, send-queue position).
    pub fn qp(&self, qpn: u32) -> Option<QpInfo> {
        let st = self.lock();
        let q = st.objects.qps.get(&qpn)?;
        Some(QpInfo {
            state: q.state,
            remote_qpn: q.remote_qpn,
            force_loopback: q.path.fl,
            next_send_psn: q.next_send_psn,
            next_rcv_psn: q.next_rcv_psn,
            sq_consumer: q.sq_ci,
            waiting: q.wait.is_some(),
            srqn: q.srqn,
            cqe_version: if q.cqe_v1() { 1 } else { 0 },
        })
    }

    /// What the last arm doorbell of CQ `cqn` asked for: `Some(true)` for
    /// solicited completions only, `Some(false)` for the next completion.
    pub fn cq_last_arm(&self, cqn: u32) -> Option<bool> {
        self.lock().objects.cqs.get(&cqn)?.last_arm_solicited
    }

    /// Numbers of the live QPs, ascending.
    pub fn qpns(&self) -> Vec<u32> {
        self.lock().objects.qps.keys().copied().collect()
    }

    /// Keys (index << 8 | variant) of the live memory keys, by index.
    pub fn mkey_keys(&self) -> Vec<u32> {
        self.lock().objects.mkeys.values().map(|k| k.key).collect()
    }

    /// The vport's `roce_en` (power-on 0; persists across ENABLE/DISABLE_HCA
    /// so a test can check that a driver restored it).
    pub fn roce_enabled(&self) -> bool {
        self.lock().port.roce_en
    }

    /// The port MAC (`nic_vport_context.permanent_address`).
    pub fn port_mac(&self) -> [u8; 6] {
        self.lock().port.mac
    }

    /// The port's IB LID (reported on IB ports).
    pub fn port_lid(&self) -> u16 {
        self.lock().port.lid
    }

    /// Programmed RoCE GID table entries, by index.
    pub fn gid_entries(&self) -> Vec<(u16, GidEntry)> {
        self.lock()
            .port
            .gids
            .iter()
            .map(|(i, g)| (*i, *g))
            .collect()
    }

    /// Fault injection.
    pub fn inject(&self) -> Injector<'_> {
        Injector { dev: self }
    }

    /// Traffic injection.
    pub fn traffic(&self) -> Traffic<'_> {
        Traffic { dev: self }
    }

    /// Device time in nanoseconds (virtual in synchronous mode).
    pub fn now_ns(&self) -> u64 {
        self.lock().now_ns()
    }

    /// Synchronous mode: advance the virtual clock and run due work.
    /// Threaded mode: sleep.
    pub fn advance_us(&self, us: u64) {
        let threaded = self.lock().clock.threaded;
        if threaded {
            std::thread::sleep(Duration::from_micros(us));
        } else {
            let mut st = self.lock();
            st.clock.vclock_ns += us * 1000;
            st.run_due();
        }
        self.pump_wire();
    }

    /// Threaded mode: wait until the device thread has processed everything
    /// queued so far (no-op in synchronous mode).
    pub fn quiesce(&self) {
        for _ in 0..10_000 {
            if self.lock().mmio_queue.is_empty() {
                return;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

fn device_thread(s: Arc<Shared>) {
    let mut st = s.lock();
    loop {
        if st.shutdown {
            return;
        }
        st.run_due();
        if let Some(w) = s.wire.get() {
            drop(st);
            w.pump();
            st = s.lock();
        }
        let wait = st
            .next_due_in_ns()
            .map(|ns| Duration::from_nanos(ns.max(1000)))
            .unwrap_or(Duration::from_millis(2))
            .min(Duration::from_millis(2));
        st =
            s.cv.wait_timeout(st, wait)
                .unwrap_or_else(|e| e.into_inner())
                .0;
    }
}
