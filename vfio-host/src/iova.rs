//! The IOVA allocator: which device addresses are free.
//!
//! Pure bookkeeping over half-open `u64` intervals, with no I/O, no `std` and
//! no `unsafe` (it only needs `alloc::vec::Vec`), so it is tested exhaustively
//! on the host. The platform seeds one instance with the IOMMU's valid IOVA
//! ranges clipped to the device's DMA limit, and uses a second kind of instance
//! to carve 4 KiB pieces out of each 2 MiB huge-page chunk (offsets
//! `0..2 MiB`).
//!
//! Policy: first fit, lowest address first, with the start aligned as asked.
//! Freed intervals are merged with their free neighbours at once, so a full
//! free restores one interval per seed range and large allocations stay
//! possible. Freeing anything that is not wholly allocated (a double free,
//! an interval outside the managed space) is refused and changes nothing.

use alloc::vec::Vec;
use core::fmt;

/// A half-open interval `start..end` of device addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct IovaRange {
    /// First address in the range.
    pub start: u64,
    /// First address after the range.
    pub end: u64,
}

impl IovaRange {
    /// `start..end`.
    pub const fn new(start: u64, end: u64) -> Self {
        IovaRange { start, end }
    }

    /// From an inclusive `first..=last` pair, as the kernel reports them
    /// (`struct vfio_iova_range`). A range ending at `u64::MAX` loses its top
    /// byte, which no allocation can use anyway.
    pub const fn from_inclusive(first: u64, last: u64) -> Self {
        let end = match last.checked_add(1) {
            Some(e) => e,
            None => u64::MAX,
        };
        IovaRange { start: first, end }
    }

    /// Bytes in the range (0 if `end <= start`).
    pub const fn len(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }

    /// True if the range holds no address.
    pub const fn is_empty(&self) -> bool {
        self.end <= self.start
    }

    fn contains_range(&self, other: &IovaRange) -> bool {
        self.start <= other.start && other.end <= self.end
    }
}

impl fmt::Display for IovaRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}..{:#x}", self.start, self.end)
    }
}

/// Why an allocation or a free was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum IovaError {
    /// A zero-sized request.
    ZeroSize,
    /// The alignment is zero or not a power of two.
    BadAlignment {
        /// The alignment that was asked for.
        align: u64,
    },
    /// No free interval can hold the request.
    Exhausted {
        /// Bytes asked for.
        size: u64,
        /// Alignment asked for.
        align: u64,
        /// Free bytes left in total (possibly fragmented).
        free: u64,
    },
    /// The freed interval is not wholly allocated: already (partly) free, or
    /// outside the managed space, or it wraps around the address space.
    NotAllocated {
        /// Start of the refused interval.
        start: u64,
        /// Length of the refused interval.
        size: u64,
    },
}

impl std::error::Error for IovaError {}

impl fmt::Display for IovaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IovaError::ZeroSize => f.write_str("zero-sized IOVA request"),
            IovaError::BadAlignment { align } => {
                write!(f, "IOVA alignment {align:#x} is not a power of two")
            }
            IovaError::Exhausted { size, align, free } => write!(
                f,
                "no free IOVA interval of {size:#x} bytes aligned to {align:#x} ({free:#x} bytes free in total)"
            ),
            IovaError::NotAllocated { start, size } => write!(
                f,
                "IOVA interval {start:#x}+{size:#x} is not allocated (double free or foreign address)"
            ),
        }
    }
}

/// First-fit allocator of aligned intervals inside a fixed set of ranges.
#[derive(Debug, Clone)]
pub struct IovaAllocator {
    /// The managed space: sorted, disjoint, non-adjacent, non-empty.
    managed: Vec<IovaRange>,
    /// The free intervals: sorted, disjoint, non-adjacent, non-empty, each
    /// inside one managed range.
    free: Vec<IovaRange>,
}

