//! QP commands: CREATE_QP, the state transitions RST2INIT, INIT2RTR,
//! RTR2RTS, 2ERR and 2RST, QUERY_QP and DESTROY_QP, built with `mlx5-regs`
//! into plain buffers.
//!
//! Each transition writes exactly the QPC fields its transition needs, the
//! set the public minimal users send (rdma-core's DevX RC test, DPDK's
//! force-loopback QPs, Linux software steering; the fields of Linux
//! `__mlx5_ib_modify_qp`), with `opt_param_mask` 0: the mandatory fields are
//! simply present in the QPC (`mlx5_ifc.h` `qpc`, `ads`; command bytes: the
//! QPC at 0x18, the primary address path at 0x30).

use mlx5_regs::consts::{pm_state, rq_type};
use mlx5_regs::layouts::*;
use mlx5_regs::{Opcode, RegError};

use super::attr::{AddressPath, QpState};
use crate::cmd::encode::{command_prefix, header_into};
use crate::pagelist::PageList;

/// What CREATE_QP needs.
#[derive(Debug, Clone, Copy)]
pub struct CreateQpParams {
    /// Service type (`qpc.st`: RC or UD, `mlx5_regs::consts::qp_st`).
    pub st: u8,
    /// Protection domain.
    pub pd: u32,
    /// UAR whose BlueFlame registers ring the send doorbell.
    pub uar_page: u32,
    /// The send ring: log2 of its WQEBBs, the send CQ. `None`: a
    /// receive-only QP (`no_sq`).
    pub send: Option<(u8, u32)>,
    /// The receive side.
    pub recv: RecvSide,
    /// The pages of the QP buffer (receive ring first, then the send
    /// ring); `None` when the QP has neither.
    pub pages: Option<PageList>,
    /// `user_index`: 0xffffff keeps version-0 CQEs when the device's
    /// `cqe_version` is 1; `None` leaves the field 0 (version-0 devices).
    pub user_index: Option<u32>,
    /// `ts_format`.
    pub ts_format: u8,
    /// Device address of the 8-byte doorbell record.
    pub dbr_addr: u64,
}

/// The receive side of a QP at CREATE_QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvSide {
    /// No receive queue (`rq_type` zero-length).
    None,
    /// An SRQ/RMP (`rq_type` SRQ, no receive ring).
    Srq {
        /// SRQ or RMP number.
        srqn: u32,
        /// Receive CQ.
        cqn: u32,
        /// XRC domain, or 0.
        xrcd: u32,
    },
    /// The QP's own ring at the start of the QP buffer (`rq_type` regular).
    Own {
        /// log2 of its WQEs (`log_rq_size`).
        log_size: u8,
        /// log2 of its stride in bytes (`log_rq_stride` + 4).
        log_stride: u8,
        /// Receive CQ.
        cqn: u32,
    },
}

/// Input length of CREATE_QP with `n` pages.
pub const fn create_qp_len(n: usize) -> usize {
    create_qp_in::pas.len_with(n)
}
/// Output length of CREATE_QP.
pub const CREATE_QP_OUT: usize = create_qp_out::SIZE;

