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
//! * `rc_pingpong.rs`: rdma-core's `ibv_rc_pingpong` on the verbs facade,
//!   two hosts on a wire, each on its own thread, exchanging their
//!   addresses out of band (`cargo run --example rc_pingpong`).
//! * `bare-metal/`: a `no_std`, heap-free skeleton on `mlx5-bare-metal`'s
//!   platform, built for `x86_64-unknown-none`
//!   (`cargo build -p mlx5-bare-metal-skeleton --target x86_64-unknown-none`).
