//! The demo sends every message through a real queue pair on every model
//! profile (the model's side door is never used) and the checks it prints
//! hold; the README shows its output as it is; the `demo` and `selftest`
//! examples of docs/cli.md run as shown.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn mlx5_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mlx5"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run mlx5")
}

fn mlx5(args: &[&str]) -> Output {
    mlx5_in(&std::env::temp_dir(), args)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exited, not killed")
}

fn json(args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.push("--json");
    let o = mlx5(&a);
    assert_eq!(code(&o), 0, "{args:?}: {}", text(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("JSON")
}

/// (profile, loopback mode, roce_en after bring-up, what the narration
/// says bring-up configured).
const PROFILES: [(&str, &str, bool, &str); 4] = [
    (
        "cx4lx",
        "roce",
        true,
        "RoCE v2 to the port's own address (bring-up set roce_en 0 -> 1; GID entry 1 = fe80:",
    ),
    (
        "cx5",
        "force_loopback",
        false,
        "force loopback (the QP path's fl bit; roce_en 0 as found, left alone; no GID used)",
    ),
    (
        "cx6dx",
        "force_loopback",
        true,
        "force loopback (the QP path's fl bit; bring-up set roce_en 0 -> 1; no GID used)",
    ),
    (
        "cx7",
        "force_loopback",
        true,
        "force loopback (the QP path's fl bit; bring-up set roce_en 0 -> 1; no GID used)",
    ),
];

#[test]
fn the_demo_sends_every_message_through_a_queue_pair_on_every_profile() {
    for (p, mode, roce_en, narrated) in PROFILES {
        let dev = format!("sim:{p}");
        let v = json(&["demo", "--device", &dev]);
        let s = &v["summary"];
        // The model counts every use of its side door (traffic injected
        // without a QP): none. Its traffic engine carried all 41 messages.
        assert_eq!(s["model_traffic"]["side_door_uses"], 0, "{p}: {s}");
        assert_eq!(s["model_traffic"]["messages"], 41, "{p}: {s}");
        assert_eq!(
            s["model_traffic"]["doorbells"], 8,
            "1 + 5 + 1 + 1 post_send calls"
        );
        assert_eq!(s["model_traffic"]["dropped_doorbells"], 0);
        assert_eq!(
            s["model_traffic"]["rnr_naks"], 0,
            "receives were always posted"
        );
        // The checks the demo prints.
        for k in ["sent", "received", "send_completions"] {
            assert_eq!(s[k], 41, "{p}: {k}: {s}");
        }
        for k in ["lost", "lost_sends", "bad"] {
            assert_eq!(s[k], 0, "{p}: {k}: {s}");
        }
        assert_eq!(s["loopback_mode"], mode, "{p}");
        assert_eq!(s["limit_events"], 1);
        assert_eq!(s["limit_rearmed"], true);
        assert_eq!(s["completion_events"], 1, "one per arm");
        assert_eq!(s["resize"]["from"], 255);
        assert_eq!(s["resize"]["to"], 1023);
        assert_eq!(s["resize"]["waiting"], 12);
        assert_eq!(s["all_pages_returned"], true);
        assert_eq!(s["model_objects_left"], 0);
        assert_eq!(s["violations"].as_array().unwrap().len(), 0);
        let (tx, rx) = (&s["sender_qpn"], &s["receiver_qpn"]);
        assert!(tx.is_u64() && rx.is_u64() && tx != rx, "{s}");
        let step = |id: &str| {
            v["steps"]
                .as_array()
                .unwrap()
                .iter()
                .find(|x| x["step"] == id)
                .unwrap_or_else(|| panic!("{p}: no step {id}"))
                .clone()
        };
        assert_eq!(step("bring-up")["loopback_mode"], mode);
        assert_eq!(step("bring-up")["roce_enabled"], roce_en, "{p}");
        assert!(step("bring-up")["dma_lkey"].is_u64());
        assert_eq!(step("connect")["sender_qpn"], *tx);
        assert_eq!(step("connect")["state"], "RTS");
        assert_eq!(step("traffic")["recv_waiting"], 20);
        assert_eq!(step("traffic")["send_waiting"], 20);
        assert_eq!(step("poll")["received"], 20);
        assert_eq!(step("poll")["send_completions"], 20);
        assert_eq!(step("limit")["limit_event_after_message"], 5);
        assert_eq!(step("resize")["lost"], 0);
        assert_eq!(step("destroy")["model_qps"], 0);

        // The human form says the same, and names the mode and its set-up.
        let o = mlx5(&["demo", "-q", "--device", &dev]);
        assert_eq!(code(&o), 0);
        let out = text(&o.stdout);
        for n in [
            &format!("loopback mode: {narrated}") as &str,
            "polled 20 completions beside them (wr_id 1000..=1019)",
            "side door used 0 times",
            "result           OK",
        ] {
            assert!(out.contains(n), "{p}: missing {n:?} in:\n{out}");
        }
    }
}

#[test]
fn the_trace_scenarios_send_through_queue_pairs_too() {
    // The mission's steps each needs: the limit step sends one message at
    // a time from 32 posted until fewer than 8 remain (25); the resize
    // step 12 left waiting and 4 after (16).
    for (scenario, n) in [("limit", 25), ("resize", 16)] {
        let v = json(&["trace", "--scenario", scenario]);
        let s = &v["summary"];
        assert_eq!(s["model_traffic"]["side_door_uses"], 0, "{scenario}: {s}");
        assert_eq!(s["model_traffic"]["messages"], n);
        assert_eq!(
            (s["sent"].as_u64(), s["received"].as_u64()),
            (Some(n), Some(n))
        );
        assert_eq!(s["send_completions"], n);
        let cmds = v["commands"].as_array().unwrap();
        let count = |op: &str| cmds.iter().filter(|c| c["opcode"] == op).count();
        assert_eq!(count("CREATE_QP"), 2, "{scenario}");
        assert_eq!(count("DESTROY_QP"), 2);
    }
    let v = json(&["trace", "--scenario", "resize"]);
    assert_eq!(v["summary"]["resize"]["waiting"], 12);
}

/// The ```text block after `marker` in `doc`.
fn block_after<'a>(doc: &'a str, marker: &str) -> &'a str {
    let at = doc.find(marker).expect("marker");
    let start = doc[at..].find("```text\n").expect("a text block") + at + 8;
    let end = doc[start..].find("```").expect("its end") + start;
    &doc[start..end]
}

