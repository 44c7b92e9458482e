//! A verbs-compatible facade (issue 6): the libibverbs operations, size
//! rounding, error values and event rules, in idiomatic Rust, on top of the
//! driver's CQ and SRQ objects.
//!
//! Thin: it checks arguments the way libibverbs + mlx5 do, keeps the verbs
//! bookkeeping (handles, event counts, the SRQ table that turns a CQE's
//! `srqn` into a `wr_id`) and calls the driver for the work. No heap: a
//! [`Verbs`] context owns the [`Hca`] and fixed-capacity tables of CQs and
//! SRQs (const generics). Errors are [`Errno`] values. The table from each
//! `ibv_*` call to the methods here, with every deviation, is
//! `docs/verbs.md`.
//!
//! Single-threaded and polled: there is no completion channel file
//! descriptor; [`Verbs::get_cq_event`] and [`Verbs::get_async_event`] poll
//! the event queues and return `EAGAIN` when nothing is there (libibverbs
//! with a non-blocking channel). Where libibverbs would block forever in a
//! destroy (events read but not acknowledged), the destroy is refused with
//! `EBUSY` and nothing changes, so the caller can acknowledge and retry.
//!
//! ```no_run
//! # fn demo<H: mlx5_hal::Hal>(hca: mlx5_driver::Hca<H>) -> Result<(), mlx5_driver::verbs::Errno> {
//! use mlx5_driver::verbs::{Verbs, WorkCompletion};
//! let mut ctx: Verbs<H> = Verbs::open(hca);
//! let (cq, cqe) = ctx.create_cq(100)?;
//! assert_eq!(cqe, 127);
//! ctx.req_notify_cq(cq, false)?;
//! let mut wc = [WorkCompletion::EMPTY; 16];
//! let n = ctx.poll_cq(cq, &mut wc)?;
//! # let _ = n;
//! ctx.destroy_cq(cq)?;
//! ctx.close()?;
//! # Ok(()) }
//! ```

mod errno;
mod in_place;
mod table;
mod types;

pub use errno::Errno;
pub use types::{
    AsyncEvent, AsyncEventType, CqHandle, DeviceAttr, EventElement, SrqAttr, SrqAttrMask,
    SrqHandle, SrqInitAttr, WcOpcode, WcStatus, WorkCompletion,
};

/// `ibv_recv_wr`: the caller's id and its scatter list.
pub use crate::srq::RecvRequest as RecvWr;
/// `ibv_sge`.
pub use crate::srq::Sge;

use core::fmt;

use mlx5_hal::Hal;
use mlx5_regs::CqeOpcode;

use crate::cq::{Cq, CqOptions, Cqe, CqeStatus};
use crate::eq::Event;
use crate::hca::{Hca, TeardownReport};
use crate::srq::{LimitArm, PostError, Srq};
use crate::stats::CmdObserver;
use table::Table;

/// A `post_srq_recv` that stopped: `index` is the first request not posted
/// (libibverbs' `bad_wr`); the ones before it are posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostSrqError {
    /// Index of the failed request in the list.
    pub index: usize,
    /// `ENOMEM` (full), `EINVAL` (too many scatter entries, stale handle),
    /// `EIO` (SRQ in error).
    pub errno: Errno,
}

impl core::error::Error for PostSrqError {}

impl fmt::Display for PostSrqError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "post_srq_recv: request {} failed: {}",
            self.index, self.errno
        )
    }
}

/// Things the facade met that a trusted device would not produce, counted
/// instead of panicking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VerbsStats {
    /// CQEs that named an unknown SRQ, a WQE never posted, or an opcode the
    /// facade cannot report; each became a `GeneralErr` completion with
    /// [`WorkCompletion::VENDOR_ERR_UNMATCHED`].
    pub unmatched_cqes: u64,
    /// Events naming an object this context does not have (destroyed, or a
    /// QP event without QPs), dropped.
    pub unroutable_events: u64,
    /// Events lost because an event queue (the driver's or the facade's)
    /// was full.
    pub events_lost: u64,
}

