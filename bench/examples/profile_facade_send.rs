//! Instruction-count probe for the verbs facade's send side beside the
//! ring API it wraps (the code `benches/facade.rs` times as
//! `facade_send/...` and `facade_send_poll/...`), for machines whose
//! timers are too noisy:
//!
//! ```sh
//! cargo build --release -p mlx5-bench --example profile_facade_send
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/cgf.out \
//!     target/release/examples/profile_facade_send sge1 1
//! callgrind_annotate --inclusive=yes /tmp/cgf.out | grep -E '(facade|ring)_(post|poll) \['
//! ```
//!
//! Arguments: `sge1`, `sge4` or `inline64`, then the batch (requests per
//! post call; also completions per poll call), then optionally `arriving`:
//! the device writes the requester CQEs one at a time, so each poll call
//! (with `batch` slots) finds one waiting. Each probe is
//! `#[inline(never)]`; divide its inclusive count by the number of
//! requests (or completions) printed.

use std::hint::black_box;

use mlx5_bench::facade_send::{RingSendRig, SendRig, SendShape, SendWorkload, SEND_WR};
use mlx5_driver::cq::Cqe;
use mlx5_driver::qp::SendRequest;
use mlx5_driver::verbs::{SendWr, WorkCompletion};

#[inline(never)]
fn facade_post(rig: &mut SendRig, wrs: &[SendWr<'_>]) {
    rig.ctx.post_send(rig.qp, wrs).unwrap();
}

#[inline(never)]
fn ring_post(r: &mut RingSendRig, reqs: &[SendRequest<'_>]) {
    r.qp.post_send(reqs).unwrap();
}

#[inline(never)]
fn facade_poll(rig: &mut SendRig, wc: &mut [WorkCompletion]) -> usize {
    rig.ctx.poll_cq(rig.cq, wc).unwrap()
}

#[inline(never)]
fn ring_poll(r: &mut RingSendRig, out: &mut [Cqe]) -> usize {
    let k = r.cq.poll(out);
    for c in &out[..k] {
        black_box(r.qp.complete_send(c).unwrap());
    }
    k
}

fn main() {
    let mut args = std::env::args().skip(1);
    let kind = args.next().unwrap_or_else(|| "sge1".into());
    let batch: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let arriving = args.next().as_deref() == Some("arriving");
    let work = SendWorkload::new(SendShape::from_arg(&kind));
    let n = SEND_WR as usize;
    let wrs = work.wrs();
    let reqs = work.reqs();
    let mut rig = SendRig::new(8);
    let mut r = RingSendRig::new(8);
    let mut wc = vec![WorkCompletion::EMPTY; batch];
    let mut out = vec![Cqe::EMPTY; batch];
    let rounds = 100;
    for _ in 0..rounds {
        // Post a full queue, k per call; the "device" completes each WQE.
        let p0 = rig.producer();
        for chunk in wrs.chunks(batch) {
            facade_post(&mut rig, chunk);
        }
        let step = rig.producer().wrapping_sub(p0) / n as u16;
        let mut got = 0;
        if arriving {
            for i in 0..n as u16 {
                rig.write_cqes(p0.wrapping_add(i.wrapping_mul(step)), step, 1);
                assert_eq!(facade_poll(&mut rig, &mut wc), 1);
            }
        } else {
            rig.write_cqes(p0, step, n);
            while got < n {
                got += facade_poll(&mut rig, &mut wc);
            }
        }
        let p0 = r.producer();
        for chunk in reqs.chunks(batch) {
            ring_post(&mut r, chunk);
        }
        let mut got = 0;
        if arriving {
            for i in 0..n as u16 {
                r.write_cqes(p0.wrapping_add(i.wrapping_mul(step)), step, 1);
                assert_eq!(ring_poll(&mut r, &mut out), 1);
            }
        } else {
            r.write_cqes(p0, step, n);
            while got < n {
                got += ring_poll(&mut r, &mut out);
            }
        }
    }
    assert_eq!(rig.ctx.stats().unmatched_cqes, 0);
    let how = if arriving {
        ", CQEs arriving one at a time"
    } else {
        ""
    };
    println!(
        "{kind} batch {batch}{how}: {} requests posted and completed through each",
        rounds * n
    );
}
