//! CQ commands: CREATE_CQ, DESTROY_CQ, QUERY_CQ, MODIFY_CQ (moderation and
//! resize), built with `mlx5-regs` into plain buffers (docs/firmware.md §7.1, §8).

use mlx5_regs::consts::{op_mod, ModifyCqFields, ResizeCqFields};
use mlx5_regs::layouts::*;
use mlx5_regs::{Opcode, RegError};

use super::moderation::CqModeration;
use super::CqeSize;
use crate::cmd::encode::{command_prefix, header_into};
use crate::pagelist::PageList;

/// Context of a new CQ.
#[derive(Debug, Clone, Copy)]
pub struct CqParams {
    /// log2 of the number of CQEs.
    pub log_size: u8,
    /// CQE size.
    pub cqe_size: CqeSize,
    /// UAR index for the arm doorbell.
    pub uar_page: u32,
    /// EQ that receives this CQ's completion and error events.
    pub eqn: u8,
    /// Device address of the doorbell record.
    pub dbr_addr: u64,
    /// The ring's pages.
    pub pages: PageList,
    /// Ignore overrun (`cqc.oi`).
    pub overrun_ignore: bool,
    /// Moderation values (`cq_period`, `cq_max_count`, `cq_period_mode`).
    pub moderation: Option<CqModeration>,
}

/// Input length of CREATE_CQ with `n` pages.
pub const fn create_cq_len(n: usize) -> usize {
    create_cq_in::pas.len_with(n)
}
/// Output length of CREATE_CQ.
pub const CREATE_CQ_OUT: usize = create_cq_out::SIZE;

/// CREATE_CQ into `buf`; returns the input length.
pub fn create_cq(buf: &mut [u8], p: &CqParams) -> Result<usize, RegError> {
    let len = create_cq_len(p.pages.count);
    let b = command_prefix(buf, len, Opcode::CREATE_CQ, 0)?;
    let ctx = create_cq_in::cq_context.get_mut(b);
    cqc::cqe_sz.set(ctx, p.cqe_size.cqc_value())?;
    cqc::oi.set(ctx, p.overrun_ignore)?;
    cqc::log_cq_size.set(ctx, p.log_size)?;
    cqc::uar_page.set(ctx, p.uar_page)?;
    cqc::c_eqn_or_apu_element.set(ctx, p.eqn as u32)?;
    cqc::log_page_size.set(ctx, p.pages.log_page_size)?;
    cqc::dbr_addr.set(ctx, p.dbr_addr)?;
    if let Some(m) = &p.moderation {
        cqc::cq_period.set(ctx, m.period)?;
        cqc::cq_max_count.set(ctx, m.max_count)?;
        cqc::cq_period_mode.set(ctx, m.mode.cqc_value())?;
    }
    for (i, pa) in p.pages.iter().enumerate() {
        create_cq_in::pas.set(b, i, pa)?;
    }
    Ok(len)
}

/// CREATE_CQ output: the CQ number.
pub fn parse_create_cq(out: &[u8]) -> u32 {
    create_cq_out::cqn.get(out)
}

/// Output length of DESTROY_CQ.
pub const DESTROY_CQ_OUT: usize = destroy_cq_out::SIZE;
/// DESTROY_CQ.
pub fn destroy_cq(cqn: u32) -> Result<[u8; destroy_cq_in::SIZE], RegError> {
    let mut b = [0u8; destroy_cq_in::SIZE];
    header_into(&mut b, Opcode::DESTROY_CQ, 0);
    destroy_cq_in::cqn.set(&mut b, cqn)?;
    Ok(b)
}

/// Output length of QUERY_CQ (fixed part; the page list is not read back).
pub const QUERY_CQ_OUT: usize = query_cq_out::SIZE;
/// QUERY_CQ.
pub fn query_cq(cqn: u32) -> Result<[u8; query_cq_in::SIZE], RegError> {
    let mut b = [0u8; query_cq_in::SIZE];
    header_into(&mut b, Opcode::QUERY_CQ, 0);
    query_cq_in::cqn.set(&mut b, cqn)?;
    Ok(b)
}

/// The fields of a queried CQ context the driver uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqState {
    /// `cqc.status` (0 OK, 0x9 overflow, 0xa write failure).
    pub status: u8,
    /// `cqc.st` (armed / fired).
    pub st: u8,
    /// log2 of the number of CQEs.
    pub log_size: u8,
    /// Moderation period.
    pub cq_period: u16,
    /// Moderation count.
    pub cq_max_count: u16,
    /// Producer counter.
    pub producer_counter: u32,
    /// Consumer counter.
    pub consumer_counter: u32,
}

