//! `ibv_modify_qp` with attribute masks, checked as ib core and mlx5 check
//! them before anything reaches the device:
//!
//! 1. the transition and the mask: the RC rows of ib core's
//!    `qp_state_table` (`drivers/infiniband/core/verbs.c`,
//!    `ib_modify_qp_is_ok`): each transition's required attributes must all
//!    be in the mask, and nothing but them, its optional ones and `STATE`;
//!    `CUR_STATE` only from RTR, RTS, SQD or SQE;
//! 2. the values: port, read/atomic depths (Linux `mlx5_ib_modify_qp`), the
//!    address vector (uverbs, `mlx5_set_path`; the source GID index against
//!    the table, a RoCE destination MAC), and the field widths
//!    firmware has (timeouts, retry counts, PSNs, QP numbers);
//! 3. RESET → RESET succeeds with nothing to do (Linux).
//!
//! Any failure is `EINVAL` with nothing changed; a transition the driver
//! cannot make (SQD, alternate paths) is `EOPNOTSUPP`. Then one firmware
//! command: RST2INIT, INIT2INIT, INIT2RTR, RTR2RTS, RTS2RTS, 2ERR or 2RST,
//! the optional fields in `opt_param_mask` as Linux's `opt_mask` allows.
//! Firmware's own refusals (a partition key index beyond its table, an MTU
//! above the port's, a QP whose state the device changed meanwhile) come back as their errno, `EINVAL`, with the
//! QP unchanged.

use mlx5_hal::Hal;

use super::qp::QpBook;
use super::{AccessFlags, AhAttr, Errno, QpAttr, QpAttrMask, QpHandle, QpState, Verbs};
use crate::qp::{roce_udp_sport, AddressPath, InitAttr, QpAccess, QpOptional, RtrAttr, RtsAttr};
use crate::stats::CmdObserver;

const M24: u32 = 0x00ff_ffff;

/// The RC row of ib core's `qp_state_table` for `from → to`: (required,
/// optional) attributes, `None` for a transition that does not exist.
pub(super) fn rule(from: QpState, to: QpState) -> Option<(QpAttrMask, QpAttrMask)> {
    use QpAttrMask as M;
    use QpState::*;
    let none = M(0);
    let rts_opt =
        M::CUR_STATE | M::ACCESS_FLAGS | M::ALT_PATH | M::MIN_RNR_TIMER | M::PATH_MIG_STATE;
    Some(match (from, to) {
        (Reset, Reset) => (none, none),
        (Reset, Init) => (M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS, none),
        (Reset, _) => return None,
        (_, Reset) | (_, Err) => (none, none),
        (Init, Init) => (none, M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS),
        (Init, Rtr) => (
            M::AV
                | M::PATH_MTU
                | M::DEST_QPN
                | M::RQ_PSN
                | M::MAX_DEST_RD_ATOMIC
                | M::MIN_RNR_TIMER,
            M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX,
        ),
        (Rtr, Rts) => (
            M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC,
            rts_opt,
        ),
        (Rts, Rts) | (Sqd, Rts) => (none, rts_opt),
        (Rts, Sqd) => (none, M::EN_SQD_ASYNC_NOTIFY),
        (Sqd, Sqd) => (
            none,
            M::PORT
                | M::AV
                | M::TIMEOUT
                | M::RETRY_CNT
                | M::RNR_RETRY
                | M::MAX_QP_RD_ATOMIC
                | M::MAX_DEST_RD_ATOMIC
                | M::ALT_PATH
                | M::ACCESS_FLAGS
                | M::PKEY_INDEX
                | M::MIN_RNR_TIMER
                | M::PATH_MIG_STATE,
        ),
        (Sqe, Rts) => (none, none),
        _ => return None,
    })
}

/// `ib_modify_qp_is_ok` for RC.
pub(super) fn mask_ok(cur: QpState, new: QpState, mask: QpAttrMask) -> bool {
    if mask.contains(QpAttrMask::CUR_STATE)
        && !matches!(
            cur,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        )
    {
        return false;
    }
    let Some((req, opt)) = rule(cur, new) else {
        return false;
    };
    mask.contains(req) && mask.0 & !(req.0 | opt.0 | QpAttrMask::STATE.0) == 0
}

