//! HCA bring-up commands: success paths and every modelled refusal.

use crate::common::*;

use mlx5_hal::Hal;
use mlx5_regs::consts::op_mod as om;
use mlx5_regs::layouts::*;
use mlx5_regs::{CmdStatus, Opcode};
use mlx5_sim::syndrome as sy;
use mlx5_sim::{HcaState, Profile, SimConfig};

#[test]
fn init_segment_and_initializing_bit() {
    let cfg = SimConfig {
        fw_init_delay_us: 5000,
        ..SimConfig::default()
    };
    let dev = mlx5_sim::Device::new(cfg);
    let hal = dev.hal();
    assert_eq!(
        hal.mmio_read32(0x1fc) >> 31,
        1,
        "initializing right after power-on"
    );
    hal.delay_us(5001);
    assert_eq!(hal.mmio_read32(0x1fc) >> 31, 0);
    assert_eq!(hal.mmio_read32(0) & 0xffff, 16, "fw major (ConnectX-5)");
    assert_eq!(hal.mmio_read32(4) >> 16, 5, "cmdif_rev");
    assert_eq!(hal.mmio_read32(0x14) & 0xff, 0x56, "log size 5, stride 6");
    let h0 = hal.mmio_read32(0x1010) & 0xff_ffff;
    hal.delay_us(5000);
    assert_ne!(
        hal.mmio_read32(0x1010) & 0xff_ffff,
        h0,
        "health counter runs"
    );
}

#[test]
fn linux_order_bring_up_and_teardown() {
    let mut f = Fw::default();
    assert_eq!(f.dev.hca_state(), HcaState::Disabled);
    f.init(1);
    assert_eq!(f.dev.hca_state(), HcaState::Initialized);
    assert_eq!(f.dev.issi(), 1);
    let held = f.dev.pages_held();
    assert!(held > 0);
    assert_eq!(f.dev.pages_required(), (0, 0, 0));
    f.ok(
        &inp(Opcode::TEARDOWN_HCA, teardown_hca_in::SIZE),
        teardown_hca_out::SIZE,
    );
    assert_eq!(f.dev.hca_state(), HcaState::TornDown);
    let (o, pages) = f.take_pages(768);
    assert!(o.ok());
    assert_eq!(pages.len(), held);
    assert_eq!(f.dev.pages_held(), 0);
    assert!(f.dev.page_scribbles().is_empty());
    f.ok(
        &inp(Opcode::DISABLE_HCA, disable_hca_in::SIZE),
        disable_hca_out::SIZE,
    );
    assert_eq!(f.dev.hca_state(), HcaState::Disabled);
    assert_eq!(f.dev.leaked_at_teardown().unwrap().total(), 0);
    assert!(f.dev.iommu_faults().is_empty());
}

#[test]
fn only_enable_hca_before_enable() {
    let mut f = Fw::default();
    for op in [
        Opcode::QUERY_ISSI,
        Opcode::NOP,
        Opcode::INIT_HCA,
        Opcode::QUERY_PAGES,
    ] {
        let (il, ol) = op.layouts().unwrap();
        let mut i = inp(op, il.size);
        if op == Opcode::QUERY_PAGES {
            cmd_in::op_mod.set(&mut i, 1).unwrap();
        }
        f.refused(
            &i,
            ol.size,
            CmdStatus::BAD_SYS_STATE_ERR,
            sy::per_opcode(sy::STATE_DISABLED, op.0),
        );
    }
    f.enable();
    f.refused(
        &inp(Opcode::ENABLE_HCA, enable_hca_in::SIZE),
        enable_hca_out::SIZE,
        CmdStatus::BAD_SYS_STATE_ERR,
        sy::per_opcode(sy::STATE_ENABLED, Opcode::ENABLE_HCA.0),
    );
}

