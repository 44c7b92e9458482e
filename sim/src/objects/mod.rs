//! The model's object table: every firmware object family of a function
//! (EQs, CQs, SRQs/RMPs, QPs, MKEYs, PDs, UARs, XRCDs, UMEMs) in one type,
//! with the allocation of their numbers, their lookup, and the one path that
//! forgets them all ([`Objects::clear`]). The rules that tie objects
//! together (what a destroy must refuse) are in `rules.rs`; the object
//! types of the queues in `queues.rs`. Linux mlx5_core keeps one table per
//! object family the same way (`drivers/net/ethernet/mellanox/mlx5/core/`
//! `cq.c`, `eq.c`, `qp.c`, `srq.c`).

use std::collections::{BTreeMap, BTreeSet};

use crate::mkey::Mkey;
use crate::qp::Qp;
use crate::umem::Umem;

mod queues;
mod rules;

pub(crate) use queues::{Arm, Cq, Eq, QBuf, Srq};

/// 24-bit object numbers (PRM: QPN, CQN, SRQN, PD, MKEY index, XRCD).
const M24: u32 = 0x00ff_ffff;

/// First EQ number handed out (not 0, so a driver assuming eqn 0 is caught).
const FIRST_EQN: u8 = 5;

/// First UAR index ALLOC_UAR hands out (the init segment spans pages 0-4).
pub(crate) const FIRST_UAR: u32 = 16;

/// Live firmware objects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ObjectCounts {
    /// Event queues.
    pub eqs: usize,
    /// Completion queues.
    pub cqs: usize,
    /// SRQs created with CREATE_SRQ (ISSI 0).
    pub srqs: usize,
    /// RMPs created with CREATE_RMP (ISSI 1).
    pub rmps: usize,
    /// Allocated UARs.
    pub uars: usize,
    /// Allocated protection domains.
    pub pds: usize,
    /// Queue pairs.
    pub qps: usize,
    /// Memory keys.
    pub mkeys: usize,
    /// XRC domains.
    pub xrcds: usize,
    /// Programmed RoCE GID table entries.
    pub gids: usize,
    /// UMEM objects (DevX user memory).
    pub umems: usize,
}

impl ObjectCounts {
    /// Sum of all objects.
    pub fn total(&self) -> usize {
        self.eqs
            + self.cqs
            + self.srqs
            + self.rmps
            + self.uars
            + self.pds
            + self.qps
            + self.mkeys
            + self.xrcds
            + self.gids
            + self.umems
    }
}

/// Every firmware object of the function, by number.
///
/// The tables are visible to the crate so the data path (doorbells, the
/// traffic engine) reaches an object in one lookup; creating numbers,
/// refusing destroys and forgetting everything go through the methods so
/// each rule is written once.
#[derive(Debug)]
pub(crate) struct Objects {
    /// Event queues by EQ number.
    pub eqs: BTreeMap<u8, Eq>,
    /// Completion queues by CQN.
    pub cqs: BTreeMap<u32, Cq>,
    /// SRQs (ISSI 0) and RMPs (ISSI 1) by number; `Srq::rmp` tells which.
    pub srqs: BTreeMap<u32, Srq>,
    /// Queue pairs by QPN.
    pub qps: BTreeMap<u32, Qp>,
    /// Memory keys by index (key >> 8).
    pub mkeys: BTreeMap<u32, Mkey>,
    /// UMEM objects (DevX user memory) by id.
    pub umems: BTreeMap<u32, Umem>,
    /// Allocated UAR pages.
    pub uars: BTreeSet<u32>,
    /// BlueFlame copies in progress, by the BAR0 offset of their buffer
    /// (`engine/blueflame.rs`).
    pub blueflame: BTreeMap<usize, crate::engine::BfCopy>,
    /// Allocated protection domains.
    pub pds: BTreeSet<u32>,
    /// Allocated XRC domains.
    pub xrcds: BTreeSet<u32>,
    /// Lowest CQ number handed out (seed-derived).
    cqn_base: u32,
    /// Lowest SRQ/RMP number handed out (seed-derived).
    srqn_base: u32,
    /// Lowest QP number handed out (seed-derived).
    qpn_base: u32,
    /// Lowest UMEM id handed out (seed-derived).
    umem_base: u32,
    /// Next PD to try (PDs, MKEYs and XRCDs are handed out round-robin).
    next_pd: u32,
    /// Next MKEY index to try.
    next_mkey: u32,
    /// Next XRCD to try.
    next_xrcd: u32,
}

