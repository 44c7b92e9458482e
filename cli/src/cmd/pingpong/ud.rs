//! `mlx5 pingpong --qp ud`: one UD QP per host (its own receive queue or
//! the host's SRQ), an address handle to the other host, and SENDs back
//! and forth as rdma-core's `ibv_ud_pingpong` sends them: Q_Key
//! 0x11111111, each receive buffer 40 bytes longer than the message for
//! the GRH (`ibv_poll_cq(3)`), messages no longer than the ports' MTU.
//! Every receive is checked: status, length (GRH included), source QP,
//! every byte.

use mlx5_driver::verbs::{
    AhHandle, QpAttr, QpAttrMask, QpCap, QpHandle, QpInitAttr, QpType, RecvWr, SendFlags, SendWr,
    Sge, WcOpcode, WcStatus, WrOpcode,
};

use super::exchange::{pattern_byte, wait_one, Tally};
use super::host::{verbs_error, Addr, Host, RECVS};
use super::opts::Op;
use crate::common::error::CliError;

/// `ibv_ud_pingpong`'s Q_Key.
pub const QKEY: u32 = 0x1111_1111;
/// Bytes of GRH space at the start of every UD receive buffer.
pub const GRH: usize = 40;

/// One host's UD side.
pub struct UdSide {
    /// The UD QP.
    pub qp: QpHandle,
    /// Its number (what the peer sends to).
    pub qpn: u32,
    /// The address handle to the peer.
    pub ah: AhHandle,
    /// Receives on the QP's own queue (else on the host's SRQ).
    own: bool,
}

/// Create `h`'s UD QP (receiving on its own queue unless the host has an
/// SRQ), move it to RTS with the UD masks, post [`RECVS`] receives, and
/// make the address handle to `peer`.
pub fn setup(h: &mut Host, peer: &Addr) -> Result<UdSide, CliError> {
    let own = h.srq.is_none();
    let (qp, _) = h
        .ctx
        .create_qp_of_type(
            &QpInitAttr {
                send_cq: h.scq,
                recv_cq: h.rcq,
                srq: h.srq,
                cap: QpCap {
                    max_send_wr: 1,
                    max_send_sge: 1,
                    max_recv_wr: if own { RECVS as u32 } else { 0 },
                    max_recv_sge: u32::from(own),
                    max_inline_data: 0,
                },
                sq_sig_all: false,
            },
            QpType::Ud,
        )
        .map_err(|e| verbs_error(&h.ctx, "create_qp (UD)", e))?;
    let attr = QpAttr {
        port_num: 1,
        pkey_index: 0,
        qkey: QKEY,
        sq_psn: h.addr.psn,
        ..QpAttr::default()
    };
    let side = (|| {
        for (state, mask) in QpAttrMask::UD_ACTIVATE {
            let a = QpAttr {
                qp_state: state,
                ..attr
            };
            h.ctx
                .modify_qp(qp, &a, mask)
                .map_err(|e| verbs_error(&h.ctx, &format!("modify_qp (UD) to {state:?}"), e))?;
        }
        let qpn = h
            .ctx
            .qp_num(qp)
            .map_err(|e| verbs_error(&h.ctx, "qp_num", e))?;
        let ah = h
            .ctx
            .create_ah(&h.ah_to(peer))
            .map_err(|e| verbs_error(&h.ctx, "create_ah", e))?;
        let side = UdSide { qp, qpn, ah, own };
        for i in 0..RECVS {
            if let Err(e) = post_recv(h, &side, i) {
                let _ = h.ctx.destroy_ah(ah);
                return Err(e);
            }
        }
        Ok(side)
    })();
    if side.is_err() {
        let _ = h.ctx.destroy_qp(qp);
    }
    side
}

/// Destroy what [`setup`] made (the host's own objects stay for
/// `Host::close`).
pub fn teardown(h: &mut Host, s: &UdSide) -> Result<(), CliError> {
    let ah = h
        .ctx
        .destroy_ah(s.ah)
        .map_err(|e| verbs_error(&h.ctx, "destroy_ah", e));
    let qp = h
        .ctx
        .destroy_qp(s.qp)
        .map_err(|e| verbs_error(&h.ctx, "destroy_qp (UD)", e));
    ah.and(qp)
}

