//! A QP's own receive queue through the facade against the model, on every
//! profile: sizes as rdma-core reports them, SEND/receive traffic through
//! the ring (wrapping it), `bad_wr` semantics of `post_recv`, flush of the
//! ring with each `wr_id`, RNR on an empty ring then success once a
//! receive is posted, `post_recv` on a QP with an SRQ refused.

use mlx5_tests::verbs_common::*;

use mlx5_driver::unstable;
use mlx5_driver::verbs::{
    AccessFlags, CqHandle, Errno, Mr, PostRecvError, QpAttr, QpAttrMask, QpCap, QpHandle,
    QpInitAttr, QpState, RecvWr, Sge, WcOpcode, WcStatus,
};
use mlx5_hal::{DmaRegion, Hal};
use mlx5_sim::{Device, Profile, SimHal};
use mlx5_tests::PROFILES;

/// Two QPs, each with its own receive queue, on one send and one receive
/// CQ, connected to each other, and one registered buffer.
struct OwnPair {
    scq: CqHandle,
    rcq: CqHandle,
    a: QpHandle,
    b: QpHandle,
    cap: QpCap,
    buf: DmaRegion<SimHal>,
    mr: Option<Mr>,
}

fn own_cap(send_wr: u32, recv_wr: u32, recv_sge: u32) -> QpCap {
    QpCap {
        max_send_wr: send_wr,
        max_send_sge: 1,
        max_recv_wr: recv_wr,
        max_recv_sge: recv_sge,
        max_inline_data: 0,
    }
}

impl OwnPair {
    fn new(dev: &Device, ctx: &mut Ctx, want: QpCap) -> OwnPair {
        let (scq, _) = ctx.create_cq(255).unwrap();
        let (rcq, _) = ctx.create_cq(255).unwrap();
        let attr = QpInitAttr {
            send_cq: scq,
            recv_cq: rcq,
            srq: None,
            cap: want,
            sq_sig_all: false,
        };
        let (a, cap) = ctx.create_qp(&attr).unwrap();
        let (b, _) = ctx.create_qp(&attr).unwrap();
        let buf = dev.hal().alloc_dma(BUF).unwrap();
        let mr = ctx
            .reg_mr(buf.iova(), BUF as u64, AccessFlags::LOCAL_WRITE)
            .unwrap();
        ctx.connect_loopback(a, b).unwrap();
        OwnPair {
            scq,
            rcq,
            a,
            b,
            cap,
            buf,
            mr: Some(mr),
        }
    }

    fn sge(&self, off: usize, len: u32) -> Sge {
        Sge {
            addr: self.buf.iova() + off as u64,
            length: len,
            lkey: self.mr.as_ref().unwrap().lkey(),
        }
    }

    /// Receive slot `id % 64` of `SLOT` bytes.
    fn slot(&self, id: u64) -> [Sge; 1] {
        [self.sge(RECV_AREA + (id as usize % 64) * SLOT, SLOT as u32)]
    }

    fn post(&self, ctx: &mut Ctx, qp: QpHandle, ids: std::ops::Range<u64>) {
        let sges: Vec<[Sge; 1]> = ids.clone().map(|i| self.slot(i)).collect();
        let wrs: Vec<RecvWr> = sges
            .iter()
            .zip(ids)
            .map(|(s, wr_id)| RecvWr { wr_id, sges: s })
            .collect();
        ctx.post_recv(qp, &wrs).unwrap();
    }

    fn received(&self, id: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.buf
            .read_bytes(RECV_AREA + (id as usize % 64) * SLOT, &mut v);
        v
    }

    fn fill(&self, off: usize, len: usize, seed: u8) -> Vec<u8> {
        let v: Vec<u8> = (0..len)
            .map(|i| (i as u8).wrapping_mul(13) ^ seed)
            .collect();
        self.buf.write_bytes(off, &v);
        v
    }

    fn destroy(mut self, ctx: &mut Ctx) {
        while let Ok(ev) = ctx.get_async_event() {
            ctx.ack_async_event(&ev).unwrap();
        }
        ctx.destroy_qp(self.a).unwrap();
        ctx.destroy_qp(self.b).unwrap();
        ctx.destroy_cq(self.scq).unwrap();
        ctx.destroy_cq(self.rcq).unwrap();
        ctx.dereg_mr(self.mr.take().unwrap())
            .map_err(|(_, e)| e)
            .unwrap();
    }
}

