//! The SRQ receive ring: WQE layout, the linked free list, posting and the
//! doorbell record (docs/firmware.md §9.4, §5).
//!
//! A WQE is a 16-byte next segment followed by 16-byte data segments; the
//! stride is a power of two of at least 32 bytes. The ring is a linked list
//! through `next_wqe_index`: at creation WQE `i` points to `i + 1`, `head` (the
//! next WQE to post) is 0 and `tail` (the last WQE of the list, never posted:
//! the sentinel whose next pointer is written when a WQE is freed) is `n - 1`.
//! The device follows the same list. A completed WQE is linked after `tail`
//! and becomes the new tail.
//!
//! All bookkeeping (the caller's `wr_id`s and a posted/free state byte per
//! WQE) lives in DMA memory the platform hands out, so the ring needs no heap
//! and no caller-provided arrays.

use mlx5_hal::{barrier, DmaRegion, DmaWindow, Hal, HalError, RingRegion, RingView};

use crate::pagelist::{alloc_paged, PageList};
use mlx5_regs::consts::ctx::INVALID_LKEY;

/// One scatter entry of a receive work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sge {
    /// Device address of the buffer.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Memory key: by default [`crate::Hca::default_lkey`] (the DMA key
    /// made at bring-up, [`crate::Hca::sge`] fills it in); a key from
    /// [`crate::Hca::create_mkey`] or the reserved lkey also work.
    pub lkey: u32,
}

/// Why a post was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PostError {
    /// Every usable WQE is posted (`ENOMEM` in verbs).
    Full,
    /// More scatter entries than a WQE holds (`EINVAL` in verbs).
    TooManySges {
        /// Entries given.
        given: usize,
        /// Entries a WQE holds.
        max: usize,
    },
    /// The device is dead (fatal health): nothing is posted (`EIO` in
    /// verbs, as `mlx5_ib_post_srq_recv` on an internal error).
    DeviceDead,
    /// The QP has no receive queue of its own: it receives through an SRQ
    /// (post to the SRQ) or not at all (`EINVAL` in verbs, as
    /// `ibv_post_recv(3)` on a QP with an SRQ).
    NoReceiveQueue,
}

impl PostError {
    /// The errno libibverbs/mlx5 reports for it (`ibv_post_srq_recv`).
    pub const fn errno(&self) -> i32 {
        match self {
            PostError::Full => mlx5_regs::consts::errno::ENOMEM,
            PostError::TooManySges { .. } => mlx5_regs::consts::errno::EINVAL,
            PostError::DeviceDead => mlx5_regs::consts::errno::EIO,
            PostError::NoReceiveQueue => mlx5_regs::consts::errno::EINVAL,
        }
    }
}

/// Why a completion could not be matched to a posted WQE (a device that
/// reports a WQE index it was never given).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CompleteError {
    /// The index is outside the ring.
    OutOfRange {
        /// Reported index.
        index: u16,
    },
    /// The WQE at that index is not posted.
    NotPosted {
        /// Reported index.
        index: u16,
    },
}

const SEG: usize = 16;
/// Bytes of one book record: the caller's `wr_id`, then the posted
/// scatter list's capacity in bytes, or [`FREE`] for a WQE not posted.
const REC: usize = 16;
/// Book value of a free WQE. A capacity is at most 2^31 bytes per scatter
/// entry times 2047 entries, far below it.
const FREE: u64 = u64::MAX;

/// The capacity a book record holds for a posted WQE; `None` when the WQE
/// is free. (The book is CPU-only: values are native, the two swaps cancel.)
#[inline(always)]
fn record_capacity(rec: &DmaWindow<'_, REC>) -> Option<u64> {
    let capacity = rec.read_be64::<8>().swap_bytes();
    (capacity != FREE).then_some(capacity)
}

/// Whether a WQE whose scatter list holds `capacity` bytes holds a
/// completion of `byte_len` bytes; always when not `check_len` (an RDMA
/// WRITE with immediate scatters nothing into the WQE). The one rule the
/// general receive path and the short ones share.
#[inline(always)]
pub(crate) fn holds(capacity: u64, byte_len: u32, check_len: bool) -> bool {
    !check_len || byte_len as u64 <= capacity
}

/// Mark a posted WQE's book record free; its `wr_id`.
#[inline(always)]
fn free_record(rec: &DmaWindow<'_, REC>) -> u64 {
    rec.write_be64::<8>(FREE);
    rec.read_be64::<0>().swap_bytes()
}

