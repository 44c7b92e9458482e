//! READ and atomics on the wire (IBTA vol. 1 §9.4.3-9.4.5, §9.7.5; rxe
//! `rxe_req.c`, `rxe_resp.c`, `rxe_comp.c`). Requester: one READ_REQUEST
//! (RETH, ⌈len / MTU⌉ PSNs) or one COMPARE_SWAP / FETCH_ADD (AtomicETH, one
//! PSN), AckReq set; the READ's responses are checked in order (FIRST,
//! MIDDLE..., LAST or ONLY at consecutive PSNs, FIRST/MIDDLE one MTU) and
//! their data written through the WQE's keys at LAST/ONLY; an
//! ATOMIC_ACKNOWLEDGE carries the original value. A lost response is
//! recovered by sending the whole request again when the ACK timer
//! expires. Responder: the request is checked and executed once
//! (`rdma.rs`), saved as a responder resource, answered (READ responses
//! segmented at the path MTU, AETH on FIRST/LAST/ONLY); a repeated request
//! is answered again from its resource: a READ from memory, an atomic with
//! the saved original value, never executed twice.

use mlx5_regs::consts::wqe as w;
use mlx5_regs::consts::{cqe_syndrome, mtu};

use super::frames::pkey_of;
use super::rdma::{RdRes, ResKind};
use crate::state::State;
use crate::wire::{
    opcode as op, psn_diff, syndrome, AckKind, AtomicEth, Bth, ExtHeaders, Packet, Reth, MASK24,
};

/// The BTH opcode of READ response `k` of `n`.
fn response_opcode(k: u32, n: u32) -> u8 {
    match (n == 1, k == 0, k + 1 == n) {
        (true, _, _) => op::READ_RESPONSE_ONLY,
        (false, true, _) => op::READ_RESPONSE_FIRST,
        (false, false, true) => op::READ_RESPONSE_LAST,
        (false, false, false) => op::READ_RESPONSE_MIDDLE,
    }
}

impl State {
    /// Requester: put `qpn`'s in-flight READ/atomic request on the wire.
    pub(super) fn wire_transmit_rd_atomic(&mut self, qpn: u32) {
        let Some(encap) = self.encap_for(qpn) else {
            return;
        };
        let q = &self.objects.qps[&qpn];
        let tx = q.wire.tx.as_ref().expect("in flight");
        let wq = &tx.wqe;
        let (va, rkey) = wq.remote.unwrap_or_default();
        let mut ext = ExtHeaders::default();
        let opcode = match wq.opcode {
            w::OPCODE_RDMA_READ => {
                ext.reth = Some(Reth {
                    va,
                    rkey,
                    dma_len: wq.len() as u32,
                });
                op::READ_REQUEST
            }
            other => {
                let (swap_add, compare) = wq.atomic.unwrap_or_default();
                ext.atomic_eth = Some(AtomicEth {
                    va,
                    rkey,
                    swap_add,
                    compare,
                });
                if other == w::OPCODE_ATOMIC_CS {
                    op::COMPARE_SWAP
                } else {
                    op::FETCH_ADD
                }
            }
        };
        let pkt = Packet {
            encap,
            bth: Bth {
                opcode,
                pkey: pkey_of(self, q.path.pkey_index),
                dest_qp: q.remote_qpn,
                ack_req: true,
                psn: tx.first_psn,
                ..Bth::default()
            },
            ext,
            payload: &[],
        };
        let now = self.now_ns();
        let mut buf = std::mem::take(&mut self.port.tx_buf);
        self.put_on_wire(&pkt, &mut buf, now);
        self.port.tx_buf = buf;
    }

