//! The HCA: bring-up (`bringup.rs`, with the RDMA resources in
//! `rdma.rs`), the command path with its bounded waits (`cmdwait.rs`),
//! event polling and its dispatch (`service.rs`), the firmware page
//! service (`page_service.rs`), completion vectors and the interrupt wait
//! (`vectors.rs`), and teardown (`teardown.rs`) (docs/firmware.md §4).
//!
//! This file holds the [`Hca`] object, its configuration and the read-only
//! accessors; each concept lives in its own submodule.

mod bringup;
mod cmdwait;
mod in_place;
mod page_service;
pub(crate) mod rdma;
mod service;
mod teardown;
mod vectors;

use core::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use mlx5_hal::Hal;
use mlx5_regs::EventMask;

use crate::caps::{AtomicCaps, Caps};
use crate::cmd::MAX_CMD_LEN;
use crate::eq::Event;
use crate::error::Error;
use crate::loopback::{LoopbackMode, NicVport, RoceCaps};
use crate::pages::PageStats;
use crate::qp::Mtu;
use crate::stats::{CmdObserver, CmdStats};

pub use cmdwait::succeeds_when_dead;
pub(crate) use service::{Core, Gone};
pub use vectors::MAX_COMP_VECTORS;

/// Pages per MANAGE_PAGES *take* command: what the preallocated output
/// mailboxes hold ((4112 − 16) / 8 = 512; Linux takes 768 at a time at
/// teardown, `optimal_reclaimed_pages`). A give carries every page firmware
/// asked for in one command, whatever the count.
pub const PAGES_PER_COMMAND: usize = (MAX_CMD_LEN - 16) / 8;

/// Configuration of [`Hca::bring_up`]. Defaults follow Linux's timeouts
/// (docs/firmware.md §1.2: CMD 60 s, FW_PRE_INIT 120 s, RECLAIM_PAGES 5 s).
///
/// ```
/// use mlx5_driver::HcaConfig;
/// let cfg = HcaConfig { cmd_timeout_ns: 5_000_000_000, ..HcaConfig::default() };
/// assert_eq!(cfg.fw_init_timeout_ns, 120_000_000_000);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HcaConfig {
    /// Timeout of every command (default 60 s, Linux's `MLX5_TO_CMD_MS`).
    /// Replaced by the device's own (`cmd_exec_to`) when it provides its
    /// timeouts and [`HcaConfig::device_timeouts`] is set.
    pub cmd_timeout_ns: u64,
    /// Wait for the initializing bit to clear (default 120 s). The wait
    /// after the command queue is programmed uses the device's
    /// `cmd_q_init_to` instead when it provides one.
    pub fw_init_timeout_ns: u64,
    /// Use the timeouts the device publishes in its init segment
    /// (`cmd_exec_to` 0xff8, `cmd_q_init_to` 0xffc) where it provides them,
    /// as Linux does (`mlx5_tout_query_iseg`, `lib/tout.c`); default true.
    pub device_timeouts: bool,
    /// The function is a virtual function (PCI device ids of Linux's
    /// `mlx5_core_pci_table` marked `MLX5_PCI_DEV_IS_VF`): it skips the
    /// PF-only HOST_ENDIANNESS write, as Linux does (`mlx5_function_setup`).
    /// Default false.
    pub virtual_function: bool,
    /// Polling step while firmware initializes (default 2 ms, as Linux).
    pub fw_init_poll_us: u32,
    /// Page reclaim at teardown gives up after this long without progress
    /// (default 5 s).
    pub reclaim_timeout_ns: u64,
    /// Longest sleep between two completion checks; waits start by spinning
    /// and back off exponentially up to this (default 1 ms).
    pub poll_max_delay_us: u32,
    /// log2 of the async EQ size (default 12: 4096 EQEs, clamped to the
    /// device's `log_max_eq_sz`).
    pub async_eq_log_size: u8,
    /// log2 of each completion EQ's size (default 10).
    pub comp_eq_log_size: u8,
    /// Completion vectors (completion EQs) to create (default 1). Clamped
    /// to 1..=[`MAX_COMP_VECTORS`] and to what the device allows: its EQ
    /// count (`max_num_eqs`, else `2^log_max_eq`) less the async EQ
    /// ([`Hca::num_comp_vectors`] tells how many were made).
    pub comp_vectors: u8,
    /// EQEs consumed per EQ per poll at most (default 1024).
    pub eq_poll_budget: u32,
    /// Pages per DMA chunk of the page manager (default 512 = 2 MiB).
    pub page_chunk_pages: usize,
    /// Most pages firmware may hold (default 65536 = 256 MiB); past this,
    /// page requests are answered "cannot give".
    pub max_fw_pages: usize,
    /// Declare the device dead when the heartbeat counter stops changing
    /// for this long (default 6 s: Linux's 3 missed polls at its 2 s
    /// interval, docs/firmware.md §1.2/§1.3). `None` disables the check.
    pub heartbeat_timeout_ns: Option<u64>,
    /// `sw_owner_id` for INIT_HCA when the device has the capability.
    pub sw_owner_id: Option<[u8; 16]>,
    /// [`Hca::poll_events`] reads the health buffer on every this-many-th
    /// call (default 256; 1 checks every call). A data-path loop polls
    /// millions of times a second; Linux checks health every 2 s. Command
    /// waits check it on every iteration regardless.
    pub poll_health_interval: u32,
}

