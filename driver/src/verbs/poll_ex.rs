//! The lazy extended-CQ API: `ibv_start_poll` / `ibv_next_poll` /
//! `ibv_end_poll` and the `ibv_wc_read_*` accessors of `ibv_cq_ex`. Each
//! CQE is consumed by the same step as [`Verbs::poll_cq`]'s
//! ([`super::poll`]'s `Matcher::step`, as rdma-core's `mlx5_poll_one`
//! serves both APIs), so a completion reads the same through either. A
//! step keeps what the device is not trusted with, checked (`wr_id`,
//! status, opcode, byte count, QP and SRQ); the fields nothing checks
//! (source QP, SL, GRH, SLID, path bits, timestamp) are read from the CQE
//! only when a `read_*` asks, as libmlx5's `ibv_cq_ex` readers do, the
//! SLID, path bits and timestamp only when the CQ's `wc_flags` has them.
//! The pass keeps its own consumer index: the CQEs it took stay software's
//! until [`CqPoll::end_poll`] publishes it.

use mlx5_hal::Hal;

use super::poll::{Matcher, RecvRun};
use super::{CqHandle, CqInitAttrEx, Errno, Verbs, WcOpcode, WcStatus, WorkCompletion};
use crate::cq::{Cq, CqeView};
use crate::stats::CmdObserver;

/// `IBV_WC_GRH`: the receive carried a GRH (its first 40 bytes in the
/// receive buffer).
pub const WC_GRH: u32 = 1 << 0;
/// `IBV_WC_WITH_IMM`: the completion carries immediate data.
pub const WC_WITH_IMM: u32 = 1 << 1;
/// `IBV_WC_WITH_INV`: the completion carries an invalidated rkey.
pub const WC_WITH_INV: u32 = 1 << 3;

/// One pass over a CQ with the lazy extended-CQ API, borrowing the
/// context for the loop: made by [`Verbs::start_poll`] holding the first
/// completion, moved on by [`CqPoll::next_poll`], ended by
/// [`CqPoll::end_poll`] (or by dropping it: the consumer index reaches the
/// device either way, once per pass, as `ibv_end_poll` publishes it).
///
/// ```no_run
/// # use mlx5_driver::verbs::{CqHandle, Errno, Verbs, WcStatus};
/// # fn demo<H: mlx5_hal::Hal>(ctx: &mut Verbs<H>, cq: CqHandle) -> Result<(), Errno> {
/// match ctx.start_poll(cq) {
///     Ok(mut p) => loop {
///         if p.status() == WcStatus::Success {
///             let _ = (p.wr_id(), p.read_byte_len(), p.read_src_qp());
///         }
///         if p.next_poll().is_err() {
///             break p.end_poll(); // ENOENT: nothing more for now
///         }
///     },
///     Err(Errno::ENOENT) => {} // empty: no end_poll, as with ibv_start_poll
///     Err(e) => return Err(e),
/// }
/// # Ok(()) }
/// ```
pub struct CqPoll<'a, H: Hal, const QPS: usize, const SQ_WQEBBS: usize, const SRQS: usize> {
    cq: &'a mut Cq<H>,
    /// The pass's consumer index: past the current completion's CQE.
    ci: u32,
    route: &'a mut RecvRun,
    m: Matcher<'a, H, QPS, SQ_WQEBBS, SRQS>,
    wc_flags: u64,
    wc: WorkCompletion,
}

impl<
        H: Hal,
        O: CmdObserver,
        const CQS: usize,
        const SRQS: usize,
        const EVENTS: usize,
        const QPS: usize,
        const SQ_WQEBBS: usize,
    > Verbs<H, O, CQS, SRQS, EVENTS, QPS, SQ_WQEBBS>
{
    /// `ibv_start_poll`: the first completion of a lazy pass over `cq`.
    /// `ENOENT` when the CQ is empty (then there is nothing to end),
    /// `EINVAL` for a stale handle. The completion is matched and checked
    /// as [`Verbs::poll_cq`] matches it (a CQE the facade cannot match is
    /// a `GeneralErr` completion with
    /// [`WorkCompletion::VENDOR_ERR_UNMATCHED`]).
    #[inline(always)]
    pub fn start_poll(
        &mut self,
        cq: CqHandle,
    ) -> Result<CqPoll<'_, H, QPS, SQ_WQEBBS, SRQS>, Errno> {
        let (ring, route, mut m, wc_flags) = self.split_for_poll(cq).ok_or(Errno::EINVAL)?;
        let mut ci = ring.consumer_index();
        // An empty CQ: one owner-byte test. The pass is built only around
        // a completion (moving it after a step copied it whole).
        let Some(wc) = take(ring, &mut ci, route, &mut m) else {
            return Err(Errno::ENOENT);
        };
        Ok(CqPoll {
            cq: ring,
            ci,
            route,
            m,
            wc_flags,
            wc,
        })
    }
}

