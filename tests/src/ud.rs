//! UD helpers for the driver-against-model tests: a UD QP with its own
//! receive queue on a [`Host`], its activation with the UD masks, receive
//! slots with 40 bytes of GRH space, and the GRH a receive buffer must
//! start with, computed from the addresses and lengths (IBTA vol. 1 §8.3,
//! RFC 791/8200; Linux `union rdma_network_hdr` for RoCE v2 over IPv4).

use mlx5_driver::verbs::{
    AhHandle, QpAttr, QpAttrMask, QpCap, QpHandle, QpInitAttr, QpType, RecvWr, SendFlags, SendWr,
    Sge, WcOpcode, WcStatus, WorkCompletion, WrOpcode, WC_GRH, WC_WITH_IMM,
};

use crate::hosts::{Addr, Host, Transport, BIG, RECV_AT, SEND_AT};

/// The Q_Key every UD QP of these tests takes (rdma-core's ud_pingpong's).
pub const QKEY: u32 = 0x1111_1111;
/// Bytes of GRH space at the start of every UD receive buffer.
pub const GRH: usize = 40;
/// Receive slots of a UD QP's own receive queue.
pub const UD_RECVS: u32 = 32;
/// Bytes of one receive slot (the host buffer's 64 KiB receive slots are
/// cut in 16).
pub const SLOT: usize = 4096 + GRH;

/// A UD QP on a host: its handle and number.
#[derive(Debug, Clone, Copy)]
pub struct UdQp {
    /// The handle.
    pub qp: QpHandle,
    /// Its QP number.
    pub qpn: u32,
    /// Receive slots start here in the host's buffer.
    pub slots_at: usize,
}

/// A UD QP on `h` (its own receive queue of [`UD_RECVS`], the host's CQs),
/// moved RESET → INIT (port 1, P_Key index 0, `qkey`) → RTR → RTS with
/// the UD masks; receive slots at `slots_at`.
pub fn ud_qp(h: &mut Host, qkey: u32, slots_at: usize) -> UdQp {
    let (qp, cap) = h
        .ctx
        .create_qp_of_type(
            &QpInitAttr {
                send_cq: h.scq,
                recv_cq: h.rcq,
                srq: None,
                cap: QpCap {
                    max_send_wr: 16,
                    max_recv_wr: UD_RECVS,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 64,
                },
                sq_sig_all: false,
            },
            QpType::Ud,
        )
        .unwrap();
    assert!(cap.max_inline_data >= 64, "{cap:?}");
    let attr = QpAttr {
        port_num: 1,
        pkey_index: 0,
        qkey,
        sq_psn: 0x42,
        ..QpAttr::default()
    };
    for (state, mask) in QpAttrMask::UD_ACTIVATE {
        let a = QpAttr {
            qp_state: state,
            ..attr
        };
        if let Err(e) = h.ctx.modify_qp(qp, &a, mask) {
            panic!("UD to {state:?}: {e} ({:?})", h.ctx.last_error());
        }
    }
    UdQp {
        qp,
        qpn: h.ctx.qp_num(qp).unwrap(),
        slots_at,
    }
}

/// Fill slot `i` of `u` with `fill` and post it as receive `i`.
pub fn post_slot(h: &mut Host, u: &UdQp, i: usize, fill: u8) {
    let at = u.slots_at + i * SLOT;
    fill_bytes(h, at, SLOT, fill);
    let sg = [Sge {
        addr: h.buf.iova() + at as u64,
        length: SLOT as u32,
        lkey: h.lkey(),
    }];
    h.ctx
        .post_recv(
            u.qp,
            &[RecvWr {
                wr_id: i as u64,
                sges: &sg,
            }],
        )
        .unwrap();
}

/// Write `n` bytes of `b` at `at` of the host's buffer.
pub fn fill_bytes(h: &Host, at: usize, n: usize, b: u8) {
    h.buf.write_bytes(at, &vec![b; n]);
}

/// Read `n` bytes at `at` of the host's buffer.
pub fn read_bytes(h: &Host, at: usize, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    h.buf.read_bytes(at, &mut v);
    v
}

