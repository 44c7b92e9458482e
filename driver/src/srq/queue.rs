//! The SRQ object: create (RMP at ISSI 1, SRQ at ISSI 0), post, complete,
//! arm the limit, query, destroy (docs/firmware.md §9).

use mlx5_hal::Hal;

use super::cmd::{self, SrqParams, SrqState};
use super::ring::{holds, CompleteError, PostError, Sge, SrqCompleter, SrqGeometry, SrqRing};
use crate::cmd::MAX_CMD_LEN;
use crate::cq::{Cq, Cqe, CqeStatus};
use crate::error::{DestroyError, Error};
use crate::hca::Hca;
use crate::pagelist::MAX_CONTEXT_PAGES;
use crate::stats::CmdObserver;
use mlx5_regs::CqeOpcode;

/// One receive work request: the caller's id and its scatter list.
#[derive(Debug, Clone, Copy)]
pub struct RecvRequest<'a> {
    /// Returned with the completion.
    pub wr_id: u64,
    /// Where the message goes.
    pub sges: &'a [Sge],
}

/// A post that stopped at request `index`; the requests before it are posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostFailure {
    /// Index in the list of the first request not posted.
    pub index: usize,
    /// Why.
    pub error: PostError,
}

/// What arming the limit did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitArm {
    /// Armed: the SRQ_RQ_LIMIT event comes through the EQ once the number
    /// of posted-but-unconsumed WQEs drops below the limit.
    Armed,
    /// The limit was 0: disarmed.
    Disarmed,
    /// The limit was above the WQEs outstanding and firmware did not fire at
    /// once: the driver disarmed firmware and the caller must deliver the
    /// limit event itself (the verbs documentation promises it).
    RaiseNow,
}

/// A receive completion matched to its work request by
/// [`Srq::complete_cqe`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvCompletion {
    /// The `wr_id` the request was posted with.
    pub wr_id: u64,
    /// Success or error, as the CQE reports it.
    pub status: CqeStatus,
    /// Bytes received (checked against the posted buffers on success).
    pub byte_len: u32,
    /// The receiving QP named by the CQE (24 bits; the SRQ does not know
    /// its QPs, so the caller checks it against its own if it cares).
    pub qpn: u32,
    /// The sending QP (`flags_rqpn`) as the CQE reports it.
    pub src_qpn: u32,
    /// The SRQ (RMP) number, checked to be this SRQ's.
    pub srqn: u32,
    /// The SRQ WQE the message consumed, now back on the free list.
    pub wqe_index: u16,
    /// Immediate data (network order as in the CQE) of SEND_IMM and
    /// RDMA_WRITE_IMM; 0 otherwise.
    pub imm: u32,
    /// The responder opcode.
    pub opcode: CqeOpcode,
}

impl RecvCompletion {
    /// The typed error of an error completion, `None` on success.
    pub fn error(&self) -> Option<crate::cq::CqeError> {
        match self.status {
            CqeStatus::Success => None,
            CqeStatus::Error { syndrome, .. } => Some(crate::cq::CqeError::from_syndrome(syndrome)),
        }
    }
}

/// Why [`Srq::complete_cqe`] refused a CQE (the device is not trusted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BadRecvCqe {
    /// The CQE names another QP than the one it was given to
    /// ([`crate::qp::Qp::complete_recv`]).
    WrongQp {
        /// QP number in the CQE.
        qpn: u32,
    },
    /// The CQE names another SRQ number.
    WrongSrq {
        /// SRQ number in the CQE.
        srqn: u32,
    },
    /// Not a receive (responder) opcode, or an opcode docs/firmware.md §7.2 does not
    /// define.
    UnexpectedOpcode {
        /// The 4-bit opcode.
        opcode: u8,
    },
    /// `wqe_counter` names no posted WQE.
    Wqe(CompleteError),
    /// More bytes than the WQE's buffers hold; the WQE was freed.
    ByteCountBeyondBuffer {
        /// The request's `wr_id`.
        wr_id: u64,
        /// Bytes the CQE claims.
        byte_len: u32,
        /// Bytes the posted scatter list holds.
        capacity: u64,
    },
}

/// A shared receive queue owned by the caller.
pub struct Srq<H: Hal> {
    srqn: u32,
    rmp: bool,
    cqn: Option<u32>,
    ring: SrqRing<H>,
    rejected: u64,
    users: u32,
}

impl<H: Hal> Srq<H> {
    /// The SRQ number (the RMP number at ISSI 1); receive CQEs carry it.
    pub fn srqn(&self) -> u32 {
        self.srqn
    }

