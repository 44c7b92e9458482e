//! Linux errno values returned as values.

use core::fmt;

use mlx5_regs::consts::errno as e;

use crate::error::Error;

/// A positive Linux errno, returned by every verbs call that fails (never
/// stored in a global).
///
/// ```
/// use mlx5_driver::verbs::Errno;
/// assert_eq!(Errno::EINVAL.0, 22);
/// assert_eq!(format!("{}", Errno::EBUSY), "EBUSY (16)");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    /// No entry (a lazy poll found no completion: `ibv_start_poll`).
    pub const ENOENT: Errno = Errno(e::ENOENT);
    /// I/O error (device in error state, device fatal).
    pub const EIO: Errno = Errno(e::EIO);
    /// Try again (nothing to read right now).
    pub const EAGAIN: Errno = Errno(e::EAGAIN);
    /// Out of memory (DMA memory, a full queue or table).
    pub const ENOMEM: Errno = Errno(e::ENOMEM);
    /// Busy (in use, events not acknowledged).
    pub const EBUSY: Errno = Errno(e::EBUSY);
    /// Invalid argument (also: a stale handle).
    pub const EINVAL: Errno = Errno(e::EINVAL);
    /// Not implemented by the device (CQ resize without `cq_resize`).
    pub const ENOSYS: Errno = Errno(e::ENOSYS);
    /// Operation not supported.
    pub const EOPNOTSUPP: Errno = Errno(e::EOPNOTSUPP);
    /// Timed out (a firmware command).
    pub const ETIMEDOUT: Errno = Errno(e::ETIMEDOUT);

    /// The symbolic name, if it is one of the values this crate produces.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            e::ENOENT => "ENOENT",
            e::EIO => "EIO",
            e::EAGAIN => "EAGAIN",
            e::ENOMEM => "ENOMEM",
            e::EFAULT => "EFAULT",
            e::EBUSY => "EBUSY",
            e::EINVAL => "EINVAL",
            e::ENOSYS => "ENOSYS",
            e::ENOMSG => "ENOMSG",
            e::EBADR => "EBADR",
            e::ENOLINK => "ENOLINK",
            e::EOPNOTSUPP => "EOPNOTSUPP",
            e::ETIMEDOUT => "ETIMEDOUT",
            e::EREMOTEIO => "EREMOTEIO",
            _ => return None,
        })
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n} ({})", self.0),
            None => write!(f, "errno {}", self.0),
        }
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The driver's errno, except that a dead device is `EIO`, as uverbs
/// reports for a device that is gone (the driver core says `ENOLINK`, as
/// `mlx5_core` does for commands in internal-error state).
impl From<Error> for Errno {
    fn from(err: Error) -> Self {
        if err.is_fatal() {
            Errno::EIO
        } else {
            Errno(err.errno())
        }
    }
}

impl core::error::Error for Errno {}
