//! EQ and CQ commands, EQE/CQE ownership, doorbells, arming, overrun,
//! resize.

use crate::common::*;

use mlx5_hal::Hal;
use mlx5_regs::consts::{ctx, CqeOpcode};
use mlx5_regs::layouts::*;
use mlx5_regs::{CmdStatus, EventMask, EventType, Opcode};
use mlx5_sim::syndrome as sy;
use mlx5_sim::Violation;

const ASYNC: u64 = EventMask::LINUX_ASYNC.bits();

fn gen_eqe(f: &mut Fw, eqn: u8, t: u8) {
    let mut i = inp(Opcode::GEN_EQE, gen_eqe_in::SIZE);
    gen_eqe_in::eq_number.set(&mut i, eqn).unwrap();
    eqe::event_type
        .set(gen_eqe_in::eqe.get_mut(&mut i), t)
        .unwrap();
    f.ok(&i, gen_eqe_out::SIZE);
}

#[test]
fn eq_create_query_destroy_and_validation() {
    let mut f = Fw::up(1);
    let buf = f.hal.alloc_dma(64 << 7).unwrap();
    let uar = f.uar;
    let good = f.create_eq_cmd(&buf, 7, uar, ASYNC);
    let ol = create_eq_out::SIZE;
    let mut i = good.clone();
    eqc::log_eq_size
        .set(create_eq_in::eq_context_entry.get_mut(&mut i), 23)
        .unwrap();
    f.refused(&i, ol, CmdStatus::BAD_PARAM_ERR, sy::EQ_LOG_SIZE);
    let mut i = good.clone();
    eqc::uar_page
        .set(create_eq_in::eq_context_entry.get_mut(&mut i), 99)
        .unwrap();
    f.refused(&i, ol, CmdStatus::BAD_RES_ERR, sy::EQ_UAR);
    let mut i = good.clone();
    eqc::intr
        .set(create_eq_in::eq_context_entry.get_mut(&mut i), 4000)
        .unwrap();
    f.refused(&i, ol, CmdStatus::BAD_PARAM_ERR, sy::EQ_INTR);
    let mut i = good.clone();
    create_eq_in::event_bitmask
        .set(&mut i, 0, 1 << 0x30)
        .unwrap();
    f.refused(&i, ol, CmdStatus::BAD_PARAM_ERR, sy::EQ_EVENT_MASK);
    let mut i = good.clone();
    eqc::status
        .set(create_eq_in::eq_context_entry.get_mut(&mut i), 1)
        .unwrap();
    f.refused(&i, ol, CmdStatus::BAD_PARAM_ERR, sy::EQ_CTX_FIELD);
    let mut i = good.clone();
    eqc::log_page_size
        .set(create_eq_in::eq_context_entry.get_mut(&mut i), 20)
        .unwrap();
    f.refused(&i, ol, CmdStatus::BAD_PARAM_ERR, sy::EQ_PAGE_SIZE);
    // 256 entries need 4 pages; only 2 given.
    let mut i = good.clone();
    eqc::log_eq_size
        .set(create_eq_in::eq_context_entry.get_mut(&mut i), 8)
        .unwrap();
    f.refused(&i, ol, CmdStatus::BAD_INP_LEN_ERR, sy::EQ_PAS_SHORT);
    let mut i = good.clone();
    create_eq_in::pas.set(&mut i, 1, buf.iova() + 64).unwrap();
    f.refused(&i, ol, CmdStatus::BAD_PARAM_ERR, sy::EQ_PAS_ALIGN);
    let o = f.ok(&good, ol);
    let eqn = create_eq_out::eq_number.get(&o);
    assert_ne!(eqn, 0);
    let mut q = inp(Opcode::QUERY_EQ, query_eq_in::SIZE);
    query_eq_in::eq_number.set(&mut q, eqn).unwrap();
    let o = f.ok(&q, query_eq_out::SIZE + 16);
    let c = query_eq_out::eq_context_entry.get(&o);
    assert_eq!(eqc::log_eq_size.get(c), 7);
    assert_eq!(eqc::uar_page.get(c), uar);
    assert_eq!(query_eq_out::event_bitmask.get(&o), ASYNC);
    assert_eq!(query_eq_out::pas.get(&o, 1), Some(buf.iova() + 4096));
    let mut d = inp(Opcode::DESTROY_EQ, destroy_eq_in::SIZE);
    destroy_eq_in::eq_number.set(&mut d, eqn).unwrap();
    f.ok(&d, 16);
    f.refused(&d, 16, CmdStatus::BAD_RES_ERR, sy::EQ_NOT_FOUND);
    f.refused(
        &q,
        query_eq_out::SIZE,
        CmdStatus::BAD_RES_ERR,
        sy::EQ_NOT_FOUND,
    );
    let mut g = inp(Opcode::GEN_EQE, gen_eqe_in::SIZE);
    gen_eqe_in::eq_number.set(&mut g, eqn).unwrap();
    f.refused(&g, 16, CmdStatus::BAD_RES_ERR, sy::EQ_NOT_FOUND);
    f.keep.push(buf);
}

