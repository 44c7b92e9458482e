//! CQ ring unit tests: the test plays the device on a host-memory platform.

extern crate std;

use super::ring::{CqRing, DoorbellRecord};
use super::*;
use mlx5_hal::host::HostHal;
use mlx5_regs::CqeOpcode;
use std::vec::Vec;

/// Device side: write a CQE for producer index `p` into `ring` (raw volatile
/// writes through the host pointer, as a DMA engine would).
fn produce(hal: &HostHal, ring: &CqRing<HostHal>, p: u32, opcode: u8, wqe: u16, bytes: u32) {
    let nent = ring.nent() as u32;
    let stride = ring.cqe_size().stride();
    let slot = (p & (nent - 1)) as usize;
    let base = ring.region().iova() + (slot * stride + stride - 64) as u64;
    let ptr = hal.host_ptr(base).unwrap();
    let owner = ((p >> ring.log_nent()) & 1) as u8;
    let mut cqe = [0u8; 64];
    cqe[0x2c..0x30].copy_from_slice(&bytes.to_be_bytes());
    cqe[0x38..0x3c].copy_from_slice(&(0x0012_3456u32 | 0xab00_0000).to_be_bytes());
    cqe[0x20..0x24].copy_from_slice(&0x0000_0777u32.to_be_bytes());
    cqe[0x3c..0x3e].copy_from_slice(&wqe.to_be_bytes());
    if opcode == CqeOpcode::RESP_ERR.0 {
        cqe[0x36] = 0x99;
        cqe[0x37] = 0x01;
    }
    cqe[0x3f] = (opcode << 4) | owner;
    for (i, b) in cqe.iter().enumerate() {
        // SAFETY: `ptr` points into a live DMA region of the test platform
        // with at least 64 bytes from `base` (slot inside the ring).
        unsafe { ptr.add(i).write_volatile(*b) };
    }
}

fn setup(log: u8, size: CqeSize) -> (HostHal, CqRing<HostHal>, DoorbellRecord<HostHal>) {
    let hal = HostHal::new(0x20000);
    let ring = CqRing::new(&hal, log, size).unwrap();
    let dbr = DoorbellRecord::new(&hal).unwrap();
    (hal, ring, dbr)
}

#[test]
fn a_new_ring_is_all_invalid_and_polls_empty() {
    let (_hal, mut ring, dbr) = setup(3, CqeSize::B64);
    for i in 0..8 {
        assert_eq!(ring.region().read_u8(i * 64 + 63), 0xf0);
    }
    let mut out = [Cqe::EMPTY; 4];
    assert_eq!(ring.poll(&dbr, &mut out), 0);
    assert!(!ring.has_next());
    assert_eq!(ring.pending(), 0);
}

#[test]
fn cqes_are_decoded_in_order_and_the_doorbell_record_follows() {
    let (hal, mut ring, dbr) = setup(3, CqeSize::B64);
    for p in 0..5 {
        produce(
            &hal,
            &ring,
            p,
            CqeOpcode::RESP_SEND.0,
            p as u16 + 100,
            64 * p,
        );
    }
    produce(&hal, &ring, 5, CqeOpcode::RESP_ERR.0, 105, 0);
    let mut out = [Cqe::EMPTY; 4];
    assert_eq!(ring.poll(&dbr, &mut out), 4);
    assert_eq!(dbr.ci(), 4);
    assert_eq!(out[1].wqe_counter, 101);
    assert_eq!(out[3].byte_len, 192);
    assert_eq!(out[0].qpn, 0x12_3456, "QPN masked to 24 bits");
    assert_eq!(out[0].srqn, 0x777);
    assert_eq!(out[0].opcode, CqeOpcode::RESP_SEND);
    assert_eq!(ring.poll(&dbr, &mut out), 2);
    assert_eq!(
        out[1].status,
        CqeStatus::Error {
            syndrome: 0x01,
            vendor_syndrome: 0x99
        }
    );
    assert_eq!(dbr.ci(), 6);
}

