//! A QP's own receive queue: its size, the receive WQEs, the receive
//! counter of the QP's doorbell record, and the in-order bookkeeping that
//! turns a responder CQE back into the caller's `wr_id`.
//!
//! Written after rdma-core `providers/mlx5/verbs.c` (`mlx5_calc_rcv_wqe`,
//! `mlx5_calc_rq_size`) and `providers/mlx5/qp.c` (`mlx5_post_recv`), and
//! Linux `drivers/infiniband/hw/mlx5/qp.c` (`set_rq_size`) and `wr.c`
//! (`mlx5_ib_post_recv`):
//!
//! * A WQE is a power of two of 16-byte data segments (`log_rq_stride` =
//!   log2(stride) − 4); the ring is `roundup_pow2(max_recv_wr)` WQEs and at
//!   least one 64-byte block. It lies at the start of the QP buffer, before
//!   the send ring.
//! * A WQE holds one data segment per non-empty scatter entry and, when
//!   that leaves room, a terminator (byte count 0 and the terminating
//!   lkey).
//! * The device consumes the WQEs in order; the producer counter (16 bits,
//!   in WQEs) goes into dword 0 of the doorbell record, with no MMIO
//!   doorbell. Completions come back in order too: the CQE's WQE counter
//!   must name the oldest outstanding WQE (the device is not trusted).

use mlx5_hal::{barrier, DmaRegion, DmaWindow, Hal, HalError, RingLayout, RingRegion, RingView};
use mlx5_regs::consts::ctx::INVALID_LKEY;
use mlx5_regs::doorbell::QP_DBR_RCV;

use crate::srq::{holds, CompleteError, CompletedWqe, PostError, RecvRequest, Sge};

/// Bytes of a receive data segment (`struct mlx5_wqe_data_seg`).
const SEG: usize = 16;
/// Smallest receive ring in bytes (rdma-core: at least `MLX5_SEND_WQE_BB`).
const MIN_RING: usize = 64;
/// Largest stride: `log_rq_stride` is 3 bits over 16 bytes.
const MAX_LOG_STRIDE: u8 = 4 + 7;
/// Largest ring: `log_rq_size` is a 4-bit field.
const MAX_LOG_WQES: u8 = 15;
/// Book record: the caller's `wr_id`, then the scatter capacity in bytes.
const REC: usize = 16;

/// What the caller asks a receive queue to hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvQueueCaps {
    /// Outstanding receive work requests (at least 1).
    pub max_recv_wr: u32,
    /// Scatter entries per work request (0 counts as 1).
    pub max_recv_sge: u32,
}

/// Why a receive queue size was refused (each is `EINVAL` in verbs, as
/// rdma-core's `mlx5_calc_rq_size` returns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RqSizeError {
    /// `max_recv_wr` is 0.
    NoWorkRequests,
    /// More work requests than `2^log_max_qp_sz`.
    TooManyWorkRequests,
    /// The WQE would exceed `max_wqe_sz_rq` (or the 2 KiB stride field).
    WqeTooLarge,
    /// The ring would exceed `2^log_max_qp_sz` WQEs (or 2^15).
    RingTooLarge,
}

impl core::fmt::Display for RqSizeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            RqSizeError::NoWorkRequests => "max_recv_wr is 0",
            RqSizeError::TooManyWorkRequests => "max_recv_wr above 2^log_max_qp_sz",
            RqSizeError::WqeTooLarge => "receive WQE above max_wqe_sz_rq",
            RqSizeError::RingTooLarge => "receive ring above 2^log_max_qp_sz WQEs",
        })
    }
}

impl core::error::Error for RqSizeError {}

/// The geometry of a receive ring, rounded as mlx5 does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RqGeometry {
    /// log2 of the WQEs in the ring (`qpc.log_rq_size`).
    pub log_wqe_cnt: u8,
    /// log2 of the WQE stride in bytes (`qpc.log_rq_stride` + 4).
    pub log_stride: u8,
    /// Work requests that may be outstanding: every WQE of the ring.
    pub max_recv_wr: u32,
    /// Scatter entries a work request may carry: stride / 16.
    pub max_recv_sge: u32,
}

