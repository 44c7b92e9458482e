//! `ibv_modify_cq` (CQ moderation) and the moderation limits of
//! `ibv_query_device_ex`.
//!
//! The checks and their order are libibverbs' and the kernel's on mlx5:
//! rdma-core `ibv_cmd_modify_cq` refuses a mask with bits at or above
//! `IBV_CQ_ATTR_RESERVED` (`EINVAL`); `ib_uverbs_ex_modify_cq`
//! (`drivers/infiniband/core/uverbs_cmd.c`) refuses an empty mask
//! (`EINVAL`) and an unknown CQ (`EINVAL`); `mlx5_ib_modify_cq`
//! (`drivers/infiniband/hw/mlx5/cq.c`) refuses a device without
//! `cq_moderation` (`EOPNOTSUPP`) and a period above 4 095 (`EINVAL`),
//! then sends MODIFY_CQ with PERIOD | COUNT.

use mlx5_hal::Hal;

use super::{CqHandle, Errno, Verbs};
use crate::cq::MAX_CQ_PERIOD;
use crate::stats::CmdObserver;

/// `struct ibv_moderate_cq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ModerateCq {
    /// Completions per event (0: no count).
    pub cq_count: u16,
    /// Microseconds before the event (0: no timer; at most 4 095 on mlx5).
    pub cq_period: u16,
}

/// `struct ibv_modify_cq_attr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ModifyCqAttr {
    /// `IBV_CQ_ATTR_*` bits: [`ModifyCqAttr::MODERATE`] is the only one.
    pub attr_mask: u32,
    /// The moderation values (`IBV_CQ_ATTR_MODERATE`).
    pub moderate: ModerateCq,
}

impl ModifyCqAttr {
    /// `IBV_CQ_ATTR_MODERATE`.
    pub const MODERATE: u32 = 1 << 0;
    /// `IBV_CQ_ATTR_RESERVED`: this bit and every one above it are unknown.
    pub const RESERVED: u32 = 1 << 1;
}

/// `struct ibv_cq_moderation_caps` (`ibv_device_attr_ex.cq_mod_caps`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CqModerationCaps {
    /// Largest `cq_count` (0 without moderation).
    pub max_cq_count: u16,
    /// Largest `cq_period` in microseconds (0 without moderation).
    pub max_cq_period: u16,
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
    /// `ibv_modify_cq`: completion event moderation of `cq`. Once set, an
    /// armed CQ's event waits until `cq_count` completions were written
    /// since the previous event, or `cq_period` microseconds passed since
    /// it (the device's timer restarts at each event), whichever comes
    /// first; 0 turns either off, both 0 is an event per arm at the first
    /// completion again. Errors, in libibverbs' order: `EINVAL` for bits at
    /// or above `IBV_CQ_ATTR_RESERVED`, an empty mask or a stale handle;
    /// `EOPNOTSUPP` when the device cannot moderate (no command is sent);
    /// `EINVAL` for a period above 4 095.
    pub fn modify_cq(&mut self, cq: CqHandle, attr: &ModifyCqAttr) -> Result<(), Errno> {
        if attr.attr_mask >= ModifyCqAttr::RESERVED || attr.attr_mask == 0 {
            return Err(Errno::EINVAL);
        }
        let e = self.cq_entry(cq)?;
        if !self.hca.caps().cq_moderation {
            return Err(Errno::EOPNOTSUPP);
        }
        if attr.moderate.cq_period > MAX_CQ_PERIOD {
            return Err(Errno::EINVAL);
        }
        self.hca
            .modify_cq_moderation(&e.cq, attr.moderate.cq_period, attr.moderate.cq_count)?;
        Ok(())
    }

    /// `ibv_query_device_ex`'s `cq_mod_caps`: 65 535 completions and 4 095
    /// microseconds with the `cq_moderation` capability, zeros without
    /// (Linux `mlx5_ib_query_device`).
    pub fn cq_moderation_caps(&self) -> CqModerationCaps {
        if self.hca.caps().cq_moderation {
            CqModerationCaps {
                max_cq_count: u16::MAX,
                max_cq_period: MAX_CQ_PERIOD,
            }
        } else {
            CqModerationCaps::default()
        }
    }
}
