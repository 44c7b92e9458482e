//! [`HostMem`]: the host side of a DMA region, anonymous memory from
//! `mmap(2)`, populated at once, in 2 MiB huge pages (`MAP_HUGETLB` with
//! `MAP_HUGE_2MB`) or 4 KiB pages, kept out of `fork` children
//! (`MADV_DONTFORK`), and unmapped on drop.
//!
//! The pool (the parent module) decides which pages a request gets and maps
//! the memory into the IOMMU; this module only owns the mapping. It is the
//! one place in the pool that calls `mmap`/`munmap`.

use std::io;
use std::ptr::NonNull;

/// Requests the 2 MiB page size explicitly (`MAP_HUGE_2MB`), in case the
/// system's default huge page size is 1 GiB.
const MAP_HUGE_2MB: libc::c_int = 21 << libc::MAP_HUGE_SHIFT;

/// Anonymous host memory from `mmap`, unmapped on drop.
pub(crate) struct HostMem {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: `HostMem` exclusively owns its mapping; the pointer is only a handle
// to it and is used through volatile raw-pointer operations by whoever owns
// the `HostMem` (behind the pool's mutex), so moving it between threads is
// sound.
unsafe impl Send for HostMem {}

impl HostMem {
    /// Map `len` zeroed bytes (a multiple of the page size in use), populated
    /// at once, and excluded from `fork` children (a child must never get
    /// copy-on-write access to pages the device writes).
    pub(crate) fn map(len: usize, huge: bool) -> io::Result<Self> {
        let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE;
        if huge {
            flags |= libc::MAP_HUGETLB | MAP_HUGE_2MB;
        }
        // SAFETY: an anonymous mapping at an address of the kernel's choosing
        // cannot overlap or alias any existing Rust object.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `p..p+len` is the mapping just created. MADV_DONTFORK only
        // changes what a future fork inherits; failure is harmless (ignored).
        unsafe { libc::madvise(p, len, libc::MADV_DONTFORK) };
        let ptr = NonNull::new(p.cast::<u8>())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EFAULT))?;
        Ok(HostMem { ptr, len })
    }

    pub(crate) fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }
}

impl Drop for HostMem {
    fn drop(&mut self) {
        // SAFETY: `ptr..ptr+len` is a mapping created by `map` and owned
        // exclusively by `self`; nothing uses it after this drop.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}
