//! Queue-pair lifecycle, driver against model:
//!
//! * every transition the driver issues from every state it can reach:
//!   the legal ones reach their state in driver and model with exactly one
//!   command, the illegal ones are refused by the driver before any command
//!   (the model's trace stays empty) — and the same illegal transitions sent
//!   raw (`Hca::exec`, bypassing the driver) are refused by the model with
//!   BAD_QP_STATE;
//! * a QP moved to ERR flushes every outstanding send work request with a
//!   flush CQE carrying the caller's `wr_id` (signaled and unsignaled, and
//!   requests posted while in ERR); an SRQ-attached QP entering ERR
//!   delivers last-WQE-reached through the async EQ to that QP only; 2RST
//!   and a new connection make the pair work again;
//! * bring-up on every port set-up chooses the documented loopback mode,
//!   traffic works in it, and teardown undoes it.

use mlx5_driver::cq::{CqeError, CqeStatus};
use mlx5_driver::loopback::{LoopbackMode, RoceVersion};
use mlx5_driver::qp::{
    InitAttr, Payload, PostSendFailure, Qp, QpEvent, QpState, RtsAttr, SendError, SendOp,
    SendRequest, SendSlot, Transition,
};
use mlx5_driver::unstable::qp::cmd::{self as qpcmd, RtrFields, RtsFields};
use mlx5_driver::{Error, Hca};
use mlx5_regs::{CmdStatus, Opcode};
use mlx5_sim::{Device, ExecMode, Profile, QpState as SimState, SimHal};
use mlx5_tests::qp::{drain, payload, Rig, RigConfig};
use mlx5_tests::MODES;

const STATES: [QpState; 5] = [
    QpState::Reset,
    QpState::Init,
    QpState::Rtr,
    QpState::Rts,
    QpState::Error,
];
const TRANSITIONS: [Transition; 5] = [
    Transition::Rst2Init,
    Transition::Init2Rtr,
    Transition::Rtr2Rts,
    Transition::ToError,
    Transition::ToReset,
];

fn sim_state(s: QpState) -> SimState {
    match s {
        QpState::Reset => SimState::Reset,
        QpState::Init => SimState::Init,
        QpState::Rtr => SimState::Rtr,
        QpState::Rts => SimState::Rts,
        QpState::Error => SimState::Err,
        other => unreachable!("{other:?}"),
    }
}

fn opcode_of(t: Transition) -> Opcode {
    match t {
        Transition::Rst2Init => Opcode::RST2INIT_QP,
        Transition::Init2Rtr => Opcode::INIT2RTR_QP,
        Transition::Rtr2Rts => Opcode::RTR2RTS_QP,
        Transition::ToError => Opcode::QP_2ERR,
        Transition::ToReset => Opcode::QP_2RST,
    }
}

/// Take transition `t` through the driver.
fn take<T: AsMut<[SendSlot]>>(
    hca: &Hca<SimHal>,
    qp: &mut Qp<SimHal, T>,
    peer: u32,
    t: Transition,
) -> Result<(), Error> {
    match t {
        Transition::Rst2Init => hca.qp_to_init(qp, &InitAttr::default()),
        Transition::Init2Rtr => hca.qp_to_rtr(qp, &hca.loopback_rtr(qp.qpn(), peer, 0)?),
        Transition::Rtr2Rts => hca.qp_to_rts(qp, &RtsAttr::default()),
        Transition::ToError => hca.qp_to_error(qp),
        Transition::ToReset => hca.qp_to_reset(qp),
    }
}

/// Bring `qp` to `state` from wherever it is, through legal transitions.
fn drive<T: AsMut<[SendSlot]>>(
    hca: &Hca<SimHal>,
    qp: &mut Qp<SimHal, T>,
    peer: u32,
    state: QpState,
) {
    hca.qp_to_reset(qp).unwrap();
    let path: &[Transition] = match state {
        QpState::Reset => &[],
        QpState::Init => &[Transition::Rst2Init],
        QpState::Rtr => &[Transition::Rst2Init, Transition::Init2Rtr],
        QpState::Rts => &[
            Transition::Rst2Init,
            Transition::Init2Rtr,
            Transition::Rtr2Rts,
        ],
        QpState::Error => &[Transition::ToError],
        other => unreachable!("{other:?}"),
    };
    for &t in path {
        take(hca, qp, peer, t).unwrap();
    }
    assert_eq!(qp.state(), state);
}

