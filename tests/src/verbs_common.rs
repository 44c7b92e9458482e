//! Shared setup of the QP verbs tests: a context on a model profile, a
//! connected pair with one registered buffer, polling helpers.

use crate::{assert_clean, bring_up};
use mlx5_driver::verbs::{
    AccessFlags, AsyncEvent, CqHandle, Errno, Mr, QpCap, QpHandle, QpInitAttr, RecvWr, SendFlags,
    SendWr, Sge, SrqHandle, SrqInitAttr, Verbs, WorkCompletion, WrOpcode,
};
use mlx5_hal::{DmaRegion, Hal};
use mlx5_sim::{Device, ExecMode, Profile, SimHal};

/// A verbs context on the model.
pub type Ctx = Verbs<SimHal>;

/// Bytes of the shared buffer: the first half is the send area, the
/// second half receive slots of `SLOT` bytes.
pub const BUF: usize = 64 * 1024;
/// Bytes of one receive slot.
pub const SLOT: usize = 512;
/// Offset of the receive slots in the shared buffer.
pub const RECV_AREA: usize = BUF / 2;

/// A synchronous model of profile `p` and a context on it.
pub fn open(p: Profile) -> (Device, Ctx) {
    let dev = crate::device(p, ExecMode::Synchronous);
    let ctx = Verbs::open(bring_up(&dev));
    (dev, ctx)
}

/// A model of profile `p` on its own thread and a context on it.
pub fn open_threaded(p: Profile) -> (Device, Ctx) {
    let dev = crate::device(p, ExecMode::Threaded);
    let ctx = Verbs::open(bring_up(&dev));
    (dev, ctx)
}

/// A ConnectX-5 with an InfiniBand port.
pub fn open_ib() -> (Device, Ctx) {
    let dev = crate::device(Profile::ConnectX5, ExecMode::Synchronous);
    dev.caps_mut(|c| c.port_type = 0);
    let ctx = Verbs::open(bring_up(&dev));
    (dev, ctx)
}

/// Close the context (panicking with `what` if it fails) and check the
/// model is clean.
pub fn close(dev: &Device, ctx: Ctx, what: &str) {
    if let Err(e) = ctx.close() {
        panic!("{what}: close failed: {e}");
    }
    assert_clean(dev, what);
}

/// Send capacities to ask for; the receive side uses the SRQ.
pub fn cap(max_send_wr: u32, max_send_sge: u32, max_inline_data: u32) -> QpCap {
    QpCap {
        max_send_wr,
        max_send_sge,
        max_inline_data,
        ..QpCap::default()
    }
}

/// Two RC QPs `a` and `b` on one send CQ and one receive CQ, both on one
/// SRQ, connected to each other; one buffer registered for local and
/// remote access.
pub struct Pair {
    /// The send CQ of both QPs.
    pub scq: CqHandle,
    /// The receive CQ of both QPs and of the SRQ.
    pub rcq: CqHandle,
    /// The SRQ both QPs receive on.
    pub srq: SrqHandle,
    /// The first QP.
    pub a: QpHandle,
    /// The second QP, `a`'s peer.
    pub b: QpHandle,
    /// The capacities `create_qp` returned for `a`.
    pub cap: QpCap,
    /// The shared buffer of [`BUF`] bytes.
    pub buf: DmaRegion<SimHal>,
    /// Its registration (taken by [`Pair::destroy`]).
    pub mr: Option<Mr>,
}

impl Pair {
    /// The pair, connected to each other by loopback.
    pub fn new(dev: &Device, ctx: &mut Ctx, want: QpCap) -> Pair {
        let p = Pair::unconnected(dev, ctx, want);
        ctx.connect_loopback(p.a, p.b).expect("connect_loopback");
        p
    }

    /// The pair, both QPs left in RESET.
    pub fn unconnected(dev: &Device, ctx: &mut Ctx, want: QpCap) -> Pair {
        let (scq, _) = ctx.create_cq(255).unwrap();
        let (rcq, _) = ctx.create_cq(255).unwrap();
        let (srq, _) = ctx
            .create_srq(&SrqInitAttr {
                max_wr: 63,
                max_sge: 1,
                srq_limit: 0,
                cq: Some(rcq),
            })
            .unwrap();
        let attr = QpInitAttr {
            send_cq: scq,
            recv_cq: rcq,
            srq: Some(srq),
            cap: want,
            sq_sig_all: false,
        };
        let (a, cap) = ctx.create_qp(&attr).unwrap();
        let (b, _) = ctx.create_qp(&attr).unwrap();
        let buf = dev.hal().alloc_dma(BUF).unwrap();
        let mr = ctx
            .reg_mr(
                buf.iova(),
                BUF as u64,
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
            )
            .unwrap();
        Pair {
            scq,
            rcq,
            srq,
            a,
            b,
            cap,
            buf,
            mr: Some(mr),
        }
    }