/// Sort, drop empty ranges and merge overlapping or touching ones.
fn normalize(mut ranges: Vec<IovaRange>) -> Vec<IovaRange> {
    ranges.retain(|r| !r.is_empty());
    ranges.sort();
    let mut out: Vec<IovaRange> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

/// Clip `ranges` to `[min, limit)`: the IOMMU's valid ranges intersected with
/// what the device can address (its DMA mask) and with the platform's floor.
pub fn clip_ranges(ranges: &[IovaRange], min: u64, limit: u64) -> Vec<IovaRange> {
    normalize(
        ranges
            .iter()
            .map(|r| IovaRange::new(r.start.max(min), r.end.min(limit)))
            .collect(),
    )
}

impl IovaAllocator {
    /// An allocator whose whole space (the union of `ranges`) is free.
    pub fn new(ranges: &[IovaRange]) -> Self {
        let managed = normalize(ranges.to_vec());
        IovaAllocator {
            free: managed.clone(),
            managed,
        }
    }

    /// Allocate `size` bytes whose first address is a multiple of `align`
    /// (a power of two). Returns the first address.
    pub fn alloc(&mut self, size: u64, align: u64) -> Result<u64, IovaError> {
        if size == 0 {
            return Err(IovaError::ZeroSize);
        }
        if !align.is_power_of_two() {
            return Err(IovaError::BadAlignment { align });
        }
        for i in 0..self.free.len() {
            let r = self.free[i];
            let Some(start) = r.start.checked_next_multiple_of(align) else {
                continue;
            };
            let Some(end) = start.checked_add(size) else {
                continue;
            };
            if end > r.end {
                continue;
            }
            // Split r into [r.start, start) and [end, r.end), keeping order.
            let head = IovaRange::new(r.start, start);
            let tail = IovaRange::new(end, r.end);
            match (head.is_empty(), tail.is_empty()) {
                (true, true) => {
                    self.free.remove(i);
                }
                (true, false) => self.free[i] = tail,
                (false, true) => self.free[i] = head,
                (false, false) => {
                    self.free[i] = head;
                    self.free.insert(i + 1, tail);
                }
            }
            return Ok(start);
        }
        Err(IovaError::Exhausted {
            size,
            align,
            free: self.free_bytes(),
        })
    }

    /// Give back `size` bytes at `start`. Merges with free neighbours. Refuses
    /// (and changes nothing) unless the whole interval is currently allocated.
    pub fn free(&mut self, start: u64, size: u64) -> Result<(), IovaError> {
        let refused = IovaError::NotAllocated { start, size };
        if size == 0 {
            return Err(IovaError::ZeroSize);
        }
        let end = start.checked_add(size).ok_or(refused)?;
        let r = IovaRange::new(start, end);
        if !self.managed.iter().any(|m| m.contains_range(&r)) {
            return Err(refused);
        }
        // Index of the first free interval that starts after `start`.
        let i = self.free.partition_point(|f| f.start <= start);
        if i > 0 && self.free[i - 1].end > start {
            return Err(refused);
        }
        if i < self.free.len() && self.free[i].start < end {
            return Err(refused);
        }
        let merge_prev = i > 0 && self.free[i - 1].end == start;
        let merge_next = i < self.free.len() && self.free[i].start == end;
        match (merge_prev, merge_next) {
            (true, true) => {
                self.free[i - 1].end = self.free[i].end;
                self.free.remove(i);
            }
            (true, false) => self.free[i - 1].end = end,
            (false, true) => self.free[i].start = start,
            (false, false) => self.free.insert(i, r),
        }
        Ok(())
    }

    /// Free bytes in total.
    pub fn free_bytes(&self) -> u64 {
        self.free.iter().map(IovaRange::len).sum()
    }

    /// Managed bytes in total.
    pub fn total_bytes(&self) -> u64 {
        self.managed.iter().map(IovaRange::len).sum()
    }

    /// True if nothing is allocated.
    pub fn is_all_free(&self) -> bool {
        self.free == self.managed
    }

    /// The managed space.
    pub fn managed(&self) -> &[IovaRange] {
        &self.managed
    }

    /// The free intervals, sorted.
    pub fn free_ranges(&self) -> &[IovaRange] {
        &self.free
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    const K4: u64 = 0x1000;
    const M2: u64 = 0x20_0000;

    fn one(start: u64, end: u64) -> IovaAllocator {
        IovaAllocator::new(&[IovaRange::new(start, end)])
    }

    #[test]
    fn allocations_are_first_fit_disjoint_and_in_range() {
        let mut a = one(0x10_0000, 0x20_0000);
        let x = a.alloc(K4, K4).unwrap();
        let y = a.alloc(3 * K4, K4).unwrap();
        let z = a.alloc(K4, K4).unwrap();
        assert_eq!(x, 0x10_0000);
        assert_eq!(y, 0x10_1000);
        assert_eq!(z, 0x10_4000);
        assert_eq!(a.free_bytes(), 0x10_0000 - 5 * K4);
        assert_eq!(a.free_ranges(), &[IovaRange::new(0x10_5000, 0x20_0000)]);
    }

    #[test]
    fn alignment_is_honoured_and_the_gap_stays_free() {
        let mut a = one(0x1000, 0x100_0000);
        let x = a.alloc(K4, K4).unwrap();
        assert_eq!(x, 0x1000);
        let big = a.alloc(M2, M2).unwrap();
        assert_eq!(big % M2, 0);
        assert_eq!(big, M2);
        // The gap 0x2000..2 MiB before the aligned block is still usable.
        assert_eq!(a.free_ranges()[0], IovaRange::new(0x2000, M2));
        let y = a.alloc(K4, K4).unwrap();
        assert_eq!(y, 0x2000);
        // Odd alignments of every power of two land on multiples.
        for shift in 12..22 {
            let al = 1u64 << shift;
            let p = a.alloc(K4, al).unwrap();
            assert_eq!(p % al, 0, "alignment {al:#x}");
        }
    }

    #[test]
    fn bad_requests_are_refused() {
        let mut a = one(0x1000, 0x10_0000);
        assert_eq!(a.alloc(0, K4), Err(IovaError::ZeroSize));
        assert_eq!(a.alloc(K4, 0), Err(IovaError::BadAlignment { align: 0 }));
        assert_eq!(
            a.alloc(K4, 0x3000),
            Err(IovaError::BadAlignment { align: 0x3000 })
        );
        assert_eq!(a.free(0x1000, 0), Err(IovaError::ZeroSize));
        assert!(a.is_all_free());
    }

    #[test]
    fn exhaustion_is_reported_with_the_free_total() {
        let mut a = one(0x1000, 0x5000);
        assert_eq!(
            a.alloc(0x5000, K4),
            Err(IovaError::Exhausted {
                size: 0x5000,
                align: K4,
                free: 0x4000
            })
        );
        for _ in 0..4 {
            a.alloc(K4, K4).unwrap();
        }
        assert!(matches!(
            a.alloc(K4, K4),
            Err(IovaError::Exhausted { free: 0, .. })
        ));
        // Alignment can exhaust too: 0x1000..0x4000 has room for 4 KiB but
        // holds no 16 KiB-aligned address.
        let mut b = one(0x1000, 0x4000);
        assert!(matches!(
            b.alloc(K4, 0x4000),
            Err(IovaError::Exhausted { .. })
        ));
        // Near the top of the address space nothing overflows.
        let mut c = one(u64::MAX - 0x2000, u64::MAX);
        assert!(matches!(
            c.alloc(0x4000, K4),
            Err(IovaError::Exhausted { .. })
        ));
        assert!(matches!(
            c.alloc(K4, 1 << 63),
            Err(IovaError::Exhausted { .. })
        ));
    }

    #[test]
    fn free_space_is_reused_and_coalesced() {
        let mut a = one(0x10_0000, 0x10_4000);
        let p: Vec<u64> = (0..4).map(|_| a.alloc(K4, K4).unwrap()).collect();
        assert_eq!(a.free_bytes(), 0);
        // Free the middle two in an order that exercises both merge sides.
        a.free(p[2], K4).unwrap();
        a.free(p[1], K4).unwrap();
        assert_eq!(a.free_ranges(), &[IovaRange::new(p[1], p[3])]);
        // The coalesced hole now fits an 8 KiB allocation at the same place.
        assert_eq!(a.alloc(2 * K4, K4).unwrap(), p[1]);
        a.free(p[1], 2 * K4).unwrap();
        a.free(p[0], K4).unwrap();
        a.free(p[3], K4).unwrap();
        assert!(a.is_all_free());
        assert_eq!(a.free_ranges(), &[IovaRange::new(0x10_0000, 0x10_4000)]);
        assert_eq!(a.alloc(4 * K4, K4).unwrap(), 0x10_0000);
    }

    #[test]
    fn double_free_partial_overlap_and_foreign_frees_change_nothing() {
        let mut a = one(0x10_0000, 0x20_0000);
        let x = a.alloc(2 * K4, K4).unwrap();
        let before = a.clone();
        a.free(x, 2 * K4).unwrap();
        let after_free = a.clone();
        // Double free.
        assert_eq!(
            a.free(x, 2 * K4),
            Err(IovaError::NotAllocated {
                start: x,
                size: 2 * K4
            })
        );
        assert_eq!(a.free_ranges(), after_free.free_ranges());
        // Overlapping an allocated block and a free one.
        let mut b = before.clone();
        assert!(b.free(x + K4, 2 * K4).is_err());
        assert_eq!(b.free_ranges(), before.free_ranges());
        // Outside the managed space, and wrapping the address space.
        assert!(b.free(0x1000, K4).is_err());
        assert!(b.free(0x1f_f000, 2 * K4).is_err());
        assert!(b.free(u64::MAX, 2).is_err());
        assert_eq!(b.free_ranges(), before.free_ranges());
        // Freeing part of an allocation is allowed (it is allocated).
        b.free(x + K4, K4).unwrap();
        b.free(x, K4).unwrap();
        assert!(b.is_all_free());
    }

    #[test]
    fn several_seed_ranges_are_normalized_and_all_used() {
        // Unsorted, overlapping, touching and empty seeds.
        let mut a = IovaAllocator::new(&[
            IovaRange::new(0x8000, 0x9000),
            IovaRange::new(0x1000, 0x3000),
            IovaRange::new(0x2000, 0x4000),
            IovaRange::new(0x4000, 0x5000),
            IovaRange::new(0x7000, 0x7000),
        ]);
        assert_eq!(
            a.managed(),
            &[
                IovaRange::new(0x1000, 0x5000),
                IovaRange::new(0x8000, 0x9000)
            ]
        );
        assert_eq!(a.total_bytes(), 0x5000);
        // A request that fits only the second range skips the first.
        let x = a.alloc(K4, 0x8000).unwrap();
        assert_eq!(x, 0x8000);
        let y = a.alloc(0x4000, K4).unwrap();
        assert_eq!(y, 0x1000);
        assert!(matches!(a.alloc(K4, K4), Err(IovaError::Exhausted { .. })));
        // Freeing across the gap between the ranges is refused.
        assert!(a.free(0x4000, 0x5000).is_err());
        a.free(x, K4).unwrap();
        a.free(y, 0x4000).unwrap();
        assert!(a.is_all_free());
    }

    #[test]
    fn clipping_to_floor_and_dma_limit() {
        // What a VT-d IOMMU reports on x86: everything but the MSI window.
        let reported = [
            IovaRange::from_inclusive(0, 0xfedf_ffff),
            IovaRange::from_inclusive(0xfef0_0000, (1 << 39) - 1),
        ];
        // A 28-bit device (QEMU edu) with the 1 MiB floor.
        assert_eq!(
            clip_ranges(&reported, 0x10_0000, 1 << 28),
            vec![IovaRange::new(0x10_0000, 1 << 28)]
        );
        // A 64-bit device keeps both pieces.
        assert_eq!(
            clip_ranges(&reported, 0x10_0000, u64::MAX),
            vec![
                IovaRange::new(0x10_0000, 0xfee0_0000),
                IovaRange::new(0xfef0_0000, 1 << 39)
            ]
        );
        // A limit below the floor leaves nothing.
        assert!(clip_ranges(&reported, 0x10_0000, 0x8_0000).is_empty());
        assert_eq!(
            IovaRange::from_inclusive(0, u64::MAX),
            IovaRange::new(0, u64::MAX)
        );
    }

    /// A deterministic random workload checked against a byte-for-byte model.
    #[test]
    fn random_workload_never_overlaps_and_restores_everything() {
        let base = 0x40_0000u64;
        let pages = 256u64;
        let mut a = one(base, base + pages * K4);
        let mut owner = vec![false; pages as usize];
        let mut live: Vec<(u64, u64)> = Vec::new();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..5000 {
            if live.is_empty() || next() % 3 != 0 {
                let n = 1 + next() % 8;
                let align = K4 << (next() % 3);
                match a.alloc(n * K4, align) {
                    Ok(p) => {
                        assert_eq!(p % align, 0);
                        assert!(p >= base && p + n * K4 <= base + pages * K4);
                        let first = ((p - base) / K4) as usize;
                        for o in &mut owner[first..first + n as usize] {
                            assert!(!*o, "overlapping allocation at {p:#x}");
                            *o = true;
                        }
                        live.push((p, n));
                    }
                    Err(IovaError::Exhausted { free, .. }) => {
                        let model_free = owner.iter().filter(|o| !**o).count() as u64 * K4;
                        assert_eq!(free, model_free);
                    }
                    Err(e) => panic!("unexpected {e}"),
                }
            } else {
                let (p, n) = live.swap_remove((next() % live.len() as u64) as usize);
                a.free(p, n * K4).unwrap();
                let first = ((p - base) / K4) as usize;
                owner[first..first + n as usize].fill(false);
            }
            let model_free = owner.iter().filter(|o| !**o).count() as u64 * K4;
            assert_eq!(a.free_bytes(), model_free);
            // Free intervals stay sorted and never touch (always coalesced).
            for w in a.free_ranges().windows(2) {
                assert!(w[0].end < w[1].start);
            }
        }
        for (p, n) in live.drain(..) {
            a.free(p, n * K4).unwrap();
        }
        assert!(a.is_all_free());
    }
}
