//! The HCA: bring-up, the command path with its bounded waits, event
//! polling, page service and teardown (facts §4).

use core::sync::atomic::{AtomicBool, Ordering};

use mlx5_hal::Hal;
use mlx5_regs::consts::op_mod;
use mlx5_regs::layouts::{cmd_hca_cap, initial_seg};
use mlx5_regs::{CmdStatus, DeliveryStatus, EventMask, Opcode};

use crate::caps::Caps;
use crate::cmd::encode;
use crate::cmd::{CmdQueue, Posted, MAX_CMD_LEN};
use crate::eq::{Event, EventQueue, EventSink};
use crate::error::Error;
use crate::health::{mmio_field, Heartbeat};
use crate::pages::{PageManager, PageRequest, PageStats};
use crate::stats::{CmdObserver, CmdOutcome, CmdRecord, CmdStats};

/// Pages per MANAGE_PAGES command: what the preallocated mailboxes carry
/// ((4112 − 16) / 8 = 512).
pub const PAGES_PER_COMMAND: usize = (MAX_CMD_LEN - 16) / 8;

/// Configuration of [`Hca::bring_up`]. Defaults follow Linux's timeouts
/// (facts §1.2: CMD 60 s, FW_PRE_INIT 120 s, RECLAIM_PAGES 5 s).
///
/// ```
/// use mlx5_driver::HcaConfig;
/// let cfg = HcaConfig { cmd_timeout_ns: 5_000_000_000, ..HcaConfig::default() };
/// assert_eq!(cfg.fw_init_timeout_ns, 120_000_000_000);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HcaConfig {
    /// Timeout of every command (default 60 s).
    pub cmd_timeout_ns: u64,
    /// Wait for the initializing bit to clear (default 120 s).
    pub fw_init_timeout_ns: u64,
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
    /// log2 of the completion EQ size (default 10).
    pub comp_eq_log_size: u8,
    /// EQEs consumed per EQ per poll at most (default 1024).
    pub eq_poll_budget: u32,
    /// Pages per DMA chunk of the page manager (default 512 = 2 MiB).
    pub page_chunk_pages: usize,
    /// Most pages firmware may hold (default 65536 = 256 MiB); past this,
    /// page requests are answered "cannot give".
    pub max_fw_pages: usize,
    /// Declare the device dead when the heartbeat counter stops changing
    /// for this long (default 6 s: Linux's 3 missed polls at its 2 s
    /// interval, facts §1.2/§1.3). `None` disables the check.
    pub heartbeat_timeout_ns: Option<u64>,
    /// `sw_owner_id` for INIT_HCA when the device has the capability.
    pub sw_owner_id: Option<[u8; 16]>,
    /// [`Hca::poll_events`] reads the health buffer on every this-many-th
    /// call (default 256; 1 checks every call). A data-path loop polls
    /// millions of times a second; Linux checks health every 2 s. Command
    /// waits check it on every iteration regardless.
    pub poll_health_interval: u32,
}

