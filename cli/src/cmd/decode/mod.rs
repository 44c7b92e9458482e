//! `mlx5 decode`: a hexdump from a bug report (the tool's own, a Linux
//! kernel log's `dump_buf` lines, `print_hex_dump`, plain hex) back into
//! named fields, without a device.

pub mod hexparse;

use mlx5_regs::decode::{decode, decode_command, DecodeOptions, Direction};
use mlx5_regs::layout::Layout;
use mlx5_regs::layouts as l;
use mlx5_regs::Opcode;
use serde_json::{json, Map, Value};

use crate::common::error::CliError;
use hexparse::Buffer;

/// What the bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// A command input (the opcode is in its first two bytes).
    In,
    /// A command output (`--opcode` says whose, unless a header does).
    Out,
    /// A completion queue context.
    Cqc,
    /// An event queue context.
    Eqc,
    /// A shared receive queue context.
    Srqc,
    /// A receive memory pool context (its `wq` inside).
    Rmpc,
    /// A queue pair context.
    Qpc,
    /// A memory key context.
    Mkc,
    /// A 64-byte CQE (an error CQE by its opcode 0xd/0xe).
    Cqe,
    /// A 64-byte EQE (its event data by its type).
    Eqe,
}

/// The options of `mlx5 decode`.
pub struct Opts<'a> {
    /// File, or `-` for stdin.
    pub file: &'a str,
    /// What the bytes are; `None`: what the dump's headers say.
    pub kind: Option<Kind>,
    /// The opcode of an output.
    pub opcode: Option<&'a str>,
    /// op_mod of an output (QUERY_HCA_CAP's capability type).
    pub op_mod: Option<u16>,
    /// Zero fields too.
    pub all_fields: bool,
    /// `--json`.
    pub json: bool,
}

/// Run `mlx5 decode`.
pub fn run(o: &Opts<'_>) -> (Value, Result<(), CliError>) {
    match run_inner(o) {
        Ok(v) => (v, Ok(())),
        Err(e) => (Value::Null, Err(e)),
    }
}

fn read_input(file: &str) -> Result<String, CliError> {
    let r = if file == "-" {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(file)
    };
    r.map_err(|e| {
        CliError::usage(
            format!("cannot read {file}: {e}"),
            "give a file holding the hexdump, or - for stdin",
        )
    })
}

/// The `field = value` lines of one decoded buffer.
pub type FieldLines = Vec<(String, String)>;

/// Decode the hexdump `text` as `o` says (`o.file` and `o.json` are not
/// used): one value per buffer of the wanted kind, with its field lines.
pub fn decode_text(text: &str, o: &Opts<'_>) -> Result<(Vec<Value>, Vec<FieldLines>), CliError> {
    let bufs = hexparse::parse(text)?;
    let cli_op = o
        .opcode
        .map(crate::common::target::parse_opcode)
        .transpose()?;
    // The input's op_mod helps decode the output of the same command.
    let input_op_mod = bufs
        .iter()
        .find(|b| b.dir == Some(Direction::Input) && b.bytes.len() >= 8)
        .map(|b| u16::from_be_bytes([b.bytes[6], b.bytes[7]]));
    let opts = DecodeOptions {
        skip_zero: !o.all_fields,
        max_array: 64,
    };
    let (mut out, mut lines) = (Vec::new(), Vec::new());
    for b in &bufs {
        let kind = match (o.kind, b.dir) {
            (Some(k), _) => k,
            (None, Some(Direction::Input)) => Kind::In,
            (None, Some(Direction::Output)) => Kind::Out,
            (None, None) => {
                return Err(CliError::usage(
                    "the dump does not say what the bytes are",
                    "add --as in|out|cqc|eqc|srqc|rmpc|qpc|mkc|cqe|eqe",
                ))
            }
        };
        // With --as in/out, only the buffers of that direction.
        let wanted_dir = match kind {
            Kind::In => Some(Direction::Input),
            Kind::Out => Some(Direction::Output),
            _ => None,
        };
        if let (Some(w), Some(d)) = (wanted_dir, b.dir) {
            if w != d {
                continue;
            }
        }
        let (v, l) = one(b, kind, cli_op, o.op_mod.or(input_op_mod), opts)?;
        out.push(v);
        lines.push(l);
    }
    if out.is_empty() {
        return Err(CliError::usage(
            "no buffer of that kind in the dump",
            "its `dump command data` headers name INPUT or OUTPUT; --as decides",
        ));
    }
    Ok((out, lines))
}

fn run_inner(o: &Opts<'_>) -> Result<Value, CliError> {
    let text = read_input(o.file)?;
    let (out, lines) = decode_text(&text, o)?;
    if !o.json {
        for (i, v) in out.iter().enumerate() {
            if i > 0 {
                outln!();
            }
            outln!(
                "{} ({} bytes, {} format):",
                v["what"].as_str().unwrap_or(""),
                v["bytes"],
                v["format"].as_str().unwrap_or("")
            );
            if lines[i].is_empty() {
                outln!("  (all fields zero)");
            }
            for (k, x) in &lines[i] {
                outln!("  {k} = {x}");
            }
        }
    }
    Ok(json!({ "buffers": out }))
}

