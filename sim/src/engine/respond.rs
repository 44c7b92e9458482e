//! The responder side of the loopback: finding the peer QP per loopback mode,
//! RC connection and PSN checks, RDMA WRITE through the rkey, SRQ WQE
//! consumption and scatter, and the responder CQE (Linux `handle_responder`,
//! `drivers/infiniband/hw/mlx5/cq.c`; rdma-core `mlx5_parse_cqe`,
//! `providers/mlx5/cq.c`).

use mlx5_regs::consts::wqe as w;
use mlx5_regs::consts::{cqe_syndrome, port, qp_st, rq_type, CqeOpcode};
use mlx5_regs::layouts::{cqe64, err_cqe};
use mlx5_regs::EventType;

use super::recv::ScatterError;
use super::wqe::Wqe;
use crate::mkey::Access;
use crate::qp::QpState;
use crate::state::State;

const M24: u32 = 0x00ff_ffff;

/// What the responder answered.
#[derive(Debug, Clone, Copy)]
pub(super) enum Outcome {
    /// Accepted (and the responder CQE written where one is due).
    Done,
    /// A duplicate: acknowledged, nothing delivered.
    Duplicate,
    /// RNR NAK with the responder's `min_rnr_nak` timer code.
    Rnr(u8),
    /// Nothing came back (peer unreachable, not connected, PSN mismatch).
    NoAck,
    /// NAK: the requester completes with `synd`; the responder QP (if
    /// named) enters ERR after raising `event`.
    Failed {
        synd: u8,
        responder: Option<(u32, Option<EventType>)>,
    },
}

/// Where a receive WQE comes from.
#[derive(Debug, Clone, Copy)]
enum Recv {
    /// The SRQ/RMP of that number.
    Srq(u32),
    /// The responder QP's own ring.
    Own,
}

impl Recv {
    /// The CQE's `srqn` field (version 0): the SRQ's number, 0 for a QP's
    /// own ring (rdma-core `get_cur_rsc` then looks the QP up).
    fn srqn(&self) -> u32 {
        match *self {
            Recv::Srq(n) => n,
            Recv::Own => 0,
        }
    }
}

/// Where a message's PSNs stand at the responder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Psn {
    /// It starts at the expected PSN.
    Expected,
    /// Every packet is behind it.
    Duplicate,
}

impl State {
    /// `sqpn`'s path leads back into this function (force loopback, the
    /// port's own LID, or one of its own GIDs with its MAC): the packets
    /// loop inside the card instead of leaving by the port.
    pub(super) fn local_destination(&self, sqpn: u32) -> bool {
        let Some(s) = self.objects.qps.get(&sqpn) else {
            return false;
        };
        let p = &s.path;
        if p.fl {
            // Force loopback never leaves the function.
            true
        } else if self.caps.port_type == port::TYPE_IB {
            p.rlid != 0 && p.rlid == self.port.lid
        } else {
            // RoCE: the destination GID must be one of the port's own
            // entries with the port's MAC, sent from a programmed entry.
            self.port.roce_en
                && p.rmac == self.port.mac
                && self.port.gids.contains_key(&(p.src_addr_index as u16))
                && self
                    .port
                    .gids
                    .values()
                    .any(|g| g.gid == p.rgid && g.mac == self.port.mac)
        }
    }

    /// The responder QP of `sqpn`'s connection if a packet reaches it, and
    /// how the message of `npkts` packets stands against its expected PSN.
    pub(super) fn route(&self, sqpn: u32, npkts: u32) -> Option<(u32, Psn)> {
        if !self.local_destination(sqpn) {
            return None;
        }
        let s = self.objects.qps.get(&sqpn)?;
        let t = self.objects.qps.get(&s.remote_qpn)?;
        let receiving = matches!(t.state, QpState::Rtr | QpState::Rts | QpState::Sqer);
        if t.st != qp_st::RC || !receiving || t.remote_qpn != sqpn {
            return None;
        }
        let last = (s.next_send_psn + npkts - 1) & M24;
        let at = if t.next_rcv_psn == s.next_send_psn {
            Psn::Expected
        } else if crate::wire::psn_diff(last, t.next_rcv_psn) < 0 {
            Psn::Duplicate
        } else {
            // Ahead (a gap) or straddling: the responder's NAK names a PSN
            // the requester never sent, so nothing it can act on.
            return None;
        };
        Some((s.remote_qpn, at))
    }

