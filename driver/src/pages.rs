//! Firmware pages (docs/firmware.md §4.2): 4 KiB pages of DMA memory given to firmware
//! with MANAGE_PAGES and taken back, without a heap.
//!
//! Pages come from *chunks*: DMA regions of up to [`CHUNK_MAX_PAGES`] pages
//! (2 MiB, as rdma-core does) with a bitmap of pages firmware holds. At most
//! [`MAX_CHUNKS`] chunks exist and the total is further capped by
//! [`crate::HcaConfig::max_fw_pages`]. The manager always knows how many
//! pages firmware holds ([`PageManager::held`]); empty chunks are returned to
//! the platform.
//!
//! Page requests (EQE type 0x0b, positive = give, negative = take back) are
//! queued in [`PageManager`] and served by the command layer at the next
//! opportunity, including while another command waits (see
//! [`crate::Hca::exec`]).

use mlx5_hal::{DmaRegion, Hal, PAGE_SIZE};

use crate::error::Error;

/// Pages per chunk, at most (2 MiB).
pub const CHUNK_MAX_PAGES: usize = 512;
/// Chunks the manager can hold (capacity 128 × 2 MiB = 256 MiB).
pub const MAX_CHUNKS: usize = 128;
/// Page requests that can wait to be served; further requests of the same
/// sign are merged into the last one.
pub const PENDING_REQUESTS: usize = 32;

struct Chunk<H: Hal> {
    region: DmaRegion<H>,
    pages: usize,
    used: [u64; CHUNK_MAX_PAGES / 64],
    n_used: usize,
}

impl<H: Hal> Chunk<H> {
    fn contains(&self, iova: u64) -> Option<usize> {
        let base = self.region.iova();
        if iova >= base && iova < base + (self.pages * PAGE_SIZE) as u64 {
            let off = (iova - base) as usize;
            if off.is_multiple_of(PAGE_SIZE) {
                return Some(off / PAGE_SIZE);
            }
        }
        None
    }
    fn is_used(&self, i: usize) -> bool {
        self.used[i / 64] & (1 << (i % 64)) != 0
    }
}

/// `chunk_pages` within 1..=[`CHUNK_MAX_PAGES`] (`const`, unlike `clamp`).
const fn clamp_chunk(n: usize) -> usize {
    if n < 1 {
        1
    } else if n > CHUNK_MAX_PAGES {
        CHUNK_MAX_PAGES
    } else {
        n
    }
}

/// `max_pages` at most what [`MAX_CHUNKS`] full chunks hold.
const fn cap_max(n: usize) -> usize {
    if n > MAX_CHUNKS * CHUNK_MAX_PAGES {
        MAX_CHUNKS * CHUNK_MAX_PAGES
    } else {
        n
    }
}

/// Counters of the page manager.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageStats {
    /// Pages given to firmware (all time).
    pub given: u64,
    /// Pages taken back from firmware (all time).
    pub reclaimed: u64,
    /// Page-request events received.
    pub requests: u64,
    /// Requests answered with MANAGE_PAGES op_mod 0 (cannot give).
    pub give_failures: u64,
    /// Requests merged into an earlier one because the pending queue was full.
    pub merged: u64,
    /// Page counts refused before any page was given because they exceed
    /// what the manager may hold ([`crate::HcaConfig::max_fw_pages`]): a
    /// device asking for more memory than exists (answered "cannot give"
    /// for page requests, an error at bring-up).
    pub refused_counts: u64,
    /// MANAGE_PAGES outputs refused: pages the driver never gave (or gave
    /// back already), or more pages than asked for. Nothing is freed on
    /// such an answer.
    pub bad_returns: u64,
}

/// A pending page request from firmware.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRequest {
    /// `func_id` of the event.
    pub function_id: u16,
    /// The request is for the embedded-CPU function (`ec_function` bit 15 of
    /// the event); answered with `embedded_cpu_function` = 1 (Linux
    /// `req_pages_handler`, `give_pages`).
    pub ec_function: bool,
    /// > 0: firmware wants that many more pages; < 0: it returns |n|.
    pub num_pages: i32,
}

/// The page manager. Not a public constructor: one lives inside [`crate::Hca`].
pub struct PageManager<H: Hal> {
    chunks: heapless::Vec<Chunk<H>, MAX_CHUNKS>,
    chunk_pages: usize,
    max_pages: usize,
    held: usize,
    pending: heapless::Deque<PageRequest, PENDING_REQUESTS>,
    stats: PageStats,
}