#[test]
fn enable_hca_function_id_and_lengths() {
    let mut f = Fw::default();
    let mut i = inp(Opcode::ENABLE_HCA, enable_hca_in::SIZE);
    enable_hca_in::function_id.set(&mut i, 1).unwrap();
    f.refused(
        &i,
        enable_hca_out::SIZE,
        CmdStatus::BAD_PARAM_ERR,
        sy::ENABLE_FUNC_ID,
    );
    let i = inp(Opcode::ENABLE_HCA, 12);
    f.refused(
        &i,
        enable_hca_out::SIZE,
        CmdStatus::BAD_INP_LEN_ERR,
        sy::per_opcode(sy::INP_LEN, 0x104),
    );
    let i = inp(Opcode::ENABLE_HCA, enable_hca_in::SIZE);
    f.refused(
        &i,
        8,
        CmdStatus::BAD_OUTP_LEN_ERR,
        sy::per_opcode(sy::OUTP_LEN, 0x104),
    );
    let mut i = inp(Opcode::ENABLE_HCA, enable_hca_in::SIZE);
    cmd_in::op_mod.set(&mut i, 3).unwrap();
    f.refused(
        &i,
        enable_hca_out::SIZE,
        CmdStatus::BAD_PARAM_ERR,
        sy::per_opcode(sy::BAD_OP_MOD, 0x104),
    );
    let mut i = inp(Opcode::ENABLE_HCA, enable_hca_in::SIZE);
    i[5] = 1; // reserved
    f.refused(
        &i,
        enable_hca_out::SIZE,
        CmdStatus::BAD_PARAM_ERR,
        sy::per_opcode(sy::RESERVED, 0x104),
    );
    f.refused(
        &inp(Opcode(0x7777), 16),
        16,
        CmdStatus::BAD_OP_ERR,
        sy::per_opcode(sy::UNKNOWN_OPCODE, 0x7777),
    );
}

#[test]
fn issi_query_set_and_rules() {
    let mut f = Fw::default();
    f.enable();
    let o = f.ok(
        &inp(Opcode::QUERY_ISSI, query_issi_in::SIZE),
        query_issi_out::SIZE,
    );
    assert_eq!(query_issi_out::current_issi.get(&o), 0);
    assert_eq!(query_issi_out::supported_issi_dw0.get(&o), 0b11);
    let o = f.set_issi(2);
    assert_eq!(
        (o.status, o.syndrome),
        (CmdStatus::BAD_PARAM_ERR.0, sy::SET_ISSI_UNSUPPORTED)
    );
    assert!(f.set_issi(1).ok());
    let o = f.ok(
        &inp(Opcode::QUERY_ISSI, query_issi_in::SIZE),
        query_issi_out::SIZE,
    );
    assert_eq!(query_issi_out::current_issi.get(&o), 1);
    // ISSI 0 only device
    let mut g = Fw::new(SimConfig {
        issi_supported: 1,
        ..SimConfig::default()
    });
    g.enable();
    let o = g.set_issi(1);
    assert_eq!(
        (o.status, o.syndrome),
        (CmdStatus::BAD_PARAM_ERR.0, sy::SET_ISSI_UNSUPPORTED)
    );
    // SET_ISSI after INIT_HCA
    let mut h = Fw::default();
    h.init(1);
    let o = h.set_issi(1);
    assert_eq!(
        (o.status, o.syndrome),
        (
            CmdStatus::BAD_SYS_STATE_ERR.0,
            sy::per_opcode(sy::STATE_INITIALIZED, 0x10b)
        )
    );
}

