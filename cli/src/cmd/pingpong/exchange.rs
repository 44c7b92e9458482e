//! The ping-pong itself: host 1 sends a message, host 2 receives it, checks
//! every byte and sends one back, `iters` times, as rc_pingpong's client
//! and server do. Every wait is bounded in device time.

use mlx5_driver::verbs::{SendFlags, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion, WrOpcode};
use mlx5_sim::Device;

use super::host::{setup_error, verbs_error, Host, RECVS};
use super::opts::Op;
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
    h.wait_one(send, other, STEP_US, WAIT_STEPS)
        .map_err(setup_error)
}

/// Messages moved and checked.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    /// Messages sent (both directions).
    pub sent: u64,
    /// Messages received once, in order, every byte as sent.
    pub received: u64,
}

/// The 8-byte value message `msg` leaves with an atomic (in host byte
/// order: bring-up sets the device's atomic endianness to the host's, as
/// Linux does).
fn atomic_value(msg: u64) -> u64 {
    u64::from_ne_bytes(core::array::from_fn(|i| pattern_byte(msg, i)))
}

/// Host `from` moves message `msg` to (or, with READ, from) host `to` with
/// `op`; wait for the completions the operation gives, check them and
/// every byte, post a consumed receive WQE again.
fn one_way(
    from: &mut Host,
    to: &mut Host,
    op: Op,
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
    let target = to.addr.addr + to.spec.target_at() as u64;
    let mut wr = SendWr {
        wr_id: msg,
        send_flags: SendFlags::SIGNALED,
        remote_addr: target,
        rkey: to.addr.rkey,
        imm_data: (msg as u32).to_be(),
        ..SendWr::EMPTY
    };
    // What the peer's memory (or, for READ, this host's) must hold after.
    fill(&mut scratch[..size], msg);
    let mut expect_original = None;
    match op {
        Op::Send | Op::SendImm | Op::Write | Op::WriteImm => {
            from.buf.write_bytes(from.spec.send_at(), &scratch[..size]);
            wr.opcode = match op {
                Op::Send => WrOpcode::Send,
                Op::SendImm => WrOpcode::SendWithImm,
                Op::Write => WrOpcode::RdmaWrite,
                _ => WrOpcode::RdmaWriteWithImm,
            };
        }
        Op::Read => {
            // The responder's application prepared the message; the
            // requester's landing area starts out different.
            to.buf.write_bytes(to.spec.target_at(), &scratch[..size]);
            let poison: Vec<u8> = scratch[..size].iter().map(|b| !b).collect();
            from.buf.write_bytes(from.spec.send_at(), &poison);
            wr.opcode = WrOpcode::RdmaRead;
        }
        Op::FetchAdd | Op::CmpSwap => {
            let mut cur = [0u8; 8];
            to.buf.read_bytes(to.spec.target_at(), &mut cur);
            let cur = u64::from_ne_bytes(cur);
            let new = atomic_value(msg);
            if op == Op::FetchAdd {
                wr.opcode = WrOpcode::AtomicFetchAndAdd;
                wr.compare_add = new.wrapping_sub(cur);
            } else {
                wr.opcode = WrOpcode::AtomicCmpAndSwp;
                wr.compare_add = cur;
                wr.swap = new;
            }
            scratch[..8].copy_from_slice(&new.to_ne_bytes());
            from.buf
                .write_bytes(from.spec.send_at(), &(!cur).to_ne_bytes());
            expect_original = Some(cur);
        }
    }
    let sg = [Sge {
        addr: from.buf.iova() + from.spec.send_at() as u64,
        length: size as u32,
        lkey: from.lkey(),
    }];
    wr.sg_list = if size == 0 { &[] } else { &sg };
    from.ctx
        .post_send(from.qp, &[wr])
        .map_err(|e| verbs_error(&from.ctx, &format!("{what}: post_send"), e.errno))?;
    tally.sent += 1;

    if op.consumes_recv() {
        receive(from, to, op, msg, size, &what)?;
    }
    match wait_one(from, true, &to.dev)? {
        Some(s) if s.status == WcStatus::Success && s.wr_id == msg => {}
        Some(s) => {
            return Err(CliError::check_with(
                format!(
                    "{what}: send completion {:?} for wr_id {} (vendor syndrome {:#x})",
                    s.status, s.wr_id, s.vendor_err
                ),
                "a RETRY_EXC_ERR means the wire lost a packet beyond the retry budget (retry_cnt 7): lower the fault fractions (--drop, --corrupt, ...)",
            ))
        }
        None => return Err(CliError::check(format!("{what}: no send completion"))),
    }
    // The bytes where they must be now: the peer's receive slot or target
    // area, or (READ, atomics) this host's landing area.
    let (host, at) = match op {
        Op::Send | Op::SendImm => (&*to, usize::MAX),
        Op::Write | Op::WriteImm => (&*to, to.spec.target_at()),
        Op::Read => (&*from, from.spec.send_at()),
        Op::FetchAdd | Op::CmpSwap => (&*to, to.spec.target_at()),
    };
    if at != usize::MAX {
        check_bytes(host, at, &scratch[..size], &what)?;
    }
    if let Some(orig) = expect_original {
        let mut got = [0u8; 8];
        from.buf.read_bytes(from.spec.send_at(), &mut got);
        let got = u64::from_ne_bytes(got);
        if got != orig {
            return Err(CliError::check(format!(
                "{what}: the atomic returned {got:#018x}, the word held {orig:#018x}"
            )));
        }
    }
    tally.received += 1;
    Ok(())
}

