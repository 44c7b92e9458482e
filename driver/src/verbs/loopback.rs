//! Connecting QPs of this context to each other without knowing how the
//! device loops traffic back: force loopback, RoCE to its own GID, or
//! InfiniBand to its own LID, as bring-up chose (`crate::loopback`).

use mlx5_hal::Hal;

use super::{
    AccessFlags, AhAttr, Errno, GlobalRoute, QpAttr, QpAttrMask, QpHandle, QpState, Verbs,
};
use crate::loopback::LoopbackMode;
use crate::stats::CmdObserver;

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
    /// The address vector of this function's own port 1 in the loopback
    /// mode of bring-up: force loopback ([`AhAttr::force_loopback`]); RoCE
    /// with the GID bring-up programmed (its index as source, itself as
    /// destination, hop limit 64); InfiniBand with the port's LID.
    /// `EOPNOTSUPP` when bring-up found no way to loop traffic back.
    pub fn loopback_ah(&self) -> Result<AhAttr, Errno> {
        let ah = AhAttr {
            port_num: 1,
            ..AhAttr::default()
        };
        Ok(match self.hca.loopback_mode() {
            Some(LoopbackMode::ForceLoopback) => AhAttr {
                force_loopback: true,
                ..ah
            },
            Some(LoopbackMode::Roce { gid_index, gid, .. }) => AhAttr {
                is_global: true,
                grh: GlobalRoute {
                    dgid: gid,
                    flow_label: 0,
                    sgid_index: gid_index as u8,
                    hop_limit: 64,
                    traffic_class: 0,
                },
                ..ah
            },
            Some(LoopbackMode::Ib { lid }) => AhAttr { dlid: lid, ..ah },
            None => return Err(Errno::EOPNOTSUPP),
        })
    }

    /// Connect QPs `a` and `b` of this context, both in RESET, to each
    /// other (`a == b` connects a QP to itself): RESET → INIT → RTR → RTS
    /// through [`Verbs::modify_qp`] with [`Verbs::loopback_ah`], port 1,
    /// partition key index 0, remote write and read rights, the loopback
    /// MTU, PSNs 0, RNR timer 12 (0.64 ms), ack timeout 14, 7 transport
    /// retries, RNR retries forever, no RDMA reads. A failure names the
    /// step's errno and leaves the QPs where that step found them (reset
    /// them to try again).
    pub fn connect_loopback(&mut self, a: QpHandle, b: QpHandle) -> Result<(), Errno> {
        for h in [a, b] {
            if QpState::from_driver(self.qp_entry(h)?.qp.state()) != QpState::Reset {
                return Err(Errno::EINVAL);
            }
        }
        let ah_attr = self.loopback_ah()?;
        let (qa, qb) = (self.qp_num(a)?, self.qp_num(b)?);
        let pair: &[(QpHandle, u32)] = if a == b {
            &[(a, qa)]
        } else {
            &[(a, qb), (b, qa)]
        };
        let base = QpAttr {
            port_num: 1,
            pkey_index: 0,
            qp_access_flags: AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ,
            ah_attr,
            path_mtu: self.hca.loopback_mtu(),
            rq_psn: 0,
            sq_psn: 0,
            min_rnr_timer: 12,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 0,
            max_dest_rd_atomic: 0,
            ..QpAttr::default()
        };
        for (state, mask) in QpAttrMask::RC_CONNECT {
            for &(qp, peer) in pair {
                let attr = QpAttr {
                    qp_state: state,
                    dest_qp_num: peer,
                    ..base
                };
                self.modify_qp(qp, &attr, mask)?;
            }
        }
        Ok(())
    }
}
