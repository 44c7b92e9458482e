//! Command execution: generic checks (lengths, HCA state, ISSI family,
//! op_mod, reserved bits, uid) and one handler per opcode (facts §3, §4, §6,
//! §7, §8, §9). Every refusal returns the firmware status with a syndrome
//! from [`crate::syndrome`].

use mlx5_hal::PAGE_SIZE;
use mlx5_regs::consts::{ctx, op_mod as om, reg_id, CqeOpcode, ModifyCqFields, ResizeCqFields};
use mlx5_regs::layout::{Kind, Layout};
use mlx5_regs::layouts::*;
use mlx5_regs::{CmdStatus, EventType, Opcode};

use crate::objects::{Cq, Eq, QBuf, Srq};
use crate::state::{State, FIRST_UAR};
use crate::syndrome::{self as sy, per_opcode};
use crate::{HcaState, Violation};

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
/// First EQ number handed out (not 0, so a driver assuming eqn 0 is caught).
const FIRST_EQN: u8 = 5;
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

impl State {
    /// Run one command: returns (status, syndrome) and fills `out`.
    pub(crate) fn execute(&mut self, inp: &[u8], out: &mut [u8]) -> (u8, u32) {
        let op = cmd_in::opcode.get(inp);
        let op_mod = cmd_in::op_mod.get(inp);
        let snapshot = self.hostile_pages_snapshot(Opcode(op), op_mod);
        let r = match self.inj.take_fail(op) {
            Some((status, synd)) => Err(fail(CmdStatus(status), synd)),
            None => self.run(Opcode(op), inp, out),
        };
        if r.is_ok() {
            self.hostile_output(Opcode(op), op_mod, inp, out, snapshot);
        }
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
        ensure(
            !reserved_set(sp.input, &inp[..sp.input.size], 0),
            bad_param(per_opcode(sy::RESERVED, op.0)),
        )?;
        if let Some(f) = sp.input.field("uid") {
            let uid = mlx5_regs::field::read_bits(inp, f.bit_off, f.width);
            ensure(uid == 0, bad_param(per_opcode(sy::UID, op.0)))?;
        }
        match op {
            Opcode::ENABLE_HCA => self.enable_hca(inp),
            Opcode::DISABLE_HCA => self.disable_hca(inp),
            Opcode::QUERY_ISSI => {
                query_issi_out::current_issi
                    .set(out, self.issi)
                    .expect("16-bit");
                query_issi_out::supported_issi_dw0
                    .set(out, self.cfg.issi_supported)
                    .expect("32-bit");
                Ok(())
            }
            Opcode::SET_ISSI => {
                let v = set_issi_in::current_issi.get(inp);
                ensure(
                    v < 32 && self.cfg.issi_supported & (1 << v) != 0,
                    bad_param(sy::SET_ISSI_UNSUPPORTED),
                )?;
                self.issi = v;
                Ok(())
            }
            Opcode::QUERY_PAGES => self.query_pages(inp, op_mod, out),
            Opcode::MANAGE_PAGES => self.manage_pages(inp, op_mod, out),
            Opcode::QUERY_HCA_CAP => self.query_hca_cap(inp, op_mod, out),
            Opcode::SET_HCA_CAP => self.set_hca_cap(inp, op_mod),
            Opcode::ACCESS_REG => self.access_reg(inp, op_mod, out),
            Opcode::INIT_HCA => self.init_hca(inp),
            Opcode::TEARDOWN_HCA => self.teardown_hca(inp),
            Opcode::QUERY_ADAPTER => {
                let pb = query_adapter_out::query_adapter_struct.get_mut(out);
                query_adapter_param_block::ieee_vendor_id
                    .set(pb, 0x0002c9)
                    .expect("24-bit");
                query_adapter_param_block::vsd_vendor_id
                    .set(pb, 0x15b3)
                    .expect("16-bit");
                let psid = query_adapter_param_block::vsd_contd_psid.get_mut(pb);
                for (d, s) in psid.iter_mut().zip(self.caps.psid.bytes()) {
                    *d = s;
                }
                Ok(())
            }
            Opcode::NOP => Ok(()),
            Opcode::QUERY_SPECIAL_CONTEXTS => {
                query_special_contexts_out::resd_lkey
                    .set(out, self.resd_lkey)
                    .expect("32-bit");
                Ok(())
            }
            Opcode::ALLOC_UAR => {
                let max = 1u32 << self.caps.uar_sz;
                let idx = (FIRST_UAR..max)
                    .find(|i| !self.uars.contains(i))
                    .ok_or(lim(sy::UAR_EXHAUSTED))?;
                self.uars.insert(idx);
                alloc_uar_out::uar.set(out, idx).expect("24-bit");
                Ok(())
            }
            Opcode::DEALLOC_UAR => {
                let idx = dealloc_uar_in::uar.get(inp);
                ensure(self.uars.contains(&idx), bad_res(sy::UAR_NOT_FOUND))?;
                let used = self.eqs.values().any(|e| e.uar == idx)
                    || self.cqs.values().any(|c| c.uar == idx);
                ensure(!used, bad_state(sy::UAR_IN_USE))?;
                self.uars.remove(&idx);
                Ok(())
            }
            Opcode::ALLOC_PD => {
                ensure(
                    (self.pds.len() as u64) < (1u64 << self.caps.log_max_pd),
                    lim(sy::PD_EXHAUSTED),
                )?;
                while self.pds.contains(&self.next_pd) || self.next_pd == 0 {
                    self.next_pd = (self.next_pd + 1) & M24;
                }
                let pd = self.next_pd;
                self.next_pd = (self.next_pd + 1) & M24;
                self.pds.insert(pd);
                alloc_pd_out::pd.set(out, pd).expect("24-bit");
                Ok(())
            }
            Opcode::DEALLOC_PD => {
                let pd = dealloc_pd_in::pd.get(inp);
                ensure(self.pds.contains(&pd), bad_res(sy::PD_NOT_FOUND))?;
                ensure(
                    !self.srqs.values().any(|s| s.pd == pd),
                    bad_state(sy::PD_IN_USE),
                )?;
                self.pds.remove(&pd);
                Ok(())
            }
            Opcode::CREATE_EQ => self.create_eq(inp, out),
            Opcode::DESTROY_EQ => {
                let eqn = destroy_eq_in::eq_number.get(inp);
                ensure(self.eqs.contains_key(&eqn), bad_res(sy::EQ_NOT_FOUND))?;
                ensure(
                    !self.cqs.values().any(|c| c.eqn == eqn),
                    bad_state(sy::EQ_IN_USE),
                )?;
                self.eqs.remove(&eqn);
                Ok(())
            }
            Opcode::QUERY_EQ => self.query_eq(inp, out),
            Opcode::GEN_EQE => {
                let eqn = gen_eqe_in::eq_number.get(inp);
                ensure(self.eqs.contains_key(&eqn), bad_res(sy::EQ_NOT_FOUND))?;
                let mut img = [0u8; 64];
                img.copy_from_slice(gen_eqe_in::eqe.get(inp));
                self.eq_write(eqn, img);
                Ok(())
            }
            Opcode::CREATE_CQ => self.create_cq(inp, out),
            Opcode::DESTROY_CQ => {
                let cqn = destroy_cq_in::cqn.get(inp);
                let cq = self.cqs.get(&cqn).ok_or(bad_res(sy::CQ_NOT_FOUND))?;
                ensure(cq.users == 0, bad_state(sy::CQ_IN_USE))?;
                self.cqs.remove(&cqn);
                Ok(())
            }
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
            _ => Err(bad_op(per_opcode(sy::UNKNOWN_OPCODE, op.0))),
        }
    }

