//! Hostile device mode: on request the model writes corrupted CQEs, EQEs and
//! command outputs, so tests can check that the driver treats everything a
//! device writes as untrusted (docs/fidelity.md §11, docs/reliability.md).
//!
//! Each request ([`crate::Injector::hostile`]) arms **one** corruption. It is
//! applied to the next structure of its class the model writes and then
//! consumed; requests of one class are applied in the order they were made.
//! Requests never change the model's own state: a corrupted output or entry
//! is a lie about the state (the real CQE, object or page stays what it is).

use mlx5_regs::layout::Kind;
use mlx5_regs::layouts::{
    alloc_pd_out, alloc_uar_out, cmd_hca_cap, comp_event, cq_error, cqe64, create_cq_out,
    create_eq_out, create_rmp_out, create_srq_out, eqe, manage_pages_in, manage_pages_out,
    qp_events, query_hca_cap_out, query_pages_out,
};
use mlx5_regs::{CqeOpcode, EventType, Opcode};

use crate::state::State;

/// One kind of hostile behaviour (see the module docs of `hostile`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostileKind {
    // ---------------------------------------------------------------- CQEs
    /// The next CQE carries opcode 0x7, which docs/firmware.md §7.2 does not define.
    CqeUnknownOpcode,
    /// The next CQE's `wqe_counter` is 0xffff: beyond every ring (an SRQ
    /// has at most 2^15 WQEs).
    CqeWqeCounterBeyondRing,
    /// The next CQE's `byte_cnt` is 0xffff_ffff: beyond any posted buffer.
    CqeByteCountBeyondBuffer,
    /// The next CQE names QP 0xfffffe, which the model never issued (QP
    /// numbers start near 0x200 and are not reused before the 24-bit space
    /// wraps).
    CqeUnknownQpn,
    /// The next CQE names an SRQ number the model never issued.
    CqeUnknownSrqn,
    // ---------------------------------------- requester (send) CQEs
    /// The next requester CQE (opcode REQ or REQ_ERR) carries a
    /// `wqe_counter` half the 16-bit space away from the real one
    /// (`wqe_counter ^ 0x8000`): a send WQE that was never posted (a send
    /// ring has at most 2^15 WQEBBs).
    SendCqeWqeCounterNotPosted,
    /// The next requester CQE names send opcode 0x7f
    /// ([`HOSTILE_WQE_OPCODE`], not an `MLX5_OPCODE_*`) in
    /// `sop_opcode` / `s_wqe_opcode`.
    SendCqeUnknownWqeOpcode,
    /// The next requester CQE is written twice, in two consecutive CQ
    /// slots (a completion reported twice).
    SendCqeDuplicated,
    // ---------------------------------------------------------------- EQEs
    /// The next EQE (any type) is written with event type 0x3f, which docs/firmware.md
    /// §6.3 does not define; its data is unchanged (the real event is lost).
    EqeUnknownType,
    /// The next completion (0x00) or CQ error (0x04) EQE names a CQ number
    /// the model never issued.
    EqeUnknownCqn,
    /// The next SRQ event (0x12, 0x13, 0x14) names an SRQ number the model
    /// never issued.
    EqeUnknownSrqn,
    // ---------------------------------------------------- command outputs
    /// The next successful QUERY_HCA_CAP output has every `log_*` field of
    /// the general capabilities at the largest value its width holds.
    CapsHugeLogs,
    /// The next successful output of ALLOC_UAR, ALLOC_PD, CREATE_EQ,
    /// CREATE_CQ, CREATE_SRQ or CREATE_RMP reports an object number the model
    /// never issued (a UAR index beyond BAR0 for ALLOC_UAR). The real object
    /// exists under its real number; TEARDOWN_HCA destroys it.
    ObjectNumberNeverIssued,
    /// The next successful QUERY_PAGES output asks for 0x7fff_ffff pages
    /// (8 TiB), beyond any host memory.
    PageCountBeyondMemory,
    /// The next successful MANAGE_PAGES take output lists page addresses the
    /// driver never gave; the pages the model holds stay held.
    PagesNeverGiven,
    /// The next successful MANAGE_PAGES take output reports one entry more
    /// than the driver asked for; the model's pages stay held.
    PagesMoreThanRequested,
}

