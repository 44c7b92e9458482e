//! Event queues, polled (docs/firmware.md §5, §6), optionally with an
//! interrupt vector (`eqc.intr`) that firmware signals when it writes an
//! EQE to the armed EQ.
//!
//! An [`EventQueue`] owns its ring in DMA memory (every EQE's owner byte set
//! to 1 before CREATE_EQ), is created with a 4 KiB page list, and is polled by
//! the ownership rule: the entry at consumer index `ci` belongs to software
//! iff `owner == (ci >> log_size) & 1` (docs/firmware.md §6.2). A read barrier follows
//! the owner check. The consumer index is reported through the UAR doorbell
//! without arming (+0x48) every [`CI_UPDATE_INTERVAL`] entries — well inside
//! the 128 spare entries firmware allows — and with arming (+0x40) at the end
//! of each poll that consumed something, so an EQE written after the poll
//! raises the EQ's interrupt ([`crate::Hca::wait_for_events`]).
//!
//! Every EQE is decoded into an [`Event`]. Dispatch (done by
//! [`crate::Hca::poll_events`] and while commands wait): page requests go to
//! the page manager, completions to the completion queue, everything else to
//! the async queue. Both queues are fixed-capacity ([`EventSink`]); when one
//! is full the event is counted as lost and the consumer later reads an
//! [`Event::EventsLost`] with the count, in order — never a silent drop.

use mlx5_hal::{barrier, DmaRegion, Hal, PAGE_SIZE};
use mlx5_regs::consts::ctx;
use mlx5_regs::doorbell;
use mlx5_regs::layouts::{
    cmd_inter_comp_event, comp_event, cq_error, eqe, pages_req_event, port_state_change_event,
    qp_events,
};
use mlx5_regs::EventType;

use crate::cmd::encode::{self, EqParams};
use crate::error::Error;

/// Size of an EQE.
pub const EQE_SIZE: usize = 64;
/// Byte of an EQE holding the owner bit (bit 0).
const OWNER_BYTE: usize = eqe::owner.bit_off as usize / 8;
/// The consumer index is reported (no arm) at least this often while
/// polling; firmware treats the EQ as overrun after 128 unreported entries
/// (`MLX5_NUM_SPARE_EQE`, docs/firmware.md §6.2).
pub const CI_UPDATE_INTERVAL: u32 = 64;
/// `ec_function` bit of a page request: the embedded-CPU function's own
/// (Linux `EC_FUNCTION_MASK`, docs/firmware.md §4.2).
const EC_FUNCTION: u16 = 0x8000;

/// A decoded event (docs/firmware.md §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// Type 0x00: a CQ has a new completion.
    Completion {
        /// CQ number.
        cqn: u32,
    },
    /// Type 0x04: CQ error.
    CqError {
        /// CQ number.
        cqn: u32,
        /// 1 overrun, 2 access violation.
        syndrome: u8,
    },
    /// Type 0x14: SRQ limit reached.
    SrqLimit {
        /// SRQ (or RMP) number.
        srqn: u32,
    },
    /// Type 0x12: SRQ catastrophic error.
    SrqCatastrophic {
        /// SRQ number.
        srqn: u32,
    },
    /// An event of a queue pair (`qp_events.type` 0, QP): path migration,
    /// communication established, send queue drained, last WQE reached
    /// (type 0x13, which firmware names `SRQ_LAST_WQE` but which is about
    /// the QP attached to the SRQ), work-queue errors. Route it to the QP
    /// with that number ([`crate::qp::Qp::handle_event`]), as Linux
    /// `rsc_event_notifier` does (`drivers/infiniband/hw/mlx5/qpc.c`).
    Qp {
        /// QP number (`qp_events.qpn_rqn_sqn`).
        qpn: u32,
        /// What happened.
        event: QpEvent,
    },
    /// A QP event type (0x01–0x03, 0x05, 0x07, 0x10, 0x11, 0x13) about
    /// another kind of queue (`qp_events.type` ≠ 0: an RQ, SQ or DCT
    /// object, which this driver does not create).
    Queue {
        /// The event type.
        event_type: EventType,
        /// RQ/SQ/DCT number (`qp_events.qpn_rqn_sqn`).
        number: u32,
        /// `MLX5_EVENT_QUEUE_TYPE_*`.
        queue_type: u8,
    },
    /// Type 0x0b: firmware wants pages (> 0) or gives some back (< 0).
    PageRequest {
        /// `func_id`.
        function_id: u16,
        /// The request is the embedded-CPU function's (`ec_function` bit 15,
        /// Linux `EC_FUNCTION_MASK`): answered with `embedded_cpu_function`.
        ec_function: bool,
        /// Signed page count.
        num_pages: i32,
    },
    /// Type 0x0a: command slots completed (bitmask).
    CommandCompletion {
        /// Completed slot mask.
        vector: u32,
    },
    /// Type 0x09: port state change.
    PortChange {
        /// Port number.
        port: u8,
        /// EQE sub_type (1 down, 4 active, ...).
        subtype: u8,
    },
    /// Type 0x08: internal error.
    InternalError,
    /// The consumer did not keep up: `count` events were dropped here.
    EventsLost {
        /// Events dropped.
        count: u64,
    },
    /// Any other type, with the whole EQE.
    Unknown {
        /// The event type.
        event_type: u8,
        /// The raw 64-byte EQE.
        raw: [u8; EQE_SIZE],
    },
}

