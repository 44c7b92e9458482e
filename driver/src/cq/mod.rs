//! Completion queues (docs/firmware.md §7, §8).

mod arm;
pub mod cmd;
mod queue;
pub mod ring;
mod syndrome;

pub(crate) use arm::ArmTable;
pub use queue::{Cq, CqOptions};
pub use ring::{CqRing, Cqe, CqeSize, CqeStatus, DoorbellRecord, ResizeCopyError};
pub use syndrome::CqeError;

#[cfg(test)]
mod tests;
