//! UAR doorbells and doorbell records: offsets and how values are composed
//! (docs/firmware.md §5).
//!
//! A UAR page `i` sits at BAR0 + `i` × 4 KiB (with `log_uar_page_sz = 0`).
//! EQ doorbells are 32-bit MMIO writes; the CQ arm doorbell is one 64-bit
//! write whose first word repeats the arm value stored in the CQ doorbell
//! record and whose second word is the CQ number.

/// Size of a UAR page with `log_uar_page_sz = 0` and `uar_4k = 0`.
pub const UAR_PAGE_SIZE: usize = 4096;
/// CQ arm doorbell, 64-bit (`MLX5_CQ_DOORBELL`).
pub const UAR_CQ_DOORBELL: usize = 0x20;
/// EQ doorbell: update the consumer index and arm (`MLX5_EQ_DOORBEL_OFFSET`).
pub const UAR_EQ_DOORBELL_ARM: usize = 0x40;
/// EQ doorbell: update the consumer index without arming.
pub const UAR_EQ_DOORBELL_NO_ARM: usize = 0x48;
/// First BlueFlame register (`MLX5_BF_OFFSET`).
pub const UAR_BF_OFFSET: usize = 0x800;

/// Byte offset in BAR0 of UAR page `index`.
pub const fn uar_page_offset(index: u32) -> usize {
    index as usize * UAR_PAGE_SIZE
}

/// Value of an EQ doorbell write: `eqn << 24 | (ci & 0xffffff)`.
pub const fn eq_doorbell(eqn: u8, consumer_index: u32) -> u32 {
    ((eqn as u32) << 24) | (consumer_index & 0x00ff_ffff)
}

/// Split an EQ doorbell value into (eqn, consumer index).
pub const fn eq_doorbell_parts(value: u32) -> (u8, u32) {
    ((value >> 24) as u8, value & 0x00ff_ffff)
}

/// CQ arm command: solicited completions only (`MLX5_CQ_DB_REQ_NOT_SOL`).
pub const CQ_ARM_SOLICITED: u32 = 1 << 24;
/// CQ arm command: next completion (`MLX5_CQ_DB_REQ_NOT`).
pub const CQ_ARM_NEXT: u32 = 0;

/// Arm word: `(sn & 3) << 28 | cmd | (ci & 0xffffff)`. Stored big-endian in
/// word 1 of the CQ doorbell record and in the first half of the doorbell.
pub const fn cq_arm_word(arm_sn: u32, cmd: u32, consumer_index: u32) -> u32 {
    ((arm_sn & 3) << 28) | (cmd & CQ_ARM_SOLICITED) | (consumer_index & 0x00ff_ffff)
}

/// The 64-bit CQ arm doorbell: arm word in the upper half, CQ number below.
pub const fn cq_arm_doorbell(arm_word: u32, cqn: u32) -> u64 {
    ((arm_word as u64) << 32) | (cqn & 0x00ff_ffff) as u64
}

/// Decoded CQ arm doorbell (what a device sees).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqArm {
    /// Command sequence number (2 bits).
    pub arm_sn: u32,
    /// True for solicited-only arming.
    pub solicited: bool,
    /// Consumer index at arming time (24 bits).
    pub consumer_index: u32,
    /// CQ number.
    pub cqn: u32,
}

/// Decode a 64-bit CQ arm doorbell value.
pub const fn cq_arm_parts(value: u64) -> CqArm {
    let w = (value >> 32) as u32;
    CqArm {
        arm_sn: (w >> 28) & 3,
        solicited: w & CQ_ARM_SOLICITED != 0,
        consumer_index: w & 0x00ff_ffff,
        cqn: value as u32 & 0x00ff_ffff,
    }
}

/// Byte offset of the consumer-index word in a CQ doorbell record.
pub const CQ_DBR_SET_CI: usize = 0;
/// Byte offset of the arm word in a CQ doorbell record.
pub const CQ_DBR_ARM: usize = 4;
/// Size of a CQ doorbell record.
pub const CQ_DBR_SIZE: usize = 8;
/// Size of an SRQ/RMP doorbell record (be32 of a 16-bit WQE counter).
pub const SRQ_DBR_SIZE: usize = 4;

/// Byte offset of the receive counter in a QP doorbell record (`MLX5_RCV_DBR`).
pub const QP_DBR_RCV: usize = 0;
/// Byte offset of the send counter in a QP doorbell record (`MLX5_SND_DBR`).
pub const QP_DBR_SND: usize = 4;
/// Size of a QP doorbell record.
pub const QP_DBR_SIZE: usize = 8;

/// BlueFlame registers per UAR page: two regular and two fast-path
/// (`MLX5_BFREGS_PER_UAR`, `include/linux/mlx5/device.h`).
pub const BF_REGS_PER_UAR: u32 = 4;

/// Byte offset inside a UAR page of BlueFlame register `index` with
/// registers of `2^log_bf_reg_size` bytes (cap `log_bf_reg_size`): the send
/// doorbell of a QP whose `qpc.uar_page` is this UAR is one 64-bit store of
/// the first 8 bytes of the last WQE's control segment here, alternating
/// between the register's two halves (Linux `mlx5r_ring_db`,
/// `drivers/infiniband/hw/mlx5/wr.c`; rdma-core `post_send_db`).
pub const fn bf_reg_offset(index: u32, log_bf_reg_size: u8) -> usize {
    UAR_BF_OFFSET + ((index as usize) << log_bf_reg_size)
}

/// The send doorbell value: the control segment's `opmod_idx_opcode` and
/// `qpn_ds` dwords as they sit in memory (big-endian), read as one
/// big-endian 64-bit value.
pub const fn qp_send_doorbell(opmod_idx_opcode: u32, qpn_ds: u32) -> u64 {
    ((opmod_idx_opcode as u64) << 32) | qpn_ds as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eq_doorbell_packs_eqn_and_masks_ci() {
        assert_eq!(eq_doorbell(3, 0x0123_4567), 0x0323_4567);
        assert_eq!(eq_doorbell_parts(0x0323_4567), (3, 0x23_4567));
    }

    #[test]
    fn cq_arm_round_trips() {
        let w = cq_arm_word(5, CQ_ARM_SOLICITED, 0x0100_0010);
        assert_eq!(w, 0x1100_0010, "sn masked to 2 bits, ci to 24 bits");
        let d = cq_arm_doorbell(w, 0x77);
        assert_eq!(d, 0x1100_0010_0000_0077);
        assert_eq!(
            cq_arm_parts(d),
            CqArm {
                arm_sn: 1,
                solicited: true,
                consumer_index: 0x10,
                cqn: 0x77
            }
        );
        assert!(!cq_arm_parts(cq_arm_doorbell(cq_arm_word(2, CQ_ARM_NEXT, 9), 1)).solicited);
    }

    #[test]
    fn blueflame_registers_follow_0x800() {
        assert_eq!(bf_reg_offset(0, 9), 0x800);
        assert_eq!(bf_reg_offset(1, 9), 0xa00);
        assert_eq!(bf_reg_offset(BF_REGS_PER_UAR - 1, 8), 0xb00);
        let d = qp_send_doorbell(0x0001_230a, 0x0000_4502);
        assert_eq!(d.to_be_bytes(), [0, 1, 0x23, 0x0a, 0, 0, 0x45, 0x02]);
    }

    #[test]
    fn uar_pages_are_4k_apart() {
        assert_eq!(uar_page_offset(0), 0);
        assert_eq!(uar_page_offset(3) + UAR_EQ_DOORBELL_ARM, 0x3040);
    }
}