#[test]
fn eq_limit() {
    let mut f = Fw::default();
    f.dev.caps_mut(|c| c.log_max_eq = 1);
    f.init(1);
    f.uar = f.alloc_uar();
    let _a = f.create_eq(4, 0);
    let _b = f.create_eq(4, 0);
    let buf = f.hal.alloc_dma(4096).unwrap();
    let uar = f.uar;
    let i = f.create_eq_cmd(&buf, 4, uar, 0);
    f.refused(&i, 16, CmdStatus::LIM_ERR, sy::EQ_TOO_MANY);
}

#[test]
fn eqe_ownership_across_wraps() {
    let mut f = Fw::up(1);
    let mut eq = f.create_eq(3, ASYNC); // 8 entries
    for round in 0..5u8 {
        for k in 0..6u8 {
            gen_eqe(&mut f, eq.eqn, 0x09);
            let _ = k;
        }
        let got = f.drain_eq(&mut eq);
        assert_eq!(got.len(), 6, "round {round}");
        assert!(got.iter().all(|e| eqe_type(e) == 0x09));
        assert!(f.poll_eq(&mut eq).is_none());
    }
    assert_eq!(eq.ci, 30);
    assert!(!f.dev.is_fatal());
}

#[test]
fn eq_overrun_without_consumer_index_is_fatal() {
    let mut f = Fw::up(1);
    let mut eq = f.create_eq(3, ASYNC);
    // Driver polls EQEs but never reports its consumer index.
    for _ in 0..8 {
        gen_eqe(&mut f, eq.eqn, 0x09);
        assert!(f.poll_eq(&mut eq).is_some());
    }
    assert!(!f.dev.is_fatal());
    gen_eqe(&mut f, eq.eqn, 0x09);
    assert!(f.dev.is_fatal());
    assert!(f
        .dev
        .violations()
        .contains(&Violation::EqOverrun { eqn: eq.eqn }));
    assert_eq!(
        f.hal.mmio_read32(0x1010) >> 24,
        0x0c,
        "ASYNC_EQ_BUF_OVERRUN"
    );
    assert_eq!(
        (f.hal.mmio_read32(0x23c) >> 16) & 0xff,
        0x0c,
        "health buffer synd"
    );
    // Command interface is dead.
    assert!(f.try_exec(0, &inp(Opcode::NOP, 16), 16).is_none());
}

