//! DMA memory: host pages (2 MiB huge pages when available, 4 KiB pages
//! otherwise), IOVAs from the [`IovaAllocator`], and the IOMMU mappings that
//! join the two.
//!
//! Policy:
//! * A request of 2 MiB or more gets its own mapping: huge pages if enabled and
//!   available, else 4 KiB pages; IOVA aligned to 2 MiB (huge) or 4 KiB.
//! * A smaller request is carved (4 KiB granularity) out of a 2 MiB huge-page
//!   *chunk* that is mapped into the IOMMU once; a chunk is unmapped and
//!   freed when its last piece is freed. Without huge pages a smaller request
//!   gets its own 4 KiB-page mapping.
//! * When a huge-page mapping fails (no pages reserved), the allocation falls
//!   back to 4 KiB pages and a [`Notice::HugePagesUnavailable`] is recorded
//!   once; huge pages are tried again for later requests.
//! * Memory is zero when handed out: fresh mappings come zeroed from the
//!   kernel, carved pieces are zeroed with volatile stores.
//! * An IOVA never equals the CPU address of the same byte (checked).
//!
//! The IOMMU is behind the small [`Mapper`] trait so that this logic is unit
//! tested on any host; the platform plugs in the VFIO container.
//!
//! Here: the [`Mapper`] trait, the pool ([`DmaPool`]) and its statistics;
//! `host_mem` owns the host pages ([`HostMem`]); `tests` runs the pool
//! against a model IOMMU.

use std::collections::HashMap;
use std::io;
use std::ptr::NonNull;

use mlx5_hal::{HalError, RawDma, PAGE_SIZE};

use crate::error::Notice;
use crate::iova::{IovaAllocator, IovaError, IovaRange};

mod host_mem;
#[cfg(test)]
mod tests;

use host_mem::HostMem;

/// Size of a huge page and of a carving chunk.
pub const HUGE_PAGE_SIZE: usize = 2 << 20;

/// The IOMMU side: map and unmap host memory at an IOVA.
pub(crate) trait Mapper {
    /// Map `len` bytes at `vaddr` to `iova`, readable and writable by the device.
    ///
    /// # Safety
    ///
    /// `vaddr..vaddr+len` must stay mapped in this process until `unmap`
    /// of the same range succeeds, and be accessed only through raw pointers
    /// (volatile) meanwhile: the device may write it at any time.
    unsafe fn map(&self, iova: u64, len: usize, vaddr: *mut u8) -> Result<(), i32>;
    /// Remove the mapping made by `map` with the same `iova` and `len`.
    fn unmap(&self, iova: u64, len: usize) -> Result<(), i32>;
}

/// How the pool's memory is spread, for diagnostics and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DmaStats {
    /// 2 MiB huge-page chunks that small regions are carved from.
    pub huge_chunks: usize,
    /// Live regions carved out of huge-page chunks.
    pub carved_regions: usize,
    /// Live regions of 2 MiB or more with their own huge-page mapping.
    pub huge_regions: usize,
    /// Live regions with their own 4 KiB-page mapping.
    pub small_regions: usize,
    /// IOVA bytes not in use.
    pub iova_free: u64,
    /// IOVA bytes managed.
    pub iova_total: u64,
}

struct Chunk {
    mem: HostMem,
    iova: u64,
    /// Offsets `0..HUGE_PAGE_SIZE` in use.
    sub: IovaAllocator,
}

enum Backing {
    /// The region's own host mapping and IOMMU mapping.
    Own {
        mem: HostMem,
        /// Bytes mapped (the region rounded up to the page size in use).
        map_len: usize,
        /// False once `revoke` removed the IOMMU mapping.
        mapped: bool,
        huge: bool,
    },
    /// A piece of the chunk whose IOVA is `chunk_iova`.
    Carved { chunk_iova: u64 },
}

struct Alloc {
    len: usize,
    backing: Backing,
}

/// Errors of [`DmaPool::free`] / [`DmaPool::revoke`]: the caller's request
/// does not match the pool's records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PoolError {
    /// No live region starts at this IOVA with this length.
    Unknown { iova: u64, len: usize },
    /// The region shares its IOMMU mapping with others (carved from a chunk).
    Shared,
    /// The IOMMU refused to unmap (errno); the memory is leaked, not freed.
    Unmap(i32),
}