/// The raw command of transition `t` (the driver's encoders, sent with
/// `Hca::exec`, so the driver's state check is bypassed).
fn raw(hca: &Hca<SimHal>, qpn: u32, peer: u32, t: Transition) -> Result<(), Error> {
    match t {
        Transition::Rst2Init => {
            let i = qpcmd::rst2init_qp(qpn, 1, 0, InitAttr::default().access)?;
            hca.exec(&i, &mut [0u8; qpcmd::MODIFY_QP_OUT])
        }
        Transition::Init2Rtr => {
            let a = hca.loopback_rtr(qpn, peer, 0)?;
            let f = RtrFields {
                path: a.path,
                mtu: a.mtu as u8,
                log_msg_max: hca.caps().log_max_msg,
                remote_qpn: peer,
                next_rcv_psn: 0,
                min_rnr_nak: a.min_rnr_timer,
                log_rra_max: 0,
            };
            hca.exec(
                &qpcmd::init2rtr_qp(qpn, &f)?,
                &mut [0u8; qpcmd::MODIFY_QP_OUT],
            )
        }
        Transition::Rtr2Rts => {
            let f = RtsFields {
                ack_timeout: 14,
                retry_count: 7,
                rnr_retry: 7,
                next_send_psn: 0,
                log_sra_max: 0,
            };
            hca.exec(
                &qpcmd::rtr2rts_qp(qpn, &f)?,
                &mut [0u8; qpcmd::MODIFY_QP_OUT],
            )
        }
        Transition::ToError | Transition::ToReset => unreachable!("legal from every state"),
    }
}

/// The matrix on one QP of the rig.
fn matrix<T: AsMut<[SendSlot]>>(
    hca: &Hca<SimHal>,
    dev: &Device,
    qp: &mut Qp<SimHal, T>,
    peer: u32,
    what: &str,
) -> (usize, usize) {
    let (mut legal, mut refused) = (0, 0);
    for from in STATES {
        for t in TRANSITIONS {
            let w = format!("{what}: {} from {from:?}", t.command());
            drive(hca, qp, peer, from);
            dev.clear_trace();
            let r = take(hca, qp, peer, t);
            let trace: Vec<u16> = dev.trace().iter().map(|e| e.opcode).collect();
            if t.allowed_from(from) {
                r.unwrap_or_else(|e| panic!("{w}: {e}"));
                assert_eq!(trace, [opcode_of(t).0], "{w}: one command");
                assert_eq!(qp.state(), t.target(), "{w}");
                assert_eq!(dev.qp_state(qp.qpn()), Some(sim_state(t.target())), "{w}");
                legal += 1;
                continue;
            }
            assert_eq!(
                r,
                Err(Error::QpState {
                    qpn: qp.qpn(),
                    state: from,
                    op: t.command()
                }),
                "{w}"
            );
            assert_eq!(r.unwrap_err().errno(), 22, "{w}: EINVAL");
            assert!(trace.is_empty(), "{w}: the model saw {trace:x?}");
            assert_eq!(qp.state(), from, "{w}");
            assert_eq!(dev.qp_state(qp.qpn()), Some(sim_state(from)), "{w}");
            // The same transition sent raw: the model refuses it.
            let e = raw(hca, qp.qpn(), peer, t).expect_err(&w);
            match e {
                Error::Command { opcode, status, .. } => {
                    assert_eq!(opcode, opcode_of(t), "{w}");
                    assert_eq!(status, CmdStatus::BAD_QP_STATE_ERR, "{w}: {e}");
                }
                other => panic!("{w}: raw command: {other}"),
            }
            assert_eq!(dev.qp_state(qp.qpn()), Some(sim_state(from)), "{w}: raw");
            refused += 1;
        }
    }
    (legal, refused)
}

#[test]
fn every_transition_from_every_state_legal_and_illegal() {
    for cfg in RigConfig::every_port(ExecMode::Synchronous) {
        let what = cfg.name();
        let mut rig = Rig::unconnected(cfg.device(), cfg);
        let (tx, rx) = (rig.tx.qpn(), rig.rx.qpn());
        let w = format!("{what} sender");
        let counts = matrix(&rig.hca, &rig.dev, &mut rig.tx, rx, &w);
        assert_eq!(counts, (13, 12), "{what}");
        let w = format!("{what} receiver");
        let counts = matrix(&rig.hca, &rig.dev, &mut rig.rx, tx, &w);
        assert_eq!(counts, (13, 12), "{what}");
        // Posting is refused in RESET, INIT and RTR, before any doorbell.
        for s in [QpState::Reset, QpState::Init, QpState::Rtr] {
            drive(&rig.hca, &mut rig.tx, rx, s);
            let before = rig.dev.traffic().stats().doorbells;
            assert_eq!(
                rig.send_batch(0..1, 8, |_| true),
                Err(PostSendFailure {
                    index: 0,
                    error: SendError::BadState { state: s }
                }),
                "{what}"
            );
            assert_eq!(rig.dev.traffic().stats().doorbells, before, "{what}");
        }
        // And the pair still connects and carries a message afterwards.
        drive(&rig.hca, &mut rig.tx, rx, QpState::Reset);
        drive(&rig.hca, &mut rig.rx, tx, QpState::Reset);
        rig.hca
            .connect_loopback_pair(&mut rig.tx, &mut rig.rx)
            .unwrap();
        rig.post_recvs(1);
        rig.send(7, 100);
        rig.expect_message(7, 100);
        rig.finish(&what);
    }
}

