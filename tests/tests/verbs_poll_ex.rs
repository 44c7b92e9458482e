//! The lazy extended-CQ API (`start_poll` / `next_poll` / `end_poll` and
//! the `read_*` accessors) against `poll_cq`: two contexts on two fresh
//! models run the same traffic (so the same CQEs: same QP and SRQ
//! numbers, same WQE indices), one drained with `poll_cq`, the other with
//! the lazy loop, and every field read one way equals the other. The
//! fields a work completion has no place for (source QP, SL, SLID, path
//! bits, GRH, timestamp) are checked on CQEs the test writes itself.

use mlx5_driver::unstable;
use mlx5_driver::verbs::{
    CqHandle, CqInitAttrEx, Errno, QpHandle, SendWr, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
    WC_GRH, WC_WITH_IMM, WC_WITH_INV,
};
use mlx5_regs::CqeOpcode;
use mlx5_sim::{Device, Profile};
use mlx5_tests::verbs_common::{cap, close, drain, open, poll_n, send, Ctx, Pair};

/// What the lazy loop read of one completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Lazy {
    wc: WorkCompletion,
    wc_flags: u32,
    src_qp: u32,
    sl: u8,
    slid: u16,
    path_bits: u8,
    ts: u64,
}

/// Every completion in `cq` now, through one lazy pass (or none when
/// empty), each field through its `read_*`.
fn lazy_drain(ctx: &mut Ctx, cq: CqHandle) -> Vec<Lazy> {
    let mut got = Vec::new();
    let mut p = match ctx.start_poll(cq) {
        Ok(p) => p,
        Err(e) => {
            assert_eq!(e, Errno::ENOENT);
            return got;
        }
    };
    loop {
        let wc = WorkCompletion {
            wr_id: p.wr_id(),
            status: p.status(),
            opcode: p.read_opcode(),
            vendor_err: p.read_vendor_err(),
            byte_len: p.read_byte_len(),
            imm_data: p.read_imm_data(),
            invalidated_rkey: p.read_invalidated_rkey(),
            qp_num: p.read_qp_num(),
            srq_num: p.read_srq_num(),
            src_qp: p.read_src_qp(),
            sl: p.read_sl(),
            wc_flags: p.read_wc_flags(),
            // Read only when the CQ asks for it (`read_slid`), always in
            // the work completion; no lazy reader for the P_Key index.
            slid: p.work_completion().slid,
            pkey_index: p.work_completion().pkey_index,
        };
        assert_eq!(wc, p.work_completion());
        got.push(Lazy {
            wc,
            wc_flags: p.read_wc_flags(),
            src_qp: p.read_src_qp(),
            sl: p.read_sl(),
            slid: p.read_slid(),
            path_bits: p.read_dlid_path_bits(),
            ts: p.read_completion_ts(),
        });
        if let Err(e) = p.next_poll() {
            assert_eq!(e, Errno::ENOENT);
            p.end_poll();
            return got;
        }
    }
}

/// The consumer index the device sees equals the CQ's (the pass
/// published what it took).
fn published(ctx: &Ctx, cq: CqHandle) {
    let c = ctx.cq(cq).unwrap();
    let seen = ctx.hca().query_cq(c).unwrap().consumer_counter;
    assert_eq!(seen, c.consumer_index() & 0xff_ffff);
}

/// A connected pair that ran a mix of traffic: SEND, SEND with immediate,
/// RDMA WRITE with immediate (each received through the SRQ), then a SEND
/// whose gather entry names a bad key (an error CQE on the send side and
/// flushes after it). Returns the pair, with every CQE written.
fn traffic(dev: &Device, ctx: &mut Ctx) -> Pair {
    let p = Pair::new(dev, ctx, cap(16, 1, 0));
    p.post_recv(ctx, 100, 16);
    let sg = [p.sge(0, 64)];
    p.fill(0, 64, 7);
    let wrs = [
        send(1, &sg),
        SendWr {
            opcode: WrOpcode::SendWithImm,
            imm_data: 0x1122_3344,
            ..send(2, &sg)
        },
        SendWr {
            opcode: WrOpcode::RdmaWriteWithImm,
            imm_data: 0x5566_7788,
            remote_addr: p.buf.iova() + 4096,
            rkey: p.rkey(),
            ..send(3, &sg)
        },
        send(4, &sg),
    ];
    ctx.post_send(p.a, &wrs).unwrap();
    poll_n_peek(dev, ctx);
    p
}

