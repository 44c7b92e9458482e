//! A verbs context on the model set up for the data-path benchmarks: one
//! CQ, one SRQ and one QP receiving through it, plus the same rings made
//! directly (the ring API) on the same platform, and a writer that plays
//! the device by storing receive CQEs straight into ring memory.
//!
//! The model is only used to create the objects (firmware commands); the
//! timed loops touch ring memory alone, as on a card.

use mlx5_driver::cq::{Cqe, CqeSize, CqeStatus};
use mlx5_driver::srq::{Sge, SrqGeometry};
use mlx5_driver::unstable;
use mlx5_driver::unstable::cq::{CqRing, DoorbellRecord};
use mlx5_driver::unstable::srq::SrqRing;
use mlx5_driver::verbs::{
    CqHandle, QpCap, QpHandle, QpInitAttr, RecvWr, SrqHandle, SrqInitAttr, Verbs,
};
use mlx5_driver::{Hca, HcaConfig};
use mlx5_hal::Hal;
use mlx5_regs::CqeOpcode;
use mlx5_sim::{Device, SimConfig, SimHal};

/// The verbs context the benchmarks use (default table sizes).
pub type Ctx = Verbs<SimHal>;

/// Bytes every benchmark receive CQE reports (below every posted buffer).
pub const BYTE_LEN: u32 = 64;

/// A scatter or gather list of `n` entries of 1 KiB each, 4 KiB apart,
/// under one key (the buffers every facade benchmark posts).
pub fn sges(n: usize) -> Vec<Sge> {
    (0..n as u64)
        .map(|i| Sge {
            addr: 0x10_0000 + i * 4096,
            length: 1024,
            lkey: 0x42,
        })
        .collect()
}

/// `n` receive requests with `wr_id`s `0..n`, each with scatter list
/// `sge`.
pub fn recv_wrs(n: usize, sge: &[Sge]) -> Vec<RecvWr<'_>> {
    (0..n as u64)
        .map(|i| RecvWr {
            wr_id: i,
            sges: sge,
        })
        .collect()
}

/// A context with a CQ of `2^log_cq` entries, an SRQ and a QP on both.
pub struct Rig {
    /// The model (kept alive).
    pub dev: Device,
    /// The verbs context.
    pub ctx: Ctx,
    /// The CQ (send and receive CQ of the QP).
    pub cq: CqHandle,
    /// The SRQ.
    pub srq: SrqHandle,
    /// The QP, in RESET (receive CQEs name it).
    pub qp: QpHandle,
    /// Its number.
    pub qpn: u32,
    /// The SRQ's number.
    pub srqn: u32,
    /// WQEs in the SRQ ring (`max_wr + 1`).
    pub wqe_cnt: u32,
    /// The SRQ WQE [`Rig::device_completes`] names next.
    next_wqe: u32,
}

impl Rig {
    /// Bring up a model and create the objects: the CQ gets `2^log_cq`
    /// entries, the SRQ `srq_wr` (a power of two minus one) WQEs of
    /// `max_sge` scatter entries.
    pub fn new(log_cq: u8, srq_wr: u32, max_sge: u32) -> Rig {
        let dev = Device::new(SimConfig::default());
        let hca = Hca::bring_up(dev.hal(), HcaConfig::default()).expect("bring-up");
        let mut ctx: Ctx = Verbs::open(hca);
        let (cq, _) = ctx.create_cq((1u32 << log_cq) - 1).expect("create_cq");
        let (srq, attr) = ctx
            .create_srq(&SrqInitAttr {
                max_wr: srq_wr,
                max_sge,
                ..Default::default()
            })
            .expect("create_srq");
        let (qp, _) = ctx
            .create_qp(&QpInitAttr {
                send_cq: cq,
                recv_cq: cq,
                srq: Some(srq),
                cap: QpCap {
                    max_send_wr: 16,
                    max_send_sge: 1,
                    ..Default::default()
                },
                sq_sig_all: false,
            })
            .expect("create_qp");
        Rig {
            qpn: ctx.qp_num(qp).expect("qp"),
            srqn: ctx.srq_num(srq).expect("srq"),
            wqe_cnt: attr.max_wr + 1,
            next_wqe: 0,
            dev,
            ctx,
            cq,
            srq,
            qp,
        }
    }

