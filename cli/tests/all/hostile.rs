//! Hostile input: each input that once panicked, aborted on allocation,
//! was silently truncated or ended unclearly now ends with a clear error
//! and its documented exit code, within a time and memory cap (`ulimit
//! -v` on the run, a wall-clock limit on the test).

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{code, mlx5, mlx5_stdin, stderr, stdout};

/// Address space a run may use (KiB): far below what the old behaviour
/// asked for (4 GiB for a `ffffffff:` offset, tens of GB for `post n=`,
/// 1.6 GB for diffing two 20,000-command traces).
const MEM_KIB: u64 = 512 * 1024;
/// Wall-clock time a run may take: a guard against a hang or a
/// quadratic blow-up, not a speed measure (a debug build on a loaded
/// machine; the old `diff` of these traces took minutes and 1.6 GB).
const TIME: Duration = Duration::from_secs(300);

/// Run `mlx5 ARGS` with `stdin` (bytes) under the memory cap, in the
/// repository root; checks it ended within [`TIME`].
fn capped(args: &[&str], stdin: &[u8]) -> Output {
    let mut line = format!("ulimit -v {MEM_KIB} && exec \"$0\"");
    for i in 0..args.len() {
        line.push_str(&format!(" \"${}\"", i + 1));
    }
    let t = Instant::now();
    let mut c = Command::new("sh")
        .arg("-c")
        .arg(line)
        .arg(env!("CARGO_BIN_EXE_mlx5"))
        .args(args)
        .current_dir(crate::common::ROOT)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run mlx5 under sh");
    let _ = c.stdin.take().unwrap().write_all(stdin);
    let o = c.wait_with_output().unwrap();
    assert!(t.elapsed() < TIME, "{args:?} took {:?}", t.elapsed());
    o
}

/// The run exited `want` with an error message holding every needle, and
/// no Rust panic or internal form.
fn fails_with(o: &Output, want: i32, needles: &[&str], what: &str) {
    let err = stderr(o);
    assert_eq!(
        code(o),
        want,
        "{what}: stderr:\n{err}\nstdout:\n{}",
        stdout(o)
    );
    assert!(err.contains("mlx5: error: "), "{what}: {err}");
    for n in needles {
        assert!(err.contains(n), "{what}: {n:?} not in:\n{err}");
    }
    assert_no_internals(&err, what);
}

/// No Rust internals in what a user reads.
fn assert_no_internals(text: &str, what: &str) {
    for leak in [
        "panicked",
        "Some(",
        "None",
        "ParseIntError",
        "(Syndrome)",
        "Doorbell(",
        "internal error",
        "capacity overflow",
    ] {
        assert!(!text.contains(leak), "{what}: {leak:?} in:\n{text}");
    }
}

#[test]
fn a_dump_offset_that_wraps_is_a_usage_error() {
    let o = capped(&["decode", "--as", "cqe", "-"], b"ffffffffffffffff: 00\n");
    fails_with(&o, 2, &["line 1", "offset 0xffffffffffffffff"], "wrap");
}

