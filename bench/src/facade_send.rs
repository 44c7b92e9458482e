//! The send side of the facade benchmarks: a QP connected to itself on the
//! model, through the verbs facade and through the QP ring API, on a
//! platform whose 64-bit doorbell writes the model does not see (so posted
//! WQEs are never executed: the benchmark plays the device by storing
//! requester CQEs), and a raw send-WQE writer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use std::hint::black_box;
use std::time::{Duration, Instant};

use mlx5_driver::cq::{Cq, CqOptions, Cqe};
use mlx5_driver::qp::{Payload, Qp, QpLinks, SendOp, SendQueueCaps, SendRequest, SendSlot};
use mlx5_driver::srq::Sge;
use mlx5_driver::unstable;
use mlx5_driver::unstable::cq::CqRing;
use mlx5_driver::verbs::{
    AhAttr, AhHandle, CqHandle, GlobalRoute, QpAttr, QpAttrMask, QpCap, QpHandle, QpInitAttr,
    QpType, SendFlags, SendWr, Verbs, WorkCompletion,
};
use mlx5_driver::{Hca, HcaConfig};
use mlx5_hal::{DmaRegion, Hal, HalError, RawDma};
use mlx5_sim::{Device, SimConfig, SimHal};

/// The model's platform with 64-bit MMIO writes (the send and CQ-arm
/// doorbells) kept in a register of its own instead of reaching the model:
/// a store, as a BlueFlame write is, and the model never executes a WQE.
#[derive(Clone)]
pub struct QuietHal {
    inner: SimHal,
    last_db: Arc<AtomicU64>,
}

impl QuietHal {
    /// Wrap the model's platform.
    pub fn new(inner: SimHal) -> QuietHal {
        QuietHal {
            inner,
            last_db: Arc::new(AtomicU64::new(0)),
        }
    }
    /// The last 64-bit doorbell written.
    pub fn last_doorbell(&self) -> u64 {
        self.last_db.load(Ordering::Relaxed)
    }
}

// SAFETY: every method but `mmio_write64` forwards to `SimHal`, which
// upholds the `Hal` contract; `mmio_write64` only stores into an atomic
// and touches no memory the driver owns.
unsafe impl Hal for QuietHal {
    fn bar0_size(&self) -> usize {
        self.inner.bar0_size()
    }
    fn mmio_read32(&self, offset: usize) -> u32 {
        self.inner.mmio_read32(offset)
    }
    fn mmio_write32(&self, offset: usize, value: u32) {
        self.inner.mmio_write32(offset, value)
    }
    #[inline(always)]
    fn mmio_write64(&self, _offset: usize, value: u64) {
        self.last_db.store(value, Ordering::Relaxed);
    }
    fn alloc_dma_raw(&self, size: usize) -> Result<RawDma, HalError> {
        self.inner.alloc_dma_raw(size)
    }
    unsafe fn free_dma_raw(&self, region: RawDma) {
        // SAFETY: forwarded unchanged under the caller's guarantees.
        unsafe { self.inner.free_dma_raw(region) }
    }
    fn now_ns(&self) -> u64 {
        self.inner.now_ns()
    }
    fn delay_us(&self, us: u32) {
        self.inner.delay_us(us)
    }
    // A write-combining UAR, as libmlx5's measured runs had: a single
    // inline WQE goes by BlueFlame in both contenders.
    fn write_combining(&self) -> bool {
        true
    }
}

/// Send work requests one QP can hold in every benchmark shape.
pub const SEND_WR: u32 = 64;

/// The shapes of the send benchmarks: a signaled SEND of one or four
/// gather entries ([`crate::facade::sges`]), or of 64 bytes inline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendShape {
    /// One gather entry.
    Sge1,
    /// Four gather entries.
    Sge4,
    /// 64 bytes inline.
    Inline64,
}

impl SendShape {
    /// Every shape, in the order of the benchmark ids.
    pub const ALL: [SendShape; 3] = [SendShape::Sge1, SendShape::Sge4, SendShape::Inline64];

    /// The shape an example's argument names: `sge4`, `inline64`, anything
    /// else `sge1`.
    pub fn from_arg(arg: &str) -> SendShape {
        match arg {
            "sge4" => SendShape::Sge4,
            "inline64" => SendShape::Inline64,
            _ => SendShape::Sge1,
        }
    }

