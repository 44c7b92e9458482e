//! The traffic of perftest's latency tests, the model's side
//! (linux-rdma/perftest `src/perftest_resources.c`: `run_iter_lat_write`
//! for `ib_write_lat`, `run_iter_lat` for `ib_read_lat` and
//! `ib_atomic_lat`), each with the checks the model can make.
//!
//! - `ib_write_lat`: both sides RDMA WRITE `size` bytes to the other's
//!   buffer, the last byte the sender's count; each waits for the peer's
//!   count in the last byte of its own buffer before it writes the next.
//!   The server writes first.
//! - `ib_read_lat`, `ib_atomic_lat`: the client posts one READ of `size`
//!   bytes (or one FETCH_AND_ADD of 1) at a time on the server's buffer;
//!   the server only waits for the close.

use std::time::{Duration, Instant};

use mlx5_driver::verbs::{AtomicCap, SendFlags, SendWr, Sge, WcStatus, WorkCompletion, WrOpcode};

use super::opts::Test;
use super::session::Connected;
use crate::cmd::pingpong::host::{verbs_error, Host};
use crate::common::error::CliError;

/// What the traffic did.
#[derive(Debug, Clone, Default)]
pub struct Traffic {
    /// Operations this side posted and saw complete.
    pub posted: u64,
    /// The program's operations this side observed (WRITE counts seen, or
    /// the atomic total found in its buffer).
    pub observed: u64,
    /// Wall time of the traffic.
    pub seconds: f64,
}

/// Poll the send CQ for one completion until `deadline`.
fn send_done(host: &mut Host, deadline: Instant, what: &str) -> Result<WorkCompletion, CliError> {
    let mut wc = [WorkCompletion::EMPTY; 1];
    while Instant::now() < deadline {
        let n = host
            .ctx
            .poll_cq(host.scq, &mut wc)
            .map_err(|e| verbs_error(&host.ctx, "poll_cq", e))?;
        if n == 1 {
            if wc[0].status != WcStatus::Success {
                return Err(CliError::check(format!(
                    "{what}: completion {:?} (vendor syndrome {:#x})",
                    wc[0].status, wc[0].vendor_err
                )));
            }
            return Ok(wc[0]);
        }
        host.dev.advance_us(20);
    }
    Err(CliError::check(format!(
        "{what}: no completion before the deadline (--timeout)"
    )))
}

fn post(host: &mut Host, wr: SendWr<'_>, what: &str) -> Result<(), CliError> {
    host.ctx
        .post_send(host.qp, &[wr])
        .map_err(|e| verbs_error(&host.ctx, &format!("{what}: post_send"), e.errno))
}

/// `ib_write_lat` on this side: `iters` WRITEs out, `iters` counts in.
fn write_lat(
    host: &mut Host,
    c: &Connected,
    size: usize,
    iters: u32,
    deadline: Instant,
) -> Result<Traffic, CliError> {
    let mut t = Traffic::default();
    let poll_at = host.spec.target_at() + size - 1;
    let server = !c.conn.is_client();
    for n in 1..=u64::from(iters) {
        if !(server && n == 1) {
            wait_count(host, poll_at, n - u64::from(server), deadline)?;
            t.observed += 1;
        }
        let what = format!("WRITE {n}");
        let mut msg = vec![0u8; size];
        msg[size - 1] = n as u8;
        host.buf.write_bytes(host.spec.send_at(), &msg);
        let sg = [Sge {
            addr: host.buf.iova() + host.spec.send_at() as u64,
            length: size as u32,
            lkey: host.lkey(),
        }];
        let wr = SendWr {
            wr_id: n,
            opcode: WrOpcode::RdmaWrite,
            send_flags: SendFlags::SIGNALED,
            sg_list: &sg,
            remote_addr: c.peer.vaddr,
            rkey: c.peer.rkey,
            ..SendWr::EMPTY
        };
        post(host, wr, &what)?;
        send_done(host, deadline, &what)?;
        t.posted += 1;
    }
    if server {
        wait_count(host, poll_at, u64::from(iters), deadline)?;
        t.observed += 1;
    }
    Ok(t)
}

