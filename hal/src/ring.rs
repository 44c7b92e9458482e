//! Rings of equal entries inside a DMA region, bounds-checked once.
//!
//! A hot loop over a ring (CQEs, WQEs, a per-WQE book) indexes it with a
//! free-running counter masked to the ring size. Checking every access
//! against the region costs an add, two compares and an alignment test per
//! entry; a [`RingLayout`] proves once, when made, that every entry the
//! mask can produce lies inside the region and is aligned, so an access is
//! the mask, a shift and an add, and the one check left
//! ([`DmaRegion::ring_entry`]: the layout's end against the region's
//! length) does not depend on the index. A [`RingRegion`] owns its region
//! and holds the layout checked against it, so not even that check is
//! left.

use core::marker::PhantomData;

use crate::dma::{DmaRegion, DmaWindow};
use crate::Hal;

/// `2^log_entries` windows of `N` bytes, the first at byte `first` of a
/// region, `2^log_stride` bytes apart: checked against a region once by
/// [`DmaRegion::ring_layout`], used with [`DmaRegion::ring_entry`].
/// Plain data (copy it into the structure that owns the region).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingLayout<const N: usize> {
    first: usize,
    mask: u32,
    shift: u8,
    /// `first + (mask << shift) + N`: the region must be at least this long.
    end: usize,
}

impl<const N: usize> RingLayout<N> {
    /// Entries in the ring.
    #[inline(always)]
    pub fn entries(&self) -> usize {
        self.mask as usize + 1
    }

    /// `entries() - 1`: the mask applied to an index.
    #[inline(always)]
    pub fn mask(&self) -> u32 {
        self.mask
    }

    /// Offset of entry `index & mask()` in the region.
    #[inline(always)]
    pub fn offset(&self, index: u32) -> usize {
        self.first + (((index & self.mask) as usize) << self.shift)
    }
}

impl<const N: usize> RingLayout<N> {
    /// A ring of `2^log_entries` windows of `N` bytes, the first at
    /// `first`, `2^log_stride` bytes apart, not yet checked against a
    /// region: [`DmaRegion::ring_entry`] and [`DmaRegion::ring_view`] check
    /// its end against the region they are given (once, not per index).
    /// `None` when it is unaligned or its end overflows (the rules of
    /// [`DmaRegion::ring_layout`]).
    pub fn new(first: usize, log_entries: u8, log_stride: u8) -> Option<Self> {
        const {
            assert!(
                N > 0 && N.is_multiple_of(8),
                "entry windows are 8-byte multiples"
            )
        };
        if log_entries >= 32 || log_stride >= 32 || !first.is_multiple_of(8) {
            return None;
        }
        if log_entries > 0 && log_stride < 3 {
            return None;
        }
        let mask = (1u64 << log_entries) - 1;
        let last = usize::try_from(mask << log_stride).ok()?;
        let end = first.checked_add(last)?.checked_add(N)?;
        Some(RingLayout {
            first,
            mask: mask as u32,
            shift: log_stride,
            end,
        })
    }
}

impl<H: Hal> DmaRegion<H> {
    /// Check a ring of `2^log_entries` windows of `N` bytes, the first at
    /// `first`, `2^log_stride` bytes apart: every window must lie inside
    /// this region and be 8-byte aligned (`first` a multiple of 8, the
    /// stride too unless the ring has one entry, `N` a multiple of 8).
    /// `None` when it does not fit.
    pub fn ring_layout<const N: usize>(
        &self,
        first: usize,
        log_entries: u8,
        log_stride: u8,
    ) -> Option<RingLayout<N>> {
        let layout = RingLayout::new(first, log_entries, log_stride)?;
        (layout.end <= self.len()).then_some(layout)
    }

    /// The window of entry `index & layout.mask()`: no per-index check.
    /// Panics when `layout` does not fit this region (one made for a
    /// longer region); that check does not depend on `index`.
    #[inline(always)]
    pub fn ring_entry<const N: usize>(
        &self,
        layout: &RingLayout<N>,
        index: u32,
    ) -> DmaWindow<'_, N> {
        if layout.end > self.len() {
            layout_too_long(layout.end, self.len());
        }
        let off = layout.offset(index);
        // SAFETY: `off + N <= first + (mask << shift) + N = end <= len`
        // (the index is masked; `end` was computed without overflow when
        // the layout was made, and checked against this region's length
        // just above), so the window lies inside the region, which the
        // borrow of `self` keeps alive. `first` and the stride are
        // multiples of 8 (or the ring has one entry), and regions are
        // page aligned, so the window is 8-byte aligned.
        unsafe { DmaWindow::from_ptr(self.as_ptr().add(off)) }
    }
}