/// CREATE_QP (RC or UD, `p.st`): the QPC fields Linux `create_kernel_qp` sets, with the
/// receive side an SRQ/RMP (`rq_type` 1, no receive ring), the QP's own
/// ring (`rq_type` 0 with `log_rq_size` and `log_rq_stride`) or none
/// (`rq_type` 3), and the page list of the QP buffer at 0x110. Returns the
/// input length.
pub fn create_qp(buf: &mut [u8], p: &CreateQpParams) -> Result<usize, RegError> {
    let pages = p.pages.map_or(0, |pages| pages.count);
    let len = create_qp_len(pages);
    let b = command_prefix(buf, len, Opcode::CREATE_QP, 0)?;
    let q = create_qp_in::qpc.get_mut(b);
    qpc::st.set(q, p.st)?;
    qpc::pm_state.set(q, pm_state::MIGRATED)?;
    qpc::pd.set(q, p.pd)?;
    qpc::uar_page.set(q, p.uar_page)?;
    qpc::ts_format.set(q, p.ts_format)?;
    // Reserved-lkey enable: Linux sets it on every kernel QP.
    qpc::rlky.set(q, true)?;
    if let Some(ui) = p.user_index {
        qpc::user_index.set(q, ui)?;
    }
    qpc::dbr_addr.set(q, p.dbr_addr)?;
    match p.send {
        Some((log_wqebbs, cqn)) => {
            qpc::log_sq_size.set(q, log_wqebbs)?;
            qpc::cqn_snd.set(q, cqn)?;
        }
        None => qpc::no_sq.set(q, true)?,
    }
    match p.recv {
        RecvSide::Srq { srqn, cqn, xrcd } => {
            qpc::rq_type.set(q, rq_type::SRQ)?;
            qpc::srqn_rmpn_xrqn.set(q, srqn)?;
            qpc::cqn_rcv.set(q, cqn)?;
            qpc::xrcd.set(q, xrcd)?;
        }
        RecvSide::Own {
            log_size,
            log_stride,
            cqn,
        } => {
            // rq_type 0 (regular) is the field's zero; the stride is
            // log2(bytes) − 4 (Linux `create_kernel_qp`).
            qpc::log_rq_size.set(q, log_size)?;
            qpc::log_rq_stride.set(q, log_stride.wrapping_sub(4))?;
            qpc::cqn_rcv.set(q, cqn)?;
        }
        RecvSide::None => qpc::rq_type.set(q, rq_type::ZERO_LEN)?,
    }
    if let Some(pages) = p.pages {
        qpc::log_page_size.set(q, pages.log_page_size)?;
        for (i, pa) in pages.iter().enumerate() {
            create_qp_in::pas.set(b, i, pa)?;
        }
    }
    Ok(len)
}

/// CREATE_QP output: the QP number.
pub fn parse_create_qp(out: &[u8]) -> u32 {
    create_qp_out::qpn.get(out)
}

/// `log_ack_req_freq`: the requester asks for an ACK at least every
/// 2^8 packets. Linux puts `MLX5_IB_ACK_REQ_FREQ` (8) into the QPC on every
/// transition (`__mlx5_ib_modify_qp`, `drivers/infiniband/hw/mlx5/qp.c`).
pub const LOG_ACK_REQ_FREQ: u8 = 8;

/// Output length of every transition (they share the 16-byte layout).
pub const MODIFY_QP_OUT: usize = rst2init_qp_out::SIZE;

/// RST2INIT_QP: port and partition key index in the primary path,
/// `pm_state` migrated, remote access bits (Linux `__mlx5_ib_modify_qp`;
/// the fields rdma-core, DPDK and software steering send).
pub fn rst2init_qp(
    qpn: u32,
    port: u8,
    pkey_index: u16,
    access: super::attr::QpAccess,
) -> Result<[u8; rst2init_qp_in::SIZE], RegError> {
    let mut b = [0u8; rst2init_qp_in::SIZE];
    header_into(&mut b, Opcode::RST2INIT_QP, 0);
    rst2init_qp_in::qpn.set(&mut b, qpn)?;
    let q = rst2init_qp_in::qpc.get_mut(&mut b);
    qpc::pm_state.set(q, pm_state::MIGRATED)?;
    qpc::log_ack_req_freq.set(q, LOG_ACK_REQ_FREQ)?;
    qpc::rre.set(q, access.remote_read)?;
    qpc::rwe.set(q, access.remote_write)?;
    qpc::rae.set(q, access.remote_atomic)?;
    if access.remote_atomic {
        // Linux `to_mlx5_access_flags`: RAE with the atomic mode
        // `get_atomic_mode` picks (IB-compatible 8-byte atomics).
        qpc::atomic_mode.set(q, mlx5_regs::consts::atomic::MODE_IB_COMP)?;
    }
    let path = qpc::primary_address_path.get_mut(q);
    ads::vhca_port_num.set(path, port)?;
    ads::pkey_index.set(path, pkey_index)?;
    Ok(b)
}

