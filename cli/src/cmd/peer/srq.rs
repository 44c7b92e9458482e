//! The model's side of `ibv_srq_pingpong` (rdma-core
//! `libibverbs/examples/srq_pingpong.c`): `--qps` RC QPs whose receives
//! all come from one shared receive queue; the exchange carries 256
//! records each way (the program's `MAX_QP`), one per QP and all-zero
//! past them, and the QPs connect pairwise in record order. The program
//! fills its buffer with zeros, and its loop is the one the model runs
//! too: a QP sends again once its previous send has completed and a
//! message has arrived on it, while fewer than `iters` sends (of all QPs
//! together) have completed; it ends when `iters` have gone each way.
//! Each receive is checked: its QP is one of the model's, its length and
//! bytes are the program's, and no QP receives a message it has not
//! answered yet (the program sends on a QP only after hearing on it).

use std::time::{Duration, Instant};

use mlx5_driver::verbs::{
    QpCap, QpHandle, QpInitAttr, SendFlags, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion,
    WrOpcode,
};
use mlx5_sim::UdpLink;

use super::oob::Dest;
use super::opts::Args;
use super::rc::{filled_and_reposted, path_mtu, peer_addr, resolve, text, Outcome};
use crate::cmd::pingpong::host::{setup_error, verbs_error, Host};
use crate::common::error::CliError;
use mlx5_testbed::ConnectOpts;

/// Records each way, whatever the QP count (srq_pingpong's `MAX_QP`).
pub const RECORDS: usize = 256;
/// srq_pingpong's buffer fill.
pub const FILL: u8 = 0;
/// How long the QPs stay up after the last round trip, so that the
/// program's last messages are still acknowledged.
const LINGER: Duration = Duration::from_millis(500);

const SEND: u8 = 1;
const RECV: u8 = 2;

/// The program's records for `qps` QPs: the first `qps` must name a QP,
/// the rest must be unused (the QP counts of both sides must agree).
pub fn check_records(peers: &[Dest], qps: usize) -> Result<(), CliError> {
    let theirs = peers.iter().take_while(|d| !d.is_unused()).count();
    if theirs != qps || peers[qps..].iter().any(|d| !d.is_unused()) {
        return Err(CliError::failed(
            format!(
                "the program's exchange names {} QPs, the model has {qps}",
                peers.iter().filter(|d| !d.is_unused()).count()
            ),
            "give --qps the program's -q",
        ));
    }
    Ok(())
}

fn create_qps(host: &mut Host, n: usize) -> Result<Vec<QpHandle>, CliError> {
    let mut qps = vec![host.qp];
    while qps.len() < n {
        let attr = QpInitAttr {
            send_cq: host.scq,
            recv_cq: host.rcq,
            srq: host.srq,
            cap: QpCap {
                max_send_wr: host.spec.send_wr,
                max_send_sge: 1,
                ..QpCap::default()
            },
            sq_sig_all: false,
        };
        match host.ctx.create_qp(&attr) {
            Ok((qp, _)) => qps.push(qp),
            Err(e) => {
                let err = verbs_error(&host.ctx, &format!("create_qp {}", qps.len() + 1), e);
                destroy_extra(host, &qps);
                return Err(err);
            }
        }
    }
    Ok(qps)
}

/// Destroy every QP but the host's own (which `Host::close` destroys).
fn destroy_extra(host: &mut Host, qps: &[QpHandle]) -> Option<CliError> {
    let mut first = None;
    for &qp in &qps[1..] {
        if let Err(e) = host.ctx.destroy_qp(qp) {
            first.get_or_insert_with(|| verbs_error(&host.ctx, "destroy_qp", e));
        }
    }
    first
}

