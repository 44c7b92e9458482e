//! The modules of `cq` depend on each other in one direction only: no
//! import cycle. Read from the sources (`super::x`, `crate::cq::x` and the
//! names `cq/mod.rs` re-exports), so a new `use` that closes a cycle fails
//! here rather than in review.

extern crate std;

use std::collections::{BTreeMap, BTreeSet};
use std::string::{String, ToString};
use std::vec::Vec;

/// The sources of `cq`: each file's module (`ring/*` belongs to `ring`).
const SOURCES: &[(&str, &str)] = &[
    ("arm", include_str!("arm.rs")),
    ("cmd", include_str!("cmd.rs")),
    ("moderation", include_str!("moderation.rs")),
    ("queue", include_str!("queue.rs")),
    ("ring", include_str!("ring.rs")),
    ("ring", include_str!("ring/clean.rs")),
    ("ring", include_str!("ring/cqe.rs")),
    ("ring", include_str!("ring/reader.rs")),
    ("syndrome", include_str!("syndrome.rs")),
];

const MOD_RS: &str = include_str!("mod.rs");

/// Which module each name `cq/mod.rs` re-exports comes from.
fn reexports() -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    let text = MOD_RS.replace('\n', " ");
    for stmt in text.split(';') {
        let Some(rest) = stmt.trim().split("use ").nth(1) else {
            continue;
        };
        let Some((module, names)) = rest.split_once("::") else {
            continue;
        };
        for name in names.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            if !name.is_empty() {
                map.insert(name.to_string(), module.trim().to_string());
            }
        }
    }
    map
}

/// The `cq` modules `text` (of module `me`, in file `file_in_ring`)
/// refers to: `super::X` in a top-level file, `super::super::X` in a file
/// under `ring/`, `crate::cq::X` anywhere; X a module or a re-exported
/// name. Test modules are left out: they may reach anything.
fn edges(me: &str, in_ring_dir: bool, text: &str, names: &BTreeMap<String, String>) -> Vec<String> {
    let modules: BTreeSet<&str> = SOURCES.iter().map(|(m, _)| *m).collect();
    let code = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    let prefixes: &[&str] = if in_ring_dir {
        &["super::super::", "crate::cq::"]
    } else {
        &["super::", "crate::cq::"]
    };
    let mut out = Vec::new();
    for p in prefixes {
        for (i, _) in code.match_indices(p) {
            if *p == "super::" && code[..i].ends_with("super::") {
                continue;
            }
            let rest = &code[i + p.len()..];
            let word: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let target = if modules.contains(word.as_str()) {
                Some(word.clone())
            } else {
                names.get(&word).cloned()
            };
            if let Some(t) = target {
                if t != me && !out.contains(&t) {
                    out.push(t);
                }
            }
        }
    }
    out
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let names = reexports();
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (i, (m, text)) in SOURCES.iter().enumerate() {
        // ring.rs (index 4) is the ring module itself; the next three are
        // under ring/.
        let in_ring_dir = (5..8).contains(&i);
        let e = g.entry(m.to_string()).or_default();
        e.extend(edges(m, in_ring_dir, text, &names));
    }
    g
}

/// A cycle through `start`, if any (depth-first).
fn cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        g: &BTreeMap<String, BTreeSet<String>>,
        n: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == n) {
            let mut c = path[i..].to_vec();
            c.push(n.to_string());
            return Some(c);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_string());
        for next in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(g, next, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for n in g.keys() {
        if let Some(c) = visit(g, n, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

#[test]
fn no_import_cycle_between_the_cq_modules() {
    let g = graph();
    // The parser sees the edges that are known to exist.
    assert!(
        g["queue"].contains("ring") && g["queue"].contains("cmd"),
        "{g:?}"
    );
    assert!(g["cmd"].contains("moderation"), "{g:?}");
    assert!(g["ring"].contains("syndrome"), "{g:?}");
    assert_eq!(cycle(&g), None, "{g:?}");
}

#[test]
fn the_cycle_finder_finds_a_cycle() {
    let mut g = graph();
    g.get_mut("ring").unwrap().insert("queue".to_string());
    let c = cycle(&g).expect("ring -> queue -> ring");
    assert!(c.contains(&"ring".to_string()) && c.contains(&"queue".to_string()));
}
