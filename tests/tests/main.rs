//! The integration tests of the driver against the device model: one test
//! binary (`cargo test -p mlx5-tests --test integration`), one module per
//! file of this folder. Shared helpers are in the `mlx5-tests` library
//! (`tests/src`). `tests/README.md` says what to run for what and where a new
//! test goes.
//!
//! Cargo's test discovery is off for this crate (`autotests = false`): a new
//! file here runs only once it is declared below, and
//! `packaging::every_integration_test_file_is_declared_in_its_main_rs`
//! fails until it is (one check for every crate of the workspace).

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
mod blueflame;
mod qp_duplex;
mod qp_errors;
mod qp_faults;
mod qp_lifecycle;
mod qp_limit;
mod qp_random;
mod qp_resize;
mod qp_ring;

// Two hosts on one wire (RoCE v2/v1, InfiniBand), through the verbs facade.
mod two_hosts;
mod two_hosts_faults;
mod two_hosts_wrong;
mod udp_link;

// The verbs facade (`verbs::Verbs`).
mod mr_hostile;
mod mr_hostile_wire;
mod mr_protect;
mod mr_protect_rd;
mod verbs;
mod verbs_addresses;
mod verbs_channels;
mod verbs_cq;
mod verbs_cq_events;
mod verbs_cq_moderation;
mod verbs_error_cause;
mod verbs_fidelity;
mod verbs_own_rq;
mod verbs_poll_ex;
mod verbs_poll_route;
mod verbs_poll_send_route;
mod verbs_qp;
mod verbs_qp_events;
mod verbs_qp_modify;
mod verbs_qp_post;
mod verbs_qp_traffic;
mod verbs_random;
mod verbs_rdma;
mod verbs_rdma_wire;
mod verbs_srq;
mod verbs_ud;
mod verbs_ud_random;

// A hostile device; the fuzz targets as properties.
mod fuzz_props;
mod hostile;
