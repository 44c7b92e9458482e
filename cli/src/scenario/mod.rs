//! The scenarios: the demo (the whole mission), and the smaller `limit` and
//! `resize` scenarios for `trace` and `stats`. Each brings the HCA up,
//! creates a send CQ, a receive CQ, an SRQ and a loopback QP pair, sends
//! its messages from one QP to the other through the device (the model's
//! traffic engine or a card: the same steps on both), destroys what it
//! made, tears down and checks that nothing was lost.

use mlx5_driver::srq::LimitArm;
use mlx5_driver::Event;
use mlx5_hal::Hal;
use mlx5_sim::Device;

use crate::common::error::CliError;
use crate::common::report::Report;
use crate::common::session::{
    after_failed_bring_up, bring_up, narrate_bring_up, teardown, Env, TracedHca,
};
use crate::common::trace::Tracer;

pub(crate) mod demo;
pub mod flow;
pub mod objects;
mod summary;

use flow::{left, poll_eq, range, wait_limit_event, wait_pending, Flow, Kind};
use objects::Objects;
pub use summary::{conclude, Summary};

/// Which scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// The whole demo.
    Demo,
    /// CQ resize with completions waiting.
    Resize,
    /// SRQ limit event, through EQ polling, and re-arm.
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
}

/// What the steps of a scenario share: the objects made so far, the
/// traffic so far and the model (when the target is the model).
pub(crate) struct State<'m, H: Hal> {
    pub(crate) objs: Objects<H>,
    pub(crate) flow: Flow,
    pub(crate) model: Option<&'m Device>,
}

/// One step's work: it narrates itself through the report and adds what it
/// saw to the summary.
pub(crate) type StepFn<H> = for<'a, 'h, 'm> fn(
    &'a TracedHca<'h, H>,
    &'a mut State<'m, H>,
    &'a mut Report,
    &'a mut Summary,
) -> Result<(), CliError>;

/// One step of a scenario: its id and title (the report's step heading)
/// and its work.
pub(crate) struct Step<H: Hal> {
    id: &'static str,
    title: &'static str,
    run: StepFn<H>,
}

impl<H: Hal> Step<H> {
    pub(crate) const fn new(id: &'static str, title: &'static str, run: StepFn<H>) -> Self {
        Step { id, title, run }
    }
}

impl Scenario {
    /// The scenario's steps between bring-up and teardown, in order.
    fn steps<H: Hal>(self) -> Vec<Step<H>> {
        match self {
            Scenario::Demo => demo::steps(),
            Scenario::Limit => vec![
                Step::new(
                    "create",
                    "Create the CQs, the SRQ, the buffers and the QP pair",
                    |hca, st, r, sum| create_all(hca, st, 15, r, sum),
                ),
                Step::new("arm", "Post 10 receives, arm the limit at 7", limit_arm),
                Step::new("limit", "Send until the limit event", limit_event),
                Step::new("destroy", "Destroy everything", demo::destroy),
            ],
            Scenario::Resize => vec![
                Step::new(
                    "create",
                    "Create the CQs, the SRQ, the buffers and the QP pair",
                    |hca, st, r, sum| create_all(hca, st, 63, r, sum),
                ),
                Step::new("traffic", "Send 40 messages, poll none", resize_traffic),
                Step::new("resize", "Resize with completions waiting", resize_cq),
                Step::new("destroy", "Destroy everything", demo::destroy),
            ],
        }
    }
}

/// Run a scenario end to end: bring-up, its steps in order (stopping at
/// the first failure, then destroying what was made), teardown. The
/// summary comes back also when the run fails, with the page and object
/// accounting known at that point.
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
    let mut st = State {
        objs: Objects::new(),
        flow: Flow::new(),
        model: env.model,
    };
    let body = which.steps().iter().try_for_each(|step| {
        r.step(step.id, step.title);
        (step.run)(&hca, &mut st, r, &mut sum)
    });
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

/// Destroy every object (QPs, SRQ, CQs, key) and say what the model holds.
pub(crate) fn destroy_step<H: Hal>(
    hca: &TracedHca<'_, H>,
    objs: &mut Objects<H>,
    model: Option<&Device>,
    r: &mut Report,
) -> Result<(), CliError> {
    let (lines, res) = objs.destroy(hca);
    for l in lines {
        r.say(l);
    }
    res?;
    if let Some(dev) = model {
        let o = dev.objects();
        r.say(format!(
            "the model now holds {} QPs, {} CQs and {} SRQs/RMPs (the EQs, UAR, PD, DMA key and XRC domain of bring-up remain)",
            o.qps,
            o.cqs,
            o.srqs + o.rmps
        ));
        r.set("model_qps", o.qps);
        r.set("model_cqs", o.cqs);
        r.set("model_srqs", o.srqs + o.rmps);
    }
    Ok(())
}

/// The limit and resize scenarios' first step: a 63-entry CQ pair, an SRQ
/// of `srq_wr` and the connected QP pair.
fn create_all<H: Hal>(
    hca: &TracedHca<'_, H>,
    st: &mut State<'_, H>,
    srq_wr: u32,
    r: &mut Report,
    sum: &mut Summary,
) -> Result<(), CliError> {
    demo::create_queues(hca, &mut st.objs, 63, srq_wr, r)?;
    demo::create_qps(hca, &mut st.objs, 0, r)?;
    let p = st.objs.parts()?;
    sum.qps = Some((p.sender.qpn(), p.receiver.qpn()));
    Ok(())
}

