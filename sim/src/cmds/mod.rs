//! Command execution: generic checks (lengths, HCA state, ISSI family,
//! op_mod, reserved bits, uid) and the dispatch to one handler per opcode,
//! grouped by object family in the submodules (layouts and opcodes of
//! `mlx5_ifc.h`; Linux `drivers/net/ethernet/mellanox/mlx5/core/cmd.c`).
//! Every refusal returns the firmware status with a syndrome from
//! [`crate::syndrome`].

use mlx5_hal::PAGE_SIZE;
use mlx5_regs::consts::{ctx, op_mod as om, reg_id, CqeOpcode, ModifyCqFields, ResizeCqFields};
use mlx5_regs::layout::{Kind, Layout};
use mlx5_regs::layouts::*;
use mlx5_regs::{CmdStatus, EventType, Opcode};

use crate::objects::{Cq, Eq, QBuf, Srq};
use crate::state::State;
use crate::syndrome::{self as sy, per_opcode};
use crate::{HcaState, Violation};

mod bringup;
mod cq;
mod devx;
mod eq;
mod mkey;
mod port_regs;
mod qp;
mod qp_modify;
mod srq;
mod vport;

/// A refused command.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fail {
    pub status: CmdStatus,
    pub syndrome: u32,
}

type R = Result<(), Fail>;

fn fail(status: CmdStatus, syndrome: u32) -> Fail {
    Fail { status, syndrome }
}
fn bad_param(s: u32) -> Fail {
    fail(CmdStatus::BAD_PARAM_ERR, s)
}
fn bad_res(s: u32) -> Fail {
    fail(CmdStatus::BAD_RES_ERR, s)
}
fn bad_state(s: u32) -> Fail {
    fail(CmdStatus::BAD_RES_STATE_ERR, s)
}
fn lim(s: u32) -> Fail {
    fail(CmdStatus::LIM_ERR, s)
}
fn bad_op(s: u32) -> Fail {
    fail(CmdStatus::BAD_OP_ERR, s)
}
fn ensure(cond: bool, f: Fail) -> R {
    if cond {
        Ok(())
    } else {
        Err(f)
    }
}

/// Largest `log_page_size` (page = 2^(12+v)) the model accepts for queue
/// buffers: 256 MiB pages.
const MAX_LOG_PAGE_SIZE: u8 = 16;
const M24: u32 = 0x00ff_ffff;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Family {
    Any,
    Issi0,
    Issi1,
}

const D: u8 = 1;
const E: u8 = 2;
const I: u8 = 4;
const T: u8 = 8;

struct Spec {
    input: &'static Layout,
    output: &'static Layout,
    states: u8,
    op_mods: &'static [u16],
    family: Family,
}

