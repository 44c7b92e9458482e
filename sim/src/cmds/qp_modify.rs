//! The QP state transitions: RST2INIT, INIT2INIT, INIT2RTR, RTR2RTS,
//! RTS2RTS, SQERR2RTS, 2ERR, 2RST. Legal transitions are Linux's `optab`,
//! optional parameters its `opt_mask` (RC rows), both in
//! `__mlx5_ib_modify_qp`, `drivers/infiniband/hw/mlx5/qp.c`; the fields each
//! transition carries are those Linux (`mlx5_set_path`), rdma-core's DevX
//! tests (`tests/mlx5_base.py`) and DPDK (`mlx5_devx_cmd_modify_qp_state`)
//! send. Fields a transition does not carry are ignored, as the three public
//! users rely on (Linux re-sends `st`, `pd`, the CQs on every transition).

use mlx5_regs::consts::{pm_state, port as pt, OptParam};

use super::*;
use crate::qp::{Path, QpState};

// All modify-QP inputs share the first 0x18 bytes and the QPC at 0x18
// (`mlx5_ifc.h`): read them through one layout.
use rst2init_qp_in as m;

/// The transition an opcode asks for: (required state, allowed optional
/// parameters for RC).
fn rule(op: Opcode) -> (QpState, OptParam) {
    use OptParam as O;
    let access = O::RRE.union(O::RAE).union(O::RWE);
    match op {
        Opcode::RST2INIT_QP => (QpState::Reset, O::empty()),
        Opcode::INIT2INIT_QP => (
            QpState::Init,
            access | O::PKEY_INDEX | O::PRI_PORT | O::LAG_TX_AFF,
        ),
        Opcode::INIT2RTR_QP => (
            QpState::Init,
            access | O::ALT_ADDR_PATH | O::PKEY_INDEX | O::LAG_TX_AFF,
        ),
        Opcode::RTR2RTS_QP => (
            QpState::Rtr,
            access | O::ALT_ADDR_PATH | O::PM_STATE | O::RNR_TIMEOUT | O::OFFLOAD_TYPE,
        ),
        Opcode::RTS2RTS_QP => (
            QpState::Rts,
            access | O::ALT_ADDR_PATH | O::PM_STATE | O::RNR_TIMEOUT,
        ),
        _ => (QpState::Sqer, access | O::RNR_TIMEOUT),
    }
}

/// The optional parameters of a UD transition (Linux `opt_mask`, UD
/// column: the Q_Key everywhere after RST2INIT, the P_Key index up to RTR,
/// the port at INIT2INIT).
fn ud_rule(op: Opcode) -> OptParam {
    use OptParam as O;
    match op {
        Opcode::RST2INIT_QP => O::empty(),
        Opcode::INIT2INIT_QP => O::PKEY_INDEX | O::Q_KEY | O::PRI_PORT,
        Opcode::INIT2RTR_QP => O::PKEY_INDEX | O::Q_KEY,
        _ => O::Q_KEY,
    }
}

impl State {
    fn check_port(&self, port: u8) -> R {
        ensure(
            (1..=self.caps.num_ports).contains(&port),
            bad_param(sy::QP_PORT),
        )
    }

    fn check_pkey(&self, index: u16) -> R {
        // P_Key table: 128 << pkey_table_size entries (Linux `mlx5_to_sw_pkey_sz`).
        let n = 128u32 << self.cur.pkey_table_size.min(8);
        ensure((index as u32) < n, bad_param(sy::QP_PKEY_INDEX))
    }

