//! Shared helpers for the benchmarks in `benches/`: the benchmark plays the
//! device by writing CQEs straight into ring memory, as a DMA engine would.

use mlx5_driver::cq::CqRing;
use mlx5_driver::srq::{Sge, SrqGeometry};
use mlx5_hal::host::HostHal;
use mlx5_hal::{barrier, DmaRegion, Hal};

pub mod facade;
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
