//! QP command encoders checked byte by byte against the command positions
//! of `mlx5_ifc.h` (QPC at 0x18, primary path at 0x30, page list at 0x110),
//! computed by hand here rather than through the layouts the encoders use.

extern crate std;

use super::attr::{AddressPath, QpAccess};
use super::cmd::*;
use crate::pagelist::PageList;

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}
fn be64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().unwrap())
}

/// Every byte outside `allowed` ranges is zero.
fn only_these(b: &[u8], allowed: &[(usize, usize)]) {
    for (i, &x) in b.iter().enumerate() {
        if x != 0 {
            assert!(
                allowed.iter().any(|&(s, e)| (s..e).contains(&i)),
                "unexpected byte {x:#04x} at {i:#x}"
            );
        }
    }
}

fn pages(n: usize) -> PageList {
    PageList {
        first: 0x7_0000_0000,
        log_page_size: 1,
        count: n,
    }
}

#[test]
fn create_qp_sender_with_zero_length_rq() {
    let mut buf = [0u8; 0x200];
    let p = CreateQpParams {
        st: mlx5_regs::consts::qp_st::RC,
        pd: 0x11,
        uar_page: 0x22,
        send: Some((7, 0x33)),
        recv: RecvSide::None,
        pages: Some(pages(3)),
        user_index: Some(0xff_ffff),
        ts_format: 0,
        dbr_addr: 0xaaaa_bbbb_cccc_d000,
    };
    let len = create_qp(&mut buf, &p).unwrap();
    assert_eq!(len, 0x110 + 3 * 8);
    let b = &buf[..len];
    assert_eq!(be16(b, 0), 0x500);
    assert_eq!(be32(b, 0x08), 0, "firmware picks the QPN");
    assert_eq!(be32(b, 0x10), 0, "opt_param_mask");
    assert_eq!(be32(b, 0x18), 3 << 11, "st RC, pm_state migrated");
    assert_eq!(be32(b, 0x1c), 0x11, "pd");
    // log_sq_size bits 14:11, no_sq 0, rlky bit 4, log_rq_size 0.
    assert_eq!(be32(b, 0x20), (7 << 11) | (1 << 4));
    assert_eq!(be32(b, 0x24), 0x22, "uar_page");
    assert_eq!(be32(b, 0x28), 0xff_ffff, "user_index");
    assert_eq!(be32(b, 0x2c), 1 << 24, "log_page_size");
    assert_eq!(be32(b, 0x94), 0x33, "cqn_snd");
    assert_eq!(be64(b, 0xb8), 0xaaaa_bbbb_cccc_d000, "dbr_addr");
    assert_eq!(be32(b, 0xc4), 3 << 24, "rq_type zero-length");
    assert_eq!(be64(b, 0x110), 0x7_0000_0000);
    assert_eq!(be64(b, 0x118), 0x7_0000_2000);
    assert_eq!(be64(b, 0x120), 0x7_0000_4000);
    only_these(
        b,
        &[
            (0, 2),
            (0x18, 0x30),
            (0x94, 0x98),
            (0xb8, 0xc0),
            (0xc4, 0xc8),
            (0x110, 0x128),
        ],
    );
    // The page list must fit the buffer.
    assert!(create_qp(&mut [0u8; 0x110], &p).is_err());
}

#[test]
fn create_qp_receiver_on_an_srq_without_send_queue() {
    let mut buf = [0u8; 0x110];
    let p = CreateQpParams {
        st: mlx5_regs::consts::qp_st::RC,
        pd: 5,
        uar_page: 1,
        send: None,
        recv: RecvSide::Srq {
            srqn: 0x44,
            cqn: 0x55,
            xrcd: 0x66,
        },
        pages: None,
        user_index: None,
        ts_format: 1,
        dbr_addr: 0x1000,
    };
    let len = create_qp(&mut buf, &p).unwrap();
    assert_eq!(len, 0x110, "no pages without a send ring");
    // no_sq bit 15, ts_format bits 7:6, rlky bit 4.
    assert_eq!(be32(&buf, 0x20), (1 << 15) | (1 << 6) | (1 << 4));
    assert_eq!(be32(&buf, 0x28), 0, "user_index left 0 on CQE-v0 devices");
    assert_eq!(be32(&buf, 0x94), 0, "no send CQ");
    assert_eq!(be32(&buf, 0xb0), 0x66, "xrcd");
    assert_eq!(be32(&buf, 0xb4), 0x55, "cqn_rcv");
    assert_eq!(be32(&buf, 0xc4), (1 << 24) | 0x44, "rq_type SRQ + srqn");
}

