//! `create_qp` of the facade against the model: sizes and their rounding
//! (against rdma-core's formulas, on every profile), every refusal with
//! its errno and nothing created.

use mlx5_tests::verbs_common::*;

use mlx5_driver::verbs::{Errno, QpCap, QpInitAttr, QpState};
use mlx5_hal::Hal;
use mlx5_regs::{CmdStatus, Opcode};
use mlx5_sim::{Device, Profile, SimConfig, SimHal};
use mlx5_tests::PROFILES;

fn count(dev: &Device, op: Opcode) -> usize {
    dev.trace().iter().filter(|t| t.opcode == op.0).count()
}

/// rdma-core's `mlx5_calc_send_wqe` + `mlx5_calc_sq_size` for a plain RC
/// `create_qp` (no send-ops flags: `sq_overhead` reserves the memory-window
/// bind, 192 bytes), with the 63-unit WQE limit, and the context's table of
/// 256 blocks.
fn reference(c: QpCap, max_wqe_sz_sq: usize, log_max_qp_sz: u8) -> Result<QpCap, Errno> {
    const OVERHEAD: usize = 192;
    let (wr, sge, inl) = (
        c.max_send_wr as u64,
        c.max_send_sge as usize,
        c.max_inline_data as usize,
    );
    let desc = max_wqe_sz_sq.min(63 * 16);
    if sge > (desc - OVERHEAD) / 16 {
        return Err(Errno::EINVAL);
    }
    let inline = if inl > 0 {
        OVERHEAD + (4 + inl).div_ceil(16) * 16
    } else {
        0
    };
    let tot = (OVERHEAD + 16 * sge).max(inline);
    if tot > desc {
        return Err(Errno::EINVAL);
    }
    let wqe = tot.div_ceil(64) * 64;
    let ring = (wr * wqe as u64).next_power_of_two();
    let blocks = ring / 64;
    if blocks > 1 << log_max_qp_sz.min(15) {
        return Err(Errno::EINVAL);
    }
    if blocks > 256 {
        return Err(Errno::ENOMEM);
    }
    Ok(QpCap {
        max_send_wr: (ring / wqe as u64) as u32,
        max_send_sge: sge as u32,
        // What 63 units hold; a 192-byte WQE (no gather entry, no inline)
        // holds none (rdma-core computes -4 there).
        max_inline_data: (wqe.min(63 * 16).saturating_sub(OVERHEAD + 4)) as u32,
        ..QpCap::default()
    })
}

/// Sizes worked by hand from rdma-core `providers/mlx5/verbs.c`
/// (`sq_overhead` 192 for a plain RC `create_qp`, `mlx5_calc_send_wqe`,
/// `mlx5_calc_sq_size`: `max_inline_data` = WQE − 192 − 4, `max_send_wr` =
/// roundup_pow2(wr · WQE) / WQE, `max_send_sge` as asked), what libmlx5
/// reports for the same `ibv_create_qp` on a device with `max_wqe_sz_sq`
/// 1024 or more.
#[test]
fn create_qp_reads_back_what_libmlx5_reports() {
    // (wr, sge, inline asked) -> (max_send_wr, max_send_sge, max_inline_data)
    type Sizes = (u32, u32, u32);
    let cases: [(Sizes, Sizes); 7] = [
        ((1, 1, 0), (1, 1, 60)),     // WQE 208 -> 256
        ((64, 1, 0), (64, 1, 60)),   // ring 16 KiB
        ((10, 2, 0), (16, 2, 60)),   // 2560 -> 4096 bytes
        ((16, 1, 64), (25, 1, 124)), // inline 192 + 80 = 272 -> 320; 5120 -> 8192
        ((3, 4, 100), (3, 4, 124)),  // inline 304 -> 320; 960 -> 1024
        ((5, 3, 200), (9, 3, 252)),  // inline 192 + 208 = 400 -> 448; 2240 -> 4096
        ((20, 0, 12), (32, 0, 60)),  // inline 208 -> 256; 5120 -> 8192
    ];
    for p in PROFILES {
        let (dev, mut ctx) = open(p);
        assert!(
            dev.caps().max_wqe_sz_sq >= 1024,
            "{p:?}: the worked examples assume max_wqe_sz_sq >= 1024"
        );
        let (cq, _) = ctx.create_cq(15).unwrap();
        for ((wr, sge, inl), (e_wr, e_sge, e_inl)) in cases {
            let (h, got) = ctx
                .create_qp(&QpInitAttr {
                    send_cq: cq,
                    recv_cq: cq,
                    srq: None,
                    cap: cap(wr, sge, inl),
                    sq_sig_all: false,
                })
                .unwrap();
            assert_eq!(
                (got.max_send_wr, got.max_send_sge, got.max_inline_data),
                (e_wr, e_sge, e_inl),
                "{p:?}: create_qp({wr}, {sge}, {inl})"
            );
            ctx.destroy_qp(h).unwrap();
        }
        ctx.destroy_cq(cq).unwrap();
        close(&dev, ctx, "libmlx5 sizes");
    }
}

