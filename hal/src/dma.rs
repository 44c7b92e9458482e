//! DMA regions: memory shared with a device that writes it concurrently.
//!
//! The rule enforced here: no Rust reference (`&`/`&mut`) is ever created to
//! DMA memory. Every access is a volatile load or store through a raw pointer,
//! bounds-checked against the region. Multi-byte values are stored big-endian
//! because every mlx5 structure is big-endian.

use core::ptr::NonNull;

use crate::Hal;

/// A DMA allocation as a platform hands it out: CPU pointer, device address
/// and length. Plain data; [`DmaRegion`] is the owning form.
#[derive(Debug)]
pub struct RawDma {
    /// CPU-visible address of the first byte.
    pub vaddr: NonNull<u8>,
    /// Device-visible address (IOVA) of the first byte.
    pub iova: u64,
    /// Length in bytes (a multiple of [`crate::PAGE_SIZE`]).
    pub len: usize,
}

/// An owned, zero-initialised DMA region that is freed when dropped.
///
/// Accessors take `&self` even when they write: the device writes the region
/// behind the CPU's back anyway, so the region behaves like a register block
/// with interior mutability. The type is `Send` (the memory can move between
/// threads with its owner) but not `Sync` (two CPU threads must not access it
/// at once without the owner's own locking).
pub struct DmaRegion<H: Hal> {
    hal: H,
    raw: RawDma,
}

// SAFETY: a `DmaRegion` owns its memory exclusively (no other CPU-side handle
// exists), and all access goes through volatile raw-pointer operations, so
// moving the owner to another thread moves every access with it. The platform
// handle is required to be `Send` too.
unsafe impl<H: Hal + Send> Send for DmaRegion<H> {}

impl<H: Hal> DmaRegion<H> {
    /// Take ownership of a raw allocation.
    ///
    /// # Safety
    ///
    /// `raw` must have been returned by `hal.alloc_dma_raw` (or a clone's), must not
    /// be owned by anything else, and must not have been freed.
    pub unsafe fn from_raw(hal: H, raw: RawDma) -> Self {
        DmaRegion { hal, raw }
    }

    /// Device address (IOVA) of the first byte. Program the device with this,
    /// never with a CPU pointer.
    #[inline(always)]
    pub fn iova(&self) -> u64 {
        self.raw.iova
    }

    /// Device address of the byte at `offset`.
    #[inline(always)]
    pub fn iova_at(&self, offset: usize) -> u64 {
        assert!(offset <= self.raw.len, "DMA offset out of range");
        self.raw.iova + offset as u64
    }

