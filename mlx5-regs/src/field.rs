//! Typed accessors for big-endian bit fields in plain byte buffers.
//!
//! The firmware describes every structure the way `mlx5_ifc.h` does: a field
//! is a bit offset and a width inside a sequence of big-endian 32-bit words.
//! Bit offset 0 is the most significant bit of the first byte. A field of
//! fewer than 32 bits lives inside one word; a 64-bit field is 64-bit aligned
//! (checked at compile time by [`crate::layout::check`]).
//!
//! Getters panic when the buffer is shorter than the field (a caller bug: the
//! driver sizes every buffer from the layout). Setters never truncate: a value
//! wider than the field is [`RegError::Overflow`].

use core::marker::PhantomData;

/// What can go wrong when writing a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegError {
    /// The value does not fit in the field.
    Overflow {
        /// Field name as in `mlx5_ifc.h`.
        field: &'static str,
        /// Field width in bits.
        width: u32,
        /// The rejected value.
        value: u64,
    },
    /// The buffer is too short to hold the field (or array element).
    BufferTooShort {
        /// Field name as in `mlx5_ifc.h`.
        field: &'static str,
        /// Bytes needed.
        needed: usize,
        /// Bytes available.
        len: usize,
    },
    /// An index past the end of a fixed-size array field.
    IndexOutOfRange {
        /// Field name as in `mlx5_ifc.h`.
        field: &'static str,
        /// The rejected index.
        index: usize,
        /// Number of elements of the array.
        count: usize,
    },
}

impl core::fmt::Display for RegError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            RegError::Overflow {
                field,
                width,
                value,
            } => write!(
                f,
                "value {value:#x} does not fit in {width}-bit field {field}"
            ),
            RegError::BufferTooShort { field, needed, len } => {
                write!(f, "field {field} needs {needed} bytes, buffer has {len}")
            }
            RegError::IndexOutOfRange {
                field,
                index,
                count,
            } => write!(f, "index {index} outside {field}[{count}]"),
        }
    }
}

impl core::error::Error for RegError {}

/// A Rust type a bit field can be read as.
pub trait FieldValue: Copy {
    /// Widen to `u64` (for writing).
    fn to_u64(self) -> u64;
    /// Narrow from `u64` (the value is already masked to the field width,
    /// which the layout guarantees fits this type).
    fn from_u64(v: u64) -> Self;
}

macro_rules! impl_field_value {
    ($($t:ty),*) => {$(
        impl FieldValue for $t {
            #[inline(always)]
            fn to_u64(self) -> u64 { self as u64 }
            #[inline(always)]
            fn from_u64(v: u64) -> Self { v as $t }
        }
    )*};
}
impl_field_value!(u8, u16, u32, u64);

impl FieldValue for bool {
    #[inline(always)]
    fn to_u64(self) -> u64 {
        self as u64
    }
    #[inline(always)]
    fn from_u64(v: u64) -> Self {
        v != 0
    }
}

/// Read `width` bits at `bit_off` (width <= 32 inside one word, or an aligned
/// 64-bit field). Panics if `buf` is too short.
#[inline(always)]
pub fn read_bits(buf: &[u8], bit_off: u32, width: u32) -> u64 {
    if width == 64 {
        let o = (bit_off / 8) as usize;
        let b: [u8; 8] = buf[o..o + 8].try_into().expect("8-byte slice");
        return u64::from_be_bytes(b);
    }
    let o = (bit_off / 32 * 4) as usize;
    let word = u32::from_be_bytes(buf[o..o + 4].try_into().expect("4-byte slice"));
    let shift = 32 - width - bit_off % 32;
    let mask = if width == 32 {
        u32::MAX
    } else {
        (1u32 << width) - 1
    };
    ((word >> shift) & mask) as u64
}

/// Write `value` into `width` bits at `bit_off`, leaving every other bit of
/// the buffer untouched.
#[inline(always)]
pub fn write_bits(
    buf: &mut [u8],
    name: &'static str,
    bit_off: u32,
    width: u32,
    value: u64,
) -> Result<(), RegError> {
    if width < 64 && value >> width != 0 {
        return Err(RegError::Overflow {
            field: name,
            width,
            value,
        });
    }
    let needed = if width == 64 {
        (bit_off / 8 + 8) as usize
    } else {
        (bit_off / 32 * 4 + 4) as usize
    };
    if buf.len() < needed {
        return Err(RegError::BufferTooShort {
            field: name,
            needed,
            len: buf.len(),
        });
    }
    if width == 64 {
        let o = (bit_off / 8) as usize;
        buf[o..o + 8].copy_from_slice(&value.to_be_bytes());
        return Ok(());
    }
    let o = (bit_off / 32 * 4) as usize;
    let mut word = u32::from_be_bytes(buf[o..o + 4].try_into().expect("4-byte slice"));
    let shift = 32 - width - bit_off % 32;
    let mask = if width == 32 {
        u32::MAX
    } else {
        (1u32 << width) - 1
    };
    word = (word & !(mask << shift)) | ((value as u32) << shift);
    buf[o..o + 4].copy_from_slice(&word.to_be_bytes());
    Ok(())
}

/// A scalar field of type `T` (`bool` for 1-bit flags).
#[derive(Debug, Clone, Copy)]
pub struct Field<T> {
    /// Name as in `mlx5_ifc.h`.
    pub name: &'static str,
    /// Offset of the most significant bit from the start of the structure.
    pub bit_off: u32,
    /// Width in bits.
    pub width: u32,
    _t: PhantomData<T>,
}