/// Verbs bookkeeping of a CQ (copyable so a failed destroy can restore it).
#[derive(Debug, Clone, Copy, Default)]
struct CqBook {
    /// SRQs created with this CQ (`usecnt`).
    srq_users: u32,
    /// Completion events taken from the EQ, not yet read.
    events_pending: u32,
    /// Order of the oldest pending event among all CQs.
    pending_seq: u64,
    /// Completion events read with `get_cq_event` (`comp_events_reported`).
    events_reported: u32,
    /// Completion events acknowledged (`comp_events_completed`).
    events_acked: u32,
    /// Async events read / acknowledged.
    async_reported: u32,
    async_acked: u32,
}

struct CqEntry<H: Hal> {
    cq: Cq<H>,
    book: CqBook,
}

#[derive(Debug, Clone, Copy, Default)]
struct SrqBook {
    /// The CQ given at creation.
    cq: Option<CqHandle>,
    /// SRQ_ERR seen: posts fail with EIO.
    error: bool,
    async_reported: u32,
    async_acked: u32,
}

struct SrqEntry<H: Hal> {
    srq: Srq<H>,
    book: SrqBook,
}

/// A verbs context: the device (an [`Hca`]) with up to `CQS` CQs, `SRQS`
/// SRQs and `EVENTS` unread async events. Every method takes `&mut self`:
/// one caller at a time, no locks.
pub struct Verbs<
    H: Hal,
    O: CmdObserver = (),
    const CQS: usize = 32,
    const SRQS: usize = 32,
    const EVENTS: usize = 64,
> {
    hca: Hca<H, O>,
    cqs: Table<CqEntry<H>, CQS>,
    srqs: Table<SrqEntry<H>, SRQS>,
    /// The CQ an ISSI-0 SRQ context names when the caller gave none
    /// (Linux's `devr->c0`); created on first need, destroyed by `close`.
    internal_cq: Option<Cq<H>>,
    async_q: heapless::Deque<AsyncEvent, EVENTS>,
    next_seq: u64,
    fatal_reported: bool,
    /// Port/device/QP events read and acknowledged.
    other_reported: u64,
    other_acked: u64,
    stats: VerbsStats,
}

