//! The `mlx5` binary end to end: every subcommand on the model, human and
//! JSON output, exit codes, injected faults, and `--device vfio:` without
//! the device.

use serde_json::Value;

use crate::common::{code, mlx5, stderr, stdout};

/// Run with `--json`, check the exit code, parse stdout.
fn json(args: &[&str], want_code: i32) -> Value {
    let mut a = args.to_vec();
    a.push("--json");
    let o = mlx5(&a);
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
    v
}

fn assert_has(text: &str, needles: &[&str], what: &str) {
    for n in needles {
        assert!(text.contains(n), "{what}: missing {n:?} in:\n{text}");
    }
}

#[test]
fn demo_on_every_profile_loses_nothing_and_returns_every_page() {
    for dev in ["sim", "sim:cx4lx", "sim:cx5", "sim:cx6dx", "sim:cx7"] {
        let o = mlx5(&["demo", "--device", dev]);
        let out = stdout(&o);
        assert_eq!(code(&o), 0, "{dev}:\n{out}\n{}", stderr(&o));
        assert_has(
            &out,
            &[
                "1. Bring-up",
                "firmware ",
                "ISSI ",
                "pages given to firmware: ",
                "capabilities: ",
                "loopback mode: ",
                "Create the CQs, the SRQ and the buffers",
                "Create and connect the queue pair",
                "RST2INIT, INIT2RTR, RTR2RTS on both",
                "both in RTS",
                "posted 32 receive requests",
                "SRQ limit 8: armed",
                "post_send: 20 SENDs (wr_id 1000..=1019",
                "the model's traffic engine carried each",
                "receive CQ: polled 20 completions",
                "send CQ: polled 20 completions beside them (wr_id 1000..=1019)",
                "poll_events returned SRQ_RQ_LIMIT",
                "re-armed the limit at 8: armed (lwm = 8)",
                "12 completions waiting in the 255-entry receive CQ",
                "MODIFY_CQ (resize) to 1023 entries",
                "the 12 from before the resize, then the 4 after, in order; 0 lost",
                "DESTROY_QP: sender QP 0x",
                "every page came back",
                "41 sent from QP 0x",
                "41 received and checked, 0 lost, 0 wrong",
                "send completions 41 of 41",
                "all returned",
                "0 objects left, 0 violations",
                "side door used 0 times",
                "result           OK",
            ],
            dev,
        );
        // Progress on stderr while waiting for firmware.
        assert_has(
            &stderr(&o),
            &[
                "waiting for the firmware to finish initialising",
                "firmware ready after",
            ],
            dev,
        );
    }
}

#[test]
fn demo_json_reports_zero_lost_and_all_pages_returned() {
    let v = json(&["demo", "--device", "sim:cx6dx"], 0);
    let s = &v["summary"];
    assert_eq!(s["lost"], 0, "{s}");
    assert_eq!(s["bad"], 0, "{s}");
    assert_eq!(s["sent"], 41);
    assert_eq!(s["received"], 41);
    assert_eq!(s["send_completions"], 41);
    assert_eq!(s["loopback_mode"], "force_loopback");
    assert_eq!(s["model_traffic"]["messages"], 41);
    assert_eq!(s["model_traffic"]["side_door_uses"], 0);
    assert_eq!(s["all_pages_returned"], true);
    assert_eq!(s["pages_left"], 0);
    assert!(s["pages_given"].as_u64().unwrap() > 0);
    assert_eq!(s["pages_given"], s["pages_returned"]);
    assert_eq!(s["limit_events"], 1);
    assert_eq!(s["limit_rearmed"], true);
    assert_eq!(s["resize"]["waiting"], 12);
    assert_eq!(s["model_objects_left"], 0);
    assert_eq!(v["device"], "sim:cx6dx");
    let steps: Vec<&str> = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap())
        .collect();
    assert_eq!(
        steps,
        [
            "bring-up", "create", "connect", "post", "arm", "traffic", "poll", "limit", "resize",
            "destroy", "teardown"
        ]
    );
    let fw = v["steps"][0]["firmware_version"].as_str().unwrap();
    assert_eq!(fw.split('.').count(), 3, "firmware version {fw:?}");
    assert_eq!(v["steps"][0]["issi"], 1);
}

