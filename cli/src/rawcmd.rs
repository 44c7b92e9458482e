//! `mlx5 cmd NAME field=value ...`: one firmware command, built from the
//! mlx5-regs layout by field name, sent with `Hca::exec` on a brought-up
//! HCA, its output decoded. For CREATE_CQ and CREATE_EQ the tool provides
//! what the command points at (ring memory and page list, doorbell record,
//! UAR, EQ number) unless given; objects a command creates are destroyed
//! again before teardown.

use mlx5_driver::cmd::MAX_CMD_LEN;
use mlx5_driver::stats::CmdOutcome;
use mlx5_hal::{DmaRegion, Hal};
use mlx5_regs::decode::{decode_command, DecodeOptions, Direction};
use mlx5_regs::field::{read_bits, write_bits};
use mlx5_regs::{Kind, Layout, Opcode};
use serde_json::{json, Map, Value};

use crate::error::CliError;
use crate::report::Report;
use crate::session::TracedHca;
use crate::target::parse_u64;
use crate::trace::{fmt_ns, outcome_json, outcome_text, Tracer};

/// A field resolved inside a layout.
#[derive(Debug, Clone, Copy)]
struct Place {
    name: &'static str,
    bit_off: u32,
    width: u32,
    bytes: bool,
    /// Bytes the buffer must have for this field.
    need: usize,
}

fn leaf_names(l: &Layout, prefix: &str, out: &mut Vec<String>) {
    for f in l.fields {
        if f.name.starts_with("reserved") {
            continue;
        }
        let n = if prefix.is_empty() {
            f.name.to_string()
        } else {
            format!("{prefix}.{}", f.name)
        };
        match f.kind {
            Kind::Sub(sub) => leaf_names(sub, &n, out),
            Kind::Array { .. } => out.push(format!("{n}[i]")),
            _ => out.push(n),
        }
    }
}

fn resolve(layout: &'static Layout, path: &str) -> Result<Place, CliError> {
    let parts: Vec<&str> = path.split('.').collect();
    let mut cur = layout;
    let mut base = 0u32;
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        let (name, idx) = match part.split_once('[') {
            Some((n, rest)) => {
                let idx = rest
                    .strip_suffix(']')
                    .and_then(|s| parse_u64(s).ok())
                    .ok_or_else(|| {
                        CliError::usage(
                            format!("bad array index in '{path}'"),
                            "write array elements as name[3]=value",
                        )
                    })?;
                (n, Some(idx as u32))
            }
            None => (*part, None),
        };
        let Some(f) = cur.field(name) else {
            let mut all = Vec::new();
            leaf_names(layout, "", &mut all);
            let want = name.to_ascii_lowercase();
            let close: Vec<String> = all
                .iter()
                .filter(|n| {
                    let last = n.rsplit('.').next().unwrap_or("").trim_end_matches("[i]");
                    let stem = &want[..want.len().min(5)];
                    last.contains(want.as_str())
                        || (want.len() >= 4 && want.contains(last) && last.len() >= 4)
                        || (stem.len() >= 3 && last.starts_with(stem))
                })
                .take(8)
                .cloned()
                .collect();
            let hint = if close.is_empty() {
                format!("fields: {}", all.join(", "))
            } else {
                format!("did you mean: {}?", close.join(", "))
            };
            return Err(CliError::usage(
                format!("'{path}' is not a field of {}", layout.name),
                hint,
            ));
        };
        let off = base + f.bit_off;
        match (f.kind, last, idx) {
            (Kind::Sub(sub), false, None) => {
                base = off;
                cur = sub;
            }
            (Kind::Sub(_), true, _) => {
                return Err(CliError::usage(
                    format!("'{path}' is a structure, not a field"),
                    format!("set one of its fields, e.g. {path}.<field>"),
                ))
            }
            (Kind::Scalar, true, None) => {
                let need = if f.width == 64 {
                    off / 8 + 8
                } else {
                    off / 32 * 4 + 4
                };
                return Ok(Place {
                    name: f.name,
                    bit_off: off,
                    width: f.width,
                    bytes: false,
                    need: need as usize,
                });
            }
            (Kind::Bytes | Kind::Union(_), true, None) => {
                return Ok(Place {
                    name: f.name,
                    bit_off: off,
                    width: f.width,
                    bytes: true,
                    need: ((off + f.width) / 8) as usize,
                })
            }
            (Kind::Array { count }, true, Some(i)) => {
                if count > 0 && i >= count {
                    return Err(CliError::usage(
                        format!("'{path}': {name} has {count} elements"),
                        format!("use an index below {count}"),
                    ));
                }
                let bit = off + i * f.width;
                if count == 0 && (bit / 8) as usize + (f.width / 8) as usize > MAX_CMD_LEN {
                    return Err(CliError::usage(
                        format!("'{path}': the command would exceed {MAX_CMD_LEN} bytes"),
                        "fewer elements",
                    ));
                }
                return Ok(Place {
                    name: f.name,
                    bit_off: bit,
                    width: f.width,
                    bytes: false,
                    need: ((bit + f.width) / 8) as usize,
                });
            }
            (Kind::Array { .. }, _, None) => {
                return Err(CliError::usage(
                    format!("'{path}' is an array"),
                    format!("set elements one by one: {name}[0]=..."),
                ))
            }
            _ => {
                return Err(CliError::usage(
                    format!("'{path}' does not name a field"),
                    "use dotted names of the mlx5_ifc.h layout, e.g. cq_context.log_cq_size",
                ))
            }
        }
    }
    Err(CliError::usage(format!("empty field name in '{path}'"), ""))
}