/// RST2INIT_QP of a UD QP: port, partition key index and Q_Key, no
/// access rights; like every UD transition it carries the `mtu` and
/// `log_msg_max` Linux forces for UD (Linux `__mlx5_ib_modify_qp` with the UD attribute mask
/// `STATE | PKEY_INDEX | PORT | QKEY`).
pub fn rst2init_ud_qp(
    qpn: u32,
    port: u8,
    pkey_index: u16,
    qkey: u32,
) -> Result<[u8; rst2init_qp_in::SIZE], RegError> {
    let mut b = [0u8; rst2init_qp_in::SIZE];
    header_into(&mut b, Opcode::RST2INIT_QP, 0);
    rst2init_qp_in::qpn.set(&mut b, qpn)?;
    let q = rst2init_qp_in::qpc.get_mut(&mut b);
    ud_qpc_fields(q)?;
    qpc::q_key.set(q, qkey)?;
    let path = qpc::primary_address_path.get_mut(q);
    ads::vhca_port_num.set(path, port)?;
    ads::pkey_index.set(path, pkey_index)?;
    Ok(b)
}

/// The `mtu` code Linux puts into every UD QPC (4096 bytes): a datagram's
/// limit is the port's MTU, not the QP's (`__mlx5_ib_modify_qp`).
pub const UD_MTU_CODE: u8 = 5;
/// The `log_msg_max` Linux puts into every UD QPC (4096 bytes).
pub const UD_LOG_MSG_MAX: u8 = 12;

/// The QPC fields every UD transition carries, as Linux sends them: path
/// migration state, the forced `mtu` and `log_msg_max`, the ACK request
/// frequency.
fn ud_qpc_fields(q: &mut [u8]) -> Result<(), RegError> {
    qpc::pm_state.set(q, pm_state::MIGRATED)?;
    qpc::mtu.set(q, UD_MTU_CODE)?;
    qpc::log_ack_req_freq.set(q, LOG_ACK_REQ_FREQ)?;
    qpc::log_msg_max.set(q, UD_LOG_MSG_MAX)
}

/// INIT2RTR_QP of a UD QP: no peer, no path; `mtu` and `log_msg_max` as
/// Linux forces them for UD.
pub fn init2rtr_ud_qp(qpn: u32) -> Result<[u8; init2rtr_qp_in::SIZE], RegError> {
    let mut b = [0u8; init2rtr_qp_in::SIZE];
    header_into(&mut b, Opcode::INIT2RTR_QP, 0);
    init2rtr_qp_in::qpn.set(&mut b, qpn)?;
    let q = init2rtr_qp_in::qpc.get_mut(&mut b);
    ud_qpc_fields(q)?;
    Ok(b)
}

/// RTR2RTS_QP of a UD QP: the first send PSN only (UD's attribute mask
/// `STATE | SQ_PSN`).
pub fn rtr2rts_ud_qp(qpn: u32, sq_psn: u32) -> Result<[u8; rtr2rts_qp_in::SIZE], RegError> {
    let mut b = [0u8; rtr2rts_qp_in::SIZE];
    header_into(&mut b, Opcode::RTR2RTS_QP, 0);
    rtr2rts_qp_in::qpn.set(&mut b, qpn)?;
    let q = rtr2rts_qp_in::qpc.get_mut(&mut b);
    ud_qpc_fields(q)?;
    qpc::next_send_psn.set(q, sq_psn)?;
    Ok(b)
}

/// The INIT2RTR fields, resolved to codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtrFields {
    /// The peer.
    pub path: AddressPath,
    /// `mtu` code.
    pub mtu: u8,
    /// `log_msg_max`.
    pub log_msg_max: u8,
    /// `remote_qpn`.
    pub remote_qpn: u32,
    /// `next_rcv_psn`.
    pub next_rcv_psn: u32,
    /// `min_rnr_nak`.
    pub min_rnr_nak: u8,
    /// `log_rra_max`.
    pub log_rra_max: u8,
}

