//! BlueFlame: a single WQE with inline data goes whole into the BlueFlame
//! buffer when the platform maps the UAR write-combining, 8 bytes at a
//! time, the doorbell word first, the two buffers used in turn; everything
//! else (lists, gather entries, WQEs larger than a buffer, an uncached
//! mapping) rings the 8-byte doorbell (rdma-core `post_send_db`).

use std::vec::Vec;

use super::*;

/// The ring's bytes of the WQE at `wqebb` and the next `bbs - 1`, as the
/// big-endian words the copy carries.
fn ring_words(q: &Qp<TestHal, Vec<SendSlot>>, wqebb: usize, bbs: usize) -> Vec<u64> {
    let ring = q.send_ring().unwrap();
    let (r, base, n) = (ring.region(), ring.base_offset(), ring.geometry().wqebbs());
    let mut words = Vec::new();
    for b in 0..bbs {
        let mut bb = [0u8; 64];
        r.read_bytes(base + ((wqebb + b) % n) * 64, &mut bb);
        words.extend(
            bb.chunks(8)
                .map(|c| u64::from_be_bytes(c.try_into().unwrap())),
        );
    }
    words
}

fn inline<'a>(wr_id: u64, data: &'a [u8]) -> SendRequest<'a> {
    SendRequest {
        payload: Payload::Inline(data),
        ..send(wr_id, &[], true)
    }
}

#[test]
fn a_single_inline_wqe_is_copied_whole_into_alternating_buffers() {
    let hal = TestHal::write_combining();
    let g = geometry(4, 1, 100);
    let n = g.wqebbs();
    let mut q = qp(&hal, g);
    let data: Vec<u8> = (1..=50).collect();
    // 50 bytes: control 16 + header 4 + 50 = 70 bytes, 5 units, 2 WQEBBs.
    let mut at = 0;
    for (i, buffer) in [BF, BF + BF_SIZE / 2, BF].into_iter().enumerate() {
        let before = hal.doorbells().len();
        q.post_send_one(&inline(i as u64, &data)).unwrap();
        let writes = &hal.doorbells()[before..];
        let want = ring_words(&q, at, 2);
        assert_eq!(writes.len(), 16, "two WQEBBs, 8 words each");
        for (k, (&(off, value), &word)) in writes.iter().zip(&want).enumerate() {
            assert_eq!(off, buffer + 8 * k, "post {i}: in order, in one buffer");
            assert_eq!(value, word, "post {i}: word {k} is the WQE's");
        }
        assert_eq!(writes[0].1 >> 40, at as u64, "the doorbell word first");
        q.complete_send(&req_cqe(at as u16)).unwrap();
        at += 2;
    }
    // A WQE starting in the ring's last WQEBB wraps, and the copy follows
    // the ring.
    while at < n - 1 {
        q.post_send_one(&inline(9, &[7; 8])).unwrap(); // 1 WQEBB
        q.complete_send(&req_cqe(at as u16)).unwrap();
        at += 1;
    }
    let before = hal.doorbells().len();
    q.post_send_iter([inline(10, &data)]).unwrap(); // the last slot and 0
    let writes = &hal.doorbells()[before..];
    let want = ring_words(&q, n - 1, 2);
    assert_eq!(
        want[0] >> 40,
        (n - 1) as u64,
        "the WQE starts in the last slot"
    );
    assert_eq!(writes.iter().map(|w| w.1).collect::<Vec<_>>(), want);
    assert_eq!(writes[0].0, BF, "buffers still alternate");
}

#[test]
fn everything_else_rings_the_eight_byte_doorbell() {
    let data = [5u8; 40];
    let s = [sge(1, 64)];
    // A list of two inline WQEs, a gather entry, on a write-combining UAR.
    let hal = TestHal::write_combining();
    let mut q = qp(&hal, geometry(8, 1, 100));
    q.post_send(&[inline(1, &data), inline(2, &data)]).unwrap();
    q.post_send_one(&send(3, &s, true)).unwrap();
    q.post_send(&[send(4, &s, true)]).unwrap();
    assert_eq!(hal.doorbells().len(), 3, "one word per post");
    // A WQE larger than one buffer (256 bytes): the plain doorbell.
    let big = [9u8; 250];
    let mut q = qp(&hal, geometry(4, 1, 256));
    q.post_send_one(&inline(5, &big)).unwrap();
    assert_eq!(hal.doorbells().len(), 4, "too large for BlueFlame");
    // An uncached mapping: the plain doorbell, for inline data too.
    let hal = TestHal::new();
    let mut q = qp(&hal, geometry(4, 1, 100));
    q.post_send_one(&inline(6, &data)).unwrap();
    assert_eq!(hal.doorbells().len(), 1);
}
