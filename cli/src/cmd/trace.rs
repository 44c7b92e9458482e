//! `mlx5 trace`: a scenario with every firmware command printed as it
//! completes (the tracer's live output), its commands in `--json`, and
//! `--save FILE` for `replay` and `diff`.

use mlx5_hal::Hal;
use serde_json::Value;

use crate::common::error::CliError;
use crate::common::report::Report;
use crate::common::session::Env;
use crate::common::trace::Tracer;
use crate::common::{record, trace};
use crate::scenario::{self, Scenario};

/// The options of one run.
pub struct Opts<'a> {
    /// `--json`.
    pub json: bool,
    /// Progress on stderr.
    pub progress: bool,
    /// `--scenario`.
    pub scenario: Scenario,
    /// `--hexdump`.
    pub hexdump: bool,
    /// `--save FILE`.
    pub save: Option<&'a str>,
}

/// Run `mlx5 trace` on an opened device.
pub fn run<H: Hal>(
    hal: H,
    env: &Env<'_>,
    t: &Tracer,
    o: &Opts<'_>,
) -> (Value, Result<(), CliError>) {
    let mut r = Report::new(o.json, true, o.progress);
    if !o.json {
        outln!(
            "mlx5 trace of the {} scenario on {} ({}); latencies are {}",
            o.scenario.name(),
            env.target.describe(),
            env.target.label(),
            scenario::latency_kind(env)
        );
    }
    let mut res = scenario::run(o.scenario, hal, env, t, &mut r);
    if let Some(path) = o.save {
        let recs = record::from_records(&t.records());
        let head = record::header(
            &env.target.label(),
            &env.target.describe(),
            o.scenario.name(),
            recs.len(),
        );
        let saved = record::save(path, &head, &recs);
        res.1 = res.1.and(saved);
    }
    let commands: Vec<Value> = t
        .records()
        .iter()
        .map(|c| trace::to_json(c, o.hexdump))
        .collect();
    scenario::finish(
        res,
        env,
        t,
        &mut r,
        Some(("commands", Value::from(commands))),
    )
}
