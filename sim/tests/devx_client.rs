//! A DevX-style client against the model, written with raw commands the way
//! rdma-core's VFIO driver (`providers/mlx5/mlx5_vfio.c`) drives a card: its
//! bring-up (ISSI 1 required, HOST_ENDIANNESS, SET_HCA_CAP, the
//! `umem_uid_0` check, a 16-byte INIT_HCA, `roce_en` on an Ethernet port,
//! one EQ for commands and page requests), queues built from UMEMs
//! (CREATE_UMEM with 4 KiB or larger pages and a page offset, CQ/RMP/QP
//! contexts naming them), an MTT memory key as `reg_mr` makes it, RC
//! traffic, and its teardown (no page reclaim, no DISABLE_HCA) followed by
//! the function reset VFIO performs on close.

use crate::common::devx::*;
use crate::common::qp::*;
use crate::common::*;
use mlx5_hal::Hal;
use mlx5_regs::layouts::*;
use mlx5_regs::{CmdStatus, EventType, Opcode};
use mlx5_sim::syndrome as sy;
use mlx5_sim::{HcaState, Profile};

/// CQ, RMP and QPs from UMEMs pass traffic on every profile; the client
/// tears down the rdma-core way and VFIO's function reset cleans up.
#[test]
fn devx_queues_from_umems_pass_traffic_on_every_profile() {
    for p in PROFILES {
        let (mut f, mut eq) = vfio_bring_up(p);
        let mode = mode_for(p);
        prepare_mode(&mut f, mode);
        let mut scq = UCq::new(&mut f, eq.eqn, 6);
        let mut rcq = UCq::new(&mut f, eq.eqn, 6);
        let rkey = dma_key(&mut f);
        let (mut rmp, rmp_umems) = umem_rmp(&mut f, rkey);
        let (mut a, a_umems) = umem_qp(&mut f, Some(4), None, scq.cqn, 0);
        let (b, b_umems) = umem_qp(&mut f, None, Some(rmp.n), 0, rcq.cqn);
        connect(&mut f, mode, &a, &b, 7);
        // reg_mr: an MTT key with page access bits over the send buffer,
        // at a virtual address unlike its IOVA.
        let src = f.hal.alloc_dma(4 * 4096).unwrap();
        let va = 0x7f00_1234_0000u64;
        let pages: Vec<u64> = (0..4).map(|k| src.iova() + 4096 * k).collect();
        let cmd = mkey_mtt_cmd(f.pd, va, 4 * 4096, &pages, true);
        let skey = create_mkey(&mut f, &cmd);
        rmp.post(8);
        rcq.arm(&f);
        for m in 0..6u32 {
            let len = 40 + 30 * m;
            let payload: Vec<u8> = (0..len).map(|i| (i as u8) ^ (m as u8 * 17)).collect();
            src.write_bytes(m as usize * 512, &payload);
            a.post(&f, &Wr::send(va + m as u64 * 512, len, skey));
            let r = rcq.wait(&f);
            assert_eq!(cqe64::opcode.get(&r), 2, "{p:?}: RESP_SEND");
            assert_eq!(cqe64::byte_cnt.get(&r), len);
            let idx = cqe64::wqe_counter.get(&r) as usize;
            assert_eq!(
                rmp.received(idx, len as usize),
                payload,
                "{p:?} message {m}"
            );
            let s = scq.wait(&f);
            assert_eq!(cqe64::opcode.get(&s), 0, "{p:?}: requester CQE");
        }
        // The completion event of the armed receive CQ went to the EQ.
        let comp = f
            .drain_eq(&mut eq)
            .iter()
            .filter(|e| eqe_type(e) == EventType::COMP.0)
            .count();
        assert_eq!(comp, 1, "{p:?}: one event per arm");
        // QUERY_QP with rdma-core's 272-byte output (no QPC extension).
        let mut q = inp(Opcode::QUERY_QP, query_qp_in::SIZE);
        query_qp_in::qpn.set(&mut q, a.qpn).unwrap();
        let o = f.ok(&q, 272);
        assert_eq!(o.len(), 272);
        assert_eq!(qpc::state.get(query_qp_out::qpc.get(&o)), 3, "RTS");
        // A UMEM in use cannot go.
        let busy = destroy_umem(&mut f, rmp_umems[0]);
        assert_eq!(
            (CmdStatus(busy.status), busy.syndrome),
            (CmdStatus::RES_BUSY, sy::UMEM_IN_USE)
        );
        assert!(f.dev.objects().umems >= 9);
        // Application cleanup, then rdma-core's context teardown.
        for qpn in [a.qpn, b.qpn] {
            f.ok(&qpn_cmd(Opcode::DESTROY_QP, qpn), destroy_qp_out::SIZE);
        }
        let mut d = inp(Opcode::DESTROY_RMP, destroy_rmp_in::SIZE);
        destroy_rmp_in::rmpn.set(&mut d, rmp.n).unwrap();
        f.ok(&d, destroy_rmp_out::SIZE);
        for cq in [&scq, &rcq] {
            let mut d = inp(Opcode::DESTROY_CQ, destroy_cq_in::SIZE);
            destroy_cq_in::cqn.set(&mut d, cq.cqn).unwrap();
            f.ok(&d, destroy_cq_out::SIZE);
        }
        let all: Vec<u32> = scq
            .umems
            .iter()
            .chain(&rcq.umems)
            .chain(&rmp_umems)
            .chain(&a_umems)
            .chain(&b_umems)
            .copied()
            .collect();
        for id in all {
            assert!(destroy_umem(&mut f, id).ok());
        }
        assert_eq!(f.dev.objects().umems, 0);
        let mut d = inp(Opcode::DESTROY_EQ, destroy_eq_in::SIZE);
        destroy_eq_in::eq_number.set(&mut d, eq.eqn).unwrap();
        f.ok(&d, destroy_eq_out::SIZE);
        let mut d = inp(Opcode::DEALLOC_UAR, dealloc_uar_in::SIZE);
        dealloc_uar_in::uar.set(&mut d, f.uar).unwrap();
        f.ok(&d, dealloc_uar_out::SIZE);
        let mut t = inp(Opcode::TEARDOWN_HCA, teardown_hca_in::SIZE);
        let fast = f.dev.caps().fast_teardown;
        teardown_hca_in::profile
            .set(&mut t, if fast { 2 } else { 0 })
            .unwrap();
        f.ok(&t, teardown_hca_out::SIZE);
        assert!(f.dev.pages_held() > 0, "rdma-core never reclaims");
        // VFIO closes the device: function reset. Then every buffer,
        // including the pages firmware held, may be freed.
        let r = f.hal.reset();
        assert_eq!(r.hca_state, Some(HcaState::TornDown));
        assert!(r.pages > 0);
        let dev = f.dev.clone();
        drop((f, scq, rcq, rmp, a, b, src));
        assert!(
            freed_while_in_use(&dev.violations()).is_empty(),
            "{p:?}: {:?}",
            dev.violations()
        );
        assert_eq!(dev.hca_state(), HcaState::Disabled);
        assert_eq!(dev.pages_held(), 0);
        assert_eq!(dev.objects().total(), 0);
    }
}

