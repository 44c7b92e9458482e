//! CREATE/QUERY/DESTROY_QP, every QP transition legal and illegal, the
//! transition checks, and objects a QP references.

use crate::common::qp::*;
use crate::common::*;

use mlx5_hal::Hal;
use mlx5_regs::consts::OptParam;
use mlx5_regs::layouts::*;
use mlx5_regs::{CmdStatus, EventMask, Opcode};
use mlx5_sim::syndrome as sy;
use mlx5_sim::{Profile, QpState};

struct Env {
    f: Fw,
    eq: TEq,
    cq: TCq,
    rmp: TRmp,
    ring: Region,
    dbr: Region,
}

fn env(profile: Profile) -> Env {
    let mut f = up_profile(profile, false);
    let eq = f.create_eq(7, EventMask::LINUX_ASYNC.bits());
    let cq = f.create_cq(6, eq.eqn);
    let key = dma_key(&mut f);
    let rmp = TRmp::new(&mut f, key, 0);
    let ring = f.hal.alloc_dma(4 * 4096).unwrap();
    let dbr = f.hal.alloc_dma(4096).unwrap();
    Env {
        f,
        eq,
        cq,
        rmp,
        ring,
        dbr,
    }
}

impl Env {
    /// Both queues: a 16-WQEBB ring and the RMP.
    fn cmd(&self) -> Vec<u8> {
        qp_cmd(
            &self.f,
            Some((4, &self.ring)),
            Some(self.rmp.n),
            self.cq.cqn,
            self.cq.cqn,
            &self.dbr,
        )
    }
}

const OL: usize = create_qp_out::SIZE;

/// An edit of a QPC in a test table.
type Edit = fn(&mut [u8]);

#[test]
fn create_query_destroy_and_shapes() {
    let mut e = env(Profile::ConnectX5);
    let o = e.f.ok(&e.cmd(), OL);
    let qpn = create_qp_out::qpn.get(&o);
    assert!(qpn > 1, "never QP 0 or 1");
    assert_eq!(e.f.dev.qp_state(qpn), Some(QpState::Reset));
    // Sender shape and receiver shape.
    let s = create_qp(&mut e.f, Some(2), None, e.cq.cqn, 0);
    let r = create_qp(&mut e.f, None, Some(e.rmp.n), 0, e.cq.cqn);
    assert_eq!(e.f.dev.objects().qps, 3);
    assert_eq!(e.f.dev.qpns(), vec![qpn, s.qpn, r.qpn]);
    // QUERY_QP returns the context, the counters and the page list.
    e.dbr.write_be32(4, 5);
    let q = e.f.ok(&qpn_cmd(Opcode::QUERY_QP, qpn), query_qp_out::SIZE);
    let c = query_qp_out::qpc.get(&q);
    assert_eq!(qpc::state.get(c), 0);
    assert_eq!(qpc::log_sq_size.get(c), 4);
    assert_eq!(qpc::srqn_rmpn_xrqn.get(c), e.rmp.n);
    assert_eq!(qpc::cqn_rcv.get(c), e.cq.cqn);
    assert_eq!(qpc::sw_sq_wqebb_counter.get(c), 5);
    assert_eq!(qpc::hw_sq_wqebb_counter.get(c), 0);
    assert_eq!(qpc::user_index.get(c), 0xff_ffff);
    assert_eq!(&q[0x110..0x118], &e.ring.iova().to_be_bytes());
    for n in [qpn, s.qpn, r.qpn] {
        e.f.ok(&qpn_cmd(Opcode::DESTROY_QP, n), 16);
    }
    e.f.refused(
        &qpn_cmd(Opcode::DESTROY_QP, qpn),
        16,
        CmdStatus::BAD_RES_ERR,
        sy::QP_NOT_FOUND,
    );
    assert_eq!(e.f.dev.objects().qps, 0);
}

