//! Typed general device capabilities, parsed from `cmd_hca_cap`
//! (QUERY_HCA_CAP op_mod general/current, docs/firmware.md §3, §4.1).

use mlx5_regs::layouts::cmd_hca_cap as c;
use mlx5_regs::Opcode;

use crate::error::Error;

/// Largest queue-size log [`Caps::validate`] accepts (24-bit indices).
pub const MAX_LOG_QUEUE_SIZE: u8 = 24;
/// Largest object-count log [`Caps::validate`] accepts (24-bit numbers).
pub const MAX_LOG_OBJECTS: u8 = 24;

fn bad(what: &'static str) -> Error {
    Error::BadResponse {
        opcode: Opcode::QUERY_HCA_CAP,
        what,
    }
}

/// The general capabilities the driver and the verbs layer use. `raw` keeps
/// the whole 256-byte `cmd_hca_cap` for anything not named here
/// (`mlx5_regs::layouts::cmd_hca_cap::<field>.get(&caps.raw)`).
///
/// ```
/// use mlx5_driver::Caps;
/// use mlx5_regs::layouts::cmd_hca_cap;
/// let mut raw = [0u8; cmd_hca_cap::SIZE];
/// cmd_hca_cap::log_max_cq_sz.set(&mut raw, 22).unwrap();
/// cmd_hca_cap::max_wqe_sz_rq.set(&mut raw, 512).unwrap();
/// cmd_hca_cap::cq_resize.set(&mut raw, true).unwrap();
/// let caps = Caps::parse(&raw);
/// assert_eq!(caps.max_cqe(), (1 << 22) - 1);
/// assert_eq!(caps.max_srq_sge, 32);
/// assert!(caps.cq_resize);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// log2 of the largest CQ (entries).
    pub log_max_cq_sz: u8,
    /// log2 of the number of CQs.
    pub log_max_cq: u8,
    /// log2 of the largest EQ (entries).
    pub log_max_eq_sz: u8,
    /// log2 of the number of EQs.
    pub log_max_eq: u8,
    /// Number of EQs when not 0 (it then replaces `2^log_max_eq`, Linux
    /// `mlx5_max_eq_cap_get`).
    pub max_num_eqs: u16,
    /// log2 of the largest SRQ (WQEs).
    pub log_max_srq_sz: u8,
    /// log2 of the number of SRQs.
    pub log_max_srq: u8,
    /// log2 of the number of RMPs.
    pub log_max_rmp: u8,
    /// Largest receive WQE in bytes.
    pub max_wqe_sz_rq: u16,
    /// Scatter entries an SRQ WQE can hold: `max_wqe_sz_rq / 16` (docs/firmware.md §9.5;
    /// the verbs attribute is one less, the next segment takes 16 bytes).
    pub max_srq_sge: u32,
    /// log2 of the number of QPs.
    pub log_max_qp: u8,
    /// log2 of the number of PDs.
    pub log_max_pd: u8,
    /// CQ resize (MODIFY_CQ op_mod 1) supported.
    pub cq_resize: bool,
    /// CQ moderation supported.
    pub cq_moderation: bool,
    /// cq_period_mode can be modified (MODIFY_CQ `PERIOD_MODE`).
    pub cq_period_mode_modify: bool,
    /// `cq_period_mode` 1 (the timer restarts at each completion) is
    /// supported.
    pub cq_period_start_from_cqe: bool,
    /// A solicited completion can break moderation
    /// (`cqc.scqe_break_moderation_en`).
    pub scqe_break_moderation: bool,
    /// CQ overrun-ignore supported.
    pub cq_oi: bool,
    /// CQE format version (0 or 1).
    pub cqe_version: u8,
    /// Number of physical ports.
    pub num_ports: u8,
    /// Port type (0 IB, 1 Ethernet).
    pub port_type: u8,
    /// RoCE supported.
    pub roce: bool,
    /// XRC supported.
    pub xrc: bool,
    /// Basic cyclic receive WQE (RMP) supported.
    pub basic_cyclic_rcv_wqe: bool,
    /// Firmware may send page requests (0 = it may; `page_request_disable`).
    pub page_request_disable: bool,
    /// `release_all_pages` supported.
    pub release_all_pages: bool,
    /// Fast teardown supported.
    pub fast_teardown: bool,
    /// Force teardown supported.
    pub force_teardown: bool,
    /// INIT_HCA accepts `sw_owner_id`.
    pub sw_owner_id: bool,
    /// QUERY_SPECIAL_CONTEXTS reports `terminate_scatter_list_mkey`.
    pub terminate_scatter_list_mkey: bool,
    /// log2 of the UAR page size minus 12 (as set by SET_HCA_CAP).
    pub log_uar_page_sz: u16,
    /// Command-interface checksum mode (0 after bring-up).
    pub cmdif_checksum: u8,
    /// log2 of the largest message.
    pub log_max_msg: u8,
    /// log2 of the largest send queue in 64-byte basic blocks (Linux
    /// `calc_sq_size` refuses more).
    pub log_max_qp_sz: u8,
    /// Largest send WQE in bytes (`max_wqe_sz_sq`).
    pub max_wqe_sz_sq: u16,
    /// log2 of a BlueFlame register's size in bytes; each register is used
    /// as two alternating halves.
    pub log_bf_reg_size: u8,
    /// log2 of the number of memory keys.
    pub log_max_mkey: u8,
    /// log2 of the number of XRC domains.
    pub log_max_xrcd: u8,
    /// Force-loopback RC QPs allowed while RoCE is disabled (general page;
    /// the RoCE page has a bit of the same name, both count).
    pub fl_rc_qp_when_roce_disabled: bool,
    /// Send-queue timestamp formats (0 free-running only, 1 real-time
    /// only, 2 both).
    pub sq_ts_format: u8,
    /// log2 of the initiator RDMA-read/atomic depth per QP.
    pub log_max_ra_req_qp: u8,
    /// log2 of the responder RDMA-read/atomic depth per QP.
    pub log_max_ra_res_qp: u8,
    /// The device has the atomic capability page and executes atomics
    /// (cap `atomic`; Linux reads the page only then).
    pub atomic: bool,
    /// MTT entries may carry access bits (`pg`).
    pub pg: bool,
    /// The device clock's frequency in kHz (0: no clock, so no completion
    /// timestamps to offer).
    pub device_frequency_khz: u32,
    /// The whole capability block.
    pub raw: [u8; c::SIZE],
}

