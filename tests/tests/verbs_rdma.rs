//! RDMA READ, ATOMIC_CMP_AND_SWP and ATOMIC_FETCH_AND_ADD through the
//! facade against the model, on every profile, with QPs on an SRQ and with
//! their own receive queues: READs of 0, 1, MTU + 1 bytes and 1 MiB into
//! several gather entries; a CAS that succeeds and one that fails (the
//! original value back either way); FETCH_ADD wrapping around; a thousand
//! FETCH_ADDs from four QPs summing exactly; access and alignment errors
//! with the responder's memory unchanged; every refusal with its errno.

use mlx5_tests::verbs_common::*;

use mlx5_driver::verbs::{
    AccessFlags, AsyncEventType, AtomicCap, Errno, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState,
    RecvWr, SendFlags, SendWr, Sge, WcOpcode, WcStatus, WrOpcode,
};
use mlx5_sim::{Device, Profile};
use mlx5_tests::PROFILES;

pub(crate) use mlx5_tests::rdma_pair::{atomic_wr, connect_rd, RdPair};
use mlx5_tests::rdma_pair::{one, read_wr, ALL, DST};

#[test]
fn reads_of_every_size_land_in_several_sges_on_every_profile() {
    for p in PROFILES {
        for own_rq in [false, true] {
            let (dev, mut ctx) = open(p);
            let pair = RdPair::new(&dev, &mut ctx, own_rq, ALL);
            let mtu = 1024usize;
            for (k, len) in [0usize, 1, mtu + 1, 1 << 20].into_iter().enumerate() {
                let data: Vec<u8> = (0..len)
                    .map(|i| (i * 7 + k) as u8 ^ (i >> 10) as u8)
                    .collect();
                pair.buf.write_bytes(0, &data);
                pair.buf.write_bytes(DST, &vec![0xEE; (1 << 20) + 64]);
                // Three entries of about a third each, 64 bytes apart.
                let t = len / 3;
                let parts = [(0, t), (t + 64, t), (2 * t + 128, len - 2 * t)];
                let sges: Vec<Sge> = parts
                    .iter()
                    .map(|&(o, n)| pair.sge(DST + o, n as u32))
                    .collect();
                let wc = one(
                    &dev,
                    &mut ctx,
                    &pair,
                    read_wr(k as u64, &sges, pair.at(0), pair.rkey()),
                );
                let tag = format!("{p:?} own_rq {own_rq} READ {len}");
                assert_eq!(wc.status, WcStatus::Success, "{tag}");
                assert_eq!(wc.opcode, WcOpcode::RdmaRead, "{tag}");
                assert_eq!(wc.byte_len, len as u32, "{tag}");
                assert_eq!(wc.wr_id, k as u64);
                let mut got = Vec::with_capacity(len);
                for &(o, n) in &parts {
                    let mut v = vec![0u8; n];
                    pair.buf.read_bytes(DST + o, &mut v);
                    got.extend_from_slice(&v);
                }
                assert!(got == data, "{tag}: the remote bytes, in gather order");
                // The 64-byte gaps between the entries are untouched.
                let mut gap = [0u8; 64];
                pair.buf.read_bytes(DST + t, &mut gap);
                assert_eq!(gap, [0xEE; 64], "{tag}: nothing between entries");
            }
            assert_eq!(
                dev.traffic().stats().reads_served,
                3,
                "{p:?}: 0 bytes read nothing"
            );
            pair.destroy(&mut ctx);
            close(&dev, ctx, "reads");
        }
    }
}

#[test]
fn compare_and_swap_and_fetch_and_add_return_the_original_value_on_every_profile() {
    for p in PROFILES {
        for own_rq in [false, true] {
            let (dev, mut ctx) = open(p);
            let d = ctx.query_device();
            assert_eq!(d.atomic_cap, AtomicCap::Hca, "{p:?}");
            let pair = RdPair::new(&dev, &mut ctx, own_rq, ALL);
            let target = DST;
            let result = [pair.sge(64, 8)];
            let run = |ctx: &mut Ctx, op, compare_add, swap| {
                let wr = atomic_wr(
                    9,
                    op,
                    &result,
                    pair.at(target),
                    pair.rkey(),
                    compare_add,
                    swap,
                );
                let wc = one(&dev, ctx, &pair, wr);
                assert_eq!(wc.status, WcStatus::Success, "{p:?} {op:?}");
                assert_eq!(wc.byte_len, 8);
                (wc.opcode, pair.u64_at(64))
            };
            pair.set_u64(target, 41);
            // CAS that matches: swapped, the old value back.
            let (op, old) = run(&mut ctx, WrOpcode::AtomicCmpAndSwp, 41, 0xfeed);
            assert_eq!(
                (op, old, pair.u64_at(target)),
                (WcOpcode::CompSwap, 41, 0xfeed)
            );
            // CAS that does not match: unchanged, the current value back.
            let (_, old) = run(&mut ctx, WrOpcode::AtomicCmpAndSwp, 41, 7);
            assert_eq!((old, pair.u64_at(target)), (0xfeed, 0xfeed));
            // FETCH_ADD wraps around 2^64.
            pair.set_u64(target, u64::MAX - 2);
            let (op, old) = run(&mut ctx, WrOpcode::AtomicFetchAndAdd, 5, 0);
            assert_eq!(
                (op, old, pair.u64_at(target)),
                (WcOpcode::FetchAdd, u64::MAX - 2, 2)
            );
            assert_eq!(dev.traffic().stats().atomics_executed, 3);
            pair.destroy(&mut ctx);
            close(&dev, ctx, "atomics");
        }
    }
}

