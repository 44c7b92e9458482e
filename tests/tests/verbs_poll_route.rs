//! `poll_cq` matches a receive on a QP's SRQ from the route it keeps for
//! the QP (its receive CQ, its SRQ and that SRQ's number), without reaching
//! the QP; everything else takes the general path. Each check the route
//! stands in for is exercised here with CQEs written into the ring by the
//! test (playing a device that cannot be trusted): a route that skipped
//! one would match a completion this test expects to be refused.

use mlx5_driver::qp::QpState;
use mlx5_driver::unstable;
use mlx5_driver::verbs::{
    CqHandle, QpCap, QpInitAttr, SrqHandle, SrqInitAttr, WcOpcode, WcStatus, WorkCompletion,
};
use mlx5_regs::consts::cqe_syndrome as syn;
use mlx5_regs::CqeOpcode;
use mlx5_sim::Profile;
use mlx5_tests::verbs_common::{close, open, Ctx, Pair, SLOT};

/// One CQE as a device would write it.
struct Put {
    opcode: CqeOpcode,
    qpn: u32,
    srqn: u32,
    wqe: u16,
    byte_len: u32,
    imm: u32,
    syndrome: u8,
}

/// Write `cqes` into `cq`'s ring from its consumer index on, each owned by
/// software for its pass (layout: docs/firmware.md §7.2).
fn write(ctx: &Ctx, cq: CqHandle, cqes: &[Put]) {
    let ring = unstable::cq::ring(ctx.cq(cq).unwrap());
    let r = ring.region();
    let stride = ring.cqe_size().stride();
    let mask = ring.nent() as u32 - 1;
    let ci = ring.consumer_index();
    for (i, c) in cqes.iter().enumerate() {
        let idx = ci.wrapping_add(i as u32);
        let at = ring.base_offset() + (idx & mask) as usize * stride + stride - 64;
        let owner = ((idx >> ring.log_nent()) & 1) as u8;
        r.write_be32(at + 0x18, 0x77);
        r.write_be32(at + 0x20, c.srqn);
        r.write_be32(at + 0x24, c.imm);
        r.write_be32(at + 0x2c, c.byte_len);
        r.write_be32(at + 0x34, c.syndrome as u32);
        r.write_be32(at + 0x38, c.qpn);
        r.write_be16(at + 0x3c, c.wqe);
        r.write_u8(at + 0x3f, (c.opcode.0 << 4) | owner);
    }
}

/// A successful one-byte RESP_SEND for `qpn` through `srqn`, WQE `wqe`.
fn send1(qpn: u32, srqn: u32, wqe: u16) -> Put {
    Put {
        opcode: CqeOpcode::RESP_SEND,
        qpn,
        srqn,
        wqe,
        byte_len: 1,
        imm: 0,
        syndrome: 0,
    }
}

/// A QP on the pair's CQs and SRQ (the attributes; other CQs by update).
fn on_pair(p: &Pair) -> QpInitAttr {
    QpInitAttr {
        send_cq: p.scq,
        recv_cq: p.rcq,
        srq: Some(p.srq),
        cap: QpCap::default(),
        sq_sig_all: false,
    }
}

/// The SRQ WQE index holding `wr_id`.
fn wqe_of(ctx: &Ctx, srq: SrqHandle, wr_id: u64) -> u16 {
    let ring = unstable::srq::ring(ctx.srq(srq).unwrap());
    (0..=u16::MAX)
        .find(|&i| ring.wr_id(i) == Some(wr_id))
        .expect("posted")
}

/// A free WQE index of `srq` (posted nowhere).
fn free_wqe(ctx: &Ctx, srq: SrqHandle) -> u16 {
    let ring = unstable::srq::ring(ctx.srq(srq).unwrap());
    (0..64)
        .find(|&i| ring.wr_id(i).is_none())
        .expect("a free WQE")
}

/// Everything in `cq`, polled `batch` at a time. After every call the
/// device sees the consumer index the CQ reached (QUERY_CQ reads it from
/// the doorbell record): each path publishes what it took.
fn poll_all(ctx: &mut Ctx, cq: CqHandle, batch: usize) -> Vec<WorkCompletion> {
    let mut wc = vec![WorkCompletion::EMPTY; batch];
    let mut got = Vec::new();
    loop {
        let n = ctx.poll_cq(cq, &mut wc).unwrap();
        got.extend_from_slice(&wc[..n]);
        let c = ctx.cq(cq).unwrap();
        let published = ctx.hca().query_cq(c).unwrap().consumer_counter;
        assert_eq!(published, c.consumer_index() & 0xff_ffff, "batch {batch}");
        if n == 0 {
            return got;
        }
    }
}