fn to_state(ctx: &mut Ctx, qp: QpHandle, s: QpState) {
    let attr = QpAttr {
        qp_state: s,
        ..QpAttr::default()
    };
    ctx.modify_qp(qp, &attr, QpAttrMask::STATE).unwrap();
}

#[test]
fn own_receive_queues_carry_sends_through_their_rings_on_every_profile() {
    for prof in PROFILES {
        let (dev, mut ctx) = open(prof);
        let p = OwnPair::new(&dev, &mut ctx, own_cap(16, 10, 3));
        // rdma-core's rounding: 48-byte WQEs -> 64 bytes, 4 SGEs; 16 WQEs.
        assert_eq!((p.cap.max_recv_wr, p.cap.max_recv_sge), (16, 4), "{prof:?}");
        let (_, init) = ctx.query_qp(p.a).unwrap();
        assert_eq!(init.cap, p.cap);
        assert_eq!(init.srq, None);
        let (qa, qb) = (ctx.qp_num(p.a).unwrap(), ctx.qp_num(p.b).unwrap());
        // 40 messages each way through 16-entry rings: the rings wrap.
        let mut next = 0u64;
        for round in 0..5u64 {
            p.post(&mut ctx, p.b, next..next + 8);
            p.post(&mut ctx, p.a, next + 100..next + 108);
            let data = p.fill(0, 200, round as u8);
            let sg = [p.sge(0, 200)];
            let wrs: Vec<_> = (0..8).map(|i| send(next + i, &sg)).collect();
            ctx.post_send(p.a, &wrs).unwrap();
            let wrs: Vec<_> = (0..8).map(|i| send(next + 100 + i, &sg)).collect();
            ctx.post_send(p.b, &wrs).unwrap();
            let s = poll_n(&dev, &mut ctx, p.scq, 16);
            assert_eq!(s.len(), 16, "{prof:?}");
            assert!(s.iter().all(|w| w.status == WcStatus::Success));
            let r = poll_n(&dev, &mut ctx, p.rcq, 16);
            let on = |qpn| -> Vec<u64> {
                r.iter()
                    .filter(|w| w.qp_num == qpn)
                    .map(|w| w.wr_id)
                    .collect()
            };
            assert_eq!(on(qb), (next..next + 8).collect::<Vec<_>>(), "{prof:?}");
            assert_eq!(on(qa), (next + 100..next + 108).collect::<Vec<_>>());
            for w in &r {
                assert_eq!(w.status, WcStatus::Success);
                assert_eq!(
                    (w.opcode, w.byte_len, w.srq_num),
                    (WcOpcode::Recv, 200, None)
                );
                assert_eq!(p.received(w.wr_id, 200), data);
            }
            next += 8;
        }
        let q = ctx.qp(p.a).unwrap();
        assert_eq!(q.outstanding_recvs(), 0);
        assert_eq!(unstable::qp::recv_ring(q).unwrap().producer_counter(), 40);
        assert_eq!(ctx.stats().unmatched_cqes, 0);
        assert_eq!(dev.traffic().side_door_uses(), 0);
        p.destroy(&mut ctx);
        close(&dev, ctx, "own rq traffic");
    }
}

#[test]
fn post_recv_stops_at_the_refused_request_and_keeps_the_ones_before() {
    for prof in PROFILES {
        let (dev, mut ctx) = open(prof);
        let p = OwnPair::new(&dev, &mut ctx, own_cap(16, 4, 1));
        assert_eq!((p.cap.max_recv_wr, p.cap.max_recv_sge), (4, 1));
        let counter = |ctx: &Ctx| {
            let q = ctx.qp(p.b).unwrap();
            (q.outstanding_recvs(), q.doorbell_record().read_be32(0))
        };
        // Too many SGEs at index 1: request 0 stays posted.
        let one = p.slot(0);
        let two = [p.sge(RECV_AREA, 8), p.sge(RECV_AREA + 8, 8)];
        let err = ctx
            .post_recv(
                p.b,
                &[
                    RecvWr {
                        wr_id: 0,
                        sges: &one,
                    },
                    RecvWr {
                        wr_id: 1,
                        sges: &two,
                    },
                ],
            )
            .unwrap_err();
        assert_eq!(
            err,
            PostRecvError {
                index: 1,
                errno: Errno::EINVAL
            },
            "{prof:?}"
        );
        assert_eq!(counter(&ctx), (1, 1));
        // A full queue at index 3 (4 WQEs, one outstanding).
        let s: Vec<[Sge; 1]> = (1..6).map(|i| p.slot(i)).collect();
        let wrs: Vec<RecvWr> = s
            .iter()
            .zip(1u64..)
            .map(|(s, wr_id)| RecvWr { wr_id, sges: s })
            .collect();
        let err = ctx.post_recv(p.b, &wrs).unwrap_err();
        assert_eq!(
            err,
            PostRecvError {
                index: 3,
                errno: Errno::ENOMEM
            }
        );
        assert_eq!(counter(&ctx), (4, 4));
        // A refusal of the first request changes nothing.
        assert_eq!(ctx.post_recv(p.b, &wrs[..1]).unwrap_err().index, 0);
        assert_eq!(counter(&ctx), (4, 4));
        // The four posted receive four messages, in order.
        let sg = [p.sge(0, 8)];
        let sends: Vec<_> = (0..4).map(|i| send(i, &sg)).collect();
        ctx.post_send(p.a, &sends).unwrap();
        let r = poll_n(&dev, &mut ctx, p.rcq, 4);
        assert_eq!(ids(&r), [0, 1, 2, 3], "{prof:?}");
        poll_n(&dev, &mut ctx, p.scq, 4);
        p.destroy(&mut ctx);
        close(&dev, ctx, "bad_wr");
    }
}