#[test]
fn eq_doorbell_rules() {
    let mut f = Fw::up(1);
    let eq = f.create_eq(3, ASYNC);
    let other = f.alloc_uar();
    f.hal.mmio_write32(
        mlx5_regs::doorbell::uar_page_offset(other) + 0x40,
        (eq.eqn as u32) << 24,
    );
    f.hal.mmio_write32(
        mlx5_regs::doorbell::uar_page_offset(eq.uar) + 0x40,
        (eq.eqn as u32) << 24 | 5,
    );
    f.hal
        .mmio_write32(mlx5_regs::doorbell::uar_page_offset(200) + 0x40, 0);
    let v = f.dev.violations();
    assert_eq!(v.len(), 3, "{v:?}");
    assert!(matches!(&v[0], Violation::UarDoorbell(s) if s.contains("EQ uses UAR")));
    assert!(matches!(&v[1], Violation::UarDoorbell(s) if s.contains("ahead")));
    assert!(matches!(&v[2], Violation::UarDoorbell(s) if s.contains("unallocated")));
}

fn setup() -> (Fw, TEq) {
    let mut f = Fw::up(1);
    let eq = f.create_eq(6, ASYNC);
    (f, eq)
}

#[test]
fn cq_create_validation_and_query_destroy() {
    let (mut f, eq) = setup();
    let cq = f.cq_shell(4, 0);
    let good = f.create_cq_cmd(&cq, eq.eqn);
    let ol = create_cq_out::SIZE;
    let ctxm = |i: &mut Vec<u8>| create_cq_in::cq_context.get_mut(i).to_vec();
    let _ = ctxm;
    macro_rules! bad {
        ($field:ident = $v:expr, $status:expr, $syn:expr) => {{
            let mut i = good.clone();
            cqc::$field
                .set(create_cq_in::cq_context.get_mut(&mut i), $v)
                .unwrap();
            f.refused(&i, ol, $status, $syn);
        }};
    }
    bad!(log_cq_size = 23, CmdStatus::BAD_PARAM_ERR, sy::CQ_LOG_SIZE);
    bad!(cqe_sz = 2, CmdStatus::BAD_PARAM_ERR, sy::CQ_CQE_SZ);
    bad!(uar_page = 3, CmdStatus::BAD_RES_ERR, sy::CQ_UAR);
    bad!(
        c_eqn_or_apu_element = 200,
        CmdStatus::BAD_RES_ERR,
        sy::CQ_EQN
    );
    bad!(
        dbr_addr = cq.dbr.iova() + 4,
        CmdStatus::BAD_PARAM_ERR,
        sy::CQ_DBR_ALIGN
    );
    bad!(
        cqe_comp_en = true,
        CmdStatus::BAD_PARAM_ERR,
        sy::CQ_UNSUPPORTED_FEATURE
    );
    bad!(st = 9, CmdStatus::BAD_PARAM_ERR, sy::CQ_CTX_FIELD);
    bad!(
        log_page_size = 17,
        CmdStatus::BAD_PARAM_ERR,
        sy::CQ_PAGE_SIZE
    );
    bad!(
        log_cq_size = 8,
        CmdStatus::BAD_INP_LEN_ERR,
        sy::CQ_PAS_SHORT
    );
    let mut i = good.clone();
    create_cq_in::pas
        .set(&mut i, 0, cq.buf.iova() + 0x800)
        .unwrap();
    f.refused(&i, ol, CmdStatus::BAD_PARAM_ERR, sy::CQ_PAS_ALIGN);
    f.dev.caps_mut(|c| {
        c.cq_oi = false;
        c.cq_moderation = false;
    });
    bad!(oi = true, CmdStatus::BAD_PARAM_ERR, sy::CQ_OI_CAP);
    bad!(
        cq_max_count = 4,
        CmdStatus::BAD_PARAM_ERR,
        sy::CQ_MODERATION_CREATE_CAP
    );
    let o = f.ok(&good, ol);
    let cqn = create_cq_out::cqn.get(&o);
    let mut q = inp(Opcode::QUERY_CQ, query_cq_in::SIZE);
    query_cq_in::cqn.set(&mut q, cqn).unwrap();
    let o = f.ok(&q, query_cq_out::SIZE + 8);
    let c = query_cq_out::cq_context.get(&o);
    assert_eq!(cqc::log_cq_size.get(c), 4);
    assert_eq!(cqc::c_eqn_or_apu_element.get(c), eq.eqn as u32);
    assert_eq!(cqc::dbr_addr.get(c), cq.dbr.iova());
    assert_eq!(query_cq_out::pas.get(&o, 0), Some(cq.buf.iova()));
    // EQ and UAR in use.
    let mut d = inp(Opcode::DESTROY_EQ, 16);
    destroy_eq_in::eq_number.set(&mut d, eq.eqn).unwrap();
    f.refused(&d, 16, CmdStatus::BAD_RES_STATE_ERR, sy::EQ_IN_USE);
    let mut d = inp(Opcode::DEALLOC_UAR, 16);
    dealloc_uar_in::uar.set(&mut d, f.uar).unwrap();
    f.refused(&d, 16, CmdStatus::BAD_RES_STATE_ERR, sy::UAR_IN_USE);
    let mut d = inp(Opcode::DESTROY_CQ, 16);
    destroy_cq_in::cqn.set(&mut d, cqn).unwrap();
    f.ok(&d, 16);
    f.refused(&d, 16, CmdStatus::BAD_RES_ERR, sy::CQ_NOT_FOUND);
    f.refused(
        &q,
        query_cq_out::SIZE,
        CmdStatus::BAD_RES_ERR,
        sy::CQ_NOT_FOUND,
    );
}

