//! Traffic through the QP pair: messages with checkable payloads posted on
//! the sender, bounded waits for their completions (on a card they arrive
//! after the doorbell, not during it), and the checks of every receive and
//! send completion against what was posted: `wr_id` and order, opcode,
//! status, byte count, sending QP, immediate data, the payload byte for
//! byte.

use std::collections::VecDeque;

use mlx5_driver::cq::{Cq, Cqe, CqeStatus};
use mlx5_driver::qp::{Payload, SendOp, SendOpcode, SendRequest};
use mlx5_driver::srq::{RecvRequest, Sge, Srq};
use mlx5_driver::Event;
use mlx5_hal::{DmaRegion, Hal};
use mlx5_regs::CqeOpcode;

use super::objects::{Parts, BUF, NBUF};
use crate::common::error::CliError;
use crate::common::session::TracedHca;

/// `wr_id` of the send of message `seq` is `SEND_WR_BASE + seq`, so send
/// and receive ids never look alike in the narration.
pub const SEND_WR_BASE: u64 = 1000;
/// How long a completion or an event may take (Hal clock: virtual on the
/// model). A loopback message takes microseconds on a card.
pub const WAIT_NS: u64 = 2_000_000_000;
/// How many problems are kept word for word.
const MAX_PROBLEMS: usize = 8;

/// What a message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// SEND from a gather list (the send buffers, through the DMA key).
    Send,
    /// SEND with the payload inline in the WQE (no key).
    Inline,
    /// RDMA WRITE with immediate into the target buffer, through the run's
    /// own key as rkey; consumes one receive for the immediate.
    WriteImm,
}

impl Kind {
    fn send_opcode(self) -> SendOpcode {
        match self {
            Kind::Send | Kind::Inline => SendOpcode::Send,
            Kind::WriteImm => SendOpcode::RdmaWriteImm,
        }
    }

    fn recv_opcode(self) -> CqeOpcode {
        match self {
            Kind::Send | Kind::Inline => CqeOpcode::RESP_SEND,
            Kind::WriteImm => CqeOpcode::RESP_WR_IMM,
        }
    }
}

/// The bytes of message `seq`, `len` long: its number in text, then letters.
pub fn payload(seq: u64, len: usize) -> Vec<u8> {
    let mut p = format!("mlx5 message {seq:05} ").into_bytes();
    p.truncate(len);
    let mut i = 0u8;
    while p.len() < len {
        p.push(b'a' + i % 26);
        i = i.wrapping_add(1);
    }
    p
}

/// The demo's message lengths: 32..=255 bytes, varying.
pub fn demo_len(seq: u64) -> usize {
    32 + (seq as usize * 37) % (BUF - 32)
}

/// The immediate of message `seq`.
fn imm_of(seq: u64) -> u32 {
    0x1234_0000 | seq as u32 & 0xffff
}

#[derive(Debug, Clone, Copy)]
struct Msg {
    seq: u64,
    kind: Kind,
    len: usize,
}

/// The traffic of a run: what was posted, what came back.
#[derive(Debug, Default)]
pub struct Flow {
    next_seq: u64,
    next_recv_wr: u64,
    recv_wrs: VecDeque<u64>,
    in_flight: VecDeque<Msg>,
    sends: VecDeque<Msg>,
    /// Messages posted on the sender.
    pub sent: u64,
    /// Receive completions that matched their message in every respect.
    pub received: u64,
    /// Send completions that matched their request in every respect.
    pub send_completions: u64,
    /// Completions that did not match (each also in `problems`, up to 8).
    pub bad: u64,
    /// What did not match, in words.
    pub problems: Vec<String>,
}

impl Flow {
    /// Nothing posted yet.
    pub fn new() -> Flow {
        Flow::default()
    }

