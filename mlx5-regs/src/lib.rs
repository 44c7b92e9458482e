//! # mlx5-regs: the firmware's structures, described once
//!
//! Every structure the mlx5 driver and the device model exchange with the
//! firmware — the initialization segment, command queue entries and mailboxes,
//! each command's input and output, the EQ/CQ/SRQ/RMP contexts, EQEs and CQEs,
//! WQE segments and doorbell records — is written here once as a table of
//! big-endian bit fields (the `mlx5_ifc.h` model). The [`layouts!`] macro turns
//! each table into a module of typed constants:
//!
//! ```
//! use mlx5_regs::layouts::{cqc, create_cq_in};
//!
//! let mut cmd = [0u8; create_cq_in::SIZE + 8];
//! create_cq_in::opcode.set(&mut cmd, 0x400).unwrap();
//! let ctx = create_cq_in::cq_context.get_mut(&mut cmd);
//! cqc::log_cq_size.set(ctx, 10).unwrap();
//! assert!(cqc::log_cq_size.set(ctx, 32).is_err(), "5-bit field: 32 does not fit");
//! create_cq_in::pas.set(&mut cmd, 0, 0x1_0000_2000).unwrap();
//! assert_eq!(cqc::log_cq_size.get(create_cq_in::cq_context.get(&cmd)), 10);
//! ```
//!
//! Layout rules are checked at compile time (fields inside the structure, no
//! overlap, no field crossing a 32-bit word except aligned 64-bit ones, sizes a
//! multiple of 4 bytes); setters refuse values that do not fit. Every field is
//! tested against the kernel-derived CSV in `tests/data/`.
//!
//! Also here: opcodes, status codes with their names and errno mapping, event
//! types, CQE opcodes, capability selectors ([`consts`]); UAR doorbell offsets
//! and value composition ([`doorbell`]); a field-by-field decoder and the Linux
//! `mlx5_core` hexdump format ([`decode`]).
//!
//! `no_std`, no allocation, no `unsafe`.
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod consts;
pub mod decode;
pub mod doorbell;
pub mod field;
pub mod layout;
pub mod layouts;

pub use consts::{CmdStatus, CqeOpcode, DeliveryStatus, EventMask, EventType, Opcode};
pub use field::{Array, Bytes, Field, RegError};
pub use layout::{FieldDesc, Kind, Layout};

/// Every layout defined in [`mod@layouts`], for tools and tests that walk them.
pub fn all_layouts() -> &'static [&'static Layout] {
    ALL_LAYOUTS
}

macro_rules! all {
    ($($m:ident),* $(,)?) => {
        static ALL_LAYOUTS: &[&Layout] = &[$(&layouts::$m::LAYOUT),*];
    };
}
all!(
    cmd_queue_entry,
    cmd_if_box,
    cmd_in,
    cmd_out,
    initial_seg,
    health_buffer,
    enable_hca_in,
    enable_hca_out,
    disable_hca_in,
    disable_hca_out,
    query_issi_in,
    query_issi_out,
    set_issi_in,
    set_issi_out,
    set_driver_version_in,
    set_driver_version_out,
    query_pages_in,
    query_pages_out,
    manage_pages_in,
    manage_pages_out,
    query_hca_cap_in,
    query_hca_cap_out,
    set_hca_cap_in,
    set_hca_cap_out,
    cmd_hca_cap,
    init_hca_in,
    init_hca_out,
    teardown_hca_in,
    teardown_hca_out,
    query_adapter_in,
    query_adapter_out,
    query_adapter_param_block,
    nop_in,
    nop_out,
    query_special_contexts_in,
    query_special_contexts_out,
    alloc_uar_in,
    alloc_uar_out,
    dealloc_uar_in,
    dealloc_uar_out,
    alloc_pd_in,
    alloc_pd_out,
    dealloc_pd_in,
    dealloc_pd_out,
    cmd_pas,
    access_register_in,
    access_register_out,
    register_host_endianness,
    eqc,
    create_eq_in,
    create_eq_out,
    destroy_eq_in,
    destroy_eq_out,
    query_eq_in,
    query_eq_out,
    gen_eqe_in,
    eqe,
    comp_event,
    qp_events,
    cq_error,
    cmd_inter_comp_event,
    pages_req_event,
    port_state_change_event,
    cqc,
    create_cq_in,
    create_cq_out,
    destroy_cq_in,
    destroy_cq_out,
    query_cq_in,
    query_cq_out,
    modify_cq_in,
    modify_cq_out,
    modify_field_select,
    resize_field_select,
    cqe_error_syndrome,
    srqc,
    create_srq_in,
    create_srq_out,
    destroy_srq_in,
    destroy_srq_out,
    query_srq_in,
    query_srq_out,
    arm_rq_in,
    arm_rq_out,
    wq,
    rmpc,
    rmp_bitmask,
    create_rmp_in,
    create_rmp_out,
    modify_rmp_in,
    modify_rmp_out,
    destroy_rmp_in,
    destroy_rmp_out,
    query_rmp_in,
    query_rmp_out,
    cqe64,
    err_cqe,
    gen_eqe_out,
    srq_next_seg,
    wqe_data_seg,
    cq_doorbell_record,
    srq_doorbell_record,
    // Queue pairs (layouts/qp.rs).
    ads,
    qpc,
    create_qp_in,
    create_qp_out,
    destroy_qp_in,
    destroy_qp_out,
    rst2init_qp_in,
    rst2init_qp_out,
    init2init_qp_in,
    init2init_qp_out,
    init2rtr_qp_in,
    init2rtr_qp_out,
    rtr2rts_qp_in,
    rtr2rts_qp_out,
    rts2rts_qp_in,
    rts2rts_qp_out,
    sqerr2rts_qp_in,
    sqerr2rts_qp_out,
    qp_2err_in,
    qp_2err_out,
    qp_2rst_in,
    qp_2rst_out,
    query_qp_in,
    query_qp_out,
    qp_pas_list,
    qpc_ext_and_pas_list,
    qpc_extension,
    alloc_xrcd_in,
    alloc_xrcd_out,
    dealloc_xrcd_in,
    dealloc_xrcd_out,
    wqe_ctrl_seg,
    wqe_raddr_seg,
    wqe_atomic_seg,
    wqe_datagram_seg,
    wqe_inline_seg,
    qp_doorbell_record,
    // Memory keys (layouts/mkey.rs).
    mkc,
    create_mkey_in,
    create_mkey_out,
    destroy_mkey_in,
    destroy_mkey_out,
    query_mkey_in,
    query_mkey_out,
    // Ports, vports, RoCE (layouts/vport.rs).
    atomic_caps,
    roce_cap,
    roce_addr_layout,
    set_roce_address_in,
    set_roce_address_out,
    query_roce_address_in,
    query_roce_address_out,
    nic_vport_context,
    mac_address_layout,
    modify_nic_vport_field_select,
    query_nic_vport_context_in,
    query_nic_vport_context_out,
    modify_nic_vport_context_in,
    modify_nic_vport_context_out,
    hca_vport_context,
    query_hca_vport_context_in,
    query_hca_vport_context_out,
    query_hca_vport_pkey_in,
    query_hca_vport_pkey_out,
    ptys_reg,
    pmtu_reg,
    query_vport_state_in,
    query_vport_state_out,
    // DevX user memory (layouts/devx.rs).
    umem,
    mtt,
    create_umem_in,
    create_umem_out,
    destroy_umem_in,
    destroy_umem_out,
);
