//! Two hosts on a wire that loses, duplicates, reorders and corrupts
//! frames: below the retry budget every message arrives once, in order,
//! intact; a destination that does not answer (wrong MAC, GID, LID, QPN or
//! P_Key: the receiving card drops the frames silently) ends the sender in
//! RETRY_EXC_ERR after exactly its retry budget, the WQEs behind flushed.

use crate::common::hosts::{Addr, Conn, Hosts, Transport, ALL};
use mlx5_regs::consts::{cqe_syndrome, CqeOpcode};
use mlx5_regs::layouts::{cqe64, err_cqe};
use mlx5_sim::wire::{Fault, Faults};

/// ACK timeout code 8: 4.096 us x 2^8 = 1.05 ms of device time.
fn quick(retry_count: u8) -> Conn {
    Conn {
        ack_timeout: 8,
        retry_count,
        ..Conn::default()
    }
}

/// What goes wrong with the destination.
#[derive(Debug, Clone, Copy)]
enum Wrong {
    Mac,
    Gid,
    Lid,
    Qpn,
    Pkey,
}

fn wrong_destination(t: Transport, wrong: Wrong) {
    let retries = 3u8;
    let mut h = Hosts::new(t, quick(retries), 0x100, 0x200);
    let b = h.b.addr();
    let mut to = Addr {
        gid: b.gid,
        mac: b.mac,
        lid: b.lid,
    };
    let mut rqpn = h.b.qp.qpn;
    let mut c = quick(retries);
    match wrong {
        Wrong::Mac => to.mac[5] ^= 1,
        Wrong::Gid => to.gid[15] ^= 1,
        Wrong::Lid => to.lid += 1,
        Wrong::Qpn => rqpn += 1,
        Wrong::Pkey => {
            h.a.f.dev.set_pkey(1, 0x8001);
            c.pkey_index = 1;
        }
    }
    h.reconnect_a(rqpn, &to, c, (0x100, 0x200));
    let before = h.b.f.dev.traffic().stats();
    let len = 3000; // three packets at MTU 1024
    h.a.payload(len, 1);
    for _ in 0..3 {
        let wr = h.a.send_wr(len as u32);
        h.a.qp.post(&h.a.f, &wr);
    }
    let c0 = h.wait_cqe(true, true).expect("error CQE");
    assert_eq!(
        cqe64::opcode.get(&c0),
        CqeOpcode::REQ_ERR.0,
        "{t:?} {wrong:?}"
    );
    assert_eq!(
        err_cqe::syndrome.get(&c0),
        cqe_syndrome::TRANSPORT_RETRY_EXC_ERR,
        "{t:?} {wrong:?}"
    );
    for k in 1..3 {
        let c = h.wait_cqe(true, true).expect("flush CQE");
        assert_eq!(err_cqe::syndrome.get(&c), cqe_syndrome::WR_FLUSH_ERR);
        assert_eq!(cqe64::wqe_counter.get(&c), k);
    }
    let a = h.a.f.dev.traffic().stats();
    let bs = h.b.f.dev.traffic().stats();
    // The first transmission and `retries` retransmissions of 3 packets.
    assert_eq!(a.wire_tx, 3 * (1 + u64::from(retries)), "{t:?} {wrong:?}");
    assert_eq!(a.retransmissions, u64::from(retries), "{t:?} {wrong:?}");
    assert_eq!(a.ack_timeouts, 1 + u64::from(retries), "{t:?} {wrong:?}");
    assert_eq!(bs.messages_received, before.messages_received);
    assert_eq!(
        bs.wire_tx, before.wire_tx,
        "{t:?} {wrong:?}: B never answered"
    );
    assert_eq!(
        bs.wire_dropped - before.wire_dropped,
        3 * (1 + u64::from(retries)),
        "{t:?} {wrong:?}: B dropped every frame"
    );
    assert!(h.b.f.poll_cq(&mut h.b.rcq).is_none(), "nothing delivered");
    assert_eq!(h.a.f.dev.qp_state(h.a.qp.qpn), Some(mlx5_sim::QpState::Err));
}

#[test]
fn a_wrong_destination_ends_in_retry_exceeded_after_exactly_the_budget() {
    for t in ALL {
        let list: &[Wrong] = if t == Transport::Ib {
            &[Wrong::Lid, Wrong::Qpn, Wrong::Pkey]
        } else {
            &[Wrong::Mac, Wrong::Gid, Wrong::Qpn, Wrong::Pkey]
        };
        for &wrong in list {
            wrong_destination(t, wrong);
        }
    }
}

