//! Comparing commands field by field, for `mlx5 replay` and `mlx5 diff`:
//! what legitimately varies between two runs is not a difference. Object
//! numbers (CQN, EQN, SRQN/RMPN, QPN, mkeys, PD, UAR, XRCD) may differ as
//! long as they map one to one across the whole trace; addresses (page
//! lists, doorbell records, start addresses: IOVAs of memory the driver or
//! the tool allocated) and latencies are not compared. Replay also leaves
//! out the data path's state (counters, PSNs, the SRQ limit that a limit
//! event clears), since it re-sends commands without the traffic between
//! them.

use std::collections::HashMap;

use mlx5_regs::decode::{decode_command, DecodeOptions, Direction};
use mlx5_regs::Opcode;
use serde_json::{json, Value};

use crate::common::record::Rec;

/// What a field is, for comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    /// An object number of this kind: compared through the mapping.
    Object(&'static str),
    /// An address, or the device's identity (GUIDs, MAC): not compared.
    Address,
    /// Data-path state: not compared by replay.
    DataPath,
    /// Compared as it is.
    Plain,
}

/// The class of a decoded field name (`cq_context.c_eqn_or_apu_element`,
/// `pas[3]`).
pub fn class(name: &str) -> Class {
    let last = name.rsplit('.').next().unwrap_or(name);
    let base = last.split('[').next().unwrap_or(last);
    match base {
        "cqn" | "cqn_snd" | "cqn_rcv" | "cq_number" => Class::Object("cq"),
        "eq_number" | "c_eqn_or_apu_element" | "c_eqn" => Class::Object("eq"),
        "srqn" | "rmpn" | "srqn_rmpn_xrqn" => Class::Object("srq"),
        "qpn" | "remote_qpn" | "qpn_rqn_sqn" => Class::Object("qp"),
        "mkey_index" => Class::Object("mkey_index"),
        "resd_lkey"
        | "null_mkey"
        | "dump_fill_mkey"
        | "terminate_scatter_list_mkey"
        | "repeated_mkey" => Class::Object("mkey"),
        "pd" => Class::Object("pd"),
        "uar" | "uar_page" => Class::Object("uar"),
        "xrcd" => Class::Object("xrcd"),
        "pas" => Class::Address,
        // The device's identity: another card, or a model with another
        // seed, has other GUIDs and MAC address.
        "node_guid" | "port_guid" | "system_image_guid" | "mac_addr_47_32" | "mac_addr_31_0" => {
            Class::Address
        }
        // What derives from it: the GID entries bring-up programs (the
        // port MAC and its link-local GID), and a path addressed to them.
        "source_mac_47_32" | "source_mac_31_0" | "source_l3_address" | "rmac_47_32"
        | "rmac_31_0" | "rgid_rip" => Class::Address,
        b if b.ends_with("_addr") => Class::Address,
        "last_notified_index"
        | "last_solicit_index"
        | "consumer_counter"
        | "producer_counter"
        | "hw_counter"
        | "sw_counter"
        | "wqe_cnt"
        | "hw_sq_wqebb_counter"
        | "sw_sq_wqebb_counter"
        | "hw_rq_counter"
        | "sw_rq_counter"
        | "next_send_psn"
        | "next_rcv_psn"
        | "last_acked_psn"
        | "ssn"
        | "rmsn"
        | "cur_rnr_retry"
        | "cur_retry_count"
        | "lwm" => Class::DataPath,
        _ => Class::Plain,
    }
}

/// Every field of a command's input or output, decoded (zeros included).
pub fn fields(r: &Rec, dir: Direction) -> Vec<(String, String)> {
    let buf = match dir {
        Direction::Input => &r.input,
        Direction::Output => &r.output,
    };
    let mut s = String::new();
    let opts = DecodeOptions {
        skip_zero: false,
        max_array: 4096,
    };
    match decode_command(Opcode(r.opcode), r.op_mod, dir, buf, opts, &mut s) {
        Ok(true) => s
            .lines()
            .filter_map(|l| l.split_once(" = "))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect(),
        // No layout: the bytes are one field.
        _ => vec![("bytes".into(), crate::common::record::hex_of(buf))],
    }
}

fn num(v: &str) -> Option<u64> {
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => v.parse().ok(),
    }
}

