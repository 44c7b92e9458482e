//! The command trace: a [`CmdObserver`] that records every command the
//! driver sends (bytes, outcome, latency), keeps per-opcode statistics,
//! prints commands live for `mlx5 trace`, shows bring-up progress, and
//! implements the model-only `--fatal-after N`.

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use mlx5_driver::stats::{CmdObserver, CmdOutcome, CmdRecord, CmdStats};
use mlx5_regs::decode::{decode_command, hexdump, DecodeOptions, Direction};
use mlx5_regs::Opcode;
use serde_json::{json, Map, Value};

/// One command, owned.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Sequence number (1-based).
    pub seq: u64,
    /// Opcode.
    pub opcode: Opcode,
    /// op_mod.
    pub op_mod: u16,
    /// Command queue slot.
    pub slot: u8,
    /// Token.
    pub token: u8,
    /// Input bytes.
    pub input: Vec<u8>,
    /// Output bytes.
    pub output: Vec<u8>,
    /// Outcome.
    pub outcome: CmdOutcome,
    /// Post-to-completion time (Hal clock: virtual on the model).
    pub latency_ns: u64,
    /// Sent by the driver's bring-up or teardown (not by the run itself).
    pub driver: bool,
}

/// Live printing of `mlx5 trace`.
#[derive(Debug, Clone, Copy)]
pub struct Live {
    /// Add the Linux `mlx5_core`-style hexdump.
    pub hexdump: bool,
}

#[derive(Default)]
struct State {
    records: Vec<Recorded>,
    stats: CmdStats,
    count: u64,
    fatal_fired: bool,
}

/// The observer handed to `Hca::bring_up_with`.
pub struct Tracer {
    state: Mutex<State>,
    live: Option<Live>,
    progress: bool,
    counting: AtomicBool,
    fatal_after: Option<(u64, mlx5_sim::Device)>,
}

