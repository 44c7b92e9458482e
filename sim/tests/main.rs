//! The model's integration tests: raw commands, doorbells and WQEs written
//! the way a driver writes them (no `mlx5-driver`), one test binary
//! (`cargo test -p mlx5-sim --test integration`), one module per file of
//! this folder. `common` is their shared hand-driven command queue;
//! `tests/README.md` at the top of the repository says what to run for what
//! and where a new test goes.

mod common;

// Bring-up, the command queue, reset, the clock.
mod bringup;
mod cmdq;
mod idle_clock;
mod reset;

// What Linux's mlx5_core sends while it probes, byte for byte; the device
// host interface a VMM uses (DMA callbacks, interrupt hook, clock, reset).
mod host_interface;
mod linux_probe;

// Event and completion queues, shared receive queues.
mod eq_cq;
mod srq_traffic;

// Queue pairs: commands, traffic, errors, memory keys and vports.
mod qp_cmds;
mod qp_cq;
mod qp_errors;
mod qp_keys_vport;
mod qp_traffic;

// Fault injection and the threaded mode; behaviours of docs/fidelity.md.
mod fidelity;
mod inject_modes;
mod qp_inject;

// A DevX client (rdma-core's VFIO provider's way) and its refusals.
mod devx_client;
mod devx_refusals;

// The wire: frames built and parsed (golden frames of Linux soft-RoCE), and
// captures decoded by tshark.
mod wire_capture;
mod wire_codec;

// Two hosts on one wire: who receives a frame and the wire's faults, then
// RC traffic segmented into packets over every transport, and recovery (or
// retry exhaustion) under faults and wrong destinations.
mod rdma_read_atomic;
mod two_host_faults;
mod two_hosts;
mod wire_segment;

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
