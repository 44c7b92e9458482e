//! Model behaviours of docs/fidelity.md §15: object numbers reused after a
//! destroy, the CQ arm rule, non-fatal and fatal health syndromes, the
//! embedded-CPU function, a virtual function's HOST_ENDIANNESS, the
//! device's terminate key, a late SRQ limit event, and the init segment's
//! command timeouts.

use crate::common::qp::*;
use crate::common::*;
use mlx5_hal::Hal;
use mlx5_regs::consts::{ctx, op_mod as om};
use mlx5_regs::layouts::*;
use mlx5_regs::{CmdStatus, EventMask, EventType, Opcode};
use mlx5_sim::syndrome as sy;
use mlx5_sim::{Profile, SimConfig};

fn destroy(f: &mut Fw, op: Opcode, n: u32) {
    let mut d = inp(op, 16);
    // Every DESTROY_* of these objects has its number at bits 72..96.
    destroy_cq_in::cqn.set(&mut d, n).unwrap();
    f.ok(&d, 16);
}

#[test]
fn numbers_are_reused_after_destroy() {
    let mut f = Fw::up(1);
    let eq = f.create_eq(5, EventMask::LINUX_ASYNC.bits());
    // EQ: the lowest free number comes back.
    let eq2 = f.create_eq(4, 0);
    let mut d = inp(Opcode::DESTROY_EQ, destroy_eq_in::SIZE);
    destroy_eq_in::eq_number.set(&mut d, eq2.eqn).unwrap();
    f.ok(&d, destroy_eq_out::SIZE);
    assert_eq!(f.create_eq(4, 0).eqn, eq2.eqn);
    // CQ.
    let a = f.create_cq(4, eq.eqn);
    let b = f.create_cq(4, eq.eqn);
    destroy(&mut f, Opcode::DESTROY_CQ, a.cqn);
    let c = f.create_cq(4, eq.eqn);
    assert_eq!(c.cqn, a.cqn, "CQ number reused");
    assert_ne!(c.cqn, b.cqn);
    // RMP.
    let key = dma_key(&mut f);
    let r1 = TRmp::new(&mut f, key, 0);
    destroy(&mut f, Opcode::DESTROY_RMP, r1.n);
    let r2 = TRmp::new(&mut f, key, 0);
    assert_eq!(r2.n, r1.n, "RMP number reused");
    // QP.
    let q1 = create_qp(&mut f, Some(4), None, b.cqn, 0);
    destroy(&mut f, Opcode::DESTROY_QP, q1.qpn);
    let q2 = create_qp(&mut f, Some(4), None, b.cqn, 0);
    assert_eq!(q2.qpn, q1.qpn, "QP number reused");
    assert!(q2.qpn >= 2, "never the special QPs");
}

#[test]
fn srq_numbers_are_reused_at_issi_0() {
    let mut f = Fw::up(0);
    let eq = f.create_eq(5, EventMask::LINUX_ASYNC.bits());
    let cq = f.create_cq(4, eq.eqn);
    let mk = |f: &mut Fw, buf: &Region, dbr: &Region| {
        let mut i = inp(Opcode::CREATE_SRQ, create_srq_in::pas.len_with(1));
        let s = create_srq_in::srq_context_entry.get_mut(&mut i);
        srqc::log_srq_size.set(s, 4).unwrap();
        srqc::log_rq_stride.set(s, 2).unwrap();
        srqc::pd.set(s, f.pd).unwrap();
        srqc::cqn.set(s, cq.cqn).unwrap();
        srqc::dbr_addr.set(s, dbr.iova()).unwrap();
        create_srq_in::pas.set(&mut i, 0, buf.iova()).unwrap();
        let o = f.ok(&i, create_srq_out::SIZE);
        create_srq_out::srqn.get(&o)
    };
    let (buf, dbr) = (
        f.hal.alloc_dma(4096).unwrap(),
        f.hal.alloc_dma(4096).unwrap(),
    );
    let s1 = mk(&mut f, &buf, &dbr);
    destroy(&mut f, Opcode::DESTROY_SRQ, s1);
    let s2 = mk(&mut f, &buf, &dbr);
    assert_eq!(s1, s2);
}

