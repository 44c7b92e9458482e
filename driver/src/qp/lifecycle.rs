//! The [`Hca`] side of queue pairs: CREATE_QP, the transitions, QUERY_QP,
//! DESTROY_QP, and connecting loopback QPs.
//!
//! Every transition checks the QP's state first and refuses a wrong one
//! with [`Error::QpState`] before any command is sent (Linux refuses
//! transitions outside its `optab` with `-EINVAL` the same way). A QP that
//! the device moved to ERR is seen as such once an error completion or
//! error event reached it, or after [`Hca::refresh_qp_state`].

use mlx5_hal::Hal;
use mlx5_regs::consts::{qp_ctx, ts_format};
use mlx5_regs::doorbell::{bf_reg_offset, uar_page_offset, QP_DBR_SIZE};
use mlx5_regs::Opcode;

use super::attr::{log2_ceil, InitAttr, QpState, RtrAttr, RtsAttr, Transition};
use super::cmd::{self, CreateQpParams, QpQuery, RecvSide, RtrFields, RtsFields};
use super::opt::{self, QpOptional};
use super::queue::{Qp, QpLinks};
use super::recv::{RecvQueueCaps, RecvRing, RqGeometry};
use super::ring::SendRing;
use super::sq_size::{SendQueueCaps, SqGeometry, SQ_OVERHEAD};
use super::wr::{SendError, SendRequest, SendSlot};
use super::PostSendFailure;
use crate::cmd::MAX_CMD_LEN;
use crate::error::{DestroyError, Error};
use crate::hca::Hca;
use crate::pagelist::MAX_CONTEXT_PAGES;
use crate::srq::{PostError, PostFailure, RecvRequest};
use crate::stats::CmdObserver;

/// Refuse a transition from the QP's state before any command is sent.
fn check<H: Hal, T: AsMut<[SendSlot]>>(qp: &Qp<H, T>, t: Transition) -> Result<(), Error> {
    super::ud::check_rc(qp, t)
}

/// `links` name exactly the CQs and SRQ `qp` was created with.
fn links_match<H: Hal, T: AsMut<[SendSlot]>>(qp: &Qp<H, T>, links: &QpLinks<'_, H>) -> bool {
    let recv_separate = qp.cqn_rcv.and_then(|(c, sep)| sep.then_some(c));
    links.send_cq.as_ref().map(|c| c.cqn()) == qp.cqn_snd
        && links.recv_cq.as_ref().map(|c| c.cqn()) == recv_separate
        && links.srq.as_ref().map(|s| s.srqn()) == qp.srqn
}

impl<H: Hal, O: CmdObserver, const CE: usize, const AE: usize> Hca<H, O, CE, AE> {
    /// The send ring a request would get on this device (rounded as
    /// [`SqGeometry::for_request`] does): the length of the [`SendSlot`]
    /// table to give [`Hca::create_qp`] is its [`SqGeometry::wqebbs`].
    pub fn send_queue_geometry(&self, req: &SendQueueCaps) -> Result<SqGeometry, Error> {
        let caps = self.caps();
        SqGeometry::for_request(req, caps.max_wqe_sz_sq, caps.log_max_qp_sz).map_err(Error::SqSize)
    }

    /// [`Hca::send_queue_geometry`] with `overhead` bytes before a WQE's
    /// data ([`SqGeometry::with_overhead`]): what [`Hca::create_qp_reserving`]
    /// builds.
    pub fn send_queue_geometry_with(
        &self,
        req: &SendQueueCaps,
        overhead: usize,
    ) -> Result<SqGeometry, Error> {
        let caps = self.caps();
        SqGeometry::with_overhead(req, overhead, caps.max_wqe_sz_sq, caps.log_max_qp_sz)
            .map_err(Error::SqSize)
    }

    /// The own receive ring a request would get on this device (rounded as
    /// [`RqGeometry::for_request`] does).
    pub fn recv_queue_geometry(&self, req: &RecvQueueCaps) -> Result<RqGeometry, Error> {
        let caps = self.caps();
        RqGeometry::for_request(req, caps.max_wqe_sz_rq, caps.log_max_qp_sz).map_err(Error::RqSize)
    }