/// Parse QUERY_CQ output.
pub fn parse_query_cq(out: &[u8]) -> CqState {
    let c = query_cq_out::cq_context.get(out);
    CqState {
        status: cqc::status.get(c),
        st: cqc::st.get(c),
        log_size: cqc::log_cq_size.get(c),
        cq_period: cqc::cq_period.get(c),
        cq_max_count: cqc::cq_max_count.get(c),
        producer_counter: cqc::producer_counter.get(c),
        consumer_counter: cqc::consumer_counter.get(c),
    }
}

/// Output length of MODIFY_CQ.
pub const MODIFY_CQ_OUT: usize = modify_cq_out::SIZE;

/// Input length of a MODIFY_CQ resize with `n` pages.
pub const fn resize_cq_len(n: usize) -> usize {
    modify_cq_in::pas.len_with(n)
}

/// MODIFY_CQ op_mod 1 (resize, docs/firmware.md §8): new size, page size and page
/// list; the CQE size stays; `resize_field_select` = LOG_CQ_SIZE |
/// PAGE_OFFSET | LOG_PAGE_SIZE. Returns the input length.
pub fn resize_cq(
    buf: &mut [u8],
    cqn: u32,
    log_size: u8,
    cqe_size: CqeSize,
    pages: &PageList,
) -> Result<usize, RegError> {
    let len = resize_cq_len(pages.count);
    let b = command_prefix(buf, len, Opcode::MODIFY_CQ, op_mod::MODIFY_CQ_RESIZE)?;
    modify_cq_in::cqn.set(b, cqn)?;
    let sel =
        ResizeCqFields::LOG_CQ_SIZE | ResizeCqFields::PAGE_OFFSET | ResizeCqFields::LOG_PAGE_SIZE;
    resize_field_select::resize_field_select.set(
        modify_cq_in::modify_field_select_resize_field_select.get_mut(b),
        sel.bits(),
    )?;
    let ctx = modify_cq_in::cq_context.get_mut(b);
    cqc::cqe_sz.set(ctx, cqe_size.cqc_value())?;
    cqc::log_cq_size.set(ctx, log_size)?;
    cqc::log_page_size.set(ctx, pages.log_page_size)?;
    cqc::page_offset.set(ctx, 0)?;
    for (i, pa) in pages.iter().enumerate() {
        modify_cq_in::pas.set(b, i, pa)?;
    }
    Ok(len)
}

/// MODIFY_CQ op_mod 0: completion moderation (period and count).
pub fn modify_cq_moderation(
    cqn: u32,
    period: u16,
    max_count: u16,
) -> Result<[u8; modify_cq_in::SIZE], RegError> {
    let mut b = [0u8; modify_cq_in::SIZE];
    header_into(&mut b, Opcode::MODIFY_CQ, op_mod::MODIFY_CQ_MODERATION);
    modify_cq_in::cqn.set(&mut b, cqn)?;
    let sel = ModifyCqFields::PERIOD | ModifyCqFields::COUNT;
    modify_field_select::modify_field_select.set(
        modify_cq_in::modify_field_select_resize_field_select.get_mut(&mut b),
        sel.bits(),
    )?;
    let ctx = modify_cq_in::cq_context.get_mut(&mut b);
    cqc::cq_period.set(ctx, period)?;
    cqc::cq_max_count.set(ctx, max_count)?;
    Ok(b)
}

