//! Bulk volatile copies between DMA regions, as wide as the CPU allows.
//!
//! One job: move `count` equal-sized entries (CQEs, 64 or 128 bytes) from one
//! DMA region to another, XOR-ing each entry with a constant mask on the way
//! (the CQ resize copy rewrites one owner bit per entry, docs/firmware.md §8). Every load
//! and store is volatile, like every other DMA access in this crate; the only
//! freedom taken is the access width.
//!
//! Kernels, picked once per call:
//! * x86_64 with AVX2 (detected at run time, cached): 32-byte volatile
//!   accesses, the width glibc's `memcpy` uses on the same CPUs;
//! * x86_64 otherwise, when the target has SSE2 (every hosted x86_64 target;
//!   not `x86_64-unknown-none`, whose kernels may not have enabled SSE):
//!   16-byte accesses;
//! * everywhere else, under Miri, or when an address is not 16-byte aligned:
//!   8-byte words.
//!
//! The AVX2 kernel runs only when CPUID says the *operating system* enabled
//! the AVX register state (OSXSAVE and XCR0), so it is safe on a soft-float
//! target too: a kernel that never enabled AVX gets the word kernel.
//!
//! No order among the stores of one call is promised; a caller that publishes
//! entries to a concurrent reader must do so with its own barrier and store.

/// Copy `count` entries of `S` bytes from `src` to `dst`, XOR-ing each with
/// `mask`.
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
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        let both = src as usize | dst as usize;
        if S.is_multiple_of(32) && both.is_multiple_of(32) && x86::has_avx2() {
            // SAFETY: AVX2 is available (just detected); the caller's
            // contract covers the ranges; both are 32-byte aligned and S is
            // a multiple of 32, so every 32-byte access is aligned.
            unsafe { x86::copy_avx2::<S>(dst, src, count, mask) };
            return;
        }
        #[cfg(target_feature = "sse2")]
        if S.is_multiple_of(16) && both.is_multiple_of(16) {
            // SAFETY: the target enables SSE2 (cfg above); ranges per the
            // caller's contract; 16-byte aligned with S a multiple of 16.
            unsafe { x86::copy_sse2::<S>(dst, src, count, mask) };
            return;
        }
    }
    // SAFETY: the caller's contract, 8-byte alignment included.
    unsafe { copy_words::<S>(dst, src, count, mask) }
}

