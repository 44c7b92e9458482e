//! The queue-pair, memory-key and vport commands through their nested
//! accessors, at the command byte offsets Linux uses (hand checks of the
//! `mlx5_ifc.h` layouts: `drivers/infiniband/hw/mlx5/qp.c`,
//! `drivers/net/ethernet/mellanox/mlx5/core/{mr.c,vport.c}`), the new opcode
//! names and the QP constants.

use mlx5_regs::consts::{mkey, mtu, qp_state, wqe, OptParam};
use mlx5_regs::decode::{decode_command, DecodeOptions, Direction};
use mlx5_regs::layouts::*;
use mlx5_regs::{EventMask, EventType, Opcode};

#[test]
fn create_qp_puts_the_qpc_at_0x18_and_the_page_list_at_0x110() {
    let mut cmd = vec![0u8; create_qp_in::pas.len_with(2)];
    assert_eq!(cmd.len(), 0x110 + 16);
    let qpc_buf = create_qp_in::qpc.get_mut(&mut cmd);
    qpc::st.set(qpc_buf, 0).unwrap();
    qpc::pm_state.set(qpc_buf, 3).unwrap();
    qpc::user_index.set(qpc_buf, 0xff_ffff).unwrap();
    qpc::rq_type.set(qpc_buf, 3).unwrap();
    qpc::dbr_addr.set(qpc_buf, 0x1122_3344_5566_7788).unwrap();
    let ads_buf = qpc::primary_address_path.get_mut(qpc_buf);
    ads::fl.set(ads_buf, true).unwrap();
    ads::vhca_port_num.set(ads_buf, 1).unwrap();
    ads::rgid_rip.get_mut(ads_buf)[0] = 0xfe;
    create_qp_in::pas.set(&mut cmd, 1, 0xabc_d000).unwrap();
    // pm_state: command byte 0x18 bits 12:11.
    assert_eq!(cmd[0x1a], 3 << 3);
    // user_index: command dword 0x28 bits 23:0.
    assert_eq!(cmd[0x29..0x2c], [0xff, 0xff, 0xff]);
    // rq_type: command dword 0xc4 bits 26:24.
    assert_eq!(cmd[0xc4], 3);
    assert_eq!(cmd[0xb8..0xc0], 0x1122_3344_5566_7788u64.to_be_bytes());
    // fl: command byte 0x30 bit 7; port: byte 0x55; rgid_rip from 0x40.
    assert_eq!(cmd[0x30], 0x80);
    assert_eq!(cmd[0x55], 1);
    assert_eq!(cmd[0x40], 0xfe);
    assert_eq!(cmd[0x118..0x120], 0xabc_d000u64.to_be_bytes());
}

#[test]
fn every_qp_transition_has_the_same_header_and_qpc_place() {
    let ins = [
        (Opcode::RST2INIT_QP, &rst2init_qp_in::LAYOUT),
        (Opcode::INIT2INIT_QP, &init2init_qp_in::LAYOUT),
        (Opcode::INIT2RTR_QP, &init2rtr_qp_in::LAYOUT),
        (Opcode::RTR2RTS_QP, &rtr2rts_qp_in::LAYOUT),
        (Opcode::RTS2RTS_QP, &rts2rts_qp_in::LAYOUT),
        (Opcode::SQERR2RTS_QP, &sqerr2rts_qp_in::LAYOUT),
    ];
    for (op, l) in ins {
        assert_eq!(op.layouts().unwrap().0.name, l.name);
        assert_eq!(l.size, 272, "{op}");
        let qpn = l.field("qpn").unwrap();
        assert_eq!((qpn.bit_off, qpn.width), (72, 24), "{op}");
        let mask = l.field("opt_param_mask").unwrap();
        assert_eq!(mask.bit_off, 0x10 * 8, "{op}");
        let ctx = l.field("qpc").unwrap();
        assert_eq!(ctx.bit_off, 0x18 * 8, "{op}");
    }
    for (op, l) in [
        (Opcode::QP_2ERR, &qp_2err_in::LAYOUT),
        (Opcode::QP_2RST, &qp_2rst_in::LAYOUT),
        (Opcode::DESTROY_QP, &destroy_qp_in::LAYOUT),
        (Opcode::QUERY_QP, &query_qp_in::LAYOUT),
    ] {
        assert_eq!(op.layouts().unwrap().0.name, l.name);
        assert_eq!(l.size, 16);
        assert_eq!(l.field("qpn").unwrap().bit_off, 72, "{op}");
    }
}

