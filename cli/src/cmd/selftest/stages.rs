//! The self-test's stages around the mission's steps: which stage each
//! step belongs to, the stages of the self-test's own (capability checks,
//! memory key) run between the steps, the checks that close a stage, and
//! each stage's clock and command count.

use std::time::Instant;

use mlx5_hal::Hal;
use serde_json::{json, Value};

use super::{setup, traffic, STAGES};
use crate::common::error::CliError;
use crate::common::report::Report;
use crate::common::session::TracedHca;
use crate::common::trace::Tracer;
use crate::scenario::{Additions, State, Step};

/// A stage's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    Pass,
    Fail,
    NotRun,
}

/// One row of the table.
#[derive(Debug, Clone)]
pub(super) struct StageResult {
    pub(super) outcome: Outcome,
    pub(super) wall_ns: u64,
    pub(super) device_ns: u64,
    pub(super) commands: u64,
    pub(super) error: Option<Value>,
}

impl StageResult {
    pub(super) const NOT_RUN: StageResult = StageResult {
        outcome: Outcome::NotRun,
        wall_ns: 0,
        device_ns: 0,
        commands: 0,
        error: None,
    };
}

/// Time and commands of the stage running.
pub(super) struct Clock<'h, H: Hal> {
    hal: &'h H,
    wall: Instant,
    device: u64,
    commands: u64,
}

impl<'h, H: Hal> Clock<'h, H> {
    pub(super) fn start(hal: &'h H, t: &Tracer) -> Self {
        Clock {
            hal,
            wall: Instant::now(),
            device: hal.now_ns(),
            commands: t.count(),
        }
    }

    pub(super) fn stop(&self, t: &Tracer, res: Result<(), &CliError>, n: usize) -> StageResult {
        StageResult {
            outcome: if res.is_ok() {
                Outcome::Pass
            } else {
                Outcome::Fail
            },
            wall_ns: self.wall.elapsed().as_nanos() as u64,
            device_ns: self.hal.now_ns().saturating_sub(self.device),
            commands: t.count() - self.commands,
            error: res.err().map(|e| stage_error_json(n, e)),
        }
    }
}

/// A stage's failure as JSON: the cause's fields (kind, opcode, status,
/// syndrome, errno) with the stage and its exit code.
fn stage_error_json(n: usize, e: &CliError) -> Value {
    let mut v = e.to_json();
    v["stage"] = json!(n + 1);
    v["stage_name"] = json!(STAGES[n].0);
    v["exit_code"] = json!(crate::common::error::EXIT_STAGE_BASE + n as i32 + 1);
    v["hint"] = json!(e.stage_hint());
    v
}

/// The stage (index into [`STAGES`]) a part of the mission runs in.
fn stage_of(part: &str) -> usize {
    match part {
        "cq" => 2,
        "srq" => 3,
        "connect" => 5,
        "post" | "arm" | "traffic" | "poll" => 6,
        "limit" => 7,
        "resize" => 8,
        _ => 9,
    }
}

/// The stages between bring-up and the end of the mission's steps: what
/// the self-test adds to the scenario.
pub(super) struct Stages<'c, H: Hal> {
    hal: &'c H,
    t: &'c Tracer,
    /// One row per stage.
    pub(super) results: Vec<StageResult>,
    /// The stage running (0 while none after bring-up has started).
    pub(super) cur: usize,
    clock: Option<Clock<'c, H>>,
}

impl<'c, H: Hal> Stages<'c, H> {
    /// After bring-up (stage 1), whose row is `bring_up`.
    pub(super) fn new(hal: &'c H, t: &'c Tracer, bring_up: StageResult) -> Self {
        let mut results = vec![StageResult::NOT_RUN; STAGES.len()];
        results[0] = bring_up;
        Stages {
            hal,
            t,
            results,
            cur: 0,
            clock: None,
        }
    }

    fn open(&mut self, n: usize, r: &mut Report) {
        r.step(STAGES[n].0, STAGES[n].1);
        self.cur = n;
        self.clock = Some(Clock::start(self.hal, self.t));
    }

    /// Close the running stage with `res`.
    pub(super) fn close(&mut self, res: Result<(), &CliError>) {
        if let Some(c) = self.clock.take() {
            self.results[self.cur] = c.stop(self.t, res, self.cur);
        }
    }

    /// The stage's own checks and additions, once its steps have run.
    pub(super) fn finish(
        &mut self,
        hca: &TracedHca<'_, H>,
        st: &mut State<'_, H>,
        r: &mut Report,
    ) -> Result<(), CliError> {
        match self.cur {
            6 => traffic::kinds(hca, st, r),
            7 => traffic::check_limit(st, r),
            8 => traffic::check_resize(st, r),
            9 => {
                traffic::model_traffic(st, r);
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

impl<H: Hal> Additions<H> for Stages<'_, H> {
    fn before(
        &mut self,
        step: &Step<H>,
        _first: bool,
        hca: &TracedHca<'_, H>,
        st: &mut State<'_, H>,
        r: &mut Report,
    ) -> Result<(), CliError> {
        let want = stage_of(step.part);
        while self.cur < want {
            self.finish(hca, st, r)?;
            self.close(Ok(()));
            self.open(self.cur + 1, r);
            match self.cur {
                1 => setup::capabilities(hca, r)?,
                4 => setup::memory_key(hca, st, r)?,
                _ => {}
            }
        }
        Ok(())
    }
}