    /// The facade CQ's ring.
    pub fn cq_ring(&self) -> &CqRing<SimHal> {
        unstable::cq::ring(self.ctx.cq(self.cq).expect("cq"))
    }

    /// Post `n` receives with `wr_id`s `0..n` and scatter list `sge`
    /// through the facade, 16 per call.
    pub fn fill(&mut self, n: usize, sge: &[Sge]) {
        for chunk in recv_wrs(n, sge).chunks(16) {
            self.ctx.post_srq_recv(self.srq, chunk).unwrap();
        }
    }

    /// Play the device: `n` receive CQEs at the CQ's consumer index, for
    /// the SRQ's WQEs in the order they were posted (continuing where the
    /// last call stopped).
    pub fn device_completes(&mut self, n: usize) {
        let ci = self.ctx.cq(self.cq).expect("cq").consumer_index();
        self.write_recv_cqes(ci, self.next_wqe, n);
        self.next_wqe = (self.next_wqe + n as u32) % self.wqe_cnt;
    }

    /// [`Rig::device_completes`] with the CQEs held back ([`HeldCqes`]):
    /// none is software-owned until released.
    pub fn device_completes_held(&mut self, n: usize) -> HeldCqes {
        let ci = self.cq_ring().consumer_index();
        self.device_completes(n);
        HeldCqes::hold(self.cq_ring(), ci, n)
    }

    /// Play the device: `n` receive CQEs for the QP at the CQ's running
    /// indices `ci..`, naming SRQ WQEs `wqe..` (mod the ring).
    pub fn write_recv_cqes(&self, ci: u32, wqe: u32, n: usize) {
        write_recv_cqes(
            self.cq_ring(),
            ci,
            self.qpn,
            self.srqn,
            wqe,
            self.wqe_cnt,
            n,
        );
    }
}

/// Receive CQEs (RESP_SEND, [`BYTE_LEN`] bytes) into `ring` at running
/// indices `ci .. ci + n`, each owned by software for its pass, naming QP
/// `qpn`, SRQ `srqn` and WQE `(wqe + i) mod wqe_cnt`.
pub fn write_recv_cqes<H: Hal>(
    ring: &CqRing<H>,
    ci: u32,
    qpn: u32,
    srqn: u32,
    wqe: u32,
    wqe_cnt: u32,
    n: usize,
) {
    let r = ring.region();
    let stride = ring.cqe_size().stride();
    let mask = ring.nent() as u32 - 1;
    for i in 0..n as u32 {
        let idx = ci.wrapping_add(i);
        let cqe = ring.base_offset() + (idx & mask) as usize * stride + stride - 64;
        let owner = ((idx >> ring.log_nent()) & 1) as u8;
        r.write_be32(cqe + 0x18, 0);
        r.write_be32(cqe + 0x20, srqn);
        r.write_be32(cqe + 0x24, 0);
        r.write_be32(cqe + 0x2c, BYTE_LEN);
        r.write_be32(cqe + 0x34, 0);
        r.write_be32(cqe + 0x38, qpn);
        r.write_be16(cqe + 0x3c, ((wqe + i) % wqe_cnt) as u16);
        r.write_u8(cqe + 0x3f, (CqeOpcode::RESP_SEND.0 << 4) | owner);
    }
}

/// Receive CQEs written ahead of time ([`write_recv_cqes`]) but held
/// back: each stays the device's until [`HeldCqes::release`]
/// stores its owner byte, so a poll finds exactly the CQEs released so far.
/// It plays a device that completes one request at a time, at the cost of
/// one byte store, the same for every contender.
pub struct HeldCqes {
    /// The ring's memory.
    ring: *mut u8,
    /// Running index of the first CQE.
    first: u32,
    /// Offset of the first entry's last byte (the owner byte of a
    /// 64-byte CQE, the second half of a 128-byte slot).
    last_byte: usize,
    stride: usize,
    mask: u32,
    log: u32,
}

