//! `mlx5 run`: the scripts of docs/scripts on every model profile, each
//! statement kind, a failing `expect` (its line, exit code 4), a failing
//! command without an expect (exit 1), a parse error (exit 2, nothing
//! sent), stdin, variables, raw input, and the docs/cli.md examples.

use serde_json::Value;

use crate::common::{docs_examples, mlx5_stdin, ROOT};

fn run_json(script: &str, device: &str, want: i32) -> Value {
    let o = mlx5_stdin(&["run", "-", "--json", "-q", "--device", device], script);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}):\n{}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    assert_eq!(
        o.status.code(),
        Some(want),
        "{device}: {v:#}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(v["exit_code"], want);
    v
}

#[test]
fn every_statement_kind_passes_on_every_profile() {
    for f in ["docs/scripts/cq-session.mlx5", "docs/scripts/traffic.mlx5"] {
        let script = std::fs::read_to_string(format!("{ROOT}/{f}")).unwrap();
        for p in ["sim:cx4lx", "sim:cx5", "sim:cx6dx", "sim:cx7"] {
            let v = run_json(&script, p, 0);
            let st = v["statements"].as_array().unwrap();
            let code_lines = script
                .lines()
                .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
                .count();
            assert_eq!(st.len(), code_lines, "{f} {p}: every statement ran");
            assert!(st.iter().all(|s| s["result"] == "ok"), "{f} {p}: {st:#?}");
            assert_eq!(v["failed_line"], Value::Null);
        }
    }
}

#[test]
fn a_cq_session_binds_the_cqn_and_queries_what_was_modified() {
    let script = std::fs::read_to_string(format!("{ROOT}/docs/scripts/cq-session.mlx5")).unwrap();
    let v = run_json(&script, "sim", 0);
    let st = v["statements"].as_array().unwrap();
    let cqn = st[0]["output"]["cqn"].as_str().unwrap().to_string();
    assert_ne!(cqn, "0x0");
    // The query on line 7 used the bound CQN and read back the moderation.
    let q = st.iter().find(|s| s["line"] == 7).unwrap();
    assert_eq!(q["output"]["cq_context.cq_period"], "0x10", "{q}");
    assert_eq!(q["output"]["cq_context.cq_max_count"], "0x8", "{q}");
    // The tool filled the ring, the doorbell record, the UAR and the EQ.
    let filled = st[0]["filled_by_tool"].as_object().unwrap();
    for k in [
        "pas[..]",
        "cq_context.dbr_addr",
        "cq_context.uar_page",
        "cq_context.c_eqn_or_apu_element",
    ] {
        assert!(filled.contains_key(k), "{k} not filled: {filled:?}");
    }
    // The query after the destroy failed as expected; the raw NOP passed.
    let after = st.iter().find(|s| s["line"] == 10).unwrap();
    assert_eq!(after["status"], "BAD_RES_ERR");
    let nop = st.iter().find(|s| s["line"] == 12).unwrap();
    assert_eq!(nop["status"], "OK");
    assert_eq!(nop["commands"], 1);
}

#[test]
fn a_failing_expect_names_its_line_and_exits_4() {
    let script = "let cq = create-cq\n# moderation never set\nquery-cq cqn=$cq\nexpect cq_context.cq_period=16\nnop\n";
    let v = run_json(script, "sim", 4);
    assert_eq!(v["failed_line"], 4);
    assert_eq!(v["error"]["kind"], "expect");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("line 4") && msg.contains("cq_context.cq_period = 16: got 0x0"),
        "{msg}"
    );
    // The script stopped there: the NOP after it never ran, and the CQ
    // was destroyed before teardown.
    assert_eq!(v["statements"].as_array().unwrap().len(), 3);
    assert!(
        v["cleanup"][0].as_str().unwrap().starts_with("DESTROY_CQ"),
        "{v}"
    );
}

#[test]
fn a_failing_command_without_expect_exits_1_and_with_expect_passes() {
    let v = run_json("query-cq cqn=0x123\nnop\n", "sim", 1);
    assert_eq!(v["failed_line"], 1);
    assert_eq!(v["statements"][0]["status"], "BAD_RES_ERR");
    let v = run_json(
        "query-cq cqn=0x123\nexpect status=bad_res_err syndrome!=0\nnop\n",
        "sim",
        0,
    );
    assert_eq!(v["statements"].as_array().unwrap().len(), 3);
    // An injected failure is seen with its syndrome.
    let o = mlx5_stdin(
        &[
            "run",
            "-",
            "--json",
            "-q",
            "--fail-opcode",
            "create-cq:bad_param_err:0x1234",
        ],
        "create-cq\nexpect status=bad_param_err syndrome=0x1234\n",
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}

#[test]
fn a_script_that_does_not_parse_sends_nothing() {
    for (script, what) in [
        ("nop\ncreate-cq cq_context.log_cq_sise=3\n", "line 2"),
        ("frobnicate\n", "line 1"),
        ("expect ok\n", "line 1"),
        ("nop\nraw 0800\n", "line 2"),
        ("queues bogus=1\n", "line 1"),
    ] {
        let v = run_json(script, "sim", 2);
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains(what), "{script:?}: {msg}");
        assert_eq!(v.get("commands_sent"), None, "{v}");
    }
    // An unknown variable is found when the line runs.
    let v = run_json("nop\nquery-cq cqn=$nothing\n", "sim", 2);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no variable $nothing"),
        "{v}"
    );
}

#[test]
fn raw_input_is_sent_as_given_and_decoded() {
    // QUERY_ISSI as raw bytes: opcode 0x10a.
    let v = run_json(
        "raw 010a0000 00000000 00000000 00000000\nexpect ok current_issi=1\n",
        "sim",
        0,
    );
    assert_eq!(v["statements"][0]["output"]["current_issi"], "0x1", "{v}");
}

#[test]
fn the_script_examples_of_docs_cli_run_as_shown() {
    let n = docs_examples("## `run`");
    assert!(n >= 2, "{n} examples");
}
