//! The send ring of a queue pair: the send WQEs, the send doorbell, and
//! the bookkeeping that turns a requester CQE back into the caller's
//! `wr_id` (its size is computed in `sq_size.rs`).
//!
//! Pure data path, written after rdma-core `providers/mlx5/qp.c`
//! (`_mlx5_post_send`, `post_send_db`) and Linux
//! `drivers/infiniband/hw/mlx5/wr.c`:
//!
//! * The ring is `wqe_cnt` basic blocks (WQEBBs) of 64 bytes. A WQE starts at
//!   WQEBB `cur_post & (wqe_cnt − 1)` and is made of 16-byte units: the
//!   control segment, the remote-address segment of RDMA writes, READs and
//!   atomics, the atomic segment of the atomics, then data segments (one
//!   per non-empty scatter entry; an atomic's one entry with byte count 8)
//!   or one inline segment (a 4-byte header `len | 0x8000_0000` followed by
//!   the bytes, padded to 16).
//!   A WQE may run past the end of the ring and continue at its start.
//! * `cur_post` is the 16-bit producer counter in WQEBBs; it goes into the
//!   control segment (the WQE index the device echoes in `wqe_counter`) and,
//!   once per batch, into dword 1 of the QP doorbell record.
//! * Doorbell: WQE stores, write barrier, doorbell-record store, barrier, one
//!   64-bit MMIO store of the last WQE's first 8 bytes to the QP's BlueFlame
//!   register, flush, then switch to the other half of the register.
//! * Flow control counts work requests, as rdma-core does: at most
//!   `max_send_wr` are outstanding, and since no WQE is longer than the
//!   `wqe_size` the ring was sized for, the WQEBBs never overrun.
//! * The caller's table ([`SendSlot`], one per WQEBB) records, for the slot
//!   a WQE starts at, its `wr_id`, its running work-request number and its
//!   16-bit index. A requester CQE names the index of the last WQE it
//!   covers; every work request up to it is retired (unsignaled ones have no
//!   CQE of their own), exactly as rdma-core's `wqe_head` does. A CQE whose
//!   index is not the start of an outstanding WQE is refused: the device is
//!   not trusted.

use mlx5_hal::{barrier, DmaRegion, Hal, HalError, RingRegion};
use mlx5_regs::consts::wqe;
use mlx5_regs::doorbell::QP_DBR_SND;

use super::wr::{BadSendCqe, Payload, SendError, SendOpcode, SendSlot, SendWork};
use crate::pagelist::{alloc_paged, PageList};
use crate::srq::Sge;

use super::sq_size::{SqGeometry, BB_UNITS, UNIT, WQEBB};

mod completer;
pub(crate) use completer::SendCompleter;

/// The send ring: WQE buffer, geometry, counters and the doorbell target.
pub struct SendRing<H: Hal> {
    /// The WQE buffer with its 16-byte units laid out in it, checked
    /// once: a segment is the window of its unit (mask, shift, add, no
    /// check), and a WQE that runs past the ring's end continues at its
    /// start through the mask.
    buf: RingRegion<H, UNIT>,
    /// Offset of WQEBB 0 in `buf` (aligned to the firmware page size).
    base: usize,
    geo: SqGeometry,
    /// Gather entries a work request may carry: the geometry's
    /// `max_send_sge` unless lowered by [`SendRing::limit_sges`].
    max_sge: u32,
    /// The control segment's `qpn_ds` with `ds` 0 (`qpn << 8`).
    qpn_ds: u32,
    /// `wqebbs - 1`: a producer or WQE counter masked to its WQEBB.
    bb_mask: usize,
    /// Producer counter in WQEBBs.
    cur_post: u16,
    /// Work requests posted / retired (free-running).
    head: u32,
    tail: u32,
    /// BAR0 offset of the BlueFlame half the next doorbell goes to.
    bf_offset: usize,
    /// `offset ^= bf_toggle` switches halves; also the size of one half,
    /// the largest WQE a BlueFlame copy carries.
    bf_toggle: usize,
    /// The platform maps the UAR write-combining: a small WQE may be
    /// copied into the BlueFlame buffer ([`SendRing::ring_doorbell`]).
    blueflame: bool,
    /// `head` when the last doorbell was rung: the work requests since are
    /// the ones the next doorbell publishes.
    doorbell_head: u32,
    /// `head` before the last WQE with inline data was written: equal to
    /// `doorbell_head` when the one request since the last doorbell is
    /// inline (one store per inline request, none for the others).
    inline_head: u32,
    /// The device executes the IB atomics ([`SendRing::set_atomics`]).
    atomics: bool,
    /// A UD ring ([`SendRing::set_datagram`]).
    datagram: bool,
    /// The outstanding requests a connected request may find: the queue's
    /// `max_send_wr` on a connected ring, 0 on a UD ring (which so refuses
    /// connected requests inside the queue-full check, at no cost to them).
    connected_limit: u32,
}

