//! User memory (UMEM) objects: `CREATE_UMEM` / `DESTROY_UMEM`, the DevX way
//! of describing queue buffers and doorbell records by a registered memory
//! region instead of a page list (`*_umem_id` / `*_umem_valid` in the CQ,
//! WQ/RMP and QP contexts).
//!
//! The kernel's `mlx5_ifc.h` describes these structures only partly (it
//! builds no UMEM itself); names, offsets and widths follow rdma-core
//! `providers/mlx5/mlx5_ifc.h` (`mlx5_ifc_umem_bits`, `mlx5_ifc_mtt_bits`,
//! `create_umem_in`), which its VFIO driver `providers/mlx5/mlx5_vfio.c`
//! sends (`_vfio_devx_umem_reg`). They are checked against
//! `tests/data/mlx5-devx-layouts.csv`.
#![allow(missing_docs)] // every field carries a generated doc line

use crate::layouts;

layouts! {
    /// UMEM description (`struct mlx5_ifc_umem_bits`, 32 bytes plus the
    /// translation entries that follow it in `CREATE_UMEM`).
    umem (32) {
        /// log2 of the UMEM page size minus 12 (`MLX5_ADAPTER_PAGE_SHIFT`).
        log_page_size: u8 @ 155 : 5,
        /// Byte offset of the UMEM's start inside its first page.
        page_offset: u32 @ 160 : 32,
        /// Number of translation entries (pages).
        num_of_mtt: u64 @ 192 : 64,
    }
    /// One UMEM translation entry (`struct mlx5_ifc_mtt_bits`): the page's
    /// device address with bit 1 = write and bit 0 = read allowed.
    mtt (8) {
        ptag_63_32: u32 @ 0 : 32,
        ptag_31_8: u32 @ 32 : 24,
        wr_en: bool @ 62 : 1,
        rd_en: bool @ 63 : 1,
    }
    /// Input of the `CREATE_UMEM` command; the translation entries start at
    /// 0x30 (rdma-core `_vfio_devx_umem_reg`).
    create_umem_in (48) {
        opcode: u16 @ 0 : 16,
        uid: u16 @ 16 : 16,
        op_mod: u16 @ 48 : 16,
        umem: {umem} @ 128 : 256,
        /// One big-endian entry per page: address | wr_en << 1 | rd_en.
        mtt: [u64] @ 384 : 64,
    }
    /// Output of the `CREATE_UMEM` command.
    create_umem_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
        umem_id: u32 @ 72 : 24,
    }
    /// Input of the `DESTROY_UMEM` command.
    destroy_umem_in (16) {
        opcode: u16 @ 0 : 16,
        uid: u16 @ 16 : 16,
        op_mod: u16 @ 48 : 16,
        umem_id: u32 @ 72 : 24,
    }
    /// Output of the `DESTROY_UMEM` command.
    destroy_umem_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
    }
}
