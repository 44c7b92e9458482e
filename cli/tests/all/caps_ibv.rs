//! `caps` shows the board id (PSID), the PCI device id and the port state,
//! and `--json` carries the `ibv_devinfo -v` key names, on every model
//! profile.

use crate::common::mlx5_stdin;
use serde_json::Value;

/// (profile, PCI device id, PSID, fw_ver) as the model's profiles define them.
const PROFILES: &[(&str, u16, &str, &str)] = &[
    ("cx4lx", 0x1015, "MT_2420110034", "14.32.1010"),
    ("cx5", 0x1017, "MT_0000000008", "16.35.2000"),
    ("cx6dx", 0x101d, "MT_0000000359", "22.39.1002"),
    ("cx7", 0x1021, "MT_0000000834", "28.39.1002"),
];

#[test]
fn caps_json_has_identity_port_and_ibv_devinfo_keys_on_every_profile() {
    for (p, id, psid, fw) in PROFILES {
        let dev = format!("sim:{p}");
        let o = mlx5_stdin(&["caps", "--device", &dev, "--json", "-q"], "");
        assert_eq!(o.status.code(), Some(0), "{p}");
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["psid"], *psid, "{p}");
        assert_eq!(v["pci_device_id"], format!("{id:#06x}"), "{p}");
        assert_eq!(v["port_state"][0], "PORT_ACTIVE (4)", "{p}");
        let i = &v["ibv_devinfo"];
        assert_eq!(i["fw_ver"], *fw, "{p}");
        assert_eq!(i["vendor_id"], "0x02c9", "{p}");
        assert_eq!(i["vendor_part_id"], *id, "{p}");
        assert_eq!(i["board_id"], *psid, "{p}");
        assert_eq!(i["phys_port_cnt"], 1, "{p}");
        assert_eq!(i["ports"][0]["state"], "PORT_ACTIVE (4)", "{p}");
        assert_eq!(i["ports"][0]["link_layer"], "Ethernet", "{p}");
        // The counts follow the raw capability logs (`--all`).
        let o = mlx5_stdin(&["caps", "--device", &dev, "--json", "-q", "--all"], "");
        let raw: Value = serde_json::from_slice(&o.stdout).unwrap();
        let log = |k: &str| {
            let s = raw["cmd_hca_cap"][k]
                .as_str()
                .unwrap_or_else(|| panic!("{p}: {k}"));
            u32::from_str_radix(s.trim_start_matches("0x"), 16).unwrap()
        };
        for (k, l, minus) in [
            ("max_qp", "log_max_qp", 0),
            ("max_qp_wr", "log_max_qp_sz", 0),
            ("max_cq", "log_max_cq", 0),
            ("max_cqe", "log_max_cq_sz", 1),
            ("max_mr", "log_max_mkey", 0),
            ("max_pd", "log_max_pd", 0),
            ("max_srq", "log_max_srq", 0),
            ("max_srq_wr", "log_max_srq_sz", 1),
        ] {
            assert_eq!(i[k].as_u64(), Some((1u64 << log(l)) - minus), "{p}: {k}");
        }
        // Linux: receive list max_wqe_sz_rq / 16, the SRQ's one less.
        assert_eq!(
            i["max_srq_sge"].as_u64(),
            Some(u64::from(log("max_wqe_sz_rq")) / 16 - 1),
            "{p}"
        );
        let sge = i["max_sge"].as_u64().unwrap();
        let srq_sge = i["max_srq_sge"].as_u64().unwrap();
        assert!(sge > 0 && srq_sge > 0, "{p}");
    }
}

#[test]
fn caps_text_shows_psid_device_id_and_port() {
    let o = mlx5_stdin(&["caps", "--device", "sim:cx6dx", "-q"], "");
    assert_eq!(o.status.code(), Some(0));
    let out = String::from_utf8_lossy(&o.stdout);
    for want in [
        "  board id (PSID)                      MT_0000000359",
        "  PCI device id                        101d",
        "  port 1                               PORT_ACTIVE (4), Ethernet",
    ] {
        assert!(out.lines().any(|l| l == want), "{want:?} not in:\n{out}");
    }
}

#[test]
fn a_failing_query_adapter_fails_caps_with_its_status() {
    let o = mlx5_stdin(
        &[
            "caps",
            "--fail-opcode",
            "query-adapter:bad_param_err:0x77",
            "-q",
        ],
        "",
    );
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("QUERY_ADAPTER") && err.contains("0x77"),
        "{err}"
    );
}
