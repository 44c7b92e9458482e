//! `modify_qp` of the facade against the model: the IB state table's masks,
//! out-of-range values (each `EINVAL` with nothing changed, most before
//! any command), the optional attributes as firmware holds them and as
//! `query_qp` reads them back.

use mlx5_tests::verbs_common::*;

use mlx5_driver::verbs::{AccessFlags, AhAttr, Errno, Mtu, QpAttr, QpAttrMask, QpState};
use mlx5_regs::Opcode;
use mlx5_sim::{Device, Profile};
use mlx5_tests::PROFILES;

use QpAttrMask as M;

fn count(dev: &Device, op: Opcode) -> usize {
    dev.trace().iter().filter(|t| t.opcode == op.0).count()
}

fn init_attr() -> QpAttr {
    QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        ..QpAttr::default()
    }
}

const INIT: QpAttrMask = QpAttrMask(1 | 1 << 3 | 1 << 4 | 1 << 5);
const RTR: QpAttrMask = QpAttrMask(1 | 1 << 7 | 1 << 8 | 1 << 20 | 1 << 12 | 1 << 17 | 1 << 15);
const RTS: QpAttrMask = QpAttrMask(1 | 1 << 9 | 1 << 10 | 1 << 11 | 1 << 16 | 1 << 13);

fn rtr_attr(ctx: &Ctx, peer: u32) -> QpAttr {
    QpAttr {
        qp_state: QpState::Rtr,
        ah_attr: ctx.loopback_ah().unwrap(),
        path_mtu: Mtu::B1024,
        dest_qp_num: peer,
        rq_psn: 0x111,
        min_rnr_timer: 12,
        max_dest_rd_atomic: 1,
        ..QpAttr::default()
    }
}

fn rts_attr() -> QpAttr {
    QpAttr {
        qp_state: QpState::Rts,
        sq_psn: 0x111,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 1,
        ..QpAttr::default()
    }
}

fn modifies(dev: &Device) -> usize {
    [
        Opcode::RST2INIT_QP,
        Opcode::INIT2INIT_QP,
        Opcode::INIT2RTR_QP,
        Opcode::RTR2RTS_QP,
        Opcode::RTS2RTS_QP,
        Opcode::QP_2ERR,
        Opcode::QP_2RST,
    ]
    .iter()
    .map(|&o| count(dev, o))
    .sum()
}

#[test]
fn modify_qp_masks_follow_the_ib_state_table() {
    let (dev, mut ctx) = open(Profile::ConnectX5);
    let p = Pair::unconnected(&dev, &mut ctx, cap(8, 1, 0));
    let peer = ctx.qp_num(p.b).unwrap();
    let before = modifies(&dev);
    let refused: [(QpAttr, QpAttrMask, &str); 7] = [
        (rtr_attr(&ctx, peer), RTR, "RESET → RTR"),
        (
            init_attr(),
            QpAttrMask(INIT.0 & !M::PORT.0),
            "INIT without PORT",
        ),
        (init_attr(), INIT | M::AV, "INIT with AV"),
        (init_attr(), INIT | M::CUR_STATE, "CUR_STATE from RESET"),
        (
            QpAttr {
                qp_state: QpState::Err,
                ..init_attr()
            },
            M::STATE,
            "RESET → ERR",
        ),
        (init_attr(), INIT | QpAttrMask(1 << 27), "an unknown bit"),
        (init_attr(), M::PORT, "INIT attributes without STATE"),
    ];
    for (a, m, what) in refused {
        assert_eq!(
            ctx.modify_qp(p.a, &a, m).unwrap_err(),
            Errno::EINVAL,
            "{what}"
        );
    }
    assert_eq!(modifies(&dev), before, "refused before any command");
    assert_eq!(ctx.query_qp(p.a).unwrap().0.qp_state, QpState::Reset);
    // RESET → RESET: nothing to do, nothing sent.
    let reset = QpAttr::default();
    ctx.modify_qp(p.a, &reset, M::STATE).unwrap();
    assert_eq!(modifies(&dev), before);
    ctx.modify_qp(p.a, &init_attr(), INIT).unwrap();
    let refused: [(QpAttr, QpAttrMask, &str); 4] = [
        (rts_attr(), RTS, "INIT → RTS"),
        (
            rtr_attr(&ctx, peer),
            QpAttrMask(RTR.0 & !M::MIN_RNR_TIMER.0),
            "RTR without the RNR timer",
        ),
        (
            rtr_attr(&ctx, peer),
            RTR | M::PORT,
            "PORT is not an INIT→RTR option",
        ),
        (
            rtr_attr(&ctx, peer),
            RTR | M::SQ_PSN,
            "SQ_PSN belongs to RTR→RTS",
        ),
    ];
    for (a, m, what) in refused {
        assert_eq!(
            ctx.modify_qp(p.a, &a, m).unwrap_err(),
            Errno::EINVAL,
            "{what}"
        );
    }
    ctx.modify_qp(p.a, &rtr_attr(&ctx, peer), RTR).unwrap();
    // CUR_STATE must name the state the QP is in.
    let wrong_cur = QpAttr {
        cur_qp_state: QpState::Rts,
        ..rts_attr()
    };
    assert_eq!(
        ctx.modify_qp(p.a, &wrong_cur, RTS | M::CUR_STATE)
            .unwrap_err(),
        Errno::EINVAL
    );
    let right_cur = QpAttr {
        cur_qp_state: QpState::Rtr,
        ..rts_attr()
    };
    ctx.modify_qp(p.a, &right_cur, RTS | M::CUR_STATE).unwrap();
    assert_eq!(ctx.query_qp(p.a).unwrap().0.qp_state, QpState::Rts);
    // RTS → SQD exists in the table, not in this driver.
    let sqd = QpAttr {
        qp_state: QpState::Sqd,
        ..rts_attr()
    };
    assert_eq!(
        ctx.modify_qp(p.a, &sqd, M::STATE).unwrap_err(),
        Errno::EOPNOTSUPP
    );
    // Any state → ERR → RESET.
    let err = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    ctx.modify_qp(p.a, &err, M::STATE).unwrap();
    assert_eq!(
        ctx.modify_qp(p.a, &rts_attr(), RTS).unwrap_err(),
        Errno::EINVAL
    );
    ctx.modify_qp(p.a, &reset, M::STATE).unwrap();
    assert_eq!(
        dev.qp_state(ctx.qp_num(p.a).unwrap()),
        Some(mlx5_sim::QpState::Reset)
    );
    p.destroy(&mut ctx);
    close(&dev, ctx, "masks");
}

