//! The send ring against the model's traffic engine: WQEs of 1 to 4 basic
//! blocks wrapping the ring end many times and the 16-bit producer counter
//! wrapping past 0xffff (every payload checked, every `wr_id` retired
//! exactly once); a full ring, too many gather entries and too much inline
//! data refused for that request only, the requests before it executed;
//! and CQs and an SRQ in use by a QP refused by the driver before any
//! command reaches the model.

use mlx5_driver::cq::CqeStatus;
use mlx5_driver::qp::{
    Payload, PostSendFailure, QpLinks, QpState, SendError, SendOp, SendQueueCaps, SendRequest,
};
use mlx5_driver::unstable;
use mlx5_driver::Error;
use mlx5_regs::consts::errno;
use mlx5_sim::{ExecMode, Profile};
use mlx5_tests::qp::{payload, Rig, RigConfig};
use mlx5_tests::MODES;

fn ring_rig(mode: ExecMode) -> Rig {
    Rig::new(RigConfig {
        sq: SendQueueCaps {
            max_send_wr: 16,
            max_send_sge: 2,
            max_inline_data: 200,
        },
        srq_wr: 63,
        ..RigConfig::new(Profile::ConnectX6Dx, mode)
    })
}

/// Inline length of message `seq`: 1..=200 bytes, so its WQE takes 1 to 4
/// basic blocks.
fn inline_len(seq: u64) -> usize {
    1 + (seq as usize * 37) % 200
}

/// At least `sends` SENDs; with `past_wrap`, on until the 16-bit counter
/// wrapped and 200 more went through.
fn counter_wrap(mode: ExecMode, sends: u64, past_wrap: bool) {
    let what = format!("{mode:?}");
    let mut rig = ring_rig(mode);
    let g = rig.tx.send_geometry().unwrap();
    assert_eq!((g.wqe_size, g.wqebbs(), g.max_send_wr), (256, 64, 16));
    rig.post_recvs(48);
    let mut seq = 0u64;
    let mut last_counter = 0u16;
    let mut counter_wraps = 0;
    let mut ring_wraps = 0u64;
    let mut wrapped_at = None;
    while seq < sends || (past_wrap && wrapped_at.is_none_or(|w| seq < w + 200)) {
        assert!(seq < 100_000, "{what}: the counter never wrapped");
        // 8 per doorbell, only the last signaled; every 5th batch gathers
        // two entries from the source buffers instead of inline data.
        let batch: Vec<u64> = (seq..seq + 8).collect();
        let gathered = (seq / 8) % 5 == 4;
        let data: Vec<Vec<u8>> = batch.iter().map(|&s| payload(s, inline_len(s))).collect();
        let sges: Vec<_> = batch
            .iter()
            .zip(&data)
            .map(|(&s, d)| {
                let slot = 2 * (s as usize % 8);
                let cut = d.len() / 2;
                rig.src.write(slot, &d[..cut]);
                rig.src.write(slot + 1, &d[cut..]);
                [
                    rig.hca.sge(rig.src.iova(slot), cut as u32),
                    rig.hca.sge(rig.src.iova(slot + 1), (d.len() - cut) as u32),
                ]
            })
            .collect();
        let reqs: Vec<SendRequest> = batch
            .iter()
            .zip(&data)
            .zip(&sges)
            .map(|((&s, d), sg)| SendRequest {
                wr_id: s,
                op: SendOp::Send,
                payload: if gathered {
                    Payload::Sges(sg)
                } else {
                    Payload::Inline(d)
                },
                signaled: s == seq + 7,
                solicited: false,
            })
            .collect();
        rig.tx.post_send(&reqs).unwrap();
        for (k, (r, got)) in rig.wait_recv(8).into_iter().enumerate() {
            let s = seq + k as u64;
            assert_eq!(r.status, CqeStatus::Success, "{what}: {s}");
            assert!(got == data[k], "{what}: message {s} differs");
        }
        let c = rig.wait_send(1);
        assert_eq!((c[0].wr_id, c[0].retired), (seq + 7, 8), "{what}");
        rig.post_recvs(8);
        let counter = unstable::qp::send_ring(&rig.tx).unwrap().producer_counter();
        if counter < last_counter {
            counter_wraps += 1;
            wrapped_at.get_or_insert(seq);
        }
        if counter as usize % 64 < last_counter as usize % 64 {
            ring_wraps += 1;
        }
        last_counter = counter;
        seq += 8;
    }
    assert_eq!(
        counter_wraps,
        usize::from(past_wrap),
        "{what}: 16-bit wraps"
    );
    assert!(ring_wraps * 64 > seq, "{what}: {ring_wraps} ring wraps");
    assert_eq!(rig.tx.outstanding_sends(), 0, "{what}");
    assert_eq!(rig.dev.traffic().stats().messages, seq, "{what}");
    rig.finish(&what);
}

