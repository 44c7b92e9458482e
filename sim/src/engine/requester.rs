//! The requester side of RC on a wire: a message becomes packets (FIRST,
//! MIDDLE..., LAST or ONLY, one PSN each, AckReq on the last), goes on the
//! wire, and waits for the responder's ACK (coalesced: an ACK for PSN p
//! covers everything up to p). NAK PSN sequence error: go back to its PSN;
//! RNR NAK: wait its timer, then go back; the local ACK timer (4.096 µs ×
//! 2^timeout): go back to the oldest unacknowledged PSN; `retry_cnt` and
//! `rnr_retry` (7 = forever) bound the retries (IBTA vol. 1 §9.7; rxe
//! `rxe_req.c`, `rxe_comp.c`). One message is in flight per QP; packets are
//! regenerated from the WQE on every (re)transmission.

use mlx5_regs::consts::wqe as w;
use mlx5_regs::consts::{cqe_syndrome, mtu};

use super::frames::pkey_of;
use super::wqe::Wqe;
use crate::qp::{ack_timeout_ns, rnr_timer_ns, Wait, WaitKind};
use crate::state::State;
use crate::wire::{
    opcode as op, psn_diff, syndrome, AckKind, Aeth, Bth, ExtHeaders, Packet, Reth, MASK24,
};

/// Why the in-flight message is sent again when its QP next runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resend {
    /// The ACK timer expired (costs a transport retry).
    Timeout,
    /// A NAK PSN sequence error asked for it (the retry is already counted).
    SeqNak,
    /// The RNR timer of an RNR NAK expired.
    Rnr,
}

/// The message a QP has on the wire.
#[derive(Debug, Clone)]
pub(crate) struct Inflight {
    /// The WQE (for its completion).
    pub wqe: Wqe,
    pub first_psn: u32,
    pub npkts: u32,
    /// The next PSN to send.
    pub resend_from: u32,
    /// The oldest PSN not yet acknowledged.
    pub una: u32,
    /// Transport retries left (`retry_count`).
    pub retry_left: u8,
    /// RNR retries left; `None` = forever (`rnr_retry` 7).
    pub rnr_left: Option<u8>,
    /// What the next run of the QP does with the message.
    pub resend: Resend,
    /// READ: the response bytes so far (written out at LAST/ONLY).
    pub rd_buf: Vec<u8>,
}

impl Inflight {
    fn last_psn(&self) -> u32 {
        (self.first_psn + self.npkts - 1) & MASK24
    }

    /// `psn` lies in this message's range.
    fn holds(&self, psn: u32) -> bool {
        psn_diff(psn, self.first_psn) >= 0 && psn_diff(psn, self.last_psn()) <= 0
    }
}

/// BTH opcode of packet `k` of `n` of a message with WQE opcode `wop`.
fn packet_opcode(wop: u8, k: u32, n: u32) -> u8 {
    let write = matches!(wop, w::OPCODE_RDMA_WRITE | w::OPCODE_RDMA_WRITE_IMM);
    let imm = matches!(wop, w::OPCODE_SEND_IMM | w::OPCODE_RDMA_WRITE_IMM);
    match (write, n == 1, k == 0, k + 1 == n, imm) {
        (false, true, _, _, false) => op::SEND_ONLY,
        (false, true, _, _, true) => op::SEND_ONLY_IMM,
        (false, false, true, _, _) => op::SEND_FIRST,
        (false, false, false, false, _) => op::SEND_MIDDLE,
        (false, false, false, true, false) => op::SEND_LAST,
        (false, false, false, true, true) => op::SEND_LAST_IMM,
        (true, true, _, _, false) => op::WRITE_ONLY,
        (true, true, _, _, true) => op::WRITE_ONLY_IMM,
        (true, false, true, _, _) => op::WRITE_FIRST,
        (true, false, false, false, _) => op::WRITE_MIDDLE,
        (true, false, false, true, false) => op::WRITE_LAST,
        (true, false, false, true, true) => op::WRITE_LAST_IMM,
    }
}

impl State {
    /// The port is joined to a wire.
    pub(crate) fn on_wire(&self) -> bool {
        self.port.wire.is_some()
    }