/// The remote rights firmware gets (Linux `to_mlx5_access_flags`): without
/// responder resources (`max_dest_rd_atomic` 0) only remote write is kept.
fn hw_access(flags: AccessFlags, resp_depth: u8) -> QpAccess {
    let flags = if resp_depth == 0 {
        AccessFlags(flags.0 & AccessFlags::REMOTE_WRITE.0)
    } else {
        flags
    };
    QpAccess {
        remote_read: flags.contains(AccessFlags::REMOTE_READ),
        remote_write: flags.contains(AccessFlags::REMOTE_WRITE),
        remote_atomic: flags.contains(AccessFlags::REMOTE_ATOMIC),
    }
}

/// The MAC of a link-local GID (fe80::/64 with a modified EUI-64 from a
/// MAC): Linux `rdma_get_ll_mac`, what address resolution gives for it.
fn ll_mac(gid: &[u8; 16]) -> Option<[u8; 6]> {
    let link_local = gid[..8] == [0xfe, 0x80, 0, 0, 0, 0, 0, 0];
    if !link_local || gid[11] != 0xff || gid[12] != 0xfe {
        return None;
    }
    Some([gid[8] ^ 2, gid[9], gid[10], gid[13], gid[14], gid[15]])
}

/// The RoCE v2 UDP source port of a flow label (Linux
/// `rdma_flow_label_to_udp_sport`).
fn flow_label_sport(fl: u32) -> u16 {
    let fl = fl & 0xf_ffff;
    (((fl & 0x3fff) ^ ((fl & 0xf_c000) >> 14)) | 0xc000) as u16
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
    /// `ibv_modify_qp`: move the QP to `attr.qp_state` (or keep its state
    /// without [`QpAttrMask::STATE`]) and set the attributes `mask` names.
    /// Checked before anything reaches the device, as ib core and mlx5 check:
    /// the transition and the mask (ib core's `ib_modify_qp_is_ok`: each
    /// transition's required attributes, and nothing but them, its optional
    /// ones and `STATE`), then the values (port, read/atomic depths, the
    /// address vector, the widths of firmware's fields). A failed check is
    /// `EINVAL` with nothing changed, as is a refusal by firmware (whose
    /// opcode, status and syndrome [`Verbs::last_error`] gives); SQD and
    /// alternate paths are `EOPNOTSUPP`, and so is `REMOTE_ATOMIC` (with
    /// responder resources) on a device without the IB atomics, as Linux
    /// refuses it; RESET to RESET does nothing. Moving
    /// to RESET also removes the QP's unpolled completions from its CQs
    /// (rdma-core); a QP that reached RTS accepts sends until it is reset.
    pub fn modify_qp(
        &mut self,
        qp: QpHandle,
        attr: &QpAttr,
        mask: QpAttrMask,
    ) -> Result<(), Errno> {
        use QpAttrMask as M;
        let e = self.qp_entry(qp)?;
        if e.qp.is_ud() {
            return self.modify_ud_qp(qp, attr, mask);
        }
        let tracked = QpState::from_driver(e.qp.state());
        let (qpn, book) = (e.qp.qpn(), e.book);
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
        if !mask_ok(cur, new, mask) || cur != tracked {
            return Err(Errno::EINVAL);
        }
        self.check_values(attr, mask)?;
        if cur == QpState::Reset && new == QpState::Reset {
            return Ok(());
        }
        if mask.intersects(M::ALT_PATH | M::PATH_MIG_STATE)
            || matches!(new, QpState::Sqd | QpState::Sqe)
            || matches!(cur, QpState::Sqd | QpState::Sqe)
        {
            return Err(Errno::EOPNOTSUPP);
        }
        let access = |depth| {
            let flags = if mask.contains(M::ACCESS_FLAGS) {
                attr.qp_access_flags
            } else {
                book.access
            };
            hw_access(flags, depth)
        };
        let opt_access = mask
            .contains(M::ACCESS_FLAGS)
            .then(|| access(book.resp_depth));
        let min_rnr = mask
            .contains(M::MIN_RNR_TIMER)
            .then_some(attr.min_rnr_timer);
        let pkey = mask.contains(M::PKEY_INDEX).then_some(attr.pkey_index);
        let path = if mask.contains(M::AV) {
            Some(self.address_path(&attr.ah_attr, book.port, qpn, attr.dest_qp_num)?)
        } else {
            None
        };
        // The rights firmware would get: remote atomic needs the IB atomics
        // (Linux `get_atomic_mode` fails `to_mlx5_access_flags` with
        // EOPNOTSUPP), refused before any command.
        let sent = match (cur, new) {
            (QpState::Reset, QpState::Init) => {
                Some(hw_access(attr.qp_access_flags, book.resp_depth))
            }
            (QpState::Init, QpState::Rtr) => Some(access(attr.max_dest_rd_atomic)),
            (_, QpState::Reset | QpState::Err) => None,
            _ => opt_access,
        };
        let atomics = self.hca.atomic_caps().is_some_and(|a| a.has_ib_ops());
        if sent.is_some_and(|a| a.remote_atomic) && !atomics {
            return Err(Errno::EOPNOTSUPP);
        }
        if matches!(path, Some(AddressPath::Roce { .. })) {
            // Firmware connects RoCE QPs only with RoCE enabled.
            self.hca.enable_roce()?;
        }
        let hca = &self.hca;
        let e = self.qps.get_mut(qp.0).ok_or(Errno::EINVAL)?;
        let q = &mut e.qp;
        match (cur, new) {
            (_, QpState::Reset) => hca.qp_to_reset(q)?,
            (_, QpState::Err) => hca.qp_to_error(q)?,
            (QpState::Reset, QpState::Init) => hca.qp_to_init(
                q,
                &InitAttr {
                    port: attr.port_num,
                    pkey_index: attr.pkey_index,
                    access: hw_access(attr.qp_access_flags, book.resp_depth),
                },
            )?,
            (QpState::Init, QpState::Init) => hca.qp_init_to_init(
                q,
                &QpOptional {
                    access: opt_access,
                    pkey_index: pkey,
                    port: mask.contains(M::PORT).then_some(attr.port_num),
                    min_rnr_timer: None,
                },
            )?,
            (QpState::Init, QpState::Rtr) => {
                let Some(path) = path else {
                    return Err(Errno::EINVAL);
                };
                let rtr = RtrAttr {
                    path,
                    mtu: attr.path_mtu,
                    dest_qpn: attr.dest_qp_num,
                    rq_psn: attr.rq_psn,
                    min_rnr_timer: attr.min_rnr_timer,
                    max_dest_rd_atomic: attr.max_dest_rd_atomic,
                };
                // The responder depth is set here, so the rights are always
                // sent (Linux sets the access bits whenever either changes).
                let opt = QpOptional {
                    access: Some(access(attr.max_dest_rd_atomic)),
                    pkey_index: pkey,
                    ..QpOptional::NONE
                };
                hca.qp_to_rtr_with(q, &rtr, &opt)?
            }
            (QpState::Rtr, QpState::Rts) => {
                let rts = RtsAttr {
                    sq_psn: attr.sq_psn,
                    timeout: attr.timeout,
                    retry_cnt: attr.retry_cnt,
                    rnr_retry: attr.rnr_retry,
                    max_rd_atomic: attr.max_rd_atomic,
                };
                let opt = QpOptional {
                    access: opt_access,
                    min_rnr_timer: min_rnr,
                    ..QpOptional::NONE
                };
                hca.qp_to_rts_with(q, &rts, &opt)?
            }
            (QpState::Rts, QpState::Rts) => hca.qp_rts_to_rts(
                q,
                &QpOptional {
                    access: opt_access,
                    min_rnr_timer: min_rnr,
                    ..QpOptional::NONE
                },
            )?,
            _ => return Err(Errno::EINVAL),
        }
        let b = &mut e.book;
        if mask.contains(M::ACCESS_FLAGS) {
            b.access = attr.qp_access_flags;
        }
        if mask.contains(M::MAX_DEST_RD_ATOMIC) {
            b.resp_depth = attr.max_dest_rd_atomic;
        }
        if mask.contains(M::PORT) {
            b.port = attr.port_num;
        }
        match new {
            QpState::Rts => b.can_send = true,
            QpState::Reset => b.can_send = false,
            _ => {}
        }
        let b: QpBook = *b;
        if new == QpState::Reset {
            self.clean_cqs(qpn, &b);
        }
        Ok(())
    }

    /// Step 2 of the checks: the values of the attributes in `mask`.
    fn check_values(&self, a: &QpAttr, mask: QpAttrMask) -> Result<(), Errno> {
        use QpAttrMask as M;
        let caps = self.hca.caps();
        let ports = caps.num_ports.max(1);
        let port_ok = |p: u8| (1..=ports).contains(&p);
        let depth = |log: u8| 1u32 << log.min(31);
        let bad = [
            mask.contains(M::PORT) && !port_ok(a.port_num),
            mask.contains(M::AV) && !port_ok(a.ah_attr.port_num),
            mask.contains(M::ACCESS_FLAGS) && a.qp_access_flags.0 & !AccessFlags::QP_FLAGS.0 != 0,
            mask.contains(M::TIMEOUT) && a.timeout > 31,
            mask.contains(M::MIN_RNR_TIMER) && a.min_rnr_timer > 31,
            mask.contains(M::RETRY_CNT) && a.retry_cnt > 7,
            mask.contains(M::RNR_RETRY) && a.rnr_retry > 7,
            mask.contains(M::RQ_PSN) && a.rq_psn > M24,
            mask.contains(M::SQ_PSN) && a.sq_psn > M24,
            mask.contains(M::DEST_QPN) && a.dest_qp_num > M24,
            mask.contains(M::MAX_QP_RD_ATOMIC)
                && a.max_rd_atomic as u32 > depth(caps.log_max_ra_req_qp),
            mask.contains(M::MAX_DEST_RD_ATOMIC)
                && a.max_dest_rd_atomic as u32 > depth(caps.log_max_ra_res_qp),
        ];
        if bad.contains(&true) {
            return Err(Errno::EINVAL);
        }
        Ok(())
    }

    /// The firmware address path of an address vector (Linux
    /// `mlx5_set_path` and ib core's checks before it):
    ///
    /// * force loopback (the mlx5 extension);
    /// * InfiniBand: the destination LID (non-zero), with `is_global` also
    ///   the GRH (source GID index inside the table, destination GID, hop
    ///   limit, traffic class, flow label);
    /// * Ethernet (RoCE): the GRH is required; the source GID index must
    ///   name a programmed entry, whose RoCE version decides the framing;
    ///   the destination MAC is [`AhAttr::dmac`] or, without one, that of a
    ///   link-local destination GID; a hop limit below 2 becomes 64; the
    ///   RoCE v2 UDP source port comes from the flow label or, without one,
    ///   from both QP numbers (Linux `rdma_flow_label_to_udp_sport`,
    ///   `rdma_calc_flow_label`).
    ///
    /// A refusal is `EINVAL`, its reason in [`Verbs::last_error`].
    pub(super) fn address_path(
        &mut self,
        ah: &AhAttr,
        port: u8,
        lqpn: u32,
        rqpn: u32,
    ) -> Result<AddressPath, Errno> {
        if ah.force_loopback {
            return Ok(AddressPath::ForceLoopback { port });
        }
        let g = &ah.grh;
        if g.flow_label > 0xf_ffff {
            return Err(self.refuse("flow label wider than 20 bits"));
        }
        let table = self.hca.gid_table_len();
        if self.hca.caps().port_type == mlx5_regs::consts::port::TYPE_IB {
            if ah.dlid == 0 {
                return Err(self.refuse("InfiniBand address vector without a destination LID"));
            }
            if !ah.is_global {
                return Ok(AddressPath::Ib {
                    port,
                    dlid: ah.dlid,
                    sl: ah.sl,
                });
            }
            if u16::from(g.sgid_index) >= table {
                return Err(self.refuse("sgid_index beyond the port's GID table"));
            }
            return Ok(AddressPath::IbGlobal {
                port,
                dlid: ah.dlid,
                sl: ah.sl,
                sgid_index: g.sgid_index,
                dgid: g.dgid,
                hop_limit: g.hop_limit,
                traffic_class: g.traffic_class,
                flow_label: g.flow_label,
            });
        }
        if !ah.is_global {
            return Err(self.refuse("a RoCE address vector needs the GRH (is_global)"));
        }
        let index = u16::from(g.sgid_index);
        if index >= table {
            return Err(self.refuse("sgid_index beyond the port's GID table"));
        }
        if !self.hca.gid_programmed(index) {
            return Err(self.refuse("sgid_index names an empty GID table entry"));
        }
        let Some(dmac) = ah.dmac.or_else(|| ll_mac(&g.dgid)) else {
            return Err(self.refuse(
                "RoCE destination without a MAC: the GID is not link-local, so its MAC \
                 cannot be derived, and this driver has no neighbour table; set AhAttr::dmac",
            ));
        };
        let v2 = self.hca.gid_is_roce_v2(index);
        let udp_sport = match (v2, g.flow_label) {
            (false, _) => 0,
            (true, 0) => roce_udp_sport(lqpn, rqpn),
            (true, fl) => flow_label_sport(fl),
        };
        Ok(AddressPath::Roce {
            port,
            sgid_index: g.sgid_index,
            dgid: g.dgid,
            dmac,
            hop_limit: if g.hop_limit < 2 { 64 } else { g.hop_limit },
            udp_sport,
            traffic_class: g.traffic_class,
            flow_label: g.flow_label,
            sl: ah.sl,
            roce_v2: v2,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rc_rows_of_the_state_table() {
        use QpAttrMask as M;
        use QpState::*;
        let init = M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS;
        assert!(mask_ok(Reset, Init, init));
        assert!(
            !mask_ok(Reset, Init, M::STATE | M::PKEY_INDEX | M::PORT),
            "missing access"
        );
        assert!(!mask_ok(Reset, Init, init | M::QKEY), "QKEY is not RC's");
        assert!(!mask_ok(Reset, Rtr, M::STATE), "no RESET→RTR");
        assert!(!mask_ok(Reset, Err, M::STATE), "no RESET→ERR in ib core");
        assert!(mask_ok(Reset, Reset, M::STATE));
        let rtr = M::STATE
            | M::AV
            | M::PATH_MTU
            | M::DEST_QPN
            | M::RQ_PSN
            | M::MAX_DEST_RD_ATOMIC
            | M::MIN_RNR_TIMER;
        assert!(mask_ok(Init, Rtr, rtr));
        assert!(mask_ok(Init, Rtr, rtr | M::ACCESS_FLAGS | M::PKEY_INDEX));
        assert!(
            !mask_ok(Init, Rtr, rtr | M::PORT),
            "PORT is not optional here"
        );
        assert!(
            !mask_ok(Init, Rtr, rtr | M::CUR_STATE),
            "CUR_STATE from INIT"
        );
        let rts = M::STATE | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN;
        assert!(!mask_ok(Rtr, Rts, rts), "MAX_QP_RD_ATOMIC is required");
        assert!(mask_ok(Rtr, Rts, rts | M::MAX_QP_RD_ATOMIC | M::CUR_STATE));
        assert!(mask_ok(Rts, Rts, M::ACCESS_FLAGS | M::MIN_RNR_TIMER));
        assert!(!mask_ok(Rts, Rts, M::TIMEOUT));
        assert!(mask_ok(Rts, Err, M::STATE) && mask_ok(Err, Reset, M::STATE));
        assert!(!mask_ok(Err, Rts, M::STATE));
        assert!(
            !mask_ok(Rts, Err, M::STATE | M::ACCESS_FLAGS),
            "2ERR takes nothing"
        );
        assert!(!mask_ok(Init, Init, M(1 << 30)), "unknown bit");
    }

    #[test]
    fn access_without_responder_resources_keeps_remote_write_only() {
        let all = AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC;
        let a = hw_access(all, 0);
        assert!(a.remote_write && !a.remote_read && !a.remote_atomic);
        let a = hw_access(all, 1);
        assert!(a.remote_write && a.remote_read && a.remote_atomic);
    }

    #[test]
    fn link_local_gids_give_their_mac_and_flow_labels_a_port() {
        let gid = [
            0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0xc9, 0x11, 0xff, 0xfe, 0x22, 0x33, 0x44,
        ];
        assert_eq!(ll_mac(&gid), Some([0x02, 0xc9, 0x11, 0x22, 0x33, 0x44]));
        let mut global = gid;
        global[0] = 0x20;
        assert_eq!(ll_mac(&global), None);
        assert_eq!(flow_label_sport(0x110), 0xc110);
        assert_eq!(flow_label_sport(0x4000), 0xc001);
        // The driver's derivation from QP numbers is this on their label.
        assert_eq!(roce_udp_sport(0x10, 0x11), flow_label_sport(0x10 * 0x11));
    }
}
