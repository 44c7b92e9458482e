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
    // hal, mlx5-regs, driver, vfio-host, sim, cli, bare-metal.
    assert_eq!(checked.len(), 7, "publishable crates checked: {checked:?}");
}
