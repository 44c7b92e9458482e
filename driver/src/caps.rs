//! Typed general device capabilities, parsed from `cmd_hca_cap`
//! (QUERY_HCA_CAP op_mod general/current, facts §3, §4.1).

use mlx5_regs::layouts::cmd_hca_cap as c;

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
    /// log2 of the largest SRQ (WQEs).
    pub log_max_srq_sz: u8,
    /// log2 of the number of SRQs.
    pub log_max_srq: u8,
    /// log2 of the number of RMPs.
    pub log_max_rmp: u8,
    /// Largest receive WQE in bytes.
    pub max_wqe_sz_rq: u16,
    /// Scatter entries an SRQ WQE can hold: `max_wqe_sz_rq / 16` (facts §9.5;
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
    /// cq_period_mode can be modified.
    pub cq_period_mode_modify: bool,
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
    /// The whole capability block.
    pub raw: [u8; c::SIZE],
}

impl Caps {
    /// Parse a `cmd_hca_cap` block (at least 256 bytes; panics if shorter).
    pub fn parse(raw: &[u8]) -> Caps {
        let mut copy = [0u8; c::SIZE];
        copy.copy_from_slice(&raw[..c::SIZE]);
        let r = &copy[..];
        let max_wqe_sz_rq = c::max_wqe_sz_rq.get(r);
        Caps {
            log_max_cq_sz: c::log_max_cq_sz.get(r),
            log_max_cq: c::log_max_cq.get(r),
            log_max_eq_sz: c::log_max_eq_sz.get(r),
            log_max_eq: c::log_max_eq.get(r),
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
            raw: copy,
        }
    }

    /// Largest CQ a verbs caller may ask for: `2^log_max_cq_sz − 1` (facts §10).
    pub fn max_cqe(&self) -> u32 {
        (1u32 << self.log_max_cq_sz.min(31)) - 1
    }

    /// Largest SRQ: `2^log_max_srq_sz − 1` work requests (facts §9.5).
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