/// A queue-pair event, typed (the event types of Linux
/// `qp_allowed_event_types`, `drivers/infiniband/hw/mlx5/qpc.c`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum QpEvent {
    /// 0x02: communication established (the first packet arrived while in
    /// RTR). Informational; the driver changes nothing (Linux passes it on
    /// and ULPs ignore it).
    CommEstablished,
    /// 0x13: an SRQ-attached QP in error will consume no more SRQ WQEs.
    LastWqeReached,
    /// 0x01: path migrated.
    PathMigrated,
    /// 0x07: path migration failed.
    PathMigrationFailed,
    /// 0x03: send queue drained.
    SqDrained,
    /// 0x05: catastrophic error on the work queue; the QP is in error.
    CatastrophicError,
    /// 0x10: invalid request (a malformed request from the peer); the QP
    /// is in error.
    InvalidRequest,
    /// 0x11: access violation; the QP is in error.
    AccessError,
}

impl QpEvent {
    /// The event of an EQE type, if it is a QP event type.
    pub const fn from_event_type(t: EventType) -> Option<QpEvent> {
        Some(match t {
            EventType::COMM_EST => QpEvent::CommEstablished,
            EventType::SRQ_LAST_WQE => QpEvent::LastWqeReached,
            EventType::PATH_MIG => QpEvent::PathMigrated,
            EventType::PATH_MIG_FAILED => QpEvent::PathMigrationFailed,
            EventType::SQ_DRAINED => QpEvent::SqDrained,
            EventType::WQ_CATAS_ERROR => QpEvent::CatastrophicError,
            EventType::WQ_INVAL_REQ_ERROR => QpEvent::InvalidRequest,
            EventType::WQ_ACCESS_ERROR => QpEvent::AccessError,
            _ => return None,
        })
    }

    /// The EQE type of the event.
    pub const fn event_type(self) -> EventType {
        match self {
            QpEvent::CommEstablished => EventType::COMM_EST,
            QpEvent::LastWqeReached => EventType::SRQ_LAST_WQE,
            QpEvent::PathMigrated => EventType::PATH_MIG,
            QpEvent::PathMigrationFailed => EventType::PATH_MIG_FAILED,
            QpEvent::SqDrained => EventType::SQ_DRAINED,
            QpEvent::CatastrophicError => EventType::WQ_CATAS_ERROR,
            QpEvent::InvalidRequest => EventType::WQ_INVAL_REQ_ERROR,
            QpEvent::AccessError => EventType::WQ_ACCESS_ERROR,
        }
    }

    /// True for the events that leave the QP in the error state.
    pub const fn is_error(self) -> bool {
        matches!(
            self,
            QpEvent::CatastrophicError | QpEvent::InvalidRequest | QpEvent::AccessError
        )
    }
}

impl Event {
    /// The QP number and typed event when this is an event of a queue pair
    /// ([`Event::Qp`]).
    ///
    /// ```
    /// use mlx5_driver::eq::{Event, QpEvent};
    /// let e = Event::Qp { qpn: 9, event: QpEvent::LastWqeReached };
    /// assert_eq!(e.qp_event(), Some((9, QpEvent::LastWqeReached)));
    /// assert_eq!(Event::SrqLimit { srqn: 9 }.qp_event(), None);
    /// ```
    pub fn qp_event(&self) -> Option<(u32, QpEvent)> {
        match *self {
            Event::Qp { qpn, event } => Some((qpn, event)),
            _ => None,
        }
    }
}