    // ------------------------------------------------------------ bring-up

    fn enable_hca(&mut self, inp: &[u8]) -> R {
        ensure(
            enable_hca_in::function_id.get(inp) == 0
                && !enable_hca_in::embedded_cpu_function.get(inp),
            bad_param(sy::ENABLE_FUNC_ID),
        )?;
        self.reset_function();
        self.leaked_at_teardown = None;
        self.hca = HcaState::Enabled;
        Ok(())
    }

    fn disable_hca(&mut self, inp: &[u8]) -> R {
        ensure(
            disable_hca_in::function_id.get(inp) == 0
                && !disable_hca_in::embedded_cpu_function.get(inp),
            bad_param(sy::ENABLE_FUNC_ID),
        )?;
        ensure(
            self.pages.held.is_empty(),
            bad_state(sy::DISABLE_PAGES_HELD),
        )?;
        self.hca = HcaState::Disabled;
        self.reset_function();
        Ok(())
    }

    fn init_hca(&mut self, inp: &[u8]) -> R {
        let owner_set = init_hca_in::sw_owner_id.get(inp).iter().any(|&b| b != 0)
            || init_hca_in::sw_vhca_id.get(inp) != 0;
        ensure(!owner_set, bad_param(sy::INIT_HCA_SW_OWNER))?;
        ensure(
            self.pages.boot_needed <= 0 && self.pages.init_needed <= 0,
            fail(CmdStatus::BAD_SYS_STATE_ERR, sy::INIT_HCA_NO_PAGES),
        )?;
        self.hca = HcaState::Initialized;
        self.pages.regular_needed = self.caps.regular_pages;
        Ok(())
    }

    fn teardown_hca(&mut self, inp: &[u8]) -> R {
        let profile = teardown_hca_in::profile.get(inp);
        let ok = match profile {
            om::TEARDOWN_GRACEFUL => true,
            om::TEARDOWN_FORCE_CLOSE => self.caps.force_teardown,
            om::TEARDOWN_PREPARE_FAST => self.caps.fast_teardown,
            _ => false,
        };
        ensure(ok, bad_param(sy::TEARDOWN_PROFILE))?;
        self.leaked_at_teardown = Some(self.object_counts());
        self.eqs.clear();
        self.cqs.clear();
        self.srqs.clear();
        self.uars.clear();
        self.pds.clear();
        self.hca = HcaState::TornDown;
        self.pages.regular_needed = -(self.pages.held.len() as i32);
        self.pages.queued_requests.clear();
        Ok(())
    }

    fn query_pages(&mut self, inp: &[u8], op_mod: u16, out: &mut [u8]) -> R {
        ensure(
            query_pages_in::function_id.get(inp) == 0
                && !query_pages_in::embedded_cpu_function.get(inp),
            bad_param(sy::ENABLE_FUNC_ID),
        )?;
        let n = match op_mod {
            om::QUERY_PAGES_BOOT => self.pages.boot_needed,
            om::QUERY_PAGES_INIT => self.pages.init_needed,
            _ => self.pages.regular_needed,
        };
        query_pages_out::num_pages
            .set(out, n as u32)
            .expect("32-bit");
        Ok(())
    }

    fn manage_pages(&mut self, inp: &[u8], op_mod: u16, out: &mut [u8]) -> R {
        let opc = Opcode::MANAGE_PAGES.0;
        ensure(
            manage_pages_in::function_id.get(inp) == 0
                && !manage_pages_in::embedded_cpu_function.get(inp),
            bad_param(sy::ENABLE_FUNC_ID),
        )?;
        let n = manage_pages_in::input_num_entries.get(inp) as usize;
        match op_mod {
            om::MANAGE_PAGES_ALLOC_FAIL => {
                ensure(n == 0, bad_param(sy::PAGES_ALLOC_FAIL_ENTRIES))?;
                ensure(
                    self.pages.regular_needed > 0,
                    bad_param(sy::PAGES_ALLOC_FAIL_NOT_PENDING),
                )?;
                self.pages.regular_needed = 0;
                Ok(())
            }
            om::MANAGE_PAGES_GIVE => {
                ensure(n > 0, bad_param(sy::PAGES_ZERO_ENTRIES))?;
                ensure(
                    inp.len() >= manage_pages_in::pas.len_with(n),
                    fail(CmdStatus::BAD_INP_LEN_ERR, per_opcode(sy::INP_LEN, opc)),
                )?;
                let wanted = self.pages.boot_needed.max(0)
                    + self.pages.init_needed.max(0)
                    + self.pages.regular_needed.max(0);
                let mut list = Vec::with_capacity(n);
                for i in 0..n {
                    let a = manage_pages_in::pas.get(inp, i).expect("length checked");
                    ensure(
                        a.is_multiple_of(PAGE_SIZE as u64),
                        bad_param(sy::PAGES_NOT_ALIGNED),
                    )?;
                    ensure(
                        !self.pages.held.contains(&a) && !list.contains(&a),
                        bad_param(sy::PAGES_DUPLICATE),
                    )?;
                    list.push(a);
                }
                for &a in &list {
                    if !self.dma.mapped(a, PAGE_SIZE) {
                        self.fault(
                            a,
                            PAGE_SIZE,
                            true,
                            "MANAGE_PAGES give: firmware page write".into(),
                        );
                        return Err(bad_param(sy::PAGES_NOT_MAPPED));
                    }
                }
                ensure(
                    n as i64 <= wanted as i64,
                    bad_param(sy::PAGES_NOT_REQUESTED),
                )?;
                for &a in &list {
                    let pat = page_pattern(a);
                    let _ = self.dma.write(a, &pat);
                    self.pages.held.insert(a);
                }
                let mut k = n as i32;
                for need in [
                    &mut self.pages.boot_needed,
                    &mut self.pages.init_needed,
                    &mut self.pages.regular_needed,
                ] {
                    let take = (*need).max(0).min(k);
                    *need -= take;
                    k -= take;
                }
                Ok(())
            }
            _ => {
                // Take (reclaim).
                ensure(n > 0, bad_param(sy::PAGES_ZERO_ENTRIES))?;
                ensure(
                    out.len() >= manage_pages_out::pas.len_with(n),
                    fail(CmdStatus::BAD_OUTP_LEN_ERR, per_opcode(sy::OUTP_LEN, opc)),
                )?;
                let returnable = match self.hca {
                    HcaState::Initialized => (-self.pages.regular_needed).max(0) as usize,
                    _ => self.pages.held.len(),
                };
                let count = n.min(returnable).min(self.pages.held.len());
                let pages: Vec<u64> = self.pages.held.iter().rev().take(count).copied().collect();
                for (i, &a) in pages.iter().enumerate() {
                    let mut got = vec![0u8; PAGE_SIZE];
                    if self.dma.read(a, &mut got).is_none() {
                        self.violations.push(Violation::FreedWhileInUse(format!(
                            "firmware page {a:#x} was freed by the host while firmware held it"
                        )));
                        self.fault(
                            a,
                            PAGE_SIZE,
                            false,
                            "MANAGE_PAGES take: page pattern check".into(),
                        );
                    } else if let Some(off) =
                        got.iter().zip(page_pattern(a)).position(|(x, y)| *x != y)
                    {
                        self.violations.push(Violation::PageScribbled {
                            iova: a,
                            offset: off,
                        });
                    }
                    self.pages.held.remove(&a);
                    manage_pages_out::pas
                        .set(out, i, a)
                        .expect("length checked");
                }
                manage_pages_out::output_num_entries
                    .set(out, count as u32)
                    .expect("32-bit");
                match self.hca {
                    HcaState::Initialized | HcaState::TornDown => {
                        self.pages.regular_needed += count as i32;
                        if self.hca == HcaState::TornDown {
                            self.pages.regular_needed = -(self.pages.held.len() as i32);
                        }
                    }
                    _ => {
                        // Enabled: pages go back to what boot/init still need.
                        let mut k = count as i32;
                        let init_given = self.caps.init_pages - self.pages.init_needed;
                        let t = init_given.min(k);
                        self.pages.init_needed += t;
                        k -= t;
                        self.pages.boot_needed += k;
                    }
                }
                Ok(())
            }
        }
    }