impl Tracer {
    /// A tracer; `live` prints each command as it completes (human trace),
    /// `progress` shows a command counter on a terminal's stderr,
    /// `fatal_after` makes the model fatal after that many commands.
    pub fn new(
        live: Option<Live>,
        progress: bool,
        fatal_after: Option<(u64, mlx5_sim::Device)>,
    ) -> Tracer {
        Tracer {
            state: Mutex::new(State::default()),
            live,
            progress,
            counting: AtomicBool::new(false),
            fatal_after,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Show the in-place command counter on stderr (during bring-up and
    /// teardown, while nothing else is printed).
    pub fn set_counting(&self, on: bool) {
        self.counting.store(on, Ordering::Relaxed);
        if !on && self.progress {
            clear_progress_line();
        }
    }

    /// Every command so far.
    pub fn records(&self) -> Vec<Recorded> {
        self.lock().records.clone()
    }

    /// Per-opcode statistics of every command so far.
    pub fn stats(&self) -> CmdStats {
        self.lock().stats
    }

    /// Commands so far.
    pub fn count(&self) -> u64 {
        self.lock().count
    }

    /// `--fatal-after N` made the model fatal (the Nth command was reached).
    pub fn fatal_fired(&self) -> bool {
        self.lock().fatal_fired
    }

    /// Firmware pages as the command trace shows them: (given, returned),
    /// summed over the MANAGE_PAGES commands that firmware completed with
    /// status OK (give: `input_num_entries`; take: `output_num_entries`).
    /// The accounting that survives a failed bring-up or teardown, when the
    /// driver's own counters went with the `Hca`.
    pub fn pages_moved(&self) -> (u64, u64) {
        use mlx5_regs::consts::op_mod;
        use mlx5_regs::layouts::{manage_pages_in, manage_pages_out};
        let st = self.lock();
        let (mut given, mut returned) = (0u64, 0u64);
        for r in &st.records {
            if r.opcode != Opcode::MANAGE_PAGES || r.outcome != CmdOutcome::Ok {
                continue;
            }
            if r.op_mod == op_mod::MANAGE_PAGES_GIVE && r.input.len() >= manage_pages_in::SIZE {
                given += manage_pages_in::input_num_entries.get(&r.input) as u64;
            } else if r.op_mod == op_mod::MANAGE_PAGES_TAKE
                && r.output.len() >= manage_pages_out::SIZE
            {
                returned += manage_pages_out::output_num_entries.get(&r.output) as u64;
            }
        }
        (given, returned)
    }
}

impl CmdObserver for Tracer {
    fn command(&self, rec: &CmdRecord<'_>) {
        let mut st = self.lock();
        st.count += 1;
        st.stats.record(rec.opcode, rec.outcome, rec.latency_ns);
        let r = Recorded {
            seq: st.count,
            opcode: rec.opcode,
            op_mod: rec.op_mod,
            slot: rec.slot,
            token: rec.token,
            input: rec.input.to_vec(),
            output: rec.output.to_vec(),
            outcome: rec.outcome,
            latency_ns: rec.latency_ns,
            driver: self.counting.load(Ordering::Relaxed),
        };
        if let Some(live) = self.live {
            outp!("{}", render(&r, live.hexdump));
            let _ = std::io::stdout().flush();
        } else if self.progress && self.counting.load(Ordering::Relaxed) {
            let mut e = std::io::stderr().lock();
            let _ = write!(
                e,
                "\rmlx5: {} commands ({:<24})",
                r.seq,
                r.opcode.to_string()
            );
            let _ = e.flush();
        }
        st.records.push(r);
        if let Some((n, dev)) = &self.fatal_after {
            if st.count == *n && !st.fatal_fired {
                st.fatal_fired = true;
                // FW_INTERNAL_ERR in the health buffer; the command interface
                // stops answering (the model's fatal state).
                dev.inject().fatal(0x01);
            }
        }
    }
}

/// Clear the in-place progress line (terminal only).
pub fn clear_progress_line() {
    let mut e = std::io::stderr().lock();
    let _ = write!(e, "\r{:60}\r", "");
    let _ = e.flush();
}

/// Outcome as (status name, syndrome) for display.
pub fn outcome_text(o: &CmdOutcome) -> String {
    match o {
        CmdOutcome::Ok => "OK".into(),
        CmdOutcome::Status { status, syndrome } => {
            format!("{} syndrome {syndrome:#010x}", status)
        }
        CmdOutcome::Delivery(d) => format!("not delivered: {d:?}"),
        CmdOutcome::Timeout => "TIMEOUT (firmware never returned ownership)".into(),
        CmdOutcome::Fatal => "DEVICE FATAL while outstanding".into(),
    }
}

/// `12.3 us` style latency.
pub fn fmt_ns(ns: u64) -> String {
    if ns >= 1_000_000_000 {
        format!("{:.2} s", ns as f64 / 1e9)
    } else if ns >= 1_000_000 {
        format!("{:.2} ms", ns as f64 / 1e6)
    } else if ns >= 1_000 {
        format!("{:.1} us", ns as f64 / 1e3)
    } else {
        format!("{ns} ns")
    }
}

fn decoded(r: &Recorded, dir: Direction, buf: &[u8]) -> Option<String> {
    if buf.is_empty() {
        return None;
    }
    let mut s = String::new();
    let opts = DecodeOptions {
        skip_zero: true,
        max_array: 16,
    };
    match decode_command(r.opcode, r.op_mod, dir, buf, opts, &mut s) {
        Ok(true) => Some(s),
        _ => None,
    }
}

/// A command for humans: header line, decoded input and output (non-zero
/// fields), optionally the Linux-style hexdump.
pub fn render(r: &Recorded, with_hexdump: bool) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "[{:>3}] {:?} op_mod {:#x}  slot {} token {:#04x}  {}  in {}",
        r.seq,
        r.opcode,
        r.op_mod,
        r.slot,
        r.token,
        outcome_text(&r.outcome),
        fmt_ns(r.latency_ns)
    );
    for (dir, buf, name) in [
        (Direction::Input, &r.input, "in"),
        (Direction::Output, &r.output, "out"),
    ] {
        match decoded(r, dir, buf) {
            Some(body) if !body.trim().is_empty() => {
                let _ = writeln!(s, "      {name}:");
                for line in body.lines() {
                    let _ = writeln!(s, "        {line}");
                }
            }
            Some(_) => {
                let _ = writeln!(s, "      {name}: (all fields zero)");
            }
            None if buf.is_empty() => {
                let _ = writeln!(s, "      {name}: (none: the command did not complete)");
            }
            None => {
                let _ = writeln!(s, "      {name}: (no layout for this opcode; hexdump)");
                let mut h = String::new();
                let _ = hexdump(buf, r.slot as u32, 0, &mut h);
                for line in h.lines() {
                    let _ = writeln!(s, "        {line}");
                }
            }
        }
    }
    if with_hexdump {
        for (buf, name) in [(&r.input, "INPUT"), (&r.output, "OUTPUT")] {
            if buf.is_empty() {
                continue;
            }
            let _ = writeln!(
                s,
                "      dump command data {}({:#x}) {name}",
                r.opcode, r.opcode.0
            );
            let mut h = String::new();
            let _ = hexdump(buf, r.slot as u32, 0, &mut h);
            for line in h.lines() {
                let _ = writeln!(s, "      {line}");
            }
        }
    }
    s
}

/// Decoded fields as a JSON object (`"cq_context.log_cq_size": "0xa"`).
fn decoded_json(r: &Recorded, dir: Direction, buf: &[u8]) -> Value {
    match decoded(r, dir, buf) {
        Some(body) => {
            let mut m = Map::new();
            for line in body.lines() {
                if let Some((k, v)) = line.split_once(" = ") {
                    m.insert(k.trim().to_string(), Value::from(v.trim()));
                }
            }
            Value::Object(m)
        }
        None => Value::Null,
    }
}

fn hex(buf: &[u8]) -> String {
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// Outcome as JSON fields.
pub fn outcome_json(o: &CmdOutcome) -> Value {
    match o {
        CmdOutcome::Ok => {
            json!({"result": "ok", "status": "OK", "status_value": 0, "syndrome": "0x0"})
        }
        CmdOutcome::Status { status, syndrome } => json!({
            "result": "status",
            "status": status.name().unwrap_or("UNKNOWN"),
            "status_value": status.0,
            "syndrome": format!("{syndrome:#x}"),
        }),
        CmdOutcome::Delivery(d) => {
            json!({"result": "delivery_error", "delivery_status": format!("{d:?}")})
        }
        CmdOutcome::Timeout => json!({"result": "timeout"}),
        CmdOutcome::Fatal => json!({"result": "fatal"}),
    }
}

/// A command as JSON.
pub fn to_json(r: &Recorded, with_bytes: bool) -> Value {
    let mut v = json!({
        "seq": r.seq,
        "opcode": r.opcode.to_string(),
        "opcode_value": r.opcode.0,
        "op_mod": r.op_mod,
        "slot": r.slot,
        "token": r.token,
        "latency_ns": r.latency_ns,
        "outcome": outcome_json(&r.outcome),
        "input": decoded_json(r, Direction::Input, &r.input),
        "output": decoded_json(r, Direction::Output, &r.output),
    });
    if with_bytes {
        v["input_hex"] = json!(hex(&r.input));
        v["output_hex"] = json!(hex(&r.output));
    }
    v
}
