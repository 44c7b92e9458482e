//! The health buffer and the init segment's liveness signals (docs/firmware.md §1.2, §1.3).
//!
//! Checked in every bounded wait of the driver. The fatal sensors are
//! Linux's, in its order (`mlx5_health_check_fatal_sensors`,
//! `drivers/net/ethernet/mellanox/mlx5/core/health.c`; rdma-core
//! `providers/mlx5/mlx5_vfio.c` has the same): `fw_ver == 0xffffffff` (PCI
//! dead), `nic_interface` DISABLED or SW_RESET, then a syndrome **with the
//! reset-requested (RFR) bit**. A syndrome without RFR is a condition
//! firmware reports while it keeps working: Linux logs it at its severity and
//! reports it (`poll_health`, the devlink "fw" reporter) and carries on; here
//! it becomes a [`HealthWarning`], readable with `Hca::health_warning`, and
//! the HCA stays usable. The heartbeat (`health_counter`, docs/firmware.md
//! §1.3) must keep changing; it is declared stopped after
//! [`crate::HcaConfig::heartbeat_timeout_ns`] without a change, which is
//! fatal as in rdma-core's VFIO driver (`mlx5_vfio_poll_health`; Linux only
//! reports it, but with a silent firmware no command can complete).

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
    /// `rfr`: firmware requests a reset (Linux `MLX5_RFR_BIT_OFFSET`).
    pub rfr: bool,
    /// `severity` when its `valid` bit is set (a Linux log level: 2
    /// critical, 3 error, 4 warning, ...; `mlx5_health_get_severity`).
    pub severity: Option<u8>,
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
        rfr: mmio_field(hal, HEALTH_BUFFER, &health_buffer::rfr),
        severity: mmio_field::<H, bool>(hal, HEALTH_BUFFER, &health_buffer::valid)
            .then(|| mmio_field(hal, HEALTH_BUFFER, &health_buffer::severity)),
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
        } else if self.rfr && self.synd != 0 {
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

impl HealthSnapshot {
    /// The non-fatal condition this snapshot reports, if any: a syndrome
    /// without the RFR bit.
    pub fn warning(&self) -> Option<HealthWarning> {
        (self.synd != 0 && self.fatal().is_none()).then_some(HealthWarning {
            syndrome: self.synd,
            ext_syndrome: self.ext_synd,
            severity: self.severity,
        })
    }
}

/// A health syndrome firmware reports without asking for a reset: the
/// device keeps working (Linux reports it and carries on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthWarning {
    /// `synd` (docs/firmware.md §1.3: 0x10 high temperature, ...).
    pub syndrome: u8,
    /// `ext_synd`.
    pub ext_syndrome: u16,
    /// `severity`, when valid.
    pub severity: Option<u8>,
}

/// Heartbeat tracking across checks, and the last non-fatal syndrome.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Heartbeat {
    timeout_ns: Option<u64>,
    last_counter: u32,
    last_change_ns: u64,
    /// The syndrome the last check saw (None once it cleared).
    warning: Option<HealthWarning>,
    /// Distinct non-fatal syndromes seen (a new one each time it changes).
    warnings: u64,
}

impl Heartbeat {
    pub(crate) const fn new(timeout_ns: Option<u64>, now_ns: u64) -> Self {
        Heartbeat {
            timeout_ns,
            last_counter: u32::MAX,
            last_change_ns: now_ns,
            warning: None,
            warnings: 0,
        }
    }

    /// The non-fatal syndrome the last check saw, and how many distinct
    /// ones were seen so far.
    pub(crate) fn warning(&self) -> (Option<HealthWarning>, u64) {
        (self.warning, self.warnings)
    }

    /// Full check: fatal sensors, then the heartbeat.
    pub(crate) fn check<H: Hal>(&mut self, hal: &H) -> Result<(), Error> {
        let snap = snapshot(hal);
        if let Some(e) = snap.fatal() {
            return Err(e);
        }
        // Reported, not fatal (Linux `poll_health`: a new syndrome is
        // reported once, the device carries on).
        let w = snap.warning();
        if w.is_some() && w.map(|w| w.syndrome) != self.warning.map(|w| w.syndrome) {
            self.warnings += 1;
        }
        self.warning = w;
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
