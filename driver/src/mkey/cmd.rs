//! Memory-key commands: CREATE_MKEY in physical-address mode and
//! DESTROY_MKEY (`mlx5_ifc.h` `create_mkey_in`, `mkc`; the context at byte
//! 0x10 of the command).

use mlx5_regs::consts::mkey;
use mlx5_regs::layouts::*;
use mlx5_regs::{Opcode, RegError};

use super::MkeyAccess;
use crate::cmd::encode::header_into;

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
    fn destroy_takes_the_index() {
        let b = destroy_mkey(0x0012_345a).unwrap();
        assert_eq!(u16::from_be_bytes([b[0], b[1]]), 0x202);
        assert_eq!(be32(&b, 0x08), 0x1234);
    }
}