    /// Create an RC QP in RESET, receiving through an SRQ (in `links`) or
    /// not at all: [`Hca::create_qp_with`] without a receive queue of its
    /// own.
    pub fn create_qp<T: AsMut<[SendSlot]>>(
        &self,
        send: Option<SendQueueCaps>,
        links: QpLinks<'_, H>,
        table: T,
    ) -> Result<Qp<H, T>, Error> {
        self.create_qp_with(send, None, links, table)
    }

    /// Create an RC QP in RESET.
    ///
    /// * `send`: the send queue to size, or `None` for a receive-only QP
    ///   (`no_sq`);
    /// * `recv`: the QP's own receive queue to size ([`Qp::post_recv`]),
    ///   or `None`; not with an SRQ. Its ring comes first in the QP
    ///   buffer, the send ring right after it (Linux `_create_kernel_qp`);
    /// * `links`: its CQs and SRQ ([`QpLinks`]); each counts the QP as a
    ///   user until [`Hca::destroy_qp`];
    /// * `table`: the caller's send table, at least
    ///   [`Hca::send_queue_geometry`]`.wqebbs()` entries (any length without
    ///   a send queue).
    ///
    /// The QP gets the HCA's PD and UAR (its BlueFlame register 0), the
    /// XRC domain of bring-up when it has an SRQ, `user_index` 0xffffff on
    /// devices with CQE version 1 (version-0 CQEs, as Linux asks for kernel
    /// QPs), a timestamp format the capability allows, and an 8-byte
    /// doorbell record.
    pub fn create_qp_with<T: AsMut<[SendSlot]>>(
        &self,
        send: Option<SendQueueCaps>,
        recv: Option<RecvQueueCaps>,
        links: QpLinks<'_, H>,
        table: T,
    ) -> Result<Qp<H, T>, Error> {
        self.create_qp_of(
            mlx5_regs::consts::qp_st::RC,
            send,
            SQ_OVERHEAD,
            recv,
            links,
            table,
        )
    }

    /// [`Hca::create_qp_with`] with a send ring that reserves `overhead`
    /// bytes before each WQE's data ([`Hca::send_queue_geometry_with`]):
    /// [`PLAIN_RC_OVERHEAD`](super::PLAIN_RC_OVERHEAD) sizes it as a plain
    /// libmlx5 `create_qp` does. The table needs that geometry's
    /// `wqebbs()` entries.
    pub fn create_qp_reserving<T: AsMut<[SendSlot]>>(
        &self,
        send: Option<SendQueueCaps>,
        overhead: usize,
        recv: Option<RecvQueueCaps>,
        links: QpLinks<'_, H>,
        table: T,
    ) -> Result<Qp<H, T>, Error> {
        self.create_qp_of(
            mlx5_regs::consts::qp_st::RC,
            send,
            overhead,
            recv,
            links,
            table,
        )
    }

