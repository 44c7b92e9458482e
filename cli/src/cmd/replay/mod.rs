//! `mlx5 replay FILE`: a saved trace's commands again on a fresh bring-up,
//! reporting where the answers differ; and `mlx5 diff A B`, two saved
//! traces compared field by field.
//!
//! Replay brings the HCA up with the driver and compares its bring-up
//! commands with the recorded ones, re-sends every recorded run command
//! with its object numbers remapped (CQN, EQN, SRQN/RMPN, QPN, mkey, PD,
//! UAR, XRCD learnt from the earlier outputs of both runs) and its page
//! lists and doorbell records pointing at memory the tool allocates afresh,
//! then tears down with the driver and compares the teardown commands.

pub mod align;
pub mod compare;

use mlx5_hal::{DmaRegion, Hal};
use mlx5_regs::decode::Direction;
use mlx5_regs::Opcode;
use serde_json::{json, Value};

use crate::cmd::replay::align::{align, Step};
use crate::cmd::replay::compare::{class, compare, fields, Class, Difference, Remap};
use crate::common::error::CliError;
use crate::common::record::{self, Rec};
use crate::common::report::Report;
use crate::common::session::{bring_up, teardown, Env, TracedHca};
use crate::common::trace::Tracer;
use crate::regs::fields::Input;

type Outcome = (Value, Result<(), CliError>);

fn phase<'a>(recs: &'a [Rec], p: &str) -> Vec<&'a Rec> {
    recs.iter().filter(|r| r.phase == p).collect()
}

/// Compare two lists of the same phase: aligned by the longest common
/// sequence of opcodes (in linear memory, [`align`]), so one command more
/// or less is one difference and not a cascade.
fn compare_phase(
    a: &[&Rec],
    b: &[&Rec],
    map: &mut Remap,
    inputs: bool,
    data_path: bool,
    diffs: &mut Vec<Difference>,
) {
    let one = |r: &Rec, seq: (u64, u64), mine: bool| Difference {
        seq,
        opcode: Opcode(r.opcode).to_string(),
        place: "sequence",
        field: String::new(),
        a: if mine { "sent".into() } else { "(none)".into() },
        b: if mine { "(none)".into() } else { "sent".into() },
    };
    let ops_a: Vec<u16> = a.iter().map(|r| r.opcode).collect();
    let ops_b: Vec<u16> = b.iter().map(|r| r.opcode).collect();
    for step in align(&ops_a, &ops_b) {
        match step {
            Step::Both(i, j) => diffs.extend(compare(a[i], b[j], map, inputs, data_path)),
            Step::OnlyA(i) => diffs.push(one(a[i], (a[i].seq, 0), true)),
            Step::OnlyB(j) => diffs.push(one(b[j], (0, b[j].seq), false)),
        }
    }
}