fn one(
    b: &Buffer,
    kind: Kind,
    cli_op: Option<Opcode>,
    op_mod: Option<u16>,
    opts: DecodeOptions,
) -> Result<(Value, Vec<(String, String)>), CliError> {
    let mut text = String::new();
    let fmt_err = |_| CliError::failed("formatting failed", "");
    let what = match kind {
        Kind::In | Kind::Out => {
            let (op, dir, op_mod) = if kind == Kind::In {
                if b.bytes.len() < 8 {
                    return Err(CliError::usage(
                        format!(
                            "a command input is at least 8 bytes; this one {}",
                            b.bytes.len()
                        ),
                        "the opcode and op_mod are in its first 8 bytes",
                    ));
                }
                let op = Opcode(u16::from_be_bytes([b.bytes[0], b.bytes[1]]));
                (
                    op,
                    Direction::Input,
                    u16::from_be_bytes([b.bytes[6], b.bytes[7]]),
                )
            } else {
                let op = cli_op.or(b.opcode.map(Opcode)).ok_or_else(|| {
                    CliError::usage(
                        "an output does not carry its opcode",
                        "add --opcode NAME (and --op-mod N where it matters, as for query-hca-cap)",
                    )
                })?;
                (op, Direction::Output, op_mod.unwrap_or(0))
            };
            let known =
                decode_command(op, op_mod, dir, &b.bytes, opts, &mut text).map_err(fmt_err)?;
            if !known {
                return Err(CliError::usage(
                    format!("{op:?} has no layout in mlx5-regs"),
                    "`mlx5 cmd --list` lists the commands with one",
                ));
            }
            let d = if dir == Direction::Input {
                "input"
            } else {
                "output"
            };
            format!("{op:?} {d}, op_mod {op_mod:#x}")
        }
        Kind::Cqe => {
            // op_own bits 7:4; 0xd requester error, 0xe responder error.
            let opcode = b.bytes.get(63).map_or(0, |x| x >> 4);
            let err = opcode == 0xd || opcode == 0xe;
            let lay = if err {
                &l::err_cqe::LAYOUT
            } else {
                &l::cqe64::LAYOUT
            };
            decode(lay, &b.bytes, opts, &mut text).map_err(fmt_err)?;
            format!("{} (CQE opcode {opcode:#x})", lay.name)
        }
        Kind::Eqe => {
            decode(&l::eqe::LAYOUT, &b.bytes, opts, &mut text).map_err(fmt_err)?;
            let ty = b.bytes.get(1).copied().unwrap_or(0);
            if let (Some(sub), Some(data)) = (eqe_data(ty), b.bytes.get(32..60)) {
                // The union's raw bytes give way to the alternative the
                // event type selects (mlx5_ifc.h `event_data`).
                text = text
                    .lines()
                    .filter(|x| !x.starts_with("event_data ="))
                    .map(|x| format!("{x}\n"))
                    .collect();
                let mut s = String::new();
                decode(sub, data, opts, &mut s).map_err(fmt_err)?;
                for x in s.lines() {
                    text.push_str(&format!("event_data.{}.{x}\n", sub.name));
                }
            }
            format!("eqe (event type {ty:#x})")
        }
        k => {
            let lay = context(k);
            decode(lay, &b.bytes, opts, &mut text).map_err(fmt_err)?;
            lay.name.to_string()
        }
    };
    // Layout order for people; a JSON object for scripts.
    let lines: Vec<(String, String)> = text
        .lines()
        .filter_map(|x| x.split_once(" = "))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let fields: Map<String, Value> = lines
        .iter()
        .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
        .collect();
    let v = json!({
        "what": what,
        "bytes": b.bytes.len(),
        "format": b.format,
        "fields": fields,
    });
    Ok((v, lines))
}

fn context(k: Kind) -> &'static Layout {
    match k {
        Kind::Cqc => &l::cqc::LAYOUT,
        Kind::Eqc => &l::eqc::LAYOUT,
        Kind::Srqc => &l::srqc::LAYOUT,
        Kind::Rmpc => &l::rmpc::LAYOUT,
        Kind::Qpc => &l::qpc::LAYOUT,
        _ => &l::mkc::LAYOUT,
    }
}

/// The `event_data` alternative of an event type (mlx5_ifc.h, PRM "Event
/// Queue Entry"): completion 0x00; QP/SRQ events 0x01-0x03, 0x05, 0x07,
/// 0x10-0x14; CQ error 0x04; port change 0x09; command 0x0a; pages 0x0b.
fn eqe_data(ty: u8) -> Option<&'static Layout> {
    Some(match ty {
        0x00 => &l::comp_event::LAYOUT,
        0x04 => &l::cq_error::LAYOUT,
        0x01..=0x03 | 0x05 | 0x07 | 0x10..=0x14 => &l::qp_events::LAYOUT,
        0x09 => &l::port_state_change_event::LAYOUT,
        0x0a => &l::cmd_inter_comp_event::LAYOUT,
        0x0b => &l::pages_req_event::LAYOUT,
        _ => return None,
    })
}

/// `mlx5 decode --help` epilogue.
pub const HELP: &str = "Formats (detected per line; other lines of a kernel log are skipped):
  cmd[N]: OFF: w0 w1 w2 w3      the tool's `trace --hexdump` and Linux dump_buf
                                (big-endian words; kernel log prefixes allowed)
  OFF: b0 b1 ... b15  ascii     Linux print_hex_dump with one-byte groups
  04 00 00 00 ... or 04000000   plain hex (0x and commas allowed)
A `dump command data NAME(0xOP) INPUT|OUTPUT` header starts a buffer and
says what it is; an offset back to 0 starts another one.

Examples:
  mlx5 decode docs/scripts/create-cq.dump
  dmesg | mlx5 decode - --as out --opcode query-cq
  mlx5 decode cqe.txt --as cqe --json

Exit codes: 0 decoded, 2 unreadable input or bad option.";