#[test]
fn create_qp_with_an_own_receive_ring_checks_it_against_the_caps() {
    let mut e = env(Profile::ConnectX5);
    // The RMP's command, made into an own ring of 8 64-byte WQEs (512
    // bytes) before the 16-WQEBB send ring: one 4 KiB page holds both.
    let base = e.cmd();
    let own = |log_size: u8, log_stride: u8| {
        let mut i = base.clone();
        let c = create_qp_in::qpc.get_mut(&mut i);
        qpc::rq_type.set(c, 0).unwrap();
        qpc::srqn_rmpn_xrqn.set(c, 0).unwrap();
        qpc::log_rq_size.set(c, log_size).unwrap();
        qpc::log_rq_stride.set(c, log_stride).unwrap();
        i
    };
    let o = e.f.ok(&own(3, 2), OL);
    let qpn = create_qp_out::qpn.get(&o);
    e.dbr.write_be32(0, 3);
    let q = e.f.ok(&qpn_cmd(Opcode::QUERY_QP, qpn), query_qp_out::SIZE);
    let c = query_qp_out::qpc.get(&q);
    assert_eq!(
        (
            qpc::rq_type.get(c),
            qpc::log_rq_size.get(c),
            qpc::log_rq_stride.get(c)
        ),
        (0, 3, 2)
    );
    assert_eq!(
        (qpc::sw_rq_counter.get(c), qpc::hw_rq_counter.get(c)),
        (3, 0)
    );
    assert_eq!(&q[0x110..0x118], &e.ring.iova().to_be_bytes());
    e.f.ok(&qpn_cmd(Opcode::DESTROY_QP, qpn), 16);
    // A WQE above max_wqe_sz_rq (512 on this profile): 1 KiB.
    e.f.refused(&own(3, 6), OL, CmdStatus::BAD_PARAM_ERR, sy::QP_RQ_STRIDE);
    e.f.ok(&own(0, 5), OL);
    // More WQEs than 2^log_max_qp_sz.
    e.f.dev.caps_mut(|c| c.log_max_qp_sz = 4);
    e.f.refused(&own(5, 0), OL, CmdStatus::BAD_PARAM_ERR, sy::QP_RQ_SIZE);
    e.f.dev.caps_mut(|c| c.log_max_qp_sz = 15);
    // The page list must cover the receive ring and the send ring: 4 KiB
    // of WQEs before 1 KiB of send ring need two pages, one is given.
    e.f.refused(&own(8, 0), OL, CmdStatus::BAD_INP_LEN_ERR, sy::QP_PAS_SHORT);
    // A receive ring needs a receive CQ.
    let mut i = own(3, 2);
    qpc::cqn_rcv
        .set(create_qp_in::qpc.get_mut(&mut i), 0)
        .unwrap();
    e.f.refused(&i, OL, CmdStatus::BAD_RES_ERR, sy::QP_CQN_RCV);
    // rq_type 2 (cyclic) is not offered.
    let mut i = own(3, 2);
    qpc::rq_type
        .set(create_qp_in::qpc.get_mut(&mut i), 2)
        .unwrap();
    e.f.refused(&i, OL, CmdStatus::BAD_PARAM_ERR, sy::QP_RQ_TYPE);
}

