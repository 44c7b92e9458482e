//! Removing some unpolled CQEs from a ring while keeping the others in
//! order: what a QP going to RESET needs, so that CQEs it left behind are
//! never matched to work requests posted after the reset (Linux
//! `__mlx5_ib_cq_clean`, `drivers/infiniband/hw/mlx5/cq.c`; rdma-core
//! `__mlx5_cq_clean`, `providers/mlx5/cq.c`).

use mlx5_hal::{barrier, Hal};

use super::{off, CqRing, Cqe, CqeView, DoorbellRecord};

/// Largest CQE stride (128-byte CQEs).
const MAX_STRIDE: usize = 128;

impl<H: Hal> CqRing<H> {
    /// Remove every software-owned CQE from the consumer index on for which
    /// `remove` returns true (it sees each one once, newest first), and
    /// publish the new consumer index in `dbr`. Returns how many were
    /// removed.
    ///
    /// As Linux does: find the software-owned run from the consumer index
    /// (at most a ring), sweep it backwards moving each kept entry up by
    /// the number of removed entries above it (the whole entry, the owner
    /// bit of its new slot kept), then advance the consumer index by that
    /// number. The kept entries end where they were, in their order; the
    /// slots freed at the start are the device's again once the consumer
    /// index is published. The device writes only beyond the run and never
    /// reads CQEs, and `&mut self` keeps pollers out.
    pub fn remove_where(
        &mut self,
        dbr: &DoorbellRecord<H>,
        mut remove: impl FnMut(&Cqe) -> bool,
    ) -> u32 {
        let ci = self.consumer_index;
        let run = self.pending() as u32;
        // Bodies are read only after their owner bytes (docs/firmware.md §5).
        barrier::dma_rmb();
        let stride = self.cqe_size.stride();
        let mut removed = 0u32;
        for k in (0..run).rev() {
            let index = ci.wrapping_add(k);
            let at = self.base_of(index);
            let w = self.buf.window::<64>(at);
            let op_own = w.read_u8::<{ off::OP_OWN }>();
            let cqe = CqeView::new(w, op_own).decode();
            if remove(&cqe) {
                removed += 1;
            } else if removed > 0 {
                let dst = self.base_of(index.wrapping_add(removed));
                let owner = self.buf.read_u8(dst + off::OP_OWN) & 1;
                // Whole entries (both halves of a 128-byte CQE), from the
                // start of the slot.
                let (from, to) = (at + 64 - stride, dst + 64 - stride);
                let mut e = [0u8; MAX_STRIDE];
                self.buf.read_bytes(from, &mut e[..stride]);
                e[stride - 1] = (e[stride - 1] & !1) | owner;
                self.buf.write_bytes(to, &e[..stride]);
            }
        }
        if removed > 0 {
            self.set_ci(ci.wrapping_add(removed));
            // The moved entries are in place before the device may reuse
            // the freed slots.
            barrier::dma_wmb();
            dbr.set_ci(self.consumer_index);
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::super::CqeSize;
    use super::*;
    use mlx5_hal::host::HostHal;
    use mlx5_regs::CqeOpcode;
    use std::vec::Vec;

    /// Device side: a CQE of QP `qpn` with `wqe` at producer index `p`.
    fn produce(ring: &CqRing<HostHal>, p: u32, qpn: u32, wqe: u16) {
        let stride = ring.cqe_size().stride();
        let slot = (p as usize) & (ring.nent() - 1);
        let at = ring.base_offset() + slot * stride + stride - 64;
        let owner = ((p >> ring.log_nent()) & 1) as u8;
        let r = ring.region();
        r.write_be32(at + 0x38, qpn);
        r.write_be16(at + 0x3c, wqe);
        r.write_u8(at + 0x3f, (CqeOpcode::REQ.0 << 4) | owner);
    }

    fn drain(ring: &mut CqRing<HostHal>, dbr: &DoorbellRecord<HostHal>) -> Vec<(u32, u16)> {
        let mut out = [Cqe::EMPTY; 64];
        let n = ring.poll(dbr, &mut out);
        out[..n].iter().map(|c| (c.qpn, c.wqe_counter)).collect()
    }

    #[test]
    fn removes_one_qps_entries_and_keeps_the_rest_in_order_across_the_wrap() {
        for size in [CqeSize::B64, CqeSize::B128] {
            let hal = HostHal::new(0x1000);
            let mut ring = CqRing::new(&hal, 3, size).unwrap();
            let dbr = DoorbellRecord::new(&hal).unwrap();
            // Advance to running index 5 so the run wraps the ring end.
            for p in 0..5 {
                produce(&ring, p, 9, p as u16);
            }
            assert_eq!(drain(&mut ring, &dbr).len(), 5);
            // 7 entries: QPs 1 and 2 interleaved.
            let qps = [1, 2, 2, 1, 2, 1, 2];
            for (k, &q) in qps.iter().enumerate() {
                produce(&ring, 5 + k as u32, q, 100 + k as u16);
            }
            let mut seen = Vec::new();
            let n = ring.remove_where(&dbr, |c| {
                seen.push(c.wqe_counter);
                c.qpn == 2
            });
            assert_eq!(n, 4);
            assert_eq!(seen, [106, 105, 104, 103, 102, 101, 100], "newest first");
            assert_eq!((ring.consumer_index(), dbr.ci()), (9, 9));
            assert_eq!(ring.pending(), 3);
            assert_eq!(drain(&mut ring, &dbr), [(1, 100), (1, 103), (1, 105)]);
            // The freed slots are the device's again: the ring keeps working
            // through the next pass.
            for p in 12..19 {
                produce(&ring, p, 3, p as u16);
            }
            assert_eq!(drain(&mut ring, &dbr).len(), 7);
            assert_eq!(ring.remove_where(&dbr, |_| true), 0, "nothing left");
        }
    }
}