    /// Raise a PAGE_REQUEST (facts §4.2) or queue it until an EQ subscribes.
    pub(crate) fn page_request(&mut self, n: i32) {
        self.pages.regular_needed += n;
        if self.eq_for(EventType::PAGE_REQUEST.0).is_some() {
            self.send_page_request(n);
        } else {
            self.pages.queued_requests.push_back(n);
        }
    }

    fn send_page_request(&mut self, n: i32) {
        let mut e = State::make_eqe(EventType::PAGE_REQUEST, 0);
        let d = eqe::event_data.get_mut(&mut e);
        pages_req_event::function_id.set(d, 0).expect("16-bit");
        pages_req_event::num_pages.set(d, n as u32).expect("32-bit");
        self.raise(e);
    }

    fn query_hca_cap(&mut self, inp: &[u8], op_mod: u16, out: &mut [u8]) -> R {
        ensure(op_mod >> 1 == om::CAP_GENERAL, bad_param(sy::CAP_TYPE))?;
        ensure(
            !query_hca_cap_in::other_function.get(inp)
                && !query_hca_cap_in::ec_vf_function.get(inp)
                && !query_hca_cap_in::function_id_type.get(inp)
                && query_hca_cap_in::function_id.get(inp) == 0,
            bad_param(sy::CAP_OTHER_FUNC),
        )?;
        let blk = query_hca_cap_out::capability.get_mut(out);
        self.caps.to_block(blk);
        if op_mod & 1 == om::HCA_CAP_CUR {
            self.cur.apply(blk);
        }
        Ok(())
    }

    fn set_hca_cap(&mut self, inp: &[u8], op_mod: u16) -> R {
        ensure(op_mod >> 1 == om::CAP_GENERAL, bad_param(sy::CAP_TYPE))?;
        ensure(
            op_mod & 1 == 0,
            bad_param(per_opcode(sy::BAD_OP_MOD, Opcode::SET_HCA_CAP.0)),
        )?;
        ensure(
            !set_hca_cap_in::other_function.get(inp)
                && !set_hca_cap_in::ec_vf_function.get(inp)
                && !set_hca_cap_in::function_id_type.get(inp)
                && set_hca_cap_in::function_id.get(inp) == 0,
            bad_param(sy::CAP_OTHER_FUNC),
        )?;
        let given = set_hca_cap_in::capability.get(inp);
        use mlx5_regs::layouts::cmd_hca_cap as c;
        let mut new = self.cur;
        new.cmdif_checksum = c::cmdif_checksum.get(given);
        new.log_uar_page_sz = c::log_uar_page_sz.get(given);
        new.pkey_table_size = c::pkey_table_size.get(given);
        new.log_max_qp = c::log_max_qp.get(given);
        new.drain_sigerr = c::drain_sigerr.get(given);
        new.uar_4k = c::uar_4k.get(given);
        new.cache_line_128byte = c::cache_line_128byte.get(given);
        let mut expect = vec![0u8; given.len()];
        self.caps.to_block(&mut expect);
        new.apply(&mut expect);
        ensure(expect == given, bad_param(sy::SET_CAP_NOT_SETTABLE))?;
        ensure(new.log_uar_page_sz == 0, bad_param(sy::SET_CAP_UAR_PAGE_SZ))?;
        let within = new.cmdif_checksum <= self.caps.cmdif_checksum
            && new.pkey_table_size <= self.caps.pkey_table_size
            && new.log_max_qp <= self.caps.log_max_qp
            && (!new.drain_sigerr || self.caps.drain_sigerr)
            && (!new.uar_4k || self.caps.uar_4k);
        ensure(within, bad_param(sy::SET_CAP_ABOVE_MAX))?;
        self.cur = new;
        Ok(())
    }

    fn access_reg(&mut self, inp: &[u8], op_mod: u16, out: &mut [u8]) -> R {
        let opc = Opcode::ACCESS_REG.0;
        ensure(
            access_register_in::register_id.get(inp) == reg_id::HOST_ENDIANNESS,
            bad_param(sy::ACCESS_REG_ID),
        )?;
        ensure(
            access_register_in::argument.get(inp) == 0,
            bad_param(sy::ACCESS_REG_ARG),
        )?;
        let data_len = register_host_endianness::SIZE;
        ensure(
            inp.len() >= access_register_in::SIZE + data_len,
            fail(CmdStatus::BAD_INP_LEN_ERR, per_opcode(sy::INP_LEN, opc)),
        )?;
        ensure(
            out.len() >= access_register_out::SIZE + data_len,
            fail(CmdStatus::BAD_OUTP_LEN_ERR, per_opcode(sy::OUTP_LEN, opc)),
        )?;
        let reg = &inp[access_register_in::SIZE..access_register_in::SIZE + data_len];
        let oreg = &mut out[access_register_out::SIZE..access_register_out::SIZE + data_len];
        if op_mod == om::ACCESS_REG_WRITE {
            ensure(
                !reserved_set(&register_host_endianness::LAYOUT, reg, 0),
                bad_param(per_opcode(sy::RESERVED, opc)),
            )?;
            let he = register_host_endianness::he.get(reg);
            ensure(
                he == cfg!(target_endian = "big"),
                bad_param(sy::ACCESS_REG_ENDIANNESS),
            )?;
            self.host_be = he;
        }
        register_host_endianness::he
            .set(oreg, self.host_be)
            .expect("flag");
        Ok(())
    }

