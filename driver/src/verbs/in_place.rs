//! A verbs context built where it lives (a `static` on bare metal), like
//! [`Hca::new_down`]: [`Verbs::new_down`] is a `const fn`,
//! [`Verbs::open_in_place`] brings the device up through `&mut self`, and
//! [`Verbs::close_in_place`] closes it without moving it.

use mlx5_hal::Hal;

use super::numap::NumMap;
use super::poll::QpRoute;
use super::table::{Key, Table};
use super::{Errno, Verbs, VerbsStats};
use crate::hca::{Hca, HcaConfig};
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
    /// A context on an HCA that is down ([`Hca::new_down`]), with no
    /// object: usable in a `static` initialiser. Open it with
    /// [`Verbs::open_in_place`].
    pub const fn new_down(hca: Hca<H, O>) -> Self {
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
            stats: VerbsStats {
                unmatched_cqes: 0,
                unroutable_events: 0,
                events_lost: 0,
            },
        }
    }

    /// Bring the device of a context from [`Verbs::new_down`] up, in place
    /// ([`Hca::bring_up_in_place`]: once per context; a second call is
    /// `EBUSY`).
    pub fn open_in_place(&mut self, hal: H, cfg: HcaConfig) -> Result<(), Errno> {
        self.hca.bring_up_in_place(hal, cfg).map_err(Errno::from)
    }
}
