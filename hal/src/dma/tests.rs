//! Unit tests of DMA regions and windows, on `TestHal`: plain host memory
//! whose IOVA is the CPU address plus a fixed offset (so a test that mixes
//! the two fails), counting live regions to see RAII frees. The ring
//! layouts' tests use the same platform (`crate::dma::tests::hal`). Miri runs
//! these (`tests/miri.sh`); the copy-kernel sweep is smaller there.

extern crate std;
use super::*;
use crate::{HalError, PAGE_SIZE};
use core::cell::Cell;
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::rc::Rc;

/// A minimal host-memory platform: IOVA = CPU address + a fixed offset,
/// and a counter of live regions so the tests can see RAII frees.
#[derive(Clone)]
pub(crate) struct TestHal {
    live: Rc<Cell<usize>>,
}

const IOVA_SHIFT: u64 = 0x7700_0000_0000;

// SAFETY: memory comes from the global allocator, zeroed, page aligned,
// unaliased; the "device" never writes; the clock is a constant.
unsafe impl Hal for TestHal {
    fn bar0_size(&self) -> usize {
        0
    }
    fn mmio_read32(&self, _offset: usize) -> u32 {
        unreachable!("no BAR in this test platform")
    }
    fn mmio_write32(&self, _offset: usize, _value: u32) {
        unreachable!("no BAR in this test platform")
    }
    fn mmio_write64(&self, _offset: usize, _value: u64) {
        unreachable!("no BAR in this test platform")
    }
    fn alloc_dma_raw(&self, size: usize) -> Result<RawDma, HalError> {
        if size == 0 {
            return Err(HalError::InvalidRequest);
        }
        let len = size.div_ceil(PAGE_SIZE) * PAGE_SIZE;
        let layout = Layout::from_size_align(len, PAGE_SIZE).unwrap();
        // SAFETY: non-zero size layout.
        let p = unsafe { alloc_zeroed(layout) };
        let vaddr = NonNull::new(p).ok_or(HalError::OutOfDmaMemory { requested: size })?;
        self.live.set(self.live.get() + 1);
        Ok(RawDma {
            vaddr,
            iova: p as u64 + IOVA_SHIFT,
            len,
        })
    }
    unsafe fn free_dma_raw(&self, region: RawDma) {
        let layout = Layout::from_size_align(region.len, PAGE_SIZE).unwrap();
        // SAFETY: allocated above with this layout (caller contract).
        unsafe { dealloc(region.vaddr.as_ptr(), layout) };
        self.live.set(self.live.get() - 1);
    }
    fn now_ns(&self) -> u64 {
        0
    }
    fn delay_us(&self, _us: u32) {}
}

pub(crate) fn hal() -> TestHal {
    TestHal {
        live: Rc::new(Cell::new(0)),
    }
}

#[test]
fn region_is_zeroed_page_sized_and_freed_on_drop() {
    let h = hal();
    let r = h.alloc_dma(100).unwrap();
    assert_eq!(r.len(), PAGE_SIZE);
    assert_eq!(r.as_ptr() as usize % PAGE_SIZE, 0);
    assert_ne!(
        r.iova(),
        r.as_ptr() as u64,
        "IOVA must not be the CPU address"
    );
    assert!((0..r.len()).all(|i| r.read_u8(i) == 0));
    assert_eq!(h.live.get(), 1);
    drop(r);
    assert_eq!(h.live.get(), 0);
}

#[test]
fn big_endian_accessors_round_trip_and_lay_out_bytes() {
    let h = hal();
    let r = h.alloc_dma(PAGE_SIZE).unwrap();
    r.write_be32(8, 0x1122_3344);
    let mut b = [0u8; 4];
    r.read_bytes(8, &mut b);
    assert_eq!(b, [0x11, 0x22, 0x33, 0x44]);
    assert_eq!(r.read_be32(8), 0x1122_3344);
    r.write_be64(16, 0x0102_0304_0506_0708);
    assert_eq!(r.read_u8(16), 1);
    assert_eq!(r.read_u8(23), 8);
    assert_eq!(r.read_be64(16), 0x0102_0304_0506_0708);
    r.write_be16(30, 0xabcd);
    assert_eq!(r.read_be16(30), 0xabcd);
    r.write_bytes(100, &[9, 8, 7]);
    r.fill(103, 2, 0xf0);
    let mut c = [0u8; 5];
    r.read_bytes(100, &mut c);
    assert_eq!(c, [9, 8, 7, 0xf0, 0xf0]);
    assert_eq!(r.iova_at(100), r.iova() + 100);
}

