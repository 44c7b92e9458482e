//! Layout descriptors and the `layouts!` macro.
//!
//! Every firmware structure is written once, as a table:
//!
//! ```text
//! layouts! {
//!     /// Completion queue context (docs/firmware.md §7.1).
//!     cqc (64) {
//!         status: u8 @ 0 : 4,
//!         oi: bool @ 14 : 1,
//!         dbr_addr: u64 @ 448 : 64,
//!     }
//! }
//! ```
//!
//! A row is `name: kind @ bit_offset : bit_width`. Kinds: `bool`, `u8`,
//! `u16`, `u32`, `u64` (a scalar [`Field`]); `bytes` (a [`Bytes`] run);
//! `{layout}` (an embedded structure, accessed as [`Bytes`]); `(a | b | c)`
//! (a union of structures); `[u64]` (a flexible array, width = one element);
//! `[u64; 4]` (a fixed array, width = one element).
//!
//! The macro emits a module per structure with one typed constant per field
//! (`cqc::log_cq_size.set(buf, 10)?`), `SIZE` in bytes and a [`Layout`]
//! descriptor, and a `const` assertion that runs [`check`] at compile time:
//! a layout that is not a multiple of 4 bytes, a field outside it, two fields
//! overlapping, or a field crossing a 32-bit word (other than an aligned
//! 64-bit field) does not compile.
//!
//! ```
//! mlx5_regs::layouts! { good (8) { a: u8 @ 0 : 4, b: u32 @ 8 : 24, c: bool @ 63 : 1 } }
//! let mut buf = [0u8; 8];
//! good::b.set(&mut buf, 0xabcdef).unwrap();
//! assert_eq!(buf[1..4], [0xab, 0xcd, 0xef]);
//! ```
//!
//! A field crossing a 32-bit word is refused:
//! ```compile_fail
//! mlx5_regs::layouts! { bad (8) { a: u8 @ 30 : 4 } }
//! ```
//! Overlapping fields are refused:
//! ```compile_fail
//! mlx5_regs::layouts! { bad (8) { a: u8 @ 0 : 8, b: u8 @ 4 : 8 } }
//! ```
//! A field outside the structure is refused:
//! ```compile_fail
//! mlx5_regs::layouts! { bad (4) { a: u32 @ 32 : 32 } }
//! ```
//! A size that is not a multiple of 4 bytes is refused:
//! ```compile_fail
//! mlx5_regs::layouts! { bad (6) { a: u8 @ 0 : 8 } }
//! ```
//! A 64-bit field that is not 64-bit aligned is refused:
//! ```compile_fail
//! mlx5_regs::layouts! { bad (16) { a: u64 @ 32 : 64 } }
//! ```
//! A Rust type too narrow for the field is refused (a getter would truncate):
//! ```compile_fail
//! mlx5_regs::layouts! { bad (4) { a: u8 @ 0 : 12 } }
//! ```
//! A flexible array that does not follow the fixed part is refused:
//! ```compile_fail
//! mlx5_regs::layouts! { bad (8) { pas: [u64] @ 0 : 64 } }
//! ```

#[allow(unused_imports)] // referenced from rustdoc links
use crate::field::{Array, Bytes, Field};

/// How a field is interpreted.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// An integer or flag of `width` bits.
    Scalar,
    /// Opaque bytes.
    Bytes,
    /// An embedded structure.
    Sub(&'static Layout),
    /// Alternative structures at the same place (`eqe.event_data`).
    Union(&'static [&'static Layout]),
    /// An array; `count == 0` is a flexible array at the end of the layout.
    Array {
        /// Element count, 0 for flexible.
        count: u32,
    },
}

/// One row of a layout table.
#[derive(Debug, Clone, Copy)]
pub struct FieldDesc {
    /// Name as in `mlx5_ifc.h`.
    pub name: &'static str,
    /// Bit offset from the start of the structure.
    pub bit_off: u32,
    /// Width in bits (one element for arrays).
    pub width: u32,
    /// Interpretation.
    pub kind: Kind,
}

impl FieldDesc {
    /// Bits the field occupies (all elements of a fixed array, one element of
    /// a flexible one).
    pub const fn total_width(&self) -> u32 {
        match self.kind {
            Kind::Array { count } if count > 0 => self.width * count,
            _ => self.width,
        }
    }
}

/// A firmware structure: name, size and fields in offset order.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    /// Name as in `mlx5_ifc.h` (without `mlx5_ifc_` and `_bits`).
    pub name: &'static str,
    /// Size in bytes of the fixed part (a flexible array follows it).
    pub size: usize,
    /// Fields, in increasing offset order, not overlapping.
    pub fields: &'static [FieldDesc],
}

