//! The receive posts of a QP's own receive queue through the verbs
//! facade (`Verbs::post_recv`), for the `facade_post` groups of
//! `benches/facade.rs`, where they run beside `post_srq_recv` of the same
//! shape: a context with one CQ and one QP whose own ring holds 256
//! receives, and a writer that plays the device by storing the in-order
//! receive CQEs straight into the CQ (untimed, to empty the ring again).

use std::hint::black_box;

use mlx5_driver::unstable;
use mlx5_driver::unstable::cq::CqRing;
use mlx5_driver::verbs::{CqHandle, QpCap, QpHandle, QpInitAttr, RecvWr, Verbs, WorkCompletion};
use mlx5_driver::{Hca, HcaConfig};
use mlx5_sim::{Device, SimConfig, SimHal};

use crate::facade::{write_recv_cqes, Ctx};

/// A context with a CQ of `2^log_cq` entries and a QP with its own
/// receive queue, in RESET (receive CQEs name it).
pub struct OwnRqRig {
    /// The model (kept alive).
    pub dev: Device,
    /// The verbs context.
    pub ctx: Ctx,
    /// Send and receive CQ of the QP.
    pub cq: CqHandle,
    /// The QP.
    pub qp: QpHandle,
    /// Its number.
    pub qpn: u32,
    /// WQEs in its receive ring.
    pub wqe_cnt: u32,
    /// The WQE counter the next completion names.
    next_wqe: u32,
}

impl OwnRqRig {
    /// Bring up a model and create the objects: the receive ring holds
    /// `recv_wr` (rounded to a power of two) requests of `max_sge` scatter
    /// entries.
    pub fn new(log_cq: u8, recv_wr: u32, max_sge: u32) -> OwnRqRig {
        let dev = Device::new(SimConfig::default());
        let hca = Hca::bring_up(dev.hal(), HcaConfig::default()).expect("bring-up");
        let mut ctx: Ctx = Verbs::open(hca);
        let (cq, _) = ctx.create_cq((1u32 << log_cq) - 1).expect("create_cq");
        let (qp, cap) = ctx
            .create_qp(&QpInitAttr {
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: 16,
                    max_send_sge: 1,
                    max_recv_wr: recv_wr,
                    max_recv_sge: max_sge,
                    max_inline_data: 0,
                },
                sq_sig_all: false,
            })
            .expect("create_qp");
        OwnRqRig {
            qpn: ctx.qp_num(qp).expect("qp"),
            wqe_cnt: cap.max_recv_wr,
            next_wqe: 0,
            dev,
            ctx,
            cq,
            qp,
        }
    }

    fn cq_ring(&self) -> &CqRing<SimHal> {
        unstable::cq::ring(self.ctx.cq(self.cq).expect("cq"))
    }

    /// Post `wrs` through `post_recv`, `per_call` per call.
    #[inline(always)]
    pub fn post_chunks(&mut self, wrs: &[RecvWr<'_>], per_call: usize) {
        for chunk in wrs.chunks(per_call) {
            self.ctx.post_recv(self.qp, black_box(chunk)).unwrap();
        }
    }

    /// Play the device: `n` receive CQEs completing the ring's WQEs in
    /// order, then poll them all (untimed), checking their `wr_id`s are
    /// `0..n` and none was refused.
    pub fn complete_all(&mut self, n: usize, wc: &mut [WorkCompletion]) {
        let ci = self.ctx.cq(self.cq).expect("cq").consumer_index();
        // An own ring's CQEs carry SRQ number 0 and the WQE counter.
        write_recv_cqes(self.cq_ring(), ci, self.qpn, 0, self.next_wqe, 1 << 16, n);
        self.next_wqe = (self.next_wqe + n as u32) & 0xffff;
        let mut got = 0;
        while got < n {
            let k = self.ctx.poll_cq(self.cq, wc).unwrap();
            for (i, w) in wc[..k].iter().enumerate() {
                assert_eq!(w.wr_id, (got + i) as u64, "in order");
            }
            got += k;
        }
        assert_eq!(self.ctx.stats().unmatched_cqes, 0);
    }
}
