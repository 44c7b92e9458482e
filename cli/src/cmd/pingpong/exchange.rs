//! The ping-pong itself: host 1 sends a message, host 2 receives it, checks
//! every byte and sends one back, `iters` times, as rc_pingpong's client
//! and server do. Every wait is bounded in device time.

use mlx5_driver::verbs::{SendFlags, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion, WrOpcode};
use mlx5_sim::Device;

use super::host::{verbs_error, Host, RECVS};
use crate::common::error::CliError;

/// Device time one wait step lets pass on both hosts.
const STEP_US: u64 = 100;
/// The longest wait for one completion, in device time: 60 s, far beyond
/// rc_pingpong's retry budget (8 × 4.096 µs × 2^14 ≈ 0.54 s).
const WAIT_STEPS: u64 = 60_000_000 / STEP_US;

/// Byte `i` of message `msg` (each message, each direction, differs).
pub fn pattern_byte(msg: u64, i: usize) -> u8 {
    let m = msg.wrapping_mul(0x9e37_79b9) >> 7;
    (i as u64).wrapping_mul(31).wrapping_add(m) as u8 ^ (i >> 8) as u8
}

/// Fill `out` with message `msg`'s payload.
fn fill(out: &mut [u8], msg: u64) {
    for (i, b) in out.iter_mut().enumerate() {
        *b = pattern_byte(msg, i);
    }
}

/// Poll `h`'s send (or receive) CQ for one completion, letting device time
/// pass on both hosts between polls; `None` after [`WAIT_STEPS`].
pub fn wait_one(
    h: &mut Host,
    send: bool,
    other: &Device,
) -> Result<Option<WorkCompletion>, CliError> {
    let cq = if send { h.scq } else { h.rcq };
    let mut wc = [WorkCompletion::EMPTY; 1];
    for _ in 0..WAIT_STEPS {
        let n = h
            .ctx
            .poll_cq(cq, &mut wc)
            .map_err(|e| verbs_error(&h.ctx, "poll_cq", e))?;
        if n == 1 {
            return Ok(Some(wc[0]));
        }
        h.dev.advance_us(STEP_US);
        other.advance_us(STEP_US);
    }
    Ok(None)
}

/// Messages moved and checked.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    /// Messages sent (both directions).
    pub sent: u64,
    /// Messages received once, in order, every byte as sent.
    pub received: u64,
}

/// Host `from` sends message `msg` to host `to`; wait for `to`'s receive
/// completion, check it and every byte, post the slot again, then wait for
/// `from`'s send completion.
fn one_way(
    from: &mut Host,
    to: &mut Host,
    msg: u64,
    size: usize,
    scratch: &mut [u8],
    tally: &mut Tally,
) -> Result<(), CliError> {
    let dir = if msg & 1 == 0 {
        "host 1 -> host 2"
    } else {
        "host 2 -> host 1"
    };
    let what = format!("message {} ({dir}, {size} bytes)", msg + 1);
    fill(&mut scratch[..size], msg);
    from.buf.write_bytes(0, &scratch[..size]);
    let sg = [Sge {
        addr: from.buf.iova(),
        length: size as u32,
        lkey: from.lkey(),
    }];
    let wr = SendWr {
        wr_id: msg,
        opcode: WrOpcode::Send,
        send_flags: SendFlags::SIGNALED,
        sg_list: if size == 0 { &[] } else { &sg },
        ..SendWr::EMPTY
    };
    from.ctx
        .post_send(from.qp, &[wr])
        .map_err(|e| verbs_error(&from.ctx, &format!("{what}: post_send"), e.errno))?;
    tally.sent += 1;

    let r = wait_one(to, false, &from.dev)?;
    let Some(r) = r else {
        // The sender's completion says why (retry exceeded), when it has one.
        let s = wait_one(from, true, &to.dev)?;
        return Err(match s {
            Some(s) if s.status != WcStatus::Success => CliError::check_with(
                format!(
                    "{what}: never arrived; the send completed with {:?}: \
                     the wire lost it beyond the retry budget (retry_cnt 7)",
                    s.status
                ),
                "lower the fault fractions (--drop, --corrupt, ...): each packet is sent at most 8 times",
            ),
            _ => CliError::check(format!("{what}: never arrived (no receive completion)")),
        });
    };
    if r.status != WcStatus::Success {
        return Err(CliError::check(format!(
            "{what}: receive completion {:?} (vendor syndrome {:#x})",
            r.status, r.vendor_err
        )));
    }
    if (r.opcode, r.byte_len, r.qp_num) != (WcOpcode::Recv, size as u32, to.addr.qpn) {
        return Err(CliError::check(format!(
            "{what}: receive completion {:?} of {} bytes on QP {:#x}, expected Recv of {size} on {:#x}",
            r.opcode, r.byte_len, r.qp_num, to.addr.qpn
        )));
    }
    let slot = r.wr_id as usize;
    if slot >= RECVS {
        return Err(CliError::check(format!(
            "{what}: receive completion names WQE {slot}, never posted"
        )));
    }
    to.buf
        .read_bytes(to.slot * (1 + slot), &mut scratch[..size]);
    if let Some(i) = (0..size).find(|&i| scratch[i] != pattern_byte(msg, i)) {
        return Err(CliError::check(format!(
            "{what}: byte {i} is {:#04x}, sent {:#04x} (a message lost, duplicated, reordered or damaged)",
            scratch[i],
            pattern_byte(msg, i)
        )));
    }
    to.post_recv(slot)?;

    match wait_one(from, true, &to.dev)? {
        Some(s) if s.status == WcStatus::Success && s.wr_id == msg => {}
        Some(s) => {
            return Err(CliError::check(format!(
                "{what}: send completion {:?} for wr_id {} (vendor syndrome {:#x})",
                s.status, s.wr_id, s.vendor_err
            )))
        }
        None => return Err(CliError::check(format!("{what}: no send completion"))),
    }
    tally.received += 1;
    Ok(())
}

/// `iters` round trips of `size`-byte SENDs; the first failure stops it.
/// Afterwards nothing more may arrive on either side.
pub fn run(a: &mut Host, b: &mut Host, size: usize, iters: u32) -> (Tally, Result<(), CliError>) {
    let mut tally = Tally::default();
    let mut scratch = vec![0u8; size];
    let res = (|| {
        for i in 0..RECVS {
            a.post_recv(i)?;
            b.post_recv(i)?;
        }
        for it in 0..u64::from(iters) {
            one_way(a, b, 2 * it, size, &mut scratch, &mut tally)?;
            one_way(b, a, 2 * it + 1, size, &mut scratch, &mut tally)?;
        }
        // A late duplicate would be a second delivery: let time pass, then
        // both receive CQs must be empty.
        let mut wc = [WorkCompletion::EMPTY; 1];
        for _ in 0..100 {
            a.dev.advance_us(1000);
            b.dev.advance_us(1000);
        }
        for (h, n) in [(&mut *a, 1), (&mut *b, 2)] {
            let extra = h
                .ctx
                .poll_cq(h.rcq, &mut wc)
                .map_err(|e| verbs_error(&h.ctx, "poll_cq", e))?;
            if extra != 0 {
                return Err(CliError::check(format!(
                    "host {n} received a message more than once (an extra receive completion after the last round trip)"
                )));
            }
        }
        Ok(())
    })();
    (tally, res)
}
