//! The model's trace file: every command as the firmware saw it (decoded,
//! for diffing against a guest's `dyndbg` dump) and a `STATE` line whenever
//! the HCA state, the pages the firmware holds, the live objects, the
//! violations, the IOMMU faults or the MSI-X messages sent (`irqs`, every
//! vector) change. A harness reads the last `STATE`
//! line to check that a guest driver's unload returned every page.

use std::fs::File;
use std::io::{BufWriter, Write};

use mlx5_sim::Device;

/// Counters a `STATE` line shows.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Counters {
    hca: String,
    pages_held: usize,
    objects: usize,
    violations: usize,
    faults: usize,
    irqs: u64,
    driver_version: Option<String>,
}

pub(crate) struct TraceFile {
    out: BufWriter<File>,
    last: Counters,
    commands: u64,
}

impl TraceFile {
    pub(crate) fn new(f: File, profile: &str) -> TraceFile {
        let mut t = TraceFile {
            out: BufWriter::new(f),
            last: Counters::default(),
            commands: 0,
        };
        t.line(&format!("MODEL mlx5-sim profile {profile}"));
        t
    }

    pub(crate) fn line(&mut self, s: &str) {
        let _ = writeln!(self.out, "{s}");
        let _ = self.out.flush();
    }

    pub(crate) fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }

    pub(crate) fn update(&mut self, dev: &Device) {
        let entries = dev.trace();
        if !entries.is_empty() {
            dev.clear_trace();
            for e in &entries {
                self.commands += 1;
                let _ = write!(
                    self.out,
                    "CMD #{} at {} ns: {}",
                    self.commands,
                    e.start_ns,
                    e.render()
                );
            }
        }
        let violations = dev.violations();
        let faults = dev.iommu_faults();
        let now = Counters {
            hca: format!("{:?}", dev.hca_state()),
            pages_held: dev.pages_held(),
            objects: dev.objects().total(),
            violations: violations.len(),
            faults: faults.len(),
            irqs: (0..dev.irq_vectors()).map(|v| dev.interrupts(v)).sum(),
            driver_version: dev.driver_version(),
        };
        if now != self.last {
            for v in violations.iter().skip(self.last.violations) {
                let _ = writeln!(self.out, "VIOLATION {v:?}");
            }
            for f in faults.iter().skip(self.last.faults) {
                let _ = writeln!(self.out, "IOMMU-FAULT {f:?}");
            }
            let _ = writeln!(
                self.out,
                "STATE hca={} pages_held={} objects={} violations={} iommu_faults={} irqs={} commands={} driver_version={:?}",
                now.hca,
                now.pages_held,
                now.objects,
                now.violations,
                now.faults,
                now.irqs,
                self.commands,
                now.driver_version.as_deref().unwrap_or("")
            );
            let _ = self.out.flush();
            self.last = now;
        }
    }
}