#[test]
fn query_qp_output_has_the_page_list_or_the_error_syndrome_at_0x110() {
    let mut out = vec![0u8; query_qp_out::SIZE];
    qpc::state
        .set(query_qp_out::qpc.get_mut(&mut out), qp_state::ERR)
        .unwrap();
    qpc::sw_sq_wqebb_counter
        .set(query_qp_out::qpc.get_mut(&mut out), 0x1234)
        .unwrap();
    assert_eq!(out[0x18] >> 4, 6);
    assert_eq!(out[0xce..0xd0], [0x12, 0x34]);
    // qpc_ext = 0: the page list starts at 0x110.
    let tail = query_qp_out::qp_pas_or_qpc_ext_and_pas.tail_mut(&mut out);
    qp_pas_list::pas.set(tail, 0, 0x7000).unwrap();
    assert_eq!(out[0x110..0x118], 0x7000u64.to_be_bytes());
    // qpc_ext = 1: the extension's error syndrome word at 0x11c, pages after
    // the 192-byte extension.
    let alt = query_qp_out::qp_pas_or_qpc_ext_and_pas.get_mut(&mut out);
    let ext = qpc_ext_and_pas_list::qpc_data_extension.get_mut(alt);
    let syn = qpc_extension::error_syndrome.get_mut(ext);
    cqe_error_syndrome::syndrome.set(syn, 0x05).unwrap();
    assert_eq!(out[0x11f], 0x05);
    assert_eq!(qpc_ext_and_pas_list::pas.byte_offset(0) + 0x110, 0x1d0);
    assert_eq!(query_qp_out::SIZE, 0x1d0);
}

#[test]
fn memory_key_commands_and_key_arithmetic() {
    let mut cmd = vec![0u8; create_mkey_in::SIZE];
    let m = create_mkey_in::memory_key_mkey_entry.get_mut(&mut cmd);
    let (hi, lo) = mkey::split_access_mode(mkey::ACCESS_MODE_PA);
    mkc::access_mode_4_2.set(m, hi).unwrap();
    mkc::access_mode_1_0.set(m, lo).unwrap();
    mkc::lw.set(m, true).unwrap();
    mkc::lr.set(m, true).unwrap();
    mkc::qpn.set(m, mkey::QPN_ANY).unwrap();
    mkc::mkey_7_0.set(m, 0x5a).unwrap();
    mkc::length64.set(m, true).unwrap();
    mkc::pd.set(m, 0x12).unwrap();
    mkc::log_page_size.set(m, 12).unwrap();
    // lw, lr: dword 0x10 bits 11:10, i.e. byte 0x12 bits 3:2.
    assert_eq!(cmd[0x12], 0x0c);
    assert_eq!(cmd[0x14..0x18], [0xff, 0xff, 0xff, 0x5a]);
    assert_eq!(cmd[0x1c..0x20], [0x80, 0, 0, 0x12]);
    assert_eq!(cmd[0x4b] & 0x3f, 12);
    assert_eq!(create_mkey_in::klm_pas_mtt.byte_offset(0), 0x110);
    assert_eq!(
        create_mkey_in::translations_octword_actual_size.byte_offset(),
        0x60
    );
    assert_eq!(mkey::access_mode(1, 2), 6);
    assert_eq!(mkey::split_access_mode(mkey::ACCESS_MODE_CROSSING), (1, 2));
    let key = mkey::key(0x1234, 0x5a);
    assert_eq!(key, 0x12_345a);
    assert_eq!((mkey::index(key), mkey::variant(key)), (0x1234, 0x5a));
    assert_eq!(destroy_mkey_in::mkey_index.byte_offset(), 8);
    assert_eq!(create_mkey_out::mkey_index.byte_offset(), 8);
}