    fn problem(&mut self, what: String) {
        self.bad += 1;
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(what);
        }
    }

    /// Sends posted and not yet completed (each holds a send-buffer slot).
    pub fn in_flight(&self) -> usize {
        self.sends.len()
    }

    /// The number the next message gets.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The `wr_id` the next receive gets.
    pub fn next_recv_wr(&self) -> u64 {
        self.next_recv_wr
    }

    /// Post `n` receives, one buffer slot each, with the HCA's default key
    /// (the DMA key of bring-up).
    pub fn post_recvs<H: Hal>(
        &mut self,
        hca: &TracedHca<'_, H>,
        srq: &mut Srq<H>,
        rbufs: &DmaRegion<H>,
        n: u64,
    ) -> Result<(), CliError> {
        let ids: Vec<u64> = (self.next_recv_wr..self.next_recv_wr + n).collect();
        let sges: Vec<[Sge; 1]> = ids
            .iter()
            .map(|id| [hca.sge(slot_addr(rbufs, *id), BUF as u32)])
            .collect();
        let reqs: Vec<RecvRequest<'_>> = sges
            .iter()
            .zip(&ids)
            .map(|(s, &wr_id)| RecvRequest { wr_id, sges: s })
            .collect();
        srq.post(&reqs).map_err(|f| {
            CliError::failed(
                format!("posting receive wr_id {} failed: {}", ids[f.index], f.error),
                "the SRQ is full or the request has too many scatter entries",
            )
        })?;
        self.next_recv_wr += n;
        self.recv_wrs.extend(ids);
        Ok(())
    }

    /// Post one message per entry (kind, length) on the sender with a
    /// single `post_send` (one doorbell), every request signaled. The
    /// payload goes into the message's send-buffer slot first.
    pub fn post<H: Hal>(
        &mut self,
        hca: &TracedHca<'_, H>,
        p: &mut Parts<'_, H>,
        msgs: &[(Kind, usize)],
    ) -> Result<(), CliError> {
        if self.sends.len() + msgs.len() > NBUF {
            return Err(CliError::failed(
                format!(
                    "{} sends would be in flight, the send buffer has {NBUF} slots",
                    self.sends.len() + msgs.len()
                ),
                "poll to complete the sends in flight before posting more",
            ));
        }
        let mut posted = Vec::with_capacity(msgs.len());
        let mut data = Vec::with_capacity(msgs.len());
        for &(kind, len) in msgs {
            let seq = self.next_seq + posted.len() as u64;
            let bytes = payload(seq, len.min(BUF));
            if kind != Kind::Inline {
                p.sbufs.write_bytes(slot(seq), &bytes);
            }
            if kind == Kind::WriteImm {
                if let Some((t, _)) = p.target {
                    t.write_bytes(slot(seq), &vec![0u8; BUF]);
                }
            }
            posted.push(Msg {
                seq,
                kind,
                len: bytes.len(),
            });
            data.push(bytes);
        }
        let sges: Vec<[Sge; 1]> = posted
            .iter()
            .map(|m| [hca.sge(slot_addr(p.sbufs, m.seq), m.len as u32)])
            .collect();
        let mut reqs = Vec::with_capacity(posted.len());
        for (i, m) in posted.iter().enumerate() {
            let op = match m.kind {
                Kind::Send | Kind::Inline => SendOp::Send,
                Kind::WriteImm => {
                    let Some((t, rkey)) = p.target else {
                        return Err(CliError::failed(
                            "internal error: an RDMA WRITE without a target buffer and key",
                            "this is a bug in mlx5; please report it",
                        ));
                    };
                    SendOp::RdmaWriteImm {
                        raddr: slot_addr(t, m.seq),
                        rkey,
                        imm: imm_of(m.seq),
                    }
                }
            };
            let payload = match m.kind {
                Kind::Inline => Payload::Inline(&data[i]),
                _ => Payload::Sges(&sges[i]),
            };
            reqs.push(SendRequest {
                wr_id: SEND_WR_BASE + m.seq,
                op,
                payload,
                signaled: true,
                solicited: false,
            });
        }
        let res = p.sender.post_send(&reqs);
        let ok = match &res {
            Ok(()) => posted.len(),
            Err(f) => f.index,
        };
        for m in &posted[..ok] {
            self.in_flight.push_back(*m);
            self.sends.push_back(*m);
        }
        self.next_seq += ok as u64;
        self.sent += ok as u64;
        res.map_err(|f| {
            CliError::failed(
                format!(
                    "post_send refused message {} (request {} of the list): {} (errno {})",
                    posted[f.index].seq,
                    f.index,
                    f.error,
                    f.error.errno()
                ),
                "the send queue is full, in the wrong state, or the request too large",
            )
        })
    }

    /// Poll every receive completion waiting and check it against the
    /// oldest message in flight. Returns the message numbers polled.
    pub fn poll_recvs<H: Hal>(&mut self, p: &mut Parts<'_, H>) -> Vec<u64> {
        let mut out = [Cqe::EMPTY; 16];
        let mut seqs = Vec::new();
        loop {
            let n = p.rcq.poll(&mut out);
            if n == 0 {
                return seqs;
            }
            for c in &out[..n] {
                if let Some(seq) = self.check_recv(p, c) {
                    seqs.push(seq);
                }
            }
        }
    }

    fn check_recv<H: Hal>(&mut self, p: &mut Parts<'_, H>, c: &Cqe) -> Option<u64> {
        if c.is_requester() {
            self.problem(format!(
                "a send completion (QP {:#x}) on the receive CQ",
                c.qpn
            ));
            return None;
        }
        let rc = match p.receiver.complete_recv(p.srq, c) {
            Ok(rc) => rc,
            Err(e) => {
                self.problem(format!("a receive completion the driver refused: {e}"));
                return None;
            }
        };
        let want_wr = self.recv_wrs.pop_front();
        let Some(m) = self.in_flight.pop_front() else {
            self.problem(format!(
                "a receive completion (wr_id {}) for no message",
                rc.wr_id
            ));
            return None;
        };
        let expect = payload(m.seq, m.len);
        let mut got = vec![0u8; m.len];
        match (m.kind, p.target) {
            (Kind::WriteImm, Some((t, _))) => t.read_bytes(slot(m.seq), &mut got),
            _ => p.rbufs.read_bytes(slot(rc.wr_id), &mut got),
        }
        let mut wrong = Vec::new();
        if Some(rc.wr_id) != want_wr {
            wrong.push(format!("wr_id {} (expected {want_wr:?})", rc.wr_id));
        }
        if rc.status != CqeStatus::Success {
            wrong.push(format!("status {:?} ({:?})", rc.status, c.error()));
        }
        if rc.opcode != m.kind.recv_opcode() {
            wrong.push(format!("opcode {:?}", rc.opcode));
        }
        if rc.byte_len as usize != m.len {
            wrong.push(format!("byte count {} (sent {})", rc.byte_len, m.len));
        }
        if rc.src_qpn != p.sender.qpn() {
            wrong.push(format!("sender QP {:#x}", rc.src_qpn));
        }
        if m.kind == Kind::WriteImm && rc.imm != imm_of(m.seq) {
            wrong.push(format!(
                "immediate {:#x} (sent {:#x})",
                rc.imm,
                imm_of(m.seq)
            ));
        }
        if got != expect {
            let at = got
                .iter()
                .zip(&expect)
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            wrong.push(format!("payload differs from byte {at}"));
        }
        if wrong.is_empty() {
            self.received += 1;
        } else {
            self.problem(format!(
                "message {} received wrong: {}",
                m.seq,
                wrong.join(", ")
            ));
        }
        Some(m.seq)
    }

    /// Poll every send completion waiting and check it against the oldest
    /// send in flight. Returns the `wr_id`s polled.
    pub fn poll_sends<H: Hal>(&mut self, p: &mut Parts<'_, H>) -> Vec<u64> {
        let mut out = [Cqe::EMPTY; 16];
        let mut ids = Vec::new();
        loop {
            let n = p.scq.poll(&mut out);
            if n == 0 {
                return ids;
            }
            for c in &out[..n] {
                let sc = match p.sender.complete_send(c) {
                    Ok(sc) => sc,
                    Err(e) => {
                        self.problem(format!("a send completion the driver refused: {e}"));
                        continue;
                    }
                };
                ids.push(sc.wr_id);
                let Some(m) = self.sends.pop_front() else {
                    self.problem(format!(
                        "a send completion (wr_id {}) for no send",
                        sc.wr_id
                    ));
                    continue;
                };
                let mut wrong = Vec::new();
                if sc.wr_id != SEND_WR_BASE + m.seq {
                    wrong.push(format!(
                        "wr_id {} (expected {})",
                        sc.wr_id,
                        SEND_WR_BASE + m.seq
                    ));
                }
                if let Some(e) = sc.error() {
                    wrong.push(format!("error {e:?}"));
                }
                if sc.opcode != m.kind.send_opcode() || sc.retired != 1 {
                    wrong.push(format!("opcode {:?}, {} retired", sc.opcode, sc.retired));
                }
                if wrong.is_empty() {
                    self.send_completions += 1;
                } else {
                    self.problem(format!(
                        "send of message {} completed wrong: {}",
                        m.seq,
                        wrong.join(", ")
                    ));
                }
            }
        }
    }

    /// Wait until every message in flight has its receive and its send
    /// completion waiting, then poll both CQs. Returns (message numbers,
    /// send `wr_id`s) polled.
    pub fn complete_all<H: Hal>(
        &mut self,
        hca: &TracedHca<'_, H>,
        p: &mut Parts<'_, H>,
    ) -> Result<(Vec<u64>, Vec<u64>), CliError> {
        wait_pending(hca, p.rcq, self.in_flight.len(), "receive")?;
        wait_pending(hca, p.scq, self.sends.len(), "send")?;
        Ok((self.poll_recvs(p), self.poll_sends(p)))
    }
}

