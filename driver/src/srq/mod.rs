//! Shared receive queues (facts §9).

pub mod cmd;
pub mod ring;

pub use ring::{CompleteError, PostError, Sge, SrqGeometry, SrqRing};

#[cfg(test)]
mod tests;