#[test]
fn modify_qp_out_of_range_values_are_einval_and_change_nothing() {
    let (dev, mut ctx) = open(Profile::ConnectX4Lx);
    let p = Pair::unconnected(&dev, &mut ctx, cap(8, 1, 0));
    let peer = ctx.qp_num(p.b).unwrap();
    let caps = dev.caps();
    ctx.modify_qp(p.a, &init_attr(), INIT).unwrap();
    let before = ctx.query_qp(p.a).unwrap();
    let sent = modifies(&dev);
    let init = init_attr();
    let rtr = rtr_attr(&ctx, peer);
    let bad_init = [
        (
            QpAttr {
                port_num: 0,
                ..init
            },
            M::PORT,
            "port 0",
        ),
        (
            QpAttr {
                port_num: 2,
                ..init
            },
            M::PORT,
            "port 2 of 1",
        ),
        (
            QpAttr {
                qp_access_flags: AccessFlags(1 << 9),
                ..init
            },
            M::ACCESS_FLAGS,
            "an unknown access bit",
        ),
    ];
    for (a, m, what) in bad_init {
        let a = QpAttr {
            qp_state: QpState::Init,
            ..a
        };
        assert_eq!(
            ctx.modify_qp(p.a, &a, M::STATE | m).unwrap_err(),
            Errno::EINVAL,
            "{what}"
        );
    }
    let no_grh = AhAttr {
        is_global: false,
        ..rtr.ah_attr
    };
    let mut global = rtr.ah_attr;
    global.grh.dgid[0] = 0x20;
    let bad_rtr = [
        QpAttr {
            dest_qp_num: 1 << 24,
            ..rtr
        },
        QpAttr {
            rq_psn: 1 << 24,
            ..rtr
        },
        QpAttr {
            min_rnr_timer: 32,
            ..rtr
        },
        QpAttr {
            max_dest_rd_atomic: (1u32 << caps.log_max_ra_res_qp) as u8 + 1,
            ..rtr
        },
        QpAttr {
            ah_attr: no_grh,
            ..rtr
        },
        QpAttr {
            ah_attr: global,
            ..rtr
        },
        QpAttr {
            ah_attr: AhAttr {
                port_num: 3,
                ..rtr.ah_attr
            },
            ..rtr
        },
    ];
    for (i, a) in bad_rtr.iter().enumerate() {
        assert_eq!(
            ctx.modify_qp(p.a, a, RTR).unwrap_err(),
            Errno::EINVAL,
            "RTR case {i}"
        );
    }
    assert_eq!(modifies(&dev), sent, "refused before any command");
    // A partition key index beyond the table is firmware's check (the
    // command goes); an unprogrammed source GID is refused by the facade
    // before it. The QP stays either way.
    let pkey = QpAttr {
        pkey_index: 128,
        ..rtr
    };
    assert_eq!(
        ctx.modify_qp(p.a, &pkey, RTR | M::PKEY_INDEX).unwrap_err(),
        Errno::EINVAL
    );
    let mut sgid = rtr;
    sgid.ah_attr.grh.sgid_index = 7;
    assert_eq!(ctx.modify_qp(p.a, &sgid, RTR).unwrap_err(), Errno::EINVAL);
    assert_eq!(ctx.query_qp(p.a).unwrap(), before, "nothing changed");
    ctx.modify_qp(p.a, &rtr, RTR).unwrap();
    let rts = rts_attr();
    let bad_rts = [
        QpAttr { timeout: 32, ..rts },
        QpAttr {
            retry_cnt: 8,
            ..rts
        },
        QpAttr {
            rnr_retry: 8,
            ..rts
        },
        QpAttr {
            sq_psn: 1 << 24,
            ..rts
        },
        QpAttr {
            max_rd_atomic: (1u32 << caps.log_max_ra_req_qp) as u8 + 1,
            ..rts
        },
    ];
    let before = ctx.query_qp(p.a).unwrap();
    for (i, a) in bad_rts.iter().enumerate() {
        assert_eq!(
            ctx.modify_qp(p.a, a, RTS).unwrap_err(),
            Errno::EINVAL,
            "RTS case {i}"
        );
    }
    assert_eq!(ctx.query_qp(p.a).unwrap(), before);
    ctx.modify_qp(p.a, &rts, RTS).unwrap();
    p.destroy(&mut ctx);
    close(&dev, ctx, "values");
}

