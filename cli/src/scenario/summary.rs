//! What a scenario did, and the summary printed at its end (also after a
//! failure, with the accounting known then).

use serde_json::{json, Value};

use crate::error::CliError;
use crate::report::Report;
use crate::session::{Env, TeardownSummary};
use crate::trace::Tracer;

/// What a scenario did.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Scenario name.
    pub scenario: &'static str,
    /// Traffic was injected (model) — false on hardware.
    pub traffic: bool,
    /// Messages (or send completions) the model delivered.
    pub delivered: u64,
    /// Completions polled and checked.
    pub polled: u64,
    /// Completions with a wrong payload, wr_id, order or status.
    pub bad: u64,
    /// SRQ limit events seen through EQ polling.
    pub limit_events: u64,
    /// The limit was re-armed after its event.
    pub limit_rearmed: bool,
    /// Completion events seen through EQ polling.
    pub comp_events: u64,
    /// CQ resize: (capacity before, capacity after, completions waiting).
    pub resize: Option<(u32, u32, usize)>,
    /// Teardown result.
    pub teardown: TeardownSummary,
}

impl Summary {
    /// Completions that never came back.
    pub fn lost(&self) -> u64 {
        self.delivered.saturating_sub(self.polled)
    }

    /// JSON form.
    pub fn to_json(&self) -> Value {
        json!({
            "scenario": self.scenario,
            "traffic": self.traffic,
            "delivered": self.delivered,
            "polled": self.polled,
            "lost": self.lost(),
            "bad": self.bad,
            "limit_events": self.limit_events,
            "limit_rearmed": self.limit_rearmed,
            "completion_events": self.comp_events,
            "resize": self.resize.map(|(a, b, w)| json!({"from": a, "to": b, "waiting": w})),
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
    if sum.traffic {
        r.say(format!(
            "completions      {} delivered, {} polled and checked, {} lost, {} wrong",
            sum.delivered,
            sum.polled,
            sum.lost(),
            sum.bad
        ));
    } else if env.model.is_some() {
        r.say("completions      none: the run stopped before the traffic steps");
    } else {
        r.say("completions      traffic skipped (no QP on hardware: see above)");
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
    let mut problems = Vec::new();
    // A run that stopped early has not lost what it never received.
    if failure.is_none() {
        if sum.lost() > 0 {
            problems.push(format!("{} completions lost", sum.lost()));
        }
        if sum.traffic && sum.scenario != "resize" && sum.limit_events == 0 {
            problems.push("the SRQ limit event never arrived".into());
        }
    }
    if sum.bad > 0 {
        problems.push(format!("{} completions wrong", sum.bad));
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
