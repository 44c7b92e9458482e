//! What the tool fills into a create command the user did not give: ring
//! memory and its page list, the doorbell record, the UAR, the PD, the
//! completion EQ, for CREATE_CQ, CREATE_EQ, CREATE_SRQ, CREATE_RMP,
//! CREATE_QP and CREATE_MKEY (the values the driver itself uses, Linux
//! `mlx5_core_create_cq`/`create_srq_cmd`/`mlx5_core_create_qp`); the
//! register data of ACCESS_REG; and the command that undoes each create.

use mlx5_driver::cmd::MAX_CMD_LEN;
use mlx5_hal::{DmaRegion, Hal};
use mlx5_regs::consts::reg_id;
use mlx5_regs::layouts::{access_register_in, register_host_endianness};
use mlx5_regs::{Layout, Opcode};

use crate::common::error::CliError;
use crate::common::session::TracedHca;
use crate::regs::fields::{out_field, Input};

/// Registers whose layout mlx5-regs has: (register id, name, layout).
pub(crate) const REGISTERS: &[(u16, &str, &Layout)] = &[(
    reg_id::HOST_ENDIANNESS,
    "HOST_ENDIANNESS",
    &register_host_endianness::LAYOUT,
)];

/// The register mlx5-regs knows by id.
pub(crate) fn known_register(id: u16) -> Option<(&'static str, &'static Layout)> {
    REGISTERS
        .iter()
        .find(|(i, ..)| *i == id)
        .map(|(_, n, l)| (*n, *l))
}