#[test]
fn modify_qp_optional_attributes_reach_firmware_and_query_reads_them_back() {
    for p in PROFILES {
        let (dev, mut ctx) = open(p);
        let pair = Pair::unconnected(&dev, &mut ctx, cap(8, 1, 0));
        let (a, peer) = (pair.a, ctx.qp_num(pair.b).unwrap());
        ctx.modify_qp(a, &init_attr(), INIT).unwrap();
        let (q, _) = ctx.query_qp(a).unwrap();
        assert_eq!(
            (q.qp_state, q.port_num, q.qp_access_flags),
            (QpState::Init, 1, AccessFlags::REMOTE_WRITE),
            "{p:?}: no responder resources yet, so no remote read (Linux)"
        );
        // INIT → INIT: the partition key index.
        let ii = QpAttr {
            qp_state: QpState::Init,
            pkey_index: 3,
            ..QpAttr::default()
        };
        ctx.modify_qp(a, &ii, M::STATE | M::PKEY_INDEX).unwrap();
        assert_eq!(ctx.query_qp(a).unwrap().0.pkey_index, 3);
        ctx.modify_qp(a, &rtr_attr(&ctx, peer), RTR).unwrap();
        let (q, _) = ctx.query_qp(a).unwrap();
        assert_eq!(q.qp_state, QpState::Rtr);
        assert_eq!(
            q.qp_access_flags,
            AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
            "{p:?}: the read right arrives with the responder depth"
        );
        assert_eq!(
            (
                q.dest_qp_num,
                q.rq_psn,
                q.min_rnr_timer,
                q.max_dest_rd_atomic,
                q.path_mtu
            ),
            (peer, 0x111, 12, 1, Mtu::B1024)
        );
        assert_eq!(
            q.ah_attr.force_loopback,
            ctx.loopback_ah().unwrap().force_loopback
        );
        if !q.ah_attr.force_loopback {
            let ah = ctx.loopback_ah().unwrap();
            assert_eq!(
                (q.ah_attr.grh.dgid, q.ah_attr.grh.sgid_index),
                (ah.grh.dgid, ah.grh.sgid_index)
            );
        }
        // RTR → RTS with the optional RNR timer and new rights.
        let rts = QpAttr {
            min_rnr_timer: 20,
            qp_access_flags: AccessFlags::REMOTE_READ,
            ..rts_attr()
        };
        ctx.modify_qp(a, &rts, RTS | M::MIN_RNR_TIMER | M::ACCESS_FLAGS)
            .unwrap();
        let (q, _) = ctx.query_qp(a).unwrap();
        assert_eq!(
            (
                q.qp_state,
                q.min_rnr_timer,
                q.qp_access_flags,
                q.sq_psn,
                q.timeout
            ),
            (QpState::Rts, 20, AccessFlags::REMOTE_READ, 0x111, 14)
        );
        assert_eq!((q.retry_cnt, q.rnr_retry, q.max_rd_atomic), (7, 7, 1));
        // RTS → RTS, without STATE in the mask.
        let rr = QpAttr {
            qp_access_flags: AccessFlags::REMOTE_WRITE,
            min_rnr_timer: 3,
            ..QpAttr::default()
        };
        ctx.modify_qp(a, &rr, M::ACCESS_FLAGS | M::MIN_RNR_TIMER)
            .unwrap();
        let (q, _) = ctx.query_qp(a).unwrap();
        assert_eq!(
            (q.qp_access_flags, q.min_rnr_timer),
            (AccessFlags::REMOTE_WRITE, 3)
        );
        assert_eq!(count(&dev, Opcode::RTS2RTS_QP), 1);
        assert_eq!(count(&dev, Opcode::INIT2INIT_QP), 1);
        pair.destroy(&mut ctx);
        close(&dev, ctx, "optional");
    }
}
