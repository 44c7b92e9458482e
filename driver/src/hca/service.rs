//! The service loop run while commands wait and by [`Hca::poll_events`]:
//! health checks, EQ polling and dispatch, and the firmware page service
//! (its MANAGE_PAGES commands are in `page_service.rs`).

use mlx5_hal::Hal;

use super::{Hca, HcaConfig, PollReport, MAX_COMP_VECTORS};
use crate::cmd::{CmdQueue, MAX_CMD_LEN};
use crate::cq::ArmTable;
use crate::eq::{Event, EventQueue, EventSink};
use crate::error::Error;
use crate::health::Heartbeat;
use crate::pages::{PageManager, PageRequest};
use crate::stats::{CmdObserver, CmdStats};

/// Where an event goes: page requests to the page manager, completions to
/// their sink (noting the event for the CQ's next arm, as Linux's
/// `mlx5_eq_comp_int` bumps `arm_sn`), SRQ limit events to the limit
/// watch and the async sink, the rest to the async sink.
fn dispatch<H: Hal, const CE: usize, const AE: usize>(
    ev: Event,
    pages: &mut PageManager<H>,
    completions: &mut EventSink<Event, CE>,
    cq_arms: &mut ArmTable<CE>,
    events: &mut EventSink<Event, AE>,
    limit_watch: &mut heapless::Vec<(u32, bool), LIMIT_WATCHES>,
) {
    match ev {
        Event::PageRequest {
            function_id,
            ec_function,
            num_pages,
        } => pages.push_request(PageRequest {
            function_id,
            ec_function,
            num_pages,
        }),
        Event::Completion { cqn } => {
            cq_arms.fired(cqn);
            completions.push(ev)
        }
        Event::SrqLimit { srqn } => {
            for w in limit_watch.iter_mut().filter(|w| w.0 == srqn) {
                w.1 = true;
            }
            events.push(ev)
        }
        _ => events.push(ev),
    }
}

/// What a command on an HCA that was never brought up gets.
pub(super) const NOT_UP: Error = Error::InvalidArgument("the HCA is not brought up");

/// State behind the command lock.
pub(crate) struct Core<H: Hal, const CE: usize, const AE: usize> {
    /// `None` until bring-up made it ([`Hca::new_down`]).
    pub(crate) cmd: Option<CmdQueue<H>>,
    pub(crate) async_eq: Option<EventQueue<H>>,
    /// One completion EQ per completion vector, vector `i` at index `i`.
    pub(crate) comp_eqs: heapless::Vec<EventQueue<H>, MAX_COMP_VECTORS>,
    pub(crate) pages: PageManager<H>,
    pub(crate) completions: EventSink<Event, CE>,
    /// CQs armed through [`Hca::arm_cq`] and whether their event came.
    pub(crate) cq_arms: ArmTable<CE>,
    pub(crate) events: EventSink<Event, AE>,
    pub(crate) stats: CmdStats,
    pub(super) heartbeat: Heartbeat,
    /// `poll_events` calls since the last health check.
    pub(super) polls_since_health: u32,
    pub(super) function_id: u16,
    /// The function is an embedded-CPU one (init segment bit 23): its own
    /// page commands carry `embedded_cpu_function` (Linux
    /// `mlx5_core_is_ecpf`).
    pub(super) embedded_cpu: bool,
    pub(super) scratch_in: [u8; MAX_CMD_LEN],
    pub(super) scratch_out: [u8; MAX_CMD_LEN],
    /// SRQs whose limit arm is being checked, and whether a limit event of
    /// theirs was dispatched meanwhile ([`Hca::arm_srq_limit`]).
    pub(super) limit_watch: heapless::Vec<(u32, bool), LIMIT_WATCHES>,
}

/// Limit arms checked at the same time, at most.
pub(super) const LIMIT_WATCHES: usize = 8;

impl<H: Hal, const CE: usize, const AE: usize> Core<H, CE, AE> {
    /// Poll every EQ once and dispatch: page requests to the page manager,
    /// completions and async events to their sinks.
    pub(super) fn poll_eqs(&mut self, hal: &H, budget: u32) -> u32 {
        let Core {
            async_eq,
            comp_eqs,
            pages,
            completions,
            cq_arms,
            events,
            limit_watch,
            ..
        } = self;
        let mut n = 0;
        for eq in async_eq.iter_mut().chain(comp_eqs.iter_mut()) {
            n += eq
                .poll(hal, budget, |ev| {
                    dispatch(ev, pages, completions, cq_arms, events, limit_watch)
                })
                .eqes;
        }
        n
    }