#[test]
fn ownership_flips_every_pass_over_many_wraps() {
    for size in [CqeSize::B64, CqeSize::B128] {
        let (hal, mut ring, dbr) = setup(2, size);
        let mut seen = Vec::new();
        let mut p = 0u32;
        let mut out = [Cqe::EMPTY; 3];
        for round in 0..200u32 {
            let burst = 1 + round % 4; // never more than the ring holds
            for _ in 0..burst {
                produce(&hal, &ring, p, 2, p as u16, p);
                p += 1;
            }
            loop {
                let n = ring.poll(&dbr, &mut out);
                if n == 0 {
                    break;
                }
                seen.extend(out[..n].iter().map(|c| c.byte_len));
            }
            // Entries left from the previous pass must not look new.
            assert!(!ring.has_next());
        }
        assert_eq!(seen, (0..p).collect::<Vec<_>>(), "{size:?}");
        assert_eq!(dbr.ci(), p & 0xff_ffff);
    }
}

#[test]
fn resize_copy_carries_unpolled_cqes_in_order_then_the_new_ring_continues() {
    let (hal, mut old, dbr) = setup(2, CqeSize::B64);
    let mut out = [Cqe::EMPTY; 8];
    // Advance into the second pass: produce and poll 5 (never more than the
    // 4 entries outstanding).
    for p in 0..3 {
        produce(&hal, &old, p, 2, p as u16, p);
    }
    assert_eq!(old.poll(&dbr, &mut out), 3);
    for p in 3..5 {
        produce(&hal, &old, p, 2, p as u16, p);
    }
    assert_eq!(old.poll(&dbr, &mut out), 2);
    // Two CQEs wait, then firmware's RESIZE_CQ CQE at producer index 7.
    produce(&hal, &old, 5, 2, 5, 5);
    produce(&hal, &old, 6, 2, 6, 6);
    produce(&hal, &old, 7, CqeOpcode::RESIZE_CQ.0, 0, 0);
    assert_eq!(old.pending(), 3);
    let mut new = CqRing::new(&hal, 4, CqeSize::B64).unwrap();
    assert_eq!(old.copy_into_resized(&mut new), Ok(2));
    assert_eq!(new.consumer_index(), 6);
    // Firmware continues at r + 1 = 8 in the new ring.
    produce(&hal, &new, 8, 2, 8, 8);
    produce(&hal, &new, 9, 2, 9, 9);
    let n = new.poll(&dbr, &mut out);
    let got: Vec<u32> = out[..n].iter().map(|c| c.byte_len).collect();
    assert_eq!(got, [5, 6, 8, 9]);
    assert_eq!(dbr.ci(), 10);
}

#[test]
fn resize_copy_into_a_smaller_ring_fixes_owner_bits_for_the_new_size() {
    let (hal, mut old, dbr) = setup(4, CqeSize::B128);
    let mut out = [Cqe::EMPTY; 16];
    for p in 0..14 {
        produce(&hal, &old, p, 2, p as u16, p);
    }
    assert_eq!(old.poll(&dbr, &mut out[..11]), 11);
    produce(&hal, &old, 14, CqeOpcode::RESIZE_CQ.0, 0, 0);
    // 3 outstanding (11, 12, 13) into a ring of 4.
    let mut new = CqRing::new(&hal, 2, CqeSize::B128).unwrap();
    assert_eq!(old.copy_into_resized(&mut new), Ok(3));
    produce(&hal, &new, 15, 2, 15, 15);
    let n = new.poll(&dbr, &mut out);
    assert_eq!(
        out[..n].iter().map(|c| c.byte_len).collect::<Vec<_>>(),
        [11, 12, 13, 15]
    );
}

#[test]
fn resize_copy_without_a_resize_cqe_is_an_error() {
    let (hal, old, _dbr) = setup(2, CqeSize::B64);
    produce(&hal, &old, 0, 2, 0, 0);
    let mut new = CqRing::new(&hal, 3, CqeSize::B64).unwrap();
    assert_eq!(
        old.copy_into_resized(&mut new),
        Err(ResizeCopyError::NotSoftwareOwned { index: 1 })
    );
}