#[test]
fn vport_and_roce_commands_at_the_linux_offsets() {
    // MODIFY_NIC_VPORT_CONTEXT: field_select at 0x0c, context at 0x100,
    // roce_en is byte 0x103 bit 0.
    let mut m = vec![0u8; modify_nic_vport_context_in::SIZE];
    let sel = modify_nic_vport_context_in::field_select.get_mut(&mut m);
    modify_nic_vport_field_select::roce_en
        .set(sel, true)
        .unwrap();
    assert_eq!(m[0x0c..0x10], [0, 0, 0, 0x02]);
    let ctx = modify_nic_vport_context_in::nic_vport_context.get_mut(&mut m);
    nic_vport_context::roce_en.set(ctx, true).unwrap();
    assert_eq!(m[0x103], 1);
    // QUERY_NIC_VPORT_CONTEXT: the MAC is bytes 0x106..0x10c.
    let mut q = vec![0u8; query_nic_vport_context_out::SIZE];
    let ctx = query_nic_vport_context_out::nic_vport_context.get_mut(&mut q);
    let mac = nic_vport_context::permanent_address.get_mut(ctx);
    mac_address_layout::mac_addr_47_32.set(mac, 0x02c9).unwrap();
    mac_address_layout::mac_addr_31_0
        .set(mac, 0x0a0b_0c0d)
        .unwrap();
    assert_eq!(q[0x106..0x10c], [0x02, 0xc9, 0x0a, 0x0b, 0x0c, 0x0d]);
    // SET_ROCE_ADDRESS: GID at 0x10, MAC at 0x22, l3 type byte 0x2a,
    // version byte 0x2b.
    let mut s = vec![0u8; set_roce_address_in::SIZE];
    set_roce_address_in::roce_address_index
        .set(&mut s, 0)
        .unwrap();
    let a = set_roce_address_in::roce_address.get_mut(&mut s);
    roce_addr_layout::source_l3_address.get_mut(a)[0] = 0xfe;
    roce_addr_layout::source_mac_47_32.set(a, 0x02c9).unwrap();
    roce_addr_layout::roce_l3_type.set(a, 1).unwrap();
    roce_addr_layout::roce_version.set(a, 2).unwrap();
    assert_eq!(s[0x10], 0xfe);
    assert_eq!(s[0x22..0x24], [0x02, 0xc9]);
    assert_eq!((s[0x2a], s[0x2b]), (1, 2));
    // QUERY_HCA_VPORT_CONTEXT: state dword 0x30, LID at 0x70.
    let mut h = vec![0u8; query_hca_vport_context_out::SIZE];
    let ctx = query_hca_vport_context_out::hca_vport_context.get_mut(&mut h);
    hca_vport_context::vport_state.set(ctx, 4).unwrap();
    hca_vport_context::lid.set(ctx, 0x0001).unwrap();
    assert_eq!(h[0x33], 4);
    assert_eq!(h[0x70..0x72], [0, 1]);
    assert_eq!(query_vport_state_out::state.bit_off, 124);
}

#[test]
fn new_opcodes_have_names_layouts_and_decode() {
    assert_eq!(Opcode::QP_2ERR.name(), Some("2ERR_QP"));
    assert_eq!(Opcode::from_name("2rst-qp"), Some(Opcode::QP_2RST));
    assert_eq!(
        Opcode::from_name("set-roce-address"),
        Some(Opcode::SET_ROCE_ADDRESS)
    );
    assert_eq!(format!("{:?}", Opcode(0x507)), "2ERR_QP(0x507)");
    for (op, v) in [
        (Opcode::CREATE_MKEY, 0x200),
        (Opcode::CREATE_QP, 0x500),
        (Opcode::RST2INIT_QP, 0x502),
        (Opcode::INIT2RTR_QP, 0x503),
        (Opcode::RTR2RTS_QP, 0x504),
        (Opcode::QP_2ERR, 0x507),
        (Opcode::QP_2RST, 0x50a),
        (Opcode::QUERY_QP, 0x50b),
        (Opcode::INIT2INIT_QP, 0x50e),
        (Opcode::QUERY_VPORT_STATE, 0x750),
        (Opcode::QUERY_NIC_VPORT_CONTEXT, 0x754),
        (Opcode::MODIFY_NIC_VPORT_CONTEXT, 0x755),
        (Opcode::QUERY_ROCE_ADDRESS, 0x760),
        (Opcode::SET_ROCE_ADDRESS, 0x761),
        (Opcode::QUERY_HCA_VPORT_CONTEXT, 0x762),
        (Opcode::ALLOC_XRCD, 0x80e),
        (Opcode::DEALLOC_XRCD, 0x80f),
    ] {
        assert_eq!(op.0, v);
        assert!(op.layouts().is_some(), "{op:?} has no layouts");
    }
    // Opcode table in increasing order, no value twice.
    assert!(Opcode::ALL.windows(2).all(|w| w[0].0 < w[1].0));
    let mut cmd = vec![0u8; rst2init_qp_in::SIZE];
    rst2init_qp_in::opcode.set(&mut cmd, 0x502).unwrap();
    rst2init_qp_in::qpn.set(&mut cmd, 0x4d).unwrap();
    let ctx = rst2init_qp_in::qpc.get_mut(&mut cmd);
    ads::vhca_port_num
        .set(qpc::primary_address_path.get_mut(ctx), 1)
        .unwrap();
    let mut s = String::new();
    let opts = DecodeOptions {
        skip_zero: true,
        ..Default::default()
    };
    assert!(decode_command(Opcode::RST2INIT_QP, 0, Direction::Input, &cmd, opts, &mut s).unwrap());
    assert!(s.contains("qpn = 0x4d\n"), "{s}");
    assert!(
        s.contains("qpc.primary_address_path.vhca_port_num = 0x1\n"),
        "{s}"
    );
}

