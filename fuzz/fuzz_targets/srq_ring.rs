//! Fuzz target `srq_ring`: see `mlx5_tests::fuzz::srq_ring` (tests/src/fuzz.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mlx5_tests::fuzz::srq_ring(data));
