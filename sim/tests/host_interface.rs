//! The device host interface (`mlx5_sim::host`): DMA through a host's
//! callbacks, the interrupt hook, the host clock, reset, and MMIO entry
//! points that record a bad access instead of panicking.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::common::*;
use mlx5_regs::layouts::*;
use mlx5_regs::{EventType, Opcode};
use mlx5_sim::host::DeviceMemory;
use mlx5_sim::{Device, HcaState, SimConfig, Violation};

/// Guest memory as a VMM holds it: a byte array at guest-physical
/// `GPA_BASE`, reached only by copies. `refuse` makes every access fail
/// (bus mastering off / IOMMU fault).
#[derive(Clone)]
struct GuestMemory {
    bytes: Arc<Mutex<Vec<u8>>>,
    refuse: Arc<AtomicBool>,
}

const GPA_BASE: u64 = 0x4000_0000;
const GUEST_BYTES: usize = 1 << 20;

impl GuestMemory {
    fn new() -> GuestMemory {
        GuestMemory {
            bytes: Arc::new(Mutex::new(vec![0; GUEST_BYTES])),
            refuse: Arc::new(AtomicBool::new(false)),
        }
    }
    fn range(&self, iova: u64, len: usize) -> Option<std::ops::Range<usize>> {
        if self.refuse.load(Ordering::SeqCst) {
            return None;
        }
        let off = usize::try_from(iova.checked_sub(GPA_BASE)?).ok()?;
        let end = off.checked_add(len)?;
        (end <= GUEST_BYTES).then_some(off..end)
    }
    fn put(&self, gpa: u64, data: &[u8]) {
        let r = self.range(gpa, data.len()).unwrap();
        self.bytes.lock().unwrap()[r].copy_from_slice(data);
    }
    fn get(&self, gpa: u64, len: usize) -> Vec<u8> {
        let r = self.range(gpa, len).unwrap();
        self.bytes.lock().unwrap()[r].to_vec()
    }
}

impl DeviceMemory for GuestMemory {
    fn read(&self, iova: u64, buf: &mut [u8]) -> bool {
        let Some(r) = self.range(iova, buf.len()) else {
            return false;
        };
        buf.copy_from_slice(&self.bytes.lock().unwrap()[r]);
        true
    }
    fn write(&self, iova: u64, data: &[u8]) -> bool {
        let Some(r) = self.range(iova, data.len()) else {
            return false;
        };
        self.bytes.lock().unwrap()[r].copy_from_slice(data);
        true
    }
    fn mapped(&self, iova: u64, len: usize) -> bool {
        self.range(iova, len).is_some()
    }
}

const CMDQ_GPA: u64 = GPA_BASE;

/// A hosted device, its guest memory and the vectors its hook saw.
fn hosted() -> (Device, GuestMemory, Arc<Mutex<Vec<u16>>>) {
    let mem = GuestMemory::new();
    let irqs = Arc::new(Mutex::new(Vec::new()));
    let seen = irqs.clone();
    let dev = Device::hosted(
        SimConfig::default(),
        Box::new(mem.clone()),
        Box::new(move |v| seen.lock().unwrap().push(v)),
    );
    (dev, mem, irqs)
}

/// One command through a command queue in guest memory, the way a guest
/// driver issues it: entry at CMDQ_GPA slot 0, doorbell bit 0, at host
/// time `now`. Returns the entry as the device left it.
fn guest_command(dev: &Device, mem: &GuestMemory, now: u64, input: &[u8]) -> Vec<u8> {
    let mut e = vec![0u8; cmd_queue_entry::SIZE];
    cmd_queue_entry::r#type.set(&mut e, 7).unwrap();
    cmd_queue_entry::input_length
        .set(&mut e, input.len() as u32)
        .unwrap();
    cmd_queue_entry::command_input_inline_data.get_mut(&mut e)[..input.len()]
        .copy_from_slice(input);
    cmd_queue_entry::output_length.set(&mut e, 16).unwrap();
    cmd_queue_entry::ownership.set(&mut e, true).unwrap();
    mem.put(CMDQ_GPA, &e);
    dev.host_mmio_write(now, 0x10, 4, CMDQ_GPA >> 32);
    dev.host_mmio_write(now, 0x14, 4, CMDQ_GPA & 0xffff_f000);
    dev.host_mmio_write(now, 0x18, 4, 1);
    mem.get(CMDQ_GPA, cmd_queue_entry::SIZE)
}

