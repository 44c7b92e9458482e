//! The verbs-compatible facade against the model (issue 6): one test per
//! semantic bullet, named after the verbs call and the case, and the three
//! seed scenarios end to end. SRQ tests run at ISSI 0 (SRQ) and ISSI 1
//! (RMP). Every test closes the context and checks that the model holds no
//! object, no page, saw no protocol violation and no IOMMU fault (the one
//! exception, a dead device, says so).

use mlx5_driver::verbs::{
    AsyncEvent, AsyncEventType, CqHandle, DeviceAttr, Errno, EventElement, PostSrqError, RecvWr,
    Sge, SrqAttr, SrqAttrMask, SrqHandle, SrqInitAttr, Verbs, WcOpcode, WcStatus, WorkCompletion,
};
use mlx5_hal::{DmaRegion, Hal};
use mlx5_regs::layouts::{cq_error, eqe, port_state_change_event, qp_events};
use mlx5_regs::{EventType, Opcode};
use mlx5_sim::{Delivery, Device, ExecMode, SimConfig, SimHal};
use mlx5_tests::{assert_clean, bring_up, PROFILES};

mod verbs_common;

use verbs_common::{cq_events, Ctx};

const QPN: u32 = 0x4d;
const BUF: usize = 256;

fn device(issi: u16) -> Device {
    Device::new(SimConfig {
        issi_supported: if issi == 0 { 0b01 } else { 0b11 },
        ..SimConfig::default()
    })
}

fn open(dev: &Device) -> Ctx {
    Verbs::open(bring_up(dev))
}

fn close(dev: &Device, ctx: Ctx, what: &str) {
    if let Err(e) = ctx.close() {
        panic!("{what}: close failed: {e}");
    }
    assert_clean(dev, what);
}

/// Requester completions numbered `first..first+n` (wqe_counter and
/// byte_len carry the number).
fn fill(dev: &Device, ctx: &Ctx, cq: CqHandle, first: u32, n: u32) {
    let cqn = ctx.cq_num(cq).unwrap();
    for seq in first..first + n {
        dev.traffic()
            .complete_send(cqn, QPN, seq as u16, seq)
            .expect("complete_send");
    }
}

/// Poll until empty, in batches of 7 (not a divisor of anything used).
fn drain(ctx: &mut Ctx, cq: CqHandle) -> Vec<WorkCompletion> {
    let mut wc = [WorkCompletion::EMPTY; 7];
    let mut got = Vec::new();
    loop {
        let n = ctx.poll_cq(cq, &mut wc).unwrap();
        got.extend_from_slice(&wc[..n]);
        if n < wc.len() {
            return got;
        }
    }
}

fn byte_lens(wcs: &[WorkCompletion]) -> Vec<u32> {
    wcs.iter().map(|w| w.byte_len).collect()
}

/// Every async event readable now (not acknowledged).
fn async_events(ctx: &mut Ctx) -> Vec<AsyncEvent> {
    let mut v = Vec::new();
    loop {
        match ctx.get_async_event() {
            Ok(ev) => v.push(ev),
            Err(e) => {
                assert_eq!(e, Errno::EAGAIN);
                return v;
            }
        }
    }
}

fn ack_all(ctx: &mut Ctx, evs: &[AsyncEvent]) {
    for ev in evs {
        ctx.ack_async_event(ev).unwrap();
    }
}

fn commands(dev: &Device, opcode: Opcode) -> usize {
    dev.trace().iter().filter(|t| t.opcode == opcode.0).count()
}

/// Receive buffers for SRQ tests.
struct Bufs {
    region: DmaRegion<SimHal>,
    lkey: u32,
}

impl Bufs {
    fn new(dev: &Device, ctx: &Ctx) -> Bufs {
        Bufs {
            region: dev.hal().alloc_dma(BUF * 256).unwrap(),
            lkey: ctx.hca().default_lkey(),
        }
    }

    fn sge(&self, wr_id: u64) -> Sge {
        Sge {
            addr: self.region.iova() + (wr_id % 256) * BUF as u64,
            length: BUF as u32,
            lkey: self.lkey,
        }
    }

    /// Post ids `first..first+n`, one SGE each.
    fn post(&self, ctx: &mut Ctx, srq: SrqHandle, first: u64, n: u64) -> Result<(), PostSrqError> {
        let sges: Vec<[Sge; 1]> = (first..first + n).map(|id| [self.sge(id)]).collect();
        let wrs: Vec<RecvWr> = sges
            .iter()
            .zip(first..)
            .map(|(s, wr_id)| RecvWr { wr_id, sges: s })
            .collect();
        ctx.post_srq_recv(srq, &wrs)
    }
}

fn deliver(dev: &Device, ctx: &Ctx, srq: SrqHandle, cq: CqHandle, payload: &[u8]) -> Delivery {
    dev.traffic()
        .deliver(
            ctx.srq_num(srq).unwrap(),
            ctx.cq_num(cq).unwrap(),
            QPN,
            payload,
        )
        .expect("deliver")
}

fn srq_attr(max_wr: u32, max_sge: u32) -> SrqInitAttr {
    SrqInitAttr {
        max_wr,
        max_sge,
        ..SrqInitAttr::default()
    }
}

fn limit(n: u32) -> SrqAttr {
    SrqAttr {
        srq_limit: n,
        ..SrqAttr::default()
    }
}

fn limit_events(ctx: &mut Ctx, srq: SrqHandle) -> usize {
    let evs = async_events(ctx);
    for ev in &evs {
        assert_eq!(
            *ev,
            AsyncEvent {
                event_type: AsyncEventType::SrqLimitReached,
                element: EventElement::Srq(srq),
                detail: mlx5_driver::verbs::AsyncEventDetail::None,
            }
        );
    }
    ack_all(ctx, &evs);
    evs.len()
}

fn eqe_with(event_type: EventType, sub_type: u8, f: impl FnOnce(&mut [u8])) -> [u8; 64] {
    let mut e = [0u8; 64];
    eqe::event_type.set(&mut e, event_type.0).unwrap();
    eqe::event_sub_type.set(&mut e, sub_type).unwrap();
    f(eqe::event_data.get_mut(&mut e));
    e
}

fn eqe_cq_error(cqn: u32) -> [u8; 64] {
    eqe_with(EventType::CQ_ERROR, 0, |d| {
        cq_error::cqn.set(d, cqn).unwrap();
        cq_error::syndrome.set(d, 1).unwrap();
    })
}

fn eqe_queue(t: EventType, num: u32) -> [u8; 64] {
    eqe_with(t, 0, |d| {
        qp_events::r#type.set(d, 1).unwrap();
        qp_events::qpn_rqn_sqn.set(d, num).unwrap();
    })
}

/// A QP event (`qp_events.type` 0 = QP) about QP `qpn`.
fn eqe_qp(t: EventType, qpn: u32) -> [u8; 64] {
    eqe_with(t, 0, |d| {
        qp_events::r#type.set(d, 0).unwrap();
        qp_events::qpn_rqn_sqn.set(d, qpn).unwrap();
    })
}

fn eqe_port(port: u8, subtype: u8) -> [u8; 64] {
    eqe_with(EventType::PORT_CHANGE, subtype, |d| {
        port_state_change_event::port_num.set(d, port).unwrap();
    })
}

// ============================================================ seeds

