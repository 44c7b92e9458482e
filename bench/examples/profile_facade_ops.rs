//! Instruction-count probe for `Verbs::post_send` of the operations beside
//! the RC SEND the `profile_facade_send` probe counts: a UD SEND (through
//! an address handle) and, on an RC QP, RDMA WRITE, RDMA READ, FETCH_ADD
//! and CMP_SWAP of the same shape (one gather entry: 1 KiB for the SENDs,
//! WRITE and READ, 8 bytes for the atomics), for comparing them with the
//! RC SEND and the WRITE (`benches/facade.rs` `facade_send_ud` and
//! `benches/send.rs` `post_rdma` time the same pairs):
//!
//! ```sh
//! cargo build --release -p mlx5-bench --example profile_facade_ops
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/cgo.out \
//!     target/release/examples/profile_facade_ops ud 1
//! callgrind_annotate --inclusive=yes /tmp/cgo.out | grep -E 'facade_post \['
//! ```
//!
//! Arguments: `send`, `ud`, `write`, `read`, `fetch_add` or `cmp_swap`,
//! then the requests per post call (default 1). The probe is
//! `#[inline(never)]`: divide its inclusive count by the number of
//! requests printed. The doorbells go to a register the model does not
//! see (`QuietHal`); the benchmark plays the device, retiring each round's
//! WQEs with one CQE, untimed.

use std::hint::black_box;

use mlx5_bench::facade::sges;
use mlx5_bench::facade_send::{SendRig, SEND_WR};
use mlx5_driver::srq::Sge;
use mlx5_driver::verbs::{SendFlags, SendWr, WrOpcode};

#[inline(never)]
fn facade_post(rig: &mut SendRig, wrs: &[SendWr<'_>]) {
    rig.ctx.post_send(rig.qp, wrs).unwrap();
}

fn main() {
    let mut args = std::env::args().skip(1);
    let op = args.next().unwrap_or_else(|| "send".into());
    let per_call: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    const QKEY: u32 = 0x1111_1111;
    let (mut rig, ah) = if op == "ud" {
        let (rig, ah) = SendRig::new_ud(8, QKEY);
        (rig, Some(ah))
    } else {
        (SendRig::new(8), None)
    };
    // The verbs opcode, the WQE opcode its CQE names, the entry's length.
    let (opcode, wqe_opcode, len) = match op.as_str() {
        "send" | "ud" => (WrOpcode::Send, 0x0a, 1024),
        "write" => (WrOpcode::RdmaWrite, 0x08, 1024),
        "read" => (WrOpcode::RdmaRead, 0x10, 1024),
        "fetch_add" => (WrOpcode::AtomicFetchAndAdd, 0x12, 8),
        "cmp_swap" => (WrOpcode::AtomicCmpAndSwp, 0x11, 8),
        other => panic!("unknown operation {other:?}"),
    };
    let sge: Vec<Sge> = sges(1)
        .into_iter()
        .map(|s| Sge { length: len, ..s })
        .collect();
    let qpn = rig.qpn;
    let wrs: Vec<SendWr<'_>> = (0..SEND_WR as u64)
        .map(|i| SendWr {
            wr_id: i,
            opcode,
            send_flags: SendFlags::SIGNALED,
            sg_list: &sge,
            remote_addr: 0x20_0000 + i * 64,
            rkey: 0x1234,
            compare_add: 1,
            swap: 2,
            ah,
            remote_qpn: qpn,
            remote_qkey: QKEY,
            ..SendWr::EMPTY
        })
        .collect();
    let rounds = 100;
    for _ in 0..rounds {
        let p0 = rig.producer();
        for chunk in wrs.chunks(per_call) {
            facade_post(&mut rig, black_box(chunk));
        }
        // Untimed: one CQE for the last WQE retires the round.
        rig.retire_of(wqe_opcode, p0, wrs.len());
    }
    assert_eq!(rig.ctx.stats().unmatched_cqes, 0);
    println!(
        "{} requests of {op}, {per_call} per call, through facade_post",
        rounds * wrs.len()
    );
}