    /// RST2INIT, INIT2INIT, INIT2RTR, RTR2RTS, RTS2RTS, SQERR2RTS.
    pub(super) fn modify_qp(&mut self, op: Opcode, inp: &[u8]) -> R {
        let qpn = m::qpn.get(inp);
        let q = self
            .objects
            .qps
            .get(&qpn)
            .ok_or(bad_res(sy::QP_NOT_FOUND))?;
        let (from, mut allowed) = rule(op);
        let ud = q.st == mlx5_regs::consts::qp_st::UD;
        if ud {
            allowed = ud_rule(op);
        }
        ensure(
            q.state == from,
            fail(CmdStatus::BAD_QP_STATE_ERR, sy::QP_BAD_STATE),
        )?;
        let raw = m::opt_param_mask.get(inp);
        let opt = OptParam::from_bits(raw)
            .filter(|o| allowed.contains(*o))
            .ok_or(bad_param(sy::QP_OPT_PARAM))?;
        // SQERR2RTS has no `ece` field: its bits are reserved (checked).
        ensure(
            op == Opcode::SQERR2RTS_QP || m::ece.get(inp) == 0,
            bad_param(sy::QP_UNSUPPORTED),
        )?;
        let c = m::qpc.get(inp);
        let a = qpc::primary_address_path.get(c);
        let access = (qpc::rre.get(c), qpc::rwe.get(c), qpc::rae.get(c));
        let opt_access = opt.intersects(OptParam::RRE | OptParam::RWE | OptParam::RAE);
        let mut q = q.clone();
        match op {
            Opcode::RST2INIT_QP => {
                self.check_port(ads::vhca_port_num.get(a))?;
                self.check_pkey(ads::pkey_index.get(a))?;
                ensure(qpc::counter_set_id.get(c) == 0, bad_res(sy::QP_COUNTER_SET))?;
                q.path.port = ads::vhca_port_num.get(a);
                q.path.pkey_index = ads::pkey_index.get(a);
                if ud {
                    // A UD QP takes its Q_Key here (any 32-bit value is a
                    // key); it has no remote access rights.
                    q.q_key = qpc::q_key.get(c);
                } else {
                    (q.rre, q.rwe, q.rae) = access;
                }
                q.state = QpState::Init;
            }
            Opcode::INIT2INIT_QP => {
                if opt.contains(OptParam::PRI_PORT) {
                    self.check_port(ads::vhca_port_num.get(a))?;
                    q.path.port = ads::vhca_port_num.get(a);
                }
                if opt.contains(OptParam::PKEY_INDEX) {
                    self.check_pkey(ads::pkey_index.get(a))?;
                    q.path.pkey_index = ads::pkey_index.get(a);
                }
                if opt_access {
                    (q.rre, q.rwe, q.rae) = access;
                }
            }
            Opcode::INIT2RTR_QP if ud => {
                self.init2rtr_ud(&mut q, c, opt)?;
                q.state = QpState::Rtr;
            }
            Opcode::INIT2RTR_QP => {
                self.init2rtr(&mut q, c, opt)?;
                if opt_access {
                    (q.rre, q.rwe, q.rae) = access;
                }
                q.state = QpState::Rtr;
            }
            Opcode::RTR2RTS_QP | Opcode::RTS2RTS_QP | Opcode::SQERR2RTS_QP if ud => {
                if op == Opcode::RTR2RTS_QP {
                    // UD: the first send PSN only (no peer, no retries).
                    q.next_send_psn = qpc::next_send_psn.get(c);
                    q.log_ack_req_freq = qpc::log_ack_req_freq.get(c);
                }
                q.state = QpState::Rts;
            }
            Opcode::RTR2RTS_QP | Opcode::RTS2RTS_QP | Opcode::SQERR2RTS_QP => {
                if op == Opcode::RTR2RTS_QP {
                    let sra = qpc::log_sra_max.get(c);
                    ensure(
                        sra <= self.caps.log_max_ra_req_qp,
                        bad_param(sy::QP_SRA_MAX),
                    )?;
                    q.path.ack_timeout = ads::ack_timeout.get(a);
                    q.retry_count = qpc::retry_count.get(c);
                    q.rnr_retry = qpc::rnr_retry.get(c);
                    q.next_send_psn = qpc::next_send_psn.get(c);
                    q.log_sra_max = sra;
                    q.log_ack_req_freq = qpc::log_ack_req_freq.get(c);
                }
                if opt.contains(OptParam::PM_STATE) {
                    ensure(
                        qpc::pm_state.get(c) == pm_state::MIGRATED,
                        bad_param(sy::QP_PM_STATE),
                    )?;
                }
                if opt.contains(OptParam::RNR_TIMEOUT) {
                    q.min_rnr_nak = qpc::min_rnr_nak.get(c);
                }
                if opt_access {
                    (q.rre, q.rwe, q.rae) = access;
                }
                q.state = QpState::Rts;
            }
            _ => unreachable!("dispatch sends only modify-QP opcodes here"),
        }
        if ud && opt.contains(OptParam::Q_KEY) {
            q.q_key = qpc::q_key.get(c);
        }
        self.objects.qps.insert(qpn, q);
        // WQEs posted before the QP could send run now.
        self.qp_kick(qpn);
        Ok(())
    }

