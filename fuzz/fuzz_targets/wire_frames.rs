//! Fuzz target `wire_frames`: see `mlx5_tests::fuzz::wire_frames` (tests/src/fuzz_send.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mlx5_tests::fuzz::wire_frames(data));