    /// Its segment of the benchmark ids: `1_sge`, `4_sge`, `inline_64`.
    pub fn bench_name(self) -> &'static str {
        match self {
            SendShape::Sge1 => "1_sge",
            SendShape::Sge4 => "4_sge",
            SendShape::Inline64 => "inline_64",
        }
    }

    /// Gather entries per request.
    pub fn sge_count(self) -> usize {
        match self {
            SendShape::Sge1 => 1,
            SendShape::Sge4 => 4,
            SendShape::Inline64 => 0,
        }
    }

    /// Inline bytes per request.
    pub fn inline_len(self) -> usize {
        match self {
            SendShape::Inline64 => 64,
            _ => 0,
        }
    }
}

/// One shape's send workload: [`SEND_WR`] signaled SENDs with `wr_id`s
/// `0..SEND_WR`, as verbs work requests ([`SendWorkload::wrs`]) and as
/// ring-API requests ([`SendWorkload::reqs`]), both borrowing the gather
/// list and inline bytes held here. The two lists are built by separate
/// calls so a caller can place allocations between them (the examples
/// shift heap placement that way).
pub struct SendWorkload {
    shape: SendShape,
    sge: Vec<Sge>,
    data: [u8; 64],
}

impl SendWorkload {
    /// The gather list (and inline bytes) of `shape`.
    pub fn new(shape: SendShape) -> SendWorkload {
        SendWorkload {
            shape,
            sge: crate::facade::sges(shape.sge_count()),
            data: [0x5a; 64],
        }
    }

    /// The shape.
    pub fn shape(&self) -> SendShape {
        self.shape
    }

    /// The gather list (empty for an inline shape).
    pub fn sges(&self) -> &[Sge] {
        &self.sge
    }

    /// The inline bytes, for an inline shape.
    pub fn inline(&self) -> Option<&[u8]> {
        let n = self.shape.inline_len();
        (n > 0).then_some(&self.data[..n])
    }

    /// The verbs flags: signaled, and inline for an inline shape.
    pub fn flags(&self) -> SendFlags {
        if self.shape.inline_len() > 0 {
            SendFlags::SIGNALED | SendFlags::INLINE
        } else {
            SendFlags::SIGNALED
        }
    }

    /// The verbs work requests (`Verbs::post_send`).
    pub fn wrs(&self) -> Vec<SendWr<'_>> {
        let inline = &self.data[..self.shape.inline_len()];
        (0..SEND_WR as u64)
            .map(|i| SendWr {
                wr_id: i,
                send_flags: self.flags(),
                sg_list: &self.sge,
                inline_data: inline,
                ..SendWr::EMPTY
            })
            .collect()
    }

    /// The verbs work requests of a UD QP: the same, each to `remote_qpn`
    /// through `ah` with Q_Key `qkey` (`wr.ud`).
    pub fn ud_wrs(&self, ah: AhHandle, remote_qpn: u32, qkey: u32) -> Vec<SendWr<'_>> {
        self.wrs()
            .into_iter()
            .map(|w| SendWr {
                ah: Some(ah),
                remote_qpn,
                remote_qkey: qkey,
                ..w
            })
            .collect()
    }

    /// The ring-API requests (`Qp::post_send`).
    pub fn reqs(&self) -> Vec<SendRequest<'_>> {
        (0..SEND_WR as u64)
            .map(|i| SendRequest {
                wr_id: i,
                op: SendOp::Send,
                payload: match self.inline() {
                    Some(d) => Payload::Inline(d),
                    None => Payload::Sges(&self.sge),
                },
                signaled: true,
                solicited: false,
            })
            .collect()
    }
}

/// The verbs context of the send rigs: a send table of 512 blocks, since
/// 64 requests of 64 inline bytes in libmlx5's RC WQEs (320 bytes each)
/// round to a 32 KiB ring.
pub type SendCtx = Verbs<QuietHal, (), 32, 32, 64, 16, 512>;

const CAP: SendQueueCaps = SendQueueCaps {
    max_send_wr: SEND_WR,
    max_send_sge: 4,
    max_inline_data: 64,
};

/// A verbs context with a CQ of `2^log_cq` entries and an RC QP sending
/// on it (no receive queue), connected to itself and in RTS.
pub struct SendRig {
    /// The model (kept alive).
    pub dev: Device,
    /// The verbs context.
    pub ctx: SendCtx,
    /// The send CQ.
    pub cq: CqHandle,
    /// The QP.
    pub qp: QpHandle,
    /// Its number.
    pub qpn: u32,
}

