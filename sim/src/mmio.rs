//! BAR0 as the driver sees it: the initialization segment and health
//! buffer (`mlx5_ifc.h` `initial_seg`, `health_buffer`), MMIO writes (queued
//! in threaded mode) and the UAR doorbells of EQs, CQs and QPs (Linux
//! `include/linux/mlx5/doorbell.h`, `core/eq.c`, `drivers/infiniband/hw/mlx5/wr.c`).

use mlx5_regs::consts::ctx;
use mlx5_regs::doorbell as db;
use mlx5_regs::layouts::{health_buffer, initial_seg};

use crate::cmdif::{LOG_CMDQ_SIZE, LOG_CMDQ_STRIDE};
use crate::objects::FIRST_UAR;
use crate::state::{MmioWrite, State, THREADED_LATENCY_NS};
use crate::Violation;

impl State {
    pub fn bar0_size(&self) -> usize {
        (1usize << self.caps.uar_sz) * db::UAR_PAGE_SIZE
    }

    /// The initialization segment image (first 0x1020 bytes of BAR0).
    fn init_seg_image(&self) -> Vec<u8> {
        let mut b = vec![0u8; initial_seg::SIZE];
        let (maj, min, sub) = self.caps.fw_rev;
        let s = &mut b;
        initial_seg::fw_rev_major.set(s, maj).expect("16-bit");
        initial_seg::fw_rev_minor.set(s, min).expect("16-bit");
        initial_seg::fw_rev_subminor.set(s, sub).expect("16-bit");
        initial_seg::cmd_interface_rev
            .set(s, ctx::CMD_IF_REV)
            .expect("16-bit");
        initial_seg::cmdq_phy_addr_63_32
            .set(s, self.cmdq.addr_h)
            .expect("32-bit");
        initial_seg::cmdq_phy_addr_31_12
            .set(s, self.cmdq.addr_l >> 12)
            .expect("20-bit");
        initial_seg::nic_interface
            .set(s, self.cmdq.nic_interface & 3)
            .expect("2-bit");
        initial_seg::log_cmdq_size
            .set(s, LOG_CMDQ_SIZE)
            .expect("4-bit");
        initial_seg::log_cmdq_stride
            .set(s, LOG_CMDQ_STRIDE)
            .expect("4-bit");
        initial_seg::initializing
            .set(s, self.initializing())
            .expect("flag");
        initial_seg::embedded_cpu
            .set(s, self.caps.embedded_cpu)
            .expect("flag");
        initial_seg::cmd_exec_to
            .set(s, self.caps.cmd_exec_to)
            .expect("32-bit");
        initial_seg::cmd_q_init_to
            .set(s, self.caps.cmd_q_init_to)
            .expect("32-bit");
        let hb = initial_seg::health_buffer.get_mut(s);
        health_buffer::fw_version
            .set(hb, ((maj as u32) << 24) | ((min as u32) << 16) | sub as u32)
            .expect("32-bit");
        if let Some(synd) = self.health.fatal {
            // A fatal error: firmware asks for a reset (RFR, Linux
            // `sensor_fw_synd_rfr`), severity CRIT.
            health_buffer::synd.set(hb, synd).expect("8-bit");
            health_buffer::rfr.set(hb, true).expect("flag");
            health_buffer::valid.set(hb, true).expect("flag");
            health_buffer::severity.set(hb, 2).expect("3-bit");
        } else if let Some((synd, ext)) = self.health.warning {
            // A reported, non-fatal condition: syndrome without RFR, the
            // device keeps working (Linux reports it and carries on).
            health_buffer::synd.set(hb, synd).expect("8-bit");
            health_buffer::ext_synd.set(hb, ext).expect("16-bit");
            health_buffer::valid.set(hb, true).expect("flag");
            health_buffer::severity.set(hb, 4).expect("3-bit"); // WARNING
        }
        let counter = match self.health.fatal {
            Some(_) => self.health.fatal_counter,
            None => self.health_counter_now(),
        };
        initial_seg::health_counter.set(s, counter).expect("24-bit");
        initial_seg::health_syndrome
            .set(s, self.health.fatal.unwrap_or(0))
            .expect("8-bit");
        b
    }

