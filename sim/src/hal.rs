//! `SimHal`: the platform the driver runs on (BAR0 MMIO, DMA, clock).

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mlx5_hal::{Hal, HalError, RawDma};

use crate::{Device, Violation};

/// Nanoseconds the virtual clock advances on every `now_ns` call in
/// synchronous mode, so a driver spinning on the clock without `delay_us`
/// still reaches its timeout.
const NOW_TICK_NS: u64 = 100;

/// The idle skip (synchronous mode, see [`IdleClock`]) lets this fraction
/// of the time the host has been idle pass on top of each delay: 1/256, so
/// a wait overshoots its deadline by at most about 0.4 %.
const IDLE_SKIP_SHIFT: u32 = 8;

/// Largest idle skip in one delay: the heartbeat counter (24 bits of
/// milliseconds of device time) still changes between two reads, so a
/// driver never mistakes a skip for a stopped heartbeat.
const MAX_IDLE_SKIP_NS: u64 = 1_000_000_000;

/// BAR0 offset of the command doorbell vector (docs/firmware.md §1.2).
const CMD_DOORBELL: usize = 0x18;

/// Instrumentation: wall-clock time the model spent inside command-doorbell
/// writes. In synchronous mode the model executes the commands a doorbell
/// names inside that write, so this is the model's share of a command round
/// trip; what a caller measures beyond it is the driver's (and the
/// platform's clock and lock) share. Two `Instant` reads per command
/// doorbell; nothing on any other access.
#[derive(Debug, Default)]
pub(crate) struct CmdWork {
    ns: AtomicU64,
    doorbells: AtomicU64,
}

impl Device {
    /// Instrumentation for benchmarks: total wall-clock nanoseconds spent
    /// inside the model while processing command doorbells, and the number
    /// of such doorbells, since creation. In synchronous mode this is the
    /// time the model took to execute the commands (delivery checks,
    /// mailbox walks, the command itself, output write-back); subtract it
    /// from a measured round trip to get the driver's share.
    pub fn cmd_doorbell_time(&self) -> (Duration, u64) {
        let w = &self.shared.cmd_work;
        (
            Duration::from_nanos(w.ns.load(Ordering::Relaxed)),
            w.doorbells.load(Ordering::Relaxed),
        )
    }
}

/// The virtual clock's idle skip (synchronous mode). The model changes only
/// when the host writes a register or when something it scheduled falls due
/// (a delayed command completion, the end of firmware initialisation). While
/// the host only waits (delays without writing), each `delay_us` lets extra
/// virtual time pass, a fraction of the time the host has been idle, never
/// past the model's next scheduled event: nothing the host could observe
/// happens in between, so this is just a longer sleep, which a delay is
/// allowed to be. A wait for a command that never completes then costs
/// O(log(timeout)) delays instead of timeout / poll interval: a one-hour
/// timeout takes a few thousand delays instead of 3.6 million.
#[derive(Debug, Default)]
pub(crate) struct IdleClock {
    /// Device time of the host's last register write.
    last_write_ns: AtomicU64,
}

impl IdleClock {
    fn wrote(&self, now_ns: u64) {
        self.last_write_ns.store(now_ns, Ordering::Relaxed);
    }

    /// Virtual time a `delay_us` of `want_ns` lets pass.
    pub(crate) fn step(&self, st: &crate::state::State, want_ns: u64) -> u64 {
        let now = st.clock.vclock_ns;
        let idle = now.saturating_sub(self.last_write_ns.load(Ordering::Relaxed));
        // The next thing the model has scheduled: a delayed completion or
        // queued write, or the end of firmware initialisation.
        let fw_ready = st.clock.created_ns + st.cfg.fw_init_delay_us * 1000;
        let init = (!st.inj.fw_init_never && now < fw_ready).then(|| fw_ready - now);
        let next = match (st.next_due_in_ns(), init) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b).unwrap_or(u64::MAX),
        };
        let skip = (idle >> IDLE_SKIP_SHIFT).min(MAX_IDLE_SKIP_NS).min(next);
        want_ns.max(skip)
    }
}

/// The simulated platform: a cheap handle to the [`Device`].
#[derive(Clone)]
pub struct SimHal {
    dev: Device,
}

impl std::fmt::Debug for SimHal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimHal").finish_non_exhaustive()
    }
}

impl SimHal {
    pub(crate) fn new(dev: Device) -> SimHal {
        SimHal { dev }
    }

    /// The device behind this platform.
    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// Reset the function, as the VFIO platform does with
    /// `VFIO_DEVICE_RESET` when it opens and closes a device
    /// ([`Device::function_reset`]).
    pub fn reset(&self) -> crate::ResetReport {
        self.dev.function_reset()
    }