impl SendRig {
    /// Bring up and create the objects.
    pub fn new(log_cq: u8) -> SendRig {
        let (dev, mut ctx, cq, attr) = Self::open(log_cq);
        let (qp, _) = ctx.create_qp(&attr).expect("create_qp");
        ctx.connect_loopback(qp, qp).expect("connect");
        Self::assemble(dev, ctx, cq, qp)
    }

    /// The model brought up, its verbs context, the send CQ and the QP
    /// attributes both rigs use (the benchmark's capacities).
    fn open(log_cq: u8) -> (Device, SendCtx, CqHandle, QpInitAttr) {
        let dev = Device::new(SimConfig::default());
        let hca = Hca::bring_up(QuietHal::new(dev.hal()), HcaConfig::default()).expect("up");
        let mut ctx: SendCtx = Verbs::open(hca);
        let (cq, _) = ctx.create_cq((1u32 << log_cq) - 1).expect("create_cq");
        let attr = QpInitAttr {
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap {
                max_send_wr: CAP.max_send_wr,
                max_send_sge: CAP.max_send_sge,
                max_inline_data: CAP.max_inline_data,
                ..Default::default()
            },
            sq_sig_all: false,
        };
        (dev, ctx, cq, attr)
    }

    fn assemble(dev: Device, ctx: SendCtx, cq: CqHandle, qp: QpHandle) -> SendRig {
        SendRig {
            qpn: ctx.qp_num(qp).expect("qp"),
            dev,
            ctx,
            cq,
            qp,
        }
    }

    /// The same with a UD QP in RTS (Q_Key `qkey`) and an address handle
    /// to its own port's RoCE v2 link-local GID (table entry 1): what a
    /// UD send post costs beside the RC one.
    pub fn new_ud(log_cq: u8, qkey: u32) -> (SendRig, AhHandle) {
        let (dev, mut ctx, cq, attr) = Self::open(log_cq);
        let (qp, _) = ctx.create_qp_of_type(&attr, QpType::Ud).expect("create_qp");
        let a = QpAttr {
            port_num: 1,
            qkey,
            ..QpAttr::default()
        };
        for (state, mask) in QpAttrMask::UD_ACTIVATE {
            let a = QpAttr {
                qp_state: state,
                ..a
            };
            ctx.modify_qp(qp, &a, mask).expect("UD modify_qp");
        }
        let gid = ctx.query_gid(1, 1).expect("gid");
        let ah = ctx
            .create_ah(&AhAttr {
                grh: GlobalRoute {
                    dgid: gid,
                    sgid_index: 1,
                    hop_limit: 64,
                    ..GlobalRoute::default()
                },
                is_global: true,
                port_num: 1,
                ..AhAttr::default()
            })
            .expect("create_ah");
        (Self::assemble(dev, ctx, cq, qp), ah)
    }

    /// The WQE counter the next post starts at.
    pub fn producer(&self) -> u16 {
        let q = self.ctx.qp(self.qp).expect("qp");
        unstable::qp::send_ring(q).expect("sq").producer_counter()
    }

    /// The send CQ's ring.
    pub fn cq_ring(&self) -> &CqRing<QuietHal> {
        unstable::cq::ring(self.ctx.cq(self.cq).expect("cq"))
    }