#[test]
fn pages_boot_init_and_init_hca_refusal() {
    let mut f = Fw::default();
    f.enable();
    let caps = f.dev.caps();
    assert_eq!(f.query_pages(om::QUERY_PAGES_BOOT), caps.boot_pages);
    assert_eq!(f.query_pages(om::QUERY_PAGES_INIT), caps.init_pages);
    f.refused(
        &inp(Opcode::INIT_HCA, init_hca_in::SIZE),
        init_hca_out::SIZE,
        CmdStatus::BAD_SYS_STATE_ERR,
        sy::INIT_HCA_NO_PAGES,
    );
    assert!(f.give_pages(caps.boot_pages as usize).ok());
    assert_eq!(f.query_pages(om::QUERY_PAGES_BOOT), 0);
    f.refused(
        &inp(Opcode::INIT_HCA, init_hca_in::SIZE),
        init_hca_out::SIZE,
        CmdStatus::BAD_SYS_STATE_ERR,
        sy::INIT_HCA_NO_PAGES,
    );
    let o = f.give_pages(caps.init_pages as usize + 1);
    assert_eq!(
        (o.status, o.syndrome),
        (CmdStatus::BAD_PARAM_ERR.0, sy::PAGES_NOT_REQUESTED)
    );
    assert!(f.give_pages(caps.init_pages as usize).ok());
    assert_eq!(
        f.dev.pages_held(),
        (caps.boot_pages + caps.init_pages) as usize
    );
    f.ok(
        &inp(Opcode::INIT_HCA, init_hca_in::SIZE),
        init_hca_out::SIZE,
    );
}

#[test]
fn manage_pages_refusals() {
    let mut f = Fw::default();
    f.enable();
    let r = f.hal.alloc_dma(3 * 4096).unwrap();
    let give = |pages: &[u64]| {
        let mut i = inp(
            Opcode::MANAGE_PAGES,
            manage_pages_in::pas.len_with(pages.len()),
        );
        cmd_in::op_mod.set(&mut i, om::MANAGE_PAGES_GIVE).unwrap();
        manage_pages_in::input_num_entries
            .set(&mut i, pages.len() as u32)
            .unwrap();
        for (k, p) in pages.iter().enumerate() {
            manage_pages_in::pas.set(&mut i, k, *p).unwrap();
        }
        i
    };
    let ol = manage_pages_out::SIZE;
    f.refused(
        &give(&[r.iova() + 8]),
        ol,
        CmdStatus::BAD_PARAM_ERR,
        sy::PAGES_NOT_ALIGNED,
    );
    f.refused(
        &give(&[r.iova(), r.iova()]),
        ol,
        CmdStatus::BAD_PARAM_ERR,
        sy::PAGES_DUPLICATE,
    );
    let outside = r.iova() + 64 * 4096;
    f.refused(
        &give(&[outside]),
        ol,
        CmdStatus::BAD_PARAM_ERR,
        sy::PAGES_NOT_MAPPED,
    );
    assert_eq!(f.dev.iommu_faults().last().unwrap().iova, outside);
    f.refused(
        &give(&[]),
        ol,
        CmdStatus::BAD_PARAM_ERR,
        sy::PAGES_ZERO_ENTRIES,
    );
    // input too short for the entries it claims
    let mut i = give(&[r.iova()]);
    manage_pages_in::input_num_entries.set(&mut i, 2).unwrap();
    f.refused(
        &i,
        ol,
        CmdStatus::BAD_INP_LEN_ERR,
        sy::per_opcode(sy::INP_LEN, 0x108),
    );
    f.ok(&give(&[r.iova()]), ol);
    f.refused(
        &give(&[r.iova()]),
        ol,
        CmdStatus::BAD_PARAM_ERR,
        sy::PAGES_DUPLICATE,
    );
    // Take with too small an output.
    let mut i = inp(Opcode::MANAGE_PAGES, manage_pages_in::SIZE);
    cmd_in::op_mod.set(&mut i, om::MANAGE_PAGES_TAKE).unwrap();
    manage_pages_in::input_num_entries.set(&mut i, 4).unwrap();
    f.refused(
        &i,
        manage_pages_out::pas.len_with(3),
        CmdStatus::BAD_OUTP_LEN_ERR,
        sy::per_opcode(sy::OUTP_LEN, 0x108),
    );
    // "cannot give" without a pending request
    let mut i = inp(Opcode::MANAGE_PAGES, manage_pages_in::SIZE);
    cmd_in::op_mod
        .set(&mut i, om::MANAGE_PAGES_ALLOC_FAIL)
        .unwrap();
    f.refused(
        &i,
        ol,
        CmdStatus::BAD_PARAM_ERR,
        sy::PAGES_ALLOC_FAIL_NOT_PENDING,
    );
    manage_pages_in::input_num_entries.set(&mut i, 1).unwrap();
    f.refused(
        &i,
        ol,
        CmdStatus::BAD_PARAM_ERR,
        sy::PAGES_ALLOC_FAIL_ENTRIES,
    );
    f.keep.push(r);
}