    /// CREATE_QP of service type `st` (RC or UD).
    pub(super) fn create_qp_of<T: AsMut<[SendSlot]>>(
        &self,
        st: u8,
        send: Option<SendQueueCaps>,
        overhead: usize,
        recv: Option<RecvQueueCaps>,
        links: QpLinks<'_, H>,
        mut table: T,
    ) -> Result<Qp<H, T>, Error> {
        let ud = st == mlx5_regs::consts::qp_st::UD;
        let QpLinks {
            send_cq,
            recv_cq,
            srq,
        } = links;
        let caps = *self.caps();
        if recv.is_some() && srq.is_some() {
            return Err(Error::InvalidArgument(
                "a QP receives through an SRQ or its own receive queue, not both",
            ));
        }
        let receives = srq.is_some() || recv.is_some();
        if send.is_none() && !receives {
            return Err(Error::InvalidArgument(
                "a QP needs a send queue, an SRQ or a receive queue",
            ));
        }
        if !receives && recv_cq.is_some() {
            return Err(Error::InvalidArgument(
                "a receive CQ needs an SRQ or a receive queue",
            ));
        }
        let cqn_snd = match (&send, &send_cq) {
            (Some(_), Some(c)) => Some(c.cqn()),
            (Some(_), None) => return Err(Error::InvalidArgument("a send queue needs a send CQ")),
            (None, Some(_)) => {
                return Err(Error::InvalidArgument("a send CQ without a send queue"))
            }
            (None, None) => None,
        };
        let cqn_rcv = match (receives, &recv_cq, &send_cq) {
            (false, _, _) => None,
            (true, Some(r), _) => Some((r.cqn(), true)),
            (true, None, Some(s)) => Some((s.cqn(), false)),
            (true, None, None) => {
                return Err(Error::InvalidArgument("a receive side needs a receive CQ"))
            }
        };
        let geo = match &send {
            Some(req) => Some(self.send_queue_geometry_with(req, overhead)?),
            None => None,
        };
        let rq_geo = match &recv {
            Some(req) => Some(self.recv_queue_geometry(req)?),
            None => None,
        };
        if let Some(g) = geo {
            if table.as_mut().len() < g.wqebbs() {
                return Err(Error::InvalidArgument(
                    "send table shorter than the send ring (SqGeometry::wqebbs)",
                ));
            }
        }
        // Send doorbells go to BlueFlame register 0 of the HCA's UAR, used
        // as two alternating halves: both must lie inside the 4 KiB page.
        let log_bf = caps.log_bf_reg_size;
        if geo.is_some() && !(4..=11).contains(&log_bf) {
            return Err(Error::BadResponse {
                opcode: Opcode::QUERY_HCA_CAP,
                what: "log_bf_reg_size outside 4..=11",
            });
        }
        let hal = self.hal().clone();
        let dbr = hal.alloc_dma(QP_DBR_SIZE)?;
        let uar = self.uar();
        let bf = uar_page_offset(uar) + bf_reg_offset(0, log_bf);
        let rq_bytes = rq_geo.map_or(0, |g| g.bytes());
        let mut pages = None;
        let mut sq = None;
        let mut rq = None;
        match (geo, rq_geo) {
            (Some(g), _) => {
                let (ring, list, rq_base) =
                    SendRing::after_recv(&hal, g, rq_bytes, MAX_CONTEXT_PAGES, bf, 1 << log_bf)?;
                pages = Some(list);
                sq = Some(ring);
                if let Some(r) = rq_geo {
                    rq = Some(RecvRing::new(&hal, r, rq_base, None)?);
                }
            }
            (None, Some(r)) => {
                let (buf, base, list) =
                    crate::pagelist::alloc_paged(&hal, rq_bytes, MAX_CONTEXT_PAGES)?;
                pages = Some(list);
                rq = Some(RecvRing::new(&hal, r, base, Some(buf))?);
            }
            (None, None) => {}
        }
        if let Some(r) = rq.as_mut() {
            r.set_terminator(self.srq_terminator());
        }
        if let Some(s) = sq.as_mut() {
            // rdma-core `atomics_enabled`: atomics are posted only when the
            // device reports `IBV_ATOMIC_HCA`.
            s.set_atomics(!ud && self.atomic_caps().is_some_and(|a| a.ib_atomics()));
            s.set_datagram(ud);
        }
        let srqn = srq.as_ref().map(|s| s.srqn());
        let params = CreateQpParams {
            st,
            pd: self.pd(),
            uar_page: uar,
            send: match (geo, cqn_snd) {
                (Some(g), Some(c)) => Some((g.log_wqebbs, c)),
                _ => None,
            },
            recv: match (srqn, rq_geo, cqn_rcv) {
                (Some(s), _, Some((c, _))) => RecvSide::Srq {
                    srqn: s,
                    cqn: c,
                    xrcd: self.xrcd().unwrap_or(0),
                },
                (None, Some(r), Some((c, _))) => RecvSide::Own {
                    log_size: r.log_wqe_cnt,
                    log_stride: r.log_stride,
                    cqn: c,
                },
                _ => RecvSide::None,
            },
            pages,
            user_index: (caps.cqe_version == 1).then_some(qp_ctx::DEFAULT_USER_INDEX),
            ts_format: self.qp_ts_format(),
            dbr_addr: dbr.iova(),
        };
        let mut input = [0u8; MAX_CMD_LEN];
        let len = cmd::create_qp(&mut input, &params)?;
        let mut out = [0u8; cmd::CREATE_QP_OUT];
        self.exec(&input[..len], &mut out)?;
        let qpn = cmd::parse_create_qp(&out);
        if let Some(r) = sq.as_mut() {
            r.set_qpn(qpn);
        }
        for c in [send_cq, recv_cq].into_iter().flatten() {
            c.add_user();
        }
        if let Some(s) = srq {
            s.add_user();
        }
        Ok(Qp {
            qpn,
            state: QpState::Reset,
            sq,
            rq,
            slots: table,
            dbr,
            hal,
            cqn_snd,
            cqn_rcv,
            srqn,
            rejected: 0,
            last_wqe_reached: false,
            ud,
        })
    }

