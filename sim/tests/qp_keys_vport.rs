//! Memory keys, XRC domains, the NIC/HCA vport commands, the GID table, the
//! RoCE capability page and the QP capabilities of every profile.

use crate::common::qp::*;
use crate::common::*;

use mlx5_hal::Hal;
use mlx5_regs::consts::{mkey as mk, op_mod as om};
use mlx5_regs::layouts::*;
use mlx5_regs::{CmdStatus, Opcode};
use mlx5_sim::syndrome as sy;
use mlx5_sim::Profile;

const OL: usize = create_mkey_out::SIZE;

#[test]
fn pa_and_mtt_keys_create_query_destroy() {
    let mut f = up_profile(Profile::ConnectX5, false);
    let c = mkey_pa_cmd(f.pd, 0xab, true, true, true, true);
    let key = create_mkey(&mut f, &c);
    assert_eq!(key & 0xff, 0xab, "key = index << 8 | mkey_7_0");
    let buf = f.hal.alloc_dma(2 * 4096).unwrap();
    let c = mkey_mtt_cmd(
        f.pd,
        0x1_0000_0800,
        4096,
        &[buf.iova(), buf.iova() + 4096],
        true,
    );
    let mtt = create_mkey(&mut f, &c);
    assert_eq!(f.dev.objects().mkeys, 2);
    assert_eq!(f.dev.mkey_keys(), vec![key, mtt]);
    let mut q = inp(Opcode::QUERY_MKEY, query_mkey_in::SIZE);
    query_mkey_in::mkey_index
        .set(&mut q, mk::index(mtt))
        .unwrap();
    let o = f.ok(&q, query_mkey_out::SIZE);
    let m = query_mkey_out::memory_key_mkey_entry.get(&o);
    assert_eq!(mkc::access_mode_1_0.get(m), mk::ACCESS_MODE_MTT);
    assert_eq!(mkc::start_addr.get(m), 0x1_0000_0800);
    assert_eq!(mkc::len.get(m), 4096);
    assert_eq!(mkc::pd.get(m), f.pd);
    assert_eq!(mkc::mkey_7_0.get(m), 0x5a);
    assert_eq!(&o[0x110..0x118], &(buf.iova() | 3).to_be_bytes());
    for k in [key, mtt] {
        assert!(destroy_mkey(&mut f, k).ok());
    }
    let o = destroy_mkey(&mut f, key);
    assert_eq!((o.status, o.syndrome), (0x05, sy::MKEY_NOT_FOUND));
    f.refused(
        &q,
        query_mkey_out::SIZE,
        CmdStatus::BAD_RES_ERR,
        sy::MKEY_NOT_FOUND,
    );
    f.keep.push(buf);
}