#[test]
fn a_dump_offset_is_checked_before_anything_is_allocated() {
    for off in ["ffffffff", "100000", "fffff"] {
        let input = format!("{off}: 00 01\n");
        let o = capped(&["decode", "--as", "cqe", "-"], input.as_bytes());
        fails_with(&o, 2, &["largest buffer"], off);
    }
    // Within the bound the buffer is built as before.
    let o = capped(
        &["decode", "--as", "in", "-"],
        b"0: 08 0d 00 00 00 00 00 00\n",
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

#[test]
fn script_counts_are_checked_before_anything_is_built() {
    for (script, needles) in [
        (
            "queues\npair\npost n=18446744073709551615\n",
            &["line 3", "n=18446744073709551615 is out of range"][..],
        ),
        (
            "queues\npair\npost n=4294967296\n",
            &["line 3", "out of range"][..],
        ),
        (
            "queues\npair\npost n=65\n",
            &["line 3", "at most 64 more"][..],
        ),
        (
            "queues\npair\npost-recv n=4294967295\n",
            &["line 3", "the SRQ has room for 63 more"][..],
        ),
        (
            "queues\npair\npost-recv n=18446744073709551615\n",
            &["line 3", "out of range"][..],
        ),
    ] {
        let o = capped(&["run", "-", "-q"], script.as_bytes());
        fails_with(&o, 2, needles, script);
        // The session was still torn down cleanly.
        assert!(stdout(&o).contains("all back"), "{script}: {}", stdout(&o));
        let o = capped(&["shell", "-q"], script.as_bytes());
        assert_eq!(code(&o), 0, "{script}: {}", stderr(&o));
        assert!(
            needles.iter().all(|n| stderr(&o).contains(n)),
            "shell {script}: {}",
            stderr(&o)
        );
    }
}

#[test]
fn going_over_the_send_buffer_says_so_instead_of_internal_error() {
    let o = mlx5_stdin(&["run", "-", "-q"], "queues\npair\npost n=40\npost n=40\n");
    fails_with(
        &o,
        2,
        &[
            "line 4",
            "40 sends are in flight",
            "64 slots",
            "at most 24 more",
        ],
        "post over 64",
    );
    assert!(stderr(&o).contains("`poll`"), "{}", stderr(&o));
    // Polled in between, the same sends fit.
    let o = mlx5_stdin(
        &["run", "-", "-q"],
        "queues\npair\npost-recv n=60\npost n=40\npoll\npost n=20\npoll\nexpect received=20\n",
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

#[test]
fn script_values_are_parsed_into_their_width() {
    for (script, line, name) in [
        ("queues wr=4294967297\n", 1, "wr=4294967297"),
        ("queues cq=0x100000000\n", 1, "cq=4294967296"),
        ("queues\npair inline=4294967296\n", 2, "inline=4294967296"),
        ("queues\narm limit=4294967296\n", 2, "limit=4294967296"),
        (
            "queues\nresize entries=4294967296\n",
            2,
            "entries=4294967296",
        ),
        ("queues\npair\npost len=4294967295\n", 3, "len=4294967295"),
        ("queues\npair\npost len=257\n", 3, "len=257"),
    ] {
        let o = mlx5_stdin(&["run", "-", "-q"], script);
        fails_with(
            &o,
            2,
            &[&format!("line {line}: {name} is out of range")],
            script,
        );
    }
    // The largest length a slot holds is still sent whole.
    let o = mlx5_stdin(
        &["run", "-", "-q"],
        "queues\npair\npost-recv n=1\nsend len=256\nexpect received=1 bad=0\n",
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

#[test]
fn array_indexes_past_their_width_are_range_errors() {
    for idx in ["4294967296", "18446744073709551615", "0x100000000"] {
        let f = format!("pas[{idx}]=1");
        let o = mlx5(&["cmd", "create-cq", &f]);
        fails_with(&o, 2, &["out of range"], &f);
        assert!(!stderr(&o).contains("waiting for the firmware"), "{f}");
    }
    // The largest index a command holds is refused for its length, not
    // truncated either.
    let o = mlx5(&["cmd", "create-cq", "pas[4294967295]=1"]);
    fails_with(&o, 2, &["exceed"], "pas[2^32-1]");
}

/// A saved trace with one field of one command line replaced.
fn trace_with(field: &str, value: &str) -> String {
    let dir = std::env::temp_dir().join(format!("mlx5-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let base = dir.join("base.trace");
    let o = mlx5(&["trace", "-q", "--save", base.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = std::fs::read_to_string(&base).unwrap();
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let mut v: serde_json::Value = serde_json::from_str(&lines[1]).unwrap();
    v[field] = serde_json::from_str(value).unwrap();
    lines[1] = v.to_string();
    let p = dir.join(format!("{field}-{value}.trace"));
    std::fs::write(&p, lines.join("\n") + "\n").unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn trace_fields_past_their_width_are_refused_not_wrapped() {
    for (field, value, width) in [
        ("opcode_value", "66560", "16-bit"),
        ("op_mod", "65536", "16-bit"),
        ("status_value", "256", "8-bit"),
    ] {
        let p = trace_with(field, value);
        for args in [vec!["diff", &p, &p], vec!["replay", &p]] {
            let o = mlx5(&args);
            fails_with(&o, 2, &["line 2", field, width], &format!("{args:?}"));
        }
    }
    // A version past the tool's is named as a number.
    let p = trace_with("seq", "1");
    let text = std::fs::read_to_string(&p).unwrap();
    std::fs::write(&p, text.replacen("\"version\":1", "\"version\":99", 1)).unwrap();
    let o = mlx5(&["diff", &p, &p]);
    fails_with(&o, 2, &["trace format version 99"], "version 99");
}

#[test]
fn diff_of_two_20000_command_traces_runs_in_linear_memory() {
    let dir = std::env::temp_dir().join(format!("mlx5-hostile-diff-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let base = dir.join("base.trace");
    let o = mlx5(&["trace", "-q", "--save", base.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = std::fs::read_to_string(&base).unwrap();
    let mut lines = text.lines();
    let head = lines.next().unwrap();
    let run: Vec<serde_json::Value> = lines
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["phase"] == "run")
        .collect();
    // 20,000 run commands; the second trace has one command more in the
    // middle, so the alignment must find it.
    let build = |extra: bool| {
        let mut s = String::from(head);
        s.push('\n');
        for k in 0..20_000usize {
            let mut v = run[k % run.len()].clone();
            v["seq"] = serde_json::json!(k + 1);
            s.push_str(&v.to_string());
            s.push('\n');
            if extra && k == 10_000 {
                let mut n = run[0].clone();
                n["opcode_value"] = serde_json::json!(0x80d);
                n["opcode"] = serde_json::json!("NOP");
                s.push_str(&n.to_string());
                s.push('\n');
            }
        }
        s
    };
    let (a, b) = (dir.join("a.trace"), dir.join("b.trace"));
    std::fs::write(&a, build(false)).unwrap();
    std::fs::write(&b, build(true)).unwrap();
    let o = capped(
        &["diff", a.to_str().unwrap(), b.to_str().unwrap(), "--json"],
        b"",
    );
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let diffs = v["differences"].as_array().unwrap();
    assert!(
        diffs
            .iter()
            .any(|d| d["opcode"] == "NOP" && d["a"] == "(none)" && d["b"] == "sent"),
        "{v}"
    );
}

#[test]
fn cmd_teardown_hca_is_refused_before_the_device_is_touched() {
    for name in ["teardown-hca", "disable-hca", "init-hca", "enable-hca"] {
        let o = mlx5(&["cmd", name]);
        fails_with(
            &o,
            2,
            &["belongs to the tool's bring-up and teardown"],
            name,
        );
        assert!(!stderr(&o).contains("waiting for the firmware"), "{name}");
    }
    let o = mlx5_stdin(&["run", "-"], "nop\nteardown-hca\n");
    fails_with(&o, 2, &["line 2", "TEARDOWN_HCA"], "run teardown-hca");
}

#[test]
fn driver_errors_are_told_in_words() {
    let o = mlx5(&["demo", "-q", "--fatal-after", "33"]);
    fails_with(
        &o,
        1,
        &["device fatal: the health buffer reports a failure"],
        "fatal",
    );
    assert_no_internals(&stdout(&o), "fatal stdout");
    let o = mlx5(&["demo", "-q", "--fatal-after", "33", "--json"]);
    assert_no_internals(&stdout(&o), "fatal json");
}

#[test]
fn trace_save_to_a_bad_path_names_the_path_not_stdout() {
    let o = mlx5(&["trace", "-q", "--save", "/nonexistent-dir/x.trace"]);
    fails_with(
        &o,
        1,
        &["cannot write the trace to /nonexistent-dir/x.trace"],
        "save",
    );
    let err = stderr(&o);
    assert!(!err.contains("stdout"), "{err}");
    assert!(!err.contains("free space"), "{err}");
}

#[test]
fn the_selftest_report_error_is_printed_once() {
    let o = mlx5(&["selftest", "-q", "--report", "/nonexistent-dir/r.json"]);
    fails_with(&o, 5, &["cannot write the report"], "report");
    assert_eq!(
        stderr(&o).matches("cannot write the report").count(),
        1,
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_second_pair_is_refused_and_nothing_leaks() {
    let o = mlx5_stdin(&["run", "-"], "queues\npair\npair\n");
    fails_with(
        &o,
        2,
        &["line 3", "the QP pair exists already"],
        "pair twice",
    );
    assert!(!stderr(&o).contains("teardown"), "{}", stderr(&o));
    assert!(stdout(&o).contains("all back"), "{}", stdout(&o));
    // After `destroy`, a new set is fine.
    let o = mlx5_stdin(&["run", "-", "-q"], "queues\npair\ndestroy\nqueues\npair\n");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

#[test]
fn shell_input_that_is_not_text_ends_with_exit_2() {
    let o = capped(&["shell", "-q"], b"nop\n\xff\xfe\x00\nnop\n");
    fails_with(&o, 2, &["line 2 of the input is not UTF-8 text"], "shell");
    // The session was still torn down.
    assert!(
        stdout(&o).contains("teardown: 64 pages given, 64 returned"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn decode_op_mod_takes_hex_and_refuses_past_16_bits() {
    let dump = "docs/scripts/create-cq.log";
    let dec = mlx5(&[
        "decode",
        &format!("{}/{dump}", crate::common::ROOT),
        "--as",
        "out",
        "--op-mod",
        "0",
    ]);
    let hex = mlx5(&[
        "decode",
        &format!("{}/{dump}", crate::common::ROOT),
        "--as",
        "out",
        "--op-mod",
        "0x0",
    ]);
    assert_eq!(code(&dec), code(&hex), "{}", stderr(&hex));
    assert_eq!(stdout(&dec), stdout(&hex));
    let o = mlx5_stdin(
        &["decode", "--as", "cqe", "--op-mod", "0x10000", "-"],
        "00\n",
    );
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("out of range"), "{}", stderr(&o));
}

#[test]
fn errors_quote_long_tokens_truncated() {
    // One argument may be at most 128 KiB (Linux MAX_ARG_STRLEN); stdin
    // takes a megabyte.
    let arg = "a".repeat(100_000);
    for args in [
        vec!["cmd".to_string(), arg.clone()],
        vec!["cmd".into(), "create-cq".into(), format!("{arg}=1")],
        vec![
            "cmd".into(),
            "create-cq".into(),
            format!("cq_context.log_cq_size={arg}"),
        ],
    ] {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = mlx5(&a);
        assert_eq!(code(&o), 2);
        let err = stderr(&o);
        assert!(err.len() < 4096, "{} bytes of error", err.len());
        assert!(err.contains("bytes)"), "{err}");
    }
    let long = "a".repeat(1 << 20);
    let script = format!("{long}\n");
    let o = capped(&["run", "-"], script.as_bytes());
    fails_with(&o, 2, &["line 1", "(1048576 bytes)"], "script");
    assert!(stderr(&o).len() < 4096);
    let dump = format!("0: {long}\n");
    let o = capped(&["decode", "-"], dump.as_bytes());
    fails_with(&o, 2, &["line 1"], "dump");
    assert!(stderr(&o).len() < 4096, "{}", stderr(&o).len());
}