    // ------------------------------------------------------------ EQ

    fn allowed_events(&self) -> u64 {
        let mut m = 0u64;
        for t in [
            EventType::PATH_MIG,
            EventType::COMM_EST,
            EventType::SQ_DRAINED,
            EventType::CQ_ERROR,
            EventType::WQ_CATAS_ERROR,
            EventType::PATH_MIG_FAILED,
            EventType::INTERNAL_ERROR,
            EventType::PORT_CHANGE,
            EventType::CMD,
            EventType::PAGE_REQUEST,
            EventType::WQ_INVAL_REQ_ERROR,
            EventType::WQ_ACCESS_ERROR,
            EventType::SRQ_CATAS_ERROR,
            EventType::SRQ_LAST_WQE,
            EventType::SRQ_RQ_LIMIT,
        ] {
            m |= t.mask_bit();
        }
        m
    }

    fn create_eq(&mut self, inp: &[u8], out: &mut [u8]) -> R {
        let e = create_eq_in::eq_context_entry.get(inp);
        ensure(
            eqc::status.get(e) == 0
                && !eqc::ec.get(e)
                && matches!(eqc::st.get(e), 0 | ctx::ST_ARMED | ctx::ST_ALWAYS_ARMED)
                && eqc::consumer_counter.get(e) == 0
                && eqc::producer_counter.get(e) == 0,
            bad_param(sy::EQ_CTX_FIELD),
        )?;
        let log_size = eqc::log_eq_size.get(e);
        ensure(
            log_size <= self.caps.log_max_eq_sz,
            bad_param(sy::EQ_LOG_SIZE),
        )?;
        ensure(
            self.eqs.len() < (1usize << self.caps.log_max_eq),
            lim(sy::EQ_TOO_MANY),
        )?;
        let uar = eqc::uar_page.get(e);
        ensure(self.uars.contains(&uar), bad_res(sy::EQ_UAR))?;
        let intr = eqc::intr.get(e);
        ensure(intr < self.caps.msix_vectors, bad_param(sy::EQ_INTR))?;
        let lps = eqc::log_page_size.get(e);
        ensure(lps <= MAX_LOG_PAGE_SIZE, bad_param(sy::EQ_PAGE_SIZE))?;
        let mut mask = [0u64; 4];
        for (i, m) in mask.iter_mut().enumerate() {
            *m = create_eq_in::event_bitmask
                .get(inp, i)
                .expect("fixed array");
        }
        ensure(
            mask[0] & !self.allowed_events() == 0 && mask[1..].iter().all(|&m| m == 0),
            bad_param(sy::EQ_EVENT_MASK),
        )?;
        let shift = 12 + lps as u32;
        let pofs = eqc::page_offset.get(e) as u64 * ((1u64 << shift) / 64);
        let npas = QBuf::pages_needed(64u64 << log_size, pofs, shift);
        let pas = read_pas(
            inp,
            create_eq_in::pas,
            npas,
            shift,
            fail(CmdStatus::BAD_INP_LEN_ERR, sy::EQ_PAS_SHORT),
            bad_param(sy::EQ_PAS_ALIGN),
        )?;
        let eqn = (FIRST_EQN..=255)
            .find(|n| !self.eqs.contains_key(n))
            .ok_or(lim(sy::EQ_TOO_MANY))?;
        let st = eqc::st.get(e);
        self.eqs.insert(
            eqn,
            Eq {
                log_size,
                uar,
                intr,
                mask,
                buf: QBuf {
                    pas,
                    page_shift: shift,
                    offset: pofs,
                },
                log_page_size: lps,
                page_offset: eqc::page_offset.get(e),
                pc: 0,
                ci: 0,
                st: if st == 0 { ctx::ST_FIRED } else { st },
                oi: eqc::oi.get(e),
                status: 0,
            },
        );
        create_eq_out::eq_number.set(out, eqn).expect("8-bit");
        if self.eqs[&eqn].subscribes(EventType::PAGE_REQUEST.0) {
            while let Some(n) = self.pages.queued_requests.pop_front() {
                self.send_page_request(n);
            }
        }
        Ok(())
    }

    fn query_eq(&mut self, inp: &[u8], out: &mut [u8]) -> R {
        let eqn = query_eq_in::eq_number.get(inp);
        let eq = self.eqs.get(&eqn).ok_or(bad_res(sy::EQ_NOT_FOUND))?;
        let c = query_eq_out::eq_context_entry.get_mut(out);
        eqc::status.set(c, eq.status).expect("4-bit");
        eqc::oi.set(c, eq.oi).expect("flag");
        eqc::st.set(c, eq.st).expect("4-bit");
        eqc::page_offset.set(c, eq.page_offset).expect("6-bit");
        eqc::log_eq_size.set(c, eq.log_size).expect("5-bit");
        eqc::uar_page.set(c, eq.uar).expect("24-bit");
        eqc::intr.set(c, eq.intr).expect("12-bit");
        eqc::log_page_size.set(c, eq.log_page_size).expect("5-bit");
        eqc::consumer_counter.set(c, eq.ci & M24).expect("24-bit");
        eqc::producer_counter.set(c, eq.pc & M24).expect("24-bit");
        query_eq_out::event_bitmask
            .set(out, eq.mask[0])
            .expect("64-bit");
        let pas = eq.buf.pas.clone();
        write_pas(out, query_eq_out::pas, &pas);
        Ok(())
    }

    // ------------------------------------------------------------ CQ