    /// Requester: a READ response or ATOMIC_ACKNOWLEDGE for `qpn`. Anything
    /// out of order or not matching the request in flight is dropped (the
    /// ACK timer then sends the request again).
    pub(super) fn wire_rd_response(
        &mut self,
        qpn: u32,
        bth: Bth,
        ext: &ExtHeaders,
        payload: &[u8],
    ) {
        let Some(q) = self.objects.qps.get_mut(&qpn) else {
            return;
        };
        let m = mtu::bytes(q.mtu).unwrap_or(256) as usize;
        let Some(tx) = q.wire.tx.as_mut() else {
            self.stats.wire_dropped += 1;
            return;
        };
        if let Some(a) = ext.aeth {
            if !matches!(a.kind(), AckKind::Ack { .. }) {
                self.stats.wire_dropped += 1;
                return;
            }
        }
        let wop = tx.wqe.opcode;
        let done = if bth.opcode == op::ATOMIC_ACKNOWLEDGE {
            let ok =
                matches!(wop, w::OPCODE_ATOMIC_CS | w::OPCODE_ATOMIC_FA) && bth.psn == tx.first_psn;
            match (ok, ext.atomic_ack_eth) {
                (true, Some(orig)) => Some(self.atomic_result_bytes(orig).to_vec()),
                _ => {
                    self.stats.wire_dropped += 1;
                    return;
                }
            }
        } else {
            // A READ response: the next expected PSN, the opcode its place
            // in the message names, FIRST/MIDDLE exactly one MTU.
            let k = (bth.psn.wrapping_sub(tx.first_psn)) & MASK24;
            let expected = wop == w::OPCODE_RDMA_READ
                && bth.psn == tx.una
                && k < tx.npkts
                && bth.opcode == response_opcode(k, tx.npkts);
            let len_ok = match bth.opcode {
                op::READ_RESPONSE_FIRST | op::READ_RESPONSE_MIDDLE => payload.len() == m,
                op::READ_RESPONSE_LAST => !payload.is_empty() && payload.len() <= m,
                _ => payload.len() <= m,
            };
            if !expected || !len_ok {
                self.stats.wire_dropped += 1;
                return;
            }
            tx.rd_buf.extend_from_slice(payload);
            tx.una = (bth.psn + 1) & MASK24;
            // Progress: the retry budget starts again (rxe `rxe_comp.c`).
            tx.retry_left = q.retry_count;
            if k + 1 < tx.npkts {
                return;
            }
            if tx.rd_buf.len() as u64 != tx.wqe.len() {
                let (i, n, o) = (tx.wqe.index, tx.wqe.wqebbs, tx.wqe.opcode);
                self.req_error(qpn, i, n, o, cqe_syndrome::BAD_RESP_ERR);
                return;
            }
            Some(std::mem::take(&mut tx.rd_buf))
        };
        let Some(data) = done else {
            return;
        };
        let q = self.objects.qps.get_mut(&qpn).expect("QP");
        let tx = q.wire.tx.take().expect("in flight");
        q.next_send_psn = (tx.first_psn + tx.npkts) & MASK24;
        q.wait = None;
        if let Err(synd) = self.requester_write_back(qpn, &tx.wqe, &data) {
            let (i, n, o) = (tx.wqe.index, tx.wqe.wqebbs, tx.wqe.opcode);
            self.req_error(qpn, i, n, o, synd);
            return;
        }
        self.stats.messages += 1;
        let len = if wop == w::OPCODE_RDMA_READ {
            data.len() as u32
        } else {
            8
        };
        self.req_done(qpn, &tx.wqe, len);
        self.qp_kick(qpn);
    }

    /// Responder: a READ_REQUEST, COMPARE_SWAP or FETCH_ADD for `qpn`.
    pub(super) fn wire_rd_request(&mut self, qpn: u32, bth: Bth, ext: &ExtHeaders) {
        let q = &self.objects.qps[&qpn];
        let epsn = q.next_rcv_psn;
        let m = mtu::bytes(q.mtu).unwrap_or(256) as u64;
        let d = psn_diff(bth.psn, epsn);
        if d > 0 {
            if !q.wire.rx.nak_sent {
                self.objects.qps.get_mut(&qpn).expect("QP").wire.rx.nak_sent = true;
                self.wire_reply(qpn, syndrome::NAK | syndrome::NAK_PSN_SEQ, epsn);
            }
            return;
        }
        if d < 0 {
            // Repeated: answer again from the saved resource; a request no
            // resource holds any more is dropped (rxe `find_resource`).
            self.stats.duplicates += 1;
            let Some(res) = self.find_resource(qpn, bth.psn) else {
                self.stats.wire_dropped += 1;
                return;
            };
            self.stats.rd_atomic_replays += 1;
            match res.kind {
                ResKind::Atomic { orig } => self.send_atomic_ack(qpn, res.first_psn, orig),
                ResKind::Read { va, rkey, len } => {
                    // From the PSN asked for: the RETH names the rest.
                    let skip = (bth.psn.wrapping_sub(res.first_psn) & MASK24) as u64 * m;
                    let (va, len) = match ext.reth {
                        Some(r) => (r.va, r.dma_len),
                        None => (va + skip, len.saturating_sub(skip as u32)),
                    };
                    match self.serve_read(qpn, va, rkey, len) {
                        Ok(bytes) => self.send_read_responses(qpn, bth.psn, &bytes),
                        Err(f) => self.rd_refused(qpn, f, bth.psn),
                    }
                }
            }
            return;
        }
        if q.wire.rx.msg.is_some() {
            // A READ/atomic inside a SEND or WRITE: a sequence error.
            self.wire_fatal_nak(qpn, syndrome::NAK_INVALID_REQUEST, bth.psn);
            return;
        }
        self.objects.qps.get_mut(&qpn).expect("QP").wire.rx.nak_sent = false;
        let served = if bth.opcode == op::READ_REQUEST {
            let Some(r) = ext.reth else {
                return;
            };
            let npkts = (r.dma_len as u64).div_ceil(m).max(1) as u32;
            self.serve_read(qpn, r.va, r.rkey, r.dma_len).map(|bytes| {
                let kind = ResKind::Read {
                    va: r.va,
                    rkey: r.rkey,
                    len: r.dma_len,
                };
                (
                    RdRes {
                        first_psn: bth.psn,
                        npkts,
                        kind,
                    },
                    bytes,
                    0,
                )
            })
        } else {
            let Some(a) = ext.atomic_eth else {
                return;
            };
            let cs = bth.opcode == op::COMPARE_SWAP;
            self.serve_atomic(qpn, cs, a.va, a.rkey, (a.swap_add, a.compare))
                .map(|orig| {
                    let kind = ResKind::Atomic { orig };
                    (
                        RdRes {
                            first_psn: bth.psn,
                            npkts: 1,
                            kind,
                        },
                        Vec::new(),
                        orig,
                    )
                })
        };
        match served {
            Ok((res, bytes, orig)) => {
                self.save_resource(qpn, res);
                if let Some(q) = self.objects.qps.get_mut(&qpn) {
                    q.next_rcv_psn = (bth.psn + res.npkts) & MASK24;
                    q.wire.rx.msn = (q.wire.rx.msn + 1) & MASK24;
                }
                self.stats.messages_received += 1;
                if bth.opcode == op::READ_REQUEST {
                    self.send_read_responses(qpn, bth.psn, &bytes);
                } else {
                    self.send_atomic_ack(qpn, bth.psn, orig);
                }
            }
            Err(f) => self.rd_refused(qpn, f, bth.psn),
        }
    }

