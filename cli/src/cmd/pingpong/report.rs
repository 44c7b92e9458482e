//! What `mlx5 pingpong` prints: `ibv_rc_pingpong`'s lines (the two
//! addresses, bytes and Mbit/s, iterations and µs per iteration; rdma-core
//! `libibverbs/examples/rc_pingpong.c`), then the messages checked and the
//! counters of the wire and of both ports; the same as JSON.

use std::time::Duration;

use mlx5_sim::wire::{Wire, WireStats};
use mlx5_sim::Device;
use mlx5_sim::TrafficStats;
use serde_json::{json, Value};

use super::exchange::Tally;
use super::host::Addr;
use super::opts::Args;
use crate::common::error::CliError;

/// The NAK codes of `TrafficStats::naks_sent`, in its order.
const NAK_NAMES: [&str; 4] = [
    "PSN sequence error",
    "invalid request",
    "remote access",
    "remote operational",
];
/// The same, as JSON keys.
const NAK_KEYS: [&str; 4] = [
    "psn_sequence_error",
    "invalid_request",
    "remote_access",
    "remote_operational",
];

/// Everything a run learned.
pub struct Report {
    /// The options, as given.
    pub args: Args,
    /// The seed of the devices, the PSNs and the faults.
    pub seed: u64,
    /// Host 1's address (the "local" side, rc_pingpong's client).
    pub local: Option<Addr>,
    /// Host 2's address.
    pub remote: Option<Addr>,
    /// Wall time of the ping-pong.
    pub elapsed: Duration,
    /// Messages sent and checked.
    pub tally: Tally,
    /// The wire's counters.
    pub wire: WireStats,
    /// Each port's counters.
    pub hosts: [TrafficStats; 2],
    /// Frames written to the capture file.
    pub captured: Option<u64>,
    /// A failure after the ping-pong (teardown, the capture file).
    pub teardown: Option<Result<(), CliError>>,
}

/// A GID as rdma-core's examples print it (`inet_ntop` of the 16 bytes).
fn gid_text(g: &[u8; 16]) -> String {
    std::net::Ipv6Addr::from(*g).to_string()
}

