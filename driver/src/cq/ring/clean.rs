//! Removing the unpolled CQEs of one QP from a ring, after that QP was
//! reset or destroyed, as rdma-core does before it lets a QP go
//! (`__mlx5_cq_clean`, `providers/mlx5/cq.c`; Linux `__mlx5_ib_cq_clean`,
//! `drivers/infiniband/hw/mlx5/cq.c`).
//!
//! The walk finds the last software-owned entry from the consumer index,
//! then goes backwards: an entry to remove is counted, an entry to keep is
//! moved up by the number removed so far (its owner bit becomes that of its
//! new slot). Finally the consumer index moves past the removed entries, so
//! the kept ones are polled next, in their order. Entries the device writes
//! meanwhile lie beyond the walk and are untouched: the QP whose entries
//! are removed no longer produces any.

use mlx5_hal::{barrier, Hal};

use super::{off, CqRing, Cqe};

impl<H: Hal> CqRing<H> {
    /// Remove every unpolled CQE for which `remove` is true, keeping the
    /// others in order; returns how many were removed. The consumer index
    /// moves by that many and is not published (call
    /// [`CqRing::update_doorbell`]).
    pub fn remove_where(&mut self, mut remove: impl FnMut(&Cqe) -> bool) -> u32 {
        let ci = self.consumer_index;
        // At most `nent − 1` entries can be waiting (one is kept free).
        let limit = self.nent() as u32 - 1;
        let mut end = ci;
        while end.wrapping_sub(ci) < limit && self.sw_owned(end, self.op_own(end)) {
            end = end.wrapping_add(1);
        }
        if end == ci {
            return 0;
        }
        // The bodies must not be read before the ownership bytes.
        barrier::dma_rmb();
        let stride = self.cqe_size.stride();
        let mut removed = 0u32;
        let mut i = end;
        while i != ci {
            i = i.wrapping_sub(1);
            let at = self.base_of(i);
            let cqe = Self::decode(&self.buf.window::<64>(at), self.op_own(i));
            if remove(&cqe) {
                removed += 1;
            } else if removed > 0 {
                let dest = i.wrapping_add(removed);
                let owner = self.op_own(dest) & 1;
                let mut entry = [0u8; 128];
                let entry = &mut entry[..stride];
                // The whole entry (a 128-byte CQE's first half too).
                let src_start = at + 64 - stride;
                let dst_start = self.base_of(dest) + 64 - stride;
                self.buf.read_bytes(src_start, entry);
                self.buf.write_bytes(dst_start, entry);
                let own_at = self.base_of(dest) + off::OP_OWN;
                let op_own = self.buf.read_u8(own_at);
                self.buf.write_u8(own_at, (op_own & !1) | owner);
            }
        }
        self.consumer_index = ci.wrapping_add(removed);
        // The moved entries are written before the index that exposes them.
        barrier::dma_wmb();
        removed
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::super::{CqeSize, DoorbellRecord};
    use super::*;
    use mlx5_hal::host::HostHal;
    use mlx5_regs::CqeOpcode;
    use std::vec::Vec;

    /// Device side: a CQE at producer index `p` for `qpn`, `wqe` in the
    /// WQE counter.
    fn produce(ring: &CqRing<HostHal>, p: u32, qpn: u32, wqe: u16) {
        let stride = ring.cqe_size().stride();
        let slot = (p as usize) & (ring.nent() - 1);
        let at = ring.base_offset() + slot * stride + stride - 64;
        let mut cqe = [0u8; 64];
        cqe[0x38..0x3c].copy_from_slice(&qpn.to_be_bytes());
        cqe[0x3c..0x3e].copy_from_slice(&wqe.to_be_bytes());
        let owner = ((p >> ring.log_nent()) & 1) as u8;
        cqe[0x3f] = (CqeOpcode::REQ.0 << 4) | owner;
        ring.region().write_bytes(at, &cqe);
    }

    fn drain(ring: &mut CqRing<HostHal>, dbr: &DoorbellRecord<HostHal>) -> Vec<(u32, u16)> {
        let mut out = [Cqe::EMPTY; 64];
        let n = ring.poll(dbr, &mut out);
        out[..n].iter().map(|c| (c.qpn, c.wqe_counter)).collect()
    }

    #[test]
    fn the_entries_of_one_qp_go_and_the_others_keep_their_order() {
        for size in [CqeSize::B64, CqeSize::B128] {
            let hal = HostHal::new(0x20000);
            let mut ring = CqRing::new(&hal, 3, size).unwrap();
            let dbr = DoorbellRecord::new(&hal).unwrap();
            // Start mid-ring so the kept entries cross the wrap and the
            // owner bit changes for some of them.
            for p in 0..5 {
                produce(&ring, p, 9, p as u16);
            }
            assert_eq!(drain(&mut ring, &dbr).len(), 5);
            let qpns = [7, 8, 7, 7, 8, 9, 7];
            for (k, q) in qpns.iter().enumerate() {
                produce(&ring, 5 + k as u32, *q, 100 + k as u16);
            }
            let removed = ring.remove_where(|c| c.qpn == 7);
            assert_eq!(removed, 4, "{size:?}");
            assert_eq!(ring.consumer_index(), 9);
            assert_eq!(
                drain(&mut ring, &dbr),
                [(8, 101), (8, 104), (9, 105)],
                "{size:?}: kept in order"
            );
            assert_eq!(ring.remove_where(|_| true), 0, "empty: nothing to do");
            // The ring goes on: the next entries are read in place.
            produce(&ring, 12, 8, 1);
            assert_eq!(drain(&mut ring, &dbr), [(8, 1)]);
        }
    }
}
