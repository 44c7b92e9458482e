//! Fault sweep: each scenario runs once cleanly to record the
//! firmware commands it issues, then once per command with exactly that
//! command failed by the model. Every run must return a typed error naming
//! that opcode, status and syndrome; every object must be usable or cleanly
//! gone; after teardown the model holds no object and no page.

use mlx5_driver::cq::{CqOptions, Cqe};
use mlx5_driver::mkey::{Mkey, MkeyAccess};
use mlx5_driver::srq::{RecvRequest, Sge};
use mlx5_driver::{Error, Hca};
use mlx5_hal::Hal;
use mlx5_regs::{CmdStatus, Opcode};
use mlx5_sim::{Device, SimConfig, SimHal};
use mlx5_tests::config;

type Scenario = fn(&Device) -> Result<(), Error>;

/// Bring up, run `body`, tear down; the first error wins, teardown always runs.
fn with_hca(
    dev: &Device,
    body: impl FnOnce(&Hca<SimHal>) -> Result<(), Error>,
) -> Result<(), Error> {
    let hca = Hca::bring_up(dev.hal(), config())?;
    let r = body(&hca);
    let t = hca.teardown().map(|_| ());
    r.and(t)
}

/// Destroy a CQ; if firmware refuses, the CQ is handed back: report the
/// error and destroy it again (the injected fault is one-shot), so nothing
/// leaks.
macro_rules! destroy_cq {
    ($hca:expr, $cq:expr) => {
        match $hca.destroy_cq($cq) {
            Ok(()) => Ok(()),
            Err(failed) => {
                let (cq, e) = failed.into_parts();
                $hca.destroy_cq(cq)?;
                Err(e)
            }
        }
    };
}

fn bring_up_only(dev: &Device) -> Result<(), Error> {
    with_hca(dev, |_| Ok(()))
}

fn cq_lifecycle(dev: &Device) -> Result<(), Error> {
    with_hca(dev, |hca| {
        let mut cq = hca.create_cq(100, CqOptions::default())?;
        let r = (|| {
            for i in 0..5u16 {
                dev.traffic()
                    .complete_send(cq.cqn(), 1, i, i as u32)
                    .unwrap();
            }
            let mut out = [Cqe::EMPTY; 8];
            assert_eq!(cq.poll(&mut out), 5);
            hca.arm_cq(&mut cq, false)?;
            hca.query_cq(&cq)?;
            hca.modify_cq_moderation(&cq, 16, 8)?;
            Ok(())
        })();
        let d = destroy_cq!(hca, cq);
        r.and(d)
    })
}

fn resize(dev: &Device) -> Result<(), Error> {
    with_hca(dev, |hca| {
        let mut cq = hca.create_cq(15, CqOptions::default())?;
        let mut seq = 0u32;
        let r = (|| {
            let mut expect = 0u32;
            let mut check = |cq: &mut mlx5_driver::cq::Cq<SimHal>| {
                let mut out = [Cqe::EMPTY; 64];
                let n = cq.poll(&mut out);
                for c in &out[..n] {
                    assert_eq!(c.byte_len, expect, "order kept across failed resizes");
                    expect += 1;
                }
            };
            for _ in 0..10 {
                dev.traffic()
                    .complete_send(cq.cqn(), 1, seq as u16, seq)
                    .unwrap();
                seq += 1;
            }
            let grow = hca.resize_cq(&mut cq, 1000);
            check(&mut cq);
            grow?;
            for _ in 0..10 {
                dev.traffic()
                    .complete_send(cq.cqn(), 1, seq as u16, seq)
                    .unwrap();
                seq += 1;
            }
            let shrink = hca.resize_cq(&mut cq, 31);
            check(&mut cq);
            shrink?;
            assert_eq!(expect, seq, "every completion polled once");
            Ok(())
        })();
        let d = destroy_cq!(hca, cq);
        r.and(d)
    })
}

