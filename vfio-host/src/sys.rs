//! The VFIO ioctls that `vfio-ioctls` 0.10 does not expose (device flags,
//! a reset whose result is reported, the IOMMU's IOVA ranges) and the parser
//! of the IOMMU info capability chain. The interrupt ioctls are in `irq.rs`.

use std::io;
use std::os::fd::AsRawFd;

use vfio_bindings::bindings::vfio::{
    vfio_device_info, vfio_iommu_type1_info, VFIO_BASE, VFIO_IOMMU_INFO_CAPS,
    VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE, VFIO_TYPE,
};
use vmm_sys_util::ioctl::{ioctl, ioctl_with_mut_ptr};
use vmm_sys_util::ioctl_io_nr;

use crate::iova::IovaRange;

// Request numbers from <linux/vfio.h>: _IO(VFIO_TYPE, VFIO_BASE + n).
ioctl_io_nr!(VFIO_DEVICE_GET_INFO, VFIO_TYPE as u32, VFIO_BASE + 7);
ioctl_io_nr!(VFIO_DEVICE_RESET, VFIO_TYPE as u32, VFIO_BASE + 11);
ioctl_io_nr!(VFIO_IOMMU_GET_INFO, VFIO_TYPE as u32, VFIO_BASE + 12);

/// `flags` of `VFIO_DEVICE_GET_INFO` (`VFIO_DEVICE_FLAGS_*`).
pub(crate) fn device_flags(device: &impl AsRawFd) -> io::Result<u32> {
    let mut info = vfio_device_info {
        argsz: std::mem::size_of::<vfio_device_info>() as u32,
        ..Default::default()
    };
    // SAFETY: `device` is a VFIO device fd; the kernel writes at most `argsz`
    // bytes into `info`, which is a live, exclusively borrowed struct of that
    // size for the duration of the call.
    let ret = unsafe { ioctl_with_mut_ptr(device, VFIO_DEVICE_GET_INFO(), &mut info) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(info.flags)
}

/// `VFIO_DEVICE_RESET`, reporting failure (vfio-ioctls' `reset` drops it).
pub(crate) fn device_reset(device: &impl AsRawFd) -> io::Result<()> {
    // SAFETY: `device` is a VFIO device fd and VFIO_DEVICE_RESET takes no
    // argument; the call touches no memory of this process.
    let ret = unsafe { ioctl(device, VFIO_DEVICE_RESET()) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The raw `VFIO_IOMMU_GET_INFO` reply (info struct plus capability chain).
pub(crate) fn iommu_info(container: &impl AsRawFd) -> io::Result<Vec<u8>> {
    let base = std::mem::size_of::<vfio_iommu_type1_info>();
    let mut argsz = base;
    // Two rounds: the kernel raises `argsz` when the capabilities do not fit.
    for _ in 0..2 {
        // u64 storage keeps the buffer 8-byte aligned for the kernel's structs.
        let mut buf = vec![0u64; argsz.div_ceil(8)];
        let bytes = buf.len() * 8;
        let p = buf.as_mut_ptr().cast::<u8>();
        // SAFETY: `buf` is live and at least `bytes` long; writing the first
        // field (argsz) through the raw pointer stays in bounds.
        unsafe { p.cast::<u32>().write(bytes as u32) };
        // SAFETY: `container` is a VFIO container fd with an IOMMU set; the
        // kernel writes at most the `argsz` (= `bytes`) bytes we declared.
        let ret = unsafe { ioctl_with_mut_ptr(container, VFIO_IOMMU_GET_INFO(), p) };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        let out: Vec<u8> = buf.iter().flat_map(|w| w.to_ne_bytes()).collect();
        let wanted = u32::from_ne_bytes(out[0..4].try_into().expect("4 bytes")) as usize;
        if wanted <= bytes {
            return Ok(out);
        }
        argsz = wanted;
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        "VFIO_IOMMU_GET_INFO kept growing",
    ))
}

/// What `VFIO_IOMMU_GET_INFO` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IommuInfo {
    /// Bitmap of supported IOMMU page sizes.
    pub page_sizes: u64,
    /// Valid IOVA ranges, if the kernel reported them.
    pub ranges: Option<Vec<IovaRange>>,
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(off..off + 4)?.try_into().ok()?))
}
fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(off..off + 2)?.try_into().ok()?))
}
fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(off..off + 8)?.try_into().ok()?))
}

