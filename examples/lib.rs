//! # mlx5-examples
//!
//! Example programs of the mlx5 driver; this library target holds no code.
//!
//! * `dataplane.rs`: a receive/send loop through real queue pairs on the
//!   device model (`cargo run --example dataplane`).
//! * `sleeping_receiver.rs`: the verbs facade's completion channel, a
//!   completion vector, CQ moderation and a receiver that sleeps in
//!   `get_cq_event_on` until the device's interrupt
//!   (`cargo run --example sleeping_receiver`).
//! * `bare-metal/`: a `no_std`, heap-free skeleton on `mlx5-bare-metal`'s
//!   platform, built for `x86_64-unknown-none`
//!   (`cargo build -p mlx5-bare-metal-skeleton --target x86_64-unknown-none`).