/// Class of structure a kind corrupts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Cqe,
    SendCqe,
    Eqe,
    Output,
}

impl HostileKind {
    /// Every kind, for exhaustive tests.
    pub const ALL: [HostileKind; 16] = [
        HostileKind::CqeUnknownOpcode,
        HostileKind::CqeWqeCounterBeyondRing,
        HostileKind::CqeByteCountBeyondBuffer,
        HostileKind::CqeUnknownQpn,
        HostileKind::CqeUnknownSrqn,
        HostileKind::SendCqeWqeCounterNotPosted,
        HostileKind::SendCqeUnknownWqeOpcode,
        HostileKind::SendCqeDuplicated,
        HostileKind::EqeUnknownType,
        HostileKind::EqeUnknownCqn,
        HostileKind::EqeUnknownSrqn,
        HostileKind::CapsHugeLogs,
        HostileKind::ObjectNumberNeverIssued,
        HostileKind::PageCountBeyondMemory,
        HostileKind::PagesNeverGiven,
        HostileKind::PagesMoreThanRequested,
    ];

    fn class(self) -> Class {
        use HostileKind::*;
        match self {
            CqeUnknownOpcode
            | CqeWqeCounterBeyondRing
            | CqeByteCountBeyondBuffer
            | CqeUnknownQpn
            | CqeUnknownSrqn => Class::Cqe,
            SendCqeWqeCounterNotPosted | SendCqeUnknownWqeOpcode | SendCqeDuplicated => {
                Class::SendCqe
            }
            EqeUnknownType | EqeUnknownCqn | EqeUnknownSrqn => Class::Eqe,
            _ => Class::Output,
        }
    }
}

/// The undefined CQE opcode written by [`HostileKind::CqeUnknownOpcode`].
pub const HOSTILE_CQE_OPCODE: u8 = 0x7;
/// The send opcode written by [`HostileKind::SendCqeUnknownWqeOpcode`].
pub const HOSTILE_WQE_OPCODE: u8 = 0x7f;
/// The undefined event type written by [`HostileKind::EqeUnknownType`].
pub const HOSTILE_EVENT_TYPE: u8 = 0x3f;
/// The QP number written by [`HostileKind::CqeUnknownQpn`].
pub const HOSTILE_QPN: u32 = 0x00ff_fffe;
/// The page count written by [`HostileKind::PageCountBeyondMemory`].
pub const HOSTILE_PAGE_COUNT: i32 = 0x7fff_ffff;

const M24: u32 = 0x00ff_ffff;

/// Page state saved before a MANAGE_PAGES take that will be corrupted.
pub(crate) struct PagesSnapshot {
    held: std::collections::BTreeSet<u64>,
    boot: i32,
    init: i32,
    regular: i32,
}

impl State {
    /// Remove and return the first armed request of a class that `pick`
    /// accepts.
    fn take_hostile(
        &mut self,
        class: Class,
        pick: impl Fn(HostileKind) -> bool,
    ) -> Option<HostileKind> {
        let i = self
            .inj
            .hostile
            .iter()
            .position(|k| k.class() == class && pick(*k))?;
        Some(self.inj.hostile.remove(i))
    }

    /// Hostile requests still armed.
    pub(crate) fn hostile_pending(&self) -> usize {
        self.inj.hostile.len()
    }

    /// A 24-bit number not in `used` (and not 0), derived from `seed`.
    fn never_issued(seed: u32, used: impl Fn(u32) -> bool) -> u32 {
        let mut n = (seed ^ 0x00a5_5a5a) & M24;
        while n == 0 || used(n) {
            n = (n.wrapping_mul(2_654_435_761) ^ 0x5a) & M24;
        }
        n
    }

    fn never_issued_srqn(&self) -> u32 {
        State::never_issued(self.objects.srqn_base().wrapping_add(0x7_7777), |n| {
            self.objects.srqs.contains_key(&n)
        })
    }

    fn never_issued_cqn(&self) -> u32 {
        State::never_issued(self.objects.cqn_base().wrapping_add(0x3_3333), |n| {
            self.objects.cqs.contains_key(&n)
        })
    }

