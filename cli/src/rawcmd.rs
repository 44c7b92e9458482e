//! `mlx5 cmd NAME field=value ...`: one firmware command, built from the
//! mlx5-regs layout by field name, sent with `Hca::exec` on a brought-up
//! HCA, its output decoded. For CREATE_CQ and CREATE_EQ the tool provides
//! what the command points at (ring memory and page list, doorbell record,
//! UAR, EQ number) unless given; objects a command creates are destroyed
//! again before teardown.

use mlx5_driver::cmd::MAX_CMD_LEN;
use mlx5_driver::stats::CmdOutcome;
use mlx5_hal::{DmaRegion, Hal};
use mlx5_regs::consts::reg_id;
use mlx5_regs::decode::{decode_command, DecodeOptions, Direction};
use mlx5_regs::layouts::{access_register_in, access_register_out, register_host_endianness};
use mlx5_regs::{Layout, Opcode};
use serde_json::{json, Map, Value};

use crate::error::CliError;
use crate::fields::{out_field, Input};
use crate::report::Report;
use crate::session::TracedHca;
use crate::trace::{fmt_ns, outcome_json, outcome_text, Tracer};

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

/// Registers whose layout mlx5-regs has: (register id, name, layout).
const REGISTERS: &[(u16, &str, &Layout)] = &[(
    reg_id::HOST_ENDIANNESS,
    "HOST_ENDIANNESS",
    &register_host_endianness::LAYOUT,
)];

fn known_register(id: u16) -> Option<(&'static str, &'static Layout)> {
    REGISTERS
        .iter()
        .find(|(i, ..)| *i == id)
        .map(|(_, n, l)| (*n, *l))
}