impl HcaConfig {
    /// The defaults, as a constant (for `static` initialisers and
    /// [`Hca::new_down`]); [`HcaConfig::default`] returns it.
    pub const DEFAULT: HcaConfig = HcaConfig {
        cmd_timeout_ns: 60_000_000_000,
        fw_init_timeout_ns: 120_000_000_000,
        device_timeouts: true,
        virtual_function: false,
        fw_init_poll_us: 2_000,
        reclaim_timeout_ns: 5_000_000_000,
        poll_max_delay_us: 1_000,
        async_eq_log_size: 12,
        comp_eq_log_size: 10,
        comp_vectors: 1,
        eq_poll_budget: 1024,
        page_chunk_pages: 512,
        max_fw_pages: 65536,
        heartbeat_timeout_ns: Some(6_000_000_000),
        sw_owner_id: None,
        poll_health_interval: 256,
    };
}

impl Default for HcaConfig {
    fn default() -> Self {
        HcaConfig::DEFAULT
    }
}

/// Firmware version from the init segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FwVersion {
    /// Major.
    pub major: u16,
    /// Minor.
    pub minor: u16,
    /// Sub-minor.
    pub subminor: u16,
    /// Command interface revision (5).
    pub cmdif_rev: u16,
}

impl core::fmt::Display for FwVersion {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.subminor)
    }
}

/// What [`Hca::teardown`] did.
#[derive(Debug, Clone, Copy)]
pub struct TeardownReport {
    /// Pages taken back from firmware during teardown.
    pub pages_reclaimed: u64,
    /// Pages firmware still held at the end (0 on success).
    pub pages_left: usize,
    /// Time the teardown took (`Hal` clock).
    pub elapsed_ns: u64,
    /// Command statistics at the end.
    pub stats: CmdStats,
    /// Page manager counters at the end.
    pub page_stats: PageStats,
}

/// What one [`Hca::poll_events`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PollReport {
    /// EQEs consumed (all EQs).
    pub eqes: u32,
    /// Page requests served.
    pub page_requests: u32,
}

/// Bring-up progress, i.e. what teardown has to undo.
#[derive(Debug, Clone, Copy, Default)]
struct Progress {
    enabled: bool,
    initialized: bool,
}

