//! The boundary checks of `mr_protect.rs` for RDMA READ and the atomics, on
//! every model profile: a READ one byte past the end, one byte before the
//! start, straddling either end, or one byte too long, and an atomic just
//! past either end, are refused with a remote access error, the requester in
//! error, the responder's bytes and the requester's landing area
//! unchanged; a READ of exactly the region and atomics on its first and last
//! 8 bytes succeed; a region without the right refuses; a deregistered rkey
//! refuses, also after a new registration of the same buffer; a local key
//! used outside its region fails locally; a zero-length READ with rkey 0
//! succeeds (IBTA; rxe `check_rkey`).

use mlx5_tests::verbs_common::*;

use mlx5_driver::verbs::{AccessFlags, QpAttr, QpAttrMask, QpState, Sge, WcStatus, WrOpcode};
use mlx5_sim::Device;
use mlx5_tests::guarded::{GuardedTarget, GUARD, MR_AT, MR_LEN};
use mlx5_tests::PROFILES;

use crate::verbs_rdma::{atomic_wr, connect_rd, RdPair};

/// Where READs and atomic results land in the pair's buffer.
const LAND: usize = 8192;
const LAND_FILL: u8 = 0x3c;

const ALL: AccessFlags = AccessFlags(
    AccessFlags::LOCAL_WRITE.0
        | AccessFlags::REMOTE_WRITE.0
        | AccessFlags::REMOTE_READ.0
        | AccessFlags::REMOTE_ATOMIC.0,
);

struct Setup {
    p: RdPair,
    target: GuardedTarget,
}

impl Setup {
    fn new(dev: &Device, ctx: &mut Ctx) -> Setup {
        let p = RdPair::with(dev, ctx, false, ALL, ALL, 4);
        let target = GuardedTarget::new(dev, |i| GUARD ^ (i as u8));
        Setup { p, target }
    }

    fn landed(&self, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.p.buf.read_bytes(LAND, &mut v);
        v
    }

    /// Post `wr`-shaped work (`read` or an atomic) with its local buffer at
    /// `LAND` (filled first); the one completion's status.
    fn run(&self, dev: &Device, ctx: &mut Ctx, op: Op, raddr: u64, rkey: u32) -> WcStatus {
        self.p.buf.fill(LAND, 2048, LAND_FILL);
        let sg = [Sge {
            addr: self.p.at(LAND),
            length: op.len(),
            lkey: self.p.lkey(),
        }];
        let wr = match op {
            Op::Read(_) => mlx5_driver::verbs::SendWr {
                wr_id: 1,
                opcode: WrOpcode::RdmaRead,
                send_flags: mlx5_driver::verbs::SendFlags::SIGNALED,
                sg_list: if op.len() == 0 { &[] } else { &sg },
                remote_addr: raddr,
                rkey,
                ..mlx5_driver::verbs::SendWr::EMPTY
            },
            Op::FetchAdd => atomic_wr(1, WrOpcode::AtomicFetchAndAdd, &sg, raddr, rkey, 1, 0),
            Op::CmpSwap => atomic_wr(1, WrOpcode::AtomicCmpAndSwp, &sg, raddr, rkey, 0, 7),
        };
        ctx.post_send(self.p.a, &[wr]).unwrap();
        let c = poll_n(dev, ctx, self.p.scq, 1);
        assert_eq!(c.len(), 1, "one completion");
        c[0].status
    }

    /// Both QPs back to RESET and connected again, events acknowledged.
    fn recover(&self, ctx: &mut Ctx) {
        while let Ok(ev) = ctx.get_async_event() {
            ctx.ack_async_event(&ev).unwrap();
        }
        let reset = QpAttr {
            qp_state: QpState::Reset,
            ..QpAttr::default()
        };
        for q in [self.p.a, self.p.b] {
            ctx.modify_qp(q, &reset, QpAttrMask::STATE).unwrap();
        }
        drain(ctx, self.p.scq);
        let ah = ctx.loopback_ah().unwrap();
        let (qa, qb) = (ctx.qp_num(self.p.a).unwrap(), ctx.qp_num(self.p.b).unwrap());
        connect_rd(ctx, self.p.a, qb, ah, ALL, 4).unwrap();
        connect_rd(ctx, self.p.b, qa, ah, ALL, 4).unwrap();
    }

