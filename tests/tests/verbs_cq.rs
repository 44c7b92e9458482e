//! The facade's CQ calls against the model: `create_cq`, `resize_cq`,
//! `destroy_cq` and how `poll_cq` maps receive completions to an SRQ's
//! requests (the events of a CQ are in `verbs_cq_events.rs`). One test per
//! semantic bullet, named after the call and the case; every test closes the
//! context and checks that the model is clean.

use mlx5_driver::unstable;
use mlx5_driver::verbs::{Errno, RecvWr, Verbs, WcOpcode, WcStatus, WorkCompletion};
use mlx5_regs::Opcode;
use mlx5_sim::{Delivery, Device, SimConfig, SimHal};
use mlx5_tests::{assert_clean, bring_up};

use mlx5_tests::verbs_cq_srq_common::*;

// ============================================================ create_cq

#[test]
fn create_cq_rounds_up_to_a_power_of_two_minus_one_and_reports_it() {
    at_issi(1, "create_cq rounding", |dev, ctx| {
        let max = ctx.query_device().max_cqe;
        for (ask, want) in [
            (1, 1),
            (2, 3),
            (3, 3),
            (4, 7),
            (100, 127),
            (127, 127),
            (128, 255),
        ] {
            let (cq, cqe) = ctx.create_cq(ask).unwrap();
            assert_eq!(cqe, want, "create_cq({ask})");
            assert_eq!(ctx.cqe(cq).unwrap(), want);
            // It really holds that many.
            fill(dev, ctx, cq, 0, want);
            assert_eq!(drain(ctx, cq).len(), want as usize);
            ctx.destroy_cq(cq).unwrap();
        }
        let (cq, cqe) = ctx.create_cq(max).unwrap();
        assert_eq!(cqe, max, "the largest is exactly max_cqe");
        ctx.destroy_cq(cq).unwrap();
    });
}

#[test]
fn create_cq_outside_1_to_max_cqe_is_einval_without_a_command() {
    at_issi(1, "create_cq range", |dev, ctx| {
        let max = ctx.query_device().max_cqe;
        let before = commands(dev, Opcode::CREATE_CQ);
        for bad in [0, max + 1, u32::MAX] {
            assert_eq!(ctx.create_cq(bad).unwrap_err(), Errno::EINVAL, "cqe {bad}");
        }
        assert_eq!(commands(dev, Opcode::CREATE_CQ), before);
    });
}

#[test]
fn create_cq_with_the_table_full_is_enomem() {
    let dev = device(1);
    let mut ctx: Verbs<SimHal, (), 2, 2> = Verbs::open(bring_up(&dev));
    let a = ctx.create_cq(1).unwrap().0;
    let b = ctx.create_cq(1).unwrap().0;
    assert_eq!(ctx.create_cq(1).unwrap_err(), Errno::ENOMEM);
    ctx.destroy_cq(a).unwrap();
    let c = ctx.create_cq(1).unwrap().0;
    assert_ne!(a, c, "a reused slot has a new generation");
    ctx.destroy_cq(b).unwrap();
    ctx.destroy_cq(c).unwrap();
    ctx.close().unwrap();
    assert_clean(&dev, "table full");
}

// ============================================================ resize_cq

#[test]
fn resize_cq_grow_and_shrink_keep_unpolled_completions_in_order() {
    at_issi(1, "resize order", |dev, ctx| {
        let (cq, _) = ctx.create_cq(63).unwrap();
        fill(dev, ctx, cq, 0, 40);
        // Poll a few so the consumer index is not at 0.
        let mut wc = [WorkCompletion::EMPTY; 5];
        assert_eq!(ctx.poll_cq(cq, &mut wc).unwrap(), 5);
        assert_eq!(ctx.resize_cq(cq, 500).unwrap(), 511);
        fill(dev, ctx, cq, 40, 10);
        assert_eq!(ctx.resize_cq(cq, 50).unwrap(), 63, "shrink, 45 waiting");
        fill(dev, ctx, cq, 50, 5);
        expect_numbers(ctx, cq, 5..55);
        ctx.destroy_cq(cq).unwrap();
    });
}

