//! `mlx5 peer`: the model as the other side of an RDMA program that runs
//! on another stack (Linux soft-RoCE in a QEMU guest, or any RoCE v2 host
//! reachable through a UDP-carried Ethernet segment). The model's port is
//! joined to a UDP socket (`mlx5_sim::UdpLink`, one Ethernet frame per
//! datagram, QEMU's `-netdev dgram`), the device runs threaded on the wall
//! clock, and the driver goes through the verbs facade exactly as
//! `mlx5 pingpong`'s hosts do. The address exchange is the program's own,
//! over TCP (`oob`).

pub mod capcheck;
pub mod link;
pub mod oob;
pub mod opts;
pub mod rc;
pub mod srq;
pub mod ud;

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::pingpong::host::RECVS;
use crate::common::error::CliError;
use crate::common::target::ModelRun;
use link::ExchangeSide;
use mlx5_testbed::{HostSpec, Transport};
use opts::{Args, Program};

/// How `mlx5 peer` runs: one model of `profile`, always threaded (on the
/// wall clock, as the program on the other side is).
pub type Run<'a> = ModelRun<'a, Args>;

fn progress(r: &Run<'_>, what: &str) {
    if r.progress {
        eprintln!("mlx5: {what}");
    }
}

/// A PSN from the clock, as rc_pingpong draws a random one.
pub(crate) fn random_psn() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut z = t ^ 0x9e37_79b9_7f4a_7c15;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((z ^ (z >> 31)) & 0xff_ffff) as u32
}

/// The program's address exchange, as its client (`--connect`: then
/// `connect` runs once the records are in) or its server (`--listen`:
/// `connect` runs before the answer, as the programs' servers do).
/// `count` records each way; the program's records and whether the model
/// was the client.
pub(crate) fn exchange(
    a: &Args,
    mine: &[oob::Dest],
    count: usize,
    deadline: Instant,
    progress: bool,
    connect: impl FnOnce(&[oob::Dest]) -> Result<(), CliError>,
) -> Result<(Vec<oob::Dest>, bool), CliError> {
    match a.link.exchange_side(progress)? {
        ExchangeSide::Client(server) => {
            let peers = oob::client(server, mine, count, deadline)?;
            connect(&peers)?;
            Ok((peers, true))
        }
        ExchangeSide::Server(l) => Ok((oob::server(&l, deadline, mine, count, connect)?, false)),
    }
}

/// Run it: the JSON value and the result.
pub fn run(r: &Run<'_>) -> (Value, Result<(), CliError>) {
    let a = r.args;
    if a.chk && a.program != Program::Ud {
        return (
            Value::Null,
            Err(CliError::usage(
                "--chk is ud-pingpong's",
                "drop --chk, or use --program ud-pingpong",
            )),
        );
    }
    let deadline = Instant::now() + Duration::from_secs(a.link.timeout);
    let size = a.size() as usize;
    let base = HostSpec::new(Transport::RoceV2Ipv4, a.link.host, random_psn());
    let spec = match a.program {
        Program::Rc => HostSpec {
            slot: size,
            recvs: RECVS,
            ..base
        },
        // Each receive slot holds the 40 bytes of GRH space too.
        Program::Ud => HostSpec {
            slot: size + ud::GRH,
            recvs: RECVS,
            ..base
        },
        // At most one message in flight toward the model per QP.
        Program::Srq => HostSpec {
            slot: size,
            recvs: 2 * a.qps as usize + 2,
            cq_entries: 63.max(4 * a.qps),
            ..base
        },
    };
    let mut on_link = match a.link.bring_up(r, spec) {
        Ok(h) => h,
        Err(e) => return (Value::Null, Err(e)),
    };
    progress(
        r,
        &format!(
            "the model answers ARP for 198.18.0.{}; exchanging addresses",
            a.link.host
        ),
    );
    let started = Instant::now();
    let res = match a.program {
        Program::Rc => rc::session(a, &mut on_link.host, &on_link.link, deadline, r.progress),
        Program::Ud => ud::session(a, &mut on_link.host, &on_link.link, deadline, r.progress),
        Program::Srq => srq::session(a, &mut on_link.host, &on_link.link, deadline, r.progress),
    };
    let elapsed = started.elapsed();
    let (counters, closed) = on_link.close();
    let (outcome, res) = match res {
        Ok(o) => (Some(o), Ok(())),
        Err(e) => (None, Err(e)),
    };
    let res = res.and(closed);
    let link = &counters.link;
    let mut v = json!({
        "program": a.program.name(),
        "role": a.link.role(),
        "size": a.size(),
        "iters": a.iters,
        "mtu": a.mtu.bytes(),
        "seconds": elapsed.as_secs_f64(),
        "link": {
            "frames_out": link.frames_out, "frames_in": link.frames_in,
            "to_device": link.to_device, "arp_replies": link.arp_replies,
            "arp_requests": link.arp_requests, "adverts": link.adverts,
            "dropped": link.dropped,
        },
        "wire": counters.wire_json(),
        "model": counters.model_json(),
    });
    if let (Some(o), Value::Object(m)) = (&outcome, &mut v) {
        m.insert("local".into(), json!(o.local_text[0]));
        m.insert("remote".into(), json!(o.remote_text[0]));
        m.insert("messages_checked".into(), json!(o.received));
        if !o.per_qp.is_empty() {
            m.insert("qps".into(), json!(o.per_qp.len()));
            m.insert("received_per_qp".into(), json!(o.per_qp));
        }
    }
    let v = json!({ "peer": v });
    if !r.json {
        if let Some(o) = &outcome {
            for l in &o.local_text {
                println!("  local address:  {l}");
            }
            for l in &o.remote_text {
                println!("  remote address: {l}");
            }
            let bytes = 2 * u64::from(a.size()) * u64::from(a.iters);
            let us = o.pingpong.as_secs_f64() * 1e6;
            println!(
                "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
                us / 1e6,
                bytes as f64 * 8.0 / us
            );
            println!(
                "{} iters in {:.2} seconds = {:.2} usec/iter",
                a.iters,
                us / 1e6,
                us / f64::from(a.iters)
            );
            println!(
                "checked: {} messages received, every byte as sent",
                o.received
            );
            if !o.per_qp.is_empty() {
                let per: Vec<String> = o.per_qp.iter().map(u64::to_string).collect();
                println!("received per QP: {}", per.join(" "));
            }
        }
        println!(
            "link: {} frames out, {} in ({} to the device, {} not ours), {} ARP replies, {} ARP requests",
            link.frames_out, link.frames_in, link.to_device, link.dropped,
            link.arp_replies, link.arp_requests
        );
        counters.print_faults_and_model();
    }
    (v, res)
}
