//! What a scenario did, and the summary printed at its end (also after a
//! failure, with the accounting known then).

use serde_json::{json, Value};

use super::flow::Flow;
use crate::common::error::CliError;
use crate::common::report::Report;
use crate::common::session::{Env, TeardownSummary};
use crate::common::trace::Tracer;

/// What a scenario did.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Scenario name.
    pub scenario: &'static str,
    /// The traffic steps ran.
    pub traffic: bool,
    /// The loopback mode bring-up chose (`force_loopback`, `roce`, `ib`,
    /// `none`).
    pub loopback: &'static str,
    /// (sender QPN, receiver QPN).
    pub qps: Option<(u32, u32)>,
    /// Messages posted on the sender QP.
    pub sent: u64,
    /// Receive completions polled and checked good.
    pub received: u64,
    /// Send completions polled and checked good.
    pub send_completions: u64,
    /// Completions with a wrong payload, wr_id, order, opcode or status.
    pub bad: u64,
    /// What was wrong (the first few).
    pub problems: Vec<String>,
    /// SRQ limit events seen through EQ polling.
    pub limit_events: u64,
    /// The limit was re-armed after its event.
    pub limit_rearmed: bool,
    /// Completion events seen through EQ polling.
    pub comp_events: u64,
    /// CQ resize: (capacity before, capacity after, completions waiting).
    pub resize: Option<(u32, u32, usize)>,
    /// On the model: the traffic engine's counters after the run.
    pub engine: Option<mlx5_sim::TrafficStats>,
    /// Teardown result.
    pub teardown: TeardownSummary,
}

impl Summary {
    /// Messages whose receive completion never came back (good).
    pub fn lost(&self) -> u64 {
        self.sent.saturating_sub(self.received)
    }

    /// Sends whose completion never came back (good).
    pub fn lost_sends(&self) -> u64 {
        self.sent.saturating_sub(self.send_completions)
    }

    /// Take the counts of a run's traffic, and the model's engine counters.
    pub fn absorb(&mut self, flow: &Flow, model: Option<&mlx5_sim::Device>) {
        self.sent = flow.sent;
        self.received = flow.received;
        self.send_completions = flow.send_completions;
        self.bad = flow.bad;
        self.problems = flow.problems.clone();
        self.engine = model.map(|d| d.traffic().stats());
    }

    /// JSON form.
    pub fn to_json(&self) -> Value {
        json!({
            "scenario": self.scenario,
            "traffic": self.traffic,
            "loopback_mode": self.loopback,
            "sender_qpn": self.qps.map(|q| q.0),
            "receiver_qpn": self.qps.map(|q| q.1),
            "sent": self.sent,
            "received": self.received,
            "send_completions": self.send_completions,
            "lost": self.lost(),
            "lost_sends": self.lost_sends(),
            "bad": self.bad,
            "problems": self.problems,
            "limit_events": self.limit_events,
            "limit_rearmed": self.limit_rearmed,
            "completion_events": self.comp_events,
            "resize": self.resize.map(|(a, b, w)| json!({"from": a, "to": b, "waiting": w})),
            "model_traffic": self.engine.map(|e| json!({
                "doorbells": e.doorbells,
                "dropped_doorbells": e.dropped_doorbells,
                "messages": e.messages,
                "rnr_naks": e.rnr_naks,
                "ack_timeouts": e.ack_timeouts,
                "flushed": e.flushed,
                "side_door_uses": e.side_door_uses,
            })),
            "pages_given": self.teardown.pages_given,
            "pages_returned": self.teardown.pages_returned,
            "pages_left": self.teardown.pages_left,
            "all_pages_returned": self.teardown.pages_ok(),
            "model_objects_left": self.teardown.model_objects,
            "model_pages_held": self.teardown.model_pages_held,
            "violations": self.teardown.violations,
            "teardown_error": self.teardown.failed,
        })
    }
}

