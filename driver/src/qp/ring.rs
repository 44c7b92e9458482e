//! The send ring of an RC queue pair: its size, the send WQEs, the send
//! doorbell, and the bookkeeping that turns a requester CQE back into the
//! caller's `wr_id`.
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

use mlx5_hal::{barrier, DmaRegion, DmaWindow, Hal, HalError, RingRegion};
use mlx5_regs::consts::wqe;
use mlx5_regs::doorbell::QP_DBR_SND;

use super::wr::{BadSendCqe, Payload, SendError, SendSlot, SendWork};
use crate::pagelist::{alloc_paged, PageList};
use crate::srq::Sge;

/// Bytes in a send basic block (`MLX5_SEND_WQE_BB`).
pub const WQEBB: usize = wqe::SEND_WQE_BB;
/// Bytes in a WQE unit (`MLX5_SEND_WQE_DS`).
const UNIT: usize = wqe::SEND_WQE_DS;
/// Largest WQE in units: `qpn_ds.ds` is 6 bits.
pub const MAX_DS: usize = 63;
/// Bytes of the control, remote-address and atomic segments: the per-WQE
/// overhead for the operations this driver posts (rdma-core `sq_overhead`
/// with `send_ops_flags` SEND, SEND_WITH_IMM, RDMA_WRITE,
/// RDMA_WRITE_WITH_IMM, RDMA_READ, ATOMIC_CMP_AND_SWP and
/// ATOMIC_FETCH_AND_ADD: the atomics' 16 + 16 + 16).
pub const SQ_OVERHEAD: usize = 48;
/// The segments of a UD WQE before its data: control (16) and datagram
/// (48) (rdma-core `sq_overhead` for `IBV_QPT_UD`).
pub const UD_OVERHEAD: usize = 64;
/// Largest send ring: `log_sq_size` is a 4-bit field.
const MAX_LOG_WQEBBS: u8 = 15;

/// What the caller asks a send queue to hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendQueueCaps {
    /// Outstanding work requests (at least 1).
    pub max_send_wr: u32,
    /// Gather entries per work request.
    pub max_send_sge: u32,
    /// Inline bytes per work request.
    pub max_inline_data: u32,
}

impl Default for SendQueueCaps {
    fn default() -> Self {
        SendQueueCaps {
            max_send_wr: 64,
            max_send_sge: 1,
            max_inline_data: 0,
        }
    }
}

/// Why a send queue size was refused (each is `EINVAL` in verbs, ring too
/// large `ENOMEM` as in Linux `calc_sq_size`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SqSizeError {
    /// `max_send_wr` is 0.
    NoWorkRequests,
    /// More gather entries than a WQE of `max_wqe_sz_sq` bytes holds.
    TooManySges,
    /// The WQE would exceed `max_wqe_sz_sq` (or 63 units).
    WqeTooLarge,
    /// The ring would exceed `2^log_max_qp_sz` WQEBBs (or 2^15).
    RingTooLarge,
}

/// The geometry of a send ring, rounded as mlx5 does (rdma-core
/// `mlx5_calc_send_wqe` / `mlx5_calc_sq_size`; Linux `calc_sq_size`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqGeometry {
    /// log2 of the ring size in WQEBBs (`qpc.log_sq_size`).
    pub log_wqebbs: u8,
    /// Bytes reserved per work request: a multiple of 64.
    pub wqe_size: usize,
    /// Work requests that may be outstanding: `ring bytes / wqe_size`.
    pub max_send_wr: u32,
    /// Gather entries a work request may carry (what fits in `wqe_size`,
    /// at least what was asked).
    pub max_send_sge: u32,
    /// Inline bytes a work request may carry (at least what was asked).
    pub max_inline_data: u32,
}

impl SqGeometry {
    /// Size a send ring for `req` on a device whose send WQEs may be
    /// `max_wqe_sz_sq` bytes and whose rings `2^log_max_qp_sz` WQEBBs:
    ///
    /// * overhead 48 bytes (control + remote address + atomic);
    /// * WQE = max(overhead + 16·SGEs, overhead + align16(4 + inline)),
    ///   refused above `max_wqe_sz_sq` (and above 63 units, the `ds` limit),
    ///   then rounded up to 64 bytes;
    /// * ring = roundup_pow2(`max_send_wr` · WQE) bytes; capacity = ring / WQE.
    ///
    /// ```
    /// use mlx5_driver::qp::{SendQueueCaps, SqGeometry};
    /// let g = SqGeometry::for_request(
    ///     &SendQueueCaps { max_send_wr: 10, max_send_sge: 2, max_inline_data: 0 }, 1024, 15).unwrap();
    /// assert_eq!((g.wqe_size, g.wqebbs(), g.max_send_wr, g.max_send_sge), (128, 32, 16, 5));
    /// ```
    pub fn for_request(
        req: &SendQueueCaps,
        max_wqe_sz_sq: u16,
        log_max_qp_sz: u8,
    ) -> Result<SqGeometry, SqSizeError> {
        Self::for_transport(req, false, max_wqe_sz_sq, log_max_qp_sz)
    }