    /// Poll the completion EQ `eqn` only: before an arm, an event already
    /// there means the CQ's previous arm fired.
    pub(crate) fn poll_comp_eq(&mut self, hal: &H, budget: u32, eqn: u8) {
        let Core {
            comp_eqs,
            pages,
            completions,
            cq_arms,
            events,
            limit_watch,
            ..
        } = self;
        if let Some(eq) = comp_eqs.iter_mut().find(|e| e.eqn() == eqn) {
            eq.poll(hal, budget, |ev| {
                dispatch(ev, pages, completions, cq_arms, events, limit_watch)
            });
        }
    }

    /// Everything done while waiting: health, EQs, page requests.
    pub(super) fn service<O: CmdObserver>(
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

/// A destroyed object whose events must not reach the object that reuses
/// its number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gone {
    /// A CQ: completion and CQ-error events.
    Cq(u32),
    /// An SRQ or RMP: limit and catastrophic-error events.
    Srq(u32),
    /// A QP: its QP events (WQ errors, last WQE reached, ...).
    Qp(u32),
}

impl Gone {
    fn names(self, ev: &Event) -> bool {
        match (self, ev) {
            (Gone::Cq(n), Event::Completion { cqn } | Event::CqError { cqn, .. }) => *cqn == n,
            (Gone::Srq(n), Event::SrqLimit { srqn } | Event::SrqCatastrophic { srqn }) => {
                *srqn == n
            }
            (Gone::Qp(n), ev) => ev.qp_event().is_some_and(|(q, _)| q == n),
            _ => false,
        }
    }
}

impl<H: Hal, O: CmdObserver, const CE: usize, const AE: usize> Hca<H, O, CE, AE> {
    /// After a successful destroy: dispatch what the EQs hold (firmware
    /// raises nothing more for the object once its destroy completed) and
    /// withdraw every queued event naming it, so none reaches an object that
    /// gets its number next (firmware reuses numbers). Linux gets the same by
    /// removing the object from its table and synchronising the EQ's
    /// interrupt before freeing (`mlx5_core_destroy_cq`: `mlx5_eq_del_cq`,
    /// `synchronize_irq`). Returns how many events were withdrawn.
    pub(crate) fn forget_events(&self, gone: Gone) -> usize {
        let mut core = self.core.lock();
        if !self.is_dead() {
            core.poll_eqs(&self.hal, u32::MAX);
        }
        let Core {
            completions,
            events,
            cq_arms,
            ..
        } = &mut *core;
        if let Gone::Cq(cqn) = gone {
            // Its arm record goes too (after the poll above noted its last
            // events): a CQ that reuses the number starts afresh.
            cq_arms.remove(cqn);
        }
        completions.retain(|e| !gone.names(e)) + events.retain(|e| !gone.names(e))
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

    /// Read the health buffer now (fatal sensors and heartbeat, docs/firmware.md
    /// §1.3), whatever [`HcaConfig::poll_health_interval`] says. A fatal
    /// finding sticks: every later call fails fast with it. A syndrome
    /// without the reset-requested bit is not fatal: it is kept for
    /// [`Hca::health_warning`] and the HCA stays usable.
    pub fn check_health(&self) -> Result<(), Error> {
        self.check_alive()?;
        let r = self.core.lock().heartbeat.check(&self.hal);
        r.map_err(|e| self.note_fatal(e))
    }

    /// Start watching SRQ `srqn`'s limit events: what the EQs hold now is
    /// dispatched first, so only events raised from here on count.
    pub(crate) fn watch_srq_limit(&self, srqn: u32) -> Result<(), Error> {
        let mut core = self.core.lock();
        core.poll_eqs(&self.hal, u32::MAX);
        core.limit_watch
            .push((srqn, false))
            .map_err(|_| Error::Busy("too many SRQ limit arms at once"))
    }

    /// Stop watching: dispatch what the EQs hold and tell whether a limit
    /// event of `srqn` came since [`Hca::watch_srq_limit`].
    pub(crate) fn unwatch_srq_limit(&self, srqn: u32) -> bool {
        let mut core = self.core.lock();
        core.poll_eqs(&self.hal, u32::MAX);
        match core.limit_watch.iter().position(|w| w.0 == srqn) {
            Some(i) => core.limit_watch.swap_remove(i).1,
            None => false,
        }
    }

    /// The non-fatal health syndrome the last health check saw (`None`
    /// once firmware cleared it), and how many distinct ones were seen
    /// since bring-up. Linux reports such a syndrome (its devlink "fw"
    /// reporter) and keeps the device; so does this driver.
    pub fn health_warning(&self) -> (Option<crate::health::HealthWarning>, u64) {
        self.core.lock().heartbeat.warning()
    }
}
