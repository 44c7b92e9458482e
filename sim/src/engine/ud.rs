//! Unreliable datagrams: a UD send WQE's datagram segment (the address
//! vector, `struct mlx5_av`, `include/linux/mlx5/qp.h`; Linux
//! `set_datagram_seg`), the one packet it becomes (BTH UD SEND_ONLY with a
//! DETH, IBTA vol. 1 §9.8.3), and the receiving card's rules: destination
//! QP and Q_Key (a mismatch is dropped silently, §10.2.5), no ACK, no
//! retry, a datagram finding no receive WQE dropped, and the 40 bytes of
//! GRH space at the start of every receive buffer (`ibv_post_recv(3)`;
//! RoCE v2 over IPv4: 20 zero bytes then the IPv4 header, Linux `union
//! rdma_network_hdr`). Delivery rules follow rxe (`rxe_recv.c`
//! `check_keys`, `rxe_resp.c`); choices where the sources are silent:
//! `docs/fidelity.md` §UD.
//!
//! A datagram to this card's own address is built as a frame and received
//! by the same code as one from the wire, so both paths check and write
//! the same bytes.

use mlx5_regs::consts::wqe as w;
use mlx5_regs::consts::{cqe_syndrome, port, qp_st, rq_type, CqeOpcode};
use mlx5_regs::layouts::{cqe64, wqe_datagram_seg as avl};

use super::frames::pkey_of;
use super::recv::ScatterError;
use super::wqe::Wqe;
use crate::qp::QpState;
use crate::state::State;
use crate::wire::{self, opcode as op, Bth, Deth, Encap, ExtHeaders, Ip};
use crate::wire::{Packet, MASK24, TVER};

/// Bytes of the datagram segment.
pub(crate) const AV_LEN: usize = 48;
/// Bytes of GRH space at the start of a UD receive buffer.
pub(crate) const GRH_SPACE: usize = 40;
/// A Q_Key with this bit is "controlled": the sender's QP's own Q_Key goes
/// into the DETH instead (IBTA vol. 1 §10.2.5; rxe `init_req_packet`).
const QKEY_CONTROLLED: u32 = 0x8000_0000;

/// A parsed datagram segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Av {
    pub qkey: u32,
    pub dqpn: u32,
    pub stat_rate_sl: u8,
    pub fl: bool,
    pub rlid_udp_sport: u16,
    pub rmac: [u8; 6],
    pub tclass: u8,
    pub hop_limit: u8,
    pub grh: bool,
    pub sgid_index: u8,
    pub flow_label: u32,
    pub rgid: [u8; 16],
}

impl Av {
    pub fn parse(b: &[u8]) -> Av {
        let hi = avl::rmac_47_16.get(b).to_be_bytes();
        let lo = avl::rmac_15_0.get(b).to_be_bytes();
        let mut rgid = [0u8; 16];
        rgid.copy_from_slice(avl::rgid.get(b));
        Av {
            qkey: avl::qkey.get(b),
            dqpn: avl::dqpn.get(b),
            stat_rate_sl: avl::stat_rate_sl.get(b),
            fl: avl::fl_mlid.get(b) & 0x80 != 0,
            rlid_udp_sport: avl::rlid_udp_sport.get(b),
            rmac: [hi[0], hi[1], hi[2], hi[3], lo[0], lo[1]],
            tclass: avl::tclass.get(b),
            hop_limit: avl::hop_limit.get(b),
            grh: avl::grh.get(b),
            sgid_index: avl::sgid_index.get(b),
            flow_label: avl::flow_label.get(b),
            rgid,
        }
    }

    /// A multicast destination: an IB multicast LID or a multicast GID.
    fn multicast(&self, ib: bool) -> bool {
        (ib && self.rlid_udp_sport >= 0xc000 && self.rlid_udp_sport != 0xffff)
            || ((self.grh || !ib) && self.rgid[0] == 0xff)
    }
}