    /// The buffer's local key.
    pub fn lkey(&self) -> u32 {
        self.mr.as_ref().unwrap().lkey()
    }

    /// The buffer's remote key.
    pub fn rkey(&self) -> u32 {
        self.mr.as_ref().unwrap().rkey()
    }

    /// A gather entry of `len` bytes at `off` in the send area.
    pub fn sge(&self, off: usize, len: u32) -> Sge {
        Sge {
            addr: self.buf.iova() + off as u64,
            length: len,
            lkey: self.lkey(),
        }
    }

    /// Post receive WQEs with ids `first..first+n`, slot `id % 64` each.
    pub fn post_recv(&self, ctx: &mut Ctx, first: u64, n: u64) {
        let sges: Vec<[Sge; 1]> = (first..first + n)
            .map(|id| {
                [Sge {
                    addr: self.buf.iova() + (RECV_AREA + (id as usize % 64) * SLOT) as u64,
                    length: SLOT as u32,
                    lkey: self.lkey(),
                }]
            })
            .collect();
        let wrs: Vec<RecvWr> = sges
            .iter()
            .zip(first..)
            .map(|(s, wr_id)| RecvWr { wr_id, sges: s })
            .collect();
        ctx.post_srq_recv(self.srq, &wrs).unwrap();
    }

    /// The receive slot of id `id`.
    pub fn received(&self, id: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.buf
            .read_bytes(RECV_AREA + (id as usize % 64) * SLOT, &mut v);
        v
    }

    /// Fill `len` bytes of the send area at `off` with a pattern.
    pub fn fill(&self, off: usize, len: usize, seed: u8) -> Vec<u8> {
        let v: Vec<u8> = (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect();
        self.buf.write_bytes(off, &v);
        v
    }

    /// Destroy everything this pair made.
    pub fn destroy(mut self, ctx: &mut Ctx) {
        ctx.destroy_qp(self.a).unwrap();
        ctx.destroy_qp(self.b).unwrap();
        ctx.destroy_srq(self.srq).unwrap();
        ctx.destroy_cq(self.scq).unwrap();
        ctx.destroy_cq(self.rcq).unwrap();
        ctx.dereg_mr(self.mr.take().unwrap())
            .map_err(|(_, e)| e)
            .unwrap();
    }
}

/// A signaled SEND of one gather entry.
pub fn send<'a>(wr_id: u64, sg: &'a [Sge]) -> SendWr<'a> {
    SendWr {
        wr_id,
        opcode: WrOpcode::Send,
        send_flags: SendFlags::SIGNALED,
        sg_list: sg,
        ..SendWr::EMPTY
    }
}

/// Poll until `n` completions came or the device had time to produce
/// them (device time advances between tries, for RNR and ACK timers; a
/// threaded device gets real time).
pub fn poll_n(dev: &Device, ctx: &mut Ctx, cq: CqHandle, n: usize) -> Vec<WorkCompletion> {
    let mut got = Vec::new();
    let mut wc = [WorkCompletion::EMPTY; 16];
    for _ in 0..2000 {
        let k = ctx.poll_cq(cq, &mut wc).unwrap();
        got.extend_from_slice(&wc[..k]);
        if got.len() >= n {
            break;
        }
        if k == 0 {
            dev.advance_us(100);
        }
    }
    got
}

/// Everything in the CQ now.
pub fn drain(ctx: &mut Ctx, cq: CqHandle) -> Vec<WorkCompletion> {
    drain_by::<16>(ctx, cq)
}

/// Everything in the CQ now, polled `N` at a time.
pub fn drain_by<const N: usize>(ctx: &mut Ctx, cq: CqHandle) -> Vec<WorkCompletion> {
    let mut got = Vec::new();
    let mut wc = [WorkCompletion::EMPTY; N];
    loop {
        let k = ctx.poll_cq(cq, &mut wc).unwrap();
        got.extend_from_slice(&wc[..k]);
        if k < wc.len() {
            return got;
        }
    }
}

/// The work request ids of `wcs`, in order.
pub fn ids(wcs: &[WorkCompletion]) -> Vec<u64> {
    wcs.iter().map(|w| w.wr_id).collect()
}

/// Expect `EAGAIN` once nothing is left.
pub fn no_more_events(ctx: &mut Ctx) {
    assert_eq!(ctx.get_async_event().unwrap_err(), Errno::EAGAIN);
}

/// Every async event readable now (`get_async_event` until `EAGAIN`; none
/// acknowledged).
pub fn async_events(ctx: &mut Ctx) -> Vec<AsyncEvent> {
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

/// Every completion event of the context's own channel readable now
/// (`get_cq_event` until `EAGAIN`).
pub fn cq_events(ctx: &mut Ctx) -> Vec<CqHandle> {
    let mut v = Vec::new();
    loop {
        match ctx.get_cq_event() {
            Ok(h) => v.push(h),
            Err(e) => {
                assert_eq!(e, Errno::EAGAIN);
                return v;
            }
        }
    }
}
