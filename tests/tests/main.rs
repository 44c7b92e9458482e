//! The integration tests of the driver against the device model: one test
//! binary (`cargo test -p mlx5-tests --test integration`), one module per
//! file of this folder. Shared helpers are in the `mlx5-tests` library
//! (`tests/src`). `tests/README.md` says what to run for what and where a new
//! test goes.
//!
//! Cargo's test discovery is off for this crate (`autotests = false`): a new
//! file here runs only once it is declared below, and
//! `every_file_here_is_a_module_of_this_binary` fails until it is.

// The public API, packaging, object sizes.
mod api;
mod errors;
mod in_place;
mod packaging;

// Bring-up, commands, pages, health, bounded waits.
mod bringup;
mod concurrency;
mod dead_device;
#[cfg(feature = "driver-log")]
mod diag_log;
mod fault_sweep;
mod faults;
mod health;
mod pages;
mod timeouts;

// Event queues, completion queues, shared receive queues (`Hca` level).
mod cq;
mod cq_events;
mod cq_moderation;
mod cq_moderation_refusals;
mod cq_prop;
mod events;
mod srq;
mod stale_events;

// Queue pairs and traffic (`Hca` level).
mod qp_duplex;
mod qp_errors;
mod qp_faults;
mod qp_lifecycle;
mod qp_limit;
mod qp_random;
mod qp_resize;
mod qp_ring;

// The verbs facade (`verbs::Verbs`).
mod mr_hostile;
mod mr_protect;
mod verbs;
mod verbs_channels;
mod verbs_cq;
mod verbs_cq_events;
mod verbs_cq_moderation;
mod verbs_error_cause;
mod verbs_fidelity;
mod verbs_own_rq;
mod verbs_poll_ex;
mod verbs_poll_route;
mod verbs_qp;
mod verbs_qp_events;
mod verbs_qp_modify;
mod verbs_qp_post;
mod verbs_qp_traffic;
mod verbs_random;
mod verbs_rdma;
mod verbs_rdma_wire;
mod verbs_srq;

// A hostile device; the fuzz targets as properties.
mod fuzz_props;
mod hostile;

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
