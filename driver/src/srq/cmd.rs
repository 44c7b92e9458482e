//! SRQ commands, in both families the firmware offers (docs/firmware.md §9.1):
//! RMP at ISSI 1 (CREATE/MODIFY/QUERY/DESTROY_RMP) and the SRQ commands at
//! ISSI 0 (CREATE/QUERY/DESTROY_SRQ, ARM_RQ).

use mlx5_regs::consts::{ctx as values, op_mod};
use mlx5_regs::layouts::*;
use mlx5_regs::{Opcode, RegError};

use crate::cmd::encode::{command_prefix, header_into};
use crate::pagelist::PageList;

/// What both families need to create a receive queue.
#[derive(Debug, Clone, Copy)]
pub struct SrqParams {
    /// log2 of the number of WQEs.
    pub log_wqe_cnt: u8,
    /// log2 of the WQE stride in bytes.
    pub log_stride: u8,
    /// Protection domain.
    pub pd: u32,
    /// Device address of the doorbell record.
    pub dbr_addr: u64,
    /// The WQE buffer's pages.
    pub pages: PageList,
    /// CQ number for `srqc.cqn` (ISSI 0 only; Linux puts a CQ there).
    pub cqn: u32,
}

/// Input length of CREATE_RMP with `n` pages (the list is `ctx.wq.pas`).
pub const fn create_rmp_len(n: usize) -> usize {
    create_rmp_in::SIZE + 8 * n
}
/// Output length of CREATE_RMP.
pub const CREATE_RMP_OUT: usize = create_rmp_out::SIZE;

/// CREATE_RMP (docs/firmware.md §9.3): state RDY, linked-list WQ with absolute
/// `log_wq_stride`, limit 0 (not armed). Returns the input length.
pub fn create_rmp(buf: &mut [u8], p: &SrqParams) -> Result<usize, RegError> {
    let len = create_rmp_len(p.pages.count);
    let b = command_prefix(buf, len, Opcode::CREATE_RMP, 0)?;
    let ctx = create_rmp_in::ctx.tail_mut(b);
    rmpc::state.set(ctx, values::RMP_STATE_RDY)?;
    let w = rmpc::wq.tail_mut(ctx);
    wq::wq_type.set(w, 0)?;
    wq::log_wq_pg_sz.set(w, p.pages.log_page_size)?;
    wq::log_wq_stride.set(w, p.log_stride)?;
    wq::log_wq_sz.set(w, p.log_wqe_cnt)?;
    wq::pd.set(w, p.pd)?;
    wq::dbr_addr.set(w, p.dbr_addr)?;
    for (i, pa) in p.pages.iter().enumerate() {
        wq::pas.set(w, i, pa)?;
    }
    Ok(len)
}

/// CREATE_RMP output: the RMP number (the SRQ number at ISSI 1).
pub fn parse_create_rmp(out: &[u8]) -> u32 {
    create_rmp_out::rmpn.get(out)
}

/// Output length of MODIFY_RMP.
pub const MODIFY_RMP_OUT: usize = modify_rmp_out::SIZE;
/// MODIFY_RMP that sets the limit watermark (docs/firmware.md §9.3): current state RDY,
/// bitmask selects `lwm` only, `ctx.wq.lwm` = limit (0 disarms).
pub fn arm_rmp(rmpn: u32, lwm: u16) -> Result<[u8; modify_rmp_in::SIZE], RegError> {
    let mut b = [0u8; modify_rmp_in::SIZE];
    header_into(&mut b, Opcode::MODIFY_RMP, 0);
    modify_rmp_in::rmp_state.set(&mut b, values::RMP_STATE_RDY)?;
    modify_rmp_in::rmpn.set(&mut b, rmpn)?;
    rmp_bitmask::lwm.set(modify_rmp_in::bitmask.get_mut(&mut b), true)?;
    let ctx = modify_rmp_in::ctx.get_mut(&mut b);
    rmpc::state.set(ctx, values::RMP_STATE_RDY)?;
    wq::lwm.set(rmpc::wq.get_mut(ctx), lwm)?;
    Ok(b)
}

