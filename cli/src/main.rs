//! `mlx5`: the command-line tool of the mlx5 driver.
//!
//! Runs on the built-in device model (`--device sim[:PROFILE]`, the
//! default) or on a ConnectX bound to vfio-pci (`--device
//! vfio:0000:03:00.0`). Subcommands: `demo`, `caps`, `cmd`, `trace`,
//! `stats`; `--json` on each. See `docs/cli.md`.

/// `println!` to stdout that ends the process quietly when stdout is
/// closed (`mlx5 trace | head`).
macro_rules! outln {
    () => { $crate::report::emit("\n") };
    ($($t:tt)*) => { $crate::report::emit(&format!("{}\n", format_args!($($t)*))) };
}

/// `print!` counterpart of [`outln!`].
macro_rules! outp {
    ($($t:tt)*) => { $crate::report::emit(&format!($($t)*)) };
}

mod caps;
mod error;
mod rawcmd;
mod report;
mod scenario;
mod session;
mod target;
mod trace;

use clap::{Args, Parser, Subcommand};
use mlx5_driver::HcaConfig;
use mlx5_hal::Hal;
use mlx5_sim::Device;
use serde_json::{json, Value};

use crate::error::{CliError, EXIT_CODES, EXIT_OK};
use crate::report::Report;
use crate::scenario::Scenario;
use crate::session::{bring_up, teardown, Env};
use crate::target::{parse_faults, Target};
use crate::trace::{Live, Tracer};

const ABOUT: &str = "Drive an NVIDIA/Mellanox ConnectX (mlx5) NIC at register level: \
on the built-in device model (default) or on real hardware through VFIO";

const LONG_ABOUT: &str = "Drive an NVIDIA/Mellanox ConnectX (mlx5) NIC at register level, \
with the mlx5-driver crate: bring the HCA up through the firmware command interface, create \
completion and shared receive queues, poll event queues, tear down.

Every subcommand runs on --device sim[:PROFILE] (the built-in device model; profiles cx4lx, \
cx5, cx6dx, cx7; the default, runs on any machine) or --device vfio:DDDD:BB:DD.F (a ConnectX \
bound to vfio-pci, see docs/hardware.md).

Start with: mlx5 demo";

#[derive(Parser)]
#[command(name = "mlx5", version, about = ABOUT, long_about = LONG_ABOUT, after_help = EXIT_CODES)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args)]
struct Global {
    /// The device: sim, sim:PROFILE (cx4lx, cx5, cx6dx, cx7) or vfio:DDDD:BB:DD.F
    #[arg(long, global = true, default_value = "sim", value_name = "DEVICE")]
    device: String,

    /// JSON on stdout, for scripts (progress and errors still go to stderr)
    #[arg(long, global = true)]
    json: bool,

    /// No progress lines on stderr
    #[arg(long, short, global = true)]
    quiet: bool,

    /// Model only: the next command NAME fails with STATUS and SYNDROME
    /// (e.g. create-cq:bad_param_err:0x1234); repeatable
    #[arg(long, global = true, value_name = "NAME:STATUS:SYNDROME")]
    fail_opcode: Vec<String>,

    /// Model only: the next command NAME never completes (the driver times
    /// out); repeatable
    #[arg(long, global = true, value_name = "NAME")]
    stall_opcode: Vec<String>,

    /// Model only: the device dies (health syndrome FW_INTERNAL_ERR) after
    /// the Nth firmware command
    #[arg(long, global = true, value_name = "N")]
    fatal_after: Option<u64>,

    /// Command timeout in milliseconds [default: 60000, as Linux]
    #[arg(long, global = true, value_name = "MS")]
    cmd_timeout_ms: Option<u64>,
}

#[derive(Subcommand)]
enum Command {
    /// The whole mission, narrated: bring-up, CQ and SRQ, receives, the SRQ
    /// limit event, CQ resize with completions waiting, teardown with every
    /// firmware page back
    #[command(after_help = EXIT_CODES)]
    Demo,

    /// The device's capabilities, decoded and grouped
    #[command(after_help = EXIT_CODES)]
    Caps {
        /// Also list every non-zero field of the raw cmd_hca_cap block
        #[arg(long)]
        all: bool,
    },