#[test]
fn cq_limit() {
    let mut f = Fw::default();
    f.dev.caps_mut(|c| c.log_max_cq = 1);
    f.init(1);
    f.uar = f.alloc_uar();
    let eq = f.create_eq(4, 0);
    f.create_cq(2, eq.eqn);
    f.create_cq(2, eq.eqn);
    let cq = f.cq_shell(2, 0);
    let i = f.create_cq_cmd(&cq, eq.eqn);
    f.refused(&i, 16, CmdStatus::LIM_ERR, sy::CQ_TOO_MANY);
}

#[test]
fn cqe_ownership_across_wraps_and_128_byte_cqes() {
    let (mut f, _eq) = setup();
    let eqn = _eq.eqn;
    let mut cq = f.create_cq(3, eqn);
    for i in 0..40u16 {
        f.dev
            .traffic()
            .complete_send(cq.cqn, 0x77, i, 100 + i as u32)
            .unwrap();
        let c = f.poll_cq(&mut cq).expect("CQE visible");
        assert_eq!(cqe64::opcode.get(&c), CqeOpcode::REQ.0);
        assert_eq!(cqe64::wqe_counter.get(&c), i);
        assert_eq!(cqe64::byte_cnt.get(&c), 100 + i as u32);
        assert_eq!(cqe64::qpn.get(&c), 0x77);
        assert!(f.poll_cq(&mut cq).is_none());
    }
    // 128-byte CQEs: the CQE is the second half.
    let mut big = f.cq_shell(3, 1);
    let i = f.create_cq_cmd(&big, eqn);
    let o = f.ok(&i, 16);
    big.cqn = create_cq_out::cqn.get(&o);
    for i in 0..20u16 {
        f.dev.traffic().complete_send(big.cqn, 1, i, 0).unwrap();
        assert_eq!(cqe64::wqe_counter.get(&f.poll_cq(&mut big).unwrap()), i);
    }
}

fn comp_events(f: &Fw, eq: &mut TEq) -> Vec<u32> {
    f.drain_eq(eq)
        .iter()
        .filter(|e| eqe_type(e) == 0)
        .map(|e| comp_event::cq_number.get(eqe::event_data.get(e)))
        .collect()
}

