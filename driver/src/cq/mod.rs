//! Completion queues (facts §7, §8).

pub mod cmd;
pub mod ring;

pub use ring::{CqRing, Cqe, CqeSize, CqeStatus, DoorbellRecord, ResizeCopyError};

#[cfg(test)]
mod tests;
