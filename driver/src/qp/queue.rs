//! The QP object: its send ring, doorbell record and the caller's send
//! table; posting, requester and responder completions, QP events.
//! Commands that change it go through the [`crate::Hca`]
//! ([`super::lifecycle`]).

use mlx5_hal::{DmaRegion, Hal};
use mlx5_regs::CqeOpcode;

use super::attr::QpState;
use super::recv::{RecvRing, RqGeometry};
use super::ring::SendRing;
use super::sq_size::SqGeometry;
use super::wr::{BadSendCqe, SendError, SendOpcode, SendRequest, SendSlot, SendWork};
use crate::cq::{Cq, Cqe, CqeError, CqeStatus};
use crate::eq::{Event, QpEvent};
use crate::srq::{BadRecvCqe, PostError, PostFailure, RecvCompletion, RecvRequest, Srq};

/// The CQs and SRQ a QP is attached to, given at creation and again at
/// destruction (the driver keeps no pointers: each object counts its
/// users, and a CQ or SRQ with users is not destroyed).
///
/// * a send queue needs `send_cq`;
/// * an SRQ or the QP's own receive queue needs a receive CQ: `recv_cq`,
///   or `send_cq` for both;
/// * without either the QP has no receive queue and `recv_cq` must be
///   `None`.
pub struct QpLinks<'a, H: Hal> {
    /// CQ of the send queue's completions.
    pub send_cq: Option<&'a mut Cq<H>>,
    /// CQ of the receive completions, when it is not `send_cq`.
    pub recv_cq: Option<&'a mut Cq<H>>,
    /// The SRQ the QP receives into.
    pub srq: Option<&'a mut Srq<H>>,
}

impl<H: Hal> Default for QpLinks<'_, H> {
    fn default() -> Self {
        QpLinks {
            send_cq: None,
            recv_cq: None,
            srq: None,
        }
    }
}

/// A post that stopped at request `index` (libibverbs' `bad_wr`); the
/// requests before it are posted and their doorbell rung.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostSendFailure {
    /// Index of the first request not posted.
    pub index: usize,
    /// Why.
    pub error: SendError,
}

/// A requester completion matched to its work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendCompletion {
    /// The `wr_id` the request was posted with.
    pub wr_id: u64,
    /// The operation posted.
    pub opcode: SendOpcode,
    /// Success or error (with the syndromes).
    pub status: CqeStatus,
    /// The WQE index the CQE named.
    pub wqe_index: u16,
    /// Work requests this CQE retired: 1 plus the unsignaled ones posted
    /// before it that had no CQE of their own.
    pub retired: u32,
    /// Whether the request asked for a completion (an error or flush
    /// completes unsignaled requests too).
    pub signaled: bool,
}

impl SendCompletion {
    /// The typed error, `None` on success.
    pub fn error(&self) -> Option<CqeError> {
        match self.status {
            CqeStatus::Success => None,
            CqeStatus::Error { syndrome, .. } => Some(CqeError::from_syndrome(syndrome)),
        }
    }
}

/// An RC queue pair owned by the caller, with its send table `T` (one
/// [`SendSlot`] per WQEBB of the send ring, [`SqGeometry::wqebbs`]; a QP
/// without a send queue takes `[SendSlot; 0]`, the default).
///
/// Posting and completion matching are methods of the QP (`&mut self`, no
/// lock on the hot path); commands go through the [`crate::Hca`]. The state
/// the driver tracks follows the transitions it made, error completions
/// and error events (the device moves a QP to ERR on its own);
/// [`crate::Hca::refresh_qp_state`] reads firmware's.
pub struct Qp<H: Hal, T: AsMut<[SendSlot]> = [SendSlot; 0]> {
    pub(super) qpn: u32,
    pub(super) state: QpState,
    pub(super) sq: Option<SendRing<H>>,
    /// The QP's own receive queue (none with an SRQ).
    pub(super) rq: Option<RecvRing<H>>,
    pub(super) slots: T,
    pub(super) dbr: DmaRegion<H>,
    pub(super) hal: H,
    pub(super) cqn_snd: Option<u32>,
    /// The receive CQ and whether it was given separately (`recv_cq`)
    /// rather than shared with the send CQ.
    pub(super) cqn_rcv: Option<(u32, bool)>,
    pub(super) srqn: Option<u32>,
    pub(super) rejected: u64,
    pub(super) last_wqe_reached: bool,
    /// An unreliable datagram QP (`st` UD).
    pub(super) ud: bool,
}

