//! The rules that tie objects together, written once: which objects a
//! destroy or dealloc must refuse while others still name them, with the
//! firmware status and syndrome of each refusal (Linux
//! `drivers/net/ethernet/mellanox/mlx5/core/cmd.c` `cmd_status_to_err`;
//! the references are those of the PRM contexts: `qpc.cqn_snd`,
//! `qpc.cqn_rcv`, `qpc.srqn_rmpn_xrqn`, `qpc.pd`, `mkc.pd`, `cqc.c_eqn`,
//! `cqc.uar_page`, `srqc.cqn`, `*_umem_id`).
//!
//! [`Objects::dma_users`] names the objects living in a DMA region the
//! host is about to free.
//!
//! Each `destroy_*`/`dealloc_*` checks in a fixed order (the object exists,
//! then each reference) and removes the object only if nothing refused.

use mlx5_regs::CmdStatus;

use super::{Cq, Eq, Objects, QBuf, Srq};
use crate::cmds::Fail;
use crate::mkey::Mkey;
use crate::qp::Qp;
use crate::syndrome as sy;
use crate::umem::Umem;

fn refuse(status: CmdStatus, syndrome: u32) -> Fail {
    Fail { status, syndrome }
}
/// The object named does not exist.
fn not_found(syndrome: u32) -> Fail {
    refuse(CmdStatus::BAD_RES_ERR, syndrome)
}
/// The object is in a state that forbids the command (referenced by a
/// queue of the same layer).
fn in_use(syndrome: u32) -> Fail {
    refuse(CmdStatus::BAD_RES_STATE_ERR, syndrome)
}
/// The object is still referenced by a QP, MKEY or UMEM user.
fn busy(syndrome: u32) -> Fail {
    refuse(CmdStatus::RES_BUSY, syndrome)
}
fn ensure(cond: bool, f: Fail) -> Result<(), Fail> {
    if cond {
        Ok(())
    } else {
        Err(f)
    }
}

impl Objects {
    /// Does any QP send or receive completions to `cqn`?
    pub fn cq_used_by_qp(&self, cqn: u32) -> bool {
        self.qps
            .values()
            .any(|q| q.cqn_snd == Some(cqn) || q.cqn_rcv == Some(cqn))
    }

    /// Does any SRQ (ISSI 0 `srqc.cqn`) name `cqn`?
    pub fn cq_used_by_srq(&self, cqn: u32) -> bool {
        self.srqs.values().any(|s| s.cqn == Some(cqn))
    }

    /// Does any object keep its buffer or doorbell record in UMEM `id`?
    pub fn umem_in_use(&self, id: u32) -> bool {
        self.cqs.values().any(|c| c.umems.contains(&id))
            || self.srqs.values().any(|s| s.umems.contains(&id))
            || self.qps.values().any(|q| q.umems.contains(&id))
    }

    /// The SRQ (`rmp` false) or RMP (`rmp` true) numbered `n`: a number
    /// naming the other kind is as unknown as one never issued.
    pub fn srq(&self, n: u32, rmp: bool) -> Result<&Srq, Fail> {
        self.srqs
            .get(&n)
            .filter(|s| s.rmp == rmp)
            .ok_or(not_found(sy::SRQ_NOT_FOUND))
    }

    /// [`Objects::srq`], mutable.
    pub fn srq_mut(&mut self, n: u32, rmp: bool) -> Result<&mut Srq, Fail> {
        self.srqs
            .get_mut(&n)
            .filter(|s| s.rmp == rmp)
            .ok_or(not_found(sy::SRQ_NOT_FOUND))
    }

    /// DEALLOC_UAR: refused while an EQ, CQ or QP rings through the page.
    pub fn dealloc_uar(&mut self, idx: u32) -> Result<(), Fail> {
        ensure(self.uars.contains(&idx), not_found(sy::UAR_NOT_FOUND))?;
        let by_queue =
            self.eqs.values().any(|e| e.uar == idx) || self.cqs.values().any(|c| c.uar == idx);
        ensure(!by_queue, in_use(sy::UAR_IN_USE))?;
        ensure(
            !self.qps.values().any(|q| q.uar == idx),
            busy(sy::UAR_USED_BY_QP),
        )?;
        self.uars.remove(&idx);
        let page = mlx5_regs::doorbell::uar_page_offset(idx);
        let end = page + mlx5_regs::doorbell::UAR_PAGE_SIZE;
        self.blueflame.retain(|at, _| !(page..end).contains(at));
        Ok(())
    }

    /// DEALLOC_PD: refused while a QP, an MKEY or an SRQ/RMP is in the PD.
    pub fn dealloc_pd(&mut self, pd: u32) -> Result<(), Fail> {
        ensure(self.pds.contains(&pd), not_found(sy::PD_NOT_FOUND))?;
        ensure(
            !self.qps.values().any(|q| q.pd == pd),
            busy(sy::PD_USED_BY_QP),
        )?;
        ensure(
            !self.mkeys.values().any(|k| k.pd == pd),
            busy(sy::PD_USED_BY_MKEY),
        )?;
        ensure(
            !self.srqs.values().any(|s| s.pd == pd),
            in_use(sy::PD_IN_USE),
        )?;
        self.pds.remove(&pd);
        Ok(())
    }