#[test]
fn seed_1_resize_cq_100_to_2000_with_a_full_cq_polls_every_completion_in_order() {
    let dev = device(1);
    let mut ctx = open(&dev);
    let (cq, cqe) = ctx.create_cq(100).unwrap();
    assert_eq!(cqe, 127);
    fill(&dev, &ctx, cq, 0, cqe);
    assert_eq!(ctx.resize_cq(cq, 2000).unwrap(), 2047);
    assert_eq!(ctx.cqe(cq).unwrap(), 2047);
    // More after the resize land behind the copied ones.
    fill(&dev, &ctx, cq, cqe, 1500);
    let got = drain(&mut ctx, cq);
    assert_eq!(byte_lens(&got), (0..cqe + 1500).collect::<Vec<_>>());
    // Injected requester CQEs name no QP of this context: each one comes
    // out, in order, as an unmatched error completion.
    assert!(got.iter().all(|w| w.status == WcStatus::GeneralErr
        && w.vendor_err == WorkCompletion::VENDOR_ERR_UNMATCHED
        && w.qp_num == QPN));
    assert_eq!(ctx.stats().unmatched_cqes, (cqe + 1500) as u64);
    ctx.destroy_cq(cq).unwrap();
    close(&dev, ctx, "seed 1");
}

#[test]
fn seed_2_modify_srq_limit_7_fires_after_the_4th_receive_then_again_after_rearm() {
    for issi in [0, 1] {
        let dev = device(issi);
        let mut ctx = open(&dev);
        let bufs = Bufs::new(&dev, &ctx);
        let (cq, _) = ctx.create_cq(255).unwrap();
        let (srq, attr) = ctx.create_srq(&srq_attr(15, 1)).unwrap();
        assert_eq!(attr.max_wr, 15);
        bufs.post(&mut ctx, srq, 0, 10).unwrap();
        ctx.modify_srq(srq, &limit(7), SrqAttrMask::LIMIT).unwrap();
        assert_eq!(ctx.query_srq(srq).unwrap().srq_limit, 7);
        for i in 1..=3 {
            deliver(&dev, &ctx, srq, cq, b"hello");
            assert_eq!(limit_events(&mut ctx, srq), 0, "ISSI {issi}: receive {i}");
        }
        deliver(&dev, &ctx, srq, cq, b"hello");
        let evs = async_events(&mut ctx);
        assert_eq!(
            evs,
            [AsyncEvent {
                event_type: AsyncEventType::SrqLimitReached,
                element: EventElement::Srq(srq),
                detail: mlx5_driver::verbs::AsyncEventDetail::None,
            }],
            "ISSI {issi}: fires after the 4th receive"
        );
        ctx.ack_async_event(&evs[0]).unwrap();
        assert_eq!(ctx.query_srq(srq).unwrap().srq_limit, 0);
        let got = drain(&mut ctx, cq);
        assert_eq!(
            got.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        // Post more, re-arm, see it fire again.
        bufs.post(&mut ctx, srq, 10, 9).unwrap();
        assert_eq!(ctx.srq(srq).unwrap().outstanding(), 15);
        ctx.modify_srq(srq, &limit(12), SrqAttrMask::LIMIT).unwrap();
        for _ in 0..3 {
            deliver(&dev, &ctx, srq, cq, b"x");
        }
        assert_eq!(limit_events(&mut ctx, srq), 0, "12 left: not below 12");
        deliver(&dev, &ctx, srq, cq, b"x");
        assert_eq!(limit_events(&mut ctx, srq), 1, "ISSI {issi}: fires again");
        assert_eq!(drain(&mut ctx, cq).len(), 4);
        ctx.destroy_srq(srq).unwrap();
        ctx.destroy_cq(cq).unwrap();
        drop(bufs);
        close(&dev, ctx, "seed 2");
    }
}

#[test]
fn seed_3_destroy_cq_of_100_with_completions_in_it() {
    let dev = device(1);
    let mut ctx = open(&dev);
    let (cq, cqe) = ctx.create_cq(100).unwrap();
    assert_eq!(cqe, 127);
    fill(&dev, &ctx, cq, 0, 100);
    let mut wc = [WorkCompletion::EMPTY; 10];
    assert_eq!(
        ctx.poll_cq(cq, &mut wc).unwrap(),
        10,
        "some polled, 90 left"
    );
    ctx.destroy_cq(cq).unwrap();
    assert_eq!(ctx.cqe(cq), Err(Errno::EINVAL), "handle is stale");
    close(&dev, ctx, "seed 3");
}

// ============================================================ query_device

#[test]
fn query_device_reports_the_attributes_mlx5_derives_and_no_srq_resize() {
    for profile in PROFILES {
        let dev = Device::new(SimConfig::profile(profile));
        let ctx = open(&dev);
        let caps = dev.caps();
        let a = ctx.query_device();
        assert_eq!(a.max_cqe, (1u32 << caps.log_max_cq_sz) - 1, "{profile:?}");
        assert_eq!(a.max_cq, 1u32 << caps.log_max_cq);
        assert_eq!(a.max_srq, 1u32 << caps.log_max_srq);
        assert_eq!(a.max_srq_wr, (1u32 << caps.log_max_srq_sz) - 1);
        assert_eq!(a.max_srq_sge, caps.max_wqe_sz_rq as u32 / 16 - 1);
        assert_eq!(a.device_cap_flags & DeviceAttr::SRQ_RESIZE, 0);
        assert_eq!(a.phys_port_cnt, caps.num_ports);
        assert_eq!(a.fw_ver, caps.fw_rev);
        close(&dev, ctx, "query_device");
    }
}

// ============================================================ create_cq

#[test]
fn create_cq_rounds_up_to_a_power_of_two_minus_one_and_reports_it() {
    let dev = device(1);
    let mut ctx = open(&dev);
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
        fill(&dev, &ctx, cq, 0, want);
        assert_eq!(drain(&mut ctx, cq).len(), want as usize);
        ctx.destroy_cq(cq).unwrap();
    }
    let (cq, cqe) = ctx.create_cq(max).unwrap();
    assert_eq!(cqe, max, "the largest is exactly max_cqe");
    ctx.destroy_cq(cq).unwrap();
    close(&dev, ctx, "create_cq rounding");
}

#[test]
fn create_cq_outside_1_to_max_cqe_is_einval_without_a_command() {
    let dev = device(1);
    let mut ctx = open(&dev);
    let max = ctx.query_device().max_cqe;
    let before = commands(&dev, Opcode::CREATE_CQ);
    for bad in [0, max + 1, u32::MAX] {
        assert_eq!(ctx.create_cq(bad).unwrap_err(), Errno::EINVAL, "cqe {bad}");
    }
    assert_eq!(commands(&dev, Opcode::CREATE_CQ), before);
    close(&dev, ctx, "create_cq range");
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
    let dev = device(1);
    let mut ctx = open(&dev);
    let (cq, _) = ctx.create_cq(63).unwrap();
    fill(&dev, &ctx, cq, 0, 40);
    // Poll a few so the consumer index is not at 0.
    let mut wc = [WorkCompletion::EMPTY; 5];
    assert_eq!(ctx.poll_cq(cq, &mut wc).unwrap(), 5);
    assert_eq!(ctx.resize_cq(cq, 500).unwrap(), 511);
    fill(&dev, &ctx, cq, 40, 10);
    assert_eq!(ctx.resize_cq(cq, 50).unwrap(), 63, "shrink, 45 waiting");
    fill(&dev, &ctx, cq, 50, 5);
    let got = drain(&mut ctx, cq);
    assert_eq!(byte_lens(&got), (5..55).collect::<Vec<_>>());
    ctx.destroy_cq(cq).unwrap();
    close(&dev, ctx, "resize order");
}