impl<H: Hal> SendRing<H> {
    /// Allocate a ring of `geo` in DMA pages (at most `max_pages` page-list
    /// entries). `bf_offset` is the BAR0 offset of the BlueFlame register
    /// (UAR page + 0x800) and `bf_size` its size; the QP number is set once
    /// firmware assigned it ([`SendRing::set_qpn`]).
    pub fn new(
        hal: &H,
        geo: SqGeometry,
        max_pages: usize,
        bf_offset: usize,
        bf_size: usize,
    ) -> Result<(Self, PageList), HalError> {
        Self::after_recv(hal, geo, 0, max_pages, bf_offset, bf_size).map(|(r, p, _)| (r, p))
    }

    /// [`SendRing::new`] in a QP buffer that starts with a receive ring of
    /// `rq_bytes` (mlx5 lays the receive ring first and the send ring right
    /// after it, Linux `_create_kernel_qp`): the page list covers both, and
    /// the receive ring is at the returned offset of [`SendRing::region`].
    pub fn after_recv(
        hal: &H,
        geo: SqGeometry,
        rq_bytes: usize,
        max_pages: usize,
        bf_offset: usize,
        bf_size: usize,
    ) -> Result<(Self, PageList, usize), HalError> {
        let (buf, rq_base, pages) = alloc_paged(hal, rq_bytes + geo.bytes(), max_pages)?;
        let base = rq_base + rq_bytes;
        let log_units = geo.log_wqebbs + BB_UNITS.trailing_zeros() as u8;
        let buf = RingRegion::new(buf, base, log_units, UNIT.trailing_zeros() as u8)
            .ok_or(HalError::InvalidRequest)?;
        Ok((
            SendRing {
                buf,
                base,
                geo,
                max_sge: geo.max_send_sge,
                qpn_ds: 0,
                bb_mask: geo.wqebbs() - 1,
                cur_post: 0,
                head: 0,
                tail: 0,
                bf_offset,
                bf_toggle: bf_size / 2,
                blueflame: hal.write_combining(),
                doorbell_head: 0,
                inline_head: u32::MAX,
                atomics: false,
                datagram: false,
                connected_limit: geo.max_send_wr,
            },
            pages,
            rq_base,
        ))
    }

    /// Record the QP number (it goes into every control segment).
    pub fn set_qpn(&mut self, qpn: u32) {
        self.qpn_ds = wqe::qpn_ds(qpn, 0);
    }

    /// The geometry.
    pub fn geometry(&self) -> SqGeometry {
        self.geo
    }

    /// Refuse work requests with more than `max` gather entries (at most
    /// the geometry's `max_send_sge`, which stays the limit when `max` is
    /// above it). The verbs facade enforces the number asked for at
    /// creation, which may be below what a WQE holds, as rdma-core does
    /// (`qp->sq.max_gs` is `cap.max_send_sge` in `providers/mlx5/verbs.c`
    /// `create_qp`).
    pub fn limit_sges(&mut self, max: u32) {
        self.max_sge = max.min(self.geo.max_send_sge);
    }

