//! Completion event moderation: at creation (`CqOptions::moderation`) and
//! with MODIFY_CQ op_mod 0 (docs/firmware.md §7.1, §7.2).
//!
//! The CQ context's `cq_max_count` (completions) and `cq_period`
//! (microseconds, at most 4 095, Linux `MLX5_MAX_CQ_PERIOD`) hold an armed
//! CQ's completion event back until that many completions were written
//! since the last event or the period expired, whichever comes first; 0
//! disables either. `cq_period_mode` says when the period timer restarts:
//! at each event ([`CqPeriodMode::StartFromEqe`]) or at each completion
//! ([`CqPeriodMode::StartFromCqe`], capability `cq_period_start_from_cqe`).

use mlx5_regs::consts::errno;

use crate::caps::Caps;
use crate::error::Error;

/// Largest `cq_period` (12 bits; Linux `MLX5_MAX_CQ_PERIOD`).
pub const MAX_CQ_PERIOD: u16 = 4095;

/// When the moderation period timer restarts (`cqc.cq_period_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CqPeriodMode {
    /// 0: at each completion event (Linux `MLX5_CQ_PERIOD_MODE_START_FROM_EQE`).
    #[default]
    StartFromEqe,
    /// 1: at each completion written (`START_FROM_CQE`): a burst never lets
    /// the timer expire, only the count raises events. Needs the capability
    /// `cq_period_start_from_cqe`.
    StartFromCqe,
}

impl CqPeriodMode {
    /// The `cqc.cq_period_mode` value.
    pub const fn cqc_value(self) -> u8 {
        match self {
            CqPeriodMode::StartFromEqe => 0,
            CqPeriodMode::StartFromCqe => 1,
        }
    }
}

/// Completion event moderation of a CQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CqModeration {
    /// Period in microseconds (0 = no timer; at most [`MAX_CQ_PERIOD`]).
    pub period: u16,
    /// Completions per event (0 = no count).
    pub max_count: u16,
    /// When the period timer restarts.
    pub mode: CqPeriodMode,
}

/// The checks Linux makes before it sends moderation values: the
/// `cq_moderation` capability (`mlx5_ib_modify_cq`: `EOPNOTSUPP`), the
/// period's range (`EINVAL`), and for CQE-based timing the capability
/// `cq_period_start_from_cqe` (mlx5e only offers the mode with it:
/// `EOPNOTSUPP`).
pub(crate) fn check(caps: &Caps, m: &CqModeration) -> Result<(), Error> {
    if !caps.cq_moderation {
        return Err(Error::Unsupported {
            what: "CQ moderation (cq_moderation capability)",
            errno: errno::EOPNOTSUPP,
        });
    }
    if m.period > MAX_CQ_PERIOD {
        return Err(Error::InvalidArgument("CQ moderation period above 4095"));
    }
    if m.mode == CqPeriodMode::StartFromCqe && !caps.cq_period_start_from_cqe {
        return Err(Error::Unsupported {
            what: "CQE-based moderation period (cq_period_start_from_cqe capability)",
            errno: errno::EOPNOTSUPP,
        });
    }
    Ok(())
}
