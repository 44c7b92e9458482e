//! Shared helpers for the benchmarks in `benches/`: the benchmark plays the
//! device by writing CQEs straight into ring memory, as a DMA engine would.

use mlx5_driver::srq::{Sge, SrqGeometry};
use mlx5_driver::unstable::cq::CqRing;
use mlx5_hal::host::HostHal;
use mlx5_hal::{barrier, DmaRegion, Hal, HalError};

pub mod facade;
pub mod facade_own_rq;
pub mod facade_recv;
pub mod facade_send;

/// Fill every slot of `ring` with a receive CQE owned by software for the pass
/// that starts at running index `first` (which must be a multiple of the ring
/// size), with distinct byte counts and WQE counters.
pub fn prefill_cq(ring: &CqRing<HostHal>, first: u32) {
    let nent = ring.nent();
    let stride = ring.cqe_size().stride();
    let owner = ((first >> ring.log_nent()) & 1) as u8;
    let base = ring.region().as_ptr();
    for slot in 0..nent {
        let cqe = slot * stride + stride - 64;
        let p = first.wrapping_add(slot as u32);
        let fields: [(usize, &[u8]); 5] = [
            (0x20, &0x0000_0042u32.to_be_bytes()),
            (0x2c, &(p & 0xffff).to_be_bytes()),
            (0x38, &0x0000_1234u32.to_be_bytes()),
            (0x3c, &(p as u16).to_be_bytes()),
            (0x3f, &[(2 << 4) | owner]),
        ];
        for (off, bytes) in fields {
            for (i, b) in bytes.iter().enumerate() {
                // SAFETY: `cqe + off + i` < ring length (slot < nent, off < 64);
                // the region is live DMA memory of the host platform.
                unsafe { base.add(cqe + off + i).write_volatile(*b) };
            }
        }
    }
}

/// The raw receive-posting baseline: the same WQE bytes (data segments,
/// terminator), `wr_id` store, free-list advance through `next_wqe_index`
/// and doorbell record as `SrqRing::post`, written with plain volatile
/// stores and no driver around them.
pub struct RawSrq<H: Hal = HostHal> {
    wqes: DmaRegion<H>,
    /// The `wr_id` of each WQE (a plain table).
    pub wrids: Vec<u64>,
    dbr: DmaRegion<H>,
    stride: usize,
    max_sge: usize,
    head: u16,
    counter: u16,
}

impl<H: Hal> RawSrq<H> {
    /// A ring of the given geometry with WQE `i` linked to `i + 1`.
    pub fn new(hal: &H, geo: SrqGeometry) -> RawSrq<H> {
        let n = geo.wqe_cnt();
        let wqes = hal.alloc_dma(n * geo.stride()).expect("DMA memory");
        for i in 0..n {
            wqes.write_be16(i * geo.stride() + 2, ((i + 1) % n) as u16);
        }
        RawSrq {
            wqes,
            wrids: vec![0; n],
            dbr: hal.alloc_dma(4).expect("DMA memory"),
            stride: geo.stride(),
            max_sge: geo.max_sge,
            head: 0,
            counter: 0,
        }
    }

    /// Write one WQE at the head and advance (no fullness check: the
    /// baseline never completes, the list is circular).
    #[inline(always)]
    pub fn post(&mut self, wr_id: u64, sges: &[Sge]) {
        let base = self.head as usize * self.stride;
        let p = self.wqes.as_ptr();
        // SAFETY: (whole block) offsets stay inside WQE `head` of the live
        // ring (`sges.len() < max_sge` as the callers size the geometry);
        // aligned volatile stores.
        unsafe {
            for (k, s) in sges.iter().enumerate() {
                let d = p.add(base + 16 * (k + 1));
                (d as *mut u32).write_volatile(s.length.to_be());
                (d.add(4) as *mut u32).write_volatile(s.lkey.to_be());
                (d.add(8) as *mut u64).write_volatile(s.addr.to_be());
            }
            if sges.len() < self.max_sge {
                let d = p.add(base + 16 * (sges.len() + 1));
                (d as *mut u32).write_volatile(0);
                (d.add(4) as *mut u32).write_volatile(0x100u32.to_be());
                (d.add(8) as *mut u64).write_volatile(0);
            }
            self.wrids[self.head as usize] = wr_id;
            self.head = u16::from_be((p.add(base + 2) as *const u16).read_volatile());
        }
        self.counter = self.counter.wrapping_add(1);
    }

