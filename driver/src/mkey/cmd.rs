//! Memory-key commands: CREATE_MKEY in physical-address and MTT mode and
//! DESTROY_MKEY (`mlx5_ifc.h` `create_mkey_in`, `mkc`; the context at byte
//! 0x10 of the command, the MTT entries at 0x110).

use mlx5_regs::consts::mkey;
use mlx5_regs::layouts::*;
use mlx5_regs::{Opcode, RegError};

use super::MkeyAccess;
use crate::cmd::encode::{command_prefix, header_into};

/// Output length of CREATE_MKEY.
pub const CREATE_MKEY_OUT: usize = create_mkey_out::SIZE;

/// CREATE_MKEY of a physical-address key covering the whole address space
/// (Linux `mlx5_ib_get_dma_mr`, `mlx5e_create_mkey`): access mode PA,
/// `length64`, start 0, `qpn` 0xffffff, the given rights, PD and 8-bit
/// variant. No translation entries: the input is the fixed 272 bytes.
pub fn create_mkey_pa(
    pd: u32,
    access: MkeyAccess,
    variant: u8,
) -> Result<[u8; create_mkey_in::SIZE], RegError> {
    let mut b = [0u8; create_mkey_in::SIZE];
    header_into(&mut b, Opcode::CREATE_MKEY, 0);
    let m = create_mkey_in::memory_key_mkey_entry.get_mut(&mut b);
    let (mode_4_2, mode_1_0) = mkey::split_access_mode(mkey::ACCESS_MODE_PA);
    mkc::access_mode_4_2.set(m, mode_4_2)?;
    mkc::access_mode_1_0.set(m, mode_1_0)?;
    mkc::lr.set(m, access.contains(MkeyAccess::LOCAL_READ))?;
    mkc::lw.set(m, access.contains(MkeyAccess::LOCAL_WRITE))?;
    mkc::rr.set(m, access.contains(MkeyAccess::REMOTE_READ))?;
    mkc::rw.set(m, access.contains(MkeyAccess::REMOTE_WRITE))?;
    mkc::a.set(m, access.contains(MkeyAccess::REMOTE_ATOMIC))?;
    mkc::qpn.set(m, mkey::QPN_ANY)?;
    mkc::mkey_7_0.set(m, variant)?;
    mkc::length64.set(m, true)?;
    mkc::pd.set(m, pd)?;
    Ok(b)
}

/// Most MTT entries one CREATE_MKEY of this driver carries (in the
/// command's mailboxes). With pages chosen as below, a region needs one
/// entry per 2 GiB plus one, so this bounds a registration at 62 GiB.
pub const MAX_MTT_ENTRIES: usize = 32;

/// Largest MTT page: 2^31 bytes. Linux's `mlx5_umem_mkc_find_best_pgsz`
/// (`drivers/infiniband/hw/mlx5/mlx5_ib.h`) allows a 5-bit
/// `log_page_size` unless the device has `umr_log_entity_size_5`.
pub const MAX_MTT_LOG_PAGE: u8 = 31;

/// Smallest MTT page: the 4 KiB page of the PRM and of Linux's umem.
pub const MIN_MTT_LOG_PAGE: u8 = 12;

/// Longest CREATE_MKEY input this driver builds.
pub const CREATE_MKEY_MTT_MAX: usize = create_mkey_in::klm_pas_mtt.len_with(2 * MAX_MTT_ENTRIES);

/// How an MTT key translates `[start, start + len)`: one page size and the
/// pages, in order, starting at the page that holds `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MttLayout {
    /// log2 of the page size.
    pub log_page_size: u8,
    /// Address of the first page (`start` rounded down to the page size).
    pub first_page: u64,
    /// Number of pages (MTT entries).
    pub entries: usize,
}

impl MttLayout {
    /// The layout Linux would choose for a region whose virtual address is
    /// its device address and whose device pages are contiguous:
    /// `ib_umem_find_best_pgsz` (`drivers/infiniband/core/umem.c`) takes
    /// the smallest page that holds the whole region when virtual and
    /// device addresses agree in every bit, capped at
    /// [`MAX_MTT_LOG_PAGE`] and at least [`MIN_MTT_LOG_PAGE`]. `None` when
    /// `len` is 0, the region wraps, or it needs more than
    /// [`MAX_MTT_ENTRIES`] entries.
    pub const fn for_region(start: u64, len: u64) -> Option<MttLayout> {
        if len == 0 {
            return None;
        }
        let last = match start.checked_add(len - 1) {
            Some(l) => l,
            None => return None,
        };
        let differ = last ^ start;
        let bits = (64 - differ.leading_zeros()) as u8;
        let log = if bits < MIN_MTT_LOG_PAGE {
            MIN_MTT_LOG_PAGE
        } else if bits > MAX_MTT_LOG_PAGE {
            MAX_MTT_LOG_PAGE
        } else {
            bits
        };
        let entries = ((last >> log) - (start >> log) + 1) as usize;
        if entries > MAX_MTT_ENTRIES {
            return None;
        }
        Some(MttLayout {
            log_page_size: log,
            first_page: (start >> log) << log,
            entries,
        })
    }