/// MODIFY_CQ op_mod 0 with period, count and period mode
/// (`modify_field_select` PERIOD | COUNT | PERIOD_MODE, Linux
/// `mlx5e_modify_cq_moderation`).
pub fn modify_cq_moderation_mode(
    cqn: u32,
    m: &CqModeration,
) -> Result<[u8; modify_cq_in::SIZE], RegError> {
    let mut b = modify_cq_moderation(cqn, m.period, m.max_count)?;
    let sel = ModifyCqFields::PERIOD | ModifyCqFields::COUNT | ModifyCqFields::PERIOD_MODE;
    modify_field_select::modify_field_select.set(
        modify_cq_in::modify_field_select_resize_field_select.get_mut(&mut b),
        sel.bits(),
    )?;
    let ctx = modify_cq_in::cq_context.get_mut(&mut b);
    cqc::cq_period_mode.set(ctx, m.mode.cqc_value())?;
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pages(n: usize) -> PageList {
        PageList {
            first: 0x10_0000,
            log_page_size: 0,
            count: n,
        }
    }

    #[test]
    fn create_cq_lays_out_context_and_pages() {
        let mut buf = [0u8; 0x110 + 16];
        let len = create_cq(
            &mut buf,
            &CqParams {
                log_size: 10,
                cqe_size: CqeSize::B128,
                uar_page: 17,
                eqn: 3,
                dbr_addr: 0xabc0,
                pages: pages(2),
                overrun_ignore: false,
                moderation: Some(CqModeration {
                    period: 4095,
                    max_count: 0xffff,
                    mode: super::super::moderation::CqPeriodMode::StartFromCqe,
                }),
            },
        )
        .unwrap();
        assert_eq!(len, 0x120);
        assert_eq!(u16::from_be_bytes([buf[0], buf[1]]), 0x400);
        let ctx = create_cq_in::cq_context.get(&buf);
        assert_eq!(cqc::log_cq_size.get(ctx), 10);
        assert_eq!(cqc::cqe_sz.get(ctx), 1);
        assert_eq!(cqc::c_eqn_or_apu_element.get(ctx), 3);
        assert_eq!(cqc::dbr_addr.get(ctx), 0xabc0);
        assert_eq!(cqc::cq_period.get(ctx), 4095);
        assert_eq!(cqc::cq_max_count.get(ctx), 0xffff);
        assert_eq!(cqc::cq_period_mode.get(ctx), 1);
        assert!(!cqc::oi.get(ctx));
        assert_eq!(buf[0x118..0x120], 0x10_1000u64.to_be_bytes());
        let one_page = CqParams {
            log_size: 1,
            cqe_size: CqeSize::B64,
            uar_page: 0,
            eqn: 0,
            dbr_addr: 0,
            pages: pages(1),
            overrun_ignore: false,
            moderation: None,
        };
        assert!(
            create_cq(&mut [0u8; 0x110], &one_page).is_err(),
            "no room for the page"
        );
    }

    #[test]
    fn resize_selects_size_offset_and_page_size() {
        let mut buf = [0u8; 0x118];
        resize_cq(&mut buf, 0x55, 12, CqeSize::B64, &pages(1)).unwrap();
        assert_eq!(u16::from_be_bytes([buf[6], buf[7]]), 1, "op_mod resize");
        assert_eq!(u32::from_be_bytes(buf[0x0c..0x10].try_into().unwrap()), 0x7);
        assert_eq!(modify_cq_in::cqn.get(&buf), 0x55);
        assert_eq!(cqc::log_cq_size.get(modify_cq_in::cq_context.get(&buf)), 12);
    }

    #[test]
    fn moderation_selects_period_and_count() {
        let b = modify_cq_moderation(9, 16, 8).unwrap();
        assert_eq!(u16::from_be_bytes([b[6], b[7]]), 0);
        assert_eq!(u32::from_be_bytes(b[0x0c..0x10].try_into().unwrap()), 0x3);
        assert!(
            modify_cq_moderation(9, 4096, 8).is_err(),
            "period is 12 bits"
        );
        let ctx = modify_cq_in::cq_context.get(&b);
        assert_eq!(
            (cqc::cq_period.get(ctx), cqc::cq_max_count.get(ctx)),
            (16, 8)
        );
        assert_eq!(cqc::cq_period_mode.get(ctx), 0, "mode not selected, left 0");
        assert_eq!(modify_cq_in::cqn.get(&b), 9);
        // Exactly the bytes: opcode 0x403 at 0, op_mod 0 at 6, cqn at 0x08,
        // select at 0x0c; cqc at 0x10: period at bit 132 (byte 0x20, low 12
        // bits of the first half-word), count at bit 144 (byte 0x22).
        assert_eq!(&b[0..2], &[0x04, 0x03]);
        assert_eq!(&b[0x08..0x0c], &[0, 0, 0, 9]);
        assert_eq!(&b[0x20..0x24], &[0x00, 0x10, 0x00, 0x08]);
    }

    #[test]
    fn moderation_with_mode_selects_period_count_and_mode() {
        use super::super::moderation::CqPeriodMode;
        let m = CqModeration {
            period: 0x123,
            max_count: 0x4567,
            mode: CqPeriodMode::StartFromCqe,
        };
        let b = modify_cq_moderation_mode(0x42, &m).unwrap();
        assert_eq!(u16::from_be_bytes([b[6], b[7]]), 0, "op_mod moderation");
        assert_eq!(u32::from_be_bytes(b[0x0c..0x10].try_into().unwrap()), 0x13);
        // cq_period_mode: bits 15..17 of cqc word 0 (byte 0x11 bit 0 and
        // byte 0x12 bit 7).
        assert_eq!(&b[0x10..0x14], &[0x00, 0x00, 0x80, 0x00]);
        assert_eq!(&b[0x20..0x24], &[0x01, 0x23, 0x45, 0x67]);
    }
}