/// Output length of QUERY_RMP.
pub const QUERY_RMP_OUT: usize = query_rmp_out::SIZE;
/// QUERY_RMP.
pub fn query_rmp(rmpn: u32) -> Result<[u8; query_rmp_in::SIZE], RegError> {
    let mut b = [0u8; query_rmp_in::SIZE];
    header_into(&mut b, Opcode::QUERY_RMP, 0);
    query_rmp_in::rmpn.set(&mut b, rmpn)?;
    Ok(b)
}

/// The queried state of a receive queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqState {
    /// Context state (RMP: 1 RDY, 3 ERR; SRQ: 0 good, 1 error).
    pub state: u8,
    /// Armed limit watermark (0 when not armed or after the event).
    pub lwm: u16,
    /// log2 of the number of WQEs.
    pub log_wqe_cnt: u8,
}

/// Parse QUERY_RMP output.
pub fn parse_query_rmp(out: &[u8]) -> SrqState {
    let ctx = query_rmp_out::rmp_context.get(out);
    let w = rmpc::wq.get(ctx);
    SrqState {
        state: rmpc::state.get(ctx),
        lwm: wq::lwm.get(w),
        log_wqe_cnt: wq::log_wq_sz.get(w),
    }
}

/// Output length of DESTROY_RMP.
pub const DESTROY_RMP_OUT: usize = destroy_rmp_out::SIZE;
/// DESTROY_RMP.
pub fn destroy_rmp(rmpn: u32) -> Result<[u8; destroy_rmp_in::SIZE], RegError> {
    let mut b = [0u8; destroy_rmp_in::SIZE];
    header_into(&mut b, Opcode::DESTROY_RMP, 0);
    destroy_rmp_in::rmpn.set(&mut b, rmpn)?;
    Ok(b)
}

/// Input length of CREATE_SRQ with `n` pages.
pub const fn create_srq_len(n: usize) -> usize {
    create_srq_in::pas.len_with(n)
}
/// Output length of CREATE_SRQ.
pub const CREATE_SRQ_OUT: usize = create_srq_out::SIZE;

/// CREATE_SRQ (ISSI 0, docs/firmware.md §9.2): `log_rq_stride` is log2(stride) − 4,
/// limit 0. Returns the input length.
pub fn create_srq(buf: &mut [u8], p: &SrqParams) -> Result<usize, RegError> {
    let len = create_srq_len(p.pages.count);
    let b = command_prefix(buf, len, Opcode::CREATE_SRQ, 0)?;
    let ctx = create_srq_in::srq_context_entry.get_mut(b);
    srqc::state.set(ctx, values::SRQ_STATE_GOOD)?;
    srqc::log_srq_size.set(ctx, p.log_wqe_cnt)?;
    let rq_stride = p.log_stride.checked_sub(4).ok_or(RegError::Overflow {
        field: "log_rq_stride",
        width: 3,
        value: p.log_stride as u64,
    })?;
    srqc::log_rq_stride.set(ctx, rq_stride)?;
    srqc::cqn.set(ctx, p.cqn)?;
    srqc::log_page_size.set(ctx, p.pages.log_page_size)?;
    srqc::pd.set(ctx, p.pd)?;
    srqc::dbr_addr.set(ctx, p.dbr_addr)?;
    for (i, pa) in p.pages.iter().enumerate() {
        create_srq_in::pas.set(b, i, pa)?;
    }
    Ok(len)
}

/// CREATE_SRQ output: the SRQ number.
pub fn parse_create_srq(out: &[u8]) -> u32 {
    create_srq_out::srqn.get(out)
}