    /// Take atomics ([`crate::qp::SendOpcode::is_atomic`]) or refuse them
    /// with [`SendError::AtomicsUnsupported`] (the default): set at creation
    /// from the device's atomic page, as rdma-core's `atomics_enabled`.
    pub fn set_atomics(&mut self, on: bool) {
        self.atomics = on;
    }

    /// A UD ring: every WQE carries a datagram segment; a connected request
    /// is refused ([`SendError::WrongTransport`]), and so is a datagram
    /// request on a connected ring.
    pub fn set_datagram(&mut self, on: bool) {
        self.datagram = on;
        self.connected_limit = if on { 0 } else { self.geo.max_send_wr };
    }

    /// Gather entries a work request may carry.
    pub fn max_sges(&self) -> u32 {
        self.max_sge
    }

    /// The DMA region holding the ring; WQEBB 0 is at
    /// [`SendRing::base_offset`].
    pub fn region(&self) -> &DmaRegion<H> {
        &self.buf
    }

    /// Offset of WQEBB 0 inside [`SendRing::region`].
    pub fn base_offset(&self) -> usize {
        self.base
    }

    /// The 16-bit producer counter (WQEBBs).
    pub fn producer_counter(&self) -> u16 {
        self.cur_post
    }

    /// Work requests posted and not yet retired by a CQE.
    pub fn outstanding(&self) -> u32 {
        self.head.wrapping_sub(self.tail)
    }

    /// BAR0 offset the next doorbell is written to.
    pub fn doorbell_offset(&self) -> usize {
        self.bf_offset
    }

    /// Write one WQE for `r` (a [`crate::qp::SendRequest`] or any other
    /// [`SendWork`]) at the producer position and record it in `slots`
    /// (length ≥ the ring's WQEBBs, checked by the QP at creation).
    /// Nothing is published; returns the WQE's first 8 bytes, the value of
    /// the doorbell that publishes it.
    ///
    /// SEND and RDMA WRITE (with or without immediate) are written here;
    /// RDMA READ and the atomics, whose local buffers the device writes and
    /// whose WQEs carry more segments, in a function of their own, so the
    /// common path does none of their work.
    #[inline(always)]
    pub fn write<R: SendWork + ?Sized>(
        &mut self,
        slots: &mut [SendSlot],
        r: &R,
    ) -> Result<u64, SendError> {
        if let Some(d) = r.datagram() {
            return self.write_datagram(slots, r, d);
        }
        if self.head.wrapping_sub(self.tail) >= self.connected_limit {
            return Err(if self.datagram {
                SendError::WrongTransport
            } else {
                SendError::Full
            });
        }
        let opcode = r.opcode();
        if opcode.reads_remote() {
            return self.write_reading(slots, r, opcode);
        }
        // The opcode alone decides the layout: control, [raddr] (the RDMA
        // writes), then data or inline. The first WQEBB holds four units,
        // so everything before the data lies inside it and never wraps.
        let idx = self.cur_post as usize & self.bb_mask;
        let raddr = opcode.is_rdma_write();
        let data_unit = idx * BB_UNITS + 1 + raddr as usize;
        let data = match r.payload() {
            Payload::Sges(sges) => self.write_gather(data_unit, sges)?,
            Payload::Inline(bytes) => self.write_inline(data_unit, bytes)?,
        };
        if raddr {
            // Linux `set_raddr_seg`.
            let (addr, rkey) = r.remote();
            let seg = self.buf.entry((idx * BB_UNITS + 1) as u32);
            seg.write_be64::<0>(addr);
            seg.write_be64::<8>((rkey as u64) << 32);
        }
        let imm = if opcode.has_imm() { r.imm() } else { 0 };
        Ok(self.finish(slots, r, idx, opcode, 1 + raddr as usize + data, imm))
    }

