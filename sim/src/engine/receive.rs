//! Frames arriving from the wire: the checks a card makes before anything
//! else (a frame failing one is dropped silently: parse errors, ICRC/VCRC,
//! destination MAC/IP/GID/LID, TVer, P_Key, destination QP type and state,
//! the source being the QP's peer; rxe `rxe_recv.c`), then the RC
//! responder (PSN check, duplicates re-ACKed without redelivery, one NAK
//! per PSN gap, opcode sequence, reassembly and delivery at LAST/ONLY, ACKs
//! with the MSN, RNR and the other NAKs; IBTA vol. 1 §9.7, rxe
//! `rxe_resp.c`) or, for ACKs, the requester.

use mlx5_regs::consts::wqe as w;
use mlx5_regs::consts::{cqe_syndrome, mtu, qp_st};

use super::frames::{l3_bits_of, pkey_match, pkey_of};
use super::respond::Outcome;
use super::wqe::{Data, Wqe};
use crate::qp::QpState;
use crate::state::State;
use crate::wire::{
    self, opcode as op, psn_diff, syndrome, Aeth, Bth, Encap, ExtHeaders, LinkType, Packet, Reth,
    MASK24, TVER,
};

/// A message being reassembled by a responder QP.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RxMsg {
    pub write: bool,
    pub first_psn: u32,
    pub reth: Option<Reth>,
}

/// Responder state of a QP on the wire.
#[derive(Debug, Clone, Default)]
pub(crate) struct RxState {
    /// A NAK PSN sequence error was sent for the current gap.
    pub nak_sent: bool,
    /// Completed inbound messages (24 bits), carried in every AETH.
    pub msn: u32,
    pub msg: Option<RxMsg>,
    /// The message's bytes so far.
    pub buf: Vec<u8>,
    /// Saved READ/atomic requests for replay (at most `1 << log_rra_max`).
    pub resources: super::rdma::Resources,
}

/// A QP's transport state on the wire.
#[derive(Debug, Clone, Default)]
pub(crate) struct WireQp {
    /// The message in flight (requester).
    pub tx: Option<Box<super::requester::Inflight>>,
    /// The record of the last message completed, kept for the next one
    /// (its allocation reused).
    pub spare: Option<Box<super::requester::Inflight>>,
    /// The responder.
    pub rx: RxState,
}

/// Where a request packet sits in its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pos {
    First,
    Middle,
    Last,
    Only,
}

/// (write, position, immediate) of an RC SEND/WRITE opcode.
fn classify(opcode: u8) -> Option<(bool, Pos, bool)> {
    Some(match opcode {
        op::SEND_FIRST => (false, Pos::First, false),
        op::SEND_MIDDLE => (false, Pos::Middle, false),
        op::SEND_LAST => (false, Pos::Last, false),
        op::SEND_LAST_IMM => (false, Pos::Last, true),
        op::SEND_ONLY => (false, Pos::Only, false),
        op::SEND_ONLY_IMM => (false, Pos::Only, true),
        op::WRITE_FIRST => (true, Pos::First, false),
        op::WRITE_MIDDLE => (true, Pos::Middle, false),
        op::WRITE_LAST => (true, Pos::Last, false),
        op::WRITE_LAST_IMM => (true, Pos::Last, true),
        op::WRITE_ONLY => (true, Pos::Only, false),
        op::WRITE_ONLY_IMM => (true, Pos::Only, true),
        _ => return None,
    })
}