    fn create_cq(&mut self, inp: &[u8], out: &mut [u8]) -> R {
        let c = create_cq_in::cq_context.get(inp);
        ensure(
            cqc::status.get(c) == 0
                && cqc::st.get(c) == 0
                && cqc::last_notified_index.get(c) == 0
                && cqc::last_solicit_index.get(c) == 0
                && cqc::consumer_counter.get(c) == 0
                && cqc::producer_counter.get(c) == 0,
            bad_param(sy::CQ_CTX_FIELD),
        )?;
        ensure(
            !cqc::dbr_umem_valid.get(c)
                && !cqc::apu_cq.get(c)
                && !cqc::cc.get(c)
                && !cqc::cqe_comp_en.get(c)
                && cqc::mini_cqe_res_format.get(c) == 0
                && cqc::cqe_compression_layout.get(c) == 0
                && !cqc::scqe_break_moderation_en.get(c)
                && !create_cq_in::cq_umem_valid.get(inp),
            bad_param(sy::CQ_UNSUPPORTED_FEATURE),
        )?;
        let cqe_sz = cqc::cqe_sz.get(c);
        ensure(cqe_sz <= ctx::CQE_SIZE_128, bad_param(sy::CQ_CQE_SZ))?;
        let log_size = cqc::log_cq_size.get(c);
        ensure(
            log_size <= self.caps.log_max_cq_sz,
            bad_param(sy::CQ_LOG_SIZE),
        )?;
        ensure(
            (self.cqs.len() as u64) < (1u64 << self.caps.log_max_cq),
            lim(sy::CQ_TOO_MANY),
        )?;
        ensure(!cqc::oi.get(c) || self.caps.cq_oi, bad_param(sy::CQ_OI_CAP))?;
        ensure(
            (cqc::cq_period.get(c) == 0 && cqc::cq_max_count.get(c) == 0)
                || self.caps.cq_moderation,
            bad_param(sy::CQ_MODERATION_CREATE_CAP),
        )?;
        ensure(
            cqc::cq_period_mode.get(c) == 0 || self.caps.cq_period_mode_modify,
            bad_param(sy::CQ_PERIOD_MODE_CAP),
        )?;
        let uar = cqc::uar_page.get(c);
        ensure(self.uars.contains(&uar), bad_res(sy::CQ_UAR))?;
        let eqn = cqc::c_eqn_or_apu_element.get(c);
        ensure(
            eqn <= 255 && self.eqs.contains_key(&(eqn as u8)),
            bad_res(sy::CQ_EQN),
        )?;
        let dbr = cqc::dbr_addr.get(c);
        ensure(dbr.is_multiple_of(8), bad_param(sy::CQ_DBR_ALIGN))?;
        let lps = cqc::log_page_size.get(c);
        ensure(lps <= MAX_LOG_PAGE_SIZE, bad_param(sy::CQ_PAGE_SIZE))?;
        let shift = 12 + lps as u32;
        let pofs = cqc::page_offset.get(c) as u64 * ((1u64 << shift) / 64);
        let stride = if cqe_sz == 0 { 64u64 } else { 128 };
        let npas = QBuf::pages_needed(stride << log_size, pofs, shift);
        let pas = read_pas(
            inp,
            create_cq_in::pas,
            npas,
            shift,
            fail(CmdStatus::BAD_INP_LEN_ERR, sy::CQ_PAS_SHORT),
            bad_param(sy::CQ_PAS_ALIGN),
        )?;
        while self.cqs.contains_key(&self.next_cqn) || self.next_cqn == 0 {
            self.next_cqn = (self.next_cqn + 1) & M24;
        }
        let cqn = self.next_cqn;
        self.next_cqn = (self.next_cqn + 1) & M24;
        self.cqs.insert(
            cqn,
            Cq {
                log_size,
                cqe_sz,
                uar,
                eqn: eqn as u8,
                dbr,
                buf: QBuf {
                    pas,
                    page_shift: shift,
                    offset: pofs,
                },
                log_page_size: lps,
                page_offset: cqc::page_offset.get(c),
                oi: cqc::oi.get(c),
                pc: 0,
                arm: None,
                last_fired_sn: None,
                status: 0,
                period: cqc::cq_period.get(c),
                max_count: cqc::cq_max_count.get(c),
                period_mode: cqc::cq_period_mode.get(c),
                last_notified: 0,
                last_solicit: None,
                users: 0,
            },
        );
        create_cq_out::cqn.set(out, cqn).expect("24-bit");
        Ok(())
    }

    fn query_cq(&mut self, inp: &[u8], out: &mut [u8]) -> R {
        let cqn = query_cq_in::cqn.get(inp);
        let cq = self.cqs.get(&cqn).ok_or(bad_res(sy::CQ_NOT_FOUND))?.clone();
        let ci = self.dma.read(cq.dbr, &mut [0u8; 4]).map(|_| {
            let mut b = [0u8; 4];
            let _ = self.dma.read(cq.dbr, &mut b);
            u32::from_be_bytes(b) & M24
        });
        let c = query_cq_out::cq_context.get_mut(out);
        cqc::status.set(c, cq.status).expect("4-bit");
        cqc::cqe_sz.set(c, cq.cqe_sz).expect("3-bit");
        cqc::oi.set(c, cq.oi).expect("flag");
        cqc::cq_period_mode.set(c, cq.period_mode).expect("2-bit");
        cqc::st.set(c, cq.st()).expect("4-bit");
        cqc::page_offset.set(c, cq.page_offset).expect("6-bit");
        cqc::log_cq_size.set(c, cq.log_size).expect("5-bit");
        cqc::uar_page.set(c, cq.uar).expect("24-bit");
        cqc::cq_period.set(c, cq.period).expect("12-bit");
        cqc::cq_max_count.set(c, cq.max_count).expect("16-bit");
        cqc::c_eqn_or_apu_element
            .set(c, cq.eqn as u32)
            .expect("32-bit");
        cqc::log_page_size.set(c, cq.log_page_size).expect("5-bit");
        cqc::last_notified_index
            .set(c, cq.last_notified & M24)
            .expect("24-bit");
        cqc::last_solicit_index
            .set(c, cq.last_solicit.unwrap_or(0) & M24)
            .expect("24-bit");
        cqc::consumer_counter
            .set(c, ci.unwrap_or(0))
            .expect("24-bit");
        cqc::producer_counter.set(c, cq.pc & M24).expect("24-bit");
        cqc::dbr_addr.set(c, cq.dbr).expect("64-bit");
        write_pas(out, query_cq_out::pas, &cq.buf.pas);
        Ok(())
    }

    fn moderate_cq(&mut self, inp: &[u8]) -> R {
        ensure(self.caps.cq_moderation, bad_op(sy::CQ_MODERATION_CAP))?;
        let cqn = modify_cq_in::cqn.get(inp);
        ensure(self.cqs.contains_key(&cqn), bad_res(sy::CQ_NOT_FOUND))?;
        let sel_raw = modify_field_select::modify_field_select
            .get(modify_cq_in::modify_field_select_resize_field_select.get(inp));
        let sel = ModifyCqFields::from_bits(sel_raw).ok_or(bad_param(sy::CQ_MODIFY_SELECT))?;
        ensure(!sel.is_empty(), bad_param(sy::CQ_MODIFY_SELECT))?;
        ensure(
            !sel.contains(ModifyCqFields::OVERRUN) || self.caps.cq_oi,
            bad_param(sy::CQ_MODIFY_SELECT),
        )?;
        ensure(
            !sel.contains(ModifyCqFields::PERIOD_MODE) || self.caps.cq_period_mode_modify,
            bad_param(sy::CQ_MODIFY_SELECT),
        )?;
        let c = modify_cq_in::cq_context.get(inp);
        let cq = self.cqs.get_mut(&cqn).expect("checked");
        if sel.contains(ModifyCqFields::PERIOD) {
            cq.period = cqc::cq_period.get(c);
        }
        if sel.contains(ModifyCqFields::COUNT) {
            cq.max_count = cqc::cq_max_count.get(c);
        }
        if sel.contains(ModifyCqFields::OVERRUN) {
            cq.oi = cqc::oi.get(c);
        }
        if sel.contains(ModifyCqFields::PERIOD_MODE) {
            cq.period_mode = cqc::cq_period_mode.get(c);
        }
        Ok(())
    }

