//! Capability profiles (docs/firmware.md §4.1 step 10, §7.2, §9.5) and the current
//! (settable) capability values.
//!
//! The numbers are the ones Linux and rdma-core report for these adapters
//! (`ibv_devinfo -v`: `max_cqe = 2^log_max_cq_sz - 1`, `max_cq = 2^log_max_cq`,
//! `max_srq_wr = 2^log_max_srq_sz - 1`, `max_srq_sge = max_wqe_sz_rq/16 - 1`,
//! docs/firmware.md §7.2/§9.5), see `docs/fidelity.md` for where each value comes from.

use mlx5_regs::layouts::cmd_hca_cap as c;

/// An adapter generation whose capabilities the model reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Profile {
    /// ConnectX-4 Lx (PCI 0x1015, firmware 14.x).
    ConnectX4Lx,
    /// ConnectX-5 (PCI 0x1017, firmware 16.x).
    ConnectX5,
    /// ConnectX-6 Dx (PCI 0x101d, firmware 22.x).
    ConnectX6Dx,
    /// ConnectX-7 (PCI 0x1021, firmware 28.x).
    ConnectX7,
}

impl Profile {
    /// The device's marketing name (`ConnectX-5`).
    pub const fn name(self) -> &'static str {
        match self {
            Profile::ConnectX4Lx => "ConnectX-4 Lx",
            Profile::ConnectX5 => "ConnectX-5",
            Profile::ConnectX6Dx => "ConnectX-6 Dx",
            Profile::ConnectX7 => "ConnectX-7",
        }
    }
}

