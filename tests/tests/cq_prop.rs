//! The CQ property test: seeded random inject/poll/resize/arm sequences
//! against the model, checked step by step against a reference of what must
//! happen:
//!
//! * every completion is delivered exactly once and in order;
//! * a resize is accepted or refused exactly when the reference says, with
//!   the status and the reason the model gives, and `capacity()` follows;
//! * an armed CQ with completions gives exactly one event, none unarmed.
//!
//! Each seed runs two phases on one CQ. The first (3,000 steps) is the
//! original random mix; it is kept step for step so that seeds found by
//! earlier sweeps replay the same sequence. In it most resizes are refused or
//! round to the current size: a seed makes only 1 to 13 real resizes, and
//! an exactly full one in about 1 seed in 65. The second (1,000 steps) aims at
//! the edges: it fills the ring to a power of two and resizes to exactly that
//! many entries, then often tries another resize at once (refused: the old
//! ring is full), with larger polls so real resizes happen. Seeds come from
//! `mlx5_tests::seeds` (fixed list + a fresh seed per run; `MLX5_PROP_SEED`
//! replays one; `tests/sweep.sh` runs ranges).

use mlx5_driver::cq::{Cq, CqOptions, Cqe};
use mlx5_driver::{Error, Event, Hca};
use mlx5_regs::CmdStatus;
use mlx5_sim::syndrome as sy;
use mlx5_sim::{Device, SimConfig, SimHal};
use mlx5_tests::seeds::{say, Seeded};
use mlx5_tests::{assert_clean, bring_up, drain_byte_lens, inject_sends, Rng};

/// Seeds that once failed the reference: 1062 and 2920 make
/// resizes into an exactly full ring in the first phase (2920 then one
/// refused because the old ring was full); 1220, 1366, 2040 and 2441 made
/// the fewest resizes the first reference counted.
const FIXED_SEEDS: [u64; 10] = [1, 2, 3, 0xdead_beef, 1062, 2920, 1220, 1366, 2040, 2441];

/// Resize targets (entries asked for): rings of 2 to 1,024 entries.
const TARGETS: [u32; 9] = [1, 3, 7, 15, 31, 63, 127, 255, 1023];

/// Per-seed minimums: about half the least any of the seeds 0..20,000
/// made, 6 to 16 standard deviations below the mean (docs/reliability.md
/// §6). They catch a generator that stopped exercising something; no seed
/// fails them by chance.
const MIN_RESIZED: usize = 100;
const MIN_EXACTLY_FULL: usize = 50;
const MIN_OLD_FULL: usize = 25;
const MIN_REFUSED: usize = 120;
const MIN_EVENTS: usize = 300;

/// What one seed exercised.
#[derive(Debug, Default, Clone, Copy)]
struct Stats {
    /// Resizes that changed the ring size.
    resized: usize,
    /// ... of them into an exactly full ring (waiting = new ring size).
    exactly_full: usize,
    /// ... of them in the first phase.
    exactly_full_phase1: usize,
    /// Resizes that rounded to the current size (nothing sent).
    same_size: usize,
    /// Refused: more completions waiting than the new ring has entries.
    refused_too_small: usize,
    /// Refused: the old ring full, no slot for the RESIZE_CQ CQE.
    refused_old_full: usize,
    /// Completion events.
    events: usize,
}

/// One CQ, the completions injected (`seq`) and the next one due.
struct Prop<'a> {
    dev: &'a Device,
    hca: &'a Hca<SimHal>,
    cq: Cq<SimHal>,
    seed: u64,
    seq: u32,
    expect_next: u32,
    armed: bool,
    st: Stats,
}