#[test]
fn post_recv_on_a_qp_with_an_srq_or_without_receive_queue_is_einval() {
    let (dev, mut ctx) = open(Profile::ConnectX6Dx);
    let p = Pair::new(&dev, &mut ctx, cap(8, 1, 0));
    let one = [p.sge(0, 8)];
    let doorbells = dev.traffic().stats().doorbells;
    assert_eq!(
        ctx.post_recv(
            p.a,
            &[RecvWr {
                wr_id: 1,
                sges: &one
            }]
        )
        .unwrap_err(),
        PostRecvError {
            index: 0,
            errno: Errno::EINVAL
        }
    );
    assert_eq!(ctx.qp(p.a).unwrap().doorbell_record().read_be32(0), 0);
    assert_eq!(dev.traffic().stats().doorbells, doorbells);
    // A send-only QP (no SRQ, max_recv_wr 0) has no receive queue either.
    let (s, c) = ctx
        .create_qp(&QpInitAttr {
            send_cq: p.scq,
            recv_cq: p.rcq,
            srq: None,
            cap: cap(8, 1, 0),
            sq_sig_all: false,
        })
        .unwrap();
    assert_eq!((c.max_recv_wr, c.max_recv_sge), (0, 0));
    assert_eq!(
        ctx.post_recv(
            s,
            &[RecvWr {
                wr_id: 1,
                sges: &one
            }]
        )
        .unwrap_err(),
        PostRecvError {
            index: 0,
            errno: Errno::EINVAL
        }
    );
    ctx.destroy_qp(s).unwrap();
    p.destroy(&mut ctx);
    close(&dev, ctx, "srq qp");
}

#[test]
fn create_qp_refuses_receive_sizes_the_device_cannot_hold_and_creates_nothing() {
    let (dev, mut ctx) = open(Profile::ConnectX5);
    let (cq, _) = ctx.create_cq(15).unwrap();
    let before = dev.objects();
    let d = ctx.query_device();
    let attr = |c: QpCap| QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: c,
        sq_sig_all: false,
    };
    let max_sge = dev.caps().max_wqe_sz_rq as u32 / 16;
    for (c, what) in [
        (own_cap(8, d.max_qp_wr + 1, 1), "more than max_qp_wr"),
        (own_cap(8, 8, max_sge + 1), "a WQE above max_wqe_sz_rq"),
    ] {
        assert_eq!(
            ctx.create_qp(&attr(c)).unwrap_err(),
            Errno::EINVAL,
            "{what}"
        );
    }
    assert_eq!(dev.objects(), before);
    // A receive-only QP with its own ring: no send queue.
    let (q, c) = ctx.create_qp(&attr(own_cap(0, 8, max_sge))).unwrap();
    assert_eq!(
        (c.max_send_wr, c.max_recv_wr, c.max_recv_sge),
        (0, 8, max_sge)
    );
    assert_eq!(ctx.qp(q).unwrap().send_geometry(), None);
    ctx.destroy_qp(q).unwrap();
    ctx.destroy_cq(cq).unwrap();
    close(&dev, ctx, "sizes");
}