    /// MODIFY_CQ op_mod 1 (facts §8).
    fn resize_cq(&mut self, inp: &[u8]) -> R {
        ensure(self.caps.cq_resize, bad_op(sy::CQ_RESIZE_CAP))?;
        let cqn = modify_cq_in::cqn.get(inp);
        let cq = self.cqs.get(&cqn).ok_or(bad_res(sy::CQ_NOT_FOUND))?.clone();
        let sel_raw = resize_field_select::resize_field_select
            .get(modify_cq_in::modify_field_select_resize_field_select.get(inp));
        let sel = ResizeCqFields::from_bits(sel_raw).ok_or(bad_param(sy::CQ_RESIZE_SELECT))?;
        ensure(
            sel.contains(ResizeCqFields::LOG_CQ_SIZE),
            bad_param(sy::CQ_RESIZE_SELECT),
        )?;
        ensure(
            !modify_cq_in::cq_umem_valid.get(inp),
            bad_param(sy::CQ_UNSUPPORTED_FEATURE),
        )?;
        ensure(cq.status == ctx::CQ_STATUS_OK, bad_state(sy::CQ_IN_ERROR))?;
        let c = modify_cq_in::cq_context.get(inp);
        ensure(
            cqc::cqe_sz.get(c) == cq.cqe_sz,
            bad_param(sy::CQ_RESIZE_CQE_SZ),
        )?;
        let log_size = cqc::log_cq_size.get(c);
        ensure(
            log_size <= self.caps.log_max_cq_sz,
            bad_param(sy::CQ_LOG_SIZE),
        )?;
        let lps = if sel.contains(ResizeCqFields::LOG_PAGE_SIZE) {
            cqc::log_page_size.get(c)
        } else {
            cq.log_page_size
        };
        ensure(lps <= MAX_LOG_PAGE_SIZE, bad_param(sy::CQ_PAGE_SIZE))?;
        let po = if sel.contains(ResizeCqFields::PAGE_OFFSET) {
            cqc::page_offset.get(c)
        } else {
            cq.page_offset
        };
        let shift = 12 + lps as u32;
        let pofs = po as u64 * ((1u64 << shift) / 64);
        let npas = QBuf::pages_needed(cq.stride() << log_size, pofs, shift);
        let pas = read_pas(
            inp,
            modify_cq_in::pas,
            npas,
            shift,
            fail(CmdStatus::BAD_INP_LEN_ERR, sy::CQ_PAS_SHORT),
            bad_param(sy::CQ_PAS_ALIGN),
        )?;
        // Outstanding CQEs: producer minus the consumer index the driver
        // published in the doorbell record.
        let Ok(ci) = self.rd_be32(cq.dbr, &|| {
            format!("resize: CQ doorbell record cqn {cqn:#x}")
        }) else {
            return Err(bad_state(sy::CQ_IN_ERROR));
        };
        let outstanding = cq.pc.wrapping_sub(ci) & M24;
        ensure(
            outstanding <= 1u32 << log_size,
            fail(CmdStatus::BAD_SIZE_OUTS_CQES_ERR, sy::CQ_RESIZE_OUTSTANDING),
        )?;
        ensure(
            outstanding < 1u32 << cq.log_size,
            fail(CmdStatus::BAD_SIZE_OUTS_CQES_ERR, sy::CQ_RESIZE_OLD_FULL),
        )?;
        // The RESIZE_CQ CQE goes into the OLD buffer at the producer index;
        // it does not generate a completion event.
        let mut cqe = [0u8; 64];
        cqe64::opcode
            .set(&mut cqe, CqeOpcode::RESIZE_CQ.0)
            .expect("4-bit");
        let saved_arm = cq.arm;
        if let Some(x) = self.cqs.get_mut(&cqn) {
            x.arm = None;
        }
        let written = self.cq_push_raw(cqn, cqe);
        let x = self.cqs.get_mut(&cqn).expect("exists");
        x.arm = saved_arm;
        if !written {
            return Err(bad_state(sy::CQ_IN_ERROR));
        }
        x.log_size = log_size;
        x.log_page_size = lps;
        x.page_offset = po;
        x.buf = QBuf {
            pas,
            page_shift: shift,
            offset: pofs,
        };
        Ok(())
    }

    /// Write a CQE without overrun check or notification (resize CQE).
    fn cq_push_raw(&mut self, cqn: u32, mut cqe: [u8; 64]) -> bool {
        let cq = self.cqs.get(&cqn).expect("exists").clone();
        let n = 1u32 << cq.log_size;
        let slot = cq.pc & (n - 1);
        let owner = (cq.pc >> cq.log_size) & 1 == 1;
        cqe64::owner.set(&mut cqe, owner).expect("flag");
        let stride = cq.stride();
        let mut e = vec![0u8; stride as usize];
        e[stride as usize - 64..].copy_from_slice(&cqe);
        let mut ok = true;
        for (i, chunk) in [(0usize, e.len() - 1), (e.len() - 1, e.len())]
            .iter()
            .enumerate()
        {
            let (a, b) = *chunk;
            let Some((iova, contig)) = cq.buf.at(slot as u64 * stride + a as u64) else {
                ok = false;
                break;
            };
            if (contig as usize) < b - a {
                // Crosses a page: write byte by byte through the page list.
                for k in a..b {
                    let (iv, _) = cq.buf.at(slot as u64 * stride + k as u64).expect("in list");
                    ok &= self
                        .wr(iv, &e[k..k + 1], &|| format!("RESIZE_CQ CQE cqn {cqn:#x}"))
                        .is_ok();
                }
            } else {
                ok &= self
                    .wr(iova, &e[a..b], &|| format!("RESIZE_CQ CQE cqn {cqn:#x}"))
                    .is_ok();
            }
            if i == 0 {
                std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
            }
        }
        if ok {
            self.cqs.get_mut(&cqn).expect("exists").pc = cq.pc.wrapping_add(1);
        }
        ok
    }

    // ------------------------------------------------------------ SRQ / RMP