/// [`poll_all`] with the device writing `cqes` one at a time: each call
/// finds one CQE waiting, however many slots it passes (a latency-bound
/// loop's usual case, which has a path of its own), and takes it.
fn poll_arriving(ctx: &mut Ctx, cq: CqHandle, cqes: &[Put], batch: usize) -> Vec<WorkCompletion> {
    let mut got = Vec::new();
    for (i, c) in cqes.iter().enumerate() {
        write(ctx, cq, std::slice::from_ref(c));
        let one = poll_all(ctx, cq, batch);
        assert_eq!(one.len(), 1, "CQE {i}, batch {batch}");
        got.extend(one);
    }
    got
}

#[test]
fn a_receive_matched_by_the_route_gives_the_completion_the_general_path_would() {
    // One per call has a path of its own, and so has a call that finds
    // one CQE waiting.
    for batch in [1, 3, 16] {
        route_cases(batch, false);
        route_cases(batch, true);
    }
}

/// The route's cases, polled `batch` at a time, the CQEs written all at
/// once or (`arriving`) one at a time.
fn route_cases(batch: usize, arriving: bool) {
    let (dev, mut ctx) = open(Profile::ConnectX5);
    let p = Pair::unconnected(&dev, &mut ctx, QpCap::default());
    // A second SRQ, and a QP receiving on another CQ through it.
    let (cq2, _) = ctx.create_cq(63).unwrap();
    let (srq2, _) = ctx
        .create_srq(&SrqInitAttr {
            max_wr: 15,
            max_sge: 1,
            srq_limit: 0,
            cq: Some(cq2),
        })
        .unwrap();
    let (c, _) = ctx
        .create_qp(&QpInitAttr {
            send_cq: p.scq,
            recv_cq: cq2,
            srq: Some(srq2),
            cap: QpCap::default(),
            sq_sig_all: false,
        })
        .unwrap();
    p.post_recv(&mut ctx, 100, 8);
    let sge = [p.sge(0, SLOT as u32)];
    ctx.post_srq_recv(
        srq2,
        &[mlx5_driver::verbs::RecvWr {
            wr_id: 900,
            sges: &sge,
        }],
    )
    .unwrap();
    let qpn_a = ctx.qp_num(p.a).unwrap();
    let qpn_c = ctx.qp_num(c).unwrap();
    let srqn = ctx.srq_num(p.srq).unwrap();
    let srqn2 = ctx.srq_num(srq2).unwrap();
    let w: Vec<u16> = (100..108).map(|id| wqe_of(&ctx, p.srq, id)).collect();
    let never = free_wqe(&ctx, p.srq);
    let w900 = wqe_of(&ctx, srq2, 900);
    let put = |opcode, qpn, srqn, wqe, byte_len, imm| Put {
        opcode,
        qpn,
        srqn,
        wqe,
        byte_len,
        imm,
        syndrome: 0,
    };
    let cqes = [
        // 0..3: the four receive opcodes, matched.
        put(CqeOpcode::RESP_SEND, qpn_a, srqn, w[0], 100, 0),
        put(CqeOpcode::RESP_SEND_IMM, qpn_a, srqn, w[1], 7, 0x1234_5678),
        put(CqeOpcode::RESP_SEND_INV, qpn_a, srqn, w[2], 0, 0xabcd),
        // RDMA WRITE with immediate scatters nothing: its length is not
        // held against the WQE's buffers.
        put(CqeOpcode::RESP_WR_IMM, qpn_a, srqn, w[3], 1 << 20, 42),
        // 4: more bytes than the WQE holds: freed, refused, wr_id kept.
        put(CqeOpcode::RESP_SEND, qpn_a, srqn, w[4], SLOT as u32 + 1, 0),
        // 5: a WQE never posted.
        put(CqeOpcode::RESP_SEND, qpn_a, srqn, never, 1, 0),
        // 6: the QP, but another SRQ's number (naming a WQE posted in both).
        put(CqeOpcode::RESP_SEND, qpn_a, srqn2, w[6], 1, 0),
        // 7: a QP that receives on another CQ (naming its posted WQE).
        put(CqeOpcode::RESP_SEND, qpn_c, srqn2, w900, 1, 0),
        // 8: an error completion: it also moves the QP to ERR.
        Put {
            syndrome: syn::WR_FLUSH_ERR,
            ..put(CqeOpcode::RESP_ERR, qpn_a, srqn, w[5], 0, 0)
        },
        // 9: an opcode no receive has.
        put(CqeOpcode::RESIZE_CQ, qpn_a, srqn, w[6], 1, 0),
        // 10: and the stream goes on.
        put(CqeOpcode::RESP_SEND, qpn_a, srqn, w[7], 64, 0),
    ];
    let got = if arriving {
        poll_arriving(&mut ctx, p.rcq, &cqes, batch)
    } else {
        write(&ctx, p.rcq, &cqes);
        poll_all(&mut ctx, p.rcq, batch)
    };
    assert_eq!(got.len(), cqes.len(), "batch {batch}");
    let ok = |i: usize, wr_id, opcode, byte_len, imm, inv| {
        let e = WorkCompletion {
            wr_id,
            status: WcStatus::Success,
            opcode,
            vendor_err: 0,
            byte_len,
            imm_data: imm,
            invalidated_rkey: inv,
            qp_num: qpn_a,
            srq_num: Some(srqn),
            // `write` puts 0x77 in `flags_rqpn`: the source QP.
            src_qp: 0x77,
            wc_flags: if imm.is_some() {
                mlx5_driver::verbs::WC_WITH_IMM
            } else if inv.is_some() {
                mlx5_driver::verbs::WC_WITH_INV
            } else {
                0
            },
            ..WorkCompletion::EMPTY
        };
        assert_eq!(got[i], e, "CQE {i}, batch {batch}");
    };
    ok(0, 100, WcOpcode::Recv, 100, None, None);
    ok(1, 101, WcOpcode::Recv, 7, Some(0x1234_5678), None);
    ok(2, 102, WcOpcode::Recv, 0, None, Some(0xabcd));
    ok(3, 103, WcOpcode::RecvRdmaWithImm, 1 << 20, Some(42), None);
    let refused = |i: usize, wr_id, srq_num| {
        let g = &got[i];
        assert_eq!(
            (g.wr_id, g.status, g.vendor_err, g.srq_num),
            (
                wr_id,
                WcStatus::GeneralErr,
                WorkCompletion::VENDOR_ERR_UNMATCHED,
                Some(srq_num)
            ),
            "CQE {i}, batch {batch}"
        );
    };
    refused(4, 104, srqn);
    refused(5, 0, srqn);
    refused(6, 0, srqn2);
    refused(7, 0, srqn2);
    assert_eq!(
        (got[8].wr_id, got[8].status, got[8].opcode, got[8].qp_num),
        (105, WcStatus::WrFlushErr, WcOpcode::Recv, qpn_a)
    );
    assert_eq!(
        (got[9].status, got[9].vendor_err),
        (WcStatus::GeneralErr, WorkCompletion::VENDOR_ERR_UNMATCHED)
    );
    ok(10, 107, WcOpcode::Recv, 64, None, None);
    // The counts: five completions matched nothing; the QP's SRQ refused
    // three (the length, the WQE never posted, another SRQ's number);
    // nothing was taken from the second SRQ.
    assert_eq!(ctx.stats().unmatched_cqes, 5);
    assert_eq!(ctx.srq(p.srq).unwrap().rejected_cqes(), 3);
    assert_eq!(ctx.qp(p.a).unwrap().state(), QpState::Error);
    assert_eq!(ctx.srq(srq2).unwrap().outstanding(), 1);
    // WQE 106's (w[6]) stays posted: the CQE with the wrong opcode did not
    // free it.
    assert_eq!(ctx.srq(p.srq).unwrap().outstanding(), 1);
    assert_eq!(
        unstable::srq::ring(ctx.srq(p.srq).unwrap()).wr_id(w[6]),
        Some(106)
    );
    ctx.destroy_qp(c).unwrap();
    ctx.destroy_srq(srq2).unwrap();
    ctx.destroy_cq(cq2).unwrap();
    p.destroy(&mut ctx);
    close(&dev, ctx, "route");
}