#[test]
fn exactly_one_completion_eqe_per_arm() {
    let mut f = Fw::up(1);
    let mut ceq = f.create_eq(4, 0);
    let mut cq = f.create_cq(4, ceq.eqn);
    let dev = f.dev.clone();
    let t = dev.traffic();
    t.complete_send(cq.cqn, 1, 0, 0).unwrap();
    assert!(comp_events(&f, &mut ceq).is_empty(), "not armed: no event");
    f.poll_cq(&mut cq).unwrap();
    f.arm_cq(&cq, false);
    assert!(comp_events(&f, &mut ceq).is_empty(), "nothing beyond ci");
    t.complete_send(cq.cqn, 1, 1, 0).unwrap();
    t.complete_send(cq.cqn, 1, 2, 0).unwrap();
    assert_eq!(
        comp_events(&f, &mut ceq),
        vec![cq.cqn],
        "one EQE for two CQEs"
    );
    // Re-arm with the same sn after the event: stale, ignored.
    f.arm_cq(&cq, false);
    assert!(f
        .dev
        .violations()
        .iter()
        .any(|v| matches!(v, Violation::UarDoorbell(s) if s.contains("stale"))));
    t.complete_send(cq.cqn, 1, 3, 0).unwrap();
    assert!(comp_events(&f, &mut ceq).is_empty());
    // Proper re-arm (sn bumped) with CQEs already beyond ci: fires at once.
    cq.arm_sn += 1;
    f.arm_cq(&cq, false);
    assert_eq!(comp_events(&f, &mut ceq), vec![cq.cqn]);
    while f.poll_cq(&mut cq).is_some() {}
    // Solicited arm: plain CQEs do not fire, an error CQE does.
    cq.arm_sn += 1;
    f.arm_cq(&cq, true);
    t.complete_send(cq.cqn, 1, 4, 0).unwrap();
    assert!(comp_events(&f, &mut ceq).is_empty());
    t.complete_send_error(cq.cqn, 1, 5, 0x05, 0x33).unwrap();
    assert_eq!(comp_events(&f, &mut ceq), vec![cq.cqn]);
    let _ = f.poll_cq(&mut cq).unwrap();
    let e = f.poll_cq(&mut cq).unwrap();
    assert_eq!(err_cqe::opcode.get(&e), CqeOpcode::REQ_ERR.0);
    assert_eq!(
        (err_cqe::syndrome.get(&e), err_cqe::vendor_err_synd.get(&e)),
        (0x05, 0x33)
    );
    // Arm doorbell on the wrong UAR is ignored.
    let other = f.alloc_uar();
    let mut c2 = TCq {
        uar: other,
        ..f.cq_shell(2, 0)
    };
    c2.cqn = cq.cqn;
    f.arm_cq(&c2, false);
    assert!(f
        .dev
        .violations()
        .iter()
        .any(|v| matches!(v, Violation::UarDoorbell(s) if s.contains("CQ uses UAR"))));
}

#[test]
fn cq_overrun_raises_cq_error_unless_oi() {
    let (mut f, mut eq) = setup();
    let cq = f.create_cq(2, eq.eqn); // 4 entries
    let dev = f.dev.clone();
    let t = dev.traffic();
    for i in 0..4 {
        t.complete_send(cq.cqn, 1, i, 0).unwrap();
    }
    assert!(f.drain_eq(&mut eq).is_empty());
    t.complete_send(cq.cqn, 1, 4, 0).unwrap();
    let evs = f.drain_eq(&mut eq);
    assert_eq!(evs.len(), 1);
    assert_eq!(eqe_type(&evs[0]), EventType::CQ_ERROR.0);
    let d = eqe::event_data.get(&evs[0]);
    assert_eq!(cq_error::cqn.get(d), cq.cqn);
    assert_eq!(cq_error::syndrome.get(d), 1);
    assert!(f
        .dev
        .violations()
        .contains(&Violation::CqOverrun { cqn: cq.cqn }));
    let mut q = inp(Opcode::QUERY_CQ, 16);
    query_cq_in::cqn.set(&mut q, cq.cqn).unwrap();
    let o = f.ok(&q, query_cq_out::SIZE);
    assert_eq!(
        cqc::status.get(query_cq_out::cq_context.get(&o)),
        ctx::CQ_STATUS_OVERFLOW
    );
    // With oi the CQ overwrites silently.
    let mut cq2 = f.cq_shell(2, 0);
    let mut i = f.create_cq_cmd(&cq2, eq.eqn);
    cqc::oi
        .set(create_cq_in::cq_context.get_mut(&mut i), true)
        .unwrap();
    cq2.cqn = create_cq_out::cqn.get(&f.ok(&i, 16));
    for i in 0..9 {
        t.complete_send(cq2.cqn, 1, i, 0).unwrap();
    }
    assert!(f.drain_eq(&mut eq).is_empty());
}

