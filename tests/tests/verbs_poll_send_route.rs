//! A send CQ keeps the QP of the last requester CQE it matched as its
//! route, and `poll_cq` (one per call, a burst, one waiting among many
//! slots) and the lazy extended-CQ loop take that QP's next successful
//! CQEs on a short way that skips the QPN map. Each check the route
//! stands in for is exercised here with CQEs the device should not have
//! written (the model's side door plays a device that cannot be trusted):
//! a short way that skipped one would match a completion this test
//! expects to be refused, and every way must refuse them alike.

use mlx5_driver::unstable;
use mlx5_driver::verbs::{SendWr, WcOpcode, WcStatus, WorkCompletion, WrOpcode};
use mlx5_sim::{Device, Profile};
use mlx5_tests::verbs_common::{cap, close, open, send, Ctx, Pair};

/// How the send CQ is drained.
#[derive(Debug, Clone, Copy)]
enum Way {
    /// `poll_cq` with this many slots.
    Poll(usize),
    /// `start_poll` / `next_poll` / `end_poll`.
    Lazy,
}

/// Everything in `p.scq` now, drained `way`; the device then sees the
/// consumer index the CQ reached.
fn take(ctx: &mut Ctx, p: &Pair, way: Way) -> Vec<WorkCompletion> {
    let mut got = Vec::new();
    match way {
        Way::Poll(n) => {
            let mut wc = vec![WorkCompletion::EMPTY; n];
            loop {
                let k = ctx.poll_cq(p.scq, &mut wc).unwrap();
                got.extend_from_slice(&wc[..k]);
                if k == 0 {
                    break;
                }
            }
        }
        Way::Lazy => {
            if let Ok(mut pass) = ctx.start_poll(p.scq) {
                loop {
                    got.push(pass.work_completion());
                    if pass.next_poll().is_err() {
                        break;
                    }
                }
                pass.end_poll();
            }
        }
    }
    let c = ctx.cq(p.scq).unwrap();
    let published = ctx.hca().query_cq(c).unwrap().consumer_counter;
    assert_eq!(published, c.consumer_index() & 0xff_ffff, "{way:?}");
    got
}

/// Let the model carry out what was posted.
fn run(dev: &Device) {
    for _ in 0..20 {
        dev.advance_us(100);
    }
}

/// The send queue's producer counter: the WQE index the next request
/// gets.
fn next_wqe(ctx: &Ctx, p: &Pair) -> u16 {
    unstable::qp::send_ring(ctx.qp(p.a).unwrap())
        .expect("send queue")
        .producer_counter()
}

/// What a refused CQE becomes.
fn refused(w: &WorkCompletion, wr_id: u64) -> bool {
    w.status == WcStatus::GeneralErr
        && w.vendor_err == WorkCompletion::VENDOR_ERR_UNMATCHED
        && w.wr_id == wr_id
}