/// A receive completion matched to its WQE (the completion step of an SRQ
/// or a QP's receive queue).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletedWqe {
    /// The caller's id.
    pub wr_id: u64,
    /// Bytes the posted scatter list holds (as the device reads it: each
    /// length's low 31 bits, 0 meaning 2 GiB, up to the terminator).
    pub capacity: u64,
}

/// Bytes a scatter list holds as the device reads it: entries up to the
/// first terminator-like one (length 0, the invalid lkey or the ring's
/// terminating key `term`), each length's low 31 bits with 0 meaning 2 GiB
/// (docs/firmware.md §9.4).
#[inline(always)]
fn capacity(sges: &[Sge], term: u32) -> u64 {
    let mut total = 0u64;
    for s in sges {
        if s.length == 0 && (s.lkey == INVALID_LKEY || s.lkey == term) {
            break;
        }
        let len = s.length & 0x7fff_ffff;
        total += if len == 0 { 1 << 31 } else { len as u64 };
    }
    total
}

/// Geometry of a ring, computed from what the caller asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqGeometry {
    /// log2 of the number of WQEs (one of which is the sentinel).
    pub log_wqe_cnt: u8,
    /// log2 of the WQE stride in bytes.
    pub log_stride: u8,
    /// Scatter entries a WQE holds after rounding the stride.
    pub max_sge: usize,
    /// Usable WQEs: `2^log_wqe_cnt - 1`.
    pub max_wr: usize,
}

impl SrqGeometry {
    /// Round a request the way the Linux driver does (docs/firmware.md §9.4):
    /// `n = roundup_pow2(max_wr + 1)`, stride = `roundup_pow2(16 + 16·max_sge)`
    /// (at least 32), usable SGEs recomputed from the stride.
    pub fn for_request(max_wr: usize, max_sge: usize) -> Option<SrqGeometry> {
        let n = max_wr.checked_add(1)?.checked_next_power_of_two()?;
        let stride = (SEG + SEG * max_sge.max(1)).next_power_of_two().max(32);
        if n > 1 << 15 || stride > 1 << 15 {
            return None;
        }
        Some(SrqGeometry {
            log_wqe_cnt: n.trailing_zeros() as u8,
            log_stride: stride.trailing_zeros() as u8,
            max_sge: (stride - SEG) / SEG,
            max_wr: n - 1,
        })
    }

    /// Number of WQEs in the ring.
    pub fn wqe_cnt(&self) -> usize {
        1 << self.log_wqe_cnt
    }

    /// WQE stride in bytes.
    pub fn stride(&self) -> usize {
        1 << self.log_stride
    }
}

/// The WQE ring of one SRQ with its free list and doorbell record.
pub struct SrqRing<H: Hal> {
    /// The WQEs, with the next segment of each laid out in the region
    /// (checked once).
    wqes: RingRegion<H, SEG>,
    /// Offset of WQE 0 in `wqes` (aligned to the firmware page size).
    base: usize,
    /// One record per WQE, laid out in its region (checked once).
    book: RingRegion<H, REC>,
    dbr: DmaRegion<H>,
    geo: SrqGeometry,
    head: u16,
    tail: u16,
    counter: u16,
    outstanding: usize,
    /// lkey of the entry that ends a short scatter list: the device's
    /// `terminate_scatter_list_mkey` when offered, else 0x100.
    term_lkey: u32,
}

impl<H: Hal> SrqRing<H> {
    /// Allocate and initialise a ring of the given geometry in 4 KiB
    /// firmware pages.
    pub fn new(hal: &H, geo: SrqGeometry) -> Result<Self, HalError> {
        Self::new_paged(hal, geo, usize::MAX).map(|(ring, _)| ring)
    }

