//! Fuzz target `cli_hexdump`: see `mlx5_cli::fuzz::hexdump` (cli/src/fuzz.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mlx5_cli::fuzz::hexdump(data));