#[test]
fn mkey_refusals() {
    let mut f = up_profile(Profile::ConnectX5, false);
    let pa = mkey_pa_cmd(f.pd, 1, true, true, false, false);
    macro_rules! bad {
        ($base:expr, $field:ident = $v:expr, $st:ident, $syn:ident) => {{
            let mut i = $base.clone();
            mkc::$field
                .set(create_mkey_in::memory_key_mkey_entry.get_mut(&mut i), $v)
                .unwrap();
            f.refused(&i, OL, CmdStatus::$st, sy::$syn);
        }};
    }
    bad!(pa, free = true, BAD_PARAM_ERR, MKEY_FREE);
    bad!(pa, access_mode_1_0 = 2, BAD_PARAM_ERR, MKEY_ACCESS_MODE);
    bad!(pa, access_mode_4_2 = 1, BAD_PARAM_ERR, MKEY_ACCESS_MODE);
    bad!(pa, umr_en = true, BAD_PARAM_ERR, MKEY_UNSUPPORTED);
    bad!(pa, pd = 0x3333, BAD_RES_ERR, MKEY_PD);
    bad!(pa, qpn = 5, BAD_PARAM_ERR, MKEY_QPN);
    bad!(pa, length64 = false, BAD_PARAM_ERR, MKEY_PA_LENGTH);
    bad!(
        pa,
        translations_octword_size = 1,
        BAD_PARAM_ERR,
        MKEY_MTT_SIZE
    );
    let mut i = pa.clone();
    create_mkey_in::pg_access.set(&mut i, true).unwrap();
    f.refused(&i, OL, CmdStatus::BAD_PARAM_ERR, sy::MKEY_PG_ACCESS_CAP);
    let buf = f.hal.alloc_dma(4 * 4096).unwrap();
    let b = buf.iova();
    let mtt = mkey_mtt_cmd(f.pd, 0x2000, 2 * 4096, &[b, b + 4096], false);
    bad!(mtt, length64 = true, BAD_PARAM_ERR, MKEY_MTT_LENGTH64);
    bad!(mtt, len = 0, BAD_PARAM_ERR, MKEY_MTT_LENGTH64);
    bad!(mtt, log_page_size = 11, BAD_PARAM_ERR, MKEY_MTT_PAGE_SIZE);
    bad!(mtt, log_page_size = 32, BAD_PARAM_ERR, MKEY_MTT_PAGE_SIZE);
    // 3 pages need 2 octwords: one is too few; actual above the size too.
    bad!(mtt, len = 2 * 4096 + 1, BAD_PARAM_ERR, MKEY_MTT_SIZE);
    let mut i = mtt.clone();
    create_mkey_in::translations_octword_actual_size
        .set(&mut i, 2)
        .unwrap();
    f.refused(&i, OL, CmdStatus::BAD_PARAM_ERR, sy::MKEY_MTT_SIZE);
    let mut i = mtt.clone();
    i.truncate(0x110 + 8);
    f.refused(&i, OL, CmdStatus::BAD_INP_LEN_ERR, sy::MKEY_MTT_SHORT);
    let mut i = mtt.clone();
    create_mkey_in::klm_pas_mtt.set(&mut i, 1, 0x800).unwrap();
    f.refused(&i, OL, CmdStatus::BAD_PARAM_ERR, sy::MKEY_MTT_ALIGN);
    // Permission bits only with pg_access; pg_access only with cap pg.
    let with_bits = mkey_mtt_cmd(f.pd, 0x2000, 4096, &[b], true);
    let mut i = with_bits.clone();
    create_mkey_in::pg_access.set(&mut i, false).unwrap();
    f.refused(&i, OL, CmdStatus::BAD_PARAM_ERR, sy::MKEY_MTT_ALIGN);
    f.dev.caps_mut(|c| c.pg = false);
    f.refused(
        &with_bits,
        OL,
        CmdStatus::BAD_PARAM_ERR,
        sy::MKEY_PG_ACCESS_CAP,
    );
    assert_eq!(f.dev.objects().mkeys, 0);
    // The limit: 2^log_max_mkey keys.
    f.dev.caps_mut(|c| c.log_max_mkey = 1);
    create_mkey(&mut f, &pa);
    create_mkey(&mut f, &mtt);
    f.refused(&pa, OL, CmdStatus::LIM_ERR, sy::MKEY_TOO_MANY);
    f.keep.push(buf);
}

#[test]
fn xrc_domains() {
    let mut f = up_profile(Profile::ConnectX5, false);
    let a = alloc_xrcd_out::xrcd.get(&f.ok(&inp(Opcode::ALLOC_XRCD, 16), 16));
    let b = alloc_xrcd_out::xrcd.get(&f.ok(&inp(Opcode::ALLOC_XRCD, 16), 16));
    assert!(a != 0 && b != 0 && a != b);
    assert_eq!(f.dev.objects().xrcds, 2);
    let dealloc = |x: u32| {
        let mut d = inp(Opcode::DEALLOC_XRCD, 16);
        dealloc_xrcd_in::xrcd.set(&mut d, x).unwrap();
        d
    };
    f.ok(&dealloc(a), 16);
    f.refused(&dealloc(a), 16, CmdStatus::BAD_RES_ERR, sy::XRCD_NOT_FOUND);
    f.dev.caps_mut(|c| c.log_max_xrcd = 1);
    f.ok(&inp(Opcode::ALLOC_XRCD, 16), 16);
    f.refused(
        &inp(Opcode::ALLOC_XRCD, 16),
        16,
        CmdStatus::LIM_ERR,
        sy::XRCD_TOO_MANY,
    );
    f.dev.caps_mut(|c| c.xrc = false);
    f.refused(
        &inp(Opcode::ALLOC_XRCD, 16),
        16,
        CmdStatus::BAD_OP_ERR,
        sy::XRCD_CAP,
    );
    // ISSI 0: an SRQ may carry an allocated XRC domain, which is then busy.
    let mut f = Fw::up(0);
    let x = alloc_xrcd_out::xrcd.get(&f.ok(&inp(Opcode::ALLOC_XRCD, 16), 16));
    let eq = f.create_eq(6, 0);
    let cq = f.create_cq(6, eq.eqn);
    let buf = f.hal.alloc_dma(4096).unwrap();
    let mut i = inp(Opcode::CREATE_SRQ, create_srq_in::pas.len_with(1));
    {
        let s = create_srq_in::srq_context_entry.get_mut(&mut i);
        srqc::log_srq_size.set(s, 2).unwrap();
        srqc::log_rq_stride.set(s, 2).unwrap();
        srqc::cqn.set(s, cq.cqn).unwrap();
        srqc::pd.set(s, f.pd).unwrap();
        srqc::xrcd.set(s, x).unwrap();
        srqc::dbr_addr.set(s, buf.iova() + 2048).unwrap();
    }
    create_srq_in::pas.set(&mut i, 0, buf.iova()).unwrap();
    f.ok(&i, create_srq_out::SIZE);
    let mut d = inp(Opcode::DEALLOC_XRCD, 16);
    dealloc_xrcd_in::xrcd.set(&mut d, x).unwrap();
    f.refused(&d, 16, CmdStatus::RES_BUSY, sy::XRCD_IN_USE);
    f.keep.push(buf);
}

