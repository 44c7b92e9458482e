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

/// The requester CQEs of one round: `n`, naming WQE counters
/// `p0 + i·step`, written all at once or (`arriving`) one before each
/// poll call.
#[derive(Clone, Copy)]
struct Cqes {
    p0: u16,
    step: u16,
    n: usize,
    arriving: bool,
}

impl Cqes {
    /// Play the device for `side` (`write`: its `write_cqes`) and poll
    /// them all through `poll`; arriving, every call must take exactly one.
    fn complete<S>(
        self,
        side: &mut S,
        write: impl Fn(&S, u16, u16, usize),
        mut poll: impl FnMut(&mut S) -> usize,
    ) {
        if self.arriving {
            for i in 0..self.n as u16 {
                write(
                    side,
                    self.p0.wrapping_add(i.wrapping_mul(self.step)),
                    self.step,
                    1,
                );
                assert_eq!(poll(side), 1);
            }
        } else {
            write(side, self.p0, self.step, self.n);
            let mut got = 0;
            while got < self.n {
                got += poll(side);
            }
        }
    }
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
        let cqes = Cqes {
            p0,
            step,
            n,
            arriving,
        };
        cqes.complete(&mut rig, SendRig::write_cqes, |rig| {
            facade_poll(rig, &mut wc)
        });
        let p0 = r.producer();
        for chunk in reqs.chunks(batch) {
            ring_post(&mut r, chunk);
        }
        let cqes = Cqes { p0, ..cqes };
        cqes.complete(&mut r, RingSendRig::write_cqes, |r| ring_poll(r, &mut out));
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
