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
    pub use crate::cq::ring::{CqRing, DoorbellRecord};

    /// CREATE/DESTROY/QUERY/MODIFY/RESIZE_CQ encoders and parsers.
    pub mod cmd {
        pub use crate::cq::cmd::*;
    }
}

/// The send ring, the QP's own receive ring and their constants; the QP
/// commands.
pub mod qp {
    pub use crate::qp::recv::RecvRing;
    pub use crate::qp::ring::SendRing;
    pub use crate::qp::sq_size::{MAX_DS, SQ_OVERHEAD, WQEBB};

    /// CREATE/MODIFY/QUERY/DESTROY_QP encoders and parsers.
    pub mod cmd {
        pub use crate::qp::cmd::*;
    }
}

/// The SRQ's WQE ring and its borrowed completer; the SRQ and RMP
/// commands.
pub mod srq {
    pub use crate::srq::ring::{SrqCompleter, SrqRing};

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
