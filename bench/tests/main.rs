//! The benchmarks' own checks: what a benchmark times does what the driver
//! does (same bytes, same completions). One test binary (`cargo test -p
//! mlx5-bench --test integration`), one module per file of this folder.

// The receive blocks of the facade benchmarks return the same completions.
mod facade_blocks;
// The raw send baseline writes the same ring bytes as the driver.
mod raw_send;

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