/// Let the model run until its traffic is done (nothing polled).
fn poll_n_peek(dev: &Device, _ctx: &mut Ctx) {
    for _ in 0..20 {
        dev.advance_us(100);
    }
}

/// The same completions through both APIs, `scq` and `rcq` both.
fn compare_on_traffic(bad_key: bool) {
    let (dev1, mut c1) = open(Profile::ConnectX5);
    let (dev2, mut c2) = open(Profile::ConnectX5);
    let p1 = traffic(&dev1, &mut c1);
    let p2 = traffic(&dev2, &mut c2);
    if bad_key {
        for (ctx, p) in [(&mut c1, &p1), (&mut c2, &p2)] {
            let sg = [mlx5_driver::verbs::Sge {
                lkey: p.lkey() ^ 0xff00,
                ..p.sge(0, 8)
            }];
            let good = [p.sge(0, 8)];
            ctx.post_send(p.a, &[send(9, &sg), send(10, &good)])
                .unwrap();
        }
        poll_n_peek(&dev1, &mut c1);
        poll_n_peek(&dev2, &mut c2);
    }
    assert_eq!(c1.qp_num(p1.a).unwrap(), c2.qp_num(p2.a).unwrap());
    for (cq1, cq2, what) in [(p1.scq, p2.scq, "send CQ"), (p1.rcq, p2.rcq, "receive CQ")] {
        let want = drain(&mut c1, cq1);
        let got = lazy_drain(&mut c2, cq2);
        published(&c2, cq2);
        assert!(!want.is_empty(), "{what}: traffic made completions");
        let got_wc: Vec<WorkCompletion> = got.iter().map(|l| l.wc).collect();
        assert_eq!(got_wc, want, "{what}");
        for l in &got {
            let mut f = 0;
            if l.wc.imm_data.is_some() {
                f |= WC_WITH_IMM;
            }
            if l.wc.invalidated_rkey.is_some() {
                f |= WC_WITH_INV;
            }
            assert_eq!(l.wc_flags & !WC_GRH, f, "{what}: {l:?}");
        }
        if what == "receive CQ" {
            let a = c2.qp_num(p2.a).unwrap();
            for l in &got {
                assert_eq!(l.src_qp, a, "the sender's QP: {l:?}");
            }
            assert_eq!(got.len(), 4, "{got:?}");
        }
        if bad_key && what == "send CQ" {
            assert!(
                got.iter()
                    .any(|l| l.wc.status == WcStatus::LocProtErr && l.wc.wr_id == 9),
                "the error CQE: {got:?}"
            );
            assert!(got.iter().any(|l| l.wc.status == WcStatus::WrFlushErr));
        }
    }
    // Both empty now: the lazy pass says ENOENT, poll_cq 0.
    assert_eq!(c2.start_poll(p2.rcq).err(), Some(Errno::ENOENT));
    let mut wc = [WorkCompletion::EMPTY; 4];
    assert_eq!(c1.poll_cq(p1.rcq, &mut wc).unwrap(), 0);
    p1.destroy(&mut c1);
    p2.destroy(&mut c2);
    close(&dev1, c1, "poll_cq side");
    close(&dev2, c2, "lazy side");
}

#[test]
fn every_read_equals_poll_cq_on_receive_and_send_cqs() {
    compare_on_traffic(false);
}

#[test]
fn error_cqes_read_the_same_through_both_apis() {
    compare_on_traffic(true);
}