    /// Execute WQE `wq` of `qpn` toward a peer on the wire: first
    /// transmission, or a retransmission when the QP's timer or a NAK woke
    /// it. Always stops the send queue (the next WQE waits for the ACK).
    pub(super) fn wire_exec(&mut self, qpn: u32, wq: Wqe, payload: &[u8]) -> bool {
        let now = self.now_ns();
        let rd_atomic = wq.is_read_or_atomic();
        let rd_npkts = self.rd_atomic_npkts(qpn, &wq);
        let Some(q) = self.objects.qps.get_mut(&qpn) else {
            return false;
        };
        let timeout = ack_timeout_ns(q.path.ack_timeout);
        let mtu = mtu::bytes(q.mtu).unwrap_or(256) as usize;
        let fresh = q.wire.tx.as_ref().is_none_or(|t| t.wqe.index != wq.index);
        if fresh {
            let npkts = if rd_atomic {
                rd_npkts
            } else {
                payload.len().div_ceil(mtu).max(1) as u32
            };
            let inflight = Inflight {
                wqe: wq,
                first_psn: q.next_send_psn,
                npkts,
                resend_from: q.next_send_psn,
                una: q.next_send_psn,
                retry_left: q.retry_count,
                rnr_left: (q.rnr_retry != 7).then_some(q.rnr_retry),
                resend: Resend::Timeout,
                rd_buf: Vec::new(),
            };
            q.wire.tx = Some(match q.wire.spare.take() {
                Some(mut b) => {
                    *b = inflight;
                    b
                }
                None => Box::new(inflight),
            });
        } else {
            let tx = q.wire.tx.as_mut().expect("in flight");
            if tx.resend == Resend::Timeout {
                self.stats.ack_timeouts += 1;
                if tx.retry_left == 0 {
                    let (i, n, o) = (tx.wqe.index, tx.wqe.wqebbs, tx.wqe.opcode);
                    self.req_error(qpn, i, n, o, cqe_syndrome::TRANSPORT_RETRY_EXC_ERR);
                    return false;
                }
                tx.retry_left -= 1;
                // Go back to the oldest unacknowledged PSN.
                tx.resend_from = tx.una;
            }
            tx.resend = Resend::Timeout;
            if rd_atomic {
                // The whole request again; the responder replays it.
                tx.resend_from = tx.first_psn;
                tx.una = tx.first_psn;
                tx.rd_buf.clear();
            }
            self.stats.retransmissions += 1;
        }
        if rd_atomic {
            self.wire_transmit_rd_atomic(qpn);
        } else {
            self.wire_transmit(qpn, payload, mtu);
        }
        if let Some(q) = self.objects.qps.get_mut(&qpn) {
            q.wait = Some(Wait {
                kind: WaitKind::Ack,
                at_ns: timeout.map_or(u64::MAX, |t| now.saturating_add(t)),
                left: None,
            });
        }
        false
    }

    /// Put the in-flight message's packets from `resend_from` on the wire.
    fn wire_transmit(&mut self, qpn: u32, payload: &[u8], mtu: usize) {
        let Some(encap) = self.encap_for(qpn) else {
            return;
        };
        let q = &self.objects.qps[&qpn];
        let tx = q.wire.tx.as_ref().expect("in flight");
        let (first, n, from) = (tx.first_psn, tx.npkts, tx.resend_from);
        let wq = &tx.wqe;
        let (wop, imm, solicited, remote) = (wq.opcode, wq.imm, wq.solicited, wq.remote);
        let pkey = pkey_of(self, q.path.pkey_index);
        let dest_qp = q.remote_qpn;
        let now = self.now_ns();
        let mut buf = std::mem::take(&mut self.port.tx_buf);
        let start = (from.wrapping_sub(first) & MASK24).min(n);
        for k in start..n {
            let opcode = packet_opcode(wop, k, n);
            let hs = crate::wire::headers_of(opcode).expect("RC opcode");
            let at = k as usize * mtu;
            let chunk = &payload[at.min(payload.len())..(at + mtu).min(payload.len())];
            let last = k + 1 == n;
            let ext = ExtHeaders {
                reth: hs.reth.then(|| {
                    let (va, rkey) = remote.unwrap_or_default();
                    Reth {
                        va,
                        rkey,
                        dma_len: payload.len() as u32,
                    }
                }),
                imm: hs.imm.then_some(imm),
                ..ExtHeaders::default()
            };
            let pkt = Packet {
                encap,
                bth: Bth {
                    opcode,
                    solicited: solicited && last,
                    pkey,
                    dest_qp,
                    ack_req: last,
                    psn: (first + k) & MASK24,
                    ..Bth::default()
                },
                ext,
                payload: chunk,
            };
            self.put_on_wire(&pkt, &mut buf, now);
        }
        self.port.tx_buf = buf;
    }