/// Post receive slot `i` (message size + GRH bytes) on the QP's own
/// queue or the host's SRQ.
fn post_recv(h: &mut Host, s: &UdSide, i: usize) -> Result<(), CliError> {
    if !s.own {
        return h.post_recv(i).map_err(super::host::setup_error);
    }
    let sg = [Sge {
        addr: h.buf.iova() + h.spec.recv_at(i) as u64,
        length: h.spec.slot as u32,
        lkey: h.lkey(),
    }];
    let wr = [RecvWr {
        wr_id: i as u64,
        sges: &sg,
    }];
    h.ctx
        .post_recv(s.qp, &wr)
        .map_err(|e| verbs_error(&h.ctx, "post_recv (UD)", e.errno))
}

/// `iters` round trips of `size`-byte datagrams (`op`: SEND or SEND with
/// immediate), host 1 first; stops at the first message that does not
/// arrive once and intact.
pub fn run(
    hosts: (&mut Host, &mut Host),
    sides: (&UdSide, &UdSide),
    op: Op,
    size: usize,
    iters: u32,
) -> (Tally, Result<(), CliError>) {
    let mut tally = Tally::default();
    let (h1, h2) = hosts;
    let (s1, s2) = sides;
    let mut slots = [0usize; 2];
    for msg in 0..2 * u64::from(iters) {
        let res = if msg % 2 == 0 {
            one(h1, s1, h2, s2, &mut slots[1], op, size, msg, &mut tally)
        } else {
            one(h2, s2, h1, s1, &mut slots[0], op, size, msg, &mut tally)
        };
        if let Err(e) = res {
            return (tally, Err(e));
        }
    }
    (tally, Ok(()))
}

/// Message `msg` from `from` to `to`; `slot` is the receive slot `to`
/// consumes next.
#[allow(clippy::too_many_arguments)]
fn one(
    from: &mut Host,
    fs: &UdSide,
    to: &mut Host,
    ts: &UdSide,
    slot: &mut usize,
    op: Op,
    size: usize,
    msg: u64,
    tally: &mut Tally,
) -> Result<(), CliError> {
    let data: Vec<u8> = (0..size).map(|i| pattern_byte(msg, i)).collect();
    let at = from.spec.send_at();
    from.buf.write_bytes(at, &data);
    let sg = [Sge {
        addr: from.buf.iova() + at as u64,
        length: size as u32,
        lkey: from.lkey(),
    }];
    let imm = op == Op::SendImm;
    let wr = SendWr {
        wr_id: msg,
        opcode: if imm {
            WrOpcode::SendWithImm
        } else {
            WrOpcode::Send
        },
        send_flags: SendFlags::SIGNALED,
        sg_list: &sg,
        imm_data: (msg as u32).to_be(),
        ah: Some(fs.ah),
        remote_qpn: ts.qpn,
        remote_qkey: QKEY,
        ..SendWr::EMPTY
    };
    from.ctx
        .post_send(fs.qp, &[wr])
        .map_err(|e| verbs_error(&from.ctx, "post_send (UD)", e.errno))?;
    tally.sent += 1;
    let lost = || {
        CliError::check(format!(
            "message {msg}: no completion within 60 s of device time (a UD datagram is not retried)"
        ))
    };
    let s = wait_one(from, true, &to.dev)?.ok_or_else(lost)?;
    if s.status != WcStatus::Success || s.wr_id != msg {
        return Err(CliError::check(format!(
            "message {msg}: send completion {:?} for wr_id {}",
            s.status, s.wr_id
        )));
    }
    let r = wait_one(to, false, &from.dev)?.ok_or_else(lost)?;
    // A SEND with immediate completes as a receive (IBV_WC_RECV) with
    // the immediate and IBV_WC_WITH_IMM.
    let ok = r.status == WcStatus::Success
        && r.opcode == WcOpcode::Recv
        && r.wr_id == *slot as u64
        && r.byte_len as usize == GRH + size
        && r.src_qp == fs.qpn
        && (!imm || r.imm_data == Some((msg as u32).to_be()));
    if !ok {
        return Err(CliError::check(format!(
            "message {msg}: receive completion {r:?}, expected slot {slot}, {} bytes (GRH \
             included) from QP {:#x}",
            GRH + size,
            fs.qpn
        )));
    }
    let mut got = vec![0u8; size];
    to.buf.read_bytes(to.spec.recv_at(*slot) + GRH, &mut got);
    if got != data {
        let i = got.iter().zip(&data).position(|(a, b)| a != b).unwrap_or(0);
        return Err(CliError::check(format!(
            "message {msg}: byte {i} arrived as {:#04x}, sent {:#04x}",
            got[i], data[i]
        )));
    }
    tally.received += 1;
    post_recv(to, ts, *slot)?;
    *slot = (*slot + 1) % RECVS;
    Ok(())
}
