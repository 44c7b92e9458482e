//! Instruction-count probe for `post_srq_recv` one request per call: the
//! verbs facade (`Verbs::post_srq_recv`), the ring API (`SrqRing::post_list`
//! of one request, as the `facade_post` benchmark's `ring` contender) and
//! `SrqRing::post` + `ring_doorbell` (`ring_post`), for machines whose
//! timers are too noisy:
//!
//! ```sh
//! cargo build --release -p mlx5-bench --example profile_facade_post
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/cgp.out \
//!     target/release/examples/profile_facade_post 1
//! callgrind_annotate --inclusive=yes /tmp/cgp.out | grep -E '(facade|ring|ring_post)_one'
//! ```
//!
//! The argument is the number of scatter entries (1 or 4). Each probe is
//! `#[inline(never)]` and called once per request: divide callgrind's
//! inclusive count by the number of requests printed.

use std::hint::black_box;

use mlx5_bench::facade::{sges, Rig};
use mlx5_bench::facade_recv::RingSide;
use mlx5_driver::srq::Sge;
use mlx5_driver::verbs::RecvWr;

#[inline(never)]
fn facade_one(rig: &mut Rig, wr: &[RecvWr<'_>; 1]) {
    rig.ctx.post_srq_recv(rig.srq, wr).unwrap();
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
    let nsge: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1);
    const WR: usize = 255;
    const ROUNDS: usize = 40;
    let mut rig = Rig::new(8, WR as u32, nsge as u32);
    let mut ring = RingSide::new(8, WR, nsge);
    let mut ring_post = RingSide::new(8, WR, nsge);
    let sges = sges(nsge);
    let mut requests = 0;
    for _ in 0..ROUNDS {
        for i in 0..WR as u64 {
            let wr = [RecvWr {
                wr_id: i,
                sges: black_box(&sges),
            }];
            facade_one(&mut rig, &wr);
            ring_one(&mut ring, i, black_box(&sges));
            ring_post_one(&mut ring_post, i, black_box(&sges));
            requests += 1;
        }
        // Untimed: the device completes every WQE, the consumers take them.
        rig.device_completes(WR);
        assert_eq!(rig.drain(WR).len(), WR);
        for side in [&mut ring, &mut ring_post] {
            side.device_completes(WR);
            assert_eq!(side.drain(WR).len(), WR);
        }
    }
    println!(
        "{requests} requests of {nsge} SGE(s) through each of facade_one, ring_one, ring_post_one"
    );
}
