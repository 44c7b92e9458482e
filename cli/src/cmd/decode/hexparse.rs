//! Reading hexdumps back into bytes: the tool's own (`mlx5 trace
//! --hexdump`), Linux `mlx5_core`'s `dump_buf` lines as they appear in a
//! kernel log (`[ 12.3] mlx5_core 0000:03:00.0: cmd[0]: 010: 00000000 ...`,
//! drivers/net/ethernet/mellanox/mlx5/core/cmd.c), the kernel's
//! `print_hex_dump` with one-byte groups (`00000010: 00 01 ... 0f  ....`,
//! lib/hexdump.c, how `mlx5_dump_err_cqe` prints a CQE) and plain hex.

use mlx5_regs::decode::Direction;

use crate::common::error::{quote, CliError};

/// The largest buffer a dump may describe: a command's input or output
/// with every mailbox block (`MAX_CMD_LEN` is 4112 bytes) fits many times
/// over; an offset past it is refused before anything is allocated.
pub const MAX_BUFFER: usize = 1 << 20;

/// One buffer found in a dump.
#[derive(Debug, Clone, Default)]
pub struct Buffer {
    /// Its bytes, placed at the offsets the dump gave.
    pub bytes: Vec<u8>,
    /// The direction a `dump command data NAME(0xOP) INPUT|OUTPUT` header
    /// named, if any.
    pub dir: Option<Direction>,
    /// The opcode that header named.
    pub opcode: Option<u16>,
    /// Which format the lines were in (`dump_buf`, `print_hex_dump`, `plain`).
    pub format: &'static str,
}

/// Parse `text` into buffers: a `dump command data` header, or an offset
/// that goes back to 0, starts a new one. Lines that are neither a header
/// nor hex (other kernel messages) are skipped; a file with no hex at all is
/// an error.
pub fn parse(text: &str) -> Result<Vec<Buffer>, CliError> {
    let mut bufs: Vec<Buffer> = Vec::new();
    let mut cur: Option<Buffer> = None;
    let mut last_off: Option<usize> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = strip_timestamp(raw.trim());
        if line.is_empty() {
            continue;
        }
        if let Some((op, dir)) = header(line) {
            bufs.extend(cur.take().filter(|b| !b.bytes.is_empty()));
            cur = Some(Buffer {
                dir: Some(dir),
                opcode: Some(op),
                ..Buffer::default()
            });
            last_off = None;
            continue;
        }
        let Some((off, bytes, format)) = hex_line(line).map_err(|e| {
            CliError::usage(
                format!("line {}: {e}: {}", i + 1, quote(raw)),
                "a hexdump line is `cmd[N]: OFF: w0 w1 w2 w3`, `OFF: b0 b1 ...` or plain hex",
            )
        })?
        else {
            continue;
        };
        let restart = match (off, last_off) {
            (Some(0), Some(_)) => true,
            (Some(_), _) => false,
            (None, _) => false,
        };
        if restart {
            bufs.extend(cur.take().filter(|b| !b.bytes.is_empty()));
        }
        let b = cur.get_or_insert_with(Buffer::default);
        b.format = format;
        let at = off.unwrap_or(b.bytes.len());
        // The offset is the dump's word, not ours: checked against the
        // bound before a byte is allocated for it.
        let end = at
            .checked_add(bytes.len())
            .filter(|e| *e <= MAX_BUFFER)
            .ok_or_else(|| {
                CliError::usage(
                    format!(
                        "line {}: offset {at:#x} puts the data past {MAX_BUFFER:#x} bytes, \
                         the largest buffer this tool decodes",
                        i + 1
                    ),
                    "the offsets of a hexdump count from 0 within one command, CQE or EQE",
                )
            })?;
        if b.bytes.len() < end {
            b.bytes.resize(end, 0);
        }
        b.bytes[at..at + bytes.len()].copy_from_slice(&bytes);
        last_off = off.or(last_off);
    }
    bufs.extend(cur.filter(|b| !b.bytes.is_empty()));
    if bufs.is_empty() {
        return Err(CliError::usage(
            "no hexdump lines in the input",
            "give the tool's or Linux's hexdump (`cmd[N]: OFF: w0 w1 w2 w3`), \
             print_hex_dump lines (`OFF: b0 b1 ...`) or plain hex",
        ));
    }
    Ok(bufs)
}

/// A kernel log's `[ 1234.567890] ` and `<7>` prefixes.
fn strip_timestamp(mut s: &str) -> &str {
    loop {
        let t = s.trim_start();
        let close = match t.chars().next() {
            Some('[') => ']',
            Some('<') => '>',
            _ => return t,
        };
        match t.find(close) {
            Some(e)
                if t[1..e]
                    .chars()
                    .all(|c| c.is_ascii_digit() || c == '.' || c == ' ') =>
            {
                s = &t[e + 1..]
            }
            _ => return t,
        }
    }
}

/// `dump command data NAME(0xOP) INPUT|OUTPUT` (Linux `dump_command`, and
/// `mlx5 trace --hexdump`).
fn header(line: &str) -> Option<(u16, Direction)> {
    let at = line.find("dump command")?;
    let rest = &line[at..];
    let open = rest.find("(0x")?;
    let close = rest[open..].find(')')? + open;
    let op = u16::from_str_radix(&rest[open + 3..close], 16).ok()?;
    let dir = if rest[close..].contains("INPUT") {
        Direction::Input
    } else if rest[close..].contains("OUTPUT") {
        Direction::Output
    } else {
        return None;
    };
    Some((op, dir))
}