#[test]
fn resize_cq_of_an_armed_cq_still_delivers_its_one_event() {
    let dev = device(1);
    let mut ctx = open(&dev);
    let (cq, _) = ctx.create_cq(15).unwrap();
    fill(&dev, &ctx, cq, 0, 3);
    drain(&mut ctx, cq);
    ctx.req_notify_cq(cq, false).unwrap();
    assert_eq!(ctx.resize_cq(cq, 200).unwrap(), 255);
    assert!(cq_events(&mut ctx).is_empty());
    fill(&dev, &ctx, cq, 3, 2);
    assert_eq!(cq_events(&mut ctx), [cq], "the arm survived the resize");
    ctx.ack_cq_events(cq, 1).unwrap();
    assert_eq!(byte_lens(&drain(&mut ctx, cq)), [3, 4]);
    ctx.destroy_cq(cq).unwrap();
    close(&dev, ctx, "resize armed");
}

#[test]
fn resize_cq_to_a_size_that_rounds_to_the_current_one_succeeds_without_a_command() {
    let dev = device(1);
    let mut ctx = open(&dev);
    let (cq, _) = ctx.create_cq(100).unwrap();
    fill(&dev, &ctx, cq, 0, 20);
    let before = commands(&dev, Opcode::MODIFY_CQ);
    for same in [64, 100, 127] {
        assert_eq!(ctx.resize_cq(cq, same).unwrap(), 127, "resize_cq({same})");
    }
    assert_eq!(commands(&dev, Opcode::MODIFY_CQ), before);
    assert_eq!(byte_lens(&drain(&mut ctx, cq)), (0..20).collect::<Vec<_>>());
    ctx.destroy_cq(cq).unwrap();
    close(&dev, ctx, "resize same");
}

#[test]
fn resize_cq_to_an_invalid_size_is_einval_and_changes_nothing() {
    let dev = device(1);
    let mut ctx = open(&dev);
    let max = ctx.query_device().max_cqe;
    let (cq, _) = ctx.create_cq(100).unwrap();
    fill(&dev, &ctx, cq, 0, 5);
    let before = commands(&dev, Opcode::MODIFY_CQ);
    for bad in [0, max + 1, u32::MAX] {
        assert_eq!(ctx.resize_cq(cq, bad).unwrap_err(), Errno::EINVAL, "{bad}");
    }
    assert_eq!(commands(&dev, Opcode::MODIFY_CQ), before);
    assert_eq!(ctx.cqe(cq).unwrap(), 127);
    assert_eq!(byte_lens(&drain(&mut ctx, cq)), (0..5).collect::<Vec<_>>());
    ctx.destroy_cq(cq).unwrap();
    close(&dev, ctx, "resize invalid");
}

#[test]
fn resize_cq_to_fewer_entries_than_completions_in_the_cq_is_einval_and_the_cq_keeps_working() {
    let dev = device(1);
    let mut ctx = open(&dev);
    let (cq, _) = ctx.create_cq(63).unwrap();
    fill(&dev, &ctx, cq, 0, 20);
    ctx.req_notify_cq(cq, false).unwrap();
    assert_eq!(ctx.resize_cq(cq, 7).unwrap_err(), Errno::EINVAL);
    assert_eq!(ctx.cqe(cq).unwrap(), 63, "exactly as it was");
    // Still armed, still holding all 20 in order, still taking more.
    fill(&dev, &ctx, cq, 20, 30);
    assert_eq!(cq_events(&mut ctx), [cq]);
    ctx.ack_cq_events(cq, 1).unwrap();
    assert_eq!(byte_lens(&drain(&mut ctx, cq)), (0..50).collect::<Vec<_>>());
    // And with the CQ emptied the same shrink works.
    assert_eq!(ctx.resize_cq(cq, 7).unwrap(), 7);
    ctx.destroy_cq(cq).unwrap();
    close(&dev, ctx, "resize below outstanding");
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
    assert_eq!(byte_lens(&drain(&mut ctx, cq)), (0..20).collect::<Vec<_>>());
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
    assert_eq!(byte_lens(&drain(&mut ctx, cq)), [0, 1, 2]);
    ctx.destroy_cq(cq).unwrap();
    close(&dev, ctx, "resize enosys");
}

// ============================================================ destroy_cq

#[test]
fn destroy_cq_with_unpolled_completions_and_a_pending_arm_succeeds() {
    let dev = device(1);
    let mut ctx = open(&dev);
    let (cq, _) = ctx.create_cq(15).unwrap();
    fill(&dev, &ctx, cq, 0, 2);
    drain(&mut ctx, cq);
    ctx.req_notify_cq(cq, true).unwrap();
    fill(&dev, &ctx, cq, 2, 9);
    ctx.destroy_cq(cq).unwrap();
    close(&dev, ctx, "destroy pending");
}

#[test]
fn destroy_cq_used_by_an_srq_is_ebusy_and_the_cq_keeps_working() {
    for issi in [0, 1] {
        let dev = device(issi);
        let mut ctx = open(&dev);
        let bufs = Bufs::new(&dev, &ctx);
        let (cq, _) = ctx.create_cq(63).unwrap();
        let (srq, _) = ctx
            .create_srq(&SrqInitAttr {
                cq: Some(cq),
                ..srq_attr(15, 1)
            })
            .unwrap();
        assert_eq!(ctx.destroy_cq(cq).unwrap_err(), Errno::EBUSY, "ISSI {issi}");
        bufs.post(&mut ctx, srq, 0, 2).unwrap();
        deliver(&dev, &ctx, srq, cq, b"still works");
        let got = drain(&mut ctx, cq);
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].wr_id, got[0].byte_len), (0, 11));
        ctx.destroy_srq(srq).unwrap();
        ctx.destroy_cq(cq).unwrap();
        drop(bufs);
        close(&dev, ctx, "destroy busy");
    }
}

#[test]
fn destroy_cq_with_a_read_unacknowledged_completion_event_is_ebusy_until_acked() {
    let dev = device(1);
    let mut ctx = open(&dev);
    let (cq, _) = ctx.create_cq(15).unwrap();
    ctx.req_notify_cq(cq, false).unwrap();
    fill(&dev, &ctx, cq, 0, 1);
    assert_eq!(ctx.get_cq_event().unwrap(), cq);
    assert_eq!(ctx.destroy_cq(cq).unwrap_err(), Errno::EBUSY);
    // Nothing changed: the completion is still there, the CQ re-arms.
    assert_eq!(byte_lens(&drain(&mut ctx, cq)), [0]);
    ctx.req_notify_cq(cq, false).unwrap();
    fill(&dev, &ctx, cq, 1, 1);
    assert_eq!(cq_events(&mut ctx), [cq]);
    ctx.ack_cq_events(cq, 2).unwrap();
    ctx.destroy_cq(cq).unwrap();
    close(&dev, ctx, "destroy unacked");
}

#[test]
fn destroy_cq_with_an_unacknowledged_cq_error_event_is_ebusy() {
    let dev = device(1);
    let mut ctx = open(&dev);
    let (cq, _) = ctx.create_cq(15).unwrap();
    dev.traffic()
        .raise_event(eqe_cq_error(ctx.cq_num(cq).unwrap()))
        .unwrap();
    let evs = async_events(&mut ctx);
    assert_eq!(
        evs,
        [AsyncEvent {
            event_type: AsyncEventType::CqErr,
            element: EventElement::Cq(cq),
            // The injected EQE says syndrome 1.
            detail: mlx5_driver::verbs::AsyncEventDetail::CqError(
                mlx5_driver::cq::CqErrorCause::Overrun
            ),
        }]
    );
    assert_eq!(ctx.destroy_cq(cq).unwrap_err(), Errno::EBUSY);
    ctx.ack_async_event(&evs[0]).unwrap();
    ctx.destroy_cq(cq).unwrap();
    close(&dev, ctx, "destroy cq error");
}

