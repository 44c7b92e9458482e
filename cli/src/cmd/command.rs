//! `mlx5 cmd NAME field=value ...`: one firmware command, built from the
//! mlx5-regs layout by field name, sent with `Hca::exec` on a brought-up
//! HCA, its output decoded. For CREATE_CQ and CREATE_EQ the tool provides
//! what the command points at (ring memory and page list, doorbell record,
//! UAR, EQ number) unless given; objects a command creates are destroyed
//! again before teardown.

use mlx5_driver::stats::CmdOutcome;
use mlx5_hal::Hal;
use mlx5_regs::decode::{decode_command, DecodeOptions, Direction};
use mlx5_regs::layouts::{access_register_in, access_register_out};
use mlx5_regs::{Layout, Opcode};
use serde_json::{json, Map, Value};

use crate::common::error::CliError;
use crate::common::report::Report;
use crate::common::session::{bring_up, teardown, Env, TracedHca};
use crate::common::target::parse_opcode;
use crate::common::trace::{fmt_ns, outcome_json, outcome_text, Tracer};
use crate::regs::discover;
use crate::regs::fields::Input;
use crate::regs::fill::{known_register, provide, register_data_len, undo};

/// The commands of the HCA's life cycle, which only the tool's bring-up
/// and teardown send.
pub(crate) const LIFECYCLE: [Opcode; 4] = [
    Opcode::ENABLE_HCA,
    Opcode::INIT_HCA,
    Opcode::TEARDOWN_HCA,
    Opcode::DISABLE_HCA,
];

fn decode_to(
    op: Opcode,
    op_mod: u16,
    dir: Direction,
    buf: &[u8],
    all: bool,
) -> Vec<(String, String)> {
    let mut s = String::new();
    let opts = DecodeOptions {
        skip_zero: !all,
        max_array: 16,
    };
    let _ = decode_command(op, op_mod, dir, buf, opts, &mut s);
    s.lines()
        .filter_map(|l| l.split_once(" = "))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// `mlx5 cmd --list` and `mlx5 cmd NAME --show-fields`, which need no
/// device; `None` when neither was asked for.
pub fn without_device(
    name: Option<&str>,
    list: bool,
    show_fields: bool,
    json: bool,
) -> Option<(Value, Result<(), CliError>)> {
    if list {
        return Some((discover::list(json), Ok(())));
    }
    if !show_fields {
        return None;
    }
    Some(match parse_opcode(name.unwrap_or_default()) {
        Ok(op) if op.layouts().is_some() => (discover::fields(op, json), Ok(())),
        Ok(op) => (
            Value::Null,
            Err(CliError::usage(
                format!("{op} has no layout in mlx5-regs"),
                "`mlx5 cmd --list` lists the commands with one",
            )),
        ),
        Err(e) => (Value::Null, Err(e)),
    })
}

/// The options of `mlx5 cmd NAME field=value ...`.
pub struct Opts<'a> {
    /// `--json`.
    pub json: bool,
    /// Progress on stderr.
    pub progress: bool,
    /// The command's name.
    pub name: &'a str,
    /// Its `field=value` assignments.
    pub fields: &'a [String],
    /// `--all-fields`: decode the zero fields too.
    pub all_fields: bool,
}

