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

use mlx5_hal::Hal;
use mlx5_regs::consts::errno;

use super::cmd;
use super::queue::Cq;
use crate::caps::Caps;
use crate::error::Error;
use crate::hca::Hca;
use crate::stats::CmdObserver;

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

impl<H: Hal, O: CmdObserver, const CE: usize, const AE: usize> Hca<H, O, CE, AE> {
    /// Moderation values and period mode in one MODIFY_CQ op_mod 0 with
    /// `modify_field_select` PERIOD | COUNT | PERIOD_MODE (Linux
    /// `mlx5e_modify_cq_moderation`). Refused before any command:
    /// no `cq_moderation` or no `cq_period_mode_modify` (mlx5e's
    /// `set_coalesce` asks for both), or CQE-based timing without
    /// `cq_period_start_from_cqe`: [`Error::Unsupported`] (`EOPNOTSUPP`); a
    /// period above 4 095: [`Error::InvalidArgument`] (`EINVAL`).
    /// [`Hca::modify_cq_moderation`] changes period and count only.
    pub fn modify_cq_moderation_mode(&self, cq: &Cq<H>, m: &CqModeration) -> Result<(), Error> {
        check(self.caps(), m)?;
        if !self.caps().cq_period_mode_modify {
            return Err(Error::Unsupported {
                what: "CQ period mode change (cq_period_mode_modify capability)",
                errno: errno::EOPNOTSUPP,
            });
        }
        let input = cmd::modify_cq_moderation_mode(cq.cqn(), m)?;
        let mut out = [0u8; cmd::MODIFY_CQ_OUT];
        self.exec(&input, &mut out)
    }
}