    /// A UD SEND / SEND_IMM: control, the 48-byte datagram segment (the
    /// WQE's own copy of the address, Linux `set_datagram_seg`) in units
    /// 1..4 of the first WQEBB, then data or inline from the next WQEBB on
    /// (the unit mask continues it at the ring's start).
    #[inline(always)]
    fn write_datagram<R: SendWork + ?Sized>(
        &mut self,
        slots: &mut [SendSlot],
        r: &R,
        d: super::ud::Datagram<'_>,
    ) -> Result<u64, SendError> {
        if self.head.wrapping_sub(self.tail) >= self.geo.max_send_wr {
            return Err(SendError::Full);
        }
        let opcode = r.opcode();
        if !self.datagram || !matches!(opcode, SendOpcode::Send | SendOpcode::SendImm) {
            return Err(SendError::WrongTransport);
        }
        let idx = self.cur_post as usize & self.bb_mask;
        let data_unit = idx * BB_UNITS + 4;
        let data = match r.payload() {
            Payload::Sges(sges) => self.write_gather(data_unit, sges)?,
            Payload::Inline(bytes) => self.write_inline(data_unit, bytes)?,
        };
        let imm = if opcode.has_imm() { r.imm() } else { 0 };
        let ds = 4 + data;
        let (word0, word1) = self.control(r, opcode, ds, imm);
        // Control and datagram segments fill the first WQEBB: one window
        // (a WQE starts at a WQEBB and wraps only between WQEBBs), the
        // address's tail stored as it lies in the handle.
        let [qkey, dqp_head] = d.av.head_words(d.remote_qpn, d.remote_qkey);
        let [t0, t1, t2, t3] = *d.av.wire_tail();
        let bb = self.buf.entry_span::<WQEBB>((idx * BB_UNITS) as u32);
        bb.write_be64::<0>(word0);
        bb.write_be64::<8>(word1);
        bb.write_be64::<16>(qkey);
        bb.write_be64::<24>(dqp_head);
        bb.write_ne64::<32>(t0);
        bb.write_ne64::<40>(t1);
        bb.write_ne64::<48>(t2);
        bb.write_ne64::<56>(t3);
        self.record(slots, r, idx, opcode, ds, word1);
        Ok(word0)
    }

    /// [`SendRing::write`] of an RDMA READ or an atomic: control, remote
    /// address, then the gather list the device writes into (READ) or the
    /// atomic segment and one 8-byte data segment (the atomics; rdma-core
    /// `set_atomic_seg`, `set_data_ptr_seg_atomic`). A branch of its own,
    /// so SEND and WRITE do none of their checks; inlined (as an
    /// out-of-line call it cost READ and the atomics about 20 instructions
    /// per request, and the SEND/WRITE post paths 10-14 more than now,
    /// bench/budget.py).
    #[inline(always)]
    fn write_reading<R: SendWork + ?Sized>(
        &mut self,
        slots: &mut [SendSlot],
        r: &R,
        opcode: SendOpcode,
    ) -> Result<u64, SendError> {
        let Payload::Sges(sges) = r.payload() else {
            return Err(SendError::InlineNotAllowed);
        };
        let idx = self.cur_post as usize & self.bb_mask;
        let ds = if opcode.is_atomic() {
            // rdma-core checks `num_sge` against `sq.max_gs` before the
            // opcode.
            if sges.len() > self.max_sge as usize {
                return Err(SendError::TooManySges {
                    given: sges.len(),
                    max: self.max_sge,
                });
            }
            if !self.atomics {
                return Err(SendError::AtomicsUnsupported);
            }
            // One local buffer; the device writes 8 bytes into it.
            let [sge] = sges else {
                return Err(SendError::BadAtomicBuffer);
            };
            if sge.length < 8 {
                return Err(SendError::BadAtomicBuffer);
            }
            // Linux `set_atomic_seg`: swap (or the addend), then compare;
            // the one data segment is unit 3 of the first WQEBB.
            let (swap_add, compare) = r.atomic();
            let seg = self.buf.entry((idx * BB_UNITS + 2) as u32);
            seg.write_be64::<0>(swap_add);
            seg.write_be64::<8>(compare);
            let seg = self.buf.entry((idx * BB_UNITS + 3) as u32);
            seg.write_be64::<0>((8u64 << 32) | sge.lkey as u64);
            seg.write_be64::<8>(sge.addr);
            4
        } else {
            2 + self.write_gather(idx * BB_UNITS + 2, sges)?
        };
        let (addr, rkey) = r.remote();
        let seg = self.buf.entry((idx * BB_UNITS + 1) as u32);
        seg.write_be64::<0>(addr);
        seg.write_be64::<8>((rkey as u64) << 32);
        Ok(self.finish(slots, r, idx, opcode, ds, 0))
    }

