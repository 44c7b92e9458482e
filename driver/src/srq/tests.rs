//! SRQ ring unit tests: the test plays the device following the free list.

extern crate std;

use super::ring::SrqRing;
use super::*;
use mlx5_hal::host::HostHal;
use std::vec::Vec;

fn ring(max_wr: usize, max_sge: usize) -> (HostHal, SrqRing<HostHal>) {
    let hal = HostHal::new(0);
    let geo = SrqGeometry::for_request(max_wr, max_sge).unwrap();
    let r = SrqRing::new(&hal, geo).unwrap();
    (hal, r)
}

fn sge(i: u64) -> Sge {
    Sge {
        addr: 0x1000 * i,
        length: 256,
        lkey: 7,
    }
}

/// The device's view: consume the WQE at its position and read that WQE's
/// `next_wqe_index` at the same moment (it cannot be read later: once the
/// WQE is completed it may become the free-list tail and be re-linked),
/// bounded by the doorbell counter.
struct DeviceWalker {
    pos: u16,
    consumed: u16,
}

impl DeviceWalker {
    fn take(&mut self, r: &SrqRing<HostHal>) -> Option<u16> {
        if self.consumed == r.posted_counter() {
            return None;
        }
        let idx = self.pos;
        let stride = r.geometry().stride();
        self.pos = r.region().read_be16(idx as usize * stride + 2);
        self.consumed = self.consumed.wrapping_add(1);
        Some(idx)
    }
}

#[test]
fn geometry_rounds_like_linux() {
    let g = SrqGeometry::for_request(10, 1).unwrap();
    assert_eq!(
        (g.wqe_cnt(), g.max_wr, g.stride(), g.max_sge),
        (16, 15, 32, 1)
    );
    let g = SrqGeometry::for_request(16, 2).unwrap();
    assert_eq!(
        (g.wqe_cnt(), g.max_wr, g.stride(), g.max_sge),
        (32, 31, 64, 3)
    );
    let g = SrqGeometry::for_request(1, 0).unwrap();
    assert_eq!((g.wqe_cnt(), g.stride(), g.max_sge), (2, 32, 1));
    assert!(SrqGeometry::for_request(1 << 15, 1).is_none());
}

#[test]
fn fills_to_exactly_capacity_then_refuses() {
    let (_hal, mut r) = ring(7, 1);
    assert_eq!(r.geometry().max_wr, 7);
    for i in 0..7 {
        r.post(i, &[sge(i)]).unwrap();
    }
    assert_eq!(r.post(99, &[sge(1)]), Err(PostError::Full));
    assert_eq!(r.outstanding(), 7);
}

#[test]
fn too_many_sges_is_refused_without_consuming_a_wqe() {
    let (_hal, mut r) = ring(3, 1);
    assert_eq!(
        r.post(1, &[sge(1), sge(2)]),
        Err(PostError::TooManySges { given: 2, max: 1 })
    );
    assert_eq!(r.outstanding(), 0);
    assert_eq!(r.post(1, &[sge(1)]), Ok(0));
}

#[test]
fn wqe_bytes_and_terminator_and_doorbell_record() {
    let (hal, mut r) = ring(3, 3);
    let idx = r.post(0xabc, &[sge(1)]).unwrap();
    let base = idx as usize * r.geometry().stride();
    let w = r.region();
    assert_eq!(w.read_be32(base + 16), 256);
    assert_eq!(w.read_be32(base + 20), 7);
    assert_eq!(w.read_be64(base + 24), 0x1000);
    assert_eq!(w.read_be32(base + 32), 0, "terminator byte count");
    assert_eq!(w.read_be32(base + 36), 0x100, "terminator lkey");
    let dbr = hal.host_ptr(r.dbr_iova()).unwrap();
    // SAFETY: the record is a live 4-byte DMA region of the test platform.
    let before = unsafe { (dbr as *const u32).read_volatile() };
    assert_eq!(before, 0, "not published before ring_doorbell");
    r.ring_doorbell();
    // SAFETY: as above.
    let after = u32::from_be(unsafe { (dbr as *const u32).read_volatile() });
    assert_eq!(after, 1);
    assert_eq!(r.wr_id(idx), Some(0xabc));
}

#[test]
fn completions_return_wr_ids_and_refuse_unknown_wqes() {
    let (_hal, mut r) = ring(3, 1);
    let a = r.post(11, &[sge(1)]).unwrap();
    let b = r.post(22, &[sge(2)]).unwrap();
    assert_eq!(r.complete(b), Ok(22));
    assert_eq!(r.complete(b), Err(CompleteError::NotPosted { index: b }));
    assert_eq!(r.complete(9), Err(CompleteError::OutOfRange { index: 9 }));
    assert_eq!(r.complete(a), Ok(11));
    assert_eq!(r.outstanding(), 0);
}

