//! `mlx5 caps`: the device's capabilities, decoded and grouped, with the
//! `ibv_devinfo` view.

pub mod devinfo;
pub mod table;

use mlx5_hal::Hal;
use serde_json::{json, Value};

use crate::common::error::CliError;
use crate::common::report::Report;
use crate::common::session::{bring_up, teardown, Env};
use crate::common::trace::Tracer;

/// Run `mlx5 caps` on an opened device: bring-up, the capabilities
/// (`all`: every non-zero `cmd_hca_cap` field too), teardown.
pub fn run<H: Hal>(
    hal: H,
    env: &Env<'_>,
    t: &Tracer,
    json_mode: bool,
    progress: bool,
    all: bool,
) -> (Value, Result<(), CliError>) {
    let mut r = Report::new(json_mode, false, progress);
    let (hca, _) = match bring_up(hal, env, t, &mut r) {
        Ok(x) => x,
        Err(e) => return (Value::Null, Err(e)),
    };
    let caps = *hca.caps();
    let max = hca.max_caps().copied();
    let fw = hca.fw_version();
    let issi = hca.issi();
    let pages = hca.pages_held_by_firmware();
    let info = match devinfo::query(&hca, env) {
        Ok(i) => i,
        Err(e) => {
            // Still give the pages back; the query's error is the one to report.
            let _ = teardown(hca, env, &mut r);
            return (Value::Null, Err(e));
        }
    };
    if !json_mode {
        outln!(
            "Capabilities of {} ({})",
            env.target.describe(),
            env.target.label()
        );
        outln!("  firmware {fw}, ISSI {issi}, firmware holds {pages} pages after bring-up");
        outln!("  (current values after SET_HCA_CAP; where the maximum differs it is shown)");
        devinfo::print(&info, &caps);
        table::print(&caps, max.as_ref());
        if all {
            outln!("\nEvery non-zero cmd_hca_cap field (current)");
            for (k, v) in table::raw_fields(&caps) {
                outln!("  {k} = {v}");
            }
        }
    }
    let mut v = json!({
        "firmware_version": fw.to_string(),
        "psid": info.psid,
        "pci_device_id": info.pci_device_id.map(|i| format!("{i:#06x}")),
        "port_state": info.ports.iter().map(|p| devinfo::state_text(p.state)).collect::<Vec<_>>(),
        "ibv_devinfo": devinfo::ibv_json(&caps, fw, &info),
        "issi": issi,
        "pages_held_by_firmware": pages,
        "capabilities": table::to_json(&caps),
        "max_capabilities": max.as_ref().map(table::to_json),
    });
    if all {
        let m: serde_json::Map<String, Value> = table::raw_fields(&caps)
            .into_iter()
            .map(|(k, v)| (k, Value::from(v)))
            .collect();
        v["cmd_hca_cap"] = Value::Object(m);
    }
    let (s, td) = teardown(hca, env, &mut r);
    if !json_mode {
        s.print_line();
    }
    let res = td.and_then(|()| {
        if s.clean() {
            Ok(())
        } else {
            Err(CliError::check("teardown did not get every page back"))
        }
    });
    (v, res)
}