    /// `translations_octword_size`: two entries an octword (Linux
    /// `get_octo_len`).
    pub const fn octwords(&self) -> u32 {
        self.entries.div_ceil(2) as u32
    }

    /// Input length of its CREATE_MKEY: the entry count rounded up to even.
    pub const fn input_len(&self) -> usize {
        create_mkey_in::klm_pas_mtt.len_with(2 * 2 * self.entries.div_ceil(2))
    }
}

/// What an MTT key covers and grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MttKey {
    /// Protection domain.
    pub pd: u32,
    /// Rights (`lr lw rr rw a`), exactly as requested.
    pub access: MkeyAccess,
    /// The 8-bit variant (`mkey_7_0`).
    pub variant: u8,
    /// First byte (`start_addr`): the region's device address, which is
    /// also its virtual address.
    pub start: u64,
    /// Length in bytes (`len`).
    pub len: u64,
    /// Set `pg_access` and the read/write bits of every entry, as Linux
    /// does when the device has capability `pg`.
    pub pg_access: bool,
}

/// CREATE_MKEY of an MTT key over `[k.start, k.start + k.len)` of
/// contiguous device memory (Linux `reg_create`,
/// `drivers/infiniband/hw/mlx5/mr.c`): access mode MTT, `qpn` 0xffffff,
/// `translations_octword_size` and `_actual_size` the octwords of `layout`,
/// the entries the page addresses in order. Returns the input length.
pub fn create_mkey_mtt(buf: &mut [u8], k: &MttKey, layout: &MttLayout) -> Result<usize, RegError> {
    let len = layout.input_len();
    let b = command_prefix(buf, len, Opcode::CREATE_MKEY, 0)?;
    b[8..len].fill(0);
    create_mkey_in::pg_access.set(b, k.pg_access)?;
    create_mkey_in::translations_octword_actual_size.set(b, layout.octwords())?;
    let m = create_mkey_in::memory_key_mkey_entry.get_mut(b);
    let (mode_4_2, mode_1_0) = mkey::split_access_mode(mkey::ACCESS_MODE_MTT);
    mkc::access_mode_4_2.set(m, mode_4_2)?;
    mkc::access_mode_1_0.set(m, mode_1_0)?;
    mkc::lr.set(m, k.access.contains(MkeyAccess::LOCAL_READ))?;
    mkc::lw.set(m, k.access.contains(MkeyAccess::LOCAL_WRITE))?;
    mkc::rr.set(m, k.access.contains(MkeyAccess::REMOTE_READ))?;
    mkc::rw.set(m, k.access.contains(MkeyAccess::REMOTE_WRITE))?;
    mkc::a.set(m, k.access.contains(MkeyAccess::REMOTE_ATOMIC))?;
    mkc::qpn.set(m, mkey::QPN_ANY)?;
    mkc::mkey_7_0.set(m, k.variant)?;
    mkc::pd.set(m, k.pd)?;
    mkc::start_addr.set(m, k.start)?;
    mkc::len.set(m, k.len)?;
    mkc::translations_octword_size.set(m, layout.octwords())?;
    mkc::log_page_size.set(m, layout.log_page_size)?;
    let perms = if k.pg_access { mkey::MTT_PRESENT } else { 0 };
    for i in 0..layout.entries {
        let page = layout.first_page + ((i as u64) << layout.log_page_size);
        let e = page | perms;
        create_mkey_in::klm_pas_mtt.set(b, 2 * i, (e >> 32) as u32)?;
        create_mkey_in::klm_pas_mtt.set(b, 2 * i + 1, e as u32)?;
    }
    Ok(len)
}

/// CREATE_MKEY output: the key index (24 bits).
pub fn parse_create_mkey(out: &[u8]) -> u32 {
    create_mkey_out::mkey_index.get(out)
}

/// Output length of DESTROY_MKEY.
pub const DESTROY_MKEY_OUT: usize = destroy_mkey_out::SIZE;