    /// Post `wrs` through the facade, `per_call` per `post_send` (the timed
    /// part of the `facade_send` benchmarks).
    #[inline(always)]
    pub fn post_chunks(&mut self, wrs: &[SendWr<'_>], per_call: usize) {
        for chunk in wrs.chunks(per_call) {
            self.ctx.post_send(self.qp, black_box(chunk)).unwrap();
        }
    }

    /// `iters` rounds of posting `wrs`, `per_call` per `post_send`, timed;
    /// each round's WQEs retired untimed (one CQE for the last retires them
    /// all). No CQE may go unmatched.
    pub fn time_posts(&mut self, wrs: &[SendWr<'_>], per_call: usize, iters: u64) -> Duration {
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            let p0 = self.producer();
            let t = Instant::now();
            self.post_chunks(wrs, per_call);
            total += t.elapsed();
            self.retire(p0, wrs.len());
        }
        assert_eq!(self.ctx.stats().unmatched_cqes, 0);
        total
    }

    /// Play the device: `n` requester CQEs at the CQ's consumer index,
    /// naming WQE counters `wqe + i·step`.
    pub fn write_cqes(&self, wqe: u16, step: u16, n: usize) {
        let ring = self.cq_ring();
        write_req_cqes(ring, ring.consumer_index(), self.qpn, wqe, step, n);
    }

    /// Retire the `n` equal-sized WQEs posted since the counter was `p0`:
    /// one CQE names the last, which completes them all; it is polled.
    pub fn retire(&mut self, p0: u16, n: usize) {
        self.retire_of(0x0a, p0, n)
    }

    /// [`SendRig::retire`] of WQEs of `opcode` ([`write_req_cqes_of`]).
    pub fn retire_of(&mut self, opcode: u8, p0: u16, n: usize) {
        let step = self.producer().wrapping_sub(p0) / n as u16;
        let ring = self.cq_ring();
        let last = self.producer() - step;
        write_req_cqes_of(ring, ring.consumer_index(), self.qpn, opcode, last, 0, 1);
        let mut wc = [WorkCompletion::EMPTY; 1];
        assert_eq!(self.ctx.poll_cq(self.cq, &mut wc).unwrap(), 1);
    }
}

/// The same through the driver's objects (the ring API: `Qp::post_send`,
/// `Cq::poll`, `Qp::complete_send`).
pub struct RingSendRig {
    /// The model (kept alive).
    pub dev: Device,
    /// The HCA.
    pub hca: Hca<QuietHal>,
    /// The send CQ.
    pub cq: Cq<QuietHal>,
    /// The QP, in RTS.
    pub qp: Qp<QuietHal, Vec<SendSlot>>,
}

impl RingSendRig {
    /// Bring up and create the objects.
    pub fn new(log_cq: u8) -> RingSendRig {
        let dev = Device::new(SimConfig::default());
        let hca = Hca::bring_up(QuietHal::new(dev.hal()), HcaConfig::default()).expect("up");
        let mut cq = hca
            .create_cq((1u32 << log_cq) - 1, CqOptions::default())
            .expect("cq");
        let links = QpLinks {
            send_cq: Some(&mut cq),
            ..QpLinks::default()
        };
        let mut qp = hca
            .create_qp(Some(CAP), links, vec![SendSlot::EMPTY; 256])
            .expect("qp");
        hca.connect_loopback_self(&mut qp).expect("connect");
        RingSendRig { dev, hca, cq, qp }
    }

    /// The WQE counter the next post starts at.
    pub fn producer(&self) -> u16 {
        unstable::qp::send_ring(&self.qp)
            .expect("sq")
            .producer_counter()
    }