    /// Deliver `payload` of WQE `wq` from `sqpn` to its peer in this
    /// function; both PSNs advance by the message's packet count. A message
    /// whose PSNs are all behind the responder's is a duplicate: ACKed
    /// again, not delivered (IBTA vol. 1 §9.7.5.1.2; rxe `check_psn`).
    pub(super) fn respond(&mut self, sqpn: u32, wq: &Wqe, payload: &[u8]) -> Outcome {
        let len = payload.len() as u64;
        let mtu = mlx5_regs::consts::mtu::bytes(self.objects.qps[&sqpn].mtu).unwrap_or(256) as u64;
        let npkts = len.div_ceil(mtu).max(1) as u32;
        let Some((tq, at)) = self.route(sqpn, npkts) else {
            return Outcome::NoAck;
        };
        if at == Psn::Duplicate {
            self.stats.duplicates += 1;
            if let Some(s) = self.objects.qps.get_mut(&sqpn) {
                s.next_send_psn = (s.next_send_psn + npkts) & M24;
            }
            return Outcome::Duplicate;
        }
        let l3 = self.roce_l3_bits(sqpn);
        let out = self.deliver_message(tq, sqpn, wq, payload, l3);
        if matches!(out, Outcome::Done) {
            // Packets of this message: both PSNs advance by the same count.
            if let Some(s) = self.objects.qps.get_mut(&sqpn) {
                s.next_send_psn = (s.next_send_psn + npkts) & M24;
            }
            if let Some(r) = self.objects.qps.get_mut(&tq) {
                r.next_rcv_psn = (r.next_rcv_psn + npkts) & M24;
            }
        }
        out
    }

