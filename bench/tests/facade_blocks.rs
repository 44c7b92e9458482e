//! The receive blocks `benches/facade.rs` and `examples/ab_facade_recv.rs`
//! time hand back the same completions through the verbs facade and through
//! the ring API (with and without the facade's checks), and the send
//! workload's two request lists describe the same requests.

use mlx5_bench::facade::{recv_wrs, sges, Rig};
use mlx5_bench::facade_recv::{Checking, RingSide, Trusting, LOOP_P, LOOP_WR};
use mlx5_bench::facade_send::{SendShape, SendWorkload, SEND_WR};
use mlx5_driver::cq::Cqe;
use mlx5_driver::qp::Payload;
use mlx5_driver::verbs::{SendFlags, WorkCompletion};

const N: usize = 255;

#[test]
fn poll_blocks_count_every_completion() {
    let sge = sges(1);
    for b in [1usize, 16, 64] {
        let mut rig = Rig::new(8, N as u32, 1);
        let mut wc = vec![WorkCompletion::EMPTY; b];
        let mut ring = RingSide::new(8, N, 1);
        let mut checked = RingSide::new(8, N, 1);
        let (mut out, mut ids) = (vec![Cqe::EMPTY; b], vec![0u64; b]);
        for _ in 0..3 {
            rig.fill(N, &sge);
            rig.device_completes(N);
            assert_eq!(rig.poll_block(&mut wc, N), N);
            ring.fill(N, &sge);
            ring.device_completes(N);
            assert_eq!(ring.poll_block(&mut out, &mut ids, N, &Trusting), N);
            checked.fill(N, &sge);
            checked.device_completes(N);
            assert_eq!(checked.poll_block(&mut out, &mut ids, N, &Checking), N);
            assert_eq!(ring.r.srq.outstanding(), 0);
            assert_eq!(checked.r.srq.outstanding(), 0);
        }
        assert_eq!(rig.ctx.stats().unmatched_cqes, 0);
    }
}

#[test]
fn arriving_blocks_find_one_completion_per_call_and_agree() {
    let sge = sges(1);
    let mut rig = Rig::new(8, N as u32, 1);
    let mut wc = [WorkCompletion::EMPTY; 16];
    let mut ring = RingSide::new(8, N, 1);
    let mut checked = RingSide::new(8, N, 1);
    let (mut out, mut ids) = ([Cqe::EMPTY; 16], [0u64; 16]);
    for _ in 0..3 {
        rig.fill(N, &sge);
        ring.fill(N, &sge);
        checked.fill(N, &sge);
        // Held CQEs are the device's: nothing to poll before a release.
        let held = rig.device_completes_held(N);
        assert_eq!(rig.ctx.poll_cq(rig.cq, &mut wc).unwrap(), 0);
        // SAFETY: `held` was just written into the rig's CQ.
        let got = unsafe { rig.poll_arriving_block(&mut wc, &held, N) };
        assert_eq!(got, N);
        let held = ring.device_completes_held(N);
        // SAFETY: `held` was just written into this side's ring.
        let got = unsafe { ring.poll_arriving_block(&mut out, &mut ids, &held, N, &Trusting) };
        assert_eq!((got, ids[0]), (N, wc[0].wr_id));
        let held = checked.device_completes_held(N);
        // SAFETY: `held` was just written into this side's ring.
        let got = unsafe { checked.poll_arriving_block(&mut out, &mut ids, &held, N, &Checking) };
        assert_eq!((got, ids[0]), (N, wc[0].wr_id));
        assert_eq!(ring.r.srq.outstanding(), 0);
        assert_eq!(checked.r.srq.outstanding(), 0);
    }
    // One CQE per release: a block of one finds exactly it, each time.
    rig.fill(N, &sge);
    for i in 0..N {
        let held = rig.device_completes_held(1);
        // SAFETY: `held` was just written into the rig's CQ.
        let got = unsafe { rig.poll_arriving_block(&mut wc, &held, 1) };
        assert_eq!((got, wc[0].wr_id), (1, i as u64));
    }
    assert_eq!(rig.ctx.stats().unmatched_cqes, 0);
}

