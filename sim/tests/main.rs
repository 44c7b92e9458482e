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
mod port_regs;
mod reset;

// What Linux's mlx5_core sends while it probes, byte for byte; the device
// host interface a VMM uses (DMA callbacks, interrupt hook, clock, reset).
mod host_interface;
mod linux_probe;

// Send doorbells that carry the whole WQE (BlueFlame).
mod blueflame;

// Event and completion queues, shared receive queues.
mod eq_cq;
mod srq_traffic;

// Queue pairs: commands, traffic, errors, memory keys and vports.
mod qp_cmds;
mod qp_cq;
mod qp_errors;
mod qp_keys_vport;
mod qp_traffic;
mod send_doorbell;

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
