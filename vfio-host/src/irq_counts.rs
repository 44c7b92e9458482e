//! The kernel's own count of a VFIO device's interrupts, from
//! `/proc/interrupts`.
//!
//! vfio-pci requests one Linux interrupt per enabled vector and names it
//! `vfio-msix[<vector>](<DDDD:BB:DD.F>)` (`vfio-msi[...]` for MSI; Linux
//! `drivers/vfio/pci/vfio_pci_intrs.c`); `/proc/interrupts` shows, per CPU,
//! how many messages the kernel's handler took on each, and the handler
//! signals the vector's eventfd once per message. These counts are
//! independent of this crate's waits: they say whether the device's
//! messages reached the kernel at all (through the IOMMU's interrupt
//! remapping when it is on), whoever later read the eventfds. The lines
//! exist only while the vectors are enabled, so between open and close.

use crate::irq::IrqKind;

/// Per-vector interrupt counts of `addr` (`DDDD:BB:DD.F`) in the text of
/// `/proc/interrupts`, summed over the CPUs: entry `i` is vector `i`, for
/// `vectors` vectors. A vector without a line counts 0.
///
/// The first line names the CPU columns (`CPU0 CPU1 ...`); every later line
/// is `<irq>: <count per CPU> <controller...> <action names>`. Only lines
/// naming exactly `vfio-msix[i](addr)` (or `vfio-msi[i](addr)` for
/// [`IrqKind::Msi`]) count.
pub fn parse_proc_interrupts(text: &str, kind: IrqKind, addr: &str, vectors: u16) -> Vec<u64> {
    let mut counts = vec![0u64; usize::from(vectors)];
    let mut lines = text.lines();
    let cpus = lines
        .next()
        .map_or(0, |header| header.split_whitespace().count());
    let prefix = match kind {
        IrqKind::MsiX => "vfio-msix[",
        IrqKind::Msi => "vfio-msi[",
    };
    for line in lines {
        let Some(vector) = vector_named(line, prefix, addr) else {
            continue;
        };
        let Some(slot) = counts.get_mut(vector) else {
            continue;
        };
        // The label (`24:`), then one count per CPU.
        *slot += line
            .split_whitespace()
            .skip(1)
            .take(cpus)
            .map_while(|t| t.parse::<u64>().ok())
            .sum::<u64>();
    }
    counts
}

/// The vector of the action `prefix<vector>](addr)` this line names, if any.
fn vector_named(line: &str, prefix: &str, addr: &str) -> Option<usize> {
    let mut rest = line;
    while let Some(at) = rest.find(prefix) {
        let after = &rest[at + prefix.len()..];
        let close = after.find(']')?;
        if let Ok(v) = after[..close].parse::<usize>() {
            let tail = &after[close + 1..];
            if let Some(name) = tail.strip_prefix('(').and_then(|t| t.strip_prefix(addr)) {
                if name.starts_with(')') {
                    return Some(v);
                }
            }
        }
        rest = after;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shaped like a Linux 6.1 guest with two CPUs, the device at
    /// 0000:01:00.0 on three vectors and another vfio device beside it.
    const TEXT: &str = "           CPU0       CPU1
  0:         44          0   IO-APIC   2-edge      timer
 24:          5          2  IR-PCI-MSIX-0000:01:00.0    0-edge      vfio-msix[0](0000:01:00.0)
 25:          0          0  IR-PCI-MSIX-0000:01:00.0    1-edge      vfio-msix[1](0000:01:00.0)
 26:         17          1  IR-PCI-MSIX-0000:01:00.0    2-edge      vfio-msix[2](0000:01:00.0)
 27:          9          9  IR-PCI-MSIX-0000:02:00.0    0-edge      vfio-msix[0](0000:02:00.0)
 28:          3          0  IR-PCI-MSI-0000:03:00.0    0-edge      vfio-msi[0](0000:03:00.0)
 29:          4          0  IR-PCI-MSIX-0000:01:00.0   12-edge      vfio-msix[12](0000:01:00.0)
NMI:          0          0   Non-maskable interrupts
ERR:          0
";

    #[test]
    fn counts_each_vector_of_the_device_over_all_cpus() {
        let c = parse_proc_interrupts(TEXT, IrqKind::MsiX, "0000:01:00.0", 4);
        assert_eq!(c, vec![7, 0, 18, 0]);
    }

    #[test]
    fn vectors_past_the_enabled_ones_and_other_devices_do_not_count() {
        let c = parse_proc_interrupts(TEXT, IrqKind::MsiX, "0000:01:00.0", 13);
        assert_eq!(c[12], 4, "vector 12 is not vector 1");
        assert_eq!(c.iter().sum::<u64>(), 29);
        assert_eq!(
            parse_proc_interrupts(TEXT, IrqKind::MsiX, "0000:02:00.0", 2),
            vec![18, 0]
        );
        assert_eq!(
            parse_proc_interrupts(TEXT, IrqKind::MsiX, "0000:01:00.1", 2),
            vec![0, 0],
            "another function of the same slot"
        );
    }

    #[test]
    fn msi_and_msix_lines_are_told_apart() {
        assert_eq!(
            parse_proc_interrupts(TEXT, IrqKind::Msi, "0000:03:00.0", 1),
            vec![3]
        );
        assert_eq!(
            parse_proc_interrupts(TEXT, IrqKind::MsiX, "0000:03:00.0", 1),
            vec![0]
        );
        assert_eq!(
            parse_proc_interrupts(TEXT, IrqKind::Msi, "0000:01:00.0", 1),
            vec![0]
        );
    }

    #[test]
    fn empty_or_headless_text_counts_nothing() {
        assert_eq!(
            parse_proc_interrupts("", IrqKind::MsiX, "0000:01:00.0", 2),
            vec![0, 0]
        );
        assert!(parse_proc_interrupts(TEXT, IrqKind::MsiX, "0000:01:00.0", 0).is_empty());
    }
}