    #[allow(clippy::too_many_arguments)]
    fn check_srq_common(
        &self,
        log_size: u8,
        log_stride: u8,
        lps: u8,
        pd: u32,
        dbr: u64,
        lwm: u16,
        sig: bool,
    ) -> R {
        ensure(
            log_size <= self.caps.log_max_srq_sz,
            bad_param(sy::SRQ_LOG_SIZE),
        )?;
        ensure(
            (5..=15).contains(&log_stride)
                && (1u32 << log_stride) <= self.caps.max_wqe_sz_rq as u32,
            bad_param(sy::SRQ_STRIDE),
        )?;
        ensure(lps <= MAX_LOG_PAGE_SIZE, bad_param(sy::SRQ_PAGE_SIZE))?;
        ensure(
            !sig || self.caps.wq_signature,
            bad_param(sy::SRQ_SIGNATURE_CAP),
        )?;
        ensure(self.pds.contains(&pd), bad_res(sy::SRQ_PD))?;
        ensure(dbr.is_multiple_of(4), bad_param(sy::SRQ_DBR_ALIGN))?;
        ensure((lwm as u32) < (1u32 << log_size), bad_param(sy::SRQ_LWM))?;
        Ok(())
    }

    fn alloc_srqn(&mut self) -> u32 {
        while self.srqs.contains_key(&self.next_srqn) || self.next_srqn == 0 {
            self.next_srqn = (self.next_srqn + 1) & M24;
        }
        let n = self.next_srqn;
        self.next_srqn = (self.next_srqn + 1) & M24;
        n
    }

    fn create_srq(&mut self, inp: &[u8], out: &mut [u8]) -> R {
        let s = create_srq_in::srq_context_entry.get(inp);
        ensure(
            srqc::state.get(s) == ctx::SRQ_STATE_GOOD
                && srqc::wqe_cnt.get(s) == 0
                && !srqc::cont_srq.get(s),
            bad_param(sy::SRQ_CTX_FIELD),
        )?;
        let log_size = srqc::log_srq_size.get(s);
        let log_stride = srqc::log_rq_stride.get(s) + 4;
        let lps = srqc::log_page_size.get(s);
        let pd = srqc::pd.get(s);
        let dbr = srqc::dbr_addr.get(s);
        let lwm = srqc::lwm.get(s);
        let nsrq = self.srqs.values().filter(|x| !x.rmp).count() as u64;
        ensure(
            nsrq < (1u64 << self.caps.log_max_srq),
            lim(sy::SRQ_TOO_MANY),
        )?;
        self.check_srq_common(
            log_size,
            log_stride,
            lps,
            pd,
            dbr,
            lwm,
            srqc::wq_signature.get(s),
        )?;
        ensure(srqc::xrcd.get(s) == 0, bad_res(sy::SRQ_XRCD))?;
        let cqn = srqc::cqn.get(s);
        ensure(self.cqs.contains_key(&cqn), bad_res(sy::SRQ_CQN))?;
        let shift = 12 + lps as u32;
        let pofs = srqc::page_offset.get(s) as u64 * ((1u64 << shift) / 64);
        let npas = QBuf::pages_needed(1u64 << (log_size + log_stride), pofs, shift);
        let pas = read_pas(
            inp,
            create_srq_in::pas,
            npas,
            shift,
            fail(CmdStatus::BAD_INP_LEN_ERR, sy::SRQ_PAS_SHORT),
            bad_param(sy::SRQ_PAS_ALIGN),
        )?;
        let n = self.alloc_srqn();
        self.cqs.get_mut(&cqn).expect("checked").users += 1;
        self.srqs.insert(
            n,
            Srq {
                rmp: false,
                log_size,
                log_stride,
                buf: QBuf {
                    pas,
                    page_shift: shift,
                    offset: pofs,
                },
                log_page_size: lps,
                page_offset: srqc::page_offset.get(s),
                pd,
                dbr,
                lwm,
                cqn: Some(cqn),
                xrcd: 0,
                rlky: srqc::rlky.get(s),
                wq_signature: srqc::wq_signature.get(s),
                state: ctx::SRQ_STATE_GOOD,
                consumed: 0,
                next: 0,
            },
        );
        create_srq_out::srqn.set(out, n).expect("24-bit");
        self.srq_check_limit(n);
        Ok(())
    }

    fn create_rmp(&mut self, inp: &[u8], out: &mut [u8]) -> R {
        let r = create_rmp_in::ctx.tail(inp);
        let w = rmpc::wq.tail(r);
        let zero_fields = !rmpc::basic_cyclic_rcv_wqe.get(r)
            && wq::wq_type.get(w) == 0
            && wq::end_padding_mode.get(w) == 0
            && !wq::cd_slave.get(w)
            && !wq::hds_skip_first_sge.get(w)
            && wq::log2_hds_buf_size.get(w) == 0
            && wq::uar_page.get(w) == 0
            && wq::hw_counter.get(w) == 0
            && wq::sw_counter.get(w) == 0
            && !wq::dbr_umem_valid.get(w)
            && !wq::wq_umem_valid.get(w)
            && wq::log_hairpin_num_packets.get(w) == 0
            && wq::log_hairpin_data_sz.get(w) == 0
            && wq::log_wqe_num_of_strides.get(w) == 0
            && !wq::two_byte_shift_en.get(w)
            && wq::log_wqe_stride_size.get(w) == 0
            && wq::dbr_umem_id.get(w) == 0
            && wq::wq_umem_id.get(w) == 0
            && wq::wq_umem_offset.get(w) == 0
            && wq::headers_mkey.get(w) == 0
            && !wq::shampo_enable.get(w)
            && wq::shampo_mode.get(w) == 0
            && wq::log_reservation_size.get(w) == 0
            && wq::log_max_num_of_packets_per_reservation.get(w) == 0
            && wq::log_headers_entry_size.get(w) == 0
            && wq::log_headers_buffer_entry_num.get(w) == 0;
        ensure(
            rmpc::state.get(r) == ctx::RMP_STATE_RDY && zero_fields,
            bad_param(sy::SRQ_CTX_FIELD),
        )?;
        let nrmp = self.srqs.values().filter(|x| x.rmp).count() as u64;
        ensure(
            nrmp < (1u64 << self.caps.log_max_rmp),
            lim(sy::SRQ_TOO_MANY),
        )?;
        let log_size = wq::log_wq_sz.get(w);
        let log_stride = wq::log_wq_stride.get(w);
        let lps = wq::log_wq_pg_sz.get(w);
        let pd = wq::pd.get(w);
        let dbr = wq::dbr_addr.get(w);
        let lwm = wq::lwm.get(w);
        self.check_srq_common(
            log_size,
            log_stride,
            lps,
            pd,
            dbr,
            lwm,
            wq::wq_signature.get(w),
        )?;
        let shift = 12 + lps as u32;
        let pofs = wq::page_offset.get(w) as u64 * ((1u64 << shift) / 64);
        let npas = QBuf::pages_needed(1u64 << (log_size + log_stride), pofs, shift);
        // wq.pas starts right after the rmpc: byte 0x110 of the command.
        let pas_arr = mlx5_regs::Array::<u64>::new(
            "pas",
            create_rmp_in::ctx.bit_off + rmpc::wq.bit_off + wq::pas.bit_off,
            64,
            0,
        );
        let pas = read_pas(
            inp,
            pas_arr,
            npas,
            shift,
            fail(CmdStatus::BAD_INP_LEN_ERR, sy::SRQ_PAS_SHORT),
            bad_param(sy::SRQ_PAS_ALIGN),
        )?;
        let n = self.alloc_srqn();
        self.srqs.insert(
            n,
            Srq {
                rmp: true,
                log_size,
                log_stride,
                buf: QBuf {
                    pas,
                    page_shift: shift,
                    offset: pofs,
                },
                log_page_size: lps,
                page_offset: wq::page_offset.get(w),
                pd,
                dbr,
                lwm,
                cqn: None,
                xrcd: 0,
                rlky: true,
                wq_signature: wq::wq_signature.get(w),
                state: ctx::RMP_STATE_RDY,
                consumed: 0,
                next: 0,
            },
        );
        create_rmp_out::rmpn.set(out, n).expect("24-bit");
        self.srq_check_limit(n);
        Ok(())
    }

