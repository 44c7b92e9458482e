//! The model's side of `ibv_ud_pingpong` (rdma-core
//! `libibverbs/examples/ud_pingpong.c`): one UD QP with Q_Key 0x11111111,
//! an address handle toward the GID the program sends (hop limit 64, as
//! its own), receive buffers of `size + 40` bytes whose first 40 hold the
//! packet's network header (IBTA vol. 1 §11.4.1.2; for RoCE v2 over IPv4,
//! 20 zero bytes and the IPv4 header, Linux `union rdma_network_hdr`).
//! The exchange and the alternation are rc_pingpong's. The program sends
//! from the buffer it receives into, so after its first message it echoes
//! what it got; the model does the same, and checks each message: its
//! length, its source QP, the network header, and every payload byte.
//! UD has no retransmission: a datagram lost on the wire stops both sides
//! (the program waits forever; the model until `--timeout`).

use std::time::Instant;

use mlx5_driver::verbs::{
    AhAttr, AhHandle, GlobalRoute, QpAttr, QpAttrMask, QpCap, QpHandle, QpInitAttr, QpType, RecvWr,
    SendFlags, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion, WrOpcode, WC_GRH,
};
use mlx5_sim::UdpLink;

use super::oob::Dest;
use super::opts::Args;
use super::rc::{nothing_more_arrives, resolve, sent, text, wait, Outcome, FILL};
use crate::cmd::pingpong::host::{verbs_error, Host, RECVS};
use crate::common::error::CliError;

/// ud_pingpong's Q_Key.
pub const QKEY: u32 = 0x1111_1111;
/// Bytes of GRH space at the start of every UD receive buffer.
pub const GRH: usize = 40;
/// The program's page: `-c` zeroes the first byte of each.
const PAGE: usize = 4096;

/// The message the program sends first: its buffer, 0x7b, with `-c` the
/// first byte of each page zero.
pub fn first_message(size: usize, chk: bool) -> Vec<u8> {
    let mut m = vec![FILL; size];
    if chk {
        for b in m.iter_mut().step_by(PAGE) {
            *b = 0;
        }
    }
    m
}