impl Caps {
    /// Parse a `cmd_hca_cap` block (256 bytes; a shorter slice reads as if
    /// zero-padded, bytes beyond 256 are ignored). Never panics: every value
    /// is taken as the device wrote it; call [`Caps::validate`] before
    /// trusting the logs.
    pub fn parse(raw: &[u8]) -> Caps {
        let mut copy = [0u8; c::SIZE];
        let n = raw.len().min(c::SIZE);
        copy[..n].copy_from_slice(&raw[..n]);
        let r = &copy[..];
        let max_wqe_sz_rq = c::max_wqe_sz_rq.get(r);
        Caps {
            log_max_cq_sz: c::log_max_cq_sz.get(r),
            log_max_cq: c::log_max_cq.get(r),
            log_max_eq_sz: c::log_max_eq_sz.get(r),
            log_max_eq: c::log_max_eq.get(r),
            max_num_eqs: c::max_num_eqs.get(r),
            log_max_srq_sz: c::log_max_srq_sz.get(r),
            log_max_srq: c::log_max_srq.get(r),
            log_max_rmp: c::log_max_rmp.get(r),
            max_wqe_sz_rq,
            max_srq_sge: max_wqe_sz_rq as u32 / 16,
            log_max_qp: c::log_max_qp.get(r),
            log_max_pd: c::log_max_pd.get(r),
            cq_resize: c::cq_resize.get(r),
            cq_moderation: c::cq_moderation.get(r),
            cq_period_mode_modify: c::cq_period_mode_modify.get(r),
            cq_period_start_from_cqe: c::cq_period_start_from_cqe.get(r),
            scqe_break_moderation: c::scqe_break_moderation.get(r),
            cq_oi: c::cq_oi.get(r),
            cqe_version: c::cqe_version.get(r),
            num_ports: c::num_ports.get(r),
            port_type: c::port_type.get(r),
            roce: c::roce.get(r),
            xrc: c::xrc.get(r),
            basic_cyclic_rcv_wqe: c::basic_cyclic_rcv_wqe.get(r),
            page_request_disable: c::page_request_disable.get(r),
            release_all_pages: c::release_all_pages.get(r),
            fast_teardown: c::fast_teardown.get(r),
            force_teardown: c::force_teardown.get(r),
            sw_owner_id: c::sw_owner_id.get(r),
            terminate_scatter_list_mkey: c::terminate_scatter_list_mkey.get(r),
            log_uar_page_sz: c::log_uar_page_sz.get(r),
            cmdif_checksum: c::cmdif_checksum.get(r),
            log_max_msg: c::log_max_msg.get(r),
            log_max_qp_sz: c::log_max_qp_sz.get(r),
            max_wqe_sz_sq: c::max_wqe_sz_sq.get(r),
            log_bf_reg_size: c::log_bf_reg_size.get(r),
            log_max_mkey: c::log_max_mkey.get(r),
            log_max_xrcd: c::log_max_xrcd.get(r),
            fl_rc_qp_when_roce_disabled: c::fl_rc_qp_when_roce_disabled.get(r),
            sq_ts_format: c::sq_ts_format.get(r),
            log_max_ra_req_qp: c::log_max_ra_req_qp.get(r),
            log_max_ra_res_qp: c::log_max_ra_res_qp.get(r),
            atomic: c::atomic.get(r),
            pg: c::pg.get(r),
            device_frequency_khz: c::device_frequency_khz.get(r),
            raw: copy,
        }
    }