    /// Hand a whole message from `sqpn` (`wq` says what it is) to responder
    /// QP `tq`: rights and keys, a receive WQE, scatter or write, the
    /// responder CQE (whose `flags_rqpn` carries `l3_bits`).
    pub(super) fn deliver_message(
        &mut self,
        tq: u32,
        sqpn: u32,
        wq: &Wqe,
        payload: &[u8],
        l3_bits: u32,
    ) -> Outcome {
        let t = self
            .objects
            .qps
            .get(&tq)
            .expect("delivered to an existing QP");
        let (t_rwe, t_pd, t_rq_type, t_srqn, t_min_rnr, t_own) = (
            t.rwe,
            t.pd,
            t.rq_type,
            t.srqn,
            t.min_rnr_nak,
            t.rq.is_some(),
        );
        let len = payload.len() as u64;
        let rdma = matches!(wq.opcode, w::OPCODE_RDMA_WRITE | w::OPCODE_RDMA_WRITE_IMM);
        let needs_recv = wq.opcode != w::OPCODE_RDMA_WRITE;
        let index = wq.index;
        let what = || format!("responder qpn {tq:#x} from qpn {sqpn:#x} WQE {index:#x}");
        let access = |event| Outcome::Failed {
            synd: cqe_syndrome::REMOTE_ACCESS_ERR,
            responder: Some((tq, Some(event))),
        };
        // RDMA WRITE: responder access rights and the rkey first. A QP
        // without remote write does not support the operation: invalid
        // request (rxe `check_op_valid`; the vendor's verbs manual names a
        // remote QP's `qp_access_flags` as a cause of REM_INV_REQ_ERR). The
        // key check is whole: variant, PD, right, and [va, va + len) inside
        // the key's range, so an access straddling the end writes nothing; a
        // key refusal is a remote access error. A zero-length WRITE names no
        // memory and needs no rkey (the IBTA leaves the R_Key of a
        // zero-length RETH unchecked, and rxe's `check_rkey` skips it); the
        // QP's remote-write right still applies.
        let mut wplan = Vec::new();
        if rdma {
            let (va, rkey) = wq.remote.expect("parsed with a remote address");
            if !t_rwe {
                return Outcome::Failed {
                    synd: cqe_syndrome::REMOTE_INVAL_REQ_ERR,
                    responder: Some((tq, Some(EventType::WQ_INVAL_REQ_ERROR))),
                };
            }
            let translated = if len == 0 {
                Ok(Vec::new())
            } else {
                self.key_translate(rkey, t_pd, va, len, Access::RemoteWrite)
            };
            match translated {
                Ok(p) => wplan = p,
                Err(_) => return access(EventType::WQ_ACCESS_ERROR),
            }
            if self.check_mapped(&wplan, true, &what).is_err() {
                return access(EventType::WQ_ACCESS_ERROR);
            }
        }
        // A receive WQE: SEND, SEND_IMM and WRITE_IMM consume one, from
        // the QP's SRQ or its own ring.
        let mut recv = None;
        if needs_recv {
            let from = match (t_rq_type, t_srqn) {
                (rq_type::SRQ, Some(n)) => Recv::Srq(n),
                (rq_type::NON_ZERO, _) if t_own => Recv::Own,
                _ => {
                    return Outcome::Failed {
                        synd: cqe_syndrome::REMOTE_INVAL_REQ_ERR,
                        responder: Some((tq, Some(EventType::WQ_INVAL_REQ_ERROR))),
                    }
                }
            };
            let taken = match from {
                Recv::Srq(srqn) => {
                    // An SRQ in error hands out no WQE: RNR, as for an
                    // empty one (rxe `get_srq_wqe`); the responder QP stays
                    // up and the requester's `rnr_retry` decides the rest.
                    if !self.srq_good(srqn) || self.srq_available(srqn) == 0 {
                        return Outcome::Rnr(t_min_rnr);
                    }
                    self.srq_take(srqn).map_err(|why| {
                        self.srq_catastrophe_event(srqn, why);
                        None
                    })
                }
                Recv::Own => {
                    if self.rq_available(tq) == 0 {
                        return Outcome::Rnr(t_min_rnr);
                    }
                    // An unreadable receive WQE: the responder QP's
                    // catastrophic error.
                    self.rq_take(tq)
                        .map_err(|_| Some(EventType::WQ_CATAS_ERROR))
                }
            };
            match taken {
                Ok((idx, bytes)) => recv = Some((from, idx, bytes)),
                Err(event) => {
                    return Outcome::Failed {
                        synd: cqe_syndrome::REMOTE_OP_ERR,
                        responder: Some((tq, event)),
                    };
                }
            }
        }
        // SEND: scatter into the receive WQE's data segments.
        if let (Some((from, idx, bytes)), false) = (&recv, rdma) {
            let segs = match from {
                Recv::Srq(_) => &bytes[16..],
                Recv::Own => &bytes[..],
            };
            match self.plan_scatter(segs, t_pd, len, &what) {
                Ok(plan) => {
                    self.write_plan(&plan, payload, &what);
                    self.pool.give_plan(plan);
                }
                Err(e) => {
                    let (rsynd, ssynd) = match e {
                        ScatterError::Length => (
                            cqe_syndrome::LOCAL_LENGTH_ERR,
                            cqe_syndrome::REMOTE_INVAL_REQ_ERR,
                        ),
                        ScatterError::Protection => {
                            (cqe_syndrome::LOCAL_PROT_ERR, cqe_syndrome::REMOTE_OP_ERR)
                        }
                    };
                    self.resp_err_cqe(tq, from.srqn(), *idx, rsynd);
                    if let Recv::Srq(srqn) = from {
                        self.srq_check_limit(*srqn);
                    }
                    return Outcome::Failed {
                        synd: ssynd,
                        responder: Some((tq, None)),
                    };
                }
            }
        }
        if rdma {
            self.write_plan(&wplan, payload, &what);
        }
        if let Some((from, idx, bytes)) = recv {
            self.pool.give_bytes(bytes);
            self.resp_cqe(tq, sqpn, from.srqn(), idx, wq, len as u32, l3_bits);
            if let Recv::Srq(srqn) = from {
                self.srq_check_limit(srqn);
            }
        }
        Outcome::Done
    }

