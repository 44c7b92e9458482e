//! On a VFIO device, after the subcommand: the interrupts the platform
//! enabled and what the kernel counted on each vector
//! ([`mlx5_vfio::VfioPlatform::kernel_irq_counts`]), so a run shows whether
//! the device's MSI-X messages reached the host at all.

use serde_json::{json, Value};

/// Add `interrupts` to the run's JSON document and, when `say` (human
/// output of a subcommand that narrates a session), print one line:
/// kind, vectors, and the kernel's count per vector that fired.
pub fn report(plat: &mlx5_vfio::VfioPlatform, out: &mut Value, say: bool) {
    let Some(info) = plat.interrupts() else {
        if say {
            outln!("\ninterrupts: none enabled (the driver polled its event queues)");
        }
        if let Value::Object(m) = out {
            m.insert("interrupts".into(), Value::Null);
        }
        return;
    };
    let counts = plat.kernel_irq_counts();
    let (text, per_vector) = match &counts {
        Ok(c) => {
            let fired: Vec<String> = c
                .iter()
                .enumerate()
                .filter(|(_, &n)| n > 0)
                .map(|(v, n)| format!("vector {v}: {n}"))
                .collect();
            let total: u64 = c.iter().sum();
            (
                format!(
                    "the kernel took {total} ({})",
                    if fired.is_empty() {
                        "none on any vector".to_string()
                    } else {
                        fired.join(", ")
                    }
                ),
                json!(c),
            )
        }
        Err(e) => (format!("/proc/interrupts unreadable: {e}"), Value::Null),
    };
    if say {
        outln!(
            "\ninterrupts: {}, {} vectors enabled ({} offered); {text} (vfio-pci's lines in /proc/interrupts)",
            info.kind,
            info.vectors,
            info.offered
        );
    }
    if let Value::Object(m) = out {
        m.insert(
            "interrupts".into(),
            json!({
                "kind": info.kind.to_string(),
                "vectors": info.vectors,
                "offered": info.offered,
                "kernel_counts": per_vector,
            }),
        );
    }
}