fn query_vport(f: &mut Fw) -> Vec<u8> {
    let o = f.ok(
        &inp(Opcode::QUERY_NIC_VPORT_CONTEXT, 16),
        query_nic_vport_context_out::SIZE,
    );
    query_nic_vport_context_out::nic_vport_context
        .get(&o)
        .to_vec()
}

#[test]
fn nic_vport_context_query_and_modify() {
    let mut f = up_profile(Profile::ConnectX4Lx, false);
    let c = query_vport(&mut f);
    assert!(!nic_vport_context::roce_en.get(&c), "RoCE off at power-on");
    assert_eq!(nic_vport_context::mtu.get(&c), 1500);
    let m = nic_vport_context::permanent_address.get(&c);
    let mac = f.dev.port_mac();
    assert_eq!(mac[..2], [0x02, 0xc9]);
    assert_eq!(
        mac_address_layout::mac_addr_47_32.get(m),
        u16::from_be_bytes([mac[0], mac[1]])
    );
    assert!(set_roce_en(&mut f, true).ok());
    assert!(nic_vport_context::roce_en.get(&query_vport(&mut f)));
    assert!(f.dev.roce_enabled());
    // Only selected fields change: roce_en selected, the MTU given is ignored.
    let modify = |sel: &dyn Fn(&mut [u8]), ctx: &dyn Fn(&mut [u8])| {
        let mut i = inp(
            Opcode::MODIFY_NIC_VPORT_CONTEXT,
            modify_nic_vport_context_in::SIZE,
        );
        sel(modify_nic_vport_context_in::field_select.get_mut(&mut i));
        ctx(modify_nic_vport_context_in::nic_vport_context.get_mut(&mut i));
        i
    };
    use modify_nic_vport_field_select as fs;
    let i = modify(&|s| fs::mtu.set(s, true).unwrap(), &|c| {
        nic_vport_context::mtu.set(c, 9000).unwrap()
    });
    f.ok(&i, 16);
    let c = query_vport(&mut f);
    assert_eq!(nic_vport_context::mtu.get(&c), 9000);
    assert!(
        nic_vport_context::roce_en.get(&c),
        "not selected: unchanged"
    );
    let i = modify(&|s| fs::disable_uc_local_lb.set(s, true).unwrap(), &|c| {
        nic_vport_context::disable_uc_local_lb.set(c, true).unwrap()
    });
    f.ok(&i, 16);
    assert!(nic_vport_context::disable_uc_local_lb.get(&query_vport(&mut f)));
    let ol = 16;
    f.refused(
        &modify(&|_| {}, &|_| {}),
        ol,
        CmdStatus::BAD_PARAM_ERR,
        sy::VPORT_FIELD_SELECT,
    );
    let i = modify(&|s| fs::promisc.set(s, true).unwrap(), &|_| {});
    f.refused(&i, ol, CmdStatus::BAD_PARAM_ERR, sy::VPORT_FIELD_SELECT);
    let i = modify(&|s| fs::mtu.set(s, true).unwrap(), &|c| {
        nic_vport_context::mtu.set(c, 10_000).unwrap()
    });
    f.refused(&i, ol, CmdStatus::BAD_PARAM_ERR, sy::VPORT_MTU);
    f.dev.caps_mut(|c| c.disable_local_lb_mc = false);
    let i = modify(&|s| fs::disable_mc_local_lb.set(s, true).unwrap(), &|_| {});
    f.refused(&i, ol, CmdStatus::BAD_PARAM_ERR, sy::VPORT_LB_CAP);
    let mut q = inp(Opcode::QUERY_NIC_VPORT_CONTEXT, 16);
    query_nic_vport_context_in::vport_number
        .set(&mut q, 1)
        .unwrap();
    f.refused(
        &q,
        query_nic_vport_context_out::SIZE,
        CmdStatus::BAD_PARAM_ERR,
        sy::VPORT_OTHER,
    );
    // Vport state: up.
    let o = f.ok(&inp(Opcode::QUERY_VPORT_STATE, 16), 16);
    assert_eq!(query_vport_state_out::state.get(&o), 1);
}