#[test]
fn resize_cq_of_an_armed_cq_still_delivers_its_one_event() {
    at_issi(1, "resize armed", |dev, ctx| {
        let (cq, _) = ctx.create_cq(15).unwrap();
        fill(dev, ctx, cq, 0, 3);
        drain(ctx, cq);
        ctx.req_notify_cq(cq, false).unwrap();
        assert_eq!(ctx.resize_cq(cq, 200).unwrap(), 255);
        assert!(cq_events(ctx).is_empty());
        fill(dev, ctx, cq, 3, 2);
        assert_eq!(cq_events(ctx), [cq], "the arm survived the resize");
        ctx.ack_cq_events(cq, 1).unwrap();
        expect_numbers(ctx, cq, [3, 4]);
        ctx.destroy_cq(cq).unwrap();
    });
}

#[test]
fn resize_cq_to_a_size_that_rounds_to_the_current_one_succeeds_without_a_command() {
    at_issi(1, "resize same", |dev, ctx| {
        let (cq, _) = ctx.create_cq(100).unwrap();
        fill(dev, ctx, cq, 0, 20);
        let before = commands(dev, Opcode::MODIFY_CQ);
        for same in [64, 100, 127] {
            assert_eq!(ctx.resize_cq(cq, same).unwrap(), 127, "resize_cq({same})");
        }
        assert_eq!(commands(dev, Opcode::MODIFY_CQ), before);
        expect_numbers(ctx, cq, 0..20);
        ctx.destroy_cq(cq).unwrap();
    });
}

#[test]
fn resize_cq_to_an_invalid_size_is_einval_and_changes_nothing() {
    at_issi(1, "resize invalid", |dev, ctx| {
        let max = ctx.query_device().max_cqe;
        let (cq, _) = ctx.create_cq(100).unwrap();
        fill(dev, ctx, cq, 0, 5);
        let before = commands(dev, Opcode::MODIFY_CQ);
        for bad in [0, max + 1, u32::MAX] {
            assert_eq!(ctx.resize_cq(cq, bad).unwrap_err(), Errno::EINVAL, "{bad}");
        }
        assert_eq!(commands(dev, Opcode::MODIFY_CQ), before);
        assert_eq!(ctx.cqe(cq).unwrap(), 127);
        expect_numbers(ctx, cq, 0..5);
        ctx.destroy_cq(cq).unwrap();
    });
}

#[test]
fn resize_cq_to_fewer_entries_than_completions_in_the_cq_is_einval_and_the_cq_keeps_working() {
    at_issi(1, "resize below outstanding", |dev, ctx| {
        let (cq, _) = ctx.create_cq(63).unwrap();
        fill(dev, ctx, cq, 0, 20);
        ctx.req_notify_cq(cq, false).unwrap();
        assert_eq!(ctx.resize_cq(cq, 7).unwrap_err(), Errno::EINVAL);
        assert_eq!(ctx.cqe(cq).unwrap(), 63, "exactly as it was");
        // Still armed, still holding all 20 in order, still taking more.
        fill(dev, ctx, cq, 20, 30);
        assert_eq!(cq_events(ctx), [cq]);
        ctx.ack_cq_events(cq, 1).unwrap();
        expect_numbers(ctx, cq, 0..50);
        // And with the CQ emptied the same shrink works.
        assert_eq!(ctx.resize_cq(cq, 7).unwrap(), 7);
        ctx.destroy_cq(cq).unwrap();
    });
}