/// An application that exits without destroying anything: the reset on
/// close drops its live UMEM-based queues too.
#[test]
fn reset_drops_live_devx_objects() {
    let (mut f, eq) = vfio_bring_up(Profile::ConnectX6Dx);
    let cq = UCq::new(&mut f, eq.eqn, 4);
    let rkey = dma_key(&mut f);
    let (rmp, _) = umem_rmp(&mut f, rkey);
    let (qp, _) = umem_qp(&mut f, None, Some(rmp.n), 0, cq.cqn);
    let before = f.dev.objects();
    assert_eq!((before.qps, before.rmps, before.cqs), (1, 1, 1));
    assert_eq!(before.umems, 5);
    let r = f.hal.reset();
    assert_eq!(r.objects, before);
    assert_eq!(r.hca_state, Some(HcaState::Initialized));
    let dev = f.dev.clone();
    drop((f, cq, rmp, qp));
    assert!(freed_while_in_use(&dev.violations()).is_empty());
    assert_eq!(dev.objects().total(), 0);
}

/// Freeing a UMEM's memory while a CQ keeps its ring there is caught.
#[test]
fn freeing_umem_memory_in_use_is_a_violation() {
    let (mut f, eq) = vfio_bring_up(Profile::ConnectX5);
    let cq = UCq::new(&mut f, eq.eqn, 4);
    let dev = f.dev.clone();
    drop(cq.ring);
    assert!(!freed_while_in_use(&dev.violations()).is_empty());
}
