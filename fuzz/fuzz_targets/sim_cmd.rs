//! Fuzz target `sim_cmd`: see `mlx5_tests::fuzz::sim_cmd` (tests/src/fuzz.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mlx5_tests::fuzz::sim_cmd(data));