#[test]
fn wqes_of_one_to_four_blocks_wrap_the_ring_and_the_16_bit_counter() {
    // About 35,000 SENDs of 1.9 blocks on average reach 65,536 blocks.
    counter_wrap(ExecMode::Synchronous, 0, true);
    counter_wrap(ExecMode::Threaded, 800, false);
}

#[test]
fn a_full_ring_and_oversized_requests_are_refused_alone() {
    for mode in MODES {
        let what = format!("{mode:?}");
        let mut rig = ring_rig(mode);
        let g = rig.tx.send_geometry().unwrap();
        let max = g.max_send_wr as u64;
        // No receive posted: everything waits on RNR and stays outstanding.
        let r = rig.send_batch(0..max + 3, 32, |_| true);
        let f = PostSendFailure {
            index: max as usize,
            error: SendError::Full,
        };
        assert_eq!(r, Err(f), "{what}");
        assert_eq!(f.error.errno(), errno::ENOMEM);
        assert_eq!(rig.tx.outstanding_sends(), g.max_send_wr, "{what}");
        rig.post_recvs(max);
        for s in 0..max {
            rig.expect_message(s, 32);
        }
        let ids: Vec<u64> = rig
            .wait_send(max as usize)
            .iter()
            .map(|c| c.wr_id)
            .collect();
        assert_eq!(ids, (0..max).collect::<Vec<_>>(), "{what}");

        // One gather entry too many, then inline data one byte too long: the
        // request before each is executed, the refused one and those after
        // it are not.
        rig.post_recvs(4);
        let one = [rig.hca.sge(rig.src.iova(0), 8)];
        rig.src.write(0, &payload(100, 8));
        let many = vec![rig.hca.sge(rig.src.iova(1), 4); g.max_send_sge as usize + 1];
        let big = vec![0u8; g.max_inline_data as usize + 1];
        let req = |wr_id, payload| SendRequest {
            wr_id,
            op: SendOp::Send,
            payload,
            signaled: true,
            solicited: false,
        };
        let cases = [
            (
                Payload::Sges(&many),
                SendError::TooManySges {
                    given: many.len(),
                    max: g.max_send_sge,
                },
                errno::EINVAL,
            ),
            (
                Payload::Inline(&big),
                SendError::InlineTooLarge {
                    len: big.len(),
                    max: g.max_inline_data,
                },
                errno::ENOMEM,
            ),
        ];
        for (k, (bad, err, code)) in cases.into_iter().enumerate() {
            let reqs = [
                req(100, Payload::Sges(&one)),
                req(200 + k as u64, bad),
                req(300, Payload::Sges(&one)),
            ];
            let r = rig.tx.post_send(&reqs);
            assert_eq!(
                r,
                Err(PostSendFailure {
                    index: 1,
                    error: err
                }),
                "{what}"
            );
            assert_eq!(err.errno(), code, "{what}");
            rig.expect_message(100, 8);
            assert_eq!(rig.wait_send(1)[0].wr_id, 100, "{what}");
            assert_eq!(rig.tx.outstanding_sends(), 0, "{what}");
        }
        assert_eq!(rig.dev.traffic().stats().messages, max + 2, "{what}");
        rig.finish(&what);
    }
}

#[test]
fn cqs_and_srq_in_use_by_a_qp_are_not_destroyed() {
    for issi in [1, 0] {
        let cfg = RigConfig {
            issi,
            ..RigConfig::new(Profile::ConnectX5, ExecMode::Synchronous)
        };
        let what = format!("ISSI {issi}");
        let mut rig = Rig::new(cfg);
        rig.dev.clear_trace();
        let busy = |e: &Error| matches!(e, Error::Busy(_)) && e.errno() == errno::EBUSY;
        let (cq, e) = rig.hca.destroy_cq(rig.scq).unwrap_err().into_parts();
        assert!(busy(&e), "{what}: send CQ: {e}");
        rig.scq = cq;
        let (cq, e) = rig.hca.destroy_cq(rig.rcq).unwrap_err().into_parts();
        assert!(busy(&e), "{what}: receive CQ: {e}");
        rig.rcq = cq;
        let user = rig.srq.cqn().is_some().then_some(&mut rig.rcq);
        let (srq, e) = rig.hca.destroy_srq(rig.srq, user).unwrap_err().into_parts();
        assert!(busy(&e), "{what}: SRQ: {e}");
        rig.srq = srq;
        assert!(
            rig.dev.trace().is_empty(),
            "{what}: the model saw a command"
        );
        assert_eq!(
            (rig.scq.users(), rig.rcq.users()),
            (1, 1 + (issi == 0) as u32)
        );
        assert_eq!(rig.srq.users(), 1, "{what}");
        // Still working.
        rig.post_recvs(1);
        rig.send(0, 10);
        rig.expect_message(0, 10);
        rig.finish(&what);
    }
}

