//! The model's side of `ibv_rc_pingpong` (rdma-core
//! `libibverbs/examples/rc_pingpong.c`): receives posted before the
//! exchange; the client sends first and sends again once its previous
//! send has completed and a message has arrived; the server answers each
//! message; `iters` each way. The program fills its buffer with 0x7b, so
//! the model sends 0x7b bytes and checks that every byte it receives is
//! one, and that each message has the program's size.

use std::time::{Duration, Instant};

use mlx5_driver::verbs::{SendFlags, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion, WrOpcode};
use mlx5_sim::UdpLink;

use super::oob::Dest;
use super::opts::Args;
use crate::cmd::pingpong::host::{setup_error, verbs_error, Addr, Host, RECVS};
use crate::common::error::CliError;
use mlx5_testbed::ConnectOpts;

/// rc_pingpong's buffer fill byte.
pub const FILL: u8 = 0x7b;

/// What a finished session reports.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The model's addresses (one per QP), as the programs print them.
    pub local_text: Vec<String>,
    /// The program's addresses.
    pub remote_text: Vec<String>,
    /// Messages received and checked.
    pub received: u64,
    /// Messages received on each QP (srq_pingpong; empty otherwise).
    pub per_qp: Vec<u64>,
    /// Time from the first send (or receive) to the last completion.
    pub pingpong: Duration,
}

pub(super) fn text(d: &Dest) -> String {
    format!(
        "LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
        d.lid,
        d.qpn,
        d.psn,
        std::net::Ipv6Addr::from(d.gid)
    )
}

/// Poll `host`'s send (or receive) CQ for one completion until `deadline`.
pub(super) fn wait(
    host: &mut Host,
    send: bool,
    deadline: Instant,
    what: &str,
) -> Result<WorkCompletion, CliError> {
    let cq = if send { host.scq } else { host.rcq };
    let mut wc = [WorkCompletion::EMPTY; 1];
    while Instant::now() < deadline {
        let n = host
            .ctx
            .poll_cq(cq, &mut wc)
            .map_err(|e| verbs_error(&host.ctx, "poll_cq", e))?;
        if n == 1 {
            return Ok(wc[0]);
        }
        host.dev.advance_us(50);
    }
    Err(CliError::check(format!(
        "{what}: no {} completion before the deadline (--timeout)",
        if send { "send" } else { "receive" }
    )))
}

/// The program's IPv4 address from its GID (which must be IPv4-mapped:
/// RoCE v2 over IPv4) and its MAC, resolved on the link.
pub(super) fn resolve(link: &UdpLink, peer: &Dest) -> Result<[u8; 6], CliError> {
    let g = peer.gid;
    if g[..10] != [0; 10] || g[10..12] != [0xff, 0xff] {
        return Err(CliError::failed(
            format!(
                "the program's GID {} is not IPv4-mapped",
                std::net::Ipv6Addr::from(g)
            ),
            "run it with -g naming its RoCE v2 IPv4 GID (index 1 on rxe)",
        ));
    }
    let ip = [g[12], g[13], g[14], g[15]];
    link.resolve_ipv4(ip, Duration::from_secs(10))
        .ok_or_else(|| {
            CliError::failed(
                format!("no ARP answer for {}.{}.{}.{}", ip[0], ip[1], ip[2], ip[3]),
                "is the peer's NIC on the same UDP-carried segment (--udp-local/--udp-remote)?",
            )
        })
}

/// `--mtu`, checked against the port's active MTU.
pub(super) fn path_mtu(a: &Args, host: &Host) -> Result<(), CliError> {
    if a.mtu > host.addr.mtu {
        return Err(CliError::usage(
            format!(
                "--mtu {} is larger than the port's active MTU ({})",
                a.mtu.bytes(),
                host.addr.mtu.bytes()
            ),
            format!("use --mtu {} or less", host.addr.mtu.bytes()),
        ));
    }
    Ok(())
}

/// What `Host::connect` needs of the program's record.
pub(super) fn peer_addr(a: &Args, peer: &Dest, mac: [u8; 6]) -> Addr {
    Addr {
        qpn: peer.qpn,
        psn: peer.psn,
        gid: peer.gid,
        mac,
        lid: 0,
        mtu: a.mtu,
        addr: 0,
        rkey: 0,
    }
}

/// Connect the QP toward the program's record.
fn connect(a: &Args, host: &mut Host, link: &UdpLink, peer: &Dest) -> Result<(), CliError> {
    let mac = resolve(link, peer)?;
    path_mtu(a, host)?;
    let addr = peer_addr(a, peer, mac);
    let ah = host.ah_to(&addr);
    host.connect(ah, &addr, &ConnectOpts::new(a.mtu))
        .map_err(setup_error)
}