// ------------------------------------------------------------ limit
// rdma-core's case: 10 receives posted, limit 7, the event after the 4th
// message.

fn limit_arm<H: Hal>(
    hca: &TracedHca<'_, H>,
    st: &mut State<'_, H>,
    r: &mut Report,
    sum: &mut Summary,
) -> Result<(), CliError> {
    let p = st.objs.parts()?;
    st.flow.post_recvs(hca, p.srq, p.rbufs, 10)?;
    let arm = hca
        .arm_srq_limit(p.srq, 7)
        .map_err(|e| CliError::driver("arming the SRQ limit", e))?;
    r.say(format!("10 posted; limit 7: {}", arm_text(arm)));
    sum.traffic = true;
    Ok(())
}

fn limit_event<H: Hal>(
    hca: &TracedHca<'_, H>,
    st: &mut State<'_, H>,
    r: &mut Report,
    sum: &mut Summary,
) -> Result<(), CliError> {
    let mut p = st.objs.parts()?;
    for i in 1..=4u64 {
        let want = p.rcq.pending() + 1;
        st.flow.post(
            hca,
            &mut p,
            &[(Kind::Send, flow::demo_len(st.flow.next_seq()))],
        )?;
        wait_pending(hca, p.rcq, want, "receive")?;
        let (limit, _, other) = poll_eq(hca, Some(p.srq.srqn()), None)?;
        say_other(r, &other);
        sum.limit_events += limit;
        r.say(format!(
            "message {i} ({} carried it): {} receives posted, {limit} limit event(s)",
            demo::carrier(st.model),
            left(p.srq, p.rcq)
        ));
    }
    if sum.limit_events == 0 {
        // The fourth message took the SRQ below the limit; its event may
        // trail its completion (a card, or the threaded model).
        let (limit, _, other, waited) = wait_limit_event(hca, p.srq.srqn(), None)?;
        say_other(r, &other);
        sum.limit_events += limit;
        if limit > 0 {
            r.say(format!(
                "the limit event trailed message 4's completion by {} us",
                waited / 1000
            ));
        }
    }
    let (seqs, ids) = st.flow.complete_all(hca, &mut p)?;
    r.say(format!(
        "polled {} receive and {} send completions",
        seqs.len(),
        ids.len()
    ));
    st.flow.post_recvs(hca, p.srq, p.rbufs, 4)?;
    let arm = hca
        .arm_srq_limit(p.srq, 7)
        .map_err(|e| CliError::driver("re-arming the SRQ limit", e))?;
    let lwm = hca
        .query_srq(p.srq)
        .map_err(|e| CliError::driver("querying the SRQ", e))?
        .lwm;
    sum.limit_rearmed = arm == LimitArm::Armed && lwm == 7;
    r.say(format!(
        "re-posted 4, re-armed at 7: {} (lwm = {lwm})",
        arm_text(arm)
    ));
    r.set("limit_events", sum.limit_events);
    Ok(())
}

// ------------------------------------------------------------ resize
// A 63-entry receive CQ resized to 255 with 40 completions waiting, 5
// more after.

fn resize_traffic<H: Hal>(
    hca: &TracedHca<'_, H>,
    st: &mut State<'_, H>,
    r: &mut Report,
    sum: &mut Summary,
) -> Result<(), CliError> {
    let mut p = st.objs.parts()?;
    st.flow.post_recvs(hca, p.srq, p.rbufs, 48)?;
    sum.traffic = true;
    let msgs: Vec<(Kind, usize)> = (0..40).map(|s| (Kind::Send, flow::demo_len(s))).collect();
    st.flow.post(hca, &mut p, &msgs)?;
    wait_pending(hca, p.rcq, 40, "receive")?;
    r.say(format!(
        "{} carried 40 messages; {} receive completions waiting",
        demo::carrier(st.model),
        p.rcq.pending()
    ));
    Ok(())
}

fn resize_cq<H: Hal>(
    hca: &TracedHca<'_, H>,
    st: &mut State<'_, H>,
    r: &mut Report,
    sum: &mut Summary,
) -> Result<(), CliError> {
    let mut p = st.objs.parts()?;
    let (from, waiting) = (p.rcq.capacity(), p.rcq.pending());
    hca.resize_cq(p.rcq, 255)
        .map_err(|e| CliError::driver("resizing the CQ", e))?;
    r.say(format!(
        "resized {from} -> {} with {waiting} waiting",
        p.rcq.capacity()
    ));
    sum.resize = Some((from, p.rcq.capacity(), waiting));
    let msgs: Vec<(Kind, usize)> = (40..45).map(|s| (Kind::Send, flow::demo_len(s))).collect();
    st.flow.post(hca, &mut p, &msgs)?;
    let (seqs, ids) = st.flow.complete_all(hca, &mut p)?;
    r.say(format!(
        "5 more after the resize; polled {} receive completions ({}) in order and {} send completions",
        seqs.len(),
        range("messages", &seqs),
        ids.len()
    ));
    Ok(())
}
