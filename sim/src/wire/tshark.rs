//! Decode a capture with tshark (Wireshark's command-line decoder), an
//! independent check of what the codec writes: each frame's fields as
//! tshark's `-T fields` prints them.
//!
//! Wireshark 4.0 (Debian 12) has an InfiniBand dissector but does not map
//! `LINKTYPE_INFINIBAND` (247) to it ("network type 247 unknown"), so an
//! InfiniBand capture is read from a temporary copy whose header names
//! `LINKTYPE_USER0` (147), mapped to the `infiniband` dissector through
//! tshark's `user_dlts` table; the records are the same bytes.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{LinkType, LINKTYPE_INFINIBAND};

/// `LINKTYPE_USER0`.
const LINKTYPE_USER0: u32 = 147;

/// Why tshark gave no answer.
#[derive(Debug)]
pub enum TsharkError {
    /// `tshark --version` did not run: the program is missing (Debian
    /// package `tshark`).
    NotInstalled,
    /// The capture file could not be read or its copy written.
    Io(std::io::Error),
    /// The file is not a pcap capture of the link type named.
    NotACapture,
    /// tshark ran and failed; its standard error.
    Failed(String),
}

impl core::fmt::Display for TsharkError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            TsharkError::NotInstalled => {
                f.write_str("tshark is not installed (Debian package `tshark`)")
            }
            TsharkError::Io(e) => write!(f, "reading or copying the capture: {e}"),
            TsharkError::NotACapture => f.write_str("not a pcap capture of that link type"),
            TsharkError::Failed(e) => write!(f, "tshark failed: {e}"),
        }
    }
}

impl std::error::Error for TsharkError {}

/// Whether `tshark --version` runs.
pub fn tshark_installed() -> bool {
    Command::new("tshark")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// The `fields` (tshark field names, e.g. `frame.protocols`,
/// `infiniband.bth.opcode`) of every frame of the capture at `path`, one
/// row per frame, as tshark prints them (an absent field is empty).
pub fn tshark_fields(
    path: &Path,
    link: LinkType,
    fields: &[&str],
) -> Result<Vec<Vec<String>>, TsharkError> {
    if !tshark_installed() {
        return Err(TsharkError::NotInstalled);
    }
    let mut cmd = Command::new("tshark");
    let copy: Option<PathBuf> = if link == LinkType::Infiniband {
        let mut bytes = std::fs::read(path).map_err(TsharkError::Io)?;
        if bytes.get(20..24) != Some(&LINKTYPE_INFINIBAND.to_le_bytes()[..]) {
            return Err(TsharkError::NotACapture);
        }
        bytes[20..24].copy_from_slice(&LINKTYPE_USER0.to_le_bytes());
        let copy = path.with_extension("user0.pcap");
        std::fs::write(&copy, bytes).map_err(TsharkError::Io)?;
        cmd.args([
            "-o",
            r#"uat:user_dlts:"User 0 (DLT=147)","infiniband","0","","0","""#,
        ]);
        Some(copy)
    } else {
        None
    };
    cmd.arg("-r").arg(copy.as_deref().unwrap_or(path));
    cmd.args(["-T", "fields", "-E", "separator=|"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output();
    if let Some(c) = &copy {
        let _ = std::fs::remove_file(c);
    }
    let out = out.map_err(TsharkError::Io)?;
    if !out.status.success() {
        return Err(TsharkError::Failed(
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split('|').map(str::to_string).collect())
        .collect())
}

/// A number as tshark prints it: decimal or `0x` hex.
pub fn tshark_number(s: &str) -> Option<u32> {
    match s.strip_prefix("0x") {
        Some(h) => u32::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}
