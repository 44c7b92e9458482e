//! [`StaticCell`]: the one `&'static mut` to a value that lives in a
//! `static`, so a large driver object (an `Hca` is about 55 KB) is built in
//! place, in `.data`, and never on a small stack.
//!
//! ```
//! use mlx5_bare_metal::{IdentityHal, StaticCell};
//! use mlx5_driver::{Hca, HcaConfig};
//!
//! static HCA: StaticCell<Hca<IdentityHal>> =
//!     StaticCell::new(Hca::new_down(IdentityHal::UNSET, ()));
//!
//! let hca: &'static mut Hca<IdentityHal> = HCA.take().expect("first take");
//! assert!(HCA.take().is_none(), "only one &mut, ever");
//! // hca.bring_up_in_place(hal, HcaConfig::DEFAULT)?; then use `hca` as any Hca.
//! # let _ = (hca, HcaConfig::DEFAULT);
//! ```

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, Ordering};

/// A value in a `static` that is handed out once, mutably, for the rest of
/// the program: [`StaticCell::take`].
pub struct StaticCell<T> {
    value: UnsafeCell<T>,
    taken: AtomicBool,
}

// SAFETY: the value is reached only through the single `&'static mut` that
// `take` hands out once (the flag's swap decides who gets it, on whichever
// thread), so sharing the cell shares no access to `T`; `T: Send` because
// that `&mut` may be used on another thread than the one that made the cell.
unsafe impl<T: Send> Sync for StaticCell<T> {}

impl<T> StaticCell<T> {
    /// A cell holding `value` (a `const fn`: use it in a `static`).
    pub const fn new(value: T) -> Self {
        StaticCell {
            value: UnsafeCell::new(value),
            taken: AtomicBool::new(false),
        }
    }

    /// The value, mutably, for the rest of the program: `Some` the first
    /// time, `None` ever after.
    // A `&mut` from `&self` is the point; the flag makes it unique.
    #[allow(clippy::mut_from_ref)]
    pub fn take(&'static self) -> Option<&'static mut T> {
        if self.taken.swap(true, Ordering::AcqRel) {
            return None;
        }
        // SAFETY: `taken` was false and is now true: this is the only call
        // that gets here, and the cell offers no other way to the value, so
        // this `&mut` is the only reference to it. The cell is `'static`, so
        // the reference may be too.
        Some(unsafe { &mut *self.value.get() })
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::StaticCell;

    static CELL: StaticCell<[u64; 4]> = StaticCell::new([7; 4]);

    #[test]
    fn hands_out_one_mutable_reference_once_across_threads() {
        let winners: std::vec::Vec<bool> = (0..8)
            .map(|_| std::thread::spawn(|| CELL.take().map(|v| v[0] = 9).is_some()))
            .collect::<std::vec::Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect();
        assert_eq!(winners.iter().filter(|w| **w).count(), 1);
        assert!(CELL.take().is_none());
    }
}
