//! The in-guest program of `tests/vfio-qemu/run.sh`: drives QEMU's `edu` PCI
//! device through the same `mlx5-vfio` code a ConnectX goes through: open
//! (sysfs checks, container, group, device, reset, bus master), BAR0 mmap,
//! DMA memory from `Hal::alloc_dma` (IOVA allocator, huge pages or 4 KiB
//! pages, VFIO DMA map), interrupts (MSI enabled at open, `Hal::irq_vectors`
//! and `Hal::wait_irq` over the eventfds, checked against the guest kernel's
//! `/proc/interrupts`; and the opt-out), and close.
//!
//! Usage (as root, in the throw-away guest only): `edu_probe 0000:01:00.0
//! [0000:02:00.0]`; the optional second function is QEMU's `igb`, whose
//! MSI-X vectors `support/igb_msix.rs` checks (edu has MSI only).
//! edu must sit alone behind a PCIe root port, so that vfio-pci can reset it
//! (secondary bus reset) and the reset on open and close is checked. It writes `/proc/sys/vm/nr_hugepages` to run the DMA checks once on 2 MiB
//! huge pages and once with none reserved (the 4 KiB fallback).
//!
//! The `edu` registers are little-endian, so the checks use the platform's
//! `mmio_*_le` accessors over the same BAR0 mapping as the big-endian `Hal`
//! methods; the `Hal` view is checked against the same registers too.
//! Registers (QEMU `hw/misc/edu.c`): 0x00 id, 0x04 liveness (reads back the
//! complement), 0x08 factorial, 0x20 status, 0x24 interrupt status, 0x60
//! raise interrupt, 0x64 acknowledge, 0x80/0x88/0x90/0x98 DMA source,
//! destination, count, command (64-bit accesses); the device's DMA buffer is
//! at 0x40000..0x41000 and its DMA mask is 28 bits.
//!
//! Prints one `PASS`/`FAIL` line per check, then `RESULT <n> failures`, and
//! exits non-zero if any check failed.

use std::fmt::Display;
use std::time::Duration;

#[path = "support/igb_msix.rs"]
mod igb_msix;

use mlx5_hal::{DmaRegion, Hal, HalError, PAGE_SIZE};
use mlx5_vfio::{Error, IrqKind, Notice, VfioOptions, VfioPlatform, HUGE_PAGE_SIZE};

const ID: usize = 0x00;
const LIVENESS: usize = 0x04;
const FACTORIAL: usize = 0x08;
const STATUS: usize = 0x20;
const STATUS_COMPUTING: u32 = 0x01;
const IRQ_STATUS: usize = 0x24;
const IRQ_RAISE: usize = 0x60;
const IRQ_ACK: usize = 0x64;
const DMA_SRC: usize = 0x80;
const DMA_DST: usize = 0x88;
const DMA_COUNT: usize = 0x90;
const DMA_CMD: usize = 0x98;
const DMA_START: u64 = 1;
const DMA_TO_RAM: u64 = 2;
const DMA_IRQ: u64 = 4;
const DMA_IRQ_STATUS: u32 = 0x100;
const EDU_BUF: u64 = 0x40000;
const EDU_ID: u32 = 0x0100_00ed;
const EDU_DMA_LIMIT: u64 = 1 << 28;
/// Bound for every wait on the device (edu DMA takes 100 ms of virtual time;
/// TCG is slow).
const WAIT: Duration = Duration::from_secs(10);

struct Report {
    failures: u32,
}

impl Report {
    fn check(&mut self, ok: bool, name: &str, detail: impl Display) -> bool {
        println!("{} {name} {detail}", if ok { "PASS" } else { "FAIL" });
        if !ok {
            self.failures += 1;
        }
        ok
    }
}

fn options() -> VfioOptions {
    VfioOptions {
        allow_non_mellanox: true,
        dma_limit: EDU_DMA_LIMIT,
        hugepages: true,
        reset: true,
        max_irq_vectors: mlx5_hal::MAX_IRQ_VECTORS,
    }
}

/// Poll `done` every millisecond until it holds, for at most `WAIT`.
fn wait_for(p: &VfioPlatform, what: &str, mut done: impl FnMut() -> bool) -> Result<u64, String> {
    let start = p.now_ns();
    loop {
        if done() {
            return Ok((p.now_ns() - start) / 1_000_000);
        }
        if p.now_ns() - start > WAIT.as_nanos() as u64 {
            return Err(format!("{what}: still busy after {} s", WAIT.as_secs()));
        }
        p.delay_us(1000);
    }
}