impl Default for HcaConfig {
    fn default() -> Self {
        HcaConfig {
            cmd_timeout_ns: 60_000_000_000,
            fw_init_timeout_ns: 120_000_000_000,
            fw_init_poll_us: 2_000,
            reclaim_timeout_ns: 5_000_000_000,
            poll_max_delay_us: 1_000,
            async_eq_log_size: 12,
            comp_eq_log_size: 10,
            eq_poll_budget: 1024,
            page_chunk_pages: 512,
            max_fw_pages: 65536,
            heartbeat_timeout_ns: Some(6_000_000_000),
            sw_owner_id: None,
            poll_health_interval: 256,
        }
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

/// State behind the command lock.
pub(crate) struct Core<H: Hal, const CE: usize, const AE: usize> {
    pub(crate) cmd: CmdQueue<H>,
    pub(crate) async_eq: Option<EventQueue<H>>,
    pub(crate) comp_eq: Option<EventQueue<H>>,
    pub(crate) pages: PageManager<H>,
    pub(crate) completions: EventSink<Event, CE>,
    pub(crate) events: EventSink<Event, AE>,
    pub(crate) stats: CmdStats,
    heartbeat: Heartbeat,
    /// `poll_events` calls since the last health check.
    polls_since_health: u32,
    function_id: u16,
    scratch_in: [u8; MAX_CMD_LEN],
    scratch_out: [u8; MAX_CMD_LEN],
}

fn outcome_of(delivery: DeliveryStatus, output: &[u8]) -> CmdOutcome {
    if delivery != DeliveryStatus::OK {
        return CmdOutcome::Delivery(delivery);
    }
    let (status, syndrome) = encode::out_status(output);
    if status == CmdStatus::OK {
        CmdOutcome::Ok
    } else {
        CmdOutcome::Status { status, syndrome }
    }
}

fn outcome_to_result(p: &Posted, o: CmdOutcome, waited_ns: u64) -> Result<(), Error> {
    match o {
        CmdOutcome::Ok => Ok(()),
        CmdOutcome::Status { status, syndrome } => Err(Error::Command {
            opcode: p.opcode,
            op_mod: p.op_mod,
            status,
            syndrome,
        }),
        CmdOutcome::Delivery(status) => Err(Error::Delivery {
            opcode: p.opcode,
            op_mod: p.op_mod,
            status,
        }),
        CmdOutcome::Timeout => Err(Error::Timeout {
            opcode: p.opcode,
            op_mod: p.op_mod,
            waited_ns,
        }),
        // The caller substitutes the health error.
        CmdOutcome::Fatal => Ok(()),
    }
}

#[allow(clippy::too_many_arguments)]
fn record<O: CmdObserver>(
    stats: &mut CmdStats,
    obs: &O,
    p: &Posted,
    input: &[u8],
    output: &[u8],
    outcome: CmdOutcome,
    latency_ns: u64,
) {
    stats.record(p.opcode, outcome, latency_ns);
    obs.command(&CmdRecord {
        opcode: p.opcode,
        op_mod: p.op_mod,
        slot: p.slot as u8,
        token: p.token,
        input,
        output,
        outcome,
        latency_ns,
    });
}

/// Exponential backoff between checks: spin once, then sleep 1, 2, 4 …
/// up to `max` microseconds.
fn backoff<H: Hal>(hal: &H, delay: &mut u32, max: u32) {
    if *delay == 0 {
        core::hint::spin_loop();
        *delay = 1;
    } else {
        hal.delay_us(*delay);
        *delay = (*delay * 2).min(max.max(1));
    }
}

impl<H: Hal, const CE: usize, const AE: usize> Core<H, CE, AE> {
    /// Poll both EQs once and dispatch: page requests to the page manager,
    /// completions and async events to their sinks.
    fn poll_eqs(&mut self, hal: &H, budget: u32) -> u32 {
        let Core {
            async_eq,
            comp_eq,
            pages,
            completions,
            events,
            ..
        } = self;
        let mut n = 0;
        for eq in [async_eq, comp_eq].into_iter().flatten() {
            n += eq
                .poll(hal, budget, |ev| match ev {
                    Event::PageRequest {
                        function_id,
                        num_pages,
                    } => pages.push_request(PageRequest {
                        function_id,
                        num_pages,
                    }),
                    Event::Completion { .. } => completions.push(ev),
                    _ => events.push(ev),
                })
                .eqes;
        }
        n
    }

    /// Run the command in `scratch_in[..in_len]` on the reserved slot and
    /// wait for it with the lock held (MANAGE_PAGES only; facts §2.1).
    fn exec_reserved<O: CmdObserver>(
        &mut self,
        hal: &H,
        obs: &O,
        cfg: &HcaConfig,
        in_len: usize,
        out_len: usize,
    ) -> Result<(), Error> {
        let slot = self.cmd.reserved_slot();
        self.cmd.reap();
        if !self.cmd.is_free(slot) {
            return Err(Error::Timeout {
                opcode: Opcode(encode::header_opcode(&self.scratch_in[..in_len])),
                op_mod: encode::header_op_mod(&self.scratch_in[..in_len]),
                waited_ns: 0,
            });
        }
        self.scratch_out[..out_len].fill(0);
        let p = self.cmd.post(slot, &self.scratch_in[..in_len], out_len)?;
        let mut delay = 0;
        loop {
            let now = hal.now_ns();
            if self.cmd.is_done(slot) {
                let d = self.cmd.finish(slot, &mut self.scratch_out[..out_len]);
                let o = outcome_of(d, &self.scratch_out[..out_len]);
                let lat = now.saturating_sub(p.posted_ns);
                record(
                    &mut self.stats,
                    obs,
                    &p,
                    &self.scratch_in[..in_len],
                    &self.scratch_out[..out_len],
                    o,
                    lat,
                );
                return outcome_to_result(&p, o, lat);
            }
            if let Err(e) = self.heartbeat.check(hal) {
                self.cmd.abandon(slot);
                record(
                    &mut self.stats,
                    obs,
                    &p,
                    &self.scratch_in[..in_len],
                    &[],
                    CmdOutcome::Fatal,
                    now.saturating_sub(p.posted_ns),
                );
                return Err(e);
            }
            let waited = now.saturating_sub(p.posted_ns);
            if waited > cfg.cmd_timeout_ns {
                self.cmd.abandon(slot);
                record(
                    &mut self.stats,
                    obs,
                    &p,
                    &self.scratch_in[..in_len],
                    &[],
                    CmdOutcome::Timeout,
                    waited,
                );
                return outcome_to_result(&p, CmdOutcome::Timeout, waited);
            }
            backoff(hal, &mut delay, cfg.poll_max_delay_us);
        }
    }

    /// Give `n` pages to firmware (MANAGE_PAGES op_mod 1, in commands of at
    /// most [`PAGES_PER_COMMAND`]). Pages are accounted as held once the
    /// command succeeds, or when its fate is unknown (timeout, fatal).
    fn give_pages<O: CmdObserver>(
        &mut self,
        hal: &H,
        obs: &O,
        cfg: &HcaConfig,
        function_id: u16,
        mut n: usize,
    ) -> Result<(), Error> {
        let mut pas = [0u64; PAGES_PER_COMMAND];
        // A count beyond what the manager may hold is refused before any
        // page is given (a hostile or broken device asking for 8 TiB).
        self.pages.check_room(n)?;
        while n > 0 {
            let k = n.min(PAGES_PER_COMMAND);
            self.pages.alloc(hal, &mut pas[..k])?;
            let in_len = encode::manage_pages_give(&mut self.scratch_in, function_id, &pas[..k])?;
            match self.exec_reserved(hal, obs, cfg, in_len, encode::MANAGE_PAGES_OUT) {
                Ok(()) => self.pages.note_given(k),
                Err(e @ (Error::Command { .. } | Error::Delivery { .. })) => {
                    // Firmware refused: the pages are ours again.
                    for &pa in &pas[..k] {
                        let _ = self.pages.free(pa);
                    }
                    self.pages.release_empty();
                    return Err(e);
                }
                // Timeout / fatal: firmware may hold them; keep them held.
                Err(e) => return Err(e),
            }
            n -= k;
        }
        Ok(())
    }

    /// Take up to `n` pages back (one MANAGE_PAGES op_mod 2); returns how
    /// many firmware returned.
    fn take_pages<O: CmdObserver>(
        &mut self,
        hal: &H,
        obs: &O,
        cfg: &HcaConfig,
        function_id: u16,
        n: usize,
    ) -> Result<usize, Error> {
        let k = n.min(PAGES_PER_COMMAND);
        let input = encode::manage_pages_take(function_id, k as u32);
        self.scratch_in[..input.len()].copy_from_slice(&input);
        let out_len = encode::manage_pages_take_out_len(k);
        self.exec_reserved(hal, obs, cfg, input.len(), out_len)?;
        let got = encode::parse_manage_pages_count(&self.scratch_out[..out_len]) as usize;
        if got > k {
            self.pages.note_bad_return();
            return Err(Error::BadResponse {
                opcode: Opcode::MANAGE_PAGES,
                what: "more pages returned than requested",
            });
        }
        let mut bad = false;
        let mut freed = 0;
        for i in 0..got {
            let pa = encode::parse_manage_pages_pa(&self.scratch_out[..out_len], i).unwrap_or(0);
            if self.pages.free(pa) {
                freed += 1;
            } else {
                bad = true;
            }
        }
        // Only pages the driver gave and got back count as reclaimed.
        self.pages.note_reclaimed(freed);
        self.pages.release_empty();
        if bad {
            self.pages.note_bad_return();
            return Err(Error::BadResponse {
                opcode: Opcode::MANAGE_PAGES,
                what: "returned a page the driver never gave",
            });
        }
        Ok(got)
    }

    /// Serve queued page requests. Only a fatal error is returned; other
    /// failures are counted and the request is dropped (give: answered
    /// "cannot give") or retried later (reserved slot still busy).
    fn serve_pages<O: CmdObserver>(
        &mut self,
        hal: &H,
        obs: &O,
        cfg: &HcaConfig,
    ) -> Result<u32, Error> {
        let mut served = 0;
        while let Some(req) = self.pages.pop_request() {
            served += 1;
            let r = if req.num_pages > 0 {
                match self.give_pages(hal, obs, cfg, req.function_id, req.num_pages as usize) {
                    Err(Error::OutOfPages { .. }) | Err(Error::Dma(_)) => {
                        // Linux `page_notify_fail`: MANAGE_PAGES op_mod 0.
                        self.pages.note_give_failure();
                        let f = encode::manage_pages_fail(req.function_id);
                        self.scratch_in[..f.len()].copy_from_slice(&f);
                        self.exec_reserved(hal, obs, cfg, f.len(), encode::MANAGE_PAGES_OUT)
                    }
                    r => r,
                }
            } else if req.num_pages < 0 {
                let mut left = req.num_pages.unsigned_abs() as usize;
                let mut r = Ok(());
                while left > 0 {
                    match self.take_pages(hal, obs, cfg, req.function_id, left) {
                        Ok(0) => break,
                        Ok(got) => left -= got,
                        Err(e) => {
                            r = Err(e);
                            break;
                        }
                    }
                }
                r
            } else {
                Ok(())
            };
            match r {
                Err(e @ Error::Fatal { .. }) => return Err(e),
                Err(Error::Timeout { waited_ns: 0, .. }) => {
                    // Reserved slot still owned by firmware: retry later.
                    self.pages.unpop_request(req);
                    return Ok(served);
                }
                _ => {}
            }
        }
        Ok(served)
    }

    /// Everything done while waiting: health, EQs, page requests.
    fn service<O: CmdObserver>(
        &mut self,
        hal: &H,
        obs: &O,
        cfg: &HcaConfig,
    ) -> Result<PollReport, Error> {
        self.heartbeat.check(hal)?;
        self.service_eqs(hal, obs, cfg)
    }

    /// [`Core::service`] for [`Hca::poll_events`]: the health buffer is read
    /// on every `poll_health_interval`-th call only.
    fn service_polled<O: CmdObserver>(
        &mut self,
        hal: &H,
        obs: &O,
        cfg: &HcaConfig,
    ) -> Result<PollReport, Error> {
        self.polls_since_health += 1;
        if self.polls_since_health >= cfg.poll_health_interval {
            self.polls_since_health = 0;
            self.heartbeat.check(hal)?;
        }
        self.service_eqs(hal, obs, cfg)
    }

    fn service_eqs<O: CmdObserver>(
        &mut self,
        hal: &H,
        obs: &O,
        cfg: &HcaConfig,
    ) -> Result<PollReport, Error> {
        let eqes = self.poll_eqs(hal, cfg.eq_poll_budget);
        let page_requests = self.serve_pages(hal, obs, cfg)?;
        Ok(PollReport {
            eqes,
            page_requests,
        })
    }
}

/// A brought-up HCA: the command interface, the async and completion EQs,
/// a UAR, a PD, and the firmware pages.
///
/// Type parameters: the platform `H`, a command observer `O` (trace hook,
/// `()` for none), and the capacities of the completion-event queue `CE`
/// and the async-event queue `AE`.
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
    embedded_cpu: bool,
    issi: u16,
    caps: Option<Caps>,
    max_caps: Option<Caps>,
    uar: Option<u32>,
    pd: Option<u32>,
    resd_lkey: u32,
    terminate_mkey: u32,
}

/// Wait until the initializing bit clears (facts §1.2).
fn wait_fw_init<H: Hal>(hal: &H, cfg: &HcaConfig) -> Result<(), Error> {
    let start = hal.now_ns();
    loop {
        if !mmio_field(hal, 0, &initial_seg::initializing) {
            return Ok(());
        }
        let waited = hal.now_ns().saturating_sub(start);
        if waited > cfg.fw_init_timeout_ns {
            return Err(Error::FirmwareInitTimeout { waited_ns: waited });
        }
        hal.delay_us(cfg.fw_init_poll_us.max(1));
    }
}

impl<H: Hal> Hca<H> {
    /// Bring the HCA up with no trace hook and default event capacities.
    /// See [`Hca::bring_up_with`].
    pub fn bring_up(hal: H, cfg: HcaConfig) -> Result<Self, Error> {
        Self::bring_up_with(hal, cfg, ())
    }
}

impl<H: Hal, O: CmdObserver, const CE: usize, const AE: usize> Hca<H, O, CE, AE> {
    /// Bring the HCA up in the order of facts §4.1: wait for firmware, set
    /// up the command queue, ENABLE_HCA, ISSI, boot pages, host endianness,
    /// QUERY/SET_HCA_CAP, init pages, INIT_HCA, capabilities, regular pages,
    /// ALLOC_UAR, the async EQ (page requests + async events) and a
    /// completion EQ, ALLOC_PD, QUERY_SPECIAL_CONTEXTS.
    ///
    /// On failure everything done so far is undone (objects destroyed, pages
    /// taken back, HCA disabled) and the first error is returned.
    pub fn bring_up_with(hal: H, cfg: HcaConfig, observer: O) -> Result<Self, Error> {
        // 1. Pre-init wait, 2. command queue, 3. wait again (facts §4.1).
        wait_fw_init(&hal, &cfg)?;
        let cmd = CmdQueue::new(&hal)?;
        wait_fw_init(&hal, &cfg)?;
        let fw = FwVersion {
            major: mmio_field(&hal, 0, &initial_seg::fw_rev_major),
            minor: mmio_field(&hal, 0, &initial_seg::fw_rev_minor),
            subminor: mmio_field(&hal, 0, &initial_seg::fw_rev_subminor),
            cmdif_rev: mmio_field(&hal, 0, &initial_seg::cmd_interface_rev),
        };
        let embedded_cpu = mmio_field(&hal, 0, &initial_seg::embedded_cpu);
        let now = hal.now_ns();
        let core = Core {
            cmd,
            async_eq: None,
            comp_eq: None,
            pages: PageManager::new(cfg.page_chunk_pages, cfg.max_fw_pages),
            completions: EventSink::new(),
            events: EventSink::new(),
            stats: CmdStats::new(),
            heartbeat: Heartbeat::new(cfg.heartbeat_timeout_ns, now),
            polls_since_health: 0,
            function_id: 0,
            scratch_in: [0; MAX_CMD_LEN],
            scratch_out: [0; MAX_CMD_LEN],
        };
        let mut hca = Hca {
            hal,
            cfg,
            core: spin::Mutex::new(core),
            dead: AtomicBool::new(false),
            fatal: spin::Mutex::new(None),
            observer,
            progress: Progress::default(),
            torn_down: false,
            fw,
            embedded_cpu,
            issi: 0,
            caps: None,
            max_caps: None,
            uar: None,
            pd: None,
            resd_lkey: 0,
            terminate_mkey: 0,
        };
        match hca.bring_up_steps() {
            Ok(()) => Ok(hca),
            Err(e) => {
                // Unwind; the original error is what the caller needs.
                let _ = hca.shutdown();
                Err(e)
            }
        }
    }

