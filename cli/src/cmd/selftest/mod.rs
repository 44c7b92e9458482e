//! `mlx5 selftest`: what a first user with a ConnectX runs. It runs the
//! demo's scenario (the same mission steps on the same runner) inside ten
//! numbered stages, from bring-up to teardown, adding stages of its own
//! (the capability checks, a memory key) and the checks that make each
//! stage pass or fail ([`stages`]); it stops at the first failure (then
//! still destroys what it made and tears down), prints a pass/fail table,
//! and writes a report bundle ([`bundle`]) to attach to a bug report.
//! Stage N failing exits 10 + N.

mod bundle;
mod setup;
mod stages;
mod traffic;

#[cfg(test)]
mod tests;

use std::path::PathBuf;

use mlx5_hal::Hal;
use serde_json::{json, Value};

use crate::common::error::CliError;
use crate::common::report::Report;
use crate::common::session::{after_failed_bring_up, bring_up, narrate_bring_up, teardown, Env};
use crate::common::target::{Faults, Target};
use crate::common::trace::{fmt_ns, Tracer};
use crate::scenario::{run_steps, Scenario, State, Summary};
use stages::{Clock, Outcome, StageResult, Stages};

/// The stages: (id, title).
pub const STAGES: [(&str, &str); 10] = [
    ("bring-up", "Bring-up"),
    ("capabilities", "Capability checks"),
    ("cq", "Completion queues"),
    ("srq", "Shared receive queue"),
    ("memory-key", "Memory key"),
    ("qp-pair", "Loopback queue pair"),
    ("traffic", "Traffic"),
    ("srq-limit", "SRQ limit event by consumption"),
    ("cq-resize", "CQ resize under traffic"),
    ("teardown", "Teardown"),
];

/// Options of one run.
pub struct Opts<'a> {
    /// `--json`.
    pub json: bool,
    /// Progress on stderr.
    pub progress: bool,
    /// `--report FILE`.
    pub report: Option<PathBuf>,
    /// The model's fault options (checked for having fired before the
    /// bundle is written).
    pub faults: &'a Faults,
}