    /// Send one firmware command by name with field values, print the
    /// decoded output, status and syndrome
    #[command(after_help = "Examples:
  mlx5 cmd query-hca-cap op_mod=1
  mlx5 cmd create-cq cq_context.log_cq_size=10
  mlx5 cmd nop
  mlx5 cmd query-eq eq_number=0 --json

Field names are the mlx5-regs (mlx5_ifc.h) layout names, dotted for
sub-structures (cq_context.log_cq_size) and indexed for arrays (pas[0]).
Values are decimal or 0x hex. Bring-up provides pages, the UAR and the EQs;
for create-cq and create-eq the tool also provides the ring, its page list
and the doorbell record unless given, and destroys what a command created
before tearing down.

Exit codes: 0 status OK, 1 the command failed (status and syndrome shown),
2 bad command line, 3 device not available.")]
    Cmd {
        /// Command name (query-hca-cap, create-cq, nop, ... or a number)
        name: String,
        /// field=value pairs
        fields: Vec<String>,
        /// Print zero fields of the output too
        #[arg(long)]
        all_fields: bool,
    },

    /// Run a scenario printing every firmware command with decoded input
    /// and output, status, syndrome and latency
    #[command(after_help = EXIT_CODES)]
    Trace {
        /// Which scenario
        #[arg(long, value_enum, default_value = "demo")]
        scenario: Scenario,
        /// Add the Linux mlx5_core-style hexdump of every command
        #[arg(long)]
        hexdump: bool,
    },

    /// Run a scenario, then print per-opcode counts, failures and latencies
    #[command(after_help = EXIT_CODES)]
    Stats {
        /// Which scenario
        #[arg(long, value_enum, default_value = "demo")]
        scenario: Scenario,
    },
}

fn main() {
    let cli = Cli::parse();
    let (value, res) = dispatch(&cli);
    let code = match &res {
        Ok(()) => EXIT_OK,
        Err(e) => e.exit_code(),
    };
    if cli.global.json {
        let mut doc = match value {
            Value::Object(m) => Value::Object(m),
            Value::Null => json!({}),
            other => json!({ "result": other }),
        };
        doc["ok"] = json!(res.is_ok());
        doc["exit_code"] = json!(code);
        if let Err(e) = &res {
            doc["error"] = e.to_json();
        }
        outln!(
            "{}",
            serde_json::to_string_pretty(&doc).unwrap_or_else(|_| "{}".into())
        );
    }
    if let Err(e) = &res {
        eprintln!("mlx5: error: {}", e.message());
        if let Some(h) = e.hint() {
            eprintln!("mlx5: what to do: {h}");
        }
    }
    std::process::exit(code);
}

type Outcome = (Value, Result<(), CliError>);

fn dispatch(cli: &Cli) -> Outcome {
    let g = &cli.global;
    let target = match Target::parse(&g.device) {
        Ok(t) => t,
        Err(e) => return (Value::Null, Err(e)),
    };
    let faults = match parse_faults(&target, &g.fail_opcode, &g.stall_opcode, g.fatal_after) {
        Ok(f) => f,
        Err(e) => return (Value::Null, Err(e)),
    };
    let mut cfg = HcaConfig::default();
    if let Some(ms) = g.cmd_timeout_ms {
        cfg.cmd_timeout_ns = ms.saturating_mul(1_000_000);
    }
    let live = match &cli.command {
        Command::Trace { hexdump, .. } if !g.json => Some(Live { hexdump: *hexdump }),
        _ => None,
    };
    let progress = !g.quiet;
    match &target {
        Target::Sim(p) => {
            let dev = target::model(*p);
            faults.apply(&dev);
            let tracer = Tracer::new(
                live,
                progress && live.is_none() && std::io::IsTerminal::is_terminal(&std::io::stderr()),
                faults.fatal_after.map(|n| (n, dev.clone())),
            );
            let env = Env {
                target: &target,
                model: Some(&dev),
                cfg,
            };
            let mut out = subcommand(cli, dev.hal(), &env, &tracer);
            add_device(&mut out.0, &target, Some(&dev), &faults);
            out
        }
        Target::Vfio(addr) => {
            let plat = match target::open_vfio(addr) {
                Ok(p) => p,
                Err(e) => return (json!({"device": target.label()}), Err(e)),
            };
            let tracer = Tracer::new(
                live,
                progress && live.is_none() && std::io::IsTerminal::is_terminal(&std::io::stderr()),
                None,
            );
            let env = Env {
                target: &target,
                model: None,
                cfg,
            };
            let mut out = subcommand(cli, plat, &env, &tracer);
            add_device(&mut out.0, &target, None, &faults);
            out
        }
    }
}

