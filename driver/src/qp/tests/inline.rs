//! Inline segments in 8-byte stores: every length, at every offset of the
//! ring, including segments that run past its end.

extern crate std;

use std::vec::Vec;

use super::super::*;
use super::{geometry, qp, read_wqe, req_cqe, send};
use crate::testhal::TestHal;

#[test]
fn inline_segments_of_every_length_match_their_bytes_wherever_they_start() {
    let hal = TestHal::new();
    // 192-byte WQEs in an 8-WQEBB ring: as the lengths vary, WQEs start
    // at every WQEBB and their segments wrap at every unit.
    let mut q = qp(&hal, geometry(2, 1, 100));
    let g = q.send_geometry().unwrap();
    let max = g.max_inline_data as usize;
    assert_eq!((g.wqebbs(), max), (8, 140));
    // Stale bytes everywhere: padding must not leak them.
    let ring = q.send_ring().unwrap();
    ring.region().fill(ring.base_offset(), g.bytes(), 0xa5);
    let data: Vec<u8> = (0..max).map(|i| (i * 7 + 1) as u8).collect();
    let mut starts = [0u32; 8];
    // Under Miri (tests/miri.sh) every fifth length of one round: the
    // accesses are the same, the walk shorter.
    let (rounds, step) = if cfg!(miri) { (1, 5) } else { (3, 1) };
    for round in 0..rounds {
        for len in (0..=max).step_by(step) {
            let at = q.send_ring().unwrap().producer_counter();
            starts[at as usize % 8] += 1;
            let bytes = &data[round..][..len.min(max - round)];
            q.post_send(&[SendRequest {
                payload: Payload::Inline(bytes),
                ..send(len as u64, &[], true)
            }])
            .unwrap();
            let w = read_wqe(&q, at as usize % 8);
            let n = bytes.len();
            assert_eq!(w.index, at);
            if n == 0 {
                assert_eq!(w.ds, 1, "no segment for empty inline data");
            } else {
                assert_eq!(w.ds, 1 + (4 + n).div_ceil(16), "length {n}");
                let seg: Vec<u8> = w.units.iter().flatten().copied().collect();
                let hdr = u32::from_be_bytes(seg[0..4].try_into().unwrap());
                assert_eq!(hdr, 0x8000_0000 | n as u32, "length {n}");
                assert_eq!(&seg[4..4 + n], bytes, "length {n} at WQEBB {at}");
                assert!(
                    seg[4 + n..].iter().all(|&b| b == 0),
                    "padding after {n} bytes at WQEBB {at}: {:?}",
                    &seg[4 + n..]
                );
            }
            q.complete_send(&req_cqe(at)).unwrap();
        }
    }
    assert!(
        cfg!(miri) || starts.iter().all(|&k| k > 0),
        "every WQEBB: {starts:?}"
    );
}
