//! Records the git commit the tool is built from (`MLX5_GIT_COMMIT`), for
//! `mlx5 selftest`'s report. Outside a git checkout (a crates.io download)
//! nothing is set and the report says the commit is unknown.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if let Some(commit) = git(&["rev-parse", "HEAD"]) {
        println!("cargo:rustc-env=MLX5_GIT_COMMIT={commit}");
    }
    // Build again when HEAD moves: HEAD itself (a checkout) and the branch
    // it points at (a commit). Only existing files: a missing one would
    // make cargo run this script on every build.
    let mut watch = vec![git(&["rev-parse", "--git-path", "HEAD"])];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watch.push(git(&["rev-parse", "--git-path", &branch]));
    }
    for p in watch.into_iter().flatten() {
        if Path::new(&p).exists() {
            println!("cargo:rerun-if-changed={p}");
        }
    }
}