impl Objects {
    /// An empty table whose number ranges derive from the seed hash `h`, so
    /// a driver that assumes fixed numbers is caught.
    pub fn new(h: u64) -> Objects {
        Objects {
            eqs: BTreeMap::new(),
            cqs: BTreeMap::new(),
            srqs: BTreeMap::new(),
            qps: BTreeMap::new(),
            mkeys: BTreeMap::new(),
            umems: BTreeMap::new(),
            uars: BTreeSet::new(),
            blueflame: BTreeMap::new(),
            pds: BTreeSet::new(),
            xrcds: BTreeSet::new(),
            cqn_base: 0x400 + ((h >> 8) & 0x3ff) as u32,
            srqn_base: 0x100 + ((h >> 20) & 0x3ff) as u32,
            qpn_base: 0x200 + ((h >> 40) & 0x3ff) as u32,
            umem_base: 0x10 + ((h >> 28) & 0xff) as u32,
            next_pd: 1 + (h & 0xff) as u32,
            next_mkey: 0x1000 + ((h >> 50) & 0xfff) as u32,
            next_xrcd: 0x10 + ((h >> 12) & 0xff) as u32,
        }
    }

    /// Forget every object: the one path TEARDOWN_HCA and a function reset
    /// share. The number cursors keep going, as firmware's do.
    pub fn clear(&mut self) {
        self.eqs.clear();
        self.cqs.clear();
        self.srqs.clear();
        self.qps.clear();
        self.mkeys.clear();
        self.umems.clear();
        self.uars.clear();
        self.blueflame.clear();
        self.pds.clear();
        self.xrcds.clear();
    }

    /// How many objects of each family are alive; `gids` comes from the
    /// port, which owns the GID table.
    pub fn counts(&self, gids: usize) -> ObjectCounts {
        ObjectCounts {
            eqs: self.eqs.len(),
            cqs: self.cqs.len(),
            srqs: self.srq_count(false),
            rmps: self.srq_count(true),
            uars: self.uars.len(),
            pds: self.pds.len(),
            qps: self.qps.len(),
            mkeys: self.mkeys.len(),
            xrcds: self.xrcds.len(),
            gids,
            umems: self.umems.len(),
        }
    }

    /// How many RMPs (`rmp` true) or SRQs (`rmp` false) exist.
    pub fn srq_count(&self, rmp: bool) -> usize {
        self.srqs.values().filter(|s| s.rmp == rmp).count()
    }

    // ------------------------------------------------------------ numbering

    /// The lowest number at or above `base` that `used` says is free (never
    /// 0). Firmware reuses the numbers of destroyed CQs, SRQs/RMPs, QPs and
    /// UMEMs; the model hands out the lowest free one so a destroy followed
    /// by a create gets the same number back (docs/fidelity.md §15).
    fn lowest_free(base: u32, used: impl Fn(u32) -> bool) -> u32 {
        let mut n = base.max(1);
        while used(n) {
            n = (n + 1) & M24;
            if n == 0 {
                n = 1;
            }
        }
        n
    }

    /// The next free number after `cursor` (round-robin, never 0), and the
    /// cursor moved past it.
    fn round_robin(cursor: &mut u32, used: impl Fn(u32) -> bool) -> u32 {
        while used(*cursor) || *cursor == 0 {
            *cursor = (*cursor + 1) & M24;
        }
        let n = *cursor;
        *cursor = (*cursor + 1) & M24;
        n
    }

    /// The number a new EQ gets: the lowest free one from 5; `None` when
    /// all 8-bit numbers are taken.
    pub fn free_eqn(&self) -> Option<u8> {
        (FIRST_EQN..=u8::MAX).find(|n| !self.eqs.contains_key(n))
    }

    /// The number a new CQ gets.
    pub fn free_cqn(&self) -> u32 {
        Self::lowest_free(self.cqn_base, |n| self.cqs.contains_key(&n))
    }

    /// The number a new SRQ or RMP gets.
    pub fn free_srqn(&self) -> u32 {
        Self::lowest_free(self.srqn_base, |n| self.srqs.contains_key(&n))
    }

