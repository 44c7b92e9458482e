//! Shared setup of the CQ, SRQ and event verbs tests (`verbs.rs`,
//! `verbs_cq.rs`, `verbs_cq_events.rs`, `verbs_srq.rs`): a context at ISSI 0
//! (SRQ) or 1 (RMP), completions and receives injected through the model's
//! traffic generator, event queue entries built by hand, and the checks that
//! every test ends with (the context closes and the model is clean).

use crate::bring_up;
use mlx5_driver::verbs::{
    AsyncEvent, AsyncEventDetail, AsyncEventType, CqHandle, Errno, EventElement, PostSrqError,
    RecvWr, Sge, SrqAttr, SrqAttrMask, SrqHandle, SrqInitAttr, Verbs, WorkCompletion,
};
use mlx5_hal::{DmaRegion, Hal};
use mlx5_regs::layouts::{cq_error, eqe, port_state_change_event, qp_events};
use mlx5_regs::{EventType, Opcode};
use mlx5_sim::{Delivery, Device, SimConfig, SimHal};

use crate::verbs_common::drain_by;

pub use crate::verbs_common::{async_events, close, cq_events, Ctx};

/// The QP number the injected completions and receives name: no QP of the
/// context has it.
pub const QPN: u32 = 0x4d;
/// Bytes of one receive buffer.
pub const BUF: usize = 256;

/// A model that supports ISSI 0 only (`issi == 0`: SRQs) or 0 and 1 (RMPs).
pub fn device(issi: u16) -> Device {
    Device::new(SimConfig {
        issi_supported: if issi == 0 { 0b01 } else { 0b11 },
        ..SimConfig::default()
    })
}

/// A context on `dev`.
pub fn open(dev: &Device) -> Ctx {
    Verbs::open(bring_up(dev))
}

/// Run `test` on a fresh context at ISSI `issi`, then close it and check
/// that the model is clean.
pub fn at_issi(issi: u16, what: &str, test: impl FnOnce(&Device, &mut Ctx)) {
    let dev = device(issi);
    let mut ctx = open(&dev);
    test(&dev, &mut ctx);
    close(&dev, ctx, &format!("{what} (ISSI {issi})"));
}

/// `at_issi` at ISSI 0 (SRQ) and at ISSI 1 (RMP).
pub fn at_each_issi(what: &str, mut test: impl FnMut(u16, &Device, &mut Ctx)) {
    for issi in [0, 1] {
        at_issi(issi, what, |dev, ctx| test(issi, dev, ctx));
    }
}

/// Requester completions numbered `first..first+n` (wqe_counter and
/// byte_len carry the number).
pub fn fill(dev: &Device, ctx: &Ctx, cq: CqHandle, first: u32, n: u32) {
    let cqn = ctx.cq_num(cq).unwrap();
    for seq in first..first + n {
        dev.traffic()
            .complete_send(cqn, QPN, seq as u16, seq)
            .expect("complete_send");
    }
}

/// Poll until empty, in batches of 7 (not a divisor of anything used).
pub fn drain(ctx: &mut Ctx, cq: CqHandle) -> Vec<WorkCompletion> {
    drain_by::<7>(ctx, cq)
}

/// The byte counts of `wcs`, in order.
pub fn byte_lens(wcs: &[WorkCompletion]) -> Vec<u32> {
    wcs.iter().map(|w| w.byte_len).collect()
}

/// The work request ids of `wcs`, in order.
pub fn wr_ids(wcs: &[WorkCompletion]) -> Vec<u64> {
    wcs.iter().map(|w| w.wr_id).collect()
}

/// Drain `cq` and expect exactly the completions `fill` numbered `want`,
/// in that order.
pub fn expect_numbers(ctx: &mut Ctx, cq: CqHandle, want: impl IntoIterator<Item = u32>) {
    assert_eq!(
        byte_lens(&drain(ctx, cq)),
        want.into_iter().collect::<Vec<_>>()
    );
}

/// Acknowledge every event of `evs`.
pub fn ack_all(ctx: &mut Ctx, evs: &[AsyncEvent]) {
    for ev in evs {
        ctx.ack_async_event(ev).unwrap();
    }
}

