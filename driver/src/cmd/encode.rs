//! One small function per command: build the input with `mlx5-regs` into a
//! plain buffer, parse the output from a plain buffer. No transport here, so
//! any transport (this crate's command queue, a test harness, a future
//! emulated path) can reuse them.
//!
//! Input and output lengths are exact per layout (firmware checks them and
//! answers BAD_INP_LEN / BAD_OUTP_LEN otherwise).
//!
//! ```
//! use mlx5_driver::unstable::encode;
//! use mlx5_regs::Opcode;
//! let input = encode::query_pages(mlx5_regs::consts::op_mod::QUERY_PAGES_BOOT, false);
//! assert_eq!(encode::header_opcode(&input), Opcode::QUERY_PAGES.0);
//! assert_eq!(encode::header_op_mod(&input), 1);
//! ```

use mlx5_regs::consts::op_mod;
use mlx5_regs::layouts::*;
use mlx5_regs::{CmdStatus, Opcode, RegError};

/// Opcode of an input buffer (bytes 0..2; 0 if too short).
pub fn header_opcode(input: &[u8]) -> u16 {
    if input.len() < 8 {
        return 0;
    }
    cmd_in::opcode.get(input)
}

/// op_mod of an input buffer (bytes 6..8; 0 if too short).
pub fn header_op_mod(input: &[u8]) -> u16 {
    if input.len() < 8 {
        return 0;
    }
    cmd_in::op_mod.get(input)
}

/// Status and syndrome of an output buffer (docs/firmware.md §2.6).
pub fn out_status(output: &[u8]) -> (CmdStatus, u32) {
    if output.len() < 8 {
        return (CmdStatus(0), 0);
    }
    (
        CmdStatus(cmd_out::status.get(output)),
        cmd_out::syndrome.get(output),
    )
}

fn header<const N: usize>(op: Opcode, op_mod: u16) -> [u8; N] {
    let mut b = [0u8; N];
    // Opcode and op_mod are 16-bit fields: every u16 fits.
    let _ = cmd_in::opcode.set(&mut b, op.0);
    let _ = cmd_in::op_mod.set(&mut b, op_mod);
    b
}

/// Zero `buf` and write the command header (opcode, op_mod).
pub(crate) fn header_into(buf: &mut [u8], op: Opcode, op_mod: u16) {
    buf.fill(0);
    let _ = cmd_in::opcode.set(buf, op.0);
    let _ = cmd_in::op_mod.set(buf, op_mod);
}

/// The first `len` bytes of `buf` (a command with a page list), zeroed and
/// with the header written; `BufferTooShort` if `buf` cannot hold it.
pub(crate) fn command_prefix(
    buf: &mut [u8],
    len: usize,
    op: Opcode,
    op_mod: u16,
) -> Result<&mut [u8], RegError> {
    let have = buf.len();
    let b = buf.get_mut(..len).ok_or(RegError::BufferTooShort {
        field: "pas",
        needed: len,
        len: have,
    })?;
    header_into(b, op, op_mod);
    Ok(b)
}

/// Output length of ENABLE_HCA.
pub const ENABLE_HCA_OUT: usize = enable_hca_out::SIZE;
/// ENABLE_HCA for function 0 (docs/firmware.md §4.1 step 5).
pub fn enable_hca(embedded_cpu: bool) -> [u8; enable_hca_in::SIZE] {
    let mut b = header(Opcode::ENABLE_HCA, 0);
    let _ = enable_hca_in::embedded_cpu_function.set(&mut b, embedded_cpu);
    b
}

/// Output length of DISABLE_HCA.
pub const DISABLE_HCA_OUT: usize = disable_hca_out::SIZE;
/// DISABLE_HCA for function 0 (docs/firmware.md §4.3 step 4).
pub fn disable_hca(embedded_cpu: bool) -> [u8; disable_hca_in::SIZE] {
    let mut b = header(Opcode::DISABLE_HCA, 0);
    let _ = disable_hca_in::embedded_cpu_function.set(&mut b, embedded_cpu);
    b
}

/// Output length of QUERY_ISSI.
pub const QUERY_ISSI_OUT: usize = query_issi_out::SIZE;
/// QUERY_ISSI.
pub fn query_issi() -> [u8; query_issi_in::SIZE] {
    header(Opcode::QUERY_ISSI, 0)
}
/// QUERY_ISSI output: (current_issi, supported_issi_dw0).
pub fn parse_query_issi(out: &[u8]) -> (u16, u32) {
    (
        query_issi_out::current_issi.get(out),
        query_issi_out::supported_issi_dw0.get(out),
    )
}

