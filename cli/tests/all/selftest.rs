//! `mlx5 selftest` end to end on the model: every stage passes on every
//! profile; each stage's command made to fail stops the run at that stage
//! with the driver's error and exit code 10 + N, and the report bundle is
//! written in every case with the fields a bug report needs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn mlx5_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mlx5"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run mlx5")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exited, not killed")
}

/// A fresh directory of this test's own.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mlx5-selftest-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

fn read_json(p: &Path) -> Value {
    let s = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&s).unwrap_or_else(|e| panic!("{}: not JSON: {e}", p.display()))
}

const PROFILES: [&str; 4] = ["cx4lx", "cx5", "cx6dx", "cx7"];
const STAGES: [&str; 10] = [
    "bring-up",
    "capabilities",
    "cq",
    "srq",
    "memory-key",
    "qp-pair",
    "traffic",
    "srq-limit",
    "cq-resize",
    "teardown",
];

/// What every bundle holds, passed or failed.
fn check_bundle_common(b: &Value, device: &str) {
    assert_eq!(b["format"], "mlx5-selftest-report/1");
    assert_eq!(b["device"], device);
    assert_eq!(b["version"]["mlx5_cli"], env!("CARGO_PKG_VERSION"));
    match &b["version"]["git_commit"] {
        Value::Null => {} // built outside a git checkout
        Value::String(c) => assert!(
            c.len() == 40 && c.bytes().all(|x| x.is_ascii_hexdigit()),
            "{c}"
        ),
        other => panic!("git_commit {other}"),
    }
    assert!(b["created_unix"].as_u64().unwrap() > 1_600_000_000);
    assert!(b["host"]["os"].is_string());
    let stages = b["stages"].as_array().unwrap();
    assert_eq!(stages.len(), 10);
    for (i, s) in stages.iter().enumerate() {
        assert_eq!(s["stage"], i + 1);
        assert_eq!(s["name"], STAGES[i]);
    }
}

/// A bundle of a run that got past bring-up: trace, caps, health.
fn check_bundle_traced(b: &Value) {
    let cmds = b["commands"].as_array().unwrap();
    assert_eq!(cmds.len() as u64, b["commands_sent"].as_u64().unwrap());
    let enable = &cmds[0];
    assert_eq!(enable["opcode"], "ENABLE_HCA");
    assert!(enable["input_hex"].as_str().unwrap().starts_with("0104"));
    let dump = enable["hexdump"]["input"][0].as_str().unwrap();
    assert!(dump.starts_with("cmd[0]: 000: 01040000"), "{dump}");
    assert!(
        b["capabilities"]["current"].is_object(),
        "{}",
        b["capabilities"]
    );
    let raw = b["capabilities"]["cmd_hca_cap_current_hex"]
        .as_str()
        .unwrap();
    assert_eq!(raw.len(), 2 * 256, "the whole cmd_hca_cap (256 bytes)");
    assert!(b["capabilities"]["firmware_version"].is_string());
    for when in ["before_teardown", "after_teardown"] {
        let h = &b["health"][when];
        assert_eq!(h["raw_words"].as_array().unwrap().len(), 16, "{h}");
        assert!(h["fields"]["fw_version"].is_string(), "{h}");
    }
}