fn add_device(v: &mut Value, target: &Target, dev: Option<&Device>, faults: &target::Faults) {
    if let Value::Object(m) = v {
        m.insert("device".into(), json!(target.label()));
        m.insert("device_description".into(), json!(target.describe()));
        if dev.is_some() && faults.any() {
            m.insert(
                "injected_faults".into(),
                json!({
                    "fail": faults.fail.iter().map(|(o, s, y)| json!({
                        "opcode": o.to_string(), "status": s.name(), "syndrome": format!("{y:#x}")
                    })).collect::<Vec<_>>(),
                    "stall": faults.stall.iter().map(|o| o.to_string()).collect::<Vec<_>>(),
                    "fatal_after": faults.fatal_after,
                }),
            );
        }
    }
}

fn subcommand<H: Hal>(cli: &Cli, hal: H, env: &Env<'_>, t: &Tracer) -> Outcome {
    let g = &cli.global;
    let progress = !g.quiet;
    match &cli.command {
        Command::Demo => {
            let mut r = Report::new(g.json, true, progress);
            if !g.json {
                outln!(
                    "mlx5 demo on {} ({})",
                    env.target.describe(),
                    env.target.label()
                );
            }
            let res = scenario::run(Scenario::Demo, hal, env, t, &mut r);
            finish_scenario(res, env, t, &mut r, None)
        }
        Command::Trace { scenario, hexdump } => {
            let mut r = Report::new(g.json, true, progress);
            if !g.json {
                outln!(
                    "mlx5 trace of the {} scenario on {} ({}); latencies are {}",
                    scenario.name(),
                    env.target.describe(),
                    env.target.label(),
                    latency_kind(env)
                );
            }
            let res = scenario::run(*scenario, hal, env, t, &mut r);
            let commands: Vec<Value> = t
                .records()
                .iter()
                .map(|c| trace::to_json(c, *hexdump))
                .collect();
            finish_scenario(
                res,
                env,
                t,
                &mut r,
                Some(("commands", Value::from(commands))),
            )
        }
        Command::Stats { scenario } => {
            let mut r = Report::new(g.json, false, progress);
            let res = scenario::run(*scenario, hal, env, t, &mut r);
            if !g.json {
                outln!(
                    "mlx5 stats after the {} scenario on {} ({}); latencies are {}\n",
                    scenario.name(),
                    env.target.describe(),
                    env.target.label(),
                    latency_kind(env)
                );
            }
            let table = stats_table(t, g.json);
            let mut out = finish_scenario(res, env, t, &mut r, Some(("opcodes", table)));
            if !g.json {
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
        Command::Caps { all } => caps_cmd(hal, env, t, g.json, progress, *all),
        Command::Cmd {
            name,
            fields,
            all_fields,
        } => cmd_cmd(hal, env, t, g.json, progress, name, fields, *all_fields),
    }
}

fn latency_kind(env: &Env<'_>) -> &'static str {
    if env.model.is_some() {
        "the model's virtual clock, not real firmware timing"
    } else {
        "wall-clock time"
    }
}

fn finish_scenario(
    res: Result<scenario::Summary, CliError>,
    env: &Env<'_>,
    t: &Tracer,
    r: &mut Report,
    extra: Option<(&str, Value)>,
) -> Outcome {
    let (summary, result) = match res {
        Ok(sum) => {
            let c = scenario::conclude(&sum, env, t, r);
            (sum.to_json(), c)
        }
        Err(e) => (Value::Null, Err(e)),
    };
    let mut v = json!({
        "steps": r.take_steps(),
        "summary": summary,
        "commands_sent": t.count(),
    });
    if let Some((k, x)) = extra {
        v[k] = x;
    }
    (v, result)
}

fn stats_table(t: &Tracer, json_mode: bool) -> Value {
    let stats = t.stats();
    let mut rows = Vec::new();
    if !json_mode {
        outln!(
            "{:<30} {:>6} {:>8}  {:<24} {:>10} {:>10}",
            "opcode",
            "count",
            "failed",
            "last",
            "mean",
            "max"
        );
    }
    for s in stats.iter() {
        let last = trace::outcome_text(&s.last);
        if !json_mode {
            outln!(
                "{:<30} {:>6} {:>8}  {:<24} {:>10} {:>10}",
                format!("{:?}", s.opcode),
                s.count,
                s.failures,
                last.split(" syndrome").next().unwrap_or(""),
                trace::fmt_ns(s.mean_ns()),
                trace::fmt_ns(s.max_ns)
            );
        }
        rows.push(json!({
            "opcode": s.opcode.to_string(),
            "opcode_value": s.opcode.0,
            "count": s.count,
            "failures": s.failures,
            "last": trace::outcome_json(&s.last),
            "mean_ns": s.mean_ns(),
            "max_ns": s.max_ns,
            "total_ns": s.total_ns,
        }));
    }
    let failed: u64 = stats.iter().map(|s| s.failures).sum();
    if !json_mode {
        outln!("{:<30} {:>6} {:>8}", "total", stats.total(), failed);
    }
    Value::from(rows)
}

fn caps_cmd<H: Hal>(
    hal: H,
    env: &Env<'_>,
    t: &Tracer,
    json_mode: bool,
    progress: bool,
    all: bool,
) -> Outcome {
    let mut r = Report::new(json_mode, false, progress);
    let (hca, _) = match bring_up(hal, env, t, &mut r) {
        Ok(x) => x,
        Err(e) => return (Value::Null, Err(e)),
    };
    let caps = *hca.caps();
    let max = hca.max_caps().copied();
    let fw = hca.fw_version();
    let issi = hca.issi();
    let pages = hca.pages_held_by_firmware();
    if !json_mode {
        outln!(
            "Capabilities of {} ({})",
            env.target.describe(),
            env.target.label()
        );
        outln!("  firmware {fw}, ISSI {issi}, firmware holds {pages} pages after bring-up");
        outln!("  (current values after SET_HCA_CAP; where the maximum differs it is shown)");
        caps::print(&caps, max.as_ref());
        if all {
            outln!("\nEvery non-zero cmd_hca_cap field (current)");
            for (k, v) in caps::raw_fields(&caps) {
                outln!("  {k} = {v}");
            }
        }
    }
    let mut v = json!({
        "firmware_version": fw.to_string(),
        "issi": issi,
        "pages_held_by_firmware": pages,
        "capabilities": caps::to_json(&caps),
        "max_capabilities": max.as_ref().map(caps::to_json),
    });
    if all {
        let m: serde_json::Map<String, Value> = caps::raw_fields(&caps)
            .into_iter()
            .map(|(k, v)| (k, Value::from(v)))
            .collect();
        v["cmd_hca_cap"] = Value::Object(m);
    }
    let td = teardown(hca, env, &mut r);
    let res = td.and_then(|s| {
        if !json_mode {
            outln!(
                "\nteardown: {} pages given, {} returned{}",
                s.pages_given,
                s.pages_returned,
                if s.clean() { ", all back" } else { "" }
            );
        }
        if s.clean() {
            Ok(())
        } else {
            Err(CliError::check("teardown did not get every page back"))
        }
    });
    (v, res)
}

#[allow(clippy::too_many_arguments)]
fn cmd_cmd<H: Hal>(
    hal: H,
    env: &Env<'_>,
    t: &Tracer,
    json_mode: bool,
    progress: bool,
    name: &str,
    fields: &[String],
    all: bool,
) -> Outcome {
    // Check the command line before touching the device.
    if let Err(e) = rawcmd::check(name, fields) {
        return (Value::Null, Err(e));
    }
    let mut r = Report::new(json_mode, true, progress);
    let (hca, _) = match bring_up(hal, env, t, &mut r) {
        Ok(x) => x,
        Err(e) => return (Value::Null, Err(e)),
    };
    if !json_mode {
        outln!(
            "on {} ({}): firmware {}, ISSI {}, after {} bring-up commands",
            env.target.describe(),
            env.target.label(),
            hca.fw_version(),
            hca.issi(),
            t.count()
        );
    }
    let before = t.count();
    let (mut v, res) = rawcmd::run(&hca, t, env.model.is_some(), name, fields, all, &mut r);
    let sent = t.count() - before;
    let mut quiet = Report::new(json_mode, false, progress);
    let td = teardown(hca, env, &mut quiet);
    if let Value::Object(m) = &mut v {
        m.insert("commands_sent".into(), json!(sent));
    }
    if let (Ok(s), false) = (&td, json_mode) {
        outln!(
            "\nteardown: {} pages given, {} returned{}",
            s.pages_given,
            s.pages_returned,
            if s.clean() { ", all back" } else { "" }
        );
    }
    let res = res.and_then(|()| td.map(|_| ()));
    (v, res)
}
