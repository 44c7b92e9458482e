//! The reference model's CQ-side and event steps of the random verbs run:
//! resize, arm, modify_srq, the event checks, query and ack.

use super::*;

impl Run {
    pub(super) fn resize(&mut self, at: &str) {
        let Some(i) = self.pick_cq() else { return };
        let n = 1 + self.rng.below(400) as u32;
        let new_cap = rounded(n);
        let pending = self.cqs[i].queue.len() as u32;
        let same = new_cap == self.cqs[i].cap;
        let fault = !same && self.maybe_fault(Opcode::MODIFY_CQ);
        let r = self.ctx.resize_cq(self.cqs[i].h, n);
        // Firmware refuses when the new ring cannot take what waits, and
        // when the old ring has no free slot for the RESIZE_CQ CQE (a CQ
        // shrunk to exactly full earlier) (docs/firmware.md §8).
        let old_full = pending > self.cqs[i].cap;
        if same {
            assert_eq!(r, Ok(new_cap), "{at}: same-size resize");
        } else if pending > new_cap + 1 || old_full || fault {
            assert_eq!(
                r,
                Err(Errno::EINVAL),
                "{at}: resize to {new_cap} with {pending} waiting"
            );
        } else {
            assert_eq!(
                r,
                Ok(new_cap),
                "{at}: resize to {new_cap} with {pending} waiting"
            );
            self.cqs[i].cap = new_cap;
        }
        assert_eq!(self.ctx.cqe(self.cqs[i].h), Ok(self.cqs[i].cap), "{at}");
    }

    pub(super) fn arm(&mut self, at: &str) {
        let Some(i) = self.pick_cq() else { return };
        self.ctx.req_notify_cq(self.cqs[i].h, false).unwrap();
        self.settle();
        let cq = &mut self.cqs[i];
        if cq.queue.is_empty() {
            cq.armed = true;
        } else {
            // Completions beyond the arm's consumer index: fires at once.
            cq.armed = false;
            cq.events_due += 1;
        }
        let _ = at;
    }

    pub(super) fn modify_srq(&mut self, at: &str) {
        let Some(j) = self.pick_srq() else { return };
        let cap = self.srqs[j].cap;
        let l = self.rng.below(cap as u64 + 2) as u32;
        let attr = SrqAttr {
            srq_limit: l,
            ..SrqAttr::default()
        };
        if self.rng.below(20) == 0 {
            // Resizing (MAX_WR) is refused as a whole, nothing changes.
            let r = self.ctx.modify_srq(
                self.srqs[j].h,
                &attr,
                SrqAttrMask::MAX_WR | SrqAttrMask::LIMIT,
            );
            assert_eq!(r, Err(Errno::EINVAL), "{at}");
            return;
        }
        let fault = l <= cap && self.maybe_fault(self.srq_ops().1);
        let r = self
            .ctx
            .modify_srq(self.srqs[j].h, &attr, SrqAttrMask::LIMIT);
        let s = &mut self.srqs[j];
        if l > cap || fault {
            assert_eq!(r, Err(Errno::EINVAL), "{at}: limit {l} cap {cap}");
        } else {
            assert_eq!(r, Ok(()), "{at}: limit {l}");
            s.limit = l;
            if l > 0 && (s.fifo.len() as u32) < l {
                s.limit = 0;
                s.limit_events_due += 1;
            }
        }
    }

    pub(super) fn events(&mut self, at: &str) {
        loop {
            match self.ctx.get_cq_event() {
                Ok(h) => {
                    let i = self
                        .cqs
                        .iter()
                        .position(|c| c.h == h)
                        .unwrap_or_else(|| panic!("{at}: event for an unknown CQ"));
                    let cq = &mut self.cqs[i];
                    assert!(cq.events_due > 0, "{at}: CQ event nobody asked for");
                    cq.events_due -= 1;
                    cq.events_unacked += 1;
                }
                Err(e) => {
                    assert_eq!(e, Errno::EAGAIN, "{at}");
                    break;
                }
            }
        }
        loop {
            match self.ctx.get_async_event() {
                Ok(ev) => {
                    assert_eq!(
                        ev.event_type,
                        AsyncEventType::SrqLimitReached,
                        "{at}: {ev:?}"
                    );
                    let EventElement::Srq(h) = ev.element else {
                        panic!("{at}: {ev:?}");
                    };
                    let s = self.srqs.iter_mut().find(|s| s.h == h).expect("live SRQ");
                    assert!(
                        s.limit_events_due > 0,
                        "{at}: limit event the reference did not expect"
                    );
                    s.limit_events_due -= 1;
                    s.async_unacked += 1;
                }
                Err(e) => {
                    assert_eq!(e, Errno::EAGAIN, "{at}");
                    break;
                }
            }
        }
        // Everything the reference expects has arrived.
        for c in &self.cqs {
            assert_eq!(c.events_due, 0, "{at}: CQ {:#x} events missing", c.cqn);
        }
        for s in &self.srqs {
            assert_eq!(
                s.limit_events_due, 0,
                "{at}: SRQ {:#x} limit event missing",
                s.srqn
            );
        }
    }

    pub(super) fn query(&mut self, at: &str) {
        let Some(j) = self.pick_srq() else { return };
        let a = self.ctx.query_srq(self.srqs[j].h).unwrap();
        assert_eq!(a.srq_limit, self.srqs[j].limit, "{at}: query_srq limit");
        assert_eq!(a.max_wr, self.srqs[j].cap, "{at}");
    }

    pub(super) fn ack(&mut self, at: &str) {
        if let Some(i) = self.pick_cq() {
            let n = self.cqs[i].events_unacked;
            if n > 0 {
                self.ctx.ack_cq_events(self.cqs[i].h, n).unwrap();
                self.cqs[i].events_unacked = 0;
                assert_eq!(
                    self.ctx.ack_cq_events(self.cqs[i].h, 1),
                    Err(Errno::EINVAL),
                    "{at}"
                );
            }
        }
        if let Some(j) = self.pick_srq() {
            let s = &mut self.srqs[j];
            for _ in 0..s.async_unacked {
                let ev = mlx5_driver::verbs::AsyncEvent {
                    event_type: AsyncEventType::SrqLimitReached,
                    element: EventElement::Srq(s.h),
                    detail: mlx5_driver::verbs::AsyncEventDetail::None,
                };
                self.ctx.ack_async_event(&ev).unwrap();
            }
            s.async_unacked = 0;
        }
    }
}
