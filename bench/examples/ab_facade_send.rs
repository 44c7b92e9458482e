//! Interleaved timing of `post_send`: the verbs facade (`Verbs::post_send`)
//! against the ring API (`Qp::post_send`), on the rigs `benches/facade.rs`
//! times as `facade_send/...`, alternating blocks of 64 requests so that
//! both sides see the same load on a shared machine (criterion times one
//! side for seconds, then the other, and a neighbour's job can land on
//! either):
//!
//! ```sh
//! cargo build --release -p mlx5-bench --example ab_facade_send
//! target/release/examples/ab_facade_send sge1 1 40000
//! PAD=1600 target/release/examples/ab_facade_send sge1 1 40000
//! ```
//!
//! Arguments: `sge1`, `sge4` or `inline64`, the requests per call, the
//! rounds (each round posts 64 requests through each side, in alternating
//! order). `PAD` (bytes) shifts the heap placement of the request lists:
//! a list whose entries sit at the same offset modulo 4 KiB as the WQEs
//! just written can stall loads on stores to another address (4K
//! aliasing), which moves one side's time by up to 2x depending only on
//! where the allocator put things; compare a few `PAD` values before
//! reading anything into one figure. The stack placement matters as much
//! (both rigs live on `main`'s stack): under `setarch -R` (no address
//! randomisation) a longer environment moves it, e.g.
//! `X=$(head -c 700 /dev/zero | tr '\0' a) setarch -R ...`. `ONLY=facade`
//! or `ONLY=ring` times one side alone, as criterion does. Prints the
//! medians (ns per request) and the ratio facade / ring; the first tenth of
//! the rounds is warm-up.

use std::time::Instant;

use mlx5_bench::facade_send::{RingSendRig, SendRig, SendShape, SendWorkload, SEND_WR};

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let kind = args.next().unwrap_or_else(|| "sge1".into());
    let batch: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let pad: usize = std::env::var("PAD")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    let work = SendWorkload::new(SendShape::from_arg(&kind));
    let n = SEND_WR as usize;
    let _pad1 = vec![0u8; pad];
    let wrs = work.wrs();
    let _pad2 = vec![0u8; pad];
    let reqs = work.reqs();
    let mut rig = SendRig::new(8);
    let mut r = RingSendRig::new(8);
    let mut ft = Vec::with_capacity(rounds);
    let mut rt = Vec::with_capacity(rounds);
    let only = std::env::var("ONLY").unwrap_or_default();
    for round in 0..rounds {
        for side in 0..2 {
            let facade = (side == 0) == (round % 2 == 0);
            if (only == "facade" && !facade) || (only == "ring" && facade) {
                continue;
            }
            if facade {
                let p0 = rig.producer();
                let t = Instant::now();
                rig.post_chunks(&wrs, batch);
                ft.push(t.elapsed().as_nanos() as f64 / n as f64);
                // Untimed: one CQE for the last WQE retires them all.
                rig.retire(p0, n);
            } else {
                let p0 = r.producer();
                let t = Instant::now();
                r.post_chunks(&reqs, batch);
                rt.push(t.elapsed().as_nanos() as f64 / n as f64);
                r.retire(p0, n);
            }
        }
    }
    assert_eq!(rig.ctx.stats().unmatched_cqes, 0);
    let skip = rounds / 10;
    let med = |v: &mut Vec<f64>| {
        if v.is_empty() {
            f64::NAN
        } else {
            median(&mut v[skip..])
        }
    };
    let (fm, rm) = (med(&mut ft), med(&mut rt));
    println!(
        "pad {pad} {kind} batch {batch}: facade {fm:.2} ns, ring {rm:.2} ns, facade / ring {:.3}",
        fm / rm
    );
}