fn spec(op: Opcode) -> Option<Spec> {
    use Family::*;
    let (states, op_mods, family): (u8, &'static [u16], Family) = match op {
        Opcode::ENABLE_HCA => (D, &[0], Any),
        Opcode::DISABLE_HCA => (E | T, &[0], Any),
        Opcode::QUERY_ISSI | Opcode::NOP | Opcode::QUERY_ADAPTER => (E | I, &[0], Any),
        Opcode::SET_ISSI | Opcode::INIT_HCA => (E, &[0], Any),
        Opcode::SET_DRIVER_VERSION => (I, &[0], Any),
        Opcode::QUERY_PAGES => (E | I, &[1, 2, 3], Any),
        Opcode::MANAGE_PAGES => (E | I | T, &[0, 1, 2], Any),
        Opcode::QUERY_HCA_CAP => (E | I, &[], Any),
        Opcode::SET_HCA_CAP => (E, &[], Any),
        Opcode::ACCESS_REG => (E | I, &[0, 1], Any),
        Opcode::TEARDOWN_HCA => (I, &[0], Any),
        Opcode::QUERY_SPECIAL_CONTEXTS
        | Opcode::ALLOC_UAR
        | Opcode::DEALLOC_UAR
        | Opcode::ALLOC_PD
        | Opcode::DEALLOC_PD
        | Opcode::CREATE_EQ
        | Opcode::DESTROY_EQ
        | Opcode::QUERY_EQ
        | Opcode::GEN_EQE
        | Opcode::CREATE_CQ
        | Opcode::DESTROY_CQ
        | Opcode::QUERY_CQ => (I, &[0], Any),
        Opcode::MODIFY_CQ => (I, &[0, 1], Any),
        Opcode::CREATE_MKEY
        | Opcode::QUERY_MKEY
        | Opcode::DESTROY_MKEY
        | Opcode::ALLOC_XRCD
        | Opcode::DEALLOC_XRCD
        | Opcode::CREATE_QP
        | Opcode::DESTROY_QP
        | Opcode::RST2INIT_QP
        | Opcode::INIT2INIT_QP
        | Opcode::INIT2RTR_QP
        | Opcode::RTR2RTS_QP
        | Opcode::RTS2RTS_QP
        | Opcode::SQERR2RTS_QP
        | Opcode::QP_2ERR
        | Opcode::QP_2RST
        | Opcode::QUERY_QP
        | Opcode::QUERY_VPORT_STATE
        | Opcode::QUERY_NIC_VPORT_CONTEXT
        | Opcode::MODIFY_NIC_VPORT_CONTEXT
        | Opcode::QUERY_ROCE_ADDRESS
        | Opcode::SET_ROCE_ADDRESS
        | Opcode::QUERY_HCA_VPORT_CONTEXT
        | Opcode::QUERY_HCA_VPORT_PKEY => (I, &[0], Any),
        Opcode::CREATE_UMEM | Opcode::DESTROY_UMEM => (I, &[0], Any),
        Opcode::CREATE_SRQ | Opcode::DESTROY_SRQ | Opcode::QUERY_SRQ => (I, &[0], Issi0),
        Opcode::ARM_RQ => (I, &[1], Issi0),
        Opcode::CREATE_RMP | Opcode::MODIFY_RMP | Opcode::DESTROY_RMP | Opcode::QUERY_RMP => {
            (I, &[0], Issi1)
        }
        _ => return None,
    };
    let (input, output) = op.layouts()?;
    Some(Spec {
        input,
        output,
        states,
        op_mods,
        family,
    })
}

/// Collect reserved bits set in `buf` (fixed part of `layout` at `base`):
/// returns true if any bit not covered by a named field is set.
fn reserved_set(layout: &Layout, buf: &[u8], base: usize) -> bool {
    let size = layout.size;
    let mut covered = vec![false; size * 8];
    for f in layout.fields {
        let start = f.bit_off as usize;
        let width = match f.kind {
            Kind::Array { count: 0 } => continue, // flexible: beyond the fixed part
            _ => f.total_width() as usize,
        };
        if let Kind::Sub(sub) = f.kind {
            let sb = base + start / 8;
            if sb < buf.len() && reserved_set(sub, buf, sb) {
                return true;
            }
            // Space reserved for the sub-structure beyond its size is reserved.
            let sub_bits = sub.size * 8;
            for b in covered.iter_mut().skip(start).take(sub_bits.min(width)) {
                *b = true;
            }
            continue;
        }
        for b in covered.iter_mut().skip(start).take(width) {
            *b = true;
        }
    }
    for (bit, cov) in covered.iter().enumerate() {
        if *cov {
            continue;
        }
        let byte = base + bit / 8;
        if byte >= buf.len() {
            break;
        }
        if buf[byte] & (0x80 >> (bit % 8)) != 0 {
            return true;
        }
    }
    false
}

fn page_pattern(iova: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(PAGE_SIZE);
    for w in 0..PAGE_SIZE / 8 {
        let x = iova ^ ((w as u64) << 3) ^ 0xf1f1_0000_5a5a_0000;
        v.extend_from_slice(&x.to_be_bytes());
    }
    v
}