impl RqGeometry {
    /// Size a receive ring for `req` on a device whose receive WQEs may be
    /// `max_wqe_sz_rq` bytes and whose rings `2^log_max_qp_sz` entries
    /// (rdma-core `mlx5_calc_rcv_wqe` / `mlx5_calc_rq_size`):
    ///
    /// * WQE = roundup_pow2(16 · max(`max_recv_sge`, 1)), refused above
    ///   `max_wqe_sz_rq`;
    /// * ring = max(roundup_pow2(`max_recv_wr`) · WQE, 64) bytes;
    /// * `max_recv_wr` = ring / WQE, `max_recv_sge` = WQE / 16.
    ///
    /// ```
    /// use mlx5_driver::qp::{RecvQueueCaps, RqGeometry};
    /// let g = RqGeometry::for_request(
    ///     &RecvQueueCaps { max_recv_wr: 10, max_recv_sge: 3 }, 512, 15).unwrap();
    /// assert_eq!((g.stride(), g.wqe_cnt(), g.max_recv_wr, g.max_recv_sge), (64, 16, 16, 4));
    /// let g = RqGeometry::for_request(
    ///     &RecvQueueCaps { max_recv_wr: 1, max_recv_sge: 1 }, 512, 15).unwrap();
    /// assert_eq!((g.stride(), g.max_recv_wr), (16, 4));
    /// ```
    pub fn for_request(
        req: &RecvQueueCaps,
        max_wqe_sz_rq: u16,
        log_max_qp_sz: u8,
    ) -> Result<RqGeometry, RqSizeError> {
        if req.max_recv_wr == 0 {
            return Err(RqSizeError::NoWorkRequests);
        }
        let limit = log_max_qp_sz.min(MAX_LOG_WQES);
        if req.max_recv_wr as u64 > 1u64 << log_max_qp_sz.min(31) {
            return Err(RqSizeError::TooManyWorkRequests);
        }
        let size = SEG as u64 * req.max_recv_sge.max(1) as u64;
        if size > max_wqe_sz_rq as u64 {
            return Err(RqSizeError::WqeTooLarge);
        }
        let wqe = size.next_power_of_two();
        if wqe > max_wqe_sz_rq as u64 || wqe.trailing_zeros() as u8 > MAX_LOG_STRIDE {
            return Err(RqSizeError::WqeTooLarge);
        }
        let ring = (req.max_recv_wr as u64).next_power_of_two() * wqe;
        let ring = ring.max(MIN_RING as u64);
        let cnt = ring / wqe;
        if cnt > 1u64 << limit {
            return Err(RqSizeError::RingTooLarge);
        }
        Ok(RqGeometry {
            log_wqe_cnt: cnt.trailing_zeros() as u8,
            log_stride: wqe.trailing_zeros() as u8,
            max_recv_wr: cnt as u32,
            max_recv_sge: (wqe / SEG as u64) as u32,
        })
    }

    /// WQEs in the ring.
    pub const fn wqe_cnt(&self) -> usize {
        1 << self.log_wqe_cnt
    }

    /// WQE stride in bytes.
    pub const fn stride(&self) -> usize {
        1 << self.log_stride
    }

    /// Ring size in bytes (the send ring starts right after it).
    pub const fn bytes(&self) -> usize {
        self.wqe_cnt() * self.stride()
    }
}

