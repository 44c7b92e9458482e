//! The SRQ limit through real queue pairs, driver against model: rdma-core's
//! `tests/test_srq.py` `test_modify_srq_limit` (10 receives, limit 7, the
//! event after the 4th SEND and not before) end to end, re-armed and
//! repeated; and draining an SRQ below its limit to empty, where the
//! sender's messages wait on RNR NAKs (`rnr_retry` 7 = forever) and all
//! arrive, in order, once receives are posted again. Every profile, both
//! execution modes, every payload checked byte for byte, never the model's
//! side door.

use mlx5_driver::srq::LimitArm;
use mlx5_driver::Event;
use mlx5_sim::{ExecMode, Profile, QpState};
use mlx5_tests::qp::{payload_seq, Rig, RigConfig};
use mlx5_tests::{MODES, PROFILES};

/// Lengths that vary per message (1..=256 bytes, the buffer size).
fn len_of(seq: u64) -> usize {
    [1, 4, 37, 100, 256, 200, 64, 5][seq as usize % 8]
}

/// The SRQ limit events among `evs` (any other event fails the test).
fn limit_events(rig: &Rig, evs: &[Event]) -> usize {
    evs.iter()
        .map(|e| match e {
            Event::SrqLimit { srqn } => {
                assert_eq!(*srqn, rig.srq.srqn(), "limit event names the SRQ");
                1
            }
            other => panic!("unexpected event {other:?}"),
        })
        .sum()
}

/// Send message `seq`, receive it (payload checked), and match its send
/// completion.
fn exchange(rig: &mut Rig, seq: u64) {
    rig.send(seq, len_of(seq));
    rig.expect_message(seq, len_of(seq));
    let c = rig.wait_send(1);
    assert_eq!((c[0].wr_id, c[0].retired, c[0].error()), (seq, 1, None));
}

/// One round of the upstream test from 10 posted receives: arm 7, then 4
/// SENDs, checking the EQ after each; the event comes after the 4th only.
fn limit_round(rig: &mut Rig, first: u64, what: &str) {
    assert_eq!(rig.srq.outstanding(), 10, "{what}");
    assert_eq!(
        rig.hca.arm_srq_limit(&mut rig.srq, 7).unwrap(),
        LimitArm::Armed,
        "{what}"
    );
    assert_eq!(rig.hca.query_srq(&rig.srq).unwrap().lwm, 7, "{what}");
    assert_eq!(limit_events(rig, &rig.events()), 0, "{what}: armed");
    for k in 0..4 {
        exchange(rig, first + k);
        let expect = usize::from(k == 3);
        // An expected event may trail the completions (Rig::wait_events).
        let evs = rig.wait_events(expect);
        assert_eq!(
            limit_events(rig, &evs),
            expect,
            "{what}: after SEND {} ({} receives left)",
            k + 1,
            rig.srq.outstanding()
        );
    }
    assert_eq!(rig.srq.outstanding(), 6, "{what}");
}

fn srq_limit_scenario(cfg: RigConfig, what: &str) {
    let mut rig = Rig::new(cfg);
    rig.post_recvs(10);
    limit_round(&mut rig, 0, &format!("{what}: round 1"));
    // One-shot: a fifth SEND below the limit raises nothing more.
    exchange(&mut rig, 4);
    assert_eq!(limit_events(&rig, &rig.events()), 0, "{what}: one-shot");
    // Re-arm from 10 posted and repeat.
    rig.post_recvs(5);
    limit_round(&mut rig, 5, &format!("{what}: round 2"));
    let stats = rig.dev.traffic().stats();
    assert_eq!(stats.messages, 9, "{what}: {stats:?}");
    assert_eq!((stats.rnr_naks, stats.flushed), (0, 0), "{what}: {stats:?}");
    assert_eq!(rig.tx.outstanding_sends(), 0, "{what}");
    rig.finish(what);
}

#[test]
fn upstream_srq_limit_scenario_on_every_profile_in_both_modes() {
    for profile in PROFILES {
        for mode in MODES {
            let cfg = RigConfig::new(profile, mode);
            srq_limit_scenario(cfg, &format!("{profile:?} {mode:?}"));
        }
    }
}

