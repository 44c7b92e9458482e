//! How a contiguous DMA buffer is described to firmware: a page size and the
//! device address of each page (`pas[]`, docs/firmware.md §3, §7.1, §9).

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

/// Page-list entries a context command (CREATE_CQ, MODIFY_CQ, CREATE_SRQ,
/// CREATE_RMP: the list starts at byte 0x110, docs/firmware.md §3) can carry in the
/// largest command the command queue sends.
pub const MAX_CONTEXT_PAGES: usize = (crate::cmd::MAX_CMD_LEN - 0x110) / 8;

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
    fn page_addresses_step_by_the_page_size() {
        let p = PageList {
            first: 0x40_0000,
            log_page_size: 2,
            count: 3,
        };
        assert_eq!(p.page_size(), 16 << 10);
        let v: [u64; 3] = core::array::from_fn(|i| p.iter().nth(i).unwrap());
        assert_eq!(v, [0x40_0000, 0x40_4000, 0x40_8000]);
        assert_eq!(p.iter().len(), 3);
    }
}