    /// Length in bytes.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.raw.len
    }

    /// Always false: platforms never return empty regions.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.raw.len == 0
    }

    /// Raw CPU pointer to the first byte, for hot paths that do their own
    /// volatile access. Never turn it into a reference.
    #[inline(always)]
    pub fn as_ptr(&self) -> *mut u8 {
        self.raw.vaddr.as_ptr()
    }

    /// The platform this region belongs to.
    pub fn hal(&self) -> &H {
        &self.hal
    }

    #[inline(always)]
    fn ptr_at(&self, offset: usize, size: usize, align: usize) -> *mut u8 {
        // The checks stay on every access; only their failure paths are out
        // of line (`#[cold]`), so the hot path is a compare and a branch and
        // does not spill the panic message's arguments to the stack.
        if offset
            .checked_add(size)
            .is_none_or(|end| end > self.raw.len)
        {
            out_of_range(offset, size, self.raw.len);
        }
        if !offset.is_multiple_of(align) {
            unaligned(offset);
        }
        // SAFETY: `offset + size <= len` was just checked, so the result stays
        // inside the allocation described by `raw`.
        unsafe { self.raw.vaddr.as_ptr().add(offset) }
    }

    /// Read the byte at `offset`.
    #[inline(always)]
    pub fn read_u8(&self, offset: usize) -> u8 {
        let p = self.ptr_at(offset, 1, 1);
        // SAFETY: `p` is in bounds (checked by `ptr_at`) of memory the platform
        // guarantees valid for volatile access while the region lives.
        unsafe { p.read_volatile() }
    }

    /// Write the byte at `offset`.
    #[inline(always)]
    pub fn write_u8(&self, offset: usize, value: u8) {
        let p = self.ptr_at(offset, 1, 1);
        // SAFETY: as in `read_u8`.
        unsafe { p.write_volatile(value) }
    }

    /// Read the big-endian 16-bit value at `offset` (2-byte aligned).
    #[inline(always)]
    pub fn read_be16(&self, offset: usize) -> u16 {
        let p = self.ptr_at(offset, 2, 2) as *const u16;
        // SAFETY: in bounds and 2-byte aligned (checked; the region base is
        // page aligned), valid for volatile access.
        u16::from_be(unsafe { p.read_volatile() })
    }

    /// Write a big-endian 16-bit value at `offset` (2-byte aligned).
    #[inline(always)]
    pub fn write_be16(&self, offset: usize, value: u16) {
        let p = self.ptr_at(offset, 2, 2) as *mut u16;
        // SAFETY: as in `read_be16`.
        unsafe { p.write_volatile(value.to_be()) }
    }

    /// Read the big-endian 32-bit value at `offset` (4-byte aligned).
    #[inline(always)]
    pub fn read_be32(&self, offset: usize) -> u32 {
        let p = self.ptr_at(offset, 4, 4) as *const u32;
        // SAFETY: in bounds and 4-byte aligned (checked), valid for volatile
        // access.
        u32::from_be(unsafe { p.read_volatile() })
    }

    /// Write a big-endian 32-bit value at `offset` (4-byte aligned).
    #[inline(always)]
    pub fn write_be32(&self, offset: usize, value: u32) {
        let p = self.ptr_at(offset, 4, 4) as *mut u32;
        // SAFETY: as in `read_be32`.
        unsafe { p.write_volatile(value.to_be()) }
    }

    /// Read the big-endian 64-bit value at `offset` (8-byte aligned).
    #[inline(always)]
    pub fn read_be64(&self, offset: usize) -> u64 {
        let p = self.ptr_at(offset, 8, 8) as *const u64;
        // SAFETY: in bounds and 8-byte aligned (checked), valid for volatile
        // access.
        u64::from_be(unsafe { p.read_volatile() })
    }

    /// Write a big-endian 64-bit value at `offset` (8-byte aligned).
    #[inline(always)]
    pub fn write_be64(&self, offset: usize, value: u64) {
        let p = self.ptr_at(offset, 8, 8) as *mut u64;
        // SAFETY: as in `read_be64`.
        unsafe { p.write_volatile(value.to_be()) }
    }

    /// Copy `dst.len()` bytes starting at `offset` out of the region: byte
    /// loads up to an 8-byte boundary, then 8-byte volatile loads, then
    /// the tail (mailboxes and whole CQEs move a word at a time).
    pub fn read_bytes(&self, offset: usize, dst: &mut [u8]) {
        let base = self.ptr_at(offset, dst.len(), 1);
        let head = base.align_offset(8).min(dst.len());
        let (h, rest) = dst.split_at_mut(head);
        for (i, byte) in h.iter_mut().enumerate() {
            // SAFETY: `base + i` is in bounds because `offset + dst.len()` was
            // checked against the region length.
            *byte = unsafe { base.add(i).read_volatile() };
        }
        let mut words = rest.chunks_exact_mut(8);
        let mut at = head;
        for w in &mut words {
            // SAFETY: `base + at` is 8-byte aligned (past the head) and
            // `at + 8 <= dst.len()`, inside the checked range.
            let v = unsafe { (base.add(at) as *const u64).read_volatile() };
            w.copy_from_slice(&v.to_ne_bytes());
            at += 8;
        }
        for (i, byte) in words.into_remainder().iter_mut().enumerate() {
            // SAFETY: in bounds, as above.
            *byte = unsafe { base.add(at + i).read_volatile() };
        }
    }

    /// Copy `src` into the region starting at `offset`, a word at a time
    /// where aligned (see [`DmaRegion::read_bytes`]).
    pub fn write_bytes(&self, offset: usize, src: &[u8]) {
        let base = self.ptr_at(offset, src.len(), 1);
        let head = base.align_offset(8).min(src.len());
        let (h, rest) = src.split_at(head);
        for (i, byte) in h.iter().enumerate() {
            // SAFETY: as in `read_bytes`.
            unsafe { base.add(i).write_volatile(*byte) };
        }
        let mut words = rest.chunks_exact(8);
        let mut at = head;
        for w in &mut words {
            let v = u64::from_ne_bytes(w.try_into().expect("8-byte chunk"));
            // SAFETY: aligned and in bounds, as in `read_bytes`.
            unsafe { (base.add(at) as *mut u64).write_volatile(v) };
            at += 8;
        }
        for (i, byte) in words.remainder().iter().enumerate() {
            // SAFETY: as in `read_bytes`.
            unsafe { base.add(at + i).write_volatile(*byte) };
        }
    }

    /// Set `len` bytes starting at `offset` to `value`, a word at a time
    /// where aligned.
    pub fn fill(&self, offset: usize, len: usize, value: u8) {
        let base = self.ptr_at(offset, len, 1);
        let head = base.align_offset(8).min(len);
        let word = u64::from_ne_bytes([value; 8]);
        let mut at = 0;
        while at < head {
            // SAFETY: as in `read_bytes`.
            unsafe { base.add(at).write_volatile(value) };
            at += 1;
        }
        while at + 8 <= len {
            // SAFETY: aligned (past the head) and in bounds.
            unsafe { (base.add(at) as *mut u64).write_volatile(word) };
            at += 8;
        }
        while at < len {
            // SAFETY: as in `read_bytes`.
            unsafe { base.add(at).write_volatile(value) };
            at += 1;
        }
    }

    /// Copy `count` entries of `S` bytes from `src` (starting at
    /// `src_offset`) into this region (starting at `offset`), XOR-ing every
    /// entry with `mask` on the way; an all-zero mask is a plain copy.
    ///
    /// Both ranges are bounds-checked once, must be 8-byte aligned and, when
    /// `src` is this region, must not overlap (all checked: a panic, never a
    /// torn copy). The accesses are volatile and as wide as the CPU allows
    /// (32-byte AVX2 when detected at run time, else 16-byte SSE2 on hosted
    /// x86_64 targets, else 8-byte words; see the `copy` module). No order
    /// among the stores is promised: publish to a concurrent reader with a
    /// barrier and a separate store afterwards.
    #[inline]
    pub fn copy_entries_from<const S: usize>(
        &self,
        offset: usize,
        src: &DmaRegion<H>,
        src_offset: usize,
        count: usize,
        mask: &[u8; S],
    ) {
        let Some(bytes) = count.checked_mul(S) else {
            out_of_range(offset, usize::MAX, self.raw.len)
        };
        let d = self.ptr_at(offset, bytes, 8);
        let s = src.ptr_at(src_offset, bytes, 8);
        if (d as usize) < s as usize + bytes && (s as usize) < d as usize + bytes {
            overlapping(src_offset, offset, bytes);
        }
        // SAFETY: both ranges were bounds-checked against their regions
        // (live while `self` and `src` are borrowed) and are 8-byte aligned;
        // they do not overlap (checked just above).
        unsafe { crate::copy::copy_entries_xor::<S>(d, s, count, mask) }
    }

    /// A window of `N` bytes at `offset` (8-byte aligned), bounds-checked
    /// once here. Reads and writes through the window name their offset as a
    /// const generic, checked against `N` and the access alignment at compile
    /// time, so a hot loop pays one check per entry instead of one per field.
    #[inline(always)]
    pub fn window<const N: usize>(&self, offset: usize) -> DmaWindow<'_, N> {
        DmaWindow {
            ptr: self.ptr_at(offset, N, 8),
            _region: core::marker::PhantomData,
        }
    }

    /// `count` consecutive windows of `N` bytes starting at `offset`
    /// (8-byte aligned, `N` a multiple of 8), bounds-checked once here for
    /// all `count · N` bytes. For descriptors made of equal segments (a
    /// receive WQE's data segments): the loop over the segments pays one
    /// check in total.
    #[inline(always)]
    pub fn windows<const N: usize>(&self, offset: usize, count: usize) -> DmaWindows<'_, N> {
        const {
            assert!(
                N > 0 && N.is_multiple_of(8),
                "window size must be a multiple of 8"
            )
        };
        let Some(bytes) = count.checked_mul(N) else {
            out_of_range(offset, usize::MAX, self.raw.len)
        };
        DmaWindows {
            ptr: self.ptr_at(offset, bytes, 8),
            left: count,
            _region: core::marker::PhantomData,
        }
    }
}