impl State {
    /// Execute a UD SEND / SEND_IMM: one packet, no ACK. The WQE completes
    /// once the packet left (or was dropped); only a local error stops the
    /// send queue.
    pub(super) fn ud_exec(&mut self, qpn: u32, wq: Wqe) -> bool {
        let av = wq.av.expect("UD WQE");
        let ib = self.caps.port_type == port::TYPE_IB;
        let fail = |st: &mut State, synd: u8, why: String| {
            st.records
                .send_errors
                .push(format!("QP {qpn:#x} WQE {:#x}: {why}", wq.index));
            st.req_error(qpn, wq.index, wq.wqebbs, wq.opcode, synd);
            false
        };
        if av.multicast(ib) {
            return fail(
                self,
                cqe_syndrome::LOCAL_QP_OP_ERR,
                "multicast destination (the model has no multicast groups)".into(),
            );
        }
        if av.fl {
            return fail(
                self,
                cqe_syndrome::LOCAL_QP_OP_ERR,
                "force-loopback address vector on a UD QP (not modelled)".into(),
            );
        }
        let payload = match self.gather(qpn, &wq) {
            Ok(p) => p,
            Err(synd) => return fail(self, synd, format!("gather refused, syndrome {synd:#x}")),
        };
        // One packet per datagram: at most the port's MTU (IBTA C10-93.1.1;
        // the card completes a longer one with a local length error).
        let mtu = mlx5_regs::consts::mtu::bytes(self.port.max_mtu_code(ib)).unwrap_or(256) as usize;
        if payload.len() > mtu {
            return fail(
                self,
                cqe_syndrome::LOCAL_LENGTH_ERR,
                format!(
                    "UD datagram of {} bytes over the port MTU {mtu}",
                    payload.len()
                ),
            );
        }
        let Some(encap) = self.encap_for_av(qpn, &av) else {
            return fail(
                self,
                cqe_syndrome::LOCAL_QP_OP_ERR,
                format!(
                    "address vector source GID index {} not programmed",
                    av.sgid_index
                ),
            );
        };
        let q = &self.objects.qps[&qpn];
        let qkey = if av.qkey & QKEY_CONTROLLED != 0 {
            q.q_key
        } else {
            av.qkey
        };
        let imm = wq.opcode == w::OPCODE_SEND_IMM;
        let pkt = Packet {
            encap,
            bth: Bth {
                opcode: if imm {
                    op::UD_SEND_ONLY_IMM
                } else {
                    op::UD_SEND_ONLY
                },
                solicited: wq.solicited,
                pkey: pkey_of(self, q.path.pkey_index),
                dest_qp: av.dqpn,
                psn: q.next_send_psn,
                ..Bth::default()
            },
            ext: ExtHeaders {
                deth: Some(Deth { qkey, src_qp: qpn }),
                imm: imm.then_some(wq.imm),
                ..ExtHeaders::default()
            },
            payload: &payload,
        };
        if let Some(q) = self.objects.qps.get_mut(&qpn) {
            q.next_send_psn = (q.next_send_psn + 1) & MASK24;
        }
        self.stats.ud_sent += 1;
        let now = self.now_ns();
        let mut buf = std::mem::take(&mut self.port.tx_buf);
        if self.addressed_to_us(&encap) {
            // Loops inside the card: the same frame, received here.
            let n = pkt.frame_len();
            buf.resize(buf.len().max(n), 0);
            match pkt.build(&mut buf) {
                Ok(n) => {
                    let link = encap.link_type();
                    if let Ok(parsed) = wire::parse(link, &buf[..n]) {
                        self.ud_arrive(&parsed.packet, &buf[..n]);
                    }
                }
                Err(_) => self.stats.wire_build_errors += 1,
            }
        } else if self.on_wire() {
            self.put_on_wire(&pkt, &mut buf, now);
        } else {
            // No wire and not this card: the datagram is lost, silently.
            self.stats.ud_dropped += 1;
        }
        self.port.tx_buf = buf;
        self.req_done(qpn, &wq, payload.len() as u32);
        true
    }

    /// The outer headers of a datagram from `qpn` to `av` (its VLAN
    /// priority from the AV's SL bits); `None` on an Ethernet port without
    /// RoCE enabled too.
    fn encap_for_av(&mut self, qpn: u32, av: &Av) -> Option<Encap> {
        let ib = self.caps.port_type == port::TYPE_IB;
        if !ib && !self.port.roce_en {
            return None;
        }
        let d = super::frames::Dest {
            ib_grh: av.grh,
            dlid: av.rlid_udp_sport,
            sl: av.stat_rate_sl & 0xf,
            sgid_index: u16::from(av.sgid_index),
            rmac: av.rmac,
            pcp: (av.stat_rate_sl >> 1) & 7,
            tclass: av.tclass,
            flow_label: av.flow_label,
            hop_limit: av.hop_limit,
            rgid: av.rgid,
            // RoCE reads it as the UDP source port (IB as the DLID above).
            udp_sport: av.rlid_udp_sport,
            remote_qpn: av.dqpn,
        };
        self.encap_to(qpn, &d)
    }

