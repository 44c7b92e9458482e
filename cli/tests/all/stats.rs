//! `mlx5 stats`: Linux's debugfs command statistics, the last failure kept
//! after later successes; `mlx5 --version` names the commit; the
//! docs/cli.md examples of the section run.

use serde_json::Value;

use crate::common::{docs_examples, mlx5_stdin};

fn row(args: &[&str], code: i32, op: &str) -> Value {
    let mut a = vec!["stats", "-q", "--scenario", "limit", "--json"];
    a.extend_from_slice(args);
    let o = mlx5_stdin(&a, "");
    assert_eq!(
        o.status.code(),
        Some(code),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    v["opcodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["opcode"] == op)
        .unwrap()
        .clone()
}

#[test]
fn last_failure_is_kept_after_later_successes() {
    let r = row(
        &["--fail-opcode", "destroy-cq:bad_param_err:0x9"],
        1,
        "DESTROY_CQ",
    );
    assert_eq!(r["count"], 3, "{r}");
    assert_eq!(r["n"], 3);
    assert_eq!(r["failed"], 1);
    assert_eq!(r["failed_mbox_status"], 1);
    // The latest DESTROY_CQ succeeded; the failure before it is kept.
    assert_eq!(r["last"]["status"], "OK");
    assert_eq!(r["last_failed_mbox_status"], 3);
    assert_eq!(r["last_failed_syndrome"], "0x9");
    assert_eq!(r["last_failed_errno"], 22);
}

#[test]
fn a_timeout_fails_without_a_mailbox_status_and_does_not_complete() {
    let r = row(
        &["--stall-opcode", "destroy-cq", "--cmd-timeout-ms", "5"],
        1,
        "DESTROY_CQ",
    );
    assert_eq!(
        (r["count"].as_u64(), r["n"].as_u64()),
        (Some(3), Some(2)),
        "{r}"
    );
    assert_eq!(r["failed"], 1);
    assert_eq!(r["failed_mbox_status"], 0);
    assert_eq!(r["last_failed_errno"], 110);
    assert_eq!(r["average_ns"], 100);
    assert!(r["max_ns"].as_u64().unwrap() >= 5_000_000);
    let ok = row(&[], 0, "CREATE_CQ");
    assert_eq!(ok["failed"], 0);
    assert!(ok["last_failed_errno"].is_null());
}

#[test]
fn version_names_the_commit() {
    let o = mlx5_stdin(&["--version"], "");
    assert_eq!(o.status.code(), Some(0));
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(
        s.starts_with(&format!("mlx5 {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{s}"
    );
    if let Some(c) = option_env!("MLX5_GIT_COMMIT") {
        assert!(s.contains(c), "{s}");
    }
}

#[test]
fn docs_examples_run() {
    assert!(docs_examples("## `stats`") >= 2);
}
