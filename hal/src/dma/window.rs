//! Windows: fixed-size views of a [`DmaRegion`], bounds-checked once when
//! made, whose accessors name their offset as a const generic.
//!
//! The region's own accessors (the parent module) check every access; a
//! window moves that check to where it is made, and the compiler checks each
//! field offset against the window size and the access alignment. The data
//! path (CQE polls, WQE posts) reads and writes descriptors through windows.
//! The same rule holds as for the region: volatile raw-pointer accesses only,
//! big-endian values (every mlx5 structure is big-endian), no Rust reference
//! into DMA memory.

use super::{out_of_range, DmaRegion};
use crate::Hal;

impl<H: Hal> DmaRegion<H> {
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

    /// Volatile write of `value` as it lies in memory (no byte swap) at the
    /// const offset `OFF`: for words kept in wire order, e.g. loaded with
    /// `u64::from_ne_bytes` from the bytes the device expects.
    #[inline(always)]
    pub fn write_ne64<const OFF: usize>(&self, value: u64) {
        const {
            assert!(OFF + 8 <= N, "window write out of bounds");
            assert!(OFF.is_multiple_of(8), "unaligned window write");
        }
        // SAFETY: as for `write_be64`: the window's N bytes were
        // bounds-checked and 8-byte aligned when made; the const block
        // proves OFF + 8 <= N and OFF is aligned.
        unsafe { (self.ptr.add(OFF) as *mut u64).write_volatile(value) }
    }

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