    /// A UD packet arrived (from the wire or from this card): the address,
    /// the destination QP, the P_Key and the Q_Key, a receive WQE, then
    /// the GRH space and the payload scattered, and the responder CQE.
    /// Every failure is a silent drop, counted.
    pub(crate) fn ud_arrive(&mut self, p: &Packet<'_>, frame: &[u8]) {
        let bth = p.bth;
        let tq = bth.dest_qp;
        let Some(deth) = p.ext.deth else {
            self.stats.ud_dropped += 1;
            return;
        };
        let ok = self.addressed_to_us(&p.encap)
            && bth.tver == TVER
            && self.objects.qps.get(&tq).is_some_and(|q| {
                q.st == qp_st::UD
                    && matches!(q.state, QpState::Rtr | QpState::Rts | QpState::Sqer)
                    && super::frames::pkey_match(pkey_of(self, q.path.pkey_index), bth.pkey)
            });
        if !ok {
            self.stats.ud_dropped += 1;
            return;
        }
        let t = &self.objects.qps[&tq];
        if deth.qkey != t.q_key {
            self.stats.ud_qkey_drops += 1;
            return;
        }
        let (pd, rqt, srqn, pkey_index) = (t.pd, t.rq_type, t.srqn, t.path.pkey_index);
        // A receive WQE, from the SRQ or the QP's own ring; none: dropped.
        let srq = match (rqt, srqn) {
            (rq_type::SRQ, Some(n)) => Some(n),
            (rq_type::NON_ZERO, _) if t.rq.is_some() => None,
            _ => {
                self.stats.ud_no_recv_drops += 1;
                return;
            }
        };
        let available = match srq {
            Some(n) => self.srq_good(n) && self.srq_available(n) > 0,
            None => self.rq_available(tq) > 0,
        };
        if !available {
            self.stats.ud_no_recv_drops += 1;
            return;
        }
        let taken = match srq {
            Some(n) => self.srq_take(n).map_err(|why| {
                self.srq_catastrophe_event(n, why);
            }),
            None => self.rq_take(tq).map_err(|_| {
                self.qp_event(tq, mlx5_regs::EventType::WQ_CATAS_ERROR);
                self.qp_enter_error(tq);
            }),
        };
        let Ok((idx, wqe)) = taken else {
            return;
        };
        let segs = if srq.is_some() { &wqe[16..] } else { &wqe[..] };
        let src = deth.src_qp;
        let what = || format!("UD receive qpn {tq:#x} from qpn {src:#x}");
        let (grh, grh_bytes) = network_header(&p.encap, frame);
        let total = GRH_SPACE + p.payload.len();
        let srqn_field = srq.unwrap_or(0);
        let plan = match self.plan_scatter(segs, pd, total as u64, &what) {
            Ok(plan) => plan,
            Err(e) => {
                let synd = match e {
                    ScatterError::Length => cqe_syndrome::LOCAL_LENGTH_ERR,
                    ScatterError::Protection => cqe_syndrome::LOCAL_PROT_ERR,
                };
                self.resp_err_cqe(tq, srqn_field, idx, synd);
                if let Some(n) = srq {
                    self.srq_check_limit(n);
                }
                self.qp_enter_error(tq);
                return;
            }
        };
        // Without a GRH (IB, LNH local) the first 40 bytes stay untouched.
        let mut bytes = Vec::with_capacity(total);
        bytes.extend_from_slice(&grh_bytes);
        bytes.extend_from_slice(p.payload);
        let plan = if grh {
            plan
        } else {
            skip_plan(&plan, GRH_SPACE as u64)
        };
        let data = if grh { &bytes[..] } else { &bytes[GRH_SPACE..] };
        self.write_plan(&plan, data, &what);
        self.stats.ud_delivered += 1;
        self.ud_cqe(UdCqe {
            tq,
            srqn: srqn_field,
            idx,
            len: total as u32,
            src_qp: deth.src_qp,
            encap: p.encap,
            grh,
            imm: p.ext.imm,
            pkey_index,
            solicited: bth.solicited,
        });
        if let Some(n) = srq {
            self.srq_check_limit(n);
        }
    }