    /// Refuse capability logs no device can mean (the device is not
    /// trusted): a queue-size log above [`MAX_LOG_QUEUE_SIZE`] (queue and
    /// consumer indices are 24 bits) or an object-count log above
    /// [`MAX_LOG_OBJECTS`] (object numbers are 24 bits). The error names the
    /// field.
    ///
    /// ```
    /// use mlx5_driver::{Caps, Error};
    /// use mlx5_regs::layouts::cmd_hca_cap;
    /// let mut raw = [0u8; cmd_hca_cap::SIZE];
    /// cmd_hca_cap::log_max_cq_sz.set(&mut raw, 22).unwrap();
    /// assert!(Caps::parse(&raw).validate().is_ok());
    /// cmd_hca_cap::log_max_srq_sz.set(&mut raw, 0xff).unwrap();
    /// assert!(matches!(Caps::parse(&raw).validate(), Err(Error::BadResponse { .. })));
    /// ```
    pub fn validate(&self) -> Result<(), Error> {
        let sizes = [
            (self.log_max_cq_sz, "capability log_max_cq_sz above 24"),
            (self.log_max_eq_sz, "capability log_max_eq_sz above 24"),
            (self.log_max_srq_sz, "capability log_max_srq_sz above 24"),
            (self.log_max_qp_sz, "capability log_max_qp_sz above 24"),
        ];
        let counts = [
            (self.log_max_cq, "capability log_max_cq above 24"),
            (self.log_max_srq, "capability log_max_srq above 24"),
            (self.log_max_rmp, "capability log_max_rmp above 24"),
            (self.log_max_qp, "capability log_max_qp above 24"),
            (self.log_max_pd, "capability log_max_pd above 24"),
            (self.log_max_mkey, "capability log_max_mkey above 24"),
            (self.log_max_xrcd, "capability log_max_xrcd above 24"),
        ];
        for (v, what) in sizes {
            if v > MAX_LOG_QUEUE_SIZE {
                return Err(bad(what));
            }
        }
        for (v, what) in counts {
            if v > MAX_LOG_OBJECTS {
                return Err(bad(what));
            }
        }
        Ok(())
    }

