//! Memory regions protect: an rkey opens exactly the registered bytes with
//! exactly the registered rights, on every model profile (`ibv_reg_mr(3)`;
//! rdma-core `tests/test_mr.py`; Linux `reg_create`,
//! `drivers/infiniband/hw/mlx5/mr.c`).

use mlx5_tests::verbs_common::*;

use mlx5_driver::mkey::MkeyAccess;
use mlx5_driver::verbs::{
    AccessFlags, Mr, QpAttr, QpAttrMask, QpState, SendFlags, SendWr, Sge, WcOpcode, WcStatus,
    WrOpcode,
};
use mlx5_driver::Error;
use mlx5_sim::{Device, Profile};
use mlx5_tests::guarded::{GuardedTarget, GUARD, MR_AT, MR_LEN};
use mlx5_tests::PROFILES;

fn rights() -> AccessFlags {
    AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE
}

/// A pair, a guarded target buffer and an MR over part of it.
struct Setup {
    p: Pair,
    target: GuardedTarget,
    mr: Mr,
}

impl Setup {
    fn new(dev: &Device, ctx: &mut Ctx) -> Setup {
        let p = Pair::new(dev, ctx, cap(8, 1, 0));
        let target = GuardedTarget::new(dev, |_| GUARD);
        let mr = ctx.reg_mr(target.start(), MR_LEN as u64, rights()).unwrap();
        Setup { p, target, mr }
    }

    /// RDMA WRITE of `len` bytes of the send area to `raddr` through
    /// `rkey`; the one completion.
    fn write(&self, dev: &Device, ctx: &mut Ctx, raddr: u64, len: u32, rkey: u32) -> WcStatus {
        self.p.fill(0, len as usize, 7);
        let sg = [self.p.sge(0, len)];
        let wr = SendWr {
            opcode: WrOpcode::RdmaWrite,
            remote_addr: raddr,
            rkey,
            ..send(1, &sg)
        };
        ctx.post_send(self.p.a, &[wr]).unwrap();
        let s = poll_n(dev, ctx, self.p.scq, 1);
        assert_eq!(s.len(), 1, "one completion");
        s[0].status
    }

    fn destroy(self, ctx: &mut Ctx) {
        ctx.dereg_mr(self.mr).map_err(|(_, e)| e).unwrap();
        self.p.destroy(ctx);
        drop(self.target);
    }
}

/// Both QPs back to RESET and connected again (what an application does
/// after an error), with the async events of the error acknowledged.
fn recover(ctx: &mut Ctx, p: &Pair) {
    for ev in async_events(ctx) {
        ctx.ack_async_event(&ev).unwrap();
    }
    let reset = QpAttr {
        qp_state: QpState::Reset,
        ..QpAttr::default()
    };
    for q in [p.a, p.b] {
        ctx.modify_qp(q, &reset, QpAttrMask::STATE).unwrap();
    }
    drain(ctx, p.scq);
    drain(ctx, p.rcq);
    ctx.connect_loopback(p.a, p.b).unwrap();
}

fn state(ctx: &mut Ctx, q: mlx5_driver::verbs::QpHandle) -> QpState {
    ctx.query_qp(q).unwrap().0.qp_state
}

/// A refused RDMA WRITE: remote access error, the requester in error,
/// the target buffer byte for byte as before; then recover.
fn refused(dev: &Device, ctx: &mut Ctx, s: &Setup, raddr: u64, len: u32, rkey: u32, what: &str) {
    let before = s.target.bytes();
    assert_eq!(
        s.write(dev, ctx, raddr, len, rkey),
        WcStatus::RemAccessErr,
        "{what}"
    );
    assert_eq!(
        state(ctx, s.p.a),
        QpState::Err,
        "{what}: requester in error"
    );
    assert!(s.target.bytes() == before, "{what}: target buffer changed");
    recover(ctx, &s.p);
}

/// Runs `body` on every model profile with a fresh [`Setup`], then tears
/// it down and checks nothing leaked (`close`).
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

#[test]
fn rdma_writes_reach_exactly_the_registered_bytes() {
    on_every_profile(|dev, ctx, s, what| {
        let rkey = s.mr.rkey();
        let (start, end) = (s.target.start(), s.target.end());
        let len = MR_LEN as u32;
        let outside = [
            (end, 1, "a byte past the end"),
            (start - 1, 1, "a byte before"),
            (end - 8, 16, "straddling the end"),
            (start - 8, 16, "straddling the start"),
            (start, len + 1, "one byte too long"),
        ];
        for (raddr, n, case) in outside {
            refused(dev, ctx, s, raddr, n, rkey, &format!("{what}: {case}"));
        }
        assert!(
            s.target.bytes().iter().all(|&b| b == GUARD),
            "{what}: nothing written"
        );
        // Exactly the region: written, the guard bytes around it unchanged.
        assert_eq!(
            s.write(dev, ctx, start, len, rkey),
            WcStatus::Success,
            "{what}"
        );
        let data = s.p.fill(0, MR_LEN, 7);
        let got = s.target.bytes();
        assert_eq!(&got[MR_AT..MR_AT + MR_LEN], &data[..], "{what}: written");
        assert!(
            got[..MR_AT]
                .iter()
                .chain(&got[MR_AT + MR_LEN..])
                .all(|&b| b == GUARD),
            "{what}: guard bytes changed"
        );
        assert!(
            dev.iommu_faults().is_empty(),
            "{what}: the key refused, not the IOMMU"
        );
    });
}

