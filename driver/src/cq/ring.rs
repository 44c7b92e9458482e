//! The CQ ring: CQE ownership, the hot poll loop, the doorbell record and
//! the resize copy (docs/firmware.md §5, §7.2, §8); removing a QP's
//! unpolled CQEs ([`CqRing::remove_where`], in `clean.rs`).
//!
//! This is pure data path: it touches only DMA memory (the ring and the
//! doorbell record) and, for arming, one UAR doorbell. Firmware commands
//! (CREATE_CQ, MODIFY_CQ, DESTROY_CQ) are issued by [`super`].

use mlx5_hal::{barrier, DmaRegion, DmaWindow, Hal, HalError, RingRegion};

mod clean;
mod cqe;
mod reader;

use cqe::off;
pub use cqe::{Cqe, CqeStatus, CqeView};
pub use reader::{CqReader, WaitingCqe};

use crate::pagelist::{alloc_paged, PageList};
use mlx5_regs::consts::ctx::CQE_OP_OWN_INIT;
use mlx5_regs::doorbell::{cq_arm_doorbell, cq_arm_word, CQ_ARM_NEXT, CQ_ARM_SOLICITED};
use mlx5_regs::CqeOpcode;

/// Entries whose owner bytes the resize copy checks with one branch.
const GROUP: usize = 8;

/// Is a CQE with owner byte `op_own` software-owned in a pass whose owner
/// bit is `pass` (docs/firmware.md §5)? Not if firmware has not written it (opcode
/// INVALID, the initial 0xf0) or it belongs to the other pass.
#[inline(always)]
const fn sw_owned_byte(op_own: u8, pass: u8) -> bool {
    (op_own >> 4) != CqeOpcode::INVALID.0 && (op_own & 1) == pass
}

/// Where the resize walk (docs/firmware.md §8) stops at the entry of running index
/// `index` with owner byte `op_own`, expecting owner bit `pass`: `None` to
/// copy it and go on, `Some(Ok(()))` at the RESIZE_CQ CQE, `Some(Err(..))`
/// at an entry still hardware-owned.
#[inline(always)]
const fn walk_stop(op_own: u8, pass: u8, index: u32) -> Option<Result<(), ResizeCopyError>> {
    if !sw_owned_byte(op_own, pass) {
        Some(Err(ResizeCopyError::NotSoftwareOwned { index }))
    } else if op_own >> 4 == CqeOpcode::RESIZE_CQ.0 {
        Some(Ok(()))
    } else {
        None
    }
}

/// `STOP[pass][op_own]`: 1 where [`walk_stop`] stops, for the walk's fast
/// pass (one lookup per entry instead of its branches).
static STOP: [[u8; 256]; 2] = {
    let mut t = [[0u8; 256]; 2];
    let mut x = 0;
    while x < 256 {
        t[0][x] = walk_stop(x as u8, 0, 0).is_some() as u8;
        t[1][x] = walk_stop(x as u8, 1, 0).is_some() as u8;
        x += 1;
    }
    t
};

/// CQE size, as programmed in `cqc.cqe_sz`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CqeSize {
    /// 64-byte CQEs (`cqe_sz = 0`).
    B64,
    /// 128-byte CQEs (`cqe_sz = 1`); the 64-byte CQE is the second half.
    B128,
}

impl CqeSize {
    /// Bytes per ring entry.
    pub const fn stride(self) -> usize {
        match self {
            CqeSize::B64 => 64,
            CqeSize::B128 => 128,
        }
    }
    /// `cqc.cqe_sz` value.
    pub const fn cqc_value(self) -> u8 {
        match self {
            CqeSize::B64 => 0,
            CqeSize::B128 => 1,
        }
    }
    const fn cqe_offset(self) -> usize {
        self.stride() - 64
    }
}

