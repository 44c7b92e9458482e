//! The layer under the two supported APIs, for the project's benchmarks,
//! tests and CLI: the rings (CQ, SRQ, the QP's send and receive queues) and
//! the per-object command encoders and parsers.
//!
//! **Not a supported API.** Nothing here follows semantic versioning; names
//! and signatures change with the driver's internals. A program uses
//! [`crate::verbs::Verbs`] or [`crate::Hca`] with its owned objects (see
//! "Which API" on the crate page). The benchmarks reach in here only to
//! time each layer against a raw baseline (`docs/perf.md`).
//!
//! The supported modules do not reach the internals; these fail to build:
//!
//! ```compile_fail
//! use mlx5_driver::cq::CqRing;
//! ```
//! ```compile_fail
//! use mlx5_driver::qp::cmd;
//! ```
//! ```compile_fail
//! use mlx5_driver::cmd::encode;
//! ```

/// The command encoders and parsers of bring-up, pages, EQs and the
/// general commands (one `fn` per command, independent of the transport).
pub mod encode {
    pub use crate::cmd::encode::*;
}

/// The CQ ring and its doorbell record; the CQ commands.
pub mod cq {
    use mlx5_hal::Hal;

    pub use crate::cq::ring::{CqRing, DoorbellRecord};

    /// The ring under a supported [`crate::cq::Cq`] (geometry and memory,
    /// for tools and benchmarks that play the device).
    pub fn ring<H: Hal>(cq: &crate::cq::Cq<H>) -> &CqRing<H> {
        cq.ring()
    }

    /// CREATE/DESTROY/QUERY/MODIFY/RESIZE_CQ encoders and parsers.
    pub mod cmd {
        pub use crate::cq::cmd::*;
    }
}

/// The send ring, the QP's own receive ring and their constants; the QP
/// commands.
pub mod qp {
    use mlx5_hal::Hal;

    use crate::qp::{Qp, SendSlot};

    pub use crate::qp::recv::RecvRing;
    pub use crate::qp::ring::SendRing;
    pub use crate::qp::sq_size::{MAX_DS, SQ_OVERHEAD, WQEBB};

    /// The send ring under a supported [`crate::qp::Qp`], if it has one
    /// (for tests and tools that inspect WQEs).
    pub fn send_ring<H: Hal, T: AsMut<[SendSlot]>>(qp: &Qp<H, T>) -> Option<&SendRing<H>> {
        qp.send_ring()
    }

    /// The QP's own receive ring, if it has one (for tests and tools that
    /// inspect it).
    pub fn recv_ring<H: Hal, T: AsMut<[SendSlot]>>(qp: &Qp<H, T>) -> Option<&RecvRing<H>> {
        qp.recv_ring()
    }

    /// CREATE/MODIFY/QUERY/DESTROY_QP encoders and parsers.
    pub mod cmd {
        pub use crate::qp::cmd::*;
    }
}

/// The SRQ's WQE ring and its borrowed completer; the SRQ and RMP
/// commands.
pub mod srq {
    use mlx5_hal::Hal;

    pub use crate::srq::ring::{SrqCompleter, SrqRing};

    /// The WQE ring under a supported [`crate::srq::Srq`] (geometry,
    /// doorbell record address, posted work).
    pub fn ring<H: Hal>(srq: &crate::srq::Srq<H>) -> &SrqRing<H> {
        srq.ring()
    }

    /// CREATE/DESTROY/QUERY/ARM of SRQs and RMPs, encoders and parsers.
    pub mod cmd {
        pub use crate::srq::cmd::*;
    }
}

/// CREATE/DESTROY_MKEY, ALLOC/DEALLOC_PD, the transport domain:
/// encoders and parsers.
pub mod mkey_cmd {
    pub use crate::mkey::cmd::*;
}

/// The vport, RoCE-address and loopback commands: encoders and parsers.
pub mod loopback_cmd {
    pub use crate::loopback::cmd::*;
}