/// The receive ring of a QP: geometry, counters, the caller's `wr_id`s
/// (kept in DMA memory the platform hands out, as the SRQ keeps them: no
/// heap, no caller array). The WQEs themselves live in the QP buffer,
/// which the QP passes in (it is shared with the send ring).
pub struct RecvRing<H: Hal> {
    /// The QP buffer, when the QP has no send ring to own it.
    own: Option<DmaRegion<H>>,
    /// Offset of WQE 0 in the QP buffer.
    base: usize,
    /// The ring's 16-byte units in the QP buffer (WQE `i`'s segments are
    /// units `i << (log_stride - 4)` on): checked against the buffer once
    /// per post call ([`DmaRegion::ring_view`]), then each segment is a
    /// mask, a shift and an add, as the SRQ's.
    units: RingLayout<SEG>,
    geo: RqGeometry,
    book: RingRegion<H, REC>,
    /// Work requests posted / completed (free-running; the low 16 bits
    /// of `head` are the doorbell-record counter).
    head: u32,
    tail: u32,
    term_lkey: u32,
}

impl<H: Hal> RecvRing<H> {
    /// A ring of `geo` at offset `base` of the QP buffer; `own` is that
    /// buffer when no send ring holds it.
    pub(crate) fn new(
        hal: &H,
        geo: RqGeometry,
        base: usize,
        own: Option<DmaRegion<H>>,
    ) -> Result<Self, HalError> {
        let book = hal.alloc_dma(geo.wqe_cnt() * REC)?;
        let book = RingRegion::new(book, 0, geo.log_wqe_cnt, REC.trailing_zeros() as u8)
            .ok_or(HalError::InvalidRequest)?;
        let log_units = geo.log_wqe_cnt + (geo.log_stride - SEG.trailing_zeros() as u8);
        let units = RingLayout::new(base, log_units, SEG.trailing_zeros() as u8)
            .ok_or(HalError::InvalidRequest)?;
        if let Some(own) = own.as_ref() {
            // Checked here as well, so a misfit fails at creation.
            own.ring_layout::<SEG>(base, log_units, SEG.trailing_zeros() as u8)
                .ok_or(HalError::InvalidRequest)?;
        }
        Ok(RecvRing {
            own,
            base,
            units,
            geo,
            book,
            head: 0,
            tail: 0,
            term_lkey: INVALID_LKEY,
        })
    }

    /// End short scatter lists with `lkey` (the device's
    /// `terminate_scatter_list_mkey` when offered, as Linux
    /// `mlx5_ib_post_recv` does; 0x100 otherwise, the default).
    pub fn set_terminator(&mut self, lkey: u32) {
        self.term_lkey = lkey;
    }

    /// The geometry.
    pub fn geometry(&self) -> RqGeometry {
        self.geo
    }

    /// Offset of WQE 0 in the QP buffer (0: the receive ring comes first).
    pub fn base_offset(&self) -> usize {
        self.base
    }

    /// Posted and not yet completed work requests.
    pub fn outstanding(&self) -> u32 {
        self.head.wrapping_sub(self.tail)
    }

    /// The 16-bit producer counter (what the doorbell record holds once
    /// published).
    pub fn producer_counter(&self) -> u16 {
        self.head as u16
    }

