//! The script language of `mlx5 run` and `mlx5 shell`, one statement a
//! line (docs/cli.md, "Scripts"):
//!
//! ```text
//! # a comment
//! let cq = create-cq cq_context.log_cq_size=8      named command, output bound to $cq
//! modify-cq cqn=$cq.cqn op_mod=0 ...               $cq.cqn: a field of that output
//! raw 080d0000 00000000 00000000 00000000 out=16  raw input bytes (hex), output length
//! expect status=bad_param_err syndrome=0x1234       on the statement before
//! expect cq_context.log_cq_size=8 status!=ok       output fields, = or !=
//! queues cq=63 wr=63 / pair / post-recv n=16 / send n=4 / poll / post / resize / arm / events / destroy
//! ```

use mlx5_regs::Opcode;

use crate::common::error::CliError;
use crate::common::target::parse_opcode;

/// The language, for `mlx5 run --help`.
pub const HELP: &str = "One statement a line; # starts a comment.
  NAME field=value ...        a firmware command by name (as mlx5 cmd); the
                              tool fills rings, page lists, doorbell records,
                              UAR, PD and EQ of CREATE_CQ/EQ/SRQ/RMP/QP/MKEY
  raw HEX... [out=BYTES]      a raw command input (opcode in the first bytes)
  let NAME = STATEMENT        bind the result: $NAME (the object created),
                              $NAME.FIELD (a field of its output)
  expect COND...              on the statement before: ok, status=NAME,
                              syndrome=N, FIELD=VALUE, FIELD!=VALUE
  queues [cq=N] [wr=N]        driver: send CQ, receive CQ, SRQ ($scq $rcq $srq)
  pair [inline=N]             driver: loopback QP pair, RESET->RTS ($sender
                              $receiver)
  post-recv [n=N]             post N receives on the SRQ
  post [n=N] [kind=send|inline] [len=BYTES]   post messages, no wait
  poll                        wait for and check every message in flight
  send [n=N] [kind=..] [len=..]               post and poll
  resize [cq=scq|rcq] [entries=N]             resize a CQ
  arm [limit=N]               arm the SRQ limit
  events                      poll the event queues (limit_events=...)
  destroy                     destroy what the driver steps created
Variables from bring-up: $pd $uar $comp_eqn $async_eqn $dma_lkey.
A failing statement stops the script unless the next line is an expect on
status or syndrome. What the script leaves is destroyed before teardown.

Exit codes: 0 every statement and expect passed; 1 a statement failed;
2 the script does not parse (nothing sent); 3 device not available;
4 an expect did not hold, or teardown found a page or object left.
With --json: statements[] (line, text, result, status, syndrome, output)
and failed_line.

Example:
  let cq = create-cq cq_context.log_cq_size=6
  expect ok
  modify-cq cqn=$cq.cqn op_mod=0 modify_field_select_resize_field_select.modify_field_select.cq_period=1 cq_context.cq_period=16
  let q = query-cq cqn=$cq
  expect cq_context.cq_period=16
  destroy-cq cqn=$cq";

/// A driver step: what the driver does with several commands and the
/// queues' memory (`mlx5_driver`'s CQ, SRQ, QP calls).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    /// Send CQ, receive CQ, SRQ (RMP at ISSI 1) and buffers.
    Queues,
    /// The loopback QP pair, connected (RESET -> RTS).
    Pair,
    /// Post receives on the SRQ.
    PostRecv,
    /// Post messages on the sender, no wait.
    Post,
    /// Wait for every message in flight and poll both CQs.
    Poll,
    /// Post and poll.
    Send,
    /// Resize a CQ.
    Resize,
    /// Arm the SRQ limit.
    Arm,
    /// Poll the event queues.
    Events,
    /// Destroy what the steps created.
    Destroy,
}

/// Every step word with its arguments, for errors and `--help`.
pub const STEPS: &[(&str, StepKind, &[&str])] = &[
    ("queues", StepKind::Queues, &["cq", "wr"]),
    ("pair", StepKind::Pair, &["inline"]),
    ("post-recv", StepKind::PostRecv, &["n"]),
    ("post", StepKind::Post, &["n", "kind", "len"]),
    ("poll", StepKind::Poll, &[]),
    ("send", StepKind::Send, &["n", "kind", "len"]),
    ("resize", StepKind::Resize, &["cq", "entries"]),
    ("arm", StepKind::Arm, &["limit"]),
    ("events", StepKind::Events, &[]),
    ("destroy", StepKind::Destroy, &[]),
];