impl Layout {
    /// Find a field by name.
    pub fn field(&self, name: &str) -> Option<&'static FieldDesc> {
        self.fields.iter().find(|f| f.name == name)
    }
}

/// Strip the `r#` of a raw identifier (`r#type` → `type`) at compile time.
pub const fn strip_raw(s: &'static str) -> &'static str {
    let b = s.as_bytes();
    if b.len() > 2 && b[0] == b'r' && b[1] == b'#' {
        let (_, rest) = b.split_at(2);
        match core::str::from_utf8(rest) {
            Ok(s) => s,
            Err(_) => panic!("identifier is not UTF-8"),
        }
    } else {
        s
    }
}

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Compile-time check that a scalar field's Rust type holds its width
/// (`bool` only for 1-bit fields), so a getter can never truncate.
pub const fn check_type(ty: &'static str, width: u32, field: &'static str) {
    let ok = if str_eq(ty, "bool") {
        width == 1
    } else if str_eq(ty, "u8") {
        width <= 8
    } else if str_eq(ty, "u16") {
        width <= 16
    } else if str_eq(ty, "u32") {
        width <= 32
    } else if str_eq(ty, "u64") {
        width == 64
    } else {
        false
    };
    if !ok {
        panic!("{}", field);
    }
}

/// Compile-time layout checks (see the module documentation). Called from a
/// `const _: () = ...` item emitted by `layouts!`, so a violation is a build
/// error naming the offending field.
pub const fn check(l: &Layout) {
    if !l.size.is_multiple_of(4) {
        panic!("{}", l.name);
    }
    let size_bits = (l.size * 8) as u32;
    let mut prev_end = 0u32;
    let mut i = 0;
    while i < l.fields.len() {
        let f = &l.fields[i];
        if f.width == 0 {
            panic!("{}", f.name);
        }
        if f.bit_off < prev_end {
            // Out of order or overlapping the previous field.
            panic!("{}", f.name);
        }
        match f.kind {
            Kind::Scalar => {
                if f.width == 64 {
                    if !f.bit_off.is_multiple_of(64) {
                        panic!("{}", f.name);
                    }
                } else if f.width > 32 || f.bit_off % 32 + f.width > 32 {
                    // Crosses a 32-bit word.
                    panic!("{}", f.name);
                }
            }
            Kind::Bytes | Kind::Sub(_) | Kind::Union(_) => {
                if !f.bit_off.is_multiple_of(32) || !f.width.is_multiple_of(32) {
                    panic!("{}", f.name);
                }
                if let Kind::Sub(s) = f.kind {
                    // The embedded structure must fit in the space reserved for it.
                    if (s.size * 8) as u32 > f.width {
                        panic!("{}", f.name);
                    }
                }
                if let Kind::Union(alts) = f.kind {
                    let mut j = 0;
                    while j < alts.len() {
                        if (alts[j].size * 8) as u32 > f.width {
                            panic!("{}", f.name);
                        }
                        j += 1;
                    }
                }
            }
            Kind::Array { count } => {
                if !(f.width == 64 && f.bit_off.is_multiple_of(64)
                    || f.width <= 32 && 32 % f.width == 0 && f.bit_off.is_multiple_of(f.width))
                {
                    panic!("{}", f.name);
                }
                if count == 0 && (f.bit_off != size_bits || i + 1 != l.fields.len()) {
                    // A flexible array must directly follow the fixed part.
                    panic!("{}", f.name);
                }
            }
        }
        let end = f.bit_off + f.total_width();
        let flexible = matches!(f.kind, Kind::Array { count: 0 });
        if !flexible && end > size_bits {
            panic!("{}", f.name);
        }
        prev_end = end;
        i += 1;
    }
}

/// Declare firmware layouts; see the module documentation for the syntax.
#[macro_export]
macro_rules! layouts {
    ($(
        $(#[$lm:meta])*
        $layout:ident ($size:expr) {
            $( $(#[$fm:meta])* $f:ident : $kind:tt @ $off:literal : $w:literal ),* $(,)?
        }
    )*) => {$(
        $(#[$lm])*
        #[allow(non_upper_case_globals, dead_code)]
        pub mod $layout {
            /// Size in bytes of the fixed part of this structure.
            pub const SIZE: usize = $size;
            $( $crate::layouts!(@const [$(#[$fm])*] $f $kind $off $w); )*
            /// Every field of this structure, in offset order.
            pub const FIELDS: &[$crate::layout::FieldDesc] = &[
                $( $crate::layouts!(@desc $f $kind $off $w) ),*
            ];
            /// The descriptor of this structure.
            pub const LAYOUT: $crate::layout::Layout = $crate::layout::Layout {
                name: stringify!($layout),
                size: SIZE,
                fields: FIELDS,
            };
            const _: () = $crate::layout::check(&LAYOUT);
        }
    )*};

    // ----- typed constants -----
    (@const [$(#[$fm:meta])*] $f:ident bytes $off:literal $w:literal) => {
        $(#[$fm])*
        #[doc = concat!("`", stringify!($f), "`: ", stringify!($w), " bits at bit ", stringify!($off), ".")]
        pub const $f: $crate::field::Bytes = $crate::field::Bytes {
            name: $crate::layout::strip_raw(stringify!($f)), bit_off: $off, width: $w,
        };
    };
    (@const [$(#[$fm:meta])*] $f:ident {$sub:ident} $off:literal $w:literal) => {
        $(#[$fm])*
        #[doc = concat!("`", stringify!($f), "`: embedded `", stringify!($sub), "` at bit ", stringify!($off), ".")]
        pub const $f: $crate::field::Bytes = $crate::field::Bytes {
            name: $crate::layout::strip_raw(stringify!($f)), bit_off: $off, width: $w,
        };
    };
    (@const [$(#[$fm:meta])*] $f:ident ($($alt:ident)|+) $off:literal $w:literal) => {
        $(#[$fm])*
        #[doc = concat!("`", stringify!($f), "`: union of ", $("`", stringify!($alt), "` ",)+ "at bit ", stringify!($off), ".")]
        pub const $f: $crate::field::Bytes = $crate::field::Bytes {
            name: $crate::layout::strip_raw(stringify!($f)), bit_off: $off, width: $w,
        };
    };
    (@const [$(#[$fm:meta])*] $f:ident [$t:ident] $off:literal $w:literal) => {
        $(#[$fm])*
        #[doc = concat!("`", stringify!($f), "[]`: flexible array of ", stringify!($w), "-bit elements at bit ", stringify!($off), ".")]
        pub const $f: $crate::field::Array<$t> =
            $crate::field::Array::new($crate::layout::strip_raw(stringify!($f)), $off, $w, 0);
    };
    (@const [$(#[$fm:meta])*] $f:ident [$t:ident; $n:literal] $off:literal $w:literal) => {
        $(#[$fm])*
        #[doc = concat!("`", stringify!($f), "[", stringify!($n), "]`: ", stringify!($w), "-bit elements at bit ", stringify!($off), ".")]
        pub const $f: $crate::field::Array<$t> =
            $crate::field::Array::new($crate::layout::strip_raw(stringify!($f)), $off, $w, $n);
    };
    (@const [$(#[$fm:meta])*] $f:ident $t:ident $off:literal $w:literal) => {
        const _: () = $crate::layout::check_type(stringify!($t), $w, stringify!($f));
        $(#[$fm])*
        #[doc = concat!("`", stringify!($f), "`: ", stringify!($w), " bits at bit ", stringify!($off), ".")]
        pub const $f: $crate::field::Field<$t> =
            $crate::field::Field::new($crate::layout::strip_raw(stringify!($f)), $off, $w);
    };

    // ----- descriptors -----
    (@desc $f:ident bytes $off:literal $w:literal) => {
        $crate::layouts!(@fd $f $off $w $crate::layout::Kind::Bytes)
    };
    (@desc $f:ident {$sub:ident} $off:literal $w:literal) => {
        $crate::layouts!(@fd $f $off $w $crate::layout::Kind::Sub(&super::$sub::LAYOUT))
    };
    (@desc $f:ident ($($alt:ident)|+) $off:literal $w:literal) => {
        $crate::layouts!(@fd $f $off $w $crate::layout::Kind::Union(&[$(&super::$alt::LAYOUT),+]))
    };
    (@desc $f:ident [$t:ident] $off:literal $w:literal) => {
        $crate::layouts!(@fd $f $off $w $crate::layout::Kind::Array { count: 0 })
    };
    (@desc $f:ident [$t:ident; $n:literal] $off:literal $w:literal) => {
        $crate::layouts!(@fd $f $off $w $crate::layout::Kind::Array { count: $n })
    };
    (@desc $f:ident $t:ident $off:literal $w:literal) => {
        $crate::layouts!(@fd $f $off $w $crate::layout::Kind::Scalar)
    };
    (@fd $f:ident $off:literal $w:literal $kind:expr) => {
        $crate::layout::FieldDesc {
            name: $crate::layout::strip_raw(stringify!($f)),
            bit_off: $off,
            width: $w,
            kind: $kind,
        }
    };
}