    /// `qpc.ts_format` by the safe rule: 1 (default) when the relevant
    /// capability is "real-time only", else 0 (free-running). The
    /// capability is the RoCE page's with RoCE enabled, else the general
    /// `sq_ts_format` (Linux `mlx5_get_qp_default_ts`).
    fn qp_ts_format(&self) -> u8 {
        let cap = match self.roce_caps() {
            Some(r) if self.roce_enabled() => r.qp_ts_format,
            _ => self.caps().sq_ts_format,
        };
        if cap == ts_format::CAP_REAL_TIME {
            ts_format::DEFAULT
        } else {
            ts_format::FREE_RUNNING
        }
    }

    pub(super) fn check_port(&self, port: u8) -> Result<(), Error> {
        if port == 0 || port > self.caps().num_ports.max(1) {
            return Err(Error::InvalidArgument("port outside 1..=num_ports"));
        }
        Ok(())
    }

    /// RESET → INIT (RST2INIT_QP).
    pub fn qp_to_init<T: AsMut<[SendSlot]>>(
        &self,
        qp: &mut Qp<H, T>,
        attr: &InitAttr,
    ) -> Result<(), Error> {
        check(qp, Transition::Rst2Init)?;
        self.check_port(attr.port)?;
        let input = cmd::rst2init_qp(qp.qpn, attr.port, attr.pkey_index, attr.access)?;
        let mut out = [0u8; cmd::MODIFY_QP_OUT];
        self.exec(&input, &mut out)?;
        qp.state = Transition::Rst2Init.target();
        Ok(())
    }

    /// INIT → RTR (INIT2RTR_QP); the largest message is the device's
    /// `log_max_msg`, as Linux sets it.
    pub fn qp_to_rtr<T: AsMut<[SendSlot]>>(
        &self,
        qp: &mut Qp<H, T>,
        attr: &RtrAttr,
    ) -> Result<(), Error> {
        self.qp_to_rtr_with(qp, attr, &QpOptional::NONE)
    }

    /// [`Hca::qp_to_rtr`] that also changes the optional fields INIT2RTR
    /// takes (access rights, partition key index; [`QpOptional`]).
    pub fn qp_to_rtr_with<T: AsMut<[SendSlot]>>(
        &self,
        qp: &mut Qp<H, T>,
        attr: &RtrAttr,
        opt: &QpOptional,
    ) -> Result<(), Error> {
        check(qp, Transition::Init2Rtr)?;
        self.check_port(attr.path.port())?;
        let caps = self.caps();
        let log_rra_max = log2_ceil(attr.max_dest_rd_atomic);
        if attr.max_dest_rd_atomic > 0 && log_rra_max > caps.log_max_ra_res_qp {
            return Err(Error::InvalidArgument(
                "max_dest_rd_atomic above the device's log_max_ra_res_qp",
            ));
        }
        let mut input = cmd::init2rtr_qp(
            qp.qpn,
            &RtrFields {
                path: attr.path,
                mtu: attr.mtu as u8,
                log_msg_max: caps.log_max_msg,
                remote_qpn: attr.dest_qpn,
                next_rcv_psn: attr.rq_psn,
                min_rnr_nak: attr.min_rnr_timer,
                log_rra_max,
            },
        )?;
        opt::apply(&mut input, Opcode::INIT2RTR_QP, opt)?;
        let mut out = [0u8; cmd::MODIFY_QP_OUT];
        self.exec(&input, &mut out)?;
        qp.state = Transition::Init2Rtr.target();
        Ok(())
    }