/// A CQ buffer in DMA memory with its software consumer index.
///
/// `consumer_index` is a free-running counter; slot = `ci & (nent - 1)`, and a
/// CQE in that slot belongs to software when its opcode is not INVALID and its
/// owner bit equals `(ci >> log_nent) & 1` (docs/firmware.md §7.2).
pub struct CqRing<H: Hal> {
    /// The ring's region with the 64-byte CQE of each entry (`base` + the
    /// CQE's offset in its entry, one per stride) laid out in it, checked
    /// once: the hot paths' address arithmetic is a mask, a shift and an
    /// add. Its cursor is the owner byte at the consumer index (kept with
    /// `consumer_index` by `set_ci`), checked when it moves, so the empty
    /// poll is one unchecked byte load and a compare.
    buf: RingRegion<H, 64>,
    /// Offset of entry 0 in `buf` (aligned to the firmware page size).
    base: usize,
    log_nent: u8,
    cqe_size: CqeSize,
    consumer_index: u32,
    /// The owner bit the CQE at the consumer index must have (kept with
    /// `consumer_index` by `set_ci`).
    next_pass: u8,
}

impl<H: Hal> CqRing<H> {
    /// Allocate a ring of `2^log_nent` CQEs in 4 KiB firmware pages and mark
    /// every CQE invalid and hardware-owned for the first pass
    /// (`op_own = 0xf0`).
    pub fn new(hal: &H, log_nent: u8, cqe_size: CqeSize) -> Result<Self, HalError> {
        Self::new_paged(hal, log_nent, cqe_size, usize::MAX).map(|(ring, _)| ring)
    }

    /// Like [`CqRing::new`], with a page list of at most `max_pages`
    /// entries (larger firmware pages for large rings, see
    /// [`crate::pagelist::alloc_paged`]). Returns the ring and its page list.
    pub fn new_paged(
        hal: &H,
        log_nent: u8,
        cqe_size: CqeSize,
        max_pages: usize,
    ) -> Result<(Self, PageList), HalError> {
        if log_nent > 24 {
            return Err(HalError::InvalidRequest);
        }
        let len = (1usize << log_nent) * cqe_size.stride();
        let (buf, base, pages) = alloc_paged(hal, len, max_pages)?;
        let stride_log = cqe_size.stride().trailing_zeros() as u8;
        let mut buf = RingRegion::new(buf, base + cqe_size.cqe_offset(), log_nent, stride_log)
            .ok_or(HalError::InvalidRequest)?;
        buf.set_cursor(buf.layout().offset(0) + off::OP_OWN);
        let ring = CqRing {
            buf,
            base,
            log_nent,
            cqe_size,
            consumer_index: 0,
            next_pass: 0,
        };
        ring.init_all();
        Ok((ring, pages))
    }

    fn init_all(&self) {
        for i in 0..self.nent() as u32 {
            self.buf
                .entry(i)
                .write_u8::<{ off::OP_OWN }>(CQE_OP_OWN_INIT);
        }
    }

    /// Number of entries.
    #[inline(always)]
    pub fn nent(&self) -> usize {
        1 << self.log_nent
    }

    /// log2 of the number of entries.
    pub fn log_nent(&self) -> u8 {
        self.log_nent
    }

    /// CQE size.
    pub fn cqe_size(&self) -> CqeSize {
        self.cqe_size
    }

    /// The DMA region holding the ring; entry 0 is at [`CqRing::base_offset`].
    pub fn region(&self) -> &DmaRegion<H> {
        self.buf.region()
    }

    /// Offset of entry 0 inside [`CqRing::region`].
    pub fn base_offset(&self) -> usize {
        self.base
    }

    /// The free-running consumer index.
    pub fn consumer_index(&self) -> u32 {
        self.consumer_index
    }

    /// Byte offset of the 64-byte CQE for running index `index`.
    #[inline(always)]
    fn base_of(&self, index: u32) -> usize {
        self.buf.layout().offset(index)
    }