/// Run `mlx5 cmd` on an opened device: the command line checked before
/// the device is touched, bring-up, the command, teardown.
pub fn on_device<H: Hal>(
    hal: H,
    env: &Env<'_>,
    t: &Tracer,
    o: &Opts<'_>,
) -> (Value, Result<(), CliError>) {
    if let Err(e) = check(o.name, o.fields) {
        return (Value::Null, Err(e));
    }
    let mut r = Report::new(o.json, true, o.progress);
    let (hca, _) = match bring_up(hal, env, t, &mut r) {
        Ok(x) => x,
        Err(e) => return (Value::Null, Err(e)),
    };
    if !o.json {
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
    let (mut v, res) = run(
        &hca,
        t,
        env.model.is_some(),
        o.name,
        o.fields,
        o.all_fields,
        &mut r,
    );
    let sent = t.count() - before;
    let mut quiet = Report::new(o.json, false, o.progress);
    let (s, td) = teardown(hca, env, &mut quiet);
    if let Value::Object(m) = &mut v {
        m.insert("commands_sent".into(), json!(sent));
    }
    if !o.json {
        s.print_line();
    }
    (v, res.and(td))
}

/// Run `mlx5 cmd` on a brought-up HCA. Prints (human) as it goes; returns
/// the JSON result and whether the command succeeded.
pub fn run<H: Hal>(
    hca: &TracedHca<'_, H>,
    t: &Tracer,
    model: bool,
    name: &str,
    fields: &[String],
    all: bool,
    r: &mut Report,
) -> (Value, Result<(), CliError>) {
    match run_inner(hca, t, model, name, fields, all, r) {
        Ok(v) => v,
        Err(e) => (Value::Null, Err(e)),
    }
}

fn parse(name: &str, fields: &[String]) -> Result<(Opcode, Input, &'static Layout), CliError> {
    parse_input(crate::common::target::parse_opcode(name)?, fields)
}

/// The input of `op` from `field=value` strings, and its output layout.
pub(crate) fn parse_input(
    op: Opcode,
    fields: &[String],
) -> Result<(Opcode, Input, &'static Layout), CliError> {
    if op == Opcode::MANAGE_PAGES {
        return Err(CliError::usage(
            "MANAGE_PAGES belongs to the driver's page manager",
            "pages are given at bring-up and taken back at teardown; `mlx5 trace` shows every MANAGE_PAGES",
        ));
    }
    // The HCA's life cycle is the tool's: it brings the HCA up before the
    // command and tears it down after. Sent by hand, TEARDOWN_HCA would
    // leave the tool's own teardown failing on a dead HCA (exit 1), so it
    // is refused like MANAGE_PAGES (docs/cli.md).
    if LIFECYCLE.contains(&op) {
        return Err(CliError::usage(
            format!("{op} belongs to the tool's bring-up and teardown"),
            "every run brings the HCA up (ENABLE_HCA, INIT_HCA) and tears it down (TEARDOWN_HCA, DISABLE_HCA); \
             `mlx5 trace` shows them with their inputs and outputs",
        ));
    }
    let Some((in_layout, out_layout)) = op.layouts() else {
        return Err(CliError::usage(
            format!("{op} has no layout in mlx5-regs, so its fields cannot be named"),
            "commands with layouts: ".to_string()
                + &Opcode::ALL
                    .iter()
                    .filter(|o| {
                        o.layouts().is_some()
                            && **o != Opcode::MANAGE_PAGES
                            && !LIFECYCLE.contains(o)
                    })
                    .filter_map(|o| o.name())
                    .map(|n| n.to_ascii_lowercase().replace('_', "-"))
                    .collect::<Vec<_>>()
                    .join(", "),
        ));
    };
    let inp = build(op, in_layout, fields)?;
    Ok((op, inp, out_layout))
}

fn build(op: Opcode, in_layout: &'static Layout, fields: &[String]) -> Result<Input, CliError> {
    let mut inp = Input::new(op, in_layout);
    for f in fields {
        let Some((k, v)) = f.split_once('=') else {
            return Err(CliError::usage(
                format!("'{}' is not field=value", crate::common::error::quote(f)),
                "e.g. op_mod=1 or cq_context.log_cq_size=10",
            ));
        };
        if k == "opcode" {
            return Err(CliError::usage(
                "the opcode comes from the command name",
                "drop opcode=...",
            ));
        }
        let v = if k.trim() == "op_mod" {
            crate::regs::discover::op_mod_value(op, v.trim())?
        } else {
            v.trim().to_string()
        };
        inp.put_user(k.trim(), &v)?;
    }
    if op == Opcode::ACCESS_REG {
        register_data_len(&inp)?;
    }
    Ok(inp)
}

/// Check the command line (opcode, fields, values) without a device.
pub fn check(name: &str, fields: &[String]) -> Result<(), CliError> {
    parse(name, fields).map(|_| ())
}

#[allow(clippy::type_complexity)]
fn run_inner<H: Hal>(
    hca: &TracedHca<'_, H>,
    t: &Tracer,
    model: bool,
    name: &str,
    fields: &[String],
    all: bool,
    r: &mut Report,
) -> Result<(Value, Result<(), CliError>), CliError> {
    let (op, mut inp, out_layout) = parse(name, fields)?;
    let mut keep = Vec::new();
    let mut filled = Vec::new();
    provide(op, hca, &mut inp, &mut keep, &mut filled)?;
    let op_mod = inp.get("op_mod").unwrap_or(0) as u16;
    // ACCESS_REG returns the register after the output header.
    let returned = if op == Opcode::ACCESS_REG {
        inp.buf.len() - access_register_in::SIZE
    } else {
        0
    };
    let mut out = vec![0u8; out_layout.size + returned];

    r.heading(&format!("{op:?} op_mod {op_mod:#x}"));
    if !filled.is_empty() {
        r.say("filled in by the tool:");
        for (k, v) in &filled {
            r.say(format!("  {k} = {v}"));
        }
    }
    let input_fields = decode_to(op, op_mod, Direction::Input, &inp.buf, false);
    r.say(format!("input ({} bytes):", inp.buf.len()));
    for (k, v) in &input_fields {
        r.say(format!("  {k} = {v}"));
    }

    let res = hca.exec(&inp.buf, &mut out);
    let last = t.records().pop();
    let (outcome, latency) = match &last {
        Some(rec) if rec.opcode == op => (rec.outcome, rec.latency_ns),
        _ => (CmdOutcome::Ok, 0),
    };
    let status_line = match &res {
        Ok(()) => format!("status: OK, syndrome 0x0, in {}", fmt_ns(latency)),
        Err(mlx5_driver::Error::Command { .. })
        | Err(mlx5_driver::Error::Delivery { .. })
        | Err(mlx5_driver::Error::Timeout { .. }) => {
            format!("status: {}, in {}", outcome_text(&outcome), fmt_ns(latency))
        }
        Err(e) => format!("not sent: {e}"),
    };
    r.say(status_line);
    let mut model_note = None;
    if let Err(mlx5_driver::Error::Command { syndrome, .. }) = &res {
        if model {
            if let Some(info) = mlx5_sim::syndrome::lookup(*syndrome) {
                let note = format!("the model's syndrome {}: {}", info.name, info.what);
                r.say(&note);
                model_note = Some(note);
            }
        }
    }
    let output_fields = decode_to(op, op_mod, Direction::Output, &out, all);
    r.say(format!(
        "output ({} bytes{}):",
        out.len(),
        if all { "" } else { ", non-zero fields" }
    ));
    for (k, v) in &output_fields {
        r.say(format!("  {k} = {v}"));
    }
    if output_fields.is_empty() {
        r.say("  (none)");
    }
    let mut register = Value::Null;
    if let (Opcode::ACCESS_REG, Ok(())) = (op, &res) {
        if let Some((name, l)) = known_register(inp.get("register_id").unwrap_or(0) as u16) {
            let data = &out[access_register_out::SIZE..];
            let mut text = String::new();
            let opts = DecodeOptions {
                skip_zero: false,
                max_array: 16,
            };
            let _ = mlx5_regs::decode::decode(l, data, opts, &mut text);
            r.say(format!("register {name} as firmware returned it:"));
            let mut m = Map::new();
            for (k, v) in text.lines().filter_map(|l| l.split_once(" = ")) {
                r.say(format!("  {} = {}", k.trim(), v.trim()));
                m.insert(k.trim().to_string(), Value::from(v.trim()));
            }
            register = json!({ "name": name, "fields": m });
        }
    }

    // Undo a create so teardown finds the HCA as bring-up left it.
    let mut cleanup = Value::Null;
    if res.is_ok() {
        if let Some((undo_op, field, v)) = undo(op, out_layout, &out) {
            if let Some((ul, uo)) = undo_op.layouts() {
                let mut u = Input::new(undo_op, ul);
                u.put(field, &v.to_string())?;
                let mut uout = vec![0u8; uo.size];
                let ur = hca.exec(&u.buf, &mut uout);
                let text = match &ur {
                    Ok(()) => "OK".to_string(),
                    Err(e) => e.to_string(),
                };
                r.say(format!("cleanup: {undo_op} {field} {v:#x}: {text}"));
                cleanup = json!({"opcode": undo_op.to_string(), field: v, "ok": ur.is_ok(), "result": text});
            }
        }
    }
    drop(keep);

    let to_map = |v: &[(String, String)]| {
        let mut m = Map::new();
        for (k, val) in v {
            m.insert(k.clone(), Value::from(val.as_str()));
        }
        Value::Object(m)
    };
    let json = json!({
        "opcode": op.to_string(),
        "opcode_value": op.0,
        "op_mod": op_mod,
        "input": to_map(&input_fields),
        "filled_by_tool": to_map(&filled),
        "outcome": outcome_json(&outcome),
        "latency_ns": latency,
        "output": to_map(&output_fields),
        "model_syndrome": model_note,
        "cleanup": cleanup,
        "register": register,
    });
    let result = res.map_err(|e| {
        let mut err = CliError::driver(format!("cmd {name}"), e);
        if let (CliError::Driver { hint, .. }, mlx5_driver::Error::Command { .. }) = (&mut err, e) {
            *hint = if model {
                "firmware refused the command: status and syndrome above are its answer (docs/fidelity.md lists every syndrome of the model)".into()
            } else {
                "firmware refused the command: status and syndrome above are its answer; the syndrome is an opaque firmware diagnostic to quote to NVIDIA".into()
            };
        }
        err
    });
    Ok((json, result))
}