/// One condition of an `expect` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cond {
    /// `status`, `syndrome`, `ok`, or an output field.
    pub key: String,
    /// `!=` rather than `=`.
    pub neg: bool,
    /// The expected value (may name a variable).
    pub value: String,
}

/// A statement.
#[derive(Debug, Clone)]
pub enum Stmt {
    /// A firmware command by name with field values.
    Cmd {
        /// The opcode.
        op: Opcode,
        /// (field, value) pairs; values may name variables.
        fields: Vec<(String, String)>,
    },
    /// A raw command input.
    Raw {
        /// The input bytes.
        bytes: Vec<u8>,
        /// Output length (default: the layout's, else 16).
        out_len: Option<usize>,
    },
    /// A driver step.
    Step {
        /// Which.
        kind: StepKind,
        /// (name, value) arguments.
        args: Vec<(String, String)>,
    },
    /// Conditions on the statement before.
    Expect(Vec<Cond>),
}

/// A parsed line.
#[derive(Debug, Clone)]
pub struct Line {
    /// 1-based line number in the file.
    pub no: usize,
    /// The text as written.
    pub text: String,
    /// `let NAME =`: the variable the result is bound to.
    pub bind: Option<String>,
    /// The statement.
    pub stmt: Stmt,
}

fn err(no: usize, what: impl Into<String>, hint: impl Into<String>) -> CliError {
    CliError::usage(format!("line {no}: {}", what.into()), hint)
}

fn is_ident(s: &str) -> bool {
    !s.is_empty()
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with(|c: char| c.is_ascii_digit())
}

fn kv(no: usize, t: &str) -> Result<(String, String), CliError> {
    t.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .filter(|(k, v)| !k.is_empty() && !v.is_empty())
        .ok_or_else(|| {
            err(
                no,
                format!("'{}' is not name=value", crate::common::error::quote(t)),
                "e.g. cq_context.log_cq_size=8",
            )
        })
}

fn hex_bytes(no: usize, toks: &[&str]) -> Result<Vec<u8>, CliError> {
    let mut hex = String::new();
    for t in toks {
        let t = t.strip_prefix("0x").unwrap_or(t);
        hex.push_str(t);
    }
    if hex.is_empty() || !hex.len().is_multiple_of(2) || !hex.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return Err(err(
            no,
            "raw needs an even number of hex digits",
            "e.g. raw 080d0000 00000000 00000000 00000000 (the NOP input, 16 bytes)",
        ));
    }
    Ok((0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap_or(0))
        .collect())
}