#[test]
fn selftest_passes_every_stage_on_every_profile() {
    let dir = scratch("pass");
    for p in PROFILES {
        let device = format!("sim:{p}");
        let report = format!("{p}.json");
        let o = mlx5_in(
            &dir,
            &[
                "selftest", "--device", &device, "--report", &report, "--json",
            ],
        );
        assert_eq!(
            code(&o),
            0,
            "{p}:\n{}\n{}",
            text(&o.stdout),
            text(&o.stderr)
        );
        let v: Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
        assert_eq!(v["ok"], true);
        assert_eq!(v["result"], "pass");
        assert_eq!(v["report"], report.as_str());
        let rows = v["stages"].as_array().unwrap();
        assert!(rows.iter().all(|s| s["result"] == "pass"), "{p}: {v}");

        let b = read_json(&dir.join(&report));
        check_bundle_common(&b, &device);
        check_bundle_traced(&b);
        assert_eq!(b["result"], "pass");
        assert_eq!(b["exit_code"], 0);
        assert_eq!(b["error"], Value::Null);
        let st = b["stages"].as_array().unwrap();
        for s in st {
            assert_eq!(s["result"], "pass", "{p}: {s}");
            assert!(s["commands"].as_u64().unwrap() >= 1, "{p}: {s}");
            assert!(!s["details"]["lines"].as_array().unwrap().is_empty(), "{s}");
        }
        let d = |i: usize| &st[i]["details"];
        assert_eq!(d(1)["missing"].as_array().unwrap().len(), 0);
        // The demo's 20 messages and the self-test's 11 of other kinds.
        assert_eq!(d(6)["received"], 31, "{p}: traffic");
        assert_eq!(d(6)["send_completions"], 31);
        assert_eq!(d(6)["model_side_door_uses"], 0);
        assert_eq!(d(7)["event_after_message"], 5, "{p}: SRQ limit");
        assert_eq!(d(7)["lwm_after_rearm"], d(7)["limit"]);
        assert_eq!(
            (d(8)["from"].as_u64(), d(8)["to"].as_u64()),
            (Some(255), Some(1023))
        );
        assert_eq!(d(8)["waiting"], 12);
        assert_eq!(d(8)["received"], 16);
        assert_eq!(d(9)["all_pages_returned"], true, "{p}: teardown");
        let m = &b["model"];
        assert_eq!(m["traffic"]["side_door_uses"], 0, "{p}");
        assert_eq!(m["traffic"]["messages"], 20 + 11 + 5 + 16);
        assert_eq!(m["objects_left"], 0);
        assert_eq!(m["violations"].as_array().unwrap().len(), 0);
        let want_mode = if p == "cx4lx" {
            "roce"
        } else {
            "force_loopback"
        };
        assert_eq!(b["capabilities"]["loopback"]["mode"], want_mode, "{p}");
        assert_eq!(b["health"]["before_teardown"]["fields"]["synd"], "0x0");
        assert_eq!(b["health"]["before_teardown"]["fatal"], Value::Null);
    }
    // The human form: the stages as they run, then the table.
    let o = mlx5_in(&dir, &["selftest", "-q", "--report", "h.json"]);
    assert_eq!(code(&o), 0);
    let out = text(&o.stdout);
    for n in [
        "1. Bring-up",
        "7. Traffic",
        "10. Teardown",
        "   6  Loopback queue pair              pass",
        "  result: PASS, 10 of 10 stages",
        "report: h.json (attach it to a bug report)",
    ] {
        assert!(out.contains(n), "missing {n:?} in:\n{out}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// (stage, fault options, failing opcode, words of the stage's message).
fn stage_faults() -> Vec<(usize, Vec<&'static str>, &'static str, &'static str)> {
    vec![
        (
            1,
            vec!["--fail-opcode", "init-hca:bad_param_err:0x11"],
            "INIT_HCA",
            "bring-up",
        ),
        (
            2,
            vec!["--fail-opcode", "query-adapter:bad_param_err:0x12"],
            "QUERY_ADAPTER",
            "querying the adapter",
        ),
        (
            3,
            vec!["--fail-opcode", "create-cq:bad_param_err:0x13"],
            "CREATE_CQ",
            "creating the send CQ",
        ),
        (
            4,
            vec!["--fail-opcode", "create-rmp:bad_param_err:0x14"],
            "CREATE_RMP",
            "creating the SRQ",
        ),
        (
            5,
            vec!["--fail-opcode", "create-mkey:bad_param_err:0x15:2"],
            "CREATE_MKEY",
            "creating the memory key",
        ),
        (
            5,
            vec!["--fail-opcode", "query-mkey:bad_param_err:0x25"],
            "QUERY_MKEY",
            "querying the new key",
        ),
        (
            6,
            vec!["--fail-opcode", "create-qp:bad_param_err:0x16"],
            "CREATE_QP",
            "creating the sender QP",
        ),
        (
            6,
            vec!["--fail-opcode", "rtr2rts-qp:bad_param_err:0x26"],
            "RTR2RTS_QP",
            "connecting the QPs",
        ),
        (
            7,
            vec!["--fail-opcode", "query-qp:bad_param_err:0x17"],
            "QUERY_QP",
            "querying the sender QP",
        ),
        (
            8,
            vec!["--fail-opcode", "modify-rmp:bad_param_err:0x18"],
            "MODIFY_RMP",
            "arming the SRQ limit",
        ),
        (
            9,
            vec!["--fail-opcode", "modify-cq:bad_param_err:0x19"],
            "MODIFY_CQ",
            "resizing the CQ",
        ),
        (
            10,
            vec!["--fail-opcode", "destroy-qp:bad_param_err:0x1a"],
            "DESTROY_QP",
            "destroying the sender QP",
        ),
        (
            10,
            vec!["--fail-opcode", "teardown-hca:bad_param_err:0x2a"],
            "TEARDOWN_HCA",
            "teardown",
        ),
    ]
}

#[test]
fn each_stage_stops_at_its_failing_command_with_its_exit_code_and_writes_the_bundle() {
    let dir = scratch("faults");
    for (i, (n, fault, opcode, words)) in stage_faults().into_iter().enumerate() {
        // Spread the runs over the profiles.
        let device = format!("sim:{}", PROFILES[i % PROFILES.len()]);
        let report = format!("stage{n}-{i}.json");
        let mut args = vec!["selftest", "-q", "--device", &device, "--report", &report];
        args.extend(&fault);
        let o = mlx5_in(&dir, &args);
        let (out, err) = (text(&o.stdout), text(&o.stderr));
        let what = format!("{fault:?} on {device}");
        assert_eq!(code(&o), 10 + n as i32, "{what}:\n{out}\n{err}");
        let name = STAGES[n - 1];
        let msg = format!("stage {n} ({name}) failed: {words}");
        assert!(
            out.contains(&format!(
                "result: FAIL ({} of 10 stages passed): {msg}",
                n - 1
            )),
            "{what}:\n{out}"
        );
        assert!(
            err.contains(&format!("mlx5: error: {msg}")),
            "{what}:\n{err}"
        );
        assert!(
            err.contains(opcode) && err.contains("BAD_PARAM_ERR"),
            "{what}:\n{err}"
        );
        assert!(
            err.contains("attach it to a bug report"),
            "{what}: the hint names the report"
        );
        for later in n + 1..=10 {
            assert!(out.contains(&format!("{later:>4}  ")), "{what}");
        }
        assert_eq!(out.matches(" not run").count(), 10 - n, "{what}:\n{out}");

        let b = read_json(&dir.join(&report));
        check_bundle_common(&b, &device);
        assert_eq!(b["result"], "fail", "{what}");
        assert_eq!(b["exit_code"], 10 + n, "{what}");
        let e = &b["error"];
        assert_eq!(e["stage"], n, "{what}: {e}");
        assert_eq!(e["stage_name"], name);
        assert_eq!(e["opcode"], opcode, "{what}: {e}");
        assert_eq!(e["status"], "BAD_PARAM_ERR");
        let syndrome = fault[1].split(':').nth(2).unwrap();
        assert_eq!(e["syndrome"], syndrome, "{what}");
        assert_eq!(e["errno"], 22);
        assert!(
            e["hint"]
                .as_str()
                .unwrap()
                .contains("attach it to a bug report"),
            "{e}"
        );
        let st = b["stages"].as_array().unwrap();
        for (k, s) in st.iter().enumerate() {
            let want = match (k + 1).cmp(&n) {
                std::cmp::Ordering::Less => "pass",
                std::cmp::Ordering::Equal => "fail",
                std::cmp::Ordering::Greater => "not run",
            };
            assert_eq!(s["result"], want, "{what}: stage {}", k + 1);
        }
        assert_eq!(st[n - 1]["error"]["opcode"], opcode);
        assert_eq!(st[n - 1]["error"]["exit_code"], 10 + n);
        // The failed command is in the trace with its status and hexdump.
        let cmds = b["commands"].as_array().unwrap();
        let failed: Vec<&Value> = cmds
            .iter()
            .filter(|c| c["outcome"]["status"] == "BAD_PARAM_ERR")
            .collect();
        assert_eq!(failed.len(), 1, "{what}");
        assert_eq!(failed[0]["opcode"], opcode);
        assert_eq!(failed[0]["outcome"]["syndrome"], syndrome);
        assert!(!failed[0]["hexdump"]["input"].as_array().unwrap().is_empty());
        if n > 1 {
            check_bundle_traced(&b);
        }
        if (2..=9).contains(&n) {
            // Everything made was destroyed and the HCA torn down.
            let a = &b["after_failure"];
            assert_eq!(a["pages_given"], a["pages_returned"], "{what}: {a}");
            assert_eq!(a["pages_left"], 0);
            assert_eq!(a["model_objects_left"], 0, "{what}: {a}");
            assert_eq!(a["teardown_error"], Value::Null);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_timeout_and_a_dead_device_stop_their_stage_and_the_health_buffer_shows_it() {
    let dir = scratch("dead");
    let o = mlx5_in(
        &dir,
        &[
            "selftest",
            "-q",
            "--stall-opcode",
            "create-qp",
            "--cmd-timeout-ms",
            "50",
            "--report",
            "t.json",
        ],
    );
    assert_eq!(code(&o), 16, "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("timed out"), "{}", text(&o.stderr));
    assert_eq!(read_json(&dir.join("t.json"))["error"]["stage"], 6);

    // Bring-up is 28 commands on the ConnectX-5 profile (with the two
    // default GIDs), the capability stage 2 more: the device dies after
    // the first CREATE_CQ.
    let o = mlx5_in(
        &dir,
        &[
            "selftest",
            "-q",
            "--fatal-after",
            "31",
            "--report",
            "f.json",
        ],
    );
    assert_eq!(code(&o), 13, "{}\n{}", text(&o.stdout), text(&o.stderr));
    assert!(
        text(&o.stderr).contains("device fatal"),
        "{}",
        text(&o.stderr)
    );
    let b = read_json(&dir.join("f.json"));
    let h = &b["health"]["before_teardown"];
    assert_eq!(h["fields"]["synd"], "0x1", "FW_INTERNAL_ERR: {h}");
    assert!(h["fatal"].as_str().unwrap().contains("fatal"), "{h}");
    assert!(
        b["after_failure"]["teardown_error"].is_string(),
        "a dead device cannot be torn down"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_report_is_written_whatever_happened() {
    let dir = scratch("report");
    // No --report: ./mlx5-selftest-DEVICE-YYYYMMDD-HHMMSS.json.
    let o = mlx5_in(&dir, &["selftest", "-q", "--device", "sim:cx6dx"]);
    assert_eq!(code(&o), 0);
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    let n = &names[0];
    assert!(
        n.starts_with("mlx5-selftest-sim-cx6dx-") && n.ends_with(".json") && n.len() == 44,
        "{n}"
    );
    assert!(text(&o.stdout).contains(&format!("report: {n} ")));

    // A fault option that never fired: every stage passed, exit 4, named.
    let o = mlx5_in(
        &dir,
        &[
            "selftest",
            "-q",
            "--fail-opcode",
            "init2init-qp:3:1",
            "--report",
            "u.json",
        ],
    );
    assert_eq!(code(&o), 4, "{}", text(&o.stderr));
    let b = read_json(&dir.join("u.json"));
    assert_eq!(b["exit_code"], 4);
    assert_eq!(b["error"]["kind"], "fault_not_fired");
    assert_eq!(b["unfired_faults"].as_array().unwrap().len(), 1);
    assert!(b["stages"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["result"] == "pass"));

    // Nowhere to write it: exit 5 once every stage passed.
    let o = mlx5_in(&dir, &["selftest", "-q", "--report", "no/such/dir/r.json"]);
    assert_eq!(code(&o), 5);
    assert!(
        text(&o.stderr).contains("cannot write the report: no/such/dir/r.json"),
        "{}",
        text(&o.stderr)
    );

    // No device: exit 3, and the report says why.
    let o = mlx5_in(
        &dir,
        &[
            "selftest",
            "--device",
            "vfio:0000:03:00.0",
            "--report",
            "v.json",
            "--json",
        ],
    );
    assert_eq!(code(&o), 3);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["report"], "v.json");
    let b = read_json(&dir.join("v.json"));
    check_bundle_common(&b, "vfio:0000:03:00.0");
    assert_eq!(b["error"]["kind"], "no_device");
    assert_eq!(b["exit_code"], 3);
    assert!(b["stages"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["result"] == "not run"));

    // A bad NTH is a usage error before anything runs.
    for bad in ["create-qp:3:1:0", "create-qp:3:1:x", "create-qp:3:1:2:3"] {
        let o = mlx5_in(
            &dir,
            &["selftest", "--fail-opcode", bad, "--report", "x.json"],
        );
        assert_eq!(code(&o), 2, "{bad}: {}", text(&o.stderr));
        assert!(!dir.join("x.json").exists(), "{bad}");
    }
    let help = text(&mlx5_in(&dir, &["selftest", "--help"]).stdout);
    for n in ["11-20 stage 1-10 failed", "--report <FILE>", "9 CQ resize"] {
        assert!(help.contains(n), "{n:?} in:\n{help}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
