//! Which armed CQs have had their completion event (docs/firmware.md §5,
//! §7): the driver's side of the CQ arm sequence number.
//!
//! Each arm doorbell carries a 2-bit sequence number, `arm_sn`. Firmware
//! raises one completion event per arm and remembers the number it fired
//! for; an arm that repeats that number afterwards is stale and ignored.
//! So `arm_sn` must go up by one for every completion event of the CQ:
//! Linux does it in the EQ handler (`core/eq.c` `mlx5_eq_comp_int`),
//! rdma-core when the event is read (`cq.c` `mlx5_cq_event`).
//!
//! Here the [`crate::Hca`] consumes the completion EQ, so it records the
//! event when it consumes the EQE, and [`crate::Hca::arm_cq`] applies it to
//! the CQ's sequence number before the next arm. The caller does nothing.
//! The record is one flag per CQ armed through the HCA, in a sorted table
//! of fixed capacity (no heap): `N` CQs can use completion events at once.

/// The fired flag, in the low byte of an entry; the cqn is above it.
const FIRED: u32 = 1;

/// CQs armed through the HCA, each with "its event came since the last
/// arm". Entries are `cqn << 8 | flags`, sorted (cqns are 24 bits).
pub(crate) struct ArmTable<const N: usize> {
    entries: heapless::Vec<u32, N>,
}

impl<const N: usize> ArmTable<N> {
    pub(crate) const fn new() -> Self {
        ArmTable {
            entries: heapless::Vec::new(),
        }
    }

    fn find(&self, cqn: u32) -> Result<usize, usize> {
        self.entries.binary_search_by_key(&cqn, |e| e >> 8)
    }

    /// The CQ is being armed: whether its previous arm's event came (the
    /// sequence number must go up), clearing the flag. A CQ armed for the
    /// first time is added; `None` when the table is full.
    pub(crate) fn arm(&mut self, cqn: u32) -> Option<bool> {
        match self.find(cqn) {
            Ok(i) => {
                let fired = self.entries[i] & FIRED != 0;
                self.entries[i] &= !FIRED;
                Some(fired)
            }
            Err(i) => {
                self.entries.insert(i, (cqn & 0x00ff_ffff) << 8).ok()?;
                Some(false)
            }
        }
    }

    /// A completion EQE named `cqn`. A CQ never armed through the HCA (or
    /// a number the device made up) is not recorded.
    pub(crate) fn fired(&mut self, cqn: u32) {
        if let Ok(i) = self.find(cqn) {
            self.entries[i] |= FIRED;
        }
    }

    /// The CQ was destroyed.
    pub(crate) fn remove(&mut self, cqn: u32) {
        if let Ok(i) = self.find(cqn) {
            self.entries.remove(i);
        }
    }

    /// CQs in the table.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::ArmTable;

    #[test]
    fn an_event_bumps_the_next_arm_once() {
        let mut t: ArmTable<4> = ArmTable::new();
        assert_eq!(t.arm(0x30), Some(false), "first arm");
        t.fired(0x30);
        t.fired(0x99); // never armed: ignored
        assert_eq!(t.arm(0x30), Some(true), "the event came");
        assert_eq!(t.arm(0x30), Some(false), "re-armed without an event");
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn full_table_refuses_new_cqs_only() {
        let mut t: ArmTable<2> = ArmTable::new();
        assert_eq!(t.arm(0x00ff_ffff), Some(false));
        assert_eq!(t.arm(7), Some(false));
        assert_eq!(t.arm(8), None, "full");
        t.fired(0x00ff_ffff);
        assert_eq!(t.arm(0x00ff_ffff), Some(true), "known CQs still work");
        t.remove(7);
        assert_eq!(t.arm(8), Some(false), "room again");
        t.fired(8);
        t.remove(8);
        assert_eq!(
            t.arm(8),
            Some(false),
            "a destroyed CQ's flag does not survive"
        );
    }
}