/// DESTROY_MKEY: takes the key index, `key >> 8`.
pub fn destroy_mkey(key: u32) -> Result<[u8; destroy_mkey_in::SIZE], RegError> {
    let mut b = [0u8; destroy_mkey_in::SIZE];
    header_into(&mut b, Opcode::DESTROY_MKEY, 0);
    destroy_mkey_in::mkey_index.set(&mut b, mkey::index(key))?;
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn be32(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
    }

    #[test]
    fn pa_key_bytes_match_the_command_layout() {
        let b =
            create_mkey_pa(0x12, MkeyAccess::LOCAL_READ | MkeyAccess::LOCAL_WRITE, 0x5a).unwrap();
        assert_eq!(b.len(), 272, "CREATE_MKEY without translations");
        assert_eq!(u16::from_be_bytes([b[0], b[1]]), 0x200);
        // mkc at 0x10: dword 0 bits 15..10 = umr_en a rw rr lw lr, bits 9:8 mode.
        assert_eq!(
            be32(&b, 0x10),
            0b0000_1100_0000_0000,
            "lw | lr, access mode PA"
        );
        // dword 1: qpn 0xffffff << 8 | mkey_7_0.
        assert_eq!(be32(&b, 0x14), 0xffff_ff5a);
        // dword 3: length64 bit 31, pd bits 23:0.
        assert_eq!(be32(&b, 0x1c), 0x8000_0012);
        assert_eq!(&b[0x20..0x30], &[0u8; 16], "start 0, len unused");
        assert_eq!(be32(&b, 0x60), 0, "no translations");
        let all = MkeyAccess::all();
        let b = create_mkey_pa(1, all, 0).unwrap();
        assert_eq!(be32(&b, 0x10) >> 10 & 0x3f, 0b01_1111, "a rw rr lw lr");
    }

    #[test]
    fn mtt_pages_are_the_smallest_that_hold_the_region() {
        let l = |s, n| MttLayout::for_region(s, n).unwrap();
        // 4 KiB aligned: one 4 KiB page.
        assert_eq!(
            l(0x10_0000, 4096),
            MttLayout {
                log_page_size: 12,
                first_page: 0x10_0000,
                entries: 1
            }
        );
        // 100 bytes in one page: the 4 KiB minimum.
        assert_eq!(l(0x10_0010, 100).log_page_size, 12);
        // 8 KiB across a 128 KiB boundary: one 256 KiB page.
        assert_eq!(
            l(0x1_f000, 0x2000),
            MttLayout {
                log_page_size: 18,
                first_page: 0,
                entries: 1
            }
        );
        // 1 MiB aligned: one 1 MiB page.
        assert_eq!(l(0x4010_0000, 1 << 20).log_page_size, 20);
        // 1 GiB aligned to 1 GiB: one page; 4 GiB: two 2 GiB pages.
        assert_eq!(l(1 << 30, 1 << 30).entries, 1);
        assert_eq!(
            l(1 << 32, 1 << 32),
            MttLayout {
                log_page_size: 31,
                first_page: 1 << 32,
                entries: 2
            }
        );
        // 3 GiB starting 1 KiB into a 2 GiB page: two pages; 3 GiB and a
        // byte starting half way into one: three.
        assert_eq!(l((1 << 31) + 1024, 3 << 30).entries, 2);
        assert_eq!(l(3 << 30, (3 << 30) + 1).entries, 3);
        assert_eq!(MttLayout::for_region(0, 0), None);
        assert_eq!(MttLayout::for_region(u64::MAX, 2), None);
        assert_eq!(
            MttLayout::for_region(0, 40 << 31),
            None,
            "more than the entries"
        );
    }

    #[test]
    fn mtt_key_bytes_match_the_command_layout() {
        let layout = MttLayout::for_region(0x1234_5000 + 0x800, 0x3000).unwrap();
        assert_eq!((layout.log_page_size, layout.entries), (16, 1));
        let k = MttKey {
            pd: 0x12,
            access: MkeyAccess::LOCAL_READ | MkeyAccess::LOCAL_WRITE | MkeyAccess::REMOTE_WRITE,
            variant: 0x5a,
            start: 0x1234_5800,
            len: 0x3000,
            pg_access: true,
        };
        let mut b = [0xeeu8; CREATE_MKEY_MTT_MAX];
        let n = create_mkey_mtt(&mut b, &k, &layout).unwrap();
        assert_eq!(n, 0x110 + 16, "one entry padded to an octword");
        assert_eq!(u16::from_be_bytes([b[0], b[1]]), 0x200);
        assert_eq!(be32(&b, 0x0c), 0x8000_0000, "pg_access");
        // mkc dword 0: rw lw lr (bits 13, 11, 10), access mode MTT (bits 9:8 = 1).
        assert_eq!(be32(&b, 0x10), 0b0010_1101_0000_0000);
        assert_eq!(be32(&b, 0x14), 0xffff_ff5a, "qpn any, variant");
        assert_eq!(be32(&b, 0x1c), 0x0000_0012, "no length64, pd");
        assert_eq!(&b[0x20..0x28], &0x1234_5800u64.to_be_bytes(), "start");
        assert_eq!(&b[0x28..0x30], &0x3000u64.to_be_bytes(), "len");
        assert_eq!(be32(&b, 0x44), 1, "translations_octword_size");
        assert_eq!(be32(&b, 0x48) & 0x3f, 16, "log_page_size");
        assert_eq!(be32(&b, 0x60), 1, "translations_octword_actual_size");
        assert_eq!(&b[0x110..0x118], &(0x1234_0000u64 | 3).to_be_bytes());
        assert_eq!(&b[0x118..0x120], &[0u8; 8], "padding entry");
    }

    #[test]
    fn destroy_takes_the_index() {
        let b = destroy_mkey(0x0012_345a).unwrap();
        assert_eq!(u16::from_be_bytes([b[0], b[1]]), 0x202);
        assert_eq!(be32(&b, 0x08), 0x1234);
    }
}