// ------------------------------------------------------------ flush

fn flush_on_error(cfg: RigConfig) {
    let what = cfg.name();
    let mut rig = Rig::new(cfg);
    // 4 receives: 4 of the 11 SENDs go through, the other 7 wait on RNR.
    rig.post_recvs(4);
    let sig = |s: u64| s.is_multiple_of(3);
    rig.send_batch(0..11, 32, sig).unwrap();
    for seq in 0..4 {
        rig.expect_message(seq, 32);
    }
    let done: Vec<_> = rig
        .wait_send(2)
        .iter()
        .map(|c| (c.wr_id, c.retired, c.error()))
        .collect();
    assert_eq!(done, [(0, 1, None), (3, 3, None)], "{what}");
    rig.settle(3_000);
    assert_eq!(rig.tx.outstanding_sends(), 7, "{what}");
    assert!(rig.dev.qp(rig.tx.qpn()).unwrap().waiting, "{what}");

    rig.hca.qp_to_error(&mut rig.tx).unwrap();
    assert_eq!(rig.dev.qp_state(rig.tx.qpn()), Some(SimState::Err));
    let check_flush = |c: &mlx5_driver::qp::SendCompletion, wr_id: u64, signaled: bool| {
        assert_eq!(c.wr_id, wr_id, "{what}: flush order");
        assert_eq!(c.retired, 1, "{what}: one flush CQE per request");
        assert_eq!(c.signaled, signaled, "{what}: {c:?}");
        assert_eq!(c.error(), Some(CqeError::WrFlush), "{what}: {c:?}");
        assert!(matches!(c.status, CqeStatus::Error { syndrome: 0x05, .. }));
    };
    for (c, wr_id) in rig.wait_send(7).iter().zip(4..) {
        check_flush(c, wr_id, sig(wr_id));
    }
    // Posted while in ERR: accepted and flushed at their doorbell.
    rig.send_batch(11..14, 32, |s| s == 12).unwrap();
    for (c, wr_id) in rig.wait_send(3).iter().zip(11..) {
        check_flush(c, wr_id, wr_id == 12);
    }
    assert_eq!(rig.tx.outstanding_sends(), 0, "{what}");
    assert_eq!(rig.tx.state(), QpState::Error, "{what}");
    assert_eq!(rig.dev.traffic().stats().flushed, 10, "{what}");
    assert!(drain(&mut rig.rcq).is_empty(), "{what}: nothing delivered");
    assert!(drain(&mut rig.scq).is_empty(), "{what}: one CQE each");
    assert!(rig.events().is_empty(), "{what}: no SRQ, no last-WQE event");

    // 2RST both and connect again: the pair carries traffic.
    rig.hca.qp_to_reset(&mut rig.tx).unwrap();
    rig.hca.qp_to_reset(&mut rig.rx).unwrap();
    rig.hca
        .connect_loopback_pair(&mut rig.tx, &mut rig.rx)
        .unwrap();
    rig.post_recvs(1);
    rig.send(20, 64);
    rig.expect_message(20, 64);
    assert_eq!(rig.wait_send(1)[0].wr_id, 20, "{what}");
    rig.finish(&what);
}

#[test]
fn to_error_flushes_every_outstanding_send_with_its_wr_id() {
    for mode in MODES {
        flush_on_error(RigConfig::new(Profile::ConnectX5, mode));
        flush_on_error(RigConfig::new(Profile::ConnectX4Lx, mode));
    }
}

