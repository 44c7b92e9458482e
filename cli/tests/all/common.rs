//! Helpers shared by the `mlx5` binary's tests: running it, reading its
//! output, and checking the docs/cli.md examples.
#![allow(dead_code)]

use std::io::Write;
use std::process::{Command, Output, Stdio};

/// The repository root: docs/cli.md examples name files relative to it.
pub const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// Run `mlx5 ARGS` (in the test's working directory, stdin closed).
pub fn mlx5(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mlx5"))
        .args(args)
        .output()
        .expect("run mlx5")
}

/// A run's stdout, lossily decoded.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A run's stderr, lossily decoded.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A run's exit code (it must have exited, not been killed).
pub fn code(o: &Output) -> i32 {
    o.status.code().expect("exited, not killed")
}

/// Run `mlx5 ARGS` in the repository root with `stdin`.
pub fn mlx5_stdin(args: &[&str], stdin: &str) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mlx5"))
        .args(args)
        .current_dir(ROOT)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run mlx5");
    // A command that does not read stdin may have exited already.
    let _ = c.stdin.take().unwrap().write_all(stdin.as_bytes());
    c.wait_with_output().unwrap()
}

/// Run the `$ mlx5 ...` examples of a docs/cli.md section (`# exit N` for
/// another exit code) and check that every line shown (but `...`) appears,
/// in order, on stdout (or on stderr for `mlx5: ` lines). Returns how many
/// examples ran.
pub fn docs_examples(heading: &str) -> usize {
    let doc = include_str!("../../../docs/cli.md");
    let start = doc.find(heading).expect("section");
    let end = doc[start + 3..]
        .find("\n## ")
        .map_or(doc.len(), |e| e + start + 3);
    let mut in_block = false;
    let mut cur: Option<(Vec<String>, i32, Vec<String>)> = None;
    let mut all = Vec::new();
    for line in doc[start..end].lines() {
        if line.starts_with("```") {
            in_block = !in_block && line.len() > 3;
            continue;
        }
        if !in_block {
            continue;
        }
        if let Some(cmd) = line.strip_prefix("$ mlx5 ") {
            all.extend(cur.take());
            let (cmd, exit) = match cmd.split_once("# exit ") {
                Some((c, e)) => (c, e.trim().parse().unwrap()),
                None => (cmd, 0),
            };
            cur = Some((
                cmd.split_whitespace().map(String::from).collect(),
                exit,
                Vec::new(),
            ));
        } else if let Some(c) = cur.as_mut() {
            c.2.push(line.to_string());
        }
    }
    all.extend(cur);
    let n = all.len();
    for (args, exit, shown) in all {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = mlx5_stdin(&a, "");
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
        );
        assert_eq!(o.status.code(), Some(exit), "{args:?}\n{out}\n{err}");
        let (mut ol, mut el) = (out.lines(), err.lines());
        for want in shown.iter().filter(|l| l.trim() != "...") {
            let lines = if want.starts_with("mlx5: ") {
                &mut el
            } else {
                &mut ol
            };
            assert!(
                lines.any(|l| l.trim_end() == want.trim_end()),
                "{args:?}: {want:?} not in:\n{out}\n{err}"
            );
        }
    }
    n
}