#[test]
fn a_thousand_fetch_adds_from_four_qps_sum_exactly_on_every_profile() {
    for (i, p) in PROFILES.into_iter().enumerate() {
        thousand_fetch_adds(p, i % 2 == 1);
    }
}

fn thousand_fetch_adds(p: Profile, own_rq: bool) {
    let (dev, mut ctx) = open_threaded(p);
    // Four requesters, each connected to its own responder QP; all add to
    // the counter of the first pair's buffer through its key.
    let pairs: Vec<RdPair> = (0..4)
        .map(|_| RdPair::new(&dev, &mut ctx, own_rq, ALL))
        .collect();
    let counter = pairs[0].at(DST);
    pairs[0].set_u64(DST, 0);
    let rkey = pairs[0].rkey();
    let mut posted = [0usize; 4];
    let mut seen = Vec::new();
    // Interleave batches of 10 from each QP until 250 each are done.
    while seen.len() < 1000 {
        for (q, pr) in pairs.iter().enumerate() {
            if posted[q] < 250 && posted[q] - seen_of(&seen, q) < 40 {
                let results: Vec<[Sge; 1]> = (posted[q]..posted[q] + 10)
                    .map(|i| [pr.sge(8 * i, 8)])
                    .collect();
                let wrs: Vec<SendWr<'_>> = results
                    .iter()
                    .enumerate()
                    .map(|(j, r)| {
                        let id = ((q as u64) << 32) | (posted[q] + j) as u64;
                        atomic_wr(id, WrOpcode::AtomicFetchAndAdd, r, counter, rkey, 1, 0)
                    })
                    .collect();
                ctx.post_send(pr.a, &wrs).unwrap();
                posted[q] += 10;
            }
            for wc in drain(&mut ctx, pr.scq) {
                assert_eq!(
                    (wc.status, wc.opcode),
                    (WcStatus::Success, WcOpcode::FetchAdd)
                );
                seen.push(wc.wr_id);
            }
        }
        dev.advance_us(10);
    }
    assert_eq!(pairs[0].u64_at(DST), 1000, "{p:?}: every add counted once");
    let mut originals: Vec<u64> = seen
        .iter()
        .map(|&id| pairs[(id >> 32) as usize].u64_at(8 * (id as u32 as usize)))
        .collect();
    originals.sort_unstable();
    assert_eq!(
        originals,
        (0..1000).collect::<Vec<u64>>(),
        "{p:?}: each add saw a distinct value"
    );
    assert_eq!(dev.traffic().stats().atomics_executed, 1000);
    for pr in pairs {
        pr.destroy(&mut ctx);
    }
    close(&dev, ctx, "thousand fetch-adds");
}

/// Completions of QP `q` among the `wr_id`s seen.
fn seen_of(seen: &[u64], q: usize) -> usize {
    seen.iter().filter(|&&id| (id >> 32) as usize == q).count()
}

/// The requester's completion of `wr`, the responder's memory at `DST`
/// before and after, and the async events.
fn refused(
    dev: &Device,
    ctx: &mut Ctx,
    p: &RdPair,
    wr: SendWr<'_>,
) -> (WcStatus, bool, Vec<AsyncEventType>) {
    let before = {
        let mut v = vec![0u8; 64];
        p.buf.read_bytes(DST, &mut v);
        v
    };
    let wc = one(dev, ctx, p, wr);
    let mut after = vec![0u8; 64];
    p.buf.read_bytes(DST, &mut after);
    let events = async_events(ctx);
    for e in &events {
        ctx.ack_async_event(e).unwrap();
    }
    let kinds = events.iter().map(|e| e.event_type).collect();
    (wc.status, before == after, kinds)
}