/// Read `n` page addresses from a flexible `pas` array, each aligned to
/// `page_shift`.
fn read_pas(
    inp: &[u8],
    arr: mlx5_regs::Array<u64>,
    n: u64,
    page_shift: u32,
    short: Fail,
    align: Fail,
) -> Result<Vec<u64>, Fail> {
    if (inp.len() as u64) < arr.len_with(n as usize) as u64 {
        return Err(short);
    }
    let mut v = Vec::with_capacity(n as usize);
    for i in 0..n as usize {
        let a = arr.get(inp, i).ok_or(short)?;
        if a & ((1u64 << page_shift) - 1) != 0 {
            return Err(align);
        }
        v.push(a);
    }
    Ok(v)
}

/// Write as many `pas` entries as `out` holds.
fn write_pas(out: &mut [u8], arr: mlx5_regs::Array<u64>, pas: &[u64]) {
    for (i, &p) in pas.iter().enumerate() {
        if arr.set(out, i, p).is_err() {
            break;
        }
    }
}

/// Older, shorter forms of a command that clients still send, which
/// firmware accepts: (opcode, shortest input, shortest output). Missing
/// bytes read as zero; an output is cut to the length the client gave.
/// `docs/fidelity.md` §3 lists each with the client that sends it.
const OLDER_FORMS: &[(Opcode, usize, usize)] = &[
    // INIT_HCA before `sw_owner_id` (16 bytes): older Linux and rdma-core
    // `providers/mlx5/mlx5_vfio.c` (`mlx5_vfio_init_hca`).
    (Opcode::INIT_HCA, 16, 16),
    // QUERY_QP without the QPC extension (272-byte output): rdma-core
    // `providers/mlx5/mlx5_ifc.h` `query_qp_out`, sent by its DevX users.
    (Opcode::QUERY_QP, 16, 272),
];

/// The shortest input and output firmware takes for `op`.
fn min_lengths(op: Opcode, sp: &Spec) -> (usize, usize) {
    OLDER_FORMS
        .iter()
        .find(|(o, _, _)| *o == op)
        .map_or((sp.input.size, sp.output.size), |&(_, i, o)| {
            (i.min(sp.input.size), o.min(sp.output.size))
        })
}

impl State {
    /// Run one command: returns (status, syndrome) and fills `out`.
    pub(crate) fn execute(&mut self, inp: &[u8], out: &mut [u8]) -> (u8, u32) {
        let op = cmd_in::opcode.get(inp);
        let op_mod = cmd_in::op_mod.get(inp);
        let snapshot = self.hostile_pages_snapshot(Opcode(op), op_mod);
        let r = match self.inj.take_fail(op) {
            Some((status, synd)) => Err(fail(CmdStatus(status), synd)),
            None => self.run_padded(Opcode(op), inp, out),
        };
        if r.is_ok() {
            self.hostile_output(Opcode(op), op_mod, inp, out, snapshot);
        }
        self.late_limits_tick();
        let (status, synd) = match r {
            Ok(()) => (0, 0),
            Err(f) => {
                out.fill(0);
                (f.status.0, f.syndrome)
            }
        };
        cmd_out::status.set(out, status).expect("8-bit");
        cmd_out::syndrome.set(out, synd).expect("32-bit");
        (status, synd)
    }

    /// [`State::run`] for an input or output in an older, shorter form
    /// ([`OLDER_FORMS`]): the input is zero-extended to today's layout, the
    /// output written in full and cut to the client's length.
    fn run_padded(&mut self, op: Opcode, inp: &[u8], out: &mut [u8]) -> R {
        let Some(sp) = spec(op) else {
            return self.run(op, inp, out);
        };
        let (min_in, min_out) = min_lengths(op, &sp);
        let short_in = inp.len() < sp.input.size && inp.len() >= min_in;
        let short_out = out.len() < sp.output.size && out.len() >= min_out;
        if !short_in && !short_out {
            return self.run(op, inp, out);
        }
        let mut i = inp.to_vec();
        i.resize(i.len().max(sp.input.size), 0);
        let mut o = vec![0u8; out.len().max(sp.output.size)];
        let r = self.run(op, &i, &mut o);
        let n = out.len();
        out.copy_from_slice(&o[..n]);
        r
    }