#[test]
fn qp_constants_follow_the_headers() {
    assert_eq!(qp_state::name(qp_state::RTS), Some("RTS"));
    assert_eq!(qp_state::name(5), Some("SQD"));
    assert_eq!(qp_state::name(7), Some("SQD"));
    assert_eq!(qp_state::name(8), None);
    assert_eq!(mtu::bytes(mtu::MTU_1024), Some(1024));
    assert_eq!(mtu::bytes(0), None);
    assert_eq!(mtu::code_at_most(1500), Some(mtu::MTU_1024));
    assert_eq!(mtu::code_at_most(4096), Some(mtu::MTU_4096));
    assert_eq!(mtu::code_at_most(255), None);
    assert_eq!(wqe::opcode_name(0x0a), Some("SEND"));
    assert_eq!(wqe::opcode_name(0x09), Some("RDMA_WRITE_IMM"));
    assert_eq!(wqe::opcode_name(0x02), None);
    assert_eq!(wqe::FENCE_MODE_SMALL_AND_FENCE, 0x80);
    assert_eq!(wqe::CTRL_CQ_UPDATE | wqe::CTRL_SOLICITED, 0x0a);
    // RC INIT2RTR allowed set in Linux: ALT|RRE|RAE|RWE|PKEY|LAG_TX_AFF.
    let rc_init2rtr = OptParam::ALT_ADDR_PATH
        | OptParam::RRE
        | OptParam::RAE
        | OptParam::RWE
        | OptParam::PKEY_INDEX
        | OptParam::LAG_TX_AFF;
    assert_eq!(rc_init2rtr.bits(), 0x801f);
    assert!(rc_init2rtr.contains(OptParam::from_bits_truncate(0x0e)));
    assert_eq!(
        EventMask::QP_EVENTS.bits(),
        EventType::COMM_EST.mask_bit()
            | EventType::WQ_CATAS_ERROR.mask_bit()
            | EventType::WQ_INVAL_REQ_ERROR.mask_bit()
            | EventType::WQ_ACCESS_ERROR.mask_bit()
            | EventType::SRQ_LAST_WQE.mask_bit()
    );
    assert!(EventMask::LINUX_ASYNC.contains(EventMask::QP_EVENTS));
}

/// PTYS and PMTU at the byte places Linux reads them (`mlx5_ifc.h`
/// `ptys_reg` / `pmtu_reg`; `drivers/net/ethernet/mellanox/mlx5/core/port.c`)
/// and the P_Key query's index and first entry.
#[test]
fn port_registers_and_the_pkey_query_sit_where_linux_reads_them() {
    let mut r = [0u8; ptys_reg::SIZE];
    assert_eq!(ptys_reg::SIZE, 64);
    ptys_reg::local_port.set(&mut r, 1).unwrap();
    ptys_reg::proto_mask.set(&mut r, 4).unwrap();
    ptys_reg::eth_proto_capability
        .set(&mut r, 0x1122_3344)
        .unwrap();
    ptys_reg::eth_proto_oper.set(&mut r, 1 << 20).unwrap();
    ptys_reg::ib_link_width_oper.set(&mut r, 0x0004).unwrap();
    ptys_reg::ib_proto_oper.set(&mut r, 0x0020).unwrap();
    assert_eq!(r[1], 1, "local_port: byte 1");
    assert_eq!(r[3], 4, "proto_mask: low 3 bits of byte 3");
    assert_eq!(r[0x0c..0x10], [0x11, 0x22, 0x33, 0x44]);
    assert_eq!(r[0x24..0x28], (1u32 << 20).to_be_bytes());
    assert_eq!(r[0x28..0x2c], [0, 4, 0, 0x20]);
    assert!(ptys_reg::proto_mask.set(&mut r, 8).is_err(), "3-bit field");

    let mut m = [0u8; pmtu_reg::SIZE];
    pmtu_reg::max_mtu.set(&mut m, 4096).unwrap();
    pmtu_reg::oper_mtu.set(&mut m, 2048).unwrap();
    assert_eq!(m[4..6], 4096u16.to_be_bytes());
    assert_eq!(m[12..14], 2048u16.to_be_bytes());

    let mut q = [0u8; query_hca_vport_pkey_in::SIZE];
    query_hca_vport_pkey_in::pkey_index
        .set(&mut q, 0xffff)
        .unwrap();
    assert_eq!(q[14..16], [0xff, 0xff]);
    let mut out = vec![0u8; query_hca_vport_pkey_out::pkey.len_with(2)];
    assert_eq!(out.len(), 16 + 8);
    query_hca_vport_pkey_out::pkey
        .set(&mut out, 1, 0x8001)
        .unwrap();
    assert_eq!(out[20..24], [0, 0, 0x80, 0x01]);
    assert_eq!(
        Opcode::QUERY_HCA_VPORT_PKEY.layouts().unwrap().0.name,
        "query_hca_vport_pkey_in"
    );
}