fn mac_text(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn addr_json(a: &Addr) -> Value {
    json!({
        "lid": a.lid,
        "qpn": a.qpn,
        "psn": a.psn,
        "gid": gid_text(&a.gid),
        "mac": mac_text(&a.mac),
        "active_mtu": a.mtu.bytes(),
    })
}

impl Report {
    /// An empty report of a run with `args`.
    pub fn new(args: &Args, seed: u64) -> Report {
        Report {
            args: args.clone(),
            seed,
            local: None,
            remote: None,
            elapsed: Duration::ZERO,
            tally: Tally::default(),
            wire: WireStats::default(),
            hosts: [TrafficStats::default(); 2],
            captured: None,
            teardown: None,
        }
    }

    /// Take the counters of the wire and of both ports.
    pub fn counters(&mut self, wire: &Wire, a: &Device, b: &Device) {
        self.wire = wire.stats();
        self.hosts = [a.traffic().stats(), b.traffic().stats()];
    }

    /// Bytes both ways, as rc_pingpong counts them (`size * iters * 2`).
    fn bytes(&self) -> u64 {
        self.args.message_size() as u64 * self.tally.received
    }

    fn usec(&self) -> f64 {
        self.elapsed.as_secs_f64() * 1e6
    }

    fn sum(&self, f: impl Fn(&TrafficStats) -> u64) -> u64 {
        self.hosts.iter().map(f).sum()
    }

    /// The JSON value: `{"pingpong": {...}}`.
    pub fn to_json(&self, res: &Result<(), CliError>) -> Value {
        let a = &self.args;
        let iters = self.tally.received / 2;
        let usec = self.usec();
        let host = |s: &TrafficStats| {
            let naks: serde_json::Map<String, Value> = NAK_KEYS
                .iter()
                .zip(s.naks_sent)
                .map(|(k, n)| (k.to_string(), json!(n)))
                .collect();
            json!({
                "frames_sent": s.wire_tx,
                "frames_received": s.wire_rx,
                "frames_dropped": s.wire_dropped,
                "retransmissions": s.retransmissions,
                "acks_sent": s.acks_sent,
                "naks_sent": naks,
                "rnr_naks_sent": s.rnr_naks_sent,
                "seq_naks_received": s.seq_naks_received,
                "duplicates": s.duplicates,
                "ack_timeouts": s.ack_timeouts,
            })
        };
        let w = &self.wire;
        json!({ "pingpong": {
            "transport": a.transport.name(),
            "qp": a.qp.name(),
            "op": a.op.name(),
            "rq": a.rq.name(),
            "size": a.message_size(),
            "iters": a.iters,
            "mtu": a.mtu.bytes(),
            "seed": self.seed,
            "faults": {"drop": a.drop, "dup": a.dup, "reorder": a.reorder, "corrupt": a.corrupt},
            "local": self.local.as_ref().map(addr_json),
            "remote": self.remote.as_ref().map(addr_json),
            "messages": {"sent": self.tally.sent, "received_intact": self.tally.received},
            "iterations": iters,
            "bytes": self.bytes(),
            "seconds": self.elapsed.as_secs_f64(),
            "usec_per_iter": if iters == 0 { 0.0 } else { usec / iters as f64 },
            "mbit_per_sec": if usec == 0.0 { 0.0 } else { self.bytes() as f64 * 8.0 / usec },
            "wire": {
                "frames": w.frames, "bytes": w.bytes, "delivered": w.delivered,
                "dropped": w.dropped, "duplicated": w.duplicated, "reordered": w.reordered,
                "corrupted": w.corrupted, "undeliverable": w.undeliverable,
            },
            "hosts": [host(&self.hosts[0]), host(&self.hosts[1])],
            "capture": a.pcap.as_ref().map(|p| json!({
                "file": p.display().to_string(), "frames": self.captured,
            })),
            "result": if res.is_ok() { "OK" } else { "FAILED" },
        }})
    }

    /// The text on stdout.
    pub fn print(&self, res: &Result<(), CliError>) {
        let a = &self.args;
        for (label, addr) in [("local", &self.local), ("remote", &self.remote)] {
            if let Some(x) = addr {
                outln!(
                    "  {label} address:{} LID {:#06x}, QPN {:#08x}, PSN {:#08x}, GID {}",
                    if label == "local" { " " } else { "" },
                    x.lid,
                    x.qpn,
                    x.psn,
                    gid_text(&x.gid)
                );
            }
        }
        let usec = self.usec();
        if res.is_ok() && usec > 0.0 {
            let iters = u64::from(a.iters);
            outln!(
                "{} bytes in {:.2} seconds = {:.2} Mbit/sec",
                self.bytes(),
                usec / 1e6,
                self.bytes() as f64 * 8.0 / usec
            );
            outln!(
                "{} iters in {:.2} seconds = {:.2} usec/iter",
                iters,
                usec / 1e6,
                usec / iters as f64
            );
        }
        outln!();
        let (mtu_label, mtu, kind) = match (a.qp, &self.local, &self.remote) {
            (super::opts::QpKind::Ud, Some(l), Some(r)) => {
                ("port MTU", l.mtu.min(r.mtu).bytes(), "UD ")
            }
            _ => ("path MTU", a.mtu.bytes(), ""),
        };
        outln!(
            "transport         {}, {mtu_label} {mtu}, {}-byte {kind}{}, {}, seed {}",
            a.transport.describe(),
            a.message_size(),
            a.op.describe(),
            match a.rq {
                super::opts::Rq::Srq => "receiving on SRQs",
                super::opts::Rq::Own => "receiving on the QPs' own receive queues",
            },
            self.seed
        );
        outln!(
            "messages          {} sent, {} received once and intact (every byte checked)",
            self.tally.sent,
            self.tally.received
        );
        let w = &self.wire;
        outln!("wire frames       {} ({} bytes)", w.frames, w.bytes);
        outln!(
            "wire faults       {} dropped, {} duplicated, {} reordered, {} corrupted",
            w.dropped,
            w.duplicated,
            w.reordered,
            w.corrupted
        );
        outln!(
            "retransmissions   {} (host 1: {}, host 2: {})",
            self.sum(|s| s.retransmissions),
            self.hosts[0].retransmissions,
            self.hosts[1].retransmissions
        );
        let naks: Vec<String> = (0..4)
            .map(|i| format!("{} {}", NAK_NAMES[i], self.sum(|s| s.naks_sent[i])))
            .collect();
        outln!(
            "NAKs sent         {}, RNR {}",
            naks.join(", "),
            self.sum(|s| s.rnr_naks_sent)
        );
        outln!(
            "duplicates        {} re-ACKed without delivery",
            self.sum(|s| s.duplicates)
        );
        outln!(
            "port drops        {} (bad ICRC, wrong address, not in sequence: dropped silently)",
            self.sum(|s| s.wire_dropped)
        );
        if let (Some(p), Some(n)) = (&a.pcap, self.captured) {
            outln!("capture           {n} frames in {}", p.display());
        }
        match res {
            Ok(()) => outln!("result            OK"),
            Err(e) => outln!("result            FAILED: {}", e.message()),
        }
    }
}
