//! Every bring-up command made to fail by fault injection, one at a time:
//! the error names opcode, status and syndrome, and nothing leaks.

use mlx5_driver::{Error, Hca};
use mlx5_regs::{CmdStatus, DeliveryStatus, Opcode};
use mlx5_sim::{Corruption, ExecMode, HcaState, Profile};
use mlx5_tests::{assert_clean, bring_up, config, device, traced_opcodes, MODES};

/// The commands of a clean bring-up, each with its 0-based occurrence
/// index among commands of the same opcode.
fn bring_up_commands() -> Vec<(u16, usize)> {
    let dev = device(Profile::ConnectX5, ExecMode::Synchronous);
    let hca = bring_up(&dev);
    let ops = traced_opcodes(&dev);
    drop(hca);
    let mut seen = std::collections::HashMap::<u16, usize>::new();
    ops.into_iter()
        .map(|op| {
            let n = seen.entry(op).or_default();
            *n += 1;
            (op, *n - 1)
        })
        .collect()
}

#[test]
fn every_bring_up_command_failing_unwinds_cleanly() {
    let cmds = bring_up_commands();
    assert!(cmds.len() >= 17, "{cmds:?}");
    for mode in MODES {
        for (i, &(op, nth)) in cmds.iter().enumerate() {
            let opcode = Opcode(op);
            let what = format!("{mode:?}: {opcode:?} #{nth} (command {i})");
            let dev = device(Profile::ConnectX5, mode);
            let syndrome = 0x5a00_0000 | i as u32;
            dev.inject()
                .fail_nth(op, nth, CmdStatus::BAD_PARAM_ERR.0, syndrome);
            let r = Hca::bring_up(dev.hal(), config());
            if opcode == Opcode::QUERY_ISSI {
                // Linux: a firmware status on QUERY_ISSI means ISSI 0.
                let hca = r.unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(hca.issi(), 0, "{what}");
                hca.teardown().unwrap();
                assert_clean(&dev, &what);
                continue;
            }
            let e = match r {
                Ok(_) => panic!("{what}: bring-up succeeded"),
                Err(e) => e,
            };
            assert_eq!(
                e,
                Error::Command {
                    opcode,
                    op_mod: e_op_mod(&e),
                    status: CmdStatus::BAD_PARAM_ERR,
                    syndrome
                },
                "{what}"
            );
            assert_eq!(e.errno(), 22, "{what}: BAD_PARAM -> EINVAL");
            let text = e.to_string();
            assert!(
                text.contains(opcode.name().unwrap())
                    && text.contains("BAD_PARAM_ERR")
                    && text.contains(&format!("{syndrome:#x}")),
                "{what}: message {text:?}"
            );
            assert_eq!(dev.hca_state(), HcaState::Disabled, "{what}");
            assert_clean(&dev, &what);
        }
    }
}

fn e_op_mod(e: &Error) -> u16 {
    match e {
        Error::Command { op_mod, .. } => *op_mod,
        _ => u16::MAX,
    }
}

#[test]
fn corrupted_delivery_is_a_delivery_error() {
    for (kind, status) in [
        (Corruption::Token, DeliveryStatus::TOKEN_ERR),
        (Corruption::Signature, DeliveryStatus::SIGNATURE_ERR),
    ] {
        let dev = device(Profile::ConnectX5, ExecMode::Synchronous);
        let hca = bring_up(&dev);
        // Signatures are only checked with checksums on; the token always.
        dev.inject().corrupt_next_delivery(kind);
        let mut out = [0u8; mlx5_driver::unstable::encode::NOP_OUT];
        let r = hca.exec(&mlx5_driver::unstable::encode::nop(), &mut out);
        match r {
            Err(Error::Delivery {
                opcode, status: s, ..
            }) => {
                assert_eq!(opcode, Opcode::NOP);
                assert_eq!(s, status);
            }
            Ok(()) if kind == Corruption::Signature => {}
            other => panic!("{kind:?}: {other:?}"),
        }
        // The queue still works.
        hca.exec(&mlx5_driver::unstable::encode::nop(), &mut out)
            .unwrap();
        hca.teardown().unwrap();
        assert_eq!(dev.pages_held(), 0);
        assert_eq!(dev.objects().total(), 0);
    }
}

#[test]
fn a_failing_teardown_step_is_reported_and_the_rest_still_runs() {
    let dev = device(Profile::ConnectX5, ExecMode::Synchronous);
    let hca = bring_up(&dev);
    dev.inject()
        .fail_next(Opcode::DEALLOC_PD.0, CmdStatus::BAD_RES_ERR.0, 0x77);
    let e = hca.teardown().unwrap_err();
    assert_eq!(e.opcode(), Some(Opcode::DEALLOC_PD));
    // TEARDOWN_HCA destroyed the PD, everything else was returned.
    assert_eq!(dev.pages_held(), 0);
    assert_eq!(dev.objects().total(), 0);
    assert_eq!(dev.hca_state(), HcaState::Disabled);
}

#[test]
fn every_teardown_command_failing_still_returns_every_page_and_object() {
    let probe = device(Profile::ConnectX5, ExecMode::Synchronous);
    let hca = bring_up(&probe);
    probe.clear_trace();
    hca.teardown().unwrap();
    let mut seen = std::collections::HashMap::<u16, usize>::new();
    let cmds: Vec<(u16, usize)> = traced_opcodes(&probe)
        .into_iter()
        .map(|op| {
            let n = seen.entry(op).or_default();
            *n += 1;
            (op, *n - 1)
        })
        .collect();
    for (op, nth) in cmds {
        let what = format!("{:?} #{nth}", Opcode(op));
        let dev = device(Profile::ConnectX5, ExecMode::Synchronous);
        let hca = bring_up(&dev);
        dev.inject()
            .fail_nth(op, nth, CmdStatus::BAD_RES_STATE_ERR.0, 0xfeed);
        let e = hca.teardown().unwrap_err();
        assert_eq!(e.opcode(), Some(Opcode(op)), "{what}: {e}");
        assert!(e.to_string().contains("BAD_RES_STATE_ERR"), "{what}: {e}");
        assert_eq!(dev.pages_held(), 0, "{what}: pages left");
        assert_eq!(dev.objects().total(), 0, "{what}: objects left");
    }
}

#[test]
fn raw_exec_refuses_manage_pages_and_short_buffers() {
    let dev = device(Profile::ConnectX5, ExecMode::Synchronous);
    let hca = bring_up(&dev);
    let mut out = [0u8; 16];
    let mp = mlx5_driver::unstable::encode::manage_pages_take(0, false, 1);
    assert!(matches!(
        hca.exec(&mp, &mut out),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        hca.exec(&[0u8; 4], &mut out),
        Err(Error::InvalidArgument(_))
    ));
    let big = [0u8; 5000];
    assert!(matches!(
        hca.exec(&big, &mut out),
        Err(Error::CommandTooLarge { len: 5000, .. })
    ));
    hca.teardown().unwrap();
    assert_clean(&dev, "raw");
}