/// Output length of SET_ISSI.
pub const SET_ISSI_OUT: usize = set_issi_out::SIZE;
/// SET_ISSI.
pub fn set_issi(issi: u16) -> [u8; set_issi_in::SIZE] {
    let mut b = header(Opcode::SET_ISSI, 0);
    let _ = set_issi_in::current_issi.set(&mut b, issi);
    b
}

/// Output length of QUERY_PAGES.
pub const QUERY_PAGES_OUT: usize = query_pages_out::SIZE;
/// QUERY_PAGES with op_mod 1 boot, 2 init, 3 regular; `embedded_cpu` as
/// ENABLE_HCA had it (Linux `mlx5_cmd_query_pages`).
pub fn query_pages(op_mod: u16, embedded_cpu: bool) -> [u8; query_pages_in::SIZE] {
    let mut b = header(Opcode::QUERY_PAGES, op_mod);
    let _ = query_pages_in::embedded_cpu_function.set(&mut b, embedded_cpu);
    b
}
/// QUERY_PAGES output: (function_id, num_pages signed).
pub fn parse_query_pages(out: &[u8]) -> (u16, i32) {
    (
        query_pages_out::function_id.get(out),
        query_pages_out::num_pages.get(out) as i32,
    )
}

/// Input length of MANAGE_PAGES giving `n` pages.
pub const fn manage_pages_give_len(n: usize) -> usize {
    manage_pages_in::pas.len_with(n)
}
/// Output length of MANAGE_PAGES taking back `n` pages.
pub const fn manage_pages_take_out_len(n: usize) -> usize {
    manage_pages_out::pas.len_with(n)
}
/// Output length of MANAGE_PAGES give / alloc-fail.
pub const MANAGE_PAGES_OUT: usize = manage_pages_out::SIZE;

/// MANAGE_PAGES op_mod 1 (give) with the 4 KiB page addresses `pages` into
/// `buf`; returns the input length (docs/firmware.md §4.2).
pub fn manage_pages_give(
    buf: &mut [u8],
    function_id: u16,
    embedded_cpu: bool,
    pages: &[u64],
) -> Result<usize, RegError> {
    let len = manage_pages_give_len(pages.len());
    let b = command_prefix(buf, len, Opcode::MANAGE_PAGES, op_mod::MANAGE_PAGES_GIVE)?;
    b[..manage_pages_in::SIZE].copy_from_slice(&manage_pages_give_header(
        function_id,
        embedded_cpu,
        pages.len() as u32,
    ));
    for (i, &p) in pages.iter().enumerate() {
        manage_pages_in::pas.set(b, i, p)?;
    }
    Ok(len)
}

/// The first 16 bytes of MANAGE_PAGES op_mod 1 (give) of `n` pages, whose
/// addresses follow at byte 0x10 (`pas[]`; for a chain built in DMA memory,
/// see [`crate::cmd::CmdQueue::post_chain`]).
pub fn manage_pages_give_header(
    function_id: u16,
    embedded_cpu: bool,
    n: u32,
) -> [u8; manage_pages_in::SIZE] {
    let mut b = header(Opcode::MANAGE_PAGES, op_mod::MANAGE_PAGES_GIVE);
    let _ = manage_pages_in::function_id.set(&mut b, function_id);
    let _ = manage_pages_in::embedded_cpu_function.set(&mut b, embedded_cpu);
    let _ = manage_pages_in::input_num_entries.set(&mut b, n);
    b
}

/// MANAGE_PAGES op_mod 2 (take back `n` pages); output length is
/// [`manage_pages_take_out_len`]`(n)`.
pub fn manage_pages_take(
    function_id: u16,
    embedded_cpu: bool,
    n: u32,
) -> [u8; manage_pages_in::SIZE] {
    let mut b = header(Opcode::MANAGE_PAGES, op_mod::MANAGE_PAGES_TAKE);
    let _ = manage_pages_in::function_id.set(&mut b, function_id);
    let _ = manage_pages_in::embedded_cpu_function.set(&mut b, embedded_cpu);
    let _ = manage_pages_in::input_num_entries.set(&mut b, n);
    b
}

/// MANAGE_PAGES op_mod 0: "cannot give" answer to a page request (Linux
/// `page_notify_fail`).
pub fn manage_pages_fail(function_id: u16, embedded_cpu: bool) -> [u8; manage_pages_in::SIZE] {
    let mut b = header(Opcode::MANAGE_PAGES, op_mod::MANAGE_PAGES_ALLOC_FAIL);
    let _ = manage_pages_in::function_id.set(&mut b, function_id);
    let _ = manage_pages_in::embedded_cpu_function.set(&mut b, embedded_cpu);
    b
}