#[test]
fn destroy_cq_discards_its_unread_events() {
    let dev = device(1);
    let mut ctx = open(&dev);
    let (a, _) = ctx.create_cq(15).unwrap();
    let (b, _) = ctx.create_cq(15).unwrap();
    ctx.req_notify_cq(a, false).unwrap();
    ctx.req_notify_cq(b, false).unwrap();
    fill(&dev, &ctx, a, 0, 1);
    fill(&dev, &ctx, b, 0, 1);
    dev.traffic()
        .raise_event(eqe_cq_error(ctx.cq_num(a).unwrap()))
        .unwrap();
    // Pull the events off the EQ without reading them (b is emptied
    // first: an arm over unpolled completions fires at once).
    drain(&mut ctx, b);
    ctx.req_notify_cq(b, false).unwrap();
    ctx.destroy_cq(a).unwrap();
    assert_eq!(cq_events(&mut ctx), [b], "a's event went with it");
    assert!(async_events(&mut ctx).is_empty(), "so did its CQ error");
    ctx.ack_cq_events(b, 1).unwrap();
    ctx.destroy_cq(b).unwrap();
    close(&dev, ctx, "destroy discards");
}

// ============================================================ events

#[test]
fn req_notify_cq_gives_one_event_per_arm() {
    let dev = device(1);
    let mut ctx = open(&dev);
    let (cq, _) = ctx.create_cq(63).unwrap();
    fill(&dev, &ctx, cq, 0, 3);
    assert!(cq_events(&mut ctx).is_empty(), "not armed: no event");
    // Arming with completions past the consumer index fires at once (the
    // arm doorbell carries the index); start from an empty CQ.
    drain(&mut ctx, cq);
    for round in 0..5u32 {
        ctx.req_notify_cq(cq, false).unwrap();
        ctx.req_notify_cq(cq, false).unwrap(); // twice before the event: still one
        fill(&dev, &ctx, cq, 3 + round * 4, 4);
        assert_eq!(cq_events(&mut ctx), [cq], "round {round}");
        ctx.ack_cq_events(cq, 1).unwrap();
        drain(&mut ctx, cq);
    }
    fill(&dev, &ctx, cq, 100, 1);
    assert!(cq_events(&mut ctx).is_empty(), "no event without an arm");
    assert_eq!(ctx.get_cq_event().unwrap_err(), Errno::EAGAIN);
    assert!(dev.violations().is_empty(), "{:?}", dev.violations());
    ctx.destroy_cq(cq).unwrap();
    close(&dev, ctx, "one per arm");
}

#[test]
fn req_notify_cq_solicited_only_waits_for_a_solicited_or_error_completion() {
    for issi in [0, 1] {
        let dev = device(issi);
        let mut ctx = open(&dev);
        let bufs = Bufs::new(&dev, &ctx);
        let (cq, _) = ctx.create_cq(63).unwrap();
        let (srq, _) = ctx.create_srq(&srq_attr(31, 1)).unwrap();
        bufs.post(&mut ctx, srq, 0, 10).unwrap();
        ctx.req_notify_cq(cq, true).unwrap();
        deliver(&dev, &ctx, srq, cq, b"plain");
        deliver(&dev, &ctx, srq, cq, b"plain");
        assert!(cq_events(&mut ctx).is_empty(), "ISSI {issi}");
        dev.traffic()
            .deliver_solicited(
                ctx.srq_num(srq).unwrap(),
                ctx.cq_num(cq).unwrap(),
                QPN,
                b"s",
            )
            .unwrap();
        assert_eq!(cq_events(&mut ctx), [cq]);
        // An error completion wakes a solicited arm too.
        ctx.req_notify_cq(cq, true).unwrap();
        dev.traffic()
            .complete_send_error(ctx.cq_num(cq).unwrap(), QPN, 9, 0x05, 0x33)
            .unwrap();
        assert_eq!(cq_events(&mut ctx), [cq]);
        ctx.ack_cq_events(cq, 2).unwrap();
        let got = drain(&mut ctx, cq);
        assert_eq!(got.len(), 4);
        // (Injected: it names no QP of this context, so it is unmatched;
        // verbs_qp.rs has the real thing.)
        assert_eq!(got[3].vendor_err, WorkCompletion::VENDOR_ERR_UNMATCHED);
        ctx.destroy_srq(srq).unwrap();
        ctx.destroy_cq(cq).unwrap();
        drop(bufs);
        close(&dev, ctx, "solicited");
    }
}

#[test]
fn ack_cq_events_counts_like_libibverbs() {
    let dev = device(1);
    let mut ctx = open(&dev);
    let (a, _) = ctx.create_cq(63).unwrap();
    let (b, _) = ctx.create_cq(63).unwrap();
    for i in 0..3 {
        ctx.req_notify_cq(a, false).unwrap();
        fill(&dev, &ctx, a, i, 1);
        assert_eq!(ctx.get_cq_event().unwrap(), a);
    }
    ctx.req_notify_cq(b, false).unwrap();
    fill(&dev, &ctx, b, 0, 1);
    assert_eq!(ctx.get_cq_event().unwrap(), b);
    // Acknowledgements are per CQ and may be batched.
    ctx.ack_cq_events(a, 2).unwrap();
    assert_eq!(ctx.destroy_cq(a).unwrap_err(), Errno::EBUSY, "2 of 3");
    assert_eq!(
        ctx.ack_cq_events(a, 2).unwrap_err(),
        Errno::EINVAL,
        "only 1 left"
    );
    ctx.ack_cq_events(a, 0).unwrap();
    ctx.ack_cq_events(a, 1).unwrap();
    ctx.destroy_cq(a).unwrap();
    assert_eq!(ctx.destroy_cq(b).unwrap_err(), Errno::EBUSY);
    ctx.ack_cq_events(b, 1).unwrap();
    ctx.destroy_cq(b).unwrap();
    close(&dev, ctx, "ack counting");
}

#[test]
fn get_cq_event_returns_events_of_several_cqs_oldest_first() {
    let dev = device(1);
    let mut ctx = open(&dev);
    let cqs: Vec<CqHandle> = (0..4).map(|_| ctx.create_cq(15).unwrap().0).collect();
    for &cq in &cqs {
        ctx.req_notify_cq(cq, false).unwrap();
    }
    for &cq in cqs.iter().rev() {
        fill(&dev, &ctx, cq, 0, 1);
    }
    let got = cq_events(&mut ctx);
    assert_eq!(got, cqs.iter().rev().copied().collect::<Vec<_>>());
    for &cq in &cqs {
        ctx.ack_cq_events(cq, 1).unwrap();
        ctx.destroy_cq(cq).unwrap();
    }
    close(&dev, ctx, "several cqs");
}

// ============================================================ create_srq

#[test]
fn create_srq_outside_the_bounds_is_einval_and_reports_the_actual_values() {
    for issi in [0, 1] {
        let dev = device(issi);
        let mut ctx = open(&dev);
        let a = ctx.query_device();
        let before = dev.objects();
        for (wr, sge) in [(0, 1), (a.max_srq_wr + 1, 1), (15, a.max_srq_sge + 1)] {
            assert_eq!(
                ctx.create_srq(&srq_attr(wr, sge)).unwrap_err(),
                Errno::EINVAL,
                "ISSI {issi}: max_wr {wr} max_sge {sge}"
            );
        }
        assert_eq!(
            dev.objects().srqs + dev.objects().rmps,
            before.srqs + before.rmps
        );
        let (s1, got) = ctx.create_srq(&srq_attr(10, 2)).unwrap();
        assert_eq!(
            got,
            SrqAttr {
                max_wr: 15,
                max_sge: 3,
                srq_limit: 0
            }
        );
        let (s2, got) = ctx
            .create_srq(&srq_attr(a.max_srq_wr, a.max_srq_sge))
            .unwrap();
        assert_eq!(got.max_wr, a.max_srq_wr);
        assert!(got.max_sge >= a.max_srq_sge);
        assert_eq!(ctx.query_srq(s2).unwrap(), got);
        ctx.destroy_srq(s1).unwrap();
        ctx.destroy_srq(s2).unwrap();
        close(&dev, ctx, "create_srq bounds");
    }
}

