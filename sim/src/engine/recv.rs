//! The receive side shared by the traffic engine and the wire-level side
//! door (`Traffic::deliver`): taking the head WQE of an SRQ/RMP in free-list
//! order and planning the scatter of a message through its data segments
//! (linked-list SRQ WQEs: Linux `mlx5_ib_post_srq_recv`,
//! `drivers/infiniband/hw/mlx5/srq.c`; keys: `mkey.rs`).

use mlx5_regs::consts::ctx;
use mlx5_regs::layouts::{srq_next_seg, wqe_data_seg};

use crate::mkey::{Access, KeyError};
use crate::state::State;

/// Why a scatter was refused (nothing was written).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScatterError {
    /// The message is longer than the WQE's scatter list (local length).
    Length,
    /// A key is unknown, of another PD, lacks `lw`, or a range is outside
    /// the key or DMA memory (local protection).
    Protection,
}

impl State {
    /// The SRQ/RMP is usable (not in error).
    pub(crate) fn srq_good(&self, srqn: u32) -> bool {
        self.objects.srqs.get(&srqn).is_some_and(|s| {
            if s.rmp {
                s.state == ctx::RMP_STATE_RDY
            } else {
                s.state == ctx::SRQ_STATE_GOOD
            }
        })
    }

    /// WQEs posted and not consumed (doorbell-record counter minus the
    /// consumed count); an unreadable doorbell record counts as none.
    pub(crate) fn srq_available(&mut self, srqn: u32) -> u16 {
        let Some(s) = self.objects.srqs.get(&srqn) else {
            return 0;
        };
        let (dbr, consumed) = (s.dbr, s.consumed);
        self.rd_be32(dbr, &|| format!("SRQ doorbell record read srqn {srqn:#x}"))
            .map(|v| (v as u16).wrapping_sub(consumed))
            .unwrap_or(0)
    }