impl HeldCqes {
    /// Hand the `n` CQEs [`write_recv_cqes`] wrote into `ring` from running
    /// index `first` on back to the device: each owner bit set for the
    /// other pass.
    pub fn hold<H: Hal>(ring: &CqRing<H>, first: u32, n: usize) -> HeldCqes {
        let stride = ring.cqe_size().stride();
        let held = HeldCqes {
            ring: ring.region().as_ptr(),
            first,
            last_byte: ring.base_offset() + stride - 1,
            stride,
            mask: ring.nent() as u32 - 1,
            log: ring.log_nent() as u32,
        };
        for i in 0..n as u32 {
            let (at, op_own) = held.owner_byte(i);
            ring.region().write_u8(at, op_own ^ 1);
        }
        held
    }

    /// Where the `i`-th CQE's owner byte is, and its software-owned value.
    #[inline(always)]
    fn owner_byte(&self, i: u32) -> (usize, u8) {
        let idx = self.first.wrapping_add(i);
        let at = self.last_byte + (idx & self.mask) as usize * self.stride;
        (
            at,
            (CqeOpcode::RESP_SEND.0 << 4) | ((idx >> self.log) & 1) as u8,
        )
    }

    /// Give the `i`-th CQE to software.
    ///
    /// # Safety
    ///
    /// The ring [`HeldCqes::hold`] held the CQEs in is still allocated (its
    /// CQ was neither destroyed nor resized).
    #[inline(always)]
    pub unsafe fn release(&self, i: u32) {
        let (at, op_own) = self.owner_byte(i);
        // SAFETY: `at` is the owner byte of an entry of the ring, which is
        // still allocated (the caller's contract).
        unsafe { self.ring.add(at).write_volatile(op_own) };
    }
}

/// The same objects through the ring API, on the same platform: a CQ ring
/// with its doorbell record and an SRQ ring (no firmware object: the
/// benchmark plays the device).
pub struct RingRig<H: Hal> {
    /// The CQ ring.
    pub cq: CqRing<H>,
    /// Its doorbell record.
    pub dbr: DoorbellRecord<H>,
    /// The SRQ ring.
    pub srq: SrqRing<H>,
}

impl<H: Hal> RingRig<H> {
    /// A CQ ring of `2^log_cq` 64-byte CQEs and an SRQ ring of `geo`.
    pub fn new(hal: &H, log_cq: u8, geo: SrqGeometry) -> RingRig<H> {
        RingRig {
            cq: CqRing::new(hal, log_cq, CqeSize::B64).expect("DMA"),
            dbr: DoorbellRecord::new(hal).expect("DMA"),
            srq: SrqRing::new(hal, geo).expect("DMA"),
        }
    }
}

/// A receive CQE through the ring API by a consumer that checks what the
/// verbs facade checks, for one QP and its SRQ known in advance: a
/// successful receive opcode, the QP and SRQ numbers, the WQE posted
/// ([`SrqRing::complete_wqe`]) and the byte count within its buffers (none
/// for RDMA WRITE with immediate, which scatters nothing). The `wr_id`, or
/// `None` when a check fails. What the facade does beyond this is find the
/// QP and its SRQ by number among all of its objects, and fill a
/// `WorkCompletion`.
#[inline(always)]
pub fn complete_checked<H: Hal>(srq: &mut SrqRing<H>, c: &Cqe, qpn: u32, srqn: u32) -> Option<u64> {
    let recv = matches!(
        c.opcode,
        CqeOpcode::RESP_SEND
            | CqeOpcode::RESP_SEND_IMM
            | CqeOpcode::RESP_SEND_INV
            | CqeOpcode::RESP_WR_IMM
    );
    if !recv || c.status != CqeStatus::Success || c.qpn != qpn || c.srqn != srqn {
        return None;
    }
    let done = srq.complete_wqe(c.wqe_counter).ok()?;
    let fits = c.opcode == CqeOpcode::RESP_WR_IMM || c.byte_len as u64 <= done.capacity;
    fits.then_some(done.wr_id)
}