    /// RTR → RTS (RTR2RTS_QP).
    pub fn qp_to_rts<T: AsMut<[SendSlot]>>(
        &self,
        qp: &mut Qp<H, T>,
        attr: &RtsAttr,
    ) -> Result<(), Error> {
        self.qp_to_rts_with(qp, attr, &QpOptional::NONE)
    }

    /// [`Hca::qp_to_rts`] that also changes the optional fields RTR2RTS
    /// takes (access rights, RNR NAK timer; [`QpOptional`]).
    pub fn qp_to_rts_with<T: AsMut<[SendSlot]>>(
        &self,
        qp: &mut Qp<H, T>,
        attr: &RtsAttr,
        opt: &QpOptional,
    ) -> Result<(), Error> {
        check(qp, Transition::Rtr2Rts)?;
        let log_sra_max = log2_ceil(attr.max_rd_atomic);
        if attr.max_rd_atomic > 0 && log_sra_max > self.caps().log_max_ra_req_qp {
            return Err(Error::InvalidArgument(
                "max_rd_atomic above the device's log_max_ra_req_qp",
            ));
        }
        let mut input = cmd::rtr2rts_qp(
            qp.qpn,
            &RtsFields {
                ack_timeout: attr.timeout,
                retry_count: attr.retry_cnt,
                rnr_retry: attr.rnr_retry,
                next_send_psn: attr.sq_psn,
                log_sra_max,
            },
        )?;
        opt::apply(&mut input, Opcode::RTR2RTS_QP, opt)?;
        let mut out = [0u8; cmd::MODIFY_QP_OUT];
        self.exec(&input, &mut out)?;
        qp.state = Transition::Rtr2Rts.target();
        Ok(())
    }

    /// Any state → ERR (2ERR_QP). Outstanding send work requests then
    /// complete with flush errors; an SRQ-attached QP raises
    /// last-WQE-reached.
    pub fn qp_to_error<T: AsMut<[SendSlot]>>(&self, qp: &mut Qp<H, T>) -> Result<(), Error> {
        check(qp, Transition::ToError)?;
        let input = cmd::qp_2err(qp.qpn)?;
        let mut out = [0u8; cmd::QP_2ERR_OUT];
        self.exec(&input, &mut out)?;
        qp.state = Transition::ToError.target();
        Ok(())
    }

    /// Any state → RESET (2RST_QP). Afterwards the send counters, the send
    /// table and both doorbell-record counters are zero, as Linux leaves a
    /// kernel QP, and work requests not yet completed are forgotten.
    ///
    /// The QP's CQEs still unpolled in its CQs stay there. Polled before
    /// any new work request is posted, they are refused as not outstanding;
    /// polled after, a stale send CQE names a WQE index the restarted ring
    /// uses again and would complete the new request in its place. A QP
    /// that will be used again should therefore be reset with
    /// [`Hca::qp_to_reset_and_clean`], which removes them as Linux and
    /// rdma-core do.
    pub fn qp_to_reset<T: AsMut<[SendSlot]>>(&self, qp: &mut Qp<H, T>) -> Result<(), Error> {
        check(qp, Transition::ToReset)?;
        let input = cmd::qp_2rst(qp.qpn)?;
        let mut out = [0u8; cmd::QP_2RST_OUT];
        self.exec(&input, &mut out)?;
        qp.state = Transition::ToReset.target();
        qp.reset_rings();
        Ok(())
    }