#[test]
fn create_qp_refusals() {
    let mut e = env(Profile::ConnectX5);
    let good = e.cmd();
    macro_rules! bad {
        ($f:ident = $v:expr, $st:ident, $syn:ident) => {{
            let mut i = good.clone();
            qpc::$f.set(create_qp_in::qpc.get_mut(&mut i), $v).unwrap();
            e.f.refused(&i, OL, CmdStatus::$st, sy::$syn);
        }};
    }
    // UC (1) is not served (RC and UD are).
    bad!(st = 1, BAD_PARAM_ERR, QP_ST);
    bad!(st = 3, BAD_PARAM_ERR, QP_ST);
    bad!(pd = 0x9999, BAD_RES_ERR, QP_PD);
    bad!(state = 1, BAD_PARAM_ERR, QP_CTX_FIELD);
    bad!(hw_sq_wqebb_counter = 1, BAD_PARAM_ERR, QP_CTX_FIELD);
    bad!(wq_signature = true, BAD_PARAM_ERR, QP_UNSUPPORTED);
    bad!(offload_type = 1, BAD_PARAM_ERR, QP_UNSUPPORTED);
    bad!(pm_state = 0, BAD_PARAM_ERR, QP_PM_STATE);
    bad!(uar_page = 3, BAD_RES_ERR, QP_UAR);
    bad!(counter_set_id = 1, BAD_RES_ERR, QP_COUNTER_SET);
    // A regular RQ may not name an SRQ.
    bad!(rq_type = 0, BAD_PARAM_ERR, QP_RQ_FIELDS);
    bad!(rq_type = 2, BAD_PARAM_ERR, QP_RQ_TYPE);
    bad!(log_rq_size = 3, BAD_PARAM_ERR, QP_RQ_FIELDS);
    bad!(log_rq_stride = 1, BAD_PARAM_ERR, QP_RQ_FIELDS);
    bad!(cqn_snd = 0, BAD_RES_ERR, QP_CQN_SND);
    bad!(cqn_snd = 0x7777, BAD_RES_ERR, QP_CQN_SND);
    bad!(cqn_rcv = 0, BAD_RES_ERR, QP_CQN_RCV);
    bad!(srqn_rmpn_xrqn = 0x7777, BAD_RES_ERR, QP_SRQN);
    bad!(xrcd = 0x5555, BAD_RES_ERR, QP_XRCD);
    bad!(ts_format = 2, BAD_PARAM_ERR, QP_TS_FORMAT); // CX5: free-running only
    bad!(dbr_addr = e.dbr.iova() + 4, BAD_PARAM_ERR, QP_DBR_ALIGN);
    bad!(log_page_size = 17, BAD_PARAM_ERR, QP_PAGE_SIZE);
    bad!(log_sq_size = 7, BAD_INP_LEN_ERR, QP_PAS_SHORT);
    e.f.dev.caps_mut(|c| c.log_max_qp_sz = 4);
    bad!(log_sq_size = 5, BAD_PARAM_ERR, QP_SQ_SIZE);
    e.f.dev.caps_mut(|c| c.log_max_qp_sz = 15);
    // no_sq with a ring size; zero-length RQ with an SRQ number; neither queue.
    let mut i = good.clone();
    let c = create_qp_in::qpc.get_mut(&mut i);
    qpc::no_sq.set(c, true).unwrap();
    e.f.refused(&i, OL, CmdStatus::BAD_PARAM_ERR, sy::QP_SQ_FIELDS);
    let mut i = good.clone();
    qpc::rq_type
        .set(create_qp_in::qpc.get_mut(&mut i), 3)
        .unwrap();
    e.f.refused(&i, OL, CmdStatus::BAD_PARAM_ERR, sy::QP_RQ_FIELDS);
    let mut i = good.clone();
    let c = create_qp_in::qpc.get_mut(&mut i);
    qpc::no_sq.set(c, true).unwrap();
    qpc::log_sq_size.set(c, 0).unwrap();
    qpc::rq_type.set(c, 3).unwrap();
    qpc::srqn_rmpn_xrqn.set(c, 0).unwrap();
    e.f.refused(&i, OL, CmdStatus::BAD_PARAM_ERR, sy::QP_RQ_TYPE);
    // Header fields.
    let mut i = good.clone();
    create_qp_in::input_qpn.set(&mut i, 77).unwrap();
    e.f.refused(&i, OL, CmdStatus::BAD_PARAM_ERR, sy::QP_UNSUPPORTED);
    let mut i = good.clone();
    create_qp_in::opt_param_mask.set(&mut i, 2).unwrap();
    e.f.refused(&i, OL, CmdStatus::BAD_PARAM_ERR, sy::QP_UNSUPPORTED);
    let mut i = good.clone();
    create_qp_in::pas
        .set(&mut i, 0, e.ring.iova() + 64)
        .unwrap();
    e.f.refused(&i, OL, CmdStatus::BAD_PARAM_ERR, sy::QP_PAS_ALIGN);
    // A user index with cqe_version 0; the QP limit.
    e.f.dev.caps_mut(|c| c.cqe_version = 0);
    let mut i = good.clone();
    qpc::user_index
        .set(create_qp_in::qpc.get_mut(&mut i), 1)
        .unwrap();
    e.f.refused(&i, OL, CmdStatus::BAD_PARAM_ERR, sy::QP_USER_INDEX);
    e.f.dev.caps_mut(|c| c.cqe_version = 1);
    assert_eq!(e.f.dev.objects().qps, 0, "no refusal left a QP");
    e.f.ok(&good, OL);
}

