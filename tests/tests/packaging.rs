//! Every publishable crate carries the licence texts in its own folder, so
//! `cargo package` puts them in the crate (a package holds only files under
//! its folder). They are symlinks to the top-level files; the test reads them
//! through the links and compares the text.

use std::fs;
use std::path::Path;

/// The workspace members, read from the top-level Cargo.toml.
fn members(root: &Path) -> Vec<String> {
    let toml = fs::read_to_string(root.join("Cargo.toml")).expect("workspace Cargo.toml");
    let line = toml
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .expect("a members line");
    line.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_publishable_crate_carries_both_licences() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut checked = Vec::new();
    for m in members(&root) {
        let manifest = fs::read_to_string(root.join(&m).join("Cargo.toml")).unwrap();
        if manifest.lines().any(|l| l.trim() == "publish = false") {
            continue;
        }
        for lic in ["LICENSE-MIT", "LICENSE-APACHE"] {
            let top = fs::read_to_string(root.join(lic)).unwrap();
            let here = fs::read_to_string(root.join(&m).join(lic))
                .unwrap_or_else(|e| panic!("{m}/{lic}: {e}"));
            assert_eq!(here, top, "{m}/{lic} differs from the top-level {lic}");
        }
        checked.push(m);
    }
    // hal, mlx5-regs, driver, vfio-host, sim, testbed, cli, bare-metal.
    assert_eq!(checked.len(), 8, "publishable crates checked: {checked:?}");
}

/// The test-binary roots of a crate: `tests/main.rs` (test discovery off)
/// or `tests/<dir>/main.rs` (one binary from a folder).
fn test_roots(krate: &Path) -> Vec<std::path::PathBuf> {
    let dir = krate.join("tests");
    let mut roots = Vec::new();
    if dir.join("main.rs").is_file() {
        roots.push(dir.clone());
    }
    for entry in fs::read_dir(&dir).into_iter().flatten() {
        let path = entry.expect("directory entry").path();
        if path.join("main.rs").is_file() {
            roots.push(path);
        }
    }
    roots
}

/// Every crate keeps its integration tests in one binary whose `main.rs`
/// declares one module per file of its folder. Cargo builds only what
/// `main.rs` declares, so a file left out would never build or run; this
/// fails naming it (one check for the whole workspace).
#[test]
fn every_integration_test_file_is_declared_in_its_main_rs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut missing = Vec::new();
    let mut binaries = 0;
    for m in members(&root) {
        for dir in test_roots(&root.join(&m)) {
            binaries += 1;
            let main_rs = fs::read_to_string(dir.join("main.rs")).unwrap();
            for entry in fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                let name = if path.join("mod.rs").is_file() {
                    path.file_name()
                } else if path.extension().is_some_and(|e| e == "rs") {
                    path.file_stem()
                } else {
                    continue;
                };
                let name = name.and_then(|n| n.to_str()).unwrap_or_default();
                let line = format!("mod {name};");
                if name != "main" && !main_rs.lines().any(|l| l.trim() == line) {
                    missing.push(format!("{}: {name}", dir.display()));
                }
            }
        }
    }
    assert!(missing.is_empty(), "not declared in main.rs: {missing:?}");
    // bench, mlx5-regs, sim, the driver's tests, the CLI's.
    assert!(binaries >= 5, "only {binaries} test binaries found");
}