#[test]
fn cq_write_to_freed_buffer_is_iommu_fault_and_cq_error() {
    let (mut f, mut eq) = setup();
    let cq = f.create_cq(2, eq.eqn);
    let TCq { buf, dbr, cqn, .. } = cq;
    drop(buf); // driver frees the CQ buffer while the CQ lives
    assert!(f
        .dev
        .violations()
        .iter()
        .any(|v| matches!(v, Violation::FreedWhileInUse(_))));
    f.dev.traffic().complete_send(cqn, 1, 0, 0).unwrap();
    assert!(f
        .dev
        .iommu_faults()
        .iter()
        .any(|x| x.write && x.context.contains("CQE")));
    let evs = f.drain_eq(&mut eq);
    assert_eq!(cq_error::syndrome.get(eqe::event_data.get(&evs[0])), 2);
    drop(dbr);
}

fn resize_cmd(f: &Fw, cq: &TCq, new: &Region, log_size: u8) -> Vec<u8> {
    let npas = new.len() / 4096;
    let mut i = inp(Opcode::MODIFY_CQ, modify_cq_in::pas.len_with(npas));
    cmd_in::op_mod.set(&mut i, 1).unwrap();
    modify_cq_in::cqn.set(&mut i, cq.cqn).unwrap();
    resize_field_select::resize_field_select
        .set(
            modify_cq_in::modify_field_select_resize_field_select.get_mut(&mut i),
            7,
        )
        .unwrap();
    let c = modify_cq_in::cq_context.get_mut(&mut i);
    cqc::log_cq_size.set(c, log_size).unwrap();
    cqc::cqe_sz.set(c, cq.cqe_sz).unwrap();
    for k in 0..npas {
        modify_cq_in::pas
            .set(&mut i, k, new.iova() + 4096 * k as u64)
            .unwrap();
    }
    let _ = f;
    i
}

#[test]
fn resize_writes_resize_cqe_in_old_buffer_and_continues_producer() {
    let (mut f, eq) = setup();
    let mut cq = f.create_cq(2, eq.eqn); // 4 entries
    let dev = f.dev.clone();
    let t = dev.traffic();
    for i in 0..3 {
        t.complete_send(cq.cqn, 1, i, 0).unwrap();
    }
    let _ = f.poll_cq(&mut cq).unwrap(); // ci = 1, outstanding 2
    let new = f.new_cq_buf(4, 0);
    let i = resize_cmd(&f, &cq, &new, 4);
    f.ok(&i, 16);
    // RESIZE CQE at producer index 3 of the old ring.
    let _ = f.poll_cq(&mut cq).unwrap();
    let _ = f.poll_cq(&mut cq).unwrap();
    let r = f.poll_cq(&mut cq).unwrap();
    assert_eq!(cqe64::opcode.get(&r), CqeOpcode::RESIZE_CQ.0);
    assert_eq!(cq.ci, 4);
    // Next CQE: index 4 in the new ring (slot 4 of 16, owner 0).
    t.complete_send(cq.cqn, 1, 99, 0).unwrap();
    assert_eq!(new.read_u8(4 * 64 + 63), CqeOpcode::REQ.0 << 4);
    assert_eq!(new.read_u8(3 * 64 + 63), 0xf0, "slot 3 untouched");
    cq.buf = new;
    cq.log_size = 4;
    let c = f.poll_cq(&mut cq).unwrap();
    assert_eq!(cqe64::wqe_counter.get(&c), 99);
    let mut q = inp(Opcode::QUERY_CQ, 16);
    query_cq_in::cqn.set(&mut q, cq.cqn).unwrap();
    let o = f.ok(&q, query_cq_out::SIZE);
    let cc = query_cq_out::cq_context.get(&o);
    assert_eq!(cqc::log_cq_size.get(cc), 4);
    assert_eq!(cqc::producer_counter.get(cc), 5);
}