/// Decode one EQE.
///
/// ```
/// use mlx5_driver::eq::{decode, Event, QpEvent};
/// let mut raw = [0u8; 64];
/// raw[1] = 0x0b;                                   // PAGE_REQUEST
/// raw[0x24..0x28].copy_from_slice(&(-5i32).to_be_bytes());
/// assert_eq!(
///     decode(&raw),
///     Event::PageRequest { function_id: 0, ec_function: false, num_pages: -5 }
/// );
///
/// // Type 0x13 (`SRQ_LAST_WQE`) names the QP, queue type 0 at byte 0x34.
/// let mut raw = [0u8; 64];
/// raw[1] = 0x13;
/// raw[0x38..0x3c].copy_from_slice(&0x0123u32.to_be_bytes());
/// assert_eq!(decode(&raw), Event::Qp { qpn: 0x123, event: QpEvent::LastWqeReached });
/// raw[0x34] = 1;                                   // an RQ object
/// assert!(matches!(decode(&raw), Event::Queue { number: 0x123, queue_type: 1, .. }));
/// ```
pub fn decode(raw: &[u8; EQE_SIZE]) -> Event {
    let ty = EventType(eqe::event_type.get(raw));
    let sub = eqe::event_sub_type.get(raw);
    let data = eqe::event_data.get(raw);
    let qpn = || qp_events::qpn_rqn_sqn.get(data);
    match ty {
        EventType::COMP => Event::Completion {
            cqn: comp_event::cq_number.get(data),
        },
        EventType::CQ_ERROR => Event::CqError {
            cqn: cq_error::cqn.get(data),
            syndrome: cq_error::syndrome.get(data),
        },
        EventType::SRQ_RQ_LIMIT => Event::SrqLimit { srqn: qpn() },
        EventType::SRQ_CATAS_ERROR => Event::SrqCatastrophic { srqn: qpn() },
        // QP event types, routed by queue type then number (Linux
        // `rsc_event_notifier`); type 0x13 is about the QP too.
        EventType::PATH_MIG
        | EventType::COMM_EST
        | EventType::SQ_DRAINED
        | EventType::SRQ_LAST_WQE
        | EventType::WQ_CATAS_ERROR
        | EventType::PATH_MIG_FAILED
        | EventType::WQ_INVAL_REQ_ERROR
        | EventType::WQ_ACCESS_ERROR => {
            match (qp_events::r#type.get(data), QpEvent::from_event_type(ty)) {
                (ctx::EVENT_QUEUE_TYPE_QP, Some(event)) => Event::Qp { qpn: qpn(), event },
                (queue_type, _) => Event::Queue {
                    event_type: ty,
                    number: qpn(),
                    queue_type,
                },
            }
        }
        EventType::PAGE_REQUEST => Event::PageRequest {
            function_id: pages_req_event::function_id.get(data),
            ec_function: pages_req_event::ec_function.get(data) & EC_FUNCTION != 0,
            num_pages: pages_req_event::num_pages.get(data) as i32,
        },
        EventType::CMD => Event::CommandCompletion {
            vector: cmd_inter_comp_event::command_completion_vector.get(data),
        },
        EventType::PORT_CHANGE => Event::PortChange {
            port: port_state_change_event::port_num.get(data),
            subtype: sub,
        },
        EventType::INTERNAL_ERROR => Event::InternalError,
        _ => Event::Unknown {
            event_type: ty.0,
            raw: *raw,
        },
    }
}

/// A fixed-capacity event queue with loss accounting (see the module docs).
///
/// ```
/// use mlx5_driver::eq::{EventSink, Event};
/// let mut q: EventSink<Event, 2> = EventSink::new();
/// for cqn in 0..5 { q.push(Event::Completion { cqn }); }
/// assert_eq!(q.pop(), Some(Event::Completion { cqn: 0 }));
/// assert_eq!(q.pop(), Some(Event::Completion { cqn: 1 }));
/// assert_eq!(q.pop(), Some(Event::EventsLost { count: 3 }));
/// assert_eq!(q.pop(), None);
/// assert_eq!(q.overflows(), 3);
/// ```
pub struct EventSink<T, const N: usize> {
    q: heapless::Deque<T, N>,
    pending_lost: u64,
    total_lost: u64,
    total_pushed: u64,
}

/// Items an [`EventSink`] can report loss with.
pub trait LossMarker: Sized {
    /// The item that says `count` items were lost.
    fn lost(count: u64) -> Self;
}

impl LossMarker for Event {
    fn lost(count: u64) -> Self {
        Event::EventsLost { count }
    }
}

impl<T: LossMarker, const N: usize> Default for EventSink<T, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: LossMarker, const N: usize> EventSink<T, N> {
    /// Empty sink.
    pub const fn new() -> Self {
        EventSink {
            q: heapless::Deque::new(),
            pending_lost: 0,
            total_lost: 0,
            total_pushed: 0,
        }
    }