impl<H: Hal> DmaRegion<H> {
    /// The entries of `layout` in this region as a [`RingView`]: one check
    /// (the layout's end against the region's length), then every entry
    /// of the view is the mask, a shift and an add. For a ring that lies
    /// in a region another structure owns (a receive ring sharing a QP
    /// buffer with the send ring). Panics when `layout` does not fit this
    /// region, as [`DmaRegion::ring_entry`].
    #[inline(always)]
    pub fn ring_view<const N: usize>(&self, layout: &RingLayout<N>) -> RingView<'_, N> {
        if layout.end > self.len() {
            layout_too_long(layout.end, self.len());
        }
        RingView {
            // In bounds: `first < end <= len` (checked just above).
            first: self.as_ptr().wrapping_add(layout.first),
            mask: layout.mask,
            shift: layout.shift,
            _region: PhantomData,
        }
    }
}

/// A DMA region that holds a ring: the region with a [`RingLayout`] checked
/// against it once, when made, so [`RingRegion::entry`] has no check at all
/// (the mask, a shift and an add). It also keeps one byte offset, a cursor,
/// checked when it is set and read with no check: a ring's owner byte at
/// its consumer index, polled many times for each time the index moves.
/// Dereferences to the region for every other access.
pub struct RingRegion<H: Hal, const N: usize> {
    region: DmaRegion<H>,
    /// Fits `region` (checked by `new`; neither changes afterwards).
    layout: RingLayout<N>,
    /// Always `< region.len()` (checked by `new` and `set_cursor`).
    cursor: usize,
}

impl<H: Hal, const N: usize> RingRegion<H, N> {
    /// The ring of `2^log_entries` windows of `N` bytes in `region`, the
    /// first at `first`, `2^log_stride` bytes apart, with the cursor at
    /// byte 0. `None` when it does not fit (the rules of
    /// [`DmaRegion::ring_layout`]).
    pub fn new(
        region: DmaRegion<H>,
        first: usize,
        log_entries: u8,
        log_stride: u8,
    ) -> Option<Self> {
        let layout = region.ring_layout::<N>(first, log_entries, log_stride)?;
        // A layout that fits holds at least N > 0 bytes: byte 0 is inside.
        Some(RingRegion {
            region,
            layout,
            cursor: 0,
        })
    }

    /// The region.
    #[inline(always)]
    pub fn region(&self) -> &DmaRegion<H> {
        &self.region
    }

    /// The ring's layout.
    #[inline(always)]
    pub fn layout(&self) -> &RingLayout<N> {
        &self.layout
    }

