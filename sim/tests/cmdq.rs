//! Command queue transport: mailboxes, ownership, doorbells, tokens,
//! signatures, delivery statuses, IOMMU faults, command-completion EQEs.

use crate::common::*;

use mlx5_hal::Hal;
use mlx5_regs::layouts::*;
use mlx5_regs::{DeliveryStatus, EventMask, Opcode};
use mlx5_sim::{SimConfig, Violation};

fn nop() -> Vec<u8> {
    inp(Opcode::NOP, nop_in::SIZE)
}

fn cap_query() -> Vec<u8> {
    let mut i = inp(Opcode::QUERY_HCA_CAP, query_hca_cap_in::SIZE);
    cmd_in::op_mod.set(&mut i, 1).unwrap();
    i
}

#[test]
fn multi_block_mailbox_chains_round_trip() {
    let mut f = Fw::default();
    f.enable();
    // 4112-byte output: 16 inline + 9 chained blocks.
    let cap = f.query_cap(true);
    assert_eq!(cmd_hca_cap::log_max_cq.get(&cap), 24);
    // 4112-byte input through 9 blocks, checked field by field by SET_HCA_CAP.
    assert!(f
        .set_cap(|c| cmd_hca_cap::log_max_qp.set(c, 12).unwrap())
        .ok());
    let t = f.dev.trace();
    let last = t.last().unwrap();
    assert_eq!(last.input.len(), set_hca_cap_in::SIZE);
    assert_eq!(
        cmd_hca_cap::log_max_qp.get(set_hca_cap_in::capability.get(&last.input)),
        12
    );
    assert!(last.render().contains("SET_HCA_CAP"));
}

/// Prepare a command, corrupt the entry/mailbox with `edit`, ring, collect.
fn corrupted(f: &mut Fw, input: &[u8], out_len: usize, edit: impl FnOnce(&mut Fw)) -> Out {
    f.token = f.token.wrapping_add(1).max(1);
    f.prepare(0, input, out_len);
    edit(f);
    f.ring(0);
    f.wait(0, 1_000_000)
        .expect("completes with a delivery status")
}

#[test]
fn delivery_statuses() {
    let mut f = Fw::default();
    f.enable();
    let ql = query_hca_cap_out::SIZE;
    // Bad command type.
    let o = corrupted(&mut f, &nop(), 16, |f| f.cmdq.write_u8(0, 3));
    assert_eq!(DeliveryStatus(o.delivery), DeliveryStatus::BAD_CMD_TYPE);
    // Reserved entry byte.
    let o = corrupted(&mut f, &nop(), 16, |f| f.cmdq.write_u8(2, 1));
    assert_eq!(
        DeliveryStatus(o.delivery),
        DeliveryStatus::RESERVED_NOT_ZERO
    );
    // Input length below a header.
    let o = corrupted(&mut f, &nop(), 16, |f| f.cmdq.write_be32(4, 4));
    assert_eq!(DeliveryStatus(o.delivery), DeliveryStatus::INPUT_LEN_ERR);
    let o = corrupted(&mut f, &nop(), 16, |f| f.cmdq.write_be32(0x38, 2));
    assert_eq!(DeliveryStatus(o.delivery), DeliveryStatus::OUTPUT_LEN_ERR);
    // Output mailbox pointer not aligned.
    let o = corrupted(&mut f, &cap_query(), ql, |f| {
        let v = f.cmdq.read_be32(0x34);
        f.cmdq.write_be32(0x34, v | 0x40);
    });
    assert_eq!(
        DeliveryStatus(o.delivery),
        DeliveryStatus::OUTPUT_POINTER_NOT_ALIGNED
    );
    // Token mismatch in the third output block.
    let o = corrupted(&mut f, &cap_query(), ql, |f| {
        let blk = out_block_iova(f, 2);
        write_at(f, blk + 0x23d, &[0x77]);
    });
    assert_eq!(DeliveryStatus(o.delivery), DeliveryStatus::TOKEN_ERR);
    // Bad block number in the second output block.
    let o = corrupted(&mut f, &cap_query(), ql, |f| {
        let blk = out_block_iova(f, 1);
        write_at(f, blk + 0x238, &[0, 0, 0, 5]);
    });
    assert_eq!(DeliveryStatus(o.delivery), DeliveryStatus::BAD_BLOCK_NUMBER);
    // Chain shorter than output_length.
    let o = corrupted(&mut f, &cap_query(), ql, |f| {
        let blk = out_block_iova(f, 3);
        write_at(f, blk + 0x230, &[0; 8]);
    });
    assert_eq!(DeliveryStatus(o.delivery), DeliveryStatus::OUTPUT_LEN_ERR);
    // Next pointer not 1 KiB aligned.
    let o = corrupted(&mut f, &cap_query(), ql, |f| {
        let blk = out_block_iova(f, 0);
        let mut b = [0u8; 4];
        read_at(f, blk + 0x234, &mut b);
        b[2] |= 0x02; // bit 9
        write_at(f, blk + 0x234, &b);
    });
    assert_eq!(
        DeliveryStatus(o.delivery),
        DeliveryStatus::OUTPUT_POINTER_NOT_ALIGNED
    );
    // A command that failed delivery did not run.
    assert!(f
        .dev
        .trace()
        .iter()
        .rev()
        .take(8)
        .all(|t| t.delivery_status != 0));
}