#[test]
fn resize_cq_when_memory_runs_out_is_enomem_and_the_cq_keeps_working() {
    let dev = Device::new(SimConfig {
        dma_limit: 64 << 20,
        ..SimConfig::default()
    });
    let mut ctx = open(&dev);
    let max = ctx.query_device().max_cqe;
    let (cq, _) = ctx.create_cq(100).unwrap();
    fill(&dev, &ctx, cq, 0, 10);
    // 2^22 CQEs of 64 bytes need 256 MiB; the platform has 64 MiB.
    assert_eq!(ctx.resize_cq(cq, max).unwrap_err(), Errno::ENOMEM);
    assert_eq!(ctx.cqe(cq).unwrap(), 127);
    fill(&dev, &ctx, cq, 10, 10);
    assert_eq!(
        ctx.resize_cq(cq, 2000).unwrap(),
        2047,
        "a size that fits works"
    );
    expect_numbers(&mut ctx, cq, 0..20);
    ctx.destroy_cq(cq).unwrap();
    close(&dev, ctx, "resize enomem");
}

#[test]
fn resize_cq_without_the_cq_resize_capability_is_enosys() {
    let dev = device(1);
    dev.caps_mut(|c| c.cq_resize = false);
    let mut ctx = open(&dev);
    let (cq, _) = ctx.create_cq(100).unwrap();
    fill(&dev, &ctx, cq, 0, 3);
    assert_eq!(ctx.resize_cq(cq, 1000).unwrap_err(), Errno::ENOSYS);
    assert_eq!(
        ctx.resize_cq(cq, 127).unwrap(),
        127,
        "same size: nothing to do, as in rdma-core"
    );
    assert_eq!(commands(&dev, Opcode::MODIFY_CQ), 0);
    expect_numbers(&mut ctx, cq, [0, 1, 2]);
    ctx.destroy_cq(cq).unwrap();
    close(&dev, ctx, "resize enosys");
}

// ============================================================ destroy_cq

#[test]
fn destroy_cq_with_unpolled_completions_and_a_pending_arm_succeeds() {
    at_issi(1, "destroy pending", |dev, ctx| {
        let (cq, _) = ctx.create_cq(15).unwrap();
        fill(dev, ctx, cq, 0, 2);
        drain(ctx, cq);
        ctx.req_notify_cq(cq, true).unwrap();
        fill(dev, ctx, cq, 2, 9);
        ctx.destroy_cq(cq).unwrap();
    });
}

#[test]
fn destroy_cq_used_by_an_srq_is_ebusy_and_the_cq_keeps_working() {
    at_each_issi("destroy busy", |issi, dev, ctx| {
        let s = Srq::naming_cq(dev, ctx, 15);
        assert_eq!(
            ctx.destroy_cq(s.cq).unwrap_err(),
            Errno::EBUSY,
            "ISSI {issi}"
        );
        s.post(ctx, 0, 2).unwrap();
        s.deliver(dev, ctx, b"still works");
        let got = drain(ctx, s.cq);
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].wr_id, got[0].byte_len), (0, 11));
        s.destroy(ctx);
    });
}

// ============================================================ poll_cq

#[test]
fn poll_cq_maps_receive_cqes_to_the_srq_wr_id_and_decodes_errors() {
    at_each_issi("poll mapping", |issi, dev, ctx| {
        let s = Srq::new(dev, ctx, 31);
        s.post(ctx, 100, 4).unwrap();
        s.deliver(dev, ctx, &[1u8; 40]);
        assert!(matches!(
            s.deliver(dev, ctx, &[2u8; BUF + 1]),
            Delivery::LengthError { .. }
        ));
        s.deliver(dev, ctx, &[3u8; 7]);
        let got = drain(ctx, s.cq);
        let srqn = Some(ctx.srq_num(s.srq).unwrap());
        assert_eq!(got.len(), 3, "ISSI {issi}");
        assert_eq!(
            (
                got[0].wr_id,
                got[0].status,
                got[0].opcode,
                got[0].byte_len,
                got[0].srq_num
            ),
            (100, WcStatus::Success, WcOpcode::Recv, 40, srqn)
        );
        assert_eq!(got[0].qp_num, QPN);
        assert_eq!(
            (got[1].wr_id, got[1].status, got[1].opcode),
            (101, WcStatus::LocLenErr, WcOpcode::Recv),
            "the error completion still returns its slot's wr_id"
        );
        assert_eq!((got[2].wr_id, got[2].byte_len), (102, 7));
        let mut data = [0u8; 40];
        s.bufs.region.read_bytes(100 * BUF, &mut data);
        assert_eq!(data, [1u8; 40]);
        assert_eq!(ctx.srq(s.srq).unwrap().outstanding(), 1);
        assert_eq!(ctx.stats().unmatched_cqes, 0);
        s.destroy(ctx);
    });
}