#[test]
fn injected_failure_is_reported_with_opcode_status_and_syndrome() {
    let o = mlx5(&["demo", "--fail-opcode", "create-cq:bad_param_err:0x1234"]);
    assert_eq!(code(&o), 1);
    let err = stderr(&o);
    assert_has(
        &err,
        &[
            "CREATE_CQ",
            "BAD_PARAM_ERR",
            "syndrome 0x1234",
            "what to do",
        ],
        "stderr",
    );
    // The HCA is still torn down cleanly after the failure.
    assert_has(&stdout(&o), &["every page came back"], "stdout");

    let v = json(&["demo", "--fail-opcode", "CREATE_CQ:3:4660"], 1);
    let e = &v["error"];
    assert_eq!(e["kind"], "driver");
    assert_eq!(e["opcode"], "CREATE_CQ");
    assert_eq!(e["status"], "BAD_PARAM_ERR");
    assert_eq!(e["syndrome"], "0x1234");
    assert_eq!(e["errno"], 22);
    assert_eq!(v["injected_faults"]["fail"][0]["opcode"], "CREATE_CQ");
}

#[test]
fn a_stalled_command_times_out_and_a_dead_device_is_named() {
    let o = mlx5(&[
        "demo",
        "--stall-opcode",
        "create-rmp",
        "--cmd-timeout-ms",
        "500",
    ]);
    assert_eq!(code(&o), 1);
    assert_has(&stderr(&o), &["CREATE_RMP", "timed out"], "stall");

    let o = mlx5(&["demo", "--fatal-after", "28"]);
    assert_eq!(code(&o), 1);
    assert_has(&stderr(&o), &["device fatal", "FW_INTERNAL_ERR"], "fatal");

    // The statistics show the failure too.
    let v = json(
        &[
            "stats",
            "--fail-opcode",
            "modify-cq:bad_size_outs_cqes_err:0x40",
        ],
        1,
    );
    let ops = v["opcodes"].as_array().unwrap();
    let m = ops.iter().find(|o| o["opcode"] == "MODIFY_CQ").unwrap();
    assert_eq!(m["failures"], 1);
    assert_eq!(m["last"]["status"], "BAD_SIZE_OUTS_CQES_ERR");
    assert_eq!(m["last"]["syndrome"], "0x40");
}

