//! Fuzz target `cli_script`: see `mlx5_cli::fuzz::script` (cli/src/fuzz.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mlx5_cli::fuzz::script(data));
