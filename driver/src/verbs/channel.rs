//! Completion channels and extended CQ creation: `ibv_create_comp_channel`,
//! `ibv_destroy_comp_channel`, `ibv_create_cq_ex`, `ibv_get_cq_event` on a
//! channel (non-blocking or blocking with a timeout) and the blocking
//! `ibv_get_async_event`.
//!
//! A channel is an entry of a fixed table (no heap). A CQ's completion
//! events are counted on the CQ itself; a channel's reader takes the
//! oldest event among the CQs bound to it. A CQ created without a channel
//! never delivers an event: its arm is honoured (the driver keeps the arm
//! sequence number in step) and the event is dropped, as ib core drops an
//! event of a CQ without an event queue (`ib_uverbs_comp_handler`).
//!
//! Blocking waits poll the EQs and, while nothing is there, sleep in
//! [`crate::Hca::wait_for_events`]: the platform's interrupt wait, or a
//! bounded polling back-off on a platform without interrupts.

use mlx5_hal::Hal;

use super::cq::{CqBook, CqEntry};
use super::table::Key;
use super::{AsyncEvent, CqHandle, Errno, Verbs};
use crate::cq::CqOptions;
use crate::stats::CmdObserver;

/// Completion channels a [`Verbs`] context can create, besides its own
/// ([`Verbs::context_comp_channel`]).
pub const MAX_COMP_CHANNELS: usize = 8;

/// A completion channel (`ibv_comp_channel`): CQs bound to it deliver
/// their completion events there. Stale handles are `EINVAL`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChannelHandle(pub(super) ChannelId);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum ChannelId {
    /// The context's own channel: where [`Verbs::create_cq`]'s CQs deliver.
    Context,
    /// One made by [`Verbs::create_comp_channel`].
    Made(Key),
}

/// Verbs bookkeeping of a channel.
#[derive(Debug, Default)]
pub(super) struct ChannelEntry {
    /// CQs bound to the channel (libibverbs' `refcnt`).
    cqs: u32,
}

/// A completion event read from a channel (`ibv_get_cq_event`'s `cq` and
/// `cq_context`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqEvent {
    /// The CQ.
    pub cq: CqHandle,
    /// The `cq_context` it was created with ([`CqInitAttrEx::cq_context`];
    /// 0 for [`Verbs::create_cq`]).
    pub cq_context: u64,
}

/// `ibv_cq_init_attr_ex`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqInitAttrEx {
    /// Minimum number of entries (1..=`max_cqe`).
    pub cqe: u32,
    /// The caller's value, returned with each completion event.
    pub cq_context: u64,
    /// Channel of the completion events; `None`: the CQ delivers none.
    pub channel: Option<ChannelHandle>,
    /// Completion vector (below [`super::DeviceAttr::num_comp_vectors`]).
    pub comp_vector: u32,
    /// `IBV_CQ_INIT_ATTR_MASK_*`: which optional fields are valid.
    pub comp_mask: u32,
    /// `IBV_WC_EX_WITH_*`: fields the caller will read from completions.
    pub wc_flags: u64,
    /// `IBV_CREATE_CQ_ATTR_*` (read when `comp_mask` has
    /// [`CqInitAttrEx::MASK_FLAGS`]).
    pub flags: u32,
}