/// MANAGE_PAGES take output: number of returned pages.
pub fn parse_manage_pages_count(out: &[u8]) -> u32 {
    manage_pages_out::output_num_entries.get(out)
}
/// MANAGE_PAGES take output: returned page `i`.
pub fn parse_manage_pages_pa(out: &[u8], i: usize) -> Option<u64> {
    manage_pages_out::pas.get(out, i)
}

/// Length of the HOST_ENDIANNESS ACCESS_REG input and output.
pub const ACCESS_REG_HOST_ENDIANNESS_LEN: usize =
    access_register_in::SIZE + register_host_endianness::SIZE;
/// ACCESS_REG write of HOST_ENDIANNESS (0x7004): `he` = 0 on little-endian
/// hosts, 1 (byte 0x80) on big-endian ones (docs/firmware.md §4.1 step 9).
pub fn access_reg_host_endianness(big_endian: bool) -> [u8; ACCESS_REG_HOST_ENDIANNESS_LEN] {
    let mut b = header(Opcode::ACCESS_REG, op_mod::ACCESS_REG_WRITE);
    let _ = access_register_in::register_id.set(&mut b, mlx5_regs::consts::reg_id::HOST_ENDIANNESS);
    let data = &mut b[access_register_in::SIZE..];
    let _ = register_host_endianness::he.set(data, big_endian);
    b
}

/// Output length of QUERY_HCA_CAP (4112).
pub const QUERY_HCA_CAP_OUT: usize = query_hca_cap_out::SIZE;
/// QUERY_HCA_CAP of a capability type, current or maximum values.
pub fn query_hca_cap(cap_type: u16, current: bool) -> [u8; query_hca_cap_in::SIZE] {
    header(
        Opcode::QUERY_HCA_CAP,
        op_mod::query_hca_cap(cap_type, current),
    )
}
/// The capability block of a QUERY_HCA_CAP output.
pub fn parse_query_hca_cap(out: &[u8]) -> &[u8] {
    query_hca_cap_out::capability.get(out)
}

/// Output length of SET_HCA_CAP.
pub const SET_HCA_CAP_OUT: usize = set_hca_cap_out::SIZE;
/// Input length of SET_HCA_CAP.
pub const SET_HCA_CAP_IN: usize = set_hca_cap_in::SIZE;
/// SET_HCA_CAP of a capability type with `cap` (copied into the 4096-byte
/// capability area).
pub fn set_hca_cap(buf: &mut [u8; set_hca_cap_in::SIZE], cap_type: u16, cap: &[u8]) {
    header_into(buf, Opcode::SET_HCA_CAP, op_mod::set_hca_cap(cap_type));
    let area = set_hca_cap_in::capability.get_mut(buf);
    let n = cap.len().min(area.len());
    area[..n].copy_from_slice(&cap[..n]);
}

/// Output length of INIT_HCA.
pub const INIT_HCA_OUT: usize = init_hca_out::SIZE;
/// INIT_HCA (all-zero input unless the device has `sw_owner_id`; docs/firmware.md §4.1
/// step 12).
pub fn init_hca(sw_owner_id: Option<[u8; 16]>) -> [u8; init_hca_in::SIZE] {
    let mut b = header(Opcode::INIT_HCA, 0);
    if let Some(id) = sw_owner_id {
        init_hca_in::sw_owner_id
            .get_mut(&mut b)
            .copy_from_slice(&id);
    }
    b
}

/// Output length of TEARDOWN_HCA.
pub const TEARDOWN_HCA_OUT: usize = teardown_hca_out::SIZE;
/// TEARDOWN_HCA with a profile (0 graceful).
pub fn teardown_hca(profile: u16) -> [u8; teardown_hca_in::SIZE] {
    let mut b = header(Opcode::TEARDOWN_HCA, 0);
    let _ = teardown_hca_in::profile.set(&mut b, profile);
    b
}
/// TEARDOWN_HCA output `state`: true = teardown failed.
pub fn parse_teardown_hca_failed(out: &[u8]) -> bool {
    teardown_hca_out::state.get(out)
}

