//! The service loop run while commands wait and by [`Hca::poll_events`]:
//! health checks, EQ polling and dispatch, and the firmware page service
//! (MANAGE_PAGES on the reserved command slot, docs/firmware.md §2.1, §4.2).

use mlx5_hal::Hal;
use mlx5_regs::Opcode;

use super::cmdwait::{backoff, outcome_of, outcome_to_result, record};
use super::{Hca, HcaConfig, PollReport, PAGES_PER_COMMAND};
use crate::cmd::encode;
use crate::cmd::{CmdQueue, MAX_CMD_LEN};
use crate::cq::ArmTable;
use crate::diag::{self, Show};
use crate::eq::{Event, EventQueue, EventSink};
use crate::error::Error;
use crate::health::Heartbeat;
use crate::pages::{PageManager, PageRequest};
use crate::stats::{CmdObserver, CmdOutcome, CmdStats};

/// Where an event goes: page requests to the page manager, completions to
/// their sink (noting the event for the CQ's next arm, as Linux's
/// `mlx5_eq_comp_int` bumps `arm_sn`), the rest to the async sink.
fn dispatch<H: Hal, const CE: usize, const AE: usize>(
    ev: Event,
    pages: &mut PageManager<H>,
    completions: &mut EventSink<Event, CE>,
    cq_arms: &mut ArmTable<CE>,
    events: &mut EventSink<Event, AE>,
) {
    match ev {
        Event::PageRequest {
            function_id,
            num_pages,
        } => pages.push_request(PageRequest {
            function_id,
            num_pages,
        }),
        Event::Completion { cqn } => {
            cq_arms.fired(cqn);
            completions.push(ev)
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
    pub(crate) comp_eq: Option<EventQueue<H>>,
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
    pub(super) scratch_in: [u8; MAX_CMD_LEN],
    pub(super) scratch_out: [u8; MAX_CMD_LEN],
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
            cq_arms,
            events,
            ..
        } = self;
        let mut n = 0;
        for eq in [async_eq, comp_eq].into_iter().flatten() {
            n += eq
                .poll(hal, budget, |ev| {
                    dispatch(ev, pages, completions, cq_arms, events)
                })
                .eqes;
        }
        n
    }

    /// Poll the completion EQ only: before an arm, an event already there
    /// means the CQ's previous arm fired.
    pub(crate) fn poll_comp_eq(&mut self, hal: &H, budget: u32) {
        let Core {
            comp_eq,
            pages,
            completions,
            cq_arms,
            events,
            ..
        } = self;
        if let Some(eq) = comp_eq {
            eq.poll(hal, budget, |ev| {
                dispatch(ev, pages, completions, cq_arms, events)
            });
        }
    }

    /// Run the command in `scratch_in[..in_len]` on the reserved slot and
    /// wait for it with the lock held (MANAGE_PAGES only; docs/firmware.md §2.1).
    fn exec_reserved<O: CmdObserver>(
        &mut self,
        hal: &H,
        obs: &O,
        cfg: &HcaConfig,
        in_len: usize,
        out_len: usize,
    ) -> Result<(), Error> {
        let Some(cmd) = self.cmd.as_mut() else {
            return Err(NOT_UP);
        };
        let slot = cmd.reserved_slot();
        cmd.reap();
        if !cmd.is_free(slot) {
            return Err(Error::Timeout {
                opcode: Opcode(encode::header_opcode(&self.scratch_in[..in_len])),
                op_mod: encode::header_op_mod(&self.scratch_in[..in_len]),
                waited_ns: 0,
            });
        }
        self.scratch_out[..out_len].fill(0);
        let p = cmd.post(slot, &self.scratch_in[..in_len], out_len)?;
        let mut delay = 0;
        loop {
            let now = hal.now_ns();
            if cmd.is_done(slot) {
                let d = cmd.finish(slot, &mut self.scratch_out[..out_len]);
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
                cmd.abandon(slot);
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
                cmd.abandon(slot);
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
    pub(super) fn give_pages<O: CmdObserver>(
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
    pub(super) fn take_pages<O: CmdObserver>(
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
            diag::debug!(
                "page request: {} pages for function {}",
                req.num_pages,
                req.function_id
            );
            let r = if req.num_pages > 0 {
                match self.give_pages(hal, obs, cfg, req.function_id, req.num_pages as usize) {
                    Err(e @ (Error::OutOfPages { .. } | Error::Dma(_))) => {
                        diag::warn!(
                            "cannot give {} pages ({}): firmware is told so",
                            req.num_pages,
                            Show(&e)
                        );
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

impl<H: Hal, O: CmdObserver, const CE: usize, const AE: usize> Hca<H, O, CE, AE> {
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
    /// finding sticks: every later call fails fast with it.
    pub fn check_health(&self) -> Result<(), Error> {
        self.check_alive()?;
        let r = self.core.lock().heartbeat.check(&self.hal);
        r.map_err(|e| self.note_fatal(e))
    }
}