    /// True when the SRQ is an RMP (ISSI 1).
    pub fn is_rmp(&self) -> bool {
        self.rmp
    }

    /// The CQ named in the SRQ context (ISSI 0 only).
    pub fn cqn(&self) -> Option<u32> {
        self.cqn
    }

    /// Usable WQEs after rounding (`2^k − 1`).
    pub fn max_wr(&self) -> usize {
        self.ring.geometry().max_wr
    }

    /// Scatter entries per WQE after rounding the stride.
    pub fn max_sge(&self) -> usize {
        self.ring.geometry().max_sge
    }

    /// WQEs posted and not yet completed.
    pub fn outstanding(&self) -> usize {
        self.ring.outstanding()
    }

    /// Post a list of receive requests; the doorbell record is written once
    /// for all that were posted. On the first failure (full: `ENOMEM`, too
    /// many scatter entries: `EINVAL`) the requests before it stay posted and
    /// the failure names the request.
    /// One request has its own path with no loop to set up
    /// (the ring's single post, then its doorbell).
    #[inline(always)]
    pub fn post(&mut self, reqs: &[RecvRequest<'_>]) -> Result<(), PostFailure> {
        if let [r] = reqs {
            self.ring
                .post(r.wr_id, r.sges)
                .map_err(|error| PostFailure { index: 0, error })?;
            self.ring.ring_doorbell();
            return Ok(());
        }
        self.ring
            .post_list(reqs.iter().map(|r| (r.wr_id, r.sges)))
            .map_err(|(index, error)| PostFailure { index, error })
    }

    /// Return the WQE of a receive completion to the free list and get its
    /// `wr_id`. A WQE the SRQ never posted is refused (untrusted device).
    pub fn complete(&mut self, wqe_counter: u16) -> Result<u64, CompleteError> {
        self.ring.complete(wqe_counter)
    }

    /// Match a whole receive CQE to this SRQ, treating every field the
    /// device wrote as untrusted, and return the WQE to the free list:
    ///
    /// * the CQE must name this SRQ ([`BadRecvCqe::WrongSrq`]) and carry a
    ///   responder opcode ([`BadRecvCqe::UnexpectedOpcode`]); nothing changes
    ///   otherwise;
    /// * `wqe_counter` must be a posted WQE ([`BadRecvCqe::Wqe`]);
    /// * a successful SEND (with or without immediate or invalidate) must
    ///   fit the buffers posted with that WQE
    ///   ([`BadRecvCqe::ByteCountBeyondBuffer`]): the device consumed the
    ///   WQE, so it is freed and its `wr_id` is in the error, for the caller
    ///   to complete the request with an error instead of reading past its
    ///   buffer.
    ///
    /// Every refusal is counted in [`Srq::rejected_cqes`].
    #[inline(always)]
    pub fn complete_cqe(&mut self, cqe: &Cqe) -> Result<RecvCompletion, BadRecvCqe> {
        let r = self.match_cqe(cqe);
        if r.is_err() {
            self.rejected = self.rejected.saturating_add(1);
        }
        r
    }

    #[inline(always)]
    fn match_cqe(&mut self, cqe: &Cqe) -> Result<RecvCompletion, BadRecvCqe> {
        if cqe.srqn != self.srqn {
            return Err(BadRecvCqe::WrongSrq { srqn: cqe.srqn });
        }
        let imm = match cqe.opcode {
            CqeOpcode::RESP_SEND_IMM | CqeOpcode::RESP_WR_IMM => cqe.imm,
            CqeOpcode::RESP_SEND | CqeOpcode::RESP_SEND_INV | CqeOpcode::RESP_ERR => 0,
            _ => {
                return Err(BadRecvCqe::UnexpectedOpcode {
                    opcode: cqe.opcode.0,
                })
            }
        };
        let idx = cqe.wqe_counter;
        // RDMA WRITE with immediate consumes a WQE but scatters nothing into
        // it: its byte count is the length written at the remote address
        // (Linux `handle_responder`, IB_WC_RECV_RDMA_WITH_IMM), unrelated to
        // the WQE's buffers.
        let scattered = cqe.opcode != CqeOpcode::RESP_WR_IMM;
        let check_len = cqe.status == CqeStatus::Success && scattered;
        let wr_id = self.take_wqe(idx, cqe.byte_len, check_len)?;
        Ok(RecvCompletion {
            wr_id,
            status: cqe.status,
            byte_len: cqe.byte_len,
            qpn: cqe.qpn,
            src_qpn: cqe.src_qpn,
            srqn: cqe.srqn,
            wqe_index: idx,
            imm,
            opcode: cqe.opcode,
        })
    }

    /// [`Srq::complete_cqe`] for a successful receive whose SRQ number and
    /// opcode the caller has already matched to this SRQ (the verbs
    /// facade's QP route): the checks left, the WQE posted and, when the
    /// opcode scatters (`scattered`: all but RDMA WRITE with immediate),
    /// the byte count within its buffers, refused and counted as there.
    /// Returns the `wr_id`.
    #[inline(always)]
    pub(crate) fn complete_matched(
        &mut self,
        wqe_counter: u16,
        byte_len: u32,
        scattered: bool,
    ) -> Result<u64, BadRecvCqe> {
        let r = self.take_wqe(wqe_counter, byte_len, scattered);
        if r.is_err() {
            self.rejected = self.rejected.saturating_add(1);
        }
        r
    }

    /// [`SrqRing::completer`] on this SRQ's ring: completions the caller
    /// has matched, taken only where they succeed
    /// ([`SrqCompleter::try_complete`]), so nothing is refused or counted
    /// here.
    #[inline(always)]
    pub(crate) fn completer(&mut self) -> SrqCompleter<'_> {
        self.ring.completer()
    }

