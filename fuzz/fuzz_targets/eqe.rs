//! Fuzz target `eqe`: see `mlx5_tests::fuzz::eqe` (tests/src/fuzz.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mlx5_tests::fuzz::eqe(data));
