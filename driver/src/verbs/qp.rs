//! The QP verbs: create, query, destroy, post_send (modify is
//! [`super::modify`]; UD's own parts are [`super::ud`]).
//!
//! Sizes, limits and errors are rdma-core's (`providers/mlx5/verbs.c`
//! `mlx5_calc_send_wqe`, `mlx5_calc_sq_size`, `create_qp`; `qp.c`
//! `_mlx5_post_send`), with the send overhead of the seven operations this
//! driver posts (`IBV_QP_INIT_ATTR_SEND_OPS_FLAGS` = SEND, SEND_WITH_IMM,
//! RDMA_WRITE, RDMA_WRITE_WITH_IMM, RDMA_READ, ATOMIC_CMP_AND_SWP,
//! ATOMIC_FETCH_AND_ADD: control + remote-address + atomic segment, 48
//! bytes).

use mlx5_hal::Hal;

use super::poll::{QpRoute, RecvRun, SendRun};
use super::table::Table;
use super::{
    AccessFlags, AhAttr, CqEntry, CqHandle, Errno, EventElement, GlobalRoute, Mtu, PostSendError,
    QpAttr, QpCap, QpHandle, QpInitAttr, QpState, SendFlags, SendWr, SrqEntry, SrqHandle, Verbs,
    WrOpcode,
};
use crate::loopback::LoopbackMode;
use crate::qp::sq_size::{MAX_DS, PLAIN_RC_OVERHEAD};
use crate::qp::{
    Payload, Qp, QpLinks, RecvQueueCaps, SendError, SendOpcode, SendQueueCaps, SendSlot, SendWork,
};
use crate::stats::CmdObserver;
use mlx5_regs::consts::wqe;

/// Work requests posted per doorbell.
const CHUNK: usize = 16;

/// Verbs bookkeeping of a QP.
#[derive(Debug, Clone, Copy)]
pub(super) struct QpBook {
    pub(super) send_cq: CqHandle,
    pub(super) recv_cq: CqHandle,
    pub(super) srq: Option<SrqHandle>,
    /// The sizes returned to the caller (`max_send_sge` as asked, the
    /// limit `post_send` enforces, as rdma-core's `sq.max_gs`).
    pub(super) cap: QpCap,
    pub(super) sq_sig_all: bool,
    /// The QP reached RTS since it was created or last reset: sends are
    /// accepted (rdma-core's `qp_state_max_gs`).
    pub(super) can_send: bool,
    /// Port set by the last RESET→INIT / INIT→INIT (0 before).
    pub(super) port: u8,
    /// The access rights asked for (Linux `atomic_rd_en`) and the
    /// responder depth set (Linux `resp_depth`): together they give the
    /// rights firmware holds ([`super::modify`]).
    pub(super) access: AccessFlags,
    pub(super) resp_depth: u8,
    pub(super) async_reported: u32,
    pub(super) async_acked: u32,
}

pub(super) struct QpEntry<H: Hal, const W: usize> {
    pub(super) qp: Qp<H, [SendSlot; W]>,
    pub(super) book: QpBook,
}

/// Gather entries an RC send WQE of a device with `max_wqe_sz_sq` holds
/// after libmlx5's 192-byte plain-`create_qp` overhead (and within the 63
/// units of `ds`): the most `create_qp` accepts.
pub(super) fn max_send_sge(max_wqe_sz_sq: u16) -> u32 {
    let desc = (max_wqe_sz_sq as usize).min(MAX_DS * 16);
    (desc.saturating_sub(PLAIN_RC_OVERHEAD) / 16) as u32
}