#[test]
fn create_srq_with_a_limit_does_not_arm_it() {
    for issi in [0, 1] {
        let dev = device(issi);
        let mut ctx = open(&dev);
        let bufs = Bufs::new(&dev, &ctx);
        let (cq, _) = ctx.create_cq(63).unwrap();
        let (srq, got) = ctx
            .create_srq(&SrqInitAttr {
                srq_limit: 5,
                ..srq_attr(15, 1)
            })
            .unwrap();
        assert_eq!(got.srq_limit, 0);
        assert_eq!(ctx.query_srq(srq).unwrap().srq_limit, 0);
        bufs.post(&mut ctx, srq, 0, 6).unwrap();
        for _ in 0..6 {
            deliver(&dev, &ctx, srq, cq, b"x");
        }
        assert_eq!(limit_events(&mut ctx, srq), 0, "ISSI {issi}: never armed");
        drain(&mut ctx, cq);
        ctx.destroy_srq(srq).unwrap();
        ctx.destroy_cq(cq).unwrap();
        drop(bufs);
        close(&dev, ctx, "create_srq limit");
    }
}

#[test]
fn create_srq_at_issi0_without_a_cq_names_an_internal_cq_destroyed_at_close() {
    let dev = device(0);
    let mut ctx = open(&dev);
    let base = dev.objects().cqs;
    let (s1, _) = ctx.create_srq(&srq_attr(15, 1)).unwrap();
    assert_eq!(dev.objects().cqs, base + 1, "the internal CQ");
    let (s2, _) = ctx.create_srq(&srq_attr(15, 1)).unwrap();
    assert_eq!(dev.objects().cqs, base + 1, "shared by every SRQ");
    ctx.destroy_srq(s1).unwrap();
    ctx.destroy_srq(s2).unwrap();
    assert_eq!(
        dev.objects().cqs,
        base + 1,
        "kept until close, like devr->c0"
    );
    close(&dev, ctx, "internal cq");

    let dev = device(1);
    let mut ctx = open(&dev);
    let base = dev.objects().cqs;
    let (s, _) = ctx.create_srq(&srq_attr(15, 1)).unwrap();
    assert_eq!(dev.objects().cqs, base, "an RMP names no CQ");
    ctx.destroy_srq(s).unwrap();
    close(&dev, ctx, "no internal cq at ISSI 1");
}

// ============================================================ modify_srq / query_srq

#[test]
fn modify_srq_limit_above_the_outstanding_count_fires_at_once() {
    for issi in [0, 1] {
        for firmware_fires in [true, false] {
            let dev = device(issi);
            dev.caps_mut(|c| c.limit_event_on_arm = firmware_fires);
            let mut ctx = open(&dev);
            let bufs = Bufs::new(&dev, &ctx);
            let (srq, _) = ctx.create_srq(&srq_attr(15, 1)).unwrap();
            bufs.post(&mut ctx, srq, 0, 3).unwrap();
            ctx.modify_srq(srq, &limit(5), SrqAttrMask::LIMIT).unwrap();
            let what = format!("ISSI {issi}, firmware fires on arm: {firmware_fires}");
            assert_eq!(limit_events(&mut ctx, srq), 1, "{what}");
            assert_eq!(ctx.query_srq(srq).unwrap().srq_limit, 0, "{what}");
            assert_eq!(limit_events(&mut ctx, srq), 0, "{what}: once");
            ctx.destroy_srq(srq).unwrap();
            drop(bufs);
            close(&dev, ctx, &what);
        }
    }
}

#[test]
fn modify_srq_limit_zero_disarms_and_a_new_value_replaces_the_old() {
    for issi in [0, 1] {
        let dev = device(issi);
        let mut ctx = open(&dev);
        let bufs = Bufs::new(&dev, &ctx);
        let (cq, _) = ctx.create_cq(63).unwrap();
        let (srq, _) = ctx.create_srq(&srq_attr(15, 1)).unwrap();
        bufs.post(&mut ctx, srq, 0, 12).unwrap();
        ctx.modify_srq(srq, &limit(8), SrqAttrMask::LIMIT).unwrap();
        ctx.modify_srq(srq, &limit(0), SrqAttrMask::LIMIT).unwrap();
        assert_eq!(ctx.query_srq(srq).unwrap().srq_limit, 0);
        for _ in 0..6 {
            deliver(&dev, &ctx, srq, cq, b"x");
        }
        assert_eq!(limit_events(&mut ctx, srq), 0, "ISSI {issi}: disarmed");
        // 6 outstanding: arm 2, then replace with 5.
        ctx.modify_srq(srq, &limit(2), SrqAttrMask::LIMIT).unwrap();
        ctx.modify_srq(srq, &limit(5), SrqAttrMask::LIMIT).unwrap();
        assert_eq!(ctx.query_srq(srq).unwrap().srq_limit, 5);
        deliver(&dev, &ctx, srq, cq, b"x");
        assert_eq!(limit_events(&mut ctx, srq), 0, "5 left: not below 5");
        deliver(&dev, &ctx, srq, cq, b"x");
        assert_eq!(limit_events(&mut ctx, srq), 1, "below 5, not waiting for 2");
        drain(&mut ctx, cq);
        ctx.destroy_srq(srq).unwrap();
        ctx.destroy_cq(cq).unwrap();
        drop(bufs);
        close(&dev, ctx, "disarm/replace");
    }
}

#[test]
fn modify_srq_limit_above_capacity_max_wr_or_both_bits_is_einval_and_nothing_changes() {
    for issi in [0, 1] {
        let dev = device(issi);
        let mut ctx = open(&dev);
        let bufs = Bufs::new(&dev, &ctx);
        let (cq, _) = ctx.create_cq(63).unwrap();
        let (srq, _) = ctx.create_srq(&srq_attr(15, 1)).unwrap();
        bufs.post(&mut ctx, srq, 0, 10).unwrap();
        ctx.modify_srq(srq, &limit(4), SrqAttrMask::LIMIT).unwrap();
        let arms_before = commands(&dev, Opcode::ARM_RQ) + commands(&dev, Opcode::MODIFY_RMP);
        let bigger = SrqAttr {
            max_wr: 100,
            srq_limit: 6,
            max_sge: 1,
        };
        assert_eq!(
            ctx.modify_srq(srq, &limit(16), SrqAttrMask::LIMIT),
            Err(Errno::EINVAL),
            "limit above the 15 it holds"
        );
        assert_eq!(
            ctx.modify_srq(srq, &bigger, SrqAttrMask::MAX_WR),
            Err(Errno::EINVAL),
            "no SRQ resize on mlx5"
        );
        assert_eq!(
            ctx.modify_srq(srq, &bigger, SrqAttrMask::MAX_WR | SrqAttrMask::LIMIT),
            Err(Errno::EINVAL),
            "refused as a whole"
        );
        assert_eq!(
            ctx.modify_srq(srq, &bigger, SrqAttrMask(1 << 5)),
            Err(Errno::EINVAL)
        );
        assert_eq!(
            commands(&dev, Opcode::ARM_RQ) + commands(&dev, Opcode::MODIFY_RMP),
            arms_before,
            "no command"
        );
        assert_eq!(
            ctx.query_srq(srq).unwrap(),
            SrqAttr {
                max_wr: 15,
                max_sge: 1,
                srq_limit: 4
            },
            "ISSI {issi}: unchanged"
        );
        // The old limit 4 still governs: not at 6 left, at 3 left.
        for _ in 0..4 {
            deliver(&dev, &ctx, srq, cq, b"x");
        }
        assert_eq!(limit_events(&mut ctx, srq), 0);
        for _ in 0..3 {
            deliver(&dev, &ctx, srq, cq, b"x");
        }
        assert_eq!(limit_events(&mut ctx, srq), 1);
        drain(&mut ctx, cq);
        ctx.destroy_srq(srq).unwrap();
        ctx.destroy_cq(cq).unwrap();
        drop(bufs);
        close(&dev, ctx, "modify refused");
    }
}