impl<H: Hal> PageManager<H> {
    /// A manager with chunks of `chunk_pages` pages (clamped to 1..=512) and
    /// at most `max_pages` pages in total.
    pub const fn new(chunk_pages: usize, max_pages: usize) -> Self {
        PageManager {
            chunks: heapless::Vec::new(),
            chunk_pages: clamp_chunk(chunk_pages),
            max_pages: cap_max(max_pages),
            held: 0,
            pending: heapless::Deque::new(),
            stats: PageStats {
                given: 0,
                reclaimed: 0,
                requests: 0,
                give_failures: 0,
                merged: 0,
                refused_counts: 0,
                bad_returns: 0,
            },
        }
    }

    /// Change the limits of a manager that holds nothing yet (an HCA
    /// brought up in place, [`crate::Hca::bring_up_in_place`]).
    pub(crate) fn set_limits(&mut self, chunk_pages: usize, max_pages: usize) {
        self.chunk_pages = clamp_chunk(chunk_pages);
        self.max_pages = cap_max(max_pages);
    }

    /// Pages firmware holds right now.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Counters.
    pub fn stats(&self) -> PageStats {
        self.stats
    }

    /// DMA chunks currently allocated.
    pub fn chunks(&self) -> usize {
        self.chunks.len()
    }

    /// Check, before giving anything, that `n` more pages fit under the cap;
    /// a larger count (a device asking for more than the host has) is
    /// refused with [`Error::OutOfPages`] and counted in
    /// [`PageStats::refused_counts`].
    pub fn check_room(&mut self, n: usize) -> Result<(), Error> {
        if n > self.max_pages.saturating_sub(self.held) {
            self.stats.refused_counts += 1;
            return Err(Error::OutOfPages { requested: n });
        }
        Ok(())
    }