    /// Post `reqs` through `Qp::post_send`, `per_call` per call (the timed
    /// part of the `facade_send/.../ring` benchmarks).
    #[inline(always)]
    pub fn post_chunks(&mut self, reqs: &[SendRequest<'_>], per_call: usize) {
        for chunk in reqs.chunks(per_call) {
            self.qp.post_send(black_box(chunk)).unwrap();
        }
    }

    /// Play the device: `n` requester CQEs at the CQ's consumer index,
    /// naming WQE counters `wqe + i·step`.
    pub fn write_cqes(&self, wqe: u16, step: u16, n: usize) {
        let ring = unstable::cq::ring(&self.cq);
        write_req_cqes(ring, ring.consumer_index(), self.qp.qpn(), wqe, step, n);
    }

    /// Retire the `n` equal-sized WQEs posted since the counter was `p0`
    /// as [`SendRig::retire`] does, through `Cq::poll` and
    /// `Qp::complete_send`.
    pub fn retire(&mut self, p0: u16, n: usize) {
        let step = self.producer().wrapping_sub(p0) / n as u16;
        self.write_cqes(self.producer() - step, 0, 1);
        let mut out = [Cqe::EMPTY; 1];
        assert_eq!(self.cq.poll(&mut out), 1);
        self.qp.complete_send(&out[0]).unwrap();
    }
}

/// Requester CQEs (REQ, opcode SEND) into `ring` at running indices
/// `ci .. ci + n`, naming QP `qpn` and WQE counters `wqe + i·step`.
pub fn write_req_cqes<H: Hal>(ring: &CqRing<H>, ci: u32, qpn: u32, wqe: u16, step: u16, n: usize) {
    write_req_cqes_of(ring, ci, qpn, 0x0a, wqe, step, n)
}

/// [`write_req_cqes`] for WQEs of `opcode` (the WQE opcode the CQE's
/// `sop_drop_qpn` names: 0x08 RDMA WRITE, 0x0a SEND, 0x10 RDMA READ, 0x11
/// CMP_SWAP, 0x12 FETCH_ADD).
pub fn write_req_cqes_of<H: Hal>(
    ring: &CqRing<H>,
    ci: u32,
    qpn: u32,
    opcode: u8,
    wqe: u16,
    step: u16,
    n: usize,
) {
    let r = ring.region();
    let stride = ring.cqe_size().stride();
    let mask = ring.nent() as u32 - 1;
    for i in 0..n as u32 {
        let idx = ci.wrapping_add(i);
        let cqe = ring.base_offset() + (idx & mask) as usize * stride + stride - 64;
        let owner = ((idx >> ring.log_nent()) & 1) as u8;
        r.write_be32(cqe + 0x2c, 0);
        r.write_be32(cqe + 0x34, 0);
        r.write_be32(cqe + 0x38, ((opcode as u32) << 24) | qpn);
        r.write_be16(cqe + 0x3c, wqe.wrapping_add(step.wrapping_mul(i as u16)));
        r.write_u8(cqe + 0x3f, owner);
    }
}

/// A raw send queue: WQEs written with plain stores into a ring of
/// `wqebbs` 64-byte blocks, a plain `wr_id` table, the doorbell record and
/// the doorbell. No checks (queue full, gather-list length).
pub struct RawSq<H: Hal> {
    ring: DmaRegion<H>,
    dbr: DmaRegion<H>,
    hal: H,
    /// `wr_id` per WQEBB.
    pub wrids: Vec<u64>,
    wqebbs: usize,
    qpn: u32,
    cur: u16,
    last: u64,
}

impl<H: Hal> RawSq<H> {
    /// A ring of `wqebbs` (a power of two) blocks.
    pub fn new(hal: &H, wqebbs: usize, qpn: u32) -> RawSq<H> {
        RawSq {
            ring: hal.alloc_dma(wqebbs * 64).expect("DMA"),
            dbr: hal.alloc_dma(8).expect("DMA"),
            hal: hal.clone(),
            wrids: vec![0; wqebbs],
            wqebbs,
            qpn,
            cur: 0,
            last: 0,
        }
    }

    /// Write one signaled SEND: the gather list, or `inline` when given.
    #[inline(always)]
    pub fn post(&mut self, wr_id: u64, sges: &[mlx5_driver::srq::Sge], inline: Option<&[u8]>) {
        let idx = self.cur as usize & (self.wqebbs - 1);
        let p = self.ring.as_ptr();
        let wqe = idx * 64;
        let ring_len = self.wqebbs * 64;
        // SAFETY: (whole block) every store is inside the live ring: the
        // offset is taken modulo its length, segments are 16-byte aligned.
        let ds = unsafe {
            let seg = |u: usize| p.add((wqe + 16 * u) % ring_len);
            match inline {
                Some(d) => {
                    (seg(1) as *mut u32).write_volatile((d.len() as u32 | 0x8000_0000).to_be());
                    let at = wqe + 20;
                    let first = d.len().min(ring_len - at);
                    self.ring.write_bytes(at, &d[..first]);
                    self.ring.write_bytes(0, &d[first..]);
                    1 + (4 + d.len()).div_ceil(16)
                }
                None => {
                    for (i, s) in sges.iter().enumerate() {
                        let q = seg(1 + i);
                        (q as *mut u32).write_volatile(s.length.to_be());
                        (q.add(4) as *mut u32).write_volatile(s.lkey.to_be());
                        (q.add(8) as *mut u64).write_volatile(s.addr.to_be());
                    }
                    1 + sges.len()
                }
            }
        };
        let w0 = ((self.cur as u64) << 40 | 0x0a << 32) | ((self.qpn as u64) << 8 | ds as u64);
        // SAFETY: the control segment is the first 16 bytes of the WQE.
        unsafe {
            (p.add(wqe) as *mut u64).write_volatile(w0.to_be());
            (p.add(wqe + 8) as *mut u64).write_volatile((8u64 << 32).to_be());
        }
        self.wrids[idx] = wr_id;
        self.last = w0;
        self.cur = self.cur.wrapping_add(ds.div_ceil(4) as u16);
    }

    /// Publish: barrier, doorbell record, doorbell.
    #[inline(always)]
    pub fn ring(&self) {
        mlx5_hal::barrier::dma_wmb();
        self.dbr.write_be32(4, self.cur as u32);
        mlx5_hal::barrier::mmio_wmb();
        self.hal.mmio_write64(0x800, self.last);
    }
}
