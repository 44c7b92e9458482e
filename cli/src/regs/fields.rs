//! Command inputs by field name: resolving `cq_context.log_cq_size` or
//! `pas[3]` to bits of an mlx5-regs layout, parsing values for them, and
//! building the input buffer, refusing a field given twice.

use mlx5_driver::cmd::MAX_CMD_LEN;
use mlx5_regs::field::{read_bits, write_bits};
use mlx5_regs::{Kind, Layout, Opcode};

use crate::common::error::{quote, CliError};
use crate::common::target::parse_u64;

/// A field resolved inside a layout.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place {
    pub name: &'static str,
    pub bit_off: u32,
    pub width: u32,
    pub bytes: bool,
    /// Bytes the buffer must have for this field.
    pub need: usize,
}

fn leaf_names(l: &Layout, prefix: &str, out: &mut Vec<String>) {
    for f in l.fields {
        if f.name.starts_with("reserved") {
            continue;
        }
        let n = if prefix.is_empty() {
            f.name.to_string()
        } else {
            format!("{prefix}.{}", f.name)
        };
        match f.kind {
            Kind::Sub(sub) => leaf_names(sub, &n, out),
            Kind::Array { .. } => out.push(format!("{n}[i]")),
            _ => out.push(n),
        }
    }
}

pub(crate) fn resolve(layout: &'static Layout, path: &str) -> Result<Place, CliError> {
    // The path as messages quote it (bounded: it is the user's input).
    let qp = quote(path);
    let parts: Vec<&str> = path.split('.').collect();
    let mut cur = layout;
    let mut base = 0u32;
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        let (name, idx) = match part.split_once('[') {
            Some((n, rest)) => {
                let text = rest.strip_suffix(']').ok_or_else(|| {
                    CliError::usage(
                        format!("bad array index in '{}'", quote(path)),
                        "write array elements as name[3]=value",
                    )
                })?;
                let idx = parse_u64(text).map_err(|_| {
                    CliError::usage(
                        format!("bad array index in '{}'", quote(path)),
                        "write array elements as name[3]=value",
                    )
                })?;
                // An index past u32 can never address a command of
                // MAX_CMD_LEN bytes: refuse it instead of truncating.
                let idx = u32::try_from(idx).map_err(|_| {
                    CliError::usage(
                        format!("array index {idx} in '{}' is out of range", quote(path)),
                        format!("a command holds at most {MAX_CMD_LEN} bytes"),
                    )
                })?;
                (n, Some(idx))
            }
            None => (*part, None),
        };
        let Some(f) = cur.field(name) else {
            let mut all = Vec::new();
            leaf_names(layout, "", &mut all);
            let want = name.to_ascii_lowercase();
            let close: Vec<String> = all
                .iter()
                .filter(|n| {
                    let last = n.rsplit('.').next().unwrap_or("").trim_end_matches("[i]");
                    // The first five characters (not bytes: a name typed
                    // with non-ASCII letters must not be cut inside one).
                    let stem = want
                        .char_indices()
                        .nth(5)
                        .map_or(want.as_str(), |(i, _)| &want[..i]);
                    last.contains(want.as_str())
                        || (want.len() >= 4 && want.contains(last) && last.len() >= 4)
                        || (stem.len() >= 3 && last.starts_with(stem))
                })
                .take(8)
                .cloned()
                .collect();
            // Typos first: names a few edits from the whole path or from
            // its last part.
            let mut near = crate::common::text::suggest(path, all.iter().map(String::as_str), 4);
            for n in crate::common::text::suggest(
                name,
                all.iter().map(|n| n.rsplit('.').next().unwrap_or(n)),
                4,
            ) {
                if let Some(full) = all
                    .iter()
                    .find(|a| a.rsplit('.').next() == Some(n.as_str()))
                {
                    near.push(full.clone());
                }
            }
            let mut seen = Vec::new();
            near.retain(|n| {
                let new = !seen.contains(n);
                seen.push(n.clone());
                new
            });
            let rest: Vec<String> = close.into_iter().filter(|n| !near.contains(n)).collect();
            near.extend(rest);
            let mut close = near;
            close.truncate(8);
            let hint = if close.is_empty() {
                format!("fields: {}", all.join(", "))
            } else {
                format!("did you mean: {}?", close.join(", "))
            };
            return Err(CliError::usage(
                format!("'{qp}' is not a field of {}", layout.name),
                hint,
            ));
        };
        let off = base + f.bit_off;
        match (f.kind, last, idx) {
            (Kind::Sub(sub), false, None) => {
                base = off;
                cur = sub;
            }
            (Kind::Sub(_), true, _) => {
                return Err(CliError::usage(
                    format!(
                        "'{}' is a structure, not a field",
                        crate::common::error::quote(path)
                    ),
                    format!("set one of its fields, e.g. {qp}.<field>"),
                ))
            }
            (Kind::Scalar, true, None) => {
                let need = if f.width == 64 {
                    off / 8 + 8
                } else {
                    off / 32 * 4 + 4
                };
                return Ok(Place {
                    name: f.name,
                    bit_off: off,
                    width: f.width,
                    bytes: false,
                    need: need as usize,
                });
            }
            (Kind::Bytes | Kind::Union(_), true, None) => {
                return Ok(Place {
                    name: f.name,
                    bit_off: off,
                    width: f.width,
                    bytes: true,
                    need: ((off + f.width) / 8) as usize,
                })
            }
            (Kind::Array { count }, true, Some(i)) => {
                if count > 0 && i >= count {
                    return Err(CliError::usage(
                        format!(
                            "'{}': {name} has {count} elements",
                            crate::common::error::quote(path)
                        ),
                        format!("use an index below {count}"),
                    ));
                }
                // In u64: index times width overflows u32 long before it
                // reaches the MAX_CMD_LEN check.
                let bit64 = u64::from(off) + u64::from(i) * u64::from(f.width);
                if count == 0 && bit64 / 8 + u64::from(f.width / 8) > MAX_CMD_LEN as u64 {
                    return Err(CliError::usage(
                        format!(
                            "'{}': the command would exceed {MAX_CMD_LEN} bytes",
                            crate::common::error::quote(path)
                        ),
                        "fewer elements",
                    ));
                }
                let bit = u32::try_from(bit64).map_err(|_| {
                    CliError::usage(
                        format!("'{}': index out of range", quote(path)),
                        "use a smaller index",
                    )
                })?;
                return Ok(Place {
                    name: f.name,
                    bit_off: bit,
                    width: f.width,
                    bytes: false,
                    need: ((bit + f.width) / 8) as usize,
                });
            }
            (Kind::Array { .. }, _, None) => {
                return Err(CliError::usage(
                    format!("'{}' is an array", crate::common::error::quote(path)),
                    format!("set elements one by one: {name}[0]=..."),
                ))
            }
            _ => {
                return Err(CliError::usage(
                    format!(
                        "'{}' does not name a field",
                        crate::common::error::quote(path)
                    ),
                    "use dotted names of the mlx5_ifc.h layout, e.g. cq_context.log_cq_size",
                ))
            }
        }
    }
    Err(CliError::usage(
        format!(
            "empty field name in '{}'",
            crate::common::error::quote(path)
        ),
        "",
    ))
}

