//! Instruction-count probe for `post_srq_recv`, K requests per call: the
//! verbs facade (`Verbs::post_srq_recv`) and, at one per call, the ring API (`SrqRing::post_list`
//! of one request, as the `facade_post` benchmark's `ring` contender) and
//! `SrqRing::post` + `ring_doorbell` (`ring_post`), for machines whose
//! timers are too noisy:
//!
//! ```sh
//! cargo build --release -p mlx5-bench --example profile_facade_post
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/cgp.out \
//!     target/release/examples/profile_facade_post 1 16
//! callgrind_annotate --inclusive=yes /tmp/cgp.out | grep -E 'facade_post|ring_one|ring_post_one'
//! ```
//!
//! The arguments are the number of scatter entries (1 or 4) and the
//! requests per call K (default 1). Each probe is `#[inline(never)]`:
//! divide callgrind's inclusive count by the number of requests printed.

use std::hint::black_box;

use mlx5_bench::facade::{sges, Rig};
use mlx5_bench::facade_recv::RingSide;
use mlx5_driver::srq::Sge;
use mlx5_driver::verbs::RecvWr;

#[inline(never)]
fn facade_post(rig: &mut Rig, wrs: &[RecvWr<'_>]) {
    rig.ctx.post_srq_recv(rig.srq, wrs).unwrap();
}

#[inline(never)]
fn ring_one(side: &mut RingSide, wr_id: u64, sge: &[Sge]) {
    side.r.srq.post_list([(wr_id, sge)]).unwrap();
}

#[inline(never)]
fn ring_post_one(side: &mut RingSide, wr_id: u64, sge: &[Sge]) {
    side.r.srq.post(wr_id, sge).unwrap();
    side.r.srq.ring_doorbell();
}

fn main() {
    let mut args = std::env::args().skip(1);
    let nsge: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let per_call: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    const WR: usize = 255;
    const ROUNDS: usize = 40;
    let mut rig = Rig::new(8, WR as u32, nsge as u32);
    let mut ring = RingSide::new(8, WR, nsge);
    let mut ring_post = RingSide::new(8, WR, nsge);
    let sges = sges(nsge);
    let wrs: Vec<RecvWr<'_>> = (0..WR as u64)
        .map(|i| RecvWr {
            wr_id: i,
            sges: &sges,
        })
        .collect();
    let mut requests = 0;
    for _ in 0..ROUNDS {
        for chunk in wrs.chunks(per_call) {
            facade_post(&mut rig, black_box(chunk));
            requests += chunk.len();
        }
        if per_call == 1 {
            for i in 0..WR as u64 {
                ring_one(&mut ring, i, black_box(&sges));
                ring_post_one(&mut ring_post, i, black_box(&sges));
            }
        }
        // Untimed: the device completes every WQE, the consumers take them.
        rig.device_completes(WR);
        assert_eq!(rig.drain(WR).len(), WR);
        if per_call == 1 {
            for side in [&mut ring, &mut ring_post] {
                side.device_completes(WR);
                assert_eq!(side.drain(WR).len(), WR);
            }
        }
    }
    println!(
        "{requests} requests of {nsge} SGE(s), {per_call} per call, through facade_post (and, at 1 per call, ring_one, ring_post_one)"
    );
}