#[test]
fn the_readme_shows_the_demo_output_as_it_is() {
    let readme = include_str!("../../../README.md");
    let shown = block_after(readme, "It prints (progress");
    let o = mlx5(&["demo", "-q"]);
    assert_eq!(code(&o), 0);
    let real = text(&o.stdout);
    if shown != real {
        let diff: Vec<String> = shown
            .lines()
            .zip(real.lines())
            .filter(|(a, b)| a != b)
            .take(5)
            .map(|(a, b)| format!("README: {a}\nreal:   {b}"))
            .collect();
        panic!(
            "README's demo output is stale (regenerate it with `mlx5 demo -q`):\n{}\n(README {} lines, real {})",
            diff.join("\n"),
            shown.lines().count(),
            real.lines().count()
        );
    }
}

/// One `$ mlx5 ...` example of docs/cli.md: its arguments, the exit code
/// its `# exit N` comment gives (0 without), and the lines it shows
/// (`...` for lines left out).
struct Example {
    args: Vec<String>,
    exit: i32,
    shown: Vec<String>,
}

fn examples(section: &str) -> Vec<Example> {
    let doc = include_str!("../../../docs/cli.md");
    let start = doc.find(&format!("## `{section}`")).expect("section");
    let end = doc[start + 3..]
        .find("\n## ")
        .map_or(doc.len(), |e| e + start + 3);
    let mut out: Vec<Example> = Vec::new();
    let mut in_block = false;
    for line in doc[start..end].lines() {
        if line.starts_with("```") {
            in_block = !in_block && line.len() > 3;
            continue;
        }
        if !in_block {
            continue;
        }
        if let Some(cmd) = line.strip_prefix("$ mlx5 ") {
            let (cmd, exit) = match cmd.split_once("# exit ") {
                Some((c, n)) => (c, n.trim().parse().expect("exit code")),
                None => (cmd, 0),
            };
            out.push(Example {
                args: cmd.split_whitespace().map(String::from).collect(),
                exit,
                shown: Vec::new(),
            });
        } else if let Some(ex) = out.last_mut() {
            if !line.starts_with('$') && !line.starts_with("mlx5 ") && !line.starts_with("jq ") {
                ex.shown.push(line.to_string());
            }
        }
    }
    out
}