/// The DMA allocator of one VFIO device.
pub(crate) struct DmaPool<M: Mapper> {
    mapper: M,
    iova: IovaAllocator,
    hugepages: bool,
    chunks: Vec<Chunk>,
    allocs: HashMap<u64, Alloc>,
    notices: Vec<Notice>,
    huge_notice_given: bool,
}

fn round_up(x: usize, to: usize) -> Option<usize> {
    x.checked_next_multiple_of(to)
}

fn hal_err_from_errno(errno: i32, requested: usize) -> HalError {
    if errno == libc::ENOMEM || errno == libc::ENOSPC {
        HalError::OutOfDmaMemory { requested }
    } else {
        HalError::Platform { errno }
    }
}

/// Zero `len` bytes at `p` with volatile stores (8 bytes at a time).
///
/// # Safety
///
/// `p..p+len` must be valid for writes, 8-byte aligned, `len % 8 == 0`, and
/// not accessed by anyone else (the device included) meanwhile.
unsafe fn zero_volatile(p: *mut u8, len: usize) {
    let words = p.cast::<u64>();
    for i in 0..len / 8 {
        // SAFETY: in bounds and aligned by the caller's contract.
        unsafe { words.add(i).write_volatile(0) };
    }
}

impl<M: Mapper> DmaPool<M> {
    /// A pool that hands out IOVAs from `ranges`.
    pub(crate) fn new(mapper: M, ranges: &[IovaRange], hugepages: bool) -> Self {
        DmaPool {
            mapper,
            iova: IovaAllocator::new(ranges),
            hugepages,
            chunks: Vec::new(),
            allocs: HashMap::new(),
            notices: Vec::new(),
            huge_notice_given: false,
        }
    }

    /// Notices recorded since the last call.
    pub(crate) fn take_notices(&mut self) -> Vec<Notice> {
        std::mem::take(&mut self.notices)
    }

    pub(crate) fn stats(&self) -> DmaStats {
        let mut s = DmaStats {
            huge_chunks: self.chunks.len(),
            iova_free: self.iova.free_bytes(),
            iova_total: self.iova.total_bytes(),
            ..DmaStats::default()
        };
        for a in self.allocs.values() {
            match a.backing {
                Backing::Carved { .. } => s.carved_regions += 1,
                Backing::Own { huge: true, .. } => s.huge_regions += 1,
                Backing::Own { huge: false, .. } => s.small_regions += 1,
            }
        }
        s
    }

    fn huge_failed(&mut self, e: &io::Error) {
        if !self.huge_notice_given {
            self.huge_notice_given = true;
            let n = Notice::HugePagesUnavailable {
                errno: e.raw_os_error().unwrap_or(libc::ENOMEM),
            };
            log::warn!("mlx5-vfio: {n}");
            self.notices.push(n);
        }
    }

    fn map_failed(&mut self, errno: i32) {
        if errno == libc::ENOMEM && !self.notices.contains(&Notice::MemlockLimit) {
            log::warn!("mlx5-vfio: {}", Notice::MemlockLimit);
            self.notices.push(Notice::MemlockLimit);
        }
    }

    /// An IOVA block for memory at `vaddr`, never equal to `vaddr`.
    fn alloc_iova(&mut self, len: usize, align: usize, vaddr: u64) -> Result<u64, IovaError> {
        let a = self.iova.alloc(len as u64, align as u64)?;
        if a != vaddr {
            return Ok(a);
        }
        let b = self.iova.alloc(len as u64, align as u64);
        self.iova
            .free(a, len as u64)
            .expect("IOVA block allocated just above");
        b
    }

