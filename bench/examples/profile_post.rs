//! Instruction-count probe for `SrqRing::post` against the raw store loop
//! (the same code the `post_srq_recv` benchmark times), for machines whose
//! timers are too noisy to compare a few nanoseconds:
//!
//! ```sh
//! cargo build --release -p mlx5-bench --example profile_post
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out \
//!     target/release/examples/profile_post 4
//! callgrind_annotate /tmp/cg.out | grep -E 'driver_post|raw_post'
//! ```
//!
//! Each posting function is `#[inline(never)]` so callgrind attributes the
//! instructions per call; divide by the number of posts printed.

use std::hint::black_box;

use mlx5_bench::RawSrq;
use mlx5_driver::srq::{Sge, SrqGeometry};
use mlx5_driver::unstable::srq::SrqRing;
use mlx5_hal::host::HostHal;

#[inline(never)]
fn driver_post(srq: &mut SrqRing<HostHal>, wr_id: u64, sges: &[Sge]) -> u16 {
    srq.post(wr_id, sges).unwrap()
}

#[inline(never)]
fn raw_post(raw: &mut RawSrq, wr_id: u64, sges: &[Sge]) {
    raw.post(wr_id, sges)
}

fn main() {
    let nsge: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(4);
    let rounds = 1000;
    let hal = HostHal::new(0);
    let geo = SrqGeometry::for_request(255, nsge + 1).unwrap();
    let sges: Vec<Sge> = (0..nsge as u64)
        .map(|i| Sge {
            addr: 0x10_0000 + i * 4096,
            length: 1024,
            lkey: 0x42,
        })
        .collect();
    let mut srq = SrqRing::new(&hal, geo).unwrap();
    let mut raw = RawSrq::new(&hal, geo);
    let mut posts = 0u64;
    for _ in 0..rounds {
        let mut order = Vec::with_capacity(geo.max_wr);
        for i in 0..geo.max_wr {
            order.push(driver_post(&mut srq, i as u64, black_box(&sges)));
            raw_post(&mut raw, i as u64, black_box(&sges));
            posts += 1;
        }
        srq.ring_doorbell();
        raw.ring();
        for i in order {
            srq.complete(i).unwrap();
        }
    }
    println!("{posts} posts of {nsge} SGE(s) each through driver_post and raw_post");
}