#[test]
fn create_qp_rounds_sizes_like_rdma_core_on_every_profile() {
    for p in PROFILES {
        let (dev, mut ctx) = open(p);
        let caps = dev.caps();
        let (cq, _) = ctx.create_cq(15).unwrap();
        let mut made = 0;
        for wr in [1, 3, 20, 64, 100, 40_000] {
            for sge in [0, 1, 2, 7, 50, 51, 52] {
                for inl in [0, 1, 29, 200, 812, 813] {
                    let want = cap(wr, sge, inl);
                    let r = ctx.create_qp(&QpInitAttr {
                        send_cq: cq,
                        recv_cq: cq,
                        srq: None,
                        cap: want,
                        sq_sig_all: false,
                    });
                    let expect = reference(want, caps.max_wqe_sz_sq as usize, caps.log_max_qp_sz);
                    let tag = format!("{p:?} {want:?}");
                    match (r, expect) {
                        (Ok((h, got)), Ok(e)) => {
                            assert_eq!(got, e, "{tag}");
                            let (attr, init) = ctx.query_qp(h).unwrap();
                            assert_eq!((attr.cap, init.cap), (e, e), "{tag}: query");
                            assert_eq!(attr.qp_state, QpState::Reset);
                            let g = ctx.qp(h).unwrap().send_geometry().unwrap();
                            assert_eq!(g.max_send_wr, e.max_send_wr, "{tag}");
                            ctx.destroy_qp(h).unwrap();
                            made += 1;
                        }
                        (Err(a), Err(b)) => assert_eq!(a, b, "{tag}"),
                        (r, e) => panic!("{tag}: got {r:?}, rdma-core says {e:?}"),
                    }
                }
            }
        }
        assert!(made > 60, "{p:?}: the grid mostly fits ({made})");
        assert_eq!(dev.objects().qps, 0);
        ctx.destroy_cq(cq).unwrap();
        close(&dev, ctx, "rounding");
    }
}