#[test]
fn a_pass_interrupted_midway_ends_with_end_poll_and_the_rest_stays() {
    let (dev, mut ctx) = open(Profile::ConnectX5);
    let p = Pair::new(&dev, &mut ctx, cap(16, 1, 0));
    p.post_recv(&mut ctx, 100, 16);
    let sg = [p.sge(0, 8)];
    let wrs: Vec<SendWr> = (1..=6).map(|i| send(i, &sg)).collect();
    ctx.post_send(p.a, &wrs).unwrap();
    poll_n_peek(&dev, &mut ctx);
    // Two completions through a pass, then stop.
    let mut pass = ctx.start_poll(p.rcq).unwrap();
    let first = pass.wr_id();
    pass.next_poll().unwrap();
    let second = pass.wr_id();
    pass.end_poll();
    published(&ctx, p.rcq);
    assert_eq!((first, second), (100, 101));
    // The other four are still there, in order, for either API.
    let rest = poll_n(&dev, &mut ctx, p.rcq, 4);
    let ids: Vec<u64> = rest.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, [102, 103, 104, 105]);
    // A pass dropped without end_poll publishes too.
    let sends = {
        let mut pass = ctx.start_poll(p.scq).unwrap();
        let mut n = 1;
        while pass.next_poll().is_ok() {
            n += 1;
        }
        n
    };
    assert_eq!(sends, 6);
    published(&ctx, p.scq);
    p.destroy(&mut ctx);
    close(&dev, ctx, "interrupted pass");
}

/// Write one responder CQE naming `qpn`/`srqn`/`wqe` with the fields the
/// work completion cannot hold, at `cq`'s consumer index.
#[allow(clippy::too_many_arguments)]
fn write_resp(
    ctx: &Ctx,
    cq: CqHandle,
    qpn: u32,
    srqn: u32,
    wqe: u16,
    flags_rqpn: u32,
    slid: u16,
    ml_path: u8,
    ts: u64,
) {
    let ring = unstable::cq::ring(ctx.cq(cq).unwrap());
    let r = ring.region();
    let stride = ring.cqe_size().stride();
    let idx = ring.consumer_index();
    let at = ring.base_offset() + (idx & (ring.nent() as u32 - 1)) as usize * stride + stride - 64;
    let owner = ((idx >> ring.log_nent()) & 1) as u8;
    r.write_u8(at + 0x11, ml_path);
    r.write_be16(at + 0x16, slid);
    r.write_be32(at + 0x18, flags_rqpn);
    r.write_be32(at + 0x20, srqn);
    r.write_be32(at + 0x24, 0);
    r.write_be32(at + 0x2c, 16);
    r.write_be64(at + 0x30, ts);
    r.write_be32(at + 0x38, qpn);
    r.write_be16(at + 0x3c, wqe);
    r.write_u8(at + 0x3f, (CqeOpcode::RESP_SEND.0 << 4) | owner);
}

/// An extended CQ of 63 entries with `flags`, an unconnected pair, and a
/// QP of the pair's shape receiving on the extended CQ through the pair's
/// SRQ.
fn ext_cq_receiver(dev: &Device, ctx: &mut Ctx, flags: u64) -> (CqHandle, Pair, QpHandle) {
    let (rcq, _) = ctx
        .create_cq_ex(&CqInitAttrEx {
            wc_flags: flags,
            ..CqInitAttrEx::new(63)
        })
        .unwrap();
    let p = Pair::unconnected(dev, ctx, cap(4, 1, 0));
    let (q, _) = ctx
        .create_qp(&mlx5_driver::verbs::QpInitAttr {
            send_cq: p.scq,
            recv_cq: rcq,
            srq: Some(p.srq),
            cap: cap(4, 1, 0),
            sq_sig_all: false,
        })
        .unwrap();
    (rcq, p, q)
}

/// The SRQ WQE index holding `wr_id`.
fn wqe_of(ctx: &Ctx, p: &Pair, wr_id: u64) -> u16 {
    let ring = unstable::srq::ring(ctx.srq(p.srq).unwrap());
    (0..=u16::MAX)
        .find(|&i| ring.wr_id(i) == Some(wr_id))
        .expect("posted")
}