#[test]
fn an_mr_without_remote_write_refuses_writes() {
    on_every_profile(|dev, ctx, s, what| {
        let ro = ctx
            .reg_mr(
                s.target.start(),
                MR_LEN as u64,
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
            )
            .unwrap();
        refused(
            dev,
            ctx,
            s,
            s.target.start(),
            8,
            ro.rkey(),
            &format!("{what}: no remote write"),
        );
        ctx.dereg_mr(ro).map_err(|(_, e)| e).unwrap();
    });
}

#[test]
fn a_deregistered_rkey_opens_nothing_even_over_the_same_buffer() {
    on_every_profile(|dev, ctx, s, what| {
        let old = ctx
            .reg_mr(s.target.start(), MR_LEN as u64, rights())
            .unwrap();
        let stale = old.rkey();
        ctx.dereg_mr(old).map_err(|(_, e)| e).unwrap();
        refused(
            dev,
            ctx,
            s,
            s.target.start(),
            8,
            stale,
            &format!("{what}: after dereg_mr"),
        );
        let again = ctx
            .reg_mr(s.target.start(), MR_LEN as u64, rights())
            .unwrap();
        assert_ne!(again.rkey(), stale, "{what}: a new key");
        refused(
            dev,
            ctx,
            s,
            s.target.start(),
            8,
            stale,
            &format!("{what}: after re-registering"),
        );
        assert_eq!(
            s.write(dev, ctx, s.target.start(), 8, again.rkey()),
            WcStatus::Success,
            "{what}: the new key works"
        );
        ctx.dereg_mr(again).map_err(|(_, e)| e).unwrap();
    });
}

#[test]
fn an_lkey_used_outside_its_mr_fails_the_send_locally() {
    on_every_profile(|dev, ctx, s, what| {
        let before = s.target.bytes();
        // The target MR's lkey, gathering 16 bytes that straddle its end.
        let sg = [Sge {
            addr: s.target.end() - 8,
            length: 16,
            lkey: s.mr.lkey(),
        }];
        let wr = SendWr {
            opcode: WrOpcode::RdmaWrite,
            remote_addr: s.target.start(),
            rkey: s.mr.rkey(),
            ..send(5, &sg)
        };
        ctx.post_send(s.p.a, &[wr]).unwrap();
        let c = poll_n(dev, ctx, s.p.scq, 1);
        assert_eq!(
            (c[0].wr_id, c[0].status),
            (5, WcStatus::LocProtErr),
            "{what}"
        );
        assert_eq!(state(ctx, s.p.a), QpState::Err, "{what}");
        assert!(s.target.bytes() == before, "{what}: nothing written");
        recover(ctx, &s.p);
    });
}

#[test]
fn a_zero_length_write_with_immediate_needs_no_rkey() {
    on_every_profile(|dev, ctx, s, what| {
        s.p.post_recv(ctx, 0, 1);
        for (wr_id, opcode) in [(7, WrOpcode::RdmaWriteWithImm), (8, WrOpcode::RdmaWrite)] {
            let wr = SendWr {
                wr_id,
                opcode,
                send_flags: SendFlags::SIGNALED,
                imm_data: 0x1234_5678,
                remote_addr: 0,
                rkey: 0,
                ..SendWr::EMPTY
            };
            ctx.post_send(s.p.a, &[wr]).unwrap();
            let c = poll_n(dev, ctx, s.p.scq, 1);
            assert_eq!(
                (c[0].wr_id, c[0].status),
                (wr_id, WcStatus::Success),
                "{what}"
            );
        }
        let r = poll_n(dev, ctx, s.p.rcq, 1);
        assert_eq!(r.len(), 1, "{what}: one receive, for the immediate");
        assert_eq!(
            (r[0].status, r[0].opcode, r[0].byte_len, r[0].imm_data),
            (
                WcStatus::Success,
                WcOpcode::RecvRdmaWithImm,
                0,
                Some(0x1234_5678)
            ),
            "{what}"
        );
        assert!(s.target.bytes().iter().all(|&b| b == GUARD), "{what}");
    });
}

#[test]
fn the_physical_address_key_is_never_made_with_remote_rights() {
    let (dev, ctx) = open(Profile::ConnectX6Dx);
    let before = dev.objects().mkeys;
    for right in [
        MkeyAccess::REMOTE_WRITE,
        MkeyAccess::REMOTE_READ,
        MkeyAccess::REMOTE_ATOMIC,
    ] {
        let e = ctx
            .hca()
            .create_mkey(MkeyAccess::LOCAL_WRITE | right)
            .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{right:?}: {e}");
    }
    assert_eq!(dev.objects().mkeys, before, "nothing created");
    close(&dev, ctx, "pa key");
}