#[test]
fn byte_copies_are_exact_at_every_alignment_and_length() {
    let h = hal();
    let r = h.alloc_dma(PAGE_SIZE).unwrap();
    let src: std::vec::Vec<u8> = (0..100u8).map(|x| x.wrapping_mul(37) ^ 0x5a).collect();
    for off in 0..9 {
        for len in [0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 100] {
            r.fill(0, 256, 0xee);
            r.write_bytes(off, &src[..len]);
            let mut back = [0u8; 120];
            r.read_bytes(off, &mut back[..len]);
            assert_eq!(&back[..len], &src[..len], "off {off} len {len}");
            if off > 0 {
                assert_eq!(r.read_u8(off - 1), 0xee, "byte before untouched");
            }
            assert_eq!(r.read_u8(off + len), 0xee, "byte after untouched");
            r.fill(off, len, 0x11);
            r.read_bytes(off, &mut back[..len]);
            assert!(back[..len].iter().all(|&b| b == 0x11));
            assert_eq!(r.read_u8(off + len), 0xee, "fill stays inside");
        }
    }
}

#[test]
#[should_panic(expected = "outside region")]
fn out_of_bounds_access_panics_instead_of_touching_memory() {
    let h = hal();
    let r = h.alloc_dma(PAGE_SIZE).unwrap();
    r.read_be32(PAGE_SIZE - 2);
}

#[test]
#[should_panic(expected = "unaligned")]
fn unaligned_access_is_refused() {
    let h = hal();
    let r = h.alloc_dma(PAGE_SIZE).unwrap();
    r.read_be32(2);
}

#[test]
fn windows_cover_consecutive_segments_once_checked() {
    let h = hal();
    let r = h.alloc_dma(PAGE_SIZE).unwrap();
    let mut ws = r.windows::<16>(64, 3);
    assert_eq!(ws.len(), 3);
    for (i, w) in ws.by_ref().enumerate() {
        w.write_be32::<4>(i as u32 + 1);
    }
    assert!(ws.next().is_none());
    assert_eq!(r.read_be32(64 + 4), 1);
    assert_eq!(r.read_be32(80 + 4), 2);
    assert_eq!(r.read_be32(96 + 4), 3);
    assert_eq!(r.windows::<16>(PAGE_SIZE - 32, 2).count(), 2);
    assert_eq!(r.windows::<16>(PAGE_SIZE, 0).count(), 0);
}

#[test]
#[should_panic(expected = "outside region")]
fn windows_past_the_end_panic_when_made() {
    let h = hal();
    let r = h.alloc_dma(PAGE_SIZE).unwrap();
    let _ = r.windows::<16>(PAGE_SIZE - 32, 3);
}

#[test]
#[should_panic(expected = "outside region")]
fn windows_with_an_overflowing_count_panic() {
    let h = hal();
    let r = h.alloc_dma(PAGE_SIZE).unwrap();
    let _ = r.windows::<16>(0, usize::MAX / 8);
}

#[test]
fn strided_reads_pick_one_byte_per_entry() {
    let h = hal();
    let r = h.alloc_dma(PAGE_SIZE).unwrap();
    for i in 0..8 {
        r.write_u8(64 + i * 64 + 63, 0x10 + i as u8);
        r.write_u8(64 + i * 64 + 62, 0xee);
    }
    let got = r.window::<512>(64).read_u8_strided::<63, 64, 8>();
    assert_eq!(got, [0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17]);
}

#[test]
fn window_read_into_moves_exact_bytes() {
    let h = hal();
    let r = h.alloc_dma(PAGE_SIZE).unwrap();
    for i in 0..64 {
        r.write_u8(128 + i, i as u8 + 1);
    }
    let mut img = [0u8; 64];
    r.window::<64>(128).read_into(&mut img);
    assert!(img.iter().enumerate().all(|(i, b)| *b == i as u8 + 1));
}