#[test]
fn commands_run_through_the_hosts_dma_callbacks() {
    let (dev, mem, _) = hosted();
    // The initializing bit follows the host clock: set at power-on, clear
    // once the firmware's start-up time passed.
    assert_ne!(dev.host_mmio_read(0, 0x1fc, 4) >> 31, 0);
    let now = 10_000_000_000;
    assert_eq!(dev.host_mmio_read(now, 0x1fc, 4) >> 31, 0);
    let e = guest_command(
        &dev,
        &mem,
        now,
        &inp(Opcode::ENABLE_HCA, enable_hca_in::SIZE),
    );
    assert!(
        !cmd_queue_entry::ownership.get(&e),
        "the device returned the entry"
    );
    assert_eq!(cmd_queue_entry::status.get(&e), 0);
    let out = cmd_queue_entry::command_output_inline_data.get(&e);
    assert_eq!(cmd_out::status.get(out), 0, "ENABLE_HCA succeeded");
    assert_eq!(dev.hca_state(), HcaState::Enabled);
    assert!(dev.iommu_faults().is_empty());
    // The model's own allocator is off: memory is the guest's.
    assert_eq!(dev.dma_bytes_live(), 0);
    // An access the host refuses is the model's IOMMU fault.
    mem.refuse.store(true, Ordering::SeqCst);
    dev.host_mmio_write(now, 0x18, 4, 1);
    let faults = dev.iommu_faults();
    assert_eq!(faults.len(), 1, "{faults:?}");
    assert_eq!(faults[0].iova, CMDQ_GPA);
}

#[test]
fn the_health_counter_and_timer_follow_the_host_clock() {
    let (dev, _, _) = hosted();
    let c1 = dev.host_mmio_read(1_000_000_000, 0x1010, 4);
    let c2 = dev.host_mmio_read(3_000_000_000, 0x1010, 4);
    assert_ne!(c1, c2, "the health counter advances with host time");
    // The internal timer ticks at device_frequency_khz (156.25 MHz on the
    // ConnectX-5 profile): 3 s are 468,750,000 ticks.
    let t = (dev.host_mmio_read(3_000_000_000, 0x1000, 4) << 32)
        | dev.host_mmio_read(3_000_000_000, 0x1004, 4);
    assert_eq!(t, 3 * 156_250_000);
    // Time never goes backwards.
    dev.host_tick(1);
    assert!(dev.now_ns() >= 3_000_000_000);
    assert_eq!(dev.host_next_deadline_ns(), None, "nothing delayed");
}

#[test]
fn bad_mmio_accesses_are_recorded_never_panics() {
    let (dev, _, _) = hosted();
    let bar = 1u64 << (dev.caps().uar_sz as u32 + 12);
    assert_eq!(dev.host_mmio_read(0, bar, 4), 0xffff_ffff);
    assert_eq!(dev.host_mmio_read(0, 2, 4), 0xffff_ffff);
    assert_eq!(dev.host_mmio_read(0, 0, 3), 0xff_ffff);
    assert_eq!(dev.host_mmio_read(0, u64::MAX - 3, 4), 0xffff_ffff);
    dev.host_mmio_write(0, bar - 4, 8, 0);
    dev.host_mmio_write(0, 0x18, 1, 1);
    let v = dev.violations();
    assert_eq!(
        v.iter().filter(|v| matches!(v, Violation::Mmio(_))).count(),
        6,
        "{v:?}"
    );
    assert_eq!(dev.hca_state(), HcaState::Disabled);
}

#[test]
fn narrow_reads_return_their_bytes_of_the_big_endian_word() {
    // Linux reads the health buffer's rfr_severity and synd with ioread8
    // and ext_synd with ioread16be (`drivers/net/ethernet/mellanox/mlx5/
    // core/health.c`): a healthy device answers 0 there, and any narrow
    // read is the matching bytes of the 32-bit register.
    let (dev, _, _) = hosted();
    let now = 10_000_000_000;
    let word = dev.host_mmio_read(now, 0, 4);
    assert_eq!(dev.host_mmio_read(now, 0, 1), word >> 24);
    assert_eq!(dev.host_mmio_read(now, 1, 1), (word >> 16) & 0xff);
    assert_eq!(dev.host_mmio_read(now, 3, 1), word & 0xff);
    assert_eq!(dev.host_mmio_read(now, 0, 2), word >> 16);
    assert_eq!(dev.host_mmio_read(now, 2, 2), word & 0xffff);
    // Health buffer (0x200-0x23f): rfr_severity at 0x238, synd at 0x23d,
    // ext_synd at 0x23e are all zero on a healthy device.
    assert_eq!(dev.host_mmio_read(now, 0x238, 1), 0);
    assert_eq!(dev.host_mmio_read(now, 0x23d, 1), 0);
    assert_eq!(dev.host_mmio_read(now, 0x23e, 2), 0);
    assert!(dev.violations().is_empty(), "{:?}", dev.violations());
}

fn gen_eqe(f: &mut Fw, eqn: u8) {
    let mut i = inp(Opcode::GEN_EQE, gen_eqe_in::SIZE);
    gen_eqe_in::eq_number.set(&mut i, eqn).unwrap();
    let e = gen_eqe_in::eqe.get_mut(&mut i);
    eqe::event_type.set(e, EventType::PORT_CHANGE.0).unwrap();
    f.ok(&i, gen_eqe_out::SIZE);
}