impl<H: Hal, O: CmdObserver, const CQS: usize, const SRQS: usize, const EVENTS: usize>
    Verbs<H, O, CQS, SRQS, EVENTS>
{
    // ------------------------------------------------------------ context

    /// Open a context on a device that is up (`ibv_open_device`).
    pub fn open(hca: Hca<H, O>) -> Self {
        Verbs {
            hca,
            cqs: Table::new(),
            srqs: Table::new(),
            internal_cq: None,
            async_q: heapless::Deque::new(),
            next_seq: 0,
            fatal_reported: false,
            other_reported: 0,
            other_acked: 0,
            stats: VerbsStats::default(),
        }
    }

    /// Destroy every SRQ and CQ left (SRQs first, then CQs, then the
    /// internal CQ), whatever their events, and tear the device down
    /// (`ibv_close_device` + device removal). Every step is attempted; the
    /// first error is returned.
    pub fn close(mut self) -> Result<TeardownReport, Errno> {
        self.close_in_place()
    }

    /// [`Verbs::close`] without moving the context (one built in place,
    /// [`Verbs::new_down`]): the same steps; the context stays where it is,
    /// empty and down.
    pub fn close_in_place(&mut self) -> Result<TeardownReport, Errno> {
        let Verbs {
            hca,
            cqs,
            srqs,
            internal_cq,
            ..
        } = self;
        let mut first: Option<Errno> = None;
        while let Some(k) = srqs.any_key() {
            let Some(e) = srqs.remove(k) else { break };
            let cq = match (e.srq.cqn().is_some(), e.book.cq) {
                (false, _) => None,
                (true, Some(h)) => cqs.get_mut(h.0).map(|c| &mut c.cq),
                (true, None) => internal_cq.as_mut(),
            };
            // A failed destroy leaks the object (DestroyError): firmware may
            // still use its memory until teardown.
            if let Err(err) = hca.destroy_srq(e.srq, cq) {
                first.get_or_insert(err.error().into());
            }
            if let Some(c) = e.book.cq.and_then(|h| cqs.get_mut(h.0)) {
                c.book.srq_users = c.book.srq_users.saturating_sub(1);
            }
        }
        while let Some(k) = cqs.any_key() {
            let Some(e) = cqs.remove(k) else { break };
            if let Err(err) = hca.destroy_cq(e.cq) {
                first.get_or_insert(err.error().into());
            }
        }
        if let Some(cq) = internal_cq.take() {
            if let Err(err) = hca.destroy_cq(cq) {
                first.get_or_insert(err.error().into());
            }
        }
        let r = hca.teardown_in_place().map_err(Errno::from);
        match first {
            Some(e) => Err(e),
            None => r,
        }
    }

    /// The device underneath (read-only escape hatch: objects created
    /// through it directly are not this context's and must be destroyed by
    /// the caller before [`Verbs::close`]).
    pub fn hca(&self) -> &Hca<H, O> {
        &self.hca
    }

    /// Counters of what an untrusted device did.
    pub fn stats(&self) -> VerbsStats {
        self.stats
    }

    /// `ibv_query_device`: the attributes as mlx5 derives them from the
    /// capabilities (docs/firmware.md §7.2, §9.5).
    pub fn query_device(&self) -> DeviceAttr {
        let caps = self.hca.caps();
        let fw = self.hca.fw_version();
        DeviceAttr {
            max_cqe: caps.max_cqe(),
            max_cq: caps.max_cq(),
            max_srq: caps.max_srq(),
            max_srq_wr: caps.max_srq_wr(),
            max_srq_sge: caps.max_srq_sge.saturating_sub(1),
            device_cap_flags: DeviceAttr::PORT_ACTIVE_EVENT,
            phys_port_cnt: caps.num_ports,
            fw_ver: (fw.major, fw.minor, fw.subminor),
        }
    }

    // ------------------------------------------------------------ CQs

    /// `ibv_create_cq`: a CQ of at least `cqe` entries (1..=`max_cqe`, else
    /// `EINVAL`). Returns the handle and the actual number of entries,
    /// `2^k − 1` (mlx5 rounds `cqe + 1` up to a power of two). `ENOMEM` when
    /// the table or DMA memory is exhausted.
    pub fn create_cq(&mut self, cqe: u32) -> Result<(CqHandle, u32), Errno> {
        if cqe == 0 || cqe > self.hca.caps().max_cqe() {
            return Err(Errno::EINVAL);
        }
        if self.cqs.len() >= CQS {
            return Err(Errno::ENOMEM);
        }
        let cq = self.hca.create_cq(cqe, CqOptions::default())?;
        let n = cq.capacity();
        let entry = CqEntry {
            cq,
            book: CqBook::default(),
        };
        match self.cqs.insert(entry) {
            Ok(k) => Ok((CqHandle(k), n)),
            Err(entry) => {
                // Not reached (checked above); undo rather than leak.
                let _ = self.hca.destroy_cq(entry.cq);
                Err(Errno::ENOMEM)
            }
        }
    }

    /// The CQ's current number of entries (`cq->cqe`).
    pub fn cqe(&self, cq: CqHandle) -> Result<u32, Errno> {
        Ok(self.cq_entry(cq)?.cq.capacity())
    }

    /// The CQ number firmware assigned.
    pub fn cq_num(&self, cq: CqHandle) -> Result<u32, Errno> {
        Ok(self.cq_entry(cq)?.cq.cqn())
    }

    /// `ibv_resize_cq` (docs/firmware.md §8): at least `cqe` entries; returns the
    /// actual number. Unpolled completions are kept in order; an armed CQ
    /// stays armed. A size that rounds to the current one succeeds without a
    /// command. `EINVAL`: `cqe` outside 1..=`max_cqe`, or fewer entries than
    /// the completions now in the CQ (firmware status 0x40). `ENOMEM`: no
    /// memory for the new ring. `ENOSYS`: no `cq_resize` capability. After a
    /// failure the CQ is exactly as it was.
    pub fn resize_cq(&mut self, cq: CqHandle, cqe: u32) -> Result<u32, Errno> {
        if cqe == 0 || cqe > self.hca.caps().max_cqe() {
            return Err(Errno::EINVAL);
        }
        let e = self.cqs.get_mut(cq.0).ok_or(Errno::EINVAL)?;
        let current = e.cq.capacity();
        if (cqe as u64 + 1).next_power_of_two() == current as u64 + 1 {
            return Ok(current);
        }
        self.hca.resize_cq(&mut e.cq, cqe)?;
        Ok(e.cq.capacity())
    }

    /// `ibv_destroy_cq`. Unpolled completions and a pending arm do not
    /// prevent it. `EBUSY`, nothing changed, the CQ keeps working: an SRQ
    /// was created with this CQ; or a completion event or async event of it
    /// was read and not acknowledged (libibverbs would block forever here).
    /// Unread events of the CQ are discarded with it.
    pub fn destroy_cq(&mut self, cq: CqHandle) -> Result<(), Errno> {
        let b = self.cq_entry(cq)?.book;
        if b.srq_users > 0
            || b.events_reported != b.events_acked
            || b.async_reported != b.async_acked
        {
            return Err(Errno::EBUSY);
        }
        let e = self.cqs.take(cq.0).ok_or(Errno::EINVAL)?;
        match self.hca.destroy_cq(e.cq) {
            Ok(()) => {
                self.cqs.retire(cq.0);
                self.purge_events(EventElement::Cq(cq));
                Ok(())
            }
            Err(failed) => {
                let (back, err) = failed.into_parts();
                self.cqs.restore(
                    cq.0,
                    CqEntry {
                        cq: back,
                        book: e.book,
                    },
                );
                Err(err.into())
            }
        }
    }

    /// `ibv_req_notify_cq`: one completion event for the next completion
    /// (`solicited_only`: the next solicited or error completion), through
    /// [`Hca::arm_cq`], which keeps the arm sequence number in step with the
    /// CQ's events (libmlx5's `mlx5_cq_event` bookkeeping, done by the
    /// driver). Pending events are routed to their CQs first.
    pub fn req_notify_cq(&mut self, cq: CqHandle, solicited_only: bool) -> Result<(), Errno> {
        self.cq_entry(cq)?;
        self.pump()?;
        let e = self.cqs.get_mut(cq.0).ok_or(Errno::EINVAL)?;
        self.hca.arm_cq(&mut e.cq, solicited_only)?;
        Ok(())
    }

    /// `ibv_get_cq_event` on a non-blocking channel: the CQ of the next
    /// completion event, or `EAGAIN`. Each event read must be acknowledged
    /// with [`Verbs::ack_cq_events`] before the CQ can be destroyed.
    pub fn get_cq_event(&mut self) -> Result<CqHandle, Errno> {
        let polled = self.pump();
        let best = self
            .cqs
            .iter_mut()
            .filter(|(_, e)| e.book.events_pending > 0)
            .min_by_key(|(_, e)| e.book.pending_seq)
            .map(|(k, _)| k);
        let Some(k) = best else {
            polled?;
            return Err(Errno::EAGAIN);
        };
        let seq = self.take_seq();
        let e = self.cqs.get_mut(k).ok_or(Errno::EINVAL)?;
        e.book.events_pending -= 1;
        e.book.pending_seq = seq;
        e.book.events_reported = e.book.events_reported.wrapping_add(1);
        Ok(CqHandle(k))
    }

    /// `ibv_ack_cq_events`: acknowledge `n` events of `cq` (they may be
    /// acknowledged in one call). Acknowledging more than were read is
    /// `EINVAL` and changes nothing (libibverbs returns nothing and its
    /// destroy would then hang).
    pub fn ack_cq_events(&mut self, cq: CqHandle, n: u32) -> Result<(), Errno> {
        let e = self.cqs.get_mut(cq.0).ok_or(Errno::EINVAL)?;
        let unacked = e.book.events_reported.wrapping_sub(e.book.events_acked);
        if n > unacked {
            return Err(Errno::EINVAL);
        }
        e.book.events_acked = e.book.events_acked.wrapping_add(n);
        Ok(())
    }

    /// `ibv_poll_cq`: up to `wc.len()` completions, oldest first; returns
    /// how many. A receive completion's `wr_id` comes from the SRQ its CQE
    /// names, and that SRQ slot is free again from here on. A CQE naming an
    /// unknown SRQ or a WQE that was never posted becomes a `GeneralErr`
    /// completion with [`WorkCompletion::VENDOR_ERR_UNMATCHED`] and is
    /// counted in [`VerbsStats::unmatched_cqes`].
    pub fn poll_cq(&mut self, cq: CqHandle, wc: &mut [WorkCompletion]) -> Result<usize, Errno> {
        const CHUNK: usize = 16;
        let e = self.cqs.get_mut(cq.0).ok_or(Errno::EINVAL)?;
        let mut buf = [Cqe::EMPTY; CHUNK];
        let mut n = 0;
        while n < wc.len() {
            let want = (wc.len() - n).min(CHUNK);
            let got = e.cq.poll(&mut buf[..want]);
            for c in &buf[..got] {
                wc[n] = translate(c, &mut self.srqs, &mut self.stats);
                n += 1;
            }
            if got < want {
                break;
            }
        }
        Ok(n)
    }

    // ------------------------------------------------------------ SRQs

    /// `ibv_create_srq`: `max_wr` in 1..=`max_srq_wr`, `max_sge` up to
    /// `max_srq_sge`, else `EINVAL`. Returns the handle and the actual
    /// attributes after rounding; the limit is not armed (`srq_limit` reads
    /// 0). An RMP at ISSI 1; at ISSI 0 an SRQ whose context names
    /// `attr.cq` or the internal CQ.
    pub fn create_srq(&mut self, attr: &SrqInitAttr) -> Result<(SrqHandle, SrqAttr), Errno> {
        let dev = self.query_device();
        if attr.max_wr == 0 || attr.max_wr > dev.max_srq_wr || attr.max_sge > dev.max_srq_sge {
            return Err(Errno::EINVAL);
        }
        if let Some(h) = attr.cq {
            self.cq_entry(h)?;
        }
        if self.srqs.len() >= SRQS {
            return Err(Errno::ENOMEM);
        }
        let srq = if self.hca.issi() == 0 {
            let cq = match attr.cq {
                Some(h) => &mut self.cqs.get_mut(h.0).ok_or(Errno::EINVAL)?.cq,
                None => {
                    if self.internal_cq.is_none() {
                        self.internal_cq = Some(self.hca.create_cq(1, CqOptions::default())?);
                    }
                    self.internal_cq.as_mut().ok_or(Errno::EINVAL)?
                }
            };
            self.hca.create_srq(attr.max_wr, attr.max_sge, Some(cq))?
        } else {
            self.hca.create_srq(attr.max_wr, attr.max_sge, None)?
        };
        let out = SrqAttr {
            max_wr: srq.max_wr() as u32,
            max_sge: srq.max_sge() as u32,
            srq_limit: 0,
        };
        let entry = SrqEntry {
            srq,
            book: SrqBook {
                cq: attr.cq,
                ..SrqBook::default()
            },
        };
        match self.srqs.insert(entry) {
            Ok(k) => {
                if let Some(c) = attr.cq.and_then(|h| self.cqs.get_mut(h.0)) {
                    c.book.srq_users += 1;
                }
                Ok((SrqHandle(k), out))
            }
            Err(entry) => {
                // Not reached (checked above); undo rather than leak.
                let cq = match (entry.srq.cqn().is_some(), attr.cq) {
                    (false, _) => None,
                    (true, Some(h)) => self.cqs.get_mut(h.0).map(|c| &mut c.cq),
                    (true, None) => self.internal_cq.as_mut(),
                };
                let _ = self.hca.destroy_srq(entry.srq, cq);
                Err(Errno::ENOMEM)
            }
        }
    }

    /// The SRQ number (`ibv_get_srq_num`); receive CQEs carry it.
    pub fn srq_num(&self, srq: SrqHandle) -> Result<u32, Errno> {
        Ok(self.srq_entry(srq)?.srq.srqn())
    }

    /// The driver's SRQ object (read-only: geometry, ring, counters).
    pub fn srq(&self, srq: SrqHandle) -> Result<&Srq<H>, Errno> {
        Ok(&self.srq_entry(srq)?.srq)
    }

    /// `ibv_modify_srq` (docs/firmware.md §9.5, §9.6). [`SrqAttrMask::LIMIT`] arms the
    /// limit event with `attr.srq_limit` (0 disarms; a new value replaces
    /// the old; above the SRQ's `max_wr`: `EINVAL`). If the limit is above
    /// the work requests outstanding the event is delivered at once.
    /// [`SrqAttrMask::MAX_WR`] is refused with `EINVAL` as on mlx5, and a
    /// mask holding it (or an unknown bit) is refused as a whole: on any
    /// failure the SRQ is unchanged.
    pub fn modify_srq(
        &mut self,
        srq: SrqHandle,
        attr: &SrqAttr,
        mask: SrqAttrMask,
    ) -> Result<(), Errno> {
        let e = self.srqs.get_mut(srq.0).ok_or(Errno::EINVAL)?;
        let known = SrqAttrMask::MAX_WR | SrqAttrMask::LIMIT;
        if mask.0 & !known.0 != 0 || mask.contains(SrqAttrMask::MAX_WR) {
            return Err(Errno::EINVAL);
        }
        if !mask.contains(SrqAttrMask::LIMIT) {
            return Ok(());
        }
        if attr.srq_limit as usize > e.srq.max_wr() {
            return Err(Errno::EINVAL);
        }
        if self.hca.arm_srq_limit(&mut e.srq, attr.srq_limit)? == LimitArm::RaiseNow {
            // Firmware did not fire although the limit is above what is
            // outstanding; the driver disarmed it, the event is ours to give.
            self.push_event(AsyncEvent {
                event_type: AsyncEventType::SrqLimitReached,
                element: EventElement::Srq(srq),
            });
        }
        Ok(())
    }

    /// `ibv_query_srq`: the actual `max_wr` and `max_sge`, and the limit as
    /// firmware holds it (0 when disarmed or after the limit event).
    pub fn query_srq(&self, srq: SrqHandle) -> Result<SrqAttr, Errno> {
        let e = self.srq_entry(srq)?;
        let state = self.hca.query_srq(&e.srq)?;
        Ok(SrqAttr {
            max_wr: e.srq.max_wr() as u32,
            max_sge: e.srq.max_sge() as u32,
            srq_limit: state.lwm as u32,
        })
    }

    /// `ibv_post_srq_recv`: post the list in order. On the first failure
    /// (`ENOMEM` full, `EINVAL` too many scatter entries, `EIO` SRQ in
    /// error) the error names the request; the ones before it stay posted.
    /// A slot is free again only once its completion was polled.
    pub fn post_srq_recv(
        &mut self,
        srq: SrqHandle,
        wrs: &[RecvWr<'_>],
    ) -> Result<(), PostSrqError> {
        let fail = |index, errno| PostSrqError { index, errno };
        let e = self.srqs.get_mut(srq.0).ok_or(fail(0, Errno::EINVAL))?;
        if e.book.error {
            return Err(fail(0, Errno::EIO));
        }
        e.srq.post(wrs).map_err(|f| {
            fail(
                f.index,
                match f.error {
                    PostError::Full => Errno::ENOMEM,
                    PostError::TooManySges { .. } => Errno::EINVAL,
                },
            )
        })
    }

    /// `ibv_destroy_srq`. `EBUSY`, nothing changed: an async event of the
    /// SRQ was read and not acknowledged (libibverbs would block forever).
    /// Unread events of the SRQ are discarded. Completions of this SRQ
    /// still in a CQ are reported as unmatched afterwards.
    pub fn destroy_srq(&mut self, srq: SrqHandle) -> Result<(), Errno> {
        let b = self.srq_entry(srq)?.book;
        if b.async_reported != b.async_acked {
            return Err(Errno::EBUSY);
        }
        let e = self.srqs.take(srq.0).ok_or(Errno::EINVAL)?;
        let cq = match (e.srq.cqn().is_some(), b.cq) {
            (false, _) => None,
            (true, Some(h)) => self.cqs.get_mut(h.0).map(|c| &mut c.cq),
            (true, None) => self.internal_cq.as_mut(),
        };
        match self.hca.destroy_srq(e.srq, cq) {
            Ok(()) => {
                self.srqs.retire(srq.0);
                if let Some(c) = b.cq.and_then(|h| self.cqs.get_mut(h.0)) {
                    c.book.srq_users = c.book.srq_users.saturating_sub(1);
                }
                self.purge_events(EventElement::Srq(srq));
                Ok(())
            }
            Err(failed) => {
                let (back, err) = failed.into_parts();
                self.srqs.restore(srq.0, SrqEntry { srq: back, book: b });
                Err(err.into())
            }
        }
    }

    // ------------------------------------------------------------ async events

    /// `ibv_get_async_event` without blocking: the next event, or `EAGAIN`.
    /// A dead device (health) is reported once as
    /// [`AsyncEventType::DeviceFatal`]. Every event read must be
    /// acknowledged with [`Verbs::ack_async_event`].
    pub fn get_async_event(&mut self) -> Result<AsyncEvent, Errno> {
        // Not a hot path: read the health buffer every time, so a dead
        // device is reported here at once (the data-path poll checks it
        // only every `poll_health_interval` calls).
        let health = self.hca.check_health();
        self.note_fatal_once(health.err());
        let polled = self.pump();
        let Some(ev) = self.async_q.pop_front() else {
            polled?;
            return Err(Errno::EAGAIN);
        };
        match ev.element {
            EventElement::Cq(h) => {
                if let Some(e) = self.cqs.get_mut(h.0) {
                    e.book.async_reported = e.book.async_reported.wrapping_add(1);
                }
            }
            EventElement::Srq(h) => {
                if let Some(e) = self.srqs.get_mut(h.0) {
                    e.book.async_reported = e.book.async_reported.wrapping_add(1);
                }
            }
            _ => self.other_reported += 1,
        }
        Ok(ev)
    }

    /// `ibv_ack_async_event`. Acknowledging more events of an object than
    /// were read is `EINVAL` (libibverbs does not check).
    pub fn ack_async_event(&mut self, ev: &AsyncEvent) -> Result<(), Errno> {
        fn ack(reported: u32, acked: &mut u32) -> Result<(), Errno> {
            if reported == *acked {
                return Err(Errno::EINVAL);
            }
            *acked = acked.wrapping_add(1);
            Ok(())
        }
        match ev.element {
            EventElement::Cq(h) => {
                let e = self.cqs.get_mut(h.0).ok_or(Errno::EINVAL)?;
                ack(e.book.async_reported, &mut e.book.async_acked)
            }
            EventElement::Srq(h) => {
                let e = self.srqs.get_mut(h.0).ok_or(Errno::EINVAL)?;
                ack(e.book.async_reported, &mut e.book.async_acked)
            }
            _ => {
                if self.other_acked == self.other_reported {
                    return Err(Errno::EINVAL);
                }
                self.other_acked += 1;
                Ok(())
            }
        }
    }

    // ------------------------------------------------------------ internals

    fn cq_entry(&self, cq: CqHandle) -> Result<&CqEntry<H>, Errno> {
        self.cqs.get(cq.0).ok_or(Errno::EINVAL)
    }

    fn srq_entry(&self, srq: SrqHandle) -> Result<&SrqEntry<H>, Errno> {
        self.srqs.get(srq.0).ok_or(Errno::EINVAL)
    }

    fn take_seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }

    /// Poll the EQs and route what they hold: completion events to their
    /// CQ's book (the driver already counted them for the arm sequence
    /// number), async events to the async queue. A dead device queues one
    /// `DeviceFatal` event.
    /// Queue the one `DeviceFatal` event the first time the device is
    /// found dead.
    fn note_fatal_once(&mut self, e: Option<crate::Error>) {
        if let Some(e) = e {
            if e.is_fatal() && !self.fatal_reported {
                self.fatal_reported = true;
                self.push_event(AsyncEvent {
                    event_type: AsyncEventType::DeviceFatal,
                    element: EventElement::Device,
                });
            }
        }
    }

    fn pump(&mut self) -> Result<(), Errno> {
        let r = self.hca.poll_events();
        self.note_fatal_once(r.as_ref().err().copied());
        while let Some(ev) = self.hca.next_completion() {
            match ev {
                Event::Completion { cqn } => self.route_completion(cqn),
                Event::EventsLost { count } => self.stats.events_lost += count,
                _ => self.stats.unroutable_events += 1,
            }
        }
        while let Some(ev) = self.hca.next_event() {
            self.route_async(ev);
        }
        r.map(|_| ()).map_err(Errno::from)
    }

    fn route_completion(&mut self, cqn: u32) {
        let seq = self.next_seq + 1;
        if let Some((_, e)) = self.cqs.find_mut(|e| e.cq.cqn() == cqn) {
            if e.book.events_pending == 0 {
                e.book.pending_seq = seq;
            }
            e.book.events_pending += 1;
            self.next_seq = seq;
        } else if self.internal_cq.as_ref().is_some_and(|c| c.cqn() == cqn) {
            // Never armed: an event for it changes nothing.
        } else {
            self.stats.unroutable_events += 1;
        }
    }

    fn route_async(&mut self, ev: Event) {
        use AsyncEventType as T;
        let cq = |s: &mut Self, cqn: u32| {
            s.cqs
                .find_mut(|e| e.cq.cqn() == cqn)
                .map(|(k, _)| EventElement::Cq(CqHandle(k)))
        };
        let srq = |s: &mut Self, srqn: u32, error: bool| {
            s.srqs.find_mut(|e| e.srq.srqn() == srqn).map(|(k, e)| {
                e.book.error |= error;
                EventElement::Srq(SrqHandle(k))
            })
        };
        let routed = match ev {
            Event::CqError { cqn, .. } => cq(self, cqn).map(|el| (T::CqErr, el)),
            Event::SrqLimit { srqn } => srq(self, srqn, false).map(|el| (T::SrqLimitReached, el)),
            Event::SrqCatastrophic { srqn } => srq(self, srqn, true).map(|el| (T::SrqErr, el)),
            Event::SrqLastWqe { srqn } => Some((T::QpLastWqeReached, EventElement::Qp(srqn))),
            Event::PortChange { port, subtype } => {
                let t = match subtype {
                    1 => Some(T::PortErr),
                    4 => Some(T::PortActive),
                    6 => Some(T::LidChange),
                    7 => Some(T::PkeyChange),
                    8 => Some(T::GidChange),
                    9 => Some(T::ClientReregister),
                    _ => None,
                };
                t.map(|t| (t, EventElement::Port(port)))
            }
            Event::InternalError => {
                if self.fatal_reported {
                    return;
                }
                self.fatal_reported = true;
                Some((T::DeviceFatal, EventElement::Device))
            }
            Event::EventsLost { count } => {
                self.stats.events_lost += count;
                return;
            }
            _ => None,
        };
        match routed {
            Some((event_type, element)) => self.push_event(AsyncEvent {
                event_type,
                element,
            }),
            None => self.stats.unroutable_events += 1,
        }
    }

    fn push_event(&mut self, ev: AsyncEvent) {
        if self.async_q.push_back(ev).is_err() {
            self.stats.events_lost += 1;
        }
    }

    /// Drop unread async events about a destroyed object.
    fn purge_events(&mut self, element: EventElement) {
        for _ in 0..self.async_q.len() {
            if let Some(ev) = self.async_q.pop_front() {
                if ev.element != element {
                    self.push_event(ev);
                }
            }
        }
    }
}