/// INIT2RTR_QP: MTU, largest message, peer QP and PSN, RNR timer,
/// responder read depth and the primary path: force loopback (`fl`), RoCE
/// (destination GID and MAC, source GID index, hop limit, UDP source port,
/// traffic class, flow label) or InfiniBand (destination LID, SL; with a
/// GRH also `grh`, source GID index, destination GID, hop limit, traffic
/// class, flow label), each with its port
/// (Linux `mlx5_set_path`; DPDK `mlx5_devx_cmd_modify_qp_state`).
pub fn init2rtr_qp(qpn: u32, f: &RtrFields) -> Result<[u8; init2rtr_qp_in::SIZE], RegError> {
    let mut b = [0u8; init2rtr_qp_in::SIZE];
    header_into(&mut b, Opcode::INIT2RTR_QP, 0);
    init2rtr_qp_in::qpn.set(&mut b, qpn)?;
    let q = init2rtr_qp_in::qpc.get_mut(&mut b);
    qpc::mtu.set(q, f.mtu)?;
    qpc::log_ack_req_freq.set(q, LOG_ACK_REQ_FREQ)?;
    qpc::log_msg_max.set(q, f.log_msg_max)?;
    qpc::remote_qpn.set(q, f.remote_qpn)?;
    qpc::next_rcv_psn.set(q, f.next_rcv_psn)?;
    qpc::min_rnr_nak.set(q, f.min_rnr_nak)?;
    qpc::log_rra_max.set(q, f.log_rra_max)?;
    let path = qpc::primary_address_path.get_mut(q);
    ads::vhca_port_num.set(path, f.path.port())?;
    match f.path {
        AddressPath::ForceLoopback { .. } => ads::fl.set(path, true)?,
        AddressPath::Roce {
            sgid_index,
            dgid,
            dmac,
            hop_limit,
            udp_sport,
            traffic_class,
            flow_label,
            sl,
            roce_v2,
            ..
        } => {
            ads::rgid_rip.get_mut(path).copy_from_slice(&dgid);
            ads::rmac_47_32.set(path, u16::from_be_bytes([dmac[0], dmac[1]]))?;
            ads::rmac_31_0.set(
                path,
                u32::from_be_bytes([dmac[2], dmac[3], dmac[4], dmac[5]]),
            )?;
            ads::src_addr_index.set(path, sgid_index)?;
            ads::hop_limit.set(path, hop_limit)?;
            ads::udp_sport.set(path, udp_sport)?;
            ads::tclass.set(path, traffic_class)?;
            ads::flow_label.set(path, flow_label)?;
            ads::eth_prio.set(path, sl & 7)?;
            if roce_v2 {
                ads::dscp.set(path, traffic_class >> 2)?;
            }
        }
        AddressPath::Ib { dlid, sl, .. } => {
            ads::rlid.set(path, dlid)?;
            ads::sl.set(path, sl)?;
        }
        AddressPath::IbGlobal {
            dlid,
            sl,
            sgid_index,
            dgid,
            hop_limit,
            traffic_class,
            flow_label,
            ..
        } => {
            ads::rlid.set(path, dlid)?;
            ads::sl.set(path, sl)?;
            ads::grh.set(path, true)?;
            ads::src_addr_index.set(path, sgid_index)?;
            ads::hop_limit.set(path, hop_limit)?;
            ads::tclass.set(path, traffic_class)?;
            ads::flow_label.set(path, flow_label)?;
            ads::rgid_rip.get_mut(path).copy_from_slice(&dgid);
        }
    }
    Ok(b)
}

/// The RTR2RTS fields, resolved to codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtsFields {
    /// `primary_address_path.ack_timeout`.
    pub ack_timeout: u8,
    /// `retry_count`.
    pub retry_count: u8,
    /// `rnr_retry`.
    pub rnr_retry: u8,
    /// `next_send_psn`.
    pub next_send_psn: u32,
    /// `log_sra_max`.
    pub log_sra_max: u8,
}