#[test]
fn caps_human_and_json() {
    let o = mlx5(&["caps", "--device", "sim:cx7"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_has(
        &stdout(&o),
        &[
            "Capabilities of the device model, ConnectX-7 profile",
            "Completion queues",
            "entries per CQ",
            "Shared receive queues",
            "Event queues",
            "Firmware interface",
            "all back",
        ],
        "caps",
    );
    let v = json(&["caps", "--all"], 0);
    let cq = &v["capabilities"]["completion_queues"];
    assert_eq!(cq["cq_resize"], true);
    let max_cqe = cq["max_cqe"].as_u64().unwrap();
    assert!((max_cqe + 1).is_power_of_two() && max_cqe > 1000, "{cq}");
    let raw = &v["cmd_hca_cap"];
    let log = u64::from_str_radix(
        raw["log_max_cq_sz"]
            .as_str()
            .unwrap()
            .trim_start_matches("0x"),
        16,
    )
    .unwrap();
    assert_eq!(max_cqe, (1 << log) - 1, "grouped and raw agree");
    assert!(
        v["capabilities"]["shared_receive_queues"]["max_srq_wr"]
            .as_u64()
            .unwrap()
            > 0
    );
}

#[test]
fn cmd_sends_one_command_and_decodes_it() {
    let o = mlx5(&["cmd", "query-hca-cap", "op_mod=1"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_has(
        &stdout(&o),
        &[
            "QUERY_HCA_CAP(0x100) op_mod 0x1",
            "status: OK",
            "capability.log_max_cq_sz = ",
        ],
        "query-hca-cap",
    );

    let o = mlx5(&["cmd", "create-cq", "cq_context.log_cq_size=10"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_has(
        &stdout(&o),
        &[
            "CREATE_CQ(0x400)",
            "cq_context.log_cq_size = 0xa",
            "filled in by the tool",
            "cq_context.c_eqn_or_apu_element = ",
            "pas[..] = 16 page(s)",
            "status: OK",
            "cqn = ",
            "cleanup: DESTROY_CQ cqn",
            "all back",
        ],
        "create-cq",
    );

    let v = json(&["cmd", "create-cq", "cq_context.log_cq_size=4"], 0);
    assert_eq!(v["outcome"]["status"], "OK");
    assert!(v["output"]["cqn"].is_string(), "{v}");
    assert_eq!(v["cleanup"]["ok"], true);
    assert_eq!(v["commands_sent"], 2, "CREATE_CQ and its DESTROY_CQ");
}

#[test]
fn cmd_reports_a_firmware_refusal_with_status_name_and_syndrome() {
    // EQ 77 does not exist: the model refuses with BAD_RES_ERR.
    let args = [
        "cmd",
        "create-cq",
        "cq_context.log_cq_size=4",
        "cq_context.c_eqn_or_apu_element=77",
    ];
    let o = mlx5(&args);
    assert_eq!(code(&o), 1);
    assert_has(
        &stdout(&o),
        &[
            "status: BAD_RES_ERR",
            "syndrome 0x05000004",
            "the model's syndrome",
        ],
        "stdout",
    );
    assert_has(
        &stderr(&o),
        &["CREATE_CQ", "BAD_RES_ERR", "syndrome 0x5000004"],
        "stderr",
    );
    let v = json(&args, 1);
    assert_eq!(v["outcome"]["status"], "BAD_RES_ERR");
    assert_eq!(v["outcome"]["syndrome"], "0x5000004");
    assert_eq!(v["error"]["status"], "BAD_RES_ERR");
}

#[test]
fn bad_command_lines_exit_2_before_touching_the_device() {
    for (args, needle) in [
        (vec!["cmd", "create-qq"], "did you mean"),
        (
            vec!["cmd", "create-cq", "cq_context.log_cq_sz=3"],
            "cq_context.log_cq_size",
        ),
        (
            vec!["cmd", "create-cq", "cq_context.log_cq_size=33"],
            "5 bits",
        ),
        (vec!["cmd", "manage-pages"], "page manager"),
        (
            vec!["demo", "--device", "sim:cx9"],
            "cx4lx, cx5, cx6dx, cx7",
        ),
        (vec!["demo", "--device", "pci:1"], "vfio:"),
        (
            vec!["demo", "--fail-opcode", "create-cq:oops:1"],
            "unknown command status",
        ),
    ] {
        let o = mlx5(&args);
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
        assert_has(&stderr(&o), &[needle], &format!("{args:?}"));
        assert!(
            !stderr(&o).contains("waiting for the firmware"),
            "{args:?} touched the device"
        );
    }
}

#[test]
fn trace_prints_every_command_decoded_with_status_and_latency() {
    let o = mlx5(&["trace"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    assert_has(
        &out,
        &[
            "ENABLE_HCA(0x104) op_mod 0x0",
            "CREATE_CQ(0x400) op_mod 0x0  slot 0",
            "cq_context.log_cq_size = 0x8",
            "MODIFY_CQ(0x403) op_mod 0x1",
            "MANAGE_PAGES(0x108) op_mod 0x2",
            "DISABLE_HCA(0x105)",
            "  OK  in ",
            "result           OK",
        ],
        "trace",
    );
    let commands = out.lines().filter(|l| l.starts_with('[')).count();

    let o = mlx5(&["trace", "--scenario", "resize", "--hexdump"]);
    assert_eq!(code(&o), 0);
    assert_has(
        &stdout(&o),
        &[
            "dump command data CREATE_CQ(0x400) INPUT",
            "cmd[0]: 000: 04000000 00000000",
            "MODIFY_CQ(0x403) op_mod 0x1",
        ],
        "hexdump",
    );

    let v = json(&["trace"], 0);
    let cmds = v["commands"].as_array().unwrap();
    assert_eq!(cmds.len(), commands, "the same commands in both forms");
    assert_eq!(v["commands_sent"], commands as u64);
    let create = cmds.iter().find(|c| c["opcode"] == "CREATE_CQ").unwrap();
    assert_eq!(create["outcome"]["status"], "OK");
    assert_eq!(create["input"]["cq_context.log_cq_size"], "0x8");
    assert!(create["latency_ns"].as_u64().is_some());

    let v = json(&["trace", "--scenario", "limit"], 0);
    assert_eq!(v["summary"]["limit_events"], 1);
}

#[test]
fn stats_counts_every_opcode() {
    let o = mlx5(&["stats", "--scenario", "resize"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    assert_has(
        &out,
        &["opcode", "count", "failed", "MODIFY_CQ(0x403)", "total"],
        "stats",
    );
    let v = json(&["stats"], 0);
    let ops = v["opcodes"].as_array().unwrap();
    let count = |name: &str| {
        ops.iter()
            .find(|o| o["opcode"] == name)
            .map(|o| o["count"].as_u64().unwrap())
    };
    assert_eq!(count("CREATE_CQ"), Some(2), "send and receive CQ");
    assert_eq!(count("CREATE_QP"), Some(2), "sender and receiver");
    assert_eq!(count("RTR2RTS_QP"), Some(2));
    assert_eq!(count("DESTROY_QP"), Some(2));
    assert_eq!(count("MODIFY_CQ"), Some(1), "one resize");
    assert_eq!(count("ENABLE_HCA"), Some(1));
    assert_eq!(count("DISABLE_HCA"), Some(1));
    let total: u64 = ops.iter().map(|o| o["count"].as_u64().unwrap()).sum();
    assert_eq!(v["commands_sent"], total);
    assert!(ops.iter().all(|o| o["failures"] == 0));
}

#[test]
fn vfio_without_the_device_fails_with_the_helpful_message() {
    let o = mlx5(&["demo", "--device", "vfio:0000:03:00.0"]);
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    let err = stderr(&o);
    assert_has(
        &err,
        &["0000:03:00.0", "docs/hardware.md", "--device sim"],
        "vfio",
    );
    let v = json(&["caps", "--device", "vfio:0000:03:00.0"], 3);
    assert_eq!(v["error"]["kind"], "no_device");
    // Fault injection is refused on hardware, before anything is opened.
    let o = mlx5(&[
        "demo",
        "--device",
        "vfio:0000:03:00.0",
        "--fatal-after",
        "3",
    ]);
    assert_eq!(code(&o), 2);
    assert_has(&stderr(&o), &["only on the device model"], "faults on vfio");
}

#[test]
fn help_on_everything() {
    for sub in [
        &[][..],
        &["demo"],
        &["selftest"],
        &["caps"],
        &["cmd"],
        &["trace"],
        &["stats"],
    ] {
        let mut args = sub.to_vec();
        args.push("--help");
        let o = mlx5(&args);
        assert_eq!(code(&o), 0, "{args:?}");
        assert_has(
            &stdout(&o),
            &["Usage: mlx5", "--device", "--json"],
            &format!("{args:?}"),
        );
    }
    assert_has(
        &stdout(&mlx5(&["--help"])),
        &[
            "Exit codes:",
            "demo",
            "selftest",
            "caps",
            "cmd",
            "trace",
            "stats",
            "11-20",
        ],
        "help",
    );
    assert_has(
        &stdout(&mlx5(&["cmd", "--help"])),
        &["mlx5 cmd query-hca-cap op_mod=1"],
        "cmd help",
    );
    assert_eq!(code(&mlx5(&["frobnicate"])), 2);
}