/// The capabilities of the modelled device: the *maximum* values
/// (`QUERY_HCA_CAP` mode MAX) and, for fields the driver cannot set, also the
/// current ones. Tests edit them with [`crate::Device::caps_mut`] before
/// bring-up, e.g. `caps.cq_resize = false` or `caps.log_max_cq_sz = 10`.
#[derive(Debug, Clone)]
#[allow(missing_docs)] // field names are the `cmd_hca_cap` names
pub struct Caps {
    /// Profile the values were taken from.
    pub profile: Profile,
    /// PCI device id (docs/firmware.md §1.1).
    pub pci_device_id: u16,
    /// Firmware version (major, minor, sub-minor) shown in the init segment.
    pub fw_rev: (u16, u16, u16),
    /// Board id string returned in QUERY_ADAPTER `vsd_contd_psid`.
    pub psid: &'static str,
    pub log_max_srq_sz: u8,
    pub log_max_qp_sz: u8,
    pub log_max_qp: u8,
    pub log_max_srq: u8,
    pub log_max_cq_sz: u8,
    pub log_max_cq: u8,
    pub log_max_eq_sz: u8,
    pub log_max_mkey: u8,
    pub log_max_eq: u8,
    pub log_max_pd: u8,
    pub log_max_xrcd: u8,
    pub log_max_rmp: u8,
    pub log_max_msg: u8,
    pub max_wqe_sz_rq: u16,
    pub max_wqe_sz_sq: u16,
    pub num_ports: u8,
    /// 0 = InfiniBand, 1 = Ethernet.
    pub port_type: u8,
    pub cqe_version: u8,
    /// Maximum `cmdif_checksum` the firmware supports (0 = none).
    pub cmdif_checksum: u8,
    pub cq_oi: bool,
    pub cq_resize: bool,
    pub cq_moderation: bool,
    pub cq_period_mode_modify: bool,
    /// `cq_period_mode` 1 (timer restarts at each CQE) supported.
    pub cq_period_start_from_cqe: bool,
    /// `cqc.scqe_break_moderation_en` supported.
    pub scqe_break_moderation: bool,
    pub wq_signature: bool,
    pub uar_4k: bool,
    /// log2 of the number of UAR pages in BAR0.
    pub uar_sz: u8,
    pub log_pg_sz: u8,
    pub bf: bool,
    pub log_bf_reg_size: u8,
    pub driver_version: bool,
    pub pkey_table_size: u16,
    pub drain_sigerr: bool,
    /// RoCE; reported only on an Ethernet port, where the RoCE page is
    /// served ([`Caps::has_roce_page`]).
    pub roce: bool,
    pub rc: bool,
    pub uc: bool,
    pub ud: bool,
    pub xrc: bool,
    pub fast_teardown: bool,
    pub force_teardown: bool,
    pub num_of_uars_per_page: u32,
    pub max_num_eqs: u16,
    pub device_frequency_khz: u32,
    pub cache_line_128byte: bool,
    /// Pages the firmware asks for with QUERY_PAGES op_mod 1 (boot).
    pub boot_pages: i32,
    /// Pages the firmware asks for with QUERY_PAGES op_mod 2 (init).
    pub init_pages: i32,
    /// Pages QUERY_PAGES op_mod 3 (regular) reports after INIT_HCA.
    pub regular_pages: i32,
    /// Number of MSI-X vectors (bound for `eqc.intr`).
    pub msix_vectors: u16,
    /// On-demand paging: MTT entries may carry access bits
    /// (`create_mkey_in.pg_access`). With it the ODP page (`QUERY_HCA_CAP`
    /// type 2) is served, all zero: no transport takes page faults.
    pub pg: bool,
    /// Force-loopback RC QPs allowed while RoCE is disabled (general page).
    pub fl_rc_qp_when_roce_disabled: bool,
    pub disable_local_lb_uc: bool,
    pub disable_local_lb_mc: bool,
    /// Timestamp formats (`MLX5_TIMESTAMP_FORMAT_CAP_*`: 0 free-running only,
    /// 1 real-time only, 2 both).
    pub sq_ts_format: u8,
    pub rq_ts_format: u8,
    pub log_max_ra_req_qp: u8,
    pub log_max_ra_res_qp: u8,
    /// The RoCE capability page (`QUERY_HCA_CAP` type 4), reported when
    /// `roce` is set and the port is Ethernet.
    pub roce_caps: RoceCaps,
    /// General cap `atomic`: the atomic page (`QUERY_HCA_CAP` type 3) is
    /// served and RC QPs execute CMP_SWAP / FETCH_ADD.
    pub atomic: bool,
    /// The atomic capability page (MAX values), served when `atomic` is set.
    pub atomic_caps: AtomicCaps,
    /// Model behaviour, not a capability bit: arming an SRQ limit above the
    /// WQEs currently available raises the limit event at once (default;
    /// what the verbs documentation promises). `false` models a firmware that
    /// raises it only when a consumption crosses the limit (whether mlx5
    /// firmware fires on arm is UNCONFIRMED, docs/firmware.md §11.9), so a driver's own
    /// fallback can be tested.
    pub limit_event_on_arm: bool,
    /// UMEMs may be created with uid 0 (required by rdma-core's VFIO
    /// driver, `mlx5_vfio_setup_function`).
    pub umem_uid_0: bool,
    /// QUERY_SPECIAL_CONTEXTS reports a `terminate_scatter_list_mkey`
    /// (Linux uses it to end short receive scatter lists).
    pub terminate_scatter_list_mkey: bool,
    /// Function property, not a capability: this is an embedded-CPU
    /// (BlueField Arm) function: init-segment bit `embedded_cpu` (0x1fc bit
    /// 23) is set and its own commands carry `embedded_cpu_function` = 1.
    pub embedded_cpu: bool,
    /// Function property, not a capability: a virtual function, which does
    /// not own the PF's HOST_ENDIANNESS register.
    pub virtual_function: bool,
    /// Init segment 0xff8 `cmd_exec_to` (raw: bits 31:29 unit, 19:0 value;
    /// 0 = not provided).
    pub cmd_exec_to: u32,
    /// Init segment 0xffc `cmd_q_init_to` (same encoding; 0 = the device
    /// provides no timeouts).
    pub cmd_q_init_to: u32,
}

