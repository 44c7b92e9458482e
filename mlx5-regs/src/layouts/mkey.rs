//! Memory keys: the memory key context and `CREATE_MKEY`, `QUERY_MKEY`,
//! `DESTROY_MKEY`.
//!
//! Names, bit offsets and widths follow `mlx5_ifc.h` (checked against
//! `tests/data/mlx5-qp-layouts.csv` by `tests/csv_layouts.rs`); sizes are the
//! full `mlx5_ifc` sizes.
#![allow(missing_docs)] // every field carries a generated doc line

use crate::layouts;

layouts! {
    /// Memory key context (`struct mlx5_ifc_mkc_bits`, 64 bytes), at byte 0x10
    /// of `CREATE_MKEY`. The key is `mkey_index << 8 | mkey_7_0`.
    mkc (64) {
        free: bool @ 1 : 1,
        /// Bits 4:2 of the access mode (`MLX5_MKC_ACCESS_MODE_*`).
        access_mode_4_2: u8 @ 3 : 3,
        relaxed_ordering_write: bool @ 13 : 1,
        small_fence_on_rdma_read_response: bool @ 15 : 1,
        umr_en: bool @ 16 : 1,
        a: bool @ 17 : 1,
        rw: bool @ 18 : 1,
        rr: bool @ 19 : 1,
        lw: bool @ 20 : 1,
        lr: bool @ 21 : 1,
        /// Bits 1:0 of the access mode: 0 PA, 1 MTT.
        access_mode_1_0: u8 @ 22 : 2,
        ma_translation_mode: u8 @ 26 : 2,
        /// 0xffffff: not bound to a QP.
        qpn: u32 @ 32 : 24,
        /// The key's low byte, chosen by software (a rolling variant in Linux).
        mkey_7_0: u8 @ 56 : 8,
        /// The key spans the whole 64-bit address space (`len` ignored).
        length64: bool @ 96 : 1,
        bsf_en: bool @ 97 : 1,
        sync_umr: bool @ 98 : 1,
        expected_sigerr_count: bool @ 101 : 1,
        en_rinval: bool @ 103 : 1,
        pd: u32 @ 104 : 24,
        start_addr: u64 @ 128 : 64,
        len: u64 @ 192 : 64,
        bsf_octword_size: u32 @ 256 : 32,
        crossing_target_vhca_id: u16 @ 384 : 16,
        /// MTT entries / 2 (one octword holds two 8-byte entries).
        translations_octword_size: u32 @ 416 : 32,
        relaxed_ordering_read: bool @ 473 : 1,
        /// Absolute log2 of the MTT page size (not minus 12). Header
        /// difference: the Linux kernel's `mlx5_ifc.h` (followed here, as the
        /// CSV does) declares 6 bits at bit 474, while rdma-core's and DPDK's
        /// copies declare 5 bits at 475. The LSB is the same bit, so values
        /// below 32 encode identically in both.
        log_page_size: u8 @ 474 : 6,
    }
    /// Input of the `CREATE_MKEY` command: `mkc` at 0x10, MTT/KLM entries from
    /// 0x110 (Linux `mlx5_core_create_mkey`, `drivers/net/ethernet/mellanox/mlx5/core/mr.c`).
    create_mkey_in (272) {
        opcode: u16 @ 0 : 16,
        uid: u16 @ 16 : 16,
        op_mod: u16 @ 48 : 16,
        /// MTT entries carry access bits (only with cap `pg`).
        pg_access: bool @ 96 : 1,
        mkey_umem_valid: bool @ 97 : 1,
        data_direct: bool @ 98 : 1,
        memory_key_mkey_entry: {mkc} @ 128 : 512,
        translations_octword_actual_size: u32 @ 768 : 32,
        /// Translation entries as 32-bit words: an MTT entry is two words
        /// (big-endian page address, high word first).
        klm_pas_mtt: [u32] @ 2176 : 32,
    }
    /// Output of the `CREATE_MKEY` command: `mkey_index` = key >> 8.
    create_mkey_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
        mkey_index: u32 @ 72 : 24,
    }
    /// Input of the `DESTROY_MKEY` command: `mkey_index` = key >> 8.
    destroy_mkey_in (16) {
        opcode: u16 @ 0 : 16,
        uid: u16 @ 16 : 16,
        op_mod: u16 @ 48 : 16,
        mkey_index: u32 @ 72 : 24,
    }
    /// Output of the `DESTROY_MKEY` command.
    destroy_mkey_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
    }
    /// Input of the `QUERY_MKEY` command.
    query_mkey_in (16) {
        opcode: u16 @ 0 : 16,
        op_mod: u16 @ 48 : 16,
        mkey_index: u32 @ 72 : 24,
        pg_access: bool @ 96 : 1,
    }
    /// Output of the `QUERY_MKEY` command.
    query_mkey_out (304) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
        memory_key_mkey_entry: {mkc} @ 128 : 512,
        bsf0_klm0_pas_mtt0_1: bytes @ 2176 : 128,
        bsf1_klm1_pas_mtt2_3: bytes @ 2304 : 128,
    }
}
