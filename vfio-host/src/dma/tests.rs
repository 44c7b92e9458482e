//! Unit tests of the DMA pool against `FakeIommu`, a model of the type1
//! IOMMU that records mappings and refuses overlapping maps and unknown
//! unmaps (the checks `VFIO_IOMMU_MAP_DMA` / `VFIO_IOMMU_UNMAP_DMA` make,
//! `include/uapi/linux/vfio.h`), with real host memory from [`HostMem`]: the
//! allocation policy, zeroing, revocation and release run on any host, no
//! VFIO device needed.

use super::*;
use std::cell::RefCell;
use std::collections::BTreeMap;

/// An IOMMU model: records mappings and refuses overlaps and unknown
/// unmaps, like type1 v2.
#[derive(Default)]
struct FakeIommu {
    maps: RefCell<BTreeMap<u64, (usize, usize)>>,
    fail_map: RefCell<Option<i32>>,
}

impl Mapper for &FakeIommu {
    unsafe fn map(&self, iova: u64, len: usize, vaddr: *mut u8) -> Result<(), i32> {
        if let Some(e) = *self.fail_map.borrow() {
            return Err(e);
        }
        let mut m = self.maps.borrow_mut();
        for (&s, &(l, _)) in m.iter() {
            assert!(
                iova + len as u64 <= s || s + l as u64 <= iova,
                "overlapping IOMMU map"
            );
        }
        m.insert(iova, (len, vaddr as usize));
        Ok(())
    }
    fn unmap(&self, iova: u64, len: usize) -> Result<(), i32> {
        match self.maps.borrow_mut().remove(&iova) {
            Some((l, _)) if l == len => Ok(()),
            _ => Err(libc::EINVAL),
        }
    }
}

/// Translate an IOVA through the fake IOMMU and write a byte there, as
/// the device would.
fn device_write(io: &FakeIommu, iova: u64, v: u8) -> bool {
    for (&s, &(l, va)) in io.maps.borrow().iter() {
        if iova >= s && iova < s + l as u64 {
            let p = (va + (iova - s) as usize) as *mut u8;
            // SAFETY: the fake IOMMU only holds live pool mappings.
            unsafe { p.write_volatile(v) };
            return true;
        }
    }
    false
}

fn ranges() -> [IovaRange; 1] {
    [IovaRange::new(0x10_0000, 1 << 28)]
}

fn read(raw: &RawDma, off: usize) -> u8 {
    assert!(off < raw.len);
    // SAFETY: in bounds of a live allocation.
    unsafe { raw.vaddr.as_ptr().add(off).read_volatile() }
}

#[test]
fn small_pages_map_zeroed_distinct_and_unmap_on_free() {
    let io = FakeIommu::default();
    let mut p = DmaPool::new(&io, &ranges(), false);
    let a = p.alloc(100).unwrap();
    let b = p.alloc(3 * PAGE_SIZE).unwrap();
    assert_eq!(a.len, PAGE_SIZE);
    assert_eq!(b.len, 3 * PAGE_SIZE);
    for r in [&a, &b] {
        assert_eq!(r.iova % PAGE_SIZE as u64, 0);
        assert_eq!(r.vaddr.as_ptr() as usize % PAGE_SIZE, 0);
        assert!(r.iova >= 0x10_0000 && r.iova + r.len as u64 <= 1 << 28);
        assert_ne!(r.iova, r.vaddr.as_ptr() as u64);
        assert!((0..r.len).all(|i| read(r, i) == 0));
    }
    assert_eq!(io.maps.borrow().len(), 2);
    // The device reaches the last byte of b through its IOVA (contiguity).
    assert!(device_write(&io, b.iova + 3 * PAGE_SIZE as u64 - 1, 0xab));
    assert_eq!(read(&b, 3 * PAGE_SIZE - 1), 0xab);
    assert_eq!(p.stats().small_regions, 2);
    p.free(a.iova, a.len).unwrap();
    assert!(!device_write(&io, a.iova, 1), "freed IOVA still mapped");
    // Freeing twice, or with a wrong length, is refused.
    assert_eq!(
        p.free(a.iova, a.len),
        Err(PoolError::Unknown {
            iova: a.iova,
            len: a.len
        })
    );
    assert!(p.free(b.iova, PAGE_SIZE).is_err());
    p.free(b.iova, b.len).unwrap();
    assert!(io.maps.borrow().is_empty());
    assert_eq!(p.stats().iova_free, p.stats().iova_total);
}