/// Every shown line is a whole line of the output, in order (lines
/// starting `mlx5: ` are on stderr, the others on stdout).
fn check_shown(ex: &Example, o: &Output) {
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    let (mut outl, mut errl) = (out.lines(), err.lines());
    for want in ex.shown.iter().filter(|l| l.trim() != "...") {
        let lines = if want.starts_with("mlx5: ") {
            &mut errl
        } else {
            &mut outl
        };
        assert!(
            lines.any(|l| l.trim_end() == want.trim_end()),
            "docs/cli.md `mlx5 {}`: {want:?} not in the output (in order):\n{out}\n{err}",
            ex.args.join(" ")
        );
    }
}

#[test]
fn the_demo_and_selftest_examples_of_docs_cli_run_as_shown() {
    let dir = std::env::temp_dir().join(format!("mlx5-docs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for section in ["demo", "selftest"] {
        let exs = examples(section);
        assert!(exs.len() >= 3, "{section}: {} examples", exs.len());
        for ex in &exs {
            let args: Vec<&str> = ex.args.iter().map(String::as_str).collect();
            let o = mlx5_in(&dir, &args);
            assert_eq!(
                code(&o),
                ex.exit,
                "docs/cli.md `mlx5 {}`:\n{}",
                ex.args.join(" "),
                text(&o.stderr)
            );
            assert!(
                ex.shown.iter().any(|l| l.trim() != "..."),
                "{:?} shows nothing",
                ex.args
            );
            check_shown(ex, &o);
            if let Some(i) = args.iter().position(|a| *a == "--report") {
                let b: Value =
                    serde_json::from_str(&std::fs::read_to_string(dir.join(args[i + 1])).unwrap())
                        .unwrap();
                assert_eq!(b["exit_code"], ex.exit, "{args:?}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A narration line with its numbers masked (`0x6e1`, `20..=24`): what
/// the step said, whatever ran before it.
fn masked(line: &str) -> String {
    let mut out = String::new();
    let mut in_num = false;
    for w in line
        .trim()
        .split_inclusive(|c: char| !c.is_ascii_alphanumeric())
    {
        let word = w.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
        let num = !word.is_empty()
            && (word.bytes().all(|b| b.is_ascii_digit())
                || (word.starts_with("0x") && word[2..].bytes().all(|b| b.is_ascii_hexdigit())));
        if num {
            if !in_num {
                out.push('N');
            }
            in_num = true;
            out.push_str(&w[word.len()..]);
        } else {
            in_num = false;
            out.push_str(w);
        }
    }
    out
}

#[test]
fn the_selftest_runs_the_demos_steps_inside_its_stages() {
    // The demo's narration from its first step after bring-up to its
    // destroy step.
    let o = mlx5(&["demo", "-q"]);
    assert_eq!(code(&o), 0);
    let demo = text(&o.stdout);
    let from = demo.find("\n2. ").expect("step 2");
    let to = demo.find("\n11. Tear down").expect("the teardown step");
    let demo_lines: Vec<String> = demo[from..to]
        .lines()
        .filter(|l| l.starts_with("  "))
        .map(masked)
        .collect();
    assert!(demo_lines.len() >= 25, "{demo_lines:?}");
    // The self-test's stages 3 to 10, as its report keeps them.
    let dir = std::env::temp_dir().join(format!("mlx5-same-steps-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let o = mlx5_in(&dir, &["selftest", "-q", "--report", "s.json"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    let b: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("s.json")).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let selftest_lines: Vec<String> = b["stages"].as_array().unwrap()[2..]
        .iter()
        .flat_map(|s| s["details"]["lines"].as_array().unwrap().clone())
        .map(|l| masked(l.as_str().unwrap()))
        .collect();
    // Every line of the demo's steps, in order, among the self-test's
    // (which adds its own between them).
    let mut rest = selftest_lines.iter();
    for l in &demo_lines {
        assert!(
            rest.any(|s| s == l),
            "the demo's {l:?} is not in the self-test's stages (in order):\n{}",
            selftest_lines.join("\n")
        );
    }
    assert!(selftest_lines.len() > demo_lines.len());
}