#[test]
fn input_chain_checks() {
    let mut f = Fw::default();
    f.enable();
    let cap = f.query_cap(true);
    let mut i = inp(Opcode::SET_HCA_CAP, set_hca_cap_in::SIZE);
    set_hca_cap_in::capability
        .get_mut(&mut i)
        .copy_from_slice(&cap);
    let o = corrupted(&mut f, &i, 16, |f| {
        let v = f.cmdq.read_be32(0x0c);
        f.cmdq.write_be32(0x0c, v | 0x100);
    });
    assert_eq!(
        DeliveryStatus(o.delivery),
        DeliveryStatus::INPUT_POINTER_NOT_ALIGNED
    );
    let o = corrupted(&mut f, &i, 16, |f| {
        let blk = in_block_iova(f, 4);
        write_at(f, blk + 0x23d, &[0]);
    });
    assert_eq!(DeliveryStatus(o.delivery), DeliveryStatus::TOKEN_ERR);
    // Input pointer into unmapped IOVA space: IOMMU fault, FW internal error.
    let o = corrupted(&mut f, &i, 16, |f| {
        f.cmdq.write_be32(0x08, 0x0000_0001);
        f.cmdq.write_be32(0x0c, 0x0000_0000);
    });
    assert_eq!(DeliveryStatus(o.delivery), DeliveryStatus::FW_INTERNAL_ERR);
    let fault = f.dev.iommu_faults().pop().unwrap();
    assert_eq!(fault.iova, 1 << 32);
    assert!(!fault.write);
    assert!(f.set_cap(|_| {}).ok(), "a clean command still works");
}

fn in_block_iova(f: &Fw, k: usize) -> u64 {
    chain_block(f, 0x08, k)
}
fn out_block_iova(f: &Fw, k: usize) -> u64 {
    chain_block(f, 0x30, k)
}
fn chain_block(f: &Fw, ptr_off: usize, k: usize) -> u64 {
    let mut p = f.cmdq.read_be64(ptr_off) & !0x1ff;
    for _ in 0..k {
        let mut b = [0u8; 8];
        read_at(f, p + 0x230, &mut b);
        p = u64::from_be_bytes(b) & !0x3ff;
    }
    p
}
/// Access test-owned DMA through the IOVA (the helper knows the pool).
fn write_at(f: &Fw, iova: u64, data: &[u8]) {
    f.with_iova(iova, |r, off| r.write_bytes(off, data));
}
fn read_at(f: &Fw, iova: u64, data: &mut [u8]) {
    f.with_iova(iova, |r, off| r.read_bytes(off, data));
}

#[test]
fn token_and_signature_corruption_injection() {
    let mut f = Fw::default();
    f.enable();
    f.dev
        .inject()
        .corrupt_next_delivery(mlx5_sim::Corruption::Token);
    let o = f.exec(&nop(), 16);
    assert_eq!(DeliveryStatus(o.delivery), DeliveryStatus::TOKEN_ERR);
    f.dev
        .inject()
        .corrupt_next_delivery(mlx5_sim::Corruption::Signature);
    let o = f.exec(&nop(), 16);
    assert_eq!(DeliveryStatus(o.delivery), DeliveryStatus::SIGNATURE_ERR);
    assert!(f.exec(&nop(), 16).ok());
}

#[test]
fn signatures_checked_only_with_checksums_enabled() {
    let mut f = Fw::default();
    f.enable();
    // Checksums off: garbage signature is accepted.
    let o = corrupted(&mut f, &nop(), 16, |f| f.cmdq.write_u8(0x3d, 0x5a));
    assert!(o.ok());
    assert!(f
        .set_cap(|c| cmd_hca_cap::cmdif_checksum.set(c, 3).unwrap())
        .ok());
    // Now an unsigned entry is refused...
    let o = corrupted(&mut f, &nop(), 16, |f| f.cmdq.write_u8(0x3d, 0x5a));
    assert_eq!(DeliveryStatus(o.delivery), DeliveryStatus::SIGNATURE_ERR);
    // ...signed entries and blocks pass, and the firmware signs its output.
    f.checksums = true;
    let cap = f.query_cap(true);
    assert_eq!(cmd_hca_cap::cmdif_checksum.get(&cap), 3);
    let mut e = [0u8; 64];
    f.cmdq.read_bytes(0, &mut e);
    assert_eq!(xor(&e), 0xff, "completed entry signed");
    let blk = out_block_iova(&f, 0);
    let mut b = vec![0u8; 576];
    read_at(&f, blk, &mut b);
    assert_eq!(xor(&b[0x200..0x23f]), 0xff);
    assert_eq!(xor(&b[..0x240]), 0xff);
    // A signed entry with an unsigned input block is refused.
    let mut i = inp(Opcode::SET_HCA_CAP, set_hca_cap_in::SIZE);
    set_hca_cap_in::capability
        .get_mut(&mut i)
        .copy_from_slice(&cap);
    let o = corrupted(&mut f, &i, 16, |f| {
        let blk = in_block_iova(f, 1);
        write_at(f, blk + 0x23f, &[0x11]);
    });
    assert_eq!(DeliveryStatus(o.delivery), DeliveryStatus::SIGNATURE_ERR);
}