    /// The 64-byte CQE of running index `index`.
    #[inline(always)]
    fn entry(&self, index: u32) -> DmaWindow<'_, 64> {
        self.buf.entry(index)
    }

    /// Is the CQE at running index `index` owned by software?
    #[inline(always)]
    fn sw_owned(&self, index: u32, op_own: u8) -> bool {
        sw_owned_byte(op_own, ((index >> self.log_nent) & 1) as u8)
    }

    /// Read the `op_own` byte of running index `index`.
    #[inline(always)]
    fn op_own(&self, index: u32) -> u8 {
        self.entry(index).read_u8::<{ off::OP_OWN }>()
    }

    /// True when a CQE is waiting at the consumer index.
    #[inline(always)]
    pub fn has_next(&self) -> bool {
        self.waiting().is_some()
    }

    /// Whether the CQE after the one at the consumer index is
    /// software-owned as well: one more owner-byte test, for a caller
    /// choosing between taking one CQE and setting up a run over several.
    /// Only a hint: the device may write that CQE at any time.
    #[inline(always)]
    pub fn has_second(&self) -> bool {
        let i = self.consumer_index.wrapping_add(1);
        self.sw_owned(i, self.op_own(i))
    }

    /// Move the consumer index (the one place it changes), keeping the
    /// owner byte `has_next` reads in step.
    #[inline(always)]
    fn set_ci(&mut self, ci: u32) {
        self.consumer_index = ci;
        self.buf
            .set_cursor(self.buf.layout().offset(ci) + off::OP_OWN);
        self.next_pass = ((ci >> self.log_nent) & 1) as u8;
    }

    /// Take the next CQE if software owns it: ownership check, one read
    /// barrier, then the body, every field read once through a window that
    /// was bounds-checked once. Does not publish the consumer index; call
    /// [`CqRing::update_doorbell`] once per batch.
    #[inline(always)]
    pub fn pop(&mut self) -> Option<Cqe> {
        self.take(|v| v.decode())
    }

    /// Take the next CQE if software owns it, handing it in place to `f`:
    /// the ownership check, one read barrier, `f`, and the consumer index
    /// moved on (not published).
    #[inline(always)]
    fn take<R>(&mut self, f: impl FnOnce(CqeView<'_>) -> R) -> Option<R> {
        let mut rd = self.reader();
        let r = f(rd.take()?);
        let ci = rd.consumer_index();
        self.set_ci(ci);
        Some(r)
    }

    /// Poll up to `out.len()` CQEs into `out`, every field decoded; returns
    /// how many. The owner byte at the consumer index is the first thing
    /// read, so an empty CQ costs one load and compare; the consumer index
    /// is published in the doorbell record once, at the end, and only when
    /// something was taken.
    #[inline]
    pub fn poll(&mut self, dbr: &DoorbellRecord<H>, out: &mut [Cqe]) -> usize {
        // Loop invariants in locals; the consumer index lives in a register
        // and is stored once. (Through a `CqReader` this cost the ring API
        // 17 instructions more per call at batch 1: the reader's copy of
        // the geometry is made before the first owner-byte test.)
        let log = self.log_nent as u32;
        let mut ci = self.consumer_index;
        let mut n = 0;
        for slot in out.iter_mut() {
            let w = self.buf.entry(ci);
            let op_own = w.read_u8::<{ off::OP_OWN }>();
            if !sw_owned_byte(op_own, ((ci >> log) & 1) as u8) {
                break;
            }
            // The body must not be read before the ownership byte (docs/firmware.md §5).
            barrier::dma_rmb();
            *slot = CqeView::new(w, op_own).decode();
            ci = ci.wrapping_add(1);
            n += 1;
        }
        if n > 0 {
            self.set_ci(ci);
            self.update_doorbell(dbr);
        }
        n
    }

    /// Publish the consumer index in the doorbell record. The reads of the
    /// consumed CQEs are ordered before this store, so the device cannot
    /// overwrite an entry still being read.
    #[inline(always)]
    pub fn update_doorbell(&self, dbr: &DoorbellRecord<H>) {
        barrier::dma_rmb();
        dbr.set_ci(self.consumer_index);
    }

    /// Number of software-owned CQEs from the consumer index on (what
    /// `resize` must carry over), stopping at the first hardware-owned entry
    /// or after a whole ring.
    pub fn pending(&self) -> usize {
        let mut i = self.consumer_index;
        let mut n = 0;
        while n < self.nent() && self.sw_owned(i, self.op_own(i)) {
            n += 1;
            i = i.wrapping_add(1);
        }
        n
    }

    /// Copy the unpolled CQEs of `self` (the old ring, after MODIFY_CQ
    /// resize completed) into `new`, as rdma-core does (docs/firmware.md §8): walk from
    /// the consumer index up to the RESIZE_CQ CQE firmware wrote into the old
    /// ring; the CQE at running index `i` goes to index `i + 1` of the new ring
    /// with the owner bit of that index for the new size. Afterwards `new`'s
    /// consumer index is `old ci + 1`, so the copies are read first and the
    /// first CQE firmware writes to the new ring (at `r + 1`) follows them.
    ///
    /// Returns the number of CQEs copied, or an error if the walk meets a
    /// hardware-owned entry or does not find the resize CQE within a ring
    /// (then `new` keeps what was copied and its consumer index is set just
    /// past the stopping point).
    pub fn copy_into_resized(&self, new: &mut CqRing<H>) -> Result<usize, ResizeCopyError> {
        if new.cqe_size != self.cqe_size {
            return Err(ResizeCopyError::CqeSizeMismatch);
        }
        let (copied, stop) = match self.cqe_size {
            CqeSize::B64 => self.copy_chunks::<64, 63, { 64 * GROUP }>(new),
            CqeSize::B128 => self.copy_chunks::<128, 127, { 128 * GROUP }>(new),
        };
        // The walk stopped at old running index `end`.
        let end = self.consumer_index.wrapping_add(copied as u32);
        match stop {
            Ok(()) => {
                new.set_ci(self.consumer_index.wrapping_add(1));
                Ok(copied)
            }
            Err(e) => {
                // Best guess for where firmware continues: right after the
                // missing resize CQE.
                new.set_ci(end.wrapping_add(1));
                Err(e)
            }
        }
    }

    /// The resize copy for entries of `S` bytes (`OWN` = `S - 1`, the owner
    /// byte's offset in the entry; `G` = `GROUP · S`, the bytes of a group
    /// of entries whose owner bytes are checked together; no const
    /// arithmetic on generics in stable Rust, checked below).
    ///
    /// It works in chunks that wrap neither ring and fit in L1 (`CHUNK`
    /// entries): first the owner bytes of the chunk are checked (software
    /// owned, of this pass, not the resize CQE), then one read barrier, then
    /// the verified entries are copied whole (both halves of a 128-byte CQE,
    /// as rdma-core does) with one wide volatile copy. Inside a chunk the old
    /// and the new pass bits are each constant, so rewriting the owner bit
    /// for the new ring is one XOR mask for the whole chunk, applied by the
    /// copy itself. The walk never visits more than `min(old, new)` entries,
    /// so it cannot lap either ring.
    ///
    /// Nothing reads the copied slots concurrently: the device only writes
    /// the new ring from the resize CQE's index + 1 on (docs/firmware.md §8) and never
    /// reads CQEs, and the only consumer is the caller, who holds `new`
    /// mutably. So the copy needs no body-before-owner store order.
    ///
    /// Returns how many entries were copied and how the walk ended.
    #[inline(always)]
    fn copy_chunks<const S: usize, const OWN: usize, const G: usize>(
        &self,
        new: &CqRing<H>,
    ) -> (usize, Result<(), ResizeCopyError>) {
        const { assert!(OWN + 1 == S && G == GROUP * S) };
        /// Entries checked, then copied, at a time: 4 KiB of 64-byte CQEs.
        const CHUNK: usize = 64;
        let (old_n, new_n) = (self.nent(), new.nent());
        let limit = old_n.min(new_n);
        let start = self.consumer_index;
        let mut copied = 0usize;
        loop {
            let i = start.wrapping_add(copied as u32);
            let src_slot = i as usize & (old_n - 1);
            let old_pass = ((i >> self.log_nent) & 1) as u8;
            if copied == limit {
                // As many entries as the smaller ring holds and still no
                // resize CQE: look at the next one only to say why.
                let stop = walk_stop(self.op_own(i), old_pass, i);
                return (
                    copied,
                    stop.unwrap_or(Err(ResizeCopyError::ResizeCqeMissing)),
                );
            }
            let dst_index = i.wrapping_add(1);
            let dst_slot = dst_index as usize & (new_n - 1);
            let new_pass = ((dst_index >> new.log_nent) & 1) as u8;
            let run = CHUNK
                .min(limit - copied)
                .min(old_n - src_slot)
                .min(new_n - dst_slot);
            // Check the chunk's owner bytes; `ok` entries may be copied.
            // Fast pass: groups of GROUP entries, one table lookup per entry
            // and one branch per group (four branches per entry made this
            // walk cost as much as the copy). Slow pass: entry by entry from
            // the first group that holds a stop (or the last partial group),
            // to find exactly where and why the walk ends.
            let src_off = self.base + src_slot * S;
            let mut ok = 0;
            let stop_at = &STOP[old_pass as usize];
            for g in self.buf.windows::<G>(src_off, run / GROUP) {
                let own = g.read_u8_strided::<OWN, S, GROUP>();
                if own.iter().fold(0, |acc, &b| acc | stop_at[b as usize]) != 0 {
                    break;
                }
                ok += GROUP;
            }
            let mut stop = None;
            for w in self.buf.windows::<S>(src_off + ok * S, run - ok) {
                stop = walk_stop(w.read_u8::<OWN>(), old_pass, i.wrapping_add(ok as u32));
                if stop.is_some() {
                    break;
                }
                ok += 1;
            }
            // One read barrier for the chunk: every body read below is at
            // least as new as the owner bytes read above (docs/firmware.md §5).
            barrier::dma_rmb();
            let mut mask = [0u8; S];
            mask[OWN] = old_pass ^ new_pass;
            new.buf
                .copy_entries_from::<S>(new.base + dst_slot * S, &self.buf, src_off, ok, &mask);
            copied += ok;
            if let Some(stop) = stop {
                return (copied, stop);
            }
        }
    }

    /// Compose and ring the arm doorbell (docs/firmware.md §5): store the arm word in
    /// doorbell-record word 1, order it before the MMIO write, then one
    /// 64-bit write of (arm word, cqn) to the UAR's CQ doorbell.
    pub fn arm(
        &self,
        hal: &H,
        dbr: &DoorbellRecord<H>,
        uar_offset: usize,
        cqn: u32,
        arm_sn: u32,
        solicited_only: bool,
    ) {
        let cmd = if solicited_only {
            CQ_ARM_SOLICITED
        } else {
            CQ_ARM_NEXT
        };
        let word = cq_arm_word(arm_sn, cmd, self.consumer_index);
        dbr.set_arm(word);
        barrier::mmio_wmb();
        hal.mmio_write64(
            uar_offset + mlx5_regs::doorbell::UAR_CQ_DOORBELL,
            cq_arm_doorbell(word, cqn),
        );
    }
}