#[test]
fn a_route_is_forgotten_with_its_qp_and_a_new_qp_gets_its_own() {
    let (dev, mut ctx) = open(Profile::ConnectX5);
    let p = Pair::unconnected(&dev, &mut ctx, QpCap::default());
    p.post_recv(&mut ctx, 0, 2);
    // A third QP on the pair's CQ and SRQ, destroyed.
    let attr = on_pair(&p);
    let (gone, _) = ctx.create_qp(&attr).unwrap();
    let qpn_gone = ctx.qp_num(gone).unwrap();
    let srqn = ctx.srq_num(p.srq).unwrap();
    ctx.destroy_qp(gone).unwrap();
    let w0 = wqe_of(&ctx, p.srq, 0);
    let put = |qpn, wqe| send1(qpn, srqn, wqe);
    // The destroyed QP's number: no route; the SRQ it names still matches
    // (a CQE no QP of this context names is completed through its SRQ).
    write(&ctx, p.rcq, &[put(qpn_gone, w0)]);
    let mut wc = [WorkCompletion::EMPTY; 2];
    assert_eq!(ctx.poll_cq(p.rcq, &mut wc).unwrap(), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (0, WcStatus::Success));
    // A QP made now on another CQ, whatever number it gets, is routed to
    // that CQ only.
    let (cq2, _) = ctx.create_cq(63).unwrap();
    let (d, _) = ctx
        .create_qp(&QpInitAttr {
            send_cq: cq2,
            recv_cq: cq2,
            ..attr
        })
        .unwrap();
    let qpn_d = ctx.qp_num(d).unwrap();
    let w1 = wqe_of(&ctx, p.srq, 1);
    write(&ctx, p.rcq, &[put(qpn_d, w1)]);
    assert_eq!(ctx.poll_cq(p.rcq, &mut wc).unwrap(), 1);
    assert_eq!(wc[0].vendor_err, WorkCompletion::VENDOR_ERR_UNMATCHED);
    write(&ctx, cq2, &[put(qpn_d, w1)]);
    assert_eq!(ctx.poll_cq(cq2, &mut wc).unwrap(), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (1, WcStatus::Success));
    assert_eq!(ctx.stats().unmatched_cqes, 1);
    ctx.destroy_qp(d).unwrap();
    ctx.destroy_cq(cq2).unwrap();
    p.destroy(&mut ctx);
    close(&dev, ctx, "route forgotten");
}