impl Caps {
    /// The capabilities of a profile.
    pub fn for_profile(p: Profile) -> Caps {
        // Common ConnectX-4 Lx .. ConnectX-7 values (ibv_devinfo -v on each):
        // max_cqe 4194303 (2^22-1), max_cq 2^24, max_srq 2^23,
        // max_srq_wr 32767 (2^15-1), max_srq_sge 31 (512/16-1), max_pd 2^24.
        let mut caps = Caps {
            profile: p,
            pci_device_id: 0x1017,
            fw_rev: (16, 35, 2000),
            psid: "MT_0000000008",
            log_max_srq_sz: 15,
            log_max_qp_sz: 15,
            log_max_qp: 18,
            log_max_srq: 23,
            log_max_cq_sz: 22,
            log_max_cq: 24,
            log_max_eq_sz: 22,
            log_max_mkey: 24,
            log_max_eq: 5,
            log_max_pd: 24,
            log_max_xrcd: 24,
            log_max_rmp: 23,
            log_max_msg: 30,
            max_wqe_sz_rq: 512,
            max_wqe_sz_sq: 1024,
            num_ports: 1,
            port_type: 1,
            cqe_version: 1,
            cmdif_checksum: 3,
            cq_oi: true,
            cq_resize: true,
            cq_moderation: true,
            cq_period_mode_modify: true,
            cq_period_start_from_cqe: true,
            scqe_break_moderation: true,
            wq_signature: true,
            uar_4k: true,
            uar_sz: 13,
            log_pg_sz: 12,
            bf: true,
            log_bf_reg_size: 9,
            driver_version: true,
            pkey_table_size: 0,
            drain_sigerr: true,
            roce: true,
            rc: true,
            uc: true,
            ud: true,
            xrc: true,
            fast_teardown: true,
            force_teardown: true,
            num_of_uars_per_page: 1,
            max_num_eqs: 0,
            device_frequency_khz: 156_250,
            cache_line_128byte: false,
            boot_pages: 16,
            init_pages: 48,
            regular_pages: 0,
            msix_vectors: 64,
            limit_event_on_arm: true,
            umem_uid_0: true,
            terminate_scatter_list_mkey: false,
            embedded_cpu: false,
            virtual_function: false,
            cmd_exec_to: 0,
            cmd_q_init_to: 0,
            pg: true,
            fl_rc_qp_when_roce_disabled: false,
            disable_local_lb_uc: true,
            disable_local_lb_mc: true,
            sq_ts_format: 0,
            rq_ts_format: 0,
            log_max_ra_req_qp: 4,
            log_max_ra_res_qp: 4,
            atomic: true,
            atomic_caps: AtomicCaps {
                // The two IB atomics on 8-byte operands: what the model
                // executes (masked and extended atomics are not modelled).
                atomic_operations: mlx5_regs::consts::atomic::OPS_CMP_SWAP
                    | mlx5_regs::consts::atomic::OPS_FETCH_ADD,
                atomic_size_qp: mlx5_regs::consts::atomic::SIZE_QP_8BYTES,
                atomic_size_dc: mlx5_regs::consts::atomic::SIZE_QP_8BYTES,
                supported_atomic_req_8b_endianness_mode_1: true,
            },
            roce_caps: RoceCaps {
                sw_r_roce_src_udp_port: true,
                fl_rc_qp_when_roce_disabled: false,
                fl_rc_qp_when_roce_enabled: false,
                qp_ts_format: 0,
                l3_type: 0x6,
                roce_version: 0x5,
                r_roce_dest_udp_port: 4791,
                r_roce_max_src_udp_port: 0xffff,
                r_roce_min_src_udp_port: 0xc000,
                roce_address_table_size: 256,
            },
        };
        match p {
            Profile::ConnectX4Lx => {
                caps.pci_device_id = 0x1015;
                caps.fw_rev = (14, 32, 1010);
                caps.psid = "MT_2420110034";
                caps.log_max_eq = 4;
                caps.cq_period_mode_modify = false;
                caps.cq_period_start_from_cqe = false;
                caps.fast_teardown = false;
                caps.msix_vectors = 32;
                caps.init_pages = 32;
                caps.log_max_qp_sz = 14;
            }
            Profile::ConnectX5 => {
                caps.fl_rc_qp_when_roce_disabled = true;
            }
            Profile::ConnectX6Dx => {
                caps.pci_device_id = 0x101d;
                caps.fw_rev = (22, 39, 1002);
                caps.psid = "MT_0000000359";
                caps.log_max_qp = 17;
                caps.init_pages = 64;
                caps.roce_caps.fl_rc_qp_when_roce_enabled = true;
                caps.sq_ts_format = 2;
                caps.rq_ts_format = 2;
                caps.roce_caps.qp_ts_format = 2;
            }
            Profile::ConnectX7 => {
                caps.pci_device_id = 0x1021;
                caps.fw_rev = (28, 39, 1002);
                caps.psid = "MT_0000000834";
                caps.log_max_cq_sz = 24;
                caps.log_max_qp = 17;
                caps.msix_vectors = 128;
                caps.init_pages = 96;
                caps.device_frequency_khz = 1_000_000;
                caps.roce_caps.fl_rc_qp_when_roce_enabled = true;
                caps.sq_ts_format = 2;
                caps.rq_ts_format = 2;
                caps.roce_caps.qp_ts_format = 2;
            }
        }
        caps
    }

