//! The self-test's report bundle: one JSON file with everything a bug
//! report needs (the command trace with Linux-format hexdumps, the
//! capabilities, the health buffer, the versions, every stage's result and
//! timing), written also when a stage failed.

use std::path::{Path, PathBuf};

use mlx5_driver::health;
use mlx5_hal::Hal;
use mlx5_regs::decode::{decode, hexdump, DecodeOptions};
use mlx5_regs::layouts::health_buffer;
use serde_json::{json, Map, Value};

use crate::cmd::caps::table as caps;
use crate::common::loopback::{gid_text, loopback_name, loopback_text, mac_text};
use crate::common::session::TracedHca;
use crate::common::trace::{self, Tracer};

/// The bundle's format name; bumped when a field changes meaning.
pub const FORMAT: &str = "mlx5-selftest-report/1";

/// The tool's version and the git commit it was built from (when built
/// from a git checkout; `build.rs`).
pub fn version() -> Value {
    json!({
        "mlx5_cli": env!("CARGO_PKG_VERSION"),
        // Every crate of the workspace shares this version (`version.workspace`).
        "mlx5_driver": env!("CARGO_PKG_VERSION"),
        "git_commit": option_env!("MLX5_GIT_COMMIT"),
    })
}

/// The health buffer (BAR0 0x200) decoded, its raw words, and the driver's
/// reading of it (fatal or not, heartbeat, NIC interface state).
pub fn health<H: Hal>(hal: &H) -> Value {
    let base = health::HEALTH_BUFFER;
    let mut raw = [0u8; health_buffer::SIZE];
    for (i, w) in raw.chunks_mut(4).enumerate() {
        w.copy_from_slice(&hal.mmio_read32(base + 4 * i).to_be_bytes());
    }
    let mut text = String::new();
    let _ = decode(
        &health_buffer::LAYOUT,
        &raw,
        DecodeOptions::default(),
        &mut text,
    );
    let fields: Map<String, Value> = text
        .lines()
        .filter_map(|l| l.split_once(" = "))
        .map(|(k, v)| (k.trim().to_string(), Value::from(v.trim())))
        .collect();
    let snap = health::snapshot(hal);
    json!({
        "fields": fields,
        "raw_words": raw.chunks(4).map(|w| format!("{:08x}", u32::from_be_bytes([w[0], w[1], w[2], w[3]]))).collect::<Vec<_>>(),
        "health_counter": snap.counter,
        "nic_interface": snap.nic_interface,
        "fatal": snap.fatal().map(|e| crate::common::error::driver_text(&e)),
    })
}

/// The capabilities and port set-up as bring-up found them.
pub fn capabilities<H: Hal>(hca: &TracedHca<'_, H>) -> Value {
    let cur = hca.caps();
    let max = hca.max_caps();
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let roce = hca.roce_caps().map(|c| {
        json!({
            "fl_rc_qp_when_roce_disabled": c.fl_when_disabled,
            "fl_rc_qp_when_roce_enabled": c.fl_when_enabled,
            "roce_version": c.roce_version,
            "roce_address_table_size": c.address_table_size,
            "qp_ts_format": c.qp_ts_format,
        })
    });
    let vport = hca
        .nic_vport()
        .map(|v| json!({"roce_en_at_bring_up": v.roce_en, "mac": mac_text(&v.mac), "mtu": v.mtu}));
    let mode = match hca.loopback_mode() {
        Some(mlx5_driver::loopback::LoopbackMode::Roce {
            gid_index,
            gid,
            mac,
            version,
        }) => json!({
            "mode": "roce", "gid_index": gid_index, "gid": gid_text(&gid), "mac": mac_text(&mac),
            "version": format!("{version:?}"),
        }),
        Some(mlx5_driver::loopback::LoopbackMode::Ib { lid }) => json!({"mode": "ib", "lid": lid}),
        _ => json!({"mode": loopback_name(hca)}),
    };
    json!({
        "firmware_version": hca.fw_version().to_string(),
        "cmdif_rev": hca.fw_version().cmdif_rev,
        "issi": hca.issi(),
        "current": caps::to_json(cur),
        "maximum": max.map(caps::to_json),
        "cmd_hca_cap_current_hex": hex(&cur.raw),
        "cmd_hca_cap_maximum_hex": max.map(|m| hex(&m.raw)),
        "roce": roce,
        "nic_vport": vport,
        "roce_enabled": hca.roce_enabled(),
        "loopback": mode,
        "loopback_text": loopback_text(hca),
        "dma_lkey": hca.dma_lkey(),
        "reserved_lkey": hca.reserved_lkey(),
        "xrcd": hca.xrcd(),
        "pd": hca.pd(),
        "uar": hca.uar(),
    })
}

/// Every command of the run: decoded fields, raw hex, and the hexdump in
/// the format Linux `mlx5_core` prints, to diff against a kernel log.
pub fn commands(t: &Tracer) -> Value {
    let cmds: Vec<Value> = t
        .records()
        .iter()
        .map(|c| {
            let mut v = trace::to_json(c, true);
            let dump = |buf: &[u8]| {
                let mut s = String::new();
                let _ = hexdump(buf, c.slot as u32, 0, &mut s);
                s.lines().map(String::from).collect::<Vec<_>>()
            };
            v["hexdump"] = json!({"input": dump(&c.input), "output": dump(&c.output)});
            v
        })
        .collect();
    Value::from(cmds)
}

/// The host the run was on (what `uname -r` and the architecture say).
pub fn host() -> Value {
    json!({
        "os": std::env::consts::OS,
        "arch": std::env::consts::ARCH,
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").ok().map(|s| s.trim().to_string()),
    })
}

/// `mlx5-selftest-sim-cx5-20240517-093001.json` in the current directory.
pub fn default_path(label: &str, unix: u64) -> PathBuf {
    let name: String = label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    PathBuf::from(format!("mlx5-selftest-{name}-{}.json", utc(unix)))
}

/// `YYYYMMDD-HHMMSS` (UTC) of a Unix time, by the civil-from-days
/// algorithm (proleptic Gregorian calendar).
fn utc(unix: u64) -> String {
    let days = (unix / 86_400) as i64;
    let secs = unix % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}-{:02}{:02}{:02}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// Write the bundle; the error names the file.
pub fn write(path: &Path, doc: &Value) -> Result<(), String> {
    let text = serde_json::to_string_pretty(doc).map_err(|e| e.to_string())?;
    std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::utc;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "19700101-000000");
        assert_eq!(utc(951_782_400), "20000229-000000");
        assert_eq!(utc(1_715_938_201), "20240517-093001");
    }
}
