//! The CLI's fuzz targets (`fuzz/fuzz_targets/cli_*.rs`) as proptest
//! properties on stable, run by `cargo test`: the same harnesses
//! (`mlx5_cli::fuzz`), the seed corpus of every target replayed first, then
//! random bytes and random sequences of the tokens the parsers look for
//! (random bytes alone rarely get past the first token).
//!
//! Each property runs a fixed seed and a fresh one per run, printed when it
//! fails; `MLX5_FUZZ_SEED=N` replays one, `PROPTEST_CASES=N` runs more
//! cases per seed.

use std::path::PathBuf;

use mlx5_cli::fuzz;
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
    replay("cli_hexdump", fuzz::hexdump);
    replay("cli_script", fuzz::script);
    replay("cli_trace", fuzz::trace);
    replay("cli_fields", fuzz::fields);
}

/// The seeds of a property: `MLX5_FUZZ_SEED` alone when set, else seed 1
/// and one from the clock.
fn seeds() -> Vec<u64> {
    if let Some(s) = std::env::var("MLX5_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return vec![s];
    }
    let fresh = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(2, |d| d.as_nanos() as u64);
    vec![1, fresh]
}

fn run_property<S: Strategy>(test: &str, strategy: S, cases: u32, f: impl Fn(S::Value))
where
    S::Value: std::fmt::Debug,
{
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    for seed in seeds() {
        let mut runner = TestRunner::new(Config {
            cases,
            failure_persistence: None,
            rng_seed: RngSeed::Fixed(seed),
            ..Config::default()
        });
        let r = runner.run(&strategy, |v| {
            f(v);
            Ok(())
        });
        if let Err(e) = r {
            panic!(
                "{test} seed {seed}: {e}\nreplay: MLX5_FUZZ_SEED={seed} cargo test -p mlx5-cli -- fuzz::{test}"
            );
        }
    }
}

/// Byte strings shorter than `max_len`: random bytes, or a random sequence
/// of `tokens`.
fn inputs(tokens: &'static [&'static str], max_len: usize) -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        vec(any::<u8>(), 0..max_len),
        vec(proptest::sample::select(tokens), 0..max_len / 4).prop_map(|t| t.concat().into_bytes()),
    ]
    .boxed()
}

const HEX_TOKENS: &[&str] = &[
    "cmd[0]: ",
    "000: ",
    "010: ",
    "ffffffff: ",
    "ffffffffffffffff: ",
    "00000030: ",
    "fffff: ",
    "00 ",
    "ff ",
    "0a ",
    "deadbeef ",
    "04000000 ",
    "0x04, ",
    "[  12.5] mlx5_core 0000:03:00.0: ",
    "<7>",
    "dump command data CREATE_CQ(0x400) INPUT\n",
    "dump command data QUERY_HCA_CAP(0x100) OUTPUT\n",
    "dump command data X(0xffff) OUTPUT\n",
    "  ....\n",
    "\n",
    " ",
    "zz",
    "0",
];

const SCRIPT_TOKENS: &[&str] = &[
    "queues",
    "pair",
    "post",
    "post-recv",
    "send",
    "poll",
    "resize",
    "arm",
    "events",
    "destroy",
    "create-cq",
    "query-cq",
    "nop",
    "raw",
    "expect",
    "let",
    " x = ",
    " n=",
    " len=",
    " wr=",
    " cq=",
    " inline=",
    " limit=",
    " out=",
    " status=",
    " syndrome!=",
    " cq_context.log_cq_size=",
    " pas[",
    "]=",
    "18446744073709551615",
    "4294967296",
    "0x",
    "1",
    "$x",
    "$x.cqn",
    " 080d0000",
    " 00000000",
    " #",
    "\n",
    " ",
];

const FIELD_TOKENS: &[&str] = &[
    "create-cq\n",
    "query-hca-cap\n",
    "access-reg\n",
    "create-qp\n",
    "0x400\n",
    "op_mod=",
    "cq_context.",
    "log_cq_size=",
    "pas[",
    "]",
    "=",
    "register_id=",
    "register_data=",
    "qpc.",
    "0x",
    "ff",
    "4294967296",
    "18446744073709551615",
    "1",
    "true",
    "max",
    "roce.cur",
    "\n",
    ".",
    "[",
];

const TRACE_HEAD: &str = "{\"format\":\"mlx5-trace\",\"version\":1,\"device\":\"sim\"}\n";

/// Trace lines with random numbers in the fields a reader narrows.
fn trace_inputs() -> BoxedStrategy<Vec<u8>> {
    let line = (
        any::<u32>(),
        any::<u32>(),
        any::<u16>(),
        0u8..3,
        vec(any::<u8>(), 0..48),
        vec(any::<u8>(), 0..48),
    )
        .prop_map(|(op, op_mod, status, phase, input, output)| {
            let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
            format!(
                "{{\"seq\":1,\"phase\":\"{}\",\"opcode_value\":{},\"op_mod\":{},\"input\":\"{}\",\"output\":\"{}\",\"result\":\"status\",\"status_value\":{},\"syndrome\":\"0x1\"}}\n",
                ["bring-up", "run", "teardown"][phase as usize],
                op % 0x1_0100,
                op_mod % 0x1_0010,
                hex(&input),
                hex(&output),
                status % 0x110,
            )
        });
    prop_oneof![
        vec(any::<u8>(), 0..2048),
        vec(line, 0..12).prop_map(|ls| (TRACE_HEAD.to_string() + &ls.concat()).into_bytes()),
    ]
    .boxed()
}

#[test]
fn hexdump() {
    run_property("hexdump", inputs(HEX_TOKENS, 512), 256, |d| {
        fuzz::hexdump(&d)
    });
}

#[test]
fn script() {
    run_property("script", inputs(SCRIPT_TOKENS, 256), 256, |d| {
        fuzz::script(&d)
    });
}

#[test]
fn trace() {
    run_property("trace", trace_inputs(), 128, |d| fuzz::trace(&d));
}

#[test]
fn fields() {
    run_property("fields", inputs(FIELD_TOKENS, 256), 256, |d| {
        fuzz::fields(&d)
    });
}