/// The links of a QP with these handles: the send CQ if it has a send
/// queue, the receive CQ if it has a receive side (an SRQ, named too, or
/// its own receive queue; a receive CQ equal to the send CQ is named
/// once). A QP with neither gives the driver no receive CQ (the facade
/// still counts the CQ as used, as ib core does).
fn links<'a, H: Hal, const CQS: usize, const SRQS: usize>(
    cqs: &'a mut Table<CqEntry<H>, CQS>,
    srqs: &'a mut Table<SrqEntry<H>, SRQS>,
    has_sq: bool,
    b: &QpBook,
) -> Result<QpLinks<'a, H>, Errno> {
    let srq = match b.srq {
        Some(h) => Some(&mut srqs.get_mut(h.0).ok_or(Errno::EINVAL)?.srq),
        None => None,
    };
    let receives = srq.is_some() || b.cap.max_recv_wr > 0;
    let (send_cq, recv_cq) = match (has_sq, receives) {
        (true, true) if b.send_cq != b.recv_cq => {
            let (s, r) = cqs
                .get2_mut(b.send_cq.0, b.recv_cq.0)
                .ok_or(Errno::EINVAL)?;
            (Some(&mut s.cq), Some(&mut r.cq))
        }
        (true, _) => (
            Some(&mut cqs.get_mut(b.send_cq.0).ok_or(Errno::EINVAL)?.cq),
            None,
        ),
        (false, true) => (
            None,
            Some(&mut cqs.get_mut(b.recv_cq.0).ok_or(Errno::EINVAL)?.cq),
        ),
        (false, false) => return Err(Errno::EINVAL),
    };
    Ok(QpLinks {
        send_cq,
        recv_cq,
        srq,
    })
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
    /// `ibv_create_qp` (RC), in RESET. Returns the handle and the actual
    /// sizes, as rdma-core computes them:
    ///
    /// * WQE = max(192 + 16·`max_send_sge`, 192 + align16(4 +
    ///   `max_inline_data`)) rounded up to 64 bytes (192: the overhead a
    ///   plain libmlx5 `create_qp` reserves on RC, rdma-core `sq_overhead`;
    ///   [`PLAIN_RC_OVERHEAD`]); ring =
    ///   roundup_pow2(`max_send_wr` · WQE);
    /// * `max_send_wr` = ring / WQE, `max_inline_data` = WQE − 196,
    ///   `max_send_sge` as asked (the limit `post_send` enforces);
    /// * without an SRQ and with `max_recv_wr` > 0, the QP's own receive
    ///   queue (`mlx5_calc_rq_size`): WQE = roundup_pow2(16 ·
    ///   max(`max_recv_sge`, 1)), ring = max(roundup_pow2(`max_recv_wr`) ·
    ///   WQE, 64) bytes; `max_recv_wr` = ring / WQE and `max_recv_sge` =
    ///   WQE / 16 (the limit `post_recv` enforces);
    /// * with an SRQ, `max_recv_wr` and `max_recv_sge` are ignored and
    ///   reported 0 (receives go through the SRQ).
    ///
    /// `EINVAL`: a stale handle; more gather entries or inline bytes than
    /// a WQE of `max_wqe_sz_sq` holds; a ring above `2^log_max_qp_sz`
    /// blocks; more receive work requests than `2^log_max_qp_sz` or a
    /// receive WQE above `max_wqe_sz_rq`; no send queue and no receive
    /// side. `ENOMEM`: the QP table is full or the ring needs more than
    /// `SQ_WQEBBS` blocks, or DMA memory ran out.
    pub fn create_qp(&mut self, attr: &QpInitAttr) -> Result<(QpHandle, QpCap), Errno> {
        self.create_qp_typed(attr, false)
    }

    /// `create_qp` of an RC (`ud` false) or UD QP.
    pub(super) fn create_qp_typed(
        &mut self,
        attr: &QpInitAttr,
        ud: bool,
    ) -> Result<(QpHandle, QpCap), Errno> {
        self.cq_entry(attr.send_cq)?;
        self.cq_entry(attr.recv_cq)?;
        if let Some(s) = attr.srq {
            self.srq_entry(s)?;
        }
        let cap = attr.cap;
        let send = (cap.max_send_wr > 0).then_some(SendQueueCaps {
            max_send_wr: cap.max_send_wr,
            max_send_sge: cap.max_send_sge,
            max_inline_data: cap.max_inline_data,
        });
        let recv = (attr.srq.is_none() && cap.max_recv_wr > 0).then_some(RecvQueueCaps {
            max_recv_wr: cap.max_recv_wr,
            max_recv_sge: cap.max_recv_sge,
        });
        if send.is_none() && recv.is_none() && attr.srq.is_none() {
            return Err(Errno::EINVAL);
        }
        let geo = match &send {
            // rdma-core refuses every size it cannot build with EINVAL.
            Some(s) if ud => Some(
                self.hca
                    .ud_send_queue_geometry(s)
                    .map_err(|_| Errno::EINVAL)?,
            ),
            // A plain libmlx5 create_qp reserves room for a memory-window
            // bind in every RC WQE; so do these rings, so the sizes read
            // back are libmlx5's.
            Some(s) => Some(
                self.hca
                    .send_queue_geometry_with(s, PLAIN_RC_OVERHEAD)
                    .map_err(|_| Errno::EINVAL)?,
            ),
            None => None,
        };
        let rq_geo = match &recv {
            Some(r) => Some(self.hca.recv_queue_geometry(r).map_err(|_| Errno::EINVAL)?),
            None => None,
        };
        if geo.is_some_and(|g| g.wqebbs() > SQ_WQEBBS) || self.qps.len() >= QPS {
            return Err(Errno::ENOMEM);
        }
        let out = QpCap {
            max_send_wr: geo.map_or(0, |g| g.max_send_wr),
            max_recv_wr: rq_geo.map_or(0, |g| g.max_recv_wr),
            max_send_sge: geo.map_or(0, |_| cap.max_send_sge),
            max_recv_sge: rq_geo.map_or(0, |g| g.max_recv_sge),
            max_inline_data: geo.map_or(0, |g| g.max_inline_data),
        };
        let book = QpBook {
            send_cq: attr.send_cq,
            recv_cq: attr.recv_cq,
            srq: attr.srq,
            cap: out,
            sq_sig_all: attr.sq_sig_all,
            can_send: false,
            port: 0,
            access: AccessFlags(0),
            resp_depth: 0,
            async_reported: 0,
            async_acked: 0,
        };
        let l = links(&mut self.cqs, &mut self.srqs, send.is_some(), &book)?;
        let table = [SendSlot::EMPTY; SQ_WQEBBS];
        let mut qp = if ud {
            self.hca.create_ud_qp(send, recv, l, table)?
        } else {
            self.hca
                .create_qp_reserving(send, PLAIN_RC_OVERHEAD, recv, l, table)?
        };
        // `post_send` refuses more gather entries than asked for, not
        // only more than a WQE holds (rdma-core `sq.max_gs`).
        qp.limit_send_sges(out.max_send_sge);
        let qpn = qp.qpn();
        let key = match self.qps.insert(QpEntry { qp, book }) {
            Ok(k) => k,
            Err(e) => {
                // Not reached (checked above); undo rather than leak.
                if let Ok(l) = links(&mut self.cqs, &mut self.srqs, send.is_some(), &book) {
                    let _ = self.hca.destroy_qp(e.qp, l);
                }
                return Err(Errno::ENOMEM);
            }
        };
        let srq = book
            .srq
            .and_then(|h| self.srqs.get(h.0).map(|s| (h, s.srq.srqn())));
        self.qpns.insert(qpn, QpRoute::new(key, book.recv_cq, srq));
        self.count_users(&book, true);
        Ok((QpHandle(key), out))
    }

    /// The QP number firmware assigned (`qp->qp_num`).
    pub fn qp_num(&self, qp: QpHandle) -> Result<u32, Errno> {
        Ok(self.qp_entry(qp)?.qp.qpn())
    }

    /// The driver's QP object (read-only: state as tracked, send ring,
    /// counters).
    pub fn qp(&self, qp: QpHandle) -> Result<&Qp<H, [SendSlot; SQ_WQEBBS]>, Errno> {
        Ok(&self.qp_entry(qp)?.qp)
    }

    /// `ibv_query_qp`: the attributes as firmware holds them (QUERY_QP,
    /// read as Linux `query_qp_attr` does: `max_rd_atomic` and
    /// `max_dest_rd_atomic` are `1 << log`, the access flags the remote
    /// rights firmware holds) and the creation attributes with the actual
    /// sizes. The QP's tracked state follows firmware's.
    pub fn query_qp(&mut self, qp: QpHandle) -> Result<(QpAttr, QpInitAttr), Errno> {
        let eth = !matches!(self.hca.loopback_mode(), Some(LoopbackMode::Ib { .. }))
            && self.hca.caps().port_type != mlx5_regs::consts::port::TYPE_IB;
        let e = self.qps.get_mut(qp.0).ok_or(Errno::EINVAL)?;
        let q = self.hca.query_qp(&e.qp)?;
        if q.state != e.qp.state() {
            self.hca.refresh_qp_state(&mut e.qp)?;
        }
        let state = QpState::from_driver(q.state);
        let mut access = AccessFlags(0);
        for (on, f) in [
            (q.access.remote_read, AccessFlags::REMOTE_READ),
            (q.access.remote_write, AccessFlags::REMOTE_WRITE),
            (q.access.remote_atomic, AccessFlags::REMOTE_ATOMIC),
        ] {
            if on {
                access = access | f;
            }
        }
        let p = q.path;
        let attr = QpAttr {
            qp_state: state,
            cur_qp_state: state,
            path_mtu: mtu_from_code(q.mtu),
            qp_access_flags: access,
            pkey_index: p.pkey_index,
            port_num: p.port,
            ah_attr: AhAttr {
                grh: GlobalRoute {
                    dgid: p.rgid,
                    flow_label: p.flow_label,
                    sgid_index: p.src_addr_index,
                    hop_limit: p.hop_limit,
                    traffic_class: p.tclass,
                },
                dlid: p.rlid,
                sl: p.sl,
                src_path_bits: 0,
                static_rate: 0,
                is_global: eth || p.grh,
                port_num: p.port,
                force_loopback: q.fl,
                dmac: (eth && !q.fl).then_some(p.rmac),
            },
            dest_qp_num: q.remote_qpn,
            rq_psn: q.next_rcv_psn,
            sq_psn: q.next_send_psn,
            max_rd_atomic: 1u8.checked_shl(q.log_sra_max as u32).unwrap_or(0),
            max_dest_rd_atomic: 1u8.checked_shl(q.log_rra_max as u32).unwrap_or(0),
            min_rnr_timer: q.min_rnr_nak,
            timeout: p.ack_timeout,
            retry_cnt: q.retry_count,
            rnr_retry: q.rnr_retry,
            cap: e.book.cap,
            qkey: q.q_key,
        };
        let init = QpInitAttr {
            send_cq: e.book.send_cq,
            recv_cq: e.book.recv_cq,
            srq: e.book.srq,
            cap: e.book.cap,
            sq_sig_all: e.book.sq_sig_all,
        };
        Ok((attr, init))
    }

    /// `ibv_destroy_qp`, in any state. Unpolled completions of the QP are
    /// removed from its CQs and its receive completions return their SRQ
    /// WQEs, as rdma-core does; unread events of the QP are discarded; its
    /// CQs and SRQ no longer count it. `EBUSY`, nothing changed: an async
    /// event of the QP was read and not acknowledged (libibverbs would
    /// block).
    pub fn destroy_qp(&mut self, qp: QpHandle) -> Result<(), Errno> {
        let b = self.qp_entry(qp)?.book;
        if b.async_reported != b.async_acked {
            return Err(Errno::EBUSY);
        }
        self.destroy_qp_now(qp)
    }

    /// Destroy whatever its events (also for `close`).
    pub(super) fn destroy_qp_now(&mut self, qp: QpHandle) -> Result<(), Errno> {
        let e = self.qps.take(qp.0).ok_or(Errno::EINVAL)?;
        let b = e.book;
        let has_sq = e.qp.send_geometry().is_some();
        let qpn = e.qp.qpn();
        let l = match links(&mut self.cqs, &mut self.srqs, has_sq, &b) {
            Ok(l) => l,
            Err(err) => {
                self.qps.restore(qp.0, e);
                return Err(err);
            }
        };
        match self.hca.destroy_qp(e.qp, l) {
            Ok(_table) => {
                self.qps.retire(qp.0);
                self.qpns.remove(qpn);
                self.count_users(&b, false);
                self.clean_cqs(qpn, &b);
                self.purge_events(EventElement::Qp(qp));
                Ok(())
            }
            Err(failed) => {
                let (back, err) = failed.into_parts();
                self.qps.restore(qp.0, QpEntry { qp: back, book: b });
                Err(err.into())
            }
        }
    }

    /// Remove the QP's unpolled completions from its CQs (receive CQ first,
    /// returning SRQ WQEs; then the send CQ if it is another), as rdma-core
    /// does on destroy and on a move to RESET.
    pub(super) fn clean_cqs(&mut self, qpn: u32, b: &QpBook) {
        let srq = match b.srq {
            Some(h) => self.srqs.get_mut(h.0).map(|e| &mut e.srq),
            None => None,
        };
        if let Some(c) = self.cqs.get_mut(b.recv_cq.0) {
            c.cq.discard_qp(qpn, srq);
            // The QP may be going away (and its number reused): poll
            // matches its next receive through the QPN map again.
            c.last_recv = RecvRun::NONE;
            c.last_send = SendRun::NONE;
        }
        if b.send_cq != b.recv_cq {
            if let Some(c) = self.cqs.get_mut(b.send_cq.0) {
                c.cq.discard_qp(qpn, None);
                c.last_send = SendRun::NONE;
            }
        }
    }

    /// The CQs and SRQ of a QP count it as a user (`usecnt`), or no
    /// longer.
    fn count_users(&mut self, b: &QpBook, add: bool) {
        let step = |n: &mut u32| *n = if add { *n + 1 } else { n.saturating_sub(1) };
        for h in [b.send_cq, b.recv_cq] {
            if let Some(c) = self.cqs.get_mut(h.0) {
                step(&mut c.book.qp_users);
            }
        }
        if let Some(s) = b.srq.and_then(|h| self.srqs.get_mut(h.0)) {
            step(&mut s.book.qp_users);
        }
    }

    /// `ibv_post_send`: post the list in order, one doorbell per 16 work
    /// requests. On the first refusal the error names it (`bad_wr`) and
    /// the ones before it stay posted. As rdma-core, every refusal is
    /// `ENOMEM`: the queue holds `max_send_wr` outstanding work requests;
    /// more gather entries than `max_send_sge`; more inline bytes than
    /// `max_inline_data`; the QP has not reached RTS since it was created or
    /// reset (RESET, INIT, RTR, or ERR reached from those). A QP in ERR
    /// after RTS takes the request and flushes it with a completion.
    /// `SIGNALED` (or `sq_sig_all`) asks for a completion on success,
    /// `SOLICITED` sets the solicited bit, `INLINE` copies
    /// [`SendWr::inline_data`] (`EINVAL` on a READ or atomic), `FENCE`
    /// makes the request wait for earlier READs and atomics (fence mode 4,
    /// rdma-core's `MLX5_WQE_CTRL_FENCE`); `IP_CSUM` does not apply to RC.
    /// An atomic needs a device with `IBV_ATOMIC_HCA` and exactly one gather
    /// entry of at least 8 bytes (the device writes 8), else `EINVAL`. On
    /// a dead device nothing is posted and the first request fails with
    /// `EIO` (`mlx5_ib_post_send`).
    #[inline(always)]
    pub fn post_send(&mut self, qp: QpHandle, wrs: &[SendWr<'_>]) -> Result<(), PostSendError> {
        let fail = |index, errno| PostSendError { index, errno };
        if wrs.is_empty() {
            return Ok(());
        }
        if self.hca.is_dead() {
            return Err(fail(0, Errno::EIO));
        }
        let e = self.qps.get_mut(qp.0).ok_or(fail(0, Errno::EINVAL))?;
        if !e.book.can_send {
            // A UD QP, or not in RTS since the last reset: nothing is
            // posted there.
            return super::ud::post_not_rc(e, &self.ahs, wrs);
        }
        let sig_all = e.book.sq_sig_all;
        // Every refusal of the ring for lack of room (queue full, more
        // gather entries than asked for at creation, inline data too large)
        // is ENOMEM, as in rdma-core; an atomic without device support or
        // without one 8-byte buffer, and inline data on a READ or atomic,
        // are EINVAL. The requests before it stay posted.
        if let [wr] = wrs {
            // One request: no loop, no list bookkeeping.
            return e
                .qp
                .post_send_one(&Posted { wr, sig_all })
                .map_err(|err| fail(0, send_errno(&err)));
        }
        post_list(&mut e.qp, wrs, sig_all)
    }
}