#[test]
fn create_qp_with_its_own_receive_ring_before_the_send_ring() {
    let mut buf = [0u8; 0x200];
    let p = CreateQpParams {
        st: mlx5_regs::consts::qp_st::RC,
        pd: 0x11,
        uar_page: 0x22,
        send: Some((6, 0x33)),
        recv: RecvSide::Own {
            log_size: 5,
            log_stride: 6,
            cqn: 0x44,
        },
        pages: Some(pages(2)),
        user_index: None,
        ts_format: 0,
        dbr_addr: 0x2000,
    };
    let len = create_qp(&mut buf, &p).unwrap();
    assert_eq!(len, 0x110 + 2 * 8);
    let b = &buf[..len];
    // log_rq_size bits 22:19, log_rq_stride (log2 bytes − 4) bits 18:16,
    // log_sq_size bits 14:11, rlky bit 4.
    assert_eq!(be32(b, 0x20), (5 << 19) | (2 << 16) | (6 << 11) | (1 << 4));
    assert_eq!(be32(b, 0x2c), 1 << 24, "log_page_size");
    assert_eq!(be32(b, 0x94), 0x33, "cqn_snd");
    assert_eq!(be32(b, 0xb0), 0, "no xrcd without an SRQ");
    assert_eq!(be32(b, 0xb4), 0x44, "cqn_rcv");
    assert_eq!(be32(b, 0xc4), 0, "rq_type regular, no SRQ");
    assert_eq!(be64(b, 0x110), 0x7_0000_0000);
    assert_eq!(be64(b, 0x118), 0x7_0000_2000);
    only_these(
        b,
        &[
            (0, 2),
            (0x18, 0x30),
            (0x94, 0x98),
            (0xb4, 0xc0),
            (0x110, 0x120),
        ],
    );
}

#[test]
fn rst2init_sets_port_pkey_pm_state_and_access() {
    let b = rst2init_qp(
        0x1234,
        1,
        3,
        QpAccess {
            remote_read: true,
            remote_write: true,
            remote_atomic: false,
        },
    )
    .unwrap();
    assert_eq!(b.len(), 272);
    assert_eq!(be16(&b, 0), 0x502);
    assert_eq!(be32(&b, 0x08), 0x1234);
    assert_eq!(be32(&b, 0x18), 3 << 11);
    assert_eq!(be16(&b, 0x32), 3, "pkey_index");
    assert_eq!(b[0x55], 1, "vhca_port_num");
    assert_eq!(be32(&b, 0xa8), (1 << 15) | (1 << 14), "rre rwe");
    assert_eq!(b[0x88] >> 4, 8, "log_ack_req_freq");
    only_these(
        &b,
        &[
            (0, 2),
            (0x08, 0x0c),
            (0x18, 0x1c),
            (0x30, 0x34),
            (0x54, 0x58),
            (0x88, 0x89),
            (0xa8, 0xac),
        ],
    );
}

#[test]
fn remote_atomic_sets_rae_with_the_ib_compatible_atomic_mode() {
    // Linux `to_mlx5_access_flags`: RAE | MLX5_ATOMIC_MODE_IB_COMP << 16.
    let b = rst2init_qp(
        0x1234,
        1,
        0,
        QpAccess {
            remote_read: true,
            remote_write: false,
            remote_atomic: true,
        },
    )
    .unwrap();
    assert_eq!(
        be32(&b, 0xa8),
        (1 << 15) | (1 << 13) | (1 << 16),
        "rre rae atomic_mode"
    );
}

fn rtr(path: AddressPath) -> [u8; 272] {
    init2rtr_qp(
        0x99,
        &RtrFields {
            path,
            mtu: 3,
            log_msg_max: 30,
            remote_qpn: 0xabcd,
            next_rcv_psn: 0x12_3456,
            min_rnr_nak: 12,
            log_rra_max: 2,
        },
    )
    .unwrap()
}