    /// Run a fixed-size command.
    fn run<const I: usize, const OUT: usize>(&self, input: [u8; I]) -> Result<[u8; OUT], Error> {
        let mut out = [0u8; OUT];
        self.exec(&input, &mut out)?;
        Ok(out)
    }

    fn startup_pages(&self, kind: u16) -> Result<(), Error> {
        let out: [u8; encode::QUERY_PAGES_OUT] = self.run(encode::query_pages(kind))?;
        let (function_id, n) = encode::parse_query_pages(&out);
        let mut core = self.core.lock();
        core.function_id = function_id;
        if n > 0 {
            let r = core.give_pages(
                &self.hal,
                &self.observer,
                &self.cfg,
                function_id,
                n as usize,
            );
            drop(core);
            if let Err(e) = r {
                return Err(self.note_fatal(e));
            }
        }
        Ok(())
    }

    fn query_caps(&self, current: bool) -> Result<Caps, Error> {
        let out: [u8; encode::QUERY_HCA_CAP_OUT] =
            self.run(encode::query_hca_cap(op_mod::CAP_GENERAL, current))?;
        let caps = Caps::parse(encode::parse_query_hca_cap(&out));
        caps.validate()?;
        Ok(caps)
    }

    fn create_eq(&self, log_size: u8, mask: u64) -> Result<EventQueue<H>, Error> {
        let uar = self.uar.ok_or(Error::InvalidArgument("no UAR"))?;
        let mut buf = [0u8; MAX_CMD_LEN];
        let (mut eq, len) = EventQueue::prepare(&self.hal, log_size, uar, mask, &mut buf)?;
        let mut out = [0u8; encode::CREATE_EQ_OUT];
        self.exec(&buf[..len], &mut out)?;
        eq.created(&self.hal, encode::parse_create_eq(&out));
        Ok(eq)
    }