/// One CQE as a work completion; receives are matched to their SRQ slot,
/// which is freed.
fn translate<H: Hal, const SRQS: usize>(
    c: &Cqe,
    srqs: &mut Table<SrqEntry<H>, SRQS>,
    stats: &mut VerbsStats,
) -> WorkCompletion {
    let mut wc = WorkCompletion {
        qp_num: c.qpn,
        byte_len: c.byte_len,
        ..WorkCompletion::EMPTY
    };
    let (opcode, receive) = match c.opcode {
        CqeOpcode::REQ | CqeOpcode::REQ_ERR => (WcOpcode::Send, false),
        CqeOpcode::RESP_SEND | CqeOpcode::RESP_ERR => (WcOpcode::Recv, true),
        CqeOpcode::RESP_SEND_IMM => {
            wc.imm_data = Some(c.imm);
            (WcOpcode::Recv, true)
        }
        CqeOpcode::RESP_SEND_INV => {
            wc.invalidated_rkey = Some(c.imm);
            (WcOpcode::Recv, true)
        }
        CqeOpcode::RESP_WR_IMM => {
            wc.imm_data = Some(c.imm);
            (WcOpcode::RecvRdmaWithImm, true)
        }
        _ => return unmatched(wc, stats),
    };
    wc.opcode = opcode;
    if let CqeStatus::Error {
        syndrome,
        vendor_syndrome,
    } = c.status
    {
        wc.status = WcStatus::from_syndrome(syndrome);
        wc.vendor_err = vendor_syndrome as u32;
    }
    if !receive {
        wc.wr_id = c.wqe_counter as u64;
        return wc;
    }
    wc.srq_num = Some(c.srqn);
    let Some((_, e)) = srqs.find_mut(|e| e.srq.srqn() == c.srqn) else {
        return unmatched(wc, stats);
    };
    match e.srq.complete(c.wqe_counter) {
        Ok(wr_id) => {
            wc.wr_id = wr_id;
            wc
        }
        Err(_) => unmatched(wc, stats),
    }
}

fn unmatched(mut wc: WorkCompletion, stats: &mut VerbsStats) -> WorkCompletion {
    stats.unmatched_cqes += 1;
    wc.status = WcStatus::GeneralErr;
    wc.vendor_err = WorkCompletion::VENDOR_ERR_UNMATCHED;
    wc.wr_id = 0;
    wc
}

#[cfg(test)]
mod tests;