#[test]
fn create_qp_refusals_have_their_errno_and_create_nothing() {
    let (dev, mut ctx) = open(Profile::ConnectX6Dx);
    let (cq, _) = ctx.create_cq(15).unwrap();
    let (srq, _) = ctx
        .create_srq(&mlx5_driver::verbs::SrqInitAttr {
            max_wr: 15,
            max_sge: 1,
            srq_limit: 0,
            cq: None,
        })
        .unwrap();
    let (gone, _) = ctx.create_cq(15).unwrap();
    ctx.destroy_cq(gone).unwrap();
    let attr = |c: QpCap, srq| QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        srq,
        cap: c,
        sq_sig_all: false,
    };
    let max_sge = ctx.query_device().max_send_sge;
    let before = count(&dev, Opcode::CREATE_QP);
    let cases: [(QpInitAttr, Errno, &str); 7] = [
        (
            attr(cap(8, max_sge + 1, 0), None),
            Errno::EINVAL,
            "too many SGEs",
        ),
        (
            attr(cap(8, 1, 1000), None),
            Errno::EINVAL,
            "inline beyond a WQE",
        ),
        (
            attr(cap(1 << 20, 1, 0), None),
            Errno::EINVAL,
            "ring beyond log_max_qp_sz",
        ),
        (
            attr(cap(0, 0, 0), None),
            Errno::EINVAL,
            "no send queue, no SRQ",
        ),
        (
            attr(
                QpCap {
                    max_recv_wr: 4,
                    max_recv_sge: 1 + dev.caps().max_wqe_sz_rq as u32 / 16,
                    ..cap(8, 1, 0)
                },
                None,
            ),
            Errno::EINVAL,
            "a receive queue of its own with a WQE above max_wqe_sz_rq",
        ),
        (
            QpInitAttr {
                recv_cq: gone,
                ..attr(cap(8, 1, 0), None)
            },
            Errno::EINVAL,
            "stale CQ",
        ),
        (
            attr(cap(600, 1, 0), None),
            Errno::ENOMEM,
            "more than 256 blocks",
        ),
    ];
    for (a, errno, what) in cases {
        assert_eq!(ctx.create_qp(&a).unwrap_err(), errno, "{what}");
    }
    assert_eq!(
        count(&dev, Opcode::CREATE_QP),
        before,
        "refused before a command"
    );
    // With an SRQ, no send queue is fine, and the receive sizes read 0.
    let (h, got) = ctx
        .create_qp(&attr(
            QpCap {
                max_recv_wr: 100,
                max_recv_sge: 3,
                ..QpCap::default()
            },
            Some(srq),
        ))
        .unwrap();
    assert_eq!(got, QpCap::default());
    ctx.destroy_qp(h).unwrap();
    // Firmware refusing CREATE_QP: its errno, nothing left behind.
    dev.inject()
        .fail_next(Opcode::CREATE_QP.0, CmdStatus::BAD_RES_STATE_ERR.0, 0x1234);
    assert_eq!(
        ctx.create_qp(&attr(cap(8, 1, 0), None)).unwrap_err(),
        Errno::EINVAL
    );
    assert_eq!(dev.objects().qps, 0);
    ctx.destroy_srq(srq).unwrap();
    ctx.destroy_cq(cq).unwrap();
    close(&dev, ctx, "create refusals");
}

#[test]
fn create_qp_beyond_the_tables_is_enomem() {
    let dev = mlx5_tests::device(Profile::ConnectX5, mlx5_sim::ExecMode::Synchronous);
    let mut ctx: mlx5_driver::verbs::Verbs<SimHal, (), 4, 4, 16, 2, 16> =
        mlx5_driver::verbs::Verbs::open(mlx5_tests::bring_up(&dev));
    let (cq, _) = ctx.create_cq(15).unwrap();
    let attr = |c| QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: c,
        sq_sig_all: false,
    };
    assert_eq!(
        ctx.create_qp(&attr(cap(5, 1, 0))).unwrap_err(),
        Errno::ENOMEM
    );
    // Four 256-byte WQEs (libmlx5's RC overhead): the 16 blocks.
    let (a, got) = ctx.create_qp(&attr(cap(4, 1, 0))).unwrap();
    assert_eq!(got.max_send_wr, 4, "exactly the table");
    let (b, _) = ctx.create_qp(&attr(cap(1, 1, 0))).unwrap();
    assert_eq!(
        ctx.create_qp(&attr(cap(1, 1, 0))).unwrap_err(),
        Errno::ENOMEM
    );
    ctx.destroy_qp(a).unwrap();
    ctx.destroy_qp(b).unwrap();
    ctx.destroy_cq(cq).unwrap();
    ctx.close().unwrap();
    mlx5_tests::assert_clean(&dev, "tables");
    // DMA memory running out is ENOMEM too: take all of it but one page.
    let dev = Device::new(SimConfig {
        dma_limit: 8 << 20,
        ..SimConfig::profile(Profile::ConnectX5)
    });
    let mut ctx: Ctx = mlx5_driver::verbs::Verbs::open(mlx5_tests::bring_up(&dev));
    let (cq, _) = ctx.create_cq(15).unwrap();
    let mut hog = Vec::new();
    while let Ok(r) = dev.hal().alloc_dma(4096) {
        hog.push(r);
    }
    hog.pop();
    let before = dev.objects().qps;
    assert_eq!(
        ctx.create_qp(&attr(cap(64, 3, 0))).unwrap_err(),
        Errno::ENOMEM
    );
    assert_eq!(dev.objects().qps, before);
    drop(hog);
    let (h, _) = ctx.create_qp(&attr(cap(64, 3, 0))).unwrap();
    ctx.destroy_qp(h).unwrap();
    ctx.destroy_cq(cq).unwrap();
    close(&dev, ctx, "dma");
}