fn last_wqe_reached(cfg: RigConfig) {
    let what = cfg.name();
    let mut rig = Rig::new(cfg);
    rig.post_recvs(3);
    rig.send(0, 16);
    rig.expect_message(0, 16);
    rig.wait_send(1);
    let (tx, rx) = (rig.tx.qpn(), rig.rx.qpn());
    let error_from = |rig: &mut Rig, w: &str| {
        rig.hca.qp_to_error(&mut rig.rx).unwrap();
        let evs = rig.events();
        assert_eq!(evs.len(), 1, "{w}: {evs:?}");
        assert_eq!(
            evs[0].qp_event(),
            Some((rx, QpEvent::LastWqeReached)),
            "{w}"
        );
        assert_eq!(rig.tx.handle_event(&evs[0]), None, "{w}: not the sender's");
        assert!(!rig.rx.last_wqe_reached(), "{w}");
        assert_eq!(
            rig.rx.handle_event(&evs[0]),
            Some(QpEvent::LastWqeReached),
            "{w}"
        );
        assert!(rig.rx.last_wqe_reached(), "{w}");
        assert_eq!(rig.rx.state(), QpState::Error, "{w}");
        assert_eq!(rig.tx.state(), QpState::Rts, "{w}");
        // Once: ERR → ERR raises nothing more.
        rig.hca.qp_to_error(&mut rig.rx).unwrap();
        assert!(rig.events().is_empty(), "{w}: a second event");
        // The SRQ's WQEs belong to the SRQ: not flushed.
        assert_eq!(rig.srq.outstanding(), 2, "{w}");
        assert!(drain(&mut rig.rcq).is_empty(), "{w}: no receive flush");
    };
    error_from(&mut rig, &format!("{what}: from RTS"));
    drive(&rig.hca, &mut rig.rx, tx, QpState::Init);
    assert!(!rig.rx.last_wqe_reached(), "{what}: 2RST forgets it");
    error_from(&mut rig, &format!("{what}: from INIT"));
    drive(&rig.hca, &mut rig.rx, tx, QpState::Reset);
    drive(&rig.hca, &mut rig.tx, rx, QpState::Reset);
    rig.hca
        .connect_loopback_pair(&mut rig.tx, &mut rig.rx)
        .unwrap();
    rig.send(1, 16);
    rig.expect_message(1, 16);
    rig.finish(&what);
}

#[test]
fn srq_attached_qp_entering_error_gets_last_wqe_reached() {
    for mode in MODES {
        last_wqe_reached(RigConfig::new(Profile::ConnectX6Dx, mode));
    }
}

// ------------------------------------------------------------ loopback modes

/// The link-local GID of a MAC (fe80::/64 + modified EUI-64).
fn link_local(mac: [u8; 6]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[0] = 0xfe;
    g[1] = 0x80;
    g[8..11].copy_from_slice(&[mac[0] ^ 2, mac[1], mac[2]]);
    g[11..13].copy_from_slice(&[0xff, 0xfe]);
    g[13..16].copy_from_slice(&mac[3..6]);
    g
}

