//! The fuzz targets of `fuzz/` as proptest properties on stable (issue 10),
//! run by `cargo test --workspace` and so by `.ci/run`. Same harnesses
//! (`mlx5_tests::fuzz`), bounded case counts so the file stays quick; the
//! seed corpus of every target is replayed first.
//!
//! More cases: `PROPTEST_CASES=10000 cargo test -p mlx5-tests --test fuzz_props`.

use std::path::PathBuf;

use mlx5_tests::fuzz;
use proptest::collection::vec;
use proptest::prelude::*;

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
}

fn cases(n: u32) -> ProptestConfig {
    ProptestConfig {
        // PROPTEST_CASES overrides (the default config reads it).
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(n),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn cqe_ring(data in vec(any::<u8>(), 0..2048)) {
        fuzz::cqe_ring(&data);
    }

    #[test]
    fn srq_ring(data in vec(any::<u8>(), 0..1024)) {
        fuzz::srq_ring(&data);
    }

    #[test]
    fn eqe(data in vec(any::<u8>(), 0..1024)) {
        fuzz::eqe(&data);
    }

    #[test]
    fn cmd_output(data in vec(any::<u8>(), 0..4200)) {
        fuzz::cmd_output(&data);
    }

    #[test]
    fn mailbox(data in vec(any::<u8>(), 0..4800)) {
        fuzz::mailbox(&data);
    }
}

proptest! {
    // A model bring-up per case: fewer cases.
    #![proptest_config(cases(48))]

    #[test]
    fn sim_cmd(data in vec(any::<u8>(), 0..3000)) {
        fuzz::sim_cmd(&data);
    }
}
