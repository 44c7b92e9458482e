//! Page-request storms, give and take, during bring-up, after it, and
//! while a command waits (issue 4).

use mlx5_driver::cmd::encode;
use mlx5_driver::{Hca, HcaConfig};
use mlx5_regs::Opcode;
use mlx5_sim::{ExecMode, Profile};
use mlx5_tests::{assert_clean, bring_up, config, device, MODES};

fn poll_until_quiet<H: mlx5_hal::Hal>(hca: &Hca<H>, dev: &mlx5_sim::Device) {
    for _ in 0..1000 {
        dev.quiesce();
        let r = hca.poll_events().unwrap();
        if r.eqes == 0 && r.page_requests == 0 {
            dev.quiesce();
            if hca.poll_events().unwrap().eqes == 0 {
                return;
            }
        }
    }
    panic!("events never stopped");
}

#[test]
fn storms_after_bring_up_give_and_take() {
    for mode in MODES {
        let dev = device(Profile::ConnectX5, mode);
        let hca = bring_up(&dev);
        let base = hca.pages_held_by_firmware();
        dev.inject().page_request_storm(200, 37);
        poll_until_quiet(&hca, &dev);
        assert_eq!(hca.pages_held_by_firmware(), base + 200 * 37, "{mode:?}");
        assert_eq!(dev.pages_held(), hca.pages_held_by_firmware(), "{mode:?}");
        dev.inject().page_request_storm(100, -37);
        poll_until_quiet(&hca, &dev);
        assert_eq!(hca.pages_held_by_firmware(), base + 100 * 37, "{mode:?}");
        assert_eq!(dev.pages_held(), hca.pages_held_by_firmware(), "{mode:?}");
        // Requests larger than one MANAGE_PAGES carries (512 pages), each
        // served before the next is raised.
        for n in [1500, -1400, 3] {
            dev.inject().page_request(n);
            poll_until_quiet(&hca, &dev);
        }
        assert_eq!(
            hca.pages_held_by_firmware(),
            base + 100 * 37 + 103,
            "{mode:?}"
        );
        assert_eq!(dev.pages_held(), hca.pages_held_by_firmware(), "{mode:?}");
        let ps = hca.page_stats();
        assert_eq!(ps.requests, 303, "{mode:?}");
        hca.teardown().unwrap();
        assert_clean(&dev, &format!("{mode:?}"));
    }
}

#[test]
fn a_command_needing_pages_does_not_deadlock() {
    for mode in MODES {
        let dev = device(Profile::ConnectX6Dx, mode);
        let hca = bring_up(&dev);
        let base = hca.pages_held_by_firmware();
        dev.inject().page_request_on_next(Opcode::NOP.0, 700);
        let mut out = [0u8; encode::NOP_OUT];
        hca.exec(&encode::nop(), &mut out).unwrap();
        assert_eq!(hca.pages_held_by_firmware(), base + 700, "{mode:?}");
        // Take while waiting.
        dev.inject().page_request_on_next(Opcode::NOP.0, -300);
        hca.exec(&encode::nop(), &mut out).unwrap();
        poll_until_quiet(&hca, &dev);
        assert_eq!(hca.pages_held_by_firmware(), base + 400, "{mode:?}");
        assert_eq!(dev.pages_held(), base + 400, "{mode:?}");
        // A storm while a command waits.
        dev.inject().page_request_on_next(Opcode::QUERY_PAGES.0, 64);
        dev.inject().page_request_storm(40, 5);
        let mut qp = [0u8; encode::QUERY_PAGES_OUT];
        hca.exec(&encode::query_pages(3), &mut qp).unwrap();
        poll_until_quiet(&hca, &dev);
        assert_eq!(dev.pages_held(), hca.pages_held_by_firmware(), "{mode:?}");
        assert_eq!(
            hca.pages_held_by_firmware(),
            base + 400 + 64 + 200,
            "{mode:?}"
        );
        hca.teardown().unwrap();
        assert_clean(&dev, &format!("{mode:?}"));
    }
}

#[test]
fn page_requests_during_bring_up() {
    for mode in MODES {
        let dev = device(Profile::ConnectX7, mode);
        // Raised as soon as the async EQ exists, while later bring-up
        // commands wait.
        dev.inject().page_request_on_next(Opcode::ALLOC_PD.0, 300);
        dev.inject()
            .page_request_on_next(Opcode::QUERY_SPECIAL_CONTEXTS.0, -120);
        let hca = bring_up(&dev);
        poll_until_quiet(&hca, &dev);
        assert_eq!(dev.pages_held(), hca.pages_held_by_firmware(), "{mode:?}");
        hca.teardown().unwrap();
        assert_clean(&dev, &format!("{mode:?}"));
    }
}

#[test]
fn storm_from_another_thread_while_commands_run() {
    let dev = device(Profile::ConnectX5, ExecMode::Threaded);
    let hca = bring_up(&dev);
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..50 {
                dev.inject().page_request(if i % 3 == 2 { -4 } else { 6 });
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        });
        let mut out = [0u8; encode::NOP_OUT];
        for _ in 0..300 {
            hca.exec(&encode::nop(), &mut out).unwrap();
        }
    });
    std::thread::sleep(std::time::Duration::from_millis(20));
    poll_until_quiet(&hca, &dev);
    assert_eq!(dev.pages_held(), hca.pages_held_by_firmware());
    hca.teardown().unwrap();
    assert_clean(&dev, "threaded storm");
}

#[test]
fn requests_beyond_the_page_budget_are_refused_with_manage_pages_0() {
    let dev = device(Profile::ConnectX5, ExecMode::Synchronous);
    let cfg = config();
    let probe = bring_up(&dev);
    let base = probe.pages_held_by_firmware();
    probe.teardown().unwrap();
    let dev = device(Profile::ConnectX5, ExecMode::Synchronous);
    let hca = Hca::bring_up(
        dev.hal(),
        HcaConfig {
            max_fw_pages: base + 10,
            ..cfg
        },
    )
    .unwrap();
    dev.inject().page_request(50);
    poll_until_quiet(&hca, &dev);
    assert_eq!(hca.pages_held_by_firmware(), base);
    assert_eq!(dev.pages_held(), base);
    assert_eq!(hca.page_stats().give_failures, 1);
    let mp = hca.stats();
    let mp = mp.get(Opcode::MANAGE_PAGES).unwrap();
    assert_eq!(mp.failures, 0, "op_mod 0 answered, accepted by firmware");
    hca.teardown().unwrap();
    assert_clean(&dev, "budget");
}
