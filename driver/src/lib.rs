//! # mlx5-driver
//!
//! Register-level, `no_std`, heap-free driver core for ConnectX (mlx5) NICs.
//! It talks to hardware only through [`mlx5_hal::Hal`] and describes every
//! firmware structure with [`mlx5_regs`].
//!
//! * [`cmd`]: the command queue transport (slots, tokens, mailbox chains,
//!   the reserved MANAGE_PAGES slot); one small encoder/parser per
//!   command sits beside it, independent of the transport.
//! * [`hca`]: [`Hca::bring_up`] / [`Hca::teardown`], the bounded command
//!   wait ([`Hca::exec`]) that checks health and serves page requests while
//!   it waits, event polling, the RDMA resources of bring-up.
//! * [`pages`]: the firmware page manager. [`eq`]: polled event queues and
//!   typed events. [`caps`]: typed capabilities. [`health`]: the health
//!   buffer. [`stats`]: per-opcode statistics and the trace hook.
//!   [`error`]: typed errors with errno mapping.
//! * [`cq`]: completion queues (ring, poll, arm, resize copy, commands);
//!   [`srq`]: shared receive queues (WQE ring, free list, RMP/SRQ commands);
//!   [`qp`]: RC queue pairs (send ring, WQEs, doorbell, requester
//!   completions, the state machine and its commands); [`mkey`]: memory
//!   keys (the DMA key of bring-up); [`loopback`]: how this function's QPs
//!   reach each other (force loopback, RoCE, IB), chosen at bring-up;
//!   [`pagelist`]: page lists for firmware contexts.
//!
//! ```
//! use mlx5_driver::cq::{CqOptions, Cqe};
//! use mlx5_driver::{Hca, HcaConfig};
//! use mlx5_sim::{Device, SimConfig};
//!
//! // Any platform: the device model here, `mlx5-vfio` on Linux,
//! // `mlx5-bare-metal` without an operating system.
//! let dev = Device::new(SimConfig::default());
//! let hca = Hca::bring_up(dev.hal(), HcaConfig::default())?;
//! assert!(hca.pages_held_by_firmware() > 0);
//! let mut cq = hca.create_cq(63, CqOptions::default())?;
//! let mut done = [Cqe::EMPTY; 16];
//! assert_eq!(cq.poll(&mut done), 0, "nothing completed yet");
//! hca.destroy_cq(cq)?;
//! hca.teardown()?;
//! assert_eq!(dev.pages_held(), 0, "firmware gave every page back");
//! # Ok::<(), mlx5_driver::Error>(())
//! ```
//!
//! Build for bare metal: `cargo build -p mlx5-driver --target x86_64-unknown-none`.
//!
//! ## Which API
//!
//! Two supported levels; pick one per program.
//!
//! * [`verbs::Verbs`]: libibverbs on mlx5, without a kernel. Handles into
//!   fixed-capacity tables (no heap), [`verbs::Errno`] values with the
//!   errno rdma-core's mlx5 provider returns, async events and completion
//!   channels; [`verbs::Verbs::poll_cq`] and the lazy extended-CQ loop
//!   ([`verbs::Verbs::start_poll`]) consume completions through one step.
//!   A refusal by firmware keeps its cause ([`verbs::Verbs::last_error`]).
//!   For applications written against verbs.
//! * [`Hca`] with owned [`cq::Cq`], [`srq::Srq`] and [`qp::Qp`]: objects
//!   the caller holds and lends (`&mut`), caller-owned storage (the QP's
//!   send table), typed errors ([`Error`] names opcode, status and
//!   syndrome), [`Hca::exec`] for any raw command. For heap-free embedders
//!   that want no table lookups: unikernels, appliances, dataplanes.
//!
//! The rings (CQ, SRQ, send, receive) and the per-object command encoders
//! under both are internal to the crate. The project's benchmarks, tests
//! and CLI reach them through one door, the hidden `unstable` module: not a
//! supported API, no semver promise, changed without notice (the
//! benchmarks use it to time each layer against a raw baseline,
//! `docs/perf.md`).
//!
//! ## Features
//!
//! Both off by default; both keep the crate `no_std` and heap-free.
//!
//! * `log`: diagnostics through the [`log`](https://docs.rs/log) facade
//!   (target `mlx5`): bring-up steps and their results (info), page
//!   requests (debug), commands firmware refused or never answered (warn,
//!   with opcode, status and syndrome), pages that could not be given
//!   (warn), a dead device and failed bring-ups or teardowns (error).
//! * `defmt`: the same messages through [`defmt`](https://docs.rs/defmt),
//!   for targets that log over a debug probe.
#![no_std]
#![deny(missing_docs)]
#![cfg_attr(not(test), forbid(unsafe_code))]

pub mod caps;
pub mod cmd;
pub mod cq;
mod diag;
pub mod eq;
pub mod error;
pub mod gid;
pub mod hca;
pub mod health;
pub mod loopback;
pub mod mkey;
pub mod pagelist;
pub mod pages;
pub mod port;
pub mod qp;
pub mod srq;
pub mod stats;
#[doc(hidden)]
pub mod unstable;
pub mod verbs;

#[cfg(test)]
mod testhal;

pub use caps::{AtomicCaps, Caps};
pub use eq::Event;
pub use error::{DestroyError, Error, FatalReason};
pub use hca::{FwVersion, Hca, HcaConfig, PollReport, TeardownReport, MAX_COMP_VECTORS};
pub use stats::{CmdObserver, CmdOutcome, CmdRecord, CmdStats, OpStats};