/// RTR2RTS_QP: ack timeout, retry counts, first send PSN, initiator read
/// depth.
pub fn rtr2rts_qp(qpn: u32, f: &RtsFields) -> Result<[u8; rtr2rts_qp_in::SIZE], RegError> {
    let mut b = [0u8; rtr2rts_qp_in::SIZE];
    header_into(&mut b, Opcode::RTR2RTS_QP, 0);
    rtr2rts_qp_in::qpn.set(&mut b, qpn)?;
    let q = rtr2rts_qp_in::qpc.get_mut(&mut b);
    qpc::log_ack_req_freq.set(q, LOG_ACK_REQ_FREQ)?;
    qpc::retry_count.set(q, f.retry_count)?;
    qpc::rnr_retry.set(q, f.rnr_retry)?;
    qpc::next_send_psn.set(q, f.next_send_psn)?;
    qpc::log_sra_max.set(q, f.log_sra_max)?;
    ads::ack_timeout.set(qpc::primary_address_path.get_mut(q), f.ack_timeout)?;
    Ok(b)
}

/// 2ERR_QP (any state → ERR).
pub fn qp_2err(qpn: u32) -> Result<[u8; qp_2err_in::SIZE], RegError> {
    let mut b = [0u8; qp_2err_in::SIZE];
    header_into(&mut b, Opcode::QP_2ERR, 0);
    qp_2err_in::qpn.set(&mut b, qpn)?;
    Ok(b)
}
/// Output length of 2ERR_QP.
pub const QP_2ERR_OUT: usize = qp_2err_out::SIZE;

/// 2RST_QP (any state → RESET).
pub fn qp_2rst(qpn: u32) -> Result<[u8; qp_2rst_in::SIZE], RegError> {
    let mut b = [0u8; qp_2rst_in::SIZE];
    header_into(&mut b, Opcode::QP_2RST, 0);
    qp_2rst_in::qpn.set(&mut b, qpn)?;
    Ok(b)
}
/// Output length of 2RST_QP.
pub const QP_2RST_OUT: usize = qp_2rst_out::SIZE;

/// DESTROY_QP.
pub fn destroy_qp(qpn: u32) -> Result<[u8; destroy_qp_in::SIZE], RegError> {
    let mut b = [0u8; destroy_qp_in::SIZE];
    header_into(&mut b, Opcode::DESTROY_QP, 0);
    destroy_qp_in::qpn.set(&mut b, qpn)?;
    Ok(b)
}
/// Output length of DESTROY_QP.
pub const DESTROY_QP_OUT: usize = destroy_qp_out::SIZE;

/// QUERY_QP (`qpc_ext` = 0).
pub fn query_qp(qpn: u32) -> Result<[u8; query_qp_in::SIZE], RegError> {
    let mut b = [0u8; query_qp_in::SIZE];
    header_into(&mut b, Opcode::QUERY_QP, 0);
    query_qp_in::qpn.set(&mut b, qpn)?;
    Ok(b)
}
/// Output length of QUERY_QP (the fixed part Linux reads; the page list is
/// not read back).
pub const QUERY_QP_OUT: usize = query_qp_out::SIZE;

/// The fields of a queried QP context the driver reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpQuery {
    /// State.
    pub state: QpState,
    /// Service type (0 RC, 2 UD).
    pub st: u8,
    /// The Q_Key of a UD QP.
    pub q_key: u32,
    /// Path MTU code.
    pub mtu: u8,
    /// The peer QP.
    pub remote_qpn: u32,
    /// Next PSN to send.
    pub next_send_psn: u32,
    /// Next PSN expected.
    pub next_rcv_psn: u32,
    /// Send CQ.
    pub cqn_snd: u32,
    /// Receive CQ.
    pub cqn_rcv: u32,
    /// `rq_type`.
    pub rq_type: u8,
    /// SRQ / RMP number.
    pub srqn: u32,
    /// log2 of the send ring in WQEBBs.
    pub log_sq_size: u8,
    /// WQEBBs the device consumed (16 bits).
    pub hw_sq_wqebb_counter: u16,
    /// WQEBBs software posted, as the device last read them.
    pub sw_sq_wqebb_counter: u16,
    /// Force-loopback bit of the primary path.
    pub fl: bool,
    /// RNR retries.
    pub rnr_retry: u8,
    /// Transport retries.
    pub retry_count: u8,
    /// Remote access rights (`rre`, `rwe`, `rae`).
    pub access: super::attr::QpAccess,
    /// `log_sra_max`: the initiator RDMA-read depth is `1 << log_sra_max`.
    pub log_sra_max: u8,
    /// `log_rra_max`: the responder RDMA-read depth is `1 << log_rra_max`.
    pub log_rra_max: u8,
    /// RNR NAK timer code (`min_rnr_nak`).
    pub min_rnr_nak: u8,
    /// The primary address path as firmware holds it.
    pub path: PathQuery,
}