    /// DESTROY_EQ: refused while a CQ reports to it.
    pub fn destroy_eq(&mut self, eqn: u8) -> Result<Eq, Fail> {
        ensure(self.eqs.contains_key(&eqn), not_found(sy::EQ_NOT_FOUND))?;
        ensure(
            !self.cqs.values().any(|c| c.eqn == eqn),
            in_use(sy::EQ_IN_USE),
        )?;
        Ok(self.eqs.remove(&eqn).expect("checked"))
    }

    /// DESTROY_CQ: refused while an SRQ or a QP names it.
    pub fn destroy_cq(&mut self, cqn: u32) -> Result<Cq, Fail> {
        ensure(self.cqs.contains_key(&cqn), not_found(sy::CQ_NOT_FOUND))?;
        ensure(!self.cq_used_by_srq(cqn), in_use(sy::CQ_IN_USE))?;
        ensure(!self.cq_used_by_qp(cqn), busy(sy::CQ_USED_BY_QP))?;
        Ok(self.cqs.remove(&cqn).expect("checked"))
    }

    /// DESTROY_SRQ (`rmp` false) or DESTROY_RMP (`rmp` true): the number
    /// must name an object of that kind, and no QP may receive through it.
    pub fn destroy_srq(&mut self, n: u32, rmp: bool) -> Result<Srq, Fail> {
        self.srq(n, rmp)?;
        ensure(
            !self.qps.values().any(|q| q.srqn == Some(n)),
            busy(sy::SRQ_USED_BY_QP),
        )?;
        Ok(self.srqs.remove(&n).expect("checked"))
    }

    /// DESTROY_QP: nothing refers to a QP, so only its existence is checked.
    pub fn destroy_qp(&mut self, qpn: u32) -> Result<Qp, Fail> {
        self.qps.remove(&qpn).ok_or(not_found(sy::QP_NOT_FOUND))
    }

    /// DESTROY_MKEY by index.
    pub fn destroy_mkey(&mut self, index: u32) -> Result<Mkey, Fail> {
        self.mkeys
            .remove(&index)
            .ok_or(not_found(sy::MKEY_NOT_FOUND))
    }

    /// DEALLOC_XRCD: refused while an XRC QP or SRQ is in the domain.
    pub fn dealloc_xrcd(&mut self, x: u32) -> Result<(), Fail> {
        ensure(self.xrcds.contains(&x), not_found(sy::XRCD_NOT_FOUND))?;
        let used =
            self.qps.values().any(|q| q.xrcd == x) || self.srqs.values().any(|s| s.xrcd == x);
        ensure(!used, busy(sy::XRCD_IN_USE))?;
        self.xrcds.remove(&x);
        Ok(())
    }

    /// DESTROY_UMEM: refused while a CQ, SRQ/RMP or QP keeps memory in it.
    pub fn destroy_umem(&mut self, id: u32) -> Result<Umem, Fail> {
        ensure(self.umems.contains_key(&id), not_found(sy::UMEM_NOT_FOUND))?;
        ensure(!self.umem_in_use(id), busy(sy::UMEM_IN_USE))?;
        Ok(self.umems.remove(&id).expect("checked"))
    }

    /// The objects whose queue buffers, doorbell records or UMEM pages lie
    /// in device memory `[lo, hi)`: freeing that memory pulls it from under
    /// them (the host-side rule behind `Violation::FreedWhileInUse`).
    pub fn dma_users(&self, lo: u64, hi: u64) -> Vec<String> {
        let inside = |a: u64| a >= lo && a < hi;
        let in_buf = |b: &QBuf| b.pas.iter().any(|&p| inside(p));
        let mut users = Vec::new();
        for (n, e) in &self.eqs {
            if in_buf(&e.buf) {
                users.push(format!("EQ {n} buffer"));
            }
        }
        for (n, c) in &self.cqs {
            if in_buf(&c.buf) || inside(c.dbr) {
                users.push(format!("CQ {n:#x} buffer/doorbell record"));
            }
        }
        for (n, q) in &self.qps {
            if q.sq.as_ref().is_some_and(in_buf) || inside(q.dbr) {
                users.push(format!("QP {n:#x} send ring/doorbell record"));
            }
        }
        for (n, s) in &self.srqs {
            if in_buf(&s.buf) || inside(s.dbr) {
                users.push(format!("SRQ {n:#x} buffer/doorbell record"));
            }
        }
        for (n, u) in &self.umems {
            if u.overlaps(lo, hi) {
                users.push(format!("UMEM {n:#x}"));
            }
        }
        users
    }
}