    fn check(&self, offset: usize, width: usize) {
        let size = self.dev.lock().bar0_size();
        assert!(
            offset.is_multiple_of(width) && offset + width <= size,
            "MMIO access of {width} bytes at {offset:#x} outside BAR0 ({size:#x}) or unaligned"
        );
    }
}

// SAFETY: (1) MMIO goes to the model's BAR0 registers under its lock, never
// to memory; bad offsets panic. (2) `alloc_dma_raw` returns zeroed, page-aligned
// host memory from the global allocator, exclusively owned, mapped in the
// model's IOVA table until `free_dma_raw`. (3) The model's device side reaches
// only memory in that table (every access is translated and bounds-checked;
// anything else is an IOMMU fault). (4) The clock is monotonic: virtual time
// only grows, real time comes from `Instant`.
unsafe impl Hal for SimHal {
    fn bar0_size(&self) -> usize {
        self.dev.lock().bar0_size()
    }

    fn mmio_read32(&self, offset: usize) -> u32 {
        self.check(offset, 4);
        self.dev.lock().mmio_read32(offset)
    }

    fn mmio_write32(&self, offset: usize, value: u32) {
        self.check(offset, 4);
        let mut st = self.dev.lock();
        self.dev.shared.idle.wrote(st.now_ns());
        if offset == CMD_DOORBELL {
            let t = Instant::now();
            st.mmio_write(offset, value as u64, false);
            let w = &self.dev.shared.cmd_work;
            w.ns.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
            w.doorbells.fetch_add(1, Ordering::Relaxed);
        } else {
            st.mmio_write(offset, value as u64, false);
        }
        drop(st);
        self.dev.shared.cv.notify_all();
        self.dev.pump_wire();
    }

    fn mmio_write64(&self, offset: usize, value: u64) {
        self.check(offset, 8);
        let mut st = self.dev.lock();
        self.dev.shared.idle.wrote(st.now_ns());
        st.mmio_write(offset, value, true);
        drop(st);
        self.dev.shared.cv.notify_all();
        self.dev.pump_wire();
    }

    fn alloc_dma_raw(&self, size: usize) -> Result<RawDma, HalError> {
        if size == 0 {
            return Err(HalError::InvalidRequest);
        }
        let (host, iova, len) = self
            .dev
            .lock()
            .dma
            .alloc(size)
            .ok_or(HalError::OutOfDmaMemory { requested: size })?;
        Ok(RawDma {
            vaddr: NonNull::new(host as *mut u8).expect("allocator returned non-null"),
            iova,
            len,
        })
    }

    unsafe fn free_dma_raw(&self, region: RawDma) {
        let mut st = self.dev.lock();
        let (lo, hi) = (region.iova, region.iova + region.len as u64);
        let inside = |a: u64| a >= lo && a < hi;
        let mut users = Vec::new();
        // A device in a fatal state performs no more DMA: software frees
        // everything after a fatal error (Linux, `mlx5_internal_err_ret_value`).
        let dead = st.health.fatal.is_some();
        if st.pages.held.iter().any(|&p| inside(p)) {
            users.push("firmware pages".to_string());
        }
        users.extend(st.objects.dma_users(lo, hi));
        if !users.is_empty() && !dead {
            st.records
                .violations
                .push(Violation::FreedWhileInUse(format!(
                    "DMA region {lo:#x}+{:#x} freed while in use by {}",
                    region.len,
                    users.join(", ")
                )));
        }
        let ok = st
            .dma
            .free(region.iova, region.vaddr.as_ptr() as usize, region.len);
        assert!(
            ok,
            "free_dma_raw of a region this platform did not allocate (or freed twice)"
        );
    }

    fn now_ns(&self) -> u64 {
        let mut st = self.dev.lock();
        if !st.clock.threaded {
            st.clock.vclock_ns += NOW_TICK_NS;
            st.run_due();
        }
        let now = st.now_ns();
        drop(st);
        self.dev.pump_wire();
        now
    }

    fn write_combining(&self) -> bool {
        self.dev.lock().cfg.write_combining
    }

    fn delay_us(&self, us: u32) {
        let threaded = {
            let mut st = self.dev.lock();
            if !st.clock.threaded {
                let step = self.dev.shared.idle.step(&st, us as u64 * 1000);
                st.clock.vclock_ns += step;
                st.run_due();
            }
            st.clock.threaded
        };
        self.dev.pump_wire();
        if threaded {
            std::thread::sleep(Duration::from_micros(us as u64));
        }
    }

    fn irq_vectors(&self) -> u16 {
        self.dev.irq_vectors()
    }

    fn wait_irq(&self, vectors: u64, timeout_ns: u64) -> Result<u64, HalError> {
        Ok(self.dev.wait_irq(vectors, timeout_ns))
    }
}