    /// Publish the posted counter in the doorbell record.
    #[inline(always)]
    pub fn ring(&self) {
        barrier::dma_wmb();
        // SAFETY: the record is 4 live bytes of DMA memory.
        unsafe { (self.dbr.as_ptr() as *mut u32).write_volatile((self.counter as u32).to_be()) };
    }
}

/// Offsets inside a 64-byte EQE (docs/firmware.md §6.2): event type, the completion
/// event's CQ number word (24 bits) and the owner byte.
pub mod eqe_off {
    /// `event_type`.
    pub const EVENT_TYPE: usize = 0x01;
    /// Word holding `comp_event.cq_number` (low 24 bits).
    pub const CQN: usize = 0x38;
    /// Byte holding the owner bit (bit 0).
    pub const OWNER: usize = 0x3f;
}

/// Fill every EQE of an EQ ring of `2^log_size` entries with a completion
/// event for CQ `0x40 + slot`, owned by software for pass `pass` (owner bit
/// = `pass & 1`), as firmware would write them.
pub fn prefill_eq(ring: &DmaRegion<HostHal>, log_size: u8, pass: u32) {
    for slot in 0..1usize << log_size {
        let e = slot * 64;
        ring.write_u8(e + eqe_off::EVENT_TYPE, 0x00);
        ring.write_be32(e + eqe_off::CQN, 0x40 + slot as u32);
        ring.write_u8(e + eqe_off::OWNER, (pass & 1) as u8);
    }
}

/// Set up `old` for a resize copy from its consumer index `first` (a
/// running index): `n` software-owned receive CQEs at running indices
/// `first .. first + n`, then the RESIZE_CQ CQE firmware writes at
/// `first + n`, each with the owner bit of its pass. `old` must have more
/// than `n` entries.
pub fn prefill_resize(old: &CqRing<HostHal>, first: u32, n: usize) {
    assert!(n < old.nent(), "the resize CQE must fit");
    let stride = old.cqe_size().stride();
    let r = old.region();
    for i in 0..=n {
        let idx = first.wrapping_add(i as u32);
        let slot = idx as usize & (old.nent() - 1);
        let owner = ((idx >> old.log_nent()) & 1) as u8;
        let cqe = old.base_offset() + slot * stride + stride - 64;
        let opcode: u8 = if i == n { 5 } else { 2 }; // RESIZE_CQ / RESP_SEND
        r.write_be32(cqe + 0x20, 0x42);
        r.write_be32(cqe + 0x2c, i as u32);
        r.write_be32(cqe + 0x38, 0x1234);
        r.write_be16(cqe + 0x3c, i as u16);
        r.write_u8(cqe + 0x3f, (opcode << 4) | owner);
    }
}

/// The platform of the send-path benchmarks: the device model, with two
/// additions that change no register or memory behaviour the driver sees.
///
/// * **Divert**: while on, 8-byte writes into a UAR page's BlueFlame area
///   (the send doorbells) go to a scratch array of atomics instead of the
///   model, so a posting loop measures the driver alone: the store still
///   happens, the model just does not execute the WQEs (the hot-loop
///   benchmark retires them itself).
/// * **Model time**: wall time spent inside the model's MMIO handlers
///   (in synchronous mode a send doorbell executes the WQEs it publishes,
///   delivers them and writes the CQEs inside that write), the model's
///   share of a round trip.
#[derive(Clone)]
pub struct BenchHal {
    inner: mlx5_sim::SimHal,
    sink: std::sync::Arc<Sink>,
}

