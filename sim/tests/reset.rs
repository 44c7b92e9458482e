//! Function-level reset (`Device::function_reset`, `SimHal::reset`: what
//! `VFIO_DEVICE_RESET` does on open and close) from every HCA state: all
//! firmware objects and pages dropped, a fatal state cleared, the command
//! queue forgotten, the HCA Disabled and initialising again; the memory the
//! host gave may be freed without a violation, and a new bring-up works.

use crate::common::qp::*;
use crate::common::*;
use mlx5_hal::Hal;
use mlx5_regs::consts::op_mod as om;
use mlx5_regs::layouts::*;
use mlx5_regs::{EventMask, Opcode};
use mlx5_sim::{Device, HcaState, Profile, SimConfig, Violation};

/// Where the device is when the reset comes.
#[derive(Debug, Clone, Copy)]
enum Before {
    Disabled,
    Enabled,
    Initialized,
    InitializedStalled,
    TornDown,
    Fatal,
}

const ALL: [Before; 6] = [
    Before::Disabled,
    Before::Enabled,
    Before::Initialized,
    Before::InitializedStalled,
    Before::TornDown,
    Before::Fatal,
];

/// Bring the device to `b` with something of every kind alive where the
/// state allows it; returns the objects the test keeps (their memory).
fn reach(f: &mut Fw, b: Before) -> Vec<Box<dyn std::any::Any>> {
    let mut keep: Vec<Box<dyn std::any::Any>> = Vec::new();
    if matches!(b, Before::Disabled) {
        return keep;
    }
    f.enable();
    if matches!(b, Before::Enabled) {
        assert!(f.set_issi(1).ok());
        let boot = f.query_pages(om::QUERY_PAGES_BOOT);
        assert!(f.give_pages(boot as usize).ok());
        return keep;
    }
    f.init_rest();
    let mode = match f.dev.caps().profile {
        Profile::ConnectX5 => Mode::Fl,
        Profile::ConnectX4Lx => Mode::Roce,
        _ => Mode::FlRoce,
    };
    prepare_mode(f, mode);
    let eq = f.create_eq(6, EventMask::LINUX_ASYNC.bits());
    let scq = f.create_cq(5, eq.eqn);
    let rcq = f.create_cq(5, eq.eqn);
    let key = dma_key(f);
    let rmp = TRmp::new(f, key, 0);
    let a = create_qp(f, Some(4), None, scq.cqn, 0);
    let b_qp = create_qp(f, None, Some(rmp.n), 0, rcq.cqn);
    connect(f, mode, &a, &b_qp, 7);
    let o = f.ok(
        &inp(Opcode::ALLOC_XRCD, alloc_xrcd_in::SIZE),
        alloc_xrcd_out::SIZE,
    );
    assert_ne!(alloc_xrcd_out::xrcd.get(&o), 0);
    // A UMEM too.
    let r = f.hal.alloc_dma(4096).unwrap();
    let mut i = inp(Opcode::CREATE_UMEM, create_umem_in::mtt.len_with(1));
    umem::num_of_mtt
        .set(create_umem_in::umem.get_mut(&mut i), 1)
        .unwrap();
    create_umem_in::mtt.set(&mut i, 0, r.iova() | 3).unwrap();
    f.ok(&i, create_umem_out::SIZE);
    // Traffic in flight: sends waiting for receives (RNR, retry forever).
    let mut a = a;
    let src = f.hal.alloc_dma(4096).unwrap();
    a.post(f, &Wr::send(src.iova(), 64, key));
    f.dev.quiesce();
    assert!(f.dev.qp(a.qpn).unwrap().waiting, "RNR wait pending");
    keep.push(Box::new((eq, scq, rcq, rmp, a, b_qp, r, src)));
    match b {
        Before::InitializedStalled => {
            // A command the firmware never completes.
            f.dev.inject().stall_next(Opcode::QUERY_ISSI.0);
            let slot = f.slot;
            f.token = f.token.wrapping_add(1).max(1);
            f.prepare(slot, &inp(Opcode::QUERY_ISSI, 16), query_issi_out::SIZE);
            f.ring(slot);
            assert!(f.owned_by_hw(slot));
        }
        Before::TornDown => {
            let t = inp(Opcode::TEARDOWN_HCA, teardown_hca_in::SIZE);
            f.ok(&t, teardown_hca_out::SIZE);
            assert!(f.dev.pages_held() > 0);
        }
        Before::Fatal => f.dev.inject().fatal(0x08),
        _ => {}
    }
    keep
}