#[test]
fn qp_count_limit_uses_the_current_log_max_qp() {
    let mut f = Fw::default();
    f.enable();
    let boot = f.query_pages(1);
    assert!(f.give_pages(boot as usize).ok());
    assert!(f
        .set_cap(|c| {
            cmd_hca_cap::log_max_qp.set(c, 1).unwrap();
        })
        .ok());
    let init = f.query_pages(2);
    assert!(f.give_pages(init as usize).ok());
    f.ok(&inp(Opcode::INIT_HCA, init_hca_in::SIZE), 16);
    f.uar = f.alloc_uar();
    f.pd = f.alloc_pd();
    let eq = f.create_eq(6, 0);
    let cq = f.create_cq(6, eq.eqn);
    for _ in 0..2 {
        create_qp(&mut f, Some(2), None, cq.cqn, 0);
    }
    let ring = f.hal.alloc_dma(4096).unwrap();
    let i = qp_cmd(&f, Some((2, &ring)), None, cq.cqn, 0, &ring);
    f.refused(&i, OL, CmdStatus::LIM_ERR, sy::QP_TOO_MANY);
    f.keep.push(ring);
}

/// Drive a fresh QP to `s` (RST, INIT, RTR, RTS or ERR).
fn qp_in(e: &mut Env, s: QpState) -> u32 {
    // Keep the async EQ drained (every SRQ-attached QP entering ERR raises
    // the last-WQE event).
    e.f.drain_eq(&mut e.eq);
    let q = create_qp(&mut e.f, Some(2), Some(e.rmp.n), e.cq.cqn, e.cq.cqn);
    let n = q.qpn;
    e.f.keep.extend(q.ring);
    e.f.keep.push(q.dbr);
    let steps: &[QpState] = match s {
        QpState::Reset => &[],
        QpState::Init => &[QpState::Init],
        QpState::Rtr => &[QpState::Init, QpState::Rtr],
        QpState::Rts => &[QpState::Init, QpState::Rtr, QpState::Rts],
        _ => &[QpState::Err],
    };
    for st in steps {
        let c = match st {
            QpState::Init => rst2init(n),
            QpState::Rtr => init2rtr(&e.f, Mode::Fl, n, n, 0),
            QpState::Rts => rtr2rts(n, 0, 7),
            _ => qpn_cmd(Opcode::QP_2ERR, n),
        };
        e.f.ok(&c, 16);
    }
    assert_eq!(e.f.dev.qp_state(n), Some(s));
    n
}