type HexLine = Option<(Option<usize>, Vec<u8>, &'static str)>;

/// One line: `Ok(None)` when it holds no hex (skipped), the offset it gave
/// (if any), its bytes and its format.
fn hex_line(line: &str) -> Result<HexLine, String> {
    // The offset token: `OFF:` in hex, after anything (`cmd[3]: `, a device
    // name); `cmd[N]:` itself is not one.
    let toks: Vec<(usize, &str)> = line
        .split_whitespace()
        .map(|t| (t.as_ptr() as usize - line.as_ptr() as usize, t))
        .collect();
    for (k, (pos, t)) in toks.iter().enumerate() {
        let Some(h) = t.strip_suffix(':') else {
            continue;
        };
        if h.is_empty() || h.len() > 16 || !h.chars().all(|c| c.is_ascii_hexdigit()) {
            continue;
        }
        // The next token must be hex too (`0000:03:00.0:` is a PCI name).
        if !toks
            .get(k + 1)
            .is_some_and(|(_, n)| n.chars().all(|c| c.is_ascii_hexdigit()))
        {
            continue;
        }
        let off = usize::from_str_radix(h, 16).map_err(|e| e.to_string())?;
        let rest = &line[pos + t.len()..];
        let rest = rest.trim_start();
        // print_hex_dump's ASCII column follows two spaces.
        let hexpart = rest.split("  ").next().unwrap_or("");
        let dump_buf = line[..*pos].contains("cmd[");
        let (bytes, format) = words(hexpart, dump_buf)?;
        return Ok(Some((Some(off), bytes, format)));
    }
    // Plain hex: every token hex (an optional 0x), or nothing at all.
    let plain: Vec<&str> = line
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter(|t| !t.is_empty())
        .map(|t| t.trim_start_matches("0x"))
        .collect();
    if plain.is_empty()
        || !plain
            .iter()
            .all(|t| t.chars().all(|c| c.is_ascii_hexdigit()))
    {
        return Ok(None);
    }
    let mut bytes = Vec::new();
    for t in plain {
        bytes.extend(hex_bytes(t)?);
    }
    Ok(Some((None, bytes, "plain")))
}

/// The groups of a line: 8 digits is a big-endian word (dump_buf), 2 digits
/// a byte (print_hex_dump with groupsize 1).
fn words(s: &str, dump_buf: bool) -> Result<(Vec<u8>, &'static str), String> {
    let mut out = Vec::new();
    let mut format = if dump_buf {
        "dump_buf"
    } else {
        "print_hex_dump"
    };
    for g in s.split_whitespace() {
        if !g.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(format!("`{}` is not hex", quote(g)));
        }
        match g.len() {
            2 | 8 => out.extend(hex_bytes(g)?),
            n => return Err(format!("a group of {n} hex digits (2 or 8 expected)")),
        }
        if g.len() == 8 && !dump_buf {
            format = "words";
        }
    }
    Ok((out, format))
}

fn hex_bytes(t: &str) -> Result<Vec<u8>, String> {
    if !t.len().is_multiple_of(2) {
        return Err(format!("`{}` has an odd number of hex digits", quote(t)));
    }
    (0..t.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&t[i..i + 2], 16).map_err(|e| e.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_log_dump_buf_with_header() {
        let log = "[  10.5] mlx5_core 0000:03:00.0: cmd[2]: dump command data CREATE_CQ(0x400) INPUT\n\
                   [  10.5] mlx5_core 0000:03:00.0: cmd[2]: 000: 04000000 00000000 00000000 00000000\n\
                   [  10.5] mlx5_core 0000:03:00.0: something else\n\
                   [  10.5] mlx5_core 0000:03:00.0: cmd[2]: 010: 00000001 00000000 00000000 000000ff\n";
        let b = parse(log).unwrap();
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].opcode, Some(0x400));
        assert_eq!(b[0].dir, Some(Direction::Input));
        assert_eq!(b[0].bytes.len(), 32);
        assert_eq!(&b[0].bytes[..2], &[4, 0]);
        assert_eq!(b[0].bytes[19], 1);
        assert_eq!(b[0].bytes[31], 0xff);
        assert_eq!(b[0].format, "dump_buf");
    }

    #[test]
    fn print_hex_dump_with_ascii_and_plain() {
        let d = "00000000: 00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f  ................\n\
                 00000010: 41 42  AB\n";
        let b = parse(d).unwrap();
        assert_eq!(b[0].bytes.len(), 18);
        assert_eq!(b[0].bytes[17], 0x42);
        let p = parse("0x04 0x00, 00 00\n00000000 deadbeef\n").unwrap();
        assert_eq!(
            p[0].bytes,
            vec![4, 0, 0, 0, 0, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef]
        );
        assert!(parse("hello\n").is_err());
        assert!(parse("000: 123\n").is_err());
    }

    #[test]
    fn offset_zero_again_starts_a_new_buffer() {
        let d = "cmd[0]: 000: 01000000 00000000 00000000 00000000\n\
                 cmd[0]: 000: 00000000 00000000 00000000 00000000\n";
        assert_eq!(parse(d).unwrap().len(), 2);
    }
}