#[test]
fn page_pattern_catches_scribbles() {
    let mut f = Fw::default();
    f.enable();
    assert!(f.give_pages(2).ok());
    let base = {
        let r = f.keep.last().unwrap();
        r.write_u8(4096 + 100, 0x42); // scribble on the second firmware page
        r.iova()
    };
    let (o, pages) = f.take_pages(8);
    assert!(o.ok());
    assert_eq!(pages.len(), 2);
    assert_eq!(f.dev.page_scribbles(), vec![(base + 4096, 100)]);
    assert_eq!(
        f.dev.pages_required().0,
        f.dev.caps().boot_pages,
        "boot pages wanted again"
    );
}

#[test]
fn disable_hca_refused_while_pages_held() {
    let mut f = Fw::default();
    f.enable();
    assert!(f.give_pages(1).ok());
    f.refused(
        &inp(Opcode::DISABLE_HCA, disable_hca_in::SIZE),
        disable_hca_out::SIZE,
        CmdStatus::BAD_RES_STATE_ERR,
        sy::DISABLE_PAGES_HELD,
    );
    let _ = f.take_pages(1);
    f.ok(
        &inp(Opcode::DISABLE_HCA, disable_hca_in::SIZE),
        disable_hca_out::SIZE,
    );
}

#[test]
fn hca_caps_query_and_set() {
    let mut f = Fw::new(SimConfig::profile(Profile::ConnectX4Lx));
    f.enable();
    let max = f.query_cap(false);
    assert_eq!(cmd_hca_cap::log_max_cq_sz.get(&max), 22);
    assert_eq!(cmd_hca_cap::log_max_cq.get(&max), 24);
    assert_eq!(cmd_hca_cap::log_max_srq_sz.get(&max), 15);
    assert_eq!(cmd_hca_cap::log_max_srq.get(&max), 23);
    assert_eq!(cmd_hca_cap::max_wqe_sz_rq.get(&max), 512);
    assert!(cmd_hca_cap::cq_resize.get(&max));
    assert_eq!(cmd_hca_cap::cqe_version.get(&max), 1);
    assert_eq!(cmd_hca_cap::log_max_eq.get(&max), 4);
    let cur = f.query_cap(true);
    assert_eq!(cmd_hca_cap::cmdif_checksum.get(&cur), 0);
    assert_eq!(cmd_hca_cap::cmdif_checksum.get(&max), 3);
    // settable field
    assert!(f
        .set_cap(|c| cmd_hca_cap::log_max_qp.set(c, 10).unwrap())
        .ok());
    assert_eq!(cmd_hca_cap::log_max_qp.get(&f.query_cap(true)), 10);
    // not settable
    let o = f.set_cap(|c| cmd_hca_cap::log_max_cq_sz.set(c, 10).unwrap());
    assert_eq!((o.status, o.syndrome), (3, sy::SET_CAP_NOT_SETTABLE));
    let o = f.set_cap(|c| cmd_hca_cap::log_max_qp.set(c, 31).unwrap());
    assert_eq!((o.status, o.syndrome), (3, sy::SET_CAP_ABOVE_MAX));
    let o = f.set_cap(|c| cmd_hca_cap::log_uar_page_sz.set(c, 1).unwrap());
    assert_eq!((o.status, o.syndrome), (3, sy::SET_CAP_UAR_PAGE_SZ));
    // reserved bytes of the 4 KiB capability page
    let o = f.set_cap(|c| c[3000] = 1);
    assert_eq!(
        (o.status, o.syndrome),
        (3, sy::per_opcode(sy::RESERVED, 0x109))
    );
    // other cap types (the general-2 page is not served) and other
    // functions
    let mut i = inp(Opcode::QUERY_HCA_CAP, query_hca_cap_in::SIZE);
    cmd_in::op_mod
        .set(&mut i, om::query_hca_cap(om::CAP_GENERAL_2, true))
        .unwrap();
    f.refused(
        &i,
        query_hca_cap_out::SIZE,
        CmdStatus::BAD_PARAM_ERR,
        sy::CAP_TYPE,
    );
    let mut i = inp(Opcode::QUERY_HCA_CAP, query_hca_cap_in::SIZE);
    query_hca_cap_in::other_function.set(&mut i, true).unwrap();
    f.refused(
        &i,
        query_hca_cap_out::SIZE,
        CmdStatus::BAD_PARAM_ERR,
        sy::CAP_OTHER_FUNC,
    );
    f.refused(
        &inp(Opcode::QUERY_HCA_CAP, query_hca_cap_in::SIZE),
        16,
        CmdStatus::BAD_OUTP_LEN_ERR,
        sy::per_opcode(sy::OUTP_LEN, 0x100),
    );
}