fn slot(id: u64) -> usize {
    (id as usize % NBUF) * BUF
}

fn slot_addr<H: Hal>(r: &DmaRegion<H>, id: u64) -> u64 {
    r.iova() + slot(id) as u64
}

/// Wait (bounded) until `want` completions are waiting on `cq`.
pub fn wait_pending<H: Hal>(
    hca: &TracedHca<'_, H>,
    cq: &Cq<H>,
    want: usize,
    what: &str,
) -> Result<(), CliError> {
    let hal = hca.hal();
    let start = hal.now_ns();
    loop {
        let have = cq.pending();
        if have >= want {
            return Ok(());
        }
        if hal.now_ns().saturating_sub(start) > WAIT_NS {
            return Err(CliError::failed(
                format!(
                    "only {have} of {want} {what} completions arrived on CQ {:#x} within {} s",
                    cq.cqn(),
                    WAIT_NS / 1_000_000_000
                ),
                "the message never completed: `mlx5 selftest` queries the QP's counters; docs/hardware.md lists what they mean",
            ));
        }
        hca.check_health()
            .map_err(|e| CliError::driver(format!("waiting for {what} completions"), e))?;
        hal.delay_us(10);
    }
}

/// Poll the EQs once; returns (SRQ limit events for `srqn`, completion
/// events for `cqn`, other events).
pub fn poll_eq<H: Hal>(
    hca: &TracedHca<'_, H>,
    srqn: Option<u32>,
    cqn: Option<u32>,
) -> Result<(u64, u64, Vec<Event>), CliError> {
    hca.poll_events()
        .map_err(|e| CliError::driver("polling the event queues", e))?;
    let (mut limit, mut comp, mut other) = (0, 0, Vec::new());
    while let Some(ev) = hca.next_event() {
        match ev {
            Event::SrqLimit { srqn: n } if Some(n) == srqn => limit += 1,
            e => other.push(e),
        }
    }
    while let Some(ev) = hca.next_completion() {
        match ev {
            Event::Completion { cqn: n } if Some(n) == cqn => comp += 1,
            e => other.push(e),
        }
    }
    Ok((limit, comp, other))
}

