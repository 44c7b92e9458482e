//! Queue pairs: the object CREATE_QP makes, its state machine and the
//! connection fields the transitions set (PRM "Queue Pair Context";
//! `mlx5_ifc.h` `qpc`/`ads`; the transition table is Linux `optab` in
//! `__mlx5_ib_modify_qp`, `drivers/infiniband/hw/mlx5/qp.c`).

use mlx5_regs::consts::qp_state as qs;

use crate::objects::QBuf;

/// State of a QP as a test sees it (`Device::qp_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpState {
    /// Reset (after CREATE_QP and 2RST_QP).
    Reset,
    /// Initialized.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Send queue error (not entered by RC QPs in this model).
    Sqer,
    /// Error: sends are flushed.
    Err,
}

impl QpState {
    /// The `qpc.state` value.
    pub fn code(self) -> u8 {
        match self {
            QpState::Reset => qs::RST,
            QpState::Init => qs::INIT,
            QpState::Rtr => qs::RTR,
            QpState::Rts => qs::RTS,
            QpState::Sqer => qs::SQER,
            QpState::Err => qs::ERR,
        }
    }
}

/// The primary address path fields the model uses (`ads`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Path {
    pub fl: bool,
    pub port: u8,
    pub pkey_index: u16,
    pub rlid: u16,
    pub grh: bool,
    pub src_addr_index: u8,
    pub hop_limit: u8,
    pub rgid: [u8; 16],
    pub rmac: [u8; 6],
    pub udp_sport: u16,
    pub ack_timeout: u8,
    /// Traffic class (GRH TClass, IPv4 TOS).
    pub tclass: u8,
    /// GRH / IPv6 flow label (20 bits).
    pub flow_label: u32,
    /// IB service level (LRH SL).
    pub sl: u8,
}

/// Why the head send WQE is waiting (IB RC flow control, in device time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WaitKind {
    /// The responder answered RNR NAK (its SRQ was empty).
    Rnr,
    /// No acknowledgement (the responder is unreachable or refused the
    /// connection): transport retry.
    Ack,
}

/// A blocked head WQE: retried at `at_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Wait {
    pub kind: WaitKind,
    pub at_ns: u64,
    /// Retries left; `None` = forever (`rnr_retry` 7).
    pub left: Option<u8>,
}

/// A QP's own receive ring (`rq_type` regular): WQEs of data segments,
/// consumed in order up to the doorbell record's receive counter.
#[derive(Debug, Clone)]
pub(crate) struct RecvQueue {
    /// The QP buffer (the receive ring is at its start).
    pub buf: QBuf,
    /// log2 of the WQEs.
    pub log_size: u8,
    /// log2 of the stride in bytes (`log_rq_stride` + 4).
    pub log_stride: u8,
    /// Consumer counter (16 bits): the next WQE to take, also the WQE
    /// counter its completion carries.
    pub ci: u16,
}

/// A queue pair.
#[derive(Debug, Clone)]
pub(crate) struct Qp {
    pub state: QpState,
    pub st: u8,
    pub pd: u32,
    pub pm_state: u8,
    pub uar: u32,
    pub cqn_snd: Option<u32>,
    pub cqn_rcv: Option<u32>,
    pub no_sq: bool,
    pub log_sq_size: u8,
    /// The send ring (None with `no_sq`).
    pub sq: Option<QBuf>,
    pub log_page_size: u8,
    pub page_offset: u8,
    pub rq_type: u8,
    /// The own receive ring when `rq_type` = 0.
    pub rq: Option<RecvQueue>,
    /// SRQ/RMP number when `rq_type` = 1.
    pub srqn: Option<u32>,
    pub xrcd: u32,
    pub dbr: u64,
    pub user_index: u32,
    pub ts_format: u8,
    pub rlky: bool,
    pub fre: bool,
    // Set by the transitions.
    pub counter_set_id: u8,
    pub rre: bool,
    pub rwe: bool,
    pub rae: bool,
    pub mtu: u8,
    pub log_msg_max: u8,
    pub remote_qpn: u32,
    pub next_rcv_psn: u32,
    pub min_rnr_nak: u8,
    pub log_rra_max: u8,
    pub path: Path,
    pub retry_count: u8,
    pub rnr_retry: u8,
    pub next_send_psn: u32,
    pub log_sra_max: u8,
    pub log_ack_req_freq: u8,
    /// UD: the QP's Q_Key (`qpc.q_key`, set at RST2INIT).
    pub q_key: u32,
    // Data path.
    /// Send consumer counter (WQEBBs, 16 bits): the next WQE to execute.
    pub sq_ci: u16,
    /// The head WQE waits for an RNR or ACK timer.
    pub wait: Option<Wait>,
    /// UMEMs holding the send ring or doorbell record (DevX).
    pub umems: Vec<u32>,
    /// Packet-level RC state toward a peer on a wire.
    pub wire: crate::engine::WireQp,
}

impl Qp {
    /// Version-1 CQEs (user index in byte 0x20) unless the QP asked for the
    /// default index (Linux `MLX5_IB_DEFAULT_UIDX`).
    pub fn cqe_v1(&self) -> bool {
        self.user_index != mlx5_regs::consts::qp_ctx::DEFAULT_USER_INDEX
    }

    /// Send ring size in WQEBBs (0 without a send queue).
    pub fn sq_size(&self) -> u32 {
        if self.no_sq {
            0
        } else {
            1u32 << self.log_sq_size
        }
    }
}

/// The IB RNR NAK timer (`min_rnr_nak` code, IBTA table, also the
/// `min_rnr_timer` table of rdma-core's `ibv_modify_qp(3)`), in nanoseconds.
pub(crate) fn rnr_timer_ns(code: u8) -> u64 {
    // Hundredths of a millisecond (10 µs units) for codes 0..=31.
    const T: [u64; 32] = [
        65536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024,
        1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152,
    ];
    T[(code & 31) as usize] * 10_000
}

/// The IB local ACK timeout `4.096 µs × 2^t` in nanoseconds; `None` for 0
/// (infinite, IBTA).
pub(crate) fn ack_timeout_ns(t: u8) -> Option<u64> {
    (t != 0).then(|| 4096u64 << t.min(31))
}