#[cold]
#[inline(never)]
fn out_of_range(offset: usize, size: usize, len: usize) -> ! {
    panic!("DMA access {offset:#x}+{size} outside region of {len:#x} bytes")
}

#[cold]
#[inline(never)]
fn overlapping(src: usize, dst: usize, len: usize) -> ! {
    panic!("DMA copy of {len:#x} bytes from {src:#x} to {dst:#x}: the ranges overlap")
}

#[cold]
#[inline(never)]
fn unaligned(offset: usize) -> ! {
    panic!("unaligned DMA access at {offset:#x}")
}

/// `N` bytes of a [`DmaRegion`], checked once when made (see
/// [`DmaRegion::window`]). Borrowing the region keeps it alive.
pub struct DmaWindow<'a, const N: usize> {
    ptr: *mut u8,
    _region: core::marker::PhantomData<&'a ()>,
}

macro_rules! window_access {
    ($read:ident, $write:ident, $t:ty, $conv_in:path, $conv_out:ident) => {
        /// Volatile big-endian read at the const offset `OFF`.
        #[inline(always)]
        pub fn $read<const OFF: usize>(&self) -> $t {
            const {
                assert!(
                    OFF + core::mem::size_of::<$t>() <= N,
                    "window read out of bounds"
                );
                assert!(
                    OFF % core::mem::size_of::<$t>() == 0,
                    "unaligned window read"
                );
            }
            // SAFETY: the window's N bytes were bounds-checked against the
            // region and the window base is 8-byte aligned when made; the
            // const block proves OFF + size <= N and OFF is aligned.
            $conv_in(unsafe { (self.ptr.add(OFF) as *const $t).read_volatile() })
        }

        /// Volatile big-endian write at the const offset `OFF`.
        #[inline(always)]
        pub fn $write<const OFF: usize>(&self, value: $t) {
            const {
                assert!(
                    OFF + core::mem::size_of::<$t>() <= N,
                    "window write out of bounds"
                );
                assert!(
                    OFF % core::mem::size_of::<$t>() == 0,
                    "unaligned window write"
                );
            }
            // SAFETY: as for the read.
            unsafe { (self.ptr.add(OFF) as *mut $t).write_volatile(value.$conv_out()) }
        }
    };
}

