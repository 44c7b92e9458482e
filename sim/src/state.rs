//! The device state behind the lock: BAR0 registers, DMA space, firmware
//! objects, timed work, and the primitives every command uses (DMA access
//! with IOMMU fault recording, EQE and CQE writing). MMIO and UAR doorbells
//! are in `mmio.rs`.

use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{fence, Ordering};

use mlx5_regs::consts::{cq_error_syndrome, ctx};
use mlx5_regs::layouts::{comp_event, cq_error, eqe, qp_events};
use mlx5_regs::EventType;

use crate::caps::{Caps, CurCaps};
use crate::clock::Clock;
use crate::cmdif::{CmdQueue, Slot};
use crate::dma::{mix, DmaSpace, IommuFault};
use crate::inject::Injections;
use crate::objects::Objects;
use crate::port::Port;
use crate::records::Records;
use crate::{HcaState, ObjectCounts, SimConfig, Violation};

/// Device-side processing latency of a doorbell in threaded mode.
pub(crate) const THREADED_LATENCY_NS: u64 = 20_000;

/// Device-side processing latency of a UAR doorbell on a hosted device
/// ([`crate::Device::hosted`]): the VMM's timer runs it this long after the
/// write, so the guest's CPU goes on meanwhile, as a card's posted doorbell
/// write lets it (docs/fidelity.md §18). 1 ms of the VMM's virtual clock: a
/// guest under TCG runs tens of times slower than a host CPU, and at the
/// threaded model's 20 µs the work was always done before a guest that
/// armed a CQ after posting reached its wait.
pub(crate) const HOSTED_DOORBELL_LATENCY_NS: u64 = 1_000_000;

/// Page accounting (docs/firmware.md §4.2).
#[derive(Debug, Default)]
pub(crate) struct Pages {
    pub held: BTreeSet<u64>,
    pub boot_needed: i32,
    pub init_needed: i32,
    /// Positive: pages asked for by PAGE_REQUEST/QUERY_PAGES(3); negative:
    /// pages the firmware offers back.
    pub regular_needed: i32,
    /// Page requests waiting for an EQ subscribed to PAGE_REQUEST.
    pub queued_requests: VecDeque<i32>,
}

/// The function's health as the health buffer reports it (PRM "Health
/// Buffer"; Linux `drivers/net/ethernet/mellanox/mlx5/core/health.c`).
#[derive(Debug, Default)]
pub(crate) struct Health {
    /// The fatal syndrome once the device went fatal; it stays until a
    /// function reset.
    pub fatal: Option<u8>,
    /// The health counter frozen at the moment the device went fatal.
    pub fatal_counter: u32,
    /// A non-fatal health syndrome and its extended syndrome (no RFR).
    pub warning: Option<(u8, u16)>,
}

/// A queued MMIO write (threaded mode).
#[derive(Debug, Clone, Copy)]
pub(crate) struct MmioWrite {
    pub at: u64,
    pub offset: usize,
    pub value: u64,
    pub wide: bool,
}