    /// Any state → RESET as Linux (`__mlx5_ib_modify_qp`) and rdma-core
    /// (`mlx5_modify_qp`) do it: 2RST_QP ([`Hca::qp_to_reset`]), then the
    /// QP's unpolled CQEs are removed from its CQs ([`crate::cq::Cq::discard_qp`]; a
    /// receive CQE gives its WQE back to the SRQ), so none of them can be
    /// matched to a work request posted after the reset. `links` are the
    /// CQs and SRQ the QP was created with, as for [`Hca::destroy_qp`]
    /// (checked before any command). Returns how many CQEs were removed.
    pub fn qp_to_reset_and_clean<T: AsMut<[SendSlot]>>(
        &self,
        qp: &mut Qp<H, T>,
        links: QpLinks<'_, H>,
    ) -> Result<u32, Error> {
        if !links_match(qp, &links) {
            return Err(Error::InvalidArgument(
                "pass the CQs and SRQ the QP was created with",
            ));
        }
        self.qp_to_reset(qp)?;
        // Firmware writes no CQE for a QP in RESET: what is in the CQs now
        // is all there will be.
        let QpLinks {
            send_cq,
            recv_cq,
            srq,
        } = links;
        Ok(match (recv_cq, send_cq) {
            (Some(r), s) => r.discard_qp(qp.qpn, srq) + s.map_or(0, |s| s.discard_qp(qp.qpn, None)),
            (None, Some(s)) => s.discard_qp(qp.qpn, srq),
            (None, None) => 0,
        })
    }

    /// QUERY_QP: the context as firmware has it.
    pub fn query_qp<T: AsMut<[SendSlot]>>(&self, qp: &Qp<H, T>) -> Result<QpQuery, Error> {
        let input = cmd::query_qp(qp.qpn)?;
        let mut out = [0u8; cmd::QUERY_QP_OUT];
        self.exec(&input, &mut out)?;
        Ok(cmd::parse_query_qp(&out))
    }

    /// QUERY_QP and take firmware's state as the QP's.
    pub fn refresh_qp_state<T: AsMut<[SendSlot]>>(
        &self,
        qp: &mut Qp<H, T>,
    ) -> Result<QpState, Error> {
        let q = self.query_qp(qp)?;
        qp.state = q.state;
        Ok(q.state)
    }

    /// Destroy a QP (DESTROY_QP, allowed in every state) and get the send
    /// table back. `links` must name the CQs and SRQ it was created with;
    /// they stop counting it as a user. On failure the QP is handed back
    /// unchanged inside the [`DestroyError`].
    ///
    /// Like Linux (`destroy_qp_common`), the QP's completions not yet
    /// polled are then removed from its CQs ([`crate::cq::Cq::discard_qp`];
    /// a receive completion gives its WQE back to the SRQ), as its queued
    /// events are withdrawn: firmware gives a destroyed QP's number to the
    /// next QP, which must not take them for its own (a stale requester
    /// CQE would retire that QP's requests). Linux also moves the QP to
    /// RESET first; firmware takes DESTROY_QP from any state, so this
    /// driver sends it alone.
    // No heap to box into: handing the object back on failure is the point.
    #[allow(clippy::result_large_err)]
    pub fn destroy_qp<T: AsMut<[SendSlot]>>(
        &self,
        qp: Qp<H, T>,
        links: QpLinks<'_, H>,
    ) -> Result<T, DestroyError<Qp<H, T>>> {
        if !links_match(&qp, &links) {
            return Err(DestroyError::new(
                qp,
                Error::InvalidArgument("pass the CQs and SRQ the QP was created with"),
            ));
        }
        let QpLinks {
            send_cq,
            recv_cq,
            srq,
        } = links;
        let r = cmd::destroy_qp(qp.qpn)
            .map_err(Error::from)
            .and_then(|input| {
                let mut out = [0u8; cmd::DESTROY_QP_OUT];
                self.exec(&input, &mut out)
            });
        if let Err(e) = r {
            return Err(DestroyError::new(qp, e));
        }
        self.forget_events(crate::hca::Gone::Qp(qp.qpn));
        let (mut send_cq, mut recv_cq, mut srq) = (send_cq, recv_cq, srq);
        if let Some(s) = srq.as_deref_mut() {
            s.remove_user();
        }
        match (recv_cq.as_deref_mut(), send_cq.as_deref_mut()) {
            (Some(r), s) => {
                r.discard_qp(qp.qpn, srq);
                if let Some(s) = s {
                    s.discard_qp(qp.qpn, None);
                }
            }
            (None, Some(s)) => {
                s.discard_qp(qp.qpn, srq);
            }
            (None, None) => {}
        }
        for c in [send_cq, recv_cq].into_iter().flatten() {
            c.remove_user();
        }
        // The ring and doorbell record are freed here, after firmware let
        // go of them.
        let Qp { slots, .. } = qp;
        Ok(slots)
    }

