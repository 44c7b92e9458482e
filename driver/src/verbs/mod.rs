//! A verbs-compatible facade: the libibverbs operations, size rounding,
//! error values and event rules, in idiomatic Rust, on top of the driver's
//! CQ, SRQ, QP and memory-key objects.
//!
//! Thin: it checks arguments the way libibverbs + mlx5 do, keeps the verbs
//! bookkeeping (handles, event counts, the maps that turn a CQE's QP or SRQ
//! number into a `wr_id`) and calls the driver for the work. No heap: a
//! [`Verbs`] context owns the [`Hca`] and fixed-capacity tables of CQs,
//! SRQs and QPs (const generics). Errors are [`Errno`] values. The table
//! from each `ibv_*` call to the methods here, with every deviation, is
//! `docs/verbs.md`.
//!
//! One caller at a time (`&mut self`). Completion channels are entries of
//! a fixed table ([`Verbs::create_comp_channel`]); [`Verbs::create_cq`]'s
//! CQs deliver to the context's own channel. Reading an event polls the
//! event queues: without a timeout it returns `EAGAIN` when nothing is
//! there (libibverbs with a non-blocking channel); with one
//! ([`Verbs::get_cq_event_on`], [`Verbs::get_async_event_timeout`]) it
//! sleeps in the platform's interrupt wait (or a bounded polling back-off
//! without interrupts) until an event comes or the time runs out. Where
//! libibverbs would block forever in a destroy (events read but not
//! acknowledged), the destroy is refused with `EBUSY` and nothing changes,
//! so the caller can acknowledge and retry.
//!
//! ```no_run
//! # fn demo<H: mlx5_hal::Hal>(hca: mlx5_driver::Hca<H>, buf: u64) -> Result<(), mlx5_driver::verbs::Errno> {
//! use mlx5_driver::verbs::*;
//! let mut ctx: Verbs<H> = Verbs::open(hca);
//! let (cq, cqe) = ctx.create_cq(100)?;
//! assert_eq!(cqe, 127);
//! let (srq, _) = ctx.create_srq(&SrqInitAttr { max_wr: 64, max_sge: 1, ..Default::default() })?;
//! let cap = QpCap { max_send_wr: 64, max_send_sge: 1, ..Default::default() };
//! let attr = QpInitAttr { send_cq: cq, recv_cq: cq, srq: Some(srq), cap, sq_sig_all: false };
//! let (a, _) = ctx.create_qp(&attr)?;
//! let (b, _) = ctx.create_qp(&attr)?;
//! // Force loopback, RoCE or InfiniBand: whatever the device offers.
//! ctx.connect_loopback(a, b)?;
//! let mr = ctx.reg_mr(buf, 4096, AccessFlags::LOCAL_WRITE)?;
//! let sge = [Sge { addr: buf, length: 64, lkey: mr.lkey() }];
//! ctx.post_srq_recv(srq, &[RecvWr { wr_id: 1, sges: &sge }]).map_err(|e| e.errno)?;
//! ctx.post_send(a, &[SendWr { wr_id: 2, sg_list: &sge, ..SendWr::EMPTY }])
//!     .map_err(|e| e.errno)?;
//! let mut wc = [WorkCompletion::EMPTY; 16];
//! let n = ctx.poll_cq(cq, &mut wc)?; // the send (wr_id 2) and the receive (1)
//! # let _ = n;
//! ctx.destroy_qp(a)?;
//! ctx.destroy_qp(b)?;
//! ctx.dereg_mr(mr).map_err(|(_, e)| e)?;
//! ctx.destroy_srq(srq)?;
//! ctx.destroy_cq(cq)?;
//! ctx.close()?;
//! # Ok(()) }
//! ```

mod channel;
mod cq;
mod cq_moderation;
mod errno;
mod events;
mod in_place;
mod loopback;
mod modify;
mod mr;
mod numap;
mod poll;
mod poll_ex;
mod port;
mod qp;
mod qp_recv;
#[cfg(test)]
mod qp_tests;
mod qp_types;
mod srq;
mod table;
mod types;
mod ud;