pub(crate) struct State {
    /// How the device was created (profile, seed, mode, limits).
    pub cfg: SimConfig,
    /// The capabilities the profile supports (QUERY_HCA_CAP max).
    pub caps: Caps,
    /// The current capabilities (SET_HCA_CAP, QUERY_HCA_CAP cur).
    pub cur: CurCaps,
    /// The threaded worker should exit.
    pub shutdown: bool,
    /// Device time (`clock.rs`).
    pub clock: Clock,
    /// The memory the device reaches through the IOMMU.
    pub dma: DmaSpace,
    /// Faults, violations, the command trace (`records.rs`).
    pub records: Records,
    /// Faults the test harness asked for (`inject.rs`).
    pub inj: Injections,
    /// The command interface: queue address, slots (`cmdif.rs`).
    pub cmdq: CmdQueue,
    /// What the health buffer shows.
    pub health: Health,
    /// Limit events of arms above the count are deferred until this many
    /// more commands completed (`Injector::srq_limit_late`).
    pub limit_late: Option<u32>,
    /// Deferred limit events: (commands still to complete, SRQ number).
    pub late_limits: Vec<(u32, u32)>,
    /// Function resets so far.
    pub resets: u64,
    /// MMIO writes not yet applied (threaded mode; posted doorbells of a
    /// hosted device).
    pub mmio_queue: VecDeque<MmioWrite>,
    /// Object numbers the timer sweeps collect (kept for its capacity).
    pub due_scratch: Vec<u32>,
    /// Firmware state of the function (ENABLE/INIT/TEARDOWN_HCA).
    pub hca: HcaState,
    /// The interface version SET_ISSI chose.
    pub issi: u16,
    /// Host endianness the driver set through the HOST_ENDIANNESS register.
    pub host_be: bool,
    /// The string of the last SET_DRIVER_VERSION since power-on or reset.
    pub driver_version: Option<String>,
    /// Firmware page accounting.
    pub pages: Pages,
    /// Every firmware object and the rules between them (`objects/`).
    pub objects: Objects,
    /// QUERY_SPECIAL_CONTEXTS `resd_lkey` (seed-derived).
    pub resd_lkey: u32,
    /// QUERY_SPECIAL_CONTEXTS `terminate_scatter_list_mkey` (seed-derived,
    /// reported with the capability of the same name).
    pub term_mkey: u32,
    /// The port and its vport context, GID table and wire.
    pub port: Port,
    /// Objects still alive when TEARDOWN_HCA ran (`Device::leaked_at_teardown`).
    pub leaked_at_teardown: Option<ObjectCounts>,
    /// Messages dropped for lack of receive WQEs (`Traffic::dropped`).
    pub dropped: u64,
    /// Traffic-engine counters (`Traffic::stats`).
    pub stats: crate::traffic::TrafficStats,
    /// Interrupt lines (`irq.rs`).
    pub irq: std::sync::Arc<crate::irq::IrqLines>,
    /// A host's interrupt hook ([`crate::host`]): called with the vector of
    /// every interrupt the device sends.
    pub irq_hook: Option<crate::host::IrqHook>,
    /// Hosted device: UAR doorbells are posted, applied this long after
    /// the write (None: at once, inside the write, in synchronous mode).
    pub posted_doorbell_ns: Option<u64>,
    /// Buffers the traffic engine reuses (`engine/pool.rs`).
    pub pool: crate::engine::pool::BufPool,
}

impl State {
    /// A powered-on device: Disabled, firmware initialising.
    pub fn new(cfg: SimConfig) -> State {
        let caps = Caps::for_profile(cfg.profile);
        let h = mix(cfg.seed ^ 0x1111);
        let threaded = cfg.mode == crate::ExecMode::Threaded;
        let mut st = State {
            cur: CurCaps::initial(&caps),
            caps,
            shutdown: false,
            clock: Clock::new(threaded),
            dma: DmaSpace::new(cfg.seed, cfg.dma_limit),
            records: Records::default(),
            inj: Injections::default(),
            cmdq: CmdQueue::new(),
            health: Health::default(),
            limit_late: None,
            late_limits: Vec::new(),
            resets: 0,
            mmio_queue: VecDeque::new(),
            due_scratch: Vec::new(),
            hca: HcaState::Disabled,
            issi: 0,
            host_be: false,
            driver_version: None,
            pages: Pages::default(),
            objects: Objects::new(h),
            resd_lkey: 0x2000 | (((h >> 32) & 0xff) as u32) << 8,
            term_mkey: 0x4000 | (((h >> 36) & 0xff) as u32) << 8,
            port: Port::new(cfg.seed),
            leaked_at_teardown: None,
            dropped: 0,
            stats: Default::default(),
            irq: Default::default(),
            irq_hook: None,
            posted_doorbell_ns: None,
            pool: Default::default(),
            cfg,
        };
        st.clock.created_ns = st.now_ns();
        st.reset_function();
        st
    }

    /// Firmware state of a freshly enabled function.
    pub fn reset_function(&mut self) {
        self.cur = CurCaps::initial(&self.caps);
        self.issi = 0;
        self.pages.boot_needed = self.caps.boot_pages;
        self.pages.init_needed = self.caps.init_pages;
        self.pages.regular_needed = 0;
    }

    /// SET_HCA_CAP changed `cur`: a disabled function starts from it again.
    pub fn caps_changed(&mut self) {
        if self.hca == HcaState::Disabled {
            self.reset_function();
        }
    }

    // ------------------------------------------------------------------ time

    /// Device time in nanoseconds.
    pub fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    /// The initializing bit: firmware is not ready for commands yet.
    pub fn initializing(&self) -> bool {
        self.inj.fw_init_never
            || self.now_ns() < self.clock.created_ns + self.cfg.fw_init_delay_us * 1000
    }

