//! The `mlx5` binary under bad or unusual input: bounded options, the
//! register data of ACCESS_REG, malformed PCI addresses, the JSON error
//! document on every exit path, stdout write errors, fault options that
//! never fire, fields given twice, and the accounting printed after a
//! failure. Exit codes are part of each check.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{code, mlx5, stderr, stdout};

fn assert_has(text: &str, needles: &[&str], what: &str) {
    for n in needles {
        assert!(text.contains(n), "{what}: missing {n:?} in:\n{text}");
    }
}

/// Run, check the exit code, parse stdout as the one JSON document.
fn json_doc(args: &[&str], want_code: i32) -> Value {
    let o = mlx5(args);
    assert_eq!(
        code(&o),
        want_code,
        "{args:?}\nstdout:\n{}\nstderr:\n{}",
        stdout(&o),
        stderr(&o)
    );
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: stdout is not JSON ({e}):\n{}", stdout(&o)));
    assert_eq!(v["ok"], Value::Bool(want_code == 0), "{v}");
    assert_eq!(v["exit_code"], want_code, "{v}");
    if want_code != 0 {
        assert_eq!(v["error"]["exit_code"], want_code, "{v}");
        assert!(v["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
    }
    v
}

fn touched_the_device(o: &Output) -> bool {
    stderr(o).contains("waiting for the firmware")
}

#[test]
fn cmd_timeout_is_bounded_and_a_long_timeout_on_the_model_costs_no_wall_time() {
    for bad in ["18446744073709551615", "3600001", "0", "-5", "soon"] {
        let o = mlx5(&["demo", "--cmd-timeout-ms", bad]);
        assert_eq!(code(&o), 2, "{bad}: {}", stderr(&o));
        assert!(!touched_the_device(&o), "{bad}");
        if bad != "-5" {
            // (clap reads "-5" as an unknown short option instead)
            assert_has(&stderr(&o), &["--cmd-timeout-ms"], bad);
        }
    }
    let v = json_doc(
        &["demo", "--cmd-timeout-ms", "18446744073709551615", "--json"],
        2,
    );
    assert_eq!(v["error"]["kind"], "usage");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("1..=3600000"));

    // The longest allowed timeout on a command that never completes: the
    // model's clock skips ahead while the driver only waits.
    let t = Instant::now();
    let o = mlx5(&[
        "demo",
        "--stall-opcode",
        "create-cq",
        "--cmd-timeout-ms",
        "3600000",
    ]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert_has(&stderr(&o), &["CREATE_CQ", "timed out after 36"], "timeout");
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "a one-hour model timeout took {:?} of wall time",
        t.elapsed()
    );
}

#[test]
fn access_reg_takes_the_register_data_and_returns_the_register() {
    let he = if cfg!(target_endian = "big") {
        "1"
    } else {
        "0"
    };
    // Read: the tool sizes HOST_ENDIANNESS itself (16 bytes in, 16 out).
    let o = mlx5(&["cmd", "access-reg", "register_id=0x7004", "op_mod=1"]);
    assert_eq!(code(&o), 0, "{}\n{}", stdout(&o), stderr(&o));
    assert_has(
        &stdout(&o),
        &[
            "ACCESS_REG(0x805) op_mod 0x1",
            "register_data = 16 zero bytes",
            "status: OK",
            "register HOST_ENDIANNESS as firmware returned it:",
            &format!("he = {he}"),
        ],
        "read",
    );
    // Write, the data given as one hex number: the host's own endianness.
    let data = if cfg!(target_endian = "big") {
        "register_data=0x80000000000000000000000000000000"
    } else {
        "register_data=0x00000000000000000000000000000000"
    };
    let v = json_doc(
        &["cmd", "access-reg", "register_id=0x7004", data, "--json"],
        0,
    );
    assert_eq!(v["outcome"]["status"], "OK");
    assert_eq!(v["register"]["name"], "HOST_ENDIANNESS");
    assert_eq!(v["register"]["fields"]["he"], he);
    // The other endianness: firmware's refusal, with status and syndrome.
    let wrong = if cfg!(target_endian = "big") {
        "register_data[0]=0"
    } else {
        "register_data[0]=0x80000000"
    };
    let v = json_doc(
        &["cmd", "access-reg", "register_id=0x7004", wrong, "--json"],
        1,
    );
    assert_eq!(v["outcome"]["status"], "BAD_PARAM_ERR");
    assert_eq!(v["error"]["opcode"], "ACCESS_REG");
    // A register the tool cannot size, without data: refused before sending.
    let o = mlx5(&["cmd", "access-reg", "register_id=0xc00e"]);
    assert_eq!(code(&o), 2);
    assert_has(
        &stderr(&o),
        &["register_data=0x", "0xc00e"],
        "unknown register",
    );
    assert!(!touched_the_device(&o));
    // More data than the register holds.
    let o = mlx5(&[
        "cmd",
        "access-reg",
        "register_id=0x7004",
        "register_data[4]=0",
    ]);
    assert_eq!(code(&o), 2);
    assert_has(&stderr(&o), &["16 bytes"], "too long");
}

#[test]
fn query_hca_cap_op_mod_1_is_the_current_capabilities_and_0_the_maximum() {
    // The driver turns cmdif_checksum off with SET_HCA_CAP (as Linux does):
    // it shows in the maximum (op_mod 0), not in the current (op_mod 1).
    let cur = stdout(&mlx5(&["cmd", "query-hca-cap", "op_mod=1"]));
    let max = stdout(&mlx5(&["cmd", "query-hca-cap", "op_mod=0"]));
    assert!(!cur.contains("capability.cmdif_checksum"), "{cur}");
    assert!(max.contains("capability.cmdif_checksum = 0x3"), "{max}");
    let doc = include_str!("../../../docs/cli.md");
    let line = doc
        .lines()
        .find(|l| l.contains("mlx5 cmd query-hca-cap op_mod=1"))
        .expect("docs/cli.md shows query-hca-cap op_mod=1");
    assert!(
        line.contains("current") && !line.contains("maximum general"),
        "{line}"
    );
}

#[test]
fn a_malformed_pci_address_exits_2_with_the_format() {
    for addr in [
        "vfio:foo",
        "vfio:0000:03:00",
        "vfio:0000:03:20.0",
        "vfio:0000:03:00.8",
        "vfio:0000:3g:00.0",
        "vfio:1:2:3:4.0",
    ] {
        let o = mlx5(&["demo", "--device", addr]);
        assert_eq!(code(&o), 2, "{addr}: {}", stderr(&o));
        assert_has(
            &stderr(&o),
            &["is not a PCI address", "DDDD:BB:DD.F", "lspci -D"],
            addr,
        );
        assert!(!stderr(&o).contains("IOMMU"), "{addr}: {}", stderr(&o));
    }
    // The short form lspci prints is accepted and completed (then the open
    // fails on this machine: exit 3, the platform's message).
    let v = json_doc(&["caps", "--device", "vfio:03:00.0", "--json"], 3);
    assert_eq!(v["device"], "vfio:0000:03:00.0");
    assert_eq!(v["error"]["kind"], "no_device");
}

#[test]
fn json_prints_its_error_document_on_every_exit_path() {
    // Argument-parser errors (clap): unknown option, bad value, missing
    // subcommand, unknown subcommand, an option given twice.
    for args in [
        &["demo", "--bogus", "--json"][..],
        &["demo", "--fatal-after", "x", "--json"],
        &["--json"],
        &["frobnicate", "--json"],
        &["demo", "--device", "sim", "--device", "sim:cx7", "--json"],
        &["trace", "--scenario", "nope", "--json"],
    ] {
        let v = json_doc(args, 2);
        assert_eq!(v["error"]["kind"], "usage", "{args:?}: {v}");
    }
    // The tool's own usage errors, the device missing, a driver failure, a
    // failed check.
    assert_eq!(
        json_doc(&["demo", "--device", "sim:cx9", "--json"], 2)["error"]["kind"],
        "usage"
    );
    assert_eq!(
        json_doc(&["demo", "--device", "vfio:0000:03:00.0", "--json"], 3)["error"]["kind"],
        "no_device"
    );
    assert_eq!(
        json_doc(&["demo", "--fatal-after", "28", "--json"], 1)["error"]["kind"],
        "driver"
    );
    assert_eq!(
        json_doc(&["cmd", "nop", "--stall-opcode", "create-cq", "--json"], 4)["error"]["kind"],
        "fault_not_fired"
    );
    // Help is not an error: text, exit 0, even with --json.
    let o = mlx5(&["demo", "--help", "--json"]);
    assert_eq!(code(&o), 0);
    assert_has(&stdout(&o), &["Usage: mlx5 demo"], "help");
}

#[cfg(target_os = "linux")]
#[test]
fn a_write_error_on_stdout_exits_non_zero() {
    for json in [false, true] {
        let mut args = vec!["demo"];
        if json {
            args.push("--json");
        }
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full");
        let o = Command::new(env!("CARGO_BIN_EXE_mlx5"))
            .args(&args)
            .stdout(Stdio::from(full))
            .stderr(Stdio::piped())
            .output()
            .expect("run mlx5");
        assert_eq!(code(&o), 1, "json {json}: {}", stderr(&o));
        assert_has(
            &stderr(&o),
            &["cannot write the results to stdout", "No space left"],
            "stderr",
        );
        // The run carried on and tore the device down.
        assert_has(&stderr(&o), &["tearing down"], "teardown");
    }
}

#[test]
fn a_fault_option_that_never_fired_says_so_and_exits_non_zero() {
    for (args, needle) in [
        (
            &["cmd", "nop", "--fail-opcode", "create-cq:bad_param_err:0x1"][..],
            "--fail-opcode create-cq:bad_param_err:0x1 never fired: the run sent no CREATE_CQ command",
        ),
        (
            &["demo", "--stall-opcode", "init2init-qp"],
            "--stall-opcode init2init-qp never fired",
        ),
        (
            &["demo", "--fatal-after", "1000"],
            "--fatal-after 1000 never fired: the run sent only ",
        ),
        (
            // A scenario that never sends the opcode.
            &["stats", "--scenario", "resize", "--fail-opcode", "modify-rmp:3:1"],
            "the run sent no MODIFY_RMP command",
        ),
    ] {
        let o = mlx5(args);
        assert_eq!(code(&o), 4, "{args:?}: {}", stderr(&o));
        assert_has(&stderr(&o), &[needle], &format!("{args:?}"));
    }
    let v = json_doc(&["demo", "--fatal-after", "1000", "--json"], 4);
    assert_eq!(v["error"]["kind"], "fault_not_fired");
    assert_eq!(v["unfired_faults"].as_array().unwrap().len(), 1);
    // One option fired (the run failed: exit 1), another never did: the
    // failure wins, the other is still named.
    let o = mlx5(&[
        "demo",
        "--fail-opcode",
        "create-cq:bad_param_err:0x1234",
        "--fail-opcode",
        "modify-cq:bad_param_err:0x1",
    ]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert_has(
        &stderr(&o),
        &[
            "CREATE_CQ",
            "note: --fail-opcode modify-cq:bad_param_err:0x1 never fired",
        ],
        "mixed",
    );
    // The same opcode twice: the second needs a second command.
    let o = mlx5(&[
        "cmd",
        "nop",
        "--fail-opcode",
        "nop:3:1",
        "--fail-opcode",
        "nop:3:2",
    ]);
    assert_eq!(code(&o), 1);
    assert_has(
        &stderr(&o),
        &["note: --fail-opcode nop:bad_param_err:0x2 never fired: the run sent 1 NOP command(s)"],
        "twice",
    );
}

#[test]
fn a_field_given_twice_is_refused() {
    for (args, needle) in [
        (
            &[
                "cmd",
                "create-cq",
                "cq_context.log_cq_size=4",
                "cq_context.log_cq_size=5",
            ][..],
            "cq_context.log_cq_size is given twice",
        ),
        (
            &["cmd", "query-hca-cap", "op_mod=1", "op_mod=0"],
            "op_mod is given twice",
        ),
        (
            &[
                "cmd",
                "access-reg",
                "register_id=0x7004",
                "register_data=0x0000000000000000",
                "register_data[1]=1",
            ],
            "register_data[1] is given twice",
        ),
        (
            &["cmd", "create-cq", "pas[0]=0x1000", "pas[0]=0x2000"],
            "pas[0] is given twice",
        ),
        (
            &["demo", "--device", "sim", "--device", "sim:cx7"],
            "cannot be used multiple times",
        ),
    ] {
        let o = mlx5(args);
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
        assert_has(&stderr(&o), &[needle], &format!("{args:?}"));
        assert!(!touched_the_device(&o), "{args:?}");
    }
}

#[test]
fn after_a_failure_the_demo_still_prints_the_page_and_object_accounting() {
    // A command fails after the CQ exists: it is destroyed, teardown is
    // clean, and the summary says so.
    let o = mlx5(&["demo", "--fail-opcode", "create-rmp:bad_param_err:0x7"]);
    assert_eq!(code(&o), 1);
    assert_has(
        &stdout(&o),
        &[
            "stopped: creating the SRQ: CREATE_RMP",
            "after the failure: DESTROY_CQ: send CQ 0x",
            "DESTROY_CQ: receive CQ 0x",
            "3. Tear down",
            "firmware pages over the run: 64 given, 64 returned, 0 still held",
            "Summary",
            "commands         ",
            "firmware pages   64 given, 64 returned, 0 still held: all returned",
            "model            0 objects left, 0 violations",
            "result           FAILED: creating the SRQ: CREATE_RMP",
        ],
        "create-rmp",
    );

    // The device dies mid-run: teardown cannot finish; what the trace and
    // the model know is still printed.
    let o = mlx5(&["demo", "--fatal-after", "28"]);
    assert_eq!(code(&o), 1);
    assert_has(
        &stdout(&o),
        &[
            "teardown failed: device fatal",
            "firmware pages over the run (from the command trace): 64 given, 0 returned, 64 still held by firmware",
            "the model says: it holds 64 pages and ",
            "firmware pages   64 given, 0 returned, 64 still held (teardown did not finish",
            "pages held",
            "result           FAILED: ",
        ],
        "fatal",
    );
    let v = json_doc(&["demo", "--fatal-after", "28", "--json"], 1);
    let s = &v["summary"];
    assert_eq!(s["pages_given"], 64, "{s}");
    assert_eq!(s["pages_returned"], 0, "{s}");
    assert_eq!(s["all_pages_returned"], false);
    assert_eq!(s["model_pages_held"], 64);
    assert!(s["model_objects_left"].as_u64().unwrap() > 0, "{s}");
    assert!(s["teardown_error"]
        .as_str()
        .unwrap()
        .contains("device fatal"));

    // Bring-up fails: the driver unwound it; the accounting shows that.
    let o = mlx5(&["demo", "--fail-opcode", "init-hca:bad_param_err:0x1"]);
    assert_eq!(code(&o), 1);
    assert_has(
        &stdout(&o),
        &[
            "bring-up failed after ",
            "firmware pages (from the command trace): 64 given, 64 returned, 0 still held",
            "the model says: it holds 0 pages and 0 objects",
            "result           FAILED: bring-up: INIT_HCA",
        ],
        "bring-up",
    );
    let v = json_doc(
        &[
            "demo",
            "--fail-opcode",
            "init-hca:bad_param_err:0x1",
            "--json",
        ],
        1,
    );
    assert_eq!(v["summary"]["pages_given"], v["summary"]["pages_returned"]);
    assert_eq!(v["summary"]["model_objects_left"], 0);
}