    /// Render the capabilities as a `cmd_hca_cap` block (MAX mode).
    pub(crate) fn to_block(&self, out: &mut [u8]) {
        macro_rules! put {
            ($($f:ident = $v:expr),* $(,)?) => {$(
                c::$f.set(out, $v).expect(concat!("capability value fits ", stringify!($f)));
            )*};
        }
        put!(
            log_max_srq_sz = self.log_max_srq_sz,
            log_max_qp_sz = self.log_max_qp_sz,
            log_max_qp = self.log_max_qp,
            log_max_srq = self.log_max_srq,
            log_max_cq_sz = self.log_max_cq_sz,
            log_max_cq = self.log_max_cq,
            log_max_eq_sz = self.log_max_eq_sz,
            log_max_mkey = self.log_max_mkey,
            log_max_eq = self.log_max_eq,
            log_max_pd = self.log_max_pd,
            log_max_xrcd = self.log_max_xrcd,
            log_max_rmp = self.log_max_rmp,
            log_max_msg = self.log_max_msg,
            max_wqe_sz_rq = self.max_wqe_sz_rq,
            max_wqe_sz_sq = self.max_wqe_sz_sq,
            num_ports = self.num_ports,
            port_type = self.port_type,
            cqe_version = self.cqe_version,
            cmdif_checksum = self.cmdif_checksum,
            cq_oi = self.cq_oi,
            cq_resize = self.cq_resize,
            cq_moderation = self.cq_moderation,
            cq_period_mode_modify = self.cq_period_mode_modify,
            cq_period_start_from_cqe = self.cq_period_start_from_cqe,
            scqe_break_moderation = self.scqe_break_moderation,
            wq_signature = self.wq_signature,
            uar_4k = self.uar_4k,
            uar_sz = self.uar_sz,
            log_pg_sz = self.log_pg_sz,
            bf = self.bf,
            log_bf_reg_size = self.log_bf_reg_size,
            driver_version = self.driver_version,
            pkey_table_size = self.pkey_table_size,
            drain_sigerr = self.drain_sigerr,
            // Never a bit whose page the model does not serve: `roce` only
            // with the RoCE page (an Ethernet port); `eth_net_offloads` never
            // (no Ethernet offloads page; Linux fails its probe if the page is
            // refused, `mlx5_query_hca_caps`). docs/fidelity.md §3.
            roce = self.has_roce_page(),
            rc = self.rc,
            uc = self.uc,
            ud = self.ud,
            xrc = self.xrc,
            fast_teardown = self.fast_teardown,
            force_teardown = self.force_teardown,
            num_of_uars_per_page = self.num_of_uars_per_page,
            max_num_eqs = self.max_num_eqs,
            device_frequency_khz = self.device_frequency_khz,
            cache_line_128byte = self.cache_line_128byte,
            pg = self.pg,
            fl_rc_qp_when_roce_disabled = self.fl_rc_qp_when_roce_disabled,
            disable_local_lb_uc = self.disable_local_lb_uc,
            disable_local_lb_mc = self.disable_local_lb_mc,
            sq_ts_format = self.sq_ts_format,
            rq_ts_format = self.rq_ts_format,
            log_max_ra_req_qp = self.log_max_ra_req_qp,
            log_max_ra_res_qp = self.log_max_ra_res_qp,
            atomic = self.atomic,
            umem_uid_0 = self.umem_uid_0,
            terminate_scatter_list_mkey = self.terminate_scatter_list_mkey,
        );
    }

