//! The tool's errors and exit codes. Every error says what went wrong and
//! what to do about it.

use serde_json::{json, Value};

/// Exit code: success.
pub const EXIT_OK: i32 = 0;
/// Exit code: the driver, the firmware or the model reported an error, or
/// the results could not be written to stdout.
pub const EXIT_FAILED: i32 = 1;
/// Exit code: bad command line (unknown opcode or field, an option that does
/// not apply to the device).
pub const EXIT_USAGE: i32 = 2;
/// Exit code: the device could not be opened.
pub const EXIT_NO_DEVICE: i32 = 3;
/// Exit code: the run finished but a check failed (a completion lost, a
/// firmware page not returned, an object left behind, a requested fault
/// that never fired).
pub const EXIT_CHECK: i32 = 4;

/// The exit-code table printed by `--help`.
pub const EXIT_CODES: &str = "Exit codes:
  0  success
  1  the driver, firmware or model reported an error (the message names the
     command, status and syndrome), or stdout could not be written
  2  bad command line (unknown subcommand, opcode, field or device; a
     malformed PCI address; a field given twice; a value out of range; a
     model-only option on real hardware). Nothing was sent
  3  the device could not be opened (the message says what to fix)
  4  the run finished but a check failed (lost completion, page not
     returned, object left behind, a fault option that never fired)";

/// A failure of the tool.
#[derive(Debug)]
pub enum CliError {
    /// Bad command line.
    Usage {
        /// What is wrong.
        what: String,
        /// What to do.
        hint: String,
    },
    /// The device could not be opened.
    NoDevice {
        /// What is wrong (from the platform).
        what: String,
        /// What to do.
        hint: String,
    },
    /// A driver call failed during a step.
    Driver {
        /// The step.
        step: String,
        /// The driver error.
        err: mlx5_driver::Error,
        /// What to do.
        hint: String,
    },
    /// Something else failed (traffic injection, a post).
    Failed {
        /// What is wrong.
        what: String,
        /// What to do.
        hint: String,
    },
    /// A check failed.
    Check {
        /// What is wrong.
        what: String,
    },
    /// A model-only fault option never fired: the run never sent the
    /// command it names (or never reached the Nth command).
    FaultNotFired {
        /// Which options, and why.
        what: String,
    },
    /// Writing the results to stdout failed (`mlx5 demo > /dev/full`).
    Output {
        /// The I/O error.
        what: String,
    },
}

impl CliError {
    /// Usage error.
    pub fn usage(what: impl Into<String>, hint: impl Into<String>) -> Self {
        CliError::Usage {
            what: what.into(),
            hint: hint.into(),
        }
    }

    /// A driver error during `step`, with a hint chosen from the error.
    pub fn driver(step: impl Into<String>, err: mlx5_driver::Error) -> Self {
        use mlx5_driver::Error as E;
        let hint = match err {
            E::Command { .. } | E::Delivery { .. } => {
                "run the same subcommand as `mlx5 trace` to see every command with its decoded input and output"
            }
            E::Timeout { .. } => {
                "firmware did not answer in time; `mlx5 trace` shows the command that hung (on the model: was --stall-opcode given?)"
            }
            E::Fatal { .. } => {
                "the device is dead (health buffer); on hardware reset it (rebind to vfio-pci or reboot) and report the health syndrome; on the model this was injected"
            }
            E::FirmwareInitTimeout { .. } => {
                "firmware never finished initialising; power-cycle the card or check its firmware with mstflint"
            }
            _ => "`mlx5 trace` shows every command up to the failure",
        }
        .to_string();
        CliError::Driver {
            step: step.into(),
            err,
            hint,
        }
    }

    /// Another failure.
    pub fn failed(what: impl Into<String>, hint: impl Into<String>) -> Self {
        CliError::Failed {
            what: what.into(),
            hint: hint.into(),
        }
    }

    /// A failed check.
    pub fn check(what: impl Into<String>) -> Self {
        CliError::Check { what: what.into() }
    }

    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage { .. } => EXIT_USAGE,
            CliError::NoDevice { .. } => EXIT_NO_DEVICE,
            CliError::Driver { .. } | CliError::Failed { .. } | CliError::Output { .. } => {
                EXIT_FAILED
            }
            CliError::Check { .. } | CliError::FaultNotFired { .. } => EXIT_CHECK,
        }
    }

    /// One line: what went wrong.
    pub fn message(&self) -> String {
        match self {
            CliError::Usage { what, .. }
            | CliError::NoDevice { what, .. }
            | CliError::Failed { what, .. } => what.clone(),
            CliError::Driver { step, err, .. } => format!("{step}: {err} (errno {})", err.errno()),
            CliError::Check { what } => format!("check failed: {what}"),
            CliError::FaultNotFired { what } => what.clone(),
            CliError::Output { what } => format!("cannot write the results to stdout: {what}"),
        }
    }

    /// What to do, if anything.
    pub fn hint(&self) -> Option<&str> {
        match self {
            CliError::Usage { hint, .. }
            | CliError::NoDevice { hint, .. }
            | CliError::Failed { hint, .. }
            | CliError::Driver { hint, .. } => Some(hint.as_str()).filter(|h| !h.is_empty()),
            CliError::Check { .. } => Some(
                "this is a driver or model bug; please report it with the output of `mlx5 trace`",
            ),
            CliError::FaultNotFired { .. } => Some(
                "a fault that never fires tests nothing: name a command this run sends (`mlx5 trace` lists them), or an N within its command count",
            ),
            CliError::Output { .. } => Some(
                "free space on the output's device, or send stdout somewhere writable",
            ),
        }
    }

    /// The error as JSON (`{"kind", "message", "hint", ...}`).
    pub fn to_json(&self) -> Value {
        let kind = match self {
            CliError::Usage { .. } => "usage",
            CliError::NoDevice { .. } => "no_device",
            CliError::Driver { .. } => "driver",
            CliError::Failed { .. } => "failed",
            CliError::Check { .. } => "check",
            CliError::FaultNotFired { .. } => "fault_not_fired",
            CliError::Output { .. } => "output",
        };
        let mut v = json!({
            "kind": kind,
            "message": self.message(),
            "hint": self.hint(),
            "exit_code": self.exit_code(),
        });
        if let CliError::Driver { step, err, .. } = self {
            v["step"] = json!(step);
            v["errno"] = json!(err.errno());
            if let Some(op) = err.opcode() {
                v["opcode"] = json!(op.to_string());
                v["opcode_value"] = json!(op.0);
            }
            if let mlx5_driver::Error::Command {
                status, syndrome, ..
            } = err
            {
                v["status"] = json!(status.name().unwrap_or("UNKNOWN"));
                v["status_value"] = json!(status.0);
                v["syndrome"] = json!(format!("{syndrome:#x}"));
            }
        }
        v
    }
}

/// The message, then the hint on its own line when there is one.
impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message())?;
        if let Some(h) = self.hint() {
            write!(f, "\nhint: {h}")?;
        }
        Ok(())
    }
}

impl std::error::Error for CliError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CliError::Driver { err, .. } => Some(err),
            _ => None,
        }
    }
}
