//! Per-opcode command statistics and the command trace hook.
//!
//! The statistics mirror Linux's debugfs `commands/<opcode>/` directory
//! (count, failures, last status, total and max latency); they live in a
//! fixed table, no allocation. The trace hook ([`CmdObserver`]) sees every
//! command with its input and output bytes; the CLI prints traces with it.

use mlx5_regs::{CmdStatus, DeliveryStatus, Opcode};

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmdOutcome {
    /// Delivered and executed with status OK.
    Ok,
    /// Executed, non-zero status.
    Status {
        /// Output byte 0.
        status: CmdStatus,
        /// Output bytes 4..8.
        syndrome: u32,
    },
    /// Not delivered.
    Delivery(DeliveryStatus),
    /// Ownership did not come back in time.
    Timeout,
    /// The device died while the command was outstanding.
    Fatal,
}

impl CmdOutcome {
    /// True for [`CmdOutcome::Ok`].
    pub fn is_ok(&self) -> bool {
        matches!(self, CmdOutcome::Ok)
    }
}

/// Statistics of one opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpStats {
    /// The opcode.
    pub opcode: Opcode,
    /// Commands issued.
    pub count: u64,
    /// Commands that did not end with [`CmdOutcome::Ok`].
    pub failures: u64,
    /// Outcome of the latest command.
    pub last: CmdOutcome,
    /// Sum of latencies (post to completion), nanoseconds.
    pub total_ns: u64,
    /// Largest latency, nanoseconds.
    pub max_ns: u64,
}

impl OpStats {
    /// Mean latency in nanoseconds (0 if no command ran).
    pub fn mean_ns(&self) -> u64 {
        self.total_ns.checked_div(self.count).unwrap_or(0)
    }
}

/// Number of distinct opcodes the table tracks; further opcodes are summed
/// in [`CmdStats::untracked`].
pub const STATS_OPCODES: usize = 64;

/// The per-opcode table.
///
/// ```
/// use mlx5_driver::stats::{CmdStats, CmdOutcome};
/// use mlx5_regs::Opcode;
/// let mut s = CmdStats::new();
/// s.record(Opcode::NOP, CmdOutcome::Ok, 1_000);
/// s.record(Opcode::NOP, CmdOutcome::Timeout, 5_000);
/// let nop = s.get(Opcode::NOP).unwrap();
/// assert_eq!((nop.count, nop.failures, nop.max_ns), (2, 1, 5_000));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct CmdStats {
    entries: [Option<OpStats>; STATS_OPCODES],
    /// Commands whose opcode did not fit in the table.
    pub untracked: u64,
    /// The latest command that did not end with [`CmdOutcome::Ok`].
    pub last_failure: Option<CmdFailure>,
}

/// A command that failed: which, and how ([`CmdStats::last_failure`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmdFailure {
    /// The command.
    pub opcode: Opcode,
    /// Its op_mod.
    pub op_mod: u16,
    /// How it ended (never [`CmdOutcome::Ok`]).
    pub outcome: CmdOutcome,
    /// Post to completion (or to giving up), nanoseconds.
    pub latency_ns: u64,
}

impl Default for CmdStats {
    fn default() -> Self {
        Self::new()
    }
}

impl CmdStats {
    /// An empty table.
    pub const fn new() -> Self {
        CmdStats {
            entries: [None; STATS_OPCODES],
            untracked: 0,
            last_failure: None,
        }
    }

    /// Account one command.
    pub fn record(&mut self, opcode: Opcode, outcome: CmdOutcome, latency_ns: u64) {
        let slot = match self
            .entries
            .iter()
            .position(|e| matches!(e, Some(s) if s.opcode == opcode))
        {
            Some(i) => i,
            None => match self.entries.iter().position(|e| e.is_none()) {
                Some(i) => {
                    self.entries[i] = Some(OpStats {
                        opcode,
                        count: 0,
                        failures: 0,
                        last: CmdOutcome::Ok,
                        total_ns: 0,
                        max_ns: 0,
                    });
                    i
                }
                None => {
                    self.untracked += 1;
                    return;
                }
            },
        };
        if let Some(s) = &mut self.entries[slot] {
            s.count += 1;
            if !outcome.is_ok() {
                s.failures += 1;
            }
            s.last = outcome;
            s.total_ns = s.total_ns.saturating_add(latency_ns);
            s.max_ns = s.max_ns.max(latency_ns);
        }
    }

    /// Statistics of one opcode, if it ran.
    pub fn get(&self, opcode: Opcode) -> Option<&OpStats> {
        self.iter().find(|s| s.opcode == opcode)
    }

    /// Every opcode that ran, in first-use order.
    pub fn iter(&self) -> impl Iterator<Item = &OpStats> {
        self.entries.iter().flatten()
    }

    /// Total commands issued.
    pub fn total(&self) -> u64 {
        self.iter().map(|s| s.count).sum::<u64>() + self.untracked
    }
}

/// One finished command, as shown to a [`CmdObserver`].
#[derive(Debug, Clone, Copy)]
pub struct CmdRecord<'a> {
    /// Opcode (input bytes 0..2).
    pub opcode: Opcode,
    /// op_mod (input bytes 6..8).
    pub op_mod: u16,
    /// Command queue slot used.
    pub slot: u8,
    /// Token used.
    pub token: u8,
    /// The whole input.
    pub input: &'a [u8],
    /// The whole output (zeros if the command did not complete).
    pub output: &'a [u8],
    /// How it ended.
    pub outcome: CmdOutcome,
    /// Post-to-completion time in nanoseconds (from the `Hal` clock).
    pub latency_ns: u64,
}

/// A trace hook that sees every command. Called with the command-queue lock
/// held: keep it short and never issue commands from it.
///
/// ```
/// use core::sync::atomic::{AtomicU32, Ordering};
/// use mlx5_driver::stats::{CmdObserver, CmdRecord};
/// struct Count(AtomicU32);
/// impl CmdObserver for Count {
///     fn command(&self, _rec: &CmdRecord<'_>) { self.0.fetch_add(1, Ordering::Relaxed); }
/// }
/// ```
pub trait CmdObserver: Sync {
    /// One command finished (or timed out).
    fn command(&self, rec: &CmdRecord<'_>);
}

/// No tracing.
impl CmdObserver for () {
    fn command(&self, _rec: &CmdRecord<'_>) {}
}

impl<T: CmdObserver + ?Sized> CmdObserver for &T {
    fn command(&self, rec: &CmdRecord<'_>) {
        (**self).command(rec)
    }
}