#[test]
fn access_and_alignment_errors_leave_the_responders_memory_unchanged_on_every_profile() {
    let no_read = AccessFlags(ALL.0 & !AccessFlags::REMOTE_READ.0);
    let no_atomic = AccessFlags(ALL.0 & !AccessFlags::REMOTE_ATOMIC.0);
    for (prof, own_rq) in PROFILES.into_iter().flat_map(|p| [(p, false), (p, true)]) {
        // (key rights, QP rights, opcode, target offset, expected status):
        // a right the key lacks is a remote access error, one the QP lacks
        // makes the operation unsupported there, an invalid request (rxe
        // `check_op_valid`).
        let cases = [
            (no_read, ALL, WrOpcode::RdmaRead, 0, WcStatus::RemAccessErr),
            (ALL, no_read, WrOpcode::RdmaRead, 0, WcStatus::RemInvReqErr),
            (
                no_atomic,
                ALL,
                WrOpcode::AtomicFetchAndAdd,
                0,
                WcStatus::RemAccessErr,
            ),
            (
                ALL,
                no_atomic,
                WrOpcode::AtomicCmpAndSwp,
                0,
                WcStatus::RemInvReqErr,
            ),
            (
                ALL,
                ALL,
                WrOpcode::AtomicFetchAndAdd,
                4,
                WcStatus::RemInvReqErr,
            ),
            (
                ALL,
                ALL,
                WrOpcode::AtomicCmpAndSwp,
                9,
                WcStatus::RemInvReqErr,
            ),
        ];
        for (mr_access, qp_access, op, off, want) in cases {
            let (dev, mut ctx) = open(prof);
            let p = RdPair::with(&dev, &mut ctx, own_rq, mr_access, qp_access, 4);
            p.buf.write_bytes(DST, &[0x5A; 64]);
            p.buf.write_bytes(64, &[0xC3; 64]);
            let local = [p.sge(64, 8)];
            let wr = if op == WrOpcode::RdmaRead {
                read_wr(1, &local, p.at(DST + off), p.rkey())
            } else {
                atomic_wr(
                    1,
                    op,
                    &local,
                    p.at(DST + off),
                    p.rkey(),
                    0x5A5A_5A5A_5A5A_5A5A,
                    1,
                )
            };
            let tag = format!(
                "{prof:?} own_rq {own_rq} {op:?} key {mr_access:?} qp {qp_access:?} +{off}"
            );
            let (status, unchanged, events) = refused(&dev, &mut ctx, &p, wr);
            assert_eq!(status, want, "{tag}");
            assert!(unchanged, "{tag}: responder memory unchanged");
            let mut l = [0u8; 8];
            p.buf.read_bytes(64, &mut l);
            assert_eq!(l, [0xC3; 8], "{tag}: nothing written back");
            let ev = if want == WcStatus::RemAccessErr {
                AsyncEventType::QpAccessErr
            } else {
                AsyncEventType::QpReqErr
            };
            assert!(events.contains(&ev), "{tag}: {events:?}");
            assert_eq!(dev.traffic().stats().atomics_executed, 0, "{tag}");
            p.destroy(&mut ctx);
            close(&dev, ctx, &tag);
        }
    }
}

/// A FETCH_ADD of 1 on the pair's counter, its result in `result`.
fn fa<'a>(p: &RdPair, result: &'a [Sge]) -> SendWr<'a> {
    atomic_wr(
        1,
        WrOpcode::AtomicFetchAndAdd,
        result,
        p.at(DST),
        p.rkey(),
        1,
        0,
    )
}