#[test]
fn every_transition_legal_and_illegal() {
    let mut e = env(Profile::ConnectX5);
    let states = [
        QpState::Reset,
        QpState::Init,
        QpState::Rtr,
        QpState::Rts,
        QpState::Err,
    ];
    let ops = [
        (Opcode::RST2INIT_QP, QpState::Reset, QpState::Init),
        (Opcode::INIT2INIT_QP, QpState::Init, QpState::Init),
        (Opcode::INIT2RTR_QP, QpState::Init, QpState::Rtr),
        (Opcode::RTR2RTS_QP, QpState::Rtr, QpState::Rts),
        (Opcode::RTS2RTS_QP, QpState::Rts, QpState::Rts),
        (Opcode::SQERR2RTS_QP, QpState::Sqer, QpState::Rts),
    ];
    let mut legal = 0;
    for &s in &states {
        for &(op, from, to) in &ops {
            let n = qp_in(&mut e, s);
            let c = match op {
                Opcode::RST2INIT_QP => rst2init(n),
                Opcode::INIT2RTR_QP => init2rtr(&e.f, Mode::Fl, n, n, 0),
                Opcode::RTR2RTS_QP => rtr2rts(n, 0, 7),
                _ => modify_cmd(op, n, OptParam::empty(), |_| {}),
            };
            if s == from {
                e.f.ok(&c, 16);
                assert_eq!(e.f.dev.qp_state(n), Some(to), "{op:?} from {s:?}");
                legal += 1;
            } else {
                e.f.refused(&c, 16, CmdStatus::BAD_QP_STATE_ERR, sy::QP_BAD_STATE);
                assert_eq!(e.f.dev.qp_state(n), Some(s), "unchanged");
            }
            e.f.ok(&qpn_cmd(Opcode::DESTROY_QP, n), 16);
        }
        // 2ERR and 2RST from every state; DESTROY from every state.
        for (op, to) in [
            (Opcode::QP_2ERR, QpState::Err),
            (Opcode::QP_2RST, QpState::Reset),
        ] {
            let n = qp_in(&mut e, s);
            e.f.ok(&qpn_cmd(op, n), 16);
            assert_eq!(e.f.dev.qp_state(n), Some(to));
            e.f.ok(&qpn_cmd(Opcode::DESTROY_QP, n), 16);
        }
    }
    assert_eq!(legal, 5, "SQER is never entered by an RC QP here");
    e.f.refused(
        &rst2init(0x4444),
        16,
        CmdStatus::BAD_RES_ERR,
        sy::QP_NOT_FOUND,
    );
    for op in [Opcode::QP_2ERR, Opcode::QP_2RST, Opcode::QUERY_QP] {
        let ol = if op == Opcode::QUERY_QP {
            query_qp_out::SIZE
        } else {
            16
        };
        e.f.refused(
            &qpn_cmd(op, 0x4444),
            ol,
            CmdStatus::BAD_RES_ERR,
            sy::QP_NOT_FOUND,
        );
    }
}