#[test]
fn upstream_srq_limit_scenario_on_an_issi_0_srq() {
    // CREATE_SRQ instead of an RMP: the limit is armed with ARM_RQ.
    for mode in MODES {
        let cfg = RigConfig {
            issi: 0,
            ..RigConfig::new(Profile::ConnectX5, mode)
        };
        let rig = Rig::new(cfg);
        assert!(!rig.srq.is_rmp());
        rig.finish("ISSI 0 probe");
        srq_limit_scenario(cfg, &format!("ISSI 0 {mode:?}"));
    }
}

/// 5 receives, limit 3, 12 SENDs in one doorbell (every third signaled):
/// 5 arrive and the limit fires, the rest wait on RNR NAKs while the SRQ is
/// empty (the sender stays in RTS, nothing is lost or flushed), then 7
/// receives let all of them through, in order.
fn drain_to_empty(profile: Profile, mode: ExecMode) {
    let what = format!("{profile:?} {mode:?}");
    let mut rig = Rig::new(RigConfig::new(profile, mode));
    let len = 48;
    rig.post_recvs(5);
    assert_eq!(
        rig.hca.arm_srq_limit(&mut rig.srq, 3).unwrap(),
        LimitArm::Armed
    );
    let signaled = |seq: u64| seq % 3 == 2;
    rig.send_batch(0..12, len, signaled).unwrap();
    for (seq, (r, data)) in rig.wait_recv(5).into_iter().enumerate() {
        assert_eq!(r.byte_len as usize, len, "{what}");
        assert_eq!(payload_seq(&data), seq as u64, "{what}: order");
        assert!(
            data == mlx5_tests::qp::payload(seq as u64, len),
            "{what}: payload"
        );
    }
    assert_eq!(rig.srq.outstanding(), 0, "{what}: SRQ empty");
    // Message 2 was signaled and went through (covering 0 and 1); 3 and 4
    // went through unsignaled; 5 waits.
    let c = rig.wait_send(1);
    assert_eq!((c[0].wr_id, c[0].retired), (2, 3), "{what}");
    assert_eq!(
        limit_events(&rig, &rig.wait_events(1)),
        1,
        "{what}: below 3"
    );

    // The SRQ stays empty: the sender retries, nothing more arrives.
    rig.settle(5_000);
    let naks = rig.dev.traffic().stats().rnr_naks;
    rig.settle(20_000);
    let stats = rig.dev.traffic().stats();
    assert!(naks >= 1 && stats.rnr_naks > naks, "{what}: {stats:?}");
    assert!(
        mlx5_tests::qp::drain(&mut rig.rcq).is_empty(),
        "{what}: nothing arrives while the SRQ is empty"
    );
    assert!(mlx5_tests::qp::drain(&mut rig.scq).is_empty(), "{what}");
    let info = rig.dev.qp(rig.tx.qpn()).unwrap();
    assert!(
        info.waiting && info.state == QpState::Rts,
        "{what}: {info:?}"
    );
    assert_eq!(stats.flushed, 0, "{what}");
    assert_eq!(rig.tx.outstanding_sends(), 9, "{what}");

    // Receives again: all seven arrive in order, payloads intact.
    rig.post_recvs(7);
    for seq in 5..12 {
        rig.expect_message(seq, len);
    }
    let done: Vec<(u64, u32)> = rig
        .wait_send(3)
        .iter()
        .map(|c| {
            assert_eq!(c.error(), None, "{what}");
            (c.wr_id, c.retired)
        })
        .collect();
    assert_eq!(done, [(5, 3), (8, 3), (11, 3)], "{what}");
    assert_eq!(rig.tx.outstanding_sends(), 0, "{what}");
    assert_eq!(limit_events(&rig, &rig.events()), 0, "{what}: one-shot");
    assert_eq!(rig.dev.traffic().stats().messages, 12, "{what}");
    rig.finish(&what);
}

#[test]
fn drain_below_the_limit_to_empty_waits_on_rnr_and_loses_nothing() {
    for profile in PROFILES {
        for mode in MODES {
            drain_to_empty(profile, mode);
        }
    }
}