#[test]
fn query_srq_reads_zero_after_the_limit_event_until_rearmed() {
    for issi in [0, 1] {
        let dev = device(issi);
        let mut ctx = open(&dev);
        let bufs = Bufs::new(&dev, &ctx);
        let (cq, _) = ctx.create_cq(63).unwrap();
        let (srq, _) = ctx.create_srq(&srq_attr(15, 1)).unwrap();
        bufs.post(&mut ctx, srq, 0, 8).unwrap();
        ctx.modify_srq(srq, &limit(6), SrqAttrMask::LIMIT).unwrap();
        assert_eq!(ctx.query_srq(srq).unwrap().srq_limit, 6);
        for _ in 0..3 {
            deliver(&dev, &ctx, srq, cq, b"x");
        }
        assert_eq!(limit_events(&mut ctx, srq), 1);
        assert_eq!(ctx.query_srq(srq).unwrap().srq_limit, 0, "ISSI {issi}");
        deliver(&dev, &ctx, srq, cq, b"x");
        assert_eq!(limit_events(&mut ctx, srq), 0);
        assert_eq!(ctx.query_srq(srq).unwrap().srq_limit, 0);
        ctx.modify_srq(srq, &limit(3), SrqAttrMask::LIMIT).unwrap();
        assert_eq!(ctx.query_srq(srq).unwrap().srq_limit, 3);
        drain(&mut ctx, cq);
        ctx.destroy_srq(srq).unwrap();
        ctx.destroy_cq(cq).unwrap();
        drop(bufs);
        close(&dev, ctx, "query after event");
    }
}

// ============================================================ post_srq_recv

#[test]
fn post_srq_recv_when_full_is_enomem_naming_the_request_and_earlier_ones_stay_posted() {
    for issi in [0, 1] {
        let dev = device(issi);
        let mut ctx = open(&dev);
        let bufs = Bufs::new(&dev, &ctx);
        let (cq, _) = ctx.create_cq(63).unwrap();
        let (srq, _) = ctx.create_srq(&srq_attr(7, 1)).unwrap();
        // One request per call (a path of its own), then a list.
        for id in 0..3 {
            bufs.post(&mut ctx, srq, id, 1).unwrap();
        }
        assert_eq!(
            bufs.post(&mut ctx, srq, 3, 10),
            Err(PostSrqError {
                index: 4,
                errno: Errno::ENOMEM
            }),
            "ISSI {issi}: 3 + 4 fill the 7"
        );
        assert_eq!(
            bufs.post(&mut ctx, srq, 7, 1),
            Err(PostSrqError {
                index: 0,
                errno: Errno::ENOMEM
            }),
            "ISSI {issi}: one request on a full SRQ"
        );
        for _ in 0..7 {
            assert!(matches!(
                deliver(&dev, &ctx, srq, cq, b"x"),
                Delivery::Completed { .. }
            ));
        }
        assert_eq!(deliver(&dev, &ctx, srq, cq, b"x"), Delivery::Dropped);
        let ids: Vec<u64> = drain(&mut ctx, cq).iter().map(|w| w.wr_id).collect();
        assert_eq!(ids, (0..7).collect::<Vec<_>>());
        ctx.destroy_srq(srq).unwrap();
        ctx.destroy_cq(cq).unwrap();
        drop(bufs);
        close(&dev, ctx, "post full");
    }
}

#[test]
fn post_srq_recv_with_too_many_scatter_entries_is_einval_naming_the_request() {
    for issi in [0, 1] {
        let dev = device(issi);
        let mut ctx = open(&dev);
        let bufs = Bufs::new(&dev, &ctx);
        let (srq, attr) = ctx.create_srq(&srq_attr(15, 1)).unwrap();
        assert_eq!(attr.max_sge, 1);
        let one = [bufs.sge(0)];
        let two = [bufs.sge(1), bufs.sge(2)];
        let wrs = [
            RecvWr {
                wr_id: 0,
                sges: &one,
            },
            RecvWr {
                wr_id: 1,
                sges: &two,
            },
            RecvWr {
                wr_id: 2,
                sges: &one,
            },
        ];
        assert_eq!(
            ctx.post_srq_recv(srq, &wrs),
            Err(PostSrqError {
                index: 1,
                errno: Errno::EINVAL
            })
        );
        assert_eq!(ctx.srq(srq).unwrap().outstanding(), 1, "ISSI {issi}");
        // One request per call: refused alone, nothing posted.
        assert_eq!(
            ctx.post_srq_recv(srq, &wrs[1..2]),
            Err(PostSrqError {
                index: 0,
                errno: Errno::EINVAL
            })
        );
        assert_eq!(ctx.srq(srq).unwrap().outstanding(), 1, "ISSI {issi}");
        ctx.post_srq_recv(srq, &wrs[2..]).unwrap();
        assert_eq!(ctx.srq(srq).unwrap().outstanding(), 2, "ISSI {issi}");
        ctx.destroy_srq(srq).unwrap();
        drop(bufs);
        close(&dev, ctx, "post sges");
    }
}

#[test]
fn post_srq_recv_slot_frees_only_when_its_completion_is_polled() {
    for issi in [0, 1] {
        let dev = device(issi);
        let mut ctx = open(&dev);
        let bufs = Bufs::new(&dev, &ctx);
        let (cq, _) = ctx.create_cq(63).unwrap();
        let (srq, _) = ctx.create_srq(&srq_attr(3, 1)).unwrap();
        bufs.post(&mut ctx, srq, 0, 3).unwrap();
        deliver(&dev, &ctx, srq, cq, b"a");
        deliver(&dev, &ctx, srq, cq, b"b");
        // Consumed by the device, completions not polled: still full.
        assert_eq!(
            bufs.post(&mut ctx, srq, 3, 1).unwrap_err().errno,
            Errno::ENOMEM,
            "ISSI {issi}"
        );
        let mut wc = [WorkCompletion::EMPTY; 1];
        assert_eq!(ctx.poll_cq(cq, &mut wc).unwrap(), 1);
        assert_eq!(wc[0].wr_id, 0);
        bufs.post(&mut ctx, srq, 3, 1).unwrap();
        assert_eq!(
            bufs.post(&mut ctx, srq, 4, 1).unwrap_err().errno,
            Errno::ENOMEM
        );
        let ids: Vec<u64> = drain(&mut ctx, cq).iter().map(|w| w.wr_id).collect();
        assert_eq!(ids, [1]);
        bufs.post(&mut ctx, srq, 4, 1).unwrap();
        ctx.destroy_srq(srq).unwrap();
        ctx.destroy_cq(cq).unwrap();
        drop(bufs);
        close(&dev, ctx, "slot frees on poll");
    }
}