impl Prop<'_> {
    fn waiting(&self) -> u32 {
        self.seq - self.expect_next
    }

    /// Up to `capacity()` waiting. After a resize into an exactly full ring
    /// more than that waits (the ring holds `capacity() + 1`): no room until
    /// some are polled.
    fn inject_random(&mut self, rng: &mut Rng) {
        let room = self.cq.capacity().saturating_sub(self.waiting());
        let n = rng.below(room as u64 + 1) as u32;
        inject_sends(self.dev, &self.cq, &mut self.seq, n);
    }

    fn inject(&mut self, n: u32) {
        inject_sends(self.dev, &self.cq, &mut self.seq, n);
    }

    fn poll(&mut self, k: usize, ctx: &str) {
        let mut out = [Cqe::EMPTY; 64];
        let n = self.cq.poll(&mut out[..k]);
        for c in &out[..n] {
            assert_eq!(c.byte_len, self.expect_next, "{ctx}: order");
            self.expect_next += 1;
        }
    }

    fn arm(&mut self) {
        if !self.armed {
            self.hca.arm_cq(&mut self.cq, false).unwrap();
            self.armed = true;
        }
    }

    /// Resize to `target` entries and check the outcome against the
    /// reference: the model's rule (docs/fidelity.md §9; the status is Linux
    /// cmd.c's BAD_SIZE_OUTS_CQES) refuses when more completions wait than
    /// the new ring has entries (an exactly full new ring is accepted) or
    /// when the old ring is full, as the RESIZE_CQ CQE needs a free slot in
    /// it. A size that rounds to the current one sends nothing (rdma-core
    /// verbs.c `mlx5_resize_cq`). Returns true if the ring size changed.
    fn resize(&mut self, target: u32, phase: u8, ctx: &str) -> bool {
        let waiting = self.waiting();
        let old_nent = self.cq.capacity() + 1;
        let new_nent = (target + 1).next_power_of_two();
        let too_small = waiting > new_nent;
        let old_full = waiting >= old_nent;
        match self.hca.resize_cq(&mut self.cq, target) {
            Ok(()) if new_nent == old_nent => {
                self.st.same_size += 1;
                false
            }
            Ok(()) => {
                assert!(
                    !too_small && !old_full,
                    "{ctx}: resize to {new_nent} accepted with {waiting} waiting in {old_nent}"
                );
                assert_eq!(self.cq.capacity(), new_nent - 1, "{ctx}: capacity");
                self.st.resized += 1;
                if waiting == new_nent {
                    self.st.exactly_full += 1;
                    if phase == 1 {
                        self.st.exactly_full_phase1 += 1;
                    }
                }
                true
            }
            Err(Error::Command {
                status, syndrome, ..
            }) => {
                assert_eq!(status, CmdStatus::BAD_SIZE_OUTS_CQES_ERR, "{ctx}");
                let why_ok = (too_small && syndrome == sy::CQ_RESIZE_OUTSTANDING)
                    || (old_full && syndrome == sy::CQ_RESIZE_OLD_FULL);
                assert!(
                    new_nent != old_nent && why_ok,
                    "{ctx}: resize to {new_nent} refused ({syndrome:#x}) with {waiting} waiting in {old_nent}"
                );
                assert_eq!(self.cq.capacity(), old_nent - 1, "{ctx}: capacity kept");
                if syndrome == sy::CQ_RESIZE_OLD_FULL {
                    self.st.refused_old_full += 1;
                } else {
                    self.st.refused_too_small += 1;
                }
                false
            }
            Err(e) => panic!("{ctx}: {e}"),
        }
    }

    /// An armed CQ with completions fires exactly once; none unarmed.
    fn events(&mut self, ctx: &str) {
        self.hca.poll_events().unwrap();
        while let Some(ev) = self.hca.next_completion() {
            assert_eq!(ev, Event::Completion { cqn: self.cq.cqn() }, "{ctx}");
            assert!(self.armed, "{ctx}: event without an arm");
            self.armed = false;
            self.st.events += 1;
        }
    }

    /// Phase 1, the original mix (its random draws must not change).
    fn step_original(&mut self, rng: &mut Rng, ctx: &str) {
        match rng.below(10) {
            0..=3 => self.inject_random(rng),
            4..=6 => {
                let k = 1 + rng.below(8) as usize;
                self.poll(k, ctx);
            }
            7 => {
                let target = TARGETS[rng.below(9) as usize];
                self.resize(target, 1, ctx);
            }
            _ => self.arm(),
        }
    }

    /// Phase 2, aimed at the edges of resize.
    fn step_edges(&mut self, rng: &mut Rng, ctx: &str) {
        match rng.below(10) {
            0..=2 => self.inject_random(rng),
            3..=5 => {
                let k = 1 + rng.below(64) as usize;
                self.poll(k, ctx);
            }
            6 | 7 => {
                // Poll or fill to p waiting, p a power of two below the
                // ring size, and resize to a ring of exactly p entries.
                let log = (self.cq.capacity() + 1).trailing_zeros() as u64;
                if log < 2 {
                    self.resize(TARGETS[1 + rng.below(8) as usize], 2, ctx);
                    return;
                }
                let p = 1u32 << (1 + rng.below(log - 1));
                while self.waiting() > p {
                    let k = (self.waiting() - p).min(64) as usize;
                    self.poll(k, ctx);
                }
                self.inject(p - self.waiting());
                if self.resize(p - 1, 2, ctx) && rng.below(2) == 0 {
                    // Exactly full now: resizing again before a poll is
                    // refused (unless the size rounds to the current one).
                    let target = TARGETS[rng.below(9) as usize];
                    self.resize(target, 2, ctx);
                }
            }
            8 => self.arm(),
            _ => {
                let target = TARGETS[rng.below(9) as usize];
                self.resize(target, 2, ctx);
            }
        }
    }
}

