//! The driver crates build for `x86_64-unknown-none`: no std, no allocator.

use std::process::Command;

#[test]
fn driver_builds_for_x86_64_unknown_none() {
    let target_dir = concat!(env!("CARGO_TARGET_TMPDIR"), "/nostd");
    let out = Command::new(env!("CARGO"))
        .args([
            "build",
            "--offline",
            "-p",
            "mlx5-driver",
            "-p",
            "mlx5-regs",
            "-p",
            "mlx5-hal",
            "--target",
            "x86_64-unknown-none",
        ])
        .env("CARGO_TARGET_DIR", target_dir)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .expect("run cargo");
    assert!(
        out.status.success(),
        "no_std build failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