/// The 20-byte IPv4 header a datagram from `from` to `to` carrying `len`
/// payload bytes must have had, checked field by field against `h` (the
/// identification, TTL and DSCP are the sender's; the checksum must
/// verify). `None` when it holds.
pub fn ipv4_header_problem(h: &[u8], from: [u8; 4], to: [u8; 4], len: usize) -> Option<String> {
    let pad = (4 - len % 4) % 4;
    // IPv4 + UDP + BTH + DETH + payload + pad + ICRC.
    let total = 20 + 8 + 12 + 8 + len + pad + 4;
    let got_total = usize::from(u16::from_be_bytes([h[2], h[3]]));
    let mut sum = 0u32;
    for w in h[..20].chunks(2) {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    if h[0] != 0x45 {
        Some(format!("version/IHL {:#04x}, not 0x45", h[0]))
    } else if got_total != total {
        Some(format!("total length {got_total}, not {total}"))
    } else if h[9] != 17 {
        Some(format!("protocol {}, not UDP (17)", h[9]))
    } else if h[12..16] != from || h[16..20] != to {
        Some(format!(
            "addresses {:?} -> {:?}, not {from:?} -> {to:?}",
            &h[12..16],
            &h[16..20]
        ))
    } else if sum != 0xffff {
        Some("the header checksum does not verify".into())
    } else {
        None
    }
}

/// The UD QP, its address handle and where its buffers are.
struct Ud {
    qp: QpHandle,
    qpn: u32,
    ah: Option<AhHandle>,
    slot: usize,
}

fn create(host: &mut Host, size: usize) -> Result<Ud, CliError> {
    let (qp, _) = host
        .ctx
        .create_qp_of_type(
            &QpInitAttr {
                send_cq: host.scq,
                recv_cq: host.rcq,
                srq: None,
                cap: QpCap {
                    max_send_wr: 8,
                    max_recv_wr: RECVS as u32,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    ..QpCap::default()
                },
                sq_sig_all: false,
            },
            QpType::Ud,
        )
        .map_err(|e| verbs_error(&host.ctx, "create_qp (UD)", e))?;
    let ud = Ud {
        qp,
        qpn: host.ctx.qp_num(qp).unwrap_or(0),
        ah: None,
        slot: size + GRH,
    };
    let attr = QpAttr {
        port_num: 1,
        pkey_index: 0,
        qkey: QKEY,
        sq_psn: host.addr.psn,
        ..QpAttr::default()
    };
    for (state, mask) in QpAttrMask::UD_ACTIVATE {
        let a = QpAttr {
            qp_state: state,
            ..attr
        };
        if let Err(e) = host.ctx.modify_qp(qp, &a, mask) {
            let err = verbs_error(&host.ctx, &format!("modify_qp (UD) to {state:?}"), e);
            let _ = host.ctx.destroy_qp(qp);
            return Err(err);
        }
    }
    Ok(ud)
}

fn post_recv(host: &mut Host, ud: &Ud, i: usize) -> Result<(), CliError> {
    let sg = [Sge {
        addr: host.buf.iova() + host.spec.recv_at(i) as u64,
        length: ud.slot as u32,
        lkey: host.lkey(),
    }];
    let wr = [RecvWr {
        wr_id: i as u64,
        sges: &sg,
    }];
    host.ctx
        .post_recv(ud.qp, &wr)
        .map_err(|e| verbs_error(&host.ctx, "post_recv (UD)", e.errno))
}

fn make_ah(host: &mut Host, link: &UdpLink, ud: &mut Ud, peer: &Dest) -> Result<(), CliError> {
    let mac = resolve(link, peer)?;
    let attr = AhAttr {
        is_global: true,
        grh: GlobalRoute {
            dgid: peer.gid,
            flow_label: 0,
            sgid_index: host.sgid_index,
            hop_limit: 64,
            traffic_class: 0,
        },
        port_num: 1,
        dmac: Some(mac),
        ..AhAttr::default()
    };
    let ah = host
        .ctx
        .create_ah(&attr)
        .map_err(|e| verbs_error(&host.ctx, "create_ah", e))?;
    ud.ah = Some(ah);
    Ok(())
}

/// Check receive completion `r` (from `peer`), its network header and
/// payload against `want`; the payload, and the slot posted again.
fn received(
    host: &mut Host,
    ud: &Ud,
    peer: &Dest,
    r: WorkCompletion,
    want: &[u8],
    what: &str,
) -> Result<Vec<u8>, CliError> {
    let size = want.len();
    let fail = |m: String| Err(CliError::check(format!("{what}: {m}")));
    if r.status != WcStatus::Success {
        return fail(format!(
            "receive completion {:?} (vendor syndrome {:#x})",
            r.status, r.vendor_err
        ));
    }
    if (r.opcode, r.byte_len as usize) != (WcOpcode::Recv, size + GRH) {
        return fail(format!(
            "receive completion {:?} of {} bytes, expected Recv of {} (40 of GRH and {size})",
            r.opcode,
            r.byte_len,
            size + GRH
        ));
    }
    if r.qp_num != ud.qpn || r.src_qp != peer.qpn || r.wc_flags & WC_GRH == 0 {
        return fail(format!(
            "completion on QP {:#x} from QP {:#x} (flags {:#x}); expected {:#x} from {:#x} with a GRH",
            r.qp_num, r.src_qp, r.wc_flags, ud.qpn, peer.qpn
        ));
    }
    let slot = r.wr_id as usize;
    if slot >= RECVS {
        return fail(format!("completion names WQE {slot}, never posted"));
    }
    let mut got = vec![0u8; size + GRH];
    host.buf.read_bytes(host.spec.recv_at(slot), &mut got);
    if got[..20] != [0; 20] {
        return fail("the GRH area's first 20 bytes are not zero (RoCE v2 over IPv4)".into());
    }
    let from = [peer.gid[12], peer.gid[13], peer.gid[14], peer.gid[15]];
    let g = host.addr.gid;
    if let Some(p) = ipv4_header_problem(&got[20..GRH], from, [g[12], g[13], g[14], g[15]], size) {
        return fail(format!("the IPv4 header in the GRH area: {p}"));
    }
    let data = got.split_off(GRH);
    if let Some(i) = (0..size).find(|&i| data[i] != want[i]) {
        return fail(format!(
            "payload byte {i} is {:#04x}, expected {:#04x}",
            data[i], want[i]
        ));
    }
    post_recv(host, ud, slot)?;
    Ok(data)
}

fn send(
    host: &mut Host,
    ud: &Ud,
    peer: &Dest,
    data: &[u8],
    (n, deadline): (u64, Instant),
) -> Result<(), CliError> {
    host.buf.write_bytes(host.spec.send_at(), data);
    let sg = [Sge {
        addr: host.buf.iova() + host.spec.send_at() as u64,
        length: data.len() as u32,
        lkey: host.lkey(),
    }];
    let wr = SendWr {
        wr_id: n,
        opcode: WrOpcode::Send,
        send_flags: SendFlags::SIGNALED,
        sg_list: &sg,
        ah: ud.ah,
        remote_qpn: peer.qpn,
        remote_qkey: QKEY,
        ..SendWr::EMPTY
    };
    host.ctx
        .post_send(ud.qp, &[wr])
        .map_err(|e| verbs_error(&host.ctx, &format!("message {}: post_send", n + 1), e.errno))?;
    sent(host, n, deadline)
}

/// The whole session: the UD QP, the exchange, `iters` round trips, a
/// quiet period in which nothing more may arrive; the QP and address
/// handle destroyed whatever happened.
pub fn session(
    a: &Args,
    host: &mut Host,
    link: &UdpLink,
    deadline: Instant,
    progress: bool,
) -> Result<Outcome, CliError> {
    let size = a.size() as usize;
    let mtu = host.addr.mtu.bytes() as usize;
    if size > mtu {
        return Err(CliError::usage(
            format!(
                "--size {size} is larger than the port's MTU ({mtu}); a UD message is one packet"
            ),
            format!("use --size {mtu} or less (ud_pingpong refuses the same)"),
        ));
    }
    let mut ud = create(host, size)?;
    let res = run(a, host, link, &mut ud, deadline, progress);
    if let Some(ah) = ud.ah {
        let _ = host.ctx.destroy_ah(ah);
    }
    let closed = host
        .ctx
        .destroy_qp(ud.qp)
        .map_err(|e| verbs_error(&host.ctx, "destroy_qp (UD)", e));
    let out = res?;
    closed?;
    Ok(out)
}

fn run(
    a: &Args,
    host: &mut Host,
    link: &UdpLink,
    ud: &mut Ud,
    deadline: Instant,
    progress: bool,
) -> Result<Outcome, CliError> {
    let size = a.size() as usize;
    for i in 0..RECVS {
        post_recv(host, ud, i)?;
    }
    let me = Dest {
        lid: 0,
        qpn: ud.qpn,
        psn: host.addr.psn,
        gid: host.addr.gid,
    };
    let (peers, client) = super::exchange(a, &[me], 1, deadline, progress, |p| {
        make_ah(host, link, ud, &p[0])
    })?;
    let peer = peers[0];
    let start = Instant::now();
    // What the next message must hold: the program's first message is its
    // buffer; after that it echoes the model's last one.
    let mut want = first_message(size, a.chk);
    let mut got = 0u64;
    for n in 0..u64::from(a.iters) {
        let what = format!("message {} received", n + 1);
        if client {
            send(host, ud, &peer, &want, (n, deadline))?;
            let r = wait(host, false, deadline, &what)?;
            want = received(host, ud, &peer, r, &want, &what)?;
        } else {
            let r = wait(host, false, deadline, &what)?;
            want = received(host, ud, &peer, r, &want, &what)?;
            send(host, ud, &peer, &want, (n, deadline))?;
        }
        got += 1;
    }
    let pingpong = start.elapsed();
    nothing_more_arrives(host)?;
    Ok(Outcome {
        local_text: vec![text(&me)],
        remote_text: vec![text(&peer)],
        received: got,
        per_qp: Vec::new(),
        pingpong,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_message_zeroes_page_starts_only_with_chk() {
        assert!(first_message(5000, false).iter().all(|&b| b == FILL));
        let m = first_message(5000, true);
        assert_eq!(
            (m[0], m[1], m[4095], m[4096], m[4097]),
            (0, FILL, FILL, 0, FILL)
        );
    }

    #[test]
    fn ipv4_header_checks_length_addresses_and_checksum() {
        // 64 payload bytes: 20 + 8 + 12 + 8 + 64 + 0 + 4 = 116.
        let mut h = [
            0x45, 0, 0, 116, 0x12, 0x34, 0x40, 0, 64, 17, 0, 0, 198, 18, 0, 1, 198, 18, 0, 2,
        ];
        let mut sum = 0u32;
        for w in h.chunks(2) {
            sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        let (a, b) = ([198, 18, 0, 1], [198, 18, 0, 2]);
        assert_eq!(ipv4_header_problem(&h, a, b, 64), None);
        assert!(ipv4_header_problem(&h, a, b, 65)
            .unwrap()
            .contains("total length"));
        assert!(ipv4_header_problem(&h, b, a, 64)
            .unwrap()
            .contains("addresses"));
        h[8] = 63;
        assert!(ipv4_header_problem(&h, a, b, 64)
            .unwrap()
            .contains("checksum"));
    }
}
