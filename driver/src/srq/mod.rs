//! Shared receive queues (docs/firmware.md §9).

pub(crate) mod cmd;
mod queue;
pub(crate) mod ring;

pub use queue::{BadRecvCqe, LimitArm, PostFailure, RecvCompletion, RecvRequest, Srq};
pub(crate) use ring::holds;
pub use ring::{CompleteError, CompletedWqe, PostError, Sge, SrqGeometry};

#[cfg(test)]
mod tests;