#[test]
fn the_fields_a_work_completion_cannot_hold_follow_wc_flags() {
    type A = CqInitAttrEx;
    let (dev, mut ctx) = open(Profile::ConnectX5);
    let all = A::WC_STANDARD_FLAGS | A::WC_WITH_COMPLETION_TIMESTAMP;
    for (flags, read_all) in [(all, true), (A::WC_WITH_BYTE_LEN, false)] {
        let (rcq, mut p, q) = ext_cq_receiver(&dev, &mut ctx, flags);
        p.post_recv(&mut ctx, 500, 2);
        let qpn = ctx.qp_num(q).unwrap();
        let srqn = ctx.srq_num(p.srq).unwrap();
        // GRH present (type 2), SL 5, sender QP 0x12345; SLID, path bits,
        // timestamp.
        let flags_rqpn = (2 << 28) | (5 << 24) | 0x01_2345;
        let w = wqe_of(&ctx, &p, 500);
        write_resp(
            &ctx,
            rcq,
            qpn,
            srqn,
            w,
            flags_rqpn,
            0xbeef,
            0x85,
            0x0102_0304_0506_0708,
        );
        let got = lazy_drain(&mut ctx, rcq);
        assert_eq!(got.len(), 1);
        let l = got[0];
        assert_eq!(l.wc.status, WcStatus::Success, "{l:?}");
        assert_eq!(
            (l.wc.wr_id, l.wc.opcode, l.wc.byte_len),
            (500, WcOpcode::Recv, 16)
        );
        assert_eq!(l.wc_flags, WC_GRH);
        assert_eq!((l.src_qp, l.sl), (0x01_2345, 5));
        if read_all {
            assert_eq!((l.slid, l.path_bits), (0xbeef, 0x05));
            assert_eq!(l.ts, 0x0102_0304_0506_0708);
        } else {
            // Not asked for: not read.
            assert_eq!((l.slid, l.path_bits, l.ts), (0, 0, 0));
        }
        ctx.destroy_qp(q).unwrap();
        if let Some(m) = p.mr.take() {
            ctx.dereg_mr(m).map_err(|(_, e)| e).unwrap();
        }
        ctx.destroy_qp(p.a).unwrap();
        ctx.destroy_qp(p.b).unwrap();
        ctx.destroy_srq(p.srq).unwrap();
        ctx.destroy_cq(p.scq).unwrap();
        ctx.destroy_cq(p.rcq).unwrap();
        ctx.destroy_cq(rcq).unwrap();
    }
    close(&dev, ctx, "wc_flags");
}

#[test]
fn completion_timestamps_are_offered_only_with_a_device_clock() {
    type A = CqInitAttrEx;
    let attr = CqInitAttrEx {
        wc_flags: A::WC_STANDARD_FLAGS | A::WC_WITH_COMPLETION_TIMESTAMP,
        ..CqInitAttrEx::new(15)
    };
    let (dev, mut ctx) = open(Profile::ConnectX5);
    assert!(ctx.hca().caps().device_frequency_khz > 0);
    let (cq, _) = ctx.create_cq_ex(&attr).unwrap();
    ctx.destroy_cq(cq).unwrap();
    close(&dev, ctx, "clock");

    let dev = mlx5_tests::device(Profile::ConnectX5, mlx5_sim::ExecMode::Synchronous);
    dev.caps_mut(|c| c.device_frequency_khz = 0);
    let mut ctx = mlx5_driver::verbs::Verbs::open(mlx5_tests::bring_up(&dev));
    let traced = dev.trace().len();
    assert_eq!(ctx.create_cq_ex(&attr).unwrap_err(), Errno::EOPNOTSUPP);
    assert_eq!(dev.trace().len(), traced, "refused before any command");
    close(&dev, ctx, "no clock");
}