    /// True when the RoCE capability page exists and `roce` is reported: cap `roce` on an Ethernet
    /// port (Linux reads the page only then, `mlx5_core` `handle_hca_cap_roce`).
    pub fn has_roce_page(&self) -> bool {
        self.roce && self.port_type == mlx5_regs::consts::port::TYPE_ETH
    }

    /// The force-loopback condition for RC QPs (Linux `dr_send_allow_fl`,
    /// `drivers/net/ethernet/mellanox/mlx5/core/steering/sws/dr_send.c`): the
    /// "disabled" capability is the OR of the general and the RoCE page bits.
    pub(crate) fn fl_allowed(&self, roce_en: bool) -> bool {
        let rp = self.has_roce_page();
        if roce_en {
            rp && self.roce_caps.fl_rc_qp_when_roce_enabled
        } else {
            self.fl_rc_qp_when_roce_disabled || (rp && self.roce_caps.fl_rc_qp_when_roce_disabled)
        }
    }
}

/// The atomic capability page (`atomic_caps` in `mlx5_ifc.h`), MAX values.
/// The current `atomic_req_8B_endianness_mode` (settable to host
/// endianness when `supported_atomic_req_8B_endianness_mode_1`) is in the
/// device's current caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)] // field names are the `atomic_caps` names
pub struct AtomicCaps {
    pub atomic_operations: u16,
    pub atomic_size_qp: u16,
    pub atomic_size_dc: u16,
    pub supported_atomic_req_8b_endianness_mode_1: bool,
}

impl AtomicCaps {
    /// Render as an `atomic_caps` block with the endianness mode `mode`
    /// (0 in MAX mode: the reset value).
    pub(crate) fn to_block(self, out: &mut [u8], mode: u8) {
        use mlx5_regs::layouts::atomic_caps as a;
        a::atomic_req_8b_endianness_mode
            .set(out, mode)
            .expect("2-bit");
        a::supported_atomic_req_8b_endianness_mode_1
            .set(out, self.supported_atomic_req_8b_endianness_mode_1)
            .expect("flag");
        a::atomic_operations
            .set(out, self.atomic_operations)
            .expect("16-bit");
        a::atomic_size_qp
            .set(out, self.atomic_size_qp)
            .expect("16-bit");
        a::atomic_size_dc
            .set(out, self.atomic_size_dc)
            .expect("16-bit");
    }
}

/// The RoCE capability page (`roce_cap` in `mlx5_ifc.h`), MAX values. The
/// current value of `sw_r_roce_src_udp_port` (settable) is in the device's
/// current caps.
#[derive(Debug, Clone)]
#[allow(missing_docs)] // field names are the `roce_cap` names
pub struct RoceCaps {
    pub sw_r_roce_src_udp_port: bool,
    pub fl_rc_qp_when_roce_disabled: bool,
    pub fl_rc_qp_when_roce_enabled: bool,
    pub qp_ts_format: u8,
    /// Bit mask: bit 1 IPv4, bit 2 IPv6 (`MLX5_ROCE_L3_TYPE_*_CAP`).
    pub l3_type: u8,
    /// Bit mask: bit 0 RoCE v1, bit 2 RoCE v2.
    pub roce_version: u8,
    pub r_roce_dest_udp_port: u16,
    pub r_roce_max_src_udp_port: u16,
    pub r_roce_min_src_udp_port: u16,
    pub roce_address_table_size: u16,
}