/// Wait until the byte at `at` of the buffer holds `n` (as a byte).
fn wait_count(host: &mut Host, at: usize, n: u64, deadline: Instant) -> Result<(), CliError> {
    let mut b = [0u8; 1];
    while Instant::now() < deadline {
        host.buf.read_bytes(at, &mut b);
        if b[0] == n as u8 {
            return Ok(());
        }
        host.dev.advance_us(20);
    }
    Err(CliError::check(format!(
        "the program's WRITE {n} never arrived (the last byte of the buffer is {:#04x})",
        b[0]
    )))
}

/// `ib_read_lat` / `ib_atomic_lat` as the client: one READ (or one
/// FETCH_AND_ADD of 1) at a time; the atomics' fetched values must count
/// up by one (each executed once, retried ones replayed, not redone).
fn requester(
    host: &mut Host,
    c: &Connected,
    test: Test,
    size: usize,
    iters: u32,
    deadline: Instant,
) -> Result<Traffic, CliError> {
    let mut t = Traffic::default();
    let mut first = None;
    let into = host.spec.send_at();
    for n in 0..u64::from(iters) {
        let atomic = test == Test::AtomicLat;
        let what = format!(
            "{} {}",
            if atomic { "FETCH_AND_ADD" } else { "READ" },
            n + 1
        );
        let sg = [Sge {
            addr: host.buf.iova() + into as u64,
            length: if atomic { 8 } else { size as u32 },
            lkey: host.lkey(),
        }];
        let wr = SendWr {
            wr_id: n,
            opcode: if atomic {
                WrOpcode::AtomicFetchAndAdd
            } else {
                WrOpcode::RdmaRead
            },
            send_flags: SendFlags::SIGNALED,
            sg_list: &sg,
            remote_addr: c.peer.vaddr,
            rkey: c.peer.rkey,
            compare_add: 1,
            ..SendWr::EMPTY
        };
        post(host, wr, &what)?;
        let wc = send_done(host, deadline, &what)?;
        if wc.wr_id != n {
            return Err(CliError::check(format!(
                "{what}: the completion names wr_id {}",
                wc.wr_id
            )));
        }
        if atomic {
            let mut v = [0u8; 8];
            host.buf.read_bytes(into, &mut v);
            // In host order: the device's 8-byte atomics are in host
            // endianness (AtomicCap::Hca, checked before the run).
            let v = u64::from_le_bytes(v);
            let base = *first.get_or_insert(v);
            if v != base.wrapping_add(n) {
                return Err(CliError::check(format!(
                    "{what}: fetched {v:#x}, expected {:#x} (the first fetched {base:#x} plus {n})",
                    base.wrapping_add(n)
                )));
            }
        }
        t.posted += 1;
    }
    Ok(t)
}

/// The traffic of `test` on this side, then (READ and atomic tests) the
/// close; the server of `ib_atomic_lat` then checks that its buffer
/// counted every FETCH_AND_ADD exactly once.
pub fn run(
    test: Test,
    host: &mut Host,
    mut c: Connected,
    size: usize,
    iters: u32,
    deadline: Instant,
) -> Result<Traffic, CliError> {
    if test == Test::AtomicLat && host.ctx.query_device().atomic_cap != AtomicCap::Hca {
        return Err(CliError::failed(
            "the device does not execute IB atomics in host endianness (atomic_cap is not HCA)",
            "use a profile whose atomic caps serve 8-byte atomics",
        ));
    }
    c.after_connect(test)?;
    let start = Instant::now();
    let client = c.conn.is_client();
    let mut t = match test {
        Test::WriteLat => write_lat(host, &c, size, iters, deadline)?,
        Test::ReadLat | Test::AtomicLat if client => {
            requester(host, &c, test, size, iters, deadline)?
        }
        _ => Traffic::default(),
    };
    t.seconds = start.elapsed().as_secs_f64();
    if test.reads() {
        let me = c.me;
        c.conn.close(&me)?;
    }
    if test == Test::AtomicLat && !client {
        let mut v = [0u8; 8];
        host.buf.read_bytes(host.spec.target_at(), &mut v);
        // In host order, as the device executes atomics (AtomicCap::Hca).
        let total = u64::from_le_bytes(v);
        if total != u64::from(iters) {
            return Err(CliError::check(format!(
                "the buffer counted {total} FETCH_AND_ADDs of 1, the program posted {iters}"
            )));
        }
        t.observed = total;
    }
    // Nothing more may arrive: no late duplicate WRITE or atomic.
    std::thread::sleep(Duration::from_millis(100));
    Ok(t)
}
