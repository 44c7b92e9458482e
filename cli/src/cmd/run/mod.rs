//! `mlx5 run FILE` and `mlx5 shell`: a sequence of firmware commands and
//! driver steps on one brought-up device, with `expect` checks and
//! variables (the language: [`parse`]). Objects the script leaves behind
//! are destroyed before teardown.

use std::collections::BTreeMap;

use mlx5_hal::{DmaRegion, Hal};
use mlx5_regs::decode::{decode_command, DecodeOptions, Direction};
use mlx5_regs::{CmdStatus, Layout, Opcode};
use serde_json::{json, Map, Value};

use crate::common::error::CliError;
use crate::common::session::TracedHca;
use crate::regs::fields::{out_field, Input};
use crate::scenario::flow::Flow;
use crate::scenario::objects::Objects;

pub mod parse;
mod steps;
pub mod top;

pub use top::{run, shell};

use parse::{Cond, Line, Stmt};

/// What a statement gave: status, syndrome, output, named results.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Firmware status (0 OK); `None` when the statement failed without a
    /// firmware status (a timeout, a refused post).
    pub status: Option<u8>,
    /// Syndrome.
    pub syndrome: u32,
    /// The failure in words, if it failed.
    pub error: Option<String>,
    /// Output layout and bytes of a command.
    pub out: Option<(&'static Layout, Vec<u8>, Opcode, u16)>,
    /// Named results of a driver step (`cqn`, `received`).
    pub fields: BTreeMap<String, u64>,
    /// The object the statement created (`$cq` alone).
    pub primary: Option<u64>,
    /// Fields the tool filled in, with why.
    pub filled: Vec<(String, String)>,
}

impl Outcome {
    fn ok(&self) -> bool {
        self.error.is_none()
    }

    /// A field of the output or of the step's results.
    fn field(&self, name: &str) -> Option<u64> {
        if let Some(v) = self.fields.get(name) {
            return Some(*v);
        }
        let (l, b, ..) = self.out.as_ref()?;
        out_field(l, b, name)
    }

    /// Decoded non-zero output fields (`all`: every field).
    pub fn decoded(&self, all: bool) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = self
            .fields
            .iter()
            .map(|(k, x)| (k.clone(), format!("{x:#x}")))
            .collect();
        if let Some((_, b, op, op_mod)) = &self.out {
            let mut s = String::new();
            let opts = DecodeOptions {
                skip_zero: !all,
                max_array: 16,
            };
            let _ = decode_command(*op, *op_mod, Direction::Output, b, opts, &mut s);
            v.extend(
                s.lines()
                    .filter_map(|l| l.split_once(" = "))
                    .filter(|(k, _)| !matches!(k.trim(), "status" | "syndrome"))
                    .map(|(k, x)| (k.trim().to_string(), x.trim().to_string())),
            );
        }
        v
    }

    fn status_text(&self) -> String {
        match (self.status, &self.error) {
            (Some(0), None) => "OK".into(),
            (Some(s), _) => format!(
                "{} syndrome {:#x}",
                CmdStatus(s).name().unwrap_or("UNKNOWN"),
                self.syndrome
            ),
            (None, Some(e)) => format!("FAILED ({e})"),
            (None, None) => "OK".into(),
        }
    }
}

