//! # mlx5-examples
//!
//! Example programs of the mlx5 driver; this library target holds no code.
//!
//! * `dataplane.rs`: a receive/send loop through real queue pairs on the
//!   device model (`cargo run --example dataplane`).
//! * `bare-metal/`: a `no_std`, heap-free skeleton on `mlx5-bare-metal`'s
//!   platform, built for `x86_64-unknown-none`
//!   (`cargo build -p mlx5-bare-metal-skeleton --target x86_64-unknown-none`).
