//! Interrupts of a VFIO device: its MSI-X (or MSI) vectors, each delivered
//! by the kernel on an eventfd of its own, and the bounded, latching wait of
//! [`mlx5_hal::Hal::wait_irq`] over those eventfds.
//!
//! Setup (at open, see [`enable`]): `VFIO_DEVICE_GET_IRQ_INFO` says how many
//! vectors each interrupt index has; MSI-X is used when the device has it
//! (an mlx5 device interrupts through MSI-X: Linux
//! `drivers/net/ethernet/mellanox/mlx5/core/pci_irq.c`), MSI otherwise, INTx
//! never (a shared level interrupt cannot be named per event queue). The
//! vectors, at most [`mlx5_hal::MAX_IRQ_VECTORS`], are bound with one
//! `VFIO_DEVICE_SET_IRQS` (`DATA_EVENTFD | ACTION_TRIGGER`) to eventfds
//! created `EFD_NONBLOCK | EFD_CLOEXEC`. Linux `include/uapi/linux/vfio.h`
//! documents both ioctls. The kernel adds 1 to a vector's eventfd counter for
//! each message, so an interrupt that fires while nobody waits stays
//! latched in the counter until a wait reads it.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use mlx5_hal::{HalError, MAX_IRQ_VECTORS};
use vfio_bindings::bindings::vfio::{
    vfio_irq_info, VFIO_BASE, VFIO_IRQ_INFO_EVENTFD, VFIO_IRQ_SET_ACTION_TRIGGER,
    VFIO_IRQ_SET_DATA_EVENTFD, VFIO_IRQ_SET_DATA_NONE, VFIO_PCI_MSIX_IRQ_INDEX,
    VFIO_PCI_MSI_IRQ_INDEX, VFIO_TYPE,
};
use vmm_sys_util::eventfd::EventFd;
use vmm_sys_util::ioctl::{ioctl_with_mut_ptr, ioctl_with_ptr};
use vmm_sys_util::ioctl_io_nr;

use crate::error::Notice;

// Request numbers from <linux/vfio.h>: _IO(VFIO_TYPE, VFIO_BASE + n).
ioctl_io_nr!(VFIO_DEVICE_GET_IRQ_INFO, VFIO_TYPE as u32, VFIO_BASE + 9);
ioctl_io_nr!(VFIO_DEVICE_SET_IRQS, VFIO_TYPE as u32, VFIO_BASE + 10);

/// The kind of interrupt vectors a device delivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IrqKind {
    /// MSI-X: vector `i` is entry `i` of the device's MSI-X table (what an
    /// mlx5 event queue's `intr` field names).
    MsiX,
    /// MSI: vector `i` is message `i` of the device's MSI capability.
    Msi,
}

impl IrqKind {
    /// The VFIO interrupt index (`VFIO_PCI_MSIX_IRQ_INDEX`, `VFIO_PCI_MSI_IRQ_INDEX`).
    pub(crate) fn vfio_index(self) -> u32 {
        match self {
            IrqKind::MsiX => VFIO_PCI_MSIX_IRQ_INDEX,
            IrqKind::Msi => VFIO_PCI_MSI_IRQ_INDEX,
        }
    }
}

impl std::fmt::Display for IrqKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            IrqKind::MsiX => "MSI-X",
            IrqKind::Msi => "MSI",
        })
    }
}

/// The interrupts a [`crate::VfioPlatform`] enabled at open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interrupts {
    /// MSI-X or MSI.
    pub kind: IrqKind,
    /// Vectors enabled, `0..vectors`: what [`mlx5_hal::Hal::irq_vectors`]
    /// reports.
    pub vectors: u16,
    /// Vectors of this kind the device offers (`VFIO_DEVICE_GET_IRQ_INFO`).
    pub offered: u32,
}