    /// Like [`SrqRing::new`], with a page list of at most `max_pages`
    /// entries. Returns the ring and its page list.
    pub fn new_paged(
        hal: &H,
        geo: SrqGeometry,
        max_pages: usize,
    ) -> Result<(Self, PageList), HalError> {
        let n = geo.wqe_cnt();
        let (wqes, base, pages) = alloc_paged(hal, n * geo.stride(), max_pages)?;
        // One record per WQE: wr_id, capacity or FREE.
        let book = hal.alloc_dma(n * REC)?;
        let dbr = hal.alloc_dma(mlx5_regs::doorbell::SRQ_DBR_SIZE)?;
        // Laid out as 16-byte units: a WQE's segments are the windows of
        // its units, with no check.
        let log_units = geo.log_wqe_cnt + (geo.log_stride - SEG.trailing_zeros() as u8);
        let wqes = RingRegion::new(wqes, base, log_units, SEG.trailing_zeros() as u8)
            .ok_or(HalError::InvalidRequest)?;
        let book = RingRegion::new(book, 0, geo.log_wqe_cnt, REC.trailing_zeros() as u8)
            .ok_or(HalError::InvalidRequest)?;
        let ring = SrqRing {
            wqes,
            base,
            book,
            dbr,
            geo,
            head: 0,
            tail: (n - 1) as u16,
            counter: 0,
            outstanding: 0,
            term_lkey: INVALID_LKEY,
        };
        for i in 0..n {
            ring.set_next(i as u16, ((i + 1) & (n - 1)) as u16);
            ring.book.write_be64(i * REC + 8, FREE);
        }
        Ok((ring, pages))
    }

    /// End short scatter lists with `lkey` (a zero-length entry): the
    /// device's `terminate_scatter_list_mkey` when it offers one, as Linux
    /// does (`mlx5_ib_post_srq_recv`, `dev->mkeys.terminate_scatter_list_mkey`);
    /// 0x100 (`MLX5_INVALID_LKEY`) otherwise, the default.
    pub fn set_terminator(&mut self, lkey: u32) {
        self.term_lkey = lkey;
    }

    /// The lkey that ends a short scatter list.
    pub fn terminator(&self) -> u32 {
        self.term_lkey
    }

    /// The geometry.
    pub fn geometry(&self) -> SrqGeometry {
        self.geo
    }

    /// The DMA region holding the WQEs; WQE 0 is at [`SrqRing::base_offset`].
    pub fn region(&self) -> &DmaRegion<H> {
        &self.wqes
    }

    /// Offset of WQE 0 inside [`SrqRing::region`].
    pub fn base_offset(&self) -> usize {
        self.base
    }

    /// Device address of the doorbell record.
    pub fn dbr_iova(&self) -> u64 {
        self.dbr.iova()
    }

    /// Posted and not yet completed WQEs.
    pub fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// The 16-bit posted counter last published in the doorbell record.
    pub fn posted_counter(&self) -> u16 {
        self.counter
    }

    /// The first unit (the next segment) of WQE `index`.
    #[inline(always)]
    fn unit(&self, index: u16) -> u32 {
        (index as u32) << self.unit_shift()
    }

    /// log2 of the units in a WQE.
    #[inline(always)]
    fn unit_shift(&self) -> u8 {
        self.geo.log_stride - SEG.trailing_zeros() as u8
    }

    #[inline(always)]
    fn set_next(&self, index: u16, next: u16) {
        self.wqes.entry(self.unit(index)).write_be16::<2>(next);
    }

    /// Write one receive WQE for `wr_id` at the head of the free list. The
    /// doorbell record is not updated: call [`SrqRing::ring_doorbell`] after a
    /// batch (or post with [`SrqRing::post_list`]). Returns the WQE index
    /// used.
    #[inline(always)]
    pub fn post(&mut self, wr_id: u64, sges: &[Sge]) -> Result<u16, PostError> {
        let idx = self.head;
        self.head = self.write_wqe(idx, self.tail, wr_id, sges)?;
        self.counter = self.counter.wrapping_add(1);
        self.outstanding += 1;
        Ok(idx)
    }