    /// [`SrqRing::try_complete`] on this SRQ's ring: one completion the
    /// caller has matched, taken only if it succeeds, so nothing is refused
    /// or counted here.
    #[inline(always)]
    pub(crate) fn try_complete(
        &mut self,
        wqe_counter: u16,
        byte_len: u32,
        check_len: bool,
    ) -> Option<u64> {
        self.ring.try_complete(wqe_counter, byte_len, check_len)
    }

    /// Free the WQE `wqe_counter` names (posted, or refused) and, if
    /// `check_len`, check `byte_len` against its buffers; its `wr_id`.
    #[inline(always)]
    fn take_wqe(
        &mut self,
        wqe_counter: u16,
        byte_len: u32,
        check_len: bool,
    ) -> Result<u64, BadRecvCqe> {
        // The capacity was recorded when the WQE was posted: the bytes of
        // its scatter list as the device reads them, up to the terminator.
        let done = self
            .ring
            .complete_wqe(wqe_counter)
            .map_err(BadRecvCqe::Wqe)?;
        if !holds(done.capacity, byte_len, check_len) {
            return Err(BadRecvCqe::ByteCountBeyondBuffer {
                wr_id: done.wr_id,
                byte_len,
                capacity: done.capacity,
            });
        }
        Ok(done.wr_id)
    }

    /// Receive CQEs refused by [`Srq::complete_cqe`] so far.
    pub fn rejected_cqes(&self) -> u64 {
        self.rejected
    }

    /// The ring (geometry, doorbell record address); outside the crate
    /// through [`crate::unstable::srq::ring`].
    pub(crate) fn ring(&self) -> &SrqRing<H> {
        &self.ring
    }

    /// Queue pairs attached to this SRQ; destroy is refused while this is
    /// not zero.
    pub fn users(&self) -> u32 {
        self.users
    }

    pub(crate) fn add_user(&mut self) {
        self.users += 1;
    }

    pub(crate) fn remove_user(&mut self) {
        self.users = self.users.saturating_sub(1);
    }
}

