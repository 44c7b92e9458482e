//! Fault injection and the threaded execution mode.

use crate::common::*;

use mlx5_hal::Hal;
use mlx5_regs::layouts::*;
use mlx5_regs::{CmdStatus, EventMask, EventType, Opcode};
use mlx5_sim::{Device, SimConfig, Violation};

fn nop() -> Vec<u8> {
    inp(Opcode::NOP, 16)
}

#[test]
fn fail_next_and_fail_nth() {
    let mut f = Fw::default();
    f.enable();
    f.dev
        .inject()
        .fail_next(Opcode::NOP.0, CmdStatus::RES_BUSY.0, 0xdead);
    f.dev
        .inject()
        .fail_nth(Opcode::NOP.0, 2, CmdStatus::INT_ERR.0, 0xbeef);
    let o = f.exec(&nop(), 16);
    assert_eq!((o.status, o.syndrome), (CmdStatus::RES_BUSY.0, 0xdead));
    assert!(f.exec(&nop(), 16).ok());
    let o = f.exec(&nop(), 16);
    assert_eq!((o.status, o.syndrome), (CmdStatus::INT_ERR.0, 0xbeef));
    assert!(f.exec(&nop(), 16).ok());
}

#[test]
fn stall_never_completes() {
    let mut f = Fw::default();
    f.enable();
    f.dev.inject().stall_next(Opcode::NOP.0);
    assert!(f.try_exec(0, &nop(), 16).is_none());
    assert!(f.owned_by_hw(0));
    assert!(f.dev.trace().last().unwrap().stalled);
    assert!(f.try_exec(1, &nop(), 16).unwrap().ok(), "other slots work");
}

#[test]
fn delayed_completions_use_virtual_time() {
    let mut f = Fw::default();
    f.enable();
    f.dev.inject().delay_completions_us(30_000_000); // 30 s
    f.token = f.token.wrapping_add(1).max(1);
    f.prepare(0, &nop(), 16);
    f.ring(0);
    assert!(f.owned_by_hw(0));
    let t0 = f.hal.now_ns();
    f.hal.delay_us(29_000_000);
    assert!(f.owned_by_hw(0));
    f.hal.delay_us(1_000_001);
    assert!(!f.owned_by_hw(0));
    assert!(f.hal.now_ns() - t0 >= 30_000_000_000);
    let t = f.dev.trace();
    assert!(t.last().unwrap().duration_ns >= 30_000_000_000);
    f.dev.inject().delay_completions_us(0);
    assert!(f.exec(&nop(), 16).ok());
}

#[test]
fn fatal_health_stops_commands() {
    let mut f = Fw::default();
    f.enable();
    f.dev.inject().fatal(0x08);
    assert_eq!(f.hal.mmio_read32(0x1010) >> 24, 0x08);
    let c0 = f.hal.mmio_read32(0x1010) & 0xff_ffff;
    f.hal.delay_us(10_000);
    assert_eq!(
        f.hal.mmio_read32(0x1010) & 0xff_ffff,
        c0,
        "heartbeat stopped"
    );
    assert!(f.try_exec(0, &nop(), 16).is_none());
    assert!(f.dev.is_fatal());
}

#[test]
fn fw_init_never_finishes() {
    let dev = Device::new(SimConfig::default());
    dev.inject().fw_init_never_finishes();
    let hal = dev.hal();
    hal.delay_us(120_000_000);
    assert_eq!(hal.mmio_read32(0x1fc) >> 31, 1);
}