/// A mask with a few scattered bits, so a kernel that drops or
/// misplaces one chunk of the mask shows up.
fn mask<const S: usize>() -> [u8; S] {
    let mut m = [0u8; S];
    for (i, b) in m.iter_mut().enumerate() {
        if i % 24 == 7 || i == S - 1 {
            *b = 1 << (i % 8);
        }
    }
    m
}

/// Fill `src` with a pattern, surround the destination with guards,
/// run `copy`, and check every byte: entries XOR mask inside, guards
/// untouched outside.
fn check_copy<const S: usize>(
    dst_off: usize,
    src_off: usize,
    count: usize,
    copy: impl FnOnce(&DmaRegion<TestHal>, &DmaRegion<TestHal>, &[u8; S]),
) {
    let h = hal();
    let src = h.alloc_dma(2 * PAGE_SIZE).unwrap();
    let dst = h.alloc_dma(2 * PAGE_SIZE).unwrap();
    let pattern: std::vec::Vec<u8> = (0..src.len()).map(|i| (i * 7 + 3) as u8).collect();
    src.write_bytes(0, &pattern);
    dst.fill(0, dst.len(), 0xee);
    let m = mask::<S>();
    copy(&dst, &src, &m);
    let mut got = std::vec![0u8; dst.len()];
    dst.read_bytes(0, &mut got);
    for (i, &b) in got.iter().enumerate() {
        if (dst_off..dst_off + count * S).contains(&i) {
            let k = i - dst_off;
            let want = pattern[src_off + k] ^ m[k % S];
            assert_eq!(b, want, "S {S} count {count} byte {k}");
        } else {
            assert_eq!(b, 0xee, "S {S}: byte {i} outside the copy written");
        }
    }
}

#[test]
fn copy_entries_from_moves_whole_entries_with_the_mask_applied() {
    // 32-, 16- and 8-byte aligned placements, at the region's start too.
    // (Miri interprets every byte compare: a smaller sweep there.)
    let places: &[(usize, usize)] = if cfg!(miri) {
        &[(64, 128), (8, 24)]
    } else {
        &[(64, 128), (16, 48), (8, 24), (4096, 0)]
    };
    let counts: &[usize] = if cfg!(miri) { &[0, 3] } else { &[0, 1, 3, 17] };
    for &(d, s) in places {
        for &count in counts {
            check_copy::<64>(d, s, count, |dst, src, m| {
                dst.copy_entries_from::<64>(d, src, s, count, m)
            });
            check_copy::<128>(d, s, count, |dst, src, m| {
                dst.copy_entries_from::<128>(d, src, s, count, m)
            });
            check_copy::<24>(d, s, count, |dst, src, m| {
                dst.copy_entries_from::<24>(d, src, s, count, m)
            });
        }
    }
}

#[test]
#[should_panic(expected = "overlap")]
fn copy_entries_within_one_region_refuses_overlap() {
    let h = hal();
    let r = h.alloc_dma(PAGE_SIZE).unwrap();
    r.copy_entries_from::<64>(64, &r, 0, 2, &[0; 64]);
}

#[test]
fn copy_entries_within_one_region_is_allowed_when_disjoint() {
    let h = hal();
    let r = h.alloc_dma(PAGE_SIZE).unwrap();
    r.write_be64(0, 0x0102_0304_0506_0708);
    r.copy_entries_from::<64>(64, &r, 0, 1, &[0; 64]);
    assert_eq!(r.read_be64(64), 0x0102_0304_0506_0708);
}

#[test]
#[should_panic(expected = "outside region")]
fn copy_entries_past_the_end_panics_before_copying() {
    let h = hal();
    let a = h.alloc_dma(PAGE_SIZE).unwrap();
    let b = h.alloc_dma(PAGE_SIZE).unwrap();
    a.copy_entries_from::<64>(0, &b, 64, 64, &[0; 64]);
}

#[test]
fn zero_sized_allocation_is_an_error() {
    assert_eq!(hal().alloc_dma(0).unwrap_err(), HalError::InvalidRequest);
}