/// Run the self-test on an opened device.
pub fn run<H: Hal>(
    hal: H,
    env: &Env<'_>,
    t: &Tracer,
    opts: &Opts<'_>,
) -> (Value, Result<(), CliError>) {
    let clock_hal = hal.clone();
    let mut r = Report::new(opts.json, true, opts.progress);
    r.keep_lines();
    if !opts.json {
        outln!(
            "mlx5 selftest on {} ({})",
            env.target.describe(),
            env.target.label()
        );
    }
    let mut results = vec![StageResult::NOT_RUN; STAGES.len()];
    let mut failure: Option<CliError> = None;
    let mut caps = Value::Null;
    let health_before;
    let mut after_failure = Value::Null;

    r.step(STAGES[0].0, STAGES[0].1);
    let c = Clock::start(&clock_hal, t);
    let up = bring_up(hal, env, t, &mut r);
    results[0] = c.stop(t, up.as_ref().map(|_| ()), 0);
    match up {
        Err(e) => {
            health_before = bundle::health(&clock_hal);
            let td = after_failed_bring_up(&e, env, t, &mut r);
            after_failure =
                json!({"pages_given": td.pages_given, "pages_returned": td.pages_returned});
            failure = Some(stage(0, e));
        }
        Ok((hca, waited)) => {
            narrate_bring_up(&hca, waited, t, &mut r);
            caps = bundle::capabilities(&hca);
            // The demo's scenario, every step, inside the stages.
            let mut st = State::new(env.model);
            let mut stages = Stages::new(&clock_hal, t, results[0].clone());
            let mut sum = Summary::default();
            let steps = Scenario::Demo.steps();
            let mut res = run_steps(&steps, &hca, &mut st, &mut r, &mut sum, &mut stages);
            if res.is_ok() {
                res = stages.finish(&hca, &mut st, &mut r);
            }
            health_before = bundle::health(&clock_hal);
            match res {
                Ok(()) => {
                    // Stage 10 goes on: the destroy step ran, teardown now.
                    let (td, td_res) = teardown(hca, env, &mut r);
                    let res = td_res.and_then(|()| {
                        if td.clean() {
                            Ok(())
                        } else {
                            Err(CliError::check(format!(
                                "teardown left {} of {} pages with firmware, {} model objects, {} violations",
                                td.pages_left,
                                td.pages_given,
                                td.model_objects.unwrap_or(0),
                                td.violations.len()
                            )))
                        }
                    });
                    stages.close(res.as_ref().copied());
                    if let Err(e) = res {
                        failure = Some(stage(stages.cur, e));
                    }
                }
                Err(e) => {
                    r.say(format!("FAILED: {}", e.message()));
                    stages.close(Err(&e));
                    failure = Some(stage(stages.cur, e));
                    r.heading("After the failure: destroy what was made, tear down");
                    let (lines, _) = st.objs.destroy(&hca);
                    for l in &lines {
                        r.say(l);
                    }
                    let (td, td_res) = teardown(hca, env, &mut r);
                    after_failure = json!({
                        "destroyed": lines,
                        "teardown_error": td_res.err().map(|e| e.message()),
                        "pages_given": td.pages_given,
                        "pages_returned": td.pages_returned,
                        "pages_left": td.pages_left,
                        "model_objects_left": td.model_objects,
                        "violations": td.violations,
                    });
                }
            }
            results = stages.results;
        }
    }
    let steps = r.take_steps();
    let health_after = bundle::health(&clock_hal);
    let unfired = env
        .model
        .map(|d| opts.faults.unfired(d, t.fatal_fired(), t.count()))
        .unwrap_or_default();
    let mut res = match failure {
        Some(e) => Err(e),
        None if !unfired.is_empty() => Err(CliError::FaultNotFired {
            what: unfired.join("; "),
        }),
        None => Ok(()),
    };
    if res.is_err() {
        for u in unfired
            .iter()
            .filter(|_| !matches!(res, Err(CliError::FaultNotFired { .. })))
        {
            eprintln!("mlx5: note: {u}");
        }
    }
    let table = table_json(&results, &steps);
    if !opts.json {
        print_table(&results, &res);
    }
    let path = opts
        .report
        .clone()
        .unwrap_or_else(|| bundle::default_path(&env.target.label(), unix_now()));
    let code = res.as_ref().err().map_or(0, |e| e.exit_code());
    let doc = json!({
        "format": bundle::FORMAT,
        "version": bundle::version(),
        "created_unix": unix_now(),
        "command_line": std::env::args().collect::<Vec<_>>(),
        "host": bundle::host(),
        "device": env.target.label(),
        "device_description": env.target.describe(),
        "result": if res.is_ok() { "pass" } else { "fail" },
        "exit_code": code,
        "error": res.as_ref().err().map(|e| e.to_json()),
        "unfired_faults": unfired,
        "stages": table,
        "after_failure": after_failure,
        "capabilities": caps,
        "health": {"before_teardown": health_before, "after_teardown": health_after},
        "model": env.model.map(model_json),
        "commands_sent": t.count(),
        "commands": bundle::commands(t),
    });
    let written = bundle::write(&path, &doc);
    match &written {
        Ok(()) if !opts.json => outln!("report: {} (attach it to a bug report)", path.display()),
        // When the run passed, the report's error is the run's error and
        // is printed once, at the end; after a failure it is said here.
        Err(w) if res.is_err() => eprintln!("mlx5: error: cannot write the report: {w}"),
        _ => {}
    }
    if let (Ok(()), Err(w)) = (&res, written.clone()) {
        res = Err(CliError::Report { what: w });
    }
    let out = json!({
        "stages": table_json(&results, &[]),
        "result": if res.is_ok() { "pass" } else { "fail" },
        "report": written.is_ok().then(|| path.display().to_string()),
        "commands_sent": t.count(),
    });
    (out, res)
}