/// A brought-up HCA: the command interface, the async EQ and the
/// completion EQs (one per completion vector, [`HcaConfig::comp_vectors`]),
/// a UAR, a PD, and the firmware pages.
///
/// Type parameters: the platform `H`, a command observer `O` (trace hook,
/// `()` for none), and the capacities of the completion-event queue `CE`
/// (also the number of CQs [`Hca::arm_cq`] can keep armed at once) and the
/// async-event queue `AE`.
///
/// # Concurrency
///
/// `Hca` is `Send` and `Sync` when `H` and `O` are: every mutable piece of
/// state (command queue, EQs, page manager, event queues, statistics) is
/// behind one `spin::Mutex`, the fatal flag is atomic and the rest is
/// immutable after bring-up. [`Hca::exec`] may be called from several
/// threads at once: each command takes a slot under the lock, and the lock
/// is released between completion checks, so commands on different slots
/// are in flight together. Page commands run on the reserved slot with the
/// lock held. Event polling ([`Hca::poll_events`]) is driven by the caller
/// and also happens inside every command wait.
///
/// # Example
///
/// ```no_run
/// # fn demo<H: mlx5_hal::Hal>(hal: H) -> Result<(), mlx5_driver::Error> {
/// use mlx5_driver::{Hca, HcaConfig};
/// let hca = Hca::bring_up(hal, HcaConfig::default())?;
/// println!("fw {} issi {} max CQE {}", hca.fw_version(), hca.issi(), hca.caps().max_cqe());
/// hca.poll_events()?;
/// while let Some(ev) = hca.next_event() { println!("{ev:?}"); }
/// let report = hca.teardown()?;
/// assert_eq!(report.pages_left, 0);
/// # Ok(()) }
/// ```
pub struct Hca<H: Hal, O: CmdObserver = (), const CE: usize = 256, const AE: usize = 64> {
    hal: H,
    cfg: HcaConfig,
    core: spin::Mutex<Core<H, CE, AE>>,
    dead: AtomicBool,
    fatal: spin::Mutex<Option<Error>>,
    observer: O,
    progress: Progress,
    torn_down: bool,
    fw: FwVersion,
    /// Device-provided (command, fw-init) timeouts in use.
    device_timeouts: Option<(u64, u64)>,
    embedded_cpu: bool,
    issi: u16,
    caps: Option<Caps>,
    max_caps: Option<Caps>,
    /// The atomic page as bring-up left it (cap `atomic` only).
    atomic_caps: Option<AtomicCaps>,
    uar: Option<u32>,
    pd: Option<u32>,
    resd_lkey: u32,
    terminate_mkey: u32,
    /// RDMA resources of bring-up (DMA key, XRCD, loopback), see
    /// [`rdma`].
    pub(crate) rdma: rdma::RdmaState,
    /// Rolling 8-bit memory-key variant.
    mkey_variant: AtomicU8,
    /// Interrupt vectors of this HCA's EQs (bit `i`: vector `i`), 0 when
    /// the platform has no interrupts ([`Hca::wait_for_events`]).
    irq_mask: u64,
}

impl<H: Hal, O: CmdObserver, const CE: usize, const AE: usize> Hca<H, O, CE, AE> {
    /// Next async event (CQ error, SRQ limit, port change, ...), or
    /// [`Event::EventsLost`] if the queue overflowed.
    pub fn next_event(&self) -> Option<Event> {
        self.core.lock().events.pop()
    }

    /// Next completion event ([`Event::Completion`]), or
    /// [`Event::EventsLost`] if the queue overflowed. Nothing to do with it
    /// but poll the CQ and, for another event, arm it again with
    /// [`Hca::arm_cq`]: the HCA counted the event for the CQ's arm sequence
    /// number when it consumed the EQE.
    pub fn next_completion(&self) -> Option<Event> {
        self.core.lock().completions.pop()
    }

    /// Events lost so far: (completion queue, async queue).
    pub fn event_overflows(&self) -> (u64, u64) {
        let c = self.core.lock();
        (c.completions.overflows(), c.events.overflows())
    }

    /// EQEs consumed so far: (async EQ, completion EQs together).
    pub fn eqes_consumed(&self) -> (u64, u64) {
        let c = self.core.lock();
        (
            c.async_eq.as_ref().map_or(0, |e| e.consumed()),
            c.comp_eqs.iter().map(|e| e.consumed()).sum(),
        )
    }

    /// Capabilities (general, current) after INIT_HCA.
    ///
    /// Panics on an HCA that was never brought up ([`Hca::new_down`]
    /// without [`Hca::bring_up_in_place`]): it has read no capability.
    pub fn caps(&self) -> &Caps {
        match &self.caps {
            Some(c) => c,
            None => panic!("Hca::caps on an HCA that was never brought up"),
        }
    }