/// Output length of ALLOC_UAR.
pub const ALLOC_UAR_OUT: usize = alloc_uar_out::SIZE;
/// ALLOC_UAR.
pub fn alloc_uar() -> [u8; alloc_uar_in::SIZE] {
    header(Opcode::ALLOC_UAR, 0)
}
/// ALLOC_UAR output: the UAR index.
pub fn parse_alloc_uar(out: &[u8]) -> u32 {
    alloc_uar_out::uar.get(out)
}
/// Output length of DEALLOC_UAR.
pub const DEALLOC_UAR_OUT: usize = dealloc_uar_out::SIZE;
/// DEALLOC_UAR.
pub fn dealloc_uar(uar: u32) -> Result<[u8; dealloc_uar_in::SIZE], RegError> {
    let mut b = header(Opcode::DEALLOC_UAR, 0);
    dealloc_uar_in::uar.set(&mut b, uar)?;
    Ok(b)
}

/// Output length of ALLOC_PD.
pub const ALLOC_PD_OUT: usize = alloc_pd_out::SIZE;
/// ALLOC_PD.
pub fn alloc_pd() -> [u8; alloc_pd_in::SIZE] {
    header(Opcode::ALLOC_PD, 0)
}
/// ALLOC_PD output: the PD number.
pub fn parse_alloc_pd(out: &[u8]) -> u32 {
    alloc_pd_out::pd.get(out)
}
/// Output length of DEALLOC_PD.
pub const DEALLOC_PD_OUT: usize = dealloc_pd_out::SIZE;
/// DEALLOC_PD.
pub fn dealloc_pd(pd: u32) -> Result<[u8; dealloc_pd_in::SIZE], RegError> {
    let mut b = header(Opcode::DEALLOC_PD, 0);
    dealloc_pd_in::pd.set(&mut b, pd)?;
    Ok(b)
}

/// Output length of ALLOC_XRCD.
pub const ALLOC_XRCD_OUT: usize = alloc_xrcd_out::SIZE;
/// ALLOC_XRCD.
pub fn alloc_xrcd() -> [u8; alloc_xrcd_in::SIZE] {
    header(Opcode::ALLOC_XRCD, 0)
}
/// ALLOC_XRCD output: the XRC domain (24 bits).
pub fn parse_alloc_xrcd(out: &[u8]) -> u32 {
    alloc_xrcd_out::xrcd.get(out)
}
/// Output length of DEALLOC_XRCD.
pub const DEALLOC_XRCD_OUT: usize = dealloc_xrcd_out::SIZE;
/// DEALLOC_XRCD.
pub fn dealloc_xrcd(xrcd: u32) -> Result<[u8; dealloc_xrcd_in::SIZE], RegError> {
    let mut b: [u8; dealloc_xrcd_in::SIZE] = header(Opcode::DEALLOC_XRCD, 0);
    dealloc_xrcd_in::xrcd.set(&mut b, xrcd)?;
    Ok(b)
}

/// Output length of QUERY_SPECIAL_CONTEXTS.
pub const QUERY_SPECIAL_CONTEXTS_OUT: usize = query_special_contexts_out::SIZE;
/// QUERY_SPECIAL_CONTEXTS.
pub fn query_special_contexts() -> [u8; query_special_contexts_in::SIZE] {
    header(Opcode::QUERY_SPECIAL_CONTEXTS, 0)
}
/// QUERY_SPECIAL_CONTEXTS output: (resd_lkey, terminate_scatter_list_mkey).
pub fn parse_query_special_contexts(out: &[u8]) -> (u32, u32) {
    (
        query_special_contexts_out::resd_lkey.get(out),
        query_special_contexts_out::terminate_scatter_list_mkey.get(out),
    )
}

/// Parameters of CREATE_EQ (docs/firmware.md §6.1).
#[derive(Debug, Clone, Copy)]
pub struct EqParams {
    /// log2 of the number of EQEs.
    pub log_size: u8,
    /// UAR index whose EQ doorbells are used.
    pub uar_page: u32,
    /// log2(page size) − 12 of the page list.
    pub log_page_size: u8,
    /// MSI-X vector (0 when polled).
    pub intr: u16,
    /// Event types routed to this EQ (word 0 of the bitmask).
    pub event_mask: u64,
}