#[test]
fn transition_field_checks() {
    let mut e = env(Profile::ConnectX5);
    // RST2INIT: port, pkey index, counter set, optional params.
    let n = qp_in(&mut e, QpState::Reset);
    let r2i = |edit: &dyn Fn(&mut [u8]), opt: OptParam| {
        modify_cmd(Opcode::RST2INIT_QP, n, opt, |c| {
            ads::vhca_port_num
                .set(qpc::primary_address_path.get_mut(c), 1)
                .unwrap();
            edit(c)
        })
    };
    let cases: [(Edit, u32); 3] = [
        (
            |c| {
                ads::vhca_port_num
                    .set(qpc::primary_address_path.get_mut(c), 2)
                    .unwrap()
            },
            sy::QP_PORT,
        ),
        (
            |c| {
                ads::pkey_index
                    .set(qpc::primary_address_path.get_mut(c), 128)
                    .unwrap()
            },
            sy::QP_PKEY_INDEX,
        ),
        (
            |c| qpc::counter_set_id.set(c, 3).unwrap(),
            sy::QP_COUNTER_SET,
        ),
    ];
    for (edit, syn) in cases {
        let st = if syn == sy::QP_COUNTER_SET {
            CmdStatus::BAD_RES_ERR
        } else {
            CmdStatus::BAD_PARAM_ERR
        };
        e.f.refused(&r2i(&edit, OptParam::empty()), 16, st, syn);
    }
    e.f.refused(
        &r2i(&|_| {}, OptParam::RWE),
        16,
        CmdStatus::BAD_PARAM_ERR,
        sy::QP_OPT_PARAM,
    );
    e.f.ok(&r2i(&|_| {}, OptParam::empty()), 16);
    // INIT2INIT with allowed optional parameters; unknown bits refused.
    let c = modify_cmd(
        Opcode::INIT2INIT_QP,
        n,
        OptParam::RWE | OptParam::PKEY_INDEX,
        |c| {
            qpc::rwe.set(c, true).unwrap();
        },
    );
    e.f.ok(&c, 16);
    let mut c = modify_cmd(Opcode::INIT2INIT_QP, n, OptParam::empty(), |_| {});
    rst2init_qp_in::opt_param_mask.set(&mut c, 1 << 30).unwrap();
    e.f.refused(&c, 16, CmdStatus::BAD_PARAM_ERR, sy::QP_OPT_PARAM);
    // INIT2RTR checks.
    let i2r = |f: &Fw, edit: &dyn Fn(&mut [u8])| {
        let mut c = init2rtr(f, Mode::Fl, n, n, 0);
        edit(rst2init_qp_in::qpc.get_mut(&mut c));
        c
    };
    let cases: [(Edit, u32); 7] = [
        (|c| qpc::mtu.set(c, 0).unwrap(), sy::QP_MTU),
        (|c| qpc::mtu.set(c, 4).unwrap(), sy::QP_MTU), // 2048 > a 1500-byte vport
        (|c| qpc::log_msg_max.set(c, 31).unwrap(), sy::QP_MSG_MAX),
        (|c| qpc::remote_qpn.set(c, 0).unwrap(), sy::QP_REMOTE_QPN),
        (|c| qpc::log_rra_max.set(c, 5).unwrap(), sy::QP_RRA_MAX),
        (
            |c| {
                ads::vhca_port_num
                    .set(qpc::primary_address_path.get_mut(c), 0)
                    .unwrap()
            },
            sy::QP_PORT,
        ),
        (
            |c| {
                ads::fl
                    .set(qpc::primary_address_path.get_mut(c), false)
                    .unwrap()
            },
            sy::QP_ROCE_DISABLED,
        ),
    ];
    for (edit, syn) in cases {
        let c = i2r(&e.f, &edit);
        e.f.refused(&c, 16, CmdStatus::BAD_PARAM_ERR, syn);
    }
    let mut c = i2r(&e.f, &|c| {
        ads::pkey_index
            .set(qpc::primary_address_path.get_mut(c), 999)
            .unwrap()
    });
    rst2init_qp_in::opt_param_mask
        .set(&mut c, OptParam::PKEY_INDEX.bits())
        .unwrap();
    e.f.refused(&c, 16, CmdStatus::BAD_PARAM_ERR, sy::QP_PKEY_INDEX);
    let mut c = i2r(&e.f, &|_| {});
    rst2init_qp_in::opt_param_mask
        .set(&mut c, OptParam::RNR_TIMEOUT.bits())
        .unwrap();
    e.f.refused(&c, 16, CmdStatus::BAD_PARAM_ERR, sy::QP_OPT_PARAM);
    // The typical Linux INIT2RTR mask (RRE|RAE|RWE) is accepted and applies
    // the access flags the QPC carries.
    let mut c = i2r(&e.f, &|c| {
        qpc::rre.set(c, true).unwrap();
        qpc::rwe.set(c, true).unwrap();
    });
    rst2init_qp_in::opt_param_mask.set(&mut c, 0x0e).unwrap();
    e.f.ok(&c, 16);
    // RTR2RTS: initiator depth, PM state.
    let mut c = rtr2rts(n, 0, 7);
    qpc::log_sra_max
        .set(rst2init_qp_in::qpc.get_mut(&mut c), 5)
        .unwrap();
    e.f.refused(&c, 16, CmdStatus::BAD_PARAM_ERR, sy::QP_SRA_MAX);
    let mut c = rtr2rts(n, 0, 7);
    rst2init_qp_in::opt_param_mask
        .set(&mut c, OptParam::PM_STATE.bits())
        .unwrap();
    e.f.refused(&c, 16, CmdStatus::BAD_PARAM_ERR, sy::QP_PM_STATE);
    let mut c = rtr2rts(n, 0, 7);
    rst2init_qp_in::opt_param_mask
        .set(&mut c, OptParam::PKEY_INDEX.bits())
        .unwrap();
    e.f.refused(&c, 16, CmdStatus::BAD_PARAM_ERR, sy::QP_OPT_PARAM);
    e.f.ok(&rtr2rts(n, 0, 7), 16);
    let q = e.f.ok(&qpn_cmd(Opcode::QUERY_QP, n), query_qp_out::SIZE);
    let c = query_qp_out::qpc.get(&q);
    assert_eq!(
        (qpc::state.get(c), qpc::mtu.get(c), qpc::rnr_retry.get(c)),
        (3, 3, 7)
    );
    assert!(qpc::rwe.get(c) && qpc::rre.get(c));
    assert!(ads::fl.get(qpc::primary_address_path.get(c)));
}

