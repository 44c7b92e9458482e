//! The scenarios: the demo (the whole mission), and the smaller `limit` and
//! `resize` scenarios for `trace` and `stats`. Each brings the HCA up,
//! works, destroys what it made, tears down and checks that nothing was
//! lost. On the model, traffic is injected; on hardware the steps that
//! need traffic say what they would need and are skipped.

use std::collections::VecDeque;

use mlx5_driver::cq::{Cq, CqOptions, Cqe};
use mlx5_driver::srq::{LimitArm, Srq};
use mlx5_hal::{DmaRegion, Hal};
use mlx5_regs::CqeOpcode;
use mlx5_sim::Device;

use crate::error::CliError;
use crate::report::Report;
use crate::session::{after_failed_bring_up, bring_up, narrate_bring_up, teardown, Env, TracedHca};
use crate::trace::Tracer;

mod demo;
mod kit;
mod summary;

use kit::{
    arm_text, create_cq_and_srq, destroy_all, left, poll_eq, poll_receives, post, say_other, Wire,
};
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

/// Bytes per receive buffer.
const BUF: usize = 256;
/// Receive buffers (and the largest wr_id + 1).
const NBUF: usize = 64;
/// The QP number the model's messages report.
const QPN: u32 = 0x99;

const NO_TRAFFIC: &str = "a real ConnectX receives into an SRQ only through a QP attached to it and a peer sending on the link; this driver does not create QPs yet, so the traffic steps run on the model only (--device sim)";

/// Objects a scenario owns; whatever is left after a failure is destroyed
/// before teardown.
struct Objects<H: Hal> {
    cq: Option<Cq<H>>,
    srq: Option<Srq<H>>,
    bufs: Option<DmaRegion<H>>,
}

impl<H: Hal> Objects<H> {
    fn new() -> Self {
        Objects {
            cq: None,
            srq: None,
            bufs: None,
        }
    }
}

/// Destroy what a failed scenario left; returns what was destroyed (or
/// could not be) for the narration.
fn cleanup<H: Hal>(hca: &TracedHca<'_, H>, objs: &mut Objects<H>) -> Vec<String> {
    let mut done = Vec::new();
    if let Some(srq) = objs.srq.take() {
        let n = srq.srqn();
        done.push(match hca.destroy_srq(srq, objs.cq.as_mut()) {
            Ok(()) => format!("destroyed SRQ {n:#x}"),
            Err(e) => format!("could not destroy SRQ {n:#x} ({})", e.error()),
        });
    }
    if let Some(cq) = objs.cq.take() {
        let n = cq.cqn();
        done.push(match hca.destroy_cq(cq) {
            Ok(()) => format!("destroyed CQ {n:#x}"),
            Err(e) => format!("could not destroy CQ {n:#x} ({})", e.error()),
        });
    }
    objs.bufs = None;
    done
}

/// Run a scenario end to end. The summary comes back also when the run
/// fails, with the page and object accounting known at that point.
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
    let mut objs = Objects::new();
    let body = match which {
        Scenario::Demo => demo::demo(&hca, &mut objs, env.model, r, &mut sum),
        Scenario::Limit => limit(&hca, &mut objs, env.model, r, &mut sum),
        Scenario::Resize => resize(&hca, &mut objs, env.model, r, &mut sum),
    };
    if let Err(e) = &body {
        r.say(format!("stopped: {}", e.message()));
        let undone = cleanup(&hca, &mut objs);
        if !undone.is_empty() {
            r.say(format!("after the failure: {}", undone.join(", ")));
        }
    }
    r.step("teardown", "Tear down");
    let (td, td_res) = teardown(hca, env, r);
    sum.teardown = td;
    (sum, body.and(td_res))
}

// ------------------------------------------------------------ limit