    /// Write the non-empty entries of `sges` as data segments from unit
    /// `data_unit` of the ring on (zero-length entries are skipped, as
    /// Linux and rdma-core do); returns how many units were written.
    /// Refused, with nothing written, above the QP's gather limit.
    #[inline(always)]
    fn write_gather(&self, data_unit: usize, sges: &[Sge]) -> Result<usize, SendError> {
        if sges.len() > self.max_sge as usize {
            return Err(SendError::TooManySges {
                given: sges.len(),
                max: self.max_sge,
            });
        }
        let mut unit = data_unit;
        for sge in sges.iter().filter(|s| s.length != 0) {
            let d = self.buf.entry(unit as u32);
            d.write_be32::<0>(sge.length);
            d.write_be32::<4>(sge.lkey);
            d.write_be64::<8>(sge.addr);
            unit += 1;
        }
        Ok(unit - data_unit)
    }

    /// Write `bytes` as an inline segment from unit `data_unit` of the
    /// ring on, in 8-byte stores: the 4-byte header shares the first with
    /// the first four bytes, each unit after the first takes 16, the last
    /// is padded with zeros (inside the segment's 16-byte padding). Returns
    /// the units written; refused above the QP's inline limit.
    #[inline(always)]
    fn write_inline(&mut self, data_unit: usize, bytes: &[u8]) -> Result<usize, SendError> {
        let len = bytes.len();
        if len > self.geo.max_inline_data as usize {
            return Err(SendError::InlineTooLarge {
                len,
                max: self.geo.max_inline_data,
            });
        }
        if len == 0 {
            return Ok(0);
        }
        self.inline_head = self.head;
        let header = ((len as u32 | wqe::INLINE_SEG) as u64) << 32;
        let first = self.buf.entry(data_unit as u32);
        let Some((lead, rest)) = bytes.split_first_chunk::<12>() else {
            // Under 12 bytes: unit 0 holds them all.
            let (lead, rest) = bytes.split_at(len.min(4));
            first.write_be64::<0>(header | word_of(lead) >> 32);
            first.write_be64::<8>(word_of(rest));
            return Ok(1);
        };
        // Unit 0: the header and the first 12 bytes.
        let [a0, a1, a2, a3, b @ ..] = *lead;
        first.write_be64::<0>(header | u32::from_be_bytes([a0, a1, a2, a3]) as u64);
        first.write_be64::<8>(u64::from_be_bytes(b));
        // Then 16 bytes per unit; the mask continues a segment that runs
        // past the ring's end at its start.
        let mut unit = data_unit + 1;
        let mut units = rest.chunks_exact(UNIT);
        for u in &mut units {
            let (a, b) = u.split_at(8);
            let d = self.buf.entry(unit as u32);
            d.write_be64::<0>(word_of(a));
            d.write_be64::<8>(word_of(b));
            unit += 1;
        }
        // The last 1..15 bytes: read as the source's last 8 (at least 12
        // are there) and shifted into place, zeros after them.
        let tail = units.remainder();
        if let Some(last) = bytes.last_chunk::<8>().filter(|_| !tail.is_empty()) {
            let last = u64::from_be_bytes(*last);
            let d = self.buf.entry(unit as u32);
            let t = tail.len();
            if t > 8 {
                d.write_be64::<0>(word_of(tail));
                d.write_be64::<8>(last << ((16 - t) * 8));
            } else {
                d.write_be64::<0>(last << ((8 - t) * 8));
                d.write_be64::<8>(0);
            }
        }
        Ok((4 + len).div_ceil(UNIT))
    }