impl<H: Hal, O: CmdObserver, const CE: usize, const AE: usize> Hca<H, O, CE, AE> {
    /// Create an SRQ for at least `max_wr` receive requests of up to
    /// `max_sge` scatter entries each: an RMP when the device runs ISSI 1, a
    /// CREATE_SRQ SRQ at ISSI 0 (docs/firmware.md §9.1). At ISSI 0 the context names a
    /// CQ (`cq`, required there, as Linux always names one); that CQ then
    /// counts the SRQ as a user. The limit starts disarmed.
    ///
    /// Limits (docs/firmware.md §9.5): `max_wr` below `2^log_max_srq_sz`, `max_sge` up to
    /// `max_wqe_sz_rq / 16 − 1`; otherwise [`Error::InvalidArgument`].
    pub fn create_srq(
        &self,
        max_wr: u32,
        max_sge: u32,
        cq: Option<&mut Cq<H>>,
    ) -> Result<Srq<H>, Error> {
        let caps = self.caps();
        // `checked_shl`: the log comes from the device (validated at
        // bring-up, but never trusted to be below 64 here).
        let limit = 1u64
            .checked_shl(caps.log_max_srq_sz as u32)
            .unwrap_or(u64::MAX);
        if max_wr == 0 || (max_wr as u64) >= limit {
            return Err(Error::InvalidArgument(
                "SRQ max_wr outside 1..2^log_max_srq_sz",
            ));
        }
        if max_sge as usize > (caps.max_wqe_sz_rq as usize / 16).saturating_sub(1) {
            return Err(Error::InvalidArgument(
                "SRQ max_sge above max_wqe_sz_rq/16 - 1",
            ));
        }
        let geo = SrqGeometry::for_request(max_wr as usize, max_sge as usize)
            .ok_or(Error::InvalidArgument("SRQ geometry out of range"))?;
        if geo.log_wqe_cnt > caps.log_max_srq_sz || geo.stride() > caps.max_wqe_sz_rq as usize {
            return Err(Error::InvalidArgument(
                "SRQ after rounding exceeds the device limits",
            ));
        }
        let rmp = self.issi() >= 1;
        let cqn = match (rmp, &cq) {
            (true, _) => None,
            (false, Some(c)) => Some(c.cqn()),
            (false, None) => return Err(Error::InvalidArgument("an ISSI 0 SRQ names a CQ")),
        };
        let (mut ring, pages) = SrqRing::new_paged(self.hal(), geo, MAX_CONTEXT_PAGES)?;
        ring.set_terminator(self.srq_terminator());
        let params = SrqParams {
            log_wqe_cnt: geo.log_wqe_cnt,
            log_stride: geo.log_stride,
            pd: self.pd(),
            dbr_addr: ring.dbr_iova(),
            pages,
            cqn: cqn.unwrap_or(0),
        };
        let mut input = [0u8; MAX_CMD_LEN];
        let srqn = if rmp {
            let len = cmd::create_rmp(&mut input, &params)?;
            let mut out = [0u8; cmd::CREATE_RMP_OUT];
            self.exec(&input[..len], &mut out)?;
            cmd::parse_create_rmp(&out)
        } else {
            let len = cmd::create_srq(&mut input, &params)?;
            let mut out = [0u8; cmd::CREATE_SRQ_OUT];
            self.exec(&input[..len], &mut out)?;
            cmd::parse_create_srq(&out)
        };
        if let Some(c) = cq {
            if !rmp {
                c.add_user();
            }
        }
        Ok(Srq {
            srqn,
            rmp,
            cqn,
            ring,
            rejected: 0,
            users: 0,
        })
    }

    fn set_srq_lwm(&self, srq: &Srq<H>, lwm: u16) -> Result<(), Error> {
        if srq.rmp {
            let input = cmd::arm_rmp(srq.srqn, lwm)?;
            let mut out = [0u8; cmd::MODIFY_RMP_OUT];
            self.exec(&input, &mut out)
        } else {
            let input = cmd::arm_rq(srq.srqn, lwm)?;
            let mut out = [0u8; cmd::ARM_RQ_OUT];
            self.exec(&input, &mut out)
        }
    }

    /// Arm the SRQ limit (MODIFY_RMP at ISSI 1, ARM_RQ at ISSI 0; docs/firmware.md
    /// §9.3, §9.6). `0` disarms; a limit above [`Srq::max_wr`] is refused.
    /// One-shot: after the event the limit reads 0 until armed again.
    ///
    /// When the limit is above the WQEs outstanding, the event is due at
    /// once. Firmware raises it itself (its count of unconsumed WQEs is never
    /// above the driver's); if it did not — the limit still reads back
    /// armed — the driver disarms it and returns [`LimitArm::RaiseNow`].
    /// The event is delivered exactly once either way, even when firmware
    /// raises it late, between the query and the disarm: the driver watches
    /// the SRQ's limit events from the arm to after the disarm (when
    /// firmware can raise no more) and returns [`LimitArm::Armed`] if one
    /// came. (With several threads consuming events at once, a firmware
    /// event taken by another thread still counts: the watch is on
    /// dispatch, not on the queue.)
    pub fn arm_srq_limit(&self, srq: &mut Srq<H>, limit: u32) -> Result<LimitArm, Error> {
        if limit as usize > srq.max_wr() {
            return Err(Error::InvalidArgument("SRQ limit above the SRQ's capacity"));
        }
        if limit == 0 {
            self.set_srq_lwm(srq, 0)?;
            return Ok(LimitArm::Disarmed);
        }
        let srqn = srq.srqn;
        self.watch_srq_limit(srqn)?;
        let r = self.arm_and_check(srq, limit);
        let fired = self.unwatch_srq_limit(srqn);
        match r? {
            Some(a) => Ok(a),
            // Disarmed by the driver: firmware can raise nothing more. Did it
            // raise the event after the query anyway?
            None if fired => Ok(LimitArm::Armed),
            None => Ok(LimitArm::RaiseNow),
        }
    }

