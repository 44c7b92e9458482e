//! Removing a queue pair's completions from a CQ ring before they are
//! polled (Linux `__mlx5_ib_cq_clean`, `drivers/infiniband/hw/mlx5/cq.c`):
//! when a QP goes to RESET or is destroyed, its CQEs still in the ring must
//! not be read later, where they would be taken for completions of the
//! QP's next life (the send counters start again at 0) or of another QP
//! with the same number.
//!
//! The walk goes from the last software-owned CQE back to the consumer
//! index, dropping the selected CQEs and moving every kept one up by the
//! number dropped after it, so the kept ones stay in order and end next to
//! the producer; the consumer index then skips the freed entries. A moved
//! entry takes the owner bit of its new slot (the bit of that slot's pass),
//! everything else is copied whole (a 128-byte CQE carries data in its
//! first half). Entries at or beyond the producer, which the device may be
//! writing, are never touched.

use mlx5_hal::{barrier, Hal};

use super::{off, CqRing, Cqe, DoorbellRecord};

impl<H: Hal> CqRing<H> {
    /// Remove the unpolled CQEs `drop` selects, keep the others in order,
    /// and publish the consumer index. Returns how many were removed.
    pub fn remove_cqes(
        &mut self,
        dbr: &DoorbellRecord<H>,
        mut drop: impl FnMut(&Cqe) -> bool,
    ) -> usize {
        let ci = self.consumer_index;
        let nent = self.nent() as u32;
        let mut prod = ci;
        while prod.wrapping_sub(ci) < nent && self.sw_owned(prod, self.op_own(prod)) {
            prod = prod.wrapping_add(1);
        }
        // The bodies must not be read before their ownership bytes.
        barrier::dma_rmb();
        let stride = self.cqe_size.stride();
        let mask = nent - 1;
        let mut freed = 0u32;
        let mut entry = [0u8; 128];
        while prod != ci {
            prod = prod.wrapping_sub(1);
            let w = self.buf.window::<64>(self.base_of(prod));
            let op_own = w.read_u8::<{ off::OP_OWN }>();
            let cqe = Self::decode(&w, op_own);
            if drop(&cqe) {
                freed += 1;
            } else if freed > 0 {
                let dest = prod.wrapping_add(freed);
                let owner = self.op_own(dest) & 1;
                let from = self.base + (prod & mask) as usize * stride;
                let to = self.base + (dest & mask) as usize * stride;
                self.buf.read_bytes(from, &mut entry[..stride]);
                self.buf.write_bytes(to, &entry[..stride]);
                self.buf
                    .write_u8(self.base_of(dest) + off::OP_OWN, (op_own & !1) | owner);
            }
        }
        if freed > 0 {
            self.consumer_index = ci.wrapping_add(freed);
            // Every move lands before the device may reuse the freed slots.
            barrier::dma_wmb();
            self.update_doorbell(dbr);
        }
        freed as usize
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

    /// Device side: a RESP_SEND CQE of QP `qpn` at producer index `p`,
    /// `wqe` as its WQE counter; a 128-byte CQE's first half is filled
    /// with `wqe`'s low byte.
    fn produce(hal: &HostHal, ring: &CqRing<HostHal>, p: u32, qpn: u32, wqe: u16) {
        let stride = ring.cqe_size().stride();
        let slot = (p as usize) & (ring.nent() - 1);
        let start = ring.region().iova() + (slot * stride) as u64;
        let ptr = hal.host_ptr(start).unwrap();
        let mut e = [wqe as u8; 128];
        let c = &mut e[stride - 64..stride];
        c[0x38..0x3c].copy_from_slice(&qpn.to_be_bytes());
        c[0x3c..0x3e].copy_from_slice(&wqe.to_be_bytes());
        c[0x3f] = (CqeOpcode::RESP_SEND.0 << 4) | ((p >> ring.log_nent()) & 1) as u8;
        for (i, b) in e[..stride].iter().enumerate() {
            // SAFETY: `ptr` points at the slot's `stride` bytes inside a
            // live DMA region of the test platform.
            unsafe { ptr.add(i).write_volatile(*b) };
        }
    }

    fn drain(ring: &mut CqRing<HostHal>, dbr: &DoorbellRecord<HostHal>) -> Vec<(u32, u16)> {
        let mut out = [Cqe::EMPTY; 64];
        let n = ring.poll(dbr, &mut out);
        out[..n].iter().map(|c| (c.qpn, c.wqe_counter)).collect()
    }

    #[test]
    fn a_qps_cqes_go_and_the_others_keep_their_order_across_the_wrap() {
        for size in [CqeSize::B64, CqeSize::B128] {
            let hal = HostHal::new(0x1000);
            let mut ring = CqRing::new(&hal, 3, size).unwrap();
            let dbr = DoorbellRecord::new(&hal).unwrap();
            // Consume 5 so the unpolled ones wrap the 8-entry ring.
            for p in 0..5 {
                produce(&hal, &ring, p, 1, p as u16);
            }
            assert_eq!(drain(&mut ring, &dbr).len(), 5);
            // Indices 5..12: QPs 7, 9, 7, 9, 9, 7, 9; 12 is not written.
            let qps = [7, 9, 7, 9, 9, 7, 9];
            for (i, q) in qps.iter().enumerate() {
                produce(&hal, &ring, 5 + i as u32, *q, 100 + i as u16);
            }
            let removed = ring.remove_cqes(&dbr, |c| c.qpn == 7);
            assert_eq!(removed, 3, "{size:?}");
            assert_eq!(ring.consumer_index(), 8);
            assert_eq!(dbr.ci(), 8, "the consumer index is published");
            assert_eq!(ring.pending(), 4);
            // The kept ones, in order, whole (the first half of a 128-byte
            // CQE moved with it).
            let stride = size.stride();
            for (k, wqe) in [101u16, 103, 104, 106].iter().enumerate() {
                let slot = (8 + k) & 7;
                assert_eq!(ring.region().read_u8(slot * stride), *wqe as u8, "{size:?}");
            }
            assert_eq!(
                drain(&mut ring, &dbr),
                [(9, 101), (9, 103), (9, 104), (9, 106)]
            );
            // The device goes on at index 12 (pass 1) as if nothing moved.
            produce(&hal, &ring, 12, 9, 200);
            assert_eq!(drain(&mut ring, &dbr), [(9, 200)]);
        }
    }

    #[test]
    fn nothing_selected_changes_nothing() {
        let hal = HostHal::new(0x1000);
        let mut ring = CqRing::new(&hal, 2, CqeSize::B64).unwrap();
        let dbr = DoorbellRecord::new(&hal).unwrap();
        for p in 0..4 {
            produce(&hal, &ring, p, 3, p as u16);
        }
        assert_eq!(ring.remove_cqes(&dbr, |c| c.qpn == 4), 0);
        assert_eq!((ring.consumer_index(), dbr.ci()), (0, 0));
        assert_eq!(ring.remove_cqes(&dbr, |_| true), 4, "a full ring");
        assert_eq!(ring.pending(), 0);
        assert_eq!(dbr.ci(), 4);
    }
}
