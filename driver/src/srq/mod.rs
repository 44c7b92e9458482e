//! Shared receive queues (docs/firmware.md §9).

pub mod cmd;
mod queue;
pub mod ring;

pub use queue::{BadRecvCqe, LimitArm, PostFailure, RecvCompletion, RecvRequest, Srq};
pub(crate) use ring::holds;
pub use ring::{CompleteError, CompletedWqe, PostError, Sge, SrqCompleter, SrqGeometry, SrqRing};

#[cfg(test)]
mod tests;