#[test]
fn post_srq_recv_on_an_srq_in_error_is_eio() {
    for issi in [0, 1] {
        let dev = device(issi);
        let mut ctx = open(&dev);
        let bufs = Bufs::new(&dev, &ctx);
        let (srq, _) = ctx.create_srq(&srq_attr(15, 1)).unwrap();
        let srqn = ctx.srq_num(srq).unwrap();
        dev.traffic()
            .raise_event(eqe_queue(EventType::SRQ_CATAS_ERROR, srqn))
            .unwrap();
        let evs = async_events(&mut ctx);
        assert_eq!(
            evs,
            [AsyncEvent {
                event_type: AsyncEventType::SrqErr,
                element: EventElement::Srq(srq),
                detail: mlx5_driver::verbs::AsyncEventDetail::None,
            }]
        );
        assert_eq!(
            bufs.post(&mut ctx, srq, 0, 2),
            Err(PostSrqError {
                index: 0,
                errno: Errno::EIO
            }),
            "ISSI {issi}"
        );
        assert_eq!(ctx.destroy_srq(srq), Err(Errno::EBUSY), "event not acked");
        ack_all(&mut ctx, &evs);
        ctx.destroy_srq(srq).unwrap();
        drop(bufs);
        close(&dev, ctx, "post eio");
    }
}

// ============================================================ poll_cq

#[test]
fn poll_cq_maps_receive_cqes_to_the_srq_wr_id_and_decodes_errors() {
    for issi in [0, 1] {
        let dev = device(issi);
        let mut ctx = open(&dev);
        let bufs = Bufs::new(&dev, &ctx);
        let (cq, _) = ctx.create_cq(63).unwrap();
        let (srq, _) = ctx.create_srq(&srq_attr(31, 1)).unwrap();
        bufs.post(&mut ctx, srq, 100, 4).unwrap();
        deliver(&dev, &ctx, srq, cq, &[1u8; 40]);
        assert!(matches!(
            deliver(&dev, &ctx, srq, cq, &[2u8; BUF + 1]),
            Delivery::LengthError { .. }
        ));
        deliver(&dev, &ctx, srq, cq, &[3u8; 7]);
        let got = drain(&mut ctx, cq);
        let srqn = Some(ctx.srq_num(srq).unwrap());
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
        bufs.region.read_bytes(100 * BUF, &mut data);
        assert_eq!(data, [1u8; 40]);
        assert_eq!(ctx.srq(srq).unwrap().outstanding(), 1);
        assert_eq!(ctx.stats().unmatched_cqes, 0);
        ctx.destroy_srq(srq).unwrap();
        ctx.destroy_cq(cq).unwrap();
        drop(bufs);
        close(&dev, ctx, "poll mapping");
    }
}

#[test]
fn poll_cq_cqe_naming_an_unknown_srq_is_a_counted_error_completion() {
    let dev = device(1);
    let mut ctx = open(&dev);
    let bufs = Bufs::new(&dev, &ctx);
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
    fill(&dev, &ctx, cq, 5, 1);
    let got = drain(&mut ctx, cq);
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
    drop(bufs);
    close(&dev, ctx, "unknown srq");
}

#[test]
fn poll_cq_cqe_naming_a_wqe_never_posted_is_a_counted_error_completion() {
    for issi in [0, 1] {
        let dev = device(issi);
        let mut ctx = open(&dev);
        let bufs = Bufs::new(&dev, &ctx);
        let (cq, _) = ctx.create_cq(63).unwrap();
        let (srq, _) = ctx.create_srq(&srq_attr(15, 1)).unwrap();
        bufs.post(&mut ctx, srq, 10, 2).unwrap();
        // Corrupt WQE 0's next pointer so the device walks to WQE 9, which
        // was never posted (a device or memory fault the driver must survive).
        {
            let ring = ctx.srq(srq).unwrap().ring();
            let off = ring.base_offset();
            ring.region().write_be16(off + 2, 9);
        }
        deliver(&dev, &ctx, srq, cq, b"ok");
        let second = deliver(&dev, &ctx, srq, cq, b"bad");
        assert!(
            matches!(
                second,
                Delivery::Completed { wqe_index: 9 }
                    | Delivery::LengthError { wqe_index: 9 }
                    | Delivery::ProtectionError { wqe_index: 9 }
            ),
            "{second:?}"
        );
        let got = drain(&mut ctx, cq);
        assert_eq!(got.len(), 2, "ISSI {issi}");
        assert_eq!((got[0].wr_id, got[0].status), (10, WcStatus::Success));
        assert_eq!(got[1].status, WcStatus::GeneralErr);
        assert_eq!(got[1].vendor_err, WorkCompletion::VENDOR_ERR_UNMATCHED);
        assert_eq!(ctx.stats().unmatched_cqes, 1);
        assert_eq!(ctx.srq(srq).unwrap().outstanding(), 1, "WQE 1 still posted");
        ctx.destroy_srq(srq).unwrap();
        ctx.destroy_cq(cq).unwrap();
        drop(bufs);
        close(&dev, ctx, "never posted");
    }
}

// ============================================================ destroy_srq

#[test]
fn destroy_srq_with_an_unacknowledged_limit_event_is_ebusy_and_unread_ones_are_discarded() {
    for issi in [0, 1] {
        let dev = device(issi);
        let mut ctx = open(&dev);
        let bufs = Bufs::new(&dev, &ctx);
        let (a, _) = ctx.create_srq(&srq_attr(15, 1)).unwrap();
        let (b, _) = ctx.create_srq(&srq_attr(15, 1)).unwrap();
        bufs.post(&mut ctx, a, 0, 1).unwrap();
        bufs.post(&mut ctx, b, 10, 1).unwrap();
        ctx.modify_srq(a, &limit(5), SrqAttrMask::LIMIT).unwrap();
        ctx.modify_srq(b, &limit(5), SrqAttrMask::LIMIT).unwrap();
        let ev = ctx.get_async_event().unwrap();
        assert_eq!(ev.element, EventElement::Srq(a), "ISSI {issi}");
        assert_eq!(ctx.destroy_srq(a), Err(Errno::EBUSY));
        assert_eq!(ctx.srq(a).unwrap().outstanding(), 1, "a untouched");
        ctx.ack_async_event(&ev).unwrap();
        assert_eq!(ctx.ack_async_event(&ev), Err(Errno::EINVAL), "acked twice");
        ctx.destroy_srq(a).unwrap();
        // b's event is unread: it goes with b.
        ctx.destroy_srq(b).unwrap();
        assert!(async_events(&mut ctx).is_empty());
        drop(bufs);
        close(&dev, ctx, "destroy_srq events");
    }
}

// ============================================================ async events

#[test]
fn get_async_event_reports_each_kind_and_each_must_be_acknowledged() {
    for issi in [0, 1] {
        let dev = device(issi);
        let mut ctx = open(&dev);
        let (cq, _) = ctx.create_cq(15).unwrap();
        let (srq, _) = ctx.create_srq(&srq_attr(15, 1)).unwrap();
        let srqn = ctx.srq_num(srq).unwrap();
        let t = dev.traffic();
        t.raise_event(eqe_queue(EventType::SRQ_RQ_LIMIT, srqn))
            .unwrap();
        t.raise_event(eqe_queue(EventType::SRQ_CATAS_ERROR, srqn))
            .unwrap();
        t.raise_event(eqe_cq_error(ctx.cq_num(cq).unwrap()))
            .unwrap();
        // Last WQE reached names the QP (queue type 0), not the SRQ.
        t.raise_event(eqe_qp(EventType::SRQ_LAST_WQE, 0x321))
            .unwrap();
        t.raise_event(eqe_port(1, 4)).unwrap();
        t.raise_event(eqe_port(1, 1)).unwrap();
        // About nobody (no CQ 0xabcd; QP 0x321 above is not a QP of this
        // context; type 0x13 about an RQ object, which the facade never
        // makes): counted, not reported.
        t.raise_event(eqe_cq_error(0xabcd)).unwrap();
        t.raise_event(eqe_queue(EventType::SRQ_LAST_WQE, 0x321))
            .unwrap();
        let evs = async_events(&mut ctx);
        use AsyncEventType as T;
        assert_eq!(
            evs.iter()
                .map(|e| (e.event_type, e.element))
                .collect::<Vec<_>>(),
            [
                (T::SrqLimitReached, EventElement::Srq(srq)),
                (T::SrqErr, EventElement::Srq(srq)),
                (T::CqErr, EventElement::Cq(cq)),
                (T::PortActive, EventElement::Port(1)),
                (T::PortErr, EventElement::Port(1)),
            ],
            "ISSI {issi}"
        );
        assert_eq!(ctx.stats().unroutable_events, 3);
        assert_eq!(ctx.destroy_srq(srq), Err(Errno::EBUSY));
        assert_eq!(ctx.destroy_cq(cq), Err(Errno::EBUSY));
        ack_all(&mut ctx, &evs);
        for ev in &evs {
            assert_eq!(
                ctx.ack_async_event(ev),
                Err(Errno::EINVAL),
                "{ev:?} acked twice"
            );
        }
        ctx.destroy_srq(srq).unwrap();
        ctx.destroy_cq(cq).unwrap();
        close(&dev, ctx, "async kinds");
    }
}