/// Parse a `VFIO_IOMMU_GET_INFO` reply: the page-size bitmap and, from the
/// capability chain, `VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE`. Malformed input
/// (offsets out of bounds, loops) yields `None` for the ranges rather than a
/// guess.
pub fn parse_iommu_info(buf: &[u8]) -> Option<IommuInfo> {
    let flags = u32_at(buf, 4)?;
    let page_sizes = u64_at(buf, 8)?;
    let mut ranges = None;
    if flags & VFIO_IOMMU_INFO_CAPS != 0 {
        let mut off = u32_at(buf, 16)? as usize;
        // Each capability starts after the fixed struct; the chain ends at 0.
        // At most 16 hops, so a looping chain cannot hang us.
        for _ in 0..16 {
            if off < std::mem::size_of::<vfio_iommu_type1_info>() {
                break;
            }
            let id = u16_at(buf, off)?;
            let next = u32_at(buf, off + 4)? as usize;
            if u32::from(id) == VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE {
                let n = u32_at(buf, off + 8)? as usize;
                let mut v = Vec::with_capacity(n.min(64));
                for i in 0..n {
                    let r = off + 16 + i * 16;
                    v.push(IovaRange::from_inclusive(
                        u64_at(buf, r)?,
                        u64_at(buf, r + 8)?,
                    ));
                }
                ranges = Some(v);
            }
            if next == 0 {
                break;
            }
            off = next;
        }
    }
    Some(IommuInfo { page_sizes, ranges })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Build a reply the way the kernel lays it out: info struct, then the
    /// capabilities at the offsets given in the chain.
    fn reply(caps: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut b = vec![0u8; 24];
        b[0..4].copy_from_slice(&0u32.to_ne_bytes());
        let flags = 1 | if caps.is_empty() {
            0
        } else {
            VFIO_IOMMU_INFO_CAPS
        };
        b[4..8].copy_from_slice(&flags.to_ne_bytes());
        b[8..16].copy_from_slice(&0x4020_1000u64.to_ne_bytes());
        if !caps.is_empty() {
            b[16..20].copy_from_slice(&24u32.to_ne_bytes());
        }
        for (i, (id, body)) in caps.iter().enumerate() {
            let start = b.len();
            let next = if i + 1 == caps.len() {
                0
            } else {
                start + 8 + body.len()
            };
            b.extend_from_slice(&id.to_ne_bytes());
            b.extend_from_slice(&1u16.to_ne_bytes());
            b.extend_from_slice(&(next as u32).to_ne_bytes());
            b.extend_from_slice(body);
        }
        let total = b.len() as u32;
        b[0..4].copy_from_slice(&total.to_ne_bytes());
        b
    }

    fn iova_cap(ranges: &[(u64, u64)]) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&(ranges.len() as u32).to_ne_bytes());
        body.extend_from_slice(&0u32.to_ne_bytes());
        for (s, e) in ranges {
            body.extend_from_slice(&s.to_ne_bytes());
            body.extend_from_slice(&e.to_ne_bytes());
        }
        body
    }

    #[test]
    fn ranges_are_found_behind_other_capabilities() {
        // Migration cap (id 2, 16 bytes body) first, then the IOVA ranges.
        let buf = reply(&[
            (2, vec![0u8; 16]),
            (
                1,
                iova_cap(&[(0, 0xfedf_ffff), (0xfef0_0000, 0x7f_ffff_ffff)]),
            ),
        ]);
        let info = parse_iommu_info(&buf).unwrap();
        assert_eq!(info.page_sizes, 0x4020_1000);
        assert_eq!(
            info.ranges.unwrap(),
            vec![
                IovaRange::new(0, 0xfee0_0000),
                IovaRange::new(0xfef0_0000, 0x80_0000_0000)
            ]
        );
    }

    #[test]
    fn no_capabilities_means_no_ranges() {
        let info = parse_iommu_info(&reply(&[])).unwrap();
        assert_eq!(info.ranges, None);
        assert_eq!(info.page_sizes, 0x4020_1000);
    }

    #[test]
    fn truncated_or_looping_replies_do_not_invent_ranges() {
        let good = reply(&[(1, iova_cap(&[(0x1000, 0x1fff), (0x4000, 0x4fff)]))]);
        // Cut inside the second range.
        assert_eq!(parse_iommu_info(&good[..good.len() - 4]), None);
        // Too short for the fixed struct.
        assert_eq!(parse_iommu_info(&good[..12]), None);
        // A chain pointing at itself terminates.
        let mut looping = reply(&[(2, vec![0u8; 8])]);
        looping[28..32].copy_from_slice(&24u32.to_ne_bytes());
        assert_eq!(parse_iommu_info(&looping).unwrap().ranges, None);
    }
}