#[test]
fn init2rtr_force_loopback() {
    let b = rtr(AddressPath::ForceLoopback { port: 1 });
    assert_eq!(be16(&b, 0), 0x503);
    assert_eq!(be32(&b, 0x08), 0x99);
    assert_eq!(be32(&b, 0x10), 0, "opt_param_mask");
    assert_eq!(be32(&b, 0x20), (3 << 29) | (30 << 24), "mtu, log_msg_max");
    assert_eq!(be32(&b, 0x2c), 0xabcd, "remote_qpn");
    assert_eq!(
        be32(&b, 0xac),
        (12 << 24) | 0x12_3456,
        "min_rnr_nak, next_rcv_psn"
    );
    assert_eq!(be32(&b, 0xa8), 2 << 21, "log_rra_max");
    assert_eq!(b[0x30], 0x80, "fl: byte 0x30 bit 7");
    assert_eq!(b[0x55], 1);
    only_these(
        &b,
        &[
            (0, 2),
            (0x08, 0x0c),
            (0x20, 0x24),
            (0x2c, 0x34),
            (0x54, 0x58),
            (0x88, 0x89),
            (0xa8, 0xb0),
        ],
    );
}

#[test]
fn init2rtr_roce_and_ib_paths() {
    let gid = [
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0xc9, 0, 0xff, 0xfe, 1, 2, 3,
    ];
    let b = rtr(AddressPath::Roce {
        port: 1,
        sgid_index: 0,
        dgid: gid,
        dmac: [2, 0xc9, 0, 1, 2, 3],
        hop_limit: 64,
        udp_sport: 0xc123,
        traffic_class: 0x28,
        flow_label: 0x12345,
        sl: 0xd,
        roce_v2: true,
    });
    assert_eq!(b[0x30] & 0x80, 0, "no force loopback");
    assert_eq!(be32(&b, 0x54) >> 28 & 7, 5, "eth_prio = sl & 7");
    assert_eq!(be32(&b, 0x50) >> 16 & 0x3f, 0x28 >> 2, "dscp on v2");
    assert_eq!(&b[0x40..0x50], &gid, "rgid_rip");
    assert_eq!(&b[0x56..0x5c], &[2, 0xc9, 0, 1, 2, 3], "rmac");
    assert_eq!(b[0x39], 0, "src_addr_index");
    assert_eq!(b[0x3b], 64, "hop_limit");
    assert_eq!(be16(&b, 0x52), 0xc123, "udp_sport");
    assert_eq!(b[0x55], 1);
    assert_eq!(be32(&b, 0x3c), 0x28 << 20 | 0x12345, "tclass, flow_label");
    assert_eq!(be32(&b, 0x88) >> 28, 8, "log_ack_req_freq");
    // RoCE v1: no UDP, and no DSCP (Linux sets it for v2 GIDs only).
    let b = rtr(AddressPath::Roce {
        port: 1,
        sgid_index: 1,
        dgid: gid,
        dmac: [2, 0xc9, 0, 1, 2, 3],
        hop_limit: 64,
        udp_sport: 0,
        traffic_class: 0x28,
        flow_label: 0,
        sl: 3,
        roce_v2: false,
    });
    assert_eq!(be32(&b, 0x50) >> 16 & 0x3f, 0, "no dscp on v1");
    assert_eq!(be32(&b, 0x54) >> 28 & 7, 3, "eth_prio");
    let b = rtr(AddressPath::Ib {
        port: 1,
        dlid: 0x17,
        sl: 2,
    });
    assert_eq!(be16(&b, 0x36), 0x17, "rlid");
    assert_eq!(be32(&b, 0x54) >> 24 & 0xf, 2, "sl");
    assert_eq!(b[0x30], 0);
    assert!(b[0x40..0x50].iter().all(|&x| x == 0));
    let b = rtr(AddressPath::IbGlobal {
        port: 1,
        dlid: 0x17,
        sl: 1,
        sgid_index: 0,
        dgid: gid,
        hop_limit: 9,
        traffic_class: 3,
        flow_label: 0xabcde,
    });
    assert_eq!(be16(&b, 0x36), 0x17, "rlid");
    assert_eq!(b[0x35] & 0x80, 0x80, "grh");
    assert_eq!(&b[0x40..0x50], &gid, "rgid");
    assert_eq!(b[0x3b], 9, "hop_limit");
    assert_eq!(be32(&b, 0x3c), 3 << 20 | 0xabcde, "tclass, flow_label");
}