/// Shared state of a [`BenchHal`].
pub struct Sink {
    divert: std::sync::atomic::AtomicBool,
    model_ns: std::sync::atomic::AtomicU64,
    words: [std::sync::atomic::AtomicU64; SINK_WORDS],
}

/// 8-byte words of the scratch BlueFlame area: 4 registers of up to 2 KiB.
const SINK_WORDS: usize = 1024;
/// BlueFlame area of a UAR page: offset 0x800 up to the page end.
const BF_LO: usize = 0x800;
const UAR_PAGE: usize = 0x1000;

impl BenchHal {
    /// Wrap the model's platform.
    pub fn new(inner: mlx5_sim::SimHal) -> BenchHal {
        BenchHal {
            inner,
            sink: std::sync::Arc::new(Sink {
                divert: false.into(),
                model_ns: 0.into(),
                words: std::array::from_fn(|_| 0.into()),
            }),
        }
    }

    /// Send doorbells go to the scratch area (`true`) or to the model.
    pub fn divert_doorbells(&self, on: bool) {
        self.sink
            .divert
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Wall time spent inside the model's MMIO handlers so far.
    pub fn model_time(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(
            self.sink
                .model_ns
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// The last value written to scratch word `i` (to keep the stores
    /// observable).
    pub fn scratch(&self, i: usize) -> u64 {
        self.sink.words[i % SINK_WORDS].load(std::sync::atomic::Ordering::Relaxed)
    }

    fn timed<R>(&self, f: impl FnOnce() -> R) -> R {
        let t = Instant::now();
        let r = f();
        self.sink.model_ns.fetch_add(
            t.elapsed().as_nanos() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        r
    }
}

use std::time::Instant;

// SAFETY: every method forwards to `SimHal`, which upholds the `Hal`
// contract, except diverted BlueFlame writes, which store into atomics the
// wrapper owns (no memory the driver or the model uses); the clock and DMA
// behave as the model's.
unsafe impl Hal for BenchHal {
    fn bar0_size(&self) -> usize {
        self.inner.bar0_size()
    }
    fn mmio_read32(&self, offset: usize) -> u32 {
        self.timed(|| self.inner.mmio_read32(offset))
    }
    fn mmio_write32(&self, offset: usize, value: u32) {
        self.timed(|| self.inner.mmio_write32(offset, value))
    }
    #[inline(always)]
    fn mmio_write64(&self, offset: usize, value: u64) {
        let in_page = offset % UAR_PAGE;
        if in_page >= BF_LO && self.sink.divert.load(std::sync::atomic::Ordering::Relaxed) {
            self.sink.words[(in_page - BF_LO) / 8 % SINK_WORDS]
                .store(value, std::sync::atomic::Ordering::Relaxed);
            return;
        }
        self.timed(|| self.inner.mmio_write64(offset, value))
    }
    fn alloc_dma_raw(&self, size: usize) -> Result<mlx5_hal::RawDma, HalError> {
        self.inner.alloc_dma_raw(size)
    }
    unsafe fn free_dma_raw(&self, region: mlx5_hal::RawDma) {
        // SAFETY: forwarded unchanged under the caller's guarantees.
        unsafe { self.inner.free_dma_raw(region) }
    }
    fn now_ns(&self) -> u64 {
        self.inner.now_ns()
    }
    fn delay_us(&self, us: u32) {
        self.inner.delay_us(us)
    }
}

/// The raw send-posting baseline: the same send WQE bytes as the driver's
/// `SendRing::write` (control segment, data segments or one inline
/// segment), a `wr_id` store per WQE, the doorbell record and the 8-byte
/// doorbell with the same barriers as `SendRing::ring_doorbell`, into the
/// same ring, with plain volatile stores and no driver around them: no
/// flow control, no checks, no wrap of a WQE across the ring end (the
/// benchmark's WQEs never cross it).
pub struct RawSq {
    ring: *mut u8,
    mask: u16,
    dbr: *mut u8,
    qpn: u32,
    cur_post: u16,
    bf: usize,
    bf_toggle: usize,
    wrids: Vec<u64>,
}

impl RawSq {
    /// A baseline over `wqebbs` WQEBBs at `ring` (WQEBB 0), the doorbell
    /// record at `dbr`, for QP `qpn`, ringing BlueFlame offset `bf` of a
    /// register of `bf_size` bytes.
    ///
    /// # Safety
    ///
    /// `ring` must point at `wqebbs * 64` bytes and `dbr` at 8 bytes of
    /// live DMA memory that nothing else touches while the baseline runs.
    pub unsafe fn new(
        ring: *mut u8,
        wqebbs: usize,
        dbr: *mut u8,
        qpn: u32,
        bf: usize,
        bf_size: usize,
    ) -> RawSq {
        RawSq {
            ring,
            mask: (wqebbs - 1) as u16,
            dbr,
            qpn,
            cur_post: 0,
            bf,
            bf_toggle: bf_size / 2,
            wrids: vec![0; wqebbs],
        }
    }

    /// Write one signaled SEND of `sges` (all non-empty) or of `inline`
    /// bytes; returns the doorbell value (its first 8 bytes).
    #[inline(always)]
    pub fn post(&mut self, wr_id: u64, sges: &[Sge], inline: Option<&[u8]>) -> u64 {
        let idx = (self.cur_post & self.mask) as usize;
        let ds = 1 + match inline {
            Some(d) => (4 + d.len()).div_ceil(16),
            None => sges.len(),
        };
        use mlx5_regs::consts::wqe;
        let word0 = mlx5_regs::doorbell::qp_send_doorbell(
            wqe::opmod_idx_opcode(0, self.cur_post, wqe::OPCODE_SEND),
            wqe::qpn_ds(self.qpn, ds as u8),
        );
        // SAFETY: (whole block) the WQE lies inside the ring (`idx` masked,
        // `ds * 16` bytes never cross the end for the benchmark's WQEs);
        // aligned volatile stores into live DMA memory.
        unsafe {
            let w = self.ring.add(idx * 64);
            let d = w.add(16);
            match inline {
                Some(data) => {
                    (d as *mut u32).write_volatile((data.len() as u32 | wqe::INLINE_SEG).to_be());
                    std::ptr::copy_nonoverlapping(data.as_ptr(), d.add(4), data.len());
                }
                None => {
                    for (k, s) in sges.iter().enumerate() {
                        let e = d.add(16 * k);
                        (e as *mut u32).write_volatile(s.length.to_be());
                        (e.add(4) as *mut u32).write_volatile(s.lkey.to_be());
                        (e.add(8) as *mut u64).write_volatile(s.addr.to_be());
                    }
                }
            }
            (w as *mut u64).write_volatile(word0.to_be());
            let fm_ce_se = wqe::CTRL_CQ_UPDATE as u64;
            (w.add(8) as *mut u64).write_volatile((fm_ce_se << 32).to_be());
        }
        self.wrids[idx] = wr_id;
        self.cur_post = self.cur_post.wrapping_add((ds * 16).div_ceil(64) as u16);
        word0
    }

    /// Publish: barrier, doorbell record, barrier, the 8-byte doorbell,
    /// flush, switch BlueFlame halves.
    #[inline(always)]
    pub fn ring<H: Hal>(&mut self, hal: &H, word0: u64) {
        barrier::dma_wmb();
        // SAFETY: the record's send counter is 4 live bytes at offset 4.
        unsafe {
            (self.dbr.add(4) as *mut u32).write_volatile((self.cur_post as u32).to_be());
        }
        barrier::mmio_wmb();
        hal.mmio_write64(self.bf, word0);
        barrier::mmio_flush();
        self.bf ^= self.bf_toggle;
    }
}