fn assert_clean(dev: &Device, what: &str) {
    assert_eq!(dev.hca_state(), HcaState::Disabled, "{what}");
    assert_eq!(dev.objects().total(), 0, "{what}: {:?}", dev.objects());
    assert_eq!(dev.pages_held(), 0, "{what}");
    assert!(!dev.is_fatal(), "{what}");
    assert!(!dev.roce_enabled(), "{what}: vport back to power-on");
    let hal = dev.hal();
    assert_eq!(hal.mmio_read32(0x10), 0, "{what}: command queue forgotten");
    assert_eq!(hal.mmio_read32(0x14) & !0xff, 0, "{what}");
    assert_eq!(
        hal.mmio_read32(0x238) >> 24,
        0,
        "{what}: health buffer clear"
    );
}

/// `SimConfig::default().fw_init_delay_us`.
const FW_INIT_DELAY_US: u64 = 1000;

fn check(cfg: SimConfig, b: Before) {
    assert_eq!(cfg.fw_init_delay_us, FW_INIT_DELAY_US);
    let mut f = Fw::new(cfg);
    let keep = reach(&mut f, b);
    let before = f.dev.objects();
    let pages = f.dev.pages_held();
    let reset_at_ns = f.dev.now_ns();
    let r = f.hal.reset();
    assert_eq!(r.objects, before, "{b:?}");
    assert_eq!(r.pages, pages, "{b:?}");
    assert_eq!(r.was_fatal, matches!(b, Before::Fatal), "{b:?}");
    let dev = f.dev.clone();
    assert_clean(&dev, &format!("{b:?}"));
    // Firmware initialises again: the initializing bit is set for
    // `fw_init_delay_us` after the reset. In threaded mode that is real time,
    // and a loaded machine may let it pass before the read; then the clock
    // must show it did.
    let initializing = dev.hal().mmio_read32(0x1fc) >> 31 == 1;
    let since_reset_ns = dev.now_ns() - reset_at_ns;
    assert!(
        initializing || since_reset_ns >= FW_INIT_DELAY_US * 1000,
        "{b:?}: ready {since_reset_ns} ns after the reset"
    );
    // Everything the host gave may be freed now.
    drop(keep);
    drop(f);
    let bad: Vec<_> = dev
        .violations()
        .into_iter()
        .filter(|v| matches!(v, Violation::FreedWhileInUse(_)))
        .collect();
    assert!(bad.is_empty(), "{b:?}: {bad:?}");
    // And the function comes up again from scratch.
    let hal = dev.hal();
    let mut waited = 0;
    while hal.mmio_read32(0x1fc) >> 31 != 0 {
        hal.delay_us(100);
        waited += 100;
        assert!(waited < 2_000_000, "{b:?}: firmware init after reset");
    }
    let cmdq = hal.alloc_dma(4096).unwrap();
    hal.mmio_write32(0x10, (cmdq.iova() >> 32) as u32);
    hal.mmio_write32(0x14, cmdq.iova() as u32);
    let mut f2 = Fw::adopt(dev.clone(), cmdq);
    f2.init(1);
    let uar = f2.alloc_uar();
    assert!(uar >= 16, "{b:?}");
    assert_eq!(dev.hca_state(), HcaState::Initialized);
}

#[test]
fn reset_from_every_state_leaves_the_model_clean() {
    for b in ALL {
        check(SimConfig::profile(Profile::ConnectX5), b);
    }
}

#[test]
fn reset_from_every_state_threaded() {
    for b in ALL {
        check(SimConfig::profile(Profile::ConnectX6Dx).threaded(), b);
    }
}

#[test]
fn reset_counts_and_is_idempotent() {
    let f = Fw::default();
    assert_eq!(f.dev.resets(), 0);
    let r1 = f.dev.function_reset();
    let r2 = f.hal.reset();
    assert_eq!(f.dev.resets(), 2);
    assert_eq!(r1.objects.total() + r2.objects.total(), 0);
    assert_eq!(r2.hca_state, Some(HcaState::Disabled));
}