    /// `flags_rqpn` bits 25:24 of a RoCE receive: the L3 header type of the
    /// sender's GID entry (0 GRH = v1, 1 IPv6, 2 IPv4; `MLX5_CQE_ROCE_L3_HEADER_TYPE_*`).
    fn roce_l3_bits(&self, sqpn: u32) -> u32 {
        let Some(s) = self.objects.qps.get(&sqpn) else {
            return 0;
        };
        if s.path.fl || self.caps.port_type == port::TYPE_IB {
            return 0;
        }
        match self.port.gids.get(&(s.path.src_addr_index as u16)) {
            Some(g) if g.version == mlx5_regs::consts::roce::VERSION_2 => {
                if g.l3_type == mlx5_regs::consts::roce::L3_TYPE_IPV4 {
                    2 << 24
                } else {
                    1 << 24
                }
            }
            _ => 0,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn resp_cqe(
        &mut self,
        tq: u32,
        sqpn: u32,
        srqn: u32,
        idx: u16,
        wq: &Wqe,
        len: u32,
        l3_bits: u32,
    ) {
        let Some(t) = self.objects.qps.get(&tq) else {
            return;
        };
        let (cqn, v1, uidx) = (t.cqn_rcv, t.cqe_v1(), t.user_index);
        let op = match wq.opcode {
            w::OPCODE_SEND_IMM => CqeOpcode::RESP_SEND_IMM,
            w::OPCODE_RDMA_WRITE_IMM => CqeOpcode::RESP_WR_IMM,
            _ => CqeOpcode::RESP_SEND,
        };
        let mut c = [0u8; 64];
        cqe64::opcode.set(&mut c, op.0).expect("4-bit");
        cqe64::byte_cnt.set(&mut c, len).expect("32-bit");
        cqe64::qpn.set(&mut c, tq).expect("24-bit");
        cqe64::srqn
            .set(&mut c, if v1 { uidx } else { srqn })
            .expect("24-bit");
        cqe64::wqe_counter.set(&mut c, idx).expect("16-bit");
        let flags = l3_bits | (sqpn & M24);
        cqe64::flags_rqpn.set(&mut c, flags).expect("32-bit");
        if op != CqeOpcode::RESP_SEND {
            cqe64::imm_inval_pkey.set(&mut c, wq.imm).expect("32-bit");
        }
        if self.caps.port_type == port::TYPE_IB {
            cqe64::slid.set(&mut c, self.port.lid).expect("16-bit");
        }
        if let Some(cqn) = cqn {
            self.cq_push(cqn, c, wq.solicited);
        }
    }

    /// RESP_ERR CQE naming the consumed receive WQE (an SRQ's goes back to
    /// its free list, Linux `mlx5_poll_one`; an own ring's completes in
    /// order).
    pub(super) fn resp_err_cqe(&mut self, tq: u32, srqn: u32, idx: u16, synd: u8) {
        let Some(t) = self.objects.qps.get(&tq) else {
            return;
        };
        let (cqn, v1, uidx) = (t.cqn_rcv, t.cqe_v1(), t.user_index);
        let mut c = [0u8; 64];
        err_cqe::opcode
            .set(&mut c, CqeOpcode::RESP_ERR.0)
            .expect("4-bit");
        err_cqe::syndrome.set(&mut c, synd).expect("8-bit");
        err_cqe::srqn
            .set(&mut c, if v1 { uidx } else { srqn })
            .expect("24-bit");
        err_cqe::qpn.set(&mut c, tq).expect("24-bit");
        err_cqe::wqe_counter.set(&mut c, idx).expect("16-bit");
        if let Some(cqn) = cqn {
            self.cq_push(cqn, c, true);
        }
    }
}