#[test]
fn iova_exhaustion_and_iommu_refusal_are_hal_errors() {
    let io = FakeIommu::default();
    let mut p = DmaPool::new(&io, &[IovaRange::new(0x10_0000, 0x10_2000)], false);
    let a = p.alloc(2 * PAGE_SIZE).unwrap();
    assert_eq!(
        p.alloc(PAGE_SIZE).unwrap_err(),
        HalError::OutOfDmaMemory {
            requested: PAGE_SIZE
        }
    );
    p.free(a.iova, a.len).unwrap();
    *io.fail_map.borrow_mut() = Some(libc::EPERM);
    assert_eq!(
        p.alloc(PAGE_SIZE).unwrap_err(),
        HalError::Platform { errno: libc::EPERM }
    );
    *io.fail_map.borrow_mut() = Some(libc::ENOMEM);
    assert_eq!(
        p.alloc(PAGE_SIZE).unwrap_err(),
        HalError::OutOfDmaMemory {
            requested: PAGE_SIZE
        }
    );
    assert_eq!(p.take_notices(), vec![Notice::MemlockLimit]);
    // A refused map gives its IOVA back.
    assert_eq!(p.stats().iova_free, 0x2000);
    assert_eq!(p.alloc(0).unwrap_err(), HalError::InvalidRequest);
}

#[test]
fn revoked_region_is_unreachable_but_keeps_its_memory() {
    let io = FakeIommu::default();
    let mut p = DmaPool::new(&io, &ranges(), false);
    let a = p.alloc(PAGE_SIZE).unwrap();
    assert!(device_write(&io, a.iova, 7));
    p.revoke(a.iova, a.len).unwrap();
    assert!(!device_write(&io, a.iova + 8, 9));
    assert_eq!(read(&a, 0), 7);
    assert_eq!(read(&a, 8), 0);
    // The IOVA stays reserved until the free, and the free does not unmap twice.
    let b = p.alloc(PAGE_SIZE).unwrap();
    assert_ne!(b.iova, a.iova);
    p.free(a.iova, a.len).unwrap();
    p.free(b.iova, b.len).unwrap();
    assert!(io.maps.borrow().is_empty());
}

#[test]
fn huge_pages_are_used_or_the_fallback_is_announced() {
    // Whether this host has 2 MiB pages reserved is not ours to decide, so
    // check that the pool's account is consistent with what it did.
    let io = FakeIommu::default();
    let mut p = DmaPool::new(&io, &ranges(), true);
    let a = p.alloc(PAGE_SIZE).unwrap();
    let b = p.alloc(PAGE_SIZE).unwrap();
    let notices = p.take_notices();
    let s = p.stats();
    if s.huge_chunks == 1 {
        // Both pieces come from one chunk, adjacent in both spaces.
        assert!(notices.is_empty());
        assert_eq!(s.carved_regions, 2);
        assert_eq!(io.maps.borrow().len(), 1);
        assert_eq!(b.iova - a.iova, PAGE_SIZE as u64);
        assert_eq!(
            b.vaddr.as_ptr() as usize - a.vaddr.as_ptr() as usize,
            PAGE_SIZE
        );
        assert_eq!(a.iova % HUGE_PAGE_SIZE as u64, 0);
        // A freed piece comes back zeroed.
        assert!(device_write(&io, a.iova + 5, 0xee));
        p.free(a.iova, a.len).unwrap();
        let c = p.alloc(PAGE_SIZE).unwrap();
        assert_eq!(c.iova, a.iova);
        assert_eq!(read(&c, 5), 0);
        p.free(c.iova, c.len).unwrap();
        p.free(b.iova, b.len).unwrap();
        assert_eq!(p.stats().huge_chunks, 0, "an empty chunk is released");
    } else {
        assert_eq!(s.huge_chunks, 0);
        assert_eq!(s.small_regions, 2);
        assert!(matches!(
            notices.as_slice(),
            [Notice::HugePagesUnavailable { .. }]
        ));
        // Announced once, not per allocation.
        let c = p.alloc(PAGE_SIZE).unwrap();
        assert!(p.take_notices().is_empty());
        p.free(c.iova, c.len).unwrap();
        p.free(a.iova, a.len).unwrap();
        p.free(b.iova, b.len).unwrap();
    }
    assert!(io.maps.borrow().is_empty());
}

#[test]
fn release_all_unmaps_everything() {
    let io = FakeIommu::default();
    let mut p = DmaPool::new(&io, &ranges(), true);
    for n in [1, 2, 600] {
        p.alloc(n * PAGE_SIZE).unwrap();
    }
    assert!(!io.maps.borrow().is_empty());
    p.release_all().unwrap();
    assert!(io.maps.borrow().is_empty());
    assert_eq!(
        p.stats(),
        DmaStats {
            iova_free: p.stats().iova_total,
            iova_total: p.stats().iova_total,
            ..DmaStats::default()
        }
    );
}
