//! Completion queues (docs/firmware.md §7, §8).

mod arm;
pub(crate) mod cmd;
mod moderation;
mod queue;
pub(crate) mod ring;
mod syndrome;

pub(crate) use arm::ArmTable;
pub use moderation::{CqModeration, CqPeriodMode, MAX_CQ_PERIOD};
pub use queue::{Cq, CqOptions};
pub(crate) use ring::{CqReader, CqeView, WaitingCqe};
pub use ring::{Cqe, CqeSize, CqeStatus, ResizeCopyError};
pub use syndrome::{CqErrorCause, CqeError};

#[cfg(test)]
mod graph_tests;
#[cfg(test)]
mod tests;
