//! Fuzz target `mailbox`: see `mlx5_tests::fuzz::mailbox` (tests/src/fuzz.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mlx5_tests::fuzz::mailbox(data));
