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

/// Exit code of `selftest`: every stage passed but the report bundle could
/// not be written.
pub const EXIT_REPORT: i32 = 5;
/// Exit code of `selftest`: stage N failed exits `EXIT_STAGE_BASE + N`
/// (11 bring-up ... 20 teardown).
pub const EXIT_STAGE_BASE: i32 = 10;

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
     returned, object left behind, a fault option that never fired)
  5  selftest: every stage passed but the report file could not be written
  11-20  selftest: stage N failed (exit 10 + N: 11 bring-up, 12 capability
     checks, 13 CQ, 14 SRQ, 15 memory key, 16 QP pair, 17 traffic, 18 SRQ
     limit, 19 CQ resize, 20 teardown)";

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
        /// What to do, when the failure is not a bug (a lossy wire).
        hint: Option<String>,
    },
    /// Two traces (recorded and replayed, or `diff A B`) differ.
    Differ {
        /// How many differences.
        what: String,
    },
    /// An `expect` line of a script did not hold.
    Expect {
        /// The line, and what differed.
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
    /// A self-test stage failed.
    Stage {
        /// Stage number, 1-based.
        n: u8,
        /// Stage name (`qp-pair`).
        name: &'static str,
        /// Why.
        err: Box<CliError>,
        /// What to do: the cause's hint, and the report.
        hint: String,
    },
    /// The self-test report could not be written.
    Report {
        /// The file and the I/O error.
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

    /// Self-test stage `n` (1-based, named `name`) failed with `err`.
    pub fn stage(n: u8, name: &'static str, err: CliError) -> Self {
        CliError::Stage {
            n,
            name,
            hint: err.stage_hint(),
            err: Box::new(err),
        }
    }

    /// What to do when this error ended a self-test stage: its own advice
    /// (the generic "run mlx5 trace" is replaced: the report has the
    /// trace), then the report.
    pub fn stage_hint(&self) -> String {
        let report = "the report file has every command with its status, syndrome and hexdump, the capabilities and the health buffer: attach it to a bug report (docs/hardware.md)";
        match self {
            CliError::Driver {
                err: mlx5_driver::Error::Command { .. },
                ..
            } => report.to_string(),
            e => match e.hint() {
                Some(h) => format!("{h}; {report}"),
                None => report.to_string(),
            },
        }
    }

    /// A failed check.
    pub fn check(what: impl Into<String>) -> Self {
        CliError::Check {
            what: what.into(),
            hint: None,
        }
    }

    /// A failed check with its own hint (the failure is not a bug).
    pub fn check_with(what: impl Into<String>, hint: impl Into<String>) -> Self {
        CliError::Check {
            what: what.into(),
            hint: Some(hint.into()),
        }
    }

    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage { .. } => EXIT_USAGE,
            CliError::NoDevice { .. } => EXIT_NO_DEVICE,
            CliError::Driver { .. } | CliError::Failed { .. } | CliError::Output { .. } => {
                EXIT_FAILED
            }
            CliError::Check { .. }
            | CliError::Differ { .. }
            | CliError::Expect { .. }
            | CliError::FaultNotFired { .. } => EXIT_CHECK,
            CliError::Stage { n, .. } => EXIT_STAGE_BASE + *n as i32,
            CliError::Report { .. } => EXIT_REPORT,
        }
    }

    /// One line: what went wrong.
    pub fn message(&self) -> String {
        match self {
            CliError::Usage { what, .. }
            | CliError::NoDevice { what, .. }
            | CliError::Failed { what, .. } => what.clone(),
            CliError::Driver { step, err, .. } => {
                format!("{step}: {} (errno {})", driver_text(err), err.errno())
            }
            CliError::Check { what, .. } => format!("check failed: {what}"),
            CliError::FaultNotFired { what } => what.clone(),
            CliError::Expect { what } => format!("expect failed: {what}"),
            CliError::Differ { what } => what.clone(),
            CliError::Output { what } => format!("cannot write the results to stdout: {what}"),
            CliError::Stage { n, name, err, .. } => {
                format!("stage {n} ({name}) failed: {}", err.message())
            }
            CliError::Report { what } => format!("cannot write the report: {what}"),
        }
    }

    /// What to do, if anything.
    pub fn hint(&self) -> Option<&str> {
        match self {
            CliError::Usage { hint, .. }
            | CliError::NoDevice { hint, .. }
            | CliError::Failed { hint, .. }
            | CliError::Driver { hint, .. } => Some(hint.as_str()).filter(|h| !h.is_empty()),
            CliError::Check { hint, .. } => Some(hint.as_deref().unwrap_or(
                "this is a driver or model bug; please report it with the output of `mlx5 trace`",
            )),
            CliError::Differ { .. } => Some(
                "each difference is listed (--json: differences[]); object numbers remapped one to one, addresses, device identity (GUIDs, MAC) and timings are not compared",
            ),
            CliError::Expect { .. } => Some(
                "the device answered otherwise than the script expects: the statements before the line show status, syndrome and output (--json: statements[])",
            ),
            CliError::FaultNotFired { .. } => Some(
                "a fault that never fires tests nothing: name a command this run sends (`mlx5 trace` lists them), or an N within its command count",
            ),
            CliError::Output { .. } => Some(
                "free space on the output's device, or send stdout somewhere writable",
            ),
            CliError::Stage { hint, .. } => Some(hint.as_str()),
            CliError::Report { .. } => Some(
                "choose a writable place with --report FILE; the table above has the results",
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
            CliError::Expect { .. } => "expect",
            CliError::Differ { .. } => "differ",
            CliError::Output { .. } => "output",
            CliError::Stage { err, .. } => return self.stage_json(err),
            CliError::Report { .. } => "report",
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

    /// A failed stage as JSON: the cause's fields (kind, opcode, status,
    /// syndrome, ...) with the stage and the stage's exit code.
    fn stage_json(&self, err: &CliError) -> Value {
        let mut v = err.to_json();
        if let CliError::Stage { n, name, .. } = self {
            v["stage"] = json!(n);
            v["stage_name"] = json!(name);
        }
        v["message"] = json!(self.message());
        v["hint"] = json!(self.hint());
        v["exit_code"] = json!(self.exit_code());
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

/// The longest piece of the user's input an error message quotes.
pub const QUOTE_MAX: usize = 64;

/// `s` for quoting in a message: whole when short, else its first
/// [`QUOTE_MAX`] characters and how long it was (an error must not echo a
/// multi-megabyte token back).
pub fn quote(s: &str) -> String {
    match s.char_indices().nth(QUOTE_MAX) {
        None => s.to_string(),
        Some((cut, _)) => format!("{}... ({} bytes)", &s[..cut], s.len()),
    }
}

/// A driver error in words. The driver's own text, except where it names a
/// Rust value (the fatal reason): that part is said in words here.
pub fn driver_text(err: &mlx5_driver::Error) -> String {
    use mlx5_driver::FatalReason as R;
    match err {
        mlx5_driver::Error::Fatal {
            health_syndrome,
            ext_syndrome,
            reason,
        } => {
            let why = match reason {
                R::PciDead => "the device is gone from PCI (health buffer reads all ones)",
                R::NicDisabled => "the NIC interface reads DISABLED",
                R::SwReset => "the NIC interface reads SW_RESET",
                R::Syndrome => "the health buffer reports a failure",
                R::HeartbeatStopped => "the firmware heartbeat stopped",
                _ => "the health check reports the device dead",
            };
            let name = mlx5_regs::consts::health_syndrome_name(*health_syndrome)
                .map(|n| format!(" ({n})"))
                .unwrap_or_default();
            format!(
                "device fatal: {why}: health syndrome {health_syndrome:#04x}{name}, ext syndrome {ext_syndrome:#06x}"
            )
        }
        e => e.to_string(),
    }
}

/// A protocol violation the model saw, in words (not its Rust form).
pub fn violation_text(v: &mlx5_sim::Violation) -> String {
    use mlx5_sim::Violation as V;
    match v {
        V::Doorbell(w) => format!("command doorbell ignored: {w}"),
        V::UarDoorbell(w) => format!("UAR doorbell ignored: {w}"),
        V::PageScribbled { iova, offset } => {
            format!("firmware page {iova:#x} modified by the host (byte {offset})")
        }
        V::EqOverrun { eqn } => format!("EQ {eqn} overran"),
        V::CqOverrun { cqn } => format!("CQ {cqn:#x} overran"),
        V::EventDropped { event_type } => {
            format!("event type {event_type:#x} dropped: no EQ subscribes to it")
        }
        V::FreedWhileInUse(w) => format!("DMA memory freed while in use: {w}"),
        V::SendQueue(w) => format!("send queue not executable: {w}"),
        other => format!("{other:?}"),
    }
}
