//! The `mlx5` tool's tests: one integration-test binary (`cargo test -p
//! mlx5-cli`), one module per concern. Most run the built binary
//! (`common::mlx5`) and check its output and exit code; `fuzz` calls the
//! library's fuzz harnesses; `structure` checks the source tree itself.
//!
//! Where a new test goes: with the subcommand it exercises (`decode`,
//! `script` for `run`/`shell`, `replay` for `replay`/`diff`, `selftest`,
//! `devices`, `stats`, `gendoc` for `completions`/`man`, `pingpong`, `demo_qp` for
//! `demo`/`trace`), in `bad_input` or `hostile` for wrong or hostile
//! input, in `cli` for options every subcommand shares.

mod common;

mod bad_input;
mod caps_ibv;
mod cli;
mod decode;
mod demo_qp;
mod devices;
mod discover;
mod docs_more;
mod fuzz;
mod gendoc;
mod hostile;
mod model_opts;
mod peer;
mod pingpong;
mod replay;
mod script;
mod selftest;
mod stats;
mod structure;