    /// Corrupt a CQE image about to be written (64-byte CQE, `op_own` last).
    pub(crate) fn hostile_cqe(&mut self, cqe: &mut [u8; 64]) {
        let Some(k) = self.take_hostile(Class::Cqe, |_| true) else {
            return;
        };
        // Every value below fits its field, so `set` cannot fail.
        let _ = match k {
            HostileKind::CqeUnknownOpcode => cqe64::opcode.set(cqe, HOSTILE_CQE_OPCODE),
            HostileKind::CqeWqeCounterBeyondRing => cqe64::wqe_counter.set(cqe, 0xffff),
            HostileKind::CqeByteCountBeyondBuffer => cqe64::byte_cnt.set(cqe, u32::MAX),
            HostileKind::CqeUnknownQpn => cqe64::qpn.set(cqe, HOSTILE_QPN),
            HostileKind::CqeUnknownSrqn => {
                let n = self.never_issued_srqn();
                cqe64::srqn.set(cqe, n)
            }
            _ => Ok(()),
        };
    }

    /// Corrupt a requester CQE (opcode REQ or REQ_ERR) about to be written;
    /// true if it must be written twice.
    pub(crate) fn hostile_send_cqe(&mut self, cqe: &mut [u8; 64]) -> bool {
        let op = cqe64::opcode.get(cqe);
        if op != CqeOpcode::REQ.0 && op != CqeOpcode::REQ_ERR.0 {
            return false;
        }
        let Some(k) = self.take_hostile(Class::SendCqe, |_| true) else {
            return false;
        };
        match k {
            HostileKind::SendCqeWqeCounterNotPosted => {
                let c = cqe64::wqe_counter.get(cqe) ^ 0x8000;
                let _ = cqe64::wqe_counter.set(cqe, c);
            }
            HostileKind::SendCqeUnknownWqeOpcode => {
                let _ = cqe64::sop_opcode.set(cqe, HOSTILE_WQE_OPCODE);
            }
            HostileKind::SendCqeDuplicated => return true,
            _ => {}
        }
        false
    }

    /// Corrupt an EQE image about to be written.
    pub(crate) fn hostile_eqe(&mut self, img: &mut [u8; 64]) {
        let t = eqe::event_type.get(img);
        let is_cq = t == EventType::COMP.0 || t == EventType::CQ_ERROR.0;
        let is_srq = t == EventType::SRQ_CATAS_ERROR.0
            || t == EventType::SRQ_LAST_WQE.0
            || t == EventType::SRQ_RQ_LIMIT.0;
        let Some(k) = self.take_hostile(Class::Eqe, |k| match k {
            HostileKind::EqeUnknownType => true,
            HostileKind::EqeUnknownCqn => is_cq,
            HostileKind::EqeUnknownSrqn => is_srq,
            _ => false,
        }) else {
            return;
        };
        let cqn = self.never_issued_cqn();
        let srqn = self.never_issued_srqn();
        let d = eqe::event_data.get_mut(img);
        let _ = match k {
            HostileKind::EqeUnknownType => eqe::event_type.set(img, HOSTILE_EVENT_TYPE),
            HostileKind::EqeUnknownCqn if t == EventType::COMP.0 => {
                comp_event::cq_number.set(d, cqn)
            }
            HostileKind::EqeUnknownCqn => cq_error::cqn.set(d, cqn),
            HostileKind::EqeUnknownSrqn => qp_events::qpn_rqn_sqn.set(d, srqn),
            _ => Ok(()),
        };
    }

    /// Before a command runs: if a page-take corruption will apply, the page
    /// state to restore afterwards.
    pub(crate) fn hostile_pages_snapshot(&self, op: Opcode, op_mod: u16) -> Option<PagesSnapshot> {
        let take =
            op == Opcode::MANAGE_PAGES && op_mod == mlx5_regs::consts::op_mod::MANAGE_PAGES_TAKE;
        let armed = self.inj.hostile.iter().any(|k| {
            matches!(
                k,
                HostileKind::PagesNeverGiven | HostileKind::PagesMoreThanRequested
            )
        });
        (take && armed).then(|| PagesSnapshot {
            held: self.pages.held.clone(),
            boot: self.pages.boot_needed,
            init: self.pages.init_needed,
            regular: self.pages.regular_needed,
        })
    }