impl CqInitAttrEx {
    /// `IBV_CQ_INIT_ATTR_MASK_FLAGS`: `flags` is valid.
    pub const MASK_FLAGS: u32 = 1 << 0;
    /// `IBV_CQ_INIT_ATTR_MASK_PD`: a parent domain is given (not
    /// supported here: `EINVAL`).
    pub const MASK_PD: u32 = 1 << 1;
    /// `IBV_CREATE_CQ_ATTR_SINGLE_THREADED`: the caller serialises access
    /// (always true of a [`Verbs`] context; accepted, changes nothing).
    pub const FLAG_SINGLE_THREADED: u32 = 1 << 0;
    /// `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN`: no CQ error event on overrun
    /// (`cqc.oi`; needs the `cq_oi` capability, else `EOPNOTSUPP`).
    pub const FLAG_IGNORE_OVERRUN: u32 = 1 << 1;
    /// `IBV_WC_EX_WITH_BYTE_LEN`.
    pub const WC_WITH_BYTE_LEN: u64 = 1 << 0;
    /// `IBV_WC_EX_WITH_IMM`.
    pub const WC_WITH_IMM: u64 = 1 << 1;
    /// `IBV_WC_EX_WITH_QP_NUM`.
    pub const WC_WITH_QP_NUM: u64 = 1 << 2;
    /// `IBV_WC_EX_WITH_SRC_QP`.
    pub const WC_WITH_SRC_QP: u64 = 1 << 3;
    /// `IBV_WC_EX_WITH_SLID`.
    pub const WC_WITH_SLID: u64 = 1 << 4;
    /// `IBV_WC_EX_WITH_SL`.
    pub const WC_WITH_SL: u64 = 1 << 5;
    /// `IBV_WC_EX_WITH_DLID_PATH_BITS`.
    pub const WC_WITH_DLID_PATH_BITS: u64 = 1 << 6;
    /// `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`: the device clock's ticks
    /// ([`super::CqPoll::read_completion_ts`]); offered when the device has
    /// a clock (`device_frequency_khz` non-zero).
    pub const WC_WITH_COMPLETION_TIMESTAMP: u64 = 1 << 7;
    /// `IBV_WC_STANDARD_FLAGS`: byte length, immediate, QP number, source
    /// QP, SLID, SL, DLID path bits.
    pub const WC_STANDARD_FLAGS: u64 = 0x7f;

    /// Attributes of a CQ of `cqe` entries on the context's channel and
    /// vector 0 (what [`Verbs::create_cq`] makes, given a channel).
    pub const fn new(cqe: u32) -> Self {
        CqInitAttrEx {
            cqe,
            cq_context: 0,
            channel: None,
            comp_vector: 0,
            comp_mask: 0,
            wc_flags: 0,
            flags: 0,
        }
    }
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
    /// The context's own completion channel: [`Verbs::create_cq`]'s CQs
    /// deliver there and [`Verbs::get_cq_event`] reads it. It lives as
    /// long as the context (destroying it is `EINVAL`).
    pub const fn context_comp_channel(&self) -> ChannelHandle {
        ChannelHandle(ChannelId::Context)
    }

    /// `ibv_create_comp_channel`. `ENOMEM` once [`MAX_COMP_CHANNELS`]
    /// exist.
    pub fn create_comp_channel(&mut self) -> Result<ChannelHandle, Errno> {
        self.channels
            .insert(ChannelEntry::default())
            .map(|k| ChannelHandle(ChannelId::Made(k)))
            .map_err(|_| Errno::ENOMEM)
    }

    /// `ibv_destroy_comp_channel`: `EBUSY` while a CQ is bound to it
    /// (libibverbs' `refcnt`), `EINVAL` for a stale handle or the
    /// context's own channel.
    pub fn destroy_comp_channel(&mut self, ch: ChannelHandle) -> Result<(), Errno> {
        let ChannelId::Made(k) = ch.0 else {
            return Err(Errno::EINVAL);
        };
        let e = self.channels.get(k).ok_or(Errno::EINVAL)?;
        if e.cqs > 0 {
            return Err(Errno::EBUSY);
        }
        self.channels.remove(k);
        Ok(())
    }

    fn check_channel(&self, ch: ChannelHandle) -> Result<(), Errno> {
        match ch.0 {
            ChannelId::Context => Ok(()),
            ChannelId::Made(k) => self.channels.get(k).map(|_| ()).ok_or(Errno::EINVAL),
        }
    }