/// What the raw baseline hands back per completion (the fields a
/// `WorkCompletion` of a receive carries).
#[derive(Debug, Default, Clone, Copy)]
pub struct RawWc {
    /// From the raw `wr_id` table.
    pub wr_id: u64,
    /// `op_own`.
    pub op_own: u8,
    /// Syndrome word (error CQEs only).
    pub syndrome: u32,
    /// Bytes.
    pub byte_len: u32,
    /// QP number.
    pub qpn: u32,
    /// SRQ number.
    pub srqn: u32,
    /// Immediate.
    pub imm: u32,
}

/// Is the CQE at `ci` of a raw ring of `2^log_nent` 64-byte entries still
/// hardware-owned? (One owner-byte load and compare.)
///
/// # Safety
///
/// `ring` points to live memory of `2^log_nent` 64-byte entries.
#[inline(always)]
pub unsafe fn raw_empty(ring: *const u8, log_nent: u32, ci: u32) -> bool {
    let cqe = (ci & ((1 << log_nent) - 1)) as usize * 64;
    // SAFETY: `cqe + 0x3f` lies inside the live ring (caller's contract).
    let op_own = unsafe { ring.add(cqe + 0x3f).read_volatile() };
    op_own >> 4 == 0xf || (op_own & 1) as u32 != (ci >> log_nent) & 1
}

/// The raw receive poll: ownership test, read barrier, the fields, the
/// `wr_id` from a plain table indexed by the WQE counter, doorbell record
/// once per call. No check of anything the device wrote.
///
/// # Safety
///
/// `ring` points to live memory of `2^log_nent` 64-byte entries, `dbr` to
/// 4 live writable bytes, and `wrids.len()` is a power of two.
#[inline(always)]
pub unsafe fn raw_poll_recv(
    ring: *const u8,
    log_nent: u32,
    ci: &mut u32,
    dbr: *mut u32,
    wrids: &[u64],
    out: &mut [RawWc],
) -> usize {
    let mask = (1u32 << log_nent) - 1;
    let mut n = 0;
    while n < out.len() {
        // SAFETY: the caller's contract.
        if unsafe { raw_empty(ring, log_nent, *ci) } {
            break;
        }
        let cqe = (*ci & mask) as usize * 64;
        mlx5_hal::barrier::dma_rmb();
        // SAFETY: (whole block) `cqe + 64 <= ring length`; volatile aligned
        // reads of live DMA memory.
        unsafe {
            let op_own = ring.add(cqe + 0x3f).read_volatile();
            let rd32 = |o: usize| u32::from_be((ring.add(cqe + o) as *const u32).read_volatile());
            let wqe = u16::from_be((ring.add(cqe + 0x3c) as *const u16).read_volatile());
            out[n] = RawWc {
                wr_id: wrids[wqe as usize & (wrids.len() - 1)],
                op_own,
                syndrome: if op_own >> 4 == 13 || op_own >> 4 == 14 {
                    rd32(0x34)
                } else {
                    0
                },
                byte_len: rd32(0x2c),
                qpn: rd32(0x38) & 0xff_ffff,
                srqn: rd32(0x20) & 0xff_ffff,
                imm: rd32(0x24),
            };
        }
        *ci = ci.wrapping_add(1);
        n += 1;
    }
    if n > 0 {
        mlx5_hal::barrier::dma_rmb();
        // SAFETY: the doorbell record is 4 live bytes of DMA memory.
        unsafe { dbr.write_volatile((*ci & 0xff_ffff).to_be()) };
    }
    n
}