    /// Post every `(wr_id, scatter list)` of `reqs` in order into the QP
    /// buffer (`sq_buf`, the send ring's region, or the ring's own) and
    /// publish them with one store of the receive counter in `dbr`. Each
    /// request is checked before anything of it is written: refused when
    /// every WQE is outstanding or with more scatter entries than a WQE
    /// holds (rdma-core `mlx5_post_recv`: ENOMEM, EINVAL); the ones before
    /// it stay posted (and published) and the error names its position.
    /// The producer counter stays in a local and is stored once.
    #[inline(always)]
    pub(crate) fn post_list(
        &mut self,
        sq_buf: Option<&DmaRegion<H>>,
        dbr: &DmaRegion<H>,
        reqs: &[RecvRequest<'_>],
    ) -> Result<(), (usize, PostError)> {
        if let [r] = reqs {
            // One request: no loop, no list bookkeeping.
            self.write_one(sq_buf, r.wr_id, r.sges)
                .map_err(|e| (0, e))?;
            self.ring_doorbell(dbr);
            return Ok(());
        }
        let Some(buf) = sq_buf.or(self.own.as_ref()) else {
            unreachable!("a receive ring's buffer is the send ring's or its own")
        };
        let wqes = buf.ring_view(&self.units);
        let book = self.book.view();
        let mut head = self.head;
        // Free WQEs: at most max_recv_wr, so an index fits in u32 below it.
        let room = (self.geo.max_recv_wr - head.wrapping_sub(self.tail)) as usize;
        let mut result = Ok(());
        for (index, r) in reqs.iter().enumerate() {
            if index >= room {
                result = Err((index, PostError::Full));
                break;
            }
            if let Err(e) = self.write_wqe(buf, wqes, book, head, r.wr_id, r.sges) {
                result = Err((index, e));
                break;
            }
            head = head.wrapping_add(1);
        }
        if head != self.head {
            self.head = head;
            self.ring_doorbell(dbr);
        }
        result
    }

    /// [`RecvRing::post_list`] of one request, in `buf`: the WQE's
    /// segments as one window checked once (for a single WQE as cheap as
    /// the view, with fewer registers held), the head stored once.
    #[inline(always)]
    fn write_one(
        &mut self,
        sq_buf: Option<&DmaRegion<H>>,
        wr_id: u64,
        sges: &[Sge],
    ) -> Result<(), PostError> {
        let Some(buf) = sq_buf.or(self.own.as_ref()) else {
            unreachable!("a receive ring's buffer is the send ring's or its own")
        };
        if self.head.wrapping_sub(self.tail) >= self.geo.max_recv_wr {
            return Err(PostError::Full);
        }
        let max = self.geo.max_recv_sge as usize;
        if sges.len() > max {
            return Err(PostError::TooManySges {
                given: sges.len(),
                max,
            });
        }
        let idx = self.head & (self.geo.max_recv_wr - 1);
        let at = self.base + ((idx as usize) << self.geo.log_stride);
        // One bounds check for the whole WQE; non-empty entries only
        // (rdma-core skips zero-length ones: to the device a zero byte
        // count means 2 GiB), then the terminator if there is room. The
        // scatter capacity is summed on the way.
        let mut segs = buf.windows::<SEG>(at, max);
        let mut capacity = 0u64;
        for sge in sges {
            if sge.length == 0 {
                continue;
            }
            let Some(d) = segs.next() else {
                unreachable!("no more entries than the WQE holds")
            };
            write_seg(&d, sge.length, sge.lkey, sge.addr);
            capacity += match sge.length & 0x7fff_ffff {
                0 => 1u64 << 31,
                n => n as u64,
            };
        }
        if let Some(d) = segs.next() {
            write_seg(&d, 0, self.term_lkey, 0);
        }
        // The book is CPU-only: native byte order (the two swaps cancel).
        let rec = self.book.entry(idx);
        rec.write_be64::<0>(wr_id.swap_bytes());
        rec.write_be64::<8>(capacity.swap_bytes());
        self.head = self.head.wrapping_add(1);
        Ok(())
    }

    /// Write WQE `idx` (masked by the views) and its book record. Touches
    /// no counter.
    #[inline(always)]
    fn write_wqe(
        &self,
        buf: &DmaRegion<H>,
        wqes: RingView<'_, SEG>,
        book: RingView<'_, REC>,
        idx: u32,
        wr_id: u64,
        sges: &[Sge],
    ) -> Result<(), PostError> {
        let max = self.geo.max_recv_sge as usize;
        if sges.len() > max {
            return Err(PostError::TooManySges {
                given: sges.len(),
                max,
            });
        }
        // The WQE's units (no entry crosses the ring's end: the stride
        // divides the ring).
        let first = idx << (self.geo.log_stride - SEG.trailing_zeros() as u8);
        // Every entry written in one pass with the scatter capacity summed
        // as `(len - 1) + 1` per entry, which holds while no `len - 1` has
        // bit 31 set: no entry of length 0 (rdma-core skips those: to the
        // device a zero byte count means 2 GiB) and none of 2 GiB or more.
        // Otherwise the WQE is written again, out of line.
        let mut unit = first;
        let mut sum = 0u64;
        let mut seen = 0u32;
        for sge in sges {
            write_seg(&wqes.entry(unit), sge.length, sge.lkey, sge.addr);
            let less = sge.length.wrapping_sub(1);
            sum += less as u64;
            seen |= less;
            unit += 1;
        }
        let capacity = if seen & 0x8000_0000 == 0 {
            if sges.len() < max {
                write_seg(&wqes.entry(unit), 0, self.term_lkey, 0);
            }
            sum + sges.len() as u64
        } else {
            self.rewrite_skipping_empty(buf, first, sges)
        };
        // The book is CPU-only: native byte order (the two swaps cancel).
        let rec = book.entry(idx);
        rec.write_be64::<0>(wr_id.swap_bytes());
        rec.write_be64::<8>(capacity.swap_bytes());
        Ok(())
    }

    /// Write the WQE whose first unit is `first` again (nothing is
    /// published yet) with only the non-empty entries of `sges`, then the
    /// terminator when fewer than a WQE holds were written; returns the
    /// scatter capacity as the device reads the lengths (low 31 bits, 0
    /// meaning 2 GiB). The rare case of `write_wqe`, out of line and with
    /// its view made here, so it weighs nothing on the common one.
    #[cold]
    #[inline(never)]
    fn rewrite_skipping_empty(&self, buf: &DmaRegion<H>, first: u32, sges: &[Sge]) -> u64 {
        let wqes = buf.ring_view(&self.units);
        let (mut unit, mut capacity, mut written) = (first, 0u64, 0usize);
        for sge in sges.iter().filter(|s| s.length != 0) {
            write_seg(&wqes.entry(unit), sge.length, sge.lkey, sge.addr);
            capacity += match sge.length & 0x7fff_ffff {
                0 => 1u64 << 31,
                n => n as u64,
            };
            unit += 1;
            written += 1;
        }
        if written < self.geo.max_recv_sge as usize {
            write_seg(&wqes.entry(unit), 0, self.term_lkey, 0);
        }
        capacity
    }

    /// Publish what was written: WQE stores ordered before the store of the
    /// receive counter (dword 0 of the doorbell record); no MMIO.
    #[inline(always)]
    pub(crate) fn ring_doorbell(&self, dbr: &DmaRegion<H>) {
        barrier::dma_wmb();
        dbr.write_be32(QP_DBR_RCV, self.head & 0xffff);
    }

    /// Match a responder CQE's `wqe_counter` to the oldest outstanding WQE
    /// (the device consumes and completes them in order): retire it and
    /// return its `wr_id` and scatter capacity. A CQE with nothing
    /// outstanding, or naming another WQE, is refused.
    #[inline(always)]
    pub(crate) fn complete(&mut self, wqe_counter: u16) -> Result<CompletedWqe, CompleteError> {
        let mask = self.geo.max_recv_wr - 1;
        if self.head == self.tail || (wqe_counter as u32 & mask) != (self.tail & mask) {
            return Err(CompleteError::NotPosted { index: wqe_counter });
        }
        let rec = self.book.entry(self.tail);
        self.tail = self.tail.wrapping_add(1);
        Ok(CompletedWqe {
            wr_id: rec.read_be64::<0>().swap_bytes(),
            capacity: rec.read_be64::<8>().swap_bytes(),
        })
    }

    /// Whether a completion of `byte_len` bytes fits a WQE of `capacity`.
    #[inline(always)]
    pub(crate) fn holds(capacity: u64, byte_len: u32, check_len: bool) -> bool {
        holds(capacity, byte_len, check_len)
    }

    /// Back to a new ring (after 2RST, Linux `__mlx5_ib_modify_qp`).
    pub(crate) fn reset(&mut self) {
        self.head = 0;
        self.tail = 0;
    }
}

#[inline(always)]
fn write_seg(d: &DmaWindow<'_, SEG>, len: u32, lkey: u32, addr: u64) {
    d.write_be32::<0>(len);
    d.write_be32::<4>(lkey);
    d.write_be64::<8>(addr);
}
