//! Diagnostics: bring-up steps, page requests, health and errors, through
//! the [`log`](https://docs.rs/log) facade (feature `log`) and/or
//! [`defmt`](https://docs.rs/defmt) (feature `defmt`), as embedded crates
//! offer them. Both features are off by default; without them every
//! message compiles to nothing (its arguments are type-checked, never
//! evaluated). Neither needs `std` or a heap.
//!
//! Messages use only the format syntax both backends share (`{}`, `{:x}`,
//! `{:#x}` on integers and `&str`); a value shown through its `Display`
//! (an error, an opcode) goes in [`Show`]. `log` records carry the target
//! `mlx5`.

use core::fmt;

/// Shows a `Display` value in a diagnostic: through `Display` for `log`,
/// through `defmt::Display2Format` for `defmt`.
pub(crate) struct Show<'a, T: ?Sized>(pub &'a T);

impl<T: fmt::Display + ?Sized> fmt::Display for Show<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(feature = "defmt")]
impl<T: fmt::Display + ?Sized> defmt::Format for Show<'_, T> {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "{}", defmt::Display2Format(self.0))
    }
}

/// One message at `$level` (`error`, `warn`, `info`, `debug`, `trace`) to
/// every enabled backend.
macro_rules! diag {
    ($level:ident, $($arg:tt)+) => {{
        #[cfg(feature = "log")]
        ::log::$level!(target: "mlx5", $($arg)+);
        #[cfg(feature = "defmt")]
        ::defmt::$level!($($arg)+);
        #[cfg(not(any(feature = "log", feature = "defmt")))]
        if false {
            let _ = ::core::format_args!($($arg)+);
        }
    }};
}

macro_rules! diag_error {
    ($($arg:tt)+) => { $crate::diag::diag!(error, $($arg)+) };
}
macro_rules! diag_warn {
    ($($arg:tt)+) => { $crate::diag::diag!(warn, $($arg)+) };
}
macro_rules! diag_info {
    ($($arg:tt)+) => { $crate::diag::diag!(info, $($arg)+) };
}
macro_rules! diag_debug {
    ($($arg:tt)+) => { $crate::diag::diag!(debug, $($arg)+) };
}

pub(crate) use diag;
pub(crate) use diag_debug as debug;
pub(crate) use diag_error as error;
pub(crate) use diag_info as info;
pub(crate) use diag_warn as warn;