fn srq_lifecycle_with(dev: &Device, arm_limit: bool) -> Result<(), Error> {
    with_hca(dev, |hca| {
        let mut cq = hca.create_cq(63, CqOptions::default())?;
        let r = (|| {
            let mut srq = hca.create_srq(15, 1, Some(&mut cq))?;
            let body = (|| {
                let buf = dev.hal().alloc_dma(16 * 4096).unwrap();
                let sges: Vec<[Sge; 1]> = (0..10u64)
                    .map(|i| {
                        [Sge {
                            addr: buf.iova() + i * 4096,
                            length: 4096,
                            lkey: hca.default_lkey(),
                        }]
                    })
                    .collect();
                let reqs: Vec<RecvRequest> = sges
                    .iter()
                    .zip(0u64..)
                    .map(|(s, wr_id)| RecvRequest { wr_id, sges: s })
                    .collect();
                srq.post(&reqs).unwrap();
                if arm_limit {
                    hca.arm_srq_limit(&mut srq, 7)?;
                }
                for _ in 0..4 {
                    dev.traffic()
                        .deliver(srq.srqn(), cq.cqn(), 5, b"payload")
                        .unwrap();
                }
                hca.poll_events()?;
                while hca.next_event().is_some() {}
                let mut out = [Cqe::EMPTY; 8];
                let n = cq.poll(&mut out);
                for c in &out[..n] {
                    srq.complete(c.wqe_counter).unwrap();
                }
                hca.query_srq(&srq)?;
                if arm_limit {
                    hca.arm_srq_limit(&mut srq, 3)?;
                    hca.arm_srq_limit(&mut srq, 0)?;
                }
                Ok(())
            })();
            let d = match hca.destroy_srq(srq, Some(&mut cq)) {
                Ok(()) => Ok(()),
                Err(failed) => {
                    let (srq, e) = failed.into_parts();
                    hca.destroy_srq(srq, Some(&mut cq))?;
                    Err(e)
                }
            };
            body.and(d)
        })();
        let d = destroy_cq!(hca, cq);
        r.and(d)
    })
}

fn srq_lifecycle(dev: &Device) -> Result<(), Error> {
    srq_lifecycle_with(dev, false)
}

fn srq_limit(dev: &Device) -> Result<(), Error> {
    srq_lifecycle_with(dev, true)
}

/// Destroy a memory key; if firmware refuses, destroy it again (the
/// injected fault is one-shot) and report the first error.
fn destroy_key(hca: &Hca<SimHal>, key: Mkey) -> Result<(), Error> {
    match hca.destroy_mkey(key) {
        Ok(()) => Ok(()),
        Err(failed) => {
            let (key, e) = failed.into_parts();
            hca.destroy_mkey(key)?;
            Err(e)
        }
    }
}

/// `reg_mr` / `dereg_mr` at the `Hca` level: translated keys over 4 KiB
/// (one page) and 1 MiB (a page list in the command's mailboxes) with
/// remote rights, a local-only physical key, each destroyed; the buffers
/// freed after teardown must leave no DMA memory behind.
fn mr_lifecycle(dev: &Device) -> Result<(), Error> {
    let small = dev.hal().alloc_dma(4096).expect("dma");
    let big = dev.hal().alloc_dma(1 << 20).expect("dma");
    let r = with_hca(dev, |hca| {
        let a = hca.register(
            small.iova(),
            4096,
            MkeyAccess::LOCAL_WRITE | MkeyAccess::REMOTE_WRITE,
        )?;
        let b = match hca.register(
            big.iova(),
            1 << 20,
            MkeyAccess::LOCAL_WRITE | MkeyAccess::REMOTE_READ | MkeyAccess::REMOTE_WRITE,
        ) {
            Ok(b) => b,
            Err(e) => return destroy_key(hca, a).and(Err(e)),
        };
        let local = match hca.create_mkey(MkeyAccess::LOCAL_READ | MkeyAccess::LOCAL_WRITE) {
            Ok(k) => k,
            Err(e) => return destroy_key(hca, a).and(destroy_key(hca, b)).and(Err(e)),
        };
        let r = destroy_key(hca, b);
        let r = r.and(destroy_key(hca, a));
        r.and(destroy_key(hca, local))
    });
    drop(small);
    drop(big);
    assert_eq!(dev.dma_bytes_live(), 0, "DMA memory left after teardown");
    r
}

fn device(issi: u16) -> Device {
    Device::new(SimConfig {
        issi_supported: if issi == 0 { 0b01 } else { 0b11 },
        ..SimConfig::default()
    })
}

