//! Modelled hosts on a wire, driven through the verbs facade.
//!
//! A [`Host`] is one machine of a two-host setup: a model [`Device`](mlx5_sim::Device) joined
//! to a [`Wire`](mlx5_sim::wire::Wire), its own driver and verbs context, a send CQ, a receive
//! CQ, an RC QP receiving on its own receive queue or on an SRQ
//! ([`RecvQueue`]), and one registered buffer. It learns its own address
//! the way a program on a real host learns it (`query_port`,
//! `query_gid_table`, `add_gid` for an IPv4 address), hands an [`Addr`] to
//! its peer out of band, and connects to the peer's (rdma-core
//! `libibverbs/examples/rc_pingpong.c` has the same shape).
//!
//! `mlx5 pingpong`, the driver-against-model tests and the two-host
//! benchmark share this one setup. The crate is `std` (the model is);
//! errors are values ([`SetupError`]) so a tool can report them and a test
//! can unwrap them.

#![forbid(unsafe_code)]

mod host;

pub use host::{Addr, ConnectOpts, Ctx, Host, HostSpec};

use mlx5_driver::verbs::Errno;
use mlx5_sim::wire::LinkType;

/// How the hosts reach each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// RoCE v2 over IPv4: each side adds an IPv4-mapped GID
    /// (`::ffff:198.18.0.N`) and names the peer's MAC.
    RoceV2Ipv4,
    /// RoCE v2 over IPv6: the port's default link-local RoCE v2 GIDs; the
    /// peer's MAC derives from its link-local GID.
    RoceV2Ipv6,
    /// RoCE v1 (Ethernet type 0x8915): the default link-local RoCE v1
    /// GIDs, the peer's MAC named.
    RoceV1,
    /// Native InfiniBand, addressed by LID.
    IbLid,
    /// Native InfiniBand with a GRH (the peer's LID and port GID).
    IbGrh,
}

/// Every transport.
pub const TRANSPORTS: [Transport; 5] = [
    Transport::RoceV2Ipv4,
    Transport::RoceV2Ipv6,
    Transport::RoceV1,
    Transport::IbLid,
    Transport::IbGrh,
];

impl Transport {
    /// A native InfiniBand transport.
    pub fn ib(self) -> bool {
        matches!(self, Transport::IbLid | Transport::IbGrh)
    }

    /// The wire's link type for it.
    pub fn link_type(self) -> LinkType {
        if self.ib() {
            LinkType::Infiniband
        } else {
            LinkType::Ethernet
        }
    }

    /// What it is, in words.
    pub fn describe(self) -> &'static str {
        match self {
            Transport::RoceV2Ipv4 => "RoCE v2 over IPv4",
            Transport::RoceV2Ipv6 => "RoCE v2 over IPv6",
            Transport::RoceV1 => "RoCE v1",
            Transport::IbLid => "InfiniBand by LID",
            Transport::IbGrh => "InfiniBand with a GRH",
        }
    }
}

/// Where a host's QP takes its receive WQEs from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecvQueue {
    /// The QP's own receive queue (`max_recv_wr` > 0, `ibv_post_recv`).
    Own,
    /// A shared receive queue (`ibv_post_srq_recv`).
    Srq,
}

/// Why setting a host up (or tearing it down) failed: the step, and what
/// refused it.
#[derive(Debug, Clone)]
pub struct SetupError {
    /// The step, e.g. `host 1: create_qp`.
    pub step: String,
    /// What refused it.
    pub cause: Cause,
}

/// What refused a step.
#[derive(Debug, Clone)]
pub enum Cause {
    /// A verbs call: its errno, and the driver's error of the firmware
    /// command behind it when there was one.
    Verbs {
        /// The errno.
        errno: Errno,
        /// The driver's error (opcode, status, syndrome) when a command
        /// failed.
        driver: Option<mlx5_driver::Error>,
    },
    /// Bring-up of the device.
    BringUp(mlx5_driver::Error),
    /// The model (joining the wire, DMA memory) or its state after
    /// teardown.
    Model(String),
}

impl core::fmt::Display for SetupError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match &self.cause {
            Cause::Verbs {
                driver: Some(d), ..
            } => write!(f, "{}: {d}", self.step),
            Cause::Verbs { errno, .. } => write!(f, "{}: {errno}", self.step),
            Cause::BringUp(e) => write!(f, "{}: {e}", self.step),
            Cause::Model(m) => write!(f, "{}: {m}", self.step),
        }
    }
}

impl std::error::Error for SetupError {}
