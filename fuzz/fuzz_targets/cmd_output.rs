//! Fuzz target `cmd_output`: see `mlx5_tests::fuzz::cmd_output` (tests/src/fuzz.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mlx5_tests::fuzz::cmd_output(data));
