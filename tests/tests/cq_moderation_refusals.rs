//! CQ moderation refusals and CQ overrun against the model, at the driver
//! level: the driver's capability and range checks (before any command),
//! firmware's own refusals of MODIFY_CQ op_mod 0 (status and syndrome), and
//! overrun with and without overrun-ignore.

use mlx5_driver::cq::{CqModeration, CqOptions, CqPeriodMode};
use mlx5_driver::unstable::cq::cmd;
use mlx5_driver::{Error, Event, Hca};
use mlx5_regs::consts::errno;
use mlx5_regs::layouts::{cqc, modify_cq_in, modify_field_select};
use mlx5_regs::{CmdStatus, Opcode};
use mlx5_sim::syndrome as sy;
use mlx5_sim::{Device, ExecMode, Profile, SimHal, Violation};
use mlx5_tests::{assert_clean, bring_up, device, inject_sends as inject, traced_opcodes, MODES};

/// CQ error events on the async queue: their (cqn, syndrome).
fn cq_errors(hca: &Hca<SimHal>) -> Vec<(u32, u8)> {
    hca.poll_events().expect("poll events");
    let mut v = Vec::new();
    while let Some(ev) = hca.next_event() {
        if let Event::CqError { cqn, syndrome } = ev {
            v.push((cqn, syndrome));
        }
    }
    v
}

fn modify_cqs(dev: &Device) -> usize {
    traced_opcodes(dev)
        .iter()
        .filter(|&&o| o == Opcode::MODIFY_CQ.0)
        .count()
}

/// Without `cq_moderation` the driver refuses before any command
/// (`EOPNOTSUPP`); firmware refuses the raw command with BAD_OP.
#[test]
fn without_the_capability_nothing_is_sent_and_firmware_refuses() {
    let dev = device(Profile::ConnectX5, ExecMode::Synchronous);
    dev.caps_mut(|c| c.cq_moderation = false);
    let hca = bring_up(&dev);
    let cq = hca.create_cq(15, CqOptions::default()).unwrap();
    let before = traced_opcodes(&dev).len();
    let e = hca.modify_cq_moderation(&cq, 10, 10).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
    assert_eq!(e.errno(), errno::EOPNOTSUPP);
    let m = CqModeration {
        period: 10,
        max_count: 1,
        mode: CqPeriodMode::StartFromEqe,
    };
    assert_eq!(
        hca.modify_cq_moderation_mode(&cq, &m).unwrap_err().errno(),
        errno::EOPNOTSUPP
    );
    let opts = CqOptions {
        moderation: Some(m),
        ..Default::default()
    };
    assert_eq!(
        hca.create_cq(15, opts).err().unwrap().errno(),
        errno::EOPNOTSUPP
    );
    assert_eq!(traced_opcodes(&dev).len(), before, "no command sent");
    let raw = cmd::modify_cq_moderation(cq.cqn(), 10, 10).unwrap();
    let mut out = [0u8; cmd::MODIFY_CQ_OUT];
    assert_eq!(
        hca.exec(&raw, &mut out).unwrap_err(),
        Error::Command {
            opcode: Opcode::MODIFY_CQ,
            op_mod: 0,
            status: CmdStatus::BAD_OP_ERR,
            syndrome: sy::CQ_MODERATION_CAP,
        }
    );
    hca.destroy_cq(cq).unwrap();
    hca.teardown().unwrap();
    assert_clean(&dev, "no cap");
}