    /// Consume the WQE the device is positioned on: returns its index and
    /// its bytes. Its next pointer is read now, at consumption (once
    /// consumed the driver may complete it out of order, make it the
    /// free-list tail and rewrite that pointer). `Err` = SRQ catastrophe
    /// (the caller raises it). The caller checked availability.
    pub(crate) fn srq_take(&mut self, srqn: u32) -> Result<(u16, Vec<u8>), &'static str> {
        let s = self.objects.srqs.get(&srqn).ok_or("no such SRQ")?.clone();
        let stride = 1u64 << s.log_stride;
        let idx = s.next;
        if idx as u32 >= 1u32 << s.log_size {
            return Err("next_wqe_index beyond the SRQ size");
        }
        let Some((wiova, _)) = s.buf.at(idx as u64 * stride) else {
            return Err("WQE outside the page list");
        };
        let mut wqe = self.pool.zeroed(stride as usize);
        if self
            .rd(wiova, &mut wqe, &|| {
                format!("SRQ WQE read srqn {srqn:#x} index {idx}")
            })
            .is_err()
        {
            self.pool.give_bytes(wqe);
            return Err("WQE unreadable");
        }
        let sm = self.objects.srqs.get_mut(&srqn).expect("exists");
        sm.consumed = sm.consumed.wrapping_add(1);
        sm.next = srq_next_seg::next_wqe_index.get(&wqe[..16]);
        Ok((idx, wqe))
    }

    /// Plan the scatter of `len` bytes through the data segments `segs` of a
    /// receive WQE (an SRQ WQE after its 16-byte next segment, or a WQE of
    /// a QP's own ring), up to the terminator lkey 0x100 or the WQE end. Keys: the reserved lkey (identity), or a
    /// memory key of protection domain `pd` with `lw`. Returns the device
    /// ranges to write, in order; every range is checked against DMA memory
    /// first (a miss records an IOMMU fault), so a refused scatter writes
    /// nothing.
    pub(crate) fn plan_scatter(
        &mut self,
        data_segs: &[u8],
        pd: u32,
        len: u64,
        what: &dyn Fn() -> String,
    ) -> Result<Vec<(u64, u64)>, ScatterError> {
        // The data segments before the terminator (or all of them).
        let mut nsegs = 0;
        for seg in data_segs.chunks_exact(16) {
            let bc = wqe_data_seg::byte_count.get(seg);
            let lkey = wqe_data_seg::lkey.get(seg);
            // Terminator: byte count 0 with the invalid lkey 0x100, or with
            // the device's own terminate key when it offers one (Linux
            // `mlx5_ib_post_srq_recv`, rdma-core `mlx5_post_srq_recv`).
            if bc == 0 && lkey == ctx::INVALID_LKEY {
                self.stats.terminators_invalid_lkey += 1;
                break;
            }
            if bc == 0 && self.caps.terminate_scatter_list_mkey && lkey == self.term_mkey {
                self.stats.terminators_device_key += 1;
                break;
            }
            nsegs += 1;
        }
        let mut plan = self.pool.plan();
        let mut left = len;
        for seg in data_segs.chunks_exact(16).take(nsegs) {
            let bc = wqe_data_seg::byte_count.get(seg);
            let n = if bc & 0x7fff_ffff == 0 {
                1u64 << 31
            } else {
                (bc & 0x7fff_ffff) as u64
            };
            let (addr, lkey) = (wqe_data_seg::addr.get(seg), wqe_data_seg::lkey.get(seg));
            let used = n.min(left);
            // The reserved lkey is the identity; a memory key is checked even
            // when nothing of the message lands in its segment.
            let done = if lkey == self.resd_lkey {
                if used > 0 {
                    plan.push((addr, used));
                }
                Ok(())
            } else {
                self.key_translate_into(lkey, pd, addr, used, Access::LocalWrite, &mut plan)
            };
            if done.is_err() {
                self.pool.give_plan(plan);
                return Err(ScatterError::Protection);
            }
            left -= used;
        }
        if left > 0 {
            self.pool.give_plan(plan);
            return Err(ScatterError::Length);
        }
        if self.check_mapped(&plan, true, what).is_err() {
            self.pool.give_plan(plan);
            return Err(ScatterError::Protection);
        }
        Ok(plan)
    }

    /// WQEs posted to QP `qpn`'s own receive ring and not consumed
    /// (doorbell-record receive counter minus the consumer counter); an
    /// unreadable record, or one naming more than the ring, counts as none.
    pub(crate) fn rq_available(&mut self, qpn: u32) -> u16 {
        let Some((dbr, ci, size)) = self
            .objects
            .qps
            .get(&qpn)
            .and_then(|q| q.rq.as_ref().map(|r| (q.dbr, r.ci, 1u32 << r.log_size)))
        else {
            return 0;
        };
        let avail = self
            .rd_be32(dbr, &|| {
                format!("QP doorbell record read qpn {qpn:#x} (receive)")
            })
            .map(|v| (v as u16).wrapping_sub(ci))
            .unwrap_or(0);
        if avail as u32 > size {
            return 0;
        }
        avail
    }

    /// Consume the next WQE of QP `qpn`'s own receive ring (in order):
    /// its counter and its bytes. `Err` = the WQE is unreadable. The caller
    /// checked availability.
    pub(crate) fn rq_take(&mut self, qpn: u32) -> Result<(u16, Vec<u8>), &'static str> {
        let q = self.objects.qps.get(&qpn).ok_or("no such QP")?;
        let r = q.rq.as_ref().ok_or("no receive ring")?;
        let ci = r.ci;
        let slot = ci as u64 & ((1u64 << r.log_size) - 1);
        let stride = 1u64 << r.log_stride;
        let mut wqe = vec![0u8; stride as usize];
        let mut done = 0u64;
        // A WQE may cross a page boundary of the QP buffer.
        let mut parts = Vec::new();
        while done < stride {
            let (iova, n) = r
                .buf
                .at(slot * stride + done)
                .ok_or("WQE outside the page list")?;
            let n = n.min(stride - done);
            parts.push((iova, done as usize, n as usize));
            done += n;
        }
        for (iova, at, n) in parts {
            self.rd(iova, &mut wqe[at..at + n], &|| {
                format!("receive WQE read qpn {qpn:#x} counter {ci:#x}")
            })
            .map_err(|_| "WQE unreadable")?;
        }
        if let Some(r) = self.objects.qps.get_mut(&qpn).and_then(|q| q.rq.as_mut()) {
            r.ci = r.ci.wrapping_add(1);
        }
        Ok((ci, wqe))
    }

    /// Translate through memory key `key` (index and variant must match).
    pub(crate) fn key_translate(
        &self,
        key: u32,
        pd: u32,
        va: u64,
        len: u64,
        access: Access,
    ) -> Result<Vec<(u64, u64)>, KeyError> {
        let mut out = Vec::new();
        self.key_translate_into(key, pd, va, len, access, &mut out)?;
        Ok(out)
    }

    /// [`State::key_translate`], appending the ranges to `out`.
    pub(crate) fn key_translate_into(
        &self,
        key: u32,
        pd: u32,
        va: u64,
        len: u64,
        access: Access,
        out: &mut Vec<(u64, u64)>,
    ) -> Result<(), KeyError> {
        let k = self
            .objects
            .mkeys
            .get(&mlx5_regs::consts::mkey::index(key))
            .filter(|k| k.key == key)
            .ok_or(KeyError::NoKey)?;
        k.translate_into(pd, va, len, access, out)
    }

    /// Every range lies in DMA memory; the first that does not is recorded
    /// as an IOMMU fault.
    pub(crate) fn check_mapped(
        &mut self,
        plan: &[(u64, u64)],
        write: bool,
        what: &dyn Fn() -> String,
    ) -> Result<(), ()> {
        for &(iova, n) in plan {
            if !self.dma.mapped(iova, n as usize) {
                self.fault(iova, n as usize, write, what());
                return Err(());
            }
        }
        Ok(())
    }

    /// Write `data` along a checked plan.
    pub(crate) fn write_plan(
        &mut self,
        plan: &[(u64, u64)],
        data: &[u8],
        what: &dyn Fn() -> String,
    ) {
        let mut done = 0usize;
        for &(iova, n) in plan {
            let n = n as usize;
            // Checked by `check_mapped`; a failure here is recorded by `wr`.
            let _ = self.wr(iova, &data[done..done + n], what);
            done += n;
        }
    }
}