#[test]
fn the_hook_sees_every_eqe_into_an_armed_eq_and_every_arm_with_eqes_pending() {
    let mut f = Fw::up(1);
    let irqs = Arc::new(Mutex::new(Vec::new()));
    let seen = irqs.clone();
    f.dev
        .host_set_irq_hook(Box::new(move |v| seen.lock().unwrap().push(v)));
    let mut eq = f.create_eq(4, 0); // armed by create_eq
    let count = |irqs: &Arc<Mutex<Vec<u16>>>| irqs.lock().unwrap().len();
    for round in 1..=3 {
        // An EQE into the armed EQ: one interrupt (vector 0, eqc.intr).
        gen_eqe(&mut f, eq.eqn);
        assert_eq!(count(&irqs), 2 * round - 1, "EQE into an armed EQ");
        // The EQ fired: a second EQE raises none until the next arm.
        gen_eqe(&mut f, eq.eqn);
        assert_eq!(count(&irqs), 2 * round - 1, "not armed");
        // Arm with both EQEs beyond the consumer index: fires at once.
        f.eq_doorbell(&eq, true);
        assert_eq!(count(&irqs), 2 * round, "arm with EQEs pending");
        // Consume them and arm with nothing pending: no interrupt.
        assert_eq!(f.drain_eq(&mut eq).len(), 2);
        f.eq_doorbell(&eq, true);
        assert_eq!(count(&irqs), 2 * round, "arm with nothing pending");
    }
    assert!(irqs.lock().unwrap().iter().all(|&v| v == 0));
    assert_eq!(
        f.dev.interrupts(0),
        count(&irqs) as u64,
        "hook and latch agree"
    );
}

#[test]
fn host_reset_returns_the_function_to_power_on() {
    let (dev, mem, irqs) = hosted();
    let now = 10_000_000_000;
    guest_command(
        &dev,
        &mem,
        now,
        &inp(Opcode::ENABLE_HCA, enable_hca_in::SIZE),
    );
    assert_eq!(dev.hca_state(), HcaState::Enabled);
    let r = dev.host_reset();
    assert_eq!(r.hca_state, Some(HcaState::Enabled));
    assert_eq!(dev.hca_state(), HcaState::Disabled);
    assert_eq!(
        dev.host_mmio_read(now, 0x14, 4) & 0xffff_f000,
        0,
        "command queue forgotten"
    );
    assert_ne!(
        dev.host_mmio_read(now, 0x1fc, 4) >> 31,
        0,
        "initializing again"
    );
    let later = now + 5_000_000_000;
    assert_eq!(dev.host_mmio_read(later, 0x1fc, 4) >> 31, 0);
    // The hooks survive the reset: the function works again.
    let e = guest_command(
        &dev,
        &mem,
        later,
        &inp(Opcode::ENABLE_HCA, enable_hca_in::SIZE),
    );
    assert_eq!(
        cmd_out::status.get(cmd_queue_entry::command_output_inline_data.get(&e)),
        0
    );
    assert!(irqs.lock().unwrap().is_empty());
}

#[test]
fn a_hosted_uar_doorbell_is_posted_and_runs_at_the_hosts_timer() {
    let (dev, _mem, _) = hosted();
    let now = 10_000_000_000;
    assert_eq!(dev.host_mmio_read(now, 0x1fc, 4) >> 31, 0);
    assert_eq!(dev.host_next_deadline_ns(), None, "nothing to do");
    // A doorbell to UAR page 16, which nobody allocated: the device would
    // record it as a violation once it processes the write.
    let uar = 16 * 4096;
    dev.host_mmio_write(now, uar + 0x20, 4, 0x1234);
    assert!(
        dev.violations().is_empty(),
        "posted: not run inside the write"
    );
    let due = dev
        .host_next_deadline_ns()
        .expect("the host's timer is armed");
    assert!(due > now, "{due} after {now}");
    dev.host_tick(due - 1);
    assert!(dev.violations().is_empty(), "not yet due");
    dev.host_tick(due);
    assert_eq!(dev.violations().len(), 1, "run at the deadline");
    assert_eq!(dev.host_next_deadline_ns(), None);
    // A write outside the UAR pages runs at once, after the posted ones
    // (program order): the second doorbell's violation comes first.
    dev.host_mmio_write(due, uar + 0x20, 4, 0x5678);
    assert_eq!(dev.violations().len(), 1);
    dev.host_mmio_write(due, 0x10, 4, 0);
    let v = dev.violations();
    assert_eq!(
        v.len(),
        2,
        "the posted doorbell ran before the register write: {v:?}"
    );
    assert!(matches!(v[1], Violation::UarDoorbell(_)), "{v:?}");
}