fn one_seed(seed: u64) -> Stats {
    let dev = Device::new(SimConfig::default());
    let hca = bring_up(&dev);
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let cq = hca.create_cq(31, CqOptions::default()).unwrap();
    let mut p = Prop {
        dev: &dev,
        hca: &hca,
        cq,
        seed,
        seq: 0,
        expect_next: 0,
        armed: false,
        st: Stats::default(),
    };
    for step in 0..4000 {
        let ctx = format!("seed {seed} step {step}");
        if step < 3000 {
            p.step_original(&mut rng, &ctx);
        } else {
            p.step_edges(&mut rng, &ctx);
        }
        p.events(&ctx);
    }
    for v in drain_byte_lens(&mut p.cq) {
        assert_eq!(v, p.expect_next, "seed {}: order at the end", p.seed);
        p.expect_next += 1;
    }
    assert_eq!(p.expect_next, p.seq, "seed {seed}: every completion once");
    let st = p.st;
    if std::env::var("MLX5_CQ_PROP_STATS").is_ok() {
        say(&format!("stats seed {seed} {st:?}"));
    }
    assert!(
        st.resized >= MIN_RESIZED
            && st.exactly_full >= MIN_EXACTLY_FULL
            && st.refused_old_full >= MIN_OLD_FULL
            && st.refused_too_small >= MIN_REFUSED
            && st.events >= MIN_EVENTS,
        "seed {seed}: exercised too little: {st:?}"
    );
    hca.destroy_cq(p.cq).map_err(|e| e.error()).unwrap();
    hca.teardown().expect("teardown");
    assert_clean(&dev, &format!("property seed {seed}"));
    st
}

#[test]
fn random_inject_poll_resize_arm_sequences_deliver_every_completion_once_in_order() {
    let seeded = Seeded::new(
        module_path!(),
        "random_inject_poll_resize_arm_sequences_deliver_every_completion_once_in_order",
        &FIXED_SEEDS,
    );
    let all = seeded.run(one_seed);
    let sum = |f: fn(&Stats) -> usize| all.iter().map(|(_, s)| f(s)).sum::<usize>();
    let (full, full1) = (sum(|s| s.exactly_full), sum(|s| s.exactly_full_phase1));
    say(&format!(
        "CQ property: {} seeds, {} resizes, {full} into an exactly full ring ({full1} in phase 1), \
         {} refused as too small, {} for a full old ring, {} no-op",
        all.len(),
        sum(|s| s.resized),
        sum(|s| s.refused_too_small),
        sum(|s| s.refused_old_full),
        sum(|s| s.same_size),
    ));
    // The edge the first reference got wrong, reached by the original mix
    // itself: the fixed seeds 1062 and 2920 do, and 1 seed in 65 does (none
    // in 1,000 seeds: odds about 2 in 10 million).
    if seeded.is_default_list() || all.len() >= 1000 {
        assert!(full1 > 0, "phase 1 made no exactly full resize");
    }
}
