//! The command trace.

use std::fmt::Write;

use mlx5_regs::decode::{decode_command, hexdump, DecodeOptions, Direction};
use mlx5_regs::{CmdStatus, DeliveryStatus, Opcode};

/// One command as the firmware saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEntry {
    /// Command queue slot.
    pub slot: usize,
    /// Opcode.
    pub opcode: u16,
    /// op_mod.
    pub op_mod: u16,
    /// Raw input (inline + mailboxes), `input_length` bytes.
    pub input: Vec<u8>,
    /// Raw output as written back, `output_length` bytes.
    pub output: Vec<u8>,
    /// Command status (output byte 0).
    pub status: u8,
    /// Syndrome (output bytes 4-7).
    pub syndrome: u32,
    /// Delivery status (`status_own >> 1`); non-zero = not executed.
    pub delivery_status: u8,
    /// Device time of the doorbell.
    pub start_ns: u64,
    /// Doorbell to completion, device time.
    pub duration_ns: u64,
    /// The command was stalled by fault injection and never completes.
    pub stalled: bool,
}

impl TraceEntry {
    pub(crate) fn stalled(slot: usize, opcode: u16, op_mod: u16, now: u64) -> TraceEntry {
        TraceEntry {
            slot,
            opcode,
            op_mod,
            input: Vec::new(),
            output: Vec::new(),
            status: 0,
            syndrome: 0,
            delivery_status: 0,
            start_ns: now,
            duration_ns: 0,
            stalled: true,
        }
    }

    /// The opcode as an [`Opcode`].
    pub fn op(&self) -> Opcode {
        Opcode(self.opcode)
    }

    /// Render the entry for humans: a header line, then the decoded input
    /// and output (non-zero fields) via `mlx5_regs::decode`, falling back to
    /// a Linux-style hexdump for opcodes without a layout.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = write!(
            s,
            "slot {} {} op_mod {:#x}: ",
            self.slot,
            self.op(),
            self.op_mod
        );
        if self.stalled {
            s.push_str("STALLED (never completes)\n");
            return s;
        }
        if self.delivery_status != 0 {
            let _ = writeln!(
                s,
                "delivery error {:?} after {} ns",
                DeliveryStatus(self.delivery_status),
                self.duration_ns
            );
            return s;
        }
        let _ = writeln!(
            s,
            "{} syndrome {:#010x} in {} ns",
            CmdStatus(self.status),
            self.syndrome,
            self.duration_ns
        );
        let opts = DecodeOptions {
            skip_zero: true,
            max_array: 16,
        };
        for (dir, buf, name) in [
            (Direction::Input, &self.input, "in"),
            (Direction::Output, &self.output, "out"),
        ] {
            let _ = writeln!(s, "  {name}:");
            let mut body = String::new();
            match decode_command(self.op(), self.op_mod, dir, buf, opts, &mut body) {
                Ok(true) => {}
                _ => {
                    body.clear();
                    let _ = hexdump(buf, self.slot as u32, 0, &mut body);
                }
            }
            for line in body.lines() {
                let _ = writeln!(s, "    {line}");
            }
        }
        s
    }
}