fn limit<H: Hal>(
    hca: &TracedHca<'_, H>,
    objs: &mut Objects<H>,
    model: Option<&Device>,
    r: &mut Report,
    sum: &mut Summary,
) -> Result<(), CliError> {
    r.step("create", "Create a CQ and an SRQ");
    create_cq_and_srq(hca, objs, 63, 15, r)?;
    let (Some(cq), Some(srq), Some(bufs)) = (&mut objs.cq, &mut objs.srq, &objs.bufs) else {
        unreachable!("created above")
    };
    let mut next_wr = VecDeque::new();
    r.step("arm", "Post 10 receives, arm the limit at 7");
    post(hca, srq, bufs, 0..10, &mut next_wr)?;
    let arm = hca
        .arm_srq_limit(srq, 7)
        .map_err(|e| CliError::driver("arming the SRQ limit", e))?;
    r.say(format!("10 posted; limit 7: {}", arm_text(arm)));
    let Some(dev) = model else {
        r.step("traffic", "Traffic");
        r.say(format!("skipped: {NO_TRAFFIC}"));
        r.step("destroy", "Destroy everything");
        return destroy_all(hca, objs, model, r);
    };
    sum.traffic = true;
    let mut wire = Wire::new(dev);
    r.step("limit", "Receive until the limit event");
    for i in 1..=4u64 {
        wire.deliver(srq, cq, 1, sum)?;
        let (limit, _, other) = poll_eq(hca, Some(srq.srqn()), None)?;
        say_other(r, &other);
        sum.limit_events += limit;
        r.say(format!(
            "message {i}: {} receives posted, {limit} limit event(s)",
            left(srq, cq)
        ));
    }
    let seqs = poll_receives(cq, srq, bufs, &mut wire, &mut next_wr, sum)?;
    r.say(format!("polled {} completions", seqs.len()));
    post(hca, srq, bufs, 10..14, &mut next_wr)?;
    let arm = hca
        .arm_srq_limit(srq, 7)
        .map_err(|e| CliError::driver("re-arming the SRQ limit", e))?;
    let lwm = hca
        .query_srq(srq)
        .map_err(|e| CliError::driver("querying the SRQ", e))?
        .lwm;
    sum.limit_rearmed = arm == LimitArm::Armed && lwm == 7;
    r.say(format!(
        "re-posted 4, re-armed at 7: {} (lwm = {lwm})",
        arm_text(arm)
    ));
    r.set("limit_events", sum.limit_events);
    r.step("destroy", "Destroy everything");
    destroy_all(hca, objs, model, r)
}

// ------------------------------------------------------------ resize

fn resize<H: Hal>(
    hca: &TracedHca<'_, H>,
    objs: &mut Objects<H>,
    model: Option<&Device>,
    r: &mut Report,
    sum: &mut Summary,
) -> Result<(), CliError> {
    r.step("create", "Create a CQ");
    let cq = hca
        .create_cq(63, CqOptions::default())
        .map_err(|e| CliError::driver("creating the CQ", e))?;
    r.say(format!("CQ {:#x}: {} entries", cq.cqn(), cq.capacity()));
    let cq = objs.cq.insert(cq);
    let mut seq = 0u32;
    if let Some(dev) = model {
        sum.traffic = true;
        for _ in 0..40 {
            dev.traffic()
                .complete_send(cq.cqn(), QPN, seq as u16, seq)
                .map_err(|e| {
                    CliError::failed(format!("the model refused a completion: {e}"), "")
                })?;
            seq += 1;
            sum.delivered += 1;
        }
        r.say(format!(
            "the model wrote 40 send completions; {} waiting",
            cq.pending()
        ));
    } else {
        r.say(format!("no completions: {NO_TRAFFIC}"));
    }
    r.step("resize", "Resize with completions waiting");
    let (from, waiting) = (cq.capacity(), cq.pending());
    hca.resize_cq(cq, 255)
        .map_err(|e| CliError::driver("resizing the CQ", e))?;
    r.say(format!(
        "resized {from} -> {} with {waiting} waiting",
        cq.capacity()
    ));
    sum.resize = Some((from, cq.capacity(), waiting));
    if let Some(dev) = model {
        for _ in 0..5 {
            dev.traffic()
                .complete_send(cq.cqn(), QPN, seq as u16, seq)
                .map_err(|e| {
                    CliError::failed(format!("the model refused a completion: {e}"), "")
                })?;
            seq += 1;
            sum.delivered += 1;
        }
        let mut out = [Cqe::EMPTY; 16];
        let mut expect = 0u32;
        loop {
            let n = cq.poll(&mut out);
            if n == 0 {
                break;
            }
            for c in &out[..n] {
                if c.byte_len == expect && c.opcode == CqeOpcode::REQ {
                    sum.polled += 1;
                } else {
                    sum.bad += 1;
                }
                expect += 1;
            }
        }
        r.say(format!(
            "5 more after the resize; polled {} in order, {} lost",
            sum.polled,
            sum.lost()
        ));
    }
    r.step("destroy", "Destroy everything");
    destroy_all(hca, objs, model, r)
}