/// Parse one line (`None` for a blank line or a comment).
pub fn parse_line(no: usize, text: &str) -> Result<Option<Line>, CliError> {
    let body = text.split('#').next().unwrap_or("").trim();
    if body.is_empty() {
        return Ok(None);
    }
    let mut toks: Vec<&str> = body.split_whitespace().collect();
    let mut bind = None;
    if toks[0] == "let" {
        if toks.len() < 4 || toks[2] != "=" || !is_ident(toks[1]) {
            return Err(err(
                no,
                "a binding is `let NAME = STATEMENT`",
                "e.g. let cq = create-cq",
            ));
        }
        bind = Some(toks[1].to_string());
        toks.drain(..3);
    }
    let word = toks[0];
    let rest = &toks[1..];
    let stmt = if word == "expect" {
        if bind.is_some() {
            return Err(err(no, "expect binds nothing", "drop the `let NAME =`"));
        }
        if rest.is_empty() {
            return Err(err(
                no,
                "expect needs a condition",
                "e.g. expect ok, expect status=bad_param_err, expect cqn!=0",
            ));
        }
        let mut conds = Vec::new();
        for t in rest {
            if *t == "ok" {
                conds.push(Cond {
                    key: "status".into(),
                    neg: false,
                    value: "ok".into(),
                });
                continue;
            }
            let (k, neg, v) = match t.split_once("!=") {
                Some((k, v)) => (k, true, v),
                None => {
                    let (k, v) = kv(no, t)?;
                    conds.push(Cond {
                        key: k,
                        neg: false,
                        value: v,
                    });
                    continue;
                }
            };
            if k.is_empty() || v.is_empty() {
                return Err(err(
                    no,
                    format!("'{}' is not name!=value", crate::common::error::quote(t)),
                    "e.g. cqn!=0",
                ));
            }
            conds.push(Cond {
                key: k.into(),
                neg,
                value: v.into(),
            });
        }
        Stmt::Expect(conds)
    } else if word == "raw" {
        let (opts, hex): (Vec<&str>, Vec<&str>) = rest.iter().partition(|t| t.contains('='));
        let mut out_len = None;
        for o in opts {
            match kv(no, o)? {
                (k, v) if k == "out" => {
                    let n = crate::common::target::parse_u64(&v)
                        .ok()
                        .filter(|n| (16..=mlx5_driver::cmd::MAX_CMD_LEN as u64).contains(n))
                        .ok_or_else(|| {
                            err(
                                no,
                                format!(
                                    "out={v} is not an output length of 16 to {} bytes",
                                    mlx5_driver::cmd::MAX_CMD_LEN
                                ),
                                "e.g. out=16",
                            )
                        })?;
                    out_len = Some(n as usize);
                }
                (k, _) => {
                    return Err(err(
                        no,
                        format!("raw takes out=BYTES, not {k}"),
                        "raw HEX... [out=BYTES]",
                    ))
                }
            }
        }
        let bytes = hex_bytes(no, &hex)?;
        if bytes.len() < 8 {
            return Err(err(
                no,
                "a command input is at least 8 bytes (opcode, op_mod)",
                "give the whole input",
            ));
        }
        Stmt::Raw { bytes, out_len }
    } else if let Some((_, kind, allowed)) = STEPS.iter().find(|(w, ..)| *w == word) {
        let mut args = Vec::new();
        for t in rest {
            let (k, v) = kv(no, t)?;
            if !allowed.contains(&k.as_str()) {
                return Err(err(
                    no,
                    format!(
                        "{word} takes no argument '{}'",
                        crate::common::error::quote(&k)
                    ),
                    if allowed.is_empty() {
                        format!("{word} takes no arguments")
                    } else {
                        format!("{word} takes: {}", allowed.join(", "))
                    },
                ));
            }
            args.push((k, v));
        }
        Stmt::Step { kind: *kind, args }
    } else {
        let op = parse_opcode(word).map_err(|e| {
            let steps: Vec<&str> = STEPS.iter().map(|(w, ..)| *w).collect();
            err(
                no,
                e.message(),
                format!(
                    "{}; driver steps: {}; also raw, expect, let",
                    e.hint().unwrap_or_default(),
                    steps.join(", ")
                ),
            )
        })?;
        let fields = rest
            .iter()
            .map(|t| kv(no, t))
            .collect::<Result<Vec<_>, _>>()?;
        // Check names and constant values now, before the device is touched.
        let probe: Vec<String> = fields
            .iter()
            .map(|(k, v)| {
                if v.starts_with('$') {
                    format!("{k}=0x00")
                } else {
                    format!("{k}={v}")
                }
            })
            .collect();
        crate::cmd::command::check(word, &probe)
            .map_err(|e| err(no, e.message(), e.hint().unwrap_or_default()))?;
        Stmt::Cmd { op, fields }
    };
    Ok(Some(Line {
        no,
        text: text.trim().to_string(),
        bind,
        stmt,
    }))
}

/// Parse a whole script; the first error names its line.
pub fn parse(text: &str) -> Result<Vec<Line>, CliError> {
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        if let Some(line) = parse_line(i + 1, l)? {
            if matches!(line.stmt, Stmt::Expect(_)) && out.is_empty() {
                return Err(err(
                    i + 1,
                    "expect has no statement before it to check",
                    "put it after a command or step",
                ));
            }
            out.push(line);
        }
    }
    Ok(out)
}
