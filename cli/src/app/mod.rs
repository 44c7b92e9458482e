//! The application: the command line (`args`), and `main`, which parses
//! it, opens the device and hands it to the subcommand's module under
//! `crate::cmd`, then prints the error and exits with its code.
//!
//! A new subcommand is one variant of [`args::Command`], one module under
//! `crate::cmd`, and one arm in [`subcommand`] (or in `dispatch`, when it
//! needs no device).

pub mod args;

use crate::cmd::{
    caps, command as rawcmd, decode as decodecmd, demo, devices, gendoc, peer, perf, pingpong,
    replay, run as script, selftest, stats, trace as tracecmd,
};
use crate::common::{interrupts, report, target};
use mlx5_driver::HcaConfig;
use mlx5_hal::Hal;
use mlx5_sim::Device;
use serde_json::{json, Value};

use clap::CommandFactory;

use crate::app::args::{install_panic_hook, parse_args, print_json, Cli, Command};
use crate::common::error::{CliError, EXIT_FAILED, EXIT_OK};
use crate::common::session::Env;
use crate::common::target::{parse_faults, ModelRun, Target};
use crate::common::trace::{Live, Tracer};

/// Run the tool on the process's arguments and exit with its code.
pub fn main() -> ! {
    install_panic_hook();
    let cli = parse_args();
    let (mut value, mut res) = dispatch(&cli);
    // Output that could not be written is a failure of the run, unless a
    // more specific one came first.
    if let Some(w) = report::write_error() {
        if res.is_ok() {
            res = Err(CliError::Output { what: w });
        } else {
            eprintln!("mlx5: error: cannot write the results to stdout: {w}");
        }
    }
    let code = match &res {
        Ok(()) => EXIT_OK,
        Err(e) => e.exit_code(),
    };
    if cli.global.json {
        let mut doc = match value.take() {
            Value::Object(m) => Value::Object(m),
            Value::Null => json!({}),
            other => json!({ "result": other }),
        };
        doc["ok"] = json!(res.is_ok());
        doc["exit_code"] = json!(code);
        if let Err(e) = &res {
            doc["error"] = e.to_json();
        }
        print_json(&doc);
    }
    if let Err(e) = &res {
        eprintln!("mlx5: error: {}", e.message());
        if let Some(h) = e.hint() {
            eprintln!("mlx5: what to do: {h}");
        }
    }
    // The JSON document itself may be what could not be written.
    if let (Ok(()), Some(w)) = (&res, report::write_error()) {
        eprintln!("mlx5: error: cannot write the results to stdout: {w}");
        std::process::exit(EXIT_FAILED);
    }
    std::process::exit(code);
}

type Outcome = (Value, Result<(), CliError>);

/// `mlx5 decode` when that is the subcommand.
fn decode_from_cli(c: &Command, json: bool) -> Option<(Value, Result<(), CliError>)> {
    let Command::Decode {
        file,
        kind,
        opcode,
        op_mod,
        all_fields,
    } = c
    else {
        return None;
    };
    Some(decodecmd::run(&decodecmd::Opts {
        file,
        kind: *kind,
        opcode: opcode.as_deref(),
        op_mod: *op_mod,
        all_fields: *all_fields,
        json,
    }))
}

/// A subcommand that runs on the model only: its name, what it runs (for
/// the refusal of a card) and the wire's fault options, which it takes
/// instead of the command-level ones.
struct ModelOnlyCommand {
    cmd: &'static str,
    doing: &'static str,
    wire_faults: &'static str,
}

/// `mlx5 pingpong`: two model devices of the target's profile.
const PINGPONG: ModelOnlyCommand = ModelOnlyCommand {
    cmd: "pingpong",
    doing: "two hosts on the device model; it does not drive real cards yet",
    wire_faults: "--drop, --dup, --reorder, --corrupt",
};

/// `mlx5 peer`: one model device of the target's profile on a UDP link.
const PEER: ModelOnlyCommand = ModelOnlyCommand {
    cmd: "peer",
    doing: "the device model on a UDP link; it does not drive real cards",
    wire_faults: "--drop, --corrupt-frame",
};

/// `mlx5 perf`: as `mlx5 peer`.
const PERF: ModelOnlyCommand = ModelOnlyCommand {
    cmd: "perf",
    doing: "the device model on a UDP link; it does not drive real cards",
    wire_faults: "--drop, --corrupt-frame",
};

/// What a model-only subcommand takes of the command line and the target.
struct OnModel<'a> {
    cli: &'a Cli,
    target: &'a Target,
    faults: &'a target::Faults,
    model: target::ModelOpts,
    /// The driver's configuration (`--cmd-timeout-ms`).
    cfg: HcaConfig,
}