#[test]
fn gid_table_set_query_delete() {
    let mut f = up_profile(Profile::ConnectX4Lx, false);
    let mac = f.dev.port_mac();
    let gid = gid_of(mac);
    assert!(set_gid(&mut f, 1, gid, mac, 2).ok());
    assert_eq!(f.dev.objects().gids, 1);
    let query = |f: &mut Fw, idx: u16| {
        let mut q = inp(Opcode::QUERY_ROCE_ADDRESS, 16);
        query_roce_address_in::roce_address_index
            .set(&mut q, idx)
            .unwrap();
        f.exec(&q, query_roce_address_out::SIZE)
    };
    let o = query(&mut f, 1);
    let a = query_roce_address_out::roce_address.get(&o.out);
    assert_eq!(roce_addr_layout::source_l3_address.get(a), &gid);
    assert_eq!(roce_addr_layout::roce_version.get(a), 2);
    assert_eq!(roce_addr_layout::roce_l3_type.get(a), 1);
    let (_, e) = f.dev.gid_entries()[0];
    assert_eq!((e.mac, e.version), (mac, 2));
    // Deleting = setting it without GID and MAC (Linux).
    assert!(set_gid(&mut f, 1, [0; 16], [0; 6], 0).ok());
    assert_eq!(f.dev.objects().gids, 0);
    let o = query(&mut f, 1);
    assert!(o.ok() && query_roce_address_out::roce_address.get(&o.out) == [0; 32]);
    // Refusals.
    let o = set_gid(&mut f, 256, gid, mac, 2);
    assert_eq!((o.status, o.syndrome), (3, sy::ROCE_ADDR_INDEX));
    let o = set_gid(&mut f, 0, gid, mac, 1);
    assert_eq!((o.status, o.syndrome), (3, sy::ROCE_ADDR_VERSION));
    f.dev.caps_mut(|c| c.roce_caps.roce_version = 0x1);
    let o = set_gid(&mut f, 0, gid, mac, 2);
    assert_eq!((o.status, o.syndrome), (3, sy::ROCE_ADDR_VERSION));
    assert_eq!(query(&mut f, 300).syndrome, sy::ROCE_ADDR_INDEX);
    let o = set_gid(&mut f, 0, gid, mac, 0);
    assert!(o.ok(), "v1 entry");
    let mut i = inp(Opcode::SET_ROCE_ADDRESS, set_roce_address_in::SIZE);
    let a = set_roce_address_in::roce_address.get_mut(&mut i);
    roce_addr_layout::source_mac_31_0.set(a, 1).unwrap();
    roce_addr_layout::roce_l3_type.set(a, 2).unwrap();
    f.refused(&i, 16, CmdStatus::BAD_PARAM_ERR, sy::ROCE_ADDR_L3_TYPE);
    set_roce_address_in::vhca_port_num.set(&mut i, 1).unwrap();
    f.refused(&i, 16, CmdStatus::BAD_PARAM_ERR, sy::ROCE_ADDR_VHCA_PORT);
    // IB port: no RoCE addresses.
    f.dev.caps_mut(|c| c.port_type = 0);
    let o = set_gid(&mut f, 0, gid, mac, 0);
    assert_eq!((o.status, o.syndrome), (3, sy::ROCE_ADDR_PORT_TYPE));
}

#[test]
fn hca_vport_context_reports_the_ib_port() {
    let mut f = up_profile(Profile::ConnectX5, false);
    f.dev.caps_mut(|c| c.port_type = 0);
    let o = f.ok(
        &inp(Opcode::QUERY_HCA_VPORT_CONTEXT, 16),
        query_hca_vport_context_out::SIZE,
    );
    let c = query_hca_vport_context_out::hca_vport_context.get(&o);
    assert_eq!(hca_vport_context::vport_state.get(c), 4, "Active");
    assert_eq!(hca_vport_context::port_physical_state.get(c), 5);
    assert_eq!(hca_vport_context::lid.get(c), f.dev.port_lid());
    assert_ne!(f.dev.port_lid(), 0);
    let mut q = inp(Opcode::QUERY_HCA_VPORT_CONTEXT, 16);
    query_hca_vport_context_in::port_num.set(&mut q, 1).unwrap();
    f.refused(
        &q,
        query_hca_vport_context_out::SIZE,
        CmdStatus::BAD_PARAM_ERR,
        sy::VPORT_OTHER,
    );
    // RoCE enable is refused on an IB port.
    let o = set_roce_en(&mut f, true);
    assert_eq!((o.status, o.syndrome), (3, sy::VPORT_ROCE_CAP));
}