    pub fn mmio_read32(&mut self, offset: usize) -> u32 {
        if !self.clock.threaded {
            self.run_due();
        }
        // The internal timer (`initial_seg.internal_timer_h/l`, docs/firmware.md
        // §1.2): free-running at `device_frequency_khz`, as Linux's clock code
        // reads it (`mlx5_read_internal_timer`).
        if offset == 0x1000 || offset == 0x1004 {
            let ticks =
                (self.now_ns() as u128 * self.caps.device_frequency_khz as u128 / 1_000_000) as u64;
            return if offset == 0x1000 {
                (ticks >> 32) as u32
            } else {
                ticks as u32
            };
        }
        if offset + 4 <= initial_seg::SIZE {
            let img = self.init_seg_image();
            return u32::from_be_bytes(img[offset..offset + 4].try_into().expect("4 bytes"));
        }
        0
    }

    /// An MMIO write from the driver: applied now (synchronous mode, or a
    /// register) or queued for the device thread. On a hosted device a UAR
    /// doorbell is posted (applied `HOSTED_DOORBELL_LATENCY_NS` later by
    /// the host's timer), and any other write first applies the posted ones,
    /// so the device sees every write in program order.
    pub fn mmio_write(&mut self, offset: usize, value: u64, wide: bool) {
        let is_cmdq_reg = !wide && (offset == 0x10 || offset == 0x14);
        if wide {
            // Checked as it arrives, against the memory the driver published.
            self.check_send_doorbell(offset, value);
        }
        let is_uar = offset / db::UAR_PAGE_SIZE >= FIRST_UAR as usize;
        let latency = if self.clock.threaded && !is_cmdq_reg {
            Some(THREADED_LATENCY_NS)
        } else if is_uar {
            self.posted_doorbell_ns
        } else {
            None
        };
        if let Some(latency) = latency {
            let at = self.now_ns() + latency;
            self.mmio_queue.push_back(MmioWrite {
                at,
                offset,
                value,
                wide,
            });
        } else {
            if self.posted_doorbell_ns.is_some() {
                while let Some(w) = self.mmio_queue.pop_front() {
                    self.apply_mmio_write(w.offset, w.value, w.wide);
                }
            }
            self.apply_mmio_write(offset, value, wide);
            self.run_due();
        }
    }

    pub(crate) fn apply_mmio_write(&mut self, offset: usize, value: u64, wide: bool) {
        let page = (offset / db::UAR_PAGE_SIZE) as u32;
        if page >= FIRST_UAR {
            self.uar_write(page, offset % db::UAR_PAGE_SIZE, value, wide);
            return;
        }
        match (offset, wide) {
            (0x10, false) => self.cmdq.addr_h = value as u32,
            (0x14, false) => {
                // Bits 31:12 address, 10:8 nic_interface; 7:0 read-only.
                self.cmdq.addr_l = value as u32 & 0xffff_f000;
                self.cmdq.nic_interface = ((value >> 8) & 7) as u8;
            }
            (0x18, false) => self.cmd_doorbell(value as u32),
            _ => self.records.violations.push(Violation::Doorbell(format!(
                "write of {value:#x} to read-only/reserved BAR0 offset {offset:#x}"
            ))),
        }
    }

    fn uar_write(&mut self, page: u32, off: usize, value: u64, wide: bool) {
        if !self.objects.uars.contains(&page) {
            self.records.violations.push(Violation::UarDoorbell(format!(
                "write to unallocated UAR page {page} offset {off:#x}"
            )));
            return;
        }
        match (off, wide) {
            (db::UAR_CQ_DOORBELL, true) => self.cq_arm_doorbell(page, value),
            (db::UAR_EQ_DOORBELL_ARM, false) => self.eq_doorbell(page, value as u32, true),
            (db::UAR_EQ_DOORBELL_NO_ARM, false) => self.eq_doorbell(page, value as u32, false),
            // An 8-byte store into the BlueFlame registers: a send doorbell
            // at a buffer's start, a word of a BlueFlame WQE copy after it.
            (o, true) if self.bf_area().contains(&o) => self.blueflame_write(page, o, value),
            _ => self.records.violations.push(Violation::UarDoorbell(format!(
                "write of {value:#x} to UAR {page} offset {off:#x} ({} bits): not a doorbell the model knows",
                if wide { 64 } else { 32 }
            ))),
        }
    }