impl OnModel<'_> {
    /// Run `which` (`run` on `args`): the target's model profile (a card
    /// is refused), no command-level fault options (its faults are the
    /// wire's); its output names the device.
    fn run<A>(
        &self,
        which: &ModelOnlyCommand,
        args: &A,
        run: fn(&ModelRun<'_, A>) -> Outcome,
    ) -> Outcome {
        let OnModel {
            cli,
            target,
            faults,
            model,
            cfg,
        } = *self;
        let profile = match target {
            Target::Sim(p) => *p,
            Target::Vfio(_) => {
                let e = CliError::usage(
                    format!("{} runs {}", which.cmd, which.doing),
                    "leave out --device, or use --device sim:PROFILE",
                );
                return (Value::Null, Err(e));
            }
        };
        if faults.any() {
            let e = CliError::usage(
                format!(
                    "{} does not take --fail-opcode, --stall-opcode or --fatal-after",
                    which.cmd
                ),
                format!("its faults are the wire's: {}", which.wire_faults),
            );
            return (Value::Null, Err(e));
        }
        let mut out = run(&ModelRun {
            args,
            profile,
            model,
            cfg,
            json: cli.global.json,
            progress: !cli.global.quiet,
        });
        if let Value::Object(m) = &mut out.0 {
            m.insert("device".into(), json!(target.label()));
        }
        out
    }
}

fn dispatch(cli: &Cli) -> Outcome {
    let g = &cli.global;
    // Generated from the argument definitions, without a device.
    match &cli.command {
        Command::Completions { shell } => {
            return gendoc::completions(Cli::command(), *shell, g.json)
        }
        Command::Man { subcommand } => {
            let top = Cli::command().version(args::version());
            return gendoc::man(top, subcommand.as_deref(), g.json);
        }
        _ => {}
    }
    let target = match Target::parse(&g.device) {
        Ok(t) => t,
        Err(e) => return (Value::Null, Err(e)),
    };
    let faults = match parse_faults(&target, &g.fail_opcode, &g.stall_opcode, g.fatal_after) {
        Ok(f) => f,
        Err(e) => return (Value::Null, Err(e)),
    };
    // Listing the functions needs no device.
    if let Command::Devices {
        sysfs_root,
        dev_root,
    } = &cli.command
    {
        return devices::run(sysfs_root, dev_root, g.json);
    }
    // Decoding needs no device.
    if let Some(out) = decode_from_cli(&cli.command, g.json) {
        return out;
    }
    let model_opts = target::ModelOpts {
        seed: g.seed,
        issi0: g.issi0,
        threaded: g.threaded,
        dma_limit: g.dma_limit,
    };
    if let Err(e) = model_opts.check(&target) {
        return (Value::Null, Err(e));
    }
    if let Command::Diff { a, b } = &cli.command {
        return replay::diff(a, b, g.json);
    }
    let mut cfg = HcaConfig::default();
    if let Some(ms) = g.cmd_timeout_ms {
        cfg.cmd_timeout_ns = ms.saturating_mul(1_000_000);
    }
    // Two hosts of its own, or one on a UDP link, on the model.
    let on_model = OnModel {
        cli,
        target: &target,
        faults: &faults,
        model: model_opts,
        cfg,
    };
    match &cli.command {
        Command::Pingpong(args) => return on_model.run(&PINGPONG, args, pingpong::run),
        Command::Peer(args) => return on_model.run(&PEER, args, peer::run),
        Command::Perf(args) => return on_model.run(&PERF, args, perf::run),
        Command::PcapCheck { files } => return peer::capcheck::run(files, g.json),
        _ => {}
    }
    // Discovery needs no device.
    if let Command::Cmd {
        name,
        list,
        show_fields,
        ..
    } = &cli.command
    {
        if let Some(out) = rawcmd::without_device(name.as_deref(), *list, *show_fields, g.json) {
            return out;
        }
    }
    // A script is read and checked before the device is opened.
    let script = match &cli.command {
        Command::Run { file, .. } => match script::top::load(file) {
            Ok(l) => Some(l),
            Err(e) => return (Value::Null, Err(e)),
        },
        _ => None,
    };
    let script = script.as_deref().unwrap_or(&[]);
    let live = match &cli.command {
        Command::Trace { hexdump, .. } if !g.json => Some(Live { hexdump: *hexdump }),
        _ => None,
    };
    let progress = !g.quiet;
    match &target {
        Target::Sim(p) => {
            let dev = target::model(*p, &model_opts);
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
            let mut out = subcommand(cli, dev.hal(), &env, &tracer, &faults, script);
            add_device(&mut out.0, &target, Some(&dev), &faults);
            if !model_opts.given().is_empty() {
                out.0["model_options"] = model_opts.to_json();
            }
            // The self-test judges its fault options itself, before it
            // writes its report.
            if !matches!(cli.command, Command::Selftest { .. }) {
                check_faults_fired(&mut out, &faults, &dev, &tracer);
            }
            out
        }
        Target::Vfio(addr) => {
            let plat = match target::open_vfio(addr) {
                Ok(p) => p,
                Err(e) => {
                    let mut v = json!({"device": target.label()});
                    if let Command::Selftest { report } = &cli.command {
                        let opts = selftest::Opts {
                            json: g.json,
                            progress,
                            report: report.clone(),
                            faults: &faults,
                        };
                        v = selftest::unopened(&target, &e, &opts);
                        v["device"] = json!(target.label());
                    }
                    return (v, Err(e));
                }
            };
            let tracer = Tracer::new(
                live,
                progress && live.is_none() && std::io::IsTerminal::is_terminal(&std::io::stderr()),
                None,
            );
            // A VF skips the PF-only HOST_ENDIANNESS write (Linux).
            let mut cfg = cfg;
            cfg.virtual_function = mlx5_vfio::pci::is_virtual_function(plat.device_info().device);
            let env = Env {
                target: &target,
                model: None,
                cfg,
            };
            // A clone keeps the vectors enabled past the driver's teardown,
            // so the kernel's interrupt counts can still be read; the
            // device closes when it is dropped.
            let irq_view = plat.clone();
            let mut out = subcommand(cli, plat, &env, &tracer, &faults, script);
            add_device(&mut out.0, &target, None, &faults);
            let narrates = matches!(cli.command, Command::Selftest { .. } | Command::Demo);
            interrupts::report(&irq_view, &mut out.0, narrates && !g.json);
            drop(irq_view);
            out
        }
    }
}