#[test]
fn roce_capability_page_and_set_hca_cap_op_mod_8() {
    let mut f = Fw::new(mlx5_sim::SimConfig::profile(Profile::ConnectX6Dx));
    f.enable();
    let query = |f: &mut Fw, cur: bool| {
        let mut i = inp(Opcode::QUERY_HCA_CAP, query_hca_cap_in::SIZE);
        cmd_in::op_mod.set(&mut i, roce_cap_op_mod(cur)).unwrap();
        let o = f.ok(&i, query_hca_cap_out::SIZE);
        o[0x10..0x10 + roce_cap::SIZE].to_vec()
    };
    let max = query(&mut f, false);
    assert!(roce_cap::sw_r_roce_src_udp_port.get(&max));
    assert!(roce_cap::fl_rc_qp_when_roce_enabled.get(&max));
    assert!(!roce_cap::fl_rc_qp_when_roce_disabled.get(&max));
    assert_eq!(roce_cap::roce_version.get(&max), 0x5);
    assert_eq!(roce_cap::roce_address_table_size.get(&max), 256);
    assert_eq!(roce_cap::r_roce_min_src_udp_port.get(&max), 0xc000);
    let cur = query(&mut f, true);
    assert!(!roce_cap::sw_r_roce_src_udp_port.get(&cur));
    let set = |f: &mut Fw, page: &[u8]| {
        let mut i = inp(Opcode::SET_HCA_CAP, set_hca_cap_in::SIZE);
        cmd_in::op_mod
            .set(&mut i, om::set_hca_cap(om::CAP_ROCE))
            .unwrap();
        i[0x10..0x10 + page.len()].copy_from_slice(page);
        f.exec(&i, 16)
    };
    let mut p = cur.clone();
    roce_cap::roce_version.set(&mut p, 1).unwrap();
    assert_eq!(set(&mut f, &p).syndrome, sy::ROCE_CAP_NOT_SETTABLE);
    let mut p = cur.clone();
    p[100] = 1; // reserved
    assert_eq!(
        set(&mut f, &p).syndrome,
        sy::per_opcode(sy::RESERVED, 0x109)
    );
    let mut p = cur.clone();
    roce_cap::sw_r_roce_src_udp_port.set(&mut p, true).unwrap();
    assert!(set(&mut f, &p).ok());
    assert!(roce_cap::sw_r_roce_src_udp_port.get(&query(&mut f, true)));
    // Without the max bit it is above the maximum.
    f.dev
        .caps_mut(|c| c.roce_caps.sw_r_roce_src_udp_port = false);
    assert_eq!(set(&mut f, &p).syndrome, sy::SET_CAP_ABOVE_MAX);
}

#[test]
fn qp_capabilities_of_every_profile() {
    for (p, qp_sz, fl_dis, fl_en, ts) in [
        (Profile::ConnectX4Lx, 14, false, false, 0),
        (Profile::ConnectX5, 15, true, false, 0),
        (Profile::ConnectX6Dx, 15, false, true, 2),
        (Profile::ConnectX7, 15, false, true, 2),
    ] {
        let mut f = Fw::new(mlx5_sim::SimConfig::profile(p));
        f.enable();
        let c = f.query_cap(false);
        assert_eq!(cmd_hca_cap::log_max_qp_sz.get(&c), qp_sz, "{p:?}");
        assert_eq!(
            cmd_hca_cap::fl_rc_qp_when_roce_disabled.get(&c),
            fl_dis,
            "{p:?}"
        );
        assert_eq!(cmd_hca_cap::sq_ts_format.get(&c), ts, "{p:?}");
        assert_eq!(cmd_hca_cap::log_bf_reg_size.get(&c), 9);
        assert_eq!(cmd_hca_cap::max_wqe_sz_sq.get(&c), 1024);
        assert_eq!(cmd_hca_cap::log_max_msg.get(&c), 30);
        assert_eq!(cmd_hca_cap::cqe_version.get(&c), 1);
        assert!(cmd_hca_cap::roce.get(&c) && cmd_hca_cap::xrc.get(&c));
        assert_eq!(
            (
                cmd_hca_cap::port_type.get(&c),
                cmd_hca_cap::num_ports.get(&c)
            ),
            (1, 1)
        );
        assert_eq!(f.dev.caps().roce_caps.fl_rc_qp_when_roce_enabled, fl_en);
    }
}