    /// The control segment and the table entry of the WQE at `idx` whose
    /// other segments are written (`ds` units in all), then the counters
    /// move on. Returns the doorbell value (the WQE's first 8 bytes).
    #[inline(always)]
    fn finish<R: SendWork + ?Sized>(
        &mut self,
        slots: &mut [SendSlot],
        r: &R,
        idx: usize,
        opcode: SendOpcode,
        ds: usize,
        imm: u32,
    ) -> u64 {
        // Written out here rather than through `control` and `record` (as
        // the datagram path does): shared, they cost the RC post 2-14
        // instructions (bench/budget.py).
        let fm_ce_se = r.fm_ce_se();
        let word0 = mlx5_regs::doorbell::qp_send_doorbell(
            wqe::opmod_idx_opcode(0, self.cur_post, opcode as u8),
            self.qpn_ds | ds as u32 & wqe::CTRL_DS_MASK,
        );
        let ctrl = self.buf.entry((idx * BB_UNITS) as u32);
        ctrl.write_be64::<0>(word0);
        ctrl.write_be64::<8>(((fm_ce_se as u64) << 32) | imm as u64);
        slots[idx] = SendSlot {
            wr_id: r.wr_id(),
            seq: self.head,
            index: self.cur_post,
            opcode: opcode as u8,
            signaled: fm_ce_se & wqe::CTRL_CQ_UPDATE != 0,
        };
        self.cur_post = self
            .cur_post
            .wrapping_add(round_up_div(ds, BB_UNITS) as u16);
        self.head = self.head.wrapping_add(1);
        word0
    }

    /// The control segment of the WQE at the producer position, `ds`
    /// units long, as two big-endian words: the first is the doorbell
    /// value, the second holds `fm_ce_se` and the immediate data.
    #[inline(always)]
    fn control<R: SendWork + ?Sized>(
        &self,
        r: &R,
        opcode: SendOpcode,
        ds: usize,
        imm: u32,
    ) -> (u64, u64) {
        let word0 = mlx5_regs::doorbell::qp_send_doorbell(
            wqe::opmod_idx_opcode(0, self.cur_post, opcode as u8),
            self.qpn_ds | ds as u32 & wqe::CTRL_DS_MASK,
        );
        (word0, ((r.fm_ce_se() as u64) << 32) | imm as u64)
    }

    /// The table entry of the WQE at `idx` (`ds` units, control word 1
    /// `word1`), then the counters move on.
    #[inline(always)]
    fn record<R: SendWork + ?Sized>(
        &mut self,
        slots: &mut [SendSlot],
        r: &R,
        idx: usize,
        opcode: SendOpcode,
        ds: usize,
        word1: u64,
    ) {
        let fm_ce_se = (word1 >> 32) as u8;
        slots[idx] = SendSlot {
            wr_id: r.wr_id(),
            seq: self.head,
            index: self.cur_post,
            opcode: opcode as u8,
            signaled: fm_ce_se & wqe::CTRL_CQ_UPDATE != 0,
        };
        self.cur_post = self
            .cur_post
            .wrapping_add(round_up_div(ds, BB_UNITS) as u16);
        self.head = self.head.wrapping_add(1);
    }

    /// Publish everything written: WQE stores ordered before the
    /// doorbell-record store, that store before the MMIO doorbell (the first
    /// 8 bytes of the last WQE, `ctrl`), write-combining flushed, then the
    /// other half of the BlueFlame register is used next time (rdma-core
    /// `post_send_db`).
    ///
    /// BlueFlame: when one work request was written since the last
    /// doorbell, it carries inline data, the platform maps the UAR
    /// write-combining and the WQE fits one BlueFlame buffer (half the
    /// register), the whole WQE goes into the buffer instead, 8 bytes at a
    /// time in order, `ctrl` first, padded to whole WQEBBs (rdma-core's
    /// default choice in `post_send_db`, the copy as `mlx5_bf_copy`): the
    /// card takes it from there instead of reading it from memory, one DMA
    /// read less of latency.
    #[inline]
    pub fn ring_doorbell(&mut self, hal: &H, dbr: &DmaRegion<H>, ctrl: u64) {
        barrier::dma_wmb();
        dbr.write_be32(QP_DBR_SND, self.cur_post as u32);
        barrier::mmio_wmb();
        let single_inline = self.head.wrapping_sub(self.doorbell_head) == 1
            && self.inline_head == self.doorbell_head;
        self.doorbell_head = self.head;
        let bbs = ((ctrl & 0x3f) as usize * UNIT).div_ceil(WQEBB);
        if single_inline && self.blueflame && bbs * WQEBB <= self.bf_toggle {
            self.blueflame_copy(hal, ctrl, bbs);
        } else {
            hal.mmio_write64(self.bf_offset, ctrl);
        }
        barrier::mmio_flush();
        self.bf_offset ^= self.bf_toggle;
    }