    /// Map fresh host memory of `map_len` bytes at a fresh IOVA.
    fn map_own(
        &mut self,
        map_len: usize,
        huge: bool,
        requested: usize,
    ) -> Result<(HostMem, u64), MapOwnError> {
        let mem = HostMem::map(map_len, huge).map_err(MapOwnError::Mmap)?;
        let align = if huge { HUGE_PAGE_SIZE } else { PAGE_SIZE };
        let iova = self
            .alloc_iova(map_len, align, mem.ptr().as_ptr() as u64)
            .map_err(|_| MapOwnError::Hal(HalError::OutOfDmaMemory { requested }))?;
        // SAFETY: `mem` is owned by the record this mapping goes into and is
        // dropped (munmapped) only after a successful `unmap` (or leaked when
        // unmap fails); it is accessed only through volatile raw pointers.
        if let Err(errno) = unsafe { self.mapper.map(iova, map_len, mem.ptr().as_ptr()) } {
            self.iova
                .free(iova, map_len as u64)
                .expect("IOVA block allocated just above");
            self.map_failed(errno);
            return Err(MapOwnError::Hal(hal_err_from_errno(errno, requested)));
        }
        Ok((mem, iova))
    }

    /// Allocate `size` bytes, zeroed, page aligned, contiguous in CPU and IOVA
    /// space.
    pub(crate) fn alloc(&mut self, size: usize) -> Result<RawDma, HalError> {
        if size == 0 {
            return Err(HalError::InvalidRequest);
        }
        let len = round_up(size, PAGE_SIZE).ok_or(HalError::OutOfDmaMemory { requested: size })?;
        if self.hugepages {
            if len >= HUGE_PAGE_SIZE {
                let map_len = round_up(len, HUGE_PAGE_SIZE)
                    .ok_or(HalError::OutOfDmaMemory { requested: size })?;
                match self.map_own(map_len, true, size) {
                    Ok((mem, iova)) => return Ok(self.record_own(mem, iova, len, map_len, true)),
                    Err(MapOwnError::Mmap(e)) => self.huge_failed(&e),
                    Err(MapOwnError::Hal(e)) => return Err(e),
                }
            } else {
                match self.carve(len, size) {
                    Ok(Some(raw)) => return Ok(raw),
                    Ok(None) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        match self.map_own(len, false, size) {
            Ok((mem, iova)) => Ok(self.record_own(mem, iova, len, len, false)),
            Err(MapOwnError::Mmap(e)) => Err(hal_err_from_errno(
                e.raw_os_error().unwrap_or(libc::ENOMEM),
                size,
            )),
            Err(MapOwnError::Hal(e)) => Err(e),
        }
    }

    fn record_own(
        &mut self,
        mem: HostMem,
        iova: u64,
        len: usize,
        map_len: usize,
        huge: bool,
    ) -> RawDma {
        let vaddr = mem.ptr();
        self.allocs.insert(
            iova,
            Alloc {
                len,
                backing: Backing::Own {
                    mem,
                    map_len,
                    mapped: true,
                    huge,
                },
            },
        );
        RawDma { vaddr, iova, len }
    }

    /// Carve `len` bytes from a chunk (a new one if needed). `Ok(None)` when
    /// no huge page could be had: the caller falls back to 4 KiB pages.
    fn carve(&mut self, len: usize, requested: usize) -> Result<Option<RawDma>, HalError> {
        let mut found = None;
        for (i, c) in self.chunks.iter_mut().enumerate() {
            if let Ok(off) = c.sub.alloc(len as u64, PAGE_SIZE as u64) {
                found = Some((i, off));
                break;
            }
        }
        let (i, off) = match found {
            Some(f) => f,
            None => {
                let (mem, iova) = match self.map_own(HUGE_PAGE_SIZE, true, requested) {
                    Ok(x) => x,
                    Err(MapOwnError::Mmap(e)) => {
                        self.huge_failed(&e);
                        return Ok(None);
                    }
                    Err(MapOwnError::Hal(e)) => return Err(e),
                };
                let mut sub = IovaAllocator::new(&[IovaRange::new(0, HUGE_PAGE_SIZE as u64)]);
                let off = sub
                    .alloc(len as u64, PAGE_SIZE as u64)
                    .expect("fresh chunk fits");
                self.chunks.push(Chunk { mem, iova, sub });
                (self.chunks.len() - 1, off)
            }
        };
        let c = &self.chunks[i];
        // SAFETY: `off + len <= HUGE_PAGE_SIZE` (the sub-allocator's space), so
        // the pointer stays inside the chunk's mapping.
        let p = unsafe { c.mem.ptr().as_ptr().add(off as usize) };
        // SAFETY: the piece was free until now, so neither the CPU (no live
        // region covers it) nor the device (its previous owner released it,
        // `free_dma_raw` contract) accesses it; page aligned, length a page multiple.
        unsafe { zero_volatile(p, len) };
        let iova = c.iova + off;
        let chunk_iova = c.iova;
        self.allocs.insert(
            iova,
            Alloc {
                len,
                backing: Backing::Carved { chunk_iova },
            },
        );
        let vaddr = NonNull::new(p).expect("inside a non-null mapping");
        Ok(Some(RawDma { vaddr, iova, len }))
    }

    /// Free the region that starts at `iova` and is `len` bytes long.
    pub(crate) fn free(&mut self, iova: u64, len: usize) -> Result<(), PoolError> {
        match self.allocs.get(&iova) {
            Some(a) if a.len == len => {}
            _ => return Err(PoolError::Unknown { iova, len }),
        }
        let a = self.allocs.remove(&iova).expect("checked above");
        match a.backing {
            Backing::Own {
                mem,
                map_len,
                mapped,
                ..
            } => {
                if mapped {
                    if let Err(errno) = self.mapper.unmap(iova, map_len) {
                        // The device may still reach the memory: never give
                        // it back to the allocator or the kernel.
                        std::mem::forget(mem);
                        return Err(PoolError::Unmap(errno));
                    }
                }
                drop(mem);
                self.iova
                    .free(iova, map_len as u64)
                    .expect("IOVA block recorded at allocation");
            }
            Backing::Carved { chunk_iova } => {
                let i = self
                    .chunks
                    .iter()
                    .position(|c| c.iova == chunk_iova)
                    .expect("chunk of a live piece");
                let c = &mut self.chunks[i];
                c.sub
                    .free(iova - chunk_iova, len as u64)
                    .expect("piece recorded at allocation");
                if c.sub.is_all_free() {
                    let c = self.chunks.swap_remove(i);
                    self.release_chunk(c)?;
                }
            }
        }
        Ok(())
    }

    fn release_chunk(&mut self, c: Chunk) -> Result<(), PoolError> {
        if let Err(errno) = self.mapper.unmap(c.iova, HUGE_PAGE_SIZE) {
            std::mem::forget(c.mem);
            return Err(PoolError::Unmap(errno));
        }
        self.iova
            .free(c.iova, HUGE_PAGE_SIZE as u64)
            .expect("chunk IOVA recorded at allocation");
        Ok(())
    }

    /// Remove the IOMMU mapping of the live region at `iova` but keep its
    /// memory (and its IOVA reserved) until it is freed.
    pub(crate) fn revoke(&mut self, iova: u64, len: usize) -> Result<(), PoolError> {
        let mapper = &self.mapper;
        match self.allocs.get_mut(&iova) {
            Some(Alloc {
                len: l,
                backing: Backing::Own {
                    map_len, mapped, ..
                },
            }) if *l == len => {
                if *mapped {
                    mapper.unmap(iova, *map_len).map_err(PoolError::Unmap)?;
                    *mapped = false;
                }
                Ok(())
            }
            Some(Alloc {
                len: l,
                backing: Backing::Carved { .. },
            }) if *l == len => Err(PoolError::Shared),
            _ => Err(PoolError::Unknown { iova, len }),
        }
    }

    /// Unmap and free everything (the device must be quiesced). Returns the
    /// first unmap error; memory whose unmap failed is leaked, not freed.
    pub(crate) fn release_all(&mut self) -> Result<(), PoolError> {
        let mut first = Ok(());
        let owns: Vec<(u64, usize)> = self
            .allocs
            .iter()
            .filter(|(_, a)| matches!(a.backing, Backing::Own { .. }))
            .map(|(i, a)| (*i, a.len))
            .collect();
        for (iova, len) in owns {
            if let Err(e) = self.free(iova, len) {
                first = first.and(Err(e));
            }
        }
        self.allocs.clear();
        for c in std::mem::take(&mut self.chunks) {
            if let Err(e) = self.release_chunk(c) {
                first = first.and(Err(e));
            }
        }
        first
    }
}

enum MapOwnError {
    /// The host memory could not be mapped.
    Mmap(io::Error),
    /// IOVA exhausted or the IOMMU refused.
    Hal(HalError),
}
