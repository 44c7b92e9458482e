//! Fuzz target `send_cqes`: see `mlx5_tests::fuzz::send_cqes` (tests/src/fuzz_send.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mlx5_tests::fuzz::send_cqes(data));