    fn bring_up_steps(&mut self) -> Result<(), Error> {
        // 5. ENABLE_HCA.
        let _: [u8; encode::ENABLE_HCA_OUT] = self.run(encode::enable_hca(self.embedded_cpu))?;
        self.progress.enabled = true;

        // 6. ISSI (Linux `mlx5_core_set_issi`): a firmware status on
        // QUERY_ISSI means ISSI 0; prefer 1.
        let issi: Result<[u8; encode::QUERY_ISSI_OUT], Error> = self.run(encode::query_issi());
        let supported = match issi {
            Ok(out) => encode::parse_query_issi(&out).1,
            Err(Error::Command { .. }) => 0,
            Err(e) => return Err(e),
        };
        if supported & 2 != 0 {
            let _: [u8; encode::SET_ISSI_OUT] = self.run(encode::set_issi(1))?;
            self.issi = 1;
        } else if supported & 1 != 0 || supported == 0 {
            self.issi = 0;
        } else {
            return Err(Error::IssiNotSupported { supported });
        }

        // 7. Boot pages.
        self.startup_pages(op_mod::QUERY_PAGES_BOOT)?;

        // 9. Host endianness.
        let _: [u8; encode::ACCESS_REG_HOST_ENDIANNESS_LEN] = self.run(
            encode::access_reg_host_endianness(cfg!(target_endian = "big")),
        )?;

        // 10. QUERY_HCA_CAP max + current, SET_HCA_CAP (general). Changed
        // from current: cmdif_checksum = 0 (Linux and rdma-core: firmware
        // must not require mailbox signatures), log_uar_page_sz = 0 (4 KiB
        // UAR pages: the doorbell offsets of facts §5 assume them).
        let max = self.query_caps(false)?;
        self.max_caps = Some(max);
        let cur = self.query_caps(true)?;
        let mut cap = cur.raw;
        cmd_hca_cap::cmdif_checksum.set(&mut cap, 0)?;
        cmd_hca_cap::log_uar_page_sz.set(&mut cap, 0)?;
        let mut set = [0u8; encode::SET_HCA_CAP_IN];
        encode::set_hca_cap(&mut set, op_mod::CAP_GENERAL, &cap);
        let _: [u8; encode::SET_HCA_CAP_OUT] = self.run(set)?;

        // 11. Init pages, 12. INIT_HCA.
        self.startup_pages(op_mod::QUERY_PAGES_INIT)?;
        let owner = if cur.sw_owner_id {
            self.cfg.sw_owner_id
        } else {
            None
        };
        let _: [u8; encode::INIT_HCA_OUT] = self.run(encode::init_hca(owner))?;
        self.progress.initialized = true;

        // 13. Capabilities as the HCA now runs with them.
        let caps = self.query_caps(true)?;
        self.caps = Some(caps);

        // Regular pages.
        self.startup_pages(op_mod::QUERY_PAGES_REGULAR)?;

        // 14. UAR, async EQ, completion EQ.
        let out: [u8; encode::ALLOC_UAR_OUT] = self.run(encode::alloc_uar())?;
        let uar = encode::parse_alloc_uar(&out);
        // The UAR's doorbells are MMIO writes at uar × 4 KiB: an index
        // beyond BAR0 (untrusted output) must never be used.
        if uar as usize >= self.hal.bar0_size() / mlx5_regs::doorbell::UAR_PAGE_SIZE {
            return Err(Error::BadResponse {
                opcode: Opcode::ALLOC_UAR,
                what: "UAR index beyond BAR0",
            });
        }
        self.uar = Some(uar);

        let max_log = if caps.log_max_eq_sz == 0 {
            self.cfg.async_eq_log_size
        } else {
            caps.log_max_eq_sz
        };
        let mut mask = async_event_mask();
        if caps.page_request_disable {
            mask.remove(EventMask::PAGE_REQUEST);
        }
        let eq = self.create_eq(self.cfg.async_eq_log_size.min(max_log), mask.bits())?;
        self.core.lock().async_eq = Some(eq);
        // A completion EQ: mask 0, CQs route to it through cqc.c_eqn.
        let eq = self.create_eq(self.cfg.comp_eq_log_size.min(max_log), 0)?;
        self.core.lock().comp_eq = Some(eq);

        let out: [u8; encode::ALLOC_PD_OUT] = self.run(encode::alloc_pd())?;
        self.pd = Some(encode::parse_alloc_pd(&out));

        let out: [u8; encode::QUERY_SPECIAL_CONTEXTS_OUT] =
            self.run(encode::query_special_contexts())?;
        let (resd, term) = encode::parse_query_special_contexts(&out);
        self.resd_lkey = resd;
        self.terminate_mkey = term;
        Ok(())
    }