    /// The window of entry `index & layout().mask()`: no check.
    #[inline(always)]
    pub fn entry(&self, index: u32) -> DmaWindow<'_, N> {
        let off = self.layout.offset(index);
        // SAFETY: `off + N <= first + (mask << shift) + N = end <= len`:
        // the index is masked, `end` was computed without overflow when the
        // layout was made, and `new` checked it against this region's
        // length; the private layout never changes and neither does a
        // region's length. So the window lies inside the region, which the
        // borrow of `self` keeps alive. `first` and the stride are
        // multiples of 8 (or the ring has one entry), and regions are page
        // aligned, so the window is 8-byte aligned.
        unsafe { DmaWindow::from_ptr(self.region.as_ptr().add(off)) }
    }

    /// The `M` bytes from entry `index & layout().mask()` on, as one
    /// window: a group of consecutive entries written together (a send
    /// WQE's first 64-byte block of 16-byte units) at the cost of one
    /// entry. One check, that the window ends inside the region (it does
    /// whenever the entry starts a group of `M / N` that the ring's size
    /// is a multiple of); panics otherwise.
    #[inline(always)]
    pub fn entry_span<const M: usize>(&self, index: u32) -> DmaWindow<'_, M> {
        const {
            assert!(
                M >= N && M.is_multiple_of(8),
                "a span of whole 8-byte words"
            )
        };
        let off = self.layout.offset(index);
        if off + M > self.region.len() {
            span_outside(off, M, self.region.len());
        }
        // SAFETY: `off + M <= len` (checked just above; `off < end <= len`
        // keeps the sum from overflowing), so the window lies inside the
        // region, which the borrow of `self` keeps alive. `off` is an
        // entry's offset: `first` and the stride are multiples of 8 (or
        // the ring has one entry) and regions are page aligned, so the
        // window is 8-byte aligned.
        unsafe { DmaWindow::from_ptr(self.region.as_ptr().add(off)) }
    }

    /// The ring as plain values (its first entry's address, mask and
    /// shift) borrowed from the region, for a loop that takes many entries
    /// in one go: a local copy stays in registers across the volatile
    /// accesses and barriers that make the compiler reload the fields of
    /// `self` for every entry.
    #[inline(always)]
    pub fn view(&self) -> RingView<'_, N> {
        RingView {
            // In bounds: `first < end <= len` (checked by `new`).
            first: self.region.as_ptr().wrapping_add(self.layout.first),
            mask: self.layout.mask,
            shift: self.layout.shift,
            _region: PhantomData,
        }
    }

    /// Move the cursor to byte `offset`. Panics when it lies outside the
    /// region.
    #[inline(always)]
    pub fn set_cursor(&mut self, offset: usize) {
        if offset >= self.region.len() {
            cursor_outside(offset, self.region.len());
        }
        self.cursor = offset;
    }

    /// The cursor's offset.
    #[inline(always)]
    pub fn cursor(&self) -> usize {
        self.cursor
    }

    /// Read the byte at the cursor: no check.
    #[inline(always)]
    pub fn read_cursor_u8(&self) -> u8 {
        // SAFETY: `cursor < len` holds from `new` (0, and a ring that fits
        // makes the region non-empty) and `set_cursor` (checked), the only
        // writers of the private fields, and a region's length never
        // changes; the byte lies inside memory the platform keeps valid for
        // volatile access while the region (borrowed through `self`) lives.
        unsafe { self.region.as_ptr().add(self.cursor).read_volatile() }
    }
}

/// A [`RingRegion`]'s entries as plain values, borrowed from it
/// ([`RingRegion::view`]): [`RingView::entry`] is the same unchecked
/// access, from a copy a loop keeps in registers.
#[derive(Clone, Copy)]
pub struct RingView<'a, const N: usize> {
    /// Entry 0: `region + layout.first`.
    first: *mut u8,
    mask: u32,
    shift: u8,
    /// The region, borrowed: it outlives the view and its layout fits it.
    _region: PhantomData<&'a ()>,
}

impl<'a, const N: usize> RingView<'a, N> {
    /// The window of entry `index & mask`: no check.
    #[inline(always)]
    pub fn entry(&self, index: u32) -> DmaWindow<'a, N> {
        let off = ((index & self.mask) as usize) << self.shift;
        // SAFETY: made by `RingRegion::view` from a layout `new` checked
        // against the region (`first + (mask << shift) + N <= len`), which
        // the view borrows for `'a`; the index is masked, so the window
        // lies inside the region. `first` and the stride are multiples of 8
        // (or the ring has one entry) and regions are page aligned, so the
        // window is 8-byte aligned. The same argument as
        // [`RingRegion::entry`].
        unsafe { DmaWindow::from_ptr(self.first.add(off)) }
    }
}

impl<H: Hal, const N: usize> core::ops::Deref for RingRegion<H, N> {
    type Target = DmaRegion<H>;
    #[inline(always)]
    fn deref(&self) -> &DmaRegion<H> {
        &self.region
    }
}

#[cold]
#[inline(never)]
fn cursor_outside(offset: usize, len: usize) -> ! {
    panic!("cursor {offset:#x} outside a region of {len:#x} bytes")
}

#[cold]
#[inline(never)]
fn span_outside(offset: usize, bytes: usize, len: usize) -> ! {
    panic!("a span of {bytes:#x} bytes at {offset:#x} runs past a region of {len:#x} bytes")
}