/// Post a list of two or more: one call per chunk of 16 (one doorbell
/// each); a list of up to 16 is one call with no chunk loop to set up.
/// Apart from `post_send`, which is always inlined into its caller (as the
/// ring API's `Qp::post_send` is; left to the compiler, it was a call):
/// only the checks and the one-request path are forced inline, the
/// compiler decides for this one.
#[inline]
fn post_list<H: Hal, const W: usize>(
    qp: &mut Qp<H, [SendSlot; W]>,
    wrs: &[SendWr<'_>],
    sig_all: bool,
) -> Result<(), PostSendError> {
    if wrs.len() <= CHUNK {
        return post_chunk(qp, wrs, 0, sig_all);
    }
    for (c, chunk) in wrs.chunks(CHUNK).enumerate() {
        post_chunk(qp, chunk, c * CHUNK, sig_all)?;
    }
    Ok(())
}

/// Post up to [`CHUNK`] requests with one doorbell, each written into its
/// WQE as it is (no staging list, no conversion); `base` is the first
/// one's index in the caller's list.
#[inline(always)]
fn post_chunk<H: Hal, const W: usize>(
    qp: &mut Qp<H, [SendSlot; W]>,
    chunk: &[SendWr<'_>],
    base: usize,
    sig_all: bool,
) -> Result<(), PostSendError> {
    qp.post_send_iter(chunk.iter().map(|wr| Posted { wr, sig_all }))
        .map_err(|f| PostSendError {
            index: base + f.index,
            errno: send_errno(&f.error),
        })
}

/// The errno of a ring refusal in `post_send` (rdma-core `_mlx5_post_send`):
/// no room is `ENOMEM`; a request the device cannot take as given is
/// `EINVAL`.
#[inline(always)]
pub(super) fn send_errno(e: &SendError) -> Errno {
    match e {
        SendError::AtomicsUnsupported
        | SendError::BadAtomicBuffer
        | SendError::InlineNotAllowed
        | SendError::WrongTransport => Errno::EINVAL,
        _ => Errno::ENOMEM,
    }
}

/// The WQE opcode of each [`WrOpcode`], indexed by its value.
const WR_OPCODES: [SendOpcode; 7] = {
    let mut t = [SendOpcode::Send; 7];
    t[WrOpcode::RdmaWrite as usize] = SendOpcode::RdmaWrite;
    t[WrOpcode::RdmaWriteWithImm as usize] = SendOpcode::RdmaWriteImm;
    t[WrOpcode::Send as usize] = SendOpcode::Send;
    t[WrOpcode::SendWithImm as usize] = SendOpcode::SendImm;
    t[WrOpcode::RdmaRead as usize] = SendOpcode::RdmaRead;
    t[WrOpcode::AtomicCmpAndSwp as usize] = SendOpcode::AtomicCmpSwap;
    t[WrOpcode::AtomicFetchAndAdd as usize] = SendOpcode::AtomicFetchAdd;
    t
};

/// `fm_ce_se` of each combination of [`SendFlags::FENCE`],
/// [`SendFlags::SIGNALED`] and [`SendFlags::SOLICITED`] (bits 0..2):
/// fence mode 4 (rdma-core's `MLX5_WQE_CTRL_FENCE`), a completion, the
/// solicited bit.
const FM_CE_SE: [u8; 8] = {
    let mut t = [0u8; 8];
    let mut i = 0;
    while i < 8 {
        let f = SendFlags(i as u32);
        t[i] = (if f.contains(SendFlags::FENCE) {
            wqe::FENCE_MODE_SMALL_AND_FENCE
        } else {
            0
        }) | (if f.contains(SendFlags::SIGNALED) {
            wqe::CTRL_CQ_UPDATE
        } else {
            0
        }) | (if f.contains(SendFlags::SOLICITED) {
            wqe::CTRL_SOLICITED
        } else {
            0
        });
        i += 1;
    }
    t
};

/// A verbs work request as the send ring reads it ([`SendWork`]), with
/// the QP's `sq_sig_all`.
pub(super) struct Posted<'w, 'a> {
    pub(super) wr: &'w SendWr<'a>,
    pub(super) sig_all: bool,
}

impl SendWork for Posted<'_, '_> {
    #[inline(always)]
    fn wr_id(&self) -> u64 {
        self.wr.wr_id
    }

    #[inline(always)]
    fn opcode(&self) -> SendOpcode {
        // rdma-core's `mlx5_ib_opcode` table: a load, not a jump.
        WR_OPCODES[self.wr.opcode as usize]
    }

    #[inline(always)]
    fn fm_ce_se(&self) -> u8 {
        // The default's byte, looked up: FENCE, SIGNALED and SOLICITED are
        // the three low bits of `send_flags`.
        FM_CE_SE[(self.wr.send_flags.0 & 7) as usize]
            | if self.sig_all { wqe::CTRL_CQ_UPDATE } else { 0 }
    }

    #[inline(always)]
    fn atomic(&self) -> (u64, u64) {
        // rdma-core `set_atomic_seg`: CMP_AND_SWP carries (swap, compare),
        // FETCH_AND_ADD (the addend, 0).
        match self.wr.opcode {
            WrOpcode::AtomicCmpAndSwp => (self.wr.swap, self.wr.compare_add),
            _ => (self.wr.compare_add, 0),
        }
    }

    #[inline(always)]
    fn fence(&self) -> bool {
        self.wr.send_flags.contains(SendFlags::FENCE)
    }

    #[inline(always)]
    fn imm(&self) -> u32 {
        self.wr.imm_data
    }

    #[inline(always)]
    fn remote(&self) -> (u64, u32) {
        (self.wr.remote_addr, self.wr.rkey)
    }

    #[inline(always)]
    fn payload(&self) -> Payload<'_> {
        if self.wr.send_flags.contains(SendFlags::INLINE) {
            Payload::Inline(self.wr.inline_data)
        } else {
            Payload::Sges(self.wr.sg_list)
        }
    }

    #[inline(always)]
    fn signaled(&self) -> bool {
        self.sig_all || self.wr.send_flags.contains(SendFlags::SIGNALED)
    }

    #[inline(always)]
    fn solicited(&self) -> bool {
        self.wr.send_flags.contains(SendFlags::SOLICITED)
    }
}

/// The MTU of a `qpc.mtu` code; 0 (not set before RTR) and unknown codes
/// read as 256.
fn mtu_from_code(code: u8) -> Mtu {
    match code {
        2 => Mtu::B512,
        3 => Mtu::B1024,
        4 => Mtu::B2048,
        5 => Mtu::B4096,
        _ => Mtu::B256,
    }
}
