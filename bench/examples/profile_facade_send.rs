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
//! post call; also completions per poll call). Each probe is
//! `#[inline(never)]`; divide its inclusive count by the number of
//! requests (or completions) printed.

use std::hint::black_box;

use mlx5_bench::facade_send::{write_req_cqes, RingSendRig, SendRig, SEND_WR};
use mlx5_driver::cq::Cqe;
use mlx5_driver::qp::{Payload, SendOp, SendRequest};
use mlx5_driver::srq::Sge;
use mlx5_driver::verbs::{SendFlags, SendWr, WorkCompletion};

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
    let (nsge, inline) = match kind.as_str() {
        "sge4" => (4, 0),
        "inline64" => (0, 64),
        _ => (1, 0),
    };
    let sge: Vec<Sge> = (0..nsge as u64)
        .map(|i| Sge {
            addr: 0x10_0000 + i * 4096,
            length: 1024,
            lkey: 0x42,
        })
        .collect();
    let data = [0x5au8; 64];
    let n = SEND_WR as usize;
    let flags = if inline > 0 {
        SendFlags::SIGNALED | SendFlags::INLINE
    } else {
        SendFlags::SIGNALED
    };
    let wrs: Vec<SendWr> = (0..n as u64)
        .map(|i| SendWr {
            wr_id: i,
            send_flags: flags,
            sg_list: &sge,
            inline_data: &data[..inline],
            ..SendWr::EMPTY
        })
        .collect();
    let reqs: Vec<SendRequest> = (0..n as u64)
        .map(|i| SendRequest {
            wr_id: i,
            op: SendOp::Send,
            payload: if inline > 0 {
                Payload::Inline(&data[..inline])
            } else {
                Payload::Sges(&sge)
            },
            signaled: true,
            solicited: false,
        })
        .collect();
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
        let ring = rig.ctx.cq(rig.cq).unwrap().ring();
        write_req_cqes(ring, ring.consumer_index(), rig.qpn, p0, step, n);
        let mut got = 0;
        while got < n {
            got += facade_poll(&mut rig, &mut wc);
        }
        let p0 = r.producer();
        for chunk in reqs.chunks(batch) {
            ring_post(&mut r, chunk);
        }
        let ci = r.cq.ring().consumer_index();
        write_req_cqes(r.cq.ring(), ci, r.qp.qpn(), p0, step, n);
        let mut got = 0;
        while got < n {
            got += ring_poll(&mut r, &mut out);
        }
    }
    assert_eq!(rig.ctx.stats().unmatched_cqes, 0);
    println!(
        "{kind} batch {batch}: {} requests posted and completed through each",
        rounds * n
    );
}