/// A create the script made with a named command, destroyed at the end
/// unless the script destroys it: (undo opcode, its field, value).
type Created = (Opcode, &'static str, u64);

/// One brought-up device running statements.
pub struct Session<'h, 't, H: Hal> {
    hca: &'h TracedHca<'t, H>,
    vars: BTreeMap<String, Outcome>,
    last: Option<Outcome>,
    created: Vec<Created>,
    keep: Vec<DmaRegion<H>>,
    objs: Objects<H>,
    flow: Flow,
    /// Print zero output fields too.
    pub all_fields: bool,
    /// Human output.
    pub human: bool,
}

/// How a statement ended.
pub enum Verdict {
    /// As wanted.
    Pass,
    /// A command or step failed (no `expect` on its status followed).
    Failed(String),
    /// An `expect` did not hold.
    ExpectFailed(String),
}

impl<'h, 't, H: Hal> Session<'h, 't, H> {
    /// A session on a brought-up HCA; the objects of bring-up are variables
    /// (`$pd`, `$uar`, `$comp_eqn`, `$async_eqn`, `$dma_lkey`).
    pub fn new(hca: &'h TracedHca<'t, H>, human: bool) -> Self {
        let mut vars = BTreeMap::new();
        let mut put = |n: &str, v: u64| {
            vars.insert(
                n.to_string(),
                Outcome {
                    status: Some(0),
                    primary: Some(v),
                    ..Outcome::default()
                },
            );
        };
        put("pd", hca.pd() as u64);
        put("uar", hca.uar() as u64);
        put("comp_eqn", hca.comp_eqn() as u64);
        put("async_eqn", hca.async_eqn() as u64);
        put("dma_lkey", hca.default_lkey() as u64);
        Session {
            hca,
            vars,
            last: None,
            created: Vec::new(),
            keep: Vec::new(),
            objs: Objects::new(),
            flow: Flow::new(),
            all_fields: false,
            human,
        }
    }

    /// `$x` or `$x.field`, or the value itself.
    fn value(&self, no: usize, v: &str) -> Result<String, CliError> {
        let Some(r) = v.strip_prefix('$') else {
            return Ok(v.to_string());
        };
        let (name, field) = match r.split_once('.') {
            Some((n, f)) => (n, Some(f)),
            None => (r, None),
        };
        let known = || {
            self.vars
                .keys()
                .map(|k| format!("${k}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let var = self.vars.get(name).ok_or_else(|| {
            CliError::usage(
                format!("line {no}: no variable ${name}"),
                format!(
                    "bind one with `let {name} = ...`; variables so far: {}",
                    known()
                ),
            )
        })?;
        let got = match field {
            None => var.primary,
            Some(f) => var.field(f),
        };
        got.map(|x| format!("{x:#x}")).ok_or_else(|| {
            CliError::usage(
                format!(
                    "line {no}: ${name} has no {}",
                    field.map_or("object number".to_string(), |f| format!("field {f}"))
                ),
                match field {
                    None => "use $NAME.FIELD with a field of its output".to_string(),
                    Some(_) => format!(
                        "its fields: {}",
                        var.decoded(true)
                            .iter()
                            .map(|(k, _)| k.clone())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                },
            )
        })
    }

    /// Run one statement; `next` is the statement after it (an `expect` on
    /// status there makes a failure expected rather than fatal).
    pub fn exec(&mut self, line: &Line, next: Option<&Line>) -> Result<(Verdict, Value), CliError> {
        let outcome = match &line.stmt {
            Stmt::Expect(conds) => return self.expect(line.no, conds),
            Stmt::Cmd { op, fields } => {
                let mut given = Vec::new();
                for (k, v) in fields {
                    given.push(format!("{k}={}", self.value(line.no, v)?));
                }
                let (op2, inp, out_layout) = crate::cmd::command::parse_input(*op, &given)
                    .map_err(|e| {
                        CliError::usage(
                            format!("line {}: {}", line.no, e.message()),
                            e.hint().unwrap_or_default(),
                        )
                    })?;
                self.command(op2, inp, Some(out_layout), None)?
            }
            Stmt::Raw { bytes, out_len } => {
                let op = Opcode(u16::from_be_bytes([bytes[0], bytes[1]]));
                let layouts = op.layouts();
                let mut inp = Input::new(
                    op,
                    layouts.map_or(&mlx5_regs::layouts::cmd_in::LAYOUT, |l| l.0),
                );
                inp.buf = bytes.clone();
                let out_len = out_len.or(layouts.map(|l| l.1.size)).unwrap_or(16);
                self.command(op, inp, layouts.map(|l| l.1), Some(out_len))?
            }
            Stmt::Step { kind, args } => self.step(*kind, args, line.no)?,
        };
        if let Some(b) = &line.bind {
            self.vars.insert(b.clone(), outcome.clone());
        }
        let expected = matches!(next, Some(Line { stmt: Stmt::Expect(c), .. }) if c.iter().any(|c| c.key == "status" || c.key == "syndrome"));
        let verdict = match &outcome.error {
            Some(e) if !expected => Verdict::Failed(e.clone()),
            _ => Verdict::Pass,
        };
        if self.human {
            outln!("[{}] {}  ->  {}", line.no, line.text, outcome.status_text());
            for (k, v) in &outcome.filled {
                outln!("      (filled by the tool) {k} = {v}");
            }
            for (k, v) in outcome.decoded(self.all_fields) {
                outln!("      {k} = {v}");
            }
        }
        let mut out = Map::new();
        for (k, v) in outcome.decoded(self.all_fields) {
            out.insert(k, Value::from(v));
        }
        let doc = json!({
            "status": outcome.status.map(|s| CmdStatus(s).name().unwrap_or("UNKNOWN").to_string()),
            "syndrome": format!("{:#x}", outcome.syndrome),
            "error": outcome.error,
            "output": out,
            "object": outcome.primary,
            "filled_by_tool": outcome.filled.iter().map(|(k, v)| (k.clone(), Value::from(v.as_str()))).collect::<Map<String, Value>>(),
        });
        self.last = Some(outcome);
        Ok((verdict, doc))
    }

    fn command(
        &mut self,
        op: Opcode,
        mut inp: Input,
        out_layout: Option<&'static Layout>,
        out_len: Option<usize>,
    ) -> Result<Outcome, CliError> {
        let mut filled = Vec::new();
        if out_len.is_none() {
            crate::regs::fill::provide(op, self.hca, &mut inp, &mut self.keep, &mut filled)?;
        }
        let op_mod = u16::from_be_bytes([inp.buf[6], inp.buf[7]]);
        let returned = if op == Opcode::ACCESS_REG {
            inp.buf.len() - 16
        } else {
            0
        };
        let len = out_len.unwrap_or(out_layout.map_or(16, |l| l.size) + returned);
        let mut out = vec![0u8; len];
        let res = self.hca.exec(&inp.buf, &mut out);
        let mut o = Outcome {
            filled,
            ..Outcome::default()
        };
        match res {
            Ok(()) => o.status = Some(0),
            Err(mlx5_driver::Error::Command {
                status, syndrome, ..
            }) => {
                o.status = Some(status.0);
                o.syndrome = syndrome;
                o.error = Some(format!(
                    "{op} failed: status {} syndrome {syndrome:#x}",
                    status.name().unwrap_or("UNKNOWN")
                ));
            }
            Err(e) => o.error = Some(format!("{op}: {e} (errno {})", e.errno())),
        }
        if let Some(l) = out_layout {
            o.out = Some((l, out.clone(), op, op_mod));
            if o.ok() {
                if let Some((undo_op, field, v)) = crate::regs::fill::undo(op, l, &out) {
                    o.primary = Some(v);
                    self.created.push((undo_op, field, v));
                }
            }
        }
        if o.ok() {
            // A destroy the script sent itself: nothing to undo at the end.
            self.created
                .retain(|(u, f, v)| !(*u == op && inp.get(f) == Some(*v)));
        }
        Ok(o)
    }

    fn expect(&mut self, no: usize, conds: &[Cond]) -> Result<(Verdict, Value), CliError> {
        let Some(last) = self.last.clone() else {
            return Err(CliError::usage(
                format!("line {no}: expect has nothing to check"),
                "put it after a command or step",
            ));
        };
        let mut failed = Vec::new();
        for c in conds {
            let (got, want): (Option<u64>, u64) = match c.key.as_str() {
                "status" => {
                    let want = if c.value.eq_ignore_ascii_case("ok") {
                        0
                    } else {
                        crate::common::target::parse_status(&c.value)?.0 as u64
                    };
                    (last.status.map(u64::from), want)
                }
                "syndrome" => (
                    last.status.map(|_| last.syndrome as u64),
                    parse_num(no, &self.value(no, &c.value)?)?,
                ),
                k => (last.field(k), parse_num(no, &self.value(no, &c.value)?)?),
            };
            let holds = match got {
                Some(g) => (g == want) != c.neg,
                None => false,
            };
            if !holds {
                let shown = match (c.key.as_str(), got) {
                    ("status", Some(g)) => {
                        CmdStatus(g as u8).name().unwrap_or("UNKNOWN").to_string()
                    }
                    ("status", None) => format!(
                        "no firmware status ({})",
                        last.error.clone().unwrap_or_default()
                    ),
                    (_, Some(g)) => format!("{g:#x}"),
                    (k, None) => format!("no field {k}"),
                };
                failed.push(format!(
                    "{} {} {}: got {shown}",
                    c.key,
                    if c.neg { "!=" } else { "=" },
                    c.value
                ));
            }
        }
        if self.human {
            outln!(
                "[{no}] expect  ->  {}",
                if failed.is_empty() {
                    "holds".to_string()
                } else {
                    format!("FAILED: {}", failed.join("; "))
                }
            );
        }
        let doc = json!({ "expect_failed": failed });
        if failed.is_empty() {
            Ok((Verdict::Pass, doc))
        } else {
            Ok((Verdict::ExpectFailed(failed.join("; ")), doc))
        }
    }

    /// Destroy what the script left: the named commands' creates, newest
    /// first (a QP of the script may use a CQ of the driver steps), then
    /// the driver steps' objects. Returns one line per object.
    pub fn cleanup(&mut self) -> (Vec<String>, Result<(), CliError>) {
        let mut lines = Vec::new();
        let mut res = Ok(());
        while let Some((op, field, v)) = self.created.pop() {
            let Some((il, ol)) = op.layouts() else {
                continue;
            };
            let mut i = Input::new(op, il);
            if i.put(field, &v.to_string()).is_err() {
                continue;
            }
            let mut out = vec![0u8; ol.size];
            match self.hca.exec(&i.buf, &mut out) {
                Ok(()) => lines.push(format!("{op} {field} {v:#x}: OK")),
                Err(e) => {
                    lines.push(format!("{op} {field} {v:#x}: {e}"));
                    if res.is_ok() {
                        res = Err(CliError::driver(format!("cleanup {op}"), e));
                    }
                }
            }
        }
        let (more, r) = self.objs.destroy(self.hca);
        lines.extend(more);
        self.keep.clear();
        (lines, res.and(r))
    }
}

fn parse_num(no: usize, v: &str) -> Result<u64, CliError> {
    match v {
        "true" => return Ok(1),
        "false" => return Ok(0),
        _ => {}
    }
    crate::common::target::parse_u64(v).map_err(|_| {
        CliError::usage(
            format!(
                "line {no}: '{}' is not a number",
                crate::common::error::quote(v)
            ),
            "decimal or 0x hex",
        )
    })
}
