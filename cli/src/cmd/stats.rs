//! `mlx5 stats`: a scenario run quietly, then per opcode what Linux keeps
//! in debugfs
//! (`mlx5/<dev>/commands/<opcode>/`: `n`, `failed`, `failed_mbox_status`,
//! `average`, `last_failed_errno`, `last_failed_mbox_status`,
//! `last_failed_syndrome`; drivers/net/ethernet/mellanox/mlx5/core/cmd.c
//! `cmd_status_log`, debugfs.c), from the command trace, plus the
//! maximum latency and the last outcome.
//!
//! As Linux: `n` and `average` count the commands that completed (with or
//! without a bad status: a timeout or a dead device never completed);
//! `failed` every command that did not end OK; `failed_mbox_status` those
//! firmware failed with a status; the last failure's errno, status and
//! syndrome stay after later successes. The errno is the one the driver
//! reports (Linux `cmd_status_to_err` for a status, `deliv_status_to_err`
//! for a delivery error, ETIMEDOUT, ENOLINK for a dead device).

use mlx5_driver::stats::CmdOutcome;
use mlx5_hal::Hal;
use mlx5_regs::consts::errno;
use mlx5_regs::Opcode;
use serde_json::{json, Value};

use crate::common::error::CliError;
use crate::common::report::Report;
use crate::common::session::Env;
use crate::common::trace::{fmt_ns, outcome_json, outcome_text, Tracer};
use crate::scenario::{self, Scenario};

/// Run `mlx5 stats` on an opened device: the scenario without its
/// narration, then the table and the scenario's result.
pub fn run<H: Hal>(
    hal: H,
    env: &Env<'_>,
    t: &Tracer,
    json: bool,
    progress: bool,
    which: Scenario,
) -> (Value, Result<(), CliError>) {
    let mut r = Report::new(json, false, progress);
    let res = scenario::run(which, hal, env, t, &mut r);
    if !json {
        outln!(
            "mlx5 stats after the {} scenario on {} ({}); latencies are {}\n",
            which.name(),
            env.target.describe(),
            env.target.label(),
            scenario::latency_kind(env)
        );
    }
    let table = table(t, json);
    let mut out = scenario::finish(res, env, t, &mut r, Some(("opcodes", table)));
    if !json {
        match &out.1 {
            Ok(()) => outln!("\nscenario result: OK"),
            Err(e) => outln!("\nscenario result: FAILED ({})", e.message()),
        }
    }
    if let Value::Object(m) = &mut out.0 {
        m.remove("steps");
    }
    out
}

#[derive(Clone)]
struct Row {
    opcode: Opcode,
    count: u64,
    n: u64,
    sum_ns: u64,
    max_ns: u64,
    total_ns: u64,
    failed: u64,
    failed_mbox_status: u64,
    last: CmdOutcome,
    /// errno, status, syndrome of the last failure.
    last_failed: Option<(i32, u8, u32)>,
}

fn rows(t: &Tracer) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    for r in t.records() {
        let i = match rows.iter().position(|x| x.opcode == r.opcode) {
            Some(i) => i,
            None => {
                rows.push(Row {
                    opcode: r.opcode,
                    count: 0,
                    n: 0,
                    sum_ns: 0,
                    max_ns: 0,
                    total_ns: 0,
                    failed: 0,
                    failed_mbox_status: 0,
                    last: CmdOutcome::Ok,
                    last_failed: None,
                });
                rows.len() - 1
            }
        };
        let row = &mut rows[i];
        row.count += 1;
        row.total_ns += r.latency_ns;
        row.max_ns = row.max_ns.max(r.latency_ns);
        row.last = r.outcome;
        if matches!(r.outcome, CmdOutcome::Ok | CmdOutcome::Status { .. }) {
            row.n += 1;
            row.sum_ns += r.latency_ns;
        }
        let failure = match r.outcome {
            CmdOutcome::Ok => None,
            CmdOutcome::Status { status, syndrome } => {
                row.failed_mbox_status += 1;
                Some((status.errno(), status.0, syndrome))
            }
            CmdOutcome::Delivery(d) => Some((d.errno(), 0, 0)),
            CmdOutcome::Timeout => Some((errno::ETIMEDOUT, 0, 0)),
            CmdOutcome::Fatal => Some((errno::ENOLINK, 0, 0)),
        };
        if let Some(f) = failure {
            row.failed += 1;
            // Linux keeps the previous status and syndrome when the new
            // failure has none (it only sets them for a bad status).
            let (_, s, y) = row.last_failed.unwrap_or((0, 0, 0));
            row.last_failed = Some(match r.outcome {
                CmdOutcome::Status { .. } => f,
                _ => (f.0, s, y),
            });
        }
    }
    rows.sort_by_key(|r| r.opcode.0);
    rows
}

/// Print the table (unless `json_mode`) and return its JSON rows.
pub fn table(t: &Tracer, json_mode: bool) -> Value {
    let rows = rows(t);
    if !json_mode {
        outln!(
            "{:<30} {:>6} {:>6} {:>6} {:>10} {:>10}  last failure (errno, status, syndrome)",
            "opcode",
            "count",
            "failed",
            "mbox",
            "average",
            "max"
        );
    }
    let mut out = Vec::new();
    for r in &rows {
        let avg = r.sum_ns.checked_div(r.n).unwrap_or(0);
        let lf = r.last_failed.map(|(e, s, y)| {
            let st = mlx5_regs::CmdStatus(s).name().unwrap_or("UNKNOWN");
            (e, st, y)
        });
        if !json_mode {
            outln!(
                "{:<30} {:>6} {:>6} {:>6} {:>10} {:>10}  {}",
                format!("{:?}", r.opcode),
                r.count,
                r.failed,
                r.failed_mbox_status,
                fmt_ns(avg),
                fmt_ns(r.max_ns),
                match lf {
                    None => "-".to_string(),
                    Some((e, _, _)) if r.failed_mbox_status == 0 => format!("errno {e}"),
                    Some((e, s, y)) => format!("errno {e}, {s}, {y:#x}"),
                }
            );
        }
        out.push(json!({
            "opcode": r.opcode.to_string(),
            "opcode_value": r.opcode.0,
            "count": r.count,
            "failures": r.failed,
            "last": outcome_json(&r.last),
            "last_text": outcome_text(&r.last),
            "mean_ns": r.total_ns.checked_div(r.count).unwrap_or(0),
            "max_ns": r.max_ns,
            "total_ns": r.total_ns,
            "n": r.n,
            "failed": r.failed,
            "failed_mbox_status": r.failed_mbox_status,
            "average_ns": avg,
            "last_failed_errno": lf.map(|x| x.0),
            "last_failed_mbox_status": r.last_failed.map(|x| x.1),
            "last_failed_status": lf.map(|x| x.1),
            "last_failed_syndrome": lf.map(|x| format!("{:#x}", x.2)),
        }));
    }
    if !json_mode {
        let failed: u64 = rows.iter().map(|r| r.failed).sum();
        let total: u64 = rows.iter().map(|r| r.count).sum();
        outln!("{:<30} {:>6} {:>6}", "total", total, failed);
    }
    Value::from(out)
}
