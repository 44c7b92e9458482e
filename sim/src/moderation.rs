//! Completion event moderation (`cqc.cq_max_count`, `cq_period`,
//! `cq_period_mode`, `scqe_break_moderation_en`; docs/firmware.md §7.1).
//!
//! The PRM's CQ context: `cq_max_count` is the event generation moderation
//! counter and `cq_period` the moderation timer in microseconds, each
//! disabled by 0; with `cq_period_mode` 0 ("upon event") the timer restarts
//! when an event is generated, with 1 ("upon CQE") when a completion is
//! written (Linux commit "net/mlx5e: CQE based moderation": a burst then
//! never lets the timer expire, only the count raises events). A solicited
//! CQE raises the event at once only with `scqe_break_moderation_en`.
//!
//! The model: an armed CQ whose arm condition is met (a CQE for a
//! next-completion arm, a solicited or error CQE for a solicited arm) has a
//! *trigger*. With a trigger, the completion EQE is written when moderation
//! lets it: both values 0, or `cq_max_count` CQEs written since the last
//! event, or the timer expired (now ≥ start + `cq_period`); otherwise at
//! the timer's deadline (device time: `run_due` in both execution modes),
//! or never with `cq_period` 0 until the count is reached. Choices where
//! the sources are silent are listed in docs/fidelity.md §9.

use mlx5_regs::layouts::cqe64;

use crate::state::State;

/// CQE opcodes 13 (REQ_ERR) and 14 (RESP_ERR): error completions.
const CQE_REQ_ERR: u8 = 13;
const CQE_RESP_ERR: u8 = 14;

/// Per-CQ moderation state (the context values live in [`crate::objects::Cq`]).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Moderation {
    /// CQEs written since the last completion event (or creation).
    pub since_event: u32,
    /// Device time the period timer last (re)started.
    pub timer_start_ns: u64,
    /// The CQ is armed and its arm condition was met: an event is owed.
    pub triggered: bool,
    /// `cqc.scqe_break_moderation_en`.
    pub scqe_break: bool,
}

impl Moderation {
    /// State of a CQ created at `now_ns`.
    pub fn new(now_ns: u64, scqe_break: bool) -> Moderation {
        Moderation {
            since_event: 0,
            timer_start_ns: now_ns,
            triggered: false,
            scqe_break,
        }
    }
}

impl State {
    /// A CQE was just written to `cqn` (its producer counter advanced).
    pub(crate) fn cq_moderation_cqe(&mut self, cqn: u32, cqe: &[u8; 64], solicited: bool) {
        let now = self.now_ns();
        let Some(cq) = self.objects.cqs.get_mut(&cqn) else {
            return;
        };
        let opcode = cqe64::opcode.get(cqe);
        let error = opcode == CQE_REQ_ERR || opcode == CQE_RESP_ERR;
        cq.moder.since_event = cq.moder.since_event.saturating_add(1);
        if cq.period_mode == 1 {
            cq.moder.timer_start_ns = now;
        }
        let Some(arm) = cq.arm else {
            return;
        };
        if !arm.solicited || solicited {
            cq.moder.triggered = true;
        }
        if !cq.moder.triggered {
            return;
        }
        // The PRM names the CQE's SE flag: an error CQE does not break
        // moderation (it only satisfies a solicited arm).
        let breaks = cq.moder.scqe_break && solicited && !error;
        self.cq_moderate(cqn, breaks);
    }

    /// The arm doorbell found CQEs beyond its consumer index that satisfy
    /// it: an event is owed, as soon as moderation lets it.
    pub(crate) fn cq_moderation_armed_ready(&mut self, cqn: u32) {
        if let Some(cq) = self.objects.cqs.get_mut(&cqn) {
            cq.moder.triggered = true;
        }
        self.cq_moderate(cqn, false);
    }

    /// MODIFY_CQ changed the moderation values: an owed event is judged by
    /// the new ones (a lower count may let it out at once).
    pub(crate) fn cq_moderation_changed(&mut self, cqn: u32) {
        if self
            .objects
            .cqs
            .get(&cqn)
            .is_some_and(|c| c.arm.is_some() && c.moder.triggered)
        {
            self.cq_moderate(cqn, false);
        }
    }

    /// The completion event was written: the count starts again, and in
    /// "upon event" mode the timer too.
    pub(crate) fn cq_moderation_fired(&mut self, cqn: u32) {
        let now = self.now_ns();
        if let Some(cq) = self.objects.cqs.get_mut(&cqn) {
            cq.moder.since_event = 0;
            cq.moder.triggered = false;
            if cq.period_mode == 0 {
                cq.moder.timer_start_ns = now;
            }
        }
    }

    /// Write the owed event now if moderation lets it (or `force`).
    fn cq_moderate(&mut self, cqn: u32, force: bool) {
        let now = self.now_ns();
        let Some(cq) = self.objects.cqs.get(&cqn) else {
            return;
        };
        let (count, period) = (cq.max_count as u32, cq.period as u64);
        let by_count = count > 0 && cq.moder.since_event >= count;
        let by_time = period > 0 && now >= cq.moder.timer_start_ns + period * 1000;
        if force || (count == 0 && period == 0) || by_count || by_time {
            self.fire_cq(cqn);
        }
    }

    /// Device time of the CQ whose moderation timer expires first, among
    /// the CQs that owe an event.
    pub(crate) fn cq_moderation_next_due(&self) -> Option<u64> {
        self.objects
            .cqs
            .values()
            .filter(|c| c.arm.is_some() && c.moder.triggered && c.period > 0)
            .map(|c| c.moder.timer_start_ns + c.period as u64 * 1000)
            .min()
    }

    /// Write the events whose moderation timer has expired.
    pub(crate) fn cq_moderation_run_due(&mut self) {
        let now = self.now_ns();
        let due: Vec<u32> = self
            .objects
            .cqs
            .iter()
            .filter(|(_, c)| {
                c.arm.is_some()
                    && c.moder.triggered
                    && c.period > 0
                    && c.moder.timer_start_ns + c.period as u64 * 1000 <= now
            })
            .map(|(n, _)| *n)
            .collect();
        for cqn in due {
            self.fire_cq(cqn);
        }
    }
}
