//! Completion queues (facts §7, §8).

pub mod cmd;
mod queue;
pub mod ring;

pub use queue::{Cq, CqOptions};
pub use ring::{CqRing, Cqe, CqeSize, CqeStatus, DoorbellRecord, ResizeCopyError};

#[cfg(test)]
mod tests;