/// Send `data` (copied to the send area) from `u` to `dest` (address
/// handle, remote QPN, Q_Key), signaled; with `imm` as SEND_WITH_IMM.
pub fn ud_send(
    h: &mut Host,
    u: &UdQp,
    dest: (AhHandle, u32, u32),
    data: &[u8],
    imm: Option<u32>,
    wr_id: u64,
) {
    let (ah, remote_qpn, qkey) = dest;
    let off = SEND_AT + (wr_id as usize % 8) * 8192;
    assert!(data.len() <= 8192 && off + data.len() <= BIG);
    h.buf.write_bytes(off, data);
    let sg = [Sge {
        addr: h.buf.iova() + off as u64,
        length: data.len() as u32,
        lkey: h.lkey(),
    }];
    let wr = SendWr {
        wr_id,
        opcode: if imm.is_some() {
            WrOpcode::SendWithImm
        } else {
            WrOpcode::Send
        },
        send_flags: SendFlags::SIGNALED,
        sg_list: &sg,
        imm_data: imm.unwrap_or(0),
        ah: Some(ah),
        remote_qpn,
        remote_qkey: qkey,
        ..SendWr::EMPTY
    };
    h.ctx.post_send(u.qp, &[wr]).unwrap();
}

/// The 40 bytes a UD receive buffer starts with for a datagram of `len`
/// payload bytes (`imm`: with immediate data) from `from` to `to` over
/// `t` with hop limit 64, traffic class and flow label `(tclass, fl)`;
/// `None` where the packet has no GRH (InfiniBand by LID). The IPv4
/// identification (bytes 24..26) is the sender's counter: taken from
/// `got`, the checksum then checked against it.
pub fn expected_grh(
    t: Transport,
    from: &Addr,
    to: &Addr,
    (len, imm): (usize, bool),
    (tclass, fl): (u8, u32),
    got: &[u8],
) -> Option<[u8; GRH]> {
    let pad = (4 - len % 4) % 4;
    // BTH + DETH (+ ImmDt) + payload + pad + ICRC.
    let transport = 12 + 8 + if imm { 4 } else { 0 } + len + pad + 4;
    let mut g = [0u8; GRH];
    match t {
        Transport::IbLid => return None,
        Transport::RoceV2Ipv4 => {
            let total = (20 + 8 + transport) as u16;
            let h = &mut g[20..];
            h[0] = 0x45;
            h[1] = tclass;
            h[2..4].copy_from_slice(&total.to_be_bytes());
            h[4..6].copy_from_slice(&got[24..26]);
            h[6] = 0x40; // DF
            h[8] = 64;
            h[9] = 17;
            h[12..16].copy_from_slice(&from.gid[12..]);
            h[16..20].copy_from_slice(&to.gid[12..]);
            let mut sum = 0u32;
            for w in h.chunks(2) {
                sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
            }
            while sum > 0xffff {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        }
        _ => {
            let (paylen, next) = if t == Transport::RoceV2Ipv6 {
                (8 + transport, 17)
            } else {
                (transport, 0x1b)
            };
            let w0 = (6u32 << 28) | (u32::from(tclass) << 20) | (fl & 0xf_ffff);
            g[0..4].copy_from_slice(&w0.to_be_bytes());
            g[4..6].copy_from_slice(&(paylen as u16).to_be_bytes());
            g[6] = next;
            g[7] = 64;
            g[8..24].copy_from_slice(&from.gid);
            g[24..40].copy_from_slice(&to.gid);
        }
    }
    Some(g)
}

/// A receive completion of a UD datagram: success, `Recv`, the byte count
/// with the GRH space, the source QP, the GRH and immediate flags.
pub fn check_ud_wc(
    t: Transport,
    wc: &WorkCompletion,
    qpn: u32,
    src_qp: u32,
    len: usize,
    imm: Option<u32>,
    slid: u16,
) {
    let what = format!("{t:?}: {wc:?}");
    assert_eq!(wc.status, WcStatus::Success, "{what}");
    assert_eq!(wc.opcode, WcOpcode::Recv, "{what}");
    assert_eq!(wc.qp_num, qpn, "{what}");
    assert_eq!(wc.src_qp, src_qp, "{what}");
    assert_eq!(wc.byte_len as usize, len + GRH, "{what}");
    assert_eq!(wc.imm_data, imm, "{what}");
    assert_eq!(wc.srq_num, None, "{what}");
    let grh = if t == Transport::IbLid { 0 } else { WC_GRH };
    let with_imm = if imm.is_some() { WC_WITH_IMM } else { 0 };
    assert_eq!(wc.wc_flags, grh | with_imm, "{what}");
    assert_eq!(wc.slid, if t.ib() { slid } else { 0 }, "{what}");
    // bits 27:24 of `flags_rqpn`, as libmlx5 reads them: the SL on IB (0
    // here), the L3 header type on RoCE (2 IPv4, 1 IPv6, 0 GRH).
    let sl = match t {
        Transport::RoceV2Ipv4 => 2,
        Transport::RoceV2Ipv6 => 1,
        _ => 0,
    };
    assert_eq!(wc.sl, sl, "{what}");
}

/// The first receive slot of the host buffer's receive area, for UD slots.
pub const UD_SLOTS_AT: usize = RECV_AT;