/// ACCESS_REG carries the register's whole contents after its 16-byte
/// header, in the input and again in the output, for a read as for a write
/// (Linux `mlx5_core_access_reg`). Returns how many bytes of register data
/// the command carries: the register's size when mlx5-regs knows the
/// register, else what the user gave in `register_data`.
pub(crate) fn register_data_len(inp: &Input) -> Result<usize, CliError> {
    let given = inp.buf.len().saturating_sub(access_register_in::SIZE);
    let id = inp.get("register_id").unwrap_or(0) as u16;
    match known_register(id) {
        Some((name, l)) if given > l.size => Err(CliError::usage(
            format!("{name} (register {id:#x}) is {} bytes; register_data has {given}", l.size),
            format!("give at most {} bytes of register_data", l.size),
        )),
        Some((_, l)) => Ok(l.size),
        None if given == 0 => Err(CliError::usage(
            format!("ACCESS_REG of register {id:#x} needs the register's contents and the tool does not know its size"),
            format!(
                "give register_data=0x... (hex, the register's full size from the PRM's register description; zeros for a read), or register_data[i]=... up to its last dword; registers the tool sizes itself: {}",
                REGISTERS
                    .iter()
                    .map(|(i, n, _)| format!("{n} (register_id={i:#x})"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
        None => Ok(given),
    }
}

/// How a create command's ring is described in its input.
struct Ring {
    /// Field holding log2 of the entry count, and its default.
    log: &'static str,
    log_default: u64,
    /// Entry size: fixed, or `16 << field` (SRQ), or `1 << field` (RMP).
    stride: Stride,
    /// Byte of each entry initialised to `owner_init` (CQE/EQE ownership:
    /// software must not see stale entries as valid), if any.
    owner: Option<(usize, u8)>,
    /// Prefix of the page list array (`pas`, `ctx.wq.pas`).
    pas: &'static str,
    /// Doorbell record field, if the queue has one.
    dbr: Option<&'static str>,
}

#[derive(Clone, Copy)]
enum Stride {
    Fixed(usize),
    Shift16(&'static str, u64),
    Log(&'static str, u64),
}

/// One default a create command gets from the tool: field, and where the
/// value comes from.
#[derive(Clone, Copy)]
enum Src {
    Const(u64),
    Uar,
    Pd,
    CompEqn,
}

/// The fields the tool fills for `op` (unless given), as (field, what),
/// for `mlx5 cmd NAME --fields`.
pub(crate) fn describe(op: Opcode) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = defaults(op)
        .iter()
        .map(|(f, s)| {
            let what = match s {
                Src::Const(c) => format!("{c:#x}"),
                Src::Uar => "the UAR of bring-up".into(),
                Src::Pd => "the PD of bring-up".into(),
                Src::CompEqn => "the completion EQ of bring-up".into(),
            };
            (f.to_string(), what)
        })
        .collect();
    if let Some(r) = ring(op) {
        v.push((
            r.log.into(),
            format!("{:#x} ({} entries)", r.log_default, 1u64 << r.log_default),
        ));
        match r.stride {
            Stride::Shift16(f, d) | Stride::Log(f, d) => v.push((f.into(), format!("{d:#x}"))),
            Stride::Fixed(_) => {}
        }
        if let Some(d) = r.dbr {
            v.push((d.into(), "a doorbell record the tool allocates".into()));
        }
        v.push((
            format!("{}[..]", r.pas),
            "the pages of a ring the tool allocates, sized from the log size".into(),
        ));
    }
    if op == Opcode::ACCESS_REG {
        v.push((
            "register_data".into(),
            "zeros up to the register's size, for registers the tool knows".into(),
        ));
    }
    v
}

fn defaults(op: Opcode) -> &'static [(&'static str, Src)] {
    match op {
        Opcode::CREATE_CQ => &[
            ("cq_context.uar_page", Src::Uar),
            ("cq_context.c_eqn_or_apu_element", Src::CompEqn),
        ],
        Opcode::CREATE_EQ => &[("eq_context_entry.uar_page", Src::Uar)],
        Opcode::CREATE_SRQ => &[("srq_context_entry.pd", Src::Pd)],
        // state 1: RDY, as Linux `create_rmp_cmd` creates it.
        Opcode::CREATE_RMP => &[("ctx.state", Src::Const(1)), ("ctx.wq.pd", Src::Pd)],
        // pm_state 3: migrated; user_index 0xffffff: none (Linux
        // `mlx5_ib_create_qp` with no user index).
        Opcode::CREATE_QP => &[
            ("qpc.pd", Src::Pd),
            ("qpc.uar_page", Src::Uar),
            ("qpc.pm_state", Src::Const(3)),
            ("qpc.user_index", Src::Const(0xff_ffff)),
        ],
        // qpn 0xffffff: the key is not bound to a QP (Linux `mlx5_ib_get_dma_mr`).
        Opcode::CREATE_MKEY => &[
            ("memory_key_mkey_entry.pd", Src::Pd),
            ("memory_key_mkey_entry.qpn", Src::Const(0xff_ffff)),
        ],
        _ => &[],
    }
}

fn ring(op: Opcode) -> Option<Ring> {
    Some(match op {
        Opcode::CREATE_CQ => Ring {
            log: "cq_context.log_cq_size",
            log_default: 6,
            stride: Stride::Fixed(64),
            owner: Some((63, 0xf0)),
            pas: "pas",
            dbr: Some("cq_context.dbr_addr"),
        },
        Opcode::CREATE_EQ => Ring {
            log: "eq_context_entry.log_eq_size",
            log_default: 6,
            stride: Stride::Fixed(64),
            owner: Some((63, 0x01)),
            pas: "pas",
            dbr: None,
        },
        // Stride 16 << 1 = 32 bytes: the next segment and one data segment.
        Opcode::CREATE_SRQ => Ring {
            log: "srq_context_entry.log_srq_size",
            log_default: 6,
            stride: Stride::Shift16("srq_context_entry.log_rq_stride", 1),
            owner: None,
            pas: "pas",
            dbr: Some("srq_context_entry.dbr_addr"),
        },
        Opcode::CREATE_RMP => Ring {
            log: "ctx.wq.log_wq_sz",
            log_default: 6,
            stride: Stride::Log("ctx.wq.log_wq_stride", 5),
            owner: None,
            pas: "ctx.wq.pas",
            dbr: Some("ctx.wq.dbr_addr"),
        },
        // The send queue in 64-byte WQEBBs; a receive queue is sized apart.
        Opcode::CREATE_QP => Ring {
            log: "qpc.log_sq_size",
            log_default: 6,
            stride: Stride::Fixed(64),
            owner: None,
            pas: "pas",
            dbr: Some("qpc.dbr_addr"),
        },
        _ => return None,
    })
}

fn dma<H: Hal>(hca: &TracedHca<'_, H>, bytes: usize, what: &str) -> Result<DmaRegion<H>, CliError> {
    hca.hal().alloc_dma(bytes).map_err(|e| {
        CliError::failed(
            format!("no DMA memory for the {what}: {e}"),
            "on hardware raise the locked-memory limit (ulimit -l)",
        )
    })
}

/// Fill what `op` needs and the user did not give; the DMA memory goes to
/// `keep` (it must outlive the object), each filled field to `filled`.
pub(crate) fn provide<H: Hal>(
    op: Opcode,
    hca: &TracedHca<'_, H>,
    inp: &mut Input,
    keep: &mut Vec<DmaRegion<H>>,
    filled: &mut Vec<(String, String)>,
) -> Result<(), CliError> {
    if op == Opcode::ACCESS_REG {
        let len = register_data_len(inp)?;
        let have = inp.buf.len() - access_register_in::SIZE;
        if have < len {
            inp.buf.resize(access_register_in::SIZE + len, 0);
            let name = known_register(inp.get("register_id").unwrap_or(0) as u16)
                .map_or("the register", |(n, _)| n);
            filled.push((
                "register_data".into(),
                format!(
                    "{} zero bytes after the {have} given, to the size of {name} ({len} bytes)",
                    len - have
                ),
            ));
        }
        return Ok(());
    }
    let mut fill = |inp: &mut Input, path: &str, v: u64, why: &str| -> Result<(), CliError> {
        if inp.given(path) {
            return Ok(());
        }
        inp.put(path, &format!("{v:#x}"))?;
        filled.push((path.to_string(), format!("{v:#x} ({why})")));
        Ok(())
    };
    for (path, src) in defaults(op) {
        let (v, why) = match src {
            Src::Const(c) => (*c, "the driver's value"),
            Src::Uar => (hca.uar() as u64, "the UAR of bring-up"),
            Src::Pd => (hca.pd() as u64, "the PD of bring-up"),
            Src::CompEqn => (hca.comp_eqn() as u64, "the completion EQ of bring-up"),
        };
        fill(inp, path, v, why)?;
    }
    if op == Opcode::CREATE_MKEY
        && !inp.given("memory_key_mkey_entry.length64")
        && !inp.given("memory_key_mkey_entry.len")
    {
        fill(
            inp,
            "memory_key_mkey_entry.length64",
            1,
            "the whole address space, as the driver's DMA key",
        )?;
    }
    if op == Opcode::CREATE_QP
        && !inp.given("qpc.rq_type")
        && !inp.given("qpc.log_rq_size")
        && !inp.given("qpc.srqn_rmpn_xrqn")
    {
        fill(inp, "qpc.rq_type", 3, "no receive queue (zero-length RQ)")?;
    }
    let Some(r) = ring(op) else { return Ok(()) };
    let no_sq = op == Opcode::CREATE_QP && inp.get("qpc.no_sq") == Some(1);
    if !no_sq {
        fill(inp, r.log, r.log_default, "default size")?;
    }
    let entry = match r.stride {
        Stride::Fixed(b) if op == Opcode::CREATE_CQ && inp.get("cq_context.cqe_sz") == Some(1) => {
            b * 2
        }
        Stride::Fixed(b) => b,
        Stride::Shift16(f, d) => {
            fill(inp, f, d, "one scatter entry a WQE")?;
            16usize << inp.get(f).unwrap_or(d)
        }
        Stride::Log(f, d) => {
            fill(inp, f, d, "one scatter entry a WQE")?;
            1usize << inp.get(f).unwrap_or(d)
        }
    };
    if let Some(d) = r.dbr {
        if !inp.given(d) {
            let dbr = dma(hca, 4096, "doorbell record")?;
            inp.put(d, &format!("{:#x}", dbr.iova()))?;
            filled.push((
                d.into(),
                format!("{:#x} (a doorbell record the tool allocated)", dbr.iova()),
            ));
            keep.push(dbr);
        }
    }
    if inp.has_array(r.pas) {
        return Ok(());
    }
    let entries = if no_sq {
        0
    } else {
        1usize << inp.get(r.log).unwrap_or(0)
    };
    let mut bytes = entries * entry;
    if op == Opcode::CREATE_QP && inp.get("qpc.rq_type") == Some(0) {
        // A receive queue of its own, before the send queue in the buffer.
        let rq = (1usize << inp.get("qpc.log_rq_size").unwrap_or(0))
            << (inp.get("qpc.log_rq_stride").unwrap_or(0) + 4);
        bytes += rq;
    }
    let pages = bytes.max(1).div_ceil(4096);
    let max_pages = (MAX_CMD_LEN - inp.layout.size) / 8;
    if pages > max_pages {
        return Err(CliError::usage(
            format!(
                "{} needs {pages} pages, more than one command's page list holds ({max_pages})",
                r.log
            ),
            format!("use a smaller size, or give {}[i] yourself", r.pas),
        ));
    }
    let ring_mem = dma(hca, pages * 4096, "ring")?;
    if let Some((byte, v)) = r.owner {
        let byte = if entry == 128 { 127 } else { byte };
        for i in 0..entries {
            ring_mem.write_u8(i * entry + byte, v);
        }
    }
    for p in 0..pages {
        inp.put(
            &format!("{}[{p}]", r.pas),
            &format!("{:#x}", ring_mem.iova() + (p * 4096) as u64),
        )?;
    }
    filled.push((
        format!("{}[..]", r.pas),
        format!(
            "{pages} page(s) at {:#x} ({bytes} bytes the tool allocated)",
            ring_mem.iova()
        ),
    ));
    keep.push(ring_mem);
    Ok(())
}

/// The command that undoes a create: (opcode, its input field, value).
pub(crate) fn undo(
    op: Opcode,
    out_layout: &'static Layout,
    out: &[u8],
) -> Option<(Opcode, &'static str, u64)> {
    let (undo_op, out_name, in_name) = match op {
        Opcode::CREATE_CQ => (Opcode::DESTROY_CQ, "cqn", "cqn"),
        Opcode::CREATE_EQ => (Opcode::DESTROY_EQ, "eq_number", "eq_number"),
        Opcode::CREATE_SRQ => (Opcode::DESTROY_SRQ, "srqn", "srqn"),
        Opcode::CREATE_RMP => (Opcode::DESTROY_RMP, "rmpn", "rmpn"),
        Opcode::CREATE_QP => (Opcode::DESTROY_QP, "qpn", "qpn"),
        Opcode::CREATE_MKEY => (Opcode::DESTROY_MKEY, "mkey_index", "mkey_index"),
        Opcode::ALLOC_PD => (Opcode::DEALLOC_PD, "pd", "pd"),
        Opcode::ALLOC_UAR => (Opcode::DEALLOC_UAR, "uar", "uar"),
        _ => return None,
    };
    let v = out_field(out_layout, out, out_name)?;
    Some((undo_op, in_name, v))
}