/// Poll the EQs, bounded by [`WAIT_NS`] on the device clock, until an SRQ
/// limit event for `srqn` arrives. On a card, and on the model with the
/// device on its own thread, the limit EQE can trail the CQE of the message
/// that took the SRQ below its limit, so "no event right after the
/// completion" is not yet "no event". Returns what [`poll_eq`] returns,
/// summed over the polls, and the nanoseconds waited.
pub fn wait_limit_event<H: Hal>(
    hca: &TracedHca<'_, H>,
    srqn: u32,
    cqn: Option<u32>,
) -> Result<(u64, u64, Vec<Event>, u64), CliError> {
    let hal = hca.hal();
    let start = hal.now_ns();
    let (mut limit, mut comp, mut other) = (0, 0, Vec::new());
    loop {
        let (l, c, o) = poll_eq(hca, Some(srqn), cqn)?;
        limit += l;
        comp += c;
        other.extend(o);
        let waited = hal.now_ns().saturating_sub(start);
        if limit > 0 || waited > WAIT_NS {
            return Ok((limit, comp, other, waited));
        }
        hal.delay_us(10);
    }
}

/// Receives still posted on the device: posted and not completed, minus
/// the completions waiting unpolled.
pub fn left<H: Hal>(srq: &Srq<H>, rcq: &Cq<H>) -> usize {
    srq.outstanding().saturating_sub(rcq.pending())
}

/// `messages 3..=7` / `wr_id 1003..=1007` style ranges.
pub fn range(what: &str, ids: &[u64]) -> String {
    match (ids.first(), ids.last()) {
        (Some(a), Some(b)) if a == b => format!("{what} {a}"),
        (Some(a), Some(b)) => format!("{what} {a}..={b}"),
        _ => "nothing".into(),
    }
}
