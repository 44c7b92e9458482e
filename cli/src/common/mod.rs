//! What every subcommand shares: errors and exit codes, the report, the
//! device target, the traced session, the command tracer, the saved-trace
//! format and the parsing of numbers and names.

pub mod error;
pub mod interrupts;
pub mod loopback;
pub mod record;
pub mod report;
pub mod session;
pub mod target;
pub mod text;
pub mod trace;
