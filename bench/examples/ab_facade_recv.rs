//! Interleaved timing of the receive side: the verbs facade against the
//! ring API it wraps, on the rigs `benches/facade.rs` times, in
//! alternating blocks in one process, so every contender sees the same
//! load and the same placement (criterion times each contender in its own
//! phase, and on a shared VM two phases can run at speeds up to 2x apart):
//!
//! ```sh
//! cargo build --release -p mlx5-bench --example ab_facade_recv
//! target/release/examples/ab_facade_recv            # 10000 blocks, 3 runs
//! target/release/examples/ab_facade_recv 20000 5 poll
//! ```
//!
//! Arguments: blocks per run, runs, and a filter (only the cases whose
//! name contains it: `poll`, `loop`, `empty`, `post`). Each run builds
//! fresh rigs behind a heap pad 1600 bytes longer than the last run's
//! (`PAD` bytes for the first), so the runs see different placements.
//!
//! The cases and their contenders (the code each times is the code the
//! `facade` benchmark times under the id given):
//! - `poll, batch B` (B = 1, 16, 64): 255 receive completions polled B at
//!   a time from a CQ of 2^8 entries, the SRQ refilled and the CQEs
//!   written outside the timed block (id `facade_poll/cq_2^8/*/B`). `facade`:
//!   `Verbs::poll_cq`; `ring`: `CqRing::poll` + `SrqRing::complete`;
//!   `checked`: `CqRing::poll` + `complete_checked` (the facade's checks
//!   for one known QP and SRQ).
//! - `receive loop, B = ...`: poll B, repost what came, 256 completions a
//!   block (id `facade_recv_loop/*/B`); the same three contenders, the ring
//!   API reposting through `SrqRing::post_list`.
//! - `poll, 16 slots, one waiting`: 255 receive completions the device
//!   makes visible one at a time (written beforehand, each handed to
//!   software by one owner-byte store before a call), so every call with
//!   16 slots finds one (id `facade_poll_arriving`); the same three
//!   contenders.
//! - `poll, empty CQ`: 1024 polls of an empty CQ (id `facade_poll_empty`);
//!   `facade`, `ring` (`CqRing::poll`) and `raw` (one owner-byte check).
//! - `post_srq_recv, S SGE, K per call`: 255 receives posted K per call
//!   (id `facade_post/S_sge/K_per_call`); `facade`: `Verbs::post_srq_recv`;
//!   `ring`: `SrqRing::post_list`; `ring_post`: `SrqRing::post` each and
//!   `SrqRing::ring_doorbell` per call (no contender of the benchmark).
//!   The device completes them all outside the timed block.
//!
//! After every block, outside the timed part, each contender's output is
//! checked against the others' in the same round: the completions counted
//! and the `wr_id`s of the last poll call (every `wr_id`, in order, for the
//! post cases), so a broken contender stops the run instead of being timed.
//!
//! Prints a markdown table: per case, the median ns per completion (per
//! call for the empty poll, per request for the posts) of each contender
//! over every block after each run's first tenth (warm-up), and the median
//! of the per-block ratios facade / other (the range after it is that
//! ratio's median per run, lowest to highest). The empty poll's calls run
//! back to back in a loop, so independent calls overlap: the raw check's
//! one load and compare costs less here than under criterion's per-call
//! harness.

use std::hint::black_box;
use std::time::Instant;

use mlx5_bench::facade::{raw_empty, recv_wrs, sges, Rig};
use mlx5_bench::facade_recv::{Checking, Complete, RingSide, Trusting, LOOP_P, LOOP_WR};
use mlx5_driver::cq::Cqe;
use mlx5_driver::srq::Sge;
use mlx5_driver::verbs::WorkCompletion;

/// SRQ size and completions per block of the poll cases.
const WR: u32 = 255;
/// Calls per empty-poll block.
const EMPTY_CALLS: usize = 1024;
/// Contenders in column order (the facade first).
const NAMES: [&str; 5] = ["facade", "ring", "checked", "ring_post", "raw"];

/// One block's outcome: ns per unit and what the contender produced.
struct Block {
    ns: f64,
    out: Vec<u64>,
}

/// A contender: its column in [`NAMES`] and its block.
type Contender = (usize, Box<dyn FnMut() -> Block>);