impl State {
    /// One frame from the wire.
    pub(crate) fn wire_receive(&mut self, frame: &[u8], link: LinkType) {
        self.stats.wire_rx += 1;
        let parsed = match wire::parse(link, frame) {
            Ok(p) if p.icrc_ok && p.vcrc_ok != Some(false) => p,
            _ => {
                self.stats.wire_dropped += 1;
                return;
            }
        };
        let p = parsed.packet;
        let bth = p.bth;
        if matches!(bth.opcode, op::UD_SEND_ONLY | op::UD_SEND_ONLY_IMM) {
            self.ud_arrive(&p, frame);
            return;
        }
        let qpn = bth.dest_qp;
        let keep = self.addressed_to_us(&p.encap)
            && bth.tver == TVER
            && self.objects.qps.get(&qpn).is_some_and(|q| {
                q.st == qp_st::RC
                    && matches!(q.state, QpState::Rtr | QpState::Rts | QpState::Sqer)
                    && pkey_match(pkey_of(self, q.path.pkey_index), bth.pkey)
            })
            && bth.opcode < op::UC
            && self.sent_by_peer_of(qpn, &p.encap);
        if !keep {
            self.stats.wire_dropped += 1;
            return;
        }
        match bth.opcode {
            op::ACKNOWLEDGE => match p.ext.aeth {
                Some(a) => self.wire_ack(qpn, bth.psn, a),
                None => self.stats.wire_dropped += 1,
            },
            op::READ_RESPONSE_FIRST
            | op::READ_RESPONSE_MIDDLE
            | op::READ_RESPONSE_LAST
            | op::READ_RESPONSE_ONLY
            | op::ATOMIC_ACKNOWLEDGE => self.wire_rd_response(qpn, bth, &p.ext, p.payload),
            op::READ_REQUEST | op::COMPARE_SWAP | op::FETCH_ADD => {
                self.wire_rd_request(qpn, bth, &p.ext)
            }
            _ => self.wire_request(qpn, &p.encap, bth, &p.ext, p.payload),
        }
    }

    /// Send an ACKNOWLEDGE from responder QP `qpn` with `synd` for `psn`.
    pub(super) fn wire_reply(&mut self, qpn: u32, synd: u8, psn: u32) {
        let Some(encap) = self.encap_for(qpn) else {
            return;
        };
        let q = &self.objects.qps[&qpn];
        let pkt = Packet {
            encap,
            bth: Bth {
                opcode: op::ACKNOWLEDGE,
                pkey: pkey_of(self, q.path.pkey_index),
                dest_qp: q.remote_qpn,
                psn: psn & MASK24,
                ..Bth::default()
            },
            ext: ExtHeaders {
                aeth: Some(Aeth {
                    syndrome: synd,
                    msn: q.wire.rx.msn,
                }),
                ..ExtHeaders::default()
            },
            payload: &[],
        };
        match synd & 0xe0 {
            syndrome::NAK => self.stats.naks_sent[(synd & 3) as usize] += 1,
            syndrome::RNR_NAK => self.stats.rnr_naks_sent += 1,
            _ => self.stats.acks_sent += 1,
        }
        let now = self.now_ns();
        let mut buf = std::mem::take(&mut self.port.tx_buf);
        self.put_on_wire(&pkt, &mut buf, now);
        self.port.tx_buf = buf;
    }

    /// A NAK that ends the connection on the responder side too.
    pub(super) fn wire_fatal_nak(&mut self, qpn: u32, code: u8, psn: u32) {
        self.wire_reply(qpn, syndrome::NAK | code, psn);
        self.qp_enter_error(qpn);
    }

