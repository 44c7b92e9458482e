//! Completion vectors and the bounded wait for events.
//!
//! Each completion vector is one completion EQ; a CQ names its EQ in
//! `cqc.c_eqn`. The async EQ signals interrupt vector 0 and completion EQ
//! `i` vector `1 + i mod (n − 1)` of the platform's `n` vectors (Linux's
//! `MLX5_IRQ_VEC_COMP_BASE` = 1: vector 0 is the control vector; with one
//! vector, every EQ shares it). A platform without interrupts gets 0 in
//! every `eqc.intr` and [`Hca::wait_for_events`] polls instead.
//!
//! No event is lost between a poll that found nothing and the wait: each
//! poll that consumed EQEs ends by arming the EQ (as Linux's EQ handler
//! does, docs/firmware.md §6.2), an armed EQ interrupts on its next EQE,
//! and the platform latches the interrupt until a wait reports it
//! ([`mlx5_hal::Hal::wait_irq`]).

use mlx5_hal::{Hal, HalError};

use super::cmdwait::backoff;
use super::Hca;
use crate::caps::Caps;
use crate::error::Error;
use crate::stats::CmdObserver;

/// Most completion vectors (completion EQs) an [`Hca`] creates: the
/// capacity of its fixed EQ table.
pub const MAX_COMP_VECTORS: usize = 16;

/// `eqc.intr` of the async EQ: the control vector 0.
pub(super) const fn async_intr() -> u16 {
    0
}

/// `eqc.intr` of completion EQ `i` on a platform with `irqs` vectors.
pub(super) const fn comp_intr(irqs: u16, i: usize) -> u16 {
    if irqs <= 1 {
        0
    } else {
        1 + (i % (irqs as usize - 1)) as u16
    }
}

/// Completion EQs to create for `wanted` vectors: at least 1, at most
/// [`MAX_COMP_VECTORS`] and the device's EQ count less the async EQ
/// (Linux derives its completion-EQ count from `mlx5_max_eq_cap_get` less
/// its async EQs the same way).
pub(super) fn comp_vector_count(wanted: u8, caps: &Caps) -> usize {
    let device = caps.max_eqs().saturating_sub(1).max(1) as usize;
    (wanted.max(1) as usize).min(MAX_COMP_VECTORS).min(device)
}

impl<H: Hal, O: CmdObserver, const CE: usize, const AE: usize> Hca<H, O, CE, AE> {
    /// The interrupt vectors of this HCA's EQs (0 without interrupts).
    pub(super) fn eq_irq_mask(&self, irqs: u16) -> u64 {
        if irqs == 0 {
            return 0;
        }
        let c = self.core.lock();
        c.async_eq
            .iter()
            .chain(c.comp_eqs.iter())
            .fold(0, |m, eq| m | (1u64 << (eq.intr() % 64)))
    }

    /// Number of completion vectors (completion EQs) brought up: what
    /// [`HcaConfig::comp_vectors`](super::HcaConfig::comp_vectors) asked
    /// for, within the device's limits; 0 on an HCA that is down.
    pub fn num_comp_vectors(&self) -> u8 {
        self.core.lock().comp_eqs.len() as u8
    }

    /// EQ number of completion vector `vector` (for `cqc.c_eqn`), or `None`
    /// when there is no such vector.
    pub fn comp_eqn_of(&self, vector: u8) -> Option<u8> {
        self.core
            .lock()
            .comp_eqs
            .get(vector as usize)
            .map(|e| e.eqn())
    }

    /// The interrupt vectors this HCA's EQs signal (bit `i`: vector `i`);
    /// 0 when the platform has no interrupts and waits poll.
    pub fn irq_vector_mask(&self) -> u64 {
        self.irq_mask
    }

    /// Does an EQE wait in any EQ? Ownership checks only, nothing consumed.
    fn eqe_waiting(&self) -> bool {
        let c = self.core.lock();
        c.async_eq
            .iter()
            .chain(c.comp_eqs.iter())
            .any(|eq| eq.has_event())
    }

    /// Wait up to `timeout_ns` for the device to write an event, after a
    /// [`Hca::poll_events`] that found nothing; poll the EQs again
    /// afterwards. Returns `true` when something may be there (an
    /// interrupt fired, or an EQE waits), `false` when the time ran out.
    /// A `true` can be spurious (the interrupt of an EQE a command wait
    /// consumed meanwhile): poll, and wait again if nothing came.
    ///
    /// With interrupts ([`Hal::irq_vectors`] > 0) this is
    /// [`Hal::wait_irq`] on this HCA's vectors; without them (or if the
    /// platform answers [`HalError::Unsupported`]) it checks the EQs'
    /// ownership bits with the back-off of command waits (up to
    /// [`HcaConfig::poll_max_delay_us`](super::HcaConfig::poll_max_delay_us)
    /// between checks). Bounded either way; a dead device is reported at
    /// once.
    pub fn wait_for_events(&self, timeout_ns: u64) -> Result<bool, Error> {
        self.check_alive()?;
        if self.irq_mask != 0 {
            match self.hal.wait_irq(self.irq_mask, timeout_ns) {
                Ok(fired) => return Ok(fired != 0 || self.eqe_waiting()),
                Err(HalError::Unsupported) => {}
                Err(e) => return Err(Error::Dma(e)),
            }
        }
        let start = self.hal.now_ns();
        let mut delay = 0;
        loop {
            if self.eqe_waiting() {
                return Ok(true);
            }
            if self.hal.now_ns().saturating_sub(start) >= timeout_ns {
                return Ok(false);
            }
            self.check_alive()?;
            backoff(&self.hal, &mut delay, self.cfg.poll_max_delay_us);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_follow_linux_comp_base() {
        // No interrupts or one vector: everything on vector 0.
        assert_eq!(comp_intr(0, 3), 0);
        assert_eq!(comp_intr(1, 3), 0);
        // Vector 0 is the control vector; completions spread over 1..n.
        assert_eq!(comp_intr(2, 0), 1);
        assert_eq!(comp_intr(2, 5), 1);
        assert_eq!(comp_intr(4, 0), 1);
        assert_eq!(comp_intr(4, 2), 3);
        assert_eq!(comp_intr(4, 3), 1);
        assert_eq!(async_intr(), 0);
    }

    #[test]
    fn comp_vectors_are_clamped_to_the_device_and_the_table() {
        let mut raw = [0u8; 256];
        mlx5_regs::layouts::cmd_hca_cap::log_max_eq
            .set(&mut raw, 2)
            .unwrap();
        let caps = Caps::parse(&raw);
        assert_eq!(caps.max_eqs(), 4);
        assert_eq!(comp_vector_count(0, &caps), 1, "at least one");
        assert_eq!(comp_vector_count(8, &caps), 3, "4 EQs less the async one");
        mlx5_regs::layouts::cmd_hca_cap::max_num_eqs
            .set(&mut raw, 200)
            .unwrap();
        let caps = Caps::parse(&raw);
        assert_eq!(caps.max_eqs(), 200, "max_num_eqs replaces 2^log_max_eq");
        assert_eq!(comp_vector_count(255, &caps), MAX_COMP_VECTORS);
        assert_eq!(comp_vector_count(5, &caps), 5);
    }
}