/// An async event without detail.
pub fn event(event_type: AsyncEventType, element: EventElement) -> AsyncEvent {
    AsyncEvent {
        event_type,
        element,
        detail: AsyncEventDetail::None,
    }
}

/// How many commands of `opcode` the model's trace holds.
pub fn commands(dev: &Device, opcode: Opcode) -> usize {
    dev.trace().iter().filter(|t| t.opcode == opcode.0).count()
}

/// Receive buffers for SRQ tests.
pub struct Bufs {
    /// 256 buffers of [`BUF`] bytes.
    pub region: DmaRegion<SimHal>,
    /// The key that covers them (the context's default key).
    pub lkey: u32,
}

impl Bufs {
    /// The buffers, in the model's DMA memory.
    pub fn new(dev: &Device, ctx: &Ctx) -> Bufs {
        Bufs {
            region: dev.hal().alloc_dma(BUF * 256).unwrap(),
            lkey: ctx.hca().default_lkey(),
        }
    }

    /// The scatter entry of request `wr_id` (buffer `wr_id % 256`).
    pub fn sge(&self, wr_id: u64) -> Sge {
        Sge {
            addr: self.region.iova() + (wr_id % 256) * BUF as u64,
            length: BUF as u32,
            lkey: self.lkey,
        }
    }

    /// Post ids `first..first+n`, one SGE each.
    pub fn post(
        &self,
        ctx: &mut Ctx,
        srq: SrqHandle,
        first: u64,
        n: u64,
    ) -> Result<(), PostSrqError> {
        let sges: Vec<[Sge; 1]> = (first..first + n).map(|id| [self.sge(id)]).collect();
        let wrs: Vec<RecvWr> = sges
            .iter()
            .zip(first..)
            .map(|(s, wr_id)| RecvWr { wr_id, sges: s })
            .collect();
        ctx.post_srq_recv(srq, &wrs)
    }
}

/// What `post_srq_recv` returns when it refuses request `index`.
pub fn post_err(index: usize, errno: Errno) -> Result<(), PostSrqError> {
    Err(PostSrqError { index, errno })
}

/// One receive of `payload` on `srq`, completing into `cq` (from [`QPN`]).
pub fn deliver(dev: &Device, ctx: &Ctx, srq: SrqHandle, cq: CqHandle, payload: &[u8]) -> Delivery {
    dev.traffic()
        .deliver(
            ctx.srq_num(srq).unwrap(),
            ctx.cq_num(cq).unwrap(),
            QPN,
            payload,
        )
        .expect("deliver")
}

/// `n` receives of `payload`, each of which must complete.
pub fn deliver_n(dev: &Device, ctx: &Ctx, srq: SrqHandle, cq: CqHandle, n: usize, payload: &[u8]) {
    for i in 0..n {
        let d = deliver(dev, ctx, srq, cq, payload);
        assert!(
            matches!(d, Delivery::Completed { .. }),
            "receive {i}: {d:?}"
        );
    }
}

/// SRQ attributes with these sizes and no limit.
pub fn srq_attr(max_wr: u32, max_sge: u32) -> SrqInitAttr {
    SrqInitAttr {
        max_wr,
        max_sge,
        ..SrqInitAttr::default()
    }
}

/// SRQ attributes that set the limit to `n`.
pub fn limit(n: u32) -> SrqAttr {
    SrqAttr {
        srq_limit: n,
        ..SrqAttr::default()
    }
}

/// Arm the SRQ's limit at `n`.
pub fn set_limit(ctx: &mut Ctx, srq: SrqHandle, n: u32) {
    ctx.modify_srq(srq, &limit(n), SrqAttrMask::LIMIT).unwrap();
}

/// How many SRQ limit events about `srq` are readable now (each checked and
/// acknowledged; any other event fails the test).
pub fn limit_events(ctx: &mut Ctx, srq: SrqHandle) -> usize {
    let evs = async_events(ctx);
    for ev in &evs {
        assert_eq!(
            *ev,
            event(AsyncEventType::SrqLimitReached, EventElement::Srq(srq))
        );
    }
    ack_all(ctx, &evs);
    evs.len()
}

