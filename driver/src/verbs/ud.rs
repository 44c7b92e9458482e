//! Unreliable datagram verbs: address handles (`ibv_create_ah`,
//! `ibv_destroy_ah`), UD QPs (`ibv_create_qp` with `IBV_QPT_UD`), the UD
//! rows of `ibv_modify_qp`, and `ibv_post_send` with `wr.ud`.
//!
//! An address handle is the 48-byte address vector mlx5 copies into every
//! UD send WQE (Linux `mlx5_ib_create_ah` issues no firmware command,
//! rdma-core `mlx5_create_ah` neither): it lives in a fixed table of
//! [`MAX_AHS`] entries, and since each WQE carries its own copy, destroying
//! a handle does not disturb sends already posted with it.

use mlx5_hal::Hal;

use super::table::{Key, Table};
use super::{AhAttr, Errno, PostSendError, QpCap, QpHandle, QpInitAttr, QpState, SendFlags};
use super::{SendWr, Verbs, WrOpcode};
use crate::qp::{AddressVector, Datagram, Payload, Qp, SendOpcode, SendSlot, SendWork};
use crate::stats::CmdObserver;

/// Address handles a context holds at once.
pub const MAX_AHS: usize = 64;

/// An address handle of a [`Verbs`] context (stale handles: `EINVAL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AhHandle(pub(crate) Key);

/// `ibv_qp_type`: the transports [`Verbs::create_qp_of_type`] builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum QpType {
    /// `IBV_QPT_RC`.
    Rc = 2,
    /// `IBV_QPT_UD`.
    Ud = 4,
}

/// One address handle: the vector the WQEs copy.
#[derive(Debug, Clone, Copy)]
pub(super) struct AhEntry {
    pub(super) av: AddressVector,
}