    /// A CQ bound to `ch` is gone (or was never made): the channel's count
    /// goes down.
    pub(super) fn unbind_channel(&mut self, ch: Option<ChannelHandle>) {
        if let Some(ChannelHandle(ChannelId::Made(k))) = ch {
            if let Some(e) = self.channels.get_mut(k) {
                e.cqs = e.cqs.saturating_sub(1);
            }
        }
    }

    /// `ibv_create_cq_ex` with rdma-core mlx5's checks (`mlx5_create_cq`,
    /// `providers/mlx5/verbs.c`) and the kernel's (ib core,
    /// `drivers/infiniband/core/uverbs_std_types_cq.c`; mlx5_ib
    /// `mlx5_ib_create_cq`), in their order:
    ///
    /// * `cqe` 0: `EINVAL`;
    /// * a `comp_mask` bit other than [`CqInitAttrEx::MASK_FLAGS`]: `EINVAL`
    ///   (parent domains are not supported);
    /// * with [`CqInitAttrEx::MASK_FLAGS`], a flag other than
    ///   single-threaded and ignore-overrun: `EINVAL`;
    /// * a `wc_flags` bit beyond [`CqInitAttrEx::WC_STANDARD_FLAGS`] and
    ///   [`CqInitAttrEx::WC_WITH_COMPLETION_TIMESTAMP`], or the timestamp
    ///   on a device without a clock (`device_frequency_khz` 0):
    ///   `EOPNOTSUPP` (VLAN, flow tag, tag matching and wall-clock fields
    ///   are not offered by this facade);
    /// * a stale channel: `EINVAL`; `comp_vector` not below
    ///   `num_comp_vectors`: `EINVAL`;
    /// * `cqe` above `max_cqe`: `EINVAL`;
    /// * ignore-overrun without the `cq_oi` capability: `EOPNOTSUPP`;
    /// * the CQ table or DMA memory exhausted: `ENOMEM`.
    ///
    /// Returns the handle and the actual number of entries (`2^k − 1`).
    pub fn create_cq_ex(&mut self, attr: &CqInitAttrEx) -> Result<(CqHandle, u32), Errno> {
        type A = CqInitAttrEx;
        if attr.cqe == 0 || attr.comp_mask & !A::MASK_FLAGS != 0 {
            return Err(Errno::EINVAL);
        }
        let flags = if attr.comp_mask & A::MASK_FLAGS != 0 {
            attr.flags
        } else {
            0
        };
        if flags & !(A::FLAG_SINGLE_THREADED | A::FLAG_IGNORE_OVERRUN) != 0 {
            return Err(Errno::EINVAL);
        }
        let offered = if self.hca.caps().device_frequency_khz != 0 {
            A::WC_STANDARD_FLAGS | A::WC_WITH_COMPLETION_TIMESTAMP
        } else {
            A::WC_STANDARD_FLAGS
        };
        if attr.wc_flags & !offered != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        if let Some(ch) = attr.channel {
            self.check_channel(ch)?;
        }
        if attr.comp_vector >= self.hca.num_comp_vectors() as u32 {
            return Err(Errno::EINVAL);
        }
        let caps = self.hca.caps();
        if attr.cqe > caps.max_cqe() {
            return Err(Errno::EINVAL);
        }
        let overrun_ignore = flags & A::FLAG_IGNORE_OVERRUN != 0;
        if overrun_ignore && !caps.cq_oi {
            return Err(Errno::EOPNOTSUPP);
        }
        let opts = CqOptions {
            overrun_ignore,
            comp_vector: attr.comp_vector as u8,
            ..CqOptions::default()
        };
        let book = CqBook {
            channel: attr.channel,
            context: attr.cq_context,
            wc_flags: attr.wc_flags,
            ..CqBook::default()
        };
        self.create_cq_with(attr.cqe, opts, book)
    }