/// Commands whose failure the driver survives by design, as Linux does,
/// with the reason. The run must then succeed completely (and clean).
const TOLERATED: &[(Opcode, &str)] = &[
    // docs/firmware.md §4.1 step 6: QUERY_ISSI failing with a firmware status means the
    // device predates ISSI: the driver continues at ISSI 0.
    (Opcode::QUERY_ISSI, "ISSI 0 fallback"),
];

/// Run `scenario` cleanly, then once per command it issued with that command
/// failed; returns how many faulted runs were made.
fn sweep(name: &str, issi: u16, scenario: Scenario) -> usize {
    let dev = device(issi);
    scenario(&dev).unwrap_or_else(|e| panic!("{name}: clean run failed: {e}"));
    assert_eq!(dev.objects().total(), 0, "{name}: clean run leaked objects");
    assert_eq!(dev.pages_held(), 0, "{name}: clean run leaked pages");
    let commands: Vec<(u16, usize)> = {
        let mut seen = std::collections::HashMap::<u16, usize>::new();
        dev.trace()
            .iter()
            .map(|t| {
                let n = seen.entry(t.opcode).or_default();
                *n += 1;
                (t.opcode, *n - 1)
            })
            .collect()
    };
    assert!(
        commands.len() > 10,
        "{name}: only {} commands",
        commands.len()
    );
    for (k, &(opcode, nth)) in commands.iter().enumerate() {
        let op = Opcode(opcode);
        let ctx = format!("{name} ISSI {issi}: failing command #{k} {op:?} (occurrence {nth})");
        let dev = device(issi);
        let syndrome = 0x5eed_0000 | k as u32;
        dev.inject()
            .fail_nth(opcode, nth, CmdStatus::BAD_PARAM_ERR.0, syndrome);
        let result = scenario(&dev);
        let tolerated = TOLERATED.iter().any(|(o, _)| *o == op);
        let err = match result {
            Ok(()) if tolerated => {
                assert_eq!(dev.objects().total(), 0, "{ctx}: objects left");
                assert_eq!(dev.pages_held(), 0, "{ctx}: pages left");
                continue;
            }
            Ok(()) => panic!("{ctx}: the scenario succeeded; the failure was swallowed"),
            Err(e) => e,
        };
        match err {
            Error::Command {
                opcode: got,
                status,
                syndrome: s,
                ..
            } => {
                assert_eq!(got, op, "{ctx}: {err}");
                assert_eq!(status, CmdStatus::BAD_PARAM_ERR, "{ctx}");
                assert_eq!(s, syndrome, "{ctx}");
            }
            other => panic!("{ctx}: expected the command error, got {other}"),
        }
        assert_eq!(
            dev.objects().total(),
            0,
            "{ctx}: objects left {:?}",
            dev.objects()
        );
        assert_eq!(dev.pages_held(), 0, "{ctx}: pages left");
        assert!(
            dev.iommu_faults().is_empty(),
            "{ctx}: IOMMU faults {:?}",
            dev.iommu_faults()
        );
    }
    commands.len()
}

#[test]
fn every_command_of_bring_up_and_teardown_failed_once() {
    let n = sweep("bring-up", 1, bring_up_only) + sweep("bring-up", 0, bring_up_only);
    println!("bring-up/teardown: {n} faulted runs");
}

#[test]
fn every_command_of_the_cq_lifecycle_failed_once() {
    println!(
        "cq lifecycle: {} faulted runs",
        sweep("cq", 1, cq_lifecycle)
    );
}

#[test]
fn every_command_of_a_resize_scenario_failed_once() {
    println!("resize: {} faulted runs", sweep("resize", 1, resize));
}

#[test]
fn every_command_of_the_srq_lifecycle_failed_once_at_both_issis() {
    let n = sweep("srq", 1, srq_lifecycle) + sweep("srq", 0, srq_lifecycle);
    println!("srq lifecycle: {n} faulted runs");
}

#[test]
fn every_command_of_the_limit_scenario_failed_once_at_both_issis() {
    let n = sweep("limit", 1, srq_limit) + sweep("limit", 0, srq_limit);
    println!("limit: {n} faulted runs");
}

#[test]
fn every_command_of_reg_mr_and_dereg_mr_failed_once_at_both_issis() {
    let n = sweep("mr", 1, mr_lifecycle) + sweep("mr", 0, mr_lifecycle);
    println!("reg_mr/dereg_mr: {n} faulted runs");
}