impl<const N: usize> DmaWindow<'_, N> {
    /// A window at `ptr`.
    ///
    /// # Safety
    ///
    /// `ptr .. ptr + N` must lie inside one live region that outlives the
    /// window, and `ptr` must be 8-byte aligned.
    #[inline(always)]
    pub(crate) unsafe fn from_ptr(ptr: *mut u8) -> Self {
        DmaWindow {
            ptr,
            _region: core::marker::PhantomData,
        }
    }

    window_access!(read_u8, write_u8, u8, core::convert::identity, to_be);
    window_access!(read_be16, write_be16, u16, u16::from_be, to_be);
    window_access!(read_be32, write_be32, u32, u32::from_be, to_be);
    window_access!(read_be64, write_be64, u64, u64::from_be, to_be);

    /// Read `K` bytes spaced `STRIDE` apart, the first at `OFF` (volatile
    /// byte loads; all offsets checked at compile time). For looking at
    /// one field of `K` consecutive entries, e.g. the owner bytes of a
    /// group of CQEs, without a bounds check or a branch per entry.
    #[inline(always)]
    pub fn read_u8_strided<const OFF: usize, const STRIDE: usize, const K: usize>(
        &self,
    ) -> [u8; K] {
        const {
            assert!(
                K > 0 && OFF + (K - 1) * STRIDE < N,
                "strided read out of the window"
            )
        };
        let mut out = [0u8; K];
        for (k, b) in out.iter_mut().enumerate() {
            // SAFETY: `OFF + k · STRIDE <= OFF + (K - 1) · STRIDE < N`
            // (const block above): a byte inside the checked window.
            *b = unsafe { self.ptr.add(OFF + k * STRIDE).read_volatile() };
        }
        out
    }

    /// Copy the whole window out (volatile 8-byte loads; `N` a multiple of
    /// 8). For entries decoded from a byte image, e.g. an EQE: 8 loads
    /// instead of `N` byte loads.
    #[inline(always)]
    pub fn read_into(&self, out: &mut [u8; N]) {
        const { assert!(N.is_multiple_of(8), "read_into needs N % 8 == 0") };
        for (k, chunk) in out.chunks_exact_mut(8).enumerate() {
            // SAFETY: `k * 8 + 8 <= N` (chunks_exact over N bytes) and the
            // window base is 8-byte aligned, so this is an aligned load
            // inside the checked window.
            let v = unsafe { (self.ptr.add(k * 8) as *const u64).read_volatile() };
            chunk.copy_from_slice(&v.to_ne_bytes());
        }
    }
}