#[test]
fn the_device_consumes_in_posting_order_across_out_of_order_completions() {
    let (_hal, mut r) = ring(7, 1);
    let mut dev = DeviceWalker {
        pos: 0,
        consumed: 0,
    };
    let mut next_wr = 0u64;
    let mut posted_order = Vec::new();
    let mut consumed_order = Vec::new();
    let mut in_flight: Vec<u16> = Vec::new();
    for round in 0..300u64 {
        // Post as many as fit.
        while r.outstanding() < 7 {
            let idx = r.post(next_wr, &[sge(next_wr)]).unwrap();
            posted_order.push(next_wr);
            next_wr += 1;
            let _ = idx;
        }
        r.ring_doorbell();
        // Device consumes a few.
        for _ in 0..(1 + round % 3) {
            if let Some(idx) = dev.take(&r) {
                consumed_order.push(r.wr_id(idx).unwrap());
                in_flight.push(idx);
            }
        }
        // Complete out of order: newest first.
        while let Some(idx) = in_flight.pop() {
            r.complete(idx).unwrap();
        }
    }
    assert_eq!(consumed_order[..], posted_order[..consumed_order.len()]);
    assert!(consumed_order.len() > 300);
}

#[test]
fn a_completer_and_try_complete_complete_like_complete_wqe_and_refuse_without_changing_anything() {
    // Two rings, posted alike: one completed with `complete_wqe`, the other
    // through a completer; the WQE bytes, the books and the counts must
    // agree afterwards, and every refusal must leave the ring as it was.
    let (_h1, mut a) = ring(15, 1);
    let (_h2, mut b) = ring(15, 1);
    let mut ids = Vec::new();
    for i in 0..8u64 {
        ids.push(a.post(i, &[sge(i)]).unwrap());
        assert_eq!(b.post(i, &[sge(i)]).unwrap(), ids[i as usize]);
    }
    let order = [ids[3], ids[0], ids[5], ids[1]];
    let free = (0..16u16).find(|i| !ids.contains(i)).unwrap();
    let snapshot = |r: &SrqRing<HostHal>| {
        let mut bytes = std::vec![0u8; r.region().len()];
        r.region().read_bytes(0, &mut bytes);
        (
            bytes,
            r.outstanding(),
            (0..16).map(|i| r.wr_id(i)).collect::<Vec<_>>(),
        )
    };
    for &w in &order {
        a.complete_wqe(w).unwrap();
    }
    let before = snapshot(&b);
    {
        let mut c = b.completer();
        // Refused: out of range, never posted, more bytes than it holds.
        assert_eq!(c.try_complete(16, 1, true), None);
        assert_eq!(c.try_complete(free, 1, true), None);
        assert_eq!(c.try_complete(order[0], 257, true), None);
    }
    assert!(snapshot(&b) == before, "a refusal changes nothing");
    {
        let mut c = b.completer();
        // The byte count is not held against the buffers when not asked.
        assert_eq!(c.try_complete(order[0], 1 << 20, false), Some(3));
        for (&w, id) in order[1..].iter().zip([0, 5, 1]) {
            assert_eq!(c.try_complete(w, 256, true), Some(id));
        }
        assert_eq!(c.try_complete(order[1], 1, true), None, "already free");
    }
    assert!(snapshot(&a) == snapshot(&b));
    assert_eq!(b.outstanding(), 4);
    // `SrqRing::try_complete`, one at a time, the same.
    let (_h3, mut d) = ring(15, 1);
    for i in 0..8u64 {
        d.post(i, &[sge(i)]).unwrap();
    }
    let before = snapshot(&d);
    assert_eq!(d.try_complete(16, 1, true), None);
    assert_eq!(d.try_complete(free, 1, true), None);
    assert_eq!(d.try_complete(order[0], 257, true), None);
    assert!(snapshot(&d) == before, "a refusal changes nothing");
    assert_eq!(d.try_complete(order[0], 1 << 20, false), Some(3));
    for (&w, id) in order[1..].iter().zip([0, 5, 1]) {
        assert_eq!(d.try_complete(w, 256, true), Some(id));
    }
    assert!(snapshot(&a) == snapshot(&d));
    // The free list the completer built takes new posts as the other does.
    for i in 10..14u64 {
        assert_eq!(a.post(i, &[sge(i)]).unwrap(), b.post(i, &[sge(i)]).unwrap());
    }
    assert!(snapshot(&a) == snapshot(&b));
}