#[cold]
#[inline(never)]
fn layout_too_long(end: usize, len: usize) -> ! {
    panic!("ring layout of {end:#x} bytes used on a region of {len:#x} bytes")
}

#[cfg(test)]
mod tests {
    use crate::dma::tests::hal;
    use crate::{Hal, PAGE_SIZE};

    #[test]
    fn layouts_that_do_not_fit_or_are_unaligned_are_refused() {
        let r = hal().alloc_dma(PAGE_SIZE).unwrap();
        // 64 entries of 64 bytes fill the page exactly.
        assert!(r.ring_layout::<64>(0, 6, 6).is_some());
        assert!(
            r.ring_layout::<64>(8, 6, 6).is_none(),
            "one byte past the end"
        );
        assert!(r.ring_layout::<64>(0, 7, 6).is_none(), "twice the page");
        assert!(
            r.ring_layout::<16>(4, 2, 4).is_none(),
            "unaligned first entry"
        );
        assert!(r.ring_layout::<16>(0, 2, 2).is_none(), "stride below 8");
        assert!(
            r.ring_layout::<16>(0, 0, 2).is_some(),
            "one entry: no stride"
        );
        assert!(r.ring_layout::<16>(0, 40, 4).is_none());
        assert!(
            r.ring_layout::<16>(usize::MAX - 7, 0, 4).is_none(),
            "overflow"
        );
    }

    #[test]
    fn entries_are_masked_and_land_where_the_offsets_say() {
        let r = hal().alloc_dma(PAGE_SIZE).unwrap();
        let l = r.ring_layout::<16>(64, 3, 5).unwrap();
        assert_eq!((l.entries(), l.mask()), (8, 7));
        for i in 0..20u32 {
            r.ring_entry(&l, i).write_be32::<4>(i);
            assert_eq!(l.offset(i), 64 + (i as usize % 8) * 32);
            assert_eq!(r.read_be32(l.offset(i) + 4), i, "entry {i}");
        }
    }

    #[test]
    #[should_panic(expected = "ring layout")]
    fn a_layout_for_a_longer_region_panics_instead_of_reaching_past_this_one() {
        let h = hal();
        let big = h.alloc_dma(4 * PAGE_SIZE).unwrap();
        let small = h.alloc_dma(PAGE_SIZE).unwrap();
        let l = big.ring_layout::<64>(0, 8, 6).unwrap();
        small.ring_entry(&l, 0).write_u8::<0>(1);
    }

    #[test]
    fn a_ring_region_refuses_a_ring_that_does_not_fit_and_reaches_every_entry() {
        let h = hal();
        let r = h.alloc_dma(PAGE_SIZE).unwrap();
        assert!(super::RingRegion::<_, 64>::new(r, 8, 6, 6).is_none());
        let r = h.alloc_dma(PAGE_SIZE).unwrap();
        let ring = super::RingRegion::<_, 16>::new(r, 64, 3, 5).unwrap();
        assert_eq!(ring.layout().entries(), 8);
        for i in 0..20u32 {
            ring.entry(i).write_be32::<12>(i);
            assert_eq!(ring.read_be32(64 + (i as usize % 8) * 32 + 12), i);
        }
        // The last entry ends at the region's last byte.
        let r = h.alloc_dma(PAGE_SIZE).unwrap();
        let ring = super::RingRegion::<_, 64>::new(r, 0, 6, 6).unwrap();
        ring.entry(63).write_u8::<63>(0x5a);
        assert_eq!(ring.read_u8(PAGE_SIZE - 1), 0x5a);
    }

    #[test]
    fn a_span_covers_consecutive_entries_and_may_not_run_past_the_region() {
        let h = hal();
        let r = h.alloc_dma(PAGE_SIZE).unwrap();
        // 256 units of 16 bytes: the whole page.
        let ring = super::RingRegion::<_, 16>::new(r, 0, 8, 4).unwrap();
        // The last group of four units ends at the region's last byte.
        let span = ring.entry_span::<64>(252);
        span.write_be64::<0>(0x0102_0304_0506_0708);
        span.write_ne64::<56>(u64::from_ne_bytes([9, 8, 7, 6, 5, 4, 3, 2]));
        assert_eq!(ring.entry(252).read_be64::<0>(), 0x0102_0304_0506_0708);
        let mut tail = [0u8; 8];
        ring.read_bytes(PAGE_SIZE - 8, &mut tail);
        assert_eq!(
            tail,
            [9, 8, 7, 6, 5, 4, 3, 2],
            "written as it lies, no swap"
        );
        // Indexes are masked as for an entry.
        ring.entry_span::<64>(256 + 4).write_be64::<24>(7);
        assert_eq!(ring.entry(5).read_be64::<8>(), 7);
    }

