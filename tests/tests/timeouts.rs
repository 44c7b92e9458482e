//! Bounded waits: stalled commands, fatal health, firmware that never
//! finishes initialising.

use std::time::{Duration, Instant};

use mlx5_driver::unstable::encode;
use mlx5_driver::{Error, FatalReason, Hca, HcaConfig};
use mlx5_hal::Hal;
use mlx5_regs::Opcode;
use mlx5_sim::{Device, ExecMode, Profile, SimConfig};
use mlx5_tests::{assert_clean, bring_up, config, device, MODES};

const SEC: u64 = 1_000_000_000;

fn short(mode: ExecMode) -> HcaConfig {
    HcaConfig {
        cmd_timeout_ns: match mode {
            ExecMode::Synchronous => 60 * SEC, // virtual time: free
            ExecMode::Threaded => SEC / 4,
        },
        ..config()
    }
}

#[test]
fn a_stalled_command_times_out_in_bounded_time_and_its_slot_is_not_reused() {
    for mode in MODES {
        let dev = device(Profile::ConnectX5, mode);
        let cfg = short(mode);
        let hca = Hca::bring_up(dev.hal(), cfg).unwrap();
        dev.inject().stall_next(Opcode::NOP.0);
        let t0 = hca.hal().now_ns();
        let wall = Instant::now();
        let mut out = [0u8; encode::NOP_OUT];
        let e = hca.exec(&encode::nop(), &mut out).unwrap_err();
        let waited = hca.hal().now_ns() - t0;
        match e {
            Error::Timeout {
                opcode, waited_ns, ..
            } => {
                assert_eq!(opcode, Opcode::NOP);
                assert!(waited_ns >= cfg.cmd_timeout_ns, "{mode:?}: {waited_ns}");
            }
            other => panic!("{mode:?}: {other:?}"),
        }
        assert_eq!(e.errno(), 110, "ETIMEDOUT");
        assert!(
            waited < cfg.cmd_timeout_ns + cfg.cmd_timeout_ns / 10 + 10_000_000,
            "{mode:?}: bounded ({waited} ns)"
        );
        assert!(
            wall.elapsed() < Duration::from_secs(10),
            "{mode:?}: wall time bounded"
        );
        // The stalled slot stays out of use; others keep working, many times
        // over (more commands than slots).
        for _ in 0..100 {
            hca.exec(&encode::nop(), &mut out).unwrap();
        }
        let stats = hca.stats();
        let nop = stats.get(Opcode::NOP).unwrap();
        assert_eq!((nop.count, nop.failures), (101, 1));
        assert!(
            dev.violations().is_empty(),
            "{mode:?}: no doorbell on the stalled slot: {:#?}",
            dev.violations()
        );
        hca.teardown().unwrap();
        assert_eq!(dev.pages_held(), 0);
        assert_eq!(dev.objects().total(), 0);
    }
}