/// Check receive completion `r` and its bytes, then post its slot again.
fn received(host: &mut Host, r: WorkCompletion, size: usize, what: &str) -> Result<(), CliError> {
    if r.status != WcStatus::Success {
        return Err(CliError::check(format!(
            "{what}: receive completion {:?} (vendor syndrome {:#x})",
            r.status, r.vendor_err
        )));
    }
    if (r.opcode, r.byte_len) != (WcOpcode::Recv, size as u32) {
        return Err(CliError::check(format!(
            "{what}: receive completion {:?} of {} bytes, expected Recv of {size}",
            r.opcode, r.byte_len
        )));
    }
    filled_and_reposted(host, r.wr_id, size, FILL, what)
}

/// The `size` bytes received into receive `wr_id` are all `fill` (the
/// program's buffer fill: rc_pingpong's [`FILL`], srq_pingpong's zero);
/// then the slot is posted again.
pub(super) fn filled_and_reposted(
    host: &mut Host,
    wr_id: u64,
    size: usize,
    fill: u8,
    what: &str,
) -> Result<(), CliError> {
    let slot = wr_id as usize;
    if slot >= host.spec.recvs {
        return Err(CliError::check(format!(
            "{what}: completion names WQE {slot}, never posted"
        )));
    }
    let mut got = vec![0u8; size];
    host.buf.read_bytes(host.spec.recv_at(slot), &mut got);
    if let Some(i) = got.iter().position(|&b| b != fill) {
        return Err(CliError::check(format!(
            "{what}: byte {i} is {:#04x}, the program sends {fill:#04x}",
            got[i]
        )));
    }
    host.post_recv(slot).map_err(setup_error)
}

/// After the last round trip, nothing more may arrive: a receive
/// completing within 200 ms is a message delivered twice or unasked.
pub(super) fn nothing_more_arrives(host: &mut Host) -> Result<(), CliError> {
    std::thread::sleep(Duration::from_millis(200));
    let mut wc = [WorkCompletion::EMPTY; 1];
    let extra = host
        .ctx
        .poll_cq(host.rcq, &mut wc)
        .map_err(|e| verbs_error(&host.ctx, "poll_cq", e))?;
    if extra != 0 {
        return Err(CliError::check(
            "a message arrived after the last round trip (an extra receive completion: one delivered twice or unasked)",
        ));
    }
    Ok(())
}

fn post_send(host: &mut Host, size: usize, n: u64) -> Result<(), CliError> {
    let sg = [Sge {
        addr: host.buf.iova(),
        length: size as u32,
        lkey: host.lkey(),
    }];
    let wr = SendWr {
        wr_id: n,
        opcode: WrOpcode::Send,
        send_flags: SendFlags::SIGNALED,
        sg_list: &sg,
        ..SendWr::EMPTY
    };
    host.ctx
        .post_send(host.qp, &[wr])
        .map_err(|e| verbs_error(&host.ctx, &format!("message {}: post_send", n + 1), e.errno))
}

/// Waits for message `n`'s send completion and checks it succeeded for
/// that request.
pub(super) fn sent(host: &mut Host, n: u64, deadline: Instant) -> Result<(), CliError> {
    let what = format!("message {} sent", n + 1);
    let s = wait(host, true, deadline, &what)?;
    if s.status != WcStatus::Success || s.wr_id != n {
        return Err(CliError::check(format!(
            "{what}: send completion {:?} for wr_id {} (vendor syndrome {:#x})",
            s.status, s.wr_id, s.vendor_err
        )));
    }
    Ok(())
}

/// The whole session: exchange, connect, `iters` round trips, and a
/// quiet period in which nothing more may arrive.
pub fn session(
    a: &Args,
    host: &mut Host,
    link: &UdpLink,
    deadline: Instant,
    progress: bool,
) -> Result<Outcome, CliError> {
    let size = a.size() as usize;
    host.buf.write_bytes(host.spec.send_at(), &vec![FILL; size]);
    for i in 0..RECVS {
        host.post_recv(i).map_err(setup_error)?;
    }
    let me = Dest {
        lid: 0,
        qpn: host.addr.qpn,
        psn: host.addr.psn,
        gid: host.addr.gid,
    };
    let (peers, client) = super::exchange(a, &[me], 1, deadline, progress, |p| {
        connect(a, host, link, &p[0])
    })?;
    let peer = peers[0];
    let start = Instant::now();
    let mut got = 0u64;
    for n in 0..u64::from(a.iters) {
        let what = format!("message {} received", n + 1);
        if client {
            post_send(host, size, n)?;
            sent(host, n, deadline)?;
            let r = wait(host, false, deadline, &what)?;
            received(host, r, size, &what)?;
        } else {
            let r = wait(host, false, deadline, &what)?;
            received(host, r, size, &what)?;
            post_send(host, size, n)?;
            sent(host, n, deadline)?;
        }
        got += 1;
    }
    let pingpong = start.elapsed();
    nothing_more_arrives(host)?;
    Ok(Outcome {
        local_text: vec![text(&me)],
        remote_text: vec![text(&peer)],
        received: got,
        per_qp: Vec::new(),
        pingpong,
    })
}