    /// Maximum capabilities (QUERY_HCA_CAP op_mod max).
    pub fn max_caps(&self) -> Option<&Caps> {
        self.max_caps.as_ref()
    }

    /// The atomic capability page (current values) read at bring-up, when
    /// the device has cap `atomic`; bring-up set its 8-byte endianness mode
    /// to host endianness when the device supports it, as Linux does.
    pub fn atomic_caps(&self) -> Option<AtomicCaps> {
        self.atomic_caps
    }

    /// The ISSI in use (0 or 1).
    pub fn issi(&self) -> u16 {
        self.issi
    }

    /// Firmware version from the init segment.
    pub fn fw_version(&self) -> FwVersion {
        self.fw
    }

    /// Pages firmware holds right now.
    pub fn pages_held_by_firmware(&self) -> usize {
        self.core.lock().pages.held()
    }

    /// Page manager counters.
    pub fn page_stats(&self) -> PageStats {
        self.core.lock().pages.stats()
    }

    /// A copy of the per-opcode command statistics.
    pub fn stats(&self) -> CmdStats {
        self.core.lock().stats
    }

    /// The UAR allocated at bring-up (for EQ/CQ doorbells).
    pub fn uar(&self) -> u32 {
        self.uar.unwrap_or(0)
    }

    /// The PD allocated at bring-up.
    pub fn pd(&self) -> u32 {
        self.pd.unwrap_or(0)
    }

    /// Reserved lkey (QUERY_SPECIAL_CONTEXTS `resd_lkey`).
    pub fn reserved_lkey(&self) -> u32 {
        self.resd_lkey
    }

    /// The DMA key made at bring-up: a physical-address memory key with
    /// local read and write on [`Hca::pd`], the default lkey of receive
    /// and send buffers. `None` when the device has no RDMA support (an
    /// Ethernet port without RoCE or force loopback).
    pub fn dma_lkey(&self) -> Option<u32> {
        self.rdma.dma_mkey
    }

    /// The XRC domain allocated at bring-up (capability `xrc`): put in the
    /// context of SRQ-attached QPs, as Linux does.
    pub fn xrcd(&self) -> Option<u32> {
        self.rdma.xrcd
    }

    /// How this function's QPs reach each other, chosen at bring-up
    /// ([`crate::loopback`]); `None` if no mode is available.
    pub fn loopback_mode(&self) -> Option<LoopbackMode> {
        self.rdma.loopback
    }

    /// The path MTU loopback QPs use (1024 bytes unless the port is
    /// smaller).
    pub fn loopback_mtu(&self) -> Mtu {
        self.rdma.mtu
    }

    /// The RoCE capability page (current values), read at bring-up when
    /// the device has RoCE.
    pub fn roce_caps(&self) -> Option<RoceCaps> {
        self.rdma.roce_caps
    }

    /// Whether RoCE is enabled on the vport now (`roce_en`, possibly set by
    /// bring-up for the loopback mode and cleared again at teardown).
    pub fn roce_enabled(&self) -> bool {
        self.rdma.roce_en
    }

    /// The NIC vport context read at bring-up (Ethernet ports with RDMA
    /// support): `roce_en` as bring-up found it, MAC, MTU.
    pub fn nic_vport(&self) -> Option<NicVport> {
        self.rdma.nic_vport
    }

    /// CQE format the driver's queue pairs ask for: always version 0
    /// (`qpc.user_index` 0xffffff when the device's `cqe_version` is 1, as
    /// Linux does for kernel QPs); the poll path reads version-0 CQEs.
    pub fn cqe_version(&self) -> u8 {
        0
    }

    pub(crate) fn mkey_variant(&self) -> &AtomicU8 {
        &self.mkey_variant
    }

    /// `terminate_scatter_list_mkey` (valid if the capability says so).
    pub fn terminate_scatter_list_mkey(&self) -> u32 {
        self.terminate_mkey
    }