#[test]
fn arming_writes_the_record_then_one_64_bit_doorbell() {
    let (hal, ring, dbr) = setup(3, CqeSize::B64);
    ring.arm(&hal, &dbr, 16 * 4096, 0x42, 5, true);
    let word = mlx5_regs::doorbell::cq_arm_word(5, mlx5_regs::doorbell::CQ_ARM_SOLICITED, 0);
    assert_eq!(dbr.arm_word(), word);
    assert_eq!(
        hal.doorbells64(),
        [(
            16 * 4096 + 0x20,
            mlx5_regs::doorbell::cq_arm_doorbell(word, 0x42)
        )]
    );
}

#[test]
fn regions_are_freed_with_the_ring() {
    let (hal, ring, dbr) = setup(3, CqeSize::B64);
    assert_eq!(hal.live_regions(), 2);
    drop(ring);
    drop(dbr);
    assert_eq!(hal.live_regions(), 0);
}

/// The resize copy against a byte-for-byte reference of docs/firmware.md §8 (rdma-core's
/// entry-at-a-time walk), over random geometries: both CQE sizes, old and new
/// rings from 2 to 256 entries, a consumer index in any pass, and every way
/// the walk can end (the resize CQE, a hardware-owned entry, no resize CQE
/// within the smaller ring). The chunked copy must leave exactly the bytes the
/// reference expects in every slot of the new ring, and the same consumer
/// index and result.
#[test]
fn resize_copy_matches_an_entry_by_entry_reference() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = move |m: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % m
    };
    let mut seen = [0usize; 3];
    // (Under Miri, which interprets every byte: fewer and smaller rings,
    // still more than one 64-entry chunk.)
    let (cases, max_log) = if cfg!(miri) { (12, 7) } else { (400, 8) };
    for _case in 0..cases {
        let size = if rnd(2) == 0 {
            CqeSize::B64
        } else {
            CqeSize::B128
        };
        let stride = size.stride();
        let (log_old, log_new) = (1 + rnd(max_log) as u8, 1 + rnd(max_log) as u8);
        let (hal, mut old, dbr) = setup(log_old, size);
        let old_n = old.nent() as u32;
        // Move the consumer index to a random point of a random pass.
        let ci = rnd(4 * old_n as u64) as u32;
        let mut out = [Cqe::EMPTY; 256];
        let mut p = 0;
        while p < ci {
            let k = (ci - p).min(old_n);
            for q in p..p + k {
                produce(&hal, &old, q, 2, 0, q);
            }
            assert_eq!(old.poll(&dbr, &mut out[..k as usize]), k as usize);
            p += k;
        }
        // `n` software-owned CQEs with random bodies, then the terminator.
        let mut new = CqRing::new(&hal, log_new, size).unwrap();
        let limit = old_n.min(new.nent() as u32);
        let n = rnd(limit as u64 + 2).min(old_n as u64 - 1) as u32;
        let ending = rnd(3);
        for k in 0..old_n {
            let idx = ci.wrapping_add(k);
            let slot = (idx & (old_n - 1)) as usize;
            let pass = ((idx >> log_old) & 1) as u8;
            let at = old.base_offset() + slot * stride;
            let mut entry: Vec<u8> = (0..stride).map(|_| rnd(256) as u8).collect();
            entry[stride - 1] = match (k.cmp(&n), ending) {
                (core::cmp::Ordering::Less, _) => (2 << 4) | pass,
                (core::cmp::Ordering::Equal, 0) => (CqeOpcode::RESIZE_CQ.0 << 4) | pass,
                (core::cmp::Ordering::Equal, 1) => (2 << 4) | (pass ^ 1),
                _ => (2 << 4) | pass,
            };
            old.region().write_bytes(at, &entry);
        }
        // The reference: walk entry by entry, build the new ring's image.
        let new_n = new.nent() as u32;
        let mut image = std::vec![0u8; new.region().len()];
        new.region().read_bytes(0, &mut image);
        let mut i = ci;
        let want = loop {
            let slot = (i & (old_n - 1)) as usize;
            let at = old.base_offset() + slot * stride;
            let op_own = old.region().read_u8(at + stride - 1);
            if op_own >> 4 == 0xf || (op_own & 1) as u32 != (i >> log_old) & 1 {
                break Err(ResizeCopyError::NotSoftwareOwned { index: i });
            }
            if op_own >> 4 == CqeOpcode::RESIZE_CQ.0 {
                break Ok((i - ci) as usize);
            }
            if i.wrapping_sub(ci) >= limit {
                break Err(ResizeCopyError::ResizeCqeMissing);
            }
            let d = i.wrapping_add(1);
            let dat = new.base_offset() + (d & (new_n - 1)) as usize * stride;
            old.region().read_bytes(at, &mut image[dat..dat + stride]);
            image[dat + stride - 1] = (op_own & !1) | ((d >> log_new) & 1) as u8;
            i = i.wrapping_add(1);
        };
        let got = old.copy_into_resized(&mut new);
        let ctx =
            std::format!("{size:?} old 2^{log_old} new 2^{log_new} ci {ci} n {n} end {ending}");
        assert_eq!(got, want, "{ctx}");
        let mut after = std::vec![0u8; image.len()];
        new.region().read_bytes(0, &mut after);
        assert!(after == image, "new ring bytes differ: {ctx}");
        assert_eq!(
            new.consumer_index(),
            if want.is_ok() { ci + 1 } else { i + 1 },
            "{ctx}"
        );
        seen[match want {
            Ok(_) => 0,
            Err(ResizeCopyError::NotSoftwareOwned { .. }) => 1,
            Err(_) => 2,
        }] += 1;
    }
    assert!(
        seen.iter().all(|&k| k >= cases / 20),
        "every ending exercised: {seen:?}"
    );
}

