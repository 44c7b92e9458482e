//! The fuzz targets of `fuzz/` as proptest properties on stable,
//! run by `cargo test --workspace` and so by `.ci/run`. Same harnesses
//! (`mlx5_tests::fuzz`), bounded case counts so the file stays quick; the
//! seed corpus of every target is replayed first.
//!
//! Each property runs its fixed seed and a fresh one per run, printed; a
//! failing seed is printed with the command that replays it
//! (`mlx5_tests::seeds`). More cases per seed:
//! `PROPTEST_CASES=10000 cargo test -p mlx5-tests --test integration fuzz_props::`.

use std::path::PathBuf;

use mlx5_tests::fuzz;
use mlx5_tests::seeds::Seeded;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestRunner};

/// Every file of `fuzz/corpus/<target>/` through `f`; the corpus must exist
/// and not be empty (it is kept in the repository).
fn replay(target: &str, f: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        f(&std::fs::read(&p).unwrap());
        n += 1;
    }
    assert!(n > 0, "empty seed corpus {}", dir.display());
}

#[test]
fn seed_corpora_replay_cleanly() {
    replay("cqe_ring", fuzz::cqe_ring);
    replay("srq_ring", fuzz::srq_ring);
    replay("eqe", fuzz::eqe);
    replay("cmd_output", fuzz::cmd_output);
    replay("mailbox", fuzz::mailbox);
    replay("sim_cmd", fuzz::sim_cmd);
    replay("send_cqes", fuzz::send_cqes);
    replay("wire_frames", fuzz::wire_frames);
}

/// Fixed regression seeds of every property; each run adds a fresh one
/// (`mlx5_tests::seeds`). A seed replays exactly with this proptest version;
/// the lasting regression for an input a seed found is its minimal input,
/// added to `fuzz/corpus/<target>/` and so replayed above.
const FIXED_SEEDS: [u64; 1] = [1];

/// Property `test`: for each seed, `cases` byte strings shorter than
/// `max_len` from a proptest runner seeded with it, through `f`. A failure
/// is shrunk by proptest and its minimal input printed.
fn property(test: &'static str, max_len: usize, cases: u32, f: fn(&[u8])) {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    Seeded::new(module_path!(), test, &FIXED_SEEDS).run(|seed| {
        let mut runner = TestRunner::new(Config {
            cases,
            failure_persistence: None,
            rng_seed: RngSeed::Fixed(seed),
            ..Config::default()
        });
        let r = runner.run(&vec(any::<u8>(), 0..max_len), |data| {
            f(&data);
            Ok(())
        });
        if let Err(e) = r {
            panic!("{test} seed {seed}: {e}");
        }
    });
}

#[test]
fn cqe_ring() {
    property("cqe_ring", 2048, 256, fuzz::cqe_ring);
}

#[test]
fn srq_ring() {
    property("srq_ring", 1024, 256, fuzz::srq_ring);
}

#[test]
fn eqe() {
    property("eqe", 1024, 256, fuzz::eqe);
}

#[test]
fn cmd_output() {
    property("cmd_output", 4200, 256, fuzz::cmd_output);
}

#[test]
fn mailbox() {
    property("mailbox", 4800, 256, fuzz::mailbox);
}

/// A model bring-up per case: fewer cases.
#[test]
fn sim_cmd() {
    property("sim_cmd", 3000, 48, fuzz::sim_cmd);
}

#[test]
fn send_cqes() {
    property("send_cqes", 2048, 256, fuzz::send_cqes);
}

/// Two modelled hosts per case: fewer cases.
#[test]
fn wire_frames() {
    property("wire_frames", 3000, 16, fuzz::wire_frames);
}
