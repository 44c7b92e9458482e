//! The model-only knobs: `--issi0`, `--threaded`, `--dma-limit` (and
//! `--seed`) change the model as asked and are refused on a card (exit 2).

use crate::common::mlx5_stdin;
use serde_json::Value;

fn json(args: &[&str], code: i32) -> Value {
    let o = mlx5_stdin(args, "");
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|_| panic!("{args:?}: {}", String::from_utf8_lossy(&o.stderr)));
    assert_eq!(o.status.code(), Some(code), "{args:?}: {v:#}");
    v
}

#[test]
fn issi0_brings_the_device_up_at_issi_0_on_every_profile() {
    for p in ["cx4lx", "cx5", "cx6dx", "cx7"] {
        let dev = format!("sim:{p}");
        let v = json(&["caps", "--device", &dev, "--issi0", "--json", "-q"], 0);
        assert_eq!(v["issi"], 0, "{p}");
        assert_eq!(v["model_options"]["issi0"], true, "{p}");
        let v = json(&["caps", "--device", &dev, "--json", "-q"], 0);
        assert_eq!(v["issi"], 1, "{p}");
        assert!(v.get("model_options").is_none(), "{p}");
        // At ISSI 0 the demo's shared receive queue is an SRQ, not an RMP.
        let v = json(&["trace", "--device", &dev, "--issi0", "--json", "-q"], 0);
        let ops: Vec<&str> = v["commands"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["opcode"].as_str())
            .collect();
        assert!(ops.contains(&"CREATE_SRQ"), "{p}: {ops:?}");
        assert!(!ops.contains(&"CREATE_RMP"), "{p}: {ops:?}");
    }
}

#[test]
fn threaded_mode_runs_the_demo_on_every_profile() {
    for p in ["cx4lx", "cx5", "cx6dx", "cx7"] {
        let dev = format!("sim:{p}");
        let v = json(&["demo", "--device", &dev, "--threaded", "--json", "-q"], 0);
        assert_eq!(v["model_options"]["threaded"], true, "{p}");
    }
}

#[test]
fn dma_limit_bounds_the_models_dma_memory() {
    // 64 KiB cannot hold bring-up's pages: out of memory (errno 12).
    let v = json(&["demo", "--dma-limit", "64K", "--json", "-q"], 1);
    assert_eq!(v["model_options"]["dma_limit"], 65536);
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("errno 12"), "{msg}");
    // A generous limit changes nothing.
    let v = json(&["demo", "--dma-limit", "0x10000000", "--json", "-q"], 0);
    assert_eq!(v["model_options"]["dma_limit"], 0x1000_0000);
    for bad in ["0", "12Q", "99999999999G"] {
        let o = mlx5_stdin(&["demo", "--dma-limit", bad], "");
        assert_eq!(o.status.code(), Some(2), "{bad}");
    }
}

#[test]
fn model_options_are_refused_on_a_card() {
    for opt in [
        &["--issi0"][..],
        &["--threaded"],
        &["--dma-limit", "4M"],
        &["--seed", "3"],
    ] {
        let mut a = vec!["caps", "--device", "vfio:0000:03:00.0", "--json"];
        a.extend_from_slice(opt);
        let v = json(&a, 2);
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains(opt[0]) && msg.contains("device model only"),
            "{msg}"
        );
    }
}