    /// A refused access: remote access error, the requester in error, the
    /// target and the landing area unchanged; then recover.
    fn refused(&self, dev: &Device, ctx: &mut Ctx, op: Op, raddr: u64, rkey: u32, what: &str) {
        let before = self.target.bytes();
        assert_eq!(
            self.run(dev, ctx, op, raddr, rkey),
            WcStatus::RemAccessErr,
            "{what}"
        );
        let a = ctx.query_qp(self.p.a).unwrap().0.qp_state;
        assert_eq!(a, QpState::Err, "{what}: requester in error");
        assert!(self.target.bytes() == before, "{what}: target changed");
        assert!(
            self.landed(2048).iter().all(|&b| b == LAND_FILL),
            "{what}: something landed"
        );
        self.recover(ctx);
    }

    fn destroy(self, ctx: &mut Ctx) {
        self.p.destroy(ctx);
        drop(self.target);
    }
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Read(u32),
    FetchAdd,
    CmpSwap,
}

impl Op {
    fn len(self) -> u32 {
        match self {
            Op::Read(n) => n,
            _ => 8,
        }
    }
}

fn on_every_profile(mut body: impl FnMut(&Device, &mut Ctx, &Setup, &str)) {
    for prof in PROFILES {
        let (dev, mut ctx) = open(prof);
        let s = Setup::new(&dev, &mut ctx);
        let what = format!("{prof:?}");
        body(&dev, &mut ctx, &s, &what);
        s.destroy(&mut ctx);
        close(&dev, ctx, &what);
    }
}

fn reg(ctx: &mut Ctx, s: &Setup, access: AccessFlags) -> mlx5_driver::verbs::Mr {
    ctx.reg_mr(s.target.start(), MR_LEN as u64, access).unwrap()
}

#[test]
fn reads_and_atomics_reach_exactly_the_registered_bytes() {
    on_every_profile(|dev, ctx, s, what| {
        let mr = reg(ctx, s, ALL);
        let rkey = mr.rkey();
        let (start, end) = (s.target.start(), s.target.end());
        let len = MR_LEN as u32;
        let outside = [
            (Op::Read(1), end, "READ a byte past the end"),
            (Op::Read(1), start - 1, "READ a byte before"),
            (Op::Read(16), end - 8, "READ straddling the end"),
            (Op::Read(16), start - 8, "READ straddling the start"),
            (Op::Read(len + 1), start, "READ one byte too long"),
            (Op::FetchAdd, end, "FETCH_ADD just past the end"),
            (Op::CmpSwap, start - 8, "CMP_SWAP just before"),
        ];
        for (op, raddr, case) in outside {
            s.refused(dev, ctx, op, raddr, rkey, &format!("{what}: {case}"));
        }
        // Exactly the region: read whole, and atomics on its first and last
        // 8 bytes.
        let before = s.target.bytes();
        let st = s.run(dev, ctx, Op::Read(len), start, rkey);
        assert_eq!(st, WcStatus::Success, "{what}");
        assert_eq!(s.landed(MR_LEN), before[MR_AT..MR_AT + MR_LEN], "{what}");
        for (op, at) in [(Op::FetchAdd, start), (Op::CmpSwap, end - 8)] {
            let old = s.target.bytes();
            let st = s.run(dev, ctx, op, at, rkey);
            assert_eq!(st, WcStatus::Success, "{what}: {op:?}");
            let off = s.target.offset_of(at);
            assert_eq!(s.landed(8), old[off..off + 8], "{what}: {op:?} original");
        }
        let after = s.target.bytes();
        assert!(
            GuardedTarget::guards_equal(&after, &before),
            "{what}: guard bytes changed"
        );
        assert!(dev.iommu_faults().is_empty(), "{what}");
        ctx.dereg_mr(mr).map_err(|(_, e)| e).unwrap();
    });
}

