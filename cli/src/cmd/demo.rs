//! `mlx5 demo`: the scenario, every step, narrated, then its summary.

use mlx5_hal::Hal;
use serde_json::Value;

use crate::common::error::CliError;
use crate::common::report::Report;
use crate::common::session::Env;
use crate::common::trace::Tracer;
use crate::scenario::{self, Scenario};

/// Run the demo on an opened device.
pub fn run<H: Hal>(
    hal: H,
    env: &Env<'_>,
    t: &Tracer,
    json: bool,
    progress: bool,
) -> (Value, Result<(), CliError>) {
    let mut r = Report::new(json, true, progress);
    if !json {
        outln!(
            "mlx5 demo on {} ({})",
            env.target.describe(),
            env.target.label()
        );
    }
    let res = scenario::run(Scenario::Demo, hal, env, t, &mut r);
    scenario::finish(res, env, t, &mut r, None)
}
