//! Memory keys: the object CREATE_MKEY makes and how the data path uses it
//! (PRM "Memory Key" / `mlx5_ifc.h` `mkc`; Linux `mlx5_ib_get_dma_mr` in
//! `drivers/infiniband/hw/mlx5/mr.c` for physical-address keys, rdma-core
//! `mlx5_vfio_reg_mr` in `providers/mlx5/mlx5_vfio.c` for MTT keys).
//!
//! A key is `mkey_index << 8 | mkey_7_0`; lkey and rkey are the same value.
//! A lookup needs both the index and the variant byte to match.

use mlx5_regs::consts::mkey as mk;

/// What an access through a key needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Gather for a send (`lr`).
    LocalRead,
    /// Scatter of a receive (`lw`).
    LocalWrite,
    /// Target of an RDMA WRITE (`rw`).
    RemoteWrite,
    /// Source of an RDMA READ (`rr`).
    RemoteRead,
    /// Target of an atomic (`a`); it reads and writes the operand.
    RemoteAtomic,
}

/// Why an access through a key was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyError {
    /// No key with this index and variant.
    NoKey,
    /// The key belongs to another protection domain.
    WrongPd,
    /// The key lacks the right the access needs.
    NoRight,
    /// The range is outside the key's window, or the translation is
    /// missing / lacks the page's permission bit.
    Bounds,
}

/// A memory key.
#[derive(Debug, Clone)]
pub(crate) struct Mkey {
    /// The full key (index << 8 | variant).
    pub key: u32,
    pub pd: u32,
    /// `MLX5_MKC_ACCESS_MODE_*` (PA or MTT).
    pub access_mode: u8,
    pub lr: bool,
    pub lw: bool,
    pub rr: bool,
    pub rw: bool,
    pub a: bool,
    pub length64: bool,
    pub start: u64,
    pub len: u64,
    /// MTT: absolute log2 of the page size.
    pub log_page_size: u8,
    /// MTT: page addresses with the permission bits (when `pg_access`).
    pub mtt: Vec<u64>,
    pub pg_access: bool,
    /// `translations_octword_size` as given (returned by QUERY_MKEY).
    pub octwords: u32,
    pub qpn: u32,
}

impl Mkey {
    fn has(&self, a: Access) -> bool {
        match a {
            Access::LocalRead => self.lr,
            Access::LocalWrite => self.lw,
            Access::RemoteWrite => self.rw,
            Access::RemoteRead => self.rr,
            Access::RemoteAtomic => self.a,
        }
    }

    /// Check an access of `len` bytes at virtual address `va` and append the
    /// device addresses (IOVA, length) it covers to `out`, in order (nothing
    /// appended when refused).
    pub fn translate_into(
        &self,
        pd: u32,
        va: u64,
        len: u64,
        access: Access,
        out: &mut Vec<(u64, u64)>,
    ) -> Result<(), KeyError> {
        if self.pd != pd {
            return Err(KeyError::WrongPd);
        }
        if !self.has(access) {
            return Err(KeyError::NoRight);
        }
        if len == 0 {
            return Ok(());
        }
        let end = va.checked_add(len).ok_or(KeyError::Bounds)?;
        if !self.length64 {
            let kend = self.start.checked_add(self.len).ok_or(KeyError::Bounds)?;
            if va < self.start || end > kend {
                return Err(KeyError::Bounds);
            }
        }
        if self.access_mode == mk::ACCESS_MODE_PA {
            out.push((va, len));
            return Ok(());
        }
        // MTT: page i of the window covers [base + i*ps, base + (i+1)*ps),
        // base = start rounded down to the page size.
        let ps = 1u64 << self.log_page_size;
        let base = self.start & !(ps - 1);
        let first = out.len();
        let mut at = va;
        while at < end {
            let page = ((at - base) >> self.log_page_size) as usize;
            let Some(&entry) = self.mtt.get(page) else {
                out.truncate(first);
                return Err(KeyError::Bounds);
            };
            if self.pg_access {
                let need = match access {
                    Access::LocalRead | Access::RemoteRead => 1,
                    Access::LocalWrite | Access::RemoteWrite => 2,
                    Access::RemoteAtomic => 3,
                };
                if entry & need != need {
                    out.truncate(first);
                    return Err(KeyError::Bounds);
                }
            }
            let within = (at - base) & (ps - 1);
            let n = (ps - within).min(end - at);
            out.push(((entry & !(ps - 1)) + within, n));
            at += n;
        }
        Ok(())
    }
}
