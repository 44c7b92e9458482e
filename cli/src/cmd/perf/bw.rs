//! The bandwidth tests, the model's side (linux-rdma/perftest
//! `src/send_bw.c`, `write_bw.c`, `read_bw.c`, `perftest_resources.c`
//! `run_iter_bw`, `run_iter_bw_server`; one QP, not bidirectional).
//!
//! The client streams `iters` SENDs, WRITEs or READs of `size` bytes with
//! up to a send queue's worth outstanding; the server of `ib_send_bw`
//! keeps receives posted and counts `iters` messages of `size` bytes, the
//! server of the WRITE and READ tests only waits. Afterwards the WRITE and
//! READ tests exchange one key record and their reports (the server
//! prints the client's), and every test closes.

use std::time::Instant;

use mlx5_driver::verbs::{SendFlags, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion, WrOpcode};

use super::exchange::BwReport;
use super::lat::Traffic;
use super::opts::Test;
use super::session::Connected;
use crate::cmd::pingpong::host::{setup_error, verbs_error, Host};
use crate::common::error::CliError;

/// Completions polled at a time.
const POLL_BATCH: usize = 16;

fn poll(host: &mut Host, send: bool, wc: &mut [WorkCompletion]) -> Result<usize, CliError> {
    let cq = if send { host.scq } else { host.rcq };
    host.ctx
        .poll_cq(cq, wc)
        .map_err(|e| verbs_error(&host.ctx, "poll_cq", e))
}

/// The client's stream: `iters` operations of `size` bytes on the
/// program's buffer (SENDs into its receives), every one signalled and
/// checked, in order.
fn stream(
    host: &mut Host,
    c: &Connected,
    test: Test,
    size: usize,
    iters: u32,
    deadline: Instant,
) -> Result<u64, CliError> {
    let (opcode, name) = match test {
        Test::SendBw => (WrOpcode::Send, "SEND"),
        Test::WriteBw => (WrOpcode::RdmaWrite, "WRITE"),
        _ => (WrOpcode::RdmaRead, "READ"),
    };
    let window = u64::from(host.spec.send_wr);
    let total = u64::from(iters);
    let (mut posted, mut done) = (0u64, 0u64);
    let mut wc = [WorkCompletion::EMPTY; POLL_BATCH];
    while done < total {
        while posted < total && posted - done < window {
            let sg = [Sge {
                addr: host.buf.iova() + host.spec.send_at() as u64,
                length: size as u32,
                lkey: host.lkey(),
            }];
            let wr = SendWr {
                wr_id: posted,
                opcode,
                send_flags: SendFlags::SIGNALED,
                sg_list: &sg,
                remote_addr: c.peer.vaddr,
                rkey: c.peer.rkey,
                ..SendWr::EMPTY
            };
            host.ctx.post_send(host.qp, &[wr]).map_err(|e| {
                verbs_error(
                    &host.ctx,
                    &format!("{name} {}: post_send", posted + 1),
                    e.errno,
                )
            })?;
            posted += 1;
        }
        let n = poll(host, true, &mut wc)?;
        for w in &wc[..n] {
            if w.status != WcStatus::Success || w.wr_id != done {
                return Err(CliError::check(format!(
                    "{name} {}: completion {:?} for wr_id {} (vendor syndrome {:#x})",
                    done + 1,
                    w.status,
                    w.wr_id,
                    w.vendor_err
                )));
            }
            done += 1;
        }
        if n == 0 {
            if Instant::now() >= deadline {
                return Err(CliError::check(format!(
                    "{name}s: {done} of {total} completed before the deadline (--timeout)"
                )));
            }
            host.dev.advance_us(20);
        }
    }
    Ok(done)
}

/// The server of `ib_send_bw`: `iters` messages of `size` bytes, each
/// receive posted again once it completed.
fn receive(host: &mut Host, size: usize, iters: u32, deadline: Instant) -> Result<u64, CliError> {
    let total = u64::from(iters);
    let mut got = 0u64;
    let mut wc = [WorkCompletion::EMPTY; POLL_BATCH];
    while got < total {
        let n = poll(host, false, &mut wc)?;
        for w in &wc[..n] {
            let what = format!("SEND {}", got + 1);
            if w.status != WcStatus::Success {
                return Err(CliError::check(format!(
                    "{what}: receive completion {:?} (vendor syndrome {:#x})",
                    w.status, w.vendor_err
                )));
            }
            if (w.opcode, w.byte_len) != (WcOpcode::Recv, size as u32) {
                return Err(CliError::check(format!(
                    "{what}: receive completion {:?} of {} bytes, the program sends {size}",
                    w.opcode, w.byte_len
                )));
            }
            let slot = w.wr_id as usize;
            if slot >= host.spec.recvs {
                return Err(CliError::check(format!(
                    "{what}: the completion names receive {slot}, never posted"
                )));
            }
            host.post_recv(slot).map_err(setup_error)?;
            got += 1;
        }
        if n == 0 {
            if Instant::now() >= deadline {
                return Err(CliError::check(format!(
                    "{got} of {total} SENDs arrived before the deadline (--timeout)"
                )));
            }
            host.dev.advance_us(20);
        }
    }
    Ok(got)
}

/// The test on this side, from the key records after the connect to the
/// close: what it did and, for the WRITE and READ tests with the program
/// as the client, the program's report.
pub fn run(
    test: Test,
    host: &mut Host,
    mut c: Connected,
    size: usize,
    iters: u32,
    deadline: Instant,
) -> Result<(Traffic, Option<BwReport>), CliError> {
    let client = c.conn.is_client();
    let receiver = test == Test::SendBw && !client;
    if receiver {
        // perftest's server posts its receives before the last record.
        for i in 0..host.spec.recvs {
            host.post_recv(i).map_err(setup_error)?;
        }
    }
    c.after_connect(test)?;
    let start = Instant::now();
    let mut t = Traffic::default();
    if client {
        t.posted = stream(host, &c, test, size, iters, deadline)?;
    } else if receiver {
        t.observed = receive(host, size, iters, deadline)?;
    }
    t.seconds = start.elapsed().as_secs_f64();
    let mut theirs = None;
    if test != Test::SendBw {
        let me = c.me;
        c.conn.hand_shake(&me)?;
        // perftest's server ran nothing and reports nothing.
        let mine = if client {
            let secs = t.seconds.max(1e-9);
            let mb = (size as f64) * f64::from(iters) / secs / f64::from(1u32 << 20);
            BwReport {
                size: size as u64,
                iters: u64::from(iters),
                bw_peak: mb,
                bw_avg: mb,
                msg_rate: f64::from(iters) / secs / 1e6,
            }
        } else {
            BwReport::default()
        };
        let report = c.conn.reports(&mine)?;
        // The server's report is whatever its unset struct held: only the
        // client's means something.
        theirs = (!client).then_some(report);
    }
    let me = c.me;
    c.conn.close(&me)?;
    Ok((t, theirs))
}
