//! The send doorbell's value checked against the doorbell record and the
//! WQE it names (docs/fidelity.md §14.5): a stale control word or a doorbell
//! naming an earlier WQE is a `Violation::SendDoorbell`; the posted WQEs
//! still run to the doorbell record's counter.

use mlx5_regs::doorbell as db;
use mlx5_sim::{Profile, Violation};

use crate::common::qp::Mode;
use crate::common::wire::{Pair, Wr};
use mlx5_hal::Hal;

/// Write the doorbell record, then `value` as the 8-byte doorbell.
fn ring_with(p: &mut Pair, value: u64) {
    mlx5_hal::barrier::dma_wmb();
    p.a.dbr.write_be32(4, p.a.pc as u32);
    mlx5_hal::barrier::mmio_wmb();
    p.f.hal
        .mmio_write64(db::uar_page_offset(p.a.uar) + p.a.bf, value);
    p.a.bf ^= 256;
}

/// The first 8 bytes of the WQE at `index`, as a doorbell value.
fn ctrl_word(p: &Pair, index: u16) -> u64 {
    let ring = p.a.ring.as_ref().unwrap();
    let slot = (index as usize) & ((1usize << p.a.log_sq) - 1);
    db::qp_send_doorbell(ring.read_be32(slot * 64), ring.read_be32(slot * 64 + 4))
}

fn doorbell_violations(p: &Pair) -> Vec<String> {
    p.f.dev
        .violations()
        .into_iter()
        .filter_map(|v| match v {
            Violation::SendDoorbell(s) => Some(s),
            _ => None,
        })
        .collect()
}

#[test]
fn the_last_wqes_control_word_passes_without_a_violation() {
    let mut p = Pair::new(Profile::ConnectX5, Mode::Fl, false, 7);
    p.rmp.post(2);
    p.a.put(&Wr::send(p.src.iova(), 8, p.key));
    let last = p.a.put(&Wr::send(p.src.iova(), 8, p.key));
    let v = ctrl_word(&p, last);
    ring_with(&mut p, v);
    p.wait_cqe(false);
    p.wait_cqe(false);
    assert!(
        p.f.dev.violations().is_empty(),
        "{:?}",
        p.f.dev.violations()
    );
}

#[test]
fn a_stale_control_word_is_a_violation() {
    let mut p = Pair::new(Profile::ConnectX5, Mode::Fl, false, 7);
    p.rmp.post(1);
    let i = p.a.put(&Wr::send(p.src.iova(), 8, p.key));
    // The right position and QP, but the opcode of an earlier SEND_IMM: the
    // word a driver would ring if it reused its last doorbell value.
    let stale = ctrl_word(&p, i) ^ (0x0b ^ 0x0a) << 32;
    ring_with(&mut p, stale);
    let v = doorbell_violations(&p);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].contains("stale control word"), "{v:?}");
    // Executed up to the doorbell record all the same (CHOICE, §14.5).
    p.wait_cqe(false);
}

#[test]
fn a_doorbell_naming_an_earlier_wqe_is_a_violation() {
    let mut p = Pair::new(Profile::ConnectX5, Mode::Fl, false, 7);
    p.rmp.post(2);
    let first = p.a.put(&Wr::send(p.src.iova(), 8, p.key));
    p.a.put(&Wr::send(p.src.iova(), 8, p.key));
    let v = ctrl_word(&p, first);
    ring_with(&mut p, v);
    let v = doorbell_violations(&p);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].contains("not the last WQE posted"), "{v:?}");
    p.wait_cqe(false);
    p.wait_cqe(false);
}

#[test]
fn a_repeated_doorbell_for_the_last_wqe_passes() {
    let mut p = Pair::new(Profile::ConnectX5, Mode::Fl, false, 7);
    p.rmp.post(1);
    let i = p.a.put(&Wr::send(p.src.iova(), 8, p.key));
    let v = ctrl_word(&p, i);
    ring_with(&mut p, v);
    p.wait_cqe(false);
    ring_with(&mut p, v);
    assert!(
        p.f.dev.violations().is_empty(),
        "{:?}",
        p.f.dev.violations()
    );
    assert!(p.f.poll_cq(&mut p.rcq).is_none(), "nothing new executed");
}