    /// Can this function carry RC traffic: an InfiniBand port, or an
    /// Ethernet port with RoCE or force-loopback RC QPs? Bring-up creates
    /// the DMA key, the XRC domain and the loopback addressing only then.
    ///
    /// ```
    /// use mlx5_driver::Caps;
    /// use mlx5_regs::layouts::cmd_hca_cap;
    /// let mut raw = [0u8; cmd_hca_cap::SIZE];
    /// cmd_hca_cap::port_type.set(&mut raw, 1).unwrap();
    /// assert!(!Caps::parse(&raw).rdma_capable(), "Ethernet without RoCE");
    /// cmd_hca_cap::roce.set(&mut raw, true).unwrap();
    /// assert!(Caps::parse(&raw).rdma_capable());
    /// ```
    pub fn rdma_capable(&self) -> bool {
        self.port_type == mlx5_regs::consts::port::TYPE_IB
            || self.roce
            || self.fl_rc_qp_when_roce_disabled
    }

    /// Number of EQs the function may create: `max_num_eqs` when the
    /// device sets it, else `2^log_max_eq` (Linux `mlx5_max_eq_cap_get`).
    pub fn max_eqs(&self) -> u32 {
        if self.max_num_eqs != 0 {
            self.max_num_eqs as u32
        } else {
            1u32 << self.log_max_eq.min(31)
        }
    }

    /// Largest CQ a verbs caller may ask for: `2^log_max_cq_sz − 1` (docs/firmware.md §10).
    pub fn max_cqe(&self) -> u32 {
        (1u32 << self.log_max_cq_sz.min(31)) - 1
    }

    /// Largest SRQ: `2^log_max_srq_sz − 1` work requests (docs/firmware.md §9.5).
    pub fn max_srq_wr(&self) -> u32 {
        (1u32 << self.log_max_srq_sz.min(31)) - 1
    }

    /// Number of CQs: `2^log_max_cq`.
    pub fn max_cq(&self) -> u32 {
        1u32 << self.log_max_cq.min(31)
    }

    /// Number of SRQs: `2^log_max_srq`.
    pub fn max_srq(&self) -> u32 {
        1u32 << self.log_max_srq.min(31)
    }
}

/// The atomic capability page (`atomic_caps`, QUERY_HCA_CAP type 3,
/// current values) as bring-up left it.
///
/// ```
/// use mlx5_driver::AtomicCaps;
/// let a = AtomicCaps { operations: 3, size_qp: 8, req_endianness_mode: 1, host_endianness_supported: true };
/// assert!(a.ib_atomics());
/// assert!(!AtomicCaps { req_endianness_mode: 0, ..a }.ib_atomics());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtomicCaps {
    /// `atomic_operations` (`MLX5_ATOMIC_OPS_*` bits).
    pub operations: u16,
    /// `atomic_size_qp`: operand sizes on RC QPs (bit n = 2^n bytes).
    pub size_qp: u16,
    /// `atomic_req_8B_endianness_mode`: 1 = host endianness.
    pub req_endianness_mode: u8,
    /// `supported_atomic_req_8B_endianness_mode_1`.
    pub host_endianness_supported: bool,
}

impl AtomicCaps {
    /// Parse the page.
    pub fn parse(page: &[u8]) -> AtomicCaps {
        use mlx5_regs::layouts::atomic_caps as a;
        AtomicCaps {
            operations: a::atomic_operations.get(page),
            size_qp: a::atomic_size_qp.get(page),
            req_endianness_mode: a::atomic_req_8b_endianness_mode.get(page),
            host_endianness_supported: a::supported_atomic_req_8b_endianness_mode_1.get(page),
        }
    }

    /// The standard 8-byte CMP_SWAP and FETCH_ADD on QPs (what Linux
    /// `get_atomic_mode` needs for `MLX5_ATOMIC_MODE_IB_COMP`).
    pub fn has_ib_ops(&self) -> bool {
        use mlx5_regs::consts::atomic as k;
        let ops = k::OPS_CMP_SWAP | k::OPS_FETCH_ADD;
        self.operations & ops == ops
    }

    /// `IBV_ATOMIC_HCA` as Linux `get_atomic_caps` decides it: both IB
    /// atomics on 8-byte operands, answered in host endianness.
    pub fn ib_atomics(&self) -> bool {
        self.has_ib_ops()
            && self.size_qp & mlx5_regs::consts::atomic::SIZE_QP_8BYTES != 0
            && self.req_endianness_mode == mlx5_regs::consts::atomic::REQ_MODE_HOST_ENDIANNESS
    }
}