    /// [`Qp::post_send`] on a device that may have died: once the HCA is
    /// dead (fatal health) nothing is posted and the first request fails
    /// with [`SendError::DeviceDead`] (`EIO`; Linux `mlx5_ib_post_send`:
    /// `*bad_wr = wr; return -EIO`). The object-level `Qp::post_send`
    /// cannot know the device's state.
    pub fn post_send<T: AsMut<[SendSlot]>>(
        &self,
        qp: &mut Qp<H, T>,
        reqs: &[SendRequest<'_>],
    ) -> Result<(), PostSendFailure> {
        if self.is_dead() && !reqs.is_empty() {
            return Err(PostSendFailure {
                index: 0,
                error: SendError::DeviceDead,
            });
        }
        qp.post_send(reqs)
    }

    /// [`Qp::post_recv`] on a device that may have died: once the HCA is
    /// dead nothing is posted and the first request fails with
    /// [`PostError::DeviceDead`] (`EIO`, as Linux `mlx5_ib_post_recv` on
    /// an internal error).
    #[inline(always)]
    pub fn post_recv<T: AsMut<[SendSlot]>>(
        &self,
        qp: &mut Qp<H, T>,
        reqs: &[RecvRequest<'_>],
    ) -> Result<(), PostFailure> {
        if self.is_dead() && !reqs.is_empty() {
            return Err(PostFailure {
                index: 0,
                error: PostError::DeviceDead,
            });
        }
        qp.post_recv(reqs)
    }

    /// Connect a QP to itself in the loopback mode of bring-up
    /// ([`Hca::loopback_rtr`]): RESET → INIT → RTR → RTS with
    /// [`InitAttr::default`] and [`RtsAttr::default`].
    pub fn connect_loopback_self<T: AsMut<[SendSlot]>>(
        &self,
        qp: &mut Qp<H, T>,
    ) -> Result<(), Error> {
        let rts = RtsAttr::default();
        let rtr = self.loopback_rtr(qp.qpn, qp.qpn, rts.sq_psn)?;
        self.qp_to_init(qp, &InitAttr::default())?;
        self.qp_to_rtr(qp, &rtr)?;
        self.qp_to_rts(qp, &rts)
    }

    /// Connect two QPs of this function to each other in the loopback mode
    /// of bring-up: both RESET → INIT → RTR → RTS, each addressing the other
    /// ([`Hca::loopback_rtr`]), PSNs 0, [`InitAttr::default`],
    /// [`RtsAttr::default`] (RNR retries forever). A receive-only QP goes to
    /// RTS too.
    pub fn connect_loopback_pair<A: AsMut<[SendSlot]>, B: AsMut<[SendSlot]>>(
        &self,
        a: &mut Qp<H, A>,
        b: &mut Qp<H, B>,
    ) -> Result<(), Error> {
        let rts = RtsAttr::default();
        let rtr_a = self.loopback_rtr(a.qpn, b.qpn, rts.sq_psn)?;
        let rtr_b = self.loopback_rtr(b.qpn, a.qpn, rts.sq_psn)?;
        self.qp_to_init(a, &InitAttr::default())?;
        self.qp_to_init(b, &InitAttr::default())?;
        self.qp_to_rtr(a, &rtr_a)?;
        self.qp_to_rtr(b, &rtr_b)?;
        self.qp_to_rts(a, &rts)?;
        self.qp_to_rts(b, &rts)
    }
}