/// Output length of ARM_RQ.
pub const ARM_RQ_OUT: usize = arm_rq_out::SIZE;
/// ARM_RQ op_mod 1 (SRQ): set the limit watermark (0 disarms).
pub fn arm_rq(srqn: u32, lwm: u16) -> Result<[u8; arm_rq_in::SIZE], RegError> {
    let mut b = [0u8; arm_rq_in::SIZE];
    header_into(&mut b, Opcode::ARM_RQ, op_mod::ARM_RQ_SRQ);
    arm_rq_in::srq_number.set(&mut b, srqn)?;
    arm_rq_in::lwm.set(&mut b, lwm)?;
    Ok(b)
}

/// Output length of QUERY_SRQ.
pub const QUERY_SRQ_OUT: usize = query_srq_out::SIZE;
/// QUERY_SRQ.
pub fn query_srq(srqn: u32) -> Result<[u8; query_srq_in::SIZE], RegError> {
    let mut b = [0u8; query_srq_in::SIZE];
    header_into(&mut b, Opcode::QUERY_SRQ, 0);
    query_srq_in::srqn.set(&mut b, srqn)?;
    Ok(b)
}

/// Parse QUERY_SRQ output.
pub fn parse_query_srq(out: &[u8]) -> SrqState {
    let ctx = query_srq_out::srq_context_entry.get(out);
    SrqState {
        state: srqc::state.get(ctx),
        lwm: srqc::lwm.get(ctx),
        log_wqe_cnt: srqc::log_srq_size.get(ctx),
    }
}

/// Output length of DESTROY_SRQ.
pub const DESTROY_SRQ_OUT: usize = destroy_srq_out::SIZE;
/// DESTROY_SRQ.
pub fn destroy_srq(srqn: u32) -> Result<[u8; destroy_srq_in::SIZE], RegError> {
    let mut b = [0u8; destroy_srq_in::SIZE];
    header_into(&mut b, Opcode::DESTROY_SRQ, 0);
    destroy_srq_in::srqn.set(&mut b, srqn)?;
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> SrqParams {
        SrqParams {
            log_wqe_cnt: 4,
            log_stride: 5,
            pd: 7,
            dbr_addr: 0xd000,
            pages: PageList {
                first: 0x20_0000,
                log_page_size: 0,
                count: 1,
            },
            cqn: 0x21,
        }
    }

    #[test]
    fn create_rmp_puts_the_page_list_at_0x110() {
        let mut b = [0u8; 0x118];
        assert_eq!(create_rmp(&mut b, &params()).unwrap(), 0x118);
        assert_eq!(b[0x110..0x118], 0x20_0000u64.to_be_bytes());
        let ctx = create_rmp_in::ctx.get(&b);
        assert_eq!(rmpc::state.get(ctx), 1);
        let w = rmpc::wq.get(ctx);
        assert_eq!(
            (
                wq::log_wq_stride.get(w),
                wq::log_wq_sz.get(w),
                wq::pd.get(w)
            ),
            (5, 4, 7)
        );
        assert_eq!(wq::dbr_addr.get(w), 0xd000);
    }

    #[test]
    fn arm_rmp_selects_only_the_limit() {
        let b = arm_rmp(0x33, 7).unwrap();
        assert_eq!(b[0x17], 1, "bitmask.lwm is byte 0x17 bit 0");
        assert_eq!(u16::from_be_bytes([b[688 / 8], b[688 / 8 + 1]]), 7);
        assert_eq!(modify_rmp_in::rmpn.get(&b), 0x33);
    }

    #[test]
    fn create_srq_uses_the_relative_stride_and_srqc_fields() {
        let mut b = [0u8; 0x118];
        create_srq(&mut b, &params()).unwrap();
        let ctx = create_srq_in::srq_context_entry.get(&b);
        assert_eq!(srqc::log_rq_stride.get(ctx), 1, "32-byte stride = 2^(1+4)");
        assert_eq!(srqc::cqn.get(ctx), 0x21);
        let a = arm_rq(5, 9).unwrap();
        assert_eq!(u16::from_be_bytes([a[6], a[7]]), 1);
        assert_eq!(arm_rq_in::lwm.get(&a), 9);
    }
}