pub(crate) fn parse_value(p: &Place, path: &str, v: &str) -> Result<Vec<u8>, CliError> {
    let bad = || {
        CliError::usage(
            format!(
                "'{}' is not a value for {} ({} bits)",
                quote(v),
                quote(path),
                p.width
            ),
            "numbers are decimal or 0x hex; 1-bit flags also take true/false",
        )
    };
    if p.bytes {
        let h = v.strip_prefix("0x").ok_or_else(bad)?;
        if h.len() % 2 != 0 || h.len() / 2 > (p.width / 8) as usize {
            return Err(bad());
        }
        let mut b = vec![0u8; (p.width / 8) as usize - h.len() / 2];
        for i in (0..h.len()).step_by(2) {
            b.push(u8::from_str_radix(&h[i..i + 2], 16).map_err(|_| bad())?);
        }
        return Ok(b);
    }
    let n = match v {
        "true" | "yes" | "on" if p.width == 1 => 1,
        "false" | "no" | "off" if p.width == 1 => 0,
        _ => parse_u64(v).map_err(|_| bad())?,
    };
    if p.width < 64 && n >> p.width != 0 {
        return Err(CliError::usage(
            format!(
                "{path} = {} does not fit: the field has {} bits",
                quote(v),
                p.width
            ),
            format!("the largest value is {:#x}", (1u64 << p.width) - 1),
        ));
    }
    Ok(n.to_be_bytes().to_vec())
}

/// A command input under construction.
pub(crate) struct Input {
    pub layout: &'static Layout,
    pub buf: Vec<u8>,
    /// Fields the user gave, with the bits each covers (start, end).
    set: Vec<(String, u32, u32)>,
}

