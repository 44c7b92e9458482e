//! `mlx5 cmd --list`, `mlx5 cmd NAME --fields`, symbolic op_mods and typo
//! suggestions: no device is needed for discovery.

use std::process::{Command, Output};

use serde_json::Value;

fn mlx5(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mlx5"))
        .args(args)
        .output()
        .expect("run mlx5")
}

fn json(args: &[&str], code: i32) -> Value {
    let mut a = args.to_vec();
    a.push("--json");
    let o = mlx5(&a);
    assert_eq!(
        o.status.code(),
        Some(code),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn list_names_every_command_with_a_layout_without_a_device() {
    // A vfio address that does not exist: discovery never opens it.
    let v = json(&["cmd", "--list", "--device", "vfio:0000:ff:1f.7"], 0);
    let names: Vec<&str> = v["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    for n in [
        "create-cq",
        "create-qp",
        "create-mkey",
        "query-hca-cap",
        "nop",
        "access-reg",
    ] {
        assert!(names.contains(&n), "{n} not in {names:?}");
    }
    assert!(!names.contains(&"manage-pages"));
}

#[test]
fn fields_show_widths_defaults_and_what_the_tool_fills() {
    let v = json(&["cmd", "create-qp", "--fields"], 0);
    let input = v["input"].as_array().unwrap();
    let f = |n: &str| {
        input
            .iter()
            .find(|r| r["name"] == n)
            .unwrap_or_else(|| panic!("{n}"))
    };
    assert_eq!(f("qpc.log_sq_size")["width"], 4);
    assert!(f("qpc.pd")["default"]
        .as_str()
        .unwrap()
        .contains("PD of bring-up"));
    assert!(f("qpc.dbr_addr")["default"]
        .as_str()
        .unwrap()
        .contains("doorbell record"));
    assert!(f("pas[..]")["default"].as_str().unwrap().contains("ring"));
    assert_eq!(f("qpc.st")["default"], "0");
    let out = v["output"].as_array().unwrap();
    assert!(out.iter().any(|r| r["name"] == "qpn" && r["width"] == 24));
    let v = json(&["cmd", "query-hca-cap", "--fields"], 0);
    let mods = v["op_mods"].as_array().unwrap();
    assert!(
        mods.iter()
            .any(|m| m["name"] == "roce.cur" && m["value"] == 9),
        "{mods:?}"
    );
}

#[test]
fn symbolic_op_mods_are_the_numbers() {
    let v = json(&["cmd", "query-hca-cap", "op_mod=roce.cur", "-q"], 0);
    assert_eq!(v["op_mod"], 9);
    let v = json(&["cmd", "query-hca-cap", "op_mod=max", "-q"], 0);
    assert_eq!(v["op_mod"], 0);
    let v = json(&["cmd", "query-hca-cap", "op_mod=rocee", "-q"], 2);
    assert!(
        v["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("roce.cur (0x9)"),
        "{v}"
    );
}

#[test]
fn typos_get_the_nearest_names_first() {
    let v = json(&["cmd", "creat-cqq"], 2);
    assert!(
        v["error"]["hint"]
            .as_str()
            .unwrap()
            .starts_with("did you mean: create-cq,"),
        "{v}"
    );
    let v = json(&["cmd", "create-cq", "cq_context.log_cq_sise=3"], 2);
    let h = v["error"]["hint"].as_str().unwrap();
    assert!(
        h.starts_with("did you mean: cq_context.log_cq_size,"),
        "{h}"
    );
    assert_eq!(h.matches("cq_context.log_cq_size").count(), 1, "{h}");
}