#[test]
fn loopback_address_checks_per_mode() {
    // ConnectX-4 Lx: no force loopback at all; RoCE needs roce_en, a
    // programmed GID index and the own MAC.
    let mut e = env(Profile::ConnectX4Lx);
    let n = qp_in(&mut e, QpState::Init);
    let c = init2rtr(&e.f, Mode::Fl, n, n, 0);
    e.f.refused(&c, 16, CmdStatus::BAD_PARAM_ERR, sy::QP_FL_NOT_ALLOWED);
    let c = init2rtr(&e.f, Mode::Roce, n, n, 0);
    e.f.refused(&c, 16, CmdStatus::BAD_PARAM_ERR, sy::QP_ROCE_DISABLED);
    assert!(set_roce_en(&mut e.f, true).ok());
    e.f.refused(&c, 16, CmdStatus::BAD_PARAM_ERR, sy::QP_GID_INDEX);
    let mac = e.f.dev.port_mac();
    assert!(set_gid(&mut e.f, 0, gid_of(mac), mac, 2).ok());
    let mut bad = c.clone();
    ads::rmac_31_0
        .set(
            qpc::primary_address_path.get_mut(rst2init_qp_in::qpc.get_mut(&mut bad)),
            1,
        )
        .unwrap();
    e.f.refused(&bad, 16, CmdStatus::BAD_PARAM_ERR, sy::QP_RMAC);
    e.f.ok(&c, 16);
    // ConnectX-5: FL only while RoCE is disabled.
    let mut e = env(Profile::ConnectX5);
    let n = qp_in(&mut e, QpState::Init);
    assert!(set_roce_en(&mut e.f, true).ok());
    let c = init2rtr(&e.f, Mode::Fl, n, n, 0);
    e.f.refused(&c, 16, CmdStatus::BAD_PARAM_ERR, sy::QP_FL_NOT_ALLOWED);
    assert!(set_roce_en(&mut e.f, false).ok());
    e.f.ok(&c, 16);
    // ConnectX-6 Dx: FL only while RoCE is enabled.
    let mut e = env(Profile::ConnectX6Dx);
    let n = qp_in(&mut e, QpState::Init);
    let c = init2rtr(&e.f, Mode::Fl, n, n, 0);
    e.f.refused(&c, 16, CmdStatus::BAD_PARAM_ERR, sy::QP_FL_NOT_ALLOWED);
    assert!(set_roce_en(&mut e.f, true).ok());
    e.f.ok(&c, 16);
    // IB port: by the own LID only.
    let mut f = Fw::new(mlx5_sim::SimConfig::profile(Profile::ConnectX5));
    f.dev.caps_mut(|c| c.port_type = 0);
    f.init(1);
    f.uar = f.alloc_uar();
    f.pd = f.alloc_pd();
    let eq = f.create_eq(7, EventMask::LINUX_ASYNC.bits());
    let cq = f.create_cq(6, eq.eqn);
    let q = create_qp(&mut f, Some(2), None, cq.cqn, 0);
    f.ok(&rst2init(q.qpn), 16);
    let mut c = init2rtr(&f, Mode::Ib, q.qpn, q.qpn, 0);
    let lid = f.dev.port_lid();
    let a = qpc::primary_address_path.get_mut(rst2init_qp_in::qpc.get_mut(&mut c));
    ads::rlid.set(a, lid + 1).unwrap();
    f.refused(&c, 16, CmdStatus::BAD_PARAM_ERR, sy::QP_RLID);
    let c = init2rtr(&f, Mode::Fl, q.qpn, q.qpn, 0);
    f.refused(&c, 16, CmdStatus::BAD_PARAM_ERR, sy::QP_FL_NOT_ALLOWED);
    let c = init2rtr(&f, Mode::Ib, q.qpn, q.qpn, 0);
    f.ok(&c, 16);
}