/// An arm for the next completion is not downgraded by a later solicited
/// arm: a plain completion still raises the event.
#[test]
fn next_arm_is_not_downgraded_by_a_solicited_arm() {
    let mut f = Fw::up(1);
    let mut eq = f.create_eq(5, EventMask::LINUX_ASYNC.bits());
    let cq = f.create_cq(4, eq.eqn);
    f.arm_cq(&cq, false);
    f.arm_cq(&cq, true);
    f.dev.traffic().complete_send(cq.cqn, 0x77, 0, 8).unwrap();
    let comp = f
        .drain_eq(&mut eq)
        .iter()
        .filter(|e| eqe_type(e) == EventType::COMP.0)
        .count();
    assert_eq!(comp, 1);
    // A solicited-only arm on its own still waits for a solicited one.
    let mut cq2 = f.create_cq(4, eq.eqn);
    f.arm_cq(&cq2, true);
    f.dev.traffic().complete_send(cq2.cqn, 0x77, 0, 8).unwrap();
    assert!(f.drain_eq(&mut eq).is_empty());
    assert!(f.poll_cq(&mut cq2).is_some());
}

#[test]
fn a_non_fatal_syndrome_is_reported_and_the_device_works() {
    let mut f = Fw::up(1);
    f.dev.inject().health_syndrome(Some((0x10, 0x1234)));
    let hal = f.hal.clone();
    // Health buffer: synd, ext_synd, valid + severity, no RFR.
    let w = hal.mmio_read32(0x238);
    assert_eq!(w >> 31, 0, "no reset requested");
    assert_eq!((w >> 24) & 0xf, 0x8 | 4, "valid, severity WARNING");
    assert_eq!((hal.mmio_read32(0x23c) >> 16) & 0xff, 0x10);
    assert_eq!(hal.mmio_read32(0x23c) & 0xffff, 0x1234);
    let c0 = hal.mmio_read32(0x1010) & 0xff_ffff;
    hal.delay_us(5_000);
    assert_ne!(hal.mmio_read32(0x1010) & 0xff_ffff, c0, "heartbeat runs");
    assert!(!f.dev.is_fatal());
    assert!(f.alloc_pd() != 0, "commands still answered");
    f.dev.inject().health_syndrome(None);
    assert_eq!(hal.mmio_read32(0x238), 0);
    // A fatal error sets RFR.
    f.dev.inject().fatal(0x08);
    assert_eq!(hal.mmio_read32(0x238) >> 31, 1);
}

#[test]
fn embedded_cpu_function_addresses_itself_with_the_flag() {
    let mut f = Fw::new(SimConfig::default());
    f.dev.caps_mut(|c| c.embedded_cpu = true);
    assert_eq!((f.hal.mmio_read32(0x1fc) >> 23) & 1, 1, "init segment bit");
    let mut e = inp(Opcode::ENABLE_HCA, enable_hca_in::SIZE);
    f.refused(
        &e,
        enable_hca_out::SIZE,
        CmdStatus::BAD_PARAM_ERR,
        sy::ENABLE_FUNC_ID,
    );
    enable_hca_in::embedded_cpu_function
        .set(&mut e, true)
        .unwrap();
    f.ok(&e, enable_hca_out::SIZE);
    let mut q = inp(Opcode::QUERY_PAGES, query_pages_in::SIZE);
    cmd_in::op_mod.set(&mut q, om::QUERY_PAGES_BOOT).unwrap();
    f.refused(
        &q,
        query_pages_out::SIZE,
        CmdStatus::BAD_PARAM_ERR,
        sy::ENABLE_FUNC_ID,
    );
    query_pages_in::embedded_cpu_function
        .set(&mut q, true)
        .unwrap();
    assert!(query_pages_out::num_pages.get(&f.ok(&q, query_pages_out::SIZE)) > 0);
}

#[test]
fn page_requests_of_an_embedded_cpu_function_carry_the_ec_bit() {
    let mut f = Fw::up(1);
    f.dev.caps_mut(|c| c.embedded_cpu = true);
    let mut eq = f.create_eq(5, EventMask::PAGE_REQUEST.bits());
    f.dev.inject().page_request(3);
    let e = f.drain_eq(&mut eq);
    assert_eq!(e.len(), 1);
    let d = eqe::event_data.get(&e[0]);
    assert_eq!(pages_req_event::ec_function.get(d), 0x8000);
    assert_eq!(pages_req_event::num_pages.get(d), 3);
}

