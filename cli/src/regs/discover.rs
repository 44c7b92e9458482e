//! Discovery for `mlx5 cmd`: every command with a layout (`--list`), a
//! command's fields with widths and what the tool fills (`--fields`),
//! and symbolic `op_mod` values (close names: `crate::common::text`).

use mlx5_regs::consts::op_mod;
use mlx5_regs::{Kind, Layout, Opcode};
use serde_json::{json, Value};

use crate::common::error::CliError;

/// Command-line name of an opcode (`create-cq`).
pub fn cli_name(op: Opcode) -> Option<String> {
    op.name().map(|n| n.to_ascii_lowercase().replace('_', "-"))
}

/// Every command `cmd` can build by field name.
pub fn commands() -> Vec<(Opcode, String)> {
    Opcode::ALL
        .iter()
        .filter(|o| o.layouts().is_some() && **o != Opcode::MANAGE_PAGES)
        .filter_map(|o| cli_name(*o).map(|n| (*o, n)))
        .collect()
}

/// Symbolic op_mod values of an opcode: (name, value).
pub fn op_mods(op: Opcode) -> Vec<(String, u16)> {
    let caps: &[(&str, u16)] = &[
        ("general", op_mod::CAP_GENERAL),
        ("odp", op_mod::CAP_ODP),
        ("atomic", op_mod::CAP_ATOMIC),
        ("roce", op_mod::CAP_ROCE),
        ("general_2", op_mod::CAP_GENERAL_2),
    ];
    match op {
        Opcode::QUERY_HCA_CAP => {
            let mut v = vec![("max".to_string(), 0), ("cur".to_string(), 1)];
            for (n, t) in caps {
                v.push((format!("{n}.max"), op_mod::query_hca_cap(*t, false)));
                v.push((format!("{n}.cur"), op_mod::query_hca_cap(*t, true)));
            }
            v
        }
        Opcode::SET_HCA_CAP => caps
            .iter()
            .map(|(n, t)| (n.to_string(), op_mod::set_hca_cap(*t)))
            .collect(),
        Opcode::ACCESS_REG => vec![
            ("write".into(), op_mod::ACCESS_REG_WRITE),
            ("read".into(), op_mod::ACCESS_REG_WRITE + 1),
        ],
        Opcode::MODIFY_CQ => vec![
            ("moderation".into(), op_mod::MODIFY_CQ_MODERATION),
            ("resize".into(), op_mod::MODIFY_CQ_RESIZE),
        ],
        Opcode::QUERY_PAGES => vec![
            ("boot".into(), op_mod::QUERY_PAGES_BOOT),
            ("init".into(), op_mod::QUERY_PAGES_INIT),
            ("regular".into(), op_mod::QUERY_PAGES_REGULAR),
        ],
        _ => Vec::new(),
    }
}

/// `op_mod=NAME` to its number; numbers pass through.
pub fn op_mod_value(op: Opcode, v: &str) -> Result<String, CliError> {
    if v.starts_with(|c: char| c.is_ascii_digit()) || v.starts_with('$') {
        return Ok(v.to_string());
    }
    let names = op_mods(op);
    match names.iter().find(|(n, _)| n.eq_ignore_ascii_case(v)) {
        Some((_, x)) => Ok(x.to_string()),
        None => Err(CliError::usage(
            format!(
                "'{}' is not an op_mod of {op}",
                crate::common::error::quote(v)
            ),
            if names.is_empty() {
                "give a number".to_string()
            } else {
                format!(
                    "names: {}; or a number",
                    names
                        .iter()
                        .map(|(n, x)| format!("{n} ({x:#x})"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            },
        )),
    }
}

fn walk(l: &Layout, prefix: &str, base: u32, out: &mut Vec<(String, u32, u32, &'static str)>) {
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
            Kind::Sub(sub) => walk(sub, &n, base + f.bit_off, out),
            Kind::Array { count } => out.push((
                format!(
                    "{n}[{}]",
                    if count == 0 {
                        "..".to_string()
                    } else {
                        count.to_string()
                    }
                ),
                base + f.bit_off,
                f.width,
                "array",
            )),
            Kind::Bytes | Kind::Union(_) => out.push((n, base + f.bit_off, f.width, "bytes")),
            Kind::Scalar => out.push((n, base + f.bit_off, f.width, "")),
        }
    }
}

/// `mlx5 cmd --list`.
pub fn list(json_mode: bool) -> Value {
    let cmds = commands();
    if !json_mode {
        outln!(
            "{} commands with a layout (mlx5 cmd NAME --fields shows one):",
            cmds.len()
        );
        for (op, n) in &cmds {
            outln!("  {n:<28} {:#06x}", op.0);
        }
    }
    json!({"commands": cmds.iter().map(|(o, n)| json!({"name": n, "opcode": o.0})).collect::<Vec<_>>()})
}

/// `mlx5 cmd NAME --fields`.
pub fn fields(op: Opcode, json_mode: bool) -> Value {
    let Some((inl, outl)) = op.layouts() else {
        return Value::Null;
    };
    let filled = crate::regs::fill::describe(op);
    let mut v = json!({"opcode": op.to_string(), "opcode_value": op.0});
    for (dir, l) in [("input", inl), ("output", outl)] {
        let mut fs = Vec::new();
        walk(l, "", 0, &mut fs);
        if !json_mode {
            outln!("{op:?} {dir} ({}, {} bytes):", l.name, l.size);
            outln!("  {:<56} {:>6} {:>5}  default", "field", "bit", "width");
        }
        let mut rows = Vec::new();
        for (n, off, w, kind) in fs {
            let fill = if dir == "input" {
                filled.iter().find(|(f, _)| *f == n).map(|(_, w)| w.clone())
            } else {
                None
            };
            let def = match (n.as_str(), &fill) {
                ("opcode", _) if dir == "input" => "from the name".to_string(),
                (_, Some(f)) => format!("filled: {f}"),
                _ => "0".to_string(),
            };
            if !json_mode {
                outln!(
                    "  {n:<56} {off:>6} {w:>5}{}  {def}",
                    if kind.is_empty() { "" } else { "*" }
                );
            }
            rows.push(json!({"name": n, "bit_offset": off, "width": w, "kind": if kind.is_empty() { "scalar" } else { kind }, "default": def}));
        }
        v[dir] = Value::from(rows);
    }
    let mods = op_mods(op);
    if !json_mode && !mods.is_empty() {
        outln!(
            "op_mod names: {}",
            mods.iter()
                .map(|(n, x)| format!("{n}={x:#x}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    v["op_mods"] = mods
        .iter()
        .map(|(n, x)| json!({"name": n, "value": x}))
        .collect();
    v
}