/// Consecutive [`DmaWindow`]s of one [`DmaRegion`], checked once when made
/// (see [`DmaRegion::windows`]).
pub struct DmaWindows<'a, const N: usize> {
    ptr: *mut u8,
    left: usize,
    _region: core::marker::PhantomData<&'a ()>,
}

impl<'a, const N: usize> Iterator for DmaWindows<'a, N> {
    type Item = DmaWindow<'a, N>;

    #[inline(always)]
    fn next(&mut self) -> Option<DmaWindow<'a, N>> {
        if self.left == 0 {
            return None;
        }
        // `ptr .. ptr + left · N` lies inside the region (checked when the
        // iterator was made), so this window's N bytes do; its base stays
        // 8-byte aligned because N is a multiple of 8.
        let w = DmaWindow {
            ptr: self.ptr,
            _region: core::marker::PhantomData,
        };
        self.left -= 1;
        // Plain pointer arithmetic (no access): past the last window it may
        // point one past the checked range, where it is never dereferenced.
        self.ptr = self.ptr.wrapping_add(N);
        Some(w)
    }

    #[inline(always)]
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl<const N: usize> ExactSizeIterator for DmaWindows<'_, N> {}

impl<H: Hal> Drop for DmaRegion<H> {
    fn drop(&mut self) {
        let raw = RawDma {
            vaddr: self.raw.vaddr,
            iova: self.raw.iova,
            len: self.raw.len,
        };
        // SAFETY: the region came from this platform's `alloc_dma_raw` (contract of
        // `from_raw`), is freed exactly once here, and the owner drops it only
        // after the firmware object using it is gone (driver invariant).
        unsafe { self.hal.free_dma_raw(raw) };
    }
}