/// Consume the CQE at running index `ci` of `cq`, if software owns it,
/// moving `ci` past it: its completion, the CQ's routes' short way
/// ([`Matcher::lazy_route`]), else `poll_cq`'s step ([`take_general`]).
/// `None` when there is none.
#[inline(always)]
fn take<H: Hal, const QPS: usize, const W: usize, const SRQS: usize>(
    cq: &Cq<H>,
    ci: &mut u32,
    route: &mut RecvRun,
    m: &mut Matcher<'_, H, QPS, W, SRQS>,
) -> Option<WorkCompletion> {
    let v = cq.peek_at(*ci)?;
    *ci = ci.wrapping_add(1);
    Some(match m.lazy_route(&v, *route) {
        Some(wc) => wc,
        None => take_general(cq, *ci, route, m),
    })
}

/// The CQE just taken (before running index `ci`), `poll_cq`'s way
/// ([`Matcher::step`]), out of line: the short way stays small. It reads
/// the owner byte again for the opcode: software owns the CQE, and
/// whatever opcode is read goes through every check.
#[inline(never)]
fn take_general<H: Hal, const QPS: usize, const W: usize, const SRQS: usize>(
    cq: &Cq<H>,
    ci: u32,
    route: &mut RecvRun,
    m: &mut Matcher<'_, H, QPS, W, SRQS>,
) -> WorkCompletion {
    let v = cq.taken_at(ci.wrapping_sub(1));
    let mut wc = WorkCompletion::EMPTY;
    m.step(&v, route, &mut wc);
    wc
}