#[test]
fn a_stalled_bring_up_command_times_out_and_unwinds() {
    let dev = device(Profile::ConnectX5, ExecMode::Synchronous);
    dev.inject().stall_next(Opcode::ALLOC_PD.0);
    let e = match Hca::bring_up(dev.hal(), config()) {
        Ok(_) => panic!("bring-up with a stalled ALLOC_PD succeeded"),
        Err(e) => e,
    };
    assert!(
        matches!(
            e,
            Error::Timeout {
                opcode: Opcode::ALLOC_PD,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(dev.pages_held(), 0);
    assert_eq!(dev.objects().total(), 0);
}

#[test]
fn fatal_health_fails_the_command_and_every_later_call_fast() {
    let dev = device(Profile::ConnectX5, ExecMode::Synchronous);
    let hca = bring_up(&dev);
    dev.inject().fatal(0x07);
    let mut out = [0u8; encode::NOP_OUT];
    let e = hca.exec(&encode::nop(), &mut out).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Fatal {
                health_syndrome: 0x07,
                reason: FatalReason::Syndrome,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("DEAD_IRISC"), "{e}");
    assert!(hca.is_dead());
    let before = dev.trace().len();
    let t0 = hca.hal().now_ns();
    for _ in 0..10 {
        assert_eq!(hca.exec(&encode::nop(), &mut out).unwrap_err(), e);
        assert_eq!(hca.poll_events().unwrap_err(), e);
    }
    // The model's virtual clock ticks 100 ns per read: the 20 failing calls
    // neither slept nor polled the clock.
    assert!(hca.hal().now_ns() - t0 < 1_000, "fail fast: no waiting");
    assert_eq!(
        dev.trace().len(),
        before,
        "no command reaches a dead device"
    );
    assert_eq!(hca.teardown().unwrap_err(), e);
}

#[test]
fn fatal_health_while_a_command_waits_ends_the_wait() {
    let dev = device(Profile::ConnectX5, ExecMode::Threaded);
    let hca = Hca::bring_up(
        dev.hal(),
        HcaConfig {
            cmd_timeout_ns: 30 * SEC,
            ..config()
        },
    )
    .unwrap();
    dev.inject().stall_next(Opcode::NOP.0);
    let t = Instant::now();
    let e = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            dev.inject().fatal(0x08);
        });
        let mut out = [0u8; encode::NOP_OUT];
        hca.exec(&encode::nop(), &mut out).unwrap_err()
    });
    assert!(
        matches!(
            e,
            Error::Fatal {
                health_syndrome: 0x08,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(t.elapsed() < Duration::from_secs(5), "not the 30 s timeout");
}

#[test]
fn firmware_that_never_finishes_initialising_times_out() {
    let dev = Device::new(SimConfig::profile(Profile::ConnectX5));
    dev.inject().fw_init_never_finishes();
    let t0 = dev.hal().now_ns();
    let cfg = HcaConfig::default();
    let e = match Hca::bring_up(dev.hal(), cfg) {
        Ok(_) => panic!("bring-up succeeded"),
        Err(e) => e,
    };
    let waited = dev.hal().now_ns() - t0;
    assert!(matches!(e, Error::FirmwareInitTimeout { .. }), "{e:?}");
    assert!(waited >= cfg.fw_init_timeout_ns && waited < cfg.fw_init_timeout_ns + SEC);
    assert_clean(&dev, "fw init");
}

#[test]
fn slow_firmware_init_is_waited_for() {
    let dev = Device::new(SimConfig {
        fw_init_delay_us: 3_000_000,
        ..SimConfig::profile(Profile::ConnectX4Lx)
    });
    let hca = bring_up(&dev);
    hca.teardown().unwrap();
    assert_clean(&dev, "slow init");
}

#[test]
fn delayed_completions_are_waited_for() {
    let dev = device(Profile::ConnectX6Dx, ExecMode::Synchronous);
    dev.inject().delay_completions_us(2_000_000);
    let hca = bring_up(&dev);
    hca.teardown().unwrap();
    assert_clean(&dev, "delayed");
}

/// The device's own command timeout from the init segment replaces the
/// default 60 s, as Linux's `mlx5_tout_query_iseg` does; a device that
/// publishes none (`cmd_q_init_to` 0) keeps the configured one.
#[test]
fn the_device_command_timeout_is_used_when_published() {
    for mode in MODES {
        let dev = device(Profile::ConnectX7, mode);
        dev.caps_mut(|c| {
            c.cmd_exec_to = (1 << 29) | 2; // 2 s
            c.cmd_q_init_to = (1 << 29) | 5; // 5 s
        });
        let hca = bring_up(&dev);
        assert_eq!(hca.device_timeouts(), Some((2_000_000_000, 5_000_000_000)));
        assert_eq!(hca.config().cmd_timeout_ns, 2_000_000_000);
        if mode == ExecMode::Synchronous {
            dev.inject().stall_next(Opcode::NOP.0);
            let mut out = [0u8; encode::NOP_OUT];
            match hca.exec(&encode::nop(), &mut out) {
                Err(Error::Timeout { waited_ns, .. }) => assert!(
                    (2_000_000_000..2_100_000_000).contains(&waited_ns),
                    "{waited_ns}"
                ),
                r => panic!("{r:?}"),
            }
        }
        let _ = hca.teardown();
    }
    // Not published: the configuration stands.
    let dev = device(Profile::ConnectX7, ExecMode::Synchronous);
    dev.caps_mut(|c| c.cmd_exec_to = (1 << 29) | 2);
    let hca = bring_up(&dev);
    assert_eq!(hca.device_timeouts(), None);
    assert_eq!(hca.config().cmd_timeout_ns, 60_000_000_000);
    hca.teardown().unwrap();
    // Switched off: the configuration stands too.
    let dev = device(Profile::ConnectX7, ExecMode::Synchronous);
    dev.caps_mut(|c| {
        c.cmd_exec_to = (1 << 29) | 2;
        c.cmd_q_init_to = (1 << 29) | 5;
    });
    let cfg = HcaConfig {
        device_timeouts: false,
        ..mlx5_tests::config()
    };
    let hca = Hca::bring_up(dev.hal(), cfg).unwrap();
    assert_eq!(hca.device_timeouts(), None);
    assert_eq!(hca.config().cmd_timeout_ns, 60_000_000_000);
    hca.teardown().unwrap();
}

/// A virtual function does not own HOST_ENDIANNESS: the driver skips it
/// (Linux `mlx5_function_setup`), and the model refuses it from a VF.
#[test]
fn host_endianness_is_skipped_on_a_virtual_function() {
    let dev = device(Profile::ConnectX5, ExecMode::Synchronous);
    dev.caps_mut(|c| c.virtual_function = true);
    let cfg = HcaConfig {
        virtual_function: true,
        ..mlx5_tests::config()
    };
    let hca = Hca::bring_up(dev.hal(), cfg).unwrap();
    assert!(!dev.trace().iter().any(|t| t.opcode == Opcode::ACCESS_REG.0));
    hca.teardown().unwrap();
    assert_clean(&dev, "VF");
    // A driver configured as a PF on a VF is caught.
    let dev = device(Profile::ConnectX5, ExecMode::Synchronous);
    dev.caps_mut(|c| c.virtual_function = true);
    match Hca::bring_up(dev.hal(), mlx5_tests::config()) {
        Err(Error::Command { opcode, .. }) => assert_eq!(opcode, Opcode::ACCESS_REG),
        r => panic!("{:?}", r.map(|_| ())),
    }
}
