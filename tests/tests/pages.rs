//! Page-request storms, give and take, during bring-up, after it, and
//! while a command waits.

use mlx5_driver::unstable::encode;
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
        // Requests larger than a command's preallocated mailboxes carry
        // (512 pages; given in one command all the same), each served
        // before the next is raised.
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
        hca.exec(&encode::query_pages(3, false), &mut qp).unwrap();
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

/// MANAGE_PAGES gives, from the trace: (op_mod 1 commands, entries of each).
fn gives(dev: &mlx5_sim::Device) -> Vec<u32> {
    use mlx5_regs::layouts::manage_pages_in;
    dev.trace()
        .iter()
        .filter(|t| t.opcode == Opcode::MANAGE_PAGES.0 && t.op_mod == 1 && t.status == 0)
        .map(|t| manage_pages_in::input_num_entries.get(&t.input))
        .collect()
}

/// Every page firmware asks for goes in one MANAGE_PAGES, as Linux gives
/// them (`give_pages`): boot, init and regular pages at bring-up and each
/// page request afterwards, on every profile, including a request larger
/// than one command's preallocated mailboxes carry.
#[test]
fn one_manage_pages_per_request_on_every_profile() {
    let profiles = [
        Profile::ConnectX4Lx,
        Profile::ConnectX5,
        Profile::ConnectX6Dx,
        Profile::ConnectX7,
    ];
    for p in profiles {
        for mode in MODES {
            let dev = device(p, mode);
            dev.caps_mut(|c| c.regular_pages = 700);
            let caps = dev.caps();
            let hca = bring_up(&dev);
            assert_eq!(
                gives(&dev),
                vec![
                    caps.boot_pages as u32,
                    caps.init_pages as u32,
                    caps.regular_pages as u32
                ],
                "{p:?} {mode:?}"
            );
            dev.clear_trace();
            for n in [2500, 1, 513] {
                dev.inject().page_request(n);
                poll_until_quiet(&hca, &dev);
            }
            assert_eq!(gives(&dev), vec![2500, 1, 513], "{p:?} {mode:?}");
            assert_eq!(dev.pages_held(), hca.pages_held_by_firmware());
            hca.teardown().unwrap();
            assert_clean(&dev, &format!("{p:?} {mode:?}"));
        }
    }
}

/// A real ConnectX-4 asks for 12,868 init pages (about 50 MiB) and takes
/// them in one 103 KB command; the driver's default cap (65,536 pages)
/// holds five times that.
#[test]
fn connectx4_sized_init_request_in_one_command() {
    let dev = device(Profile::ConnectX4Lx, ExecMode::Synchronous);
    dev.caps_mut(|c| c.init_pages = 12_868);
    let hca = bring_up(&dev);
    let g = gives(&dev);
    assert_eq!(g[1], 12_868, "{g:?}");
    assert_eq!(g.len(), 2);
    let t = dev
        .trace()
        .into_iter()
        .find(|t| t.opcode == Opcode::MANAGE_PAGES.0 && t.op_mod == 1 && t.input.len() > 100_000)
        .expect("one input of 16 + 8 × 12,868 bytes");
    assert_eq!(t.input.len(), 16 + 8 * 12_868);
    assert!(mlx5_driver::HcaConfig::default().max_fw_pages >= 5 * 12_868);
    hca.teardown().unwrap();
    assert_clean(&dev, "12,868 init pages");
}

/// On an embedded-CPU function (init segment bit 23) every page command
/// carries `embedded_cpu_function`, as ENABLE_HCA does (Linux
/// `mlx5_core_is_ecpf`), and a page request's `ec_function` is answered in
/// kind; the model refuses a page command addressed to another function.
#[test]
fn embedded_cpu_function_page_commands_carry_the_flag() {
    use mlx5_regs::layouts::{manage_pages_in, query_pages_in};
    for mode in MODES {
        let dev = device(Profile::ConnectX6Dx, mode);
        dev.caps_mut(|c| c.embedded_cpu = true);
        let hca = bring_up(&dev);
        dev.inject().page_request(40);
        poll_until_quiet(&hca, &dev);
        dev.inject().page_request(-25);
        poll_until_quiet(&hca, &dev);
        assert_eq!(dev.pages_held(), hca.pages_held_by_firmware(), "{mode:?}");
        hca.teardown().unwrap();
        assert_clean(&dev, &format!("{mode:?}"));
        let t = dev.trace();
        let pages: Vec<_> = t
            .iter()
            .filter(|e| [Opcode::QUERY_PAGES.0, Opcode::MANAGE_PAGES.0].contains(&e.opcode))
            .collect();
        assert!(pages.len() >= 7, "{mode:?}");
        for e in pages {
            assert_eq!(e.status, 0, "{mode:?}: {}", e.render());
            let flag = if e.opcode == Opcode::QUERY_PAGES.0 {
                query_pages_in::embedded_cpu_function.get(&e.input)
            } else {
                manage_pages_in::embedded_cpu_function.get(&e.input)
            };
            assert!(flag, "{mode:?}: {}", e.render());
        }
    }
}