#[test]
fn resize_refusals() {
    let (mut f, eq) = setup();
    let mut cq = f.create_cq(3, eq.eqn); // 8
    let dev = f.dev.clone();
    let t = dev.traffic();
    for i in 0..6 {
        t.complete_send(cq.cqn, 1, i, 0).unwrap();
    }
    let _ = f.poll_cq(&mut cq).unwrap(); // outstanding 5
    let small = f.new_cq_buf(2, 0); // 4 < 5
    let i = resize_cmd(&f, &cq, &small, 2);
    f.refused(
        &i,
        16,
        CmdStatus::BAD_SIZE_OUTS_CQES_ERR,
        sy::CQ_RESIZE_OUTSTANDING,
    );
    // CQ unchanged: next CQE lands in the old buffer at index 6.
    t.complete_send(cq.cqn, 1, 6, 0).unwrap();
    assert_eq!(cq.buf.read_u8(6 * 64 + 63), 0);
    let ok_buf = f.new_cq_buf(3, 0);
    let mut i = resize_cmd(&f, &cq, &ok_buf, 3);
    cqc::cqe_sz
        .set(modify_cq_in::cq_context.get_mut(&mut i), 1)
        .unwrap();
    f.refused(&i, 16, CmdStatus::BAD_PARAM_ERR, sy::CQ_RESIZE_CQE_SZ);
    let mut i = resize_cmd(&f, &cq, &ok_buf, 3);
    resize_field_select::resize_field_select
        .set(
            modify_cq_in::modify_field_select_resize_field_select.get_mut(&mut i),
            6,
        )
        .unwrap();
    f.refused(&i, 16, CmdStatus::BAD_PARAM_ERR, sy::CQ_RESIZE_SELECT);
    let i = resize_cmd(&f, &cq, &ok_buf, 23);
    f.refused(&i, 16, CmdStatus::BAD_PARAM_ERR, sy::CQ_LOG_SIZE);
    let i = resize_cmd(&f, &cq, &ok_buf, 7);
    f.refused(&i, 16, CmdStatus::BAD_INP_LEN_ERR, sy::CQ_PAS_SHORT);
    f.dev.caps_mut(|c| c.cq_resize = false);
    let i = resize_cmd(&f, &cq, &ok_buf, 3);
    f.refused(&i, 16, CmdStatus::BAD_OP_ERR, sy::CQ_RESIZE_CAP);
    let mut i = resize_cmd(&f, &cq, &ok_buf, 3);
    modify_cq_in::cqn.set(&mut i, 0xabcd).unwrap();
    f.dev.caps_mut(|c| c.cq_resize = true);
    f.refused(&i, 16, CmdStatus::BAD_RES_ERR, sy::CQ_NOT_FOUND);
}

#[test]
fn resize_refused_when_the_old_ring_is_full_or_the_cq_in_error() {
    let (mut f, eq) = setup();
    let cq = f.create_cq(2, eq.eqn); // 4 entries
    let dev = f.dev.clone();
    let t = dev.traffic();
    for i in 0..4 {
        t.complete_send(cq.cqn, 1, i, 0).unwrap();
    }
    // 4 outstanding in a ring of 4: no room for the RESIZE_CQ CQE.
    let new = f.new_cq_buf(4, 0);
    let i = resize_cmd(&f, &cq, &new, 4);
    f.refused(
        &i,
        16,
        CmdStatus::BAD_SIZE_OUTS_CQES_ERR,
        sy::CQ_RESIZE_OLD_FULL,
    );
    // One more: overrun, the CQ is in error and cannot be resized.
    let _ = t.complete_send(cq.cqn, 1, 4, 0);
    let i = resize_cmd(&f, &cq, &new, 4);
    f.refused(&i, 16, CmdStatus::BAD_RES_STATE_ERR, sy::CQ_IN_ERROR);
}