/// The primary address path of a queried QP context (`ads`), raw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PathQuery {
    /// Port, 1-based (`vhca_port_num`).
    pub port: u8,
    /// Partition key index.
    pub pkey_index: u16,
    /// Ack timeout code.
    pub ack_timeout: u8,
    /// Destination LID (InfiniBand).
    pub rlid: u16,
    /// Service level.
    pub sl: u8,
    /// GRH present (InfiniBand).
    pub grh: bool,
    /// Source GID table index.
    pub src_addr_index: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub tclass: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Destination GID.
    pub rgid: [u8; 16],
    /// Destination MAC.
    pub rmac: [u8; 6],
    /// RoCE v2 UDP source port.
    pub udp_sport: u16,
}

/// Parse QUERY_QP output.
pub fn parse_query_qp(out: &[u8]) -> QpQuery {
    let q = query_qp_out::qpc.get(out);
    QpQuery {
        state: QpState::from_raw(qpc::state.get(q)),
        st: qpc::st.get(q),
        q_key: qpc::q_key.get(q),
        mtu: qpc::mtu.get(q),
        remote_qpn: qpc::remote_qpn.get(q),
        next_send_psn: qpc::next_send_psn.get(q),
        next_rcv_psn: qpc::next_rcv_psn.get(q),
        cqn_snd: qpc::cqn_snd.get(q),
        cqn_rcv: qpc::cqn_rcv.get(q),
        rq_type: qpc::rq_type.get(q),
        srqn: qpc::srqn_rmpn_xrqn.get(q),
        log_sq_size: qpc::log_sq_size.get(q),
        hw_sq_wqebb_counter: qpc::hw_sq_wqebb_counter.get(q),
        sw_sq_wqebb_counter: qpc::sw_sq_wqebb_counter.get(q),
        fl: ads::fl.get(qpc::primary_address_path.get(q)),
        rnr_retry: qpc::rnr_retry.get(q),
        retry_count: qpc::retry_count.get(q),
        access: super::attr::QpAccess {
            remote_read: qpc::rre.get(q),
            remote_write: qpc::rwe.get(q),
            remote_atomic: qpc::rae.get(q),
        },
        log_sra_max: qpc::log_sra_max.get(q),
        log_rra_max: qpc::log_rra_max.get(q),
        min_rnr_nak: qpc::min_rnr_nak.get(q),
        path: parse_path(qpc::primary_address_path.get(q)),
    }
}

fn parse_path(a: &[u8]) -> PathQuery {
    let mut rgid = [0u8; 16];
    rgid.copy_from_slice(ads::rgid_rip.get(a));
    let hi = ads::rmac_47_32.get(a).to_be_bytes();
    let lo = ads::rmac_31_0.get(a).to_be_bytes();
    PathQuery {
        port: ads::vhca_port_num.get(a),
        pkey_index: ads::pkey_index.get(a),
        ack_timeout: ads::ack_timeout.get(a),
        rlid: ads::rlid.get(a),
        sl: ads::sl.get(a),
        grh: ads::grh.get(a),
        src_addr_index: ads::src_addr_index.get(a),
        hop_limit: ads::hop_limit.get(a),
        tclass: ads::tclass.get(a),
        flow_label: ads::flow_label.get(a),
        rgid,
        rmac: [hi[0], hi[1], lo[0], lo[1], lo[2], lo[3]],
        udp_sport: ads::udp_sport.get(a),
    }
}
