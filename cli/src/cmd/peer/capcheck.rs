//! `mlx5 pcap-check`: re-parse every frame of pcap captures with the
//! project's codec (`mlx5_sim::wire::parse`), recompute each ICRC (and
//! VCRC), and count the frames by opcode. Exit 0 only when every frame
//! parses and every checksum matches.

use std::collections::BTreeMap;
use std::path::PathBuf;

use mlx5_sim::wire::{parse, read_pcap, LinkType, LINKTYPE_ETHERNET, LINKTYPE_INFINIBAND};
use serde_json::{json, Value};

use crate::common::error::CliError;

/// Check `files`; the JSON value and the result.
pub fn run(files: &[PathBuf], json_out: bool) -> (Value, Result<(), CliError>) {
    let mut all = Vec::new();
    let mut bad = Vec::new();
    for f in files {
        let bytes = match std::fs::read(f) {
            Ok(b) => b,
            Err(e) => {
                bad.push(format!("{}: {e}", f.display()));
                continue;
            }
        };
        let (link, records) = match read_pcap(&bytes[..]) {
            Ok(r) => r,
            Err(e) => {
                bad.push(format!("{}: not a pcap file: {e}", f.display()));
                continue;
            }
        };
        let lt = match link {
            LINKTYPE_ETHERNET => LinkType::Ethernet,
            LINKTYPE_INFINIBAND => LinkType::Infiniband,
            other => {
                bad.push(format!(
                    "{}: link type {other} is neither Ethernet nor InfiniBand",
                    f.display()
                ));
                continue;
            }
        };
        let mut opcodes: BTreeMap<String, u64> = BTreeMap::new();
        let mut errors = 0u64;
        for (i, r) in records.iter().enumerate() {
            match parse(lt, &r.data) {
                Ok(p) if p.icrc_ok && p.vcrc_ok != Some(false) => {
                    *opcodes
                        .entry(format!("{:#04x}", p.packet.bth.opcode))
                        .or_default() += 1;
                }
                Ok(_) => {
                    errors += 1;
                    bad.push(format!(
                        "{}: frame {}: ICRC/VCRC mismatch",
                        f.display(),
                        i + 1
                    ));
                }
                Err(e) => {
                    errors += 1;
                    bad.push(format!("{}: frame {}: {e}", f.display(), i + 1));
                }
            }
        }
        if !json_out {
            println!(
                "{}: {} frames, {} with a bad parse or checksum; opcodes {:?}",
                f.display(),
                records.len(),
                errors,
                opcodes
            );
        }
        all.push(json!({"file": f.display().to_string(), "frames": records.len(), "errors": errors, "opcodes": opcodes}));
    }
    let v = json!({ "pcap_check": { "files": all, "problems": bad } });
    if bad.is_empty() {
        (v, Ok(()))
    } else {
        let e = CliError::check(format!("{} problem(s): {}", bad.len(), bad.join("; ")));
        (v, Err(e))
    }
}