/// Run one edu DMA and wait for it to finish. Returns milliseconds taken.
fn edu_dma(p: &VfioPlatform, src: u64, dst: u64, len: u64, cmd: u64) -> Result<u64, String> {
    for a in [src, dst] {
        if a != EDU_BUF && a + len > EDU_DMA_LIMIT {
            // edu aborts QEMU (hw_error) on addresses beyond its mask.
            return Err(format!("refusing DMA at {a:#x}: beyond edu's 28-bit mask"));
        }
    }
    p.mmio_write64_le(DMA_SRC, src);
    p.mmio_write64_le(DMA_DST, dst);
    p.mmio_write64_le(DMA_COUNT, len);
    p.mmio_write64_le(DMA_CMD, cmd | DMA_START);
    wait_for(p, "edu DMA", || p.mmio_read64_le(DMA_CMD) & DMA_START == 0)
}

fn pattern(i: usize, seed: u8) -> u8 {
    (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8
}

fn set_hugepages(n: u32) -> Result<u64, String> {
    std::fs::write("/proc/sys/vm/nr_hugepages", format!("{n}\n"))
        .map_err(|e| format!("writing /proc/sys/vm/nr_hugepages: {e}"))?;
    let meminfo = std::fs::read_to_string("/proc/meminfo").map_err(|e| e.to_string())?;
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("HugePages_Free:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| "no HugePages_Free in /proc/meminfo".to_string())
}

/// Every check on one opened device. `huge` says which DMA backing the phase
/// must get.
fn phase(r: &mut Report, addr: &str, tag: &str, huge: bool) {
    let t0 = std::time::Instant::now();
    let p = match VfioPlatform::open(addr, options()) {
        Ok(p) => p,
        Err(e) => {
            r.check(false, &format!("open[{tag}]"), e);
            return;
        }
    };
    r.check(
        true,
        &format!("open[{tag}]"),
        format_args!(
            "{addr} (iommu group {}, reset {}) in {} ms",
            p.device_info().iommu_group,
            if p.reset_supported() {
                "supported"
            } else {
                "not supported"
            },
            t0.elapsed().as_millis()
        ),
    );
    let notices = p.notices();
    let reset_trouble: Vec<&Notice> = notices
        .iter()
        .filter(|n| matches!(n, Notice::ResetFailed { .. } | Notice::ResetUnsupported))
        .collect();
    r.check(
        p.reset_supported() && reset_trouble.is_empty(),
        &format!("reset-on-open[{tag}]"),
        format_args!(
            "VFIO_DEVICE_RESET supported: {}, problems: {reset_trouble:?}",
            p.reset_supported()
        ),
    );
    let ranges: Vec<String> = p.iova_ranges().iter().map(|x| x.to_string()).collect();
    println!(
        "INFO iova ranges (IOMMU, clipped to 1 MiB..256 MiB): {}",
        ranges.join(" ")
    );
    let ok = p
        .iova_ranges()
        .iter()
        .all(|x| x.start >= mlx5_vfio::MIN_IOVA && x.end <= EDU_DMA_LIMIT);
    r.check(
        ok,
        &format!("iova-ranges[{tag}]"),
        "inside the 28-bit DMA limit",
    );

    match p.pci_command() {
        Ok(cmd) => r.check(
            cmd & 0x6 == 0x6,
            &format!("bus-master[{tag}]"),
            format_args!("PCI command {cmd:#06x} (memory space + bus master)"),
        ),
        Err(e) => r.check(false, &format!("bus-master[{tag}]"), e),
    };

    r.check(
        p.bar0_size() >= 0x1000,
        &format!("bar0-map[{tag}]"),
        format_args!("{:#x} bytes mmapped", p.bar0_size()),
    );
    let id = p.mmio_read32_le(ID);
    r.check(id == EDU_ID, "bar0-id", format_args!("{id:#010x}"));
    let id_be = Hal::mmio_read32(&p, ID);
    r.check(
        id_be == EDU_ID.swap_bytes(),
        "bar0-id-hal",
        format_args!("{id_be:#010x} (big-endian Hal view of the same register)"),
    );

    let mut live_ok = true;
    for x in [0x1234_5678u32, 0xdead_beef, 0] {
        p.mmio_write32_le(LIVENESS, x);
        live_ok &= p.mmio_read32_le(LIVENESS) == !x;
        Hal::mmio_write32(&p, LIVENESS, x);
        live_ok &= Hal::mmio_read32(&p, LIVENESS) == !x;
    }
    r.check(
        live_ok,
        "liveness",
        "3 values, write x read !x, LE and Hal paths",
    );

    p.mmio_write32_le(FACTORIAL, 10);
    let fact = wait_for(&p, "factorial", || {
        p.mmio_read32_le(STATUS) & STATUS_COMPUTING == 0
    })
    .map(|_| p.mmio_read32_le(FACTORIAL));
    r.check(
        fact == Ok(3_628_800),
        "factorial",
        format_args!("10! = {fact:?}"),
    );

    let t = p.now_ns();
    p.delay_us(2000);
    let dt = p.now_ns() - t;
    r.check(
        (2_000_000..1_000_000_000).contains(&dt),
        "clock",
        format_args!("delay_us(2000) took {} us", dt / 1000),
    );

    dma_checks(r, &p, tag, huge);
    irq_checks(r, &p, tag, addr);

    for n in p.notices() {
        println!("NOTE [{tag}] {n}");
    }
    // Close: refused while a clone lives, then the real release.
    let extra = p.clone();
    match p.close() {
        Err(Error::StillInUse { handles: 1 }) => {}
        other => {
            r.check(
                false,
                &format!("close[{tag}]"),
                format_args!("close with a live clone: {other:?}"),
            );
            return;
        }
    }
    let irq_before = kernel_has_vfio_irq(addr);
    match extra.close() {
        Ok(()) => r.check(
            true,
            &format!("close[{tag}]"),
            "refused while a clone lived; then irqs off, bus master off, VFIO_DEVICE_RESET, DMA unmapped, files closed",
        ),
        Err(e) => r.check(false, &format!("close[{tag}]"), e),
    };
    let irq_after = kernel_has_vfio_irq(addr);
    r.check(
        irq_before && !irq_after,
        &format!("irq-off-at-close[{tag}]"),
        format_args!(
            "vfio-msi handler of {addr} in /proc/interrupts before close: {irq_before}, after: {irq_after}"
        ),
    );
}

/// Interrupts opted out: nothing enabled, the `Hal` says none, the wait
/// says unsupported.
fn no_irq_phase(r: &mut Report, addr: &str) {
    let o = VfioOptions {
        max_irq_vectors: 0,
        ..options()
    };
    let p = match VfioPlatform::open(addr, o) {
        Ok(p) => p,
        Err(e) => {
            r.check(false, "irq-opt-out", e);
            return;
        }
    };
    let n = Hal::irq_vectors(&p);
    let w = Hal::wait_irq(&p, 1, 1_000_000);
    let kernel = kernel_has_vfio_irq(addr);
    let noticed = p
        .notices()
        .iter()
        .any(|n| matches!(n, Notice::NoInterrupts { .. }));
    let closed = p.close();
    r.check(
        n == 0 && w == Err(HalError::Unsupported) && !kernel && !noticed && closed.is_ok(),
        "irq-opt-out",
        format_args!(
            "max_irq_vectors 0: irq_vectors() = {n}, wait_irq = {w:?}, vfio-msi in /proc/interrupts: {kernel}, \
             notice: {noticed}, close {closed:?}"
        ),
    );
}

fn alloc(
    r: &mut Report,
    p: &VfioPlatform,
    size: usize,
    name: &str,
) -> Option<DmaRegion<VfioPlatform>> {
    match p.alloc_dma(size) {
        Ok(d) => Some(d),
        Err(e) => {
            r.check(false, name, format_args!("alloc_dma({size:#x}): {e}"));
            None
        }
    }
}

fn dma_checks(r: &mut Report, p: &VfioPlatform, tag: &str, huge: bool) {
    let seed = if huge { 0x11 } else { 0x77 };
    let Some(src) = alloc(r, p, PAGE_SIZE, "dma-alloc") else {
        return;
    };
    let Some(dst) = alloc(r, p, 3 * PAGE_SIZE, "dma-alloc") else {
        return;
    };
    let mut ok = true;
    for d in [&src, &dst] {
        ok &= d.iova() >= mlx5_vfio::MIN_IOVA
            && d.iova() + d.len() as u64 <= EDU_DMA_LIMIT
            && d.iova() != d.as_ptr() as u64
            && d.iova() % PAGE_SIZE as u64 == 0
            && (0..d.len()).all(|i| d.read_u8(i) == 0);
    }
    r.check(
        ok,
        &format!("dma-alloc[{tag}]"),
        format_args!(
            "iova {:#x} (cpu {:p}) and iova {:#x}+{:#x}: zeroed, page aligned, below 256 MiB, iova != cpu address",
            src.iova(),
            src.as_ptr(),
            dst.iova(),
            dst.len()
        ),
    );

    let stats = p.dma_stats();
    let fallback = p
        .notices()
        .iter()
        .any(|n| matches!(n, Notice::HugePagesUnavailable { .. }));
    if huge {
        r.check(
            stats.huge_chunks >= 1 && stats.carved_regions >= 2 && !fallback,
            &format!("dma-backing[{tag}]"),
            format_args!("2 MiB huge pages: {stats:?}"),
        );
    } else {
        r.check(
            stats.huge_chunks == 0 && stats.small_regions >= 2 && fallback,
            &format!("dma-backing[{tag}]"),
            format_args!("4 KiB pages after the huge page notice: {stats:?}"),
        );
    }

    for i in 0..PAGE_SIZE {
        src.write_u8(i, pattern(i, seed));
    }
    match edu_dma(p, src.iova(), EDU_BUF, PAGE_SIZE as u64, 0) {
        Ok(ms) => r.check(
            true,
            &format!("dma-to-device[{tag}]"),
            format_args!("4096 bytes from iova {:#x} in {ms} ms", src.iova()),
        ),
        Err(e) => r.check(false, &format!("dma-to-device[{tag}]"), e),
    };
    // Into the middle of the 3-page region, across a page boundary: proves
    // the region is contiguous in IOVA space and in the CPU view alike.
    let off = PAGE_SIZE + PAGE_SIZE / 2;
    let moved = edu_dma(p, EDU_BUF, dst.iova_at(off), PAGE_SIZE as u64, DMA_TO_RAM);
    let bad = (0..dst.len())
        .filter(|&i| {
            let want = if (off..off + PAGE_SIZE).contains(&i) {
                pattern(i - off, seed)
            } else {
                0
            };
            dst.read_u8(i) != want
        })
        .count();
    r.check(
        moved.is_ok() && bad == 0,
        &format!("dma-from-device[{tag}]"),
        format_args!(
            "4096 bytes to iova {:#x} across a page boundary: every byte verified, {} bytes around untouched ({bad} wrong, {moved:?} ms)",
            dst.iova_at(off),
            dst.len() - PAGE_SIZE
        ),
    );

    // Isolation: a region the device could write, then revoked from the IOMMU.
    let Some(guard) = alloc(r, p, HUGE_PAGE_SIZE, "dma-after-unmap") else {
        return;
    };
    let reach = edu_dma(p, EDU_BUF, guard.iova(), 64, DMA_TO_RAM).is_ok()
        && (0..64).all(|i| guard.read_u8(i) == pattern(i, seed));
    guard.fill(0, PAGE_SIZE, 0x5a);
    let revoked = p.revoke_dma(&guard);
    let ran = edu_dma(p, EDU_BUF, guard.iova(), PAGE_SIZE as u64, DMA_TO_RAM);
    let untouched = (0..PAGE_SIZE).all(|i| guard.read_u8(i) == 0x5a);
    r.check(
        reach && revoked.is_ok() && ran.is_ok() && untouched,
        &format!("dma-after-unmap[{tag}]"),
        format_args!(
            "iova {:#x}: reachable while mapped ({reach}), unmap {revoked:?}, DMA then completed ({ran:?}) and the buffer is untouched ({untouched})",
            guard.iova()
        ),
    );
    drop(guard);

    drop(src);
    drop(dst);
    let s = p.dma_stats();
    r.check(
        s.iova_free == s.iova_total
            && s.carved_regions + s.small_regions + s.huge_regions == 0
            && s.huge_chunks == 0,
        &format!("dma-free[{tag}]"),
        format_args!("every region unmapped and its IOVA returned: {s:?}"),
    );
}

/// The count of interrupts the guest kernel handled for the device's VFIO
/// vector `vector` (its `vfio-msi[<vector>](<addr>)` or `vfio-msix[..]` line
/// in `/proc/interrupts`, summed over CPUs), or `None` if no such line.
fn kernel_irq_count(addr: &str, vector: u16) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/interrupts").ok()?;
    let names = [
        format!("vfio-msi[{vector}]({addr})"),
        format!("vfio-msix[{vector}]({addr})"),
    ];
    let line = text
        .lines()
        .find(|l| names.iter().any(|n| l.contains(n.as_str())))?;
    Some(
        line.split_whitespace()
            .skip(1)
            .map_while(|t| t.parse::<u64>().ok())
            .sum(),
    )
}

/// Any vfio interrupt line of the device in `/proc/interrupts`.
fn kernel_has_vfio_irq(addr: &str) -> bool {
    std::fs::read_to_string("/proc/interrupts").is_ok_and(|t| {
        t.lines()
            .any(|l| l.contains("vfio-msi") && l.contains(&format!("({addr})")))
    })
}

fn ack(p: &VfioPlatform) -> u32 {
    let status = p.mmio_read32_le(IRQ_STATUS);
    p.mmio_write32_le(IRQ_ACK, status);
    status
}

/// The interrupt path through the real kernel: vfio-pci's MSI handler
/// signals the eventfd the platform bound at open, `Hal::wait_irq` polls it.
fn irq_checks(r: &mut Report, p: &VfioPlatform, tag: &str, addr: &str) {
    // edu has MSI with one vector and no MSI-X (QEMU hw/misc/edu.c,
    // msi_init), so the platform falls back from MSI-X to MSI.
    let Some(irqs) = p.interrupts() else {
        r.check(
            false,
            &format!("irq-setup[{tag}]"),
            format_args!("no interrupts enabled; notices {:?}", p.notices()),
        );
        return;
    };
    let n = Hal::irq_vectors(p);
    let registered = kernel_irq_count(addr, 0);
    r.check(
        irqs.kind == IrqKind::Msi && irqs.vectors == 1 && irqs.offered == 1 && n == 1
            && registered.is_some(),
        &format!("irq-setup[{tag}]"),
        format_args!(
            "{} {} of {} vector(s) enabled at open, Hal::irq_vectors() = {n}, kernel handler vfio-msi[0]({addr}) \
             in /proc/interrupts: {}",
            irqs.kind,
            irqs.vectors,
            irqs.offered,
            registered.map_or("absent".to_string(), |c| format!("count {c}"))
        ),
    );

    // Nothing raised: the wait ends at its bound, not before, not much after.
    ack(p);
    let t = p.now_ns();
    let quiet = Hal::wait_irq(p, 1, 100_000_000);
    let dt = p.now_ns() - t;
    let t = p.now_ns();
    let poll = Hal::wait_irq(p, 1, 0);
    let dt0 = p.now_ns() - t;
    r.check(
        quiet == Ok(0) && (100_000_000..600_000_000).contains(&dt) && poll == Ok(0) && dt0 < 50_000_000,
        &format!("irq-timeout[{tag}]"),
        format_args!(
            "nothing raised: wait_irq(100 ms) = {quiet:?} after {} us; wait_irq(0) = {poll:?} after {} us",
            dt / 1000,
            dt0 / 1000
        ),
    );
    let bad = Hal::wait_irq(p, 0b10, 0);
    r.check(
        bad == Err(HalError::InvalidRequest),
        &format!("irq-bad-mask[{tag}]"),
        format_args!("wait_irq on vector 1 of 1: {bad:?}"),
    );

    // Raised while nobody waits: the kernel handles it at once, the
    // eventfd latches it, and a wait with no time at all finds it.
    let c0 = kernel_irq_count(addr, 0).unwrap_or(0);
    p.mmio_write32_le(IRQ_RAISE, 0x1);
    std::thread::sleep(Duration::from_millis(100));
    let c1 = kernel_irq_count(addr, 0).unwrap_or(0);
    let latched = Hal::wait_irq(p, 1, 0);
    r.check(
        c1 == c0 + 1 && latched == Ok(1),
        &format!("irq-latched[{tag}]"),
        format_args!(
            "raised, then 100 ms without waiting: kernel count {c0} -> {c1}, then wait_irq(0) = {latched:?}"
        ),
    );

    // Acknowledged at the device; the eventfd reported it once.
    let status = ack(p);
    let after = p.mmio_read32_le(IRQ_STATUS);
    let twice = Hal::wait_irq(p, 1, 50_000_000);
    r.check(
        status == 1 && after == 0 && twice == Ok(0),
        &format!("irq-once[{tag}]"),
        format_args!(
            "irq status {status:#x}, after ack {after:#x}; the next wait_irq(50 ms) = {twice:?}"
        ),
    );

    // A blocked waiter wakes for the interrupt.
    let (woke, raised_at, woke_at) = std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let got = Hal::wait_irq(p, 1, WAIT.as_nanos() as u64);
            (got, p.now_ns())
        });
        std::thread::sleep(Duration::from_millis(50));
        let raised_at = p.now_ns();
        p.mmio_write32_le(IRQ_RAISE, 0x1);
        let (got, woke_at) = waiter.join().expect("waiter thread");
        (got, raised_at, woke_at)
    });
    let status = ack(p);
    r.check(
        woke == Ok(1) && woke_at > raised_at && status == 1,
        &format!("irq-wake[{tag}]"),
        format_args!(
            "a thread blocked in wait_irq(10 s) woke {} us after the raise with {woke:?} (irq status {status:#x})",
            woke_at.saturating_sub(raised_at) / 1000
        ),
    );

    // An application's own event loop: the vector's eventfd (irq_fd) becomes
    // readable on the interrupt; read there, the interrupt is consumed and
    // wait_irq does not report it again.
    let fd_check = match p.irq_fd(0) {
        Some(fd) => {
            let mut pfd = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            p.mmio_write32_le(IRQ_RAISE, 0x1);
            // SAFETY: one initialised pollfd in a live local; `fd` stays open
            // while the platform `p` lives.
            let ready = unsafe { libc::poll(&mut pfd, 1, WAIT.as_millis() as i32) };
            let mut buf = [0u8; 8];
            // SAFETY: `buf` is a live, exclusively borrowed 8-byte buffer, the
            // size of an eventfd read.
            let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), 8) };
            let after = Hal::wait_irq(p, 1, 0);
            let status = ack(p);
            (
                ready == 1 && n == 8 && u64::from_ne_bytes(buf) >= 1 && after == Ok(0) && status == 1,
                format!(
                    "poll(irq_fd(0)) = {ready}, read {n} bytes (count {}), then wait_irq(0) = {after:?} (irq status {status:#x})",
                    u64::from_ne_bytes(buf)
                ),
            )
        }
        None => (false, "irq_fd(0) is None".to_string()),
    };
    r.check(fd_check.0, &format!("irq-fd[{tag}]"), fd_check.1);

    // DMA completion raises the interrupt too (command bit 2).
    let done = match p.alloc_dma(PAGE_SIZE) {
        Ok(buf) => {
            let ran = edu_dma(p, EDU_BUF, buf.iova(), 8, DMA_TO_RAM | DMA_IRQ);
            let got = Hal::wait_irq(p, 1, WAIT.as_nanos() as u64);
            let status = ack(p);
            let again = Hal::wait_irq(p, 1, 0);
            (
                ran.is_ok() && got == Ok(1) && status == DMA_IRQ_STATUS && again == Ok(0),
                format!("wait_irq = {got:?}, irq status {status:#x}, then {again:?}"),
            )
        }
        Err(e) => (false, e.to_string()),
    };
    r.check(done.0, &format!("irq-dma-complete[{tag}]"), done.1);
}

