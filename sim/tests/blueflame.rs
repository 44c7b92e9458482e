//! BlueFlame copies (`engine/blueflame.rs`): a WQE written whole into a
//! UAR's BlueFlame buffer, its first 8 bytes being the doorbell, is checked
//! word by word against the WQE in memory; a differing word, a word with
//! no doorbell before it, and a copy cut short by the next doorbell on the
//! same buffer are violations. The message goes out either way (the model
//! executes the WQE from memory at the doorbell, as a plain doorbell).

use crate::common::qp::*;

use mlx5_hal::Hal;
use mlx5_regs::consts::CqeOpcode;
use mlx5_regs::doorbell as db;
use mlx5_regs::layouts::cqe64;
use mlx5_sim::{Profile, Violation};

/// Write a WQE for a 64-byte SEND at the producer position and publish it
/// in the doorbell record; returns its index and its words (big-endian,
/// as the copy carries them).
fn put_send(p: &mut Pair) -> (u16, Vec<u64>) {
    p.payload(0, 64, 3);
    let wr = Wr::send(p.src.iova(), 64, p.key);
    let index = p.a.put(&wr);
    let bytes = wr.bytes(p.a.qpn, index);
    mlx5_hal::barrier::dma_wmb();
    p.a.dbr.write_be32(4, p.a.pc as u32);
    let words = bytes
        .chunks(8)
        .map(|c| u64::from_be_bytes(c.try_into().unwrap()))
        .collect();
    (index, words)
}

/// BAR0 offset of the BlueFlame buffer the sender uses next; switches to
/// the other one for the post after.
fn next_buffer(p: &mut Pair) -> usize {
    let at = db::uar_page_offset(p.a.uar) + p.a.bf;
    p.a.bf ^= 256;
    at
}

fn blueflame_violations(p: &Pair) -> Vec<String> {
    p.f.dev
        .violations()
        .into_iter()
        .filter_map(|v| match v {
            Violation::BlueFlame(s) => Some(s),
            _ => None,
        })
        .collect()
}

/// The message arrived and the send completed.
fn delivered(p: &mut Pair) {
    let r = p.wait_cqe(false);
    assert_eq!(cqe64::opcode.get(&r), CqeOpcode::RESP_SEND.0);
    assert_eq!(cqe64::byte_cnt.get(&r), 64);
    let s = p.wait_cqe(true);
    assert_eq!(cqe64::opcode.get(&s), CqeOpcode::REQ.0);
}

fn pair() -> Pair {
    let mut p = Pair::new(Profile::ConnectX5, Mode::Fl, false, 7);
    p.rmp.post(8);
    p
}

#[test]
fn a_copy_equal_to_the_wqe_is_taken_and_the_message_goes_out() {
    let mut p = pair();
    for _ in 0..3 {
        let (_, words) = put_send(&mut p);
        let at = next_buffer(&mut p);
        for (k, w) in words.iter().enumerate() {
            p.f.hal.mmio_write64(at + 8 * k, *w);
        }
        delivered(&mut p);
    }
    let s = p.f.dev.traffic().stats();
    assert_eq!((s.blueflame_copies, s.doorbells), (3, 3));
    assert!(
        p.f.dev.violations().is_empty(),
        "{:?}",
        p.f.dev.violations()
    );
}

#[test]
fn a_word_that_differs_from_the_wqe_is_a_violation() {
    let mut p = pair();
    let (index, words) = put_send(&mut p);
    let at = next_buffer(&mut p);
    p.f.hal.mmio_write64(at, words[0]);
    p.f.hal.mmio_write64(at + 8, words[1]);
    p.f.hal.mmio_write64(at + 16, words[2] ^ 1);
    delivered(&mut p);
    let v = blueflame_violations(&p);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(
        v[0].contains(&format!("WQE {index:#x}")) && v[0].contains("where the WQE holds"),
        "{v:?}"
    );
    assert_eq!(p.f.dev.traffic().stats().blueflame_copies, 0);
}

#[test]
fn a_copy_cut_short_is_torn_at_the_next_doorbell_on_its_buffer() {
    let mut p = pair();
    // Buffer A: the doorbell and one more word of a one-WQEBB WQE.
    let (_, words) = put_send(&mut p);
    let a = next_buffer(&mut p);
    p.f.hal.mmio_write64(a, words[0]);
    p.f.hal.mmio_write64(a + 8, words[1]);
    delivered(&mut p);
    // Buffer B, a plain doorbell: not a copy, nothing torn.
    let (_, words) = put_send(&mut p);
    let b = next_buffer(&mut p);
    p.f.hal.mmio_write64(b, words[0]);
    delivered(&mut p);
    assert!(blueflame_violations(&p).is_empty());
    // Buffer A again: the first copy never finished.
    let (_, words) = put_send(&mut p);
    assert_eq!(next_buffer(&mut p), a);
    p.f.hal.mmio_write64(a, words[0]);
    delivered(&mut p);
    let v = blueflame_violations(&p);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(
        v[0].starts_with("torn BlueFlame write") && v[0].contains("16 of 64"),
        "{v:?}"
    );
}

#[test]
fn a_word_without_a_doorbell_or_out_of_order_is_a_violation() {
    let mut p = pair();
    let at = next_buffer(&mut p);
    p.f.hal.mmio_write64(at + 8, 0x1234);
    let (_, words) = put_send(&mut p);
    let at = next_buffer(&mut p);
    p.f.hal.mmio_write64(at, words[0]);
    p.f.hal.mmio_write64(at + 24, words[3]);
    delivered(&mut p);
    let v = blueflame_violations(&p);
    assert_eq!(v.len(), 2, "{v:?}");
    assert!(v[0].contains("no doorbell before it"), "{v:?}");
    assert!(v[1].contains("at +0x18, expected +0x8"), "{v:?}");
}
