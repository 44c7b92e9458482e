//! Two hosts on a wire that drops, duplicates, reorders and corrupts a few
//! per cent of its frames, chosen by seed, through the driver and the verbs
//! facade on every transport: below the retry budget every message arrives
//! once, in order, intact, and the two hosts' counters agree (what one
//! completed is what the other received). Seeds: `mlx5_tests::seeds`;
//! `tests/sweep.sh N two_hosts_faults` sweeps them.

use mlx5_driver::verbs::{SendFlags, SendWr, Sge, WcStatus, WorkCompletion, WrOpcode};
use mlx5_sim::wire::Faults;
use mlx5_tests::hosts::*;
use mlx5_tests::seeds::{say, Seeded};

/// Messages per transport and seed, alternating between the directions.
const MESSAGES: usize = 12;

/// Message `i`'s length: small, one packet and several packets.
fn len_of(i: usize, mtu: usize) -> usize {
    [64, mtu - 1, 3 * mtu + 5, 1][i % 4]
}

/// One seed over every transport; returns the wire's drops, duplicates,
/// reorders and corruptions and the retransmissions they caused, summed.
fn faulty_wire_run(seed: u64) -> (u64, u64) {
    let mut faults_seen = 0;
    let mut retransmissions = 0;
    for t in TRANSPORTS {
        let what = format!("{t:?} seed {seed}");
        let (wire, mut a, mut b) = pair(t);
        wire.set_faults(Faults {
            seed,
            drop: 0.03,
            duplicate: 0.02,
            reorder: 0.02,
            corrupt: 0.02,
            chosen: Vec::new(),
        });
        let mtu = a.addr.mtu.min(b.addr.mtu).bytes() as usize;
        for i in 0..MESSAGES {
            a.post_recv(i).unwrap();
            b.post_recv(i).unwrap();
        }
        for i in 0..MESSAGES {
            let (from, to) = if i % 2 == 0 {
                (&mut a, &mut b)
            } else {
                (&mut b, &mut a)
            };
            let len = len_of(i, mtu);
            let data = pattern(len, i as u8 ^ seed as u8);
            from.buf.write_bytes(SEND_AT, &data);
            let sg = [Sge {
                addr: from.buf.iova() + SEND_AT as u64,
                length: len as u32,
                lkey: from.lkey(),
            }];
            let wr = SendWr {
                wr_id: i as u64,
                opcode: WrOpcode::Send,
                send_flags: SendFlags::SIGNALED,
                sg_list: &sg,
                ..SendWr::EMPTY
            };
            from.ctx.post_send(from.qp, &[wr]).unwrap();
            let s = wait_one(from, true, &to.dev)
                .unwrap_or_else(|| panic!("{what} message {i}: no send completion"));
            assert_eq!(
                (s.wr_id, s.status),
                (i as u64, WcStatus::Success),
                "{what} {i}"
            );
            let r = wait_one(to, false, &from.dev)
                .unwrap_or_else(|| panic!("{what} message {i}: not received"));
            assert_eq!(
                (r.status, r.byte_len),
                (WcStatus::Success, len as u32),
                "{what} {i}"
            );
            // In order: the receiver consumes its slots in posting order.
            assert_eq!(r.wr_id, (i / 2) as u64, "{what} message {i}: out of order");
            let mut got = vec![0u8; len];
            to.buf
                .read_bytes(RECV_AT + r.wr_id as usize * BIG, &mut got);
            assert!(got == data, "{what} message {i}: bytes differ");
        }
        // Once: nothing more arrives, however long the wire is left to run.
        for _ in 0..50 {
            a.dev.advance_us(1000);
            b.dev.advance_us(1000);
        }
        let mut wc = [WorkCompletion::EMPTY; 4];
        for h in [&mut a, &mut b] {
            assert_eq!(
                h.ctx.poll_cq(h.rcq, &mut wc).unwrap(),
                0,
                "{what}: a duplicate"
            );
            assert_eq!(h.ctx.poll_cq(h.scq, &mut wc).unwrap(), 0, "{what}");
        }
        let (sa, sb) = (a.dev.traffic().stats(), b.dev.traffic().stats());
        let half = (MESSAGES / 2) as u64;
        assert_eq!(
            (sa.messages, sb.messages_received),
            (half, half),
            "{what}: A completed what B received"
        );
        assert_eq!(
            (sb.messages, sa.messages_received),
            (half, half),
            "{what}: B completed what A received"
        );
        let w = wire.stats();
        let lost = w.dropped + w.corrupted;
        if lost > 0 {
            assert!(
                sa.retransmissions + sb.retransmissions > 0,
                "{what}: {lost} frames lost, nothing retransmitted: {w:?}"
            );
        }
        faults_seen += lost + w.duplicated + w.reordered;
        retransmissions += sa.retransmissions + sb.retransmissions;
        close(a, &format!("{what} host 1"));
        close(b, &format!("{what} host 2"));
    }
    (faults_seen, retransmissions)
}

#[test]
fn seeded_wire_faults_below_the_retry_budget_deliver_every_message_once_in_order() {
    big_stack(|| {
        let runs = Seeded::new(
            module_path!(),
            "seeded_wire_faults_below_the_retry_budget_deliver_every_message_once_in_order",
            &[1, 2, 0xdead_beef],
        )
        .run(faulty_wire_run);
        let mut total = 0;
        for (seed, (faults, retransmissions)) in runs {
            say(&format!(
                "faulty wire, seed {seed}: {faults} frames dropped, duplicated, reordered or \
                 corrupted; {retransmissions} retransmissions"
            ));
            total += faults;
        }
        assert!(total > 0, "the faults were injected");
    });
}