pub use crate::gid::{GidEntry, GidType};
pub use crate::port::{LinkLayer, PortAttr, PortState};
pub use channel::{ChannelHandle, CqEvent, CqInitAttrEx, MAX_COMP_CHANNELS};
pub use cq_moderation::{CqModerationCaps, ModerateCq, ModifyCqAttr};
pub use errno::Errno;
pub use mr::Mr;
pub use poll_ex::{CqPoll, WC_GRH, WC_WITH_IMM, WC_WITH_INV};
pub use port::GidTableEntry;
pub use qp_types::{
    AccessFlags, AhAttr, GlobalRoute, Mtu, PostSendError, QpAttr, QpAttrMask, QpCap, QpHandle,
    QpInitAttr, QpState, SendFlags, SendWr, WrOpcode,
};
pub use types::{
    AsyncEvent, AsyncEventDetail, AsyncEventType, AtomicCap, CqHandle, DeviceAttr, EventElement,
    SrqAttr, SrqAttrMask, SrqHandle, SrqInitAttr, WcOpcode, WcStatus, WorkCompletion,
};
pub use ud::{AhHandle, QpType, MAX_AHS};

/// `ibv_recv_wr`: the caller's id and its scatter list.
pub use crate::srq::RecvRequest as RecvWr;
/// `ibv_sge`.
pub use crate::srq::Sge;

use core::fmt;

use mlx5_hal::Hal;

use crate::cq::Cq;
use crate::eq::Event;
use crate::hca::{Hca, TeardownReport};
use crate::stats::CmdObserver;
use channel::ChannelEntry;
use cq::CqEntry;
use numap::NumMap;
use poll::QpRoute;
use qp::QpEntry;
use srq::SrqEntry;
use table::{Key, Table};

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

/// A `post_recv` that stopped: `index` is the first request not posted
/// (libibverbs' `bad_wr`); the ones before it are posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostRecvError {
    /// Index of the failed request in the list.
    pub index: usize,
    /// `ENOMEM` (full), `EINVAL` (too many scatter entries, a QP on an
    /// SRQ or without a receive queue, stale handle), `EIO` (device dead).
    pub errno: Errno,
}

impl core::error::Error for PostRecvError {}

impl fmt::Display for PostRecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "post_recv: request {} failed: {}",
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

/// A verbs context: the device (an [`Hca`]) with up to `CQS` CQs, `SRQS`
/// SRQs, `QPS` QPs and `EVENTS` unread async events. Each QP's send ring
/// may have up to `SQ_WQEBBS` basic blocks of 64 bytes: the context holds
/// a table of that many entries per QP (16 bytes each) that turns a send
/// completion back into its `wr_id`. Every method takes `&mut self`: one
/// caller at a time, no locks.
pub struct Verbs<
    H: Hal,
    O: CmdObserver = (),
    const CQS: usize = 32,
    const SRQS: usize = 32,
    const EVENTS: usize = 64,
    const QPS: usize = 16,
    const SQ_WQEBBS: usize = 256,