fn loopback_mode(cfg: RigConfig, roce_v1_only: bool) {
    let what = format!(
        "{}{}",
        cfg.name(),
        if roce_v1_only { " RoCE v1" } else { "" }
    );
    let dev = cfg.device();
    if roce_v1_only {
        dev.caps_mut(|c| c.roce_caps.roce_version = 0x1);
    }
    let mut rig = Rig::on(dev, cfg);
    let dev = rig.dev.clone();
    let mode = rig.hca.loopback_mode();
    let (fl, roce_on) = match (cfg.ib_port, cfg.profile) {
        (true, _) => {
            let lid = dev.port_lid();
            assert!(lid != 0, "{what}");
            assert_eq!(mode, Some(LoopbackMode::Ib { lid }), "{what}");
            (false, false)
        }
        (false, Profile::ConnectX4Lx) => {
            let mac = dev.port_mac();
            let v2 = dev.caps().roce_caps.roce_version & 0x4 != 0;
            let version = if v2 { RoceVersion::V2 } else { RoceVersion::V1 };
            let gid = link_local(mac);
            // The default GIDs: v1 at 0, v2 at 1 (when supported); loopback
            // uses the last (v2 when there is one).
            let defaults = if v2 { 2 } else { 1 };
            assert_eq!(
                mode,
                Some(LoopbackMode::Roce {
                    gid_index: defaults - 1,
                    gid,
                    mac,
                    version
                }),
                "{what}"
            );
            (false, true)
        }
        (false, Profile::ConnectX5) => {
            assert_eq!(mode, Some(LoopbackMode::ForceLoopback), "{what}");
            (true, false)
        }
        (false, Profile::ConnectX6Dx | Profile::ConnectX7) => {
            assert_eq!(mode, Some(LoopbackMode::ForceLoopback), "{what}");
            (true, true)
        }
        // `Profile` is non-exhaustive: a new profile needs its expectations here.
        (false, p) => panic!("{what}: no expected loopback mode for {p:?}"),
    };
    // Every Ethernet port with RoCE has its default link-local GIDs, v1
    // then v2 as supported (whatever the loopback mode), none on IB.
    let entries = dev.gid_entries();
    if cfg.ib_port {
        assert!(entries.is_empty(), "{what}: {entries:?}");
    } else {
        let versions = dev.caps().roce_caps.roce_version;
        let want: Vec<u8> = [(1u8, 0u8), (4, 2)]
            .into_iter()
            .filter(|(bit, _)| versions & bit != 0)
            .map(|(_, v)| v)
            .collect();
        let mac = dev.port_mac();
        assert_eq!(entries.len(), want.len(), "{what}: {entries:?}");
        for ((index, e), (i, v)) in entries.iter().zip(want.iter().enumerate()) {
            assert_eq!(
                (*index, e.gid, e.mac, e.vlan, e.version),
                (i as u16, link_local(mac), mac, None, *v),
                "{what}"
            );
        }
    }
    assert_eq!(dev.roce_enabled(), roce_on, "{what}: roce_en");
    assert_eq!(rig.hca.roce_enabled(), roce_on, "{what}");
    for (a, b) in [(rig.tx.qpn(), rig.rx.qpn()), (rig.rx.qpn(), rig.tx.qpn())] {
        let q = dev.qp(a).unwrap();
        assert_eq!((q.state, q.remote_qpn), (SimState::Rts, b), "{what}");
        assert_eq!(q.force_loopback, fl, "{what}");
    }
    // Traffic in this mode: a gathered SEND and an inline SEND_IMM.
    rig.post_recvs(2);
    let msg = payload(1, 200);
    rig.src.write(0, &msg[..120]);
    rig.src.write(1, &msg[120..]);
    let sges = [
        rig.hca.sge(rig.src.iova(0), 120),
        rig.hca.sge(rig.src.iova(1), 80),
    ];
    let inline = payload(2, 60);
    let reqs = [
        SendRequest {
            wr_id: 1,
            op: SendOp::Send,
            payload: Payload::Sges(&sges),
            signaled: true,
            solicited: false,
        },
        SendRequest {
            wr_id: 2,
            op: SendOp::SendImm { imm: 0x1234_5678 },
            payload: Payload::Inline(&inline),
            signaled: true,
            solicited: true,
        },
    ];
    rig.tx.post_send(&reqs).unwrap();
    rig.expect_message(1, 200);
    let r = rig.expect_message(2, 60);
    assert_eq!(r.imm, 0x1234_5678, "{what}: immediate");
    let ids: Vec<u64> = rig.wait_send(2).iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, [1, 2], "{what}");
    rig.finish(&what);
}

#[test]
fn bring_up_chooses_the_documented_loopback_mode_and_teardown_undoes_it() {
    for mode in MODES {
        for cfg in RigConfig::every_port(mode) {
            loopback_mode(cfg, false);
        }
        // A RoCE device without v2: a v1 GID entry, no UDP source port.
        loopback_mode(RigConfig::new(Profile::ConnectX4Lx, mode), true);
    }
}

#[test]
fn the_reserved_lkey_works_as_an_explicit_choice_on_both_sides() {
    // Not the default (the DMA key is), but still usable: in a receive WQE
    // of the RMP and in a send SGE (the driver's QPs set `rlky`).
    let cfg = RigConfig::new(Profile::ConnectX5, ExecMode::Synchronous);
    let mut rig = Rig::new(cfg);
    let resd = rig.hca.reserved_lkey();
    assert_ne!(Some(resd), rig.hca.dma_lkey());
    assert_eq!(rig.hca.default_lkey(), rig.hca.dma_lkey().unwrap());
    rig.dst.clear(0, 0);
    let recv = [mlx5_driver::srq::Sge {
        addr: rig.dst.iova(0),
        length: 256,
        lkey: resd,
    }];
    rig.srq
        .post(&[mlx5_driver::srq::RecvRequest {
            wr_id: 0,
            sges: &recv,
        }])
        .unwrap();
    let data = payload(0, 200);
    rig.src.write(0, &data);
    let send = [mlx5_driver::srq::Sge {
        addr: rig.src.iova(0),
        length: 200,
        lkey: resd,
    }];
    rig.tx
        .post_send(&[SendRequest {
            wr_id: 0,
            op: SendOp::Send,
            payload: Payload::Sges(&send),
            signaled: true,
            solicited: false,
        }])
        .unwrap();
    rig.expect_message(0, 200);
    assert_eq!(rig.wait_send(1)[0].error(), None);
    rig.finish("reserved lkey");
}