/// The portable kernel: 8-byte volatile words.
///
/// # Safety
///
/// As for [`copy_entries_xor`].
#[inline]
pub(crate) unsafe fn copy_words<const S: usize>(
    dst: *mut u8,
    src: *const u8,
    count: usize,
    mask: &[u8; S],
) {
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

#[cfg(all(target_arch = "x86_64", not(miri)))]
pub(crate) mod x86 {
    #[cfg(target_feature = "sse2")]
    use core::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_xor_si128};
    use core::arch::x86_64::{__m256i, _mm256_loadu_si256, _mm256_xor_si256};
    use core::sync::atomic::{AtomicU8, Ordering};

    const UNKNOWN: u8 = 0;
    const ABSENT: u8 = 1;
    const PRESENT: u8 = 2;
    static AVX2: AtomicU8 = AtomicU8::new(UNKNOWN);

    /// True when the CPU has AVX2 *and* the operating system saves the
    /// 256-bit registers (a unikernel that never set XCR0.AVX gets a
    /// narrower kernel). Detected once; a race only detects twice.
    #[inline]
    pub(crate) fn has_avx2() -> bool {
        if cfg!(target_feature = "avx2") {
            return true;
        }
        match AVX2.load(Ordering::Relaxed) {
            PRESENT => true,
            ABSENT => false,
            _ => {
                let yes = detect_avx2();
                AVX2.store(if yes { PRESENT } else { ABSENT }, Ordering::Relaxed);
                yes
            }
        }
    }

    #[cold]
    fn detect_avx2() -> bool {
        use core::arch::x86_64::{__cpuid, __cpuid_count};
        // CPUID leaf 1, ECX: bit 27 OSXSAVE (XGETBV usable), bit 28 AVX.
        // `__cpuid` is a safe function from Rust 1.94 on and unsafe before;
        // the `unsafe` blocks keep the crate building on the declared
        // rust-version (1.87), `unused_unsafe` silences them on newer ones.
        // SAFETY: CPUID is available on every x86_64 CPU; leaves 0 and 1
        // always exist and reading them has no side effect.
        #[allow(unused_unsafe)]
        let leaf1 = unsafe { __cpuid(1) };
        if leaf1.ecx & (1 << 27) == 0 || leaf1.ecx & (1 << 28) == 0 {
            return false;
        }
        // XCR0 bits 1 (SSE state) and 2 (AVX state): the OS saves the YMM
        // registers on a context switch.
        let xcr0_lo: u32;
        // SAFETY: XGETBV with ECX = 0 reads XCR0; it is defined whenever
        // CPUID reports OSXSAVE (checked above). It touches no memory.
        unsafe {
            core::arch::asm!(
                "xgetbv",
                in("ecx") 0u32,
                out("eax") xcr0_lo,
                out("edx") _,
                options(nomem, nostack, preserves_flags),
            );
        }
        if xcr0_lo & 0b110 != 0b110 {
            return false;
        }
        // CPUID leaf 7 sub-leaf 0, EBX bit 5: AVX2 (leaf 7 exists when the
        // maximum basic leaf is at least 7).
        // SAFETY: as above for leaf 0; leaf 7 is read only after leaf 0 says
        // it exists.
        #[allow(unused_unsafe)]
        let avx2 = unsafe { __cpuid(0).eax >= 7 && __cpuid_count(7, 0).ebx & (1 << 5) != 0 };
        avx2
    }

    /// 32-byte kernel.
    ///
    /// # Safety
    ///
    /// As for [`super::copy_entries_xor`], and: AVX2 is available, both
    /// pointers are 32-byte aligned and `S` is a multiple of 32.
    #[target_feature(enable = "avx2")]
    pub(crate) unsafe fn copy_avx2<const S: usize>(
        dst: *mut u8,
        src: *const u8,
        count: usize,
        mask: &[u8; S],
    ) {
        for e in 0..count {
            let mut c = 0;
            while c < S {
                // SAFETY: `c + 32 <= S` and `mask` is a live `[u8; S]`: an
                // unaligned load from ordinary memory (not DMA memory).
                let m = unsafe { _mm256_loadu_si256(mask.as_ptr().add(c) as *const __m256i) };
                let at = e * S + c;
                // SAFETY: `at + 32 <= count · S`, inside both ranges, and
                // 32-byte aligned (bases aligned, `S` and `c` multiples of
                // 32); `__m256i` has no invalid bit patterns.
                unsafe {
                    let v = (src.add(at) as *const __m256i).read_volatile();
                    (dst.add(at) as *mut __m256i).write_volatile(_mm256_xor_si256(v, m));
                }
                c += 32;
            }
        }
    }

    /// 16-byte kernel (only where the target enables SSE2).
    ///
    /// # Safety
    ///
    /// As for [`super::copy_entries_xor`], and: both pointers are 16-byte
    /// aligned and `S` is a multiple of 16.
    #[cfg(target_feature = "sse2")]
    pub(crate) unsafe fn copy_sse2<const S: usize>(
        dst: *mut u8,
        src: *const u8,
        count: usize,
        mask: &[u8; S],
    ) {
        for e in 0..count {
            let mut c = 0;
            while c < S {
                // SAFETY: `c + 16 <= S`, inside the mask array.
                let m = unsafe { _mm_loadu_si128(mask.as_ptr().add(c) as *const __m128i) };
                let at = e * S + c;
                // SAFETY: inside both ranges and 16-byte aligned, as for the
                // AVX2 kernel with 16 for 32.
                unsafe {
                    let v = (src.add(at) as *const __m128i).read_volatile();
                    (dst.add(at) as *mut __m128i).write_volatile(_mm_xor_si128(v, m));
                }
                c += 16;
            }
        }
    }
}