#[test]
fn reset_and_clean_removes_stale_cqes_before_the_ring_restarts_at_index_0() {
    // Without the clean, a flush CQE left in the send CQ names WQE index 0
    // and would complete the first request posted after the reset in its
    // place (Linux and rdma-core clean both CQs at RESET).
    for mode in MODES {
        let what = format!("{mode:?}");
        let mut rig = ring_rig(mode);
        rig.post_recvs(2);
        rig.send_batch(0..5, 24, |_| true).unwrap();
        rig.settle(2_000); // 2 delivered, 3 wait on RNR
        rig.hca.qp_to_error(&mut rig.tx).unwrap();
        rig.settle(200);
        assert_eq!(
            (rig.scq.pending(), rig.rcq.pending()),
            (5, 2),
            "{what}: 2 sends + 3 flushes, 2 receives, none polled"
        );
        // Wrong links: refused before any command.
        rig.dev.clear_trace();
        let wrong = QpLinks {
            send_cq: Some(&mut rig.rcq),
            ..QpLinks::default()
        };
        let e = rig.hca.qp_to_reset_and_clean(&mut rig.tx, wrong);
        assert!(matches!(e, Err(Error::InvalidArgument(_))), "{what}");
        assert!(rig.dev.trace().is_empty(), "{what}");
        let links = QpLinks {
            send_cq: Some(&mut rig.scq),
            ..QpLinks::default()
        };
        assert_eq!(rig.hca.qp_to_reset_and_clean(&mut rig.tx, links), Ok(5));
        let links = QpLinks {
            recv_cq: Some(&mut rig.rcq),
            srq: Some(&mut rig.srq),
            ..QpLinks::default()
        };
        assert_eq!(rig.hca.qp_to_reset_and_clean(&mut rig.rx, links), Ok(2));
        assert_eq!((rig.scq.pending(), rig.rcq.pending()), (0, 0), "{what}");
        assert_eq!(rig.srq.outstanding(), 0, "{what}: WQEs given back");
        assert_eq!(rig.tx.outstanding_sends(), 0, "{what}");
        rig.hca
            .connect_loopback_pair(&mut rig.tx, &mut rig.rx)
            .unwrap();
        rig.post_recvs(2);
        rig.send_batch(100..102, 24, |_| true).unwrap();
        rig.expect_message(100, 24);
        rig.expect_message(101, 24);
        let done: Vec<_> = rig
            .wait_send(2)
            .iter()
            .map(|c| (c.wr_id, c.wqe_index, c.error()))
            .collect();
        assert_eq!(done, [(100, 0, None), (101, 1, None)], "{what}");
        assert_eq!(rig.tx.state(), QpState::Rts, "{what}");
        assert_eq!(rig.tx.rejected_cqes(), 0, "{what}");
        rig.finish(&what);
    }
}

#[test]
fn messages_of_many_packets_from_several_gather_entries() {
    // Up to 20 packets of the 1024-byte path MTU: both PSNs advance by the
    // packet count and the pair stays in step.
    for mode in MODES {
        let what = format!("{mode:?}");
        let cfg = RigConfig {
            buf_size: 20_480,
            nbufs: 8,
            ..RigConfig::new(Profile::ConnectX7, mode)
        };
        let mut rig = Rig::new(cfg);
        let lens = [1024, 1025, 4096, 9000, 20_480];
        rig.post_recvs(lens.len() as u64);
        for (seq, &len) in lens.iter().enumerate() {
            // Three entries: 1 byte, the middle, and the rest.
            let d = payload(seq as u64, len);
            let (a, b) = (1, len / 2);
            rig.src.write(3 * seq % 8, &d[..a]);
            rig.src.write((3 * seq + 1) % 8, &d[a..b]);
            rig.src.write((3 * seq + 2) % 8, &d[b..]);
            let sges = [
                rig.hca.sge(rig.src.iova(3 * seq % 8), a as u32),
                rig.hca.sge(rig.src.iova((3 * seq + 1) % 8), (b - a) as u32),
                rig.hca
                    .sge(rig.src.iova((3 * seq + 2) % 8), (len - b) as u32),
            ];
            rig.tx
                .post_send(&[SendRequest {
                    wr_id: seq as u64,
                    op: SendOp::Send,
                    payload: Payload::Sges(&sges),
                    signaled: true,
                    solicited: false,
                }])
                .unwrap();
            rig.expect_message(seq as u64, len);
        }
        let packets: u32 = lens.iter().map(|&l| (l as u32).div_ceil(1024)).sum();
        let (t, r) = (
            rig.dev.qp(rig.tx.qpn()).unwrap(),
            rig.dev.qp(rig.rx.qpn()).unwrap(),
        );
        assert_eq!(
            (t.next_send_psn, r.next_rcv_psn),
            (packets, packets),
            "{what}"
        );
        assert_eq!(rig.wait_send(lens.len()).len(), lens.len(), "{what}");
        rig.finish(&what);
    }
}
