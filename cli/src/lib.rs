//! # mlx5-cli
//!
//! The `mlx5` command-line tool of the mlx5 driver (see `docs/cli.md`).
//! The binary is [`main`]; the library holds the tool's code, grouped:
//!
//! - `common`: what every subcommand shares: errors and exit codes, the
//!   report, the device target, the traced session (bring-up, teardown),
//!   the command tracer and the saved-trace format;
//! - `regs`: commands built and read by field name (discovery, field
//!   assignments, what the tool fills in);
//! - `scenario`: the narrated mission on the device model or a card
//!   (CQs, SRQ, QP pair, traffic, SRQ limit, CQ resize);
//! - `cmd`: one module per subcommand (`demo`, `selftest`, `caps`, `cmd`,
//!   `run`/`shell`, `decode`, `devices`, `trace`, `stats`, `replay`/`diff`,
//!   `completions`/`man`);
//! - `app`: the command line and the dispatch to the subcommands.
//!
//! Groups depend downwards only (`app` → `cmd` → `scenario` → `regs` →
//! `common`); a test checks the module graph has no cycle. [`fuzz`] holds
//! the entry points of the CLI's fuzz targets (`fuzz/fuzz_targets/`).
//!
//! The workspace README's code examples are compiled here as doc tests, so
//! the README's library example keeps building against the real API.

/// `println!` to stdout that ends the process quietly when stdout is
/// closed (`mlx5 trace | head`).
macro_rules! outln {
    () => { $crate::common::report::emit("\n") };
    ($($t:tt)*) => { $crate::common::report::emit(&format!("{}\n", format_args!($($t)*))) };
}

/// `print!` counterpart of [`outln!`].
macro_rules! outp {
    ($($t:tt)*) => { $crate::common::report::emit(&format!($($t)*)) };
}

mod app;
mod cmd;
mod common;
pub mod fuzz;
mod regs;
mod scenario;

pub use app::main;

#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