/// A fault option that never fired tested nothing: say so, and fail the
/// run (exit 4) unless it already failed for another reason.
fn check_faults_fired(out: &mut Outcome, faults: &target::Faults, dev: &Device, t: &Tracer) {
    let unfired = faults.unfired(dev, t.fatal_fired(), t.count());
    if unfired.is_empty() {
        return;
    }
    if let Value::Object(m) = &mut out.0 {
        m.insert("unfired_faults".into(), json!(unfired));
    }
    match &out.1 {
        Ok(()) => {
            out.1 = Err(CliError::FaultNotFired {
                what: unfired.join("; "),
            })
        }
        Err(_) => {
            for u in &unfired {
                eprintln!("mlx5: note: {u}");
            }
        }
    }
}

/// Every subcommand's JSON names the device, and on the model the faults
/// injected.
fn add_device(v: &mut Value, target: &Target, dev: Option<&Device>, faults: &target::Faults) {
    if let Value::Object(m) = v {
        m.insert("device".into(), json!(target.label()));
        m.insert("device_description".into(), json!(target.describe()));
        if dev.is_some() && faults.any() {
            m.insert("injected_faults".into(), faults.to_json());
        }
    }
}

fn subcommand<H: Hal>(
    cli: &Cli,
    hal: H,
    env: &Env<'_>,
    t: &Tracer,
    faults: &target::Faults,
    script: &[script::parse::Line],
) -> Outcome {
    let g = &cli.global;
    let progress = !g.quiet;
    match &cli.command {
        Command::Selftest { report } => {
            let opts = selftest::Opts {
                json: g.json,
                progress,
                report: report.clone(),
                faults,
            };
            selftest::run(hal, env, t, &opts)
        }
        Command::Demo => demo::run(hal, env, t, g.json, progress),
        Command::Trace {
            scenario,
            hexdump,
            save,
        } => {
            let opts = tracecmd::Opts {
                json: g.json,
                progress,
                scenario: *scenario,
                hexdump: *hexdump,
                save: save.as_deref(),
            };
            tracecmd::run(hal, env, t, &opts)
        }
        Command::Stats { scenario } => stats::run(hal, env, t, g.json, progress, *scenario),
        Command::Run { all_fields, .. } => {
            script::run(hal, env, t, g.json, progress, script, *all_fields)
        }
        Command::Shell => script::shell(hal, env, t, progress),
        Command::Decode { .. }
        | Command::Diff { .. }
        | Command::Devices { .. }
        | Command::Pingpong(_)
        | Command::Peer(_)
        | Command::Perf(_)
        | Command::PcapCheck { .. }
        | Command::Completions { .. }
        | Command::Man { .. } => {
            unreachable!(
                "decode, diff, devices, pingpong, peer, perf, pcap-check, completions and man run before the device is opened"
            )
        }
        Command::Replay { file } => replay::run(hal, env, t, g.json, progress, file),
        Command::Caps { all } => caps::run(hal, env, t, g.json, progress, *all),
        Command::Cmd {
            name,
            fields,
            all_fields,
            ..
        } => {
            let opts = rawcmd::Opts {
                json: g.json,
                progress,
                name: name.as_deref().unwrap_or_default(),
                fields,
                all_fields: *all_fields,
            };
            rawcmd::on_device(hal, env, t, &opts)
        }
    }
}
