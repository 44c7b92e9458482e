//! The health buffer and the init segment's liveness signals (docs/firmware.md §1.2, §1.3).
//!
//! Checked in every bounded wait of the driver. Checks, in Linux's order
//! (`mlx5_health_check_fatal_sensors`): `fw_ver == 0xffffffff` (PCI dead),
//! `nic_interface` DISABLED or SW_RESET, then the syndrome. Linux treats a
//! syndrome as fatal only together with the RFR bit and otherwise runs a
//! recovery (a device reset); this driver has no recovery, so any non-zero
//! `synd` is fatal. The heartbeat (`health_counter`, docs/firmware.md §1.3) must keep
//! changing; it is declared stopped after
//! [`crate::HcaConfig::heartbeat_timeout_ns`] without a change.

use mlx5_hal::Hal;
use mlx5_regs::field::{read_bits, Field, FieldValue};
use mlx5_regs::layouts::{health_buffer, initial_seg};

use crate::error::{Error, FatalReason};

/// BAR0 offset of the health buffer (`initial_seg.health_buffer`, 0x200).
pub const HEALTH_BUFFER: usize = (initial_seg::health_buffer.bit_off / 8) as usize;

/// Read a ≤32-bit field of a BAR0 structure at `base`.
pub(crate) fn mmio_field<H: Hal, T: FieldValue>(hal: &H, base: usize, f: &Field<T>) -> T {
    let word = hal.mmio_read32(base + f.byte_offset());
    T::from_u64(read_bits(&word.to_be_bytes(), f.bit_off % 32, f.width))
}

/// A snapshot of the health buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthSnapshot {
    /// `fw_ver` (0xffffffff when PCI is gone).
    pub fw_version: u32,
    /// `synd` (0 = healthy).
    pub synd: u8,
    /// `ext_synd`.
    pub ext_synd: u16,
    /// `nic_interface` read as 3 bits (Linux `mlx5_get_nic_state`).
    pub nic_interface: u8,
    /// `health_counter` (heartbeat, 24 bits).
    pub counter: u32,
}

/// Read the health signals.
pub fn snapshot<H: Hal>(hal: &H) -> HealthSnapshot {
    // nic_interface: ifc declares 2 bits at 0x014 bits 9:8; Linux reads 3 bits
    // 10:8 so that SW_RESET (7) is visible (docs/firmware.md §1.2).
    let addr_lo = hal.mmio_read32(initial_seg::cmdq_phy_addr_31_12.byte_offset());
    HealthSnapshot {
        fw_version: mmio_field(hal, HEALTH_BUFFER, &health_buffer::fw_version),
        synd: mmio_field(hal, HEALTH_BUFFER, &health_buffer::synd),
        ext_synd: mmio_field(hal, HEALTH_BUFFER, &health_buffer::ext_synd),
        nic_interface: ((addr_lo >> 8) & 7) as u8,
        counter: mmio_field(hal, 0, &initial_seg::health_counter),
    }
}

impl HealthSnapshot {
    /// The fatal condition this snapshot shows, if any.
    pub fn fatal(&self) -> Option<Error> {
        let reason = if self.fw_version == 0xffff_ffff {
            FatalReason::PciDead
        } else if self.nic_interface == mlx5_regs::consts::ctx::NIC_IFC_DISABLED {
            FatalReason::NicDisabled
        } else if self.nic_interface == mlx5_regs::consts::ctx::NIC_IFC_SW_RESET {
            FatalReason::SwReset
        } else if self.synd != 0 {
            FatalReason::Syndrome
        } else {
            return None;
        };
        Some(Error::Fatal {
            health_syndrome: self.synd,
            ext_syndrome: self.ext_synd,
            reason,
        })
    }
}

/// Heartbeat tracking across checks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Heartbeat {
    timeout_ns: Option<u64>,
    last_counter: u32,
    last_change_ns: u64,
}

impl Heartbeat {
    pub(crate) const fn new(timeout_ns: Option<u64>, now_ns: u64) -> Self {
        Heartbeat {
            timeout_ns,
            last_counter: u32::MAX,
            last_change_ns: now_ns,
        }
    }

    /// Full check: fatal sensors, then the heartbeat.
    pub(crate) fn check<H: Hal>(&mut self, hal: &H) -> Result<(), Error> {
        let snap = snapshot(hal);
        if let Some(e) = snap.fatal() {
            return Err(e);
        }
        if let Some(limit) = self.timeout_ns {
            let now = hal.now_ns();
            if snap.counter != self.last_counter {
                self.last_counter = snap.counter;
                self.last_change_ns = now;
            } else if now.saturating_sub(self.last_change_ns) > limit {
                return Err(Error::Fatal {
                    health_syndrome: snap.synd,
                    ext_syndrome: snap.ext_synd,
                    reason: FatalReason::HeartbeatStopped,
                });
            }
        }
        Ok(())
    }
}