/// Run `mlx5 replay`.
pub fn run<H: Hal>(
    hal: H,
    env: &Env<'_>,
    t: &Tracer,
    json_mode: bool,
    progress: bool,
    file: &str,
) -> Outcome {
    let (head, recs) = match record::load(file) {
        Ok(x) => x,
        Err(e) => return (Value::Null, Err(e)),
    };
    let mut r = Report::new(json_mode, false, progress);
    let mut map = Remap::default();
    let mut diffs = Vec::new();
    let up = bring_up(hal, env, t, &mut r);
    let new_up = record::from_records(&t.records());
    compare_phase(
        &phase(&recs, "bring-up"),
        &new_up.iter().collect::<Vec<_>>(),
        &mut map,
        true,
        true,
        &mut diffs,
    );
    let hca = match up {
        Ok((hca, _)) => hca,
        Err(e) => return report(&head, file, 0, diffs, json_mode, Err(e)),
    };
    let mut keep = Vec::new();
    let mut sent = 0;
    let mut failure = None;
    for rec in phase(&recs, "run") {
        sent += 1;
        match resend(&hca, t, rec, &map, &mut keep) {
            Ok(new) => diffs.extend(compare(rec, &new, &mut map, false, false)),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    drop(keep);
    let before = t.count() as usize;
    let mut quiet = Report::new(json_mode, false, progress);
    let (_s, td) = teardown(hca, env, &mut quiet);
    let all = record::from_records(&t.records());
    let new_down: Vec<&Rec> = all[before..].iter().collect();
    compare_phase(
        &phase(&recs, "teardown"),
        &new_down,
        &mut map,
        true,
        true,
        &mut diffs,
    );
    let res = match failure {
        Some(e) => Err(e),
        None => td,
    };
    report(&head, file, sent, diffs, json_mode, res)
}

fn report(
    head: &Value,
    file: &str,
    sent: usize,
    diffs: Vec<Difference>,
    json_mode: bool,
    res: Result<(), CliError>,
) -> Outcome {
    if !json_mode {
        outln!(
            "replay of {file} (recorded on {} by {}): {sent} run commands re-sent, {} difference(s)",
            head["device"].as_str().unwrap_or("?"),
            head["tool"].as_str().unwrap_or("?"),
            diffs.len()
        );
        for d in &diffs {
            outln!("  {}", d.text());
        }
    }
    let v = json!({
        "trace": head,
        "run_commands_resent": sent,
        "differences": diffs.iter().map(Difference::to_json).collect::<Vec<_>>(),
    });
    let res = res.and_then(|()| {
        if diffs.is_empty() {
            Ok(())
        } else {
            Err(CliError::Differ {
                what: format!("{} difference(s) from the recorded trace", diffs.len()),
            })
        }
    });
    (v, res)
}

fn dma<H: Hal>(hca: &TracedHca<'_, H>, bytes: usize) -> Result<DmaRegion<H>, CliError> {
    hca.hal().alloc_dma(bytes).map_err(|e| {
        CliError::failed(
            format!("no DMA memory for a replayed command: {e}"),
            "on hardware raise the locked-memory limit (ulimit -l)",
        )
    })
}

/// Re-send one recorded command: object numbers remapped, addresses
/// refilled. Returns the new command as the tracer saw it.
fn resend<H: Hal>(
    hca: &TracedHca<'_, H>,
    t: &Tracer,
    rec: &Rec,
    map: &Remap,
    keep: &mut Vec<DmaRegion<H>>,
) -> Result<Rec, CliError> {
    let op = Opcode(rec.opcode);
    let mut inp = Input::new(
        op,
        op.layouts()
            .map_or(&mlx5_regs::layouts::cmd_in::LAYOUT, |l| l.0),
    );
    inp.buf = rec.input.clone();
    let put = |inp: &mut Input, k: &str, v: u64| inp.put(k, &format!("{v:#x}"));
    // Page lists: each array's non-zero entries become one fresh region.
    let mut arrays: Vec<(String, Vec<String>)> = Vec::new();
    for (k, v) in fields(rec, Direction::Input) {
        let n = class(&k);
        let val = v
            .strip_prefix("0x")
            .and_then(|h| u64::from_str_radix(h, 16).ok());
        match (n, val) {
            (Class::Object(kind), Some(x)) => {
                if let Some(y) = map.get(kind, x) {
                    put(&mut inp, &k, y)?;
                }
            }
            (Class::Address, Some(x)) if x != 0 => {
                if let Some((base, _)) = k.split_once('[') {
                    match arrays.iter_mut().find(|(b, _)| b == base) {
                        Some((_, v)) => v.push(k.clone()),
                        None => arrays.push((base.to_string(), vec![k.clone()])),
                    }
                } else if k.ends_with("dbr_addr") {
                    let m = dma(hca, 4096)?;
                    put(&mut inp, &k, m.iova())?;
                    keep.push(m);
                }
            }
            _ => {}
        }
    }
    for (_, elems) in arrays {
        let m = dma(hca, elems.len() * 4096)?;
        if op == Opcode::CREATE_CQ || op == Opcode::MODIFY_CQ {
            // CQEs start owned by hardware (op_own 0xf0: invalid opcode,
            // owner 0), as the driver's own rings (Linux `init_cq_frag_buf`).
            for i in 0..elems.len() * 4096 / 64 {
                m.write_u8(i * 64 + 63, 0xf0);
            }
        }
        for (i, k) in elems.iter().enumerate() {
            put(&mut inp, k, m.iova() + (i * 4096) as u64)?;
        }
        keep.push(m);
    }
    let before = t.count();
    let mut out = vec![0u8; rec.output.len().max(16)];
    let res = hca.exec(&inp.buf, &mut out);
    if t.count() == before {
        let why = match res {
            Err(e) => format!("{e}"),
            Ok(()) => "not sent".into(),
        };
        return Err(CliError::failed(
            format!(
                "command {} ({op}) of the trace could not be re-sent: {why}",
                rec.seq
            ),
            "the trace may be damaged; `mlx5 decode` shows its input",
        ));
    }
    let last: Vec<_> = t.records().pop().into_iter().collect();
    Ok(record::from_records(&last).remove(0))
}

/// The differences of two traces' commands, phase by phase (what `mlx5
/// diff` reports).
pub fn differences(ra: &[Rec], rb: &[Rec]) -> Vec<Difference> {
    let mut map = Remap::default();
    let mut diffs = Vec::new();
    for p in ["bring-up", "run", "teardown"] {
        compare_phase(
            &phase(ra, p),
            &phase(rb, p),
            &mut map,
            true,
            true,
            &mut diffs,
        );
    }
    diffs
}

/// Run `mlx5 diff A B`.
pub fn diff(a: &str, b: &str, json_mode: bool) -> Outcome {
    let load = |f| record::load(f);
    let ((ha, ra), (hb, rb)) = match (load(a), load(b)) {
        (Ok(x), Ok(y)) => (x, y),
        (Err(e), _) | (_, Err(e)) => return (Value::Null, Err(e)),
    };
    let diffs = differences(&ra, &rb);
    if !json_mode {
        outln!(
            "{a} ({}, {} commands) against {b} ({}, {} commands): {} difference(s)",
            ha["device"].as_str().unwrap_or("?"),
            ra.len(),
            hb["device"].as_str().unwrap_or("?"),
            rb.len(),
            diffs.len()
        );
        for d in &diffs {
            outln!("  {}", d.text());
        }
    }
    let v = json!({
        "a": ha, "b": hb,
        "differences": diffs.iter().map(Difference::to_json).collect::<Vec<_>>(),
    });
    let res = if diffs.is_empty() {
        Ok(())
    } else {
        Err(CliError::Differ {
            what: format!("the traces differ in {} place(s)", diffs.len()),
        })
    };
    (v, res)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        assert_eq!(
            class("cq_context.c_eqn_or_apu_element"),
            Class::Object("eq")
        );
        assert_eq!(class("ctx.wq.pas[3]"), Class::Address);
        assert_eq!(class("qpc.dbr_addr"), Class::Address);
        assert_eq!(class("cq_context.producer_counter"), Class::DataPath);
        assert_eq!(class("cq_context.log_cq_size"), Class::Plain);
    }

    #[test]
    fn remap_is_one_to_one() {
        let mut m = Remap::default();
        assert!(m.same("cq", 0x10, 0x20));
        assert!(m.same("cq", 0x10, 0x20));
        assert!(!m.same("cq", 0x10, 0x21));
        assert!(!m.same("cq", 0x11, 0x20));
        assert!(m.same("qp", 0x10, 0x30));
        assert!(m.same("cq", 0, 0));
    }
}