/// Input length of CREATE_EQ with `n` page addresses.
pub const fn create_eq_len(n: usize) -> usize {
    create_eq_in::pas.len_with(n)
}
/// Output length of CREATE_EQ.
pub const CREATE_EQ_OUT: usize = create_eq_out::SIZE;
/// CREATE_EQ into `buf` with the page list `pas`; returns the input length.
pub fn create_eq(
    buf: &mut [u8],
    p: &EqParams,
    pas: impl ExactSizeIterator<Item = u64>,
) -> Result<usize, RegError> {
    let len = create_eq_len(pas.len());
    let b = command_prefix(buf, len, Opcode::CREATE_EQ, 0)?;
    let ctx = create_eq_in::eq_context_entry.get_mut(b);
    eqc::log_eq_size.set(ctx, p.log_size)?;
    eqc::uar_page.set(ctx, p.uar_page)?;
    eqc::log_page_size.set(ctx, p.log_page_size)?;
    eqc::intr.set(ctx, p.intr)?;
    create_eq_in::event_bitmask.set(b, 0, p.event_mask)?;
    for (i, pa) in pas.enumerate() {
        create_eq_in::pas.set(b, i, pa)?;
    }
    Ok(len)
}
/// CREATE_EQ output: the EQ number.
pub fn parse_create_eq(out: &[u8]) -> u8 {
    create_eq_out::eq_number.get(out)
}

/// Output length of DESTROY_EQ.
pub const DESTROY_EQ_OUT: usize = destroy_eq_out::SIZE;
/// DESTROY_EQ.
pub fn destroy_eq(eqn: u8) -> [u8; destroy_eq_in::SIZE] {
    let mut b = header(Opcode::DESTROY_EQ, 0);
    let _ = destroy_eq_in::eq_number.set(&mut b, eqn);
    b
}

/// Output length of GEN_EQE.
pub const GEN_EQE_OUT: usize = gen_eqe_out::SIZE;
/// GEN_EQE: ask firmware to write `eqe` into EQ `eqn` (docs/firmware.md §6.3).
pub fn gen_eqe(eqn: u8, eqe: &[u8; 64]) -> [u8; gen_eqe_in::SIZE] {
    let mut b = header(Opcode::GEN_EQE, 0);
    let _ = gen_eqe_in::eq_number.set(&mut b, eqn);
    gen_eqe_in::eqe.get_mut(&mut b).copy_from_slice(eqe);
    b
}

/// Output length of NOP.
pub const NOP_OUT: usize = nop_out::SIZE;
/// NOP.
pub fn nop() -> [u8; nop_in::SIZE] {
    header(Opcode::NOP, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn give_lays_out_pas_at_0x10() {
        let mut buf = [0u8; 64];
        let n = manage_pages_give(&mut buf, 0, false, &[0x1000, 0x2_0000_3000]).unwrap();
        assert_eq!(n, 32);
        assert_eq!(header_opcode(&buf), 0x108);
        assert_eq!(header_op_mod(&buf), 1);
        assert_eq!(u32::from_be_bytes(buf[12..16].try_into().unwrap()), 2);
        assert_eq!(u64::from_be_bytes(buf[16..24].try_into().unwrap()), 0x1000);
        assert_eq!(
            u64::from_be_bytes(buf[24..32].try_into().unwrap()),
            0x2_0000_3000
        );
        assert!(manage_pages_give(&mut buf[..20], 0, false, &[1, 2]).is_err());
    }

    #[test]
    fn create_eq_mask_and_context() {
        let mut buf = [0u8; 512];
        let p = EqParams {
            log_size: 7,
            uar_page: 16,
            log_page_size: 0,
            intr: 0,
            event_mask: 0x1f02be | (1 << 0x0b),
        };
        let n = create_eq(&mut buf, &p, [0xabc000u64, 0xabd000].into_iter()).unwrap();
        assert_eq!(n, 0x110 + 16);
        assert_eq!(
            u64::from_be_bytes(buf[0x58..0x60].try_into().unwrap()),
            0x1f0abe
        );
        assert_eq!(
            u64::from_be_bytes(buf[0x110..0x118].try_into().unwrap()),
            0xabc000
        );
        // eqc at 0x10: log_eq_size bits 99..104 -> byte 0x1c, uar_page 0x1d..0x20.
        assert_eq!(buf[0x10 + 12], 7);
        assert_eq!(&buf[0x10 + 13..0x10 + 16], &[0, 0, 16]);
    }

    #[test]
    fn host_endianness_register() {
        let le = access_reg_host_endianness(false);
        assert_eq!(le.len(), 32);
        assert_eq!(u16::from_be_bytes([le[10], le[11]]), 0x7004);
        assert_eq!(le[16], 0);
        assert_eq!(access_reg_host_endianness(true)[16], 0x80);
    }

    #[test]
    fn out_status_reads_status_and_syndrome() {
        let mut o = [0u8; 16];
        o[0] = 3;
        o[4..8].copy_from_slice(&0xdead_beefu32.to_be_bytes());
        assert_eq!(out_status(&o), (CmdStatus::BAD_PARAM_ERR, 0xdead_beef));
    }
}