    fn destroy_srq(&mut self, n: u32, rmp: bool) -> R {
        let s = self
            .srqs
            .get(&n)
            .filter(|s| s.rmp == rmp)
            .ok_or(bad_res(sy::SRQ_NOT_FOUND))?;
        if let Some(cqn) = s.cqn {
            if let Some(cq) = self.cqs.get_mut(&cqn) {
                cq.users -= 1;
            }
        }
        self.srqs.remove(&n);
        Ok(())
    }

    fn posted(&mut self, n: u32) -> Option<u16> {
        let dbr = self.srqs.get(&n)?.dbr;
        self.rd_be32(dbr, &|| format!("SRQ doorbell record read srqn {n:#x}"))
            .ok()
            .map(|v| v as u16)
    }

    fn query_srq(&mut self, inp: &[u8], out: &mut [u8]) -> R {
        let n = query_srq_in::srqn.get(inp);
        let s = self
            .srqs
            .get(&n)
            .filter(|s| !s.rmp)
            .ok_or(bad_res(sy::SRQ_NOT_FOUND))?
            .clone();
        let c = query_srq_out::srq_context_entry.get_mut(out);
        srqc::state.set(c, s.state).expect("4-bit");
        srqc::log_srq_size.set(c, s.log_size).expect("4-bit");
        srqc::wq_signature.set(c, s.wq_signature).expect("flag");
        srqc::rlky.set(c, s.rlky).expect("flag");
        srqc::log_rq_stride.set(c, s.log_stride - 4).expect("3-bit");
        srqc::xrcd.set(c, s.xrcd).expect("24-bit");
        srqc::page_offset.set(c, s.page_offset).expect("6-bit");
        srqc::cqn.set(c, s.cqn.unwrap_or(0)).expect("24-bit");
        srqc::log_page_size.set(c, s.log_page_size).expect("6-bit");
        srqc::pd.set(c, s.pd).expect("24-bit");
        srqc::lwm.set(c, s.lwm).expect("16-bit");
        srqc::wqe_cnt.set(c, s.consumed).expect("16-bit");
        srqc::dbr_addr.set(c, s.dbr).expect("64-bit");
        write_pas(out, query_srq_out::pas, &s.buf.pas);
        Ok(())
    }

    fn query_rmp(&mut self, inp: &[u8], out: &mut [u8]) -> R {
        let n = query_rmp_in::rmpn.get(inp);
        let s = self
            .srqs
            .get(&n)
            .filter(|s| s.rmp)
            .ok_or(bad_res(sy::SRQ_NOT_FOUND))?
            .clone();
        let posted = self.posted(n).unwrap_or(0);
        let r = query_rmp_out::rmp_context.tail_mut(out);
        rmpc::state.set(r, s.state).expect("4-bit");
        let w = rmpc::wq.tail_mut(r);
        wq::wq_signature.set(w, s.wq_signature).expect("flag");
        wq::page_offset.set(w, s.page_offset).expect("5-bit");
        wq::lwm.set(w, s.lwm).expect("16-bit");
        wq::pd.set(w, s.pd).expect("24-bit");
        wq::dbr_addr.set(w, s.dbr).expect("64-bit");
        wq::hw_counter.set(w, s.consumed as u32).expect("32-bit");
        wq::sw_counter.set(w, posted as u32).expect("32-bit");
        wq::log_wq_stride.set(w, s.log_stride).expect("4-bit");
        wq::log_wq_pg_sz.set(w, s.log_page_size).expect("5-bit");
        wq::log_wq_sz.set(w, s.log_size).expect("5-bit");
        write_pas(w, wq::pas, &s.buf.pas);
        Ok(())
    }

    fn modify_rmp(&mut self, inp: &[u8]) -> R {
        let n = modify_rmp_in::rmpn.get(inp);
        let s = self
            .srqs
            .get(&n)
            .filter(|s| s.rmp)
            .ok_or(bad_res(sy::SRQ_NOT_FOUND))?;
        ensure(
            modify_rmp_in::rmp_state.get(inp) == s.state,
            bad_state(sy::RMP_STATE),
        )?;
        let bm = modify_rmp_in::bitmask.get(inp);
        ensure(rmp_bitmask::lwm.get(bm), bad_param(sy::RMP_BITMASK))?;
        let r = modify_rmp_in::ctx.tail(inp);
        ensure(
            rmpc::state.get(r) == ctx::RMP_STATE_RDY,
            bad_param(sy::RMP_NEW_STATE),
        )?;
        let lwm = wq::lwm.get(rmpc::wq.tail(r));
        self.set_limit(n, true, lwm)
    }

    /// Arm (or disarm with 0) the SRQ limit (facts §9.3, §9.6).
    fn set_limit(&mut self, n: u32, rmp: bool, lwm: u16) -> R {
        let s = self
            .srqs
            .get_mut(&n)
            .filter(|s| s.rmp == rmp)
            .ok_or(bad_res(sy::SRQ_NOT_FOUND))?;
        ensure((lwm as u32) < (1u32 << s.log_size), bad_param(sy::SRQ_LWM))?;
        s.lwm = lwm;
        if self.caps.limit_event_on_arm {
            self.srq_check_limit(n);
        }
        Ok(())
    }

    /// Raise the limit event once the posted-but-unconsumed count is below
    /// the armed limit, and disarm (one-shot).
    pub(crate) fn srq_check_limit(&mut self, n: u32) {
        let Some(s) = self.srqs.get(&n) else {
            return;
        };
        if s.lwm == 0 {
            return;
        }
        let consumed = s.consumed;
        let lwm = s.lwm;
        let Some(posted) = self.posted(n) else {
            return;
        };
        let count = posted.wrapping_sub(consumed);
        if count < lwm {
            self.srqs.get_mut(&n).expect("exists").lwm = 0;
            self.srq_limit_event(n);
        }
    }
}