/// Why copying CQEs into a resized ring failed (firmware did not behave as
/// docs/firmware.md §8 describes; rdma-core only logs this).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResizeCopyError {
    /// An entry on the way to the resize CQE is still hardware-owned.
    NotSoftwareOwned {
        /// Running index of the entry.
        index: u32,
    },
    /// No RESIZE_CQ CQE within a whole ring (or more CQEs than the new ring holds).
    ResizeCqeMissing,
    /// The new ring's CQE size differs from the old one's (rdma-core and
    /// the kernel refuse such a resize too); nothing was copied.
    CqeSizeMismatch,
}

/// A CQ doorbell record (docs/firmware.md §5): 8 bytes of DMA memory, word 0 = consumer
/// index (24 bits), word 1 = last arm word. It owns its own small DMA region
/// because it outlives the ring across a resize (MODIFY_CQ keeps `dbr_addr`).
pub struct DoorbellRecord<H: Hal> {
    region: DmaRegion<H>,
}

impl<H: Hal> DoorbellRecord<H> {
    /// Allocate a zeroed record.
    pub fn new(hal: &H) -> Result<Self, HalError> {
        Ok(DoorbellRecord {
            region: hal.alloc_dma(mlx5_regs::doorbell::CQ_DBR_SIZE)?,
        })
    }
    /// Device address of the record (for `cqc.dbr_addr`).
    pub fn iova(&self) -> u64 {
        self.region.iova()
    }
    /// Store the consumer index.
    #[inline(always)]
    pub fn set_ci(&self, ci: u32) {
        self.region.write_be32(0, ci & 0x00ff_ffff);
    }
    /// Store an arm word.
    #[inline(always)]
    pub fn set_arm(&self, word: u32) {
        self.region.write_be32(4, word);
    }
    /// The consumer index currently published.
    pub fn ci(&self) -> u32 {
        self.region.read_be32(0)
    }
    /// The arm word currently published.
    pub fn arm_word(&self) -> u32 {
        self.region.read_be32(4)
    }
}
