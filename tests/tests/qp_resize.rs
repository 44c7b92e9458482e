//! Resizing the receive CQ and the send CQ while real SENDs are in flight,
//! driver against model: no completion lost, duplicated or reordered. The
//! receive CQ's messages carry their sequence numbers (checked in order,
//! byte for byte); the send CQ's `wr_id`s come back in order and the
//! unsignaled requests each signaled CQE retires leave no gap. The threaded
//! model is where the device writes CQEs while the driver resizes; the
//! synchronous model runs the same sequence deterministically.

use mlx5_driver::cq::Cq;
use mlx5_driver::qp::SendQueueCaps;
use mlx5_driver::Hca;
use mlx5_hal::Hal;
use mlx5_sim::{ExecMode, Profile, SimHal};
use mlx5_tests::qp::{drain, payload, payload_seq, wait_cqes, Rig, RigConfig};
use mlx5_tests::MODES;

const LEN: usize = 40;

/// Checks the two completion streams.
#[derive(Default)]
struct Streams {
    /// Next message sequence number expected on the receive CQ.
    next_recv: u64,
    /// First send not yet retired by a send CQE.
    next_unretired: u64,
}

impl Streams {
    /// Match and check everything polled from the receive CQ.
    fn recv(&mut self, rig: &mut Rig, cqes: &[mlx5_driver::cq::Cqe], what: &str) {
        for c in cqes {
            let r = rig
                .rx
                .complete_recv(&mut rig.srq, c)
                .unwrap_or_else(|e| panic!("{what}: receive CQE refused: {e:?}"));
            assert_eq!(r.byte_len as usize, LEN, "{what}");
            let data = rig.dst.read(r.wr_id as usize % rig.dst.count(), LEN);
            assert_eq!(
                payload_seq(&data),
                self.next_recv,
                "{what}: receive order (lost, duplicated or reordered)"
            );
            assert!(data == payload(self.next_recv, LEN), "{what}: payload");
            self.next_recv += 1;
        }
    }

    /// Match and check everything polled from the send CQ.
    fn send(&mut self, rig: &mut Rig, cqes: &[mlx5_driver::cq::Cqe], what: &str) {
        for c in cqes {
            let s = rig
                .tx
                .complete_send(c)
                .unwrap_or_else(|e| panic!("{what}: send CQE refused: {e:?}"));
            assert_eq!(s.error(), None, "{what}: {s:?}");
            assert!(s.signaled, "{what}: {s:?}");
            assert!(
                s.wr_id >= self.next_unretired,
                "{what}: send completion out of order or duplicated ({s:?})"
            );
            assert_eq!(
                s.retired as u64,
                s.wr_id + 1 - self.next_unretired,
                "{what}: a gap before this send completion ({s:?})"
            );
            self.next_unretired = s.wr_id + 1;
        }
    }
}

/// Resize `cq` to `entries`, which must succeed.
fn resize(hca: &Hca<SimHal>, cq: &mut Cq<SimHal>, entries: u32, what: &str) {
    hca.resize_cq(cq, entries)
        .unwrap_or_else(|e| panic!("{what}: resize to {entries}: {e}"));
    assert_eq!(
        cq.capacity(),
        (entries + 1).next_power_of_two() - 1,
        "{what}"
    );
}

const SIZES: [u32; 6] = [31, 127, 63, 255, 47, 511];

fn rig(profile: Profile, mode: ExecMode) -> Rig {
    Rig::new(RigConfig {
        srq_wr: 127,
        sq: SendQueueCaps {
            max_send_wr: 64,
            max_send_sge: 1,
            max_inline_data: 0,
        },
        cq_entries: (63, 63),
        nbufs: 256,
        ..RigConfig::new(profile, mode)
    })
}