    /// Build `pkt` in `buf` and send it from the port.
    pub(crate) fn put_on_wire(&mut self, pkt: &Packet<'_>, buf: &mut Vec<u8>, now: u64) {
        let n = pkt.frame_len();
        if buf.len() < n {
            buf.resize(n, 0);
        }
        if pkt.build(buf).is_err() {
            self.stats.wire_build_errors += 1;
            return;
        }
        if let Some((wire, port)) = &self.port.wire {
            wire.send(*port, now, &buf[..n]);
            self.stats.wire_tx += 1;
        }
    }

    /// An ACKNOWLEDGE (or NAK) for requester QP `qpn`.
    pub(super) fn wire_ack(&mut self, qpn: u32, psn: u32, aeth: Aeth) {
        let now = self.now_ns();
        let Some(q) = self.objects.qps.get_mut(&qpn) else {
            return;
        };
        let Some(tx) = q.wire.tx.as_mut() else {
            return; // nothing in flight: a stale or duplicate ACK
        };
        match aeth.kind() {
            // A READ/atomic completes with its response, never a plain
            // ACK (rxe `rxe_comp.c` waits for the READ/atomic response).
            AckKind::Ack { .. } if tx.wqe.is_read_or_atomic() => {}
            AckKind::Ack { .. } => {
                if psn_diff(psn, tx.last_psn()) >= 0 && psn_diff(psn, tx.first_psn) >= 0 {
                    let tx = q.wire.tx.take().expect("in flight");
                    q.next_send_psn = (tx.first_psn + tx.npkts) & MASK24;
                    q.wait = None;
                    self.stats.messages += 1;
                    let len = tx.wqe.len() as u32;
                    self.req_done(qpn, &tx.wqe, len);
                    if let Some(q) = self.objects.qps.get_mut(&qpn) {
                        q.wire.spare = Some(tx);
                    }
                    self.qp_kick(qpn);
                } else if tx.holds(psn) {
                    // Forward progress inside the message: the retry
                    // budget starts again (rxe `rxe_comp.c`).
                    tx.acked_to(psn);
                    tx.retry_left = q.retry_count;
                }
            }
            AckKind::RnrNak { timer } => {
                if !tx.holds(psn) {
                    return;
                }
                self.stats.rnr_naks += 1;
                match tx.rnr_left {
                    Some(0) => {
                        let (i, n, o) = (tx.wqe.index, tx.wqe.wqebbs, tx.wqe.opcode);
                        self.req_error(qpn, i, n, o, cqe_syndrome::RNR_RETRY_EXC_ERR);
                    }
                    left => {
                        tx.rnr_left = left.map(|l| l - 1);
                        tx.acked_to(psn.wrapping_sub(1) & MASK24);
                        tx.resend_from = psn;
                        tx.resend = Resend::Rnr;
                        q.wait = Some(Wait {
                            kind: WaitKind::Rnr,
                            at_ns: now.saturating_add(rnr_timer_ns(timer)),
                            left: None,
                        });
                    }
                }
            }
            AckKind::Nak {
                code: syndrome::NAK_PSN_SEQ,
            } => {
                if !tx.holds(psn) {
                    return;
                }
                self.stats.seq_naks_received += 1;
                if tx.retry_left == 0 {
                    let (i, n, o) = (tx.wqe.index, tx.wqe.wqebbs, tx.wqe.opcode);
                    self.req_error(qpn, i, n, o, cqe_syndrome::TRANSPORT_RETRY_EXC_ERR);
                    return;
                }
                tx.retry_left -= 1;
                tx.acked_to(psn.wrapping_sub(1) & MASK24);
                tx.resend_from = psn;
                tx.resend = Resend::SeqNak;
                q.wait = Some(Wait {
                    kind: WaitKind::Ack,
                    at_ns: now,
                    left: None,
                });
                self.qp_kick(qpn);
            }
            AckKind::Nak { code } => {
                let synd = match code {
                    syndrome::NAK_INVALID_REQUEST => cqe_syndrome::REMOTE_INVAL_REQ_ERR,
                    syndrome::NAK_REMOTE_ACCESS => cqe_syndrome::REMOTE_ACCESS_ERR,
                    _ => cqe_syndrome::REMOTE_OP_ERR,
                };
                let (i, n, o) = (tx.wqe.index, tx.wqe.wqebbs, tx.wqe.opcode);
                self.req_error(qpn, i, n, o, synd);
            }
            AckKind::Reserved => {}
        }
    }
}

impl Inflight {
    /// Packets up to `psn` were acknowledged (an ACK, or a NAK for the
    /// packet after it): a go-back starts after them.
    fn acked_to(&mut self, psn: u32) {
        let next = (psn + 1) & MASK24;
        if psn_diff(next, self.una) > 0 && psn_diff(next, self.first_psn) >= 0 {
            self.una = next;
        }
    }
}