    /// Make the CQ and enter it in the table, bound to its channel.
    pub(super) fn create_cq_with(
        &mut self,
        cqe: u32,
        opts: CqOptions,
        book: CqBook,
    ) -> Result<(CqHandle, u32), Errno> {
        if self.cqs.len() >= CQS {
            return Err(Errno::ENOMEM);
        }
        let cq = self.hca.create_cq(cqe, opts)?;
        let n = cq.capacity();
        match self.cqs.insert(CqEntry::new(cq, book)) {
            Ok(k) => {
                if let Some(ChannelHandle(ChannelId::Made(c))) = book.channel {
                    if let Some(e) = self.channels.get_mut(c) {
                        e.cqs += 1;
                    }
                }
                Ok((CqHandle(k), n))
            }
            Err(entry) => {
                // Not reached (checked above); undo rather than leak.
                let _ = self.hca.destroy_cq(entry.cq);
                Err(Errno::ENOMEM)
            }
        }
    }

    /// The oldest completion event of the CQs bound to `ch`, after routing
    /// what the EQs hold; `EAGAIN` when there is none.
    fn take_cq_event(&mut self, ch: ChannelHandle) -> Result<CqEvent, Errno> {
        let polled = self.pump();
        let best = self
            .cqs
            .iter_mut()
            .filter(|(_, e)| e.book.events_pending > 0 && e.book.channel == Some(ch))
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
        Ok(CqEvent {
            cq: CqHandle(k),
            cq_context: e.book.context,
        })
    }

    /// `ibv_get_cq_event` on channel `ch`: the CQ of the oldest completion
    /// event there, with its `cq_context`. `timeout_ns` 0 does not block
    /// (`EAGAIN` when nothing is there, a non-blocking channel); otherwise
    /// the call sleeps until an event comes or about `timeout_ns` passed
    /// (`ETIMEDOUT`). Each event read must be acknowledged with
    /// [`Verbs::ack_cq_events`] before the CQ can be destroyed. `EINVAL`:
    /// stale channel.
    pub fn get_cq_event_on(
        &mut self,
        ch: ChannelHandle,
        timeout_ns: u64,
    ) -> Result<CqEvent, Errno> {
        self.check_channel(ch)?;
        let start = self.hca.hal().now_ns();
        loop {
            match self.take_cq_event(ch) {
                Err(Errno::EAGAIN) => {}
                r => return r,
            }
            self.sleep_until_event(start, timeout_ns)?;
        }
    }

    /// `ibv_get_cq_event` on the context's channel without blocking: the
    /// CQ of the next completion event, or `EAGAIN` (see
    /// [`Verbs::get_cq_event_on`]).
    pub fn get_cq_event(&mut self) -> Result<CqHandle, Errno> {
        self.take_cq_event(self.context_comp_channel())
            .map(|e| e.cq)
    }

    /// `ibv_get_async_event` that blocks up to about `timeout_ns`
    /// (`ETIMEDOUT`); 0 is [`Verbs::get_async_event`] (`EAGAIN`).
    pub fn get_async_event_timeout(&mut self, timeout_ns: u64) -> Result<AsyncEvent, Errno> {
        let start = self.hca.hal().now_ns();
        loop {
            match self.get_async_event() {
                Err(Errno::EAGAIN) => {}
                r => return r,
            }
            self.sleep_until_event(start, timeout_ns)?;
        }
    }

    /// One wait of a blocking read that found nothing: `EAGAIN` when not
    /// blocking, `ETIMEDOUT` once `timeout_ns` since `start` passed, else
    /// sleep until the device may have written an event.
    fn sleep_until_event(&mut self, start: u64, timeout_ns: u64) -> Result<(), Errno> {
        if timeout_ns == 0 {
            return Err(Errno::EAGAIN);
        }
        let waited = self.hca.hal().now_ns().saturating_sub(start);
        if waited >= timeout_ns {
            return Err(Errno::ETIMEDOUT);
        }
        let r = self.hca.wait_for_events(timeout_ns - waited);
        self.note_fatal_once(r.as_ref().err().copied());
        r.map(|_| ()).map_err(Errno::from)
    }
}
