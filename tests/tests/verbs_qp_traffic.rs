//! The QP verbs carrying traffic: the loopback helper in the mode of every
//! profile (and InfiniBand), the bytes of each opcode, memory regions and
//! the rights of their keys.

use mlx5_tests::verbs_common::*;

use mlx5_driver::verbs::{AccessFlags, Errno, SendFlags, SendWr, WcOpcode, WcStatus, WrOpcode};
use mlx5_hal::Hal;
use mlx5_regs::{CmdStatus, Opcode};
use mlx5_sim::{Device, Profile};
use mlx5_tests::PROFILES;

/// SEND from `a` to `b` and back, over whatever the helper chose.
fn ping(dev: &Device, ctx: &mut Ctx, p: &Pair) {
    p.post_recv(ctx, 0, 2);
    let data = p.fill(0, 100, 9);
    let sg = [p.sge(0, 100)];
    ctx.post_send(p.a, &[send(41, &sg)]).unwrap();
    ctx.post_send(p.b, &[send(42, &sg)]).unwrap();
    let r = poll_n(dev, ctx, p.rcq, 2);
    let s = poll_n(dev, ctx, p.scq, 2);
    assert_eq!(ids(&s), [41, 42]);
    assert!(s
        .iter()
        .all(|w| w.status == WcStatus::Success && w.opcode == WcOpcode::Send));
    let (qa, qb) = (ctx.qp_num(p.a).unwrap(), ctx.qp_num(p.b).unwrap());
    assert_eq!((s[0].qp_num, s[1].qp_num), (qa, qb));
    assert_eq!(ids(&r), [0, 1]);
    assert_eq!((r[0].qp_num, r[1].qp_num), (qb, qa), "received by the peer");
    assert_eq!(p.received(0, 100), data);
}

#[test]
fn connect_loopback_works_in_the_mode_of_every_profile_and_on_infiniband() {
    for p in PROFILES {
        let (dev, mut ctx) = open(p);
        let ah = ctx.loopback_ah().unwrap();
        // ConnectX-4 Lx has no force loopback: RoCE to its own GID.
        assert_eq!(ah.force_loopback, p != Profile::ConnectX4Lx, "{p:?}");
        assert_eq!(ah.is_global, p == Profile::ConnectX4Lx);
        let pair = Pair::new(&dev, &mut ctx, cap(8, 1, 0));
        ping(&dev, &mut ctx, &pair);
        assert_eq!(dev.traffic().side_door_uses(), 0);
        // Connecting again needs RESET.
        assert_eq!(
            ctx.connect_loopback(pair.a, pair.b).unwrap_err(),
            Errno::EINVAL
        );
        pair.destroy(&mut ctx);
        close(&dev, ctx, "connect");
    }
    let (dev, mut ctx) = open_ib();
    let ah = ctx.loopback_ah().unwrap();
    assert_eq!(
        (ah.dlid, ah.is_global, ah.force_loopback),
        (dev.port_lid(), false, false)
    );
    let pair = Pair::new(&dev, &mut ctx, cap(8, 1, 0));
    ping(&dev, &mut ctx, &pair);
    let (q, _) = ctx.query_qp(pair.a).unwrap();
    assert_eq!(q.ah_attr.dlid, dev.port_lid());
    pair.destroy(&mut ctx);
    close(&dev, ctx, "connect ib");
}

#[test]
fn qps_receive_through_an_issi_0_srq_too() {
    // At ISSI 0 the SRQ is a CREATE_SRQ SRQ whose context names a CQ.
    let dev = Device::new(mlx5_sim::SimConfig {
        issi_supported: 0b01,
        ..mlx5_sim::SimConfig::profile(Profile::ConnectX5)
    });
    let mut ctx: Ctx = mlx5_driver::verbs::Verbs::open(mlx5_tests::bring_up(&dev));
    assert_eq!(ctx.hca().issi(), 0);
    let pair = Pair::new(&dev, &mut ctx, cap(8, 1, 0));
    ping(&dev, &mut ctx, &pair);
    pair.destroy(&mut ctx);
    close(&dev, ctx, "issi 0");
}

