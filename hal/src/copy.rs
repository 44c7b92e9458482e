//! Bulk volatile copies between DMA regions.
//!
//! One job: move `count` equal-sized entries (CQEs, 64 or 128 bytes) from one
//! DMA region to another, XOR-ing each entry with a constant mask on the way
//! (the CQ resize copy rewrites one owner bit per entry, docs/firmware.md §8).
//! Every load and store is a volatile 8-byte word, like every other DMA
//! access in this crate. This runs once per CQ resize, never on a hot path:
//! a plain loop, no CPU-specific kernels (its cost: docs/perf.md, "Cold
//! paths").
//!
//! No order among the stores of one call is promised; a caller that publishes
//! entries to a concurrent reader must do so with its own barrier and store.

/// Copy `count` entries of `S` bytes from `src` to `dst`, XOR-ing each with
/// `mask`, in 8-byte volatile words.
///
/// # Safety
///
/// `src .. src + count · S` must be valid for volatile reads and `dst .. dst
/// + count · S` for volatile writes, both 8-byte aligned, and the two ranges
///   must not overlap. `S` must be a multiple of 8 (checked at compile time).
#[inline]
pub(crate) unsafe fn copy_entries_xor<const S: usize>(
    dst: *mut u8,
    src: *const u8,
    count: usize,
    mask: &[u8; S],
) {
    const {
        assert!(
            S > 0 && S.is_multiple_of(8),
            "entry size must be a multiple of 8"
        )
    };
    for e in 0..count {
        for (w, m) in mask.chunks_exact(8).enumerate() {
            let m = u64::from_ne_bytes(m.try_into().expect("8-byte chunk"));
            let at = e * S + w * 8;
            // SAFETY: `at + 8 <= count · S`, inside both ranges; 8-byte
            // aligned because the bases are and `S` is a multiple of 8.
            unsafe {
                let v = (src.add(at) as *const u64).read_volatile();
                (dst.add(at) as *mut u64).write_volatile(v ^ m);
            }
        }
    }
}