#[test]
fn page_requests_storm_and_on_next() {
    let mut f = Fw::up(1);
    // Requests before any EQ subscribes are queued.
    f.dev.inject().page_request(4);
    let mut eq = f.create_eq(
        7,
        EventMask::PAGE_REQUEST.bits() | EventMask::LINUX_ASYNC.bits(),
    );
    let evs = f.drain_eq(&mut eq);
    assert_eq!(evs.len(), 1);
    assert_eq!(eqe_type(&evs[0]), EventType::PAGE_REQUEST.0);
    assert_eq!(
        pages_req_event::num_pages.get(eqe::event_data.get(&evs[0])) as i32,
        4
    );
    assert_eq!(f.query_pages(3), 4);
    assert!(f.give_pages(4).ok());
    // Negative request: the firmware returns pages.
    f.dev.inject().page_request(-2);
    let evs = f.drain_eq(&mut eq);
    assert_eq!(
        pages_req_event::num_pages.get(eqe::event_data.get(&evs[0])) as i32,
        -2
    );
    let held = f.dev.pages_held();
    let (o, pages) = f.take_pages(10);
    assert!(o.ok());
    assert_eq!(pages.len(), 2);
    assert_eq!(f.dev.pages_held(), held - 2);
    // Storm.
    f.dev.inject().page_request_storm(5, 1);
    assert_eq!(f.drain_eq(&mut eq).len(), 5);
    assert!(f.give_pages(5).ok());
    // "Cannot give" answer for a pending request.
    f.dev.inject().page_request(3);
    f.drain_eq(&mut eq);
    let mut i = inp(Opcode::MANAGE_PAGES, manage_pages_in::SIZE);
    cmd_in::op_mod.set(&mut i, 0).unwrap();
    f.ok(&i, 16);
    assert_eq!(f.dev.pages_required().2, 0);
    // A command held until its pages arrive (on another slot).
    f.dev.inject().page_request_on_next(Opcode::ALLOC_PD.0, 2);
    f.token = f.token.wrapping_add(1).max(1);
    f.prepare(0, &inp(Opcode::ALLOC_PD, 16), 16);
    f.ring(0);
    f.hal.delay_us(1000);
    assert!(f.owned_by_hw(0), "waits for pages");
    let evs = f.drain_eq(&mut eq);
    assert_eq!(
        pages_req_event::num_pages.get(eqe::event_data.get(&evs[0])) as i32,
        2
    );
    f.slot = 31;
    assert!(f.give_pages(2).ok());
    assert!(!f.owned_by_hw(0), "completes once the pages were given");
}

#[test]
fn threaded_mode_completes_asynchronously() {
    let cfg = SimConfig {
        fw_init_delay_us: 2000,
        ..SimConfig::default()
    }
    .threaded();
    let mut f = Fw::new(cfg);
    f.token = 7;
    f.prepare(0, &inp(Opcode::ENABLE_HCA, enable_hca_in::SIZE), 16);
    f.ring(0);
    // The doorbell write returned before the device ran the command.
    assert!(
        f.owned_by_hw(0),
        "a driver expecting instant completion fails"
    );
    let o = f.wait(0, 2_000_000).expect("device thread completes it");
    assert!(o.ok());
    // Full flows work in threaded mode too.
    f.init_rest();
    let mut eq = f.create_eq(6, EventMask::LINUX_ASYNC.bits());
    let mut cq = f.create_cq(4, eq.eqn);
    f.arm_cq(&cq, false);
    f.dev.traffic().complete_send(cq.cqn, 1, 0, 0).unwrap();
    f.dev.quiesce();
    assert!(f.poll_cq(&mut cq).is_some());
    let evs = f.drain_eq(&mut eq);
    assert_eq!(evs.len(), 1, "arm was processed by the device thread");
    assert!(f
        .dev
        .violations()
        .iter()
        .all(|v| !matches!(v, Violation::Doorbell(_))));
}

#[test]
fn dma_limit_and_iova_unlike_host_addresses() {
    let dev = Device::new(SimConfig {
        dma_limit: 8 * 4096,
        ..SimConfig::default()
    });
    let hal = dev.hal();
    let a = hal.alloc_dma(4 * 4096).unwrap();
    assert_ne!(a.iova(), a.as_ptr() as u64);
    assert!(a.iova() >= 0x00a5_0000_0000_0000);
    assert_eq!(a.iova() % 4096, 0);
    assert_eq!(a.read_u8(100), 0);
    let _b = hal.alloc_dma(4 * 4096).unwrap();
    assert!(hal.alloc_dma(1).is_err());
    drop(a);
    assert!(hal.alloc_dma(4096).is_ok());
    let other = Device::new(SimConfig {
        seed: 99,
        ..SimConfig::default()
    });
    assert_ne!(other.iova_base(), dev.iova_base());
}