fn main() {
    let Some(addr) = std::env::args().nth(1) else {
        eprintln!(
            "usage: edu_probe <pci address of the edu device> [<pci address of an igb device>], \
             both bound to vfio-pci"
        );
        std::process::exit(2);
    };
    let mut r = Report { failures: 0 };

    // The ConnectX check must refuse edu unless the caller opts out.
    match VfioPlatform::open(&addr, VfioOptions::default()) {
        Err(e @ Error::NotConnectX { .. }) => r.check(true, "not-connectx-refused", e),
        Err(e) => r.check(false, "not-connectx-refused", e),
        Ok(_) => r.check(
            false,
            "not-connectx-refused",
            "edu was accepted as a ConnectX",
        ),
    };

    match set_hugepages(8) {
        Ok(free) if free > 0 => {
            println!("INFO {free} free 2 MiB huge pages");
            phase(&mut r, &addr, "hugepages", true);
        }
        Ok(_) => {
            r.check(
                false,
                "hugepages-setup",
                "no huge page could be reserved in the guest",
            );
        }
        Err(e) => {
            r.check(false, "hugepages-setup", e);
        }
    }
    // Reopening after close also proves the first close released everything.
    match set_hugepages(0) {
        Ok(0) => phase(&mut r, &addr, "4k-fallback", false),
        other => {
            r.check(false, "hugepages-release", format_args!("{other:?}"));
        }
    }
    no_irq_phase(&mut r, &addr);
    match std::env::args().nth(2) {
        Some(igb) => igb_msix::checks(&mut r, &igb),
        None => println!("INFO no igb device given: the MSI-X checks do not run"),
    }
    println!("RESULT {} failures", r.failures);
    std::process::exit(if r.failures == 0 { 0 } else { 1 });
}
