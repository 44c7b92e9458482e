//! Fuzz target `cli_trace`: see `mlx5_cli::fuzz::trace` (cli/src/fuzz.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mlx5_cli::fuzz::trace(data));