    /// Post every `(wr_id, scatter list)` of `reqs` in order and publish
    /// them with one doorbell-record store. The head, counter and count
    /// stay in locals and are written back once. On the first refusal the
    /// ones before it stay posted (and published); returns its position.
    #[inline]
    pub fn post_list<'s, I>(&mut self, reqs: I) -> Result<(), (usize, PostError)>
    where
        I: IntoIterator<Item = (u64, &'s [Sge])>,
    {
        let (mut head, tail) = (self.head, self.tail);
        let mut posted = 0usize;
        let mut result = Ok(());
        for (wr_id, sges) in reqs {
            match self.write_wqe(head, tail, wr_id, sges) {
                Ok(next) => head = next,
                Err(e) => {
                    result = Err((posted, e));
                    break;
                }
            }
            posted += 1;
        }
        if posted > 0 {
            self.head = head;
            self.counter = self.counter.wrapping_add(posted as u16);
            self.outstanding += posted;
            self.ring_doorbell();
        }
        result
    }

    /// Write the WQE at `idx` (the head; `tail` is the sentinel) and its
    /// book record; returns the next head. Touches no counter.
    #[inline(always)]
    fn write_wqe(&self, idx: u16, tail: u16, wr_id: u64, sges: &[Sge]) -> Result<u16, PostError> {
        if sges.len() > self.geo.max_sge {
            return Err(PostError::TooManySges {
                given: sges.len(),
                max: self.geo.max_sge,
            });
        }
        if idx == tail {
            return Err(PostError::Full);
        }
        // The WQE's units: the next segment, the data segments, the
        // terminator (all inside the stride the geometry sized for
        // `max_sge`). Unit windows: no check.
        let first = self.unit(idx);
        let mut unit = first + 1;
        // The capacity, as `capacity` computes it, in the same pass: the
        // sum of the lengths, taken as `(len - 1) + 1` per entry, holds
        // while no `len - 1` has bit 31 set (no entry of length 0, which
        // may end the list or mean 2 GiB, nor of 2 GiB or more); otherwise
        // `capacity` walks the list again.
        let mut sum = 0u64;
        let mut seen = 0u32;
        for sge in sges {
            let d = self.wqes.entry(unit);
            d.write_be32::<0>(sge.length);
            d.write_be32::<4>(sge.lkey);
            d.write_be64::<8>(sge.addr);
            let less = sge.length.wrapping_sub(1);
            sum += less as u64;
            seen |= less;
            unit += 1;
        }
        let total = if seen & 0x8000_0000 != 0 {
            capacity(sges, self.term_lkey)
        } else {
            sum + sges.len() as u64
        };
        if sges.len() < self.geo.max_sge {
            // Terminator: a zero-length entry with the terminating lkey.
            let d = self.wqes.entry(unit);
            d.write_be32::<0>(0);
            d.write_be32::<4>(self.term_lkey);
            d.write_be64::<8>(0);
        }
        // The book is CPU-only: native byte order (the two swaps cancel).
        let rec = self.book.entry(idx as u32);
        rec.write_be64::<0>(wr_id.swap_bytes());
        rec.write_be64::<8>(total.swap_bytes());
        let next_seg = self.wqes.entry(first);
        Ok(next_seg.read_be16::<2>())
    }

    /// Publish the posted count: WQE stores are ordered before the doorbell
    /// record store (docs/firmware.md §5). The device reads the record; no MMIO.
    #[inline(always)]
    pub fn ring_doorbell(&self) {
        barrier::dma_wmb();
        self.dbr.write_be32(0, self.counter as u32);
    }

    /// Return the WQE a completion names to the free list and hand back its
    /// `wr_id`. A WQE index the ring never posted is refused (the device is
    /// not trusted).
    #[inline]
    pub fn complete(&mut self, wqe_index: u16) -> Result<u64, CompleteError> {
        self.complete_wqe(wqe_index).map(|c| c.wr_id)
    }

    /// [`SrqRing::complete`] with the capacity of the posted scatter list,
    /// for checking a completion's byte count. One range check, one book
    /// record read and freed, one store linking the WQE after the tail.
    #[inline(always)]
    pub fn complete_wqe(&mut self, wqe_index: u16) -> Result<CompletedWqe, CompleteError> {
        let capacity = self.posted_capacity(wqe_index)?;
        let wr_id = self.take_posted(wqe_index);
        Ok(CompletedWqe { wr_id, capacity })
    }

    /// [`SrqCompleter::try_complete`] on the ring itself, for a caller
    /// taking one completion: the WQE's `wr_id` if it is posted and, when
    /// `check_len`, holds `byte_len` bytes; otherwise `None`, with nothing
    /// changed.
    #[inline(always)]
    pub fn try_complete(&mut self, wqe_index: u16, byte_len: u32, check_len: bool) -> Option<u64> {
        let capacity = self.posted_capacity(wqe_index).ok()?;
        if !holds(capacity, byte_len, check_len) {
            return None;
        }
        Some(self.take_posted(wqe_index))
    }

    /// The capacity recorded for WQE `wqe_index` if it is posted; changes
    /// nothing.
    #[inline(always)]
    fn posted_capacity(&self, wqe_index: u16) -> Result<u64, CompleteError> {
        // A range check, not a mask: an index beyond the ring is refused.
        if wqe_index as u32 > self.book.layout().mask() {
            return Err(CompleteError::OutOfRange { index: wqe_index });
        }
        record_capacity(&self.book.entry(wqe_index as u32))
            .ok_or(CompleteError::NotPosted { index: wqe_index })
    }

    /// Free posted WQE `wqe_index` (checked by `posted_capacity`) and link
    /// it after the tail; its `wr_id`.
    #[inline(always)]
    fn take_posted(&mut self, wqe_index: u16) -> u64 {
        let wr_id = free_record(&self.book.entry(wqe_index as u32));
        // Link after the current tail. The tail is never posted, so the
        // device is not positioned on it; it reads a WQE's next pointer when
        // it consumes that WQE, and a posted WQE's next pointer never changes
        // while it is posted (it changes only when the WQE is the tail again,
        // i.e. after its own completion).
        self.set_next(self.tail, wqe_index);
        self.tail = wqe_index;
        self.outstanding -= 1;
        wr_id
    }

    /// An [`SrqCompleter`] for this ring: [`SrqRing::complete_wqe`] for a
    /// poll call taking many receive completions, with the ring's geometry
    /// and its tail in locals rather than reloaded for every completion.
    /// The tail and the outstanding count are stored back when it is
    /// dropped (a completer leaked with `mem::forget` leaves the WQEs it
    /// completed out of the free list).
    #[inline(always)]
    pub fn completer(&mut self) -> SrqCompleter<'_> {
        let self_unit_shift = self.unit_shift();
        let SrqRing {
            wqes,
            book,
            tail,
            outstanding,
            ..
        } = self;
        SrqCompleter {
            book: book.view(),
            next: wqes.view(),
            unit_shift: self_unit_shift,
            last: book.layout().mask(),
            tail: *tail,
            done: 0,
            home: Home { tail, outstanding },
        }
    }