/// Receive buffers, a CQ of 63 and an SRQ of `max_wr` (one scatter entry)
/// completing into it.
pub struct Srq {
    /// The receive buffers.
    pub bufs: Bufs,
    /// The CQ the SRQ completes into.
    pub cq: CqHandle,
    /// The SRQ.
    pub srq: SrqHandle,
}

impl Srq {
    /// Create the CQ and the SRQ.
    pub fn new(dev: &Device, ctx: &mut Ctx, max_wr: u32) -> Srq {
        let bufs = Bufs::new(dev, ctx);
        let (cq, _) = ctx.create_cq(63).unwrap();
        let (srq, _) = ctx.create_srq(&srq_attr(max_wr, 1)).unwrap();
        Srq { bufs, cq, srq }
    }

    /// The same, but the SRQ names the CQ (`SrqInitAttr::cq`).
    pub fn naming_cq(dev: &Device, ctx: &mut Ctx, max_wr: u32) -> Srq {
        let bufs = Bufs::new(dev, ctx);
        let (cq, _) = ctx.create_cq(63).unwrap();
        let (srq, _) = ctx
            .create_srq(&SrqInitAttr {
                cq: Some(cq),
                ..srq_attr(max_wr, 1)
            })
            .unwrap();
        Srq { bufs, cq, srq }
    }

    /// Post ids `first..first+n`.
    pub fn post(&self, ctx: &mut Ctx, first: u64, n: u64) -> Result<(), PostSrqError> {
        self.bufs.post(ctx, self.srq, first, n)
    }

    /// One receive of `payload` (see [`deliver`]).
    pub fn deliver(&self, dev: &Device, ctx: &Ctx, payload: &[u8]) -> Delivery {
        deliver(dev, ctx, self.srq, self.cq, payload)
    }

    /// `n` one-byte receives, each of which must complete.
    pub fn deliver_n(&self, dev: &Device, ctx: &Ctx, n: usize) {
        deliver_n(dev, ctx, self.srq, self.cq, n, b"x");
    }

    /// The SRQ's limit events readable now (see [`limit_events`]).
    pub fn limit_events(&self, ctx: &mut Ctx) -> usize {
        limit_events(ctx, self.srq)
    }

    /// Destroy the SRQ, then the CQ (the buffers go with `self`).
    pub fn destroy(self, ctx: &mut Ctx) {
        ctx.destroy_srq(self.srq).unwrap();
        ctx.destroy_cq(self.cq).unwrap();
    }
}

/// An event queue entry of `event_type`/`sub_type`, its event data
/// written by `f`.
pub fn eqe_with(event_type: EventType, sub_type: u8, f: impl FnOnce(&mut [u8])) -> [u8; 64] {
    let mut e = [0u8; 64];
    eqe::event_type.set(&mut e, event_type.0).unwrap();
    eqe::event_sub_type.set(&mut e, sub_type).unwrap();
    f(eqe::event_data.get_mut(&mut e));
    e
}

/// A CQ error event (syndrome 1) about CQ `cqn`.
pub fn eqe_cq_error(cqn: u32) -> [u8; 64] {
    eqe_with(EventType::CQ_ERROR, 0, |d| {
        cq_error::cqn.set(d, cqn).unwrap();
        cq_error::syndrome.set(d, 1).unwrap();
    })
}

/// An event of type `t` with `qp_events.type` 1 about queue `num` (an SRQ
/// number for the SRQ events).
pub fn eqe_queue(t: EventType, num: u32) -> [u8; 64] {
    eqe_with(t, 0, |d| {
        qp_events::r#type.set(d, 1).unwrap();
        qp_events::qpn_rqn_sqn.set(d, num).unwrap();
    })
}

/// A QP event (`qp_events.type` 0 = QP) about QP `qpn`.
pub fn eqe_qp(t: EventType, qpn: u32) -> [u8; 64] {
    eqe_with(t, 0, |d| {
        qp_events::r#type.set(d, 0).unwrap();
        qp_events::qpn_rqn_sqn.set(d, qpn).unwrap();
    })
}

/// A port change event of `subtype` about port `port`.
pub fn eqe_port(port: u8, subtype: u8) -> [u8; 64] {
    eqe_with(EventType::PORT_CHANGE, subtype, |d| {
        port_state_change_event::port_num.set(d, port).unwrap();
    })
}