#[test]
fn post_send_every_opcode_moves_its_bytes_on_every_profile() {
    for prof in PROFILES {
        let (dev, mut ctx) = open(prof);
        let p = Pair::new(&dev, &mut ctx, cap(16, 2, 64));
        p.post_recv(&mut ctx, 0, 5);
        let d0 = p.fill(0, 300, 1);
        let d1 = p.fill(1024, 200, 2);
        let sg = [p.sge(0, 300)];
        let two = [p.sge(0, 150), p.sge(150, 150)];
        let w_sg = [p.sge(1024, 200)];
        let target = p.buf.iova() + 8192;
        let inline = [7u8; 60];
        let wrs = [
            send(1, &two),
            SendWr {
                wr_id: 2,
                opcode: WrOpcode::SendWithImm,
                imm_data: 0x1234_5678,
                ..send(2, &sg)
            },
            SendWr {
                wr_id: 3,
                opcode: WrOpcode::RdmaWrite,
                remote_addr: target,
                rkey: p.rkey(),
                ..send(3, &w_sg)
            },
            SendWr {
                wr_id: 4,
                opcode: WrOpcode::RdmaWriteWithImm,
                remote_addr: target + 1000,
                rkey: p.rkey(),
                imm_data: 99,
                ..send(4, &w_sg)
            },
            SendWr {
                wr_id: 5,
                send_flags: SendFlags::SIGNALED | SendFlags::INLINE,
                inline_data: &inline,
                ..send(5, &[])
            },
            send(6, &[]),
        ];
        ctx.post_send(p.a, &wrs).unwrap();
        let s = poll_n(&dev, &mut ctx, p.scq, 6);
        assert_eq!(ids(&s), [1, 2, 3, 4, 5, 6], "{prof:?}");
        assert_eq!(
            s.iter().map(|w| w.opcode).collect::<Vec<_>>(),
            [
                WcOpcode::Send,
                WcOpcode::Send,
                WcOpcode::RdmaWrite,
                WcOpcode::RdmaWrite,
                WcOpcode::Send,
                WcOpcode::Send
            ]
        );
        assert!(s.iter().all(|w| w.status == WcStatus::Success));
        let r = poll_n(&dev, &mut ctx, p.rcq, 5);
        assert_eq!(ids(&r), [0, 1, 2, 3, 4], "the RDMA WRITE takes no receive");
        assert_eq!(r[4].byte_len, 0, "a SEND of nothing");
        assert_eq!((r[0].byte_len, r[0].imm_data), (300, None));
        assert_eq!(p.received(0, 300), d0, "two SGEs gathered in order");
        assert_eq!(
            (r[1].imm_data, r[1].opcode),
            (Some(0x1234_5678), WcOpcode::Recv)
        );
        assert_eq!(
            (r[2].opcode, r[2].imm_data),
            (WcOpcode::RecvRdmaWithImm, Some(99))
        );
        assert_eq!((r[2].byte_len, r[3].byte_len), (200, 60));
        assert_eq!(p.received(3, 60), inline);
        let mut w = vec![0u8; 200];
        p.buf.read_bytes(8192, &mut w);
        assert_eq!(w, d1, "{prof:?}: RDMA WRITE");
        p.buf.read_bytes(8192 + 1000, &mut w);
        assert_eq!(w, d1, "{prof:?}: RDMA WRITE with immediate");
        assert_eq!(ctx.stats().unmatched_cqes, 0);
        assert_eq!(dev.traffic().side_door_uses(), 0);
        p.destroy(&mut ctx);
        close(&dev, ctx, "opcodes");
    }
}