    /// Arm, and if the event is due at once and firmware has not raised it,
    /// disarm (`None`).
    fn arm_and_check(&self, srq: &mut Srq<H>, limit: u32) -> Result<Option<LimitArm>, Error> {
        self.set_srq_lwm(srq, limit as u16)?;
        if srq.outstanding() >= limit as usize {
            return Ok(Some(LimitArm::Armed));
        }
        let state = self.query_srq(srq)?;
        if state.lwm == 0 {
            // Firmware fired; its SRQ_RQ_LIMIT EQE is on the async EQ.
            return Ok(Some(LimitArm::Armed));
        }
        self.set_srq_lwm(srq, 0)?;
        Ok(None)
    }

    /// [`Srq::post`] on a device that may have died: once the HCA is dead
    /// (fatal health) nothing is posted and the first request fails with
    /// [`PostError::DeviceDead`] (`EIO`; Linux `mlx5_ib_post_srq_recv`:
    /// `*bad_wr = wr; return -EIO`). The object-level `Srq::post` cannot
    /// know the device's state.
    #[inline(always)]
    pub fn post_srq_recv(
        &self,
        srq: &mut Srq<H>,
        reqs: &[RecvRequest<'_>],
    ) -> Result<(), PostFailure> {
        if self.is_dead() && !reqs.is_empty() {
            return Err(PostFailure {
                index: 0,
                error: PostError::DeviceDead,
            });
        }
        srq.post(reqs)
    }

    /// Query the SRQ context: state, current limit (0 when disarmed or after
    /// the event), size.
    pub fn query_srq(&self, srq: &Srq<H>) -> Result<SrqState, Error> {
        if srq.rmp {
            let input = cmd::query_rmp(srq.srqn)?;
            let mut out = [0u8; cmd::QUERY_RMP_OUT];
            self.exec(&input, &mut out)?;
            Ok(cmd::parse_query_rmp(&out))
        } else {
            let input = cmd::query_srq(srq.srqn)?;
            let mut out = [0u8; cmd::QUERY_SRQ_OUT];
            self.exec(&input, &mut out)?;
            Ok(cmd::parse_query_srq(&out))
        }
    }

    /// Destroy an SRQ. At ISSI 0 pass the CQ it names, which stops counting
    /// it as a user. Refused with [`Error::Busy`] before any command is sent
    /// while a queue pair is attached to it. On failure the SRQ is handed
    /// back unchanged inside the [`DestroyError`].
    // No heap to box into: handing the object back on failure is the point.
    #[allow(clippy::result_large_err)]
    pub fn destroy_srq(
        &self,
        srq: Srq<H>,
        cq: Option<&mut Cq<H>>,
    ) -> Result<(), DestroyError<Srq<H>>> {
        if srq.users > 0 {
            return Err(DestroyError::new(
                srq,
                Error::Busy("SRQ still used by a QP"),
            ));
        }
        if let Some(cqn) = srq.cqn {
            if cq.as_ref().map(|c| c.cqn()) != Some(cqn) {
                return Err(DestroyError::new(
                    srq,
                    Error::InvalidArgument("pass the CQ the ISSI 0 SRQ names"),
                ));
            }
        }
        let r = if srq.rmp {
            cmd::destroy_rmp(srq.srqn)
                .map_err(Error::from)
                .and_then(|input| {
                    let mut out = [0u8; cmd::DESTROY_RMP_OUT];
                    self.exec(&input, &mut out)
                })
        } else {
            cmd::destroy_srq(srq.srqn)
                .map_err(Error::from)
                .and_then(|input| {
                    let mut out = [0u8; cmd::DESTROY_SRQ_OUT];
                    self.exec(&input, &mut out)
                })
        };
        match r {
            Ok(()) => {
                self.forget_events(crate::hca::Gone::Srq(srq.srqn));
                if srq.cqn.is_some() {
                    if let Some(c) = cq {
                        c.remove_user();
                    }
                }
                Ok(())
            }
            Err(e) => Err(DestroyError::new(srq, e)),
        }
    }
}