    /// Queue an item, or count it lost when full. After a loss, newer items
    /// are also counted lost until the loss marker fits, so the order seen
    /// by the consumer is: older items, the marker, newer items.
    pub fn push(&mut self, item: T) {
        self.total_pushed += 1;
        if self.pending_lost > 0 {
            if self.q.len() + 2 <= N {
                let marker = T::lost(self.pending_lost);
                let _ = self.q.push_back(marker);
                self.pending_lost = 0;
            } else {
                self.pending_lost += 1;
                self.total_lost += 1;
                return;
            }
        }
        if self.q.push_back(item).is_err() {
            self.pending_lost += 1;
            self.total_lost += 1;
        }
    }

    /// Next item (or the loss marker once older items are read).
    pub fn pop(&mut self) -> Option<T> {
        match self.q.pop_front() {
            Some(x) => Some(x),
            None if self.pending_lost > 0 => {
                let n = self.pending_lost;
                self.pending_lost = 0;
                Some(T::lost(n))
            }
            None => None,
        }
    }

    /// Drop the waiting items `keep` refuses, keeping the others in order;
    /// returns how many were dropped (not counted as lost: they were
    /// withdrawn, e.g. events of a destroyed object).
    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) -> usize {
        let n = self.q.len();
        let mut dropped = 0;
        for _ in 0..n {
            if let Some(x) = self.q.pop_front() {
                if keep(&x) {
                    // Cannot fail: one slot was just freed.
                    let _ = self.q.push_back(x);
                } else {
                    dropped += 1;
                }
            }
        }
        dropped
    }

    /// Items waiting.
    pub fn len(&self) -> usize {
        self.q.len()
    }

    /// True if nothing waits (loss marker included).
    pub fn is_empty(&self) -> bool {
        self.q.is_empty() && self.pending_lost == 0
    }

    /// Items lost since creation.
    pub fn overflows(&self) -> u64 {
        self.total_lost
    }

    /// Items offered since creation.
    pub fn pushed(&self) -> u64 {
        self.total_pushed
    }
}

/// One polled event queue.
pub struct EventQueue<H: Hal> {
    buf: DmaRegion<H>,
    eqn: u8,
    log_size: u8,
    ci: u32,
    uar_off: usize,
    consumed: u64,
    intr: u16,
}

/// Counters of one poll.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PollCount {
    /// EQEs consumed.
    pub eqes: u32,
    /// Consumer-index doorbells written.
    pub doorbells: u32,
}

impl<H: Hal> EventQueue<H> {
    /// Allocate the ring (`2^log_size` EQEs, owner bytes initialised to 1)
    /// and build the CREATE_EQ input into `buf`; returns the queue (not yet
    /// live) and the input length. Call [`EventQueue::created`] with the EQ
    /// number once CREATE_EQ succeeded.
    pub fn prepare(
        hal: &H,
        log_size: u8,
        uar: u32,
        event_mask: u64,
        buf: &mut [u8],
    ) -> Result<(Self, usize), Error> {
        Self::prepare_on(hal, log_size, uar, event_mask, 0, buf)
    }

    /// [`EventQueue::prepare`] with the interrupt vector the EQ signals
    /// (`eqc.intr`, an MSI-X table index; docs/firmware.md §6.1). Firmware
    /// raises it when it writes an EQE to the armed EQ.
    pub fn prepare_on(
        hal: &H,
        log_size: u8,
        uar: u32,
        event_mask: u64,
        intr: u16,
        buf: &mut [u8],
    ) -> Result<(Self, usize), Error> {
        if !(1..=24).contains(&log_size) {
            return Err(Error::InvalidArgument("EQ log size"));
        }
        let bytes = (EQE_SIZE << log_size).max(PAGE_SIZE);
        let ring = hal.alloc_dma(bytes)?;
        for i in 0..(1usize << log_size) {
            ring.write_u8(i * EQE_SIZE + EQE_SIZE - 1, ctx::EQE_OWNER_INIT);
        }
        let n_pages = ring.len() / PAGE_SIZE;
        let params = EqParams {
            log_size,
            uar_page: uar,
            log_page_size: 0,
            intr,
            event_mask,
        };
        let base = ring.iova();
        let len = encode::create_eq(
            buf,
            &params,
            (0..n_pages).map(|i| base + (i * PAGE_SIZE) as u64),
        )?;
        Ok((
            EventQueue {
                buf: ring,
                eqn: 0,
                log_size,
                ci: 0,
                uar_off: doorbell::uar_page_offset(uar),
                consumed: 0,
                intr,
            },
            len,
        ))
    }