    /// Remember a fatal error so every later call fails fast.
    fn note_fatal(&self, e: Error) -> Error {
        if e.is_fatal() {
            let mut f = self.fatal.lock();
            if f.is_none() {
                *f = Some(e);
            }
            self.dead.store(true, Ordering::Release);
        }
        e
    }

    fn check_alive(&self) -> Result<(), Error> {
        if self.dead.load(Ordering::Acquire) {
            if let Some(e) = *self.fatal.lock() {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Execute a raw command: `input` is the whole command input (header
    /// included), `output` receives the whole output; its length is the
    /// output length sent to firmware (exact per layout). On a firmware
    /// status error `output` still holds what firmware wrote.
    ///
    /// MANAGE_PAGES is refused: pages belong to the page manager.
    ///
    /// ```no_run
    /// # fn demo<H: mlx5_hal::Hal>(hca: &mlx5_driver::Hca<H>) -> Result<(), mlx5_driver::Error> {
    /// use mlx5_driver::cmd::encode;
    /// let mut out = [0u8; encode::NOP_OUT];
    /// hca.exec(&encode::nop(), &mut out)?;
    /// # Ok(()) }
    /// ```
    pub fn exec(&self, input: &[u8], output: &mut [u8]) -> Result<(), Error> {
        self.exec_timeout(input, output, self.cfg.cmd_timeout_ns)
    }

    /// [`Hca::exec`] with an explicit timeout in nanoseconds.
    pub fn exec_timeout(
        &self,
        input: &[u8],
        output: &mut [u8],
        timeout_ns: u64,
    ) -> Result<(), Error> {
        self.check_alive()?;
        if input.len() < 8 || output.len() < 8 {
            return Err(Error::InvalidArgument("command shorter than its header"));
        }
        if encode::header_opcode(input) == Opcode::MANAGE_PAGES.0 {
            return Err(Error::InvalidArgument(
                "MANAGE_PAGES is issued by the page manager only",
            ));
        }
        output.fill(0);
        let hal = &self.hal;
        let max_delay = self.cfg.poll_max_delay_us;
        let start = hal.now_ns();
        let mut delay = 0;
        // Get a slot and post.
        let p = loop {
            {
                let mut core = self.core.lock();
                if let Some(slot) = core.cmd.alloc_regular() {
                    break core.cmd.post(slot, input, output.len())?;
                }
                core.service(hal, &self.observer, &self.cfg)
                    .map_err(|e| self.note_fatal(e))?;
            }
            let waited = hal.now_ns().saturating_sub(start);
            if waited > timeout_ns {
                return Err(Error::Timeout {
                    opcode: Opcode(encode::header_opcode(input)),
                    op_mod: encode::header_op_mod(input),
                    waited_ns: waited,
                });
            }
            backoff(hal, &mut delay, max_delay);
        };
        // Wait for it, serving events and page requests meanwhile.
        delay = 0;
        loop {
            {
                let mut core = self.core.lock();
                let now = hal.now_ns();
                let waited = now.saturating_sub(p.posted_ns);
                if core.cmd.is_done(p.slot) {
                    let d = core.cmd.finish(p.slot, output);
                    let o = outcome_of(d, output);
                    record(
                        &mut core.stats,
                        &self.observer,
                        &p,
                        input,
                        output,
                        o,
                        waited,
                    );
                    return outcome_to_result(&p, o, waited);
                }
                if let Err(e) = core.service(hal, &self.observer, &self.cfg) {
                    if e.is_fatal() {
                        core.cmd.abandon(p.slot);
                        record(
                            &mut core.stats,
                            &self.observer,
                            &p,
                            input,
                            &[],
                            CmdOutcome::Fatal,
                            waited,
                        );
                        drop(core);
                        return Err(self.note_fatal(e));
                    }
                }
                if waited > timeout_ns {
                    core.cmd.abandon(p.slot);
                    record(
                        &mut core.stats,
                        &self.observer,
                        &p,
                        input,
                        &[],
                        CmdOutcome::Timeout,
                        waited,
                    );
                    return outcome_to_result(&p, CmdOutcome::Timeout, waited);
                }
            }
            backoff(hal, &mut delay, max_delay);
        }
    }

    /// Poll the EQs once: consume EQEs (reporting the consumer index), serve
    /// page requests, queue completion and async events for
    /// [`Hca::next_completion`] / [`Hca::next_event`]. The health buffer is
    /// checked on every [`HcaConfig::poll_health_interval`]-th call.
    pub fn poll_events(&self) -> Result<PollReport, Error> {
        self.check_alive()?;
        let r = self
            .core
            .lock()
            .service_polled(&self.hal, &self.observer, &self.cfg);
        r.map_err(|e| self.note_fatal(e))
    }

    /// Read the health buffer now (fatal sensors and heartbeat, facts
    /// §1.3), whatever [`HcaConfig::poll_health_interval`] says. A fatal
    /// finding sticks: every later call fails fast with it.
    pub fn check_health(&self) -> Result<(), Error> {
        self.check_alive()?;
        let r = self.core.lock().heartbeat.check(&self.hal);
        r.map_err(|e| self.note_fatal(e))
    }

    /// Next async event (CQ error, SRQ limit, port change, ...), or
    /// [`Event::EventsLost`] if the queue overflowed.
    pub fn next_event(&self) -> Option<Event> {
        self.core.lock().events.pop()
    }

    /// Next completion event ([`Event::Completion`]), or
    /// [`Event::EventsLost`] if the queue overflowed.
    pub fn next_completion(&self) -> Option<Event> {
        self.core.lock().completions.pop()
    }

    /// Events lost so far: (completion queue, async queue).
    pub fn event_overflows(&self) -> (u64, u64) {
        let c = self.core.lock();
        (c.completions.overflows(), c.events.overflows())
    }

    /// EQEs consumed so far: (async EQ, completion EQ).
    pub fn eqes_consumed(&self) -> (u64, u64) {
        let c = self.core.lock();
        (
            c.async_eq.as_ref().map_or(0, |e| e.consumed()),
            c.comp_eq.as_ref().map_or(0, |e| e.consumed()),
        )
    }

    /// Capabilities (general, current) after INIT_HCA.
    pub fn caps(&self) -> &Caps {
        match &self.caps {
            Some(c) => c,
            None => unreachable!("caps are set before bring_up returns"),
        }
    }

    /// Maximum capabilities (QUERY_HCA_CAP op_mod max).
    pub fn max_caps(&self) -> Option<&Caps> {
        self.max_caps.as_ref()
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

    /// `terminate_scatter_list_mkey` (valid if the capability says so).
    pub fn terminate_scatter_list_mkey(&self) -> u32 {
        self.terminate_mkey
    }

    /// EQ number of the async EQ.
    pub fn async_eqn(&self) -> u8 {
        self.core.lock().async_eq.as_ref().map_or(0, |e| e.eqn())
    }

    /// EQ number of the completion EQ (put it in `cqc.c_eqn`).
    pub fn comp_eqn(&self) -> u8 {
        self.core.lock().comp_eq.as_ref().map_or(0, |e| e.eqn())
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

    /// Is the device known dead?
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// Tear down in the reverse order of bring-up (facts §4.3): DEALLOC_PD,
    /// DESTROY_EQ (completion, async), DEALLOC_UAR, TEARDOWN_HCA profile 0,
    /// MANAGE_PAGES take until firmware holds no page (bounded by
    /// [`HcaConfig::reclaim_timeout_ns`] without progress), DISABLE_HCA.
    /// Every step is attempted; the first error is returned. On a dead
    /// device no command is sent and the memory is released.
    pub fn teardown(mut self) -> Result<TeardownReport, Error> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<TeardownReport, Error> {
        self.torn_down = true;
        let start = self.hal.now_ns();
        let mut first: Option<Error> = None;
        let mut note = |r: Result<(), Error>| {
            if let Err(e) = r {
                first.get_or_insert(e);
            }
        };
        let reclaimed_before = self.core.lock().pages.stats().reclaimed;
        let alive = !self.is_dead();
        let mut eqs: [Option<EventQueue<H>>; 2] = [None, None];

        if alive {
            if let Some(pd) = self.pd.take() {
                note(
                    encode::dealloc_pd(pd)
                        .map_err(Error::from)
                        .and_then(|i| self.run(i).map(|_: [u8; encode::DEALLOC_PD_OUT]| ())),
                );
            }
        }
        {
            let mut c = self.core.lock();
            eqs[0] = c.comp_eq.take();
            eqs[1] = c.async_eq.take();
        }
        if alive {
            for eq in eqs.iter().flatten() {
                note(
                    self.run(encode::destroy_eq(eq.eqn()))
                        .map(|_: [u8; encode::DESTROY_EQ_OUT]| ()),
                );
            }
            if let Some(uar) = self.uar.take() {
                note(
                    encode::dealloc_uar(uar)
                        .map_err(Error::from)
                        .and_then(|i| self.run(i).map(|_: [u8; encode::DEALLOC_UAR_OUT]| ())),
                );
            }
            if self.progress.initialized {
                self.progress.initialized = false;
                let r = self.teardown_hca(op_mod::TEARDOWN_GRACEFUL);
                if let Err(e) = r {
                    note(Err(e));
                    // Without a torn-down HCA firmware keeps its pages. Linux
                    // falls back to a forced teardown on its shutdown path
                    // (facts §4.3); do so when the device has the
                    // capability, else retry the graceful one once.
                    if !e.is_fatal() {
                        let force = self.caps.is_some_and(|c| c.force_teardown);
                        let _ = self.teardown_hca(if force {
                            op_mod::TEARDOWN_FORCE_CLOSE
                        } else {
                            op_mod::TEARDOWN_GRACEFUL
                        });
                    }
                }
            }
            note(self.reclaim_all());
            if self.progress.enabled {
                self.progress.enabled = false;
                note(
                    self.run(encode::disable_hca(self.embedded_cpu))
                        .map(|_: [u8; encode::DISABLE_HCA_OUT]| ()),
                );
            }
        }
        drop(eqs);
        let mut c = self.core.lock();
        let pages_left = c.pages.held();
        if pages_left > 0 && !self.dead.load(Ordering::Acquire) {
            // Firmware may still write these pages: never hand them back to
            // the platform.
            c.pages.leak_all();
        } else {
            c.pages.forget_all();
        }
        let report = TeardownReport {
            pages_reclaimed: c.pages.stats().reclaimed - reclaimed_before,
            pages_left,
            elapsed_ns: self.hal.now_ns().saturating_sub(start),
            stats: c.stats,
            page_stats: c.pages.stats(),
        };
        drop(c);
        if self.is_dead() {
            if let Some(e) = *self.fatal.lock() {
                first.get_or_insert(e);
            }
        }
        match first {
            Some(e) => Err(e),
            None => Ok(report),
        }
    }

    fn teardown_hca(&self, profile: u16) -> Result<(), Error> {
        let out: [u8; encode::TEARDOWN_HCA_OUT] = self.run(encode::teardown_hca(profile))?;
        if encode::parse_teardown_hca_failed(&out) {
            return Err(Error::BadResponse {
                opcode: Opcode::TEARDOWN_HCA,
                what: "teardown state: failed",
            });
        }
        Ok(())
    }

    /// MANAGE_PAGES op_mod 2 until firmware holds no page; gives up after
    /// `reclaim_timeout_ns` without progress (Linux
    /// `mlx5_reclaim_startup_pages`). A refused command counts as no
    /// progress and is retried; the first error is returned at the end even
    /// if a retry succeeded. Timeouts and fatal errors end it at once.
    fn reclaim_all(&self) -> Result<(), Error> {
        let mut last_progress = self.hal.now_ns();
        let mut first: Option<Error> = None;
        loop {
            let mut core = self.core.lock();
            let held = core.pages.held();
            if held == 0 {
                return first.map_or(Ok(()), Err);
            }
            let f = core.function_id;
            let r = core.take_pages(&self.hal, &self.observer, &self.cfg, f, held);
            drop(core);
            match r {
                Ok(n) if n > 0 => {
                    last_progress = self.hal.now_ns();
                    continue;
                }
                Ok(_) => {}
                Err(
                    e
                    @ (Error::Command { .. } | Error::Delivery { .. } | Error::BadResponse { .. }),
                ) => {
                    first.get_or_insert(e);
                }
                Err(e) => {
                    let e = self.note_fatal(e);
                    return Err(first.unwrap_or(e));
                }
            }
            if self.hal.now_ns().saturating_sub(last_progress) > self.cfg.reclaim_timeout_ns {
                return Err(first.unwrap_or(Error::ReclaimStalled { pages_left: held }));
            }
            self.hal.delay_us(self.cfg.poll_max_delay_us.max(1));
        }
    }
}

impl<H: Hal, O: CmdObserver, const CE: usize, const AE: usize> Drop for Hca<H, O, CE, AE> {
    /// An `Hca` dropped without [`Hca::teardown`] is torn down best-effort,
    /// so firmware never keeps pointers into freed memory.
    fn drop(&mut self) {
        if !self.torn_down {
            let _ = self.shutdown();
        }
    }
}

/// The EQE event types this driver subscribes its async EQ to: Linux's
/// `MLX5_ASYNC_EVENT_MASK` (0x1f02be), PAGE_REQUEST (Linux has a separate
/// pages EQ for it) and INTERNAL_ERROR (so the upper layers see it as an
/// event, not only through the health buffer).
pub fn async_event_mask() -> EventMask {
    EventMask::LINUX_ASYNC | EventMask::PAGE_REQUEST | EventMask::INTERNAL_ERROR
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlx5_regs::EventType;

    #[test]
    fn async_mask_is_linux_plus_page_request_and_internal_error() {
        assert_eq!(
            async_event_mask().bits(),
            0x1f02be | (1 << 0x0b) | (1 << 0x08)
        );
        assert_eq!(
            EventType::PAGE_REQUEST.mask_bit(),
            EventMask::PAGE_REQUEST.bits()
        );
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