#[test]
fn caps_can_be_shrunk_by_tests() {
    let mut f = Fw::default();
    f.dev.caps_mut(|c| {
        c.cq_resize = false;
        c.log_max_cq_sz = 10;
    });
    f.enable();
    let max = f.query_cap(false);
    assert!(!cmd_hca_cap::cq_resize.get(&max));
    assert_eq!(cmd_hca_cap::log_max_cq_sz.get(&max), 10);
}

#[test]
fn uar_pd_special_contexts_adapter_nop() {
    let mut f = Fw::default();
    f.init(1);
    let u = f.alloc_uar();
    assert_eq!(u, 16, "UARs from index 16");
    assert_eq!(f.alloc_uar(), 17);
    let pd = f.alloc_pd();
    assert_ne!(pd, 0);
    assert_eq!(f.dev.objects().uars, 2);
    assert_eq!(f.dev.objects().pds, 1);
    let o = f.ok(
        &inp(
            Opcode::QUERY_SPECIAL_CONTEXTS,
            query_special_contexts_in::SIZE,
        ),
        query_special_contexts_out::SIZE,
    );
    assert_eq!(
        query_special_contexts_out::resd_lkey.get(&o),
        f.dev.reserved_lkey()
    );
    assert_ne!(f.dev.reserved_lkey(), 0x100);
    let o = f.ok(
        &inp(Opcode::QUERY_ADAPTER, query_adapter_in::SIZE),
        query_adapter_out::SIZE,
    );
    let pb = query_adapter_out::query_adapter_struct.get(&o);
    assert_eq!(query_adapter_param_block::vsd_vendor_id.get(pb), 0x15b3);
    f.ok(&inp(Opcode::NOP, nop_in::SIZE), nop_out::SIZE);
    let mut d = inp(Opcode::DEALLOC_UAR, dealloc_uar_in::SIZE);
    dealloc_uar_in::uar.set(&mut d, 99).unwrap();
    f.refused(&d, 16, CmdStatus::BAD_RES_ERR, sy::UAR_NOT_FOUND);
    dealloc_uar_in::uar.set(&mut d, u).unwrap();
    f.ok(&d, 16);
    let mut d = inp(Opcode::DEALLOC_PD, dealloc_pd_in::SIZE);
    dealloc_pd_in::pd.set(&mut d, pd ^ 0x55).unwrap();
    f.refused(&d, 16, CmdStatus::BAD_RES_ERR, sy::PD_NOT_FOUND);
    dealloc_pd_in::pd.set(&mut d, pd).unwrap();
    f.ok(&d, 16);
    let mut a = inp(Opcode::ALLOC_PD, alloc_pd_in::SIZE);
    alloc_pd_in::uid.set(&mut a, 5).unwrap();
    f.refused(
        &a,
        16,
        CmdStatus::BAD_PARAM_ERR,
        sy::per_opcode(sy::UID, 0x800),
    );
}