    /// Run everything whose time has come: queued MMIO writes (threaded
    /// mode) and delayed command completions.
    pub fn run_due(&mut self) {
        loop {
            let now = self.now_ns();
            if let Some(w) = self.mmio_queue.front().copied() {
                if w.at <= now {
                    self.mmio_queue.pop_front();
                    self.apply_mmio_write(w.offset, w.value, w.wide);
                    continue;
                }
            }
            let due = (0..self.cmdq.slots.len())
                .find(|&s| matches!(self.cmdq.slots[s], Slot::Due(t) if t <= now));
            match due {
                Some(s) => {
                    self.cmdq.slots[s] = Slot::Idle;
                    self.exec_slot(s);
                }
                None => break,
            }
        }
        // RNR / ACK timers of the traffic engine, CQ moderation timers.
        self.qp_run_due();
        self.rq_flush_due();
        self.cq_moderation_run_due();
    }

    /// Time until the next timed work (MMIO write, command completion,
    /// traffic or moderation timer), if any.
    pub fn next_due_in_ns(&self) -> Option<u64> {
        let now = self.now_ns();
        let mut next: Option<u64> = self.mmio_queue.front().map(|w| w.at);
        for s in &self.cmdq.slots {
            if let Slot::Due(t) = *s {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
        for t in [self.qp_next_due(), self.cq_moderation_next_due()]
            .into_iter()
            .flatten()
        {
            next = Some(next.map_or(t, |n| n.min(t)));
        }
        next.map(|t| t.saturating_sub(now))
    }

    // ------------------------------------------------------------------ DMA

    /// Record an IOMMU fault.
    pub fn fault(&mut self, iova: u64, len: usize, write: bool, context: String) {
        self.records.faults.push(IommuFault {
            iova,
            len,
            write,
            context,
        });
    }

    /// Device read; an IOMMU fault is recorded and reported as `Err`.
    pub fn rd(&mut self, iova: u64, buf: &mut [u8], what: &dyn Fn() -> String) -> Result<(), ()> {
        match self.dma.read(iova, buf) {
            Some(()) => Ok(()),
            None => {
                let c = what();
                self.fault(iova, buf.len(), false, c);
                Err(())
            }
        }
    }

    /// Device write; an IOMMU fault is recorded and reported as `Err`.
    pub fn wr(&mut self, iova: u64, data: &[u8], what: &dyn Fn() -> String) -> Result<(), ()> {
        match self.dma.write(iova, data) {
            Some(()) => Ok(()),
            None => {
                let c = what();
                self.fault(iova, data.len(), true, c);
                Err(())
            }
        }
    }

    /// Device read of a big-endian 32-bit word.
    pub fn rd_be32(&mut self, iova: u64, what: &dyn Fn() -> String) -> Result<u32, ()> {
        let mut b = [0u8; 4];
        self.rd(iova, &mut b, what)?;
        Ok(u32::from_be_bytes(b))
    }

    /// Write a 64-byte entry into a queue buffer: everything but the last
    /// (ownership) byte first, then a release fence, then the last byte, so
    /// a consumer that sees the new owner sees the whole entry.
    fn write_entry(
        &mut self,
        buf: &crate::objects::QBuf,
        off: u64,
        entry: &[u8],
        what: &dyn Fn() -> String,
    ) -> Result<(), ()> {
        let n = entry.len() as u64;
        let mut done = 0u64;
        // Body.
        while done < n - 1 {
            let Some((iova, contig)) = buf.at(off + done) else {
                let c = what();
                self.fault(
                    0,
                    entry.len(),
                    true,
                    format!("{c}: offset outside page list"),
                );
                return Err(());
            };
            let len = contig.min(n - 1 - done);
            self.wr(iova, &entry[done as usize..(done + len) as usize], what)?;
            done += len;
        }
        fence(Ordering::Release);
        let Some((iova, _)) = buf.at(off + n - 1) else {
            return Err(());
        };
        self.wr(iova, &entry[entry.len() - 1..], what)
    }

    // ------------------------------------------------------------------ objects

    /// How many objects of each family are alive.
    pub fn object_counts(&self) -> ObjectCounts {
        self.objects.counts(self.port.gids.len())
    }

    /// Enter the fatal state with health syndrome `synd` (the first one
    /// stays).
    pub fn go_fatal(&mut self, synd: u8) {
        if self.health.fatal.is_none() {
            self.health.fatal = Some(synd);
            self.health.fatal_counter = self.health_counter_now();
        }
    }

    /// The health counter: milliseconds of device time, 24 bits.
    pub(crate) fn health_counter_now(&self) -> u32 {
        ((self.now_ns() / 1_000_000) as u32) & 0x00ff_ffff
    }

    // ------------------------------------------------------------------ events

    /// The EQ an event of this type goes to (lowest EQ number subscribed).
    pub fn eq_for(&self, event_type: u8) -> Option<u8> {
        self.objects
            .eqs
            .iter()
            .find(|(_, e)| e.subscribes(event_type))
            .map(|(n, _)| *n)
    }

    /// Raise an asynchronous event; false if no EQ subscribes to its type.
    pub fn raise(&mut self, eqe_img: [u8; 64]) -> bool {
        let t = eqe::event_type.get(&eqe_img);
        match self.eq_for(t) {
            Some(eqn) => {
                self.eq_write(eqn, eqe_img);
                true
            }
            None => {
                self.records
                    .violations
                    .push(Violation::EventDropped { event_type: t });
                false
            }
        }
    }

    /// An EQE image with the type and subtype set.
    pub fn make_eqe(event_type: EventType, sub_type: u8) -> [u8; 64] {
        let mut e = [0u8; 64];
        eqe::event_type.set(&mut e, event_type.0).expect("8-bit");
        eqe::event_sub_type.set(&mut e, sub_type).expect("8-bit");
        e
    }

    /// Write an EQE at the EQ's producer index with the ownership rule
    /// (docs/firmware.md §6.2). More than `nent` unreported EQEs is an overrun.
    pub fn eq_write(&mut self, eqn: u8, mut img: [u8; 64]) {
        if self.health.fatal.is_some() {
            return;
        }
        let Some(eq) = self.objects.eqs.get(&eqn) else {
            return;
        };
        if eq.status != 0 {
            return;
        }
        let n = 1u32 << eq.log_size;
        let unreported = eq.pc.wrapping_sub(eq.ci) & 0x00ff_ffff;
        if unreported >= n && !eq.oi {
            // Linux reports an overrun of the async EQ as health syndrome
            // 0xc (ASYNC_EQ_BUF_OVERRUN); other EQs as 0xd (EQ_IN_ERR).
            let is_async = eq.is_async();
            self.records.violations.push(Violation::EqOverrun { eqn });
            if let Some(e) = self.objects.eqs.get_mut(&eqn) {
                e.status = 0xa;
            }
            self.go_fatal(if is_async { 0x0c } else { 0x0d });
            return;
        }
        let slot = eq.pc & (n - 1);
        let owner = (eq.pc >> eq.log_size) & 1 == 1;
        let buf = eq.buf.clone();
        self.hostile_eqe(&mut img);
        eqe::owner.set(&mut img, owner).expect("flag");
        eqe::signature.set(&mut img, 0).expect("8-bit");
        let r = self.write_entry(&buf, slot as u64 * 64, &img, &|| {
            format!("EQE write eqn {eqn}")
        });
        let eq = self.objects.eqs.get_mut(&eqn).expect("checked");
        if r.is_err() {
            eq.status = 0xa; // EQ write failure (eqc.status)
            self.go_fatal(0x0d);
            return;
        }
        eq.pc = eq.pc.wrapping_add(1);
        // An armed EQ interrupts once and waits for the next arm; an
        // always-armed one interrupts on every EQE (`irq.rs`).
        let fire = matches!(eq.st, ctx::ST_ARMED | ctx::ST_ALWAYS_ARMED);
        if eq.st == ctx::ST_ARMED {
            eq.st = ctx::ST_FIRED;
        }
        if fire {
            let intr = eq.intr;
            self.raise_irq(intr);
        }
    }

    /// A completion event for `cqn` on its EQ.
    pub(crate) fn fire_cq(&mut self, cqn: u32) {
        let Some(cq) = self.objects.cqs.get_mut(&cqn) else {
            return;
        };
        let sn = cq.arm.map(|a| a.sn);
        cq.arm = None;
        cq.last_fired_sn = sn;
        cq.last_notified = cq.pc.wrapping_sub(1) & 0x00ff_ffff;
        let eqn = cq.eqn;
        let mut e = Self::make_eqe(EventType::COMP, 0);
        comp_event::cq_number
            .set(eqe::event_data.get_mut(&mut e), cqn)
            .expect("24-bit");
        self.cq_moderation_fired(cqn);
        self.eq_write(eqn, e);
    }

    /// CQ error event (type 0x04) on the EQ subscribed to it.
    fn cq_error_event(&mut self, cqn: u32, synd: u8) {
        let mut e = Self::make_eqe(EventType::CQ_ERROR, 0);
        let d = eqe::event_data.get_mut(&mut e);
        cq_error::cqn.set(d, cqn).expect("24-bit");
        cq_error::syndrome.set(d, synd).expect("8-bit");
        self.raise(e);
    }

    /// SRQ limit event (type 0x14, docs/firmware.md §9.6).
    pub fn srq_limit_event(&mut self, srqn: u32) {
        let mut e = Self::make_eqe(EventType::SRQ_RQ_LIMIT, 0);
        let d = eqe::event_data.get_mut(&mut e);
        qp_events::r#type
            .set(d, ctx::EVENT_QUEUE_TYPE_RQ)
            .expect("8-bit");
        qp_events::qpn_rqn_sqn.set(d, srqn).expect("24-bit");
        self.raise(e);
    }

    /// Write a CQE at the producer index (docs/firmware.md §7.2). `cqe` carries the
    /// opcode in `op_own`; the owner bit is set here. Returns false if the
    /// CQE was lost (CQ in error, overrun, write failure).
    pub fn cq_push(&mut self, cqn: u32, mut cqe: [u8; 64], solicited: bool) -> bool {
        let Some(cq) = self.objects.cqs.get(&cqn) else {
            return false;
        };
        if cq.status != ctx::CQ_STATUS_OK || self.health.fatal.is_some() {
            return false;
        }
        self.hostile_cqe(&mut cqe);
        let twice = self.hostile_send_cqe(&mut cqe);
        let ok = self.cq_write(cqn, cqe, solicited);
        if ok && twice {
            self.cq_write(cqn, cqe, solicited);
        }
        ok
    }

    fn cq_write(&mut self, cqn: u32, mut cqe: [u8; 64], solicited: bool) -> bool {
        let Some(cq) = self.objects.cqs.get(&cqn) else {
            return false;
        };
        if cq.status != ctx::CQ_STATUS_OK || self.health.fatal.is_some() {
            return false;
        }
        let n = 1u32 << cq.log_size;
        let dbr = cq.dbr;
        let Ok(ci) = self.rd_be32(dbr, &|| format!("CQ doorbell record read cqn {cqn:#x}")) else {
            self.cq_fail(
                cqn,
                ctx::CQ_STATUS_WRITE_FAIL,
                cq_error_syndrome::CQ_ACCESS_VIOLATION,
            );
            return false;
        };
        let cq = self.objects.cqs.get(&cqn).expect("checked");
        let outstanding = cq.pc.wrapping_sub(ci & 0x00ff_ffff) & 0x00ff_ffff;
        if outstanding >= n && !cq.oi {
            self.records.violations.push(Violation::CqOverrun { cqn });
            self.cq_fail(cqn, ctx::CQ_STATUS_OVERFLOW, cq_error_syndrome::CQ_OVERRUN);
            return false;
        }
        let slot = cq.pc & (n - 1);
        let owner = (cq.pc >> cq.log_size) & 1 == 1;
        let stride = cq.stride();
        let buf = cq.buf.clone();
        if let Some(ts) = self.completion_timestamp(&cqe) {
            mlx5_regs::layouts::cqe64::timestamp
                .set(&mut cqe, ts)
                .expect("64-bit");
        }
        mlx5_regs::layouts::cqe64::owner
            .set(&mut cqe, owner)
            .expect("flag");
        let r = if stride == 128 {
            // 128-byte CQEs: the 64-byte CQE is the second half (docs/firmware.md §7.2).
            let mut big = [0u8; 128];
            big[64..].copy_from_slice(&cqe);
            self.write_entry(&buf, slot as u64 * 128, &big, &|| {
                format!("CQE write cqn {cqn:#x}")
            })
        } else {
            self.write_entry(&buf, slot as u64 * 64, &cqe, &|| {
                format!("CQE write cqn {cqn:#x}")
            })
        };
        if r.is_err() {
            self.cq_fail(
                cqn,
                ctx::CQ_STATUS_WRITE_FAIL,
                cq_error_syndrome::CQ_ACCESS_VIOLATION,
            );
            return false;
        }
        let cq = self.objects.cqs.get_mut(&cqn).expect("checked");
        let idx = cq.pc;
        cq.pc = cq.pc.wrapping_add(1);
        if solicited {
            cq.last_solicit = Some(idx);
        }
        // Event or not, now or later: moderation decides (moderation.rs).
        self.cq_moderation_cqe(cqn, &cqe, solicited);
        true
    }

    fn cq_fail(&mut self, cqn: u32, status: u8, synd: u8) {
        if let Some(cq) = self.objects.cqs.get_mut(&cqn) {
            cq.status = status;
            cq.arm = None;
        }
        self.cq_error_event(cqn, synd);
    }
}