    /// Corrupt a successful command output.
    pub(crate) fn hostile_output(
        &mut self,
        op: Opcode,
        op_mod: u16,
        inp: &[u8],
        out: &mut [u8],
        snapshot: Option<PagesSnapshot>,
    ) {
        let creates = [
            Opcode::ALLOC_UAR,
            Opcode::ALLOC_PD,
            Opcode::CREATE_EQ,
            Opcode::CREATE_CQ,
            Opcode::CREATE_SRQ,
            Opcode::CREATE_RMP,
        ];
        let take =
            op == Opcode::MANAGE_PAGES && op_mod == mlx5_regs::consts::op_mod::MANAGE_PAGES_TAKE;
        let Some(k) = self.take_hostile(Class::Output, |k| match k {
            HostileKind::CapsHugeLogs => op == Opcode::QUERY_HCA_CAP,
            HostileKind::ObjectNumberNeverIssued => creates.contains(&op),
            HostileKind::PageCountBeyondMemory => op == Opcode::QUERY_PAGES,
            HostileKind::PagesNeverGiven | HostileKind::PagesMoreThanRequested => {
                take && manage_pages_out::output_num_entries.get(out) > 0
            }
            _ => false,
        }) else {
            return;
        };
        match k {
            HostileKind::CapsHugeLogs => {
                let blk = query_hca_cap_out::capability.get_mut(out);
                for f in cmd_hca_cap::LAYOUT.fields {
                    if f.name.starts_with("log_") && matches!(f.kind, Kind::Scalar) && f.width > 1 {
                        let max = (1u64 << f.width) - 1;
                        let _ = mlx5_regs::field::write_bits(blk, f.name, f.bit_off, f.width, max);
                    }
                }
            }
            HostileKind::ObjectNumberNeverIssued => {
                let _ = match op {
                    Opcode::ALLOC_UAR => {
                        alloc_uar_out::uar.set(out, (1u32 << self.caps.uar_sz) + 3)
                    }
                    Opcode::ALLOC_PD => {
                        let pd = State::never_issued(self.objects.pd_cursor() ^ 0x1234, |n| {
                            self.objects.pds.contains(&n)
                        });
                        alloc_pd_out::pd.set(out, pd)
                    }
                    Opcode::CREATE_EQ => {
                        let eqn = (0..=u8::MAX)
                            .rev()
                            .find(|n| !self.objects.eqs.contains_key(n))
                            .unwrap_or(0);
                        create_eq_out::eq_number.set(out, eqn)
                    }
                    Opcode::CREATE_CQ => create_cq_out::cqn.set(out, self.never_issued_cqn()),
                    Opcode::CREATE_SRQ => create_srq_out::srqn.set(out, self.never_issued_srqn()),
                    _ => create_rmp_out::rmpn.set(out, self.never_issued_srqn()),
                };
            }
            HostileKind::PageCountBeyondMemory => {
                let _ = query_pages_out::num_pages.set(out, HOSTILE_PAGE_COUNT as u32);
            }
            HostileKind::PagesNeverGiven | HostileKind::PagesMoreThanRequested => {
                // Nothing was returned: the pages stay held and the page
                // accounting is as before the take.
                if let Some(s) = snapshot {
                    self.pages.held = s.held;
                    self.pages.boot_needed = s.boot;
                    self.pages.init_needed = s.init;
                    self.pages.regular_needed = s.regular;
                }
                let n = manage_pages_out::output_num_entries.get(out) as usize;
                if k == HostileKind::PagesNeverGiven {
                    for i in 0..n {
                        // Page-aligned, never mapped (the top of the IOVA space).
                        let a = 0x00ff_ffff_f000_0000u64 + (i as u64) * 0x1000;
                        let _ = manage_pages_out::pas.set(out, i, a);
                    }
                } else {
                    let asked = manage_pages_in::input_num_entries.get(inp);
                    let _ = manage_pages_out::output_num_entries.set(out, asked.saturating_add(1));
                }
            }
            _ => {}
        }
    }
}