    /// NAK a refused READ/atomic; the responder QP raises its event and
    /// enters ERR.
    fn rd_refused(&mut self, qpn: u32, f: super::rdma::Refusal, psn: u32) {
        let code = if f.synd == cqe_syndrome::REMOTE_ACCESS_ERR {
            syndrome::NAK_REMOTE_ACCESS
        } else {
            syndrome::NAK_INVALID_REQUEST
        };
        self.wire_reply(qpn, syndrome::NAK | code, psn);
        self.qp_event(qpn, f.event);
        self.qp_enter_error(qpn);
    }

    /// READ responses for `bytes`, from PSN `psn`, cut at the path MTU.
    fn send_read_responses(&mut self, qpn: u32, psn: u32, bytes: &[u8]) {
        let Some(encap) = self.encap_for(qpn) else {
            return;
        };
        let q = &self.objects.qps[&qpn];
        let m = mtu::bytes(q.mtu).unwrap_or(256) as usize;
        let (pkey, dest_qp, msn) = (
            pkey_of(self, q.path.pkey_index),
            q.remote_qpn,
            q.wire.rx.msn,
        );
        let n = bytes.len().div_ceil(m).max(1) as u32;
        let now = self.now_ns();
        let mut buf = std::mem::take(&mut self.port.tx_buf);
        for k in 0..n {
            let opcode = response_opcode(k, n);
            let at = k as usize * m;
            let chunk = &bytes[at.min(bytes.len())..(at + m).min(bytes.len())];
            let hs = crate::wire::headers_of(opcode).expect("RC opcode");
            let pkt = Packet {
                encap,
                bth: Bth {
                    opcode,
                    pkey,
                    dest_qp,
                    psn: (psn + k) & MASK24,
                    ..Bth::default()
                },
                ext: ExtHeaders {
                    aeth: hs.aeth.then_some(crate::wire::Aeth {
                        syndrome: syndrome::ACK_UNLIMITED,
                        msn,
                    }),
                    ..ExtHeaders::default()
                },
                payload: chunk,
            };
            self.put_on_wire(&pkt, &mut buf, now);
        }
        self.port.tx_buf = buf;
        self.stats.acks_sent += 1;
    }

    /// ATOMIC_ACKNOWLEDGE with the original value.
    fn send_atomic_ack(&mut self, qpn: u32, psn: u32, orig: u64) {
        let Some(encap) = self.encap_for(qpn) else {
            return;
        };
        let q = &self.objects.qps[&qpn];
        let pkt = Packet {
            encap,
            bth: Bth {
                opcode: op::ATOMIC_ACKNOWLEDGE,
                pkey: pkey_of(self, q.path.pkey_index),
                dest_qp: q.remote_qpn,
                psn: psn & MASK24,
                ..Bth::default()
            },
            ext: ExtHeaders {
                aeth: Some(crate::wire::Aeth {
                    syndrome: syndrome::ACK_UNLIMITED,
                    msn: q.wire.rx.msn,
                }),
                atomic_ack_eth: Some(orig),
                ..ExtHeaders::default()
            },
            payload: &[],
        };
        let now = self.now_ns();
        let mut buf = std::mem::take(&mut self.port.tx_buf);
        self.put_on_wire(&pkt, &mut buf, now);
        self.port.tx_buf = buf;
        self.stats.acks_sent += 1;
    }
}
