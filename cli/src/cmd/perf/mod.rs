//! `mlx5 perf`: the model as the other side of perftest's `ib_write_lat`,
//! `ib_read_lat`, `ib_atomic_lat`, `ib_send_bw`, `ib_write_bw` and
//! `ib_read_bw` running on another stack, through perftest's own TCP
//! exchange (not rdma_cm). As in
//! `mlx5 peer`, the model's port is joined to a UDP socket
//! (`mlx5_sim::UdpLink`), the device runs threaded on the wall clock and
//! the driver goes through the verbs facade.

pub mod bw;
pub mod exchange;
pub mod lat;
pub mod opts;
pub mod session;

use std::time::{Duration, Instant};

use mlx5_driver::verbs::AccessFlags;
use mlx5_testbed::{HostSpec, RecvQueue, Transport};
use serde_json::{json, Value};

use crate::common::error::CliError;
use crate::common::target::ModelRun;
use opts::Args;

/// How `mlx5 perf` runs: one model of `profile`, always threaded (on the
/// wall clock, as the program on the other side is).
pub type Run<'a> = ModelRun<'a, Args>;

/// The host's shape: the target area at least 64 bytes and 64-byte
/// aligned (atomics need 8), every remote right the tests use, the QP's
/// own receive queue as perftest's. The bandwidth tests' programs move
/// their remote address through a cycle buffer (a page) in steps of the
/// size rounded up to a cache line: twice the larger of the page and the
/// size covers every message; 16 receives and 32 sends in flight.
fn spec(a: &Args) -> HostSpec {
    let size = a.size() as usize;
    let (slot, recvs, send_wr) = if a.test.bw() {
        (2 * size.max(4096), 16, 32)
    } else {
        (size.max(64), 4, 8)
    };
    HostSpec {
        slot: slot.next_multiple_of(64),
        recvs,
        send_wr,
        rq: RecvQueue::Own,
        access: AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC,
        ..HostSpec::new(
            Transport::RoceV2Ipv4,
            a.link.host,
            super::peer::random_psn(),
        )
    }
}

/// Run it: the JSON value and the result.
pub fn run(r: &Run<'_>) -> (Value, Result<(), CliError>) {
    let a = r.args;
    let deadline = Instant::now() + Duration::from_secs(a.link.timeout);
    let mut on_link = match a.link.bring_up(r, spec(a)) {
        Ok(h) => h,
        Err(e) => return (Value::Null, Err(e)),
    };
    let res = session::establish(a, &mut on_link.host, &on_link.link, deadline, r.progress)
        .and_then(|c| {
            let me = c.me;
            let peer = c.peer;
            let mtu = c.opening.mtu;
            let version = c.opening.version.clone();
            let size = a.size() as usize;
            if a.test.bw() {
                bw::run(a.test, &mut on_link.host, c, size, a.iters, deadline)
            } else {
                lat::run(a.test, &mut on_link.host, c, size, a.iters, deadline).map(|t| (t, None))
            }
            .map(|(t, report)| (t, report, me, peer, mtu, version))
        });
    let (counters, closed) = on_link.close();
    let mut v = json!({
        "program": a.test.program(),
        "role": a.link.role(),
        "size": a.size(),
        "iters": a.iters,
        "wire": counters.wire_json(),
        "model": counters.model_json(),
    });
    let res = match res {
        Ok((t, report, me, peer, mtu, version)) => {
            if let Value::Object(m) = &mut v {
                m.insert("peer_version".into(), json!(version));
                m.insert("mtu".into(), json!(mtu.bytes()));
                m.insert("posted".into(), json!(t.posted));
                m.insert("observed".into(), json!(t.observed));
                m.insert("seconds".into(), json!(t.seconds));
                if let Some(p) = &report {
                    m.insert(
                        "program_report".into(),
                        json!({"size": p.size, "iters": p.iters, "bw_peak_mb_s": p.bw_peak,
                               "bw_avg_mb_s": p.bw_avg, "msg_rate_mpps": p.msg_rate}),
                    );
                }
            }
            if !r.json {
                println!(
                    "  local:  QPN {:#08x} PSN {:#08x} RKey {:#010x} VAddr {:#018x} OUT {}",
                    me.qpn, me.psn, me.rkey, me.vaddr, me.out_reads
                );
                println!(
                    "  remote: QPN {:#08x} PSN {:#08x} RKey {:#010x} VAddr {:#018x} OUT {} GID {}",
                    peer.qpn,
                    peer.psn,
                    peer.rkey,
                    peer.vaddr,
                    peer.out_reads,
                    std::net::Ipv6Addr::from(peer.gid)
                );
                println!(
                    "{} (perftest {version}), MTU {}: {} operations posted and completed, {} of the program's checked, {:.3} s",
                    a.test.program(),
                    mtu.bytes(),
                    t.posted,
                    t.observed,
                    t.seconds
                );
                if let Some(p) = &report {
                    println!(
                        "  the program's report: {} bytes x {} iterations, peak {:.2} MB/s, average {:.2} MB/s, {:.6} Mpps",
                        p.size, p.iters, p.bw_peak, p.bw_avg, p.msg_rate
                    );
                }
            }
            Ok(())
        }
        Err(e) => Err(e),
    };
    if !r.json {
        counters.print_faults_and_model();
        println!(
            "link: {} frames out, {} in, {} ARP replies",
            counters.link.frames_out, counters.link.frames_in, counters.link.arp_replies
        );
    }
    let res = res.and(closed);
    (json!({ "perf": v }), res)
}