/// `VFIO_DEVICE_GET_IRQ_INFO` for one index: `(flags, count)`.
pub(crate) fn irq_info(device: &impl AsRawFd, index: u32) -> io::Result<(u32, u32)> {
    let mut info = vfio_irq_info {
        argsz: std::mem::size_of::<vfio_irq_info>() as u32,
        index,
        ..Default::default()
    };
    // SAFETY: `device` is a VFIO device fd; the kernel reads `argsz` and
    // `index` and writes at most `argsz` bytes into `info`, a live,
    // exclusively borrowed struct of that size.
    let ret = unsafe { ioctl_with_mut_ptr(device, VFIO_DEVICE_GET_IRQ_INFO(), &mut info) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((info.flags, info.count))
}

/// `VFIO_DEVICE_SET_IRQS` on `index`, vectors `0..fds.len()`: with fds,
/// `DATA_EVENTFD | ACTION_TRIGGER` (vector `i` signals `fds[i]`); with none,
/// `DATA_NONE | ACTION_TRIGGER` and count 0, which disables the index.
fn set_irqs(device: &impl AsRawFd, index: u32, fds: &[RawFd]) -> io::Result<()> {
    // struct vfio_irq_set { argsz, flags, index, start, count; u8 data[] },
    // the data being one s32 fd per vector: all 32-bit words.
    let data = if fds.is_empty() {
        VFIO_IRQ_SET_DATA_NONE
    } else {
        VFIO_IRQ_SET_DATA_EVENTFD
    };
    let mut buf: Vec<u32> = Vec::with_capacity(5 + fds.len());
    buf.extend_from_slice(&[
        ((5 + fds.len()) * 4) as u32,
        data | VFIO_IRQ_SET_ACTION_TRIGGER,
        index,
        0,
        fds.len() as u32,
    ]);
    buf.extend(fds.iter().map(|&fd| fd as u32));
    // SAFETY: `device` is a VFIO device fd; `buf` is a live, 4-byte aligned
    // vfio_irq_set of `argsz` bytes (header plus `count` fds) that the kernel
    // only reads. The fds are open eventfds owned by the caller; the kernel
    // takes its own references to them.
    let ret = unsafe { ioctl_with_ptr(device, VFIO_DEVICE_SET_IRQS(), buf.as_ptr()) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// One eventfd per vector, and the latching wait over them. Holds no
/// kernel binding itself: [`IrqSet`] binds and unbinds it.
pub(crate) struct Vectors {
    fds: Vec<EventFd>,
}

impl Vectors {
    /// `n` fresh eventfds (counter 0, `EFD_NONBLOCK | EFD_CLOEXEC`).
    pub(crate) fn new(n: u16) -> io::Result<Self> {
        let fds = (0..n.min(MAX_IRQ_VECTORS))
            .map(|_| EventFd::new(libc::EFD_NONBLOCK | libc::EFD_CLOEXEC))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Vectors { fds })
    }

    /// How many vectors.
    pub(crate) fn len(&self) -> u16 {
        self.fds.len() as u16
    }

    /// The eventfd of vector `i`, as a raw descriptor (`None` past the
    /// last vector).
    pub(crate) fn raw_fd(&self, i: u16) -> Option<RawFd> {
        self.fds.get(usize::from(i)).map(AsRawFd::as_raw_fd)
    }

    fn raw_fds(&self) -> Vec<RawFd> {
        self.fds.iter().map(AsRawFd::as_raw_fd).collect()
    }

    /// The eventfd of vector `i` (tests signal it as the kernel would).
    #[cfg(test)]
    fn fd(&self, i: usize) -> &EventFd {
        &self.fds[i]
    }

    /// [`mlx5_hal::Hal::wait_irq`] over these eventfds: wait until one of the
    /// vectors in `mask` has a non-zero counter, or `timeout_ns` passed;
    /// read (and so clear) the counters of those that have, return them.
    ///
    /// Bits of `mask` at or above [`Vectors::len`] name no vector and are
    /// ignored; a mask naming none is [`HalError::InvalidRequest`] (the wait
    /// could only sleep). Vectors outside `mask` are not read, so they stay
    /// latched. Two waiters racing for one firing: the eventfd read gives it
    /// to one; the other finds the counter empty (`EAGAIN`) and goes on
    /// waiting for the rest of its time. A signal (`EINTR`) resumes the
    /// wait with the time left. Failures of `ppoll` or `read` are
    /// [`HalError::Platform`] with the errno. No heap use.
    pub(crate) fn wait(&self, mask: u64, timeout_ns: u64) -> Result<u64, HalError> {
        let n = self.fds.len();
        let valid = if n >= 64 { u64::MAX } else { (1u64 << n) - 1 };
        let asked = mask & valid;
        if asked == 0 {
            return Err(HalError::InvalidRequest);
        }
        let start = Instant::now();
        let limit = Duration::from_nanos(timeout_ns);
        let mut pfds = [libc::pollfd {
            fd: -1,
            events: 0,
            revents: 0,
        }; MAX_IRQ_VECTORS as usize];
        let mut vector_of = [0u8; MAX_IRQ_VECTORS as usize];
        let mut count = 0;
        for (i, fd) in self.fds.iter().enumerate() {
            if asked & (1 << i) != 0 {
                pfds[count] = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                vector_of[count] = i as u8;
                count += 1;
            }
        }
        loop {
            let left = limit.saturating_sub(start.elapsed());
            let ts = libc::timespec {
                tv_sec: left.as_secs() as _,
                tv_nsec: left.subsec_nanos() as _,
            };
            // SAFETY: `pfds[..count]` are initialised pollfds in a live,
            // exclusively borrowed array; `ts` is a valid timespec that
            // outlives the call; a null sigmask keeps the thread's mask.
            let ret = unsafe {
                libc::ppoll(
                    pfds.as_mut_ptr(),
                    count as libc::nfds_t,
                    &ts,
                    std::ptr::null(),
                )
            };
            if ret < 0 {
                let errno = io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EIO);
                if errno != libc::EINTR {
                    return Err(HalError::Platform { errno });
                }
            } else if ret == 0 {
                return Ok(0);
            } else {
                let mut fired = 0u64;
                for (p, &v) in pfds[..count].iter().zip(&vector_of[..count]) {
                    if p.revents & libc::POLLNVAL != 0 {
                        return Err(HalError::Platform { errno: libc::EBADF });
                    }
                    if p.revents & (libc::POLLERR | libc::POLLHUP) != 0 {
                        return Err(HalError::Platform { errno: libc::EIO });
                    }
                    if p.revents & libc::POLLIN == 0 {
                        continue;
                    }
                    match self.fds[usize::from(v)].read() {
                        Ok(_) => fired |= 1 << v,
                        // Another waiter read it first.
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => {
                            return Err(HalError::Platform {
                                errno: e.raw_os_error().unwrap_or(libc::EIO),
                            })
                        }
                    }
                }
                if fired != 0 {
                    return Ok(fired);
                }
            }
            if start.elapsed() >= limit {
                return Ok(0);
            }
        }
    }
}

/// Vectors bound to the device: disabled (and their eventfds closed) by
/// [`IrqSet::disable`], which the platform's teardown calls before the
/// device reset.
pub(crate) struct IrqSet {
    pub(crate) info: Interrupts,
    pub(crate) vectors: Vectors,
}

impl IrqSet {
    /// `VFIO_DEVICE_SET_IRQS` with count 0: the kernel frees the vectors and
    /// drops its eventfd references; then the eventfds are closed.
    pub(crate) fn disable(self, device: &impl AsRawFd) -> io::Result<()> {
        let r = set_irqs(device, self.info.kind.vfio_index(), &[]);
        drop(self.vectors);
        r
    }
}

/// Enable up to `max` vectors (capped at [`MAX_IRQ_VECTORS`]) of the first
/// interrupt index that has eventfd-capable vectors: MSI-X, else MSI. Bus
/// mastering must be on already (an MSI is a memory write by the device).
///
/// When the kernel refuses the count (for example `ENOSPC`: not enough
/// interrupt vectors on the host), half as many are tried, down to one, as
/// Linux `pci_alloc_irq_vectors` accepts fewer than asked; then the next
/// index. Nothing enabled is a [`Notice::NoInterrupts`], fewer than
/// wanted a [`Notice::FewerIrqVectors`]: the driver polls either way, so
/// neither fails the open.
pub(crate) fn enable(device: &impl AsRawFd, max: u16, notices: &mut Vec<Notice>) -> Option<IrqSet> {
    let max = max.min(MAX_IRQ_VECTORS);
    if max == 0 {
        return None;
    }
    let mut last_errno = None;
    for kind in [IrqKind::MsiX, IrqKind::Msi] {
        let index = kind.vfio_index();
        let (flags, offered) = match irq_info(device, index) {
            Ok(i) => i,
            Err(e) => {
                last_errno = e.raw_os_error();
                continue;
            }
        };
        if offered == 0 || flags & VFIO_IRQ_INFO_EVENTFD == 0 {
            continue;
        }
        let want = max.min(offered.min(u32::from(u16::MAX)) as u16);
        let mut n = want;
        while n > 0 {
            let vectors = match Vectors::new(n) {
                Ok(v) => v,
                Err(e) => {
                    notices.push(Notice::NoInterrupts {
                        errno: e.raw_os_error(),
                    });
                    return None;
                }
            };
            match set_irqs(device, index, &vectors.raw_fds()) {
                Ok(()) => {
                    if n < want {
                        notices.push(Notice::FewerIrqVectors {
                            kind,
                            wanted: want,
                            enabled: n,
                        });
                    }
                    return Some(IrqSet {
                        info: Interrupts {
                            kind,
                            vectors: n,
                            offered,
                        },
                        vectors,
                    });
                }
                Err(e) => last_errno = e.raw_os_error(),
            }
            n /= 2;
        }
    }
    notices.push(Notice::NoInterrupts { errno: last_errno });
    None
}

#[cfg(test)]
#[path = "irq_tests.rs"]
mod tests;