impl Input {
    pub(crate) fn new(op: Opcode, layout: &'static Layout) -> Self {
        let mut buf = vec![0u8; layout.size];
        buf[0..2].copy_from_slice(&op.0.to_be_bytes());
        Input {
            layout,
            buf,
            set: Vec::new(),
        }
    }

    /// A field the user gave. Refused when it sets bits an earlier field
    /// already set (the same field twice, an array element and the whole
    /// array, a structure's bytes and one of its fields): one of the two
    /// values would be silently lost.
    pub(crate) fn put_user(&mut self, path: &str, value: &str) -> Result<(), CliError> {
        if !path.contains('[') && resolve(self.layout, path).is_err() {
            if let Ok(first) = resolve(self.layout, &format!("{path}[0]")) {
                return self.put_array(path, first, value);
            }
        }
        let p = resolve(self.layout, path)?;
        let (lo, hi) = (p.bit_off, p.bit_off + p.width);
        if let Some((prev, ..)) = self.set.iter().find(|(_, a, b)| lo < *b && *a < hi) {
            return Err(if prev == path {
                CliError::usage(
                    format!("{path} is given twice"),
                    "give each field once (the tool would otherwise keep only one of the values)",
                )
            } else {
                CliError::usage(
                    format!("{prev} and {path} set the same bits of the input"),
                    "give each part of the command once",
                )
            });
        }
        self.put(path, value)?;
        self.set.push((path.to_string(), lo, hi));
        Ok(())
    }

    /// `name=0x...` for an array: consecutive elements from index 0, each
    /// element's width in hex digits (`register_data=0x00000001deadbeef`).
    fn put_array(&mut self, path: &str, first: Place, value: &str) -> Result<(), CliError> {
        let digits = (first.width / 4) as usize;
        let bad = || {
            CliError::usage(
                format!("'{}' is not a value for the array {path}", crate::common::error::quote(value)),
                format!(
                    "give whole elements as one hex number, {digits} hex digits ({} bits) each, e.g. {path}=0x{}; or one element: {path}[0]=...",
                    first.width,
                    "0".repeat(digits)
                ),
            )
        };
        let hex = value.strip_prefix("0x").ok_or_else(bad)?;
        if hex.is_empty() || hex.len() % digits != 0 || !hex.bytes().all(|b| b.is_ascii_hexdigit())
        {
            return Err(bad());
        }
        for (i, chunk) in hex.as_bytes().chunks(digits).enumerate() {
            let elem = std::str::from_utf8(chunk).map_err(|_| bad())?;
            self.put_user(&format!("{path}[{i}]"), &format!("0x{elem}"))?;
        }
        Ok(())
    }

    /// Set a field (the user's or the tool's) without recording it.
    pub(crate) fn put(&mut self, path: &str, value: &str) -> Result<(), CliError> {
        let p = resolve(self.layout, path)?;
        let bytes = parse_value(&p, path, value)?;
        if self.buf.len() < p.need {
            self.buf.resize(p.need, 0);
        }
        if p.bytes {
            let s = (p.bit_off / 8) as usize;
            self.buf[s..s + bytes.len()].copy_from_slice(&bytes);
        } else {
            let v = u64::from_be_bytes(bytes.try_into().unwrap_or([0; 8]));
            write_bits(&mut self.buf, p.name, p.bit_off, p.width, v)
                .map_err(|e| CliError::usage(format!("{path}: {e}"), ""))?;
        }
        Ok(())
    }

    pub(crate) fn get(&self, path: &str) -> Option<u64> {
        let p = resolve(self.layout, path).ok()?;
        if p.bytes || self.buf.len() < p.need {
            return None;
        }
        Some(read_bits(&self.buf, p.bit_off, p.width))
    }

    pub(crate) fn given(&self, path: &str) -> bool {
        self.set.iter().any(|(s, ..)| s == path)
    }

    /// The user gave an element of the array `name` (`pas` for `pas[3]`).
    pub(crate) fn has_array(&self, name: &str) -> bool {
        self.set
            .iter()
            .any(|(s, ..)| s.strip_prefix(name).is_some_and(|r| r.starts_with('[')))
    }
}

pub(crate) fn out_field(layout: &'static Layout, out: &[u8], name: &str) -> Option<u64> {
    let p = resolve(layout, name).ok()?;
    (out.len() >= p.need).then(|| read_bits(out, p.bit_off, p.width))
}