/// A case: its name and its contenders.
struct Case {
    name: String,
    contenders: Vec<Contender>,
}

/// Nanoseconds since `t`, per `n` units.
fn per(t: Instant, n: usize) -> f64 {
    t.elapsed().as_nanos() as f64 / n as f64
}

/// A scatter list that lives for the whole process (the blocks own
/// request lists that borrow it).
fn leaked_sges(n: usize) -> &'static [Sge] {
    Box::leak(sges(n).into_boxed_slice())
}

/// The output a poll-style block is checked by: the count, then the
/// `wr_id`s the last call returned (`last` of them).
fn outcome(got: usize, last: impl Iterator<Item = u64>) -> Vec<u64> {
    std::iter::once(got as u64).chain(last).collect()
}

/// `n` completions polled `b` at a time leave `(n - 1) % b + 1` in the
/// last call.
fn last_call(n: usize, b: usize) -> usize {
    (n - 1) % b + 1
}

fn ring_poll<C: Complete + 'static>(b: usize, step: C) -> Box<dyn FnMut() -> Block> {
    let n = WR as usize;
    let sge = leaked_sges(1);
    let mut r = RingSide::new(8, n, 1);
    let (mut out, mut ids) = (vec![Cqe::EMPTY; b], vec![0u64; b]);
    Box::new(move || {
        r.fill(n, sge);
        r.device_completes(n);
        let t = Instant::now();
        let got = r.poll_block(&mut out, &mut ids, n, &step);
        let ns = per(t, n);
        assert_eq!(r.r.srq.outstanding(), 0);
        let out = outcome(got, ids[..last_call(n, b)].iter().copied());
        Block { ns, out }
    })
}

fn poll_case(b: usize) -> Case {
    let n = WR as usize;
    let sge = leaked_sges(1);
    let mut rig = Rig::new(8, WR, 1);
    let mut wc = vec![WorkCompletion::EMPTY; b];
    let facade = Box::new(move || {
        rig.fill(n, sge);
        rig.device_completes(n);
        let t = Instant::now();
        let got = rig.poll_block(&mut wc, n);
        let ns = per(t, n);
        assert_eq!(rig.ctx.stats().unmatched_cqes, 0);
        let out = outcome(got, wc[..last_call(n, b)].iter().map(|w| w.wr_id));
        Block { ns, out }
    });
    Case {
        name: format!("poll, batch {b}"),
        contenders: vec![
            (0, facade),
            (1, ring_poll(b, Trusting)),
            (2, ring_poll(b, Checking)),
        ],
    }
}

/// Slots per call of the `arriving` case.
const ARRIVING_SLOTS: usize = 16;

fn ring_arriving<C: Complete + 'static>(step: C) -> Box<dyn FnMut() -> Block> {
    let n = WR as usize;
    let sge = leaked_sges(1);
    let mut r = RingSide::new(8, n, 1);
    let (mut out, mut ids) = ([Cqe::EMPTY; ARRIVING_SLOTS], [0u64; ARRIVING_SLOTS]);
    Box::new(move || {
        r.fill(n, sge);
        let held = r.device_completes_held(n);
        let t = Instant::now();
        // SAFETY: `held` was just written into this side's ring.
        let got = unsafe { r.poll_arriving_block(&mut out, &mut ids, &held, n, &step) };
        let ns = per(t, n);
        assert_eq!(r.r.srq.outstanding(), 0);
        Block {
            ns,
            out: outcome(got, ids[..1].iter().copied()),
        }
    })
}

fn arriving_case() -> Case {
    let n = WR as usize;
    let sge = leaked_sges(1);
    let mut rig = Rig::new(8, WR, 1);
    let mut wc = [WorkCompletion::EMPTY; ARRIVING_SLOTS];
    let facade = Box::new(move || {
        rig.fill(n, sge);
        let held = rig.device_completes_held(n);
        let t = Instant::now();
        // SAFETY: `held` was just written into this rig's CQ.
        let got = unsafe { rig.poll_arriving_block(&mut wc, &held, n) };
        let ns = per(t, n);
        assert_eq!(rig.ctx.stats().unmatched_cqes, 0);
        Block {
            ns,
            out: outcome(got, wc[..1].iter().map(|w| w.wr_id)),
        }
    });
    Case {
        name: format!("poll, {ARRIVING_SLOTS} slots, one waiting"),
        contenders: vec![
            (0, facade),
            (1, ring_arriving(Trusting)),
            (2, ring_arriving(Checking)),
        ],
    }
}