    /// [`SqGeometry::for_request`] for a connected QP (`datagram` false:
    /// 48 bytes of segments before the data) or a UD QP (true: the control
    /// and datagram segments, 64 bytes; rdma-core `sq_overhead`).
    pub fn for_transport(
        req: &SendQueueCaps,
        datagram: bool,
        max_wqe_sz_sq: u16,
        log_max_qp_sz: u8,
    ) -> Result<SqGeometry, SqSizeError> {
        let overhead = if datagram { UD_OVERHEAD } else { SQ_OVERHEAD };
        if req.max_send_wr == 0 {
            return Err(SqSizeError::NoWorkRequests);
        }
        let max_desc = (max_wqe_sz_sq as usize).min(MAX_DS * UNIT);
        let max_gather = max_desc.saturating_sub(overhead) / UNIT;
        if req.max_send_sge as usize > max_gather {
            return Err(SqSizeError::TooManySges);
        }
        let gather = overhead + req.max_send_sge as usize * UNIT;
        let inline = if req.max_inline_data > 0 {
            overhead + (4 + req.max_inline_data as usize).next_multiple_of(UNIT)
        } else {
            0
        };
        let total = gather.max(inline);
        if total > max_desc {
            return Err(SqSizeError::WqeTooLarge);
        }
        let wqe_size = total.next_multiple_of(WQEBB);
        let ring = (req.max_send_wr as u64 * wqe_size as u64).next_power_of_two();
        let wqebbs = ring / WQEBB as u64;
        let limit = log_max_qp_sz.min(MAX_LOG_WQEBBS);
        if wqebbs > 1u64 << limit {
            return Err(SqSizeError::RingTooLarge);
        }
        // What a WQE of `wqe_size` bytes really holds (never beyond 63 units).
        let usable = wqe_size.min(MAX_DS * UNIT);
        Ok(SqGeometry {
            log_wqebbs: wqebbs.trailing_zeros() as u8,
            wqe_size,
            max_send_wr: (ring / wqe_size as u64) as u32,
            max_send_sge: ((usable - overhead) / UNIT) as u32,
            max_inline_data: (usable - overhead - 4) as u32,
        })
    }

    /// Ring size in WQEBBs: also the length the caller's [`SendSlot`] table
    /// must have.
    pub const fn wqebbs(&self) -> usize {
        1 << self.log_wqebbs
    }

    /// Ring size in bytes.
    pub const fn bytes(&self) -> usize {
        self.wqebbs() * WQEBB
    }
}

