//! The source tree of `cli/src`: no import cycle between its modules, at
//! the granularity of the groups (`app`, `cmd`, `scenario`, `regs`,
//! `common`) and of the modules inside them (`cmd::run`, `common::error`),
//! and no file over the project's size limit.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src");

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `cmd/run/parse.rs` -> `["cmd", "run", "parse"]`; `mod.rs` names its
/// directory; the crate roots are `[]`.
fn module_of(p: &Path) -> Vec<String> {
    let rel = p.strip_prefix(SRC).unwrap();
    let mut v: Vec<String> = rel
        .with_extension("")
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    if v.last().is_some_and(|l| l == "mod") {
        v.pop();
    }
    if v.len() == 1 && (v[0] == "lib" || v[0] == "main") {
        v.clear();
    }
    v
}

/// Every `crate::a::b...` path a file names, outside comments: plain
/// paths and the members of one level of braces (`crate::cmd::{run, x}`).
fn crate_paths(text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let code: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        let after = &rest[at + "crate::".len()..];
        // `$crate::` in macros is the same crate root.
        let mut segs = Vec::new();
        let mut s = after;
        loop {
            let end = s
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(s.len());
            if end == 0 {
                break;
            }
            segs.push(s[..end].to_string());
            s = &s[end..];
            match s.strip_prefix("::") {
                Some(n) => s = n,
                None => break,
            }
        }
        if let Some(inner) = s.strip_prefix('{') {
            let close = inner.find('}').unwrap_or(inner.len());
            for item in inner[..close].split(',') {
                let item = item.trim();
                let mut full = segs.clone();
                full.extend(
                    item.split(" as ")
                        .next()
                        .unwrap_or("")
                        .split("::")
                        .filter(|x| !x.is_empty() && *x != "self")
                        .map(String::from),
                );
                out.push(full);
            }
        } else {
            out.push(segs);
        }
        rest = after;
    }
    out
}

/// The module graph at depth `depth`: an edge from each file's module to
/// the longest known module a path it names starts with, both cut to
/// `depth` segments; edges inside one node are dropped.
fn graph(depth: usize) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(Path::new(SRC), &mut files);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|p| module_of(p)).collect();
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for p in &files {
        let from = module_of(p);
        if from.is_empty() {
            continue;
        }
        let from_node = from[..from.len().min(depth)].join("::");
        let text = std::fs::read_to_string(p).unwrap();
        for path in crate_paths(&text) {
            let known = (1..=path.len())
                .rev()
                .map(|n| path[..n].to_vec())
                .find(|m| modules.contains(m));
            let Some(to) = known else { continue };
            let to_node = to[..to.len().min(depth)].join("::");
            // A group's own parent module (`cmd` from `cmd::run`) is not a
            // node of its own at depth 2.
            if to_node != from_node && !from_node.starts_with(&format!("{to_node}::")) {
                g.entry(from_node.clone()).or_default().insert(to_node);
            }
        }
    }
    g
}

/// A cycle of `g`, if there is one.
fn find_cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(n.to_string(), 1);
        stack.push(n.to_string());
        for m in g.get(n).into_iter().flatten() {
            match state.get(m.as_str()).copied().unwrap_or(0) {
                1 => {
                    let at = stack.iter().position(|s| s == m).unwrap();
                    let mut c = stack[at..].to_vec();
                    c.push(m.clone());
                    return Some(c);
                }
                0 => {
                    if let Some(c) = visit(m, g, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in g.keys() {
        if state.get(n.as_str()).copied().unwrap_or(0) == 0 {
            if let Some(c) = visit(n, g, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

#[test]
fn the_cycle_finder_finds_a_cycle() {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("c".into());
    assert_eq!(find_cycle(&g), None);
    g.entry("c".into()).or_default().insert("a".into());
    assert_eq!(
        find_cycle(&g),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    let p = crate_paths("use crate::cmd::{run as script, caps::table};\n// crate::x\nlet a = crate::common::error::quote(s);");
    assert_eq!(
        p,
        vec![
            vec!["cmd".to_string(), "run".into()],
            vec!["cmd".to_string(), "caps".into(), "table".into()],
            vec!["common".to_string(), "error".into(), "quote".into()],
        ]
    );
}

#[test]
fn no_import_cycle_between_the_modules_of_cli() {
    for depth in [1, 2] {
        let g = graph(depth);
        assert!(g.len() >= 4, "depth {depth}: only {g:?}");
        if let Some(c) = find_cycle(&g) {
            panic!("depth {depth}: import cycle {}", c.join(" -> "));
        }
    }
    // The groups depend downwards only.
    let g = graph(1);
    let order = ["common", "regs", "scenario", "cmd", "app"];
    for (from, tos) in &g {
        let Some(i) = order.iter().position(|o| o == from) else {
            continue;
        };
        for to in tos {
            if let Some(j) = order.iter().position(|o| o == to) {
                assert!(j < i, "{from} depends on {to}, a group above it");
            }
        }
    }
}

#[test]
fn every_source_file_is_under_the_size_limit() {
    let mut files = Vec::new();
    rust_files(Path::new(SRC), &mut files);
    for p in files {
        let n = std::fs::read_to_string(&p).unwrap().lines().count();
        assert!(n <= 650, "{}: {n} lines", p.display());
    }
}