/// A stage's failure with the stage attached, for the exit.
fn stage(n: usize, e: CliError) -> CliError {
    CliError::stage(n as u8 + 1, STAGES[n].0, e)
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn outcome_name(o: Outcome) -> &'static str {
    match o {
        Outcome::Pass => "pass",
        Outcome::Fail => "FAIL",
        Outcome::NotRun => "not run",
    }
}

/// The table as JSON rows; with `steps`, each row gets its stage's details
/// and narration.
fn table_json(results: &[StageResult], steps: &[Value]) -> Value {
    let rows: Vec<Value> = results
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut v = json!({
                "stage": i + 1,
                "name": STAGES[i].0,
                "title": STAGES[i].1,
                "result": outcome_name(s.outcome).to_ascii_lowercase(),
                "device_clock_ns": s.device_ns,
                "wall_clock_ns": s.wall_ns,
                "commands": s.commands,
                "error": s.error,
            });
            if let Some(d) = steps.iter().find(|d| d["step"] == STAGES[i].0) {
                v["details"] = d.clone();
            }
            v
        })
        .collect();
    Value::from(rows)
}

fn print_table(results: &[StageResult], res: &Result<(), CliError>) {
    outln!("\nSelf-test");
    outln!(
        "  {:<2}  {:<32} {:<8} {:>10} {:>9}",
        "#",
        "stage",
        "result",
        "time",
        "commands"
    );
    for (i, s) in results.iter().enumerate() {
        let ran = s.outcome != Outcome::NotRun;
        let row = format!(
            "  {:>2}  {:<32} {:<8} {:>10} {:>9}",
            i + 1,
            STAGES[i].1,
            outcome_name(s.outcome),
            if ran {
                fmt_ns(s.device_ns)
            } else {
                String::new()
            },
            if ran {
                s.commands.to_string()
            } else {
                String::new()
            }
        );
        outln!("{}", row.trim_end());
    }
    let passed = results
        .iter()
        .filter(|s| s.outcome == Outcome::Pass)
        .count();
    match res {
        Ok(()) => outln!(
            "  result: PASS, {passed} of {} stages (times: the device's clock)",
            STAGES.len()
        ),
        Err(e) => outln!(
            "  result: FAIL ({passed} of {} stages passed): {}",
            STAGES.len(),
            e.message()
        ),
    }
}

fn model_json(dev: &mlx5_sim::Device) -> Value {
    let st = dev.traffic().stats();
    json!({
        "objects_left": dev.objects().total(),
        "pages_held": dev.pages_held(),
        "violations": dev.violations().iter().map(crate::common::error::violation_text).collect::<Vec<_>>(),
        "traffic": {
            "doorbells": st.doorbells, "messages": st.messages, "rnr_naks": st.rnr_naks,
            "ack_timeouts": st.ack_timeouts, "flushed": st.flushed,
            "side_door_uses": st.side_door_uses,
        },
    })
}

/// `--device vfio:` could not be opened: the bundle says so (no stage ran).
pub fn unopened(target: &Target, err: &CliError, opts: &Opts<'_>) -> Value {
    let results = vec![StageResult::NOT_RUN; STAGES.len()];
    let path = opts
        .report
        .clone()
        .unwrap_or_else(|| bundle::default_path(&target.label(), unix_now()));
    let doc = json!({
        "format": bundle::FORMAT,
        "version": bundle::version(),
        "created_unix": unix_now(),
        "command_line": std::env::args().collect::<Vec<_>>(),
        "host": bundle::host(),
        "device": target.label(),
        "result": "fail",
        "exit_code": err.exit_code(),
        "error": err.to_json(),
        "stages": table_json(&results, &[]),
        "commands": [],
    });
    let written = bundle::write(&path, &doc);
    match &written {
        Ok(()) if !opts.json => eprintln!("mlx5: report: {}", path.display()),
        Err(w) => eprintln!("mlx5: error: cannot write the report: {w}"),
        _ => {}
    }
    json!({
        "stages": table_json(&results, &[]),
        "result": "fail",
        "report": written.is_ok().then(|| path.display().to_string()),
    })
}
