//! Fuzz target `cli_fields`: see `mlx5_cli::fuzz::fields` (cli/src/fuzz.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mlx5_cli::fuzz::fields(data));
