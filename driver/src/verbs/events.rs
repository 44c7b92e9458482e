//! Async events: reading, acknowledging and routing them.

use mlx5_hal::Hal;

use super::{AsyncEvent, AsyncEventType, CqHandle, Errno, EventElement, SrqHandle, Verbs};
use crate::eq::Event;
use crate::stats::CmdObserver;

impl<H: Hal, O: CmdObserver, const CQS: usize, const SRQS: usize, const EVENTS: usize>
    Verbs<H, O, CQS, SRQS, EVENTS>
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

    pub(super) fn route_async(&mut self, ev: Event) {
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
}
