//! A decoder for humans: every named field of a buffer with its value, and a
//! hexdump in the format Linux `mlx5_core` prints (`cmd.c` `dump_buf`), so a
//! trace or a failing test can be diffed against a Linux log.

use core::fmt::{self, Write};

use crate::consts::{op_mod, Opcode};
use crate::field::read_bits;
use crate::layout::{FieldDesc, Kind, Layout};
use crate::layouts::roce_cap;

/// Decoder settings.
#[derive(Debug, Clone, Copy)]
pub struct DecodeOptions {
    /// Leave out fields whose value is zero (capability blocks are long).
    pub skip_zero: bool,
    /// At most this many elements of an array are printed.
    pub max_array: usize,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions {
            skip_zero: false,
            max_array: 64,
        }
    }
}

/// Write `name = value` for every field of `layout` found in `buf`, one per
/// line, embedded structures flattened with dotted names (`cq_context.log_cq_size`).
/// Fields beyond the end of `buf` are left out; a flexible array prints as
/// many elements as `buf` holds.
pub fn decode(
    layout: &Layout,
    buf: &[u8],
    opts: DecodeOptions,
    out: &mut dyn Write,
) -> fmt::Result {
    decode_at(layout, buf, 0, &mut Prefix::root(), opts, out)
}

/// Dotted name prefix without allocation.
struct Prefix<'a> {
    parts: [&'a str; 8],
    depth: usize,
}

impl<'a> Prefix<'a> {
    fn root() -> Self {
        Prefix {
            parts: [""; 8],
            depth: 0,
        }
    }
    fn write(&self, out: &mut dyn Write) -> fmt::Result {
        for p in &self.parts[..self.depth] {
            out.write_str(p)?;
            out.write_char('.')?;
        }
        Ok(())
    }
}

fn bytes_at(buf: &[u8], start_bit: u32, width: u32) -> Option<&[u8]> {
    let s = (start_bit / 8) as usize;
    let e = s + (width / 8) as usize;
    buf.get(s..e)
}

fn decode_at<'a>(
    layout: &'a Layout,
    buf: &[u8],
    base: u32,
    prefix: &mut Prefix<'a>,
    opts: DecodeOptions,
    out: &mut dyn Write,
) -> fmt::Result {
    for f in layout.fields {
        decode_field(f, buf, base, prefix, opts, out)?;
    }
    Ok(())
}

fn decode_field<'a>(
    f: &'a FieldDesc,
    buf: &[u8],
    base: u32,
    prefix: &mut Prefix<'a>,
    opts: DecodeOptions,
    out: &mut dyn Write,
) -> fmt::Result {
    let off = base + f.bit_off;
    match f.kind {
        Kind::Scalar => {
            let need = if f.width == 64 {
                off / 8 + 8
            } else {
                off / 32 * 4 + 4
            } as usize;
            if buf.len() < need {
                return Ok(());
            }
            let v = read_bits(buf, off, f.width);
            if v == 0 && opts.skip_zero {
                return Ok(());
            }
            prefix.write(out)?;
            if f.width == 1 {
                writeln!(out, "{} = {}", f.name, v)
            } else {
                writeln!(out, "{} = {:#x}", f.name, v)
            }
        }
        Kind::Bytes => {
            let Some(b) = bytes_at(buf, off, f.width) else {
                return Ok(());
            };
            if opts.skip_zero && b.iter().all(|&x| x == 0) {
                return Ok(());
            }
            prefix.write(out)?;
            write!(out, "{} = ", f.name)?;
            hex_inline(b, out)?;
            out.write_char('\n')
        }
        Kind::Sub(sub) => {
            if prefix.depth < prefix.parts.len() {
                prefix.parts[prefix.depth] = f.name;
                prefix.depth += 1;
                let r = decode_at(sub, buf, off, prefix, opts, out);
                prefix.depth -= 1;
                r
            } else {
                Ok(())
            }
        }
        Kind::Union(_) => {
            // Which alternative applies depends on context (the EQE type, the
            // op_mod); print the raw bytes and let the caller pick.
            let Some(b) = bytes_at(buf, off, f.width) else {
                return Ok(());
            };
            if opts.skip_zero && b.iter().all(|&x| x == 0) {
                return Ok(());
            }
            prefix.write(out)?;
            write!(out, "{} = ", f.name)?;
            hex_inline(b, out)?;
            out.write_char('\n')
        }
        Kind::Array { count } => {
            let start = (off / 8) as usize;
            let avail = buf.len().saturating_sub(start) * 8 / f.width as usize;
            let n = if count == 0 {
                avail
            } else {
                avail.min(count as usize)
            };
            for i in 0..n.min(opts.max_array) {
                let v = read_bits(buf, off + i as u32 * f.width, f.width);
                if v == 0 && opts.skip_zero {
                    continue;
                }
                prefix.write(out)?;
                writeln!(out, "{}[{}] = {:#x}", f.name, i, v)?;
            }
            if n > opts.max_array {
                prefix.write(out)?;
                writeln!(out, "{}[..] ({} more elements)", f.name, n - opts.max_array)?;
            }
            Ok(())
        }
    }
}

