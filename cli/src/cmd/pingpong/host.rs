//! The two modelled hosts of `mlx5 pingpong` are `mlx5_testbed::Host`s
//! (the setup the tests and the benchmark share); this module turns their
//! errors into the tool's.

use mlx5_driver::verbs::Errno;
pub use mlx5_testbed::{Addr, Ctx, Host};
use mlx5_testbed::{Cause, SetupError};

use crate::common::error::CliError;

/// Receive WQEs kept posted on each host; one message is in flight each
/// way at a time, as in rc_pingpong, so a few are plenty.
pub const RECVS: usize = 8;

/// A failed verbs call: the driver's error for the firmware command
/// behind it when there is one, else the errno.
pub fn verbs_error(ctx: &Ctx, step: &str, e: Errno) -> CliError {
    match ctx.last_error() {
        Some(err) => CliError::driver(step, err),
        None => CliError::failed(
            format!("{step}: {e}"),
            "the verbs facade refused the call; docs/verbs.md lists its rules",
        ),
    }
}

/// A failed setup or teardown step of a host.
pub fn setup_error(e: SetupError) -> CliError {
    match e.cause {
        Cause::Verbs {
            driver: Some(d), ..
        }
        | Cause::BringUp(d) => CliError::driver(e.step, d),
        Cause::Verbs { errno, .. } => CliError::failed(
            format!("{}: {errno}", e.step),
            "the verbs facade refused the call; docs/verbs.md lists its rules",
        ),
        Cause::Model(m) if e.step.contains("DMA memory") => CliError::failed(
            format!("{}: {m}", e.step),
            "use a smaller --size, or a larger --dma-limit",
        ),
        Cause::Model(m) => CliError::check(format!("{}: {m}", e.step)),
    }
}
