//! The saved trace (`mlx5 trace --save FILE`): JSON lines, version 1.
//!
//! Line 1, the header: `{"format": "mlx5-trace", "version": 1, "tool":
//! "mlx5 X.Y.Z", "commit": GIT, "device": LABEL, "device_description":
//! TEXT, "scenario": NAME, "commands": N}`. Then one line per firmware
//! command, in the order they completed: `seq`, `phase` (`bring-up`, `run`
//! or `teardown`: who sent it), `opcode` (name), `opcode_value`, `op_mod`,
//! `input` and `output` (lower-case hex, no separators; output empty when
//! the command never completed), `result` (`ok`, `status`,
//! `delivery_error`, `timeout`, `fatal`), `status` (name), `status_value`,
//! `syndrome` (hex), `latency_ns` (Hal clock: virtual on the model).
//! Readers refuse another `format` or a newer `version`.

use std::io::Write as _;

use mlx5_driver::stats::CmdOutcome;
use serde_json::{json, Value};

use crate::common::error::{quote, CliError};
use crate::common::trace::Recorded;

/// The trace file format version this tool writes and reads.
pub const VERSION: u64 = 1;

/// One command of a saved trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rec {
    /// Sequence number (1-based).
    pub seq: u64,
    /// `bring-up`, `run` or `teardown`.
    pub phase: String,
    /// Opcode value.
    pub opcode: u16,
    /// op_mod.
    pub op_mod: u16,
    /// Input bytes.
    pub input: Vec<u8>,
    /// Output bytes.
    pub output: Vec<u8>,
    /// `ok`, `status`, `delivery_error`, `timeout`, `fatal`.
    pub result: String,
    /// Status value (0 when OK; 0 when there was no status).
    pub status: u8,
    /// Syndrome.
    pub syndrome: u32,
    /// Latency.
    pub latency_ns: u64,
}

impl Rec {
    /// The outcome in words: `OK`, `BAD_PARAM_ERR syndrome 0x1234`, ...
    pub fn outcome(&self) -> String {
        match self.result.as_str() {
            "ok" => "OK".into(),
            "status" => format!(
                "{} syndrome {:#x}",
                mlx5_regs::CmdStatus(self.status)
                    .name()
                    .unwrap_or("UNKNOWN"),
                self.syndrome
            ),
            r => r.to_string(),
        }
    }
}

/// Phases from the tracer's records: the driver's commands before the
/// first run command are bring-up, after it teardown.
pub fn from_records(recs: &[Recorded]) -> Vec<Rec> {
    let mut seen_run = false;
    recs.iter()
        .map(|r| {
            let phase = if !r.driver {
                seen_run = true;
                "run"
            } else if seen_run {
                "teardown"
            } else {
                "bring-up"
            };
            let (result, status, syndrome) = match r.outcome {
                CmdOutcome::Ok => ("ok", 0, 0),
                CmdOutcome::Status { status, syndrome } => ("status", status.0, syndrome),
                CmdOutcome::Delivery(_) => ("delivery_error", 0, 0),
                CmdOutcome::Timeout => ("timeout", 0, 0),
                CmdOutcome::Fatal => ("fatal", 0, 0),
            };
            Rec {
                seq: r.seq,
                phase: phase.into(),
                opcode: r.opcode.0,
                op_mod: r.op_mod,
                input: r.input.clone(),
                output: r.output.clone(),
                result: result.into(),
                status,
                syndrome,
                latency_ns: r.latency_ns,
            }
        })
        .collect()
}