    fn run(&mut self, op: Opcode, inp: &[u8], out: &mut [u8]) -> R {
        let Some(sp) = spec(op) else {
            return Err(bad_op(per_opcode(sy::UNKNOWN_OPCODE, op.0)));
        };
        ensure(
            inp.len() >= sp.input.size,
            fail(CmdStatus::BAD_INP_LEN_ERR, per_opcode(sy::INP_LEN, op.0)),
        )?;
        ensure(
            out.len() >= sp.output.size,
            fail(CmdStatus::BAD_OUTP_LEN_ERR, per_opcode(sy::OUTP_LEN, op.0)),
        )?;
        let (bit, synd) = match self.hca {
            HcaState::Disabled => (D, sy::STATE_DISABLED),
            HcaState::Enabled => (E, sy::STATE_ENABLED),
            HcaState::Initialized => (I, sy::STATE_INITIALIZED),
            HcaState::TornDown => (T, sy::STATE_TORN_DOWN),
        };
        ensure(
            sp.states & bit != 0,
            fail(CmdStatus::BAD_SYS_STATE_ERR, per_opcode(synd, op.0)),
        )?;
        match sp.family {
            Family::Issi0 => ensure(self.issi == 0, bad_op(per_opcode(sy::ISSI_0_ONLY, op.0)))?,
            Family::Issi1 => ensure(self.issi >= 1, bad_op(per_opcode(sy::ISSI_1_ONLY, op.0)))?,
            Family::Any => {}
        }
        let op_mod = cmd_in::op_mod.get(inp);
        if !sp.op_mods.is_empty() {
            ensure(
                sp.op_mods.contains(&op_mod),
                bad_param(per_opcode(sy::BAD_OP_MOD, op.0)),
            )?;
        }
        // SET_HCA_CAP of another capability type than the general one: the
        // block is checked against that type's layout by the handler.
        let fixed = &inp[..sp.input.size];
        let checked = if op == Opcode::SET_HCA_CAP && op_mod >> 1 != om::CAP_GENERAL {
            &fixed[..set_hca_cap_in::capability.range().start]
        } else {
            fixed
        };
        ensure(
            !reserved_set(sp.input, checked, 0),
            bad_param(per_opcode(sy::RESERVED, op.0)),
        )?;
        if let Some(f) = sp.input.field("uid") {
            let uid = mlx5_regs::field::read_bits(inp, f.bit_off, f.width);
            ensure(uid == 0, bad_param(per_opcode(sy::UID, op.0)))?;
        }
        match op {
            Opcode::ENABLE_HCA => self.enable_hca(inp),
            Opcode::DISABLE_HCA => self.disable_hca(inp),
            Opcode::QUERY_ISSI => self.query_issi(out),
            Opcode::SET_ISSI => self.set_issi(inp),
            Opcode::QUERY_PAGES => self.query_pages(inp, op_mod, out),
            Opcode::MANAGE_PAGES => self.manage_pages(inp, op_mod, out),
            Opcode::QUERY_HCA_CAP => self.query_hca_cap(inp, op_mod, out),
            Opcode::SET_HCA_CAP => self.set_hca_cap(inp, op_mod),
            Opcode::ACCESS_REG => self.access_reg(inp, op_mod, out),
            Opcode::INIT_HCA => self.init_hca(inp),
            Opcode::SET_DRIVER_VERSION => self.set_driver_version(inp),
            Opcode::TEARDOWN_HCA => self.teardown_hca(inp),
            Opcode::QUERY_ADAPTER => self.query_adapter(out),
            Opcode::NOP => Ok(()),
            Opcode::QUERY_SPECIAL_CONTEXTS => {
                query_special_contexts_out::resd_lkey
                    .set(out, self.resd_lkey)
                    .expect("32-bit");
                if self.caps.terminate_scatter_list_mkey {
                    query_special_contexts_out::terminate_scatter_list_mkey
                        .set(out, self.term_mkey)
                        .expect("32-bit");
                }
                Ok(())
            }
            Opcode::ALLOC_UAR => self.alloc_uar(out),
            Opcode::DEALLOC_UAR => self.dealloc_uar(inp),
            Opcode::ALLOC_PD => self.alloc_pd(out),
            Opcode::DEALLOC_PD => self.dealloc_pd(inp),
            Opcode::CREATE_EQ => self.create_eq(inp, out),
            Opcode::DESTROY_EQ => self.destroy_eq(inp),
            Opcode::QUERY_EQ => self.query_eq(inp, out),
            Opcode::GEN_EQE => self.gen_eqe(inp),
            Opcode::CREATE_CQ => self.create_cq(inp, out),
            Opcode::DESTROY_CQ => self.destroy_cq(inp),
            Opcode::QUERY_CQ => self.query_cq(inp, out),
            Opcode::MODIFY_CQ => {
                if op_mod == om::MODIFY_CQ_RESIZE {
                    self.resize_cq(inp)
                } else {
                    self.moderate_cq(inp)
                }
            }
            Opcode::CREATE_SRQ => self.create_srq(inp, out),
            Opcode::CREATE_RMP => self.create_rmp(inp, out),
            Opcode::DESTROY_SRQ => self.destroy_srq(destroy_srq_in::srqn.get(inp), false),
            Opcode::DESTROY_RMP => self.destroy_srq(destroy_rmp_in::rmpn.get(inp), true),
            Opcode::QUERY_SRQ => self.query_srq(inp, out),
            Opcode::QUERY_RMP => self.query_rmp(inp, out),
            Opcode::ARM_RQ => {
                let n = arm_rq_in::srq_number.get(inp);
                let lwm = arm_rq_in::lwm.get(inp);
                self.set_limit(n, false, lwm)
            }
            Opcode::MODIFY_RMP => self.modify_rmp(inp),
            Opcode::CREATE_MKEY => self.create_mkey(inp, out),
            Opcode::QUERY_MKEY => self.query_mkey(inp, out),
            Opcode::DESTROY_MKEY => self.destroy_mkey(inp),
            Opcode::ALLOC_XRCD => self.alloc_xrcd(out),
            Opcode::DEALLOC_XRCD => self.dealloc_xrcd(inp),
            Opcode::CREATE_QP => self.create_qp(inp, out),
            Opcode::DESTROY_QP => self.destroy_qp(inp),
            Opcode::QUERY_QP => self.query_qp(inp, out),
            Opcode::RST2INIT_QP
            | Opcode::INIT2INIT_QP
            | Opcode::INIT2RTR_QP
            | Opcode::RTR2RTS_QP
            | Opcode::RTS2RTS_QP
            | Opcode::SQERR2RTS_QP => self.modify_qp(op, inp),
            Opcode::QP_2ERR => self.qp_2err(inp),
            Opcode::QP_2RST => self.qp_2rst(inp),
            Opcode::QUERY_VPORT_STATE => self.query_vport_state(inp, out),
            Opcode::QUERY_NIC_VPORT_CONTEXT => self.query_nic_vport_context(inp, out),
            Opcode::MODIFY_NIC_VPORT_CONTEXT => self.modify_nic_vport_context(inp),
            Opcode::QUERY_ROCE_ADDRESS => self.query_roce_address(inp, out),
            Opcode::SET_ROCE_ADDRESS => self.set_roce_address(inp),
            Opcode::QUERY_HCA_VPORT_CONTEXT => self.query_hca_vport_context(inp, out),
            Opcode::QUERY_HCA_VPORT_PKEY => self.query_hca_vport_pkey(inp, out),
            Opcode::CREATE_UMEM => self.create_umem(inp, out),
            Opcode::DESTROY_UMEM => self.destroy_umem(inp),
            _ => Err(bad_op(per_opcode(sy::UNKNOWN_OPCODE, op.0))),
        }
    }
}
