//! Named memory barriers between the CPU and the device.
//!
//! Each barrier is named after what it orders, following the rules both Linux
//! `mlx5_core` and rdma-core obey (docs/firmware.md §5, "Ordering rules"):
//!
//! | step | barrier |
//! |---|---|
//! | ownership bit of a CQE/EQE checked → read the entry body | [`dma_rmb`] |
//! | WQE / descriptor stores → doorbell record store | [`dma_wmb`] |
//! | doorbell record store (DMA memory) → MMIO doorbell write | [`mmio_wmb`] |
//! | write-combined (BlueFlame) MMIO stores → later stores | [`mmio_flush`] |
//!
//! On x86_64 the memory model already keeps loads in order and stores in order
//! for coherent (write-back) memory, so [`dma_rmb`] and [`dma_wmb`] only stop
//! the compiler (Linux `dma_rmb()`/`dma_wmb()` are `barrier()` there). Ordering
//! DMA-memory stores against an MMIO store and draining write-combining buffers
//! use `sfence` (Linux `wmb()`, rdma-core `mmio_flush_writes()`).
//! On aarch64 the outer-shareable `dmb`/`dsb` forms are used, as Linux does.
//! Other architectures (and Miri, which cannot run inline assembly) fall back
//! to a sequentially consistent fence, which is at least as strong.

#[allow(unused_imports)] // which ones are used depends on the architecture
use core::sync::atomic::{compiler_fence, fence, Ordering};

/// Device-to-CPU read barrier: reads issued after it observe DMA data at least
/// as new as the ownership bit read before it (Linux `dma_rmb`, rdma-core
/// `udma_from_device_barrier`).
#[inline(always)]
pub fn dma_rmb() {
    #[cfg(all(target_arch = "aarch64", not(miri)))]
    // SAFETY: `dmb oshld` only orders memory accesses; it reads or writes no
    // memory and has no other architectural effect.
    unsafe {
        core::arch::asm!("dmb oshld", options(nostack, preserves_flags))
    };
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    compiler_fence(Ordering::SeqCst);
    #[cfg(any(miri, not(any(target_arch = "x86_64", target_arch = "aarch64"))))]
    fence(Ordering::SeqCst);
}

/// CPU-to-device write barrier for DMA memory: stores before it reach the
/// device before stores after it (Linux `dma_wmb`, rdma-core
/// `udma_to_device_barrier`). Used between writing descriptors and publishing
/// them through a doorbell record or an ownership bit.
#[inline(always)]
pub fn dma_wmb() {
    #[cfg(all(target_arch = "aarch64", not(miri)))]
    // SAFETY: `dmb oshst` only orders stores; no memory access of its own.
    unsafe {
        core::arch::asm!("dmb oshst", options(nostack, preserves_flags))
    };
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    compiler_fence(Ordering::SeqCst);
    #[cfg(any(miri, not(any(target_arch = "x86_64", target_arch = "aarch64"))))]
    fence(Ordering::SeqCst);
}

/// Orders stores to DMA memory (a doorbell record, a command entry) before a
/// following MMIO store (a doorbell register) (Linux `wmb`).
#[inline(always)]
pub fn mmio_wmb() {
    #[cfg(all(target_arch = "aarch64", not(miri)))]
    // SAFETY: `dsb st` waits for prior stores to complete; no memory access.
    unsafe {
        core::arch::asm!("dsb st", options(nostack, preserves_flags))
    };
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: `sfence` orders prior stores (including write-combining ones)
    // before later stores; it touches no memory and no flags.
    unsafe {
        core::arch::asm!("sfence", options(nostack, preserves_flags))
    };
    #[cfg(any(miri, not(any(target_arch = "x86_64", target_arch = "aarch64"))))]
    fence(Ordering::SeqCst);
    #[cfg(not(any(miri, not(any(target_arch = "x86_64", target_arch = "aarch64")))))]
    compiler_fence(Ordering::SeqCst);
}

/// Drains write-combined MMIO stores so they reach the device before anything
/// after this barrier (rdma-core `mmio_flush_writes`).
#[inline(always)]
pub fn mmio_flush() {
    mmio_wmb();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn barriers_execute() {
        // The barriers have no observable effect on a single thread; this test
        // proves they assemble and run on the host architecture.
        dma_rmb();
        dma_wmb();
        mmio_wmb();
        mmio_flush();
    }
}