/// ACCESS_REG carries the register's whole contents after its 16-byte
/// header, in the input and again in the output, for a read as for a write
/// (Linux `mlx5_core_access_reg`: input and output lengths are the header
/// plus the register's size). Returns how many bytes of register data the
/// command carries: the register's size when mlx5-regs knows the register,
/// else what the user gave in `register_data`.
fn register_data_len(inp: &Input) -> Result<usize, CliError> {
    let given = inp.buf.len().saturating_sub(access_register_in::SIZE);
    let id = inp.get("register_id").unwrap_or(0) as u16;
    match known_register(id) {
        Some((name, l)) if given > l.size => Err(CliError::usage(
            format!("{name} (register {id:#x}) is {} bytes; register_data has {given}", l.size),
            format!("give at most {} bytes of register_data", l.size),
        )),
        Some((_, l)) => Ok(l.size),
        None if given == 0 => Err(CliError::usage(
            format!("ACCESS_REG of register {id:#x} needs the register's contents and the tool does not know its size"),
            format!(
                "give register_data=0x... (hex, the register's full size from the PRM's register description; zeros for a read), or register_data[i]=... up to its last dword; registers the tool sizes itself: {}",
                REGISTERS
                    .iter()
                    .map(|(i, n, _)| format!("{n} (register_id={i:#x})"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
        None => Ok(given),
    }
}

/// Ring memory and a doorbell record for CREATE_CQ / CREATE_EQ, filled in
/// unless the user gave the fields; for ACCESS_REG the register data up to
/// the register's size.
fn provide<H: Hal>(
    op: Opcode,
    hca: &TracedHca<'_, H>,
    inp: &mut Input,
    keep: &mut Vec<DmaRegion<H>>,
    filled: &mut Vec<(String, String)>,
) -> Result<(), CliError> {
    if op == Opcode::ACCESS_REG {
        let len = register_data_len(inp)?;
        let have = inp.buf.len() - access_register_in::SIZE;
        if have < len {
            inp.buf.resize(access_register_in::SIZE + len, 0);
            let name = known_register(inp.get("register_id").unwrap_or(0) as u16)
                .map_or("the register", |(n, _)| n);
            filled.push((
                "register_data".into(),
                format!(
                    "{} zero bytes after the {have} given, to the size of {name} ({len} bytes)",
                    len - have
                ),
            ));
        }
        return Ok(());
    }
    let (ctx, log_field, entry, owner_byte, owner_init) = match op {
        Opcode::CREATE_CQ => {
            let stride = if inp.get("cq_context.cqe_sz") == Some(1) {
                128
            } else {
                64
            };
            (
                "cq_context",
                "cq_context.log_cq_size",
                stride,
                stride - 1,
                0xf0u8,
            )
        }
        Opcode::CREATE_EQ => (
            "eq_context_entry",
            "eq_context_entry.log_eq_size",
            64,
            63,
            0x01,
        ),
        _ => return Ok(()),
    };
    let mut fill = |inp: &mut Input, path: String, v: u64, why: &str| -> Result<(), CliError> {
        inp.put(&path, &format!("{v:#x}"))?;
        filled.push((path, format!("{v:#x} ({why})")));
        Ok(())
    };
    if !inp.given(log_field) {
        fill(inp, log_field.to_string(), 6, "default size: 64 entries")?;
    }
    if !inp.given(&format!("{ctx}.uar_page")) {
        fill(
            inp,
            format!("{ctx}.uar_page"),
            hca.uar() as u64,
            "the UAR of bring-up",
        )?;
    }
    if op == Opcode::CREATE_CQ {
        if !inp.given("cq_context.c_eqn_or_apu_element") {
            fill(
                inp,
                "cq_context.c_eqn_or_apu_element".into(),
                hca.comp_eqn() as u64,
                "the completion EQ of bring-up",
            )?;
        }
        if !inp.given("cq_context.dbr_addr") {
            let dbr = hca.hal().alloc_dma(4096).map_err(|e| {
                CliError::failed(format!("no DMA memory for the doorbell record: {e}"), "")
            })?;
            fill(
                inp,
                "cq_context.dbr_addr".into(),
                dbr.iova(),
                "a doorbell record the tool allocated",
            )?;
            keep.push(dbr);
        }
    }
    if !inp.has_pas() {
        let log = inp.get(log_field).unwrap_or(6) as u32;
        let bytes = (1usize << log) * entry;
        let pages = bytes.div_ceil(4096);
        let max_pages = (MAX_CMD_LEN - inp.layout.size) / 8;
        if pages > max_pages {
            return Err(CliError::usage(
                format!("{log_field} = {log} needs {pages} pages, more than one command's page list holds ({max_pages})"),
                "use a smaller size, or give pas[i] yourself",
            ));
        }
        let ring = hca
            .hal()
            .alloc_dma(pages * 4096)
            .map_err(|e| CliError::failed(format!("no DMA memory for the ring: {e}"), ""))?;
        for i in 0..(1usize << log) {
            ring.write_u8(i * entry + owner_byte, owner_init);
        }
        for p in 0..pages {
            inp.put(
                &format!("pas[{p}]"),
                &format!("{:#x}", ring.iova() + (p * 4096) as u64),
            )?;
        }
        filled.push((
            "pas[..]".into(),
            format!(
                "{pages} page(s) at {:#x} ({} entries of {entry} bytes the tool allocated)",
                ring.iova(),
                1usize << log
            ),
        ));
        keep.push(ring);
    }
    Ok(())
}

/// The command that undoes a create, if the opcode creates something.
fn undo(
    op: Opcode,
    out_layout: &'static Layout,
    out: &[u8],
) -> Option<(Opcode, &'static str, u64)> {
    let (undo_op, out_name, in_name) = match op {
        Opcode::CREATE_CQ => (Opcode::DESTROY_CQ, "cqn", "cqn"),
        Opcode::CREATE_EQ => (Opcode::DESTROY_EQ, "eq_number", "eq_number"),
        Opcode::CREATE_SRQ => (Opcode::DESTROY_SRQ, "srqn", "srqn"),
        Opcode::CREATE_RMP => (Opcode::DESTROY_RMP, "rmpn", "rmpn"),
        Opcode::ALLOC_PD => (Opcode::DEALLOC_PD, "pd", "pd"),
        Opcode::ALLOC_UAR => (Opcode::DEALLOC_UAR, "uar", "uar"),
        _ => return None,
    };
    let v = out_field(out_layout, out, out_name)?;
    Some((undo_op, in_name, v))
}

/// Run `mlx5 cmd`. Prints (human) as it goes; returns the JSON result and
/// whether the command succeeded.
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
    let op = crate::target::parse_opcode(name)?;
    if op == Opcode::MANAGE_PAGES {
        return Err(CliError::usage(
            "MANAGE_PAGES belongs to the driver's page manager",
            "pages are given at bring-up and taken back at teardown; `mlx5 trace` shows every MANAGE_PAGES",
        ));
    }
    let Some((in_layout, out_layout)) = op.layouts() else {
        return Err(CliError::usage(
            format!("{op} has no layout in mlx5-regs, so its fields cannot be named"),
            "commands with layouts: ".to_string()
                + &Opcode::ALL
                    .iter()
                    .filter(|o| o.layouts().is_some() && **o != Opcode::MANAGE_PAGES)
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
                format!("'{f}' is not field=value"),
                "e.g. op_mod=1 or cq_context.log_cq_size=10",
            ));
        };
        if k == "opcode" {
            return Err(CliError::usage(
                "the opcode comes from the command name",
                "drop opcode=...",
            ));
        }
        inp.put_user(k.trim(), v.trim())?;
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