/// The send ring: WQE buffer, geometry, counters and the doorbell target.
pub struct SendRing<H: Hal> {
    /// The WQE buffer with its WQEBBs laid out in it, checked once: the
    /// first block of a WQE (control, remote address, first data units)
    /// is one window, with no check.
    buf: RingRegion<H, WQEBB>,
    /// Offset of WQEBB 0 in `buf` (aligned to the firmware page size).
    base: usize,
    geo: SqGeometry,
    /// Gather entries a work request may carry: the geometry's
    /// `max_send_sge` unless lowered by [`SendRing::limit_sges`].
    max_sge: u32,
    qpn: u32,
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
    datagram: bool,
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
        let buf = RingRegion::new(buf, base, geo.log_wqebbs, WQEBB.trailing_zeros() as u8)
            .ok_or(HalError::InvalidRequest)?;
        Ok((
            SendRing {
                buf,
                base,
                geo,
                max_sge: geo.max_send_sge,
                qpn: 0,
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
            },
            pages,
            rq_base,
        ))
    }

    /// Record the QP number (it goes into every control segment).
    pub fn set_qpn(&mut self, qpn: u32) {
        self.qpn = qpn & 0x00ff_ffff;
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

    /// A UD ring: every WQE carries a datagram segment. A datagram request
    /// on a connected ring is refused here; a connected request on a UD
    /// ring is refused by [`crate::Hca::post_send`] and never made by the
    /// facade (the ring itself does not check it, to keep the connected
    /// path as it was).
    pub fn set_datagram(&mut self, on: bool) {
        self.datagram = on;
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
    #[inline(always)]
    pub fn write<R: SendWork + ?Sized>(
        &mut self,
        slots: &mut [SendSlot],
        r: &R,
    ) -> Result<u64, SendError> {
        if self.head.wrapping_sub(self.tail) >= self.geo.max_send_wr {
            return Err(SendError::Full);
        }
        let dgram = r.datagram();
        let wqebbs = self.geo.wqebbs();
        let idx = self.cur_post as usize & (wqebbs - 1);
        let ring_units = wqebbs * (WQEBB / UNIT);
        // The opcode alone decides the layout. Segments after the control
        // segment: [raddr], [atomic], data or inline. The first WQEBB holds
        // four units, so everything before the data lies inside it and
        // never wraps.
        let opcode = r.opcode();
        let raddr = opcode.has_raddr();
        let atomic = opcode.is_atomic();
        // UD: ctrl, then the 48-byte datagram segment filling the rest of
        // the first WQEBB; SENDs only (Linux `handle_qpt_ud`). A request
        // of the other transport is refused.
        if dgram.is_some() && (!self.datagram || raddr) {
            return Err(SendError::WrongTransport);
        }
        let imm = if opcode.has_imm() { r.imm() } else { 0 };
        let mut ds = 1 + raddr as usize + atomic as usize;
        let mut data_unit = idx * (WQEBB / UNIT) + ds;
        if dgram.is_some() {
            ds += 3;
            // The data starts at the next WQEBB, the ring's first after
            // its last.
            data_unit = (data_unit + 3) & (ring_units - 1);
        }
        let mut atomic_buf = (0, 0);
        match r.payload() {
            Payload::Sges(sges) if atomic => {
                // rdma-core checks `num_sge` against `sq.max_gs` before
                // the opcode.
                if sges.len() > self.max_sge as usize {
                    return Err(SendError::TooManySges {
                        given: sges.len(),
                        max: self.max_sge,
                    });
                }
                if !self.atomics {
                    return Err(SendError::AtomicsUnsupported);
                }
                // One local buffer; the device writes 8 bytes into it
                // (rdma-core `set_data_ptr_seg_atomic`: byte count 8).
                let [sge] = sges else {
                    return Err(SendError::BadAtomicBuffer);
                };
                if sge.length < 8 {
                    return Err(SendError::BadAtomicBuffer);
                }
                atomic_buf = (sge.lkey, sge.addr);
                ds += 1;
            }
            Payload::Sges(sges) => {
                if sges.len() > self.max_sge as usize {
                    return Err(SendError::TooManySges {
                        given: sges.len(),
                        max: self.max_sge,
                    });
                }
                // One bounds check per contiguous part: up to the ring end,
                // then (only when the list wraps) from its start.
                let n = sges.len();
                let first = n.min(ring_units - data_unit);
                let head = self
                    .buf
                    .windows::<UNIT>(self.base + data_unit * UNIT, first);
                ds += if first == n {
                    write_sges(head, sges)
                } else {
                    write_sges(
                        head.chain(self.buf.windows::<UNIT>(self.base, n - first)),
                        sges,
                    )
                };
            }
            Payload::Inline(_) if opcode.reads_remote() => {
                return Err(SendError::InlineNotAllowed);
            }
            Payload::Inline(data) => {
                if data.len() > self.geo.max_inline_data as usize {
                    return Err(SendError::InlineTooLarge {
                        len: data.len(),
                        max: self.geo.max_inline_data,
                    });
                }
                if !data.is_empty() {
                    self.inline_head = self.head;
                    let hdr = self.base + data_unit * UNIT;
                    self.buf
                        .write_be32(hdr, data.len() as u32 | wqe::INLINE_SEG);
                    let at = data_unit * UNIT + 4;
                    let first = data.len().min(ring_units * UNIT - at);
                    self.buf.write_bytes(self.base + at, &data[..first]);
                    if first < data.len() {
                        self.buf.write_bytes(self.base, &data[first..]);
                    }
                    ds += (4 + data.len()).div_ceil(UNIT);
                }
            }
        }
        let ctrl = self.buf.entry(idx as u32);
        if raddr {
            // Linux `set_raddr_seg`.
            let (addr, rkey) = r.remote();
            ctrl.write_be64::<UNIT>(addr);
            ctrl.write_be64::<{ UNIT + 8 }>((rkey as u64) << 32);
        }
        if atomic {
            // Linux `set_atomic_seg`: swap (or the addend), then compare.
            let (swap_add, compare) = r.atomic();
            ctrl.write_be64::<{ 2 * UNIT }>(swap_add);
            ctrl.write_be64::<{ 2 * UNIT + 8 }>(compare);
            // The one data segment, unit 3 of the first WQEBB.
            let (lkey, addr) = atomic_buf;
            ctrl.write_be64::<{ 3 * UNIT }>((8u64 << 32) | lkey as u64);
            ctrl.write_be64::<{ 3 * UNIT + 8 }>(addr);
        }
        if let Some(d) = dgram {
            // Linux `set_datagram_seg`: the WQE's own copy of the address.
            let w = d.av.words(d.remote_qpn, d.remote_qkey);
            ctrl.write_be64::<UNIT>(w[0]);
            ctrl.write_be64::<{ UNIT + 8 }>(w[1]);
            ctrl.write_be64::<{ 2 * UNIT }>(w[2]);
            ctrl.write_be64::<{ 2 * UNIT + 8 }>(w[3]);
            ctrl.write_be64::<{ 3 * UNIT }>(w[4]);
            ctrl.write_be64::<{ 3 * UNIT + 8 }>(w[5]);
        }
        let signaled = r.signaled();
        let fm_ce_se = if signaled { wqe::CTRL_CQ_UPDATE } else { 0 }
            | if r.solicited() {
                wqe::CTRL_SOLICITED
            } else {
                0
            }
            // rdma-core's `MLX5_WQE_CTRL_FENCE` (fence mode 4).
            | if r.fence() {
                wqe::FENCE_MODE_SMALL_AND_FENCE
            } else {
                0
            };
        let word0 = mlx5_regs::doorbell::qp_send_doorbell(
            wqe::opmod_idx_opcode(0, self.cur_post, opcode as u8),
            wqe::qpn_ds(self.qpn, ds as u8),
        );
        ctrl.write_be64::<0>(word0);
        ctrl.write_be64::<8>(((fm_ce_se as u64) << 32) | imm as u64);
        slots[idx] = SendSlot {
            wr_id: r.wr_id(),
            seq: self.head,
            index: self.cur_post,
            opcode: opcode as u8,
            signaled,
        };
        self.cur_post = self
            .cur_post
            .wrapping_add((ds * UNIT).div_ceil(WQEBB) as u16);
        self.head = self.head.wrapping_add(1);
        Ok(word0)
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
        for i in 0..bbs {
            let bb = self.buf.entry(index.wrapping_add(i as u16) as u32);
            // The doorbell word as built, not read back: the same bytes.
            hal.mmio_write64(at, if i == 0 { ctrl } else { bb.read_be64::<0>() });
            hal.mmio_write64(at + 8, bb.read_be64::<8>());
            hal.mmio_write64(at + 16, bb.read_be64::<16>());
            hal.mmio_write64(at + 24, bb.read_be64::<24>());
            hal.mmio_write64(at + 32, bb.read_be64::<32>());
            hal.mmio_write64(at + 40, bb.read_be64::<40>());
            hal.mmio_write64(at + 48, bb.read_be64::<48>());
            hal.mmio_write64(at + 56, bb.read_be64::<56>());
            at += WQEBB;
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
        let idx = wqe_counter as usize & (self.geo.wqebbs() - 1);
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

/// Write the non-empty entries of `sges` as data segments into `segs`
/// (one window per entry, checked by the caller); returns how many were
/// written. Zero-length entries are skipped, as Linux and rdma-core do.
#[inline(always)]
fn write_sges<'a>(mut segs: impl Iterator<Item = DmaWindow<'a, UNIT>>, sges: &[Sge]) -> usize {
    let mut ds = 0;
    for sge in sges.iter().filter(|s| s.length != 0) {
        let Some(d) = segs.next() else {
            unreachable!("one window per gather entry")
        };
        d.write_be32::<0>(sge.length);
        d.write_be32::<4>(sge.lkey);
        d.write_be64::<8>(sge.addr);
        ds += 1;
    }
    ds
}