#[test]
fn moving_to_error_flushes_the_own_ring_with_every_wr_id_in_order() {
    for prof in PROFILES {
        let (dev, mut ctx) = open(prof);
        let p = OwnPair::new(&dev, &mut ctx, own_cap(8, 8, 1));
        p.post(&mut ctx, p.b, 10..15);
        to_state(&mut ctx, p.b, QpState::Err);
        let r = poll_n(&dev, &mut ctx, p.rcq, 5);
        assert_eq!(ids(&r), [10, 11, 12, 13, 14], "{prof:?}");
        assert!(r
            .iter()
            .all(|w| w.status == WcStatus::WrFlushErr && w.opcode == WcOpcode::Recv));
        // A receive posted in ERR is flushed too (as `ib_drain_rq` needs).
        p.post(&mut ctx, p.b, 20..22);
        let r = poll_n(&dev, &mut ctx, p.rcq, 2);
        assert_eq!(ids(&r), [20, 21], "{prof:?}");
        assert!(r.iter().all(|w| w.status == WcStatus::WrFlushErr));
        assert!(drain(&mut ctx, p.rcq).is_empty());
        assert_eq!(ctx.stats().unmatched_cqes, 0);
        // Through RESET the ring starts over and carries traffic again.
        to_state(&mut ctx, p.b, QpState::Reset);
        to_state(&mut ctx, p.a, QpState::Reset);
        assert_eq!(ctx.qp(p.b).unwrap().outstanding_recvs(), 0);
        ctx.connect_loopback(p.a, p.b).unwrap();
        p.post(&mut ctx, p.b, 30..31);
        let sg = [p.sge(0, 8)];
        ctx.post_send(p.a, &[send(1, &sg)]).unwrap();
        let r = poll_n(&dev, &mut ctx, p.rcq, 1);
        assert_eq!(
            (r[0].wr_id, r[0].status),
            (30, WcStatus::Success),
            "{prof:?}"
        );
        poll_n(&dev, &mut ctx, p.scq, 1);
        p.destroy(&mut ctx);
        close(&dev, ctx, "flush");
    }
}

#[test]
fn an_empty_own_ring_answers_rnr_and_the_send_lands_once_a_receive_is_posted() {
    for prof in PROFILES {
        let (dev, mut ctx) = open(prof);
        let p = OwnPair::new(&dev, &mut ctx, own_cap(8, 8, 1));
        let data = p.fill(0, 64, 3);
        let sg = [p.sge(0, 64)];
        let rnr = dev.traffic().stats().rnr_naks;
        ctx.post_send(p.a, &[send(5, &sg)]).unwrap();
        dev.advance_us(5000);
        assert!(drain(&mut ctx, p.scq).is_empty(), "{prof:?}: waits on RNR");
        assert!(drain(&mut ctx, p.rcq).is_empty());
        assert!(dev.traffic().stats().rnr_naks > rnr, "{prof:?}: RNR NAKed");
        p.post(&mut ctx, p.b, 7..8);
        let r = poll_n(&dev, &mut ctx, p.rcq, 1);
        assert_eq!(
            (r[0].wr_id, r[0].status, r[0].byte_len),
            (7, WcStatus::Success, 64)
        );
        assert_eq!(p.received(7, 64), data);
        let s = poll_n(&dev, &mut ctx, p.scq, 1);
        assert_eq!(
            (s[0].wr_id, s[0].status),
            (5, WcStatus::Success),
            "{prof:?}"
        );
        p.destroy(&mut ctx);
        close(&dev, ctx, "rnr");
    }
}

#[test]
fn a_message_longer_than_the_posted_buffers_fails_both_sides() {
    let (dev, mut ctx) = open(Profile::ConnectX6Dx);
    let p = OwnPair::new(&dev, &mut ctx, own_cap(8, 8, 1));
    let small = [p.sge(RECV_AREA, 16)];
    ctx.post_recv(
        p.b,
        &[
            RecvWr {
                wr_id: 1,
                sges: &small,
            },
            RecvWr {
                wr_id: 2,
                sges: &small,
            },
        ],
    )
    .unwrap();
    let sg = [p.sge(0, 64)];
    ctx.post_send(p.a, &[send(9, &sg)]).unwrap();
    let r = poll_n(&dev, &mut ctx, p.rcq, 2);
    assert_eq!(ids(&r), [1, 2]);
    assert_eq!(r[0].status, WcStatus::LocLenErr);
    assert_eq!(
        r[1].status,
        WcStatus::WrFlushErr,
        "the QP is in error: the rest flushed"
    );
    let s = poll_n(&dev, &mut ctx, p.scq, 1);
    assert_eq!((s[0].wr_id, s[0].status), (9, WcStatus::RemInvReqErr));
    assert_eq!(ctx.stats().unmatched_cqes, 0);
    p.destroy(&mut ctx);
    close(&dev, ctx, "length");
}
