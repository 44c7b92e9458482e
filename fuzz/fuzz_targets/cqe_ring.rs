//! Fuzz target `cqe_ring`: see `mlx5_tests::fuzz::cqe_ring` (tests/src/fuzz.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mlx5_tests::fuzz::cqe_ring(data));
