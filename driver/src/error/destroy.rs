//! [`DestroyError`]: a destroy that failed hands the object back.

use core::fmt;

use super::Error;

/// A `destroy_*` call that failed ([`crate::Hca::destroy_cq`],
/// [`crate::Hca::destroy_srq`], [`crate::Hca::destroy_qp`],
/// [`crate::Hca::destroy_mkey`]): why, and the object, handed back
/// unchanged so the caller can fix the cause and try again.
///
/// It converts into [`Error`] with `?`, and implements
/// [`core::error::Error`] (so `Box<dyn Error>` takes it too).
///
/// **The object is leaked, not freed, unless taken back** with
/// [`DestroyError::into_object`] or [`DestroyError::into_parts`]: after a
/// failed destroy firmware may still own it and write to its DMA memory (a
/// CQ's ring, an SRQ's WQEs), so dropping the error (or converting it into
/// [`Error`]) never hands that memory back to the platform. The firmware
/// object itself goes away at [`crate::Hca::teardown`].
///
/// ```no_run
/// # fn demo<H: mlx5_hal::Hal>(hca: &mlx5_driver::Hca<H>) -> Result<(), mlx5_driver::Error> {
/// use mlx5_driver::cq::CqOptions;
/// let cq = hca.create_cq(63, CqOptions::default())?;
/// match hca.destroy_cq(cq) {
///     Ok(()) => {}
///     Err(e) if e.error().errno() == 16 => {
///         // EBUSY: something still reports to it; get it back and retry later.
///         let _cq = e.into_object();
///     }
///     Err(e) => return Err(e.into()),
/// }
/// # Ok(()) }
/// ```
pub struct DestroyError<T> {
    /// `Some` until taken back; `None` only inside `Drop` or after a move
    /// out through `into_parts`.
    object: Option<T>,
    error: Error,
}

impl<T> DestroyError<T> {
    pub(crate) fn new(object: T, error: Error) -> Self {
        DestroyError {
            object: Some(object),
            error,
        }
    }

    /// Why the destroy failed.
    pub fn error(&self) -> Error {
        self.error
    }

    /// The object, still alive.
    pub fn object(&self) -> &T {
        match &self.object {
            Some(o) => o,
            None => unreachable!("the object is present until the error is consumed"),
        }
    }

    /// The object, still alive, mutably.
    pub fn object_mut(&mut self) -> &mut T {
        match &mut self.object {
            Some(o) => o,
            None => unreachable!("the object is present until the error is consumed"),
        }
    }

    /// Take the object back (to retry the destroy, or keep using it).
    pub fn into_object(self) -> T {
        self.into_parts().0
    }

    /// The object and the error.
    pub fn into_parts(mut self) -> (T, Error) {
        match self.object.take() {
            Some(o) => (o, self.error),
            None => unreachable!("the object is present until the error is consumed"),
        }
    }
}

impl<T> Drop for DestroyError<T> {
    fn drop(&mut self) {
        // Firmware may still use the object's DMA memory: leak it rather
        // than free it (see the type's documentation).
        if let Some(o) = self.object.take() {
            core::mem::forget(o);
        }
    }
}

/// The reason; the object is leaked (see [`DestroyError`]).
impl<T> From<DestroyError<T>> for Error {
    fn from(e: DestroyError<T>) -> Self {
        e.error
    }
}

impl<T> fmt::Debug for DestroyError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DestroyError")
            .field("object", &core::any::type_name::<T>())
            .field("error", &self.error)
            .finish()
    }
}

impl<T> fmt::Display for DestroyError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "destroy failed: {}", self.error)
    }
}

impl<T> core::error::Error for DestroyError<T> {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        Some(&self.error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::cell::Cell;

    /// Counts drops, to prove the error leaks its object.
    struct Tracked<'a>(&'a Cell<u32>);
    impl Drop for Tracked<'_> {
        fn drop(&mut self) {
            self.0.set(self.0.get() + 1);
        }
    }

    #[test]
    fn dropping_or_converting_leaks_taking_back_does_not() {
        let drops = Cell::new(0);
        drop(DestroyError::new(Tracked(&drops), Error::Busy("in use")));
        let e: Error = DestroyError::new(Tracked(&drops), Error::Busy("in use")).into();
        assert_eq!(e, Error::Busy("in use"));
        assert_eq!(drops.get(), 0, "a dropped or converted error frees nothing");
        let (obj, err) = DestroyError::new(Tracked(&drops), Error::Busy("x")).into_parts();
        assert_eq!(err, Error::Busy("x"));
        drop(obj);
        assert_eq!(drops.get(), 1, "an object taken back is the caller's again");
    }

    #[test]
    fn error_is_the_source() {
        use core::error::Error as _;
        let d = DestroyError::new(5u8, Error::Busy("in use"));
        assert_eq!(*d.object(), 5);
        let src = d.source().expect("source");
        assert!(src.downcast_ref::<Error>().is_some());
    }
}