#[test]
fn cq_period_mode_needs_its_capability() {
    // Mode 1 at creation needs cq_period_start_from_cqe (PRM), not
    // cq_period_mode_modify (that one is about MODIFY_CQ); 2 and 3 are
    // reserved.
    let (mut f, eq) = setup();
    f.dev.caps_mut(|c| c.cq_period_start_from_cqe = false);
    let cq = f.cq_shell(2, 0);
    let mut i = f.create_cq_cmd(&cq, eq.eqn);
    cqc::cq_period_mode
        .set(create_cq_in::cq_context.get_mut(&mut i), 1)
        .unwrap();
    f.refused(&i, 16, CmdStatus::BAD_PARAM_ERR, sy::CQ_PERIOD_MODE_CAP);
    f.dev.caps_mut(|c| {
        c.cq_period_start_from_cqe = true;
        c.cq_period_mode_modify = false;
    });
    cqc::cq_period_mode
        .set(create_cq_in::cq_context.get_mut(&mut i), 2)
        .unwrap();
    f.refused(&i, 16, CmdStatus::BAD_PARAM_ERR, sy::CQ_PERIOD_MODE_CAP);
    cqc::cq_period_mode
        .set(create_cq_in::cq_context.get_mut(&mut i), 1)
        .unwrap();
    f.ok(&i, create_cq_out::SIZE);
}

#[test]
fn scqe_break_moderation_needs_its_capability() {
    let (mut f, eq) = setup();
    f.dev.caps_mut(|c| c.scqe_break_moderation = false);
    let cq = f.cq_shell(2, 0);
    let mut i = f.create_cq_cmd(&cq, eq.eqn);
    cqc::scqe_break_moderation_en
        .set(create_cq_in::cq_context.get_mut(&mut i), true)
        .unwrap();
    f.refused(&i, 16, CmdStatus::BAD_PARAM_ERR, sy::CQ_SCQE_BREAK_CAP);
    f.dev.caps_mut(|c| c.scqe_break_moderation = true);
    f.ok(&i, create_cq_out::SIZE);
}

#[test]
fn moderation_stored_and_queried() {
    let (mut f, eq) = setup();
    let cq = f.create_cq(3, eq.eqn);
    let mut i = inp(Opcode::MODIFY_CQ, modify_cq_in::SIZE);
    modify_cq_in::cqn.set(&mut i, cq.cqn).unwrap();
    modify_field_select::modify_field_select
        .set(
            modify_cq_in::modify_field_select_resize_field_select.get_mut(&mut i),
            3,
        )
        .unwrap();
    let c = modify_cq_in::cq_context.get_mut(&mut i);
    cqc::cq_period.set(c, 16).unwrap();
    cqc::cq_max_count.set(c, 32).unwrap();
    f.ok(&i, 16);
    let mut q = inp(Opcode::QUERY_CQ, 16);
    query_cq_in::cqn.set(&mut q, cq.cqn).unwrap();
    let o = f.ok(&q, query_cq_out::SIZE);
    let cc = query_cq_out::cq_context.get(&o);
    assert_eq!(
        (cqc::cq_period.get(cc), cqc::cq_max_count.get(cc)),
        (16, 32)
    );
    let mut j = i.clone();
    modify_field_select::modify_field_select
        .set(
            modify_cq_in::modify_field_select_resize_field_select.get_mut(&mut j),
            0x40,
        )
        .unwrap();
    f.refused(&j, 16, CmdStatus::BAD_PARAM_ERR, sy::CQ_MODIFY_SELECT);
    f.dev.caps_mut(|c| c.cq_moderation = false);
    f.refused(&i, 16, CmdStatus::BAD_OP_ERR, sy::CQ_MODERATION_CAP);
}