    /// Take `out.len()` free pages, allocating chunks as needed, and mark
    /// them held. On failure nothing stays allocated.
    pub fn alloc(&mut self, hal: &H, out: &mut [u64]) -> Result<(), Error> {
        if self.held + out.len() > self.max_pages {
            return Err(Error::OutOfPages {
                requested: out.len(),
            });
        }
        for i in 0..out.len() {
            match self.alloc_one(hal) {
                Ok(pa) => out[i] = pa,
                Err(e) => {
                    for &pa in &out[..i] {
                        let _ = self.free(pa);
                    }
                    self.release_empty();
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Take one free page (allocating a chunk if needed) and mark it held.
    pub fn alloc_page(&mut self, hal: &H) -> Result<u64, Error> {
        if self.held >= self.max_pages {
            return Err(Error::OutOfPages { requested: 1 });
        }
        self.alloc_one(hal)
    }

    fn alloc_one(&mut self, hal: &H) -> Result<u64, Error> {
        let idx = match self.chunks.iter().position(|c| c.n_used < c.pages) {
            Some(i) => i,
            None => {
                if self.chunks.is_full() {
                    return Err(Error::OutOfPages { requested: 1 });
                }
                let region = hal
                    .alloc_dma(self.chunk_pages * PAGE_SIZE)
                    .map_err(|_| Error::OutOfPages { requested: 1 })?;
                let chunk = Chunk {
                    region,
                    pages: self.chunk_pages,
                    used: [0; CHUNK_MAX_PAGES / 64],
                    n_used: 0,
                };
                if self.chunks.push(chunk).is_err() {
                    unreachable!("checked is_full");
                }
                self.chunks.len() - 1
            }
        };
        let c = &mut self.chunks[idx];
        let i = (0..c.pages)
            .find(|&i| !c.is_used(i))
            .ok_or(Error::OutOfPages { requested: 1 })?;
        c.used[i / 64] |= 1 << (i % 64);
        c.n_used += 1;
        self.held += 1;
        Ok(c.region.iova_at(i * PAGE_SIZE))
    }

    /// Mark a page returned by firmware free. Returns false (and changes
    /// nothing) for an address the manager never gave or got back already.
    #[must_use]
    pub fn free(&mut self, iova: u64) -> bool {
        for c in self.chunks.iter_mut() {
            if let Some(i) = c.contains(iova) {
                if !c.is_used(i) {
                    return false;
                }
                c.used[i / 64] &= !(1 << (i % 64));
                c.n_used -= 1;
                self.held -= 1;
                return true;
            }
        }
        false
    }

    /// Give chunks with no page held back to the platform.
    pub fn release_empty(&mut self) {
        let mut i = 0;
        while i < self.chunks.len() {
            if self.chunks[i].n_used == 0 {
                drop(self.chunks.swap_remove(i));
            } else {
                i += 1;
            }
        }
    }

    /// Forget every page without telling firmware (the device is dead or
    /// firmware released them all). Frees the DMA memory.
    pub fn forget_all(&mut self) {
        self.chunks.clear();
        self.held = 0;
    }

    /// Forget every page *without* returning the memory to the platform:
    /// firmware may still hold pointers into it (teardown could not take
    /// them back). The memory is leaked, never reused.
    pub fn leak_all(&mut self) {
        while let Some(c) = self.chunks.pop() {
            core::mem::forget(c);
        }
        self.held = 0;
    }

    pub(crate) fn note_given(&mut self, n: usize) {
        self.stats.given += n as u64;
    }
    pub(crate) fn note_reclaimed(&mut self, n: usize) {
        self.stats.reclaimed += n as u64;
    }
    pub(crate) fn note_give_failure(&mut self) {
        self.stats.give_failures += 1;
    }
    pub(crate) fn note_bad_return(&mut self) {
        self.stats.bad_returns += 1;
    }

    /// Queue a page request from an EQE.
    pub fn push_request(&mut self, req: PageRequest) {
        self.stats.requests += 1;
        if let Err(req) = self.pending.push_back(req) {
            // Full: merge into the last request. Same sign adds up; opposite
            // signs cancel out (net effect on firmware is the same).
            self.stats.merged += 1;
            if let Some(last) = self.pending.back_mut() {
                last.num_pages = last.num_pages.saturating_add(req.num_pages);
            }
        }
    }

    /// Next request to serve.
    pub fn pop_request(&mut self) -> Option<PageRequest> {
        self.pending.pop_front()
    }

    /// Put a request back at the front (it could not be served now).
    pub fn unpop_request(&mut self, req: PageRequest) {
        if self.pending.push_front(req).is_err() {
            if let Some(first) = self.pending.front_mut() {
                first.num_pages = first.num_pages.saturating_add(req.num_pages);
            }
        }
    }

    /// Requests waiting to be served.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::testhal::TestHal;

    #[test]
    fn alloc_free_and_release() {
        let hal = TestHal::new();
        let mut pm = PageManager::new(4, 10);
        let mut pages = [0u64; 6];
        pm.alloc(&hal, &mut pages).unwrap();
        assert_eq!(pm.held(), 6);
        assert_eq!(pm.chunks(), 2);
        assert!(pages.iter().all(|p| p % 4096 == 0));
        let mut sorted = pages;
        sorted.sort();
        assert!(
            sorted.windows(2).all(|w| w[0] != w[1]),
            "no page given twice"
        );
        assert!(pm.alloc(&hal, &mut [0u64; 5]).is_err(), "cap of 10 pages");
        assert!(pm.check_room(4).is_ok());
        assert!(pm.check_room(5).is_err(), "count beyond the cap refused");
        assert!(pm.check_room(usize::MAX).is_err());
        assert_eq!(pm.stats().refused_counts, 2);
        assert_eq!(pm.held(), 6, "failed alloc leaves nothing behind");
        for p in &pages[..4] {
            assert!(pm.free(*p));
        }
        assert!(!pm.free(pages[0]), "double free refused");
        assert!(!pm.free(0xdead_0000), "foreign page refused");
        pm.release_empty();
        assert_eq!(pm.held(), 2);
        assert_eq!(hal.live(), pm.chunks());
        pm.forget_all();
        assert_eq!(hal.live(), 0);
    }

    #[test]
    fn requests_queue_and_merge() {
        let mut pm: PageManager<TestHal> = PageManager::new(1, 1);
        for _ in 0..PENDING_REQUESTS + 3 {
            pm.push_request(PageRequest {
                function_id: 0,
                ec_function: false,
                num_pages: 2,
            });
        }
        assert_eq!(pm.pending(), PENDING_REQUESTS);
        let total: i32 = core::iter::from_fn(|| pm.pop_request())
            .map(|r| r.num_pages)
            .sum();
        assert_eq!(total, 2 * (PENDING_REQUESTS as i32 + 3), "nothing lost");
    }
}