fn ring_loop<C: Complete + 'static>(b: usize, step: C) -> Box<dyn FnMut() -> Block> {
    let sge = leaked_sges(1);
    let mut r = RingSide::new(8, LOOP_WR as usize, 1);
    r.fill(LOOP_WR as usize, sge);
    let (mut out, mut ids) = (vec![Cqe::EMPTY; b], vec![0u64; b]);
    Box::new(move || {
        r.device_completes(LOOP_P);
        let t = Instant::now();
        let got = r.loop_block(&mut out, &mut ids, LOOP_P, sge, &step);
        let ns = per(t, LOOP_P);
        let out = outcome(got, ids[..last_call(LOOP_P, b)].iter().copied());
        Block { ns, out }
    })
}

fn loop_case(b: usize) -> Case {
    let sge = leaked_sges(1);
    let mut rig = Rig::new(8, LOOP_WR, 1);
    rig.fill(LOOP_WR as usize, sge);
    let wrs = recv_wrs(b, sge);
    let mut wc = vec![WorkCompletion::EMPTY; b];
    let facade = Box::new(move || {
        rig.device_completes(LOOP_P);
        let t = Instant::now();
        let got = rig.loop_block(&mut wc, &wrs, LOOP_P);
        let ns = per(t, LOOP_P);
        assert_eq!(rig.ctx.stats().unmatched_cqes, 0);
        let out = outcome(got, wc[..last_call(LOOP_P, b)].iter().map(|w| w.wr_id));
        Block { ns, out }
    });
    Case {
        name: format!("receive loop, B = {b}"),
        contenders: vec![
            (0, facade),
            (1, ring_loop(b, Trusting)),
            (2, ring_loop(b, Checking)),
        ],
    }
}

fn empty_case() -> Case {
    let mut rig = Rig::new(8, WR, 1);
    let mut wc = [WorkCompletion::EMPTY; 16];
    let facade = Box::new(move || {
        let t = Instant::now();
        let mut got = 0;
        for _ in 0..EMPTY_CALLS {
            got += rig.ctx.poll_cq(rig.cq, black_box(&mut wc)).unwrap();
        }
        Block {
            ns: per(t, EMPTY_CALLS),
            out: vec![got as u64],
        }
    });
    let mut ring = RingSide::new(8, WR as usize, 1);
    let mut out = [Cqe::EMPTY; 16];
    let ring_side = Box::new(move || {
        let t = Instant::now();
        let mut got = 0;
        for _ in 0..EMPTY_CALLS {
            got += ring.r.cq.poll(&ring.r.dbr, black_box(&mut out));
        }
        Block {
            ns: per(t, EMPTY_CALLS),
            out: vec![got as u64],
        }
    });
    let raw_ring = RingSide::new(8, WR as usize, 1);
    let raw = Box::new(move || {
        let p = raw_ring.r.cq.region().as_ptr();
        let t = Instant::now();
        let mut got = 0;
        for _ in 0..EMPTY_CALLS {
            // SAFETY: `p` is the live ring of 2^8 64-byte CQEs of
            // `raw_ring`, which the closure owns.
            got += !unsafe { raw_empty(black_box(p), 8, black_box(0)) } as usize;
        }
        Block {
            ns: per(t, EMPTY_CALLS),
            out: vec![got as u64],
        }
    });
    Case {
        name: "poll, empty CQ".into(),
        contenders: vec![(0, facade), (1, ring_side), (4, raw)],
    }
}

fn post_case(nsge: usize, per_call: usize) -> Case {
    let n = WR as usize;
    let sge = leaked_sges(nsge);
    // One spare scatter entry so the terminator is written as well.
    let max_sge = nsge + 1;
    let mut rig = Rig::new(8, WR, max_sge as u32);
    let wrs = recv_wrs(n, sge);
    let facade = Box::new(move || {
        let t = Instant::now();
        rig.post_chunks(&wrs, per_call);
        let ns = per(t, n);
        rig.device_completes(n);
        Block {
            ns,
            out: rig.drain(n),
        }
    });
    let ring = |each: bool| -> Box<dyn FnMut() -> Block> {
        let mut r = RingSide::new(8, n, max_sge);
        let wr_ids: Vec<u64> = (0..n as u64).collect();
        Box::new(move || {
            let t = Instant::now();
            if each {
                r.post_each_chunks(&wr_ids, sge, per_call);
            } else {
                r.post_chunks(&wr_ids, sge, per_call);
            }
            let ns = per(t, n);
            r.device_completes(n);
            Block {
                ns,
                out: r.drain(n),
            }
        })
    };
    Case {
        name: format!("post_srq_recv, {nsge} SGE, {per_call} per call"),
        contenders: vec![(0, facade), (1, ring(false)), (3, ring(true))],
    }
}

