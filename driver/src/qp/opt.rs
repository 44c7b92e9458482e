//! Optional attributes of the modify-QP transitions: the QPC fields a
//! transition changes only when asked, named in `opt_param_mask`
//! (`enum mlx5_qp_optpar`, `include/linux/mlx5/qp.h`), and the two
//! transitions that consist of nothing else, INIT2INIT and RTS2RTS.
//!
//! Which optional fields each RC transition takes is Linux's `opt_mask`
//! table (`__mlx5_ib_modify_qp`, `drivers/infiniband/hw/mlx5/qp.c`),
//! restricted to the fields this driver sets: access rights, partition key
//! index, port, RNR NAK timer.

use mlx5_hal::Hal;
use mlx5_regs::consts::OptParam;
use mlx5_regs::layouts::{ads, qpc, rst2init_qp_in as m};
use mlx5_regs::Opcode;

use super::attr::{QpAccess, QpState};
use super::cmd;
use super::queue::Qp;
use super::wr::SendSlot;
use crate::cmd::encode::header_into;
use crate::error::Error;
use crate::hca::Hca;
use crate::stats::CmdObserver;

/// Optional fields a transition may change; `None` leaves a field as it
/// is (its `opt_param_mask` bit clear).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpOptional {
    /// Remote access rights (`rre`, `rwe`, `rae`): INIT2INIT, INIT2RTR,
    /// RTR2RTS, RTS2RTS.
    pub access: Option<QpAccess>,
    /// Partition key index of the primary path: INIT2INIT, INIT2RTR.
    pub pkey_index: Option<u16>,
    /// Port of the primary path, 1-based: INIT2INIT.
    pub port: Option<u8>,
    /// RNR NAK timer code (0..=31): RTR2RTS, RTS2RTS.
    pub min_rnr_timer: Option<u8>,
}

impl QpOptional {
    /// No optional field.
    pub const NONE: QpOptional = QpOptional {
        access: None,
        pkey_index: None,
        port: None,
        min_rnr_timer: None,
    };
}

/// The optional fields of `op` (RC rows of Linux `opt_mask`, restricted to
/// the fields of [`QpOptional`]).
fn allowed(op: Opcode) -> OptParam {
    let access = OptParam::RRE | OptParam::RWE | OptParam::RAE;
    match op {
        Opcode::INIT2INIT_QP => access | OptParam::PKEY_INDEX | OptParam::PRI_PORT,
        Opcode::INIT2RTR_QP => access | OptParam::PKEY_INDEX,
        Opcode::RTR2RTS_QP | Opcode::RTS2RTS_QP => access | OptParam::RNR_TIMEOUT,
        _ => OptParam::empty(),
    }
}

/// Write the fields of `opt` and their `opt_param_mask` bits into a
/// modify-QP input of opcode `op` (all share the layout of
/// `rst2init_qp_in`). A field the transition does not take is refused.
pub(super) fn apply(buf: &mut [u8], op: Opcode, opt: &QpOptional) -> Result<(), Error> {
    let mut mask = OptParam::empty();
    if opt.access.is_some() {
        mask |= OptParam::RRE | OptParam::RWE | OptParam::RAE;
    }
    if opt.pkey_index.is_some() {
        mask |= OptParam::PKEY_INDEX;
    }
    if opt.port.is_some() {
        mask |= OptParam::PRI_PORT;
    }
    if opt.min_rnr_timer.is_some() {
        mask |= OptParam::RNR_TIMEOUT;
    }
    if !allowed(op).contains(mask) {
        return Err(Error::InvalidArgument(
            "an optional QP attribute this transition does not take",
        ));
    }
    let q = m::qpc.get_mut(buf);
    if let Some(a) = opt.access {
        qpc::rre.set(q, a.remote_read)?;
        qpc::rwe.set(q, a.remote_write)?;
        qpc::rae.set(q, a.remote_atomic)?;
        if a.remote_atomic {
            // As at RST2INIT (`cmd::rst2init_qp`): the IB-compatible mode.
            qpc::atomic_mode.set(q, mlx5_regs::consts::atomic::MODE_IB_COMP)?;
        }
    }
    if let Some(t) = opt.min_rnr_timer {
        qpc::min_rnr_nak.set(q, t)?;
    }
    let path = qpc::primary_address_path.get_mut(q);
    if let Some(p) = opt.pkey_index {
        ads::pkey_index.set(path, p)?;
    }
    if let Some(p) = opt.port {
        ads::vhca_port_num.set(path, p)?;
    }
    m::opt_param_mask.set(buf, mask.bits())?;
    Ok(())
}