#[test]
fn poll_cq_cqe_naming_an_unknown_srq_is_a_counted_error_completion() {
    at_issi(1, "unknown srq", |dev, ctx| {
        let bufs = Bufs::new(dev, ctx);
        let (cq, _) = ctx.create_cq(63).unwrap();
        // An RMP the context does not know (made behind its back).
        let mut foreign = ctx.hca().create_srq(7, 1, None).unwrap();
        let sge = [bufs.sge(0)];
        foreign
            .post(&[RecvWr {
                wr_id: 77,
                sges: &sge,
            }])
            .unwrap();
        dev.traffic()
            .deliver(foreign.srqn(), ctx.cq_num(cq).unwrap(), QPN, b"who?")
            .unwrap();
        fill(dev, ctx, cq, 5, 1);
        let got = drain(ctx, cq);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].status, WcStatus::GeneralErr);
        assert_eq!(got[0].vendor_err, WorkCompletion::VENDOR_ERR_UNMATCHED);
        assert_eq!(got[0].wr_id, 0);
        assert_eq!(got[0].srq_num, Some(foreign.srqn()));
        // An injected requester CQE (no QP of this context): unmatched too,
        // and polling goes on.
        assert_eq!(
            (got[1].status, got[1].byte_len),
            (WcStatus::GeneralErr, 5),
            "polling goes on"
        );
        assert_eq!(ctx.stats().unmatched_cqes, 2);
        ctx.hca()
            .destroy_srq(foreign, None)
            .map_err(|e| e.error())
            .unwrap();
        ctx.destroy_cq(cq).unwrap();
    });
}

#[test]
fn poll_cq_cqe_naming_a_wqe_never_posted_is_a_counted_error_completion() {
    at_each_issi("never posted", |issi, dev, ctx| {
        let s = Srq::new(dev, ctx, 15);
        s.post(ctx, 10, 2).unwrap();
        // Corrupt WQE 0's next pointer so the device walks to WQE 9, which
        // was never posted (a device or memory fault the driver must survive).
        {
            let ring = unstable::srq::ring(ctx.srq(s.srq).unwrap());
            let off = ring.base_offset();
            ring.region().write_be16(off + 2, 9);
        }
        s.deliver(dev, ctx, b"ok");
        let second = s.deliver(dev, ctx, b"bad");
        assert!(
            matches!(
                second,
                Delivery::Completed { wqe_index: 9 }
                    | Delivery::LengthError { wqe_index: 9 }
                    | Delivery::ProtectionError { wqe_index: 9 }
            ),
            "{second:?}"
        );
        let got = drain(ctx, s.cq);
        assert_eq!(got.len(), 2, "ISSI {issi}");
        assert_eq!((got[0].wr_id, got[0].status), (10, WcStatus::Success));
        assert_eq!(got[1].status, WcStatus::GeneralErr);
        assert_eq!(got[1].vendor_err, WorkCompletion::VENDOR_ERR_UNMATCHED);
        assert_eq!(ctx.stats().unmatched_cqes, 1);
        assert_eq!(
            ctx.srq(s.srq).unwrap().outstanding(),
            1,
            "WQE 1 still posted"
        );
        s.destroy(ctx);
    });
}