/// Lower-case hex, no separators.
pub fn hex_of(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The trace file's header.
pub fn header(device: &str, description: &str, scenario: &str, n: usize) -> Value {
    json!({
        "format": "mlx5-trace",
        "version": VERSION,
        "tool": format!("mlx5 {}", env!("CARGO_PKG_VERSION")),
        "commit": option_env!("MLX5_GIT_COMMIT"),
        "device": device,
        "device_description": description,
        "scenario": scenario,
        "commands": n,
    })
}

/// Write `header` and `recs` to `path`.
pub fn save(path: &str, header: &Value, recs: &[Rec]) -> Result<(), CliError> {
    let mut s = serde_json::to_string(header).unwrap_or_default();
    s.push('\n');
    for r in recs {
        let op = mlx5_regs::Opcode(r.opcode);
        let line = json!({
            "seq": r.seq,
            "phase": r.phase,
            "opcode": op.to_string(),
            "opcode_value": r.opcode,
            "op_mod": r.op_mod,
            "input": hex_of(&r.input),
            "output": hex_of(&r.output),
            "result": r.result,
            "status": mlx5_regs::CmdStatus(r.status).name().unwrap_or("UNKNOWN"),
            "status_value": r.status,
            "syndrome": format!("{:#x}", r.syndrome),
            "latency_ns": r.latency_ns,
        });
        s.push_str(&serde_json::to_string(&line).unwrap_or_default());
        s.push('\n');
    }
    std::fs::File::create(path)
        .and_then(|mut f| f.write_all(s.as_bytes()))
        .map_err(|e| {
            CliError::failed(
                format!("cannot write the trace to {}: {e}", quote(path)),
                "give --save a path in a writable directory (the trace above was still printed)",
            )
        })
}

/// Read a trace file: its header and commands.
pub fn load(path: &str) -> Result<(Value, Vec<Rec>), CliError> {
    let bad = |what: String| {
        CliError::usage(
            format!("{path}: {what}"),
            "give a file written by `mlx5 trace --save FILE` (docs/cli.md describes the format)",
        )
    };
    let text = std::fs::read_to_string(path).map_err(|e| bad(format!("cannot read: {e}")))?;
    parse(&text, path)
}

/// Read a trace from its text (`name` is how messages call it): its
/// header and commands.
pub fn parse(text: &str, name: &str) -> Result<(Value, Vec<Rec>), CliError> {
    let bad = |what: String| {
        CliError::usage(
            format!("{}: {what}", quote(name)),
            "give a file written by `mlx5 trace --save FILE` (docs/cli.md describes the format)",
        )
    };
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let (_, first) = lines.next().ok_or_else(|| bad("empty".into()))?;
    let head: Value = serde_json::from_str(first).map_err(|e| bad(format!("line 1: {e}")))?;
    if head["format"] != "mlx5-trace" {
        return Err(bad(
            "not an mlx5 trace (no \"format\": \"mlx5-trace\" header)".into(),
        ));
    }
    match head["version"].as_u64() {
        Some(v) if v <= VERSION => {}
        Some(v) => {
            return Err(bad(format!(
                "trace format version {v}; this tool reads up to {VERSION}"
            )))
        }
        None => {
            return Err(bad(format!(
                "the header has no numeric \"version\" (this tool reads up to {VERSION})"
            )))
        }
    }
    let mut recs = Vec::new();
    for (i, l) in lines {
        let no = i + 1;
        let v: Value = serde_json::from_str(l).map_err(|e| bad(format!("line {no}: {e}")))?;
        let num = |k: &str| {
            v[k].as_u64()
                .ok_or_else(|| bad(format!("line {no}: no number \"{k}\"")))
        };
        // Each field read into its real width: a value past it is an
        // error, never taken modulo the width.
        let narrow = |k: &str, max: u64| {
            let n = num(k)?;
            if n > max {
                return Err(bad(format!(
                    "line {no}: \"{k}\" is {n:#x}, past its {}-bit width (at most {max:#x})",
                    64 - max.leading_zeros()
                )));
            }
            Ok(n)
        };
        let bytes = |k: &str| {
            v[k].as_str()
                .and_then(unhex)
                .ok_or_else(|| bad(format!("line {no}: \"{k}\" is not hex")))
        };
        let syndrome = v["syndrome"]
            .as_str()
            .and_then(|s| u32::from_str_radix(s.trim_start_matches("0x"), 16).ok())
            .ok_or_else(|| bad(format!("line {no}: bad \"syndrome\"")))?;
        recs.push(Rec {
            seq: num("seq")?,
            phase: v["phase"].as_str().unwrap_or("run").to_string(),
            opcode: narrow("opcode_value", u16::MAX.into())? as u16,
            op_mod: narrow("op_mod", u16::MAX.into())? as u16,
            input: bytes("input")?,
            output: bytes("output")?,
            result: v["result"].as_str().unwrap_or("ok").to_string(),
            status: narrow("status_value", u8::MAX.into())? as u8,
            syndrome,
            latency_ns: v["latency_ns"].as_u64().unwrap_or(0),
        });
    }
    Ok((head, recs))
}
