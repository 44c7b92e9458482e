//! A fixed-capacity map from a firmware object number (QPN, SRQN) to what
//! a CQE needs of the object (its table key, and for a QP its receive
//! route), so a CQE finds its QP or SRQ in a probe or two whatever the
//! number of objects, as rdma-core's `qp_table` does.
//!
//! Open addressing with linear probing over `2·N` entries for at most `N`
//! objects (load ≤ ½), multiplicative hashing, deletion by backward shift
//! (no tombstones, so lookups never slow down with churn). The `2·N`
//! entries are two arrays of `N`: stable Rust cannot size one array `2·N`.

const EMPTY: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Entry<V> {
    num: u32,
    val: V,
}

pub(crate) struct NumMap<V: Copy, const N: usize> {
    lo: [Entry<V>; N],
    hi: [Entry<V>; N],
    len: usize,
}

impl<V: Copy, const N: usize> NumMap<V, N> {
    /// An empty map; `fill` only pads the free entries (a free entry's
    /// value is never read).
    pub const fn new(fill: V) -> Self {
        let free = Entry {
            num: EMPTY,
            val: fill,
        };
        NumMap {
            lo: [free; N],
            hi: [free; N],
            len: 0,
        }
    }

    #[inline(always)]
    fn slots(&self) -> usize {
        2 * N
    }

    #[inline(always)]
    fn at(&self, i: usize) -> &Entry<V> {
        if i < N {
            &self.lo[i]
        } else {
            &self.hi[i - N]
        }
    }

    #[inline(always)]
    fn at_mut(&mut self, i: usize) -> &mut Entry<V> {
        if i < N {
            &mut self.lo[i]
        } else {
            &mut self.hi[i - N]
        }
    }

    /// Home slot of `num`: Fibonacci hashing scaled onto `0..2N` without
    /// a division.
    #[inline(always)]
    fn home(&self, num: u32) -> usize {
        let h = num.wrapping_mul(0x9e37_79b1) as u64;
        ((h * self.slots() as u64) >> 32) as usize
    }

    #[inline(always)]
    fn next(&self, i: usize) -> usize {
        if i + 1 == self.slots() {
            0
        } else {
            i + 1
        }
    }

    /// The value stored for `num`.
    #[inline]
    pub fn get(&self, num: u32) -> Option<V> {
        if N == 0 || num == EMPTY {
            return None;
        }
        let mut i = self.home(num);
        loop {
            let e = self.at(i);
            if e.num == num {
                return Some(e.val);
            }
            if e.num == EMPTY {
                return None;
            }
            i = self.next(i);
        }
    }

    /// Store `num → val` (replacing an entry for `num`); `false` when `N`
    /// numbers are already stored.
    pub fn insert(&mut self, num: u32, val: V) -> bool {
        if N == 0 || num == EMPTY {
            return false;
        }
        let mut i = self.home(num);
        loop {
            let n = self.at(i).num;
            if n == num {
                self.at_mut(i).val = val;
                return true;
            }
            if n == EMPTY {
                if self.len >= N {
                    return false;
                }
                *self.at_mut(i) = Entry { num, val };
                self.len += 1;
                return true;
            }
            i = self.next(i);
        }
    }

    /// Forget `num`; the entries after it in its probe run move back so
    /// every lookup still ends at an empty slot.
    pub fn remove(&mut self, num: u32) {
        if N == 0 || num == EMPTY {
            return;
        }
        let mut i = self.home(num);
        loop {
            let n = self.at(i).num;
            if n == EMPTY {
                return;
            }
            if n == num {
                break;
            }
            i = self.next(i);
        }
        let mut hole = i;
        let mut j = self.next(i);
        loop {
            let e = *self.at(j);
            if e.num == EMPTY {
                break;
            }
            // `e` may fill the hole unless its home lies cyclically in
            // (hole, j]: then it would become unreachable.
            let home = self.home(e.num);
            let stays = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !stays {
                *self.at_mut(hole) = e;
                hole = j;
            }
            j = self.next(j);
        }
        // The number alone marks the entry free.
        self.at_mut(hole).num = EMPTY;
        self.len -= 1;
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use crate::verbs::table::Key;
    use std::collections::HashMap;

    const NO_KEY: Key = Key { index: 0, gen: 0 };

    fn key(index: u16) -> Key {
        Key { index, gen: 7 }
    }

    #[test]
    fn behaves_like_a_hash_map_through_churn() {
        let mut m: NumMap<Key, 16> = NumMap::new(NO_KEY);
        let mut model: HashMap<u32, u16> = HashMap::new();
        // A deterministic walk of inserts and removes over numbers that
        // collide often (a small range, consecutive QPNs).
        let mut x = 0x1234_5678u32;
        // Miri runs this ~10^4 times slower: a shorter walk still churns
        // the table through every slot several times.
        let steps = if cfg!(miri) { 400 } else { 20_000u32 };
        for step in 0..steps {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let num = 0x200 + (x % 40);
            if x & 0x100 != 0 && model.len() < 16 {
                assert!(m.insert(num, key(step as u16)));
                model.insert(num, step as u16);
            } else {
                m.remove(num);
                model.remove(&num);
            }
            for probe in 0x1f0..0x240 {
                assert_eq!(
                    m.get(probe),
                    model.get(&probe).map(|&i| key(i)),
                    "step {step} number {probe:#x}"
                );
            }
        }
    }

    #[test]
    fn refuses_beyond_capacity_and_never_stores_the_sentinel() {
        let mut m: NumMap<Key, 2> = NumMap::new(NO_KEY);
        assert!(m.insert(1, key(1)) && m.insert(2, key(2)));
        assert!(!m.insert(3, key(3)), "full");
        assert!(m.insert(2, key(9)), "replacing is not growing");
        assert_eq!(m.get(2), Some(key(9)));
        assert!(!m.insert(u32::MAX, key(4)));
        assert_eq!(m.get(u32::MAX), None);
        m.remove(1);
        assert!(m.insert(3, key(3)));
        let empty: NumMap<Key, 0> = NumMap::new(NO_KEY);
        assert_eq!(empty.get(5), None);
    }
}
