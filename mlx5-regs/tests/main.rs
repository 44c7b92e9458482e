//! The integration tests of `mlx5-regs`: one test binary (`cargo test -p
//! mlx5-regs --test integration`), one module per file of this folder.
//! `data/` holds the kernel-derived layout tables `csv_layouts` checks
//! against; `tests/README.md` at the top of the repository says what to run
//! for what.

// The typed accessors, the decoder and the hexdump.
mod accessors;
// Every layout against the kernel-derived CSVs.
mod csv_layouts;
// The queue-pair, memory-key and vport commands at Linux's byte offsets.
mod qp_layouts;

/// Test discovery is off for this crate (`autotests = false`): a file in
/// this folder that is not declared above would never build or run. This
/// fails naming it.
#[test]
fn every_file_here_is_a_module_of_this_binary() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let main_rs = include_str!("main.rs");
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("tests/") {
        let path = entry.expect("directory entry").path();
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
            missing.push(name.to_owned());
        }
    }
    assert!(
        missing.is_empty(),
        "not declared in tests/main.rs: {missing:?}"
    );
}