#[test]
fn a_stale_handle_is_einval() {
    let (dev, mut ctx) = open(Profile::ConnectX5);
    let (cq, _) = ctx.create_cq(15).unwrap();
    ctx.destroy_cq(cq).unwrap();
    assert_eq!(ctx.start_poll(cq).err(), Some(Errno::EINVAL));
    close(&dev, ctx, "stale");
}

#[test]
fn a_send_cq_shared_by_two_qps_matches_each_completion_to_its_qp() {
    // The send CQ keeps the QP of the last requester CQE as its route:
    // alternating QPs must each be matched through the map again, and a
    // QP destroyed and replaced must not be reached through a stale route.
    let (dev, mut ctx) = open(Profile::ConnectX5);
    let p = Pair::new(&dev, &mut ctx, cap(16, 1, 0));
    p.post_recv(&mut ctx, 100, 32);
    let sg = [p.sge(0, 8)];
    for i in 0..4u64 {
        ctx.post_send(p.a, &[send(10 + i, &sg)]).unwrap();
        ctx.post_send(p.b, &[send(20 + i, &sg)]).unwrap();
    }
    let got = poll_n(&dev, &mut ctx, p.scq, 8);
    let (qa, qb) = (ctx.qp_num(p.a).unwrap(), ctx.qp_num(p.b).unwrap());
    assert_eq!(got.len(), 8);
    for w in &got {
        assert_eq!(w.status, WcStatus::Success, "{w:?}");
        let want = if w.wr_id < 20 { qa } else { qb };
        assert_eq!(w.qp_num, want, "{w:?}");
    }
    assert_eq!(ctx.stats().unmatched_cqes, 0);
    drain(&mut ctx, p.rcq);
    p.destroy(&mut ctx);
    close(&dev, ctx, "two QPs on one send CQ");
}

#[test]
fn completion_timestamps_are_the_device_clock_when_the_completion_was_written() {
    // The device offers a clock (`device_frequency_khz`), so it stamps
    // every successful CQE with it (a QP's `ts_format` is free-running
    // here): the lazy API reads the tick count the internal timer had when
    // the completion was written.
    type A = CqInitAttrEx;
    let (dev, mut ctx) = open(Profile::ConnectX5);
    let khz = ctx.hca().caps().device_frequency_khz as u128;
    assert!(khz > 0);
    let ticks = |ns: u64| (ns as u128 * khz / 1_000_000) as u64;
    let flags = A::WC_STANDARD_FLAGS | A::WC_WITH_COMPLETION_TIMESTAMP;
    let (rcq, mut p, q) = ext_cq_receiver(&dev, &mut ctx, flags);
    p.post_recv(&mut ctx, 700, 2);
    let (qpn, srqn) = (ctx.qp_num(q).unwrap(), ctx.srq_num(p.srq).unwrap());
    let rcqn = ctx.cq_num(rcq).unwrap();
    let mut stamps = Vec::new();
    for _ in 0..2 {
        dev.advance_us(1500);
        let at = dev.now_ns();
        dev.traffic().deliver(srqn, rcqn, qpn, &[7; 16]).unwrap();
        let got = lazy_drain(&mut ctx, rcq);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].wc.status, WcStatus::Success, "{:?}", got[0]);
        assert_eq!(got[0].ts, ticks(at), "the timer when the CQE was written");
        stamps.push(got[0].ts);
    }
    assert!(stamps[0] > 0);
    assert_eq!(
        stamps[1] - stamps[0],
        ticks(1_500_000),
        "1.5 ms of ticks apart"
    );
    ctx.destroy_qp(q).unwrap();
    if let Some(m) = p.mr.take() {
        ctx.dereg_mr(m).map_err(|(_, e)| e).unwrap();
    }
    ctx.destroy_qp(p.a).unwrap();
    ctx.destroy_qp(p.b).unwrap();
    ctx.destroy_srq(p.srq).unwrap();
    ctx.destroy_cq(p.scq).unwrap();
    ctx.destroy_cq(p.rcq).unwrap();
    ctx.destroy_cq(rcq).unwrap();
    close(&dev, ctx, "timestamps");
}
