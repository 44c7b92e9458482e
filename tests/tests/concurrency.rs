//! Concurrent command submission: several threads share one
//! `Hca` (it is `Sync`) against the threaded model, each creating,
//! moderating, querying and destroying its own CQs. Every output must belong
//! to the command that asked for it: the CQ number a thread got is unique
//! among live CQs and its queries report the log size and moderation values
//! that thread chose — no lost, crossed or duplicated outputs.
//!
//! `MLX5_CONCURRENCY_ITERS` sets the iterations per thread (default 400).

use std::collections::HashSet;
use std::sync::{Barrier, Mutex};

use mlx5_driver::cq::CqOptions;
use mlx5_driver::unstable::encode;
use mlx5_regs::Opcode;
use mlx5_sim::{Device, SimConfig};
use mlx5_tests::{assert_clean, config};

const THREADS: usize = 4;

fn iterations() -> usize {
    std::env::var("MLX5_CONCURRENCY_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400)
}

#[test]
fn threads_sharing_one_hca_get_their_own_outputs() {
    let dev = Device::new(SimConfig::default().threaded());
    let hca = mlx5_driver::Hca::bring_up(dev.hal(), config()).expect("bring-up");
    assert!(hca.caps().cq_moderation, "the profile moderates CQs");
    dev.clear_trace();
    let iters = iterations();
    let live = Mutex::new(HashSet::new());
    let start = Barrier::new(THREADS);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (hca, live, start) = (&hca, &live, &start);
            s.spawn(move || {
                start.wait();
                for i in 0..iters {
                    // Values unique to (thread, iteration) within the
                    // fields' ranges.
                    let log = 1 + ((t + i) % 8) as u8;
                    let period = (t * 1000 + i % 1000) as u16;
                    let count = (i * THREADS + t) as u16;
                    let cq = hca
                        .create_cq((1 << log) - 1, CqOptions::default())
                        .unwrap_or_else(|e| panic!("thread {t} iter {i}: create: {e}"));
                    assert_eq!(cq.log_size(), log);
                    assert!(
                        live.lock().unwrap().insert(cq.cqn()),
                        "thread {t}: cqn {:#x} handed out twice",
                        cq.cqn()
                    );
                    hca.modify_cq_moderation(&cq, period, count)
                        .unwrap_or_else(|e| panic!("thread {t} iter {i}: modify: {e}"));
                    let q = hca
                        .query_cq(&cq)
                        .unwrap_or_else(|e| panic!("thread {t} iter {i}: query: {e}"));
                    assert_eq!(
                        (q.log_size, q.cq_period, q.cq_max_count),
                        (log, period, count),
                        "thread {t} iter {i}: QUERY_CQ of cqn {:#x} answered another command",
                        cq.cqn()
                    );
                    // A raw command through the same path: QUERY_ISSI output.
                    let mut out = [0u8; encode::QUERY_ISSI_OUT];
                    hca.exec(&encode::query_issi(), &mut out).unwrap();
                    assert_eq!(encode::parse_query_issi(&out), (1, 0b11));
                    assert!(live.lock().unwrap().remove(&cq.cqn()));
                    if let Err(e) = hca.destroy_cq(cq) {
                        panic!("thread {t} iter {i}: destroy: {e}");
                    }
                }
            });
        }
    });
    dev.quiesce();
    // Every command reached the model exactly once and succeeded.
    let trace = dev.trace();
    let n = THREADS * iters;
    for op in [
        Opcode::CREATE_CQ,
        Opcode::MODIFY_CQ,
        Opcode::QUERY_CQ,
        Opcode::QUERY_ISSI,
        Opcode::DESTROY_CQ,
    ] {
        let runs: Vec<_> = trace.iter().filter(|t| t.opcode == op.0).collect();
        assert_eq!(runs.len(), n, "{op:?} executions");
        assert!(runs.iter().all(|t| t.status == 0 && t.delivery_status == 0));
    }
    // Several commands were really in flight together: the driver takes the
    // lowest free slot, so a command on slot k means k others were busy.
    let slots: HashSet<usize> = trace.iter().map(|t| t.slot).collect();
    let max_overlap = slots.iter().max().map_or(0, |m| m + 1);
    assert!(
        max_overlap >= 2,
        "commands never overlapped (slots {slots:?})"
    );
    assert_eq!(dev.objects().cqs, 0);
    hca.teardown().expect("teardown");
    assert_clean(&dev, "concurrency");
    eprintln!(
        "concurrency: {THREADS} threads x {iters} iterations = {} commands, max {max_overlap} in flight",
        5 * n
    );
}