fn hex_inline(b: &[u8], out: &mut dyn Write) -> fmt::Result {
    const MAX: usize = 64;
    for (i, x) in b.iter().take(MAX).enumerate() {
        if i > 0 && i % 4 == 0 {
            out.write_char(' ')?;
        }
        write!(out, "{x:02x}")?;
    }
    if b.len() > MAX {
        write!(out, " ... ({} bytes)", b.len())?;
    }
    Ok(())
}

/// Which side of a command a buffer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// The command's input.
    Input,
    /// The command's output.
    Output,
}

/// Decode a command's input or output by its opcode. The capability block of
/// QUERY_HCA_CAP / SET_HCA_CAP is decoded field by field for capability type
/// 0 (general, `cmd_hca_cap`) and 4 (RoCE, `roce_cap`); other capability
/// pages print as bytes.
/// Returns `Ok(false)` when the opcode has no known layout (nothing written).
pub fn decode_command(
    opcode: Opcode,
    op_mod_value: u16,
    dir: Direction,
    buf: &[u8],
    opts: DecodeOptions,
    out: &mut dyn Write,
) -> Result<bool, fmt::Error> {
    let Some((inl, outl)) = opcode.layouts() else {
        return Ok(false);
    };
    let layout = match dir {
        Direction::Input => inl,
        Direction::Output => outl,
    };
    let cap_type = op_mod_value >> 1;
    let caps_not_general = (opcode == Opcode::QUERY_HCA_CAP || opcode == Opcode::SET_HCA_CAP)
        && cap_type != op_mod::CAP_GENERAL;
    if caps_not_general {
        for f in layout.fields {
            if f.name == "capability" && cap_type == op_mod::CAP_ROCE {
                let mut prefix = Prefix::root();
                prefix.parts[0] = f.name;
                prefix.depth = 1;
                decode_at(&roce_cap::LAYOUT, buf, f.bit_off, &mut prefix, opts, out)?;
            } else if f.name == "capability" {
                let Some(b) = bytes_at(buf, f.bit_off, f.width) else {
                    continue;
                };
                write!(out, "capability (type {cap_type:#x}) = ")?;
                hex_inline(b, out)?;
                out.write_char('\n')?;
            } else {
                decode_field(f, buf, 0, &mut Prefix::root(), opts, out)?;
            }
        }
    } else {
        decode(layout, buf, opts, out)?;
    }
    Ok(true)
}

/// Hexdump in the format of Linux `mlx5_core` `dump_buf`:
/// `cmd[IDX]: OFF: w0 w1 w2 w3` with 16 bytes (four big-endian words) a line
/// and the offset in 3 hex digits. A partial last line is zero-padded, as the
/// kernel prints whole words of its (zero-filled) message buffers.
pub fn hexdump(buf: &[u8], idx: u32, offset: usize, out: &mut dyn Write) -> fmt::Result {
    for (line, chunk) in buf.chunks(16).enumerate() {
        let mut words = [0u32; 4];
        for (i, b) in chunk.iter().enumerate() {
            words[i / 4] |= (*b as u32) << (24 - 8 * (i % 4));
        }
        writeln!(
            out,
            "cmd[{}]: {:03x}: {:08x} {:08x} {:08x} {:08x}",
            idx,
            offset + line * 16,
            words[0],
            words[1],
            words[2],
            words[3]
        )?;
    }
    Ok(())
}
