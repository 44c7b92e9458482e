//! The device host interface: what a virtual machine monitor needs to put the
//! model behind a PCI function.
//!
//! Under [`SimHal`](crate::SimHal) the model owns DMA memory, runs on its own
//! clock and latches interrupts for the driver's waits. In a VMM the guest
//! owns memory and chooses addresses, the VMM owns the clock, and interrupts
//! are MSI-X messages the VMM sends. [`Device::hosted`] builds a device that
//! way:
//!
//! * **DMA** goes through the host's [`DeviceMemory`] (QEMU's
//!   `pci_dma_read`/`pci_dma_write`). The model never holds a reference into
//!   DMA memory, so copying through the host changes nothing else; an access
//!   the host refuses is the model's IOMMU fault ([`Device::iommu_faults`]),
//!   exactly as an unmapped IOVA under `SimHal`.
//! * **Interrupts**: the host's [`IrqHook`] is called with the EQ's vector
//!   (`eqc.intr`) whenever the device writes an EQE to an armed EQ, and when
//!   an arm doorbell finds EQEs beyond the consumer index (docs/firmware.md
//!   §6.2, `irq.rs`). MSI-X masking and the pending bits are the host's.
//! * **Clock**: the host passes its virtual clock to every entry point
//!   ([`Device::host_mmio_read`], [`Device::host_mmio_write`],
//!   [`Device::host_tick`]); device time never goes backwards. The
//!   `initializing` bit, the health counter and delayed work follow it;
//!   [`Device::host_next_deadline_ns`] says when the host's timer should
//!   call [`Device::host_tick`] next.
//! * **Wire**: a hosted device may join a [`Wire`](crate::wire::Wire)
//!   ([`Device::connect`]); every entry point then lets the wire deliver
//!   what the step put on it ([`Wire::pump`](crate::wire::Wire::pump)), as
//!   [`SimHal`](crate::SimHal)'s doorbells and delays do, so a frame
//!   reaches a peer in the same call that sent it. Devices on one wire
//!   must then be called by one thread at a time (QEMU's big lock).
//! * **Reset**: [`Device::host_reset`] puts the function back to power-on
//!   (system reset and function-level reset alike).
//! * **No panics on the guest's behalf**: a bad MMIO access (outside BAR0,
//!   unaligned, a write narrower than 4 bytes) is a recorded
//!   [`Violation::Mmio`]; a read of it returns all ones, as a PCIe read the
//!   device does not claim.

use crate::{Device, ExecMode, SimConfig, Violation};

/// Guest memory as the device reaches it through the host (a VMM): bus
/// addresses, copies only. Each method returns false when the host refuses
/// the access (no mapping, an IOMMU fault, bus mastering off).
pub trait DeviceMemory: Send {
    /// Copy `buf.len()` bytes from bus address `iova`. A 4-byte read must
    /// be one access (doorbell records never tear).
    fn read(&self, iova: u64, buf: &mut [u8]) -> bool;
    /// Copy `data` to bus address `iova`.
    fn write(&self, iova: u64, data: &[u8]) -> bool;
    /// True if the whole range is reachable (the model checks scatter
    /// entries before it uses them).
    fn mapped(&self, iova: u64, len: usize) -> bool;
}

/// The host's interrupt hook: called with the MSI-X vector of each interrupt
/// the device sends, under the device's lock (it must not call back into the
/// device).
pub type IrqHook = Box<dyn FnMut(u16) + Send>;

impl Device {
    /// A device hosted by a VMM: synchronous (the host's MMIO callbacks run
    /// it), DMA through `memory`, interrupts through `irq`, every MSI-X vector
    /// of the profile delivered (masking is the host's).
    pub fn hosted(cfg: SimConfig, memory: Box<dyn DeviceMemory>, irq: IrqHook) -> Device {
        let cfg = SimConfig {
            mode: ExecMode::Synchronous,
            irq_vectors: mlx5_hal::MAX_IRQ_VECTORS,
            ..cfg
        };
        let dev = Device::new(cfg);
        {
            let mut st = dev.lock();
            st.dma.external = Some(memory);
            st.irq_hook = Some(irq);
            st.posted_doorbell_ns = Some(crate::state::HOSTED_DOORBELL_LATENCY_NS);
        }
        dev
    }