impl<H: Hal, const QPS: usize, const SQ_WQEBBS: usize, const SRQS: usize>
    CqPoll<'_, H, QPS, SQ_WQEBBS, SRQS>
{
    /// The current completion's CQE, in place (software's until the pass
    /// ends).
    #[inline(always)]
    fn cqe(&self) -> CqeView<'_> {
        self.cq.taken_at(self.ci.wrapping_sub(1))
    }

    /// Whether the CQ's `wc_flags` has `flag`.
    #[inline(always)]
    fn asked(&self, flag: u64) -> bool {
        self.wc_flags & flag != 0
    }

    /// `ibv_next_poll`: move to the next completion; `ENOENT` when there
    /// is none now (the pass then holds the last one still, and should be
    /// ended).
    #[inline(always)]
    pub fn next_poll(&mut self) -> Result<(), Errno> {
        let CqPoll {
            cq,
            ci,
            route,
            m,
            wc,
            ..
        } = self;
        let Some(v) = cq.peek_at(*ci) else {
            return Err(Errno::ENOENT);
        };
        *ci = ci.wrapping_add(1);
        if !m.lazy_route_into(&v, **route, wc) {
            *wc = take_general(cq, *ci, route, m);
        }
        Ok(())
    }

    /// `ibv_end_poll`: publish the consumer index (once for the whole
    /// pass) and give the context back.
    #[inline(always)]
    pub fn end_poll(self) {
        drop(self)
    }

    /// The completion as [`Verbs::poll_cq`] would have returned it, but
    /// for `slid` (0 unless the CQ's `wc_flags` asked for it) and
    /// `pkey_index` (0: the lazy API has no reader for it). The receive
    /// fields are filled here, not in the polling loop.
    #[inline(always)]
    pub fn work_completion(&self) -> WorkCompletion {
        let mut w = self.wc;
        if matches!(w.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm) {
            w.src_qp = self.read_src_qp();
            w.sl = self.read_sl();
            w.slid = self.read_slid();
            w.wc_flags = self.read_wc_flags();
        }
        w
    }

    /// `cq_ex->wr_id`.
    #[inline(always)]
    pub fn wr_id(&self) -> u64 {
        self.wc.wr_id
    }

    /// `cq_ex->status`.
    #[inline(always)]
    pub fn status(&self) -> WcStatus {
        self.wc.status
    }

    /// `ibv_wc_read_vendor_err`.
    #[inline(always)]
    pub fn read_vendor_err(&self) -> u32 {
        self.wc.vendor_err
    }

    /// `ibv_wc_read_opcode`.
    #[inline(always)]
    pub fn read_opcode(&self) -> WcOpcode {
        self.wc.opcode
    }

    /// `ibv_wc_read_byte_len`.
    #[inline(always)]
    pub fn read_byte_len(&self) -> u32 {
        self.wc.byte_len
    }

    /// `ibv_wc_read_imm_data`: the immediate data, when
    /// [`CqPoll::read_wc_flags`] has [`WC_WITH_IMM`].
    #[inline(always)]
    pub fn read_imm_data(&self) -> Option<u32> {
        self.wc.imm_data
    }

    /// `ibv_wc_read_invalidated_rkey`: when [`CqPoll::read_wc_flags`] has
    /// [`WC_WITH_INV`].
    #[inline(always)]
    pub fn read_invalidated_rkey(&self) -> Option<u32> {
        self.wc.invalidated_rkey
    }

    /// `ibv_wc_read_qp_num`: the local QP.
    #[inline(always)]
    pub fn read_qp_num(&self) -> u32 {
        self.wc.qp_num
    }

    /// The SRQ number of a receive completion.
    #[inline(always)]
    pub fn read_srq_num(&self) -> Option<u32> {
        self.wc.srq_num
    }

    /// `ibv_wc_read_src_qp`: the sender's QP number of a receive
    /// (`flags_rqpn` bits 23:0).
    #[inline(always)]
    pub fn read_src_qp(&self) -> u32 {
        self.cqe().flags_rqpn() & 0x00ff_ffff
    }

    /// `ibv_wc_read_wc_flags`: [`WC_GRH`], [`WC_WITH_IMM`],
    /// [`WC_WITH_INV`].
    #[inline(always)]
    pub fn read_wc_flags(&self) -> u32 {
        let mut f = 0;
        if self.wc.imm_data.is_some() {
            f |= WC_WITH_IMM;
        }
        if self.wc.invalidated_rkey.is_some() {
            f |= WC_WITH_INV;
        }
        // A receive's GRH type (`flags_rqpn` bits 29:28), as libmlx5 reads it.
        let receive = matches!(self.wc.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm);
        if receive && (self.cqe().flags_rqpn() >> 28) & 3 != 0 {
            f |= WC_GRH;
        }
        f
    }

    /// `ibv_wc_read_slid` (0 unless the CQ's `wc_flags` has
    /// [`CqInitAttrEx::WC_WITH_SLID`]).
    #[inline(always)]
    pub fn read_slid(&self) -> u16 {
        if self.asked(CqInitAttrEx::WC_WITH_SLID) {
            self.cqe().slid()
        } else {
            0
        }
    }

    /// `ibv_wc_read_sl`: the service level (`flags_rqpn` bits 27:24).
    #[inline(always)]
    pub fn read_sl(&self) -> u8 {
        ((self.cqe().flags_rqpn() >> 24) & 0xf) as u8
    }

    /// `ibv_wc_read_dlid_path_bits` (0 unless the CQ's `wc_flags` has
    /// [`CqInitAttrEx::WC_WITH_DLID_PATH_BITS`]).
    #[inline(always)]
    pub fn read_dlid_path_bits(&self) -> u8 {
        if self.asked(CqInitAttrEx::WC_WITH_DLID_PATH_BITS) {
            self.cqe().ml_path() & 0x7f
        } else {
            0
        }
    }

    /// `ibv_wc_read_completion_ts`: the device clock when the completion
    /// was written, in ticks of [`crate::Caps::device_frequency_khz`]
    /// (0 unless the CQ's `wc_flags` has
    /// [`CqInitAttrEx::WC_WITH_COMPLETION_TIMESTAMP`]; not defined for an
    /// error completion).
    #[inline(always)]
    pub fn read_completion_ts(&self) -> u64 {
        if self.asked(CqInitAttrEx::WC_WITH_COMPLETION_TIMESTAMP) {
            self.cqe().timestamp()
        } else {
            0
        }
    }
}

/// The pass's end: the consumer index reaches the device.
impl<H: Hal, const QPS: usize, const SQ_WQEBBS: usize, const SRQS: usize> Drop
    for CqPoll<'_, H, QPS, SQ_WQEBBS, SRQS>
{
    #[inline(always)]
    fn drop(&mut self) {
        self.cq.end_pass(self.ci);
    }
}