#[test]
fn get_async_event_reports_device_fatal_once_and_calls_then_fail_with_eio() {
    let dev = device(1);
    let mut ctx = open(&dev);
    let (cq, _) = ctx.create_cq(15).unwrap();
    dev.inject().fatal(0x07);
    let ev = ctx.get_async_event().unwrap();
    assert_eq!(
        ev,
        AsyncEvent {
            event_type: AsyncEventType::DeviceFatal,
            element: EventElement::Device,
            detail: mlx5_driver::verbs::AsyncEventDetail::None,
        }
    );
    ctx.ack_async_event(&ev).unwrap();
    assert_eq!(
        ctx.get_async_event(),
        Err(Errno::EIO),
        "once; then the device is gone"
    );
    assert_eq!(ctx.create_cq(15).unwrap_err(), Errno::EIO);
    assert_eq!(ctx.req_notify_cq(cq, false), Err(Errno::EIO));
    assert_eq!(ctx.close().unwrap_err(), Errno::EIO);
    // The one test that cannot end clean: a dead device answers no
    // command, so its objects and pages are simply abandoned.
    assert!(dev.is_fatal());
}

#[test]
fn get_async_event_with_nothing_pending_is_eagain_and_acking_an_unread_event_is_einval() {
    let dev = device(1);
    let mut ctx = open(&dev);
    assert_eq!(ctx.get_async_event(), Err(Errno::EAGAIN));
    let fake = AsyncEvent {
        event_type: AsyncEventType::PortActive,
        element: EventElement::Port(1),
        detail: mlx5_driver::verbs::AsyncEventDetail::None,
    };
    assert_eq!(ctx.ack_async_event(&fake), Err(Errno::EINVAL));
    close(&dev, ctx, "eagain");
}

// ============================================================ handles

#[test]
fn every_call_with_a_stale_handle_is_einval_even_after_the_slot_is_reused() {
    for issi in [0, 1] {
        let dev = device(issi);
        let mut ctx = open(&dev);
        let bufs = Bufs::new(&dev, &ctx);
        let (old_cq, _) = ctx.create_cq(15).unwrap();
        let (old_srq, _) = ctx.create_srq(&srq_attr(15, 1)).unwrap();
        ctx.destroy_cq(old_cq).unwrap();
        ctx.destroy_srq(old_srq).unwrap();
        let (cq, _) = ctx.create_cq(15).unwrap();
        let (srq, _) = ctx.create_srq(&srq_attr(15, 1)).unwrap();
        fill(&dev, &ctx, cq, 0, 2);
        bufs.post(&mut ctx, srq, 0, 2).unwrap();
        let mut wc = [WorkCompletion::EMPTY; 4];
        let e = Errno::EINVAL;
        assert_eq!(ctx.poll_cq(old_cq, &mut wc).unwrap_err(), e);
        assert_eq!(ctx.resize_cq(old_cq, 100).unwrap_err(), e);
        assert_eq!(ctx.req_notify_cq(old_cq, false).unwrap_err(), e);
        assert_eq!(ctx.ack_cq_events(old_cq, 0).unwrap_err(), e);
        assert_eq!(ctx.destroy_cq(old_cq).unwrap_err(), e);
        assert_eq!(ctx.cqe(old_cq).unwrap_err(), e);
        assert_eq!(ctx.query_srq(old_srq).unwrap_err(), e);
        assert_eq!(
            ctx.modify_srq(old_srq, &limit(1), SrqAttrMask::LIMIT)
                .unwrap_err(),
            e
        );
        assert_eq!(
            bufs.post(&mut ctx, old_srq, 5, 1),
            Err(PostSrqError {
                index: 0,
                errno: Errno::EINVAL
            })
        );
        assert_eq!(ctx.destroy_srq(old_srq).unwrap_err(), e);
        assert_eq!(
            ctx.create_srq(&SrqInitAttr {
                cq: Some(old_cq),
                ..srq_attr(15, 1)
            })
            .unwrap_err(),
            Errno::EINVAL
        );
        // The new objects are untouched.
        assert_eq!(ctx.cqe(cq).unwrap(), 15);
        assert_eq!(byte_lens(&drain(&mut ctx, cq)), [0, 1], "ISSI {issi}");
        assert_eq!(ctx.srq(srq).unwrap().outstanding(), 2);
        ctx.destroy_srq(srq).unwrap();
        ctx.destroy_cq(cq).unwrap();
        drop(bufs);
        close(&dev, ctx, "stale handles");
    }
}

#[test]
fn close_destroys_whatever_is_left_in_dependency_order() {
    for issi in [0, 1] {
        let dev = device(issi);
        let mut ctx = open(&dev);
        let bufs = Bufs::new(&dev, &ctx);
        let (cq, _) = ctx.create_cq(63).unwrap();
        let (srq, _) = ctx
            .create_srq(&SrqInitAttr {
                cq: Some(cq),
                ..srq_attr(15, 1)
            })
            .unwrap();
        ctx.create_srq(&srq_attr(7, 1)).unwrap();
        bufs.post(&mut ctx, srq, 0, 3).unwrap();
        deliver(&dev, &ctx, srq, cq, b"left behind");
        ctx.req_notify_cq(cq, false).unwrap();
        drop(bufs);
        close(&dev, ctx, "close with objects");
    }
}

#[test]
fn seed_1_and_req_notify_cq_on_every_profile_with_the_device_on_its_own_thread() {
    for profile in PROFILES {
        let dev = mlx5_tests::device(profile, ExecMode::Threaded);
        let mut ctx = open(&dev);
        let (cq, cqe) = ctx.create_cq(100).unwrap();
        fill(&dev, &ctx, cq, 0, cqe);
        assert_eq!(ctx.resize_cq(cq, 2000).unwrap(), 2047, "{profile:?}");
        fill(&dev, &ctx, cq, cqe, 100);
        assert_eq!(
            byte_lens(&drain(&mut ctx, cq)),
            (0..cqe + 100).collect::<Vec<_>>()
        );
        for round in 0..3 {
            ctx.req_notify_cq(cq, false).unwrap();
            dev.quiesce(); // the arm doorbell is the device thread's to run
            fill(&dev, &ctx, cq, round, 2);
            dev.quiesce();
            assert_eq!(cq_events(&mut ctx), [cq], "{profile:?} round {round}");
            ctx.ack_cq_events(cq, 1).unwrap();
            drain(&mut ctx, cq);
        }
        ctx.destroy_cq(cq).unwrap();
        close(&dev, ctx, "threaded");
    }
}