#[test]
fn ownership_and_doorbell_rules() {
    let mut f = Fw::default();
    f.enable();
    // Ringing a slot whose entry is software-owned: ignored and recorded.
    f.prepare(0, &nop(), 16);
    f.cmdq.write_u8(0x3f, 0);
    f.ring(0);
    assert!(f
        .dev
        .violations()
        .iter()
        .any(|v| matches!(v, Violation::Doorbell(s) if s.contains("software"))));
    assert_eq!(f.dev.trace().len(), 1, "only ENABLE_HCA ran");
    // Two slots in one doorbell write.
    f.prepare(3, &nop(), 16);
    let mut e = [0u8; 64];
    f.cmdq.read_bytes(3 * 64, &mut e);
    f.cmdq.write_bytes(7 * 64, &e);
    f.hal.mmio_write32(0x18, (1 << 3) | (1 << 7));
    assert!(!f.owned_by_hw(3) && !f.owned_by_hw(7));
    let slots: Vec<usize> = f.dev.trace().iter().map(|t| t.slot).collect();
    assert_eq!(&slots[1..], &[3, 7]);
    // Busy slot: a stalled command keeps its slot.
    f.dev.inject().stall_next(Opcode::NOP.0);
    assert!(f.try_exec(1, &nop(), 16).is_none());
    f.ring(1);
    assert!(f
        .dev
        .violations()
        .iter()
        .any(|v| matches!(v, Violation::Doorbell(s) if s.contains("not completed"))));
    // The last slot works like any other (Linux reserves it for pages).
    assert!(f.try_exec(31, &nop(), 16).unwrap().ok());
}

#[test]
fn command_queue_outside_dma_is_an_iommu_fault() {
    let dev = mlx5_sim::Device::new(SimConfig::default());
    let hal = dev.hal();
    hal.delay_us(2000);
    hal.mmio_write32(0x10, 0x1234);
    hal.mmio_write32(0x14, 0x5000);
    hal.mmio_write32(0x18, 1);
    let f = dev.iommu_faults();
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].iova, 0x1234_0000_5000);
}

#[test]
fn doorbell_while_initializing_or_unprogrammed_is_ignored() {
    let dev = mlx5_sim::Device::new(SimConfig::default());
    let hal = dev.hal();
    hal.mmio_write32(0x18, 1);
    hal.delay_us(2000);
    hal.mmio_write32(0x18, 1);
    let v = dev.violations();
    assert!(matches!(&v[0], Violation::Doorbell(s) if s.contains("initializing")));
    assert!(matches!(&v[1], Violation::Doorbell(s) if s.contains("address")));
}

#[test]
fn command_completion_eqe_when_subscribed() {
    let mut f = Fw::up(1);
    let mut eq = f.create_eq(7, EventMask::CMD.bits());
    // CREATE_EQ itself completes before the EQ exists; the next ones signal.
    assert!(f.drain_eq(&mut eq).is_empty());
    f.slot = 4;
    f.ok(&nop(), 16);
    let evs = f.drain_eq(&mut eq);
    assert_eq!(evs.len(), 1);
    assert_eq!(eqe_type(&evs[0]), 0x0a);
    assert_eq!(
        cmd_inter_comp_event::command_completion_vector.get(eqe::event_data.get(&evs[0])),
        1 << 4
    );
}

#[test]
fn trace_records_every_command_with_decoding() {
    let mut f = Fw::default();
    f.enable();
    f.query_pages(1);
    let t = f.dev.trace();
    assert_eq!(t.len(), 2);
    assert_eq!(t[1].opcode, Opcode::QUERY_PAGES.0);
    assert_eq!(t[1].op_mod, 1);
    let r = t[1].render();
    assert!(r.contains("QUERY_PAGES") && r.contains("num_pages"), "{r}");
    f.dev.clear_trace();
    assert!(f.dev.trace().is_empty());
}
