//! Interrupts: the MSI-X message an EQ sends when the device writes an EQE
//! to it while it is armed (docs/firmware.md §6.2), latched per vector for
//! the platform's waits ([`SimHal`](crate::SimHal)'s `wait_irq`).
//!
//! An EQ armed with the arm doorbell (st ARMED) interrupts on its next EQE
//! and goes to FIRED; it interrupts again only after the next arm. An arm
//! doorbell whose consumer index leaves EQEs unreported fires at once: the
//! EQEs written while the EQ was not armed are never left without an
//! interrupt (the rule the model already applies to CQ arms, and what
//! Linux's EQ handler relies on when it arms after its last poll).
//! Interrupts of a vector the platform did not enable
//! ([`SimConfig::irq_vectors`](crate::SimConfig::irq_vectors)) are not
//! delivered (a masked MSI-X entry); they are counted.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mlx5_hal::MAX_IRQ_VECTORS;

use crate::state::State;
use crate::Device;

/// The longest real-time block of one step of a synchronous-mode wait.
const MAX_SYNC_STEP_NS: u64 = 1_000_000;

/// Interrupt lines: latched vectors and counters, with the condition
/// variable waiters block on. Taken after the state lock, never before it.
#[derive(Debug, Default)]
pub(crate) struct IrqLines {
    lines: Mutex<Lines>,
    cv: Condvar,
}

#[derive(Debug)]
struct Lines {
    /// Vectors fired and not yet reported by a wait.
    latched: u64,
    /// Interrupts delivered per vector since creation.
    raised: [u64; MAX_IRQ_VECTORS as usize],
    /// Interrupts of vectors the platform did not enable.
    undelivered: u64,
}

impl Default for Lines {
    fn default() -> Self {
        Lines {
            latched: 0,
            raised: [0; MAX_IRQ_VECTORS as usize],
            undelivered: 0,
        }
    }
}

impl IrqLines {
    fn lock(&self) -> MutexGuard<'_, Lines> {
        self.lines.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Take the latched vectors of `mask`.
    fn take(&self, g: &mut Lines, mask: u64) -> u64 {
        let hit = g.latched & mask;
        g.latched &= !hit;
        hit
    }
}

impl State {
    /// Vectors the platform delivers: [`SimConfig::irq_vectors`](crate::SimConfig::irq_vectors),
    /// at most the device's MSI-X table and [`MAX_IRQ_VECTORS`].
    pub(crate) fn irq_vectors(&self) -> u16 {
        self.cfg
            .irq_vectors
            .min(self.caps.msix_vectors)
            .min(MAX_IRQ_VECTORS)
    }

    /// The device sends the MSI-X message of vector `intr`.
    pub(crate) fn raise_irq(&mut self, intr: u16) {
        let enabled = self.irq_vectors();
        let mut g = self.irq.lock();
        if intr < enabled {
            g.latched |= 1 << intr;
            g.raised[intr as usize] += 1;
            drop(g);
            self.irq.cv.notify_all();
            if let Some(hook) = self.irq_hook.as_mut() {
                hook(intr);
            }
        } else {
            g.undelivered += 1;
        }
    }
}

impl Device {
    /// Interrupt vectors the platform delivers ([`crate::SimConfig::irq_vectors`]
    /// within the device's MSI-X vectors).
    pub fn irq_vectors(&self) -> u16 {
        self.lock().irq_vectors()
    }

    /// Interrupts delivered on `vector` since the device was created.
    pub fn interrupts(&self, vector: u16) -> u64 {
        let st = self.lock();
        let g = st.irq.lock();
        g.raised.get(vector as usize).copied().unwrap_or(0)
    }

    /// Interrupts the device raised on vectors the platform did not enable
    /// (not delivered).
    pub fn interrupts_undelivered(&self) -> u64 {
        let st = self.lock();
        let g = st.irq.lock();
        g.undelivered
    }

    /// The platform's wait (see `mlx5_hal::Hal::wait_irq`): latched vectors
    /// of `mask`, or 0 after about `timeout_ns` of device time.
    pub(crate) fn wait_irq(&self, mask: u64, timeout_ns: u64) -> u64 {
        let (irq, threaded) = {
            let st = self.lock();
            (st.irq.clone(), st.clock.threaded)
        };
        if threaded {
            // The device thread writes EQEs on its own: block on the line.
            let deadline = Instant::now() + Duration::from_nanos(timeout_ns);
            let mut g = irq.lock();
            loop {
                let hit = irq.take(&mut g, mask);
                if hit != 0 {
                    return hit;
                }
                let now = Instant::now();
                if now >= deadline {
                    return 0;
                }
                g = irq
                    .cv
                    .wait_timeout(g, deadline - now)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }
        // Synchronous mode: device time passes the way `delay_us` lets it
        // (timers and delayed work fall due), in steps that double up to
        // 1 ms; each step also blocks as long in real time, so another
        // thread (the traffic side door) can write an EQE and wake the
        // wait at once.
        let start = self.lock().clock.vclock_ns;
        let deadline = start.saturating_add(timeout_ns);
        let mut step = 1_000u64;
        loop {
            {
                let mut g = irq.lock();
                let hit = irq.take(&mut g, mask);
                if hit != 0 {
                    return hit;
                }
            }
            let left = {
                let mut st = self.lock();
                let left = deadline.saturating_sub(st.clock.vclock_ns);
                if left == 0 {
                    return 0;
                }
                let want = step.min(left);
                let by = self.shared.idle.step(&st, want).min(left);
                st.clock.vclock_ns += by;
                st.run_due();
                left
            };
            let g = irq.lock();
            if g.latched & mask == 0 {
                let block = Duration::from_nanos(step.min(left).min(MAX_SYNC_STEP_NS));
                drop(irq.cv.wait_timeout(g, block));
            }
            step = (step * 2).min(MAX_SYNC_STEP_NS);
        }
    }
}