    /// The number a new QP gets: never below `min` (QPs 0 and 1 are the
    /// special QPs).
    pub fn free_qpn(&self, min: u32) -> u32 {
        Self::lowest_free(self.qpn_base, |n| n < min || self.qps.contains_key(&n))
    }

    /// The id a new UMEM gets.
    pub fn free_umem_id(&self) -> u32 {
        Self::lowest_free(self.umem_base, |n| self.umems.contains_key(&n))
    }

    /// Allocate the lowest free UAR page from [`FIRST_UAR`] up to (not
    /// including) `max`; `None` when all are taken.
    pub fn alloc_uar(&mut self, max: u32) -> Option<u32> {
        let idx = (FIRST_UAR..max).find(|i| !self.uars.contains(i))?;
        self.uars.insert(idx);
        Some(idx)
    }

    /// Allocate a PD if fewer than `limit` exist.
    pub fn alloc_pd(&mut self, limit: u64) -> Option<u32> {
        if self.pds.len() as u64 >= limit {
            return None;
        }
        let pds = &self.pds;
        let pd = Self::round_robin(&mut self.next_pd, |n| pds.contains(&n));
        self.pds.insert(pd);
        Some(pd)
    }

    /// Allocate an XRCD if fewer than `limit` exist.
    pub fn alloc_xrcd(&mut self, limit: u64) -> Option<u32> {
        if self.xrcds.len() as u64 >= limit {
            return None;
        }
        let xrcds = &self.xrcds;
        let x = Self::round_robin(&mut self.next_xrcd, |n| xrcds.contains(&n));
        self.xrcds.insert(x);
        Some(x)
    }

    /// The index a new MKEY gets (the caller inserts it).
    pub fn next_mkey_index(&mut self) -> u32 {
        let mkeys = &self.mkeys;
        Self::round_robin(&mut self.next_mkey, |n| mkeys.contains_key(&n))
    }

    /// Where the CQ numbers start (hostile answers pick numbers far from it).
    pub fn cqn_base(&self) -> u32 {
        self.cqn_base
    }

    /// Where the SRQ/RMP numbers start.
    pub fn srqn_base(&self) -> u32 {
        self.srqn_base
    }

    /// The PD cursor (hostile answers pick a PD never handed out).
    pub fn pd_cursor(&self) -> u32 {
        self.next_pd
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowest_free_skips_used_numbers_and_zero_and_wraps_at_24_bits() {
        assert_eq!(Objects::lowest_free(0, |_| false), 1);
        assert_eq!(Objects::lowest_free(0x400, |n| n < 0x403), 0x403);
        assert_eq!(Objects::lowest_free(M24, |n| n == M24), 1);
    }

    #[test]
    fn round_robin_moves_past_what_it_hands_out_and_never_gives_0() {
        let mut cursor = M24;
        assert_eq!(Objects::round_robin(&mut cursor, |_| false), M24);
        assert_eq!(cursor, 0);
        assert_eq!(Objects::round_robin(&mut cursor, |n| n == 1), 2);
        assert_eq!(cursor, 3);
    }

    #[test]
    fn pds_stop_at_the_limit_and_clear_keeps_the_cursor() {
        let mut t = Objects::new(0);
        let a = t.alloc_pd(2).expect("first");
        let b = t.alloc_pd(2).expect("second");
        assert_eq!(b, a + 1);
        assert_eq!(t.alloc_pd(2), None);
        t.clear();
        assert_eq!(t.counts(0).total(), 0);
        assert_eq!(t.alloc_pd(2), Some(b + 1));
    }

    #[test]
    fn eqs_start_at_5_uars_stop_at_the_limit_and_a_freed_uar_is_unknown() {
        let mut t = Objects::new(0);
        assert_eq!(t.free_eqn(), Some(FIRST_EQN));
        assert_eq!(t.alloc_uar(FIRST_UAR + 1), Some(FIRST_UAR));
        assert_eq!(t.alloc_uar(FIRST_UAR + 1), None);
        assert!(t.dealloc_uar(FIRST_UAR).is_ok());
        let e = t.dealloc_uar(FIRST_UAR).expect_err("already freed");
        assert_eq!(e.syndrome, crate::syndrome::UAR_NOT_FOUND);
    }
}