#[test]
fn resize_copy_refuses_a_different_cqe_size_before_copying() {
    let (hal, old, _dbr) = setup(2, CqeSize::B64);
    produce(&hal, &old, 0, CqeOpcode::RESIZE_CQ.0, 0, 0);
    let mut new = CqRing::new(&hal, 3, CqeSize::B128).unwrap();
    assert_eq!(
        old.copy_into_resized(&mut new),
        Err(ResizeCopyError::CqeSizeMismatch)
    );
    assert_eq!(new.consumer_index(), 0);
}

#[test]
fn a_reader_takes_only_owned_cqes_leaves_declined_ones_and_publishes_nothing() {
    for size in [CqeSize::B64, CqeSize::B128] {
        let (hal, mut ring, dbr) = setup(2, size);
        // Two passes over a ring of 4, so the owner bit flips under the
        // reader: 3 CQEs, then 4 more, then 2 more.
        let mut p = 0u32;
        let mut seen = Vec::new();
        for batch in [3u32, 4, 2] {
            for _ in 0..batch {
                produce(&hal, &ring, p, CqeOpcode::RESP_SEND.0, p as u16, p);
                p += 1;
            }
            let before = ring.consumer_index();
            let (n, moved) = ring.read(|rd| {
                // A declined CQE stays: the next take sees it again.
                assert!(rd.take_if(|_| None::<()>).is_none());
                assert_eq!(rd.consumer_index(), before);
                let first = rd.peek().map(|v| v.wqe_counter());
                assert_eq!(first, Some(before as u16), "peek does not take");
                let mut n = 0;
                while let Some(v) = rd.take() {
                    seen.push(v.wqe_counter() as u32);
                    n += 1;
                }
                assert!(rd.peek().is_none(), "the next entry is the device's");
                n
            });
            assert_eq!((n, moved), (batch, true), "{size:?}");
            assert_eq!(ring.consumer_index(), before + batch);
            assert_eq!(dbr.ci(), 0, "read does not publish");
            // Nothing waiting: the index does not move.
            assert_eq!(ring.read(|rd| rd.take().is_some()), (false, false));
            // `has_next` follows the index the read stored.
            assert!(!ring.has_next());
        }
        assert_eq!(seen, (0..9).collect::<Vec<_>>(), "{size:?}");
        ring.update_doorbell(&dbr);
        assert_eq!(dbr.ci(), 9);
    }
}