#[test]
fn referenced_objects_cannot_be_destroyed() {
    let mut e = env(Profile::ConnectX5);
    let x = e.f.ok(&inp(Opcode::ALLOC_XRCD, 16), 16);
    let xrcd = alloc_xrcd_out::xrcd.get(&x);
    let uar = e.f.alloc_uar();
    let mut i = e.cmd();
    qpc::xrcd
        .set(create_qp_in::qpc.get_mut(&mut i), xrcd)
        .unwrap();
    qpc::uar_page
        .set(create_qp_in::qpc.get_mut(&mut i), uar)
        .unwrap();
    let qpn = create_qp_out::qpn.get(&e.f.ok(&i, OL));
    let busy = |f: &mut Fw, op: Opcode, set: &dyn Fn(&mut [u8]), syn: u32| {
        let mut d = inp(op, 16);
        set(&mut d);
        f.refused(&d, 16, CmdStatus::RES_BUSY, syn);
    };
    let (cqn, rmpn, pd) = (e.cq.cqn, e.rmp.n, e.f.pd);
    busy(
        &mut e.f,
        Opcode::DESTROY_CQ,
        &|d| destroy_cq_in::cqn.set(d, cqn).unwrap(),
        sy::CQ_USED_BY_QP,
    );
    busy(
        &mut e.f,
        Opcode::DESTROY_RMP,
        &|d| destroy_rmp_in::rmpn.set(d, rmpn).unwrap(),
        sy::SRQ_USED_BY_QP,
    );
    busy(
        &mut e.f,
        Opcode::DEALLOC_PD,
        &|d| dealloc_pd_in::pd.set(d, pd).unwrap(),
        sy::PD_USED_BY_QP,
    );
    busy(
        &mut e.f,
        Opcode::DEALLOC_XRCD,
        &|d| dealloc_xrcd_in::xrcd.set(d, xrcd).unwrap(),
        sy::XRCD_IN_USE,
    );
    busy(
        &mut e.f,
        Opcode::DEALLOC_UAR,
        &|d| dealloc_uar_in::uar.set(d, uar).unwrap(),
        sy::UAR_USED_BY_QP,
    );
    e.f.ok(&qpn_cmd(Opcode::DESTROY_QP, qpn), 16);
    let mut d = inp(Opcode::DEALLOC_XRCD, 16);
    dealloc_xrcd_in::xrcd.set(&mut d, xrcd).unwrap();
    e.f.ok(&d, 16);
    let mut d = inp(Opcode::DESTROY_RMP, 16);
    destroy_rmp_in::rmpn.set(&mut d, rmpn).unwrap();
    e.f.ok(&d, 16);
    // The PD still carries the DMA key.
    busy(
        &mut e.f,
        Opcode::DEALLOC_PD,
        &|d| dealloc_pd_in::pd.set(d, pd).unwrap(),
        sy::PD_USED_BY_MKEY,
    );
}

#[test]
fn teardown_counts_qps_keys_domains_and_gids_as_leaked() {
    let mut e = env(Profile::ConnectX4Lx);
    e.f.ok(&inp(Opcode::ALLOC_XRCD, 16), 16);
    create_qp(&mut e.f, Some(2), None, e.cq.cqn, 0);
    assert!(set_roce_en(&mut e.f, true).ok());
    let mac = e.f.dev.port_mac();
    assert!(set_gid(&mut e.f, 3, gid_of(mac), mac, 0).ok());
    let before = e.f.dev.objects();
    assert_eq!(
        (before.qps, before.mkeys, before.xrcds, before.gids),
        (1, 1, 1, 1)
    );
    e.f.ok(&inp(Opcode::TEARDOWN_HCA, teardown_hca_in::SIZE), 16);
    let l = e.f.dev.leaked_at_teardown().unwrap();
    assert_eq!((l.qps, l.mkeys, l.xrcds, l.gids), (1, 1, 1, 1));
    assert_eq!(e.f.dev.objects().total(), 0);
    assert!(e.f.dev.roce_enabled(), "vport state is not an object");
}
