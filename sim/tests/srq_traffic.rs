//! SRQ (ISSI 0) and RMP (ISSI 1): commands, validation, limit event,
//! free-list consumption, traffic scatter and error CQEs.

use crate::common::qp::*;
use crate::common::*;

use mlx5_regs::consts::{ctx, CqeOpcode};
use mlx5_regs::layouts::*;
use mlx5_regs::{CmdStatus, EventMask, EventType, Opcode};
use mlx5_sim::syndrome as sy;
use mlx5_sim::Delivery;

/// Every SRQ and RMP here has the shape `rmp_buffers` makes: 16 WQEs of
/// 64 bytes (next segment and up to three data segments), scattering into
/// 4 KiB slots through the reserved lkey.
fn wq_buffers(f: &Fw) -> (Region, Region, Region) {
    rmp_buffers(f, f.dev.reserved_lkey())
}

fn srq_cmd(f: &Fw, buf: &Region, dbr: &Region, cqn: u32, lwm: u16) -> Vec<u8> {
    let mut i = inp(Opcode::CREATE_SRQ, create_srq_in::pas.len_with(1));
    {
        let s = create_srq_in::srq_context_entry.get_mut(&mut i);
        srqc::log_srq_size.set(s, RMP_LOG).unwrap();
        srqc::log_rq_stride.set(s, RMP_STRIDE - 4).unwrap();
        srqc::rlky.set(s, true).unwrap();
        srqc::cqn.set(s, cqn).unwrap();
        srqc::pd.set(s, f.pd).unwrap();
        srqc::lwm.set(s, lwm).unwrap();
        srqc::dbr_addr.set(s, dbr.iova()).unwrap();
    }
    create_srq_in::pas.set(&mut i, 0, buf.iova()).unwrap();
    i
}

fn create_rmp(f: &mut Fw, lwm: u16) -> TRmp {
    TRmp::new(f, f.dev.reserved_lkey(), lwm)
}

fn arm_rmp(f: &mut Fw, n: u32, lwm: u16) -> Out {
    f.exec(&arm_rmp_cmd(n, lwm), modify_rmp_out::SIZE)
}

fn query_rmp_lwm(f: &mut Fw, n: u32) -> u16 {
    let mut q = inp(Opcode::QUERY_RMP, query_rmp_in::SIZE);
    query_rmp_in::rmpn.set(&mut q, n).unwrap();
    let o = f.ok(&q, query_rmp_out::SIZE);
    wq::lwm.get(rmpc::wq.tail(query_rmp_out::rmp_context.tail(&o)))
}