> {
    hca: Hca<H, O>,
    cqs: Table<CqEntry<H>, CQS>,
    srqs: Table<SrqEntry<H>, SRQS>,
    qps: Table<QpEntry<H, SQ_WQEBBS>, QPS>,
    /// Completion channels made with `create_comp_channel`.
    channels: Table<ChannelEntry, MAX_COMP_CHANNELS>,
    /// Address handles (`create_ah`).
    ahs: Table<ud::AhEntry, MAX_AHS>,
    /// QPN → QP (with its receive route), SRQN → SRQ: a CQE finds its
    /// object in O(1).
    qpns: NumMap<QpRoute, QPS>,
    srqns: NumMap<Key, SRQS>,
    /// The CQ an ISSI-0 SRQ context names when the caller gave none
    /// (Linux's `devr->c0`); created on first need, destroyed by `close`.
    internal_cq: Option<Cq<H>>,
    async_q: heapless::Deque<AsyncEvent, EVENTS>,
    next_seq: u64,
    fatal_reported: bool,
    /// The latest argument refusal of the facade's own checks, with the
    /// command failure that was latest then ([`Verbs::last_error`]).
    refusal: Option<(&'static str, Option<crate::stats::CmdFailure>)>,
    /// Port/device/QP events read and acknowledged.
    other_reported: u64,
    other_acked: u64,
    stats: VerbsStats,
}

impl<
        H: Hal,
        O: CmdObserver,
        const CQS: usize,
        const SRQS: usize,
        const EVENTS: usize,
        const QPS: usize,
        const SQ_WQEBBS: usize,
    > Verbs<H, O, CQS, SRQS, EVENTS, QPS, SQ_WQEBBS>
{
    // ------------------------------------------------------------ context

    /// Open a context on a device that is up (`ibv_open_device`).
    pub fn open(hca: Hca<H, O>) -> Self {
        Verbs {
            hca,
            cqs: Table::new(),
            srqs: Table::new(),
            qps: Table::new(),
            channels: Table::new(),
            ahs: Table::new(),
            qpns: NumMap::new(QpRoute::NONE),
            srqns: NumMap::new(Key::NONE),
            internal_cq: None,
            async_q: heapless::Deque::new(),
            next_seq: 0,
            fatal_reported: false,
            refusal: None,
            other_reported: 0,
            other_acked: 0,
            stats: VerbsStats::default(),
        }
    }

    /// Destroy every QP, SRQ and CQ left (QPs first, then SRQs, then CQs,
    /// then the internal CQ), whatever their events, and tear the device
    /// down (`ibv_close_device` + device removal). Every step is attempted;
    /// the first error is returned. Memory regions ([`Mr`]) not
    /// deregistered go with the device (TEARDOWN_HCA removes their keys).
    pub fn close(mut self) -> Result<TeardownReport, Errno> {
        self.close_in_place()
    }

    /// [`Verbs::close`] without moving the context (one built in place,
    /// [`Verbs::new_down`]): the same steps; the context stays where it is,
    /// empty and down.
    pub fn close_in_place(&mut self) -> Result<TeardownReport, Errno> {
        let mut first: Option<Errno> = None;
        while let Some(k) = self.qps.any_key() {
            if let Err(e) = self.destroy_qp_now(QpHandle(k)) {
                first.get_or_insert(e);
                // Gone from the table either way: go on with the others.
                self.qps.remove(k);
            }
        }
        let Verbs {
            hca,
            cqs,
            srqs,
            internal_cq,
            channels,
            ..
        } = self;
        while let Some(k) = channels.any_key() {
            channels.remove(k);
        }
        while let Some(k) = self.ahs.any_key() {
            self.ahs.remove(k);
        }
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

    /// Refuse an argument before any command: `EINVAL`, with `why` kept for
    /// [`Verbs::last_error`] (as [`crate::Error::InvalidArgument`]) until a
    /// command fails after it.
    pub(crate) fn refuse(&mut self, why: &'static str) -> Errno {
        self.refusal = Some((why, self.hca.stats().last_failure));
        Errno::EINVAL
    }

    /// The device underneath (read-only escape hatch: objects created
    /// through it directly are not this context's and must be destroyed by
    /// the caller before [`Verbs::close`]).
    pub fn hca(&self) -> &Hca<H, O> {
        &self.hca
    }

    /// Why the last firmware command failed: the driver's error for it
    /// (for a refusal, [`crate::Error::Command`] with its opcode, op_mod,
    /// status and syndrome; once the device is dead, [`crate::Error::Fatal`]),
    /// or `None` if no command of this context has failed. An errno says what kind of failure a verb met; when a verb's
    /// errno came from a firmware refusal (a `modify_qp` that firmware
    /// refused is `EINVAL`, as in libibverbs), this holds the cause, until
    /// the next failing command replaces it. Some refusals of the facade's
    /// own checks (an address vector it cannot use) are kept here too, as
    /// [`crate::Error::InvalidArgument`] with the reason.
    ///
    /// ```no_run
    /// # use mlx5_driver::verbs::{QpAttr, QpAttrMask, QpHandle, Verbs};
    /// # fn demo<H: mlx5_hal::Hal>(ctx: &mut Verbs<H>, qp: QpHandle, a: &QpAttr) {
    /// if let Err(errno) = ctx.modify_qp(qp, a, QpAttrMask::STATE) {
    ///     if let Some(mlx5_driver::Error::Command { opcode, status, syndrome, .. }) =
    ///         ctx.last_error()
    ///     {
    ///         let _ = (errno, opcode, status, syndrome);
    ///     }
    /// }
    /// # }
    /// ```
    pub fn last_error(&self) -> Option<crate::Error> {
        use crate::stats::CmdOutcome;
        // A dead device is the cause of everything after it.
        if let Some(fatal) = self.hca.fatal_error() {
            return Some(fatal);
        }
        let latest = self.hca.stats().last_failure;
        if let Some((why, at)) = self.refusal {
            if at == latest {
                return Some(crate::Error::InvalidArgument(why));
            }
        }
        let f = latest?;
        let (opcode, op_mod) = (f.opcode, f.op_mod);
        Some(match f.outcome {
            CmdOutcome::Status { status, syndrome } => crate::Error::Command {
                opcode,
                op_mod,
                status,
                syndrome,
            },
            CmdOutcome::Delivery(status) => crate::Error::Delivery {
                opcode,
                op_mod,
                status,
            },
            CmdOutcome::Timeout => crate::Error::Timeout {
                opcode,
                op_mod,
                waited_ns: f.latency_ns,
            },
            CmdOutcome::Ok | CmdOutcome::Fatal => return None,
        })
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
            max_qp: 1u32 << caps.log_max_qp.min(31),
            max_qp_wr: 1u32 << caps.log_max_qp_sz.min(15),
            max_send_sge: qp::max_send_sge(caps.max_wqe_sz_sq),
            max_qp_rd_atom: 1u32 << caps.log_max_ra_res_qp.min(31),
            max_qp_init_rd_atom: 1u32 << caps.log_max_ra_req_qp.min(31),
            max_res_rd_atom: (1u64 << caps.log_max_ra_res_qp.min(31))
                * (1u64 << caps.log_max_qp.min(31)),
            atomic_cap: self.atomic_cap(),
            num_comp_vectors: self.hca.num_comp_vectors() as u32,
        }
    }

    /// `IBV_ATOMIC_HCA` when the device executes the IB atomics in host
    /// endianness (Linux `get_atomic_caps`), else `IBV_ATOMIC_NONE`.
    pub(crate) fn atomic_cap(&self) -> AtomicCap {
        if self.hca.atomic_caps().is_some_and(|a| a.ib_atomics()) {
            AtomicCap::Hca
        } else {
            AtomicCap::None
        }
    }

    // ------------------------------------------------------------ internals

    fn cq_entry(&self, cq: CqHandle) -> Result<&CqEntry<H>, Errno> {
        self.cqs.get(cq.0).ok_or(Errno::EINVAL)
    }

    fn srq_entry(&self, srq: SrqHandle) -> Result<&SrqEntry<H>, Errno> {
        self.srqs.get(srq.0).ok_or(Errno::EINVAL)
    }

    fn qp_entry(&self, qp: QpHandle) -> Result<&QpEntry<H, SQ_WQEBBS>, Errno> {
        self.qps.get(qp.0).ok_or(Errno::EINVAL)
    }

    fn take_seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }

    /// Queue the one `DeviceFatal` event the first time the device is
    /// found dead.
    fn note_fatal_once(&mut self, e: Option<crate::Error>) {
        if let Some(e) = e {
            if e.is_fatal() && !self.fatal_reported {
                self.fatal_reported = true;
                self.push_event(AsyncEvent {
                    event_type: AsyncEventType::DeviceFatal,
                    element: EventElement::Device,
                    detail: AsyncEventDetail::None,
                });
            }
        }
    }

    /// Poll the EQs and route what they hold: completion events to their
    /// CQ (bumping its arm sequence number at once, as Linux's EQ handler
    /// does), async events to the async queue. A dead device queues one
    /// `DeviceFatal` event.
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
            if e.book.channel.is_none() {
                // No channel: the event goes nowhere (ib core's
                // `ib_uverbs_comp_handler` without an event queue).
                return;
            }
            if e.book.events_pending == 0 {
                e.book.pending_seq = seq;
            }
            e.book.events_pending += 1;
            self.next_seq = seq;
        } else if self.internal_cq.as_ref().is_some_and(|c| c.cqn() == cqn) {
            // Never armed: an event for it changes nothing (the driver
            // keeps arm sequence numbers itself, Hca::arm_cq).
        } else {
            self.stats.unroutable_events += 1;
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

#[cfg(test)]
mod tests;