    /// The `wr_id` stored for a posted WQE, without completing it.
    pub fn wr_id(&self, wqe_index: u16) -> Option<u64> {
        if wqe_index as usize >= self.geo.wqe_cnt() {
            return None;
        }
        let rec = self.book.window::<REC>(wqe_index as usize * REC);
        record_capacity(&rec).map(|_| rec.read_be64::<0>().swap_bytes())
    }
}

/// Completions taken with the ring's geometry and tail in locals
/// ([`SrqRing::completer`]); the tail and the outstanding count go back to
/// the ring when it is dropped.
pub struct SrqCompleter<'a> {
    book: RingView<'a, REC>,
    /// The WQEs' units.
    next: RingView<'a, SEG>,
    /// log2 of the units in a WQE: WQE `i`'s next segment is unit
    /// `i << unit_shift`.
    unit_shift: u8,
    /// The highest WQE index.
    last: u32,
    tail: u16,
    /// WQEs completed so far.
    done: usize,
    home: Home<'a>,
}

/// Where an [`SrqCompleter`] stores its state back.
struct Home<'a> {
    tail: &'a mut u16,
    outstanding: &'a mut usize,
}

impl SrqCompleter<'_> {
    /// Complete WQE `wqe_index` if it is posted and, when `check_len`, its
    /// scatter list holds `byte_len` bytes: link it after the tail and
    /// return its `wr_id`. Otherwise `None`, with nothing changed (the
    /// caller takes the general path, which refuses and counts it).
    #[inline(always)]
    pub fn try_complete(&mut self, wqe_index: u16, byte_len: u32, check_len: bool) -> Option<u64> {
        // A range check, not a mask: an index beyond the ring is refused.
        if wqe_index as u32 > self.last {
            return None;
        }
        let rec = self.book.entry(wqe_index as u32);
        let capacity = record_capacity(&rec)?;
        if !holds(capacity, byte_len, check_len) {
            return None;
        }
        let wr_id = free_record(&rec);
        // Linked after the tail, as `SrqRing::complete_wqe` explains.
        self.next
            .entry((self.tail as u32) << self.unit_shift)
            .write_be16::<2>(wqe_index);
        self.tail = wqe_index;
        self.done += 1;
        Some(wr_id)
    }
}

impl Drop for SrqCompleter<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        *self.home.tail = self.tail;
        // Each completion freed a posted WQE, which `outstanding` counts.
        *self.home.outstanding -= self.done;
    }
}
