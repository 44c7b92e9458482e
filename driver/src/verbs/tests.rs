//! Unit tests of the pure parts of the facade (the behaviour against the
//! model is in `tests/tests/verbs*.rs`).

use super::*;
use crate::error::{Error, FatalReason};
use mlx5_regs::{CmdStatus, Opcode};

#[test]
fn driver_errors_become_their_errno_and_a_dead_device_is_eio() {
    let cmd = Error::Command {
        opcode: Opcode::MODIFY_CQ,
        op_mod: 1,
        status: CmdStatus::BAD_SIZE_OUTS_CQES_ERR,
        syndrome: 0,
    };
    assert_eq!(Errno::from(cmd), Errno::EINVAL);
    assert_eq!(Errno::from(Error::Busy("x")), Errno::EBUSY);
    let fatal = Error::Fatal {
        health_syndrome: 7,
        ext_syndrome: 0,
        reason: FatalReason::Syndrome,
    };
    assert_eq!(Errno::from(fatal), Errno::EIO);
    assert_eq!(Errno::ETIMEDOUT.name(), Some("ETIMEDOUT"));
    assert_eq!(Errno(4242).name(), None);
}

#[test]
fn error_syndromes_map_like_libmlx5() {
    assert_eq!(WcStatus::from_syndrome(0x01), WcStatus::LocLenErr);
    assert_eq!(WcStatus::from_syndrome(0x04), WcStatus::LocProtErr);
    assert_eq!(WcStatus::from_syndrome(0x05), WcStatus::WrFlushErr);
    assert_eq!(WcStatus::from_syndrome(0x16), WcStatus::RnrRetryExcErr);
    assert_eq!(WcStatus::from_syndrome(0x22), WcStatus::RemAbortErr);
    assert_eq!(WcStatus::from_syndrome(0x99), WcStatus::GeneralErr);
}

#[test]
fn srq_mask_bits_are_the_ibverbs_values() {
    assert_eq!(SrqAttrMask::MAX_WR.0, 1);
    assert_eq!(SrqAttrMask::LIMIT.0, 2);
    let both = SrqAttrMask::MAX_WR | SrqAttrMask::LIMIT;
    assert!(both.contains(SrqAttrMask::LIMIT) && both.contains(SrqAttrMask::MAX_WR));
    assert!(!SrqAttrMask::LIMIT.contains(both));
}