/// `size` bytes of `host`'s buffer at `at` must be `want`.
fn check_bytes(host: &Host, at: usize, want: &[u8], what: &str) -> Result<(), CliError> {
    let mut got = vec![0u8; want.len()];
    host.buf.read_bytes(at, &mut got);
    if let Some(i) = (0..want.len()).find(|&i| got[i] != want[i]) {
        return Err(CliError::check(format!(
            "{what}: byte {i} is {:#04x}, sent {:#04x} (a message lost, duplicated, reordered or damaged)",
            got[i], want[i]
        )));
    }
    Ok(())
}

/// Wait for `to`'s receive completion of message `msg`, check it (and a
/// SEND's bytes in the slot it names), post the slot again.
fn receive(
    from: &mut Host,
    to: &mut Host,
    op: Op,
    msg: u64,
    size: usize,
    what: &str,
) -> Result<(), CliError> {
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
    let (opcode, imm) = match op {
        Op::Send => (WcOpcode::Recv, None),
        Op::SendImm => (WcOpcode::Recv, Some((msg as u32).to_be())),
        _ => (WcOpcode::RecvRdmaWithImm, Some((msg as u32).to_be())),
    };
    if (r.opcode, r.byte_len, r.qp_num, r.imm_data) != (opcode, size as u32, to.addr.qpn, imm) {
        return Err(CliError::check(format!(
            "{what}: receive completion {:?} of {} bytes on QP {:#x} with immediate {:?}, \
             expected {opcode:?} of {size} on {:#x} with {imm:?}",
            r.opcode, r.byte_len, r.qp_num, r.imm_data, to.addr.qpn
        )));
    }
    let slot = r.wr_id as usize;
    if slot >= RECVS {
        return Err(CliError::check(format!(
            "{what}: receive completion names WQE {slot}, never posted"
        )));
    }
    if op != Op::WriteImm {
        let mut want = vec![0u8; size];
        fill(&mut want, msg);
        check_bytes(to, to.spec.recv_at(slot), &want, what)?;
    }
    to.post_recv(slot).map_err(setup_error)
}

/// `iters` round trips of `size`-byte SENDs; the first failure stops it.
/// Afterwards nothing more may arrive on either side.
pub fn run(
    a: &mut Host,
    b: &mut Host,
    op: Op,
    size: usize,
    iters: u32,
) -> (Tally, Result<(), CliError>) {
    let mut tally = Tally::default();
    let mut scratch = vec![0u8; size.max(8)];
    let res = (|| {
        for i in 0..RECVS {
            a.post_recv(i).map_err(setup_error)?;
            b.post_recv(i).map_err(setup_error)?;
        }
        for it in 0..u64::from(iters) {
            one_way(a, b, op, 2 * it, size, &mut scratch, &mut tally)?;
            one_way(b, a, op, 2 * it + 1, size, &mut scratch, &mut tally)?;
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