#[test]
fn drains_return_wr_ids_in_posting_order() {
    let sge = sges(1);
    let mut rig = Rig::new(8, N as u32, 1);
    let mut ring = RingSide::new(8, N, 1);
    let want: Vec<u64> = (0..N as u64).collect();
    for _ in 0..3 {
        rig.fill(N, &sge);
        rig.device_completes(N);
        assert_eq!(rig.drain(N), want);
        ring.fill(N, &sge);
        ring.device_completes(N);
        assert_eq!(ring.drain(N), want);
    }
}

#[test]
fn loop_blocks_agree() {
    let sge = sges(1);
    for b in [1usize, 16, 64] {
        let mut rig = Rig::new(8, LOOP_WR, 1);
        rig.fill(LOOP_WR as usize, &sge);
        let wrs = recv_wrs(b, &sge);
        let mut wc = vec![WorkCompletion::EMPTY; b];
        let mut ring = RingSide::new(8, LOOP_WR as usize, 1);
        ring.fill(LOOP_WR as usize, &sge);
        let (mut out, mut ids) = (vec![Cqe::EMPTY; b], vec![0u64; b]);
        let last = (LOOP_P - 1) % b + 1;
        for _ in 0..4 {
            rig.device_completes(LOOP_P);
            assert_eq!(rig.loop_block(&mut wc, &wrs, LOOP_P), LOOP_P);
            ring.device_completes(LOOP_P);
            assert_eq!(
                ring.loop_block(&mut out, &mut ids, LOOP_P, &sge, &Checking),
                LOOP_P
            );
            let facade_ids: Vec<u64> = wc[..last].iter().map(|w| w.wr_id).collect();
            assert_eq!(facade_ids, ids[..last]);
        }
        assert_eq!(rig.ctx.stats().unmatched_cqes, 0);
    }
}

#[test]
fn post_blocks_post_every_request() {
    for nsge in [1usize, 4] {
        let sge = sges(nsge);
        for per_call in [1usize, 16] {
            let mut rig = Rig::new(8, N as u32, nsge as u32 + 1);
            let wrs = recv_wrs(N, &sge);
            let mut ring = RingSide::new(8, N, nsge + 1);
            let mut each = RingSide::new(8, N, nsge + 1);
            let wr_ids: Vec<u64> = (0..N as u64).collect();
            for _ in 0..3 {
                rig.post_chunks(&wrs, per_call);
                rig.device_completes(N);
                assert_eq!(rig.drain(N), wr_ids);
                ring.post_chunks(&wr_ids, &sge, per_call);
                ring.device_completes(N);
                assert_eq!(ring.drain(N), wr_ids);
                each.post_each_chunks(&wr_ids, &sge, per_call);
                each.device_completes(N);
                assert_eq!(each.drain(N), wr_ids);
            }
        }
    }
}

#[test]
fn send_workload_lists_agree() {
    for shape in SendShape::ALL {
        let work = SendWorkload::new(shape);
        let (wrs, reqs) = (work.wrs(), work.reqs());
        assert_eq!(
            (wrs.len(), reqs.len()),
            (SEND_WR as usize, SEND_WR as usize)
        );
        assert_eq!(work.sges().len(), shape.sge_count());
        for (i, (w, r)) in wrs.iter().zip(&reqs).enumerate() {
            assert_eq!((w.wr_id, r.wr_id), (i as u64, i as u64));
            assert!(w.send_flags.contains(SendFlags::SIGNALED) && r.signaled);
            let inline = w.send_flags.contains(SendFlags::INLINE);
            match r.payload {
                Payload::Inline(d) => {
                    assert!(inline);
                    assert_eq!(d, w.inline_data);
                    assert_eq!(d.len(), shape.inline_len());
                }
                Payload::Sges(s) => {
                    assert!(!inline);
                    assert_eq!(s, w.sg_list);
                }
            }
        }
        assert_eq!(SendShape::from_arg(shape_arg(shape)), shape);
    }
}

fn shape_arg(shape: SendShape) -> &'static str {
    match shape {
        SendShape::Sge1 => "sge1",
        SendShape::Sge4 => "sge4",
        SendShape::Inline64 => "inline64",
    }
}