#[test]
fn rtr2rts_sets_timeouts_retries_and_psn() {
    let b = rtr2rts_qp(
        0x77,
        &RtsFields {
            ack_timeout: 14,
            retry_count: 7,
            rnr_retry: 7,
            next_send_psn: 0x65_4321,
            log_sra_max: 1,
        },
    )
    .unwrap();
    assert_eq!(be16(&b, 0), 0x504);
    assert_eq!(be32(&b, 0x08), 0x77);
    assert_eq!(b[0x38] >> 3, 14, "ack_timeout: byte 0x38 bits 7:3");
    assert_eq!(
        b[0x88] >> 4,
        8,
        "log_ack_req_freq as Linux (MLX5_IB_ACK_REQ_FREQ)"
    );
    assert_eq!(
        be32(&b, 0x88),
        (8 << 28) | (1 << 21) | (7 << 16) | (7 << 13)
    );
    assert_eq!(be32(&b, 0x90), 0x65_4321);
    only_these(
        &b,
        &[
            (0, 2),
            (0x08, 0x0c),
            (0x38, 0x39),
            (0x88, 0x8c),
            (0x90, 0x94),
        ],
    );
    let too_many = RtsFields {
        ack_timeout: 0,
        retry_count: 0,
        rnr_retry: 8,
        next_send_psn: 0,
        log_sra_max: 0,
    };
    assert!(rtr2rts_qp(1, &too_many).is_err(), "rnr_retry is 3 bits");
}

#[test]
fn short_commands_carry_only_the_qpn() {
    for (b, op) in [
        (qp_2err(0x12_3456).unwrap(), 0x507),
        (qp_2rst(0x12_3456).unwrap(), 0x50a),
        (destroy_qp(0x12_3456).unwrap(), 0x501),
        (query_qp(0x12_3456).unwrap(), 0x50b),
    ] {
        assert_eq!(b.len(), 16);
        assert_eq!(be16(&b, 0), op);
        assert_eq!(be32(&b, 0x08), 0x12_3456);
        only_these(&b, &[(0, 2), (0x08, 0x0c)]);
    }
    assert!(qp_2err(0x100_0000).is_err(), "24-bit QPN");
}

#[test]
fn query_qp_output_is_parsed_at_the_command_positions() {
    let mut out = [0u8; QUERY_QP_OUT];
    assert_eq!(out.len(), 464);
    out[0x18] = 3 << 4; // state RTS: byte 0x18 bits 7:4
    out[0x19] = 0; // st RC
    out[0x20] = 3 << 5; // mtu 1024
    out[0x2d..0x30].copy_from_slice(&[0, 0x12, 0x34]); // remote_qpn
    out[0x30] = 0x80; // fl
    out[0x91..0x94].copy_from_slice(&[0, 0, 9]); // next_send_psn
    out[0x95..0x98].copy_from_slice(&[0, 0, 0x21]); // cqn_snd
    out[0xad..0xb0].copy_from_slice(&[0, 0, 8]); // next_rcv_psn
    out[0xb5..0xb8].copy_from_slice(&[0, 0, 0x22]); // cqn_rcv
    out[0xc4] = 1; // rq_type SRQ
    out[0xc7] = 0x44; // srqn
    out[0xcc..0xd0].copy_from_slice(&[0, 5, 0, 7]); // hw / sw sq wqebb counters
    let q = parse_query_qp(&out);
    assert_eq!(q.state, super::QpState::Rts);
    assert_eq!((q.st, q.mtu, q.remote_qpn, q.fl), (0, 3, 0x1234, true));
    assert_eq!((q.next_send_psn, q.next_rcv_psn), (9, 8));
    assert_eq!(
        (q.cqn_snd, q.cqn_rcv, q.rq_type, q.srqn),
        (0x21, 0x22, 1, 0x44)
    );
    assert_eq!((q.hw_sq_wqebb_counter, q.sw_sq_wqebb_counter), (5, 7));
}