    /// Install (or replace) the interrupt hook: from now on it is called
    /// with the vector of every interrupt the device sends, beside the
    /// latching [`SimHal`](crate::SimHal)'s waits use.
    pub fn host_set_irq_hook(&self, irq: IrqHook) {
        self.lock().irq_hook = Some(irq);
    }

    /// Move device time to the host's clock `now_ns` (never backwards) and
    /// run whatever fell due.
    pub fn host_tick(&self, now_ns: u64) {
        {
            let mut st = self.lock();
            if now_ns > st.clock.vclock_ns {
                st.clock.vclock_ns = now_ns;
            }
            st.run_due();
        }
        self.pump_wire();
    }

    /// The host clock time at which [`Device::host_tick`] has work to do
    /// (a delayed completion, a retry or moderation timer), if any.
    pub fn host_next_deadline_ns(&self) -> Option<u64> {
        let st = self.lock();
        st.next_due_in_ns()
            .map(|d| st.clock.vclock_ns.saturating_add(d))
    }

    /// A host's MMIO read of `width` bytes (1, 2, 4 or 8, naturally aligned)
    /// at BAR0 `offset`, at host time `now_ns`. The value is the register's
    /// (big-endian on the bus); a 1- or 2-byte read returns those bytes of
    /// the 32-bit word, as a PCIe read with byte enables does (Linux reads
    /// the health buffer's `rfr_severity` and `synd` with `ioread8` and
    /// `ext_synd` with `ioread16be`). An access the device does not decode
    /// is recorded and reads all ones.
    pub fn host_mmio_read(&self, now_ns: u64, offset: u64, width: u32) -> u64 {
        self.host_tick(now_ns);
        let mut st = self.lock();
        let size = st.bar0_size() as u64;
        let ok = matches!(width, 1 | 2 | 4 | 8)
            && offset.is_multiple_of(width as u64)
            && offset.checked_add(width as u64).is_some_and(|e| e <= size);
        if !ok {
            st.records.violations.push(Violation::Mmio(format!(
                "read of {width} bytes at {offset:#x} (BAR0 is {size:#x} bytes)"
            )));
            return if width >= 8 {
                u64::MAX
            } else {
                (1u64 << (8 * width)) - 1
            };
        }
        let off = offset as usize;
        let value = match width {
            8 => ((st.mmio_read32(off) as u64) << 32) | st.mmio_read32(off + 4) as u64,
            4 => st.mmio_read32(off) as u64,
            _ => {
                // Byte k of the big-endian word is bits 31-8k..24-8k.
                let word = st.mmio_read32(off & !3) as u64;
                let shift = 8 * (4 - (off & 3) as u32 - width);
                (word >> shift) & ((1u64 << (8 * width)) - 1)
            }
        };
        drop(st);
        self.pump_wire();
        value
    }

    /// A host's MMIO write of `width` bytes (4 or 8) at BAR0 `offset`, at host
    /// time `now_ns`. An access the device does not decode is recorded and
    /// ignored.
    pub fn host_mmio_write(&self, now_ns: u64, offset: u64, width: u32, value: u64) {
        self.host_tick(now_ns);
        let mut st = self.lock();
        let size = st.bar0_size() as u64;
        let ok = matches!(width, 4 | 8)
            && offset.is_multiple_of(width as u64)
            && offset.checked_add(width as u64).is_some_and(|e| e <= size);
        if !ok {
            st.records.violations.push(Violation::Mmio(format!(
                "write of {width} bytes at {offset:#x} (BAR0 is {size:#x} bytes)"
            )));
            return;
        }
        st.mmio_write(offset as usize, value, width == 8);
        drop(st);
        self.pump_wire();
    }

    /// System reset or function-level reset: the function back to power-on
    /// (objects, pages, command queue, registers), as
    /// [`Device::function_reset`]. Device time keeps running.
    pub fn host_reset(&self) -> crate::ResetReport {
        self.function_reset()
    }
}