impl<H: Hal, T: AsMut<[SendSlot]>> Qp<H, T> {
    /// The QP number firmware assigned.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// The state as the driver knows it.
    pub fn state(&self) -> QpState {
        self.state
    }

    /// An unreliable datagram QP ([`crate::Hca::create_ud_qp`]).
    pub fn is_ud(&self) -> bool {
        self.ud
    }

    /// The send ring's geometry (what it really holds), if it has one.
    pub fn send_geometry(&self) -> Option<SqGeometry> {
        self.sq.as_ref().map(|r| r.geometry())
    }

    /// The send ring (for tests and tools that inspect WQEs); outside the
    /// crate through [`crate::unstable::qp::send_ring`].
    pub(crate) fn send_ring(&self) -> Option<&SendRing<H>> {
        self.sq.as_ref()
    }

    /// The own receive ring's geometry, if the QP has one.
    pub fn recv_geometry(&self) -> Option<RqGeometry> {
        self.rq.as_ref().map(|r| r.geometry())
    }

    /// The own receive ring (for tests and tools that inspect it); outside
    /// the crate through [`crate::unstable::qp::recv_ring`].
    pub(crate) fn recv_ring(&self) -> Option<&RecvRing<H>> {
        self.rq.as_ref()
    }

    /// Receive work requests posted to the own receive queue and not yet
    /// completed.
    pub fn outstanding_recvs(&self) -> u32 {
        self.rq.as_ref().map_or(0, |r| r.outstanding())
    }

    /// The doorbell record (8 bytes: receive counter, send counter).
    pub fn doorbell_record(&self) -> &DmaRegion<H> {
        &self.dbr
    }

    /// Send work requests posted and not yet retired by a CQE.
    pub fn outstanding_sends(&self) -> u32 {
        self.sq.as_ref().map_or(0, |r| r.outstanding())
    }

    /// The send CQ.
    pub fn send_cqn(&self) -> Option<u32> {
        self.cqn_snd
    }

    /// The receive CQ (the own receive queue's completions, or the SRQ's
    /// for this QP, land there).
    pub fn recv_cqn(&self) -> Option<u32> {
        self.cqn_rcv.map(|(c, _)| c)
    }

    /// The SRQ (RMP) number of the receive side.
    pub fn srqn(&self) -> Option<u32> {
        self.srqn
    }

    /// The last-WQE-reached event arrived (the QP, in error, consumes no
    /// more SRQ WQEs).
    pub fn last_wqe_reached(&self) -> bool {
        self.last_wqe_reached
    }

    /// CQEs refused by [`Qp::complete_send`] / [`Qp::complete_recv`].
    pub fn rejected_cqes(&self) -> u64 {
        self.rejected
    }

