//! BlueFlame: a driver may write a small WQE itself into the UAR's
//! BlueFlame buffer (write-combining) instead of only its first 8 bytes, so
//! the card need not read it from memory. Each BlueFlame register of
//! `2^log_bf_reg_size` bytes holds two buffers used alternately (rdma-core
//! `mlx5_bf_copy` and `post_send_db`, `providers/mlx5/qp.c`; Linux
//! `mlx5_ib_post_send` toggles `bf->offset` the same way).
//!
//! The model executes the WQE from memory when the first word (the
//! doorbell) arrives, as it does for a plain doorbell, and checks the copy
//! against a snapshot of the WQE taken then: every later word of the buffer
//! must arrive in order, up to the WQE's size rounded to 64 bytes, and equal
//! the WQE's bytes. A differing word, a word with no doorbell before it, or
//! a copy cut short by the next doorbell on the same buffer (a torn write)
//! is a [`Violation::BlueFlame`]. A plain doorbell (the first word only) is
//! not a copy and is never torn.

use mlx5_regs::consts::wqe as w;
use mlx5_regs::doorbell as db;

use crate::state::State;
use crate::Violation;

/// A BlueFlame copy in progress in one buffer.
#[derive(Debug, Clone)]
pub(crate) struct BfCopy {
    /// The QP and the WQE index its doorbell named.
    qpn: u32,
    index: u16,
    /// The WQE as memory held it when the doorbell arrived, padded to a
    /// whole number of WQEBBs.
    wqe: Vec<u8>,
    /// Bytes of the WQE the copy carries: its size rounded up to 64.
    len: usize,
    /// Offset in the buffer of the next word expected.
    next: usize,
}

impl State {
    /// Bytes of one BlueFlame buffer: half a register.
    fn bf_buf_size(&self) -> usize {
        (1usize << self.caps.log_bf_reg_size) / 2
    }

    /// An 8-byte write at `off` of UAR page `uar`, inside the BlueFlame
    /// registers: the doorbell at a buffer's start, a copied WQE word after.
    pub(crate) fn blueflame_write(&mut self, uar: u32, off: usize, value: u64) {
        let size = self.bf_buf_size();
        let rel = (off - db::UAR_BF_OFFSET) % size;
        let buffer = db::uar_page_offset(uar) + off - rel;
        if rel == 0 {
            if let Some(c) = self.objects.blueflame.remove(&buffer) {
                if c.next > 8 && c.next < c.len {
                    self.records.violations.push(Violation::BlueFlame(format!(
                        "torn BlueFlame write at {buffer:#x}: {} of {} bytes of QP {:#x} WQE {:#x} before the next doorbell",
                        c.next, c.len, c.qpn, c.index
                    )));
                }
                self.pool.give_bytes(c.wqe);
            }
            self.bf_doorbell(uar, off, buffer, value);
            return;
        }
        let Some(c) = self.objects.blueflame.get_mut(&buffer) else {
            self.records.violations.push(Violation::BlueFlame(format!(
                "BlueFlame word {value:#018x} at {buffer:#x}+{rel:#x} with no doorbell before it"
            )));
            return;
        };
        let why = if rel != c.next {
            Some(format!("at +{rel:#x}, expected +{:#x}", c.next))
        } else if rel >= c.len {
            Some(format!("beyond the WQE's {} bytes", c.len))
        } else {
            let mut b = [0u8; 8];
            b.copy_from_slice(&c.wqe[rel..rel + 8]);
            let want = u64::from_be_bytes(b);
            (want != value).then(|| format!("{value:#018x} where the WQE holds {want:#018x}"))
        };
        if let Some(why) = why {
            let (qpn, index) = (c.qpn, c.index);
            if let Some(c) = self.objects.blueflame.remove(&buffer) {
                self.pool.give_bytes(c.wqe);
            }
            self.records.violations.push(Violation::BlueFlame(format!(
                "BlueFlame copy of QP {qpn:#x} WQE {index:#x} at {buffer:#x}: word {why}"
            )));
            return;
        }
        c.next += 8;
        if c.next == c.len {
            if let Some(c) = self.objects.blueflame.remove(&buffer) {
                self.pool.give_bytes(c.wqe);
            }
            self.stats.blueflame_copies += 1;
        }
    }

    /// The doorbell word of a buffer: ring it, then expect the rest of the
    /// WQE it names (snapshotted now) if the driver copies it.
    fn bf_doorbell(&mut self, uar: u32, off: usize, buffer: usize, value: u64) {
        let qpn = ((value as u32) >> 8) & 0x00ff_ffff;
        let index = (value >> 40) as u16;
        let ds = (value & 0x3f) as usize;
        let len = (ds * w::SEND_WQE_DS).next_multiple_of(w::SEND_WQE_BB);
        let before = self.stats.dropped_doorbells;
        // Snapshot before executing: completion may let the driver reuse
        // the slots before the rest of the copy arrives (threaded mode).
        let mut wqe = self.pool.bytes();
        if len <= self.bf_buf_size() {
            for i in 0..len / w::SEND_WQE_BB {
                match self.read_wqebb(qpn, index.wrapping_add(i as u16)) {
                    Ok(bb) => wqe.extend_from_slice(&bb),
                    Err(()) => break,
                }
            }
        }
        self.send_doorbell(uar, off, value);
        if self.stats.dropped_doorbells == before && wqe.len() == len && len > 8 {
            self.objects.blueflame.insert(
                buffer,
                BfCopy {
                    qpn,
                    index,
                    wqe,
                    len,
                    next: 8,
                },
            );
        } else {
            self.pool.give_bytes(wqe);
        }
    }
}