fn parse_value(p: &Place, path: &str, v: &str) -> Result<Vec<u8>, CliError> {
    let bad = || {
        CliError::usage(
            format!("'{v}' is not a value for {path} ({} bits)", p.width),
            "numbers are decimal or 0x hex; 1-bit flags also take true/false",
        )
    };
    if p.bytes {
        let h = v.strip_prefix("0x").ok_or_else(bad)?;
        if h.len() % 2 != 0 || h.len() / 2 > (p.width / 8) as usize {
            return Err(bad());
        }
        let mut b = vec![0u8; (p.width / 8) as usize - h.len() / 2];
        for i in (0..h.len()).step_by(2) {
            b.push(u8::from_str_radix(&h[i..i + 2], 16).map_err(|_| bad())?);
        }
        return Ok(b);
    }
    let n = match v {
        "true" | "yes" | "on" if p.width == 1 => 1,
        "false" | "no" | "off" if p.width == 1 => 0,
        _ => parse_u64(v).map_err(|_| bad())?,
    };
    if p.width < 64 && n >> p.width != 0 {
        return Err(CliError::usage(
            format!("{path} = {v} does not fit: the field has {} bits", p.width),
            format!("the largest value is {:#x}", (1u64 << p.width) - 1),
        ));
    }
    Ok(n.to_be_bytes().to_vec())
}

/// A command input under construction.
struct Input {
    layout: &'static Layout,
    buf: Vec<u8>,
    set: Vec<String>,
}

impl Input {
    fn new(op: Opcode, layout: &'static Layout) -> Self {
        let mut buf = vec![0u8; layout.size];
        buf[0..2].copy_from_slice(&op.0.to_be_bytes());
        Input {
            layout,
            buf,
            set: Vec::new(),
        }
    }

    fn put(&mut self, path: &str, value: &str) -> Result<(), CliError> {
        let p = resolve(self.layout, path)?;
        let bytes = parse_value(&p, path, value)?;
        if self.buf.len() < p.need {
            self.buf.resize(p.need, 0);
        }
        if p.bytes {
            let s = (p.bit_off / 8) as usize;
            self.buf[s..s + bytes.len()].copy_from_slice(&bytes);
        } else {
            let v = u64::from_be_bytes(bytes.try_into().unwrap_or([0; 8]));
            write_bits(&mut self.buf, p.name, p.bit_off, p.width, v)
                .map_err(|e| CliError::usage(format!("{path}: {e}"), ""))?;
        }
        self.set.push(path.to_string());
        Ok(())
    }

    fn get(&self, path: &str) -> Option<u64> {
        let p = resolve(self.layout, path).ok()?;
        if p.bytes || self.buf.len() < p.need {
            return None;
        }
        Some(read_bits(&self.buf, p.bit_off, p.width))
    }

    fn given(&self, path: &str) -> bool {
        self.set.iter().any(|s| s == path)
    }

    fn has_pas(&self) -> bool {
        self.set.iter().any(|s| s.starts_with("pas["))
    }
}

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

fn out_field(layout: &'static Layout, out: &[u8], name: &str) -> Option<u64> {
    let p = resolve(layout, name).ok()?;
    (out.len() >= p.need).then(|| read_bits(out, p.bit_off, p.width))
}

/// Ring memory and a doorbell record for CREATE_CQ / CREATE_EQ, filled in
/// unless the user gave the fields.
fn provide<H: Hal>(
    op: Opcode,
    hca: &TracedHca<'_, H>,
    inp: &mut Input,
    keep: &mut Vec<DmaRegion<H>>,
    filled: &mut Vec<(String, String)>,
) -> Result<(), CliError> {
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
        inp.set.pop();
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
            inp.set.pop();
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
        inp.put(k.trim(), v.trim())?;
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
    let mut out = vec![0u8; out_layout.size];

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