/// A modify-QP input of `op` for QP `qpn` carrying only optional fields.
fn optional_only(op: Opcode, qpn: u32, opt: &QpOptional) -> Result<[u8; m::SIZE], Error> {
    let mut b = [0u8; m::SIZE];
    header_into(&mut b, op, 0);
    m::qpn.set(&mut b, qpn)?;
    apply(&mut b, op, opt)?;
    Ok(b)
}

impl<H: Hal, O: CmdObserver, const CE: usize, const AE: usize> Hca<H, O, CE, AE> {
    /// INIT → INIT (INIT2INIT_QP): change the port, partition key index or
    /// access rights of a QP in INIT ([`QpOptional::min_rnr_timer`] is
    /// refused). A QP in another state is refused with [`Error::QpState`]
    /// before any command.
    pub fn qp_init_to_init<T: AsMut<[SendSlot]>>(
        &self,
        qp: &mut Qp<H, T>,
        opt: &QpOptional,
    ) -> Result<(), Error> {
        self.optional_only(qp, QpState::Init, Opcode::INIT2INIT_QP, "INIT2INIT_QP", opt)
    }

    /// RTS → RTS (RTS2RTS_QP): change the access rights or the RNR NAK
    /// timer of a QP in RTS (port and partition key index are refused).
    pub fn qp_rts_to_rts<T: AsMut<[SendSlot]>>(
        &self,
        qp: &mut Qp<H, T>,
        opt: &QpOptional,
    ) -> Result<(), Error> {
        self.optional_only(qp, QpState::Rts, Opcode::RTS2RTS_QP, "RTS2RTS_QP", opt)
    }

    fn optional_only<T: AsMut<[SendSlot]>>(
        &self,
        qp: &mut Qp<H, T>,
        from: QpState,
        op: Opcode,
        name: &'static str,
        opt: &QpOptional,
    ) -> Result<(), Error> {
        if qp.state != from {
            return Err(Error::QpState {
                qpn: qp.qpn,
                state: qp.state,
                op: name,
            });
        }
        if let Some(p) = opt.port {
            self.check_port(p)?;
        }
        let input = optional_only(op, qp.qpn, opt)?;
        let mut out = [0u8; cmd::MODIFY_QP_OUT];
        self.exec(&input, &mut out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_transition_takes_its_own_optional_fields() {
        let access = QpOptional {
            access: Some(QpAccess {
                remote_read: true,
                remote_write: false,
                remote_atomic: true,
            }),
            ..QpOptional::NONE
        };
        let b = optional_only(Opcode::RTS2RTS_QP, 0x42, &access).unwrap();
        let q = m::qpc.get(&b);
        assert_eq!(
            (qpc::rre.get(q), qpc::rwe.get(q), qpc::rae.get(q)),
            (true, false, true)
        );
        assert_eq!(m::opt_param_mask.get(&b), 0b1110, "RRE | RAE | RWE");
        assert_eq!(m::qpn.get(&b), 0x42);

        let port = QpOptional {
            port: Some(1),
            pkey_index: Some(3),
            ..QpOptional::NONE
        };
        let b = optional_only(Opcode::INIT2INIT_QP, 1, &port).unwrap();
        let path = qpc::primary_address_path.get(m::qpc.get(&b));
        assert_eq!(
            (ads::vhca_port_num.get(path), ads::pkey_index.get(path)),
            (1, 3)
        );
        assert_eq!(
            m::opt_param_mask.get(&b),
            (OptParam::PRI_PORT | OptParam::PKEY_INDEX).bits()
        );
        assert!(
            optional_only(Opcode::RTS2RTS_QP, 1, &port).is_err(),
            "no port in RTS2RTS"
        );

        let rnr = QpOptional {
            min_rnr_timer: Some(5),
            ..QpOptional::NONE
        };
        assert!(optional_only(Opcode::INIT2INIT_QP, 1, &rnr).is_err());
        let mut b = [0u8; m::SIZE];
        apply(&mut b, Opcode::RTR2RTS_QP, &rnr).unwrap();
        assert_eq!(qpc::min_rnr_nak.get(m::qpc.get(&b)), 5);
        assert_eq!(m::opt_param_mask.get(&b), OptParam::RNR_TIMEOUT.bits());
        apply(&mut b, Opcode::INIT2RTR_QP, &QpOptional::NONE).unwrap();
        assert_eq!(m::opt_param_mask.get(&b), 0);
    }
}
