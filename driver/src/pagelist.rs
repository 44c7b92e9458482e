//! How a contiguous DMA buffer is described to firmware: a page size and the
//! device address of each page (`pas[]`, facts §3, §7.1, §9).

use mlx5_hal::PAGE_SIZE;

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

#[cfg(test)]
mod tests {
    use super::*;

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
