//! The scenario: the mission, narrated step by step, that `demo`, `trace`,
//! `stats` and `selftest` all run. It brings the HCA up, creates a send
//! CQ, a receive CQ, an SRQ and a loopback QP pair, sends its messages
//! from one QP to the other through the device (the model's traffic engine
//! or a card: the same steps on both), raises the SRQ limit event by
//! consumption, resizes the receive CQ with completions waiting, destroys
//! what it made, tears down and checks that nothing was lost.
//!
//! The steps are one list ([`mission`]) run by one runner ([`run_steps`]).
//! The `limit` and `resize` scenarios of `trace` and `stats` are the
//! mission's steps they need; the self-test runs every step and adds its
//! own stages, checks and report around them ([`Additions`]).

use mlx5_driver::srq::LimitArm;
use mlx5_driver::Event;
use mlx5_hal::Hal;
use mlx5_sim::Device;
use serde_json::{json, Value};

use crate::common::error::CliError;
use crate::common::report::Report;
use crate::common::session::{
    after_failed_bring_up, bring_up, narrate_bring_up, teardown, Env, TracedHca,
};
use crate::common::trace::Tracer;

pub mod flow;
pub(crate) mod mission;
pub mod objects;
mod summary;

use flow::Flow;
use objects::Objects;
pub use summary::{conclude, Summary};

/// Which scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// The whole mission (the demo).
    Demo,
    /// The mission's steps up to a CQ resize with completions waiting.
    Resize,
    /// The mission's steps up to the SRQ limit event, through EQ polling,
    /// and its re-arm.
    Limit,
}

impl Scenario {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Demo => "demo",
            Scenario::Resize => "resize",
            Scenario::Limit => "limit",
        }
    }

    /// The mission's steps this scenario runs between bring-up and
    /// teardown, in the mission's order.
    pub(crate) fn steps<H: Hal>(self) -> Vec<Step<H>> {
        let parts: &[&str] = match self {
            Scenario::Demo => return mission::steps(),
            Scenario::Limit => &["cq", "srq", "connect", "post", "arm", "limit", "destroy"],
            Scenario::Resize => &["cq", "srq", "connect", "post", "resize", "destroy"],
        };
        mission::steps()
            .into_iter()
            .filter(|s| parts.contains(&s.part))
            .collect()
    }
}

/// What the SRQ limit step saw (the self-test judges it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LimitSeen {
    /// The limit armed.
    pub(crate) limit: u32,
    /// The message (counted from the step's first) after which the event
    /// should come: the one that leaves fewer receives posted than the
    /// limit.
    pub(crate) expected_after: u64,
    /// The message after which it came, if it did.
    pub(crate) fired_after: Option<u64>,
    /// What re-arming it after the event gave.
    pub(crate) rearm: LimitArm,
    /// The limit firmware reports after the re-arm.
    pub(crate) lwm_after_rearm: u32,
}

/// What the CQ resize step saw (the self-test judges it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ResizeSeen {
    /// Messages sent by the step (before and after the resize).
    pub(crate) sent: u64,
    /// Of them, received intact.
    pub(crate) received: u64,
    /// Their receive completions came in posting order.
    pub(crate) in_order: bool,
}

/// What the steps of a scenario share: the objects made so far, the
/// traffic so far, the model (when the target is the model), and what the
/// limit and resize steps saw.
pub(crate) struct State<'m, H: Hal> {
    pub(crate) objs: Objects<H>,
    pub(crate) flow: Flow,
    pub(crate) model: Option<&'m Device>,
    pub(crate) limit: Option<LimitSeen>,
    pub(crate) resize: Option<ResizeSeen>,
}

impl<'m, H: Hal> State<'m, H> {
    /// Nothing made yet.
    pub(crate) fn new(model: Option<&'m Device>) -> Self {
        State {
            objs: Objects::new(),
            flow: Flow::new(),
            model,
            limit: None,
            resize: None,
        }
    }
}

/// One part's work: it narrates itself through the report and adds what
/// it saw to the summary.
pub(crate) type StepFn<H> = for<'a, 'h, 'm> fn(
    &'a TracedHca<'h, H>,
    &'a mut State<'m, H>,
    &'a mut Report,
    &'a mut Summary,
) -> Result<(), CliError>;

/// One part of a step of the mission: the step's id and title (the
/// report's step heading, shared by its parts), the part's own name (what
/// the `limit` and `resize` scenarios select and the self-test maps to its
/// stages) and its work.
pub(crate) struct Step<H: Hal> {
    pub(crate) id: &'static str,
    pub(crate) title: &'static str,
    pub(crate) part: &'static str,
    run: StepFn<H>,
}

impl<H: Hal> Step<H> {
    pub(crate) const fn new(
        id: &'static str,
        title: &'static str,
        part: &'static str,
        run: StepFn<H>,
    ) -> Self {
        Step {
            id,
            title,
            part,
            run,
        }
    }
}