/// Rounds of: post a batch of SENDs (one doorbell, mixed signaling, the
/// last signaled), resize one CQ at once (the device is executing the
/// batch), poll part of both CQs, resize the other, poll the rest.
fn batches_with_resizes(profile: Profile, mode: ExecMode, rounds: u64) {
    let what = format!("{profile:?} {mode:?}");
    let mut rig = rig(profile, mode);
    let mut st = Streams::default();
    let mut seq = 0u64;
    let signaled_in = |end: u64| move |s: u64| s % 4 != 1 || s + 1 == end;
    for r in 0..rounds {
        let b = 1 + (r * 7) % 24;
        let end = seq + b;
        let sig = signaled_in(end);
        let signaled = (seq..end).filter(|&s| sig(s)).count();
        rig.post_recvs(b);
        rig.send_batch(seq..end, LEN, sig).unwrap();
        // Even rounds: the receive CQ first, then the send CQ; odd: reverse.
        let first = r % 2 == 0;
        let second = !first;
        let size = |k: u64| SIZES[((r + k) % SIZES.len() as u64) as usize];
        let w = format!("{what} round {r}");
        // While the device works through the batch.
        let cq = if first { &mut rig.rcq } else { &mut rig.scq };
        resize(&rig.hca, cq, size(0), &w);
        let half = (b as usize).div_ceil(2);
        let got = wait_cqes(&rig.hca, &mut rig.rcq, half);
        st.recv(&mut rig, &got, &w);
        let got = drain(&mut rig.scq);
        let send_seen = got.len();
        st.send(&mut rig, &got, &w);
        let cq = if second { &mut rig.rcq } else { &mut rig.scq };
        resize(&rig.hca, cq, size(1), &w);
        let got = wait_cqes(&rig.hca, &mut rig.rcq, b as usize - half);
        st.recv(&mut rig, &got, &w);
        let got = wait_cqes(&rig.hca, &mut rig.scq, signaled - send_seen);
        st.send(&mut rig, &got, &w);
        assert_eq!((st.next_recv, st.next_unretired), (end, end), "{w}");
        seq = end;
    }
    rig.settle(200);
    assert!(drain(&mut rig.rcq).is_empty(), "{what}: a duplicate CQE");
    assert!(drain(&mut rig.scq).is_empty(), "{what}: a duplicate CQE");
    assert!(
        rig.events().is_empty(),
        "{what}: no CQ error or other event"
    );
    assert_eq!(rig.dev.traffic().stats().messages, seq, "{what}");
    rig.finish(&what);
}

#[test]
fn resize_both_cqs_while_batches_of_sends_are_in_flight() {
    for mode in MODES {
        let rounds = if mode == ExecMode::Threaded { 80 } else { 40 };
        batches_with_resizes(Profile::ConnectX6Dx, mode, rounds);
    }
}

/// 48 signaled SENDs posted into an empty SRQ: they wait on RNR NAKs and
/// trickle through as receives are posted a few at a time. Each step
/// resizes both CQs while deliveries happen on the device's RNR timer (on
/// the device thread in threaded mode, at arbitrary moments relative to the
/// MODIFY_CQ commands).
fn trickle_under_rnr(profile: Profile, mode: ExecMode) {
    let what = format!("{profile:?} {mode:?} trickle");
    let mut rig = rig(profile, mode);
    const N: u64 = 48;
    rig.send_batch(0..N, LEN, |_| true).unwrap();
    let mut st = Streams::default();
    let mut step = 0usize;
    while st.next_recv < N || st.next_unretired < N {
        assert!(step < 20_000, "{what}: stuck at {}", st.next_recv);
        // At most 9 receives unconsumed, so a burst never exceeds the
        // smallest CQ between two polls.
        if rig.next_recv < N && rig.srq.outstanding() < 6 {
            rig.post_recvs(3.min(N - rig.next_recv));
        }
        let w = format!("{what} step {step}");
        resize(&rig.hca, &mut rig.rcq, SIZES[step % 6], &w);
        resize(&rig.hca, &mut rig.scq, SIZES[(step + 3) % 6], &w);
        let got = drain(&mut rig.rcq);
        st.recv(&mut rig, &got, &w);
        let got = drain(&mut rig.scq);
        st.send(&mut rig, &got, &w);
        rig.hca.hal().delay_us(300);
        step += 1;
    }
    assert!(
        rig.dev.traffic().stats().rnr_naks > 0,
        "{what}: the sends waited"
    );
    rig.settle(200);
    assert!(drain(&mut rig.rcq).is_empty(), "{what}: a duplicate CQE");
    assert!(drain(&mut rig.scq).is_empty(), "{what}: a duplicate CQE");
    assert!(
        rig.events().is_empty(),
        "{what}: no CQ error or other event"
    );
    rig.finish(&what);
}

#[test]
fn resize_both_cqs_while_sends_trickle_through_rnr_waits() {
    for mode in MODES {
        trickle_under_rnr(Profile::ConnectX5, mode);
    }
}
