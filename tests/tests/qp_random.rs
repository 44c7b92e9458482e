//! The seeded random-operation test of queue pairs: QPs, memory
//! keys, CQs and SRQs created, transitioned, posted to, polled, resized,
//! armed and destroyed at random, with real loopback traffic through the
//! model's engine, checked step by step against a reference of what must
//! happen (`mlx5_tests::qp_random`).
//!
//! Each test runs its fixed regression seeds plus a fresh one per run and
//! prints them; a failing seed is printed with the command that replays it
//! (`MLX5_PROP_SEED=n`, see `mlx5_tests::seeds`). The long run (a million
//! steps per seed) is opt-in:
//! `cargo test --release -p mlx5-tests --test integration -- --ignored qp_random::`.

use mlx5_sim::ExecMode;
use mlx5_tests::qp_random::{run, Stats};
use mlx5_tests::seeds::{say, Seeded};

/// Regression seeds (each runs every device variant the seed selects:
/// profile, ISSI, port type, limit-on-arm behaviour).
const FIXED_SEEDS: [u64; 6] = [1, 2, 3, 4, 5, 6];

/// Steps per seed in the default (CI) run.
const STEPS: usize = 4_000;

fn report(name: &str, all: &[(u64, Stats)]) -> Stats {
    let mut t = Stats::default();
    for (_, s) in all {
        t.add(s);
    }
    say(&format!("{name}: {} seeds, {t:?}", all.len()));
    t
}

#[test]
fn random_qp_sequences_match_the_reference() {
    let seeded = Seeded::new(
        module_path!(),
        "random_qp_sequences_match_the_reference",
        &FIXED_SEEDS,
    );
    let all = seeded.run(|seed| run(seed, ExecMode::Synchronous, STEPS));
    let t = report("qp_random sync", &all);
    // The mix really exercised traffic, errors, flushes, waits and events
    // (over the default seeds; a single replayed seed may miss one).
    if seeded.is_default_list() || all.len() >= 100 {
        assert!(
            t.traffic.messages > 0 && t.traffic.rnr_naks > 0 && t.traffic.ack_timeouts > 0,
            "{t:?}"
        );
        assert!(
            t.traffic.reads > 0 && t.traffic.atomics > 0,
            "RDMA READs and atomics were mixed in: {t:?}"
        );
        assert!(
            t.own_rq_recvs > 0 && t.own_rq_cqes > t.own_rq_flushes && t.own_rq_flushes > 0,
            "QPs with their own receive queue took messages and were flushed: {t:?}"
        );
        assert!(
            t.traffic.own_rq_rnr_naks > 0,
            "an empty own receive queue answered RNR: {t:?}"
        );
        assert!(
            t.errors > 0 && t.flushes > 0 && t.events > 0 && t.limit_events > 0,
            "{t:?}"
        );
        assert!(t.resizes > 0 && t.faults > 0 && t.refusals > 0, "{t:?}");
    }
}

#[test]
fn random_qp_sequences_with_the_device_on_its_own_thread() {
    let seeded = Seeded::new(
        module_path!(),
        "random_qp_sequences_with_the_device_on_its_own_thread",
        &FIXED_SEEDS,
    );
    let all = seeded.run(|seed| run(seed ^ 0x7777, ExecMode::Threaded, STEPS / 2));
    let t = report("qp_random threaded", &all);
    if seeded.is_default_list() || all.len() >= 100 {
        assert!(
            t.traffic.messages > 0 && t.errors > 0 && t.flushes > 0,
            "{t:?}"
        );
    }
}

#[test]
#[ignore = "long run (a million steps per seed): cargo test --release -p mlx5-tests --test integration -- --ignored qp_random::"]
fn a_million_random_qp_steps() {
    Seeded::new(module_path!(), "a_million_random_qp_steps", &[0x5eed])
        .ignored()
        .run(|seed| {
            let mut t = Stats::default();
            let mut round = 0u64;
            while t.steps < 1_000_000 {
                let mode = if round % 4 == 3 {
                    ExecMode::Threaded
                } else {
                    ExecMode::Synchronous
                };
                t.add(&run(seed.wrapping_add(round), mode, 50_000));
                round += 1;
            }
            say(&format!("seed {seed}: {t:?}"));
        });
}
