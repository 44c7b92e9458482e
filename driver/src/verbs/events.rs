//! Async events: reading, acknowledging and routing them.

use mlx5_hal::Hal;

use super::{
    AsyncEvent, AsyncEventDetail, AsyncEventType, CqHandle, Errno, EventElement, QpHandle,
    SrqHandle, Verbs,
};
use crate::cq::CqErrorCause;
use crate::eq::{Event, QpEvent};
use crate::stats::CmdObserver;

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
            EventElement::Qp(h) => {
                if let Some(e) = self.qps.get_mut(h.0) {
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
            EventElement::Qp(h) => {
                let e = self.qps.get_mut(h.0).ok_or(Errno::EINVAL)?;
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

    pub(super) fn route_async(&mut self, ev: Event) {
        use AsyncEventType as T;
        if let Some((qpn, e)) = ev.qp_event() {
            self.route_qp_event(qpn, e, &ev);
            return;
        }
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
        // A CQ error says why (overrun or access violation).
        let detail = match ev {
            Event::CqError { syndrome, .. } => {
                AsyncEventDetail::CqError(CqErrorCause::from_syndrome(syndrome))
            }
            _ => AsyncEventDetail::None,
        };
        let routed = match ev {
            Event::CqError { cqn, .. } => cq(self, cqn).map(|el| (T::CqErr, el)),
            Event::SrqLimit { srqn } => srq(self, srqn, false).map(|el| (T::SrqLimitReached, el)),
            Event::SrqCatastrophic { srqn } => srq(self, srqn, true).map(|el| (T::SrqErr, el)),
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
                detail,
            }),
            None => self.stats.unroutable_events += 1,
        }
    }

    /// A QP event: applied to the driver's QP (an error event puts it in
    /// ERR) and queued with the QP's handle (Linux `mlx5_ib_qp_event`,
    /// `drivers/infiniband/hw/mlx5/qp.c`, maps the types the same way).
    fn route_qp_event(&mut self, qpn: u32, e: QpEvent, ev: &Event) {
        use AsyncEventType as T;
        let Some(k) = self.qpns.get(qpn).map(|r| r.key) else {
            self.stats.unroutable_events += 1;
            return;
        };
        if let Some(q) = self.qps.get_mut(k) {
            q.qp.handle_event(ev);
        }
        let event_type = match e {
            QpEvent::CommEstablished => T::CommEst,
            QpEvent::LastWqeReached => T::QpLastWqeReached,
            QpEvent::PathMigrated => T::PathMig,
            QpEvent::PathMigrationFailed => T::PathMigErr,
            QpEvent::SqDrained => T::SqDrained,
            QpEvent::CatastrophicError => T::QpFatal,
            QpEvent::InvalidRequest => T::QpReqErr,
            QpEvent::AccessError => T::QpAccessErr,
        };
        self.push_event(AsyncEvent {
            event_type,
            element: EventElement::Qp(QpHandle(k)),
            detail: AsyncEventDetail::None,
        });
    }
}