    /// A SEND or RDMA WRITE packet for responder QP `qpn`.
    fn wire_request(&mut self, qpn: u32, e: &Encap, bth: Bth, ext: &ExtHeaders, payload: &[u8]) {
        let q = &self.objects.qps[&qpn];
        let epsn = q.next_rcv_psn;
        let mtu = mtu::bytes(q.mtu).unwrap_or(256) as usize;
        let d = psn_diff(bth.psn, epsn);
        if d > 0 {
            // A gap: one NAK per gap, later packets dropped until ePSN.
            if !q.wire.rx.nak_sent {
                self.objects.qps.get_mut(&qpn).expect("QP").wire.rx.nak_sent = true;
                self.wire_reply(qpn, syndrome::NAK | syndrome::NAK_PSN_SEQ, epsn);
            }
            return;
        }
        if d < 0 {
            // A duplicate: ACK again, deliver nothing.
            self.stats.duplicates += 1;
            self.wire_reply(qpn, syndrome::ACK_UNLIMITED, epsn.wrapping_sub(1));
            return;
        }
        let Some((write, pos, imm)) = classify(bth.opcode) else {
            // SEND_WITH_INVALIDATE and opcodes RC has not: not served.
            self.wire_fatal_nak(qpn, syndrome::NAK_INVALID_REQUEST, bth.psn);
            return;
        };
        let rx = &q.wire.rx;
        let in_seq = match pos {
            Pos::First | Pos::Only => rx.msg.is_none(),
            Pos::Middle | Pos::Last => rx.msg.is_some_and(|m| m.write == write),
        };
        let len_ok = match pos {
            Pos::First | Pos::Middle => payload.len() == mtu,
            Pos::Last => !payload.is_empty() && payload.len() <= mtu,
            Pos::Only => payload.len() <= mtu,
        };
        if !in_seq || !len_ok {
            self.wire_fatal_nak(qpn, syndrome::NAK_INVALID_REQUEST, bth.psn);
            return;
        }
        let q = self.objects.qps.get_mut(&qpn).expect("QP");
        let rx = &mut q.wire.rx;
        rx.nak_sent = false;
        if matches!(pos, Pos::First | Pos::Only) {
            rx.msg = Some(RxMsg {
                write,
                first_psn: bth.psn,
                reth: ext.reth,
            });
            rx.buf.clear();
        }
        rx.buf.extend_from_slice(payload);
        q.next_rcv_psn = (bth.psn + 1) & MASK24;
        if matches!(pos, Pos::First | Pos::Middle) {
            if bth.ack_req {
                self.wire_reply(qpn, syndrome::ACK_UNLIMITED, bth.psn);
            }
            return;
        }
        // LAST or ONLY: the message is complete.
        let msg = rx.msg.take().expect("in sequence");
        let bytes = std::mem::take(&mut rx.buf);
        let sender = q.remote_qpn;
        let remote = msg.reth.map(|r| (r.va, r.rkey));
        if msg.write && msg.reth.is_some_and(|r| r.dma_len as usize != bytes.len()) {
            self.objects.qps.get_mut(&qpn).expect("QP").wire.rx.buf = bytes;
            self.wire_fatal_nak(qpn, syndrome::NAK_INVALID_REQUEST, bth.psn);
            return;
        }
        let wq = Wqe {
            index: 0,
            opcode: match (write, imm) {
                (false, false) => w::OPCODE_SEND,
                (false, true) => w::OPCODE_SEND_IMM,
                (true, false) => w::OPCODE_RDMA_WRITE,
                (true, true) => w::OPCODE_RDMA_WRITE_IMM,
            },
            wqebbs: 1,
            signaled: false,
            solicited: bth.solicited,
            imm: ext.imm.unwrap_or(0),
            remote,
            atomic: None,
            fence: false,
            av: None,
            data: Data::Inline(Vec::new()),
        };
        let outcome = self.deliver_message(qpn, sender, &wq, &bytes, l3_bits_of(e));
        if let Some(q) = self.objects.qps.get_mut(&qpn) {
            let mut bytes = bytes;
            bytes.clear();
            q.wire.rx.buf = bytes;
        }
        match outcome {
            Outcome::Done => {
                self.stats.messages_received += 1;
                if let Some(q) = self.objects.qps.get_mut(&qpn) {
                    q.wire.rx.msn = (q.wire.rx.msn + 1) & MASK24;
                }
                if bth.ack_req {
                    self.wire_reply(qpn, syndrome::ACK_UNLIMITED, bth.psn);
                }
            }
            Outcome::Rnr(code) => {
                // Not ready: the whole message comes again from its first PSN.
                if let Some(q) = self.objects.qps.get_mut(&qpn) {
                    q.next_rcv_psn = msg.first_psn;
                }
                self.wire_reply(qpn, syndrome::RNR_NAK | (code & 0x1f), msg.first_psn);
            }
            Outcome::NoAck | Outcome::Duplicate => {}
            Outcome::Failed { synd, responder } => {
                let code = match synd {
                    cqe_syndrome::REMOTE_ACCESS_ERR => syndrome::NAK_REMOTE_ACCESS,
                    cqe_syndrome::REMOTE_INVAL_REQ_ERR => syndrome::NAK_INVALID_REQUEST,
                    _ => syndrome::NAK_REMOTE_OP,
                };
                self.wire_reply(qpn, syndrome::NAK | code, bth.psn);
                if let Some((tq, event)) = responder {
                    if let Some(e) = event {
                        self.qp_event(tq, e);
                    }
                    self.qp_enter_error(tq);
                }
            }
        }
    }
}