    /// Offsets of the BlueFlame registers in a UAR page: 4 registers of
    /// `2^log_bf_reg_size` bytes from 0x800 (`MLX5_BF_OFFSET`).
    fn bf_area(&self) -> std::ops::Range<usize> {
        let end = db::bf_reg_offset(db::BF_REGS_PER_UAR, self.caps.log_bf_reg_size);
        db::UAR_BF_OFFSET..end.min(db::UAR_PAGE_SIZE)
    }

    fn eq_doorbell(&mut self, uar: u32, value: u32, arm: bool) {
        let (eqn, ci) = db::eq_doorbell_parts(value);
        let Some(eq) = self.objects.eqs.get_mut(&eqn) else {
            self.records.violations.push(Violation::UarDoorbell(format!(
                "EQ doorbell for unknown eqn {eqn}"
            )));
            return;
        };
        if eq.uar != uar {
            let u = eq.uar;
            self.records.violations.push(Violation::UarDoorbell(format!(
                "EQ doorbell for eqn {eqn} on UAR {uar}, EQ uses UAR {u}"
            )));
            return;
        }
        let m = 0x00ff_ffff;
        let new_gap = eq.pc.wrapping_sub(ci) & m;
        let old_gap = eq.pc.wrapping_sub(eq.ci) & m;
        if new_gap > old_gap {
            self.records.violations.push(Violation::UarDoorbell(format!(
                "EQ {eqn} consumer index {ci:#x} moves backwards or ahead of producer {:#x}",
                eq.pc & m
            )));
            return;
        }
        eq.ci = ci;
        if arm && eq.st != ctx::ST_ALWAYS_ARMED {
            if new_gap > 0 {
                // EQEs beyond the new consumer index: the arm fires at once
                // (`irq.rs`).
                eq.st = ctx::ST_FIRED;
                let intr = eq.intr;
                self.raise_irq(intr);
            } else {
                eq.st = ctx::ST_ARMED;
            }
        }
    }

    fn cq_arm_doorbell(&mut self, uar: u32, value: u64) {
        let a = db::cq_arm_parts(value);
        let cqn = a.cqn;
        let Some(cq) = self.objects.cqs.get_mut(&cqn) else {
            self.records.violations.push(Violation::UarDoorbell(format!(
                "CQ arm for unknown cqn {cqn:#x}"
            )));
            return;
        };
        if cq.uar != uar {
            let u = cq.uar;
            self.records.violations.push(Violation::UarDoorbell(format!(
                "CQ arm for cqn {cqn:#x} on UAR {uar}, CQ uses UAR {u}"
            )));
            return;
        }
        if cq.status != ctx::CQ_STATUS_OK {
            self.records.violations.push(Violation::UarDoorbell(format!(
                "CQ arm for cqn {cqn:#x} in error state"
            )));
            return;
        }
        let sn = a.arm_sn as u8;
        if cq.arm.is_none() && cq.last_fired_sn == Some(sn) {
            // A completion event was generated for this sequence number; the
            // driver must bump arm_sn after consuming it (docs/firmware.md §5).
            self.records.violations.push(Violation::UarDoorbell(format!(
                "stale CQ arm for cqn {cqn:#x}: arm_sn {sn} already fired"
            )));
            return;
        }
        // A request for the next completion is not downgraded by a later
        // request for a solicited one while armed (IB "Request Completion
        // Notification"; Linux `mlx5_ib_arm_cq` keeps `IB_CQ_NEXT_COMP`).
        cq.last_arm_solicited = Some(a.solicited);
        let solicited = a.solicited && cq.arm.is_none_or(|old| old.solicited);
        cq.arm = Some(crate::objects::Arm { sn, solicited });
        // CQEs beyond the arm's consumer index already present: fire now.
        let m = 0x00ff_ffff;
        let beyond = cq.pc.wrapping_sub(a.consumer_index) & m;
        let n = 1u32 << cq.log_size;
        if beyond > 0 && beyond <= n {
            let fire = if solicited {
                cq.last_solicit
                    .is_some_and(|s| (s.wrapping_sub(a.consumer_index) & m) < beyond)
            } else {
                true
            };
            if fire {
                self.cq_moderation_armed_ready(cqn);
            }
        }
    }
}