impl<T: FieldValue> Field<T> {
    /// Describe a field (used by the `layouts!` macro).
    pub const fn new(name: &'static str, bit_off: u32, width: u32) -> Self {
        Field {
            name,
            bit_off,
            width,
            _t: PhantomData,
        }
    }

    /// Read the field. Panics if `buf` is shorter than the field's word.
    #[inline(always)]
    pub fn get(&self, buf: &[u8]) -> T {
        T::from_u64(read_bits(buf, self.bit_off, self.width))
    }

    /// Write the field; a value that does not fit is refused, never truncated.
    #[inline(always)]
    pub fn set(&self, buf: &mut [u8], value: T) -> Result<(), RegError> {
        write_bits(buf, self.name, self.bit_off, self.width, value.to_u64())
    }

    /// Largest value the field holds.
    pub const fn max(&self) -> u64 {
        if self.width >= 64 {
            u64::MAX
        } else {
            (1u64 << self.width) - 1
        }
    }

    /// Byte offset of the 32-bit word (or 64-bit value) holding the field.
    pub const fn byte_offset(&self) -> usize {
        if self.width == 64 {
            (self.bit_off / 8) as usize
        } else {
            (self.bit_off / 32 * 4) as usize
        }
    }
}

/// A byte-aligned run of bytes (inline data, a capability block, a union).
#[derive(Debug, Clone, Copy)]
pub struct Bytes {
    /// Name as in `mlx5_ifc.h`.
    pub name: &'static str,
    /// Offset in bits (a multiple of 32).
    pub bit_off: u32,
    /// Width in bits (a multiple of 32).
    pub width: u32,
}

impl Bytes {
    /// Byte range of the field inside its structure.
    pub const fn range(&self) -> core::ops::Range<usize> {
        (self.bit_off / 8) as usize..((self.bit_off + self.width) / 8) as usize
    }
    /// The field's bytes. Panics if `buf` is too short.
    pub fn get<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        &buf[self.range()]
    }
    /// The field's bytes, writable. Panics if `buf` is too short.
    pub fn get_mut<'a>(&self, buf: &'a mut [u8]) -> &'a mut [u8] {
        &mut buf[self.range()]
    }
    /// The rest of the buffer from the field's start: an embedded structure
    /// together with a flexible array that follows it (e.g. `rmpc.wq.pas[]`).
    pub fn tail<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        &buf[(self.bit_off / 8) as usize..]
    }
    /// Writable form of [`Bytes::tail`].
    pub fn tail_mut<'a>(&self, buf: &'a mut [u8]) -> &'a mut [u8] {
        &mut buf[(self.bit_off / 8) as usize..]
    }
}

/// An array of equal elements: fixed (`count > 0`) or flexible (`count == 0`,
/// it runs to the end of the buffer, like `pas[]`).
#[derive(Debug, Clone, Copy)]
pub struct Array<T> {
    /// Name as in `mlx5_ifc.h` (without `[]`).
    pub name: &'static str,
    /// Offset in bits of element 0.
    pub bit_off: u32,
    /// Width in bits of one element.
    pub elem_width: u32,
    /// Number of elements, 0 for a flexible array.
    pub count: u32,
    _t: PhantomData<T>,
}

impl<T: FieldValue> Array<T> {
    /// Describe an array (used by the `layouts!` macro).
    pub const fn new(name: &'static str, bit_off: u32, elem_width: u32, count: u32) -> Self {
        Array {
            name,
            bit_off,
            elem_width,
            count,
            _t: PhantomData,
        }
    }

    /// Byte offset of element `index`.
    pub const fn byte_offset(&self, index: usize) -> usize {
        (self.bit_off as usize + index * self.elem_width as usize) / 8
    }

    /// Bytes needed to hold the fixed part plus `n` elements (for a flexible
    /// array this is the command length with `n` entries).
    pub const fn len_with(&self, n: usize) -> usize {
        self.byte_offset(n)
    }

    fn check(&self, buf_len: usize, index: usize) -> Result<u32, RegError> {
        if self.count != 0 && index >= self.count as usize {
            return Err(RegError::IndexOutOfRange {
                field: self.name,
                index,
                count: self.count as usize,
            });
        }
        let needed = self.byte_offset(index + 1);
        if needed > buf_len {
            return Err(RegError::BufferTooShort {
                field: self.name,
                needed,
                len: buf_len,
            });
        }
        Ok(self.bit_off + index as u32 * self.elem_width)
    }

    /// Read element `index`; `None` past a fixed array's end or the buffer.
    pub fn get(&self, buf: &[u8], index: usize) -> Option<T> {
        let off = self.check(buf.len(), index).ok()?;
        Some(T::from_u64(read_bits(buf, off, self.elem_width)))
    }

    /// Write element `index`.
    pub fn set(&self, buf: &mut [u8], index: usize, value: T) -> Result<(), RegError> {
        let off = self.check(buf.len(), index)?;
        write_bits(buf, self.name, off, self.elem_width, value.to_u64())
    }

    /// How many whole elements `buf` holds (for a fixed array at most `count`).
    pub fn len_in(&self, buf: &[u8]) -> usize {
        let start = (self.bit_off / 8) as usize;
        let n = buf.len().saturating_sub(start) * 8 / self.elem_width as usize;
        if self.count == 0 {
            n
        } else {
            n.min(self.count as usize)
        }
    }
}