    /// The lkey that ends a short receive scatter list: the device's
    /// `terminate_scatter_list_mkey` when the capability of that name is set
    /// (Linux `mlx5_ib_stage_init_init` reads it; `MLX5_TERMINATE_SCATTER_LIST_LKEY`
    /// 0x100 otherwise).
    pub fn srq_terminator(&self) -> u32 {
        match &self.caps {
            Some(c) if c.terminate_scatter_list_mkey => self.terminate_mkey,
            _ => mlx5_regs::consts::ctx::INVALID_LKEY,
        }
    }

    /// EQ number of the async EQ.
    pub fn async_eqn(&self) -> u8 {
        self.core.lock().async_eq.as_ref().map_or(0, |e| e.eqn())
    }

    /// EQ number of the completion EQ of vector 0 (put it in `cqc.c_eqn`;
    /// [`Hca::comp_eqn_of`] for the others).
    pub fn comp_eqn(&self) -> u8 {
        self.comp_eqn_of(0).unwrap_or(0)
    }

    /// The platform.
    pub fn hal(&self) -> &H {
        &self.hal
    }

    /// The configuration.
    pub fn config(&self) -> &HcaConfig {
        &self.cfg
    }

    /// The trace hook.
    pub fn observer(&self) -> &O {
        &self.observer
    }

    /// The state behind the command lock (for the object modules).
    pub(crate) fn core_lock(&self) -> spin::MutexGuard<'_, Core<H, CE, AE>> {
        self.core.lock()
    }

    /// The timeouts the device published in its init segment and the
    /// driver uses: (command, firmware initialisation) in nanoseconds;
    /// `None` when the device provides none (`cmd_q_init_to` reads 0) or
    /// [`HcaConfig::device_timeouts`] is off.
    pub fn device_timeouts(&self) -> Option<(u64, u64)> {
        self.device_timeouts
    }

    /// Is the device known dead?
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// The fatal error that killed the device, once it is known dead.
    pub fn fatal_error(&self) -> Option<Error> {
        *self.fatal.lock()
    }
}

/// The EQE event types this driver subscribes its async EQ to: Linux's
/// `MLX5_ASYNC_EVENT_MASK` (0x1f02be, which holds the QP events:
/// communication established, WQ errors, last WQE reached, SRQ limit) and
/// PAGE_REQUEST (Linux has a separate pages EQ for it). Not INTERNAL_ERROR
/// (0x08): neither Linux (`gather_async_events_mask`) nor rdma-core's VFIO
/// driver subscribes to it; a dead device is found by the health checks
/// (`crate::health`).
pub fn async_event_mask() -> EventMask {
    // QP_EVENTS (COMM_EST, WQ errors, last WQE) are inside Linux's mask
    // already; named here because the QP code relies on them.
    EventMask::LINUX_ASYNC | EventMask::QP_EVENTS | EventMask::PAGE_REQUEST
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::encode;
    use mlx5_regs::EventType;

    #[test]
    fn async_mask_is_linux_plus_page_request() {
        assert_eq!(async_event_mask().bits(), 0x1f02be | (1 << 0x0b));
        assert!(!async_event_mask().contains(EventMask::INTERNAL_ERROR));
        assert_eq!(
            EventType::PAGE_REQUEST.mask_bit(),
            EventMask::PAGE_REQUEST.bits()
        );
    }

    #[test]
    fn init_segment_timeouts_convert_as_linux() {
        use super::bringup::iseg_timeout_ns;
        assert_eq!(iseg_timeout_ns(0), 0);
        assert_eq!(iseg_timeout_ns(250), 250_000_000, "milliseconds");
        assert_eq!(iseg_timeout_ns((1 << 29) | 60), 60_000_000_000, "seconds");
        assert_eq!(iseg_timeout_ns((2 << 29) | 2), 120_000_000_000, "minutes");
        assert_eq!(iseg_timeout_ns((3 << 29) | 1), 3_600_000_000_000, "hours");
        // Bit 31 and bits 28:20 are not part of the value (Linux masks).
        assert_eq!(iseg_timeout_ns((1 << 31) | (1 << 25) | 7), 7_000_000);
    }

    #[test]
    fn pages_per_command_fills_the_mailboxes() {
        assert_eq!(PAGES_PER_COMMAND, 512);
        assert_eq!(
            encode::manage_pages_give_len(PAGES_PER_COMMAND),
            MAX_CMD_LEN
        );
    }
}