    /// Record the EQ number and arm the EQ once with ci = 0 (docs/firmware.md §6.2,
    /// Linux `mlx5_eq_enable`).
    pub fn created(&mut self, hal: &H, eqn: u8) {
        self.eqn = eqn;
        self.doorbell(hal, true);
    }

    /// The EQ number.
    pub fn eqn(&self) -> u8 {
        self.eqn
    }

    /// The interrupt vector the EQ was created with (`eqc.intr`).
    pub fn intr(&self) -> u16 {
        self.intr
    }

    /// log2 of the number of entries.
    pub fn log_size(&self) -> u8 {
        self.log_size
    }

    /// Consumer index (running, not masked).
    pub fn consumer_index(&self) -> u32 {
        self.ci
    }

    /// Does a software-owned EQE wait at the consumer index? One byte read,
    /// nothing consumed (the polling fallback of a blocking wait).
    pub fn has_event(&self) -> bool {
        self.ready()
    }

    /// EQEs consumed since creation.
    pub fn consumed(&self) -> u64 {
        self.consumed
    }

    /// The DMA region holding the ring (EQE `i` at `i * EQE_SIZE`), for
    /// tests and benchmarks that play the device.
    pub fn region(&self) -> &DmaRegion<H> {
        &self.buf
    }

    fn doorbell(&self, hal: &H, arm: bool) {
        let off = if arm {
            doorbell::UAR_EQ_DOORBELL_ARM
        } else {
            doorbell::UAR_EQ_DOORBELL_NO_ARM
        };
        // The ring reads above must complete before firmware may reuse the
        // entries: order them before the MMIO write (docs/firmware.md §5).
        barrier::mmio_wmb();
        hal.mmio_write32(self.uar_off + off, doorbell::eq_doorbell(self.eqn, self.ci));
    }

    /// Is the EQE at the consumer index owned by software? One byte read.
    #[inline(always)]
    fn ready(&self) -> bool {
        let n = 1u32 << self.log_size;
        let off = (self.ci & (n - 1)) as usize * EQE_SIZE;
        let owner = self.buf.read_u8(off + OWNER_BYTE) & 1;
        owner == ((self.ci >> self.log_size) & 1) as u8
    }

    /// The next software-owned EQE, consumed (ci advanced), if any:
    /// ownership check, one read barrier, then the entry in eight 8-byte
    /// loads through a window checked once.
    #[inline(always)]
    fn next(&mut self) -> Option<[u8; EQE_SIZE]> {
        let n = 1u32 << self.log_size;
        let off = (self.ci & (n - 1)) as usize * EQE_SIZE;
        let w = self.buf.window::<EQE_SIZE>(off);
        let owner = w.read_u8::<OWNER_BYTE>() & 1;
        if owner != ((self.ci >> self.log_size) & 1) as u8 {
            return None;
        }
        barrier::dma_rmb();
        let mut raw = [0u8; EQE_SIZE];
        w.read_into(&mut raw);
        self.ci = self.ci.wrapping_add(1);
        self.consumed += 1;
        Some(raw)
    }

    /// Consume up to `budget` EQEs, handing each decoded event to `f`.
    /// Reports the consumer index every [`CI_UPDATE_INTERVAL`] entries and
    /// arms at the end. An empty EQ costs one ownership check (inlined into
    /// the caller); the loop is out of line.
    #[inline(always)]
    pub fn poll(&mut self, hal: &H, budget: u32, f: impl FnMut(Event)) -> PollCount {
        if budget == 0 || !self.ready() {
            return PollCount::default();
        }
        self.poll_some(hal, budget, f)
    }

    #[inline(never)]
    fn poll_some(&mut self, hal: &H, budget: u32, mut f: impl FnMut(Event)) -> PollCount {
        let mut count = PollCount::default();
        let mut since_update = 0;
        while count.eqes < budget {
            let Some(raw) = self.next() else { break };
            count.eqes += 1;
            since_update += 1;
            f(decode(&raw));
            if since_update >= CI_UPDATE_INTERVAL {
                self.doorbell(hal, false);
                count.doorbells += 1;
                since_update = 0;
            }
        }
        if count.eqes > 0 {
            // Once armed an EQ stays armed until it fires, which writes an
            // EQE we consume here: re-arm only after consuming something.
            self.doorbell(hal, true);
            count.doorbells += 1;
        }
        count
    }
}