#[test]
fn the_route_a_cq_tries_first_goes_with_its_qp_when_the_number_is_reused() {
    // Each CQ tries the route of the last receive it matched before any
    // lookup. That route must go with its QP: the model, like firmware,
    // gives a destroyed QP's number to the next QP made, and a CQE naming
    // the number on the old CQ is then the new QP's, which receives
    // elsewhere.
    for batch in [1, 16] {
        let (dev, mut ctx) = open(Profile::ConnectX5);
        let p = Pair::unconnected(&dev, &mut ctx, QpCap::default());
        p.post_recv(&mut ctx, 0, 4);
        let attr = on_pair(&p);
        let (x, _) = ctx.create_qp(&attr).unwrap();
        let qpn = ctx.qp_num(x).unwrap();
        let srqn = ctx.srq_num(p.srq).unwrap();
        let put = |wqe| send1(qpn, srqn, wqe);
        // Two receives for X: the first is looked up, the second taken on
        // the route the CQ now keeps.
        let (w0, w1) = (wqe_of(&ctx, p.srq, 0), wqe_of(&ctx, p.srq, 1));
        write(&ctx, p.rcq, &[put(w0), put(w1)]);
        let got = poll_all(&mut ctx, p.rcq, batch);
        assert_eq!(
            got.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
            [(0, WcStatus::Success), (1, WcStatus::Success)],
            "batch {batch}"
        );
        ctx.destroy_qp(x).unwrap();
        let (cq2, _) = ctx.create_cq(63).unwrap();
        let (y, _) = ctx
            .create_qp(&QpInitAttr {
                send_cq: cq2,
                recv_cq: cq2,
                ..attr
            })
            .unwrap();
        assert_eq!(ctx.qp_num(y).unwrap(), qpn, "the number is reused");
        // On the old CQ the number is now Y's, which receives on cq2.
        let w2 = wqe_of(&ctx, p.srq, 2);
        write(&ctx, p.rcq, &[put(w2)]);
        let got = poll_all(&mut ctx, p.rcq, batch);
        assert_eq!(got.len(), 1);
        assert_eq!(
            (got[0].status, got[0].vendor_err),
            (WcStatus::GeneralErr, WorkCompletion::VENDOR_ERR_UNMATCHED),
            "batch {batch}"
        );
        assert_eq!(
            unstable::srq::ring(ctx.srq(p.srq).unwrap()).wr_id(w2),
            Some(2)
        );
        // On cq2 it matches, and stays Y's route there.
        let w3 = wqe_of(&ctx, p.srq, 3);
        write(&ctx, cq2, &[put(w2), put(w3)]);
        let got = poll_all(&mut ctx, cq2, batch);
        assert_eq!(
            got.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
            [(2, WcStatus::Success), (3, WcStatus::Success)],
            "batch {batch}"
        );
        ctx.destroy_qp(y).unwrap();
        ctx.destroy_cq(cq2).unwrap();
        p.destroy(&mut ctx);
        close(&dev, ctx, "route reused");
    }
}