#[test]
fn a_region_without_the_right_refuses_reads_and_atomics() {
    on_every_profile(|dev, ctx, s, what| {
        let no_read = reg(ctx, s, AccessFlags(ALL.0 & !AccessFlags::REMOTE_READ.0));
        s.refused(
            dev,
            ctx,
            Op::Read(8),
            s.target.start(),
            no_read.rkey(),
            &format!("{what}: no read"),
        );
        let no_atomic = reg(ctx, s, AccessFlags(ALL.0 & !AccessFlags::REMOTE_ATOMIC.0));
        let k = no_atomic.rkey();
        s.refused(
            dev,
            ctx,
            Op::FetchAdd,
            s.target.start(),
            k,
            &format!("{what}: no atomic"),
        );
        for mr in [no_read, no_atomic] {
            ctx.dereg_mr(mr).map_err(|(_, e)| e).unwrap();
        }
    });
}

#[test]
fn a_deregistered_rkey_reads_nothing_even_over_the_same_buffer() {
    on_every_profile(|dev, ctx, s, what| {
        let old = reg(ctx, s, ALL);
        let stale = old.rkey();
        ctx.dereg_mr(old).map_err(|(_, e)| e).unwrap();
        for op in [Op::Read(8), Op::CmpSwap] {
            s.refused(
                dev,
                ctx,
                op,
                s.target.start(),
                stale,
                &format!("{what}: {op:?} after dereg_mr"),
            );
        }
        let again = reg(ctx, s, ALL);
        assert_ne!(again.rkey(), stale, "{what}: a new key");
        for op in [Op::Read(8), Op::FetchAdd] {
            let case = format!("{what}: {op:?} after re-registering");
            s.refused(dev, ctx, op, s.target.start(), stale, &case);
        }
        let st = s.run(dev, ctx, Op::Read(8), s.target.start(), again.rkey());
        assert_eq!(st, WcStatus::Success, "{what}: the new key works");
        ctx.dereg_mr(again).map_err(|(_, e)| e).unwrap();
    });
}

#[test]
fn a_local_key_used_outside_its_region_fails_reads_and_atomics_locally() {
    on_every_profile(|dev, ctx, s, what| {
        let remote = reg(ctx, s, ALL);
        // A small local region in the pair's buffer; the landing entry
        // straddles its end.
        let local = ctx
            .reg_mr(s.p.at(LAND), 64, AccessFlags::LOCAL_WRITE)
            .unwrap();
        for (op, n) in [(Op::Read(16), 16), (Op::FetchAdd, 8)] {
            s.p.buf.fill(LAND, 2048, LAND_FILL);
            let before = s.target.bytes();
            let sg = [Sge {
                addr: s.p.at(LAND) + 64 - 4,
                length: n,
                lkey: local.lkey(),
            }];
            let wr = match op {
                Op::Read(_) => mlx5_driver::verbs::SendWr {
                    wr_id: 5,
                    opcode: WrOpcode::RdmaRead,
                    send_flags: mlx5_driver::verbs::SendFlags::SIGNALED,
                    sg_list: &sg,
                    remote_addr: s.target.start(),
                    rkey: remote.rkey(),
                    ..mlx5_driver::verbs::SendWr::EMPTY
                },
                _ => atomic_wr(
                    5,
                    WrOpcode::AtomicFetchAndAdd,
                    &sg,
                    s.target.start(),
                    remote.rkey(),
                    1,
                    0,
                ),
            };
            ctx.post_send(s.p.a, &[wr]).unwrap();
            let c = poll_n(dev, ctx, s.p.scq, 1);
            assert_eq!(
                (c[0].wr_id, c[0].status),
                (5, WcStatus::LocProtErr),
                "{what}: {op:?}"
            );
            assert!(
                s.landed(2048).iter().all(|&b| b == LAND_FILL),
                "{what}: {op:?}: nothing landed"
            );
            if matches!(op, Op::Read(_)) {
                assert!(
                    s.target.bytes() == before,
                    "{what}: a READ changes nothing remote"
                );
            }
            s.recover(ctx);
        }
        ctx.dereg_mr(local).map_err(|(_, e)| e).unwrap();
        ctx.dereg_mr(remote).map_err(|(_, e)| e).unwrap();
    });
}

#[test]
fn a_zero_length_read_needs_no_rkey() {
    on_every_profile(|dev, ctx, s, what| {
        let st = s.run(dev, ctx, Op::Read(0), 0, 0);
        assert_eq!(st, WcStatus::Success, "{what}");
        assert!(s.landed(2048).iter().all(|&b| b == LAND_FILL), "{what}");
    });
}