impl<H: Hal> core::fmt::Debug for DmaRegion<H> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DmaRegion")
            .field("iova", &format_args!("{:#x}", self.raw.iova))
            .field("len", &self.raw.len)
            .finish()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    extern crate std;
    use super::*;
    use crate::{HalError, PAGE_SIZE};
    use core::cell::Cell;
    use std::alloc::{alloc_zeroed, dealloc, Layout};
    use std::rc::Rc;

    /// A minimal host-memory platform: IOVA = CPU address + a fixed offset,
    /// and a counter of live regions so the tests can see RAII frees.
    #[derive(Clone)]
    pub(crate) struct TestHal {
        live: Rc<Cell<usize>>,
    }

    const IOVA_SHIFT: u64 = 0x7700_0000_0000;

    // SAFETY: memory comes from the global allocator, zeroed, page aligned,
    // unaliased; the "device" never writes; the clock is a constant.
    unsafe impl Hal for TestHal {
        fn bar0_size(&self) -> usize {
            0
        }
        fn mmio_read32(&self, _offset: usize) -> u32 {
            unreachable!("no BAR in this test platform")
        }
        fn mmio_write32(&self, _offset: usize, _value: u32) {
            unreachable!("no BAR in this test platform")
        }
        fn mmio_write64(&self, _offset: usize, _value: u64) {
            unreachable!("no BAR in this test platform")
        }
        fn alloc_dma_raw(&self, size: usize) -> Result<RawDma, HalError> {
            if size == 0 {
                return Err(HalError::InvalidRequest);
            }
            let len = size.div_ceil(PAGE_SIZE) * PAGE_SIZE;
            let layout = Layout::from_size_align(len, PAGE_SIZE).unwrap();
            // SAFETY: non-zero size layout.
            let p = unsafe { alloc_zeroed(layout) };
            let vaddr = NonNull::new(p).ok_or(HalError::OutOfDmaMemory { requested: size })?;
            self.live.set(self.live.get() + 1);
            Ok(RawDma {
                vaddr,
                iova: p as u64 + IOVA_SHIFT,
                len,
            })
        }
        unsafe fn free_dma_raw(&self, region: RawDma) {
            let layout = Layout::from_size_align(region.len, PAGE_SIZE).unwrap();
            // SAFETY: allocated above with this layout (caller contract).
            unsafe { dealloc(region.vaddr.as_ptr(), layout) };
            self.live.set(self.live.get() - 1);
        }
        fn now_ns(&self) -> u64 {
            0
        }
        fn delay_us(&self, _us: u32) {}
    }

    pub(crate) fn hal() -> TestHal {
        TestHal {
            live: Rc::new(Cell::new(0)),
        }
    }

    #[test]
    fn region_is_zeroed_page_sized_and_freed_on_drop() {
        let h = hal();
        let r = h.alloc_dma(100).unwrap();
        assert_eq!(r.len(), PAGE_SIZE);
        assert_eq!(r.as_ptr() as usize % PAGE_SIZE, 0);
        assert_ne!(
            r.iova(),
            r.as_ptr() as u64,
            "IOVA must not be the CPU address"
        );
        assert!((0..r.len()).all(|i| r.read_u8(i) == 0));
        assert_eq!(h.live.get(), 1);
        drop(r);
        assert_eq!(h.live.get(), 0);
    }

    #[test]
    fn big_endian_accessors_round_trip_and_lay_out_bytes() {
        let h = hal();
        let r = h.alloc_dma(PAGE_SIZE).unwrap();
        r.write_be32(8, 0x1122_3344);
        let mut b = [0u8; 4];
        r.read_bytes(8, &mut b);
        assert_eq!(b, [0x11, 0x22, 0x33, 0x44]);
        assert_eq!(r.read_be32(8), 0x1122_3344);
        r.write_be64(16, 0x0102_0304_0506_0708);
        assert_eq!(r.read_u8(16), 1);
        assert_eq!(r.read_u8(23), 8);
        assert_eq!(r.read_be64(16), 0x0102_0304_0506_0708);
        r.write_be16(30, 0xabcd);
        assert_eq!(r.read_be16(30), 0xabcd);
        r.write_bytes(100, &[9, 8, 7]);
        r.fill(103, 2, 0xf0);
        let mut c = [0u8; 5];
        r.read_bytes(100, &mut c);
        assert_eq!(c, [9, 8, 7, 0xf0, 0xf0]);
        assert_eq!(r.iova_at(100), r.iova() + 100);
    }

    #[test]
    fn byte_copies_are_exact_at_every_alignment_and_length() {
        let h = hal();
        let r = h.alloc_dma(PAGE_SIZE).unwrap();
        let src: std::vec::Vec<u8> = (0..100u8).map(|x| x.wrapping_mul(37) ^ 0x5a).collect();
        for off in 0..9 {
            for len in [0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 100] {
                r.fill(0, 256, 0xee);
                r.write_bytes(off, &src[..len]);
                let mut back = [0u8; 120];
                r.read_bytes(off, &mut back[..len]);
                assert_eq!(&back[..len], &src[..len], "off {off} len {len}");
                if off > 0 {
                    assert_eq!(r.read_u8(off - 1), 0xee, "byte before untouched");
                }
                assert_eq!(r.read_u8(off + len), 0xee, "byte after untouched");
                r.fill(off, len, 0x11);
                r.read_bytes(off, &mut back[..len]);
                assert!(back[..len].iter().all(|&b| b == 0x11));
                assert_eq!(r.read_u8(off + len), 0xee, "fill stays inside");
            }
        }
    }

    #[test]
    #[should_panic(expected = "outside region")]
    fn out_of_bounds_access_panics_instead_of_touching_memory() {
        let h = hal();
        let r = h.alloc_dma(PAGE_SIZE).unwrap();
        r.read_be32(PAGE_SIZE - 2);
    }

    #[test]
    #[should_panic(expected = "unaligned")]
    fn unaligned_access_is_refused() {
        let h = hal();
        let r = h.alloc_dma(PAGE_SIZE).unwrap();
        r.read_be32(2);
    }

    #[test]
    fn windows_cover_consecutive_segments_once_checked() {
        let h = hal();
        let r = h.alloc_dma(PAGE_SIZE).unwrap();
        let mut ws = r.windows::<16>(64, 3);
        assert_eq!(ws.len(), 3);
        for (i, w) in ws.by_ref().enumerate() {
            w.write_be32::<4>(i as u32 + 1);
        }
        assert!(ws.next().is_none());
        assert_eq!(r.read_be32(64 + 4), 1);
        assert_eq!(r.read_be32(80 + 4), 2);
        assert_eq!(r.read_be32(96 + 4), 3);
        assert_eq!(r.windows::<16>(PAGE_SIZE - 32, 2).count(), 2);
        assert_eq!(r.windows::<16>(PAGE_SIZE, 0).count(), 0);
    }

    #[test]
    #[should_panic(expected = "outside region")]
    fn windows_past_the_end_panic_when_made() {
        let h = hal();
        let r = h.alloc_dma(PAGE_SIZE).unwrap();
        let _ = r.windows::<16>(PAGE_SIZE - 32, 3);
    }

    #[test]
    #[should_panic(expected = "outside region")]
    fn windows_with_an_overflowing_count_panic() {
        let h = hal();
        let r = h.alloc_dma(PAGE_SIZE).unwrap();
        let _ = r.windows::<16>(0, usize::MAX / 8);
    }

    #[test]
    fn strided_reads_pick_one_byte_per_entry() {
        let h = hal();
        let r = h.alloc_dma(PAGE_SIZE).unwrap();
        for i in 0..8 {
            r.write_u8(64 + i * 64 + 63, 0x10 + i as u8);
            r.write_u8(64 + i * 64 + 62, 0xee);
        }
        let got = r.window::<512>(64).read_u8_strided::<63, 64, 8>();
        assert_eq!(got, [0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17]);
    }

    #[test]
    fn window_read_into_moves_exact_bytes() {
        let h = hal();
        let r = h.alloc_dma(PAGE_SIZE).unwrap();
        for i in 0..64 {
            r.write_u8(128 + i, i as u8 + 1);
        }
        let mut img = [0u8; 64];
        r.window::<64>(128).read_into(&mut img);
        assert!(img.iter().enumerate().all(|(i, b)| *b == i as u8 + 1));
    }

    /// A mask with a few scattered bits, so a kernel that drops or
    /// misplaces one chunk of the mask shows up.
    fn mask<const S: usize>() -> [u8; S] {
        let mut m = [0u8; S];
        for (i, b) in m.iter_mut().enumerate() {
            if i % 24 == 7 || i == S - 1 {
                *b = 1 << (i % 8);
            }
        }
        m
    }

    /// Fill `src` with a pattern, surround the destination with guards,
    /// run `copy`, and check every byte: entries XOR mask inside, guards
    /// untouched outside.
    fn check_copy<const S: usize>(
        dst_off: usize,
        src_off: usize,
        count: usize,
        copy: impl FnOnce(&DmaRegion<TestHal>, &DmaRegion<TestHal>, &[u8; S]),
    ) {
        let h = hal();
        let src = h.alloc_dma(2 * PAGE_SIZE).unwrap();
        let dst = h.alloc_dma(2 * PAGE_SIZE).unwrap();
        let pattern: std::vec::Vec<u8> = (0..src.len()).map(|i| (i * 7 + 3) as u8).collect();
        src.write_bytes(0, &pattern);
        dst.fill(0, dst.len(), 0xee);
        let m = mask::<S>();
        copy(&dst, &src, &m);
        let mut got = std::vec![0u8; dst.len()];
        dst.read_bytes(0, &mut got);
        for (i, &b) in got.iter().enumerate() {
            if (dst_off..dst_off + count * S).contains(&i) {
                let k = i - dst_off;
                let want = pattern[src_off + k] ^ m[k % S];
                assert_eq!(b, want, "S {S} count {count} byte {k}");
            } else {
                assert_eq!(b, 0xee, "S {S}: byte {i} outside the copy written");
            }
        }
    }

    #[test]
    fn copy_entries_from_moves_whole_entries_with_the_mask_applied() {
        // 32-, 16- and 8-byte aligned placements pick different kernels.
        // (Miri interprets every byte compare: a smaller sweep there.)
        let places: &[(usize, usize)] = if cfg!(miri) {
            &[(64, 128), (8, 24)]
        } else {
            &[(64, 128), (16, 48), (8, 24), (4096, 0)]
        };
        let counts: &[usize] = if cfg!(miri) { &[0, 3] } else { &[0, 1, 3, 17] };
        for &(d, s) in places {
            for &count in counts {
                check_copy::<64>(d, s, count, |dst, src, m| {
                    dst.copy_entries_from::<64>(d, src, s, count, m)
                });
                check_copy::<128>(d, s, count, |dst, src, m| {
                    dst.copy_entries_from::<128>(d, src, s, count, m)
                });
                check_copy::<24>(d, s, count, |dst, src, m| {
                    dst.copy_entries_from::<24>(d, src, s, count, m)
                });
            }
        }
    }

    #[test]
    fn every_copy_kernel_gives_the_same_bytes() {
        use crate::copy;
        check_copy::<64>(64, 128, 9, |dst, src, m| {
            // SAFETY: 9 · 64 bytes inside both 16 KiB regions, aligned.
            unsafe { copy::copy_words::<64>(dst.ptr_at(64, 576, 8), src.ptr_at(128, 576, 8), 9, m) }
        });
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        {
            #[cfg(target_feature = "sse2")]
            check_copy::<128>(64, 128, 9, |dst, src, m| {
                // SAFETY: in bounds as above; 16-byte aligned; the target
                // enables SSE2 (cfg above).
                unsafe {
                    copy::x86::copy_sse2::<128>(
                        dst.ptr_at(64, 1152, 16),
                        src.ptr_at(128, 1152, 16),
                        9,
                        m,
                    )
                }
            });
            if copy::x86::has_avx2() {
                check_copy::<128>(64, 128, 9, |dst, src, m| {
                    // SAFETY: in bounds, 32-byte aligned, AVX2 detected.
                    unsafe {
                        copy::x86::copy_avx2::<128>(
                            dst.ptr_at(64, 1152, 32),
                            src.ptr_at(128, 1152, 32),
                            9,
                            m,
                        )
                    }
                });
            } else {
                std::eprintln!("NOTE: no AVX2 on this CPU: the 32-byte kernel was not run");
            }
        }
    }

    #[test]
    #[should_panic(expected = "overlap")]
    fn copy_entries_within_one_region_refuses_overlap() {
        let h = hal();
        let r = h.alloc_dma(PAGE_SIZE).unwrap();
        r.copy_entries_from::<64>(64, &r, 0, 2, &[0; 64]);
    }

    #[test]
    fn copy_entries_within_one_region_is_allowed_when_disjoint() {
        let h = hal();
        let r = h.alloc_dma(PAGE_SIZE).unwrap();
        r.write_be64(0, 0x0102_0304_0506_0708);
        r.copy_entries_from::<64>(64, &r, 0, 1, &[0; 64]);
        assert_eq!(r.read_be64(64), 0x0102_0304_0506_0708);
    }

    #[test]
    #[should_panic(expected = "outside region")]
    fn copy_entries_past_the_end_panics_before_copying() {
        let h = hal();
        let a = h.alloc_dma(PAGE_SIZE).unwrap();
        let b = h.alloc_dma(PAGE_SIZE).unwrap();
        a.copy_entries_from::<64>(0, &b, 64, 64, &[0; 64]);
    }

    #[test]
    fn zero_sized_allocation_is_an_error() {
        assert_eq!(hal().alloc_dma(0).unwrap_err(), HalError::InvalidRequest);
    }
}