/// The whole session; the extra QPs destroyed whatever happened.
pub fn session(
    a: &Args,
    host: &mut Host,
    link: &UdpLink,
    deadline: Instant,
    progress: bool,
) -> Result<Outcome, CliError> {
    path_mtu(a, host)?;
    let qps = create_qps(host, a.qps as usize)?;
    let res = run(a, host, link, &qps, deadline, progress);
    let closed = destroy_extra(host, &qps);
    let out = res?;
    match closed {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Per-QP state of the loop.
struct Loop {
    pending: Vec<u8>,
    sent: Vec<u64>,
    received: Vec<u64>,
    scnt: u64,
    rcnt: u64,
}

fn run(
    a: &Args,
    host: &mut Host,
    link: &UdpLink,
    qps: &[QpHandle],
    deadline: Instant,
    progress: bool,
) -> Result<Outcome, CliError> {
    let size = a.size() as usize;
    host.buf.write_bytes(host.spec.send_at(), &vec![FILL; size]);
    for i in 0..host.spec.recvs {
        host.post_recv(i).map_err(setup_error)?;
    }
    let mut me = Vec::with_capacity(qps.len());
    for (i, &qp) in qps.iter().enumerate() {
        let qpn = host
            .ctx
            .qp_num(qp)
            .map_err(|e| verbs_error(&host.ctx, "qp_num", e))?;
        // The host's QP keeps the host's PSN; the others draw their own.
        let psn = if i == 0 {
            host.addr.psn
        } else {
            super::random_psn()
        };
        me.push(Dest {
            lid: 0,
            qpn,
            psn,
            gid: host.addr.gid,
        });
    }
    let n = qps.len();
    let (peers, client) = super::exchange(a, &me, RECORDS, deadline, progress, |p| {
        check_records(p, n)?;
        // The first record's GID decides the route, as in the program.
        let mac = resolve(link, &p[0])?;
        for ((&qp, mine), theirs) in qps.iter().zip(&me).zip(p) {
            let addr = peer_addr(a, theirs, mac);
            let ah = host.ah_to(&addr);
            host.connect_qp(qp, mine.psn, ah, &addr, &ConnectOpts::new(a.mtu))
                .map_err(setup_error)?;
        }
        Ok(())
    })?;
    let iters = u64::from(a.iters);
    let mut st = Loop {
        pending: vec![RECV; n],
        sent: vec![0; n],
        received: vec![0; n],
        scnt: 0,
        rcnt: 0,
    };
    let start = Instant::now();
    if client {
        for (i, &qp) in qps.iter().enumerate() {
            post_send(host, qp, size, i)?;
            st.pending[i] |= SEND;
            st.sent[i] += 1;
        }
    }
    let mut wc = [WorkCompletion::EMPTY; 16];
    while st.rcnt < iters || st.scnt < iters {
        if Instant::now() >= deadline {
            return Err(CliError::check(format!(
                "{} of {iters} messages received and {} of {iters} sends completed before the deadline (--timeout)",
                st.rcnt, st.scnt
            )));
        }
        let mut any = false;
        for cq in [host.scq, host.rcq] {
            let got = host
                .ctx
                .poll_cq(cq, &mut wc)
                .map_err(|e| verbs_error(&host.ctx, "poll_cq", e))?;
            for w in &wc[..got] {
                any = true;
                let i = completed(host, qps, &mut st, w, size, client)?;
                if st.scnt < iters && st.pending[i] == 0 {
                    post_send(host, qps[i], size, i)?;
                    st.pending[i] = SEND | RECV;
                    st.sent[i] += 1;
                }
            }
        }
        if !any {
            host.dev.advance_us(50);
        }
    }
    let pingpong = start.elapsed();
    // Keep the QPs up a little: the program's last messages still get
    // their ACKs; what arrives now is counted but not answered.
    let until = Instant::now() + LINGER;
    while Instant::now() < until {
        let got = host
            .ctx
            .poll_cq(host.rcq, &mut wc)
            .map_err(|e| verbs_error(&host.ctx, "poll_cq", e))?;
        for w in &wc[..got] {
            completed(host, qps, &mut st, w, size, client)?;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(Outcome {
        local_text: me.iter().map(text).collect(),
        remote_text: peers[..n].iter().map(text).collect(),
        received: st.rcnt,
        per_qp: st.received,
        pingpong,
    })
}

/// Account for completion `w`: its QP's index.
fn completed(
    host: &mut Host,
    qps: &[QpHandle],
    st: &mut Loop,
    w: &WorkCompletion,
    size: usize,
    client: bool,
) -> Result<usize, CliError> {
    let i = qps
        .iter()
        .position(|&q| host.ctx.qp_num(q).ok() == Some(w.qp_num))
        .ok_or_else(|| {
            CliError::check(format!(
                "a completion names QP {:#x}, not one of the model's",
                w.qp_num
            ))
        })?;
    if w.status != WcStatus::Success {
        return Err(CliError::check(format!(
            "QP {}: completion {:?} for wr_id {} (vendor syndrome {:#x})",
            i + 1,
            w.status,
            w.wr_id,
            w.vendor_err
        )));
    }
    if w.opcode == WcOpcode::Recv {
        let what = format!("QP {}: message {}", i + 1, st.received[i] + 1);
        if w.byte_len as usize != size {
            return Err(CliError::check(format!(
                "{what}: {} bytes, the program sends {size}",
                w.byte_len
            )));
        }
        // The program answers on a QP only what it heard there; its
        // first message on each comes unasked when it is the client.
        let allowed = st.sent[i] + u64::from(!client);
        if st.received[i] + 1 > allowed {
            return Err(CliError::check(format!(
                "{what}: more messages than the model sent on that QP ({}); one arrived twice or unasked",
                st.sent[i]
            )));
        }
        filled_and_reposted(host, w.wr_id, size, FILL, &what)?;
        st.received[i] += 1;
        st.rcnt += 1;
        st.pending[i] &= !RECV;
    } else {
        st.scnt += 1;
        st.pending[i] &= !SEND;
    }
    Ok(i)
}

fn post_send(host: &mut Host, qp: QpHandle, size: usize, i: usize) -> Result<(), CliError> {
    let sg = [Sge {
        addr: host.buf.iova() + host.spec.send_at() as u64,
        length: size as u32,
        lkey: host.lkey(),
    }];
    let wr = SendWr {
        wr_id: i as u64,
        opcode: WrOpcode::Send,
        send_flags: SendFlags::SIGNALED,
        sg_list: &sg,
        ..SendWr::EMPTY
    };
    host.ctx
        .post_send(qp, &[wr])
        .map_err(|e| verbs_error(&host.ctx, &format!("QP {}: post_send", i + 1), e.errno))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recs(n: usize) -> Vec<Dest> {
        let mut v = vec![Dest::UNUSED; RECORDS];
        for (i, d) in v.iter_mut().take(n).enumerate() {
            d.qpn = 0x20 + i as u32;
            d.gid[15] = 1;
        }
        v
    }

    #[test]
    fn the_qp_counts_must_agree() {
        assert!(check_records(&recs(16), 16).is_ok());
        let e = check_records(&recs(4), 16).unwrap_err();
        assert!(
            e.to_string().contains("names 4 QPs, the model has 16"),
            "{e}"
        );
        assert!(check_records(&recs(17), 16).is_err());
        // A gap: QP 3 unused, QP 4 named.
        let mut r = recs(4);
        r[2] = Dest::UNUSED;
        assert!(check_records(&r, 4).is_err());
    }
}