/// Object numbers of the first trace and the second, one to one per kind.
#[derive(Default)]
pub struct Remap {
    fwd: HashMap<(&'static str, u64), u64>,
    back: HashMap<(&'static str, u64), u64>,
}

impl Remap {
    /// `a` (first trace) and `b` (second) name the same object: learn it, or
    /// check it against what was learnt. Zero and all-ones are "none".
    pub fn same(&mut self, kind: &'static str, a: u64, b: u64) -> bool {
        if a == b && (a == 0 || a == 0xff_ffff || a == 0xffff_ffff) {
            return true;
        }
        match (self.fwd.get(&(kind, a)), self.back.get(&(kind, b))) {
            (Some(&x), _) if x != b => false,
            (_, Some(&y)) if y != a => false,
            _ => {
                self.fwd.insert((kind, a), b);
                self.back.insert((kind, b), a);
                true
            }
        }
    }

    /// The second trace's number for the first trace's `a`, if known.
    pub fn get(&self, kind: &'static str, a: u64) -> Option<u64> {
        self.fwd.get(&(kind, a)).copied()
    }
}

/// One difference.
#[derive(Debug, Clone)]
pub struct Difference {
    /// Sequence numbers in the first and second trace.
    pub seq: (u64, u64),
    /// The command (the first trace's opcode).
    pub opcode: String,
    /// `input`, `output`, `outcome` or `sequence`.
    pub place: &'static str,
    /// The field (empty for an outcome or sequence difference).
    pub field: String,
    /// The first trace's value.
    pub a: String,
    /// The second's.
    pub b: String,
}

impl Difference {
    /// As JSON.
    pub fn to_json(&self) -> Value {
        json!({
            "seq": self.seq.0, "seq_b": self.seq.1, "opcode": self.opcode,
            "place": self.place, "field": self.field, "a": self.a, "b": self.b,
        })
    }

    /// One line for people.
    pub fn text(&self) -> String {
        if self.field.is_empty() {
            let seq = if self.seq.0 == 0 {
                format!("+{}", self.seq.1)
            } else {
                self.seq.0.to_string()
            };
            format!(
                "[{seq}] {} {}: {}  ->  {}",
                self.opcode, self.place, self.a, self.b
            )
        } else {
            format!(
                "[{}] {} {}.{}: {}  ->  {}",
                self.seq.0, self.opcode, self.place, self.field, self.a, self.b
            )
        }
    }
}

/// Compare two commands: the outcome, then (when both completed) the input
/// fields if `inputs`, and the output fields. `data_path`: compare
/// data-path state too.
pub fn compare(
    a: &Rec,
    b: &Rec,
    map: &mut Remap,
    inputs: bool,
    data_path: bool,
) -> Vec<Difference> {
    let op = Opcode(a.opcode);
    let d = |place, field: &str, x: String, y: String| Difference {
        seq: (a.seq, b.seq),
        opcode: op.to_string(),
        place,
        field: field.to_string(),
        a: x,
        b: y,
    };
    if a.opcode != b.opcode {
        return vec![d(
            "sequence",
            "",
            format!("{op:?}"),
            format!("{:?}", Opcode(b.opcode)),
        )];
    }
    let mut out = Vec::new();
    if a.outcome() != b.outcome() {
        out.push(d("outcome", "", a.outcome(), b.outcome()));
    }
    let mut dirs = vec![];
    if inputs {
        dirs.push(("input", Direction::Input));
    }
    // A failed command's output is its status and syndrome: compared above.
    if a.result == "ok" && b.result == "ok" {
        dirs.push(("output", Direction::Output));
    }
    for (place, dir) in dirs {
        let fb: HashMap<String, String> = fields(b, dir).into_iter().collect();
        for (k, va) in fields(a, dir) {
            let Some(vb) = fb.get(&k) else {
                out.push(d(place, &k, va, "(absent)".into()));
                continue;
            };
            let same = match class(&k) {
                Class::Address => true,
                Class::DataPath if !data_path => true,
                Class::Object(kind) => match (num(&va), num(vb)) {
                    (Some(x), Some(y)) => map.same(kind, x, y),
                    _ => va == *vb,
                },
                _ => va == *vb,
            };
            if !same {
                out.push(d(place, &k, va, vb.clone()));
            }
        }
    }
    out
}