#[test]
fn host_endianness_is_refused_on_a_virtual_function() {
    let mut f = Fw::default();
    f.dev.caps_mut(|c| c.virtual_function = true);
    f.enable();
    let mut he = inp(Opcode::ACCESS_REG, access_register_in::SIZE + 16);
    access_register_in::register_id
        .set(&mut he, 0x7004)
        .unwrap();
    f.refused(
        &he,
        access_register_out::SIZE + 16,
        CmdStatus::BAD_PARAM_ERR,
        sy::HOST_ENDIANNESS_VF,
    );
}

#[test]
fn terminate_key_is_offered_with_its_capability_and_ends_scatter_lists() {
    let mut p = Pair::with(Profile::ConnectX5, Mode::Fl, false, 7, |c| {
        c.terminate_scatter_list_mkey = true
    });
    let o = p.f.ok(
        &inp(Opcode::QUERY_SPECIAL_CONTEXTS, 16),
        query_special_contexts_out::SIZE,
    );
    let term = query_special_contexts_out::terminate_scatter_list_mkey.get(&o);
    assert!(term != 0 && term != ctx::INVALID_LKEY);
    let cap = p.f.query_cap(true);
    assert!(cmd_hca_cap::terminate_scatter_list_mkey.get(&cap));
    // WQE 0 ends with the device key, WQE 1 with 0x100: both terminate.
    let mut t = [0u8; 16];
    wqe_data_seg::lkey.set(&mut t, term).unwrap();
    p.rmp.buf.write_bytes(32, &t);
    p.rmp.post(2);
    let key = p.key;
    for m in 0..2u64 {
        p.payload(m as usize * 256, 32, m as u8);
        let src = p.src.iova() + m * 256;
        p.a.post(&p.f, &Wr::send(src, 32, key));
        let r = p.wait_cqe(false);
        assert_eq!(cqe64::opcode.get(&r), 2);
    }
    let s = p.f.dev.traffic().stats();
    assert_eq!(
        (s.terminators_device_key, s.terminators_invalid_lkey),
        (1, 1)
    );
    // Without the capability the key is neither reported nor a terminator.
    let f = Fw::up(1);
    let mut f = f;
    let o = f.ok(
        &inp(Opcode::QUERY_SPECIAL_CONTEXTS, 16),
        query_special_contexts_out::SIZE,
    );
    assert_eq!(
        query_special_contexts_out::terminate_scatter_list_mkey.get(&o),
        0
    );
}

#[test]
fn a_late_limit_event_fires_after_the_next_command() {
    let mut f = Fw::up(1);
    let mut eq = f.create_eq(5, EventMask::LINUX_ASYNC.bits());
    let key = dma_key(&mut f);
    let mut rmp = TRmp::new(&mut f, key, 0);
    rmp.post(2);
    f.dev.inject().srq_limit_late(1);
    rmp.arm(&mut f, 5);
    assert!(f.drain_eq(&mut eq).is_empty(), "not at the arm");
    let mut q = inp(Opcode::QUERY_RMP, query_rmp_in::SIZE);
    query_rmp_in::rmpn.set(&mut q, rmp.n).unwrap();
    let o = f.ok(&q, query_rmp_out::SIZE);
    let lwm = wq::lwm.get(rmpc::wq.tail(query_rmp_out::rmp_context.tail(&o)));
    assert_eq!(lwm, 5, "still armed when queried");
    let e = f.drain_eq(&mut eq);
    assert_eq!(e.len(), 1, "raised once the query completed");
    assert_eq!(eqe_type(&e[0]), EventType::SRQ_RQ_LIMIT.0);
    let o = f.ok(&q, query_rmp_out::SIZE);
    assert_eq!(
        wq::lwm.get(rmpc::wq.tail(query_rmp_out::rmp_context.tail(&o))),
        0
    );
}

#[test]
fn init_segment_timeouts_are_readable() {
    let f = Fw::default();
    assert_eq!(f.hal.mmio_read32(0xff8), 0, "profiles provide none");
    f.dev.caps_mut(|c| {
        c.cmd_exec_to = (1 << 29) | 7;
        c.cmd_q_init_to = (1 << 29) | 3;
    });
    assert_eq!(f.hal.mmio_read32(0xff8), (1 << 29) | 7);
    assert_eq!(f.hal.mmio_read32(0xffc), (1 << 29) | 3);
}