/// The route's cases, the send CQ drained `way`, the hostile CQEs written
/// all at once or (`arriving`) one before each drain. Returns what every
/// drain gave, for the ways to be compared.
fn route_cases(way: Way, arriving: bool) -> Vec<WorkCompletion> {
    let (dev, mut ctx) = open(Profile::ConnectX5);
    let p = Pair::new(&dev, &mut ctx, cap(16, 1, 0));
    p.post_recv(&mut ctx, 100, 32);
    let sg = [p.sge(0, 8)];
    let (qa, qb) = (ctx.qp_num(p.a).unwrap(), ctx.qp_num(p.b).unwrap());
    let scqn = ctx.cq_num(p.scq).unwrap();
    let mut all = Vec::new();

    // A good completion: the CQ's route is A from here on.
    let first = next_wqe(&ctx, &p);
    ctx.post_send(p.a, &[send(1, &sg)]).unwrap();
    run(&dev);
    let got = take(&mut ctx, &p, way);
    assert_eq!(got.len(), 1, "{way:?}");
    assert_eq!(
        (got[0].wr_id, got[0].status, got[0].qp_num),
        (1, WcStatus::Success, qa)
    );
    all.extend(got);

    // An RDMA WRITE, carried out; its CQE, unpolled, then claims a SEND
    // (the device's opcode byte rewritten: retired as the general way
    // retires it, with the request's id, and refused).
    let write_wqe = next_wqe(&ctx, &p);
    let wr = SendWr {
        opcode: WrOpcode::RdmaWrite,
        remote_addr: p.buf.iova() + 4096,
        rkey: p.rkey(),
        ..send(7, &sg)
    };
    ctx.post_send(p.a, &[wr]).unwrap();
    run(&dev);
    {
        let ring = unstable::cq::ring(ctx.cq(p.scq).unwrap());
        let stride = ring.cqe_size().stride();
        let slot = (ring.consumer_index() & (ring.nent() as u32 - 1)) as usize;
        let cqe = ring.base_offset() + slot * stride + stride - 64;
        // `sop_drop_qpn`'s top byte: the WQE opcode (SEND is 0x0a).
        assert_eq!(ring.region().read_u8(cqe + 0x38), 0x08, "RDMA WRITE");
        ring.region().write_u8(cqe + 0x38, 0x0a);
    }
    let before = ctx.stats().unmatched_cqes;
    // Then, each refused: on A's route a WQE index never posted and a WQE
    // already retired (a replay); B's number with an index B never posted
    // (another QP: the map).
    let hostile = [(qa, write_wqe.wrapping_add(5)), (qa, first), (qb, 9)];
    let mut got = Vec::new();
    if arriving {
        got.extend(take(&mut ctx, &p, way));
    }
    for (i, &(qpn, wqe)) in hostile.iter().enumerate() {
        dev.traffic().complete_send(scqn, qpn, wqe, 0).unwrap();
        if arriving || i == hostile.len() - 1 {
            got.extend(take(&mut ctx, &p, way));
        }
    }
    assert_eq!(got.len(), 4, "{way:?} arriving {arriving}: {got:?}");
    assert!(refused(&got[0], 7), "wrong opcode: {:?}", got[0]);
    assert!(refused(&got[1], 0), "never posted: {:?}", got[1]);
    assert!(refused(&got[2], 0), "replayed: {:?}", got[2]);
    assert!(refused(&got[3], 0), "B's unposted index: {:?}", got[3]);
    let qpns = got.iter().map(|w| w.qp_num).collect::<Vec<_>>();
    assert_eq!(qpns, [qa, qa, qa, qb]);
    assert_eq!(ctx.stats().unmatched_cqes, before + 4);
    all.extend(got);

    // A goes on: good completions on the route again, in order, with
    // their opcodes.
    let wrs = [send(20, &sg), send(21, &sg), send(22, &sg)];
    ctx.post_send(p.a, &wrs).unwrap();
    run(&dev);
    let good = take(&mut ctx, &p, way);
    let ids: Vec<(u64, WcStatus, WcOpcode)> =
        good.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect();
    assert_eq!(
        ids,
        [20, 21, 22].map(|i| (i, WcStatus::Success, WcOpcode::Send)),
        "{way:?}"
    );
    assert_eq!(ctx.stats().unmatched_cqes, before + 4);
    all.extend(good);
    for w in &mut all {
        // The lazy API has no reader for the P_Key index.
        w.pkey_index = 0;
    }
    while ctx
        .poll_cq(p.rcq, &mut [WorkCompletion::EMPTY; 16])
        .unwrap()
        > 0
    {}
    p.destroy(&mut ctx);
    close(&dev, ctx, "send route");
    all
}

#[test]
fn every_way_refuses_what_the_send_route_must_not_match() {
    let want = route_cases(Way::Poll(16), false);
    for way in [Way::Poll(1), Way::Poll(3), Way::Poll(16), Way::Lazy] {
        for arriving in [false, true] {
            assert_eq!(
                route_cases(way, arriving),
                want,
                "{way:?} arriving {arriving}"
            );
        }
    }
}