/// What a run adds around the mission's steps. The demo, `trace` and
/// `stats` add nothing but each step's heading ([`Headings`]); the
/// self-test opens its stages, runs its own stages and checks between
/// the steps, and keeps their clock.
pub(crate) trait Additions<H: Hal> {
    /// Before `step` (`first`: the first part of its step). An error stops
    /// the run as a failing step does.
    fn before(
        &mut self,
        step: &Step<H>,
        first: bool,
        hca: &TracedHca<'_, H>,
        st: &mut State<'_, H>,
        r: &mut Report,
    ) -> Result<(), CliError>;
}

/// Each step under its own numbered heading.
pub(crate) struct Headings;

impl<H: Hal> Additions<H> for Headings {
    fn before(
        &mut self,
        step: &Step<H>,
        first: bool,
        _hca: &TracedHca<'_, H>,
        _st: &mut State<'_, H>,
        r: &mut Report,
    ) -> Result<(), CliError> {
        if first {
            r.step(step.id, step.title);
        }
        Ok(())
    }
}

/// The runner: `steps` in order with what `add` adds before each,
/// stopping at the first failure (the caller destroys what was made).
pub(crate) fn run_steps<H: Hal>(
    steps: &[Step<H>],
    hca: &TracedHca<'_, H>,
    st: &mut State<'_, H>,
    r: &mut Report,
    sum: &mut Summary,
    add: &mut impl Additions<H>,
) -> Result<(), CliError> {
    let mut last = None;
    for step in steps {
        add.before(step, last != Some(step.id), hca, st, r)?;
        last = Some(step.id);
        (step.run)(hca, st, r, sum)?;
    }
    Ok(())
}

/// Run a scenario end to end: bring-up, its steps (stopping at the first
/// failure, then destroying what was made), teardown. The summary comes
/// back also when the run fails, with the page and object accounting
/// known at that point.
pub fn run<H: Hal>(
    which: Scenario,
    hal: H,
    env: &Env<'_>,
    t: &Tracer,
    r: &mut Report,
) -> (Summary, Result<(), CliError>) {
    let mut sum = Summary {
        scenario: which.name(),
        ..Summary::default()
    };
    r.step("bring-up", "Bring-up");
    let (hca, waited) = match bring_up(hal, env, t, r) {
        Ok(x) => x,
        Err(e) => {
            sum.teardown = after_failed_bring_up(&e, env, t, r);
            return (sum, Err(e));
        }
    };
    narrate_bring_up(&hca, waited, t, r);
    sum.loopback = crate::common::loopback::loopback_name(&hca);
    let mut st = State::new(env.model);
    let body = run_steps(&which.steps(), &hca, &mut st, r, &mut sum, &mut Headings);
    sum.absorb(&st.flow, env.model);
    if let Err(e) = &body {
        r.say(format!("stopped: {}", e.message()));
        let (undone, _) = st.objs.destroy(&hca);
        if !undone.is_empty() {
            r.say(format!("after the failure: {}", undone.join(", ")));
        }
    }
    r.step("teardown", "Tear down");
    let (td, td_res) = teardown(hca, env, r);
    sum.teardown = td;
    (sum, body.and(td_res))
}

/// What a subcommand that ran a scenario returns: its JSON (`steps`,
/// `summary`, `commands_sent`, and `extra` when given) and its result, the
/// run's own failure or else a failed check of [`conclude`] (which prints
/// the summary).
pub fn finish(
    (sum, res): (Summary, Result<(), CliError>),
    env: &Env<'_>,
    t: &Tracer,
    r: &mut Report,
    extra: Option<(&str, Value)>,
) -> (Value, Result<(), CliError>) {
    let checks = conclude(&sum, env, t, r, res.as_ref().err());
    let result = res.and(checks);
    let mut v = json!({
        "steps": r.take_steps(),
        "summary": sum.to_json(),
        "commands_sent": t.count(),
    });
    if let Some((k, x)) = extra {
        v[k] = x;
    }
    (v, result)
}

/// What the latencies of a run measure, for the headings of `trace` and
/// `stats`.
pub fn latency_kind(env: &Env<'_>) -> &'static str {
    if env.model.is_some() {
        "the model's virtual clock, not real firmware timing"
    } else {
        "wall-clock time"
    }
}

pub(crate) fn say_other(r: &mut Report, other: &[Event]) {
    for e in other {
        r.say(format!("other event: {e:?}"));
    }
}

pub(crate) fn arm_text(a: LimitArm) -> &'static str {
    match a {
        LimitArm::Armed => "armed",
        LimitArm::Disarmed => "disarmed",
        LimitArm::RaiseNow => {
            "firmware did not fire although fewer WQEs are posted than the limit: the driver disarmed it and raises the event itself"
        }
    }
}