/// Send `n` messages of assorted sizes each way over a faulty wire; every
/// one must arrive once, in order, intact. Returns both hosts' counters.
fn exchange_over_faults(
    t: Transport,
    faults: Faults,
    n: usize,
) -> (mlx5_sim::TrafficStats, mlx5_sim::TrafficStats) {
    let mut h = Hosts::new(t, quick(7), 0xff_fff0, 0x7f_fff0);
    h.wire.set_faults(faults.clone());
    let sizes = [0usize, 1, 1023, 1024, 1025, 3000, 4096 + 7, 64];
    let mut rmp_next = [0usize; 2];
    for k in 0..n {
        let len = sizes[k % sizes.len()];
        for a_to_b in [true, false] {
            let seed = (k as u8).wrapping_mul(3) ^ a_to_b as u8;
            let (src, _) = if a_to_b { (&mut h.a, 0) } else { (&mut h.b, 1) };
            let data = src.payload(len, seed);
            let wr = src.send_wr(len as u32);
            src.qp.post(&src.f, &wr);
            let sc = h
                .wait_cqe(a_to_b, true)
                .unwrap_or_else(|| panic!("{t:?} msg {k}: no send CQE ({faults:?})"));
            assert_eq!(
                cqe64::opcode.get(&sc),
                CqeOpcode::REQ.0,
                "{t:?} msg {k}: syndrome {:#x} ({faults:?})",
                err_cqe::syndrome.get(&sc)
            );
            let rc = h.wait_cqe(!a_to_b, false).expect("receive CQE");
            assert_eq!(cqe64::opcode.get(&rc), CqeOpcode::RESP_SEND.0);
            assert_eq!(cqe64::byte_cnt.get(&rc) as usize, len, "{t:?} msg {k}");
            let side = !a_to_b as usize;
            let idx = cqe64::wqe_counter.get(&rc) as usize;
            assert_eq!(idx, rmp_next[side] % 16, "{t:?} msg {k}: in order");
            rmp_next[side] += 1;
            let dst = if a_to_b { &mut h.b } else { &mut h.a };
            assert_eq!(dst.received(idx, len), data, "{t:?} msg {k}: intact");
            dst.rmp.post(1);
        }
    }
    // No message twice: nothing else waits on either receive CQ.
    assert!(h.a.f.poll_cq(&mut h.a.rcq).is_none());
    assert!(h.b.f.poll_cq(&mut h.b.rcq).is_none());
    let (a, b) = (h.a.f.dev.traffic().stats(), h.b.f.dev.traffic().stats());
    assert_eq!(a.messages_received, n as u64, "{t:?}");
    assert_eq!(b.messages_received, n as u64, "{t:?}");
    // Every frame either host sent went on the wire.
    assert_eq!(h.wire.stats().frames, a.wire_tx + b.wire_tx);
    (a, b)
}

#[test]
fn chosen_faults_are_recovered() {
    for t in ALL {
        // Frame numbers on the wire: the first SEND of 0 bytes is frame 0,
        // its ACK frame 1, ...
        let faults = Faults {
            chosen: vec![
                (0, Fault::Drop),
                (3, Fault::Corrupt),
                (6, Fault::Duplicate),
                (9, Fault::Reorder),
                (12, Fault::Drop),
                (15, Fault::Corrupt),
                (20, Fault::Drop),
            ],
            ..Faults::default()
        };
        let (a, b) = exchange_over_faults(t, faults, 8);
        // The faults were felt: retransmissions, a duplicate re-ACKed.
        assert!(
            a.retransmissions + b.retransmissions >= 4,
            "{t:?}: {a:?} {b:?}"
        );
        assert!(a.duplicates + b.duplicates >= 1, "{t:?}");
    }
}

#[test]
fn seeded_random_faults_below_the_retry_budget_lose_nothing() {
    // Fixed regression seeds, plus this run's fresh seed when CI sets one
    // (`MLX5_FRESH_SEED`, printed by `.ci/run`); `MLX5_PROP_SEED` replays one.
    let mut seeds = vec![1u64, 2, 0xdead_beef];
    for var in ["MLX5_FRESH_SEED", "MLX5_PROP_SEED"] {
        if let Some(n) = std::env::var(var).ok().and_then(|v| v.parse().ok()) {
            if var == "MLX5_PROP_SEED" {
                seeds.clear();
            }
            seeds.push(n);
        }
    }
    for &seed in &seeds {
        for t in ALL {
            let faults = Faults {
                seed,
                drop: 0.03,
                duplicate: 0.02,
                reorder: 0.02,
                corrupt: 0.02,
                chosen: Vec::new(),
            };
            eprintln!(
                "mlx5-seeds: two_host_faults {t:?} seed {seed} \
                 (replay: MLX5_PROP_SEED={seed} cargo test -p mlx5-sim --test integration two_host_faults::)"
            );
            let (a, b) = exchange_over_faults(t, faults, 24);
            assert!(
                a.retransmissions + b.retransmissions > 0,
                "{t:?} seed {seed}"
            );
        }
    }
}

#[test]
fn a_wire_that_loses_everything_exhausts_the_budget() {
    for t in ALL {
        let mut h = Hosts::new(t, quick(5), 1, 2);
        h.wire.set_faults(Faults {
            drop: 1.0,
            ..Faults::default()
        });
        let wr = h.a.send_wr(100);
        h.a.qp.post(&h.a.f, &wr);
        h.a.qp.post(&h.a.f, &wr);
        let c = h.wait_cqe(true, true).expect("error CQE");
        assert_eq!(
            err_cqe::syndrome.get(&c),
            cqe_syndrome::TRANSPORT_RETRY_EXC_ERR
        );
        let c = h.wait_cqe(true, true).expect("flush CQE");
        assert_eq!(err_cqe::syndrome.get(&c), cqe_syndrome::WR_FLUSH_ERR);
        assert_eq!(h.wire.stats().dropped, 6, "{t:?}: 1 + 5 retries, all lost");
        assert_eq!(h.b.f.dev.traffic().stats().wire_rx, 0);
    }
}
