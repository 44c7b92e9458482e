//! The MSI-X path of `mlx5-vfio` on QEMU's `igb` device (an emulated Intel
//! 82576 with MSI-X vectors), for `edu_probe`: QEMU's `edu` has only MSI,
//! and a ConnectX interrupts through MSI-X.
//!
//! igb raises any of its MSI-X vectors on demand: in MSI-X mode (`GPIE`
//! bit 4), a 1 written to bit `n` of `EICS` sets cause `n` of `EICR`, and a
//! cause enabled in `EIMS` sends MSI-X vector `n`; with the cause's bit in
//! `EIAC` the device clears the cause itself after sending (Intel 82576
//! datasheet, the interrupt registers; QEMU `hw/net/igb_core.c`,
//! `igb_raise_interrupts`, `igb_msix_notify`). Registers are 32-bit little-endian in BAR0.

use std::time::Duration;

use mlx5_hal::{Hal, HalError};
use mlx5_vfio::{IrqKind, VfioOptions, VfioPlatform};

use super::{kernel_has_vfio_irq, kernel_irq_count, Report};

const GPIE: usize = 0x1514;
const GPIE_MSIX_MODE: u32 = 1 << 4;
const EICS: usize = 0x1520;
const EIMS: usize = 0x1524;
const EIMC: usize = 0x1528;
const EIAC: usize = 0x152c;
const EICR: usize = 0x1580;
/// Causes that exist in MSI-X mode.
const CAUSES: u32 = 0x01ff_ffff;

/// Every check of the MSI-X path on the igb function at `addr` (bound to
/// vfio-pci). Step names end in `[msix]`.
pub fn checks(r: &mut Report, addr: &str) {
    let options = VfioOptions {
        allow_non_mellanox: true,
        hugepages: false,
        ..VfioOptions::default()
    };
    let p = match VfioPlatform::open(addr, options) {
        Ok(p) => p,
        Err(e) => {
            r.check(false, "open[msix]", e);
            return;
        }
    };
    let Some(irqs) = p.interrupts() else {
        r.check(
            false,
            "irq-setup[msix]",
            format_args!("no interrupts enabled; notices {:?}", p.notices()),
        );
        return;
    };
    let n = Hal::irq_vectors(&p);
    let last = n.saturating_sub(1);
    let first_line = kernel_irq_count(addr, 0);
    let last_line = kernel_irq_count(addr, last);
    let ok = irqs.kind == IrqKind::MsiX
        && irqs.offered >= 2
        && u32::from(irqs.vectors) == irqs.offered.min(64)
        && n == irqs.vectors
        && first_line.is_some()
        && last_line.is_some();
    r.check(
        ok,
        "irq-setup[msix]",
        format_args!(
            "{addr}: {} {} of {} vectors enabled at open (MSI-X preferred), Hal::irq_vectors() = {n}, \
             vfio-msix[0] and vfio-msix[{last}] in /proc/interrupts: {} {}",
            irqs.kind,
            irqs.vectors,
            irqs.offered,
            first_line.is_some(),
            last_line.is_some()
        ),
    );
    if !ok {
        return;
    }

    // MSI-X mode, every cause masked and cleared, then the vectors enabled
    // with auto-clear.
    p.mmio_write32_le(GPIE, GPIE_MSIX_MODE);
    p.mmio_write32_le(EIMC, CAUSES);
    p.mmio_write32_le(EICR, CAUSES);
    let all = (1u32 << n) - 1;
    p.mmio_write32_le(EIAC, all);
    p.mmio_write32_le(EIMS, all);
    let quiet = Hal::wait_irq(&p, u64::from(all), 20_000_000);

    // One vector raised while nobody waits: only its kernel handler counts
    // it; a wait for another vector times out and leaves it latched; a wait
    // for it finds it at once; it is reported once.
    let a = 1u16;
    let b = last;
    let (a0, b0) = (count(addr, a), count(addr, b));
    p.mmio_write32_le(EICS, 1 << b);
    std::thread::sleep(Duration::from_millis(100));
    let (a1, b1) = (count(addr, a), count(addr, b));
    let t = p.now_ns();
    let other = Hal::wait_irq(&p, 1 << a, 50_000_000);
    let other_ms = (p.now_ns() - t) / 1_000_000;
    let own = Hal::wait_irq(&p, 1 << b, 0);
    let again = Hal::wait_irq(&p, 1 << b, 20_000_000);
    r.check(
        quiet == Ok(0)
            && b1 > b0
            && a1 == a0
            && other == Ok(0)
            && other_ms >= 50
            && own == Ok(1 << b)
            && again == Ok(0),
        "irq-vector[msix]",
        format_args!(
            "nothing pending after setup ({quiet:?}); vector {b} raised: kernel counts vector {b} {b0} -> {b1}, \
             vector {a} {a0} -> {a1}; wait_irq(vector {a}, 50 ms) = {other:?} after {other_ms} ms; \
             wait_irq(vector {b}, 0) = {}; again = {again:?}",
            hex(own)
        ),
    );

    // Two vectors raised together are reported together, by one wait.
    p.mmio_write32_le(EICS, (1 << a) | (1 << b));
    std::thread::sleep(Duration::from_millis(100));
    let both = Hal::wait_irq(&p, u64::MAX, 0);
    let after = Hal::wait_irq(&p, u64::MAX, 20_000_000);
    let want = (1u64 << a) | (1u64 << b);
    r.check(
        both == Ok(want) && after == Ok(0),
        "irq-vectors[msix]",
        format_args!(
            "vectors {a} and {b} raised: wait_irq(all, 0) = {} (want {want:#x}), then {after:?}",
            hex(both)
        ),
    );

    p.mmio_write32_le(EIMC, CAUSES);
    let before = kernel_has_vfio_irq(addr);
    let closed = p.close();
    let after_close = kernel_has_vfio_irq(addr);
    r.check(
        closed.is_ok() && before && !after_close,
        "irq-off-at-close[msix]",
        format_args!(
            "close {closed:?}; vfio-msix handlers of {addr} in /proc/interrupts before: {before}, after: {after_close}"
        ),
    );
}

/// A vector mask result in hex.
fn hex(r: Result<u64, HalError>) -> String {
    match r {
        Ok(m) => format!("Ok({m:#x})"),
        Err(e) => format!("Err({e:?})"),
    }
}

fn count(addr: &str, vector: u16) -> u64 {
    kernel_irq_count(addr, vector).unwrap_or(0)
}
