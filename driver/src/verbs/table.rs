//! A fixed-capacity object table with generation-checked handles: a handle
//! to a slot that was freed (and maybe reused) no longer matches, so a stale
//! handle is refused instead of reaching another object.

/// Index and generation of a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    pub index: u16,
    pub gen: u32,
}

impl Key {
    /// A placeholder key (what free map entries hold; never looked up).
    pub const NONE: Key = Key { index: 0, gen: 0 };
}

struct Slot<T> {
    gen: u32,
    item: Option<T>,
}

pub(crate) struct Table<T, const N: usize> {
    slots: [Slot<T>; N],
    len: usize,
}

impl<T, const N: usize> Table<T, N> {
    const FITS: () = assert!(N <= u16::MAX as usize, "table index is 16 bits");

    pub const fn new() -> Self {
        #[allow(clippy::let_unit_value)]
        let () = Self::FITS;
        Table {
            slots: [const { Slot { gen: 0, item: None } }; N],
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Store `item` in a free slot; hands it back when the table is full.
    pub fn insert(&mut self, item: T) -> Result<Key, T> {
        match self
            .slots
            .iter_mut()
            .enumerate()
            .find(|(_, s)| s.item.is_none())
        {
            Some((i, slot)) => {
                slot.item = Some(item);
                self.len += 1;
                Ok(Key {
                    index: i as u16,
                    gen: slot.gen,
                })
            }
            None => Err(item),
        }
    }

    #[inline]
    pub fn get(&self, k: Key) -> Option<&T> {
        let s = self.slots.get(k.index as usize)?;
        if s.gen == k.gen {
            s.item.as_ref()
        } else {
            None
        }
    }

    #[inline]
    pub fn get_mut(&mut self, k: Key) -> Option<&mut T> {
        let s = self.slots.get_mut(k.index as usize)?;
        if s.gen == k.gen {
            s.item.as_mut()
        } else {
            None
        }
    }

    /// Two live items of distinct slots at once (`None` when either key is
    /// stale or both name one slot).
    pub fn get2_mut(&mut self, a: Key, b: Key) -> Option<(&mut T, &mut T)> {
        let (i, j) = (a.index as usize, b.index as usize);
        if i == j || i >= N || j >= N {
            return None;
        }
        let (first, second) = if i < j {
            let (l, r) = self.slots.split_at_mut(j);
            (&mut l[i], &mut r[0])
        } else {
            let (l, r) = self.slots.split_at_mut(i);
            (&mut r[0], &mut l[j])
        };
        if first.gen != a.gen || second.gen != b.gen {
            return None;
        }
        match (first.item.as_mut(), second.item.as_mut()) {
            (Some(x), Some(y)) => Some((x, y)),
            _ => None,
        }
    }

    /// Take the item out; the slot's generation moves on so `k` goes stale.
    pub fn remove(&mut self, k: Key) -> Option<T> {
        let s = self.slots.get_mut(k.index as usize)?;
        if s.gen != k.gen {
            return None;
        }
        let item = s.item.take()?;
        s.gen = s.gen.wrapping_add(1);
        self.len -= 1;
        Some(item)
    }

    /// Put an item taken with [`Table::take`] back under the same key.
    pub fn restore(&mut self, k: Key, item: T) {
        let s = &mut self.slots[k.index as usize];
        debug_assert!(s.item.is_none() && s.gen == k.gen);
        s.item = Some(item);
        self.len += 1;
    }

    /// Take the item out without retiring the key (to hand it to a call
    /// that may give it back, then [`Table::restore`] or [`Table::retire`]).
    pub fn take(&mut self, k: Key) -> Option<T> {
        let s = self.slots.get_mut(k.index as usize)?;
        if s.gen != k.gen {
            return None;
        }
        let item = s.item.take()?;
        self.len -= 1;
        Some(item)
    }

    /// Retire a key whose item was taken for good.
    pub fn retire(&mut self, k: Key) {
        let s = &mut self.slots[k.index as usize];
        if s.gen == k.gen && s.item.is_none() {
            s.gen = s.gen.wrapping_add(1);
        }
    }

    /// The first live item matching `f`, with its key.
    pub fn find_mut(&mut self, mut f: impl FnMut(&T) -> bool) -> Option<(Key, &mut T)> {
        self.slots.iter_mut().enumerate().find_map(|(i, s)| {
            let gen = s.gen;
            match s.item.as_mut() {
                Some(t) if f(t) => Some((
                    Key {
                        index: i as u16,
                        gen,
                    },
                    t,
                )),
                _ => None,
            }
        })
    }

    /// Every live item with its key.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (Key, &mut T)> {
        self.slots.iter_mut().enumerate().filter_map(|(i, s)| {
            let gen = s.gen;
            s.item.as_mut().map(|t| {
                (
                    Key {
                        index: i as u16,
                        gen,
                    },
                    t,
                )
            })
        })
    }

    /// Any live key.
    pub fn any_key(&self) -> Option<Key> {
        self.slots.iter().enumerate().find_map(|(i, s)| {
            s.item.as_ref().map(|_| Key {
                index: i as u16,
                gen: s.gen,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_keys_miss_and_full_tables_refuse() {
        let mut t: Table<u32, 2> = Table::new();
        let a = t.insert(1).unwrap();
        let b = t.insert(2).unwrap();
        assert_eq!(t.insert(3), Err(3));
        assert_eq!(t.remove(a), Some(1));
        assert_eq!(t.get(a), None, "stale after remove");
        let c = t.insert(4).unwrap();
        assert_eq!(c.index, a.index, "slot reused");
        assert_ne!(c.gen, a.gen);
        assert_eq!(t.get(a), None, "the old key never reaches the new item");
        assert_eq!(t.get(c), Some(&4));
        assert_eq!(t.remove(a), None);
        let taken = t.take(b).unwrap();
        assert_eq!(t.get(b), None);
        t.restore(b, taken);
        assert_eq!(t.get(b), Some(&2), "restored under the same key");
        assert_eq!(t.take(b), Some(2));
        t.retire(b);
        assert_eq!(t.len(), 1);
        let d = t.insert(5).unwrap();
        assert_eq!(d.index, b.index);
        assert_eq!(t.get(b), None);
    }

    #[test]
    fn two_items_at_once_in_either_order() {
        let mut t: Table<u32, 3> = Table::new();
        let a = t.insert(1).unwrap();
        let b = t.insert(2).unwrap();
        let (x, y) = t.get2_mut(b, a).unwrap();
        (*x, *y) = (20, 10);
        assert_eq!((t.get(a), t.get(b)), (Some(&10), Some(&20)));
        assert!(t.get2_mut(a, a).is_none(), "one slot twice");
        t.remove(b);
        assert!(t.get2_mut(a, b).is_none(), "stale");
    }
}