    fn ud_cqe(&mut self, u: UdCqe) {
        let Some(t) = self.objects.qps.get(&u.tq) else {
            return;
        };
        let (cqn, v1, uidx) = (t.cqn_rcv, t.cqe_v1(), t.user_index);
        let mut c = [0u8; 64];
        let op = if u.imm.is_some() {
            CqeOpcode::RESP_SEND_IMM
        } else {
            CqeOpcode::RESP_SEND
        };
        cqe64::opcode.set(&mut c, op.0).expect("4-bit");
        cqe64::byte_cnt.set(&mut c, u.len).expect("32-bit");
        cqe64::qpn.set(&mut c, u.tq).expect("24-bit");
        cqe64::srqn
            .set(&mut c, if v1 { uidx } else { u.srqn })
            .expect("24-bit");
        cqe64::wqe_counter.set(&mut c, u.idx).expect("16-bit");
        // flags_rqpn: 29:28 GRH present, 27:24 the SL (IB) or 25:24 the L3
        // header type (RoCE), 23:0 the source QP (Linux `handle_responder`,
        // rdma-core `handle_responder`).
        let mut flags = (u.src_qp & MASK24) | ((u.grh as u32) << 28);
        match u.encap {
            Encap::Ib { lrh, .. } => {
                flags |= u32::from(lrh.sl & 0xf) << 24;
                cqe64::slid.set(&mut c, lrh.slid).expect("16-bit");
            }
            Encap::RoceV2 { eth, .. } | Encap::RoceV1 { eth, .. } => {
                flags |= super::frames::l3_bits_of(&u.encap);
                if let Some(v) = eth.vlan {
                    cqe64::l4_l3_hdr_type.set(&mut c, 1).expect("8-bit");
                    cqe64::vlan_info
                        .set(&mut c, u16::from(v.pcp) << 13 | v.id)
                        .expect("16-bit");
                }
            }
        }
        cqe64::flags_rqpn.set(&mut c, flags).expect("32-bit");
        // The immediate, or else the P_Key index the datagram matched.
        cqe64::imm_inval_pkey
            .set(&mut c, u.imm.unwrap_or(u32::from(u.pkey_index)))
            .expect("32-bit");
        if let Some(cqn) = cqn {
            self.cq_push(cqn, c, u.solicited);
        }
    }
}

/// What a UD receive CQE reports.
struct UdCqe {
    tq: u32,
    srqn: u32,
    idx: u16,
    len: u32,
    src_qp: u32,
    encap: Encap,
    grh: bool,
    imm: Option<u32>,
    pkey_index: u16,
    solicited: bool,
}

/// Whether the packet had a GRH, and the 40 bytes a receive buffer starts
/// with: the IPv6 header or GRH as received, or (RoCE v2 over IPv4) 20 zero
/// bytes and the IPv4 header (Linux `union rdma_network_hdr`).
fn network_header(e: &Encap, frame: &[u8]) -> (bool, [u8; GRH_SPACE]) {
    let mut out = [0u8; GRH_SPACE];
    let at = e.link_len()
        + match e {
            Encap::Ib { .. } => 8,
            _ => 0,
        };
    match e {
        Encap::RoceV2 { ip: Ip::V4(_), .. } => {
            out[20..].copy_from_slice(&frame[at..at + 20]);
            (true, out)
        }
        Encap::Ib { grh: None, .. } => (false, out),
        _ => {
            out.copy_from_slice(&frame[at..at + GRH_SPACE]);
            (true, out)
        }
    }
}

/// The plan without its first `skip` bytes.
fn skip_plan(plan: &[(u64, u64)], mut skip: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::with_capacity(plan.len());
    for &(iova, n) in plan {
        if skip >= n {
            skip -= n;
            continue;
        }
        out.push((iova + skip, n - skip));
        skip = 0;
    }
    out
}