fn limit_events(f: &Fw, eq: &mut TEq) -> Vec<u32> {
    f.drain_eq(eq)
        .iter()
        .filter(|e| eqe_type(e) == EventType::SRQ_RQ_LIMIT.0)
        .map(|e| {
            let d = eqe::event_data.get(e);
            assert_eq!(qp_events::r#type.get(d), ctx::EVENT_QUEUE_TYPE_RQ);
            qp_events::qpn_rqn_sqn.get(d)
        })
        .collect()
}

fn setup(issi: u16) -> (Fw, TEq, TCq) {
    let mut f = Fw::up(issi);
    let eq = f.create_eq(7, EventMask::LINUX_ASYNC.bits());
    let cq = f.create_cq(6, eq.eqn);
    (f, eq, cq)
}

#[test]
fn rmp_traffic_scatter_free_list_and_cqes() {
    let (mut f, _eq, mut cq) = setup(1);
    let mut s = create_rmp(&mut f, 0);
    assert_eq!(f.dev.objects().rmps, 1);
    // Driver re-links: WQE 0 -> 5 (the free list, not the ring order).
    let mut next = [0u8; 16];
    srq_next_seg::next_wqe_index.set(&mut next, 5).unwrap();
    s.buf.write_bytes(0, &next);
    s.post(3);
    let dev = f.dev.clone();
    let t = dev.traffic();
    let payload: Vec<u8> = (0..200u8).collect();
    assert_eq!(
        t.deliver(s.n, cq.cqn, 0x42, &payload).unwrap(),
        Delivery::Completed { wqe_index: 0 }
    );
    assert_eq!(
        t.deliver(s.n, cq.cqn, 0x42, &payload[..10]).unwrap(),
        Delivery::Completed { wqe_index: 5 }
    );
    let mut got = vec![0u8; 200];
    s.data.read_bytes(0, &mut got);
    assert_eq!(got, payload);
    s.data.read_bytes(5 * 4096, &mut got[..10]);
    assert_eq!(&got[..10], &payload[..10]);
    let c = f.poll_cq(&mut cq).unwrap();
    assert_eq!(cqe64::opcode.get(&c), CqeOpcode::RESP_SEND.0);
    assert_eq!(cqe64::byte_cnt.get(&c), 200);
    assert_eq!(cqe64::wqe_counter.get(&c), 0);
    assert_eq!(cqe64::qpn.get(&c), 0x42);
    assert_eq!(cqe64::srqn.get(&c), s.n);
    assert_eq!(cqe64::wqe_counter.get(&f.poll_cq(&mut cq).unwrap()), 5);
    // Too long: local length error, WQE consumed (next after 5 is 6).
    let big = vec![1u8; 300];
    assert_eq!(
        t.deliver(s.n, cq.cqn, 0x42, &big).unwrap(),
        Delivery::LengthError { wqe_index: 6 }
    );
    let e = f.poll_cq(&mut cq).unwrap();
    assert_eq!(err_cqe::opcode.get(&e), CqeOpcode::RESP_ERR.0);
    assert_eq!(err_cqe::syndrome.get(&e), 0x01);
    assert_eq!(err_cqe::wqe_counter.get(&e), 6);
    // Nothing posted any more: dropped and counted.
    assert_eq!(
        t.deliver(s.n, cq.cqn, 0x42, &payload).unwrap(),
        Delivery::Dropped
    );
    assert_eq!(t.dropped(), 1);
    // A foreign lkey: local protection error.
    s.set_seg(7, 0, 256, 0x1234);
    s.post(1);
    assert_eq!(
        t.deliver(s.n, cq.cqn, 1, &payload).unwrap(),
        Delivery::ProtectionError { wqe_index: 7 }
    );
    assert_eq!(err_cqe::syndrome.get(&f.poll_cq(&mut cq).unwrap()), 0x04);
    // A data segment outside DMA memory: IOMMU fault + protection error.
    s.set_seg(8, 0x1000, 256, f.dev.reserved_lkey());
    s.post(1);
    assert_eq!(
        t.deliver(s.n, cq.cqn, 1, &payload).unwrap(),
        Delivery::ProtectionError { wqe_index: 8 }
    );
    assert!(f
        .dev
        .iommu_faults()
        .iter()
        .any(|x| x.iova == 0x1000 && x.write));
}

#[test]
fn next_pointer_is_read_when_a_wqe_is_consumed() {
    // docs/firmware.md §9.4 free list: a consumed WQE may be completed out of order,
    // become the tail and get its next pointer rewritten; the device must
    // already have read where to go next.
    let (mut f, _eq, cq) = setup(1);
    let mut s = create_rmp(&mut f, 0);
    s.post(3);
    let dev = f.dev.clone();
    let t = dev.traffic();
    assert_eq!(
        t.deliver(s.n, cq.cqn, 1, &[1, 2, 3]).unwrap(),
        Delivery::Completed { wqe_index: 0 }
    );
    // The driver completes WQE 0 and links it after the tail; then frees
    // another WQE behind it: WQE 0's next pointer now says 9.
    let mut next = [0u8; 16];
    srq_next_seg::next_wqe_index.set(&mut next, 9).unwrap();
    s.buf.write_bytes(0, &next);
    assert_eq!(
        t.deliver(s.n, cq.cqn, 1, &[1, 2, 3]).unwrap(),
        Delivery::Completed { wqe_index: 1 },
        "the link read when WQE 0 was consumed (0 -> 1) is followed"
    );
    assert_eq!(
        t.deliver(s.n, cq.cqn, 1, &[1, 2, 3]).unwrap(),
        Delivery::Completed { wqe_index: 2 }
    );
}

#[test]
fn srq_count_limit_is_lim_err() {
    let (mut f, _eq, cq) = setup(0);
    f.dev.caps_mut(|c| c.log_max_srq = 0); // one SRQ at most
    let (buf, dbr, _data) = wq_buffers(&f);
    let i = srq_cmd(&f, &buf, &dbr, cq.cqn, 0);
    f.ok(&i, create_srq_out::SIZE);
    let (buf2, dbr2, _data2) = wq_buffers(&f);
    let i = srq_cmd(&f, &buf2, &dbr2, cq.cqn, 0);
    f.refused(&i, 16, CmdStatus::LIM_ERR, sy::SRQ_TOO_MANY);
}

#[test]
fn rmp_limit_one_shot_rearm_and_immediate() {
    let (mut f, mut eq, cq) = setup(1);
    let mut s = create_rmp(&mut f, 0);
    s.post(10);
    assert!(arm_rmp(&mut f, s.n, 7).ok());
    assert_eq!(query_rmp_lwm(&mut f, s.n), 7);
    let dev = f.dev.clone();
    let t = dev.traffic();
    for k in 0..3 {
        t.deliver(s.n, cq.cqn, 1, b"x").unwrap();
        assert!(
            limit_events(&f, &mut eq).is_empty(),
            "after {} receives",
            k + 1
        );
    }
    t.deliver(s.n, cq.cqn, 1, b"x").unwrap(); // 6 left < 7
    assert_eq!(limit_events(&f, &mut eq), vec![s.n]);
    assert_eq!(query_rmp_lwm(&mut f, s.n), 0, "one-shot: disarmed");
    t.deliver(s.n, cq.cqn, 1, b"x").unwrap();
    assert!(limit_events(&f, &mut eq).is_empty());
    // Re-arm below the count: waits; then crossing fires again.
    assert!(arm_rmp(&mut f, s.n, 4).ok());
    assert!(limit_events(&f, &mut eq).is_empty());
    t.deliver(s.n, cq.cqn, 1, b"x").unwrap(); // 4 left, not below 4
    assert!(limit_events(&f, &mut eq).is_empty());
    t.deliver(s.n, cq.cqn, 1, b"x").unwrap(); // 3 left
    assert_eq!(limit_events(&f, &mut eq), vec![s.n]);
    // Arming above the current count fires at once; 0 disarms.
    assert!(arm_rmp(&mut f, s.n, 9).ok());
    assert_eq!(limit_events(&f, &mut eq), vec![s.n]);
    assert_eq!(query_rmp_lwm(&mut f, s.n), 0);
    assert!(arm_rmp(&mut f, s.n, 0).ok());
    assert!(limit_events(&f, &mut eq).is_empty());
}

#[test]
fn rmp_command_refusals() {
    let (mut f, _eq, _cq) = setup(1);
    let (buf, dbr, _data) = wq_buffers(&f);
    let good = rmp_cmd(&f, &buf, &dbr, 0);
    let ol = create_rmp_out::SIZE;
    macro_rules! bad_wq {
        ($field:ident = $v:expr, $status:expr, $syn:expr) => {{
            let mut i = good.clone();
            wq::$field
                .set(rmpc::wq.tail_mut(create_rmp_in::ctx.tail_mut(&mut i)), $v)
                .unwrap();
            f.refused(&i, ol, $status, $syn);
        }};
    }
    bad_wq!(log_wq_sz = 16, CmdStatus::BAD_PARAM_ERR, sy::SRQ_LOG_SIZE);
    bad_wq!(log_wq_stride = 4, CmdStatus::BAD_PARAM_ERR, sy::SRQ_STRIDE);
    bad_wq!(log_wq_stride = 10, CmdStatus::BAD_PARAM_ERR, sy::SRQ_STRIDE);
    bad_wq!(pd = 0x999, CmdStatus::BAD_RES_ERR, sy::SRQ_PD);
    bad_wq!(
        dbr_addr = dbr.iova() + 2,
        CmdStatus::BAD_PARAM_ERR,
        sy::SRQ_DBR_ALIGN
    );
    bad_wq!(lwm = 16, CmdStatus::BAD_PARAM_ERR, sy::SRQ_LWM);
    bad_wq!(wq_type = 1, CmdStatus::BAD_PARAM_ERR, sy::SRQ_CTX_FIELD);
    bad_wq!(
        log_wq_pg_sz = 17,
        CmdStatus::BAD_PARAM_ERR,
        sy::SRQ_PAGE_SIZE
    );
    bad_wq!(log_wq_sz = 7, CmdStatus::BAD_INP_LEN_ERR, sy::SRQ_PAS_SHORT);
    let mut i = good.clone();
    rmpc::state
        .set(create_rmp_in::ctx.tail_mut(&mut i), 0)
        .unwrap();
    f.refused(&i, ol, CmdStatus::BAD_PARAM_ERR, sy::SRQ_CTX_FIELD);
    let mut i = good.clone();
    wq::pas
        .set(
            rmpc::wq.tail_mut(create_rmp_in::ctx.tail_mut(&mut i)),
            0,
            buf.iova() + 8,
        )
        .unwrap();
    f.refused(&i, ol, CmdStatus::BAD_PARAM_ERR, sy::SRQ_PAS_ALIGN);
    let o = f.ok(&good, ol);
    let n = create_rmp_out::rmpn.get(&o);
    // MODIFY_RMP rules
    let o = arm_rmp(&mut f, n ^ 0x77, 1);
    assert_eq!(
        (o.status, o.syndrome),
        (CmdStatus::BAD_RES_ERR.0, sy::SRQ_NOT_FOUND)
    );
    let o = arm_rmp(&mut f, n, 16);
    assert_eq!(
        (o.status, o.syndrome),
        (CmdStatus::BAD_PARAM_ERR.0, sy::SRQ_LWM)
    );
    let mut i = inp(Opcode::MODIFY_RMP, modify_rmp_in::SIZE);
    modify_rmp_in::rmp_state.set(&mut i, 0).unwrap();
    modify_rmp_in::rmpn.set(&mut i, n).unwrap();
    f.refused(&i, 16, CmdStatus::BAD_RES_STATE_ERR, sy::RMP_STATE);
    modify_rmp_in::rmp_state.set(&mut i, 1).unwrap();
    f.refused(&i, 16, CmdStatus::BAD_PARAM_ERR, sy::RMP_BITMASK);
    rmp_bitmask::lwm
        .set(modify_rmp_in::bitmask.get_mut(&mut i), true)
        .unwrap();
    f.refused(&i, 16, CmdStatus::BAD_PARAM_ERR, sy::RMP_NEW_STATE);
    // PD in use, SRQ family at ISSI 1, destroy.
    let mut d = inp(Opcode::DEALLOC_PD, 16);
    dealloc_pd_in::pd.set(&mut d, f.pd).unwrap();
    f.refused(&d, 16, CmdStatus::BAD_RES_STATE_ERR, sy::PD_IN_USE);
    let cqn = _cq.cqn;
    let i = srq_cmd(&f, &buf, &dbr, cqn, 0);
    f.refused(
        &i,
        16,
        CmdStatus::BAD_OP_ERR,
        sy::per_opcode(sy::ISSI_0_ONLY, 0x700),
    );
    let mut d = inp(Opcode::DESTROY_RMP, 16);
    destroy_rmp_in::rmpn.set(&mut d, n).unwrap();
    f.ok(&d, 16);
    f.refused(&d, 16, CmdStatus::BAD_RES_ERR, sy::SRQ_NOT_FOUND);
    assert_eq!(f.dev.objects().rmps, 0);
    f.keep.extend([buf, dbr, _data]);
}

#[test]
fn srq_issi0_commands_limit_and_destroy_ordering() {
    let (mut f, mut eq, mut cq) = setup(0);
    let (buf, dbr, data) = wq_buffers(&f);
    let good = srq_cmd(&f, &buf, &dbr, cq.cqn, 0);
    macro_rules! bad {
        ($field:ident = $v:expr, $status:expr, $syn:expr) => {{
            let mut i = good.clone();
            srqc::$field
                .set(create_srq_in::srq_context_entry.get_mut(&mut i), $v)
                .unwrap();
            f.refused(&i, 16, $status, $syn);
        }};
    }
    bad!(cqn = 0x9999, CmdStatus::BAD_RES_ERR, sy::SRQ_CQN);
    bad!(xrcd = 3, CmdStatus::BAD_RES_ERR, sy::SRQ_XRCD);
    bad!(
        log_srq_size = 15,
        CmdStatus::BAD_INP_LEN_ERR,
        sy::SRQ_PAS_SHORT
    );
    bad!(log_rq_stride = 0, CmdStatus::BAD_PARAM_ERR, sy::SRQ_STRIDE);
    bad!(state = 1, CmdStatus::BAD_PARAM_ERR, sy::SRQ_CTX_FIELD);
    bad!(pd = 0x777, CmdStatus::BAD_RES_ERR, sy::SRQ_PD);
    bad!(lwm = 16, CmdStatus::BAD_PARAM_ERR, sy::SRQ_LWM);
    bad!(dbr_addr = 6, CmdStatus::BAD_PARAM_ERR, sy::SRQ_DBR_ALIGN);
    f.dev.caps_mut(|c| c.wq_signature = false);
    bad!(
        wq_signature = true,
        CmdStatus::BAD_PARAM_ERR,
        sy::SRQ_SIGNATURE_CAP
    );
    let o = f.ok(&good, create_srq_out::SIZE);
    let mut s = TRmp {
        n: create_srq_out::srqn.get(&o),
        buf,
        dbr,
        data,
        posted: 0,
    };
    assert_eq!(f.dev.objects().srqs, 1);
    // RMP family at ISSI 0.
    let (b2, d2, _x) = wq_buffers(&f);
    let i = rmp_cmd(&f, &b2, &d2, 0);
    f.refused(
        &i,
        16,
        CmdStatus::BAD_OP_ERR,
        sy::per_opcode(sy::ISSI_1_ONLY, 0x90c),
    );
    // Limit via ARM_RQ.
    s.post(5);
    let arm = |lwm: u16, n: u32| {
        let mut i = inp(Opcode::ARM_RQ, arm_rq_in::SIZE);
        cmd_in::op_mod.set(&mut i, 1).unwrap();
        arm_rq_in::srq_number.set(&mut i, n).unwrap();
        arm_rq_in::lwm.set(&mut i, lwm).unwrap();
        i
    };
    f.ok(&arm(3, s.n), 16);
    let dev = f.dev.clone();
    let t = dev.traffic();
    t.deliver(s.n, cq.cqn, 9, b"abc").unwrap();
    t.deliver(s.n, cq.cqn, 9, b"abc").unwrap();
    assert!(limit_events(&f, &mut eq).is_empty());
    t.deliver(s.n, cq.cqn, 9, b"abc").unwrap(); // 2 < 3
    assert_eq!(limit_events(&f, &mut eq), vec![s.n]);
    let mut q = inp(Opcode::QUERY_SRQ, query_srq_in::SIZE);
    query_srq_in::srqn.set(&mut q, s.n).unwrap();
    let o = f.ok(&q, query_srq_out::SIZE);
    let c = query_srq_out::srq_context_entry.get(&o);
    assert_eq!(srqc::lwm.get(c), 0);
    assert_eq!(srqc::cqn.get(c), cq.cqn);
    assert_eq!(srqc::log_srq_size.get(c), RMP_LOG);
    f.ok(&arm(5, s.n), 16); // 2 < 5: immediate
    assert_eq!(limit_events(&f, &mut eq), vec![s.n]);
    let mut i = arm(1, s.n);
    cmd_in::op_mod.set(&mut i, 2).unwrap();
    f.refused(
        &i,
        16,
        CmdStatus::BAD_PARAM_ERR,
        sy::per_opcode(sy::BAD_OP_MOD, 0x703),
    );
    f.refused(
        &arm(1, 0x5555),
        16,
        CmdStatus::BAD_RES_ERR,
        sy::SRQ_NOT_FOUND,
    );
    f.refused(&arm(16, s.n), 16, CmdStatus::BAD_PARAM_ERR, sy::SRQ_LWM);
    // CQ referenced by srqc.cqn cannot be destroyed.
    let mut d = inp(Opcode::DESTROY_CQ, 16);
    destroy_cq_in::cqn.set(&mut d, cq.cqn).unwrap();
    f.refused(&d, 16, CmdStatus::BAD_RES_STATE_ERR, sy::CQ_IN_USE);
    let mut ds = inp(Opcode::DESTROY_SRQ, 16);
    destroy_srq_in::srqn.set(&mut ds, s.n).unwrap();
    f.ok(&ds, 16);
    f.refused(&ds, 16, CmdStatus::BAD_RES_ERR, sy::SRQ_NOT_FOUND);
    f.ok(&d, 16);
    while f.poll_cq(&mut cq).is_some() {}
    f.keep.extend([s.buf, s.dbr, s.data, b2, d2, _x]);
}

#[test]
fn corrupt_free_list_is_srq_catastrophe() {
    let (mut f, mut eq, cq) = setup(1);
    let mut s = create_rmp(&mut f, 0);
    let mut next = [0u8; 16];
    srq_next_seg::next_wqe_index.set(&mut next, 500).unwrap();
    s.buf.write_bytes(0, &next);
    s.post(4);
    let t = f.dev.traffic();
    t.deliver(s.n, cq.cqn, 1, b"a").unwrap();
    assert!(t.deliver(s.n, cq.cqn, 1, b"a").is_err());
    let evs = f.drain_eq(&mut eq);
    assert!(evs
        .iter()
        .any(|e| eqe_type(e) == EventType::SRQ_CATAS_ERROR.0));
}