    /// Post a list of send work requests with one doorbell for all that
    /// were written. Each request is checked before anything of it is
    /// written; on the first refusal (queue full, too many gather entries,
    /// inline data too large) the requests before it stay posted and the
    /// failure names the request. A QP in RESET, INIT or RTR refuses the
    /// first request.
    #[inline]
    pub fn post_send(&mut self, reqs: &[SendRequest<'_>]) -> Result<(), PostSendFailure> {
        self.post_send_iter(reqs.iter().copied())
    }

    /// [`Qp::post_send`] of requests made on the fly (no list to build
    /// first), of any [`SendWork`] type: the same checks, one doorbell for
    /// all that were written.
    #[inline(always)]
    pub fn post_send_iter<I>(&mut self, reqs: I) -> Result<(), PostSendFailure>
    where
        I: IntoIterator,
        I::Item: SendWork,
    {
        let fail = |error| Err(PostSendFailure { index: 0, error });
        if !self.state.can_post_send() {
            return fail(SendError::BadState { state: self.state });
        }
        let Some(ring) = self.sq.as_mut() else {
            return fail(SendError::NoSendQueue);
        };
        let slots = self.slots.as_mut();
        // The doorbell value of the last WQE written, 0 while none is:
        // a WQE's first 8 bytes are never 0 (its `ds` is at least 1).
        let mut ctrl = 0;
        let mut result = Ok(());
        for (index, r) in reqs.into_iter().enumerate() {
            match ring.write(slots, &r) {
                Ok(c) => ctrl = c,
                Err(error) => {
                    result = Err(PostSendFailure { index, error });
                    break;
                }
            }
        }
        if ctrl != 0 {
            ring.ring_doorbell(&self.hal, &self.dbr, ctrl);
        }
        result
    }

    /// [`Qp::post_send`] of one request: the same checks and the same WQE,
    /// without a loop. The error is the request's ([`PostSendFailure`]
    /// with index 0 in the list form).
    #[inline(always)]
    pub fn post_send_one<R: SendWork + ?Sized>(&mut self, r: &R) -> Result<(), SendError> {
        if !self.state.can_post_send() {
            return Err(SendError::BadState { state: self.state });
        }
        let Some(ring) = self.sq.as_mut() else {
            return Err(SendError::NoSendQueue);
        };
        let ctrl = ring.write(self.slots.as_mut(), r)?;
        ring.ring_doorbell(&self.hal, &self.dbr, ctrl);
        Ok(())
    }

    /// Refuse send work requests with more than `max` gather entries
    /// ([`SendRing::limit_sges`]); without a send queue nothing changes.
    pub fn limit_send_sges(&mut self, max: u32) {
        if let Some(r) = self.sq.as_mut() {
            r.limit_sges(max);
        }
    }

    /// Match a requester CQE (REQ or REQ_ERR) to its work request, treating
    /// every field the device wrote as untrusted: it must name this QP and
    /// an outstanding WQE ([`BadSendCqe`]; counted, nothing changes), and a
    /// successful one the opcode the WQE was posted with
    /// ([`BadSendCqe::OpcodeMismatch`]: retired, counted). Retires the
    /// request and the unsignaled ones before it; an error completion means
    /// the QP is in error.
    #[inline(always)]
    pub fn complete_send(&mut self, cqe: &Cqe) -> Result<SendCompletion, BadSendCqe> {
        let r = self.match_send(cqe);
        if r.is_err() {
            self.rejected = self.rejected.saturating_add(1);
        }
        r
    }

    #[inline(always)]
    fn match_send(&mut self, cqe: &Cqe) -> Result<SendCompletion, BadSendCqe> {
        if cqe.qpn != self.qpn {
            return Err(BadSendCqe::WrongQp { qpn: cqe.qpn });
        }
        if !cqe.is_requester() {
            return Err(BadSendCqe::NotRequester {
                opcode: cqe.opcode.0,
            });
        }
        let ring = self.sq.as_mut().ok_or(BadSendCqe::NoSendQueue)?;
        let (slot, retired) = ring.complete(self.slots.as_mut(), cqe.wqe_counter)?;
        if cqe.opcode == CqeOpcode::REQ_ERR {
            self.state = QpState::Error;
        } else if cqe.send_opcode != slot.opcode() as u8 {
            // Linux reports a good requester CQE by its opcode byte: one that
            // contradicts the posted WQE is not believed.
            return Err(BadSendCqe::OpcodeMismatch {
                wr_id: slot.wr_id,
                opcode: cqe.send_opcode,
                posted: slot.opcode(),
            });
        }
        Ok(SendCompletion {
            wr_id: slot.wr_id,
            opcode: slot.opcode(),
            status: cqe.status,
            wqe_index: cqe.wqe_counter,
            retired,
            signaled: slot.signaled(),
        })
    }

    /// Match a responder CQE of this QP's SRQ: it must name this QP and its
    /// SRQ (then [`Srq::complete_cqe`] checks the rest and returns the SRQ
    /// WQE to the free list). An error completion means the QP is in error.
    #[inline(always)]
    pub fn complete_recv(
        &mut self,
        srq: &mut Srq<H>,
        cqe: &Cqe,
    ) -> Result<RecvCompletion, BadRecvCqe> {
        if cqe.qpn != self.qpn {
            self.rejected = self.rejected.saturating_add(1);
            return Err(BadRecvCqe::WrongQp { qpn: cqe.qpn });
        }
        if self.srqn != Some(srq.srqn()) {
            self.rejected = self.rejected.saturating_add(1);
            return Err(BadRecvCqe::WrongSrq { srqn: srq.srqn() });
        }
        let c = srq.complete_cqe(cqe)?;
        if c.opcode == CqeOpcode::RESP_ERR {
            self.state = QpState::Error;
        }
        Ok(c)
    }

    /// Post receive work requests to the QP's own receive queue and publish
    /// them with one store of the doorbell record's receive counter
    /// (`ibv_post_recv`, rdma-core `mlx5_post_recv`). Each request is
    /// checked before anything of it is written; on the first refusal
    /// (queue full, more scatter entries than a WQE holds) the requests
    /// before it stay posted and the failure names the request. A QP
    /// without its own receive queue (on an SRQ, or none) refuses the
    /// first request with [`PostError::NoReceiveQueue`]. Every state is
    /// accepted, as libmlx5 does: WQEs posted before RTR wait; in ERR the
    /// device flushes them.
    #[inline(always)]
    pub fn post_recv(&mut self, reqs: &[RecvRequest<'_>]) -> Result<(), PostFailure> {
        let Some(rq) = self.rq.as_mut() else {
            return Err(PostFailure {
                index: 0,
                error: PostError::NoReceiveQueue,
            });
        };
        let buf = self.sq.as_ref().map(|s| s.region());
        rq.post_list(buf, &self.dbr, reqs)
            .map_err(|(index, error)| PostFailure { index, error })
    }

    /// Match a responder CQE of this QP's own receive queue: it must name
    /// this QP and no SRQ, carry a responder opcode, and name the oldest
    /// outstanding receive WQE (the device completes them in order; Linux
    /// and rdma-core `handle_responder` take the queue's tail). A
    /// successful one may not claim more bytes than the WQE's buffers
    /// hold. An error completion (flush included) means the QP is in
    /// error.
    #[inline]
    pub fn complete_own_recv(&mut self, cqe: &Cqe) -> Result<RecvCompletion, BadRecvCqe> {
        let r = self.match_own_recv(cqe);
        if r.is_err() {
            self.rejected = self.rejected.saturating_add(1);
        }
        r
    }

    #[inline(always)]
    fn match_own_recv(&mut self, cqe: &Cqe) -> Result<RecvCompletion, BadRecvCqe> {
        if cqe.qpn != self.qpn {
            return Err(BadRecvCqe::WrongQp { qpn: cqe.qpn });
        }
        let Some(rq) = self.rq.as_mut() else {
            return Err(BadRecvCqe::WrongSrq { srqn: cqe.srqn });
        };
        if cqe.srqn != 0 {
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
        let done = rq.complete(cqe.wqe_counter).map_err(BadRecvCqe::Wqe)?;
        if cqe.opcode == CqeOpcode::RESP_ERR {
            self.state = QpState::Error;
        }
        let check_len = cqe.status == CqeStatus::Success && cqe.opcode != CqeOpcode::RESP_WR_IMM;
        if !RecvRing::<H>::holds(done.capacity, cqe.byte_len, check_len) {
            return Err(BadRecvCqe::ByteCountBeyondBuffer {
                wr_id: done.wr_id,
                byte_len: cqe.byte_len,
                capacity: done.capacity,
            });
        }
        Ok(RecvCompletion {
            wr_id: done.wr_id,
            status: cqe.status,
            byte_len: cqe.byte_len,
            qpn: cqe.qpn,
            src_qpn: cqe.src_qpn,
            srqn: 0,
            wqe_index: cqe.wqe_counter,
            imm,
            opcode: cqe.opcode,
        })
    }

    /// Apply an async event if it is about this QP: error events put the
    /// QP in the error state, last-WQE-reached is recorded,
    /// communication-established changes nothing. Returns the typed event,
    /// or `None` when the event is not this QP's.
    ///
    /// A QP the driver has put in RESET or INIT since cannot have raised
    /// it (it neither sends nor receives there): such an event was raised
    /// before the QP's last reset and read late, so it changes nothing.
    /// Otherwise it would mark a QP in RESET as in error, and a post would
    /// then ring the doorbell of a QP firmware holds in RESET.
    pub fn handle_event(&mut self, ev: &Event) -> Option<QpEvent> {
        let (qpn, e) = ev.qp_event()?;
        if qpn != self.qpn {
            return None;
        }
        if matches!(self.state, QpState::Reset | QpState::Init) {
            return Some(e);
        }
        if e.is_error() {
            self.state = QpState::Error;
        }
        if e == QpEvent::LastWqeReached {
            self.last_wqe_reached = true;
        }
        Some(e)
    }

    /// After 2RST: counters, table and doorbell record back to zero (Linux
    /// `__mlx5_ib_modify_qp`).
    pub(super) fn reset_rings(&mut self) {
        if let Some(r) = self.sq.as_mut() {
            r.reset(self.slots.as_mut());
        }
        if let Some(r) = self.rq.as_mut() {
            r.reset();
        }
        self.dbr.write_be64(0, 0);
        self.last_wqe_reached = false;
    }
}
