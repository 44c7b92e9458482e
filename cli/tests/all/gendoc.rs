//! `mlx5 completions SHELL` and `mlx5 man`: generated from the argument
//! definitions, so every subcommand (and the options) appear in them.

use crate::common::mlx5_stdin;

/// The subcommands `mlx5 --help` lists (without `help`), checked against
/// the ones this test knows so a new one cannot be missed silently.
fn subcommands() -> Vec<String> {
    let o = mlx5_stdin(&["--help"], "");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let start = out.find("Commands:\n").expect("Commands section") + 10;
    let names: Vec<String> = out[start..]
        .lines()
        .take_while(|l| l.starts_with("  "))
        .filter(|l| l.as_bytes().get(2).is_some_and(|b| *b != b' '))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .filter(|n| n != "help")
        .collect();
    for known in [
        "demo",
        "selftest",
        "caps",
        "cmd",
        "trace",
        "replay",
        "diff",
        "run",
        "shell",
        "decode",
        "devices",
        "completions",
        "man",
        "stats",
    ] {
        assert!(names.iter().any(|n| n == known), "{known} not in {names:?}");
    }
    names
}

#[test]
fn every_shells_completions_mention_every_subcommand_and_option() {
    let subs = subcommands();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let o = mlx5_stdin(&["completions", shell], "");
        assert_eq!(o.status.code(), Some(0), "{shell}");
        let out = String::from_utf8_lossy(&o.stdout);
        for s in &subs {
            assert!(out.contains(s.as_str()), "{shell}: {s} missing");
        }
        for opt in ["device", "fail-opcode", "issi0", "dma-limit", "sysfs-root"] {
            assert!(out.contains(opt), "{shell}: --{opt} missing");
        }
    }
    let o = mlx5_stdin(&["completions", "tcsh"], "");
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn the_man_page_names_every_subcommand_and_each_has_its_own() {
    let subs = subcommands();
    let o = mlx5_stdin(&["man"], "");
    assert_eq!(o.status.code(), Some(0));
    let page = String::from_utf8_lossy(&o.stdout);
    assert!(
        page.starts_with(".ie") || page.contains(".TH mlx5 1"),
        "{page}"
    );
    assert!(page.contains(".SH SUBCOMMANDS"));
    for s in &subs {
        let entry = format!("mlx5\\-{}(1)", s.replace('-', "\\-"));
        assert!(page.contains(&entry), "{entry} missing");
        let o = mlx5_stdin(&["man", s], "");
        assert_eq!(o.status.code(), Some(0), "{s}");
        let sub = String::from_utf8_lossy(&o.stdout);
        assert!(sub.contains(&format!(".TH mlx5-{s} 1")), "{s}: {sub}");
        // The global options are on every page.
        assert!(sub.contains("\\-\\-device"), "{s}");
    }
    let o = mlx5_stdin(&["man", "cpas"], "");
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("did you mean: caps?"));
}