impl RoceCaps {
    /// Render as a `roce_cap` block (MAX values; `cur_src_port` overrides
    /// `sw_r_roce_src_udp_port` for the CUR mode).
    pub(crate) fn to_block(&self, out: &mut [u8], cur_src_port: Option<bool>) {
        use mlx5_regs::layouts::roce_cap as r;
        macro_rules! put {
            ($($f:ident = $v:expr),* $(,)?) => {$(
                r::$f.set(out, $v).expect(concat!("RoCE capability fits ", stringify!($f)));
            )*};
        }
        put!(
            sw_r_roce_src_udp_port = cur_src_port.unwrap_or(self.sw_r_roce_src_udp_port),
            fl_rc_qp_when_roce_disabled = self.fl_rc_qp_when_roce_disabled,
            fl_rc_qp_when_roce_enabled = self.fl_rc_qp_when_roce_enabled,
            qp_ts_format = self.qp_ts_format,
            l3_type = self.l3_type,
            roce_version = self.roce_version,
            r_roce_dest_udp_port = self.r_roce_dest_udp_port,
            r_roce_max_src_udp_port = self.r_roce_max_src_udp_port,
            r_roce_min_src_udp_port = self.r_roce_min_src_udp_port,
            roce_address_table_size = self.roce_address_table_size,
        );
    }
}

/// The capability fields SET_HCA_CAP may change (docs/firmware.md §4.1 step 10), with
/// their current values. Everything else must be sent back unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CurCaps {
    pub cmdif_checksum: u8,
    pub log_uar_page_sz: u16,
    pub pkey_table_size: u16,
    pub log_max_qp: u8,
    pub drain_sigerr: bool,
    pub uar_4k: bool,
    pub cache_line_128byte: bool,
    /// RoCE page: firmware takes the RoCE v2 UDP source port from the QPC.
    pub sw_r_roce_src_udp_port: bool,
    /// Atomic page: `atomic_req_8B_endianness_mode` (0 big endian, 1 host).
    pub atomic_req_8b_endianness_mode: u8,
}

impl CurCaps {
    /// Power-on current values: checksums off, 4 KiB UAR pages, UAR 4k mode
    /// off, limits at their maximum.
    pub fn initial(caps: &Caps) -> CurCaps {
        CurCaps {
            cmdif_checksum: 0,
            log_uar_page_sz: 0,
            pkey_table_size: caps.pkey_table_size,
            log_max_qp: caps.log_max_qp,
            drain_sigerr: false,
            uar_4k: false,
            cache_line_128byte: caps.cache_line_128byte,
            sw_r_roce_src_udp_port: false,
            atomic_req_8b_endianness_mode: 0,
        }
    }

    /// Write the current values over a MAX block.
    pub fn apply(&self, out: &mut [u8]) {
        c::cmdif_checksum
            .set(out, self.cmdif_checksum)
            .expect("2-bit value");
        c::log_uar_page_sz
            .set(out, self.log_uar_page_sz)
            .expect("16-bit value");
        c::pkey_table_size
            .set(out, self.pkey_table_size)
            .expect("16-bit value");
        c::log_max_qp
            .set(out, self.log_max_qp)
            .expect("5-bit value");
        c::drain_sigerr.set(out, self.drain_sigerr).expect("flag");
        c::uar_4k.set(out, self.uar_4k).expect("flag");
        c::cache_line_128byte
            .set(out, self.cache_line_128byte)
            .expect("flag");
    }
}
