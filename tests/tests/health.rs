//! Health under Linux's rules (`mlx5_health_check_fatal_sensors`): a
//! syndrome is fatal only with the reset-requested (RFR) bit; without it
//! firmware reports a condition and keeps working, and so does the HCA.

use mlx5_driver::cq::CqOptions;
use mlx5_driver::health::HealthWarning;
use mlx5_driver::unstable::encode;
use mlx5_driver::{Error, FatalReason};
use mlx5_sim::{ExecMode, Profile};
use mlx5_tests::{assert_clean, bring_up, device, MODES};

#[test]
fn a_non_fatal_syndrome_is_reported_and_the_hca_stays_usable() {
    for mode in MODES {
        let dev = device(Profile::ConnectX6Dx, mode);
        let hca = bring_up(&dev);
        assert_eq!(hca.health_warning(), (None, 0));
        // High temperature, severity WARNING, no reset requested.
        dev.inject().health_syndrome(Some((0x10, 0x0042)));
        hca.check_health().unwrap();
        let w = HealthWarning {
            syndrome: 0x10,
            ext_syndrome: 0x42,
            severity: Some(4),
        };
        assert_eq!(hca.health_warning(), (Some(w), 1), "{mode:?}");
        // Commands, events and page requests keep working.
        let mut out = [0u8; encode::NOP_OUT];
        for _ in 0..5 {
            hca.exec(&encode::nop(), &mut out).unwrap();
            hca.poll_events().unwrap();
        }
        let cq = hca.create_cq(63, CqOptions::default()).unwrap();
        dev.inject().page_request(17);
        for _ in 0..10 {
            dev.quiesce();
            hca.poll_events().unwrap();
        }
        assert_eq!(dev.pages_held(), hca.pages_held_by_firmware(), "{mode:?}");
        hca.destroy_cq(cq).map_err(|e| e.error()).unwrap();
        assert!(!hca.is_dead(), "{mode:?}");
        // Reported once per syndrome; cleared when firmware clears it.
        hca.check_health().unwrap();
        assert_eq!(hca.health_warning().1, 1);
        dev.inject().health_syndrome(None);
        hca.check_health().unwrap();
        assert_eq!(hca.health_warning(), (None, 1), "{mode:?}");
        hca.teardown().unwrap();
        assert_clean(&dev, &format!("{mode:?}"));
    }
}

#[test]
fn a_syndrome_with_the_reset_request_is_fatal() {
    let dev = device(Profile::ConnectX5, ExecMode::Synchronous);
    let hca = bring_up(&dev);
    dev.inject().health_syndrome(Some((0x10, 0)));
    hca.check_health().unwrap();
    // The model's fatal state sets RFR with its syndrome.
    dev.inject().fatal(0x08);
    let e = hca.check_health().unwrap_err();
    assert!(
        matches!(
            e,
            Error::Fatal {
                health_syndrome: 0x08,
                reason: FatalReason::Syndrome,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(hca.is_dead());
    let _ = hca.teardown();
}
