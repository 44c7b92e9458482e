//! The synchronous-mode clock's idle skip: while the host only waits, each
//! delay lets extra virtual time pass (never past the model's next scheduled
//! event), so a long timeout costs no wall time and nothing observable is
//! skipped.

use crate::common::*;

use std::time::{Duration, Instant};

use mlx5_hal::Hal;
use mlx5_regs::Opcode;

const SEC: u64 = 1_000_000_000;

fn nop() -> Vec<u8> {
    inp(Opcode::NOP, 16)
}

/// Poll slot 0 the way a driver does (check, then a 1 ms delay) until it
/// completes or `deadline_ns` of device time passed; returns (completed,
/// device time waited, delays).
fn wait(f: &Fw, deadline_ns: u64) -> (bool, u64, u64) {
    let t0 = f.hal.now_ns();
    let mut delays = 0;
    loop {
        let waited = f.hal.now_ns() - t0;
        if !f.owned_by_hw(0) {
            return (true, waited, delays);
        }
        if waited > deadline_ns {
            return (false, waited, delays);
        }
        f.hal.delay_us(1000);
        delays += 1;
    }
}

#[test]
fn an_hour_long_wait_for_a_stalled_command_costs_no_wall_time() {
    let mut f = Fw::default();
    f.enable();
    f.dev.inject().stall_next(Opcode::NOP.0);
    f.token = f.token.wrapping_add(1).max(1);
    f.prepare(0, &nop(), 16);
    f.ring(0);
    let wall = Instant::now();
    let (done, waited, delays) = wait(&f, 3600 * SEC);
    assert!(!done, "a stalled command never completes");
    assert!(waited > 3600 * SEC);
    // Overshoot: one skip at most, <= 1/256 of the time waited and <= 1 s.
    assert!(waited < 3601 * SEC, "overshoot bounded: {waited} ns");
    // 3.6 million 1 ms delays without the skip.
    assert!(delays < 10_000, "{delays} delays");
    assert!(
        wall.elapsed() < Duration::from_secs(5),
        "{:?}",
        wall.elapsed()
    );
}

#[test]
fn a_delayed_completion_is_seen_at_its_time_not_skipped_past() {
    let mut f = Fw::default();
    f.enable();
    f.dev.inject().delay_completions_us(30_000_000); // 30 s
    f.token = f.token.wrapping_add(1).max(1);
    f.prepare(0, &nop(), 16);
    f.ring(0);
    let (done, waited, delays) = wait(&f, 60 * SEC);
    assert!(done);
    // Seen within one poll interval of its due time (the skip stops at it).
    assert!(
        (30 * SEC..30 * SEC + 1_100_000).contains(&waited),
        "{waited} ns"
    );
    assert!(delays < 30_000, "the skip applied while waiting: {delays}");
    let t = f.dev.trace();
    assert!(t.last().unwrap().duration_ns >= 30 * SEC);
}

#[test]
fn a_register_write_ends_the_skip() {
    let mut f = Fw::default();
    f.enable();
    f.dev.inject().stall_next(Opcode::NOP.0);
    f.token = f.token.wrapping_add(1).max(1);
    f.prepare(0, &nop(), 16);
    f.ring(0);
    let _ = wait(&f, 100 * SEC);
    // Idle for 100 s: a 1 us delay lets ~0.4 s pass.
    let t = f.hal.now_ns();
    f.hal.delay_us(1);
    assert!(f.hal.now_ns() - t > SEC / 4);
    // The host writes a register (a NOP on slot 1): delays are exact again.
    assert!(f.try_exec(1, &nop(), 16).unwrap().ok());
    let t = f.hal.now_ns();
    f.hal.delay_us(1);
    assert_eq!(
        f.hal.now_ns() - t,
        1_000 + 100,
        "1 us and one 100 ns clock read"
    );
}
