//! Instruction-count probe for `post_recv` on a QP's own receive queue
//! (`Verbs::post_recv`), K requests per call: the same shape as the
//! `post_srq_recv` probe (`profile_facade_post`), for comparing the two and
//! for machines whose timers are too noisy:
//!
//! ```sh
//! cargo build --release -p mlx5-bench --example profile_facade_post_recv
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/cgr.out \
//!     target/release/examples/profile_facade_post_recv 1 16
//! callgrind_annotate --inclusive=yes /tmp/cgr.out | grep -E 'facade_post_recv \['
//! ```
//!
//! The arguments are the number of scatter entries (1 or 4) and the
//! requests per call K (default 1). The probe is `#[inline(never)]`:
//! divide callgrind's inclusive count by the number of requests printed.

use std::hint::black_box;

use mlx5_bench::facade::sges;
use mlx5_bench::facade_own_rq::OwnRqRig;
use mlx5_driver::verbs::{RecvWr, WorkCompletion};

#[inline(never)]
fn facade_post_recv(rig: &mut OwnRqRig, wrs: &[RecvWr<'_>]) {
    rig.ctx.post_recv(rig.qp, wrs).unwrap();
}

fn main() {
    let mut args = std::env::args().skip(1);
    let nsge: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let per_call: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    // As the SRQ probe: 255 requests a round in a ring of 256, 40 rounds.
    const WR: usize = 255;
    const ROUNDS: usize = 40;
    let mut rig = OwnRqRig::new(8, WR as u32, nsge as u32);
    let sges = sges(nsge);
    let wrs: Vec<RecvWr<'_>> = (0..WR as u64)
        .map(|i| RecvWr {
            wr_id: i,
            sges: &sges,
        })
        .collect();
    let mut wc = vec![WorkCompletion::EMPTY; 64];
    let mut requests = 0;
    for _ in 0..ROUNDS {
        for chunk in wrs.chunks(per_call) {
            facade_post_recv(&mut rig, black_box(chunk));
            requests += chunk.len();
        }
        // Untimed: the device completes every WQE in order, the consumer
        // takes them (checking their wr_ids).
        rig.complete_all(WR, &mut wc);
    }
    println!("{requests} requests of {nsge} SGE(s), {per_call} per call, through facade_post_recv");
}