/// The UD rows of ib core's `qp_state_table` (`ib_modify_qp_is_ok`):
/// (required, optional) attributes of `from → to`.
fn ud_rule(from: QpState, to: QpState) -> Option<(super::QpAttrMask, super::QpAttrMask)> {
    use super::QpAttrMask as M;
    use QpState::*;
    let none = M(0);
    Some(match (from, to) {
        (Reset, Reset) => (none, none),
        (Reset, Init) => (M::PKEY_INDEX | M::PORT | M::QKEY, none),
        (Reset, _) => return None,
        (_, Reset) | (_, Err) => (none, none),
        (Init, Init) => (none, M::PKEY_INDEX | M::PORT | M::QKEY),
        (Init, Rtr) => (none, M::PKEY_INDEX | M::QKEY),
        (Rtr, Rts) => (M::SQ_PSN, M::CUR_STATE | M::QKEY),
        (Rts, Rts) | (Sqe, Rts) => (none, M::CUR_STATE | M::QKEY),
        _ => return None,
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
    /// `ibv_create_ah`: the address vector of `attr`, checked as ib core
    /// and mlx5 check it (the port; RoCE: `is_global` required, the source
    /// GID index naming a programmed entry of the port's table, a
    /// destination MAC ([`AhAttr::dmac`], or derived from a link-local
    /// GID); InfiniBand: a destination LID, with `is_global` a source GID
    /// index inside the table; force loopback names no address). On RoCE
    /// v2 the UDP source port comes from the flow label, or is the lowest
    /// RoCE port (0xC000) without one (Linux `create_ib_ah`); a hop limit
    /// below 2 becomes 64. Every refusal is `EINVAL` (its reason in
    /// [`Verbs::last_error`]); `ENOMEM`: [`MAX_AHS`] handles exist.
    pub fn create_ah(&mut self, attr: &AhAttr) -> Result<AhHandle, Errno> {
        let ports = self.hca.caps().num_ports.max(1);
        if !(1..=ports).contains(&attr.port_num) {
            return Err(self.refuse("ah_attr.port_num outside the device's ports"));
        }
        if attr.force_loopback {
            return Err(self.refuse("an address handle names a destination, not force loopback"));
        }
        // No QP pair to derive a port from: both QP numbers 0 give the
        // lowest RoCE v2 source port, 0xC000.
        let path = self.address_path(attr, attr.port_num, 0, 0)?;
        if matches!(path, crate::qp::AddressPath::Roce { .. }) {
            self.hca.enable_roce()?;
        }
        let av = AddressVector::from_path(&path)?;
        if self.ahs.len() >= MAX_AHS {
            return Err(Errno::ENOMEM);
        }
        self.ahs
            .insert(AhEntry { av })
            .map(AhHandle)
            .map_err(|_| Errno::ENOMEM)
    }

    /// `ibv_destroy_ah`. Sends already posted with it are unaffected (each
    /// WQE holds its own copy of the address). `EINVAL`: a stale handle.
    pub fn destroy_ah(&mut self, ah: AhHandle) -> Result<(), Errno> {
        self.ahs.remove(ah.0).map(drop).ok_or(Errno::EINVAL)
    }

    /// The address vector of an address handle: the bytes 12..48 of the
    /// datagram segment every send with it carries.
    pub fn ah_address_vector(&self, ah: AhHandle) -> Result<AddressVector, Errno> {
        self.ahs.get(ah.0).map(|e| e.av).ok_or(Errno::EINVAL)
    }

    /// `ibv_create_qp` with `qp_type`: [`Verbs::create_qp`] for RC; for UD
    /// the send WQE holds the 64 bytes of control and datagram segments
    /// before its data (rdma-core `sq_overhead` for UD), so `max_send_sge`
    /// and `max_inline_data` are checked against that, and the QP receives
    /// through its own receive queue or the SRQ. The same errors.
    pub fn create_qp_of_type(
        &mut self,
        attr: &QpInitAttr,
        qp_type: QpType,
    ) -> Result<(QpHandle, QpCap), Errno> {
        self.create_qp_typed(attr, qp_type == QpType::Ud)
    }

    /// The transport a QP was created with.
    pub fn qp_type(&self, qp: QpHandle) -> Result<QpType, Errno> {
        Ok(if self.qp_entry(qp)?.qp.is_ud() {
            QpType::Ud
        } else {
            QpType::Rc
        })
    }

    /// `ibv_modify_qp` of a UD QP ([`Verbs::modify_qp`] dispatches here):
    /// ib core's UD rows (RESET→INIT: `PKEY_INDEX | PORT | QKEY`;
    /// INIT→RTR: nothing required; RTR→RTS: `SQ_PSN`; `QKEY` optional
    /// after; nothing else allowed, `EINVAL` otherwise), then the port and
    /// PSN widths, then the firmware command with Linux's UD fields.
    pub(super) fn modify_ud_qp(
        &mut self,
        qp: QpHandle,
        attr: &super::QpAttr,
        mask: super::QpAttrMask,
    ) -> Result<(), Errno> {
        use super::QpAttrMask as M;
        let e = self.qp_entry(qp)?;
        let tracked = QpState::from_driver(e.qp.state());
        let cur = if mask.contains(M::CUR_STATE) {
            attr.cur_qp_state
        } else {
            tracked
        };
        let new = if mask.contains(M::STATE) {
            attr.qp_state
        } else {
            cur
        };
        let Some((req, opt)) = ud_rule(cur, new) else {
            return Err(Errno::EINVAL);
        };
        let fits = mask.contains(req) && mask.0 & !(req.0 | opt.0 | M::STATE.0) == 0;
        let ports = self.hca.caps().num_ports.max(1);
        let bad_port = mask.contains(M::PORT) && !(1..=ports).contains(&attr.port_num);
        let bad_psn = mask.contains(M::SQ_PSN) && attr.sq_psn > 0x00ff_ffff;
        if !fits || cur != tracked || bad_port || bad_psn {
            return Err(Errno::EINVAL);
        }
        if cur == QpState::Reset && new == QpState::Reset {
            return Ok(());
        }
        if matches!(new, QpState::Sqd | QpState::Sqe) || matches!(cur, QpState::Sqd) {
            return Err(Errno::EOPNOTSUPP);
        }
        if mask.contains(M::QKEY) && !matches!((cur, new), (QpState::Reset, QpState::Init)) {
            // A Q_Key change after RESET→INIT goes in `opt_param_mask`,
            // which this driver does not send for UD.
            return Err(Errno::EOPNOTSUPP);
        }
        if mask.intersects(M::PKEY_INDEX | M::PORT) && cur != QpState::Reset {
            return Err(Errno::EOPNOTSUPP);
        }
        let hca = &self.hca;
        let e = self.qps.get_mut(qp.0).ok_or(Errno::EINVAL)?;
        let q = &mut e.qp;
        match (cur, new) {
            (_, QpState::Reset) => hca.qp_to_reset(q)?,
            (_, QpState::Err) => hca.qp_to_error(q)?,
            (QpState::Reset, QpState::Init) => hca.ud_qp_to_init(
                q,
                &crate::qp::UdInitAttr {
                    port: attr.port_num,
                    pkey_index: attr.pkey_index,
                    qkey: attr.qkey,
                },
            )?,
            (QpState::Init, QpState::Rtr) => hca.ud_qp_to_rtr(q)?,
            (QpState::Rtr, QpState::Rts) => hca.ud_qp_to_rts(q, attr.sq_psn)?,
            // RTS→RTS / INIT→INIT with nothing to change.
            (a, b) if a == b => {}
            _ => return Err(Errno::EINVAL),
        }
        // `can_send` stays false for a UD QP: `post_send` leaves the RC path
        // at that one check and sends by the QP's state.
        let b = &mut e.book;
        if mask.contains(M::PORT) {
            b.port = attr.port_num;
        }
        let b = *b;
        if new == QpState::Reset {
            let qpn = e.qp.qpn();
            self.clean_cqs(qpn, &b);
        }
        Ok(())
    }
}

/// `post_send` on a QP whose `can_send` is false: a UD QP goes to
/// [`post_ud`] (which sends from RTS on, as its state says: in ERR reached
/// from there, requests are flushed); any other is `ENOMEM` at the first
/// request (not in RTS since the last reset, as rdma-core). Out of line:
/// the RC `post_send` stays as small as it was; [`post_ud`] is inlined
/// here, so a UD post makes one call.
#[cold]
#[inline(never)]
pub(super) fn post_not_rc<H: Hal, const W: usize>(
    e: &mut super::qp::QpEntry<H, W>,
    ahs: &Table<AhEntry, MAX_AHS>,
    wrs: &[SendWr<'_>],
) -> Result<(), PostSendError> {
    if e.qp.is_ud() {
        return post_ud(&mut e.qp, ahs, wrs, e.book.sq_sig_all);
    }
    Err(PostSendError {
        index: 0,
        errno: Errno::ENOMEM,
    })
}

/// `post_send` on a UD QP: each request's address handle is looked up
/// (stale or missing: `EINVAL` at its index), its opcode must be SEND or
/// SEND_WITH_IMM (`EINVAL`), then it goes to the ring with its own copy of
/// the address vector; one doorbell per 16 requests. Each request is
/// looked up once, as the ring takes it (the ones before a refused one
/// stay posted). A QP not in a state that sends refuses the first request
/// with `ENOMEM` before any of them is looked at, as the RC path does.
#[inline(always)]
pub(super) fn post_ud<H: Hal, const W: usize>(
    qp: &mut Qp<H, [SendSlot; W]>,
    ahs: &Table<AhEntry, MAX_AHS>,
    wrs: &[SendWr<'_>],
    sig_all: bool,
) -> Result<(), PostSendError> {
    if let [wr] = wrs {
        // One request: no loop, no list bookkeeping.
        let Some(posted) = ud_request(ahs, wr, sig_all) else {
            // The ring's state check comes first, as for a list.
            return Err(PostSendError {
                index: 0,
                errno: if qp.state().can_post_send() {
                    Errno::EINVAL
                } else {
                    Errno::ENOMEM
                },
            });
        };
        return qp.post_send_one(&posted).map_err(|e| PostSendError {
            index: 0,
            errno: super::qp::send_errno(&e),
        });
    }
    for (c, chunk) in wrs.chunks(16).enumerate() {
        let base = c * 16;
        // The requests up to the first that names no live handle or a
        // connected opcode; that one is refused after the ones before it
        // are posted (unless the ring refuses one of those first).
        let mut bad = None;
        let posted = chunk.iter().enumerate().map_while(|(i, wr)| {
            let p = ud_request(ahs, wr, sig_all);
            if p.is_none() {
                bad = Some(base + i);
            }
            p
        });
        qp.post_send_iter(posted).map_err(|f| PostSendError {
            index: base + f.index,
            errno: super::qp::send_errno(&f.error),
        })?;
        if let Some(index) = bad {
            return Err(PostSendError {
                index,
                errno: Errno::EINVAL,
            });
        }
    }
    Ok(())
}

/// `wr` as the ring takes it, with its address handle's vector; `None`
/// when the handle is missing or stale or the opcode is not SEND or
/// SEND_WITH_IMM.
#[inline(always)]
fn ud_request<'w, 'a>(
    ahs: &'w Table<AhEntry, MAX_AHS>,
    wr: &'w SendWr<'a>,
    sig_all: bool,
) -> Option<PostedUd<'w, 'a>> {
    if !matches!(wr.opcode, WrOpcode::Send | WrOpcode::SendWithImm) {
        return None;
    }
    let av = &ahs.get(wr.ah?.0)?.av;
    Some(PostedUd { wr, sig_all, av })
}

/// A verbs UD work request as the send ring reads it.
struct PostedUd<'w, 'a> {
    wr: &'w SendWr<'a>,
    sig_all: bool,
    av: &'w AddressVector,
}

impl SendWork for PostedUd<'_, '_> {
    #[inline(always)]
    fn wr_id(&self) -> u64 {
        self.wr.wr_id
    }

    #[inline(always)]
    fn opcode(&self) -> SendOpcode {
        if self.wr.opcode == WrOpcode::SendWithImm {
            SendOpcode::SendImm
        } else {
            SendOpcode::Send
        }
    }

    #[inline(always)]
    fn imm(&self) -> u32 {
        self.wr.imm_data
    }

    #[inline(always)]
    fn remote(&self) -> (u64, u32) {
        (0, 0)
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
    fn datagram(&self) -> Option<Datagram<'_>> {
        Some(Datagram {
            av: self.av,
            remote_qpn: self.wr.remote_qpn,
            remote_qkey: self.wr.remote_qkey,
        })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::QpAttrMask as M;

    #[test]
    fn the_ud_rows_of_the_state_table() {
        let (req, opt) = ud_rule(QpState::Reset, QpState::Init).unwrap();
        assert_eq!(req, M::PKEY_INDEX | M::PORT | M::QKEY);
        assert_eq!(opt, M(0));
        assert_eq!(ud_rule(QpState::Init, QpState::Rtr).unwrap().0, M(0));
        assert_eq!(ud_rule(QpState::Rtr, QpState::Rts).unwrap().0, M::SQ_PSN);
        assert!(ud_rule(QpState::Reset, QpState::Rtr).is_none());
        assert!(ud_rule(QpState::Init, QpState::Rts).is_none());
        // The helper masks are exactly the required ones plus STATE.
        assert_eq!(M::UD_INIT.0, req.0 | M::STATE.0);
        assert_eq!(M::UD_RTS.0, M::SQ_PSN.0 | M::STATE.0);
    }
}
