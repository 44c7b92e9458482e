//! What the hostile-peer tests (`tests/tests/mr_hostile.rs`: one card, and
//! two hosts on a wire) share: the attack plan and the memory accounting.
//!
//! A peer holding one region's rkey RDMA-WRITEs at random addresses across
//! the whole DMA space of the responder's device and around the region's
//! edges. Which bytes may change besides the region: the rings, doorbell
//! records, event queue and command mailboxes every refused write touches
//! (a requester error CQE, the responder's error event, the commands that
//! reset and reconnect the QPs). They are learned from a control run of the
//! same writes in which every write not wholly inside the region carries a
//! key of no region, so it cannot reach memory: whatever the control run
//! changes is bookkeeping, counted in 64-byte blocks (a CQE, an EQE, a WQE
//! basic block). The attack run, with the real rkey on every write, must
//! leave the hash of every other block unchanged. Rings keep moving between
//! the runs, so the control run must wrap each ring the refusals write
//! (small event queues, as `crate::config` makes them); a slot the control
//! run never reached shows up as a changed block.

use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeSet;
use std::hash::Hasher;

use crate::Rng;

/// Every DMA region of a device: (IOVA, bytes), in address order
/// (`Device::dma_snapshot`).
pub type Snapshot = Vec<(u64, Vec<u8>)>;

/// A 64-byte block of a snapshot: (region IOVA, block index).
pub type Block = (u64, usize);

/// The unit of bookkeeping: a CQE, an EQE, a WQE basic block.
pub const BLOCK: usize = 64;

/// Where the attacks go: `[lo, hi)` is the whole DMA space (and a page
/// around it), `[start, end)` the region, `region_len` its length.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    /// Lowest address tried.
    pub lo: u64,
    /// One past the highest address tried.
    pub hi: u64,
    /// First byte of the region.
    pub start: u64,
    /// One past its last byte.
    pub end: u64,
}

impl Target {
    /// The DMA space of `snap` with a page on either side, and the region.
    pub fn around(snap: &Snapshot, start: u64, end: u64) -> Target {
        let first = snap.first().expect("DMA regions");
        let last = snap.last().expect("DMA regions");
        Target {
            lo: first.0.saturating_sub(4096),
            hi: last.0 + last.1.len() as u64 + 4096,
            start,
            end,
        }
    }

    /// `[addr, addr + len)` lies wholly inside the region.
    pub fn inside(&self, addr: u64, len: u32) -> bool {
        addr >= self.start && addr + len as u64 <= self.end
    }

    /// Block `b` holds a byte of the region.
    fn touches_region(&self, (iova, i): Block) -> bool {
        let (a, z) = (iova + (i * BLOCK) as u64, iova + ((i + 1) * BLOCK) as u64);
        a < self.end && z > self.start
    }
}

/// `n` write attempts (remote address, length 1..=64): one in eight around
/// each edge of the region, one in eight inside it, the rest anywhere in
/// the DMA space.
pub fn attempts(rng: &mut Rng, n: usize, t: &Target) -> Vec<(u64, u32)> {
    (0..n)
        .map(|_| {
            let len = 1 + rng.below(64) as u32;
            let addr = match rng.below(8) {
                0 => t.start - 64 + rng.below(128),
                1 => t.end - 64 + rng.below(128),
                2 => t.start + rng.below(t.end - t.start - len as u64 + 1),
                _ => t.lo + rng.below(t.hi - t.lo),
            };
            (addr, len)
        })
        .collect()
}

fn same_layout(before: &Snapshot, after: &Snapshot) {
    assert_eq!(
        before.iter().map(|r| (r.0, r.1.len())).collect::<Vec<_>>(),
        after.iter().map(|r| (r.0, r.1.len())).collect::<Vec<_>>(),
        "the set of DMA regions changed during a phase"
    );
}

/// The blocks that differ between two snapshots of the same regions
/// (block-wise slice comparison: a memcmp per block).
pub fn changed_blocks(before: &Snapshot, after: &Snapshot) -> BTreeSet<Block> {
    same_layout(before, after);
    let mut out = BTreeSet::new();
    for ((iova, a), (_, b)) in before.iter().zip(after) {
        for (i, (x, y)) in a.chunks(BLOCK).zip(b.chunks(BLOCK)).enumerate() {
            if x != y {
                out.insert((*iova, i));
            }
        }
    }
    out
}

/// One hash of every block of `snap` outside the region and outside
/// `skip`, each with its address (so moved bytes change it too).
pub fn hash_outside(snap: &Snapshot, skip: &BTreeSet<Block>, t: &Target) -> u64 {
    let mut h = DefaultHasher::new();
    for (iova, bytes) in snap {
        for (i, b) in bytes.chunks(BLOCK).enumerate() {
            let block = (*iova, i);
            if !skip.contains(&block) && !t.touches_region(block) {
                h.write_u64(iova + (i * BLOCK) as u64);
                h.write(b);
            }
        }
    }
    h.finish()
}

/// Occurrences of `mark` inside `blocks` of `snap`.
pub fn marks_in(snap: &Snapshot, blocks: &BTreeSet<Block>, mark: &[u8]) -> usize {
    blocks
        .iter()
        .filter_map(|&(iova, i)| {
            let r = snap.iter().find(|r| r.0 == iova)?;
            let b = &r.1[i * BLOCK..((i + 1) * BLOCK).min(r.1.len())];
            Some(b.windows(mark.len()).filter(|w| *w == mark).count())
        })
        .sum()
}

/// Panic naming the first region with changed blocks outside the region
/// and `allowed` (called once the hashes differ).
pub fn explain_escape(
    what: &str,
    before: &Snapshot,
    after: &Snapshot,
    allowed: &BTreeSet<Block>,
    t: &Target,
) -> ! {
    let escaped: Vec<Block> = changed_blocks(before, after)
        .into_iter()
        .filter(|b| !allowed.contains(b) && !t.touches_region(*b))
        .collect();
    let Some(&(iova, _)) = escaped.first() else {
        panic!("{what}: the hash outside the region changed, yet no block differs");
    };
    let region = |s: &Snapshot| s.iter().find(|r| r.0 == iova).unwrap().1.clone();
    let (b, a) = (region(before), region(after));
    let blocks: Vec<usize> = escaped
        .iter()
        .filter(|c| c.0 == iova)
        .map(|c| c.1)
        .take(8)
        .collect();
    let i = blocks[0] * BLOCK;
    let z = (i + BLOCK).min(b.len());
    panic!(
        "{what}: {} blocks outside the region changed, first in the {}-byte region at {iova:#x}, \
         blocks {blocks:?}; first block {:x?} -> {:x?}; the region is [{:#x}, {:#x})",
        escaped.len(),
        b.len(),
        &b[i..z],
        &a[i..z],
        t.start,
        t.end
    );
}