#[test]
fn refusals_before_the_device_have_libibverbs_errno() {
    let (dev, mut ctx) = open(Profile::ConnectX5);
    let d = ctx.query_device();
    assert_eq!(d.atomic_cap, AtomicCap::Hca);
    assert_eq!(
        d.max_res_rd_atom,
        u64::from(d.max_qp_rd_atom) * u64::from(d.max_qp)
    );
    let p = RdPair::new(&dev, &mut ctx, false, ALL);
    let doorbells = dev.traffic().stats().doorbells;
    let two = [p.sge(0, 8), p.sge(8, 8)];
    let short = [p.sge(0, 4)];
    for wr in [
        fa(&p, &two),
        fa(&p, &short),
        fa(&p, &[]),
        SendWr {
            send_flags: SendFlags::SIGNALED | SendFlags::INLINE,
            inline_data: &[1, 2, 3],
            ..read_wr(1, &[], p.at(DST), p.rkey())
        },
    ] {
        let e = ctx.post_send(p.a, &[wr, wr]).unwrap_err();
        assert_eq!((e.index, e.errno), (0, Errno::EINVAL), "{wr:?}");
    }
    assert_eq!(dev.traffic().stats().doorbells, doorbells, "nothing rung");
    p.destroy(&mut ctx);
    close(&dev, ctx, "refusals");

    // A device without cap `atomic`: no atomics reported, posting one is
    // EINVAL, asking for remote atomic rights is EOPNOTSUPP (Linux).
    let dev = mlx5_tests::device(Profile::ConnectX5, mlx5_sim::ExecMode::Synchronous);
    dev.caps_mut(|c| c.atomic = false);
    let mut ctx = mlx5_driver::verbs::Verbs::open(mlx5_tests::bring_up(&dev));
    assert_eq!(ctx.query_device().atomic_cap, AtomicCap::None);
    let no_atomic = AccessFlags(ALL.0 & !AccessFlags::REMOTE_ATOMIC.0);
    let p = RdPair::with(&dev, &mut ctx, false, ALL, no_atomic, 2);
    let r = [p.sge(0, 8)];
    let e = ctx.post_send(p.a, &[fa(&p, &r)]).unwrap_err();
    assert_eq!((e.index, e.errno), (0, Errno::EINVAL));
    let (spare, _) = ctx
        .create_qp(&QpInitAttr {
            send_cq: p.scq,
            recv_cq: p.scq,
            srq: None,
            cap: QpCap {
                max_send_wr: 1,
                max_send_sge: 1,
                max_recv_wr: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        })
        .unwrap();
    let ah = ctx.loopback_ah().unwrap();
    // INIT drops the atomic right (no responder resources yet, Linux
    // `to_mlx5_access_flags`); RTR with resources would send it: refused
    // there, before its command.
    let rtr = |dev: &Device| {
        dev.trace()
            .iter()
            .filter(|t| t.opcode == mlx5_regs::Opcode::INIT2RTR_QP.0)
            .count()
    };
    let before = rtr(&dev);
    assert_eq!(
        connect_rd(&mut ctx, spare, 1, ah, ALL, 1),
        Err(Errno::EOPNOTSUPP)
    );
    assert_eq!(rtr(&dev), before, "no INIT2RTR sent");
    assert_eq!(ctx.query_qp(spare).unwrap().0.qp_state, QpState::Init);
    // Without responder resources the atomic right is dropped throughout,
    // so the same rights are taken.
    let reset = QpAttr {
        qp_state: QpState::Reset,
        ..QpAttr::default()
    };
    ctx.modify_qp(spare, &reset, QpAttrMask::STATE).unwrap();
    connect_rd(&mut ctx, spare, 1, ah, ALL, 0).unwrap();
    // READ still works on such a device.
    p.buf.write_bytes(0, b"readable");
    let dst = [p.sge(DST, 8)];
    let wc = one(&dev, &mut ctx, &p, read_wr(3, &dst, p.at(0), p.rkey()));
    assert_eq!(
        (wc.status, wc.opcode),
        (WcStatus::Success, WcOpcode::RdmaRead)
    );
    let mut v = [0u8; 8];
    p.buf.read_bytes(DST, &mut v);
    assert_eq!(&v, b"readable");
    ctx.destroy_qp(spare).unwrap();
    p.destroy(&mut ctx);
    close(&dev, ctx, "no atomics");
}

#[test]
fn a_fenced_request_waits_for_the_reads_before_it() {
    let (dev, mut ctx) = open(Profile::ConnectX7);
    let p = RdPair::new(&dev, &mut ctx, true, ALL);
    // READ 4 KiB, then a fenced RDMA WRITE of what was read to a third
    // place: the write must carry the READ's bytes.
    let data: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
    p.buf.write_bytes(0, &data);
    let staged = [p.sge(DST, 4096)];
    let read = read_wr(1, &staged, p.at(0), p.rkey());
    let write = SendWr {
        wr_id: 2,
        opcode: WrOpcode::RdmaWrite,
        send_flags: SendFlags::SIGNALED | SendFlags::FENCE,
        sg_list: &staged,
        remote_addr: p.at(DST + 65536),
        rkey: p.rkey(),
        ..SendWr::EMPTY
    };
    ctx.post_send(p.a, &[read, write]).unwrap();
    let wcs = poll_n(&dev, &mut ctx, p.scq, 2);
    assert_eq!(ids(&wcs), [1, 2]);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
    let mut got = vec![0u8; 4096];
    p.buf.read_bytes(DST + 65536, &mut got);
    assert!(got == data, "the fenced write sent what the READ brought");
    assert_eq!(
        dev.traffic().stats().fenced_wqes,
        1,
        "the fence reached the device"
    );
    // The own receive queue still works beside READs: a SEND lands in it.
    let slot = [p.sge(DST + 131072, 64)];
    ctx.post_recv(
        p.b,
        &[RecvWr {
            wr_id: 77,
            sges: &slot,
        }],
    )
    .unwrap();
    let src = [p.sge(0, 64)];
    ctx.post_send(p.a, &[send(3, &src)]).unwrap();
    let r = poll_n(&dev, &mut ctx, p.rcq, 1);
    assert_eq!(
        (r[0].wr_id, r[0].status, r[0].byte_len),
        (77, WcStatus::Success, 64)
    );
    p.destroy(&mut ctx);
    close(&dev, ctx, "fence");
}
