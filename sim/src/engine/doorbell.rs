//! The send doorbell's value checked against what it names. Linux
//! (`mlx5r_ring_db`, `drivers/infiniband/hw/mlx5/wr.c`) and rdma-core
//! (`post_send_db`, `providers/mlx5/qp.c`) store the WQEs, then the doorbell
//! record's send counter, then write the first 8 bytes of the *last* WQE's
//! control segment: when the write arrives, that WQE ends at the record's
//! counter and its first 8 bytes in the ring are the doorbell's value. A
//! doorbell that names another WQE, or carries a control word the ring no
//! longer holds (a stale word), is recorded as [`Violation::SendDoorbell`];
//! the model still executes up to the doorbell record (`docs/fidelity.md`
//! §14.5 says why).
//!
//! The check runs when the write *arrives* (before the threaded mode queues
//! it): a device that processes a doorbell later legitimately finds more
//! WQEs posted, or the named one already completed and its slot reused.

use mlx5_regs::consts::wqe as w;
use mlx5_regs::doorbell as db;
use mlx5_regs::layouts::wqe_ctrl_seg as ctrl;

use crate::state::State;
use crate::Violation;

impl State {
    /// An 8-byte MMIO write at BAR0 `offset` as it arrives: when it is a send
    /// doorbell (the start of a BlueFlame register half of a UAR page) for a
    /// QP of that UAR with a send queue, outside RESET, check its value. The
    /// other refusals are the doorbell's own (`send_doorbell`).
    pub(crate) fn check_send_doorbell(&mut self, offset: usize, value: u64) {
        let page = (offset / db::UAR_PAGE_SIZE) as u32;
        let off = offset % db::UAR_PAGE_SIZE;
        let half = (1usize << self.caps.log_bf_reg_size) / 2;
        let end = db::bf_reg_offset(db::BF_REGS_PER_UAR, self.caps.log_bf_reg_size);
        if !self.objects.uars.contains(&page)
            || !(db::UAR_BF_OFFSET..end.min(db::UAR_PAGE_SIZE)).contains(&off)
            || half == 0
            || !(off - db::UAR_BF_OFFSET).is_multiple_of(half)
        {
            return;
        }
        let qpn = ((value as u32) >> 8) & 0x00ff_ffff;
        let Some(q) = self.objects.qps.get(&qpn) else {
            return;
        };
        if q.uar != page || q.no_sq || q.state == crate::qp::QpState::Reset {
            return;
        }
        let (dbr, ci, ring) = (q.dbr, q.sq_ci, q.sq_size());
        let mut counter = [0u8; 4];
        if self.dma.read(dbr + 4, &mut counter).is_none() {
            return;
        }
        let pc = u32::from_be_bytes(counter) as u16;
        if pc.wrapping_sub(ci) as u32 > ring {
            return;
        }
        let word = value.to_be_bytes();
        let index = u16::from_be_bytes([word[1], word[2]]);
        // Read without recording a fault: the execution reports it.
        let Some((iova, _)) =
            q.sq.as_ref()
                .and_then(|b| b.at(((index as u32) & (ring - 1)) as u64 * w::SEND_WQE_BB as u64))
        else {
            return;
        };
        let mut first = [0u8; 16];
        if self.dma.read(iova, &mut first).is_none() {
            return;
        }
        let why = if first[..8] != word {
            Some(format!(
                "the ring holds {:#018x} there (a stale control word)",
                u64::from_be_bytes(first[..8].try_into().unwrap_or_default())
            ))
        } else {
            let ds = ctrl::ds.get(&first) as u16;
            let wqebbs = (ds * 16).div_ceil(w::SEND_WQE_BB as u16);
            (index.wrapping_add(wqebbs) != pc).then(|| {
                format!(
                    "that WQE ({wqebbs} WQEBBs) does not end at the doorbell record's send counter {pc:#x} (not the last WQE posted)"
                )
            })
        };
        if let Some(why) = why {
            self.records
                .violations
                .push(Violation::SendDoorbell(format!(
                    "QP {qpn:#x}: doorbell {value:#018x} names WQE {index:#x}, but {why}"
                )));
        }
    }
}
