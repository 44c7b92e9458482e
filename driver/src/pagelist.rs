//! How a contiguous DMA buffer is described to firmware: a page size and the
//! device address of each page (`pas[]`, facts §3, §7.1, §9).

use mlx5_hal::{DmaRegion, Hal, HalError, PAGE_SIZE};

/// A page list for a buffer that is contiguous in device address space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageList {
    /// Device address of the first page.
    pub first: u64,
    /// log2(page size) − 12, as the contexts' `log_page_size` fields take it.
    pub log_page_size: u8,
    /// Number of pages.
    pub count: usize,
}

impl PageList {
    /// Describe `used_len` bytes starting at `iova` (page aligned) with the
    /// smallest page size, from 4 KiB up, whose list has at most
    /// `max_entries` entries and to which `iova` is aligned. `None` if no page
    /// size fits (the buffer is too large for the command, or misaligned).
    pub fn for_buffer(iova: u64, used_len: usize, max_entries: usize) -> Option<PageList> {
        if !iova.is_multiple_of(PAGE_SIZE as u64) || used_len == 0 || max_entries == 0 {
            return None;
        }
        let mut shift = 12u32;
        loop {
            let page = 1u64 << shift;
            if !iova.is_multiple_of(page) {
                return None;
            }
            let count = (used_len as u64).div_ceil(page) as usize;
            if count <= max_entries {
                return Some(PageList {
                    first: iova,
                    log_page_size: (shift - 12) as u8,
                    count,
                });
            }
            shift += 1;
            if shift > 12 + 31 {
                return None;
            }
        }
    }

    /// Page size in bytes.
    pub fn page_size(&self) -> u64 {
        1u64 << (self.log_page_size as u32 + 12)
    }

    /// The page addresses.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = u64> + '_ {
        let page = self.page_size();
        (0..self.count).map(move |i| self.first + i as u64 * page)
    }
}

/// Allocate DMA memory for a firmware buffer of `len` bytes that must be
/// described by at most `max_entries` pages. The page size is the smallest
/// power of two (from 4 KiB) that keeps the list short enough; the buffer is
/// placed at an offset of the allocation aligned to that page size (the
/// platform only guarantees 4 KiB alignment, so up to one page minus 4 KiB
/// is over-allocated). Returns the region, the buffer's offset in it and the
/// page list.
pub fn alloc_paged<H: Hal>(
    hal: &H,
    len: usize,
    max_entries: usize,
) -> Result<(DmaRegion<H>, usize, PageList), HalError> {
    if len == 0 || max_entries == 0 {
        return Err(HalError::InvalidRequest);
    }
    let min_page = len.div_ceil(max_entries).max(PAGE_SIZE);
    let page = min_page
        .checked_next_power_of_two()
        .filter(|p| p.trailing_zeros() <= 12 + 31)
        .ok_or(HalError::InvalidRequest)?;
    let region = hal.alloc_dma(len + page - PAGE_SIZE)?;
    let iova = region.iova();
    let first = iova.next_multiple_of(page as u64);
    let offset = (first - iova) as usize;
    let list = PageList {
        first,
        log_page_size: (page.trailing_zeros() - 12) as u8,
        count: len.div_ceil(page),
    };
    Ok((region, offset, list))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paged_allocations_align_the_buffer_to_the_page_size() {
        extern crate std;
        let hal = mlx5_hal::host::HostHal::new(0);
        let (r, off, list) = alloc_paged(&hal, 4 << 20, 480).unwrap();
        assert_eq!(list.page_size(), 16 << 10);
        assert_eq!(list.count, 256);
        assert_eq!(list.first % (16 << 10), 0);
        assert_eq!(r.iova() + off as u64, list.first);
        assert!(off + (4 << 20) <= r.len());
        let (_r, off, list) = alloc_paged(&hal, 8192, 480).unwrap();
        assert_eq!((off, list.log_page_size, list.count), (0, 0, 2));
    }

    #[test]
    fn four_k_pages_when_they_fit() {
        let p = PageList::for_buffer(0x1_0000, 3 * 4096 + 1, 16).unwrap();
        assert_eq!((p.log_page_size, p.count), (0, 4));
        let mut it = p.iter();
        assert_eq!(it.len(), 4);
        assert_eq!(it.nth(3), Some(0x1_3000));
    }

    #[test]
    fn larger_pages_when_the_list_would_be_too_long() {
        let p = PageList::for_buffer(0x40_0000, 64 << 20, 512).unwrap();
        assert_eq!(p.page_size(), 128 << 10);
        assert_eq!(p.count, 512);
        // Misaligned for any larger page: impossible.
        assert_eq!(PageList::for_buffer(0x40_1000, 64 << 20, 512), None);
        assert_eq!(PageList::for_buffer(0x40_0800, 4096, 512), None);
    }
}
