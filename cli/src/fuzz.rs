//! Fuzz harnesses of the CLI's parsers: one function per target, taking
//! arbitrary bytes. The cargo-fuzz targets in `fuzz/fuzz_targets/cli_*.rs`
//! and the stable proptest properties in `cli/tests/all/fuzz.rs` (part of
//! `cargo test`) call the same functions, so a crash found by either
//! reproduces in both (the pattern of `mlx5_tests::fuzz`).
//!
//! Every harness plays a hostile user: the bytes are a hexdump, a script, a
//! saved trace or a command's field assignments. Each must end in a value
//! or an error (the tool's `CliError`) with a short message,
//! never a panic, and allocate only what a stated bound allows. A harness
//! panics only when one of the invariants it checks fails (or the code
//! under test panics).

use crate::cmd::decode::{self, hexparse, Kind};
use crate::common::error::{CliError, QUOTE_MAX};

/// The longest error message the harnesses accept: a message quotes at
/// most [`QUOTE_MAX`] characters of the input, once or twice, plus its own
/// words.
const MAX_MESSAGE: usize = 8 * QUOTE_MAX + 512;

fn check_error(e: &CliError, what: &str) {
    let m = e.message();
    assert!(
        m.len() <= MAX_MESSAGE,
        "{what}: a {}-byte error message: {}...",
        m.len(),
        &m[..m.char_indices().nth(200).map_or(m.len(), |(i, _)| i)]
    );
    assert!(!m.is_empty(), "{what}: an empty error message");
}

/// Target `cli_hexdump`: the bytes as a hexdump (`mlx5 decode`), read as
/// each kind. Invariants: no buffer past the stated bound (1 MiB), errors
/// short.
pub fn hexdump(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    match hexparse::parse(&text) {
        Ok(bufs) => {
            for b in &bufs {
                assert!(b.bytes.len() <= hexparse::MAX_BUFFER, "{}", b.bytes.len());
            }
        }
        Err(e) => check_error(&e, "hexparse"),
    }
    // The first byte picks how the dump is read, as `--as` would.
    let kinds = [
        None,
        Some(Kind::In),
        Some(Kind::Out),
        Some(Kind::Cqe),
        Some(Kind::Eqe),
        Some(Kind::Qpc),
    ];
    let kind = kinds[data.first().map_or(0, |b| *b as usize % kinds.len())];
    let opts = decode::Opts {
        file: "-",
        kind,
        opcode: None,
        op_mod: data.get(1).map(|b| u16::from(*b)),
        all_fields: data.get(2).is_some_and(|b| b & 1 == 1),
        json: true,
    };
    if let Err(e) = decode::decode_text(&text, &opts) {
        check_error(&e, "decode");
    }
}

/// Target `cli_script`: the bytes as a `mlx5 run` script, checked as
/// `run` checks it before opening the device. Invariant: errors short.
pub fn script(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Err(e) = crate::cmd::run::parse::parse(&text) {
        check_error(&e, "script");
    }
}

/// Target `cli_trace`: the bytes as a saved trace (`mlx5 replay`, `mlx5
/// diff`), and, when it reads, diffed against itself. Invariants: errors
/// short; a trace has no difference with itself.
pub fn trace(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    match crate::common::record::parse(&text, "fuzz.trace") {
        Ok((_, recs)) => {
            let d = crate::cmd::replay::differences(&recs, &recs);
            assert!(d.is_empty(), "a trace differs from itself: {}", d[0].text());
        }
        Err(e) => check_error(&e, "trace"),
    }
}

/// Target `cli_fields`: the bytes as `mlx5 cmd NAME field=value ...` (the
/// first line the command name, each further line an assignment), built as
/// `cmd` builds it before opening the device. Invariant: errors short.
pub fn fields(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.lines();
    let name = lines.next().unwrap_or_default();
    let fields: Vec<String> = lines.map(String::from).collect();
    if let Err(e) = crate::cmd::command::check(name, &fields) {
        check_error(&e, "fields");
    }
}