#[test]
fn reg_mr_checks_access_like_mlx5_and_its_keys_guard_rdma_writes() {
    let (dev, mut ctx) = open(Profile::ConnectX6Dx);
    let base = dev.objects().mkeys;
    let buf = dev.hal().alloc_dma(4096).unwrap();
    let a = buf.iova();
    use AccessFlags as A;
    let refused = [
        (
            a,
            4096,
            A::REMOTE_WRITE,
            Errno::EINVAL,
            "remote write needs local write",
        ),
        (
            a,
            4096,
            A::REMOTE_ATOMIC,
            Errno::EINVAL,
            "remote atomic needs local write",
        ),
        (
            a,
            4096,
            A(1 << 10),
            Errno::EINVAL,
            "a bit libibverbs does not define",
        ),
        (a, 0, A::LOCAL_WRITE, Errno::EINVAL, "length 0"),
        (u64::MAX - 10, 4096, A::LOCAL_WRITE, Errno::EINVAL, "wraps"),
        (a, 4096, A::ON_DEMAND, Errno::EOPNOTSUPP, "on-demand paging"),
        (a, 4096, A::MW_BIND, Errno::EOPNOTSUPP, "memory windows"),
        (
            a,
            4096,
            A::ZERO_BASED | A::LOCAL_WRITE,
            Errno::EOPNOTSUPP,
            "zero based",
        ),
    ];
    for (addr, len, acc, errno, what) in refused {
        assert_eq!(ctx.reg_mr(addr, len, acc).unwrap_err(), errno, "{what}");
    }
    assert_eq!(dev.objects().mkeys, base, "nothing created");
    // An optional bit the device lacks is dropped, as libibverbs does.
    let mr = ctx
        .reg_mr(a, 4096, A::LOCAL_WRITE | A::RELAXED_ORDERING | A::HUGETLB)
        .unwrap();
    assert_eq!(mr.access(), A::LOCAL_WRITE | A::HUGETLB);
    assert_eq!((mr.lkey(), mr.addr(), mr.length()), (mr.rkey(), a, 4096));
    assert_eq!(dev.objects().mkeys, base + 1);
    ctx.dereg_mr(mr).map_err(|(_, e)| e).unwrap();
    assert_eq!(dev.objects().mkeys, base);
    // Firmware refusing CREATE_MKEY: its errno, nothing made.
    dev.inject()
        .fail_next(Opcode::CREATE_MKEY.0, CmdStatus::BAD_RES_STATE_ERR.0, 7);
    assert_eq!(
        ctx.reg_mr(a, 4096, A::LOCAL_WRITE).unwrap_err(),
        Errno::EINVAL
    );
    assert_eq!(dev.objects().mkeys, base);

    // An RDMA WRITE through a key without remote write fails remotely;
    // through one with it, it lands.
    let p = Pair::new(&dev, &mut ctx, cap(8, 1, 0));
    let ro = ctx
        .reg_mr(a, 4096, A::LOCAL_WRITE | A::REMOTE_READ)
        .unwrap();
    let rw = ctx
        .reg_mr(a, 4096, A::LOCAL_WRITE | A::REMOTE_WRITE)
        .unwrap();
    let data = p.fill(0, 64, 5);
    let sg = [p.sge(0, 64)];
    let write = |wr_id, rkey| SendWr {
        opcode: WrOpcode::RdmaWrite,
        remote_addr: a,
        rkey,
        ..send(wr_id, &sg)
    };
    ctx.post_send(p.a, &[write(1, rw.rkey())]).unwrap();
    let s = poll_n(&dev, &mut ctx, p.scq, 1);
    assert_eq!((s[0].wr_id, s[0].status), (1, WcStatus::Success));
    let mut got = [0u8; 64];
    buf.read_bytes(0, &mut got);
    assert_eq!(got.to_vec(), data);
    ctx.post_send(p.a, &[write(2, ro.rkey())]).unwrap();
    let s = poll_n(&dev, &mut ctx, p.scq, 1);
    assert_eq!((s[0].wr_id, s[0].status), (2, WcStatus::RemAccessErr));
    // The responder's access error is an async event of b; acknowledge it.
    let mut evs = Vec::new();
    while let Ok(ev) = ctx.get_async_event() {
        evs.push(ev);
    }
    assert!(!evs.is_empty());
    for ev in &evs {
        ctx.ack_async_event(ev).unwrap();
    }
    for mr in [ro, rw] {
        ctx.dereg_mr(mr).map_err(|(_, e)| e).unwrap();
    }
    p.destroy(&mut ctx);
    drop(buf);
    close(&dev, ctx, "reg_mr");
}

#[test]
fn query_device_reports_the_qp_limits() {
    for p in PROFILES {
        let (dev, ctx) = open(p);
        let c = dev.caps();
        let d = ctx.query_device();
        assert_eq!(d.max_qp, 1 << c.log_max_qp);
        assert_eq!(d.max_qp_wr, 1 << c.log_max_qp_sz);
        assert_eq!(
            d.max_send_sge,
            ((c.max_wqe_sz_sq as u32).min(1008) - 192) / 16,
            "what create_qp accepts after libmlx5's 192-byte RC overhead"
        );
        assert_eq!(d.max_qp_rd_atom, 1 << c.log_max_ra_res_qp);
        assert_eq!(d.max_qp_init_rd_atom, 1 << c.log_max_ra_req_qp);
        close(&dev, ctx, "query_device");
    }
}