    /// The BlueFlame copy of the `bbs` WQEBBs of the WQE `ctrl` names.
    #[inline]
    fn blueflame_copy(&self, hal: &H, ctrl: u64, bbs: usize) {
        let index = (ctrl >> 40) as u16;
        let mut at = self.bf_offset;
        let first = index as u32 * BB_UNITS as u32;
        for u in 0..(bbs * BB_UNITS) as u32 {
            let seg = self.buf.entry(first.wrapping_add(u));
            // The doorbell word as built, not read back: the same bytes.
            hal.mmio_write64(at, if u == 0 { ctrl } else { seg.read_be64::<0>() });
            hal.mmio_write64(at + 8, seg.read_be64::<8>());
            at += UNIT;
        }
    }

    /// Match a requester CQE's `wqe_counter` to its WQE: the slot must hold
    /// an outstanding WQE that starts there. Retires it and every earlier
    /// work request; returns the slot and how many were retired.
    #[inline(always)]
    pub fn complete(
        &mut self,
        slots: &[SendSlot],
        wqe_counter: u16,
    ) -> Result<(SendSlot, u32), BadSendCqe> {
        let idx = wqe_counter as usize & self.bb_mask;
        let bad = BadSendCqe::NotOutstanding { wqe_counter };
        let s = *slots.get(idx).ok_or(bad)?;
        let age = s.seq.wrapping_sub(self.tail);
        if s.index != wqe_counter || age >= self.head.wrapping_sub(self.tail) {
            return Err(bad);
        }
        self.tail = s.seq.wrapping_add(1);
        Ok((s, age + 1))
    }

    /// Back to the state of a new ring (after the QP went to RESET, as
    /// Linux does at the end of `__mlx5_ib_modify_qp`): counters zeroed,
    /// every table entry forgotten.
    pub fn reset(&mut self, slots: &mut [SendSlot]) {
        self.cur_post = 0;
        self.head = 0;
        self.tail = 0;
        self.doorbell_head = 0;
        self.inline_head = u32::MAX;
        slots.fill(SendSlot::EMPTY);
    }
}

/// `n / d` rounded up, for a power-of-two `d` and an `n` far from
/// overflowing: an add and a shift (`div_ceil` compiles to a remainder
/// test and a carry).
#[inline(always)]
#[allow(clippy::manual_div_ceil)]
const fn round_up_div(n: usize, d: usize) -> usize {
    (n + d - 1) / d
}

/// Up to the first 8 of `bytes` as a big-endian word, padded with zeros:
/// stored with `write_be64`, the bytes land in memory in their order.
#[inline(always)]
fn word_of(bytes: &[u8]) -> u64 {
    if let Some(b) = bytes.first_chunk::<8>() {
        return u64::from_be_bytes(*b);
    }
    // Fewer than 8: four, two and one byte at a time, no copy loop.
    let (mut w, mut shift, mut rest) = (0u64, 64, bytes);
    if let Some((b, r)) = rest.split_first_chunk::<4>() {
        shift -= 32;
        w |= (u32::from_be_bytes(*b) as u64) << shift;
        rest = r;
    }
    if let Some((b, r)) = rest.split_first_chunk::<2>() {
        shift -= 16;
        w |= (u16::from_be_bytes(*b) as u64) << shift;
        rest = r;
    }
    if let Some(b) = rest.first() {
        w |= (*b as u64) << (shift - 8);
    }
    w
}