/// Print the summary, also after a failure (`failure`: the error that ended
/// the run), and turn failed checks into an error.
pub fn conclude(
    sum: &Summary,
    env: &Env<'_>,
    t: &Tracer,
    r: &mut Report,
    failure: Option<&CliError>,
) -> Result<(), CliError> {
    let stats = t.stats();
    let failed: u64 = stats.iter().map(|s| s.failures).sum();
    let td = &sum.teardown;
    let pages_ok = td.pages_ok();
    r.heading("Summary");
    r.say(format!("device           {}", env.target.describe()));
    r.say(format!(
        "commands         {} sent, {} failed",
        stats.total(),
        failed
    ));
    r.say(format!(
        "loopback         {}",
        sum.loopback.replace('_', " ")
    ));
    if sum.traffic {
        let qps = sum.qps.map_or(String::new(), |(a, b)| {
            format!(" from QP {a:#x} to QP {b:#x}")
        });
        r.say(format!(
            "messages         {} sent{qps}, {} received and checked, {} lost, {} wrong",
            sum.sent,
            sum.received,
            sum.lost(),
            sum.bad
        ));
        r.say(format!(
            "send completions {} of {}, wr_ids in posting order",
            sum.send_completions, sum.sent
        ));
    } else {
        r.say("messages         none: the run stopped before the traffic steps");
    }
    if sum.scenario != "resize" && (sum.traffic || failure.is_none()) {
        r.say(format!(
            "SRQ limit        {} event(s) through EQ polling{}",
            sum.limit_events,
            if sum.limit_rearmed { ", re-armed" } else { "" }
        ));
    }
    if let Some((a, b, w)) = sum.resize {
        r.say(format!(
            "CQ resize        {a} -> {b} entries with {w} completions waiting, {} lost",
            if sum.traffic { sum.lost() } else { 0 }
        ));
    }
    r.say(format!(
        "firmware pages   {} given, {} returned, {} still held{}",
        td.pages_given,
        td.pages_returned,
        td.pages_left,
        if pages_ok {
            ": all returned"
        } else if td.failed.is_some() {
            " (teardown did not finish: a dead device keeps them until it is reset)"
        } else {
            ""
        }
    ));
    if let Some(o) = td.model_objects {
        let held = match td.model_pages_held {
            Some(n) if n > 0 => format!(", {n} pages held"),
            _ => String::new(),
        };
        r.say(format!(
            "model            {o} objects left{held}, {} violations",
            td.violations.len()
        ));
    }
    if let Some(e) = sum.engine {
        r.say(format!(
            "model traffic    {} messages carried by the traffic engine from {} doorbells, side door used {} times",
            e.messages, e.doorbells, e.side_door_uses
        ));
    }
    let mut problems = Vec::new();
    // A run that stopped early has not lost what it never received.
    if failure.is_none() {
        if sum.lost() > 0 {
            problems.push(format!("{} receive completions lost", sum.lost()));
        }
        if sum.lost_sends() > 0 {
            problems.push(format!("{} send completions lost", sum.lost_sends()));
        }
        if let Some(e) = sum.engine {
            if e.side_door_uses > 0 {
                problems.push(format!(
                    "the model's side door was used {} times (every message must go through a QP)",
                    e.side_door_uses
                ));
            }
        }
        if sum.traffic && sum.scenario != "resize" && sum.limit_events == 0 {
            problems.push("the SRQ limit event never arrived".into());
        }
    }
    if sum.bad > 0 {
        problems.push(format!(
            "{} completions wrong ({})",
            sum.bad,
            sum.problems.join("; ")
        ));
    }
    if td.failed.is_none() {
        if !pages_ok {
            problems.push(format!(
                "firmware pages not all returned ({} given, {} returned)",
                td.pages_given, td.pages_returned
            ));
        }
        if !td.clean() && pages_ok {
            problems.push(format!(
                "the model reports {} objects, {} pages left and {} violations",
                td.model_objects.unwrap_or(0),
                td.model_pages_held.unwrap_or(0),
                td.violations.len()
            ));
        }
    }
    let verdict = match (failure, problems.is_empty()) {
        (None, true) => "OK".to_string(),
        (None, false) => format!("FAILED: {}", problems.join("; ")),
        (Some(e), true) => format!("FAILED: {}", e.message()),
        (Some(e), false) => format!("FAILED: {}; {}", e.message(), problems.join("; ")),
    };
    r.say(format!("result           {verdict}"));
    if problems.is_empty() {
        Ok(())
    } else {
        Err(CliError::check(problems.join("; ")))
    }
}
