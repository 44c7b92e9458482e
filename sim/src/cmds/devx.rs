//! CREATE_UMEM and DESTROY_UMEM (uid 0, capability `umem_uid_0`), and the
//! lookups the CQ, RMP and QP commands use for the `*_umem_*` fields of
//! their contexts (rdma-core `providers/mlx5/mlx5_vfio.c`
//! `_vfio_devx_umem_reg`, `vfio_devx_umem_dereg`; layouts of rdma-core
//! `providers/mlx5/mlx5_ifc.h`). Every choice is in `docs/fidelity.md` §15.

use super::*;
use crate::umem::{Umem, MTT_READ, MTT_WRITE};

/// Largest UMEM page: 2^31 bytes (rdma-core `MLX5_MAX_PAGE_SHIFT`).
const MAX_UMEM_PAGE_SHIFT: u32 = 31;

/// Where a context finds a buffer or doorbell record in a UMEM.
#[derive(Debug, Clone, Copy)]
pub(super) struct UmemUse {
    pub id: u32,
    pub off: u64,
    pub len: u64,
    /// The device writes there (CQ buffers).
    pub write: bool,
}

impl State {
    pub(super) fn create_umem(&mut self, inp: &[u8], out: &mut [u8]) -> R {
        ensure(self.caps.umem_uid_0, bad_param(sy::UMEM_UID_0_CAP))?;
        let u = create_umem_in::umem.get(inp);
        let shift = 12 + umem::log_page_size.get(u) as u32;
        ensure(shift <= MAX_UMEM_PAGE_SHIFT, bad_param(sy::UMEM_PAGE_SIZE))?;
        let n = umem::num_of_mtt.get(u);
        ensure(n > 0 && n <= 1 << 24, bad_param(sy::UMEM_NUM_MTT))?;
        ensure(
            (inp.len() as u64) >= create_umem_in::mtt.len_with(n as usize) as u64,
            fail(CmdStatus::BAD_INP_LEN_ERR, sy::UMEM_MTT_SHORT),
        )?;
        let page_offset = umem::page_offset.get(u) as u64;
        ensure(page_offset < 1u64 << shift, bad_param(sy::UMEM_PAGE_OFFSET))?;
        let mut pages = Vec::with_capacity(n as usize);
        let mut perms = Vec::with_capacity(n as usize);
        for i in 0..n as usize {
            let e = create_umem_in::mtt.get(inp, i).unwrap_or(0);
            let addr = e & !0xff;
            // Bits 7:2 are reserved; the address is page aligned.
            ensure(
                e & 0xfc == 0 && addr & ((1u64 << shift) - 1) == 0,
                bad_param(sy::UMEM_MTT_ALIGN),
            )?;
            pages.push(addr);
            perms.push(e & (MTT_READ | MTT_WRITE));
        }
        let id = self.objects.free_umem_id();
        self.objects.umems.insert(
            id,
            Umem {
                pages,
                perms,
                page_shift: shift,
                page_offset,
            },
        );
        create_umem_out::umem_id.set(out, id).expect("24-bit");
        Ok(())
    }

    pub(super) fn destroy_umem(&mut self, inp: &[u8]) -> R {
        let id = destroy_umem_in::umem_id.get(inp);
        self.objects.destroy_umem(id).map(drop)
    }

    /// The queue buffer a context places in a UMEM.
    pub(super) fn umem_buf(&self, u: UmemUse) -> Result<QBuf, Fail> {
        let m = self
            .objects
            .umems
            .get(&u.id)
            .ok_or(bad_res(sy::UMEM_NOT_FOUND))?;
        m.buf(u.off, u.len, u.write)
            .ok_or(bad_param(sy::UMEM_RANGE))
    }

    /// The device address of a doorbell record a context places in a UMEM
    /// (`dbr_addr` is then the offset into it).
    pub(super) fn umem_dbr(&self, u: UmemUse) -> Result<u64, Fail> {
        let m = self
            .objects
            .umems
            .get(&u.id)
            .ok_or(bad_res(sy::UMEM_NOT_FOUND))?;
        m.addr(u.off, u.len, u.write)
            .ok_or(bad_param(sy::UMEM_RANGE))
    }
}