#[test]
fn a_waiting_cqe_is_taken_once_where_it_was_found_and_a_stale_one_is_declined() {
    for size in [CqeSize::B64, CqeSize::B128] {
        let (hal, mut ring, _dbr) = setup(1, size);
        assert!(ring.waiting().is_none(), "a new ring has nothing waiting");
        // Over three passes of a ring of 2, so the owner bit flips.
        for p in 0..6u32 {
            produce(&hal, &ring, p, CqeOpcode::RESP_SEND.0, p as u16 + 10, p);
            let w = ring.waiting().expect("the CQE just written is owned");
            // A declined take leaves it: the index stays and it is still
            // waiting.
            let w2 = ring.waiting().unwrap();
            assert!(!ring.read(|rd| rd.take_waiting_if(w2, |_| None::<()>)).1);
            let ((got, ci_after), moved) = ring.read(|rd| {
                let got = rd.take_waiting_if(w, |v| Some((v.opcode(), v.wqe_counter())));
                (got, rd.consumer_index())
            });
            assert!(moved);
            assert_eq!(got, Some((CqeOpcode::RESP_SEND, p as u16 + 10)), "{size:?}");
            assert_eq!(ci_after, p + 1);
            assert!(ring.waiting().is_none(), "the next entry is the device's");
        }
        // A token from before the index moved is declined, even when the
        // entry it was made at holds an owned CQE of a later pass.
        produce(&hal, &ring, 6, CqeOpcode::RESP_SEND.0, 1, 0);
        let stale = ring.waiting().unwrap();
        assert!(ring.read(|rd| rd.take().is_some()).0);
        produce(&hal, &ring, 7, CqeOpcode::RESP_SEND.0, 2, 0);
        produce(&hal, &ring, 8, CqeOpcode::RESP_SEND.0, 3, 0);
        assert!(ring.read(|rd| rd.take().is_some()).0);
        assert_eq!(ring.consumer_index(), 8, "index 8 reuses index 6's entry");
        let (r, moved) = ring.read(|rd| rd.take_waiting_if(stale, |v| Some(v.wqe_counter())));
        assert_eq!((r, moved), (None, false), "{size:?}");
    }
}

#[test]
fn has_second_sees_the_entry_after_the_consumer_index_in_its_own_pass() {
    for size in [CqeSize::B64, CqeSize::B128] {
        // A ring of 2 over four passes: the entry after the index is the
        // other entry, holding nothing yet or a CQE of the pass before.
        let (hal, mut ring, _dbr) = setup(1, size);
        for ci in (0..8u32).step_by(2) {
            assert!(!ring.has_next() && !ring.has_second(), "{size:?} {ci}");
            produce(&hal, &ring, ci, CqeOpcode::RESP_SEND.0, ci as u16, 1);
            assert!(ring.has_next() && !ring.has_second(), "{size:?} {ci}: one");
            produce(
                &hal,
                &ring,
                ci + 1,
                CqeOpcode::RESP_SEND.0,
                ci as u16 + 1,
                1,
            );
            assert!(ring.has_second(), "{size:?} {ci}: two");
            assert!(ring.read(|rd| rd.take().is_some()).0);
            // Index ci + 1 waits; after it comes index ci's entry, whose
            // CQE is now a pass behind.
            assert!(
                ring.has_next() && !ring.has_second(),
                "{size:?} {ci}: taken one"
            );
            assert!(ring.read(|rd| rd.take().is_some()).0);
            assert_eq!(ring.consumer_index(), ci + 2);
        }
    }
}