#[test]
fn uar_and_pd_exhaustion() {
    let mut f = Fw::default();
    f.dev.caps_mut(|c| {
        c.uar_sz = 5;
        c.log_max_pd = 1;
    });
    f.init(1);
    for _ in 16..32 {
        f.alloc_uar();
    }
    f.refused(
        &inp(Opcode::ALLOC_UAR, 16),
        16,
        CmdStatus::LIM_ERR,
        sy::UAR_EXHAUSTED,
    );
    f.alloc_pd();
    f.alloc_pd();
    f.refused(
        &inp(Opcode::ALLOC_PD, 16),
        16,
        CmdStatus::LIM_ERR,
        sy::PD_EXHAUSTED,
    );
}

#[test]
fn teardown_profiles_and_after_teardown_rules() {
    let mut f = Fw::up(1);
    let mut t = inp(Opcode::TEARDOWN_HCA, teardown_hca_in::SIZE);
    teardown_hca_in::profile.set(&mut t, 7).unwrap();
    f.refused(&t, 16, CmdStatus::BAD_PARAM_ERR, sy::TEARDOWN_PROFILE);
    teardown_hca_in::profile.set(&mut t, 0).unwrap();
    f.ok(&t, 16);
    let leaked = f.dev.leaked_at_teardown().unwrap();
    assert_eq!(
        (leaked.uars, leaked.pds),
        (1, 1),
        "objects alive at teardown are reported"
    );
    assert_eq!(f.dev.objects().total(), 0);
    f.refused(
        &inp(Opcode::NOP, 16),
        16,
        CmdStatus::BAD_SYS_STATE_ERR,
        sy::per_opcode(sy::STATE_TORN_DOWN, 0x80d),
    );
    let mut q = inp(Opcode::QUERY_PAGES, 16);
    cmd_in::op_mod.set(&mut q, 3).unwrap();
    f.refused(
        &q,
        16,
        CmdStatus::BAD_SYS_STATE_ERR,
        sy::per_opcode(sy::STATE_TORN_DOWN, 0x107),
    );
    f.refused(
        &inp(Opcode::DISABLE_HCA, 16),
        12,
        CmdStatus::BAD_RES_STATE_ERR,
        sy::DISABLE_PAGES_HELD,
    );
    let (o, _) = f.take_pages(1000);
    assert!(o.ok());
    f.ok(&inp(Opcode::DISABLE_HCA, 16), 12);
    // and again from the start
    f.init(0);
    assert_eq!(f.dev.issi(), 0);
}

#[test]
fn init_hca_sw_owner_refused_without_cap() {
    let mut f = Fw::default();
    f.enable();
    let b = f.query_pages(1);
    f.give_pages(b as usize);
    let n = f.query_pages(2);
    f.give_pages(n as usize);
    let mut i = inp(Opcode::INIT_HCA, init_hca_in::SIZE);
    init_hca_in::sw_owner_id.get_mut(&mut i)[0] = 1;
    f.refused(&i, 16, CmdStatus::BAD_PARAM_ERR, sy::INIT_HCA_SW_OWNER);
}

#[test]
fn syndromes_are_unique() {
    let t = sy::TABLE;
    for (i, a) in t.iter().enumerate() {
        assert_ne!(a.value, 0);
        for b in &t[i + 1..] {
            assert_ne!(a.value, b.value, "{} vs {}", a.name, b.name);
        }
        if a.per_opcode {
            assert_eq!(a.value & 0xffff, 0);
        }
    }
}