    /// INIT2RTR: MTU, message size, peer, receive PSN, RNR timer, responder
    /// depth and the primary address path, checked per loopback mode.
    fn init2rtr(&self, q: &mut crate::qp::Qp, c: &[u8], opt: OptParam) -> R {
        let a = qpc::primary_address_path.get(c);
        let ib = self.caps.port_type == pt::TYPE_IB;
        let mtu = qpc::mtu.get(c);
        ensure(
            (1..=self.port.max_mtu_code(ib)).contains(&mtu),
            bad_param(sy::QP_MTU),
        )?;
        let msg = qpc::log_msg_max.get(c);
        ensure(msg <= self.caps.log_max_msg, bad_param(sy::QP_MSG_MAX))?;
        let remote = qpc::remote_qpn.get(c);
        ensure(remote != 0, bad_param(sy::QP_REMOTE_QPN))?;
        let rra = qpc::log_rra_max.get(c);
        ensure(
            rra <= self.caps.log_max_ra_res_qp,
            bad_param(sy::QP_RRA_MAX),
        )?;
        let port = ads::vhca_port_num.get(a);
        self.check_port(port)?;
        let mut rgid = [0u8; 16];
        rgid.copy_from_slice(ads::rgid_rip.get(a));
        let rm_hi = ads::rmac_47_32.get(a).to_be_bytes();
        let rm_lo = ads::rmac_31_0.get(a).to_be_bytes();
        let path = Path {
            fl: ads::fl.get(a),
            port,
            pkey_index: if opt.contains(OptParam::PKEY_INDEX) {
                self.check_pkey(ads::pkey_index.get(a))?;
                ads::pkey_index.get(a)
            } else {
                q.path.pkey_index
            },
            rlid: ads::rlid.get(a),
            grh: ads::grh.get(a),
            src_addr_index: ads::src_addr_index.get(a),
            hop_limit: ads::hop_limit.get(a),
            rgid,
            rmac: [rm_hi[0], rm_hi[1], rm_lo[0], rm_lo[1], rm_lo[2], rm_lo[3]],
            udp_sport: ads::udp_sport.get(a),
            ack_timeout: ads::ack_timeout.get(a),
            tclass: ads::tclass.get(a),
            flow_label: ads::flow_label.get(a),
            sl: ads::sl.get(a),
        };
        if path.fl {
            // Force loopback: RC on an Ethernet port with the capability for
            // the current roce_en (whether it works on IB is unconfirmed).
            ensure(
                !ib && self.caps.fl_allowed(self.port.roce_en),
                bad_param(sy::QP_FL_NOT_ALLOWED),
            )?;
        } else if ib {
            // Off a wire the port reaches only itself (docs/fidelity.md §16).
            let on_wire = self.port.wire.is_some();
            ensure(
                path.rlid != 0 && (on_wire || path.rlid == self.port.lid),
                bad_param(sy::QP_RLID),
            )?;
        } else {
            ensure(self.port.roce_en, bad_param(sy::QP_ROCE_DISABLED))?;
            ensure(
                (path.src_addr_index as u16) < self.caps.roce_caps.roce_address_table_size
                    && self.port.gids.contains_key(&(path.src_addr_index as u16)),
                bad_param(sy::QP_GID_INDEX),
            )?;
            let on_wire = self.port.wire.is_some();
            ensure(
                path.rmac != [0; 6] && (on_wire || path.rmac == self.port.mac),
                bad_param(sy::QP_RMAC),
            )?;
        }
        q.mtu = mtu;
        q.log_msg_max = msg;
        q.remote_qpn = remote;
        q.next_rcv_psn = qpc::next_rcv_psn.get(c);
        q.min_rnr_nak = qpc::min_rnr_nak.get(c);
        q.log_rra_max = rra;
        q.path = path;
        Ok(())
    }

    /// INIT2RTR of a UD QP: no peer and no path; Linux sends `mtu` 5 and
    /// `log_msg_max` 12 whatever the port (`__mlx5_ib_modify_qp`), since a
    /// datagram's limit is the port's MTU, checked per send.
    fn init2rtr_ud(&self, q: &mut crate::qp::Qp, c: &[u8], opt: OptParam) -> R {
        let mtu = qpc::mtu.get(c);
        ensure((1..=5).contains(&mtu), bad_param(sy::QP_MTU))?;
        let msg = qpc::log_msg_max.get(c);
        ensure(msg <= self.caps.log_max_msg, bad_param(sy::QP_MSG_MAX))?;
        if opt.contains(OptParam::PKEY_INDEX) {
            let a = qpc::primary_address_path.get(c);
            self.check_pkey(ads::pkey_index.get(a))?;
            q.path.pkey_index = ads::pkey_index.get(a);
        }
        q.mtu = mtu;
        q.log_msg_max = msg;
        q.next_rcv_psn = qpc::next_rcv_psn.get(c);
        Ok(())
    }

    /// 2ERR_QP (from any state).
    pub(super) fn qp_2err(&mut self, inp: &[u8]) -> R {
        let qpn = qp_2err_in::qpn.get(inp);
        ensure(
            self.objects.qps.contains_key(&qpn),
            bad_res(sy::QP_NOT_FOUND),
        )?;
        self.qp_enter_error(qpn);
        Ok(())
    }

    /// 2RST_QP (from any state).
    pub(super) fn qp_2rst(&mut self, inp: &[u8]) -> R {
        let qpn = qp_2rst_in::qpn.get(inp);
        ensure(
            self.objects.qps.contains_key(&qpn),
            bad_res(sy::QP_NOT_FOUND),
        )?;
        self.qp_reset(qpn);
        Ok(())
    }
}