fn cases(filter: &str) -> Vec<Case> {
    let mut all = Vec::new();
    for b in [1, 16, 64] {
        all.push(poll_case(b));
    }
    all.push(arriving_case());
    all.push(empty_case());
    for b in [1, 16, 64] {
        all.push(loop_case(b));
    }
    for nsge in [1, 4] {
        for per_call in [1, 16] {
            all.push(post_case(nsge, per_call));
        }
    }
    all.retain(|c| c.name.contains(filter));
    all
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Timings of one case: per run, per column, the blocks' ns (after the
/// warm-up) and the per-block ratios facade / that column.
#[derive(Default)]
struct Tally {
    ns: Vec<[Vec<f64>; 5]>,
    ratio: Vec<[Vec<f64>; 5]>,
}

fn main() {
    let mut args = std::env::args().skip(1);
    let blocks: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let runs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let filter = args.next().unwrap_or_default();
    let pad: usize = std::env::var("PAD")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    let mut names = Vec::new();
    let mut tallies: Vec<Tally> = Vec::new();
    for run in 0..runs {
        let _pad = vec![0u8; pad + 1600 * run];
        let mut cases = cases(&filter);
        if run == 0 {
            names = cases.iter().map(|c| c.name.clone()).collect();
            tallies = cases.iter().map(|_| Tally::default()).collect();
        }
        for t in &mut tallies {
            t.ns.push(Default::default());
            t.ratio.push(Default::default());
        }
        for round in 0..blocks {
            for (case, tally) in cases.iter_mut().zip(&mut tallies) {
                let m = case.contenders.len();
                let mut got: Vec<(usize, Block)> = Vec::with_capacity(m);
                for i in 0..m {
                    let (col, run_block) = &mut case.contenders[(i + round) % m];
                    got.push((*col, run_block()));
                }
                for (col, b) in &got[1..] {
                    assert_eq!(
                        b.out, got[0].1.out,
                        "{}: {} and {} differ",
                        case.name, NAMES[got[0].0], NAMES[*col]
                    );
                }
                if round < blocks / 10 {
                    continue;
                }
                got.sort_by_key(|(col, _)| *col);
                let (ns, ratio) = (
                    tally.ns.last_mut().unwrap(),
                    tally.ratio.last_mut().unwrap(),
                );
                for (col, b) in &got {
                    ns[*col].push(b.ns);
                    ratio[*col].push(got[0].1.ns / b.ns);
                }
            }
        }
    }
    println!("{blocks} blocks x {runs} runs; ns per completion (per call for the empty poll, per request for the posts)\n");
    println!("| case | facade | ring | checked | ring_post | raw | facade / ring | facade / checked | facade / ring_post | facade / raw |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (name, t) in names.iter().zip(&tallies) {
        let mut row = format!("| {name} |");
        for col in 0..5 {
            let mut all: Vec<f64> = t.ns.iter().flat_map(|r| r[col].clone()).collect();
            row += &match median(&mut all) {
                x if x.is_nan() => " — |".to_string(),
                x => format!(" {x:.2} |"),
            };
        }
        for col in 1..5 {
            let mut all: Vec<f64> = t.ratio.iter().flat_map(|r| r[col].clone()).collect();
            let mut per_run: Vec<f64> = t
                .ratio
                .iter()
                .map(|r| median(&mut r[col].clone()))
                .collect();
            per_run.sort_by(f64::total_cmp);
            row += &match median(&mut all) {
                x if x.is_nan() => " — |".to_string(),
                x if runs > 1 => format!(" {x:.3} ({:.3}–{:.3}) |", per_run[0], per_run[runs - 1]),
                x => format!(" {x:.3} |"),
            };
        }
        println!("{row}");
    }
}
