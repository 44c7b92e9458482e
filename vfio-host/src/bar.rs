//! BAR0 of the device, mmapped from the VFIO device file: bounds-checked
//! single volatile loads and stores, never a reference into device memory.

use std::ptr::NonNull;

/// BAR0 mapped into this process.
pub(crate) struct Bar {
    pub(crate) ptr: NonNull<u8>,
    pub(crate) len: usize,
}

// SAFETY: `Bar` is a mapping of device registers, not of Rust-owned memory.
// It is only accessed with single volatile loads and stores through raw
// pointers (never references), which have the same meaning from any thread;
// concurrent register access is then a question of the device's semantics,
// which the driver owns, not of memory safety.
unsafe impl Send for Bar {}
// SAFETY: as for `Send`: shared access is only volatile raw-pointer access.
unsafe impl Sync for Bar {}

impl Bar {
    /// Pointer to `width` bytes at `offset`; panics if that is outside BAR0 or
    /// not aligned to `width`, so no access can touch other memory.
    #[inline(always)]
    fn at(&self, offset: usize, width: usize) -> *mut u8 {
        assert!(
            offset.checked_add(width).is_some_and(|end| end <= self.len),
            "BAR0 access {offset:#x}+{width} outside BAR0 of {:#x} bytes",
            self.len
        );
        assert!(
            offset.is_multiple_of(width),
            "unaligned BAR0 access at {offset:#x} (width {width})"
        );
        // SAFETY: `offset + width <= len` was just checked, so the result is
        // inside the mapping.
        unsafe { self.ptr.as_ptr().add(offset) }
    }

    #[inline(always)]
    pub(crate) fn read32(&self, offset: usize) -> u32 {
        let p = self.at(offset, 4).cast::<u32>();
        // SAFETY: in bounds and 4-byte aligned (checked by `at`; the mapping
        // is page aligned), and the mapping lives as long as `self`.
        unsafe { p.read_volatile() }
    }

    #[inline(always)]
    pub(crate) fn write32(&self, offset: usize, raw: u32) {
        let p = self.at(offset, 4).cast::<u32>();
        // SAFETY: as in `read32`.
        unsafe { p.write_volatile(raw) }
    }

    #[inline(always)]
    pub(crate) fn read64(&self, offset: usize) -> u64 {
        let p = self.at(offset, 8).cast::<u64>();
        // SAFETY: in bounds and 8-byte aligned (checked by `at`); a volatile
        // access of the native word size is one load on 64-bit targets.
        unsafe { p.read_volatile() }
    }

    #[inline(always)]
    pub(crate) fn write64(&self, offset: usize, raw: u64) {
        let p = self.at(offset, 8).cast::<u64>();
        // SAFETY: as in `read64`: one aligned 8-byte store inside BAR0.
        unsafe { p.write_volatile(raw) }
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        // SAFETY: `ptr..ptr+len` is the BAR mapping created in `open` and
        // owned only by this `Bar`; no access can follow the drop.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}
