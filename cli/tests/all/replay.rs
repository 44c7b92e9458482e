//! `mlx5 trace --save`, `mlx5 replay` and `mlx5 diff`: a trace replayed on
//! the model with another seed matches; an injected failure is exactly one
//! difference; one changed field is exactly one difference; the docs/cli.md
//! examples of the section run.

use serde_json::Value;

use crate::common::{docs_examples, mlx5_stdin};

fn tmp(name: &str) -> String {
    let d = std::env::temp_dir().join(format!("mlx5-replay-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name).to_string_lossy().into_owned()
}

fn record(path: &str, extra: &[&str]) {
    let mut a = vec![
        "trace",
        "-q",
        "--scenario",
        "limit",
        "--save",
        path,
        "--json",
    ];
    a.extend_from_slice(extra);
    let o = mlx5_stdin(&a, "");
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn run_json(args: &[&str], code: i32) -> Value {
    let mut a = args.to_vec();
    a.extend(["--json", "-q"]);
    let o = mlx5_stdin(&a, "");
    assert_eq!(
        o.status.code(),
        Some(code),
        "{args:?}: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn file_format_header_and_phases() {
    let f = tmp("fmt.trace");
    record(&f, &[]);
    let text = std::fs::read_to_string(&f).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["format"], "mlx5-trace");
    assert_eq!(lines[0]["version"], 1);
    assert_eq!(lines[0]["device"], "sim:cx5");
    assert!(lines[0]["tool"].as_str().unwrap().starts_with("mlx5 "));
    assert_eq!(
        lines[0]["commands"].as_u64().unwrap() as usize,
        lines.len() - 1
    );
    assert_eq!(lines[1]["opcode"], "ENABLE_HCA");
    assert_eq!(lines[1]["phase"], "bring-up");
    assert_eq!(lines.last().unwrap()["opcode"], "DISABLE_HCA");
    assert_eq!(lines.last().unwrap()["phase"], "teardown");
    assert!(lines
        .iter()
        .any(|l| l["phase"] == "run" && l["opcode"] == "CREATE_QP"));
    for l in &lines[1..] {
        assert!(l["input"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{:04x}", l["opcode_value"].as_u64().unwrap())));
    }
}

#[test]
fn replay_with_another_seed_matches_and_an_injected_failure_is_the_one_difference() {
    let a = tmp("a.trace");
    let b = tmp("b.trace");
    record(&a, &[]);
    record(&b, &["--seed", "7"]);
    // The seed changed what should vary: the raw bytes differ.
    let (ta, tb) = (
        std::fs::read_to_string(&a).unwrap(),
        std::fs::read_to_string(&b).unwrap(),
    );
    let differing = ta
        .lines()
        .zip(tb.lines())
        .skip(1)
        .filter(|(x, y)| x != y)
        .count();
    assert!(differing > 5, "{differing} raw lines differ");
    let v = run_json(&["diff", &a, &b], 0);
    assert_eq!(v["differences"].as_array().unwrap().len(), 0);
    let v = run_json(&["replay", &a, "--seed", "99"], 0);
    assert_eq!(v["differences"].as_array().unwrap().len(), 0, "{v}");
    assert!(v["run_commands_resent"].as_u64().unwrap() >= 15);
    let v = run_json(
        &[
            "replay",
            &a,
            "--seed",
            "99",
            "--fail-opcode",
            "query-rmp:bad_param_err:0x1234",
        ],
        4,
    );
    let d = v["differences"].as_array().unwrap();
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0]["opcode"], "QUERY_RMP");
    assert_eq!(d[0]["place"], "outcome");
    assert_eq!(d[0]["b"], "BAD_PARAM_ERR syndrome 0x1234");
    assert_eq!(v["error"]["kind"], "differ");
}

#[test]
fn diff_reports_the_one_changed_field() {
    let a = tmp("c.trace");
    record(&a, &[]);
    let text = std::fs::read_to_string(&a).unwrap();
    let mut changed = 0;
    let out: Vec<String> = text
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            if v["opcode"] == "QUERY_ISSI" {
                // current_issi: bits 80..96 of the output, hex digits 20..24.
                let mut h = v["output"].as_str().unwrap().to_string();
                h.replace_range(20..24, "0001");
                v["output"] = Value::from(h);
                changed += 1;
            }
            serde_json::to_string(&v).unwrap()
        })
        .collect();
    assert_eq!(changed, 1);
    let b = tmp("d.trace");
    std::fs::write(&b, out.join("\n") + "\n").unwrap();
    let v = run_json(&["diff", &a, &b], 4);
    let d = v["differences"].as_array().unwrap();
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0]["opcode"], "QUERY_ISSI");
    assert_eq!(d[0]["place"], "output");
    assert_eq!(d[0]["field"], "current_issi");
    assert_eq!(
        (d[0]["a"].as_str(), d[0]["b"].as_str()),
        (Some("0x0"), Some("0x1"))
    );
}

#[test]
fn refusals() {
    let v = run_json(&["diff", "docs/cli.md", "docs/cli.md"], 2);
    assert_eq!(v["error"]["kind"], "usage");
    let f = tmp("future.trace");
    std::fs::write(&f, "{\"format\":\"mlx5-trace\",\"version\":99}\n").unwrap();
    let v = run_json(&["replay", &f], 2);
    assert!(v["error"]["message"].as_str().unwrap().contains("version"));
    run_json(
        &[
            "replay",
            "docs/scripts/limit-cx5.trace",
            "--seed",
            "1",
            "--device",
            "vfio:0000:ff:1f.7",
        ],
        2,
    );
}

#[test]
fn docs_examples_run() {
    assert!(docs_examples("## `replay` and `diff`") >= 4);
}