/// The driver's range and mode checks, before any command.
#[test]
fn period_above_4095_and_unsupported_modes_are_refused_before_sending() {
    let dev = device(Profile::ConnectX4Lx, ExecMode::Synchronous);
    let hca = bring_up(&dev);
    assert!(hca.caps().cq_moderation);
    assert!(!hca.caps().cq_period_mode_modify && !hca.caps().cq_period_start_from_cqe);
    let cq = hca.create_cq(15, CqOptions::default()).unwrap();
    let before = modify_cqs(&dev);
    let e = hca.modify_cq_moderation(&cq, 4096, 1).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    assert_eq!(e.errno(), errno::EINVAL);
    // Changing the mode needs cq_period_mode_modify (mlx5e's ethtool path).
    let eqe = CqModeration {
        period: 8,
        max_count: 8,
        mode: CqPeriodMode::StartFromEqe,
    };
    assert_eq!(
        hca.modify_cq_moderation_mode(&cq, &eqe)
            .unwrap_err()
            .errno(),
        errno::EOPNOTSUPP
    );
    // CQE-based timing needs cq_period_start_from_cqe, at creation too.
    let cqe = CqModeration {
        mode: CqPeriodMode::StartFromCqe,
        ..eqe
    };
    let opts = CqOptions {
        moderation: Some(cqe),
        ..Default::default()
    };
    assert_eq!(
        hca.create_cq(15, opts).err().unwrap().errno(),
        errno::EOPNOTSUPP
    );
    let big = CqOptions {
        moderation: Some(CqModeration {
            period: 5000,
            ..eqe
        }),
        ..Default::default()
    };
    assert_eq!(hca.create_cq(15, big).err().unwrap().errno(), errno::EINVAL);
    assert_eq!(modify_cqs(&dev), before, "no MODIFY_CQ sent");
    // The EQE-based mode at creation needs no extra capability.
    let ok = hca
        .create_cq(
            15,
            CqOptions {
                moderation: Some(eqe),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(hca.query_cq(&ok).unwrap().cq_max_count, 8);
    hca.modify_cq_moderation(&cq, 4095, 0xffff).unwrap();
    hca.destroy_cq(ok).unwrap();
    hca.destroy_cq(cq).unwrap();
    hca.teardown().unwrap();
    assert_clean(&dev, "ranges");
}

/// A raw MODIFY_CQ op_mod 0 with `sel` and `mode`, and its refusal.
fn raw_modify(hca: &Hca<SimHal>, cqn: u32, sel: u32, mode: u8) -> Result<(), Error> {
    let mut b = cmd::modify_cq_moderation(cqn, 1, 1).unwrap();
    modify_field_select::modify_field_select
        .set(
            modify_cq_in::modify_field_select_resize_field_select.get_mut(&mut b),
            sel,
        )
        .unwrap();
    cqc::cq_period_mode
        .set(modify_cq_in::cq_context.get_mut(&mut b), mode)
        .unwrap();
    let mut out = [0u8; cmd::MODIFY_CQ_OUT];
    hca.exec(&b, &mut out)
}

fn refused(status: CmdStatus, syndrome: u32) -> Error {
    Error::Command {
        opcode: Opcode::MODIFY_CQ,
        op_mod: 0,
        status,
        syndrome,
    }
}

/// Firmware's own refusals of MODIFY_CQ op_mod 0, with status and syndrome.
#[test]
fn firmware_refuses_bad_moderation_commands() {
    for p in [Profile::ConnectX5, Profile::ConnectX4Lx] {
        let dev = device(p, ExecMode::Synchronous);
        let hca = bring_up(&dev);
        let cq = hca.create_cq(15, CqOptions::default()).unwrap();
        let n = cq.cqn();
        let bad_sel = refused(CmdStatus::BAD_PARAM_ERR, sy::CQ_MODIFY_SELECT);
        assert_eq!(
            raw_modify(&hca, n, 0, 0).unwrap_err(),
            bad_sel,
            "{p:?}: empty select"
        );
        assert_eq!(
            raw_modify(&hca, n, 1 << 3, 0).unwrap_err(),
            bad_sel,
            "{p:?}: unknown bit"
        );
        assert_eq!(
            raw_modify(&hca, n + 1, 3, 0).unwrap_err(),
            refused(CmdStatus::BAD_RES_ERR, sy::CQ_NOT_FOUND)
        );
        if p == Profile::ConnectX4Lx {
            // No cq_period_mode_modify: the PERIOD_MODE bit is refused.
            assert_eq!(raw_modify(&hca, n, 0x13, 0).unwrap_err(), bad_sel);
        } else {
            raw_modify(&hca, n, 0x13, 1).unwrap();
            let mode = refused(CmdStatus::BAD_PARAM_ERR, sy::CQ_PERIOD_MODE_CAP);
            assert_eq!(
                raw_modify(&hca, n, 0x10, 2).unwrap_err(),
                mode,
                "reserved mode"
            );
            dev.caps_mut(|c| c.cq_period_start_from_cqe = false);
            assert_eq!(
                raw_modify(&hca, n, 0x10, 1).unwrap_err(),
                mode,
                "mode 1 without the cap"
            );
        }
        hca.destroy_cq(cq).unwrap();
        hca.teardown().unwrap();
        assert_clean(&dev, &format!("{p:?}"));
    }
}

/// Overrun without overrun-ignore: the CQ error event says overrun
/// (syndrome 1) and the CQ stops. With it: no event, the device writes on.
#[test]
fn overrun_with_and_without_overrun_ignore() {
    for mode in MODES {
        let dev = device(Profile::ConnectX5, mode);
        let hca = bring_up(&dev);
        let cq = hca.create_cq(1, CqOptions::default()).unwrap();
        assert_eq!(cq.capacity(), 1);
        let mut seq = 0;
        inject(&dev, &cq, &mut seq, 3);
        assert_eq!(
            cq_errors(&hca),
            [(cq.cqn(), 1)],
            "{mode:?}: overrun reported"
        );
        assert_eq!(
            hca.query_cq(&cq).unwrap().status,
            0x9,
            "cqc.status overflow"
        );
        assert!(dev
            .violations()
            .iter()
            .all(|v| matches!(v, Violation::CqOverrun { .. })));
        hca.destroy_cq(cq).unwrap();

        let oi = CqOptions {
            overrun_ignore: true,
            ..Default::default()
        };
        let cq = hca.create_cq(1, oi).unwrap();
        inject(&dev, &cq, &mut seq, 7);
        assert_eq!(cq_errors(&hca), [], "{mode:?}: no error with oi");
        let q = hca.query_cq(&cq).unwrap();
        assert_eq!((q.status, q.producer_counter), (0, 7), "{mode:?}: wrote on");
        hca.destroy_cq(cq).unwrap();
        hca.teardown().unwrap();
        let v = dev.violations();
        assert_eq!(v.len(), 1, "{mode:?}: only the first CQ's overrun: {v:#?}");
    }
}