    #[test]
    #[should_panic(expected = "runs past a region")]
    fn a_span_running_past_the_region_panics() {
        let h = hal();
        let r = h.alloc_dma(PAGE_SIZE).unwrap();
        let ring = super::RingRegion::<_, 16>::new(r, 0, 8, 4).unwrap();
        ring.entry_span::<64>(253).write_u8::<0>(1);
    }

    #[test]
    fn a_view_reaches_the_same_entries_as_its_ring_up_to_the_last_byte() {
        let h = hal();
        let r = h.alloc_dma(PAGE_SIZE).unwrap();
        let ring = super::RingRegion::<_, 16>::new(r, 64, 3, 5).unwrap();
        let v = ring.view();
        for i in 0..20u32 {
            v.entry(i).write_be32::<8>(i + 1);
            assert_eq!(ring.entry(i).read_be32::<8>(), i + 1, "entry {i}");
            assert_eq!(ring.read_be32(64 + (i as usize % 8) * 32 + 8), i + 1);
        }
        let r = h.alloc_dma(PAGE_SIZE).unwrap();
        let ring = super::RingRegion::<_, 64>::new(r, 0, 6, 6).unwrap();
        let v = ring.view();
        v.entry(63).write_u8::<63>(0xa5);
        assert_eq!(ring.read_u8(PAGE_SIZE - 1), 0xa5);
        v.entry(64).write_u8::<0>(0x11);
        assert_eq!(ring.read_u8(0), 0x11, "indexes are masked");
    }

    #[test]
    fn a_view_of_a_layout_reaches_its_entries_in_a_region_it_fits() {
        let h = hal();
        let r = h.alloc_dma(PAGE_SIZE).unwrap();
        let l = super::RingLayout::<16>::new(64, 3, 5).unwrap();
        let v = r.ring_view(&l);
        for i in 0..20u32 {
            v.entry(i).write_be32::<4>(i);
            assert_eq!(r.read_be32(64 + (i as usize % 8) * 32 + 4), i, "entry {i}");
        }
        assert!(super::RingLayout::<16>::new(4, 2, 4).is_none(), "unaligned");
        assert!(
            super::RingLayout::<16>::new(0, 2, 2).is_none(),
            "stride below 8"
        );
    }

    #[test]
    #[should_panic(expected = "ring layout")]
    fn a_view_of_a_layout_longer_than_the_region_panics() {
        let r = hal().alloc_dma(PAGE_SIZE).unwrap();
        let l = super::RingLayout::<64>::new(0, 7, 6).unwrap();
        let _ = r.ring_view(&l);
    }

    #[test]
    fn a_cursor_is_checked_when_set_and_reads_its_byte() {
        let r = hal().alloc_dma(PAGE_SIZE).unwrap();
        r.write_u8(PAGE_SIZE - 1, 0xa5);
        r.write_u8(7, 0x3c);
        let mut c = super::RingRegion::<_, 64>::new(r, 0, 6, 6).unwrap();
        assert_eq!(c.cursor(), 0);
        c.set_cursor(PAGE_SIZE - 1);
        assert_eq!(c.read_cursor_u8(), 0xa5);
        c.set_cursor(7);
        assert_eq!(c.read_cursor_u8(), 0x3c);
        assert_eq!(c.read_u8(PAGE_SIZE - 1), 0xa5, "derefs to the region");
    }

    #[test]
    #[should_panic(expected = "outside a region")]
    fn a_cursor_past_the_end_panics_when_set() {
        let r = hal().alloc_dma(PAGE_SIZE).unwrap();
        super::RingRegion::<_, 8>::new(r, 0, 0, 0)
            .unwrap()
            .set_cursor(PAGE_SIZE);
    }
}
