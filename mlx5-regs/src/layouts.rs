//! The firmware layouts, one table each.
//!
//! Names, bit offsets and widths follow `mlx5_ifc.h` (checked field by field
//! against `tests/data/mlx5-layouts.csv` by `tests/csv_layouts.rs`). Sizes are
//! the full `mlx5_ifc` structure sizes, reserved space included, because the
//! firmware checks command lengths against them. The first tables were drafted
//! from the CSV by a script and reviewed by hand; this file is the source of
//! truth now. Structures that `mlx5_ifc.h` does not describe as bit layouts
//! (the CQE, the SRQ WQE segments, doorbell records: C structs in
//! `include/linux/mlx5/device.h` and rdma-core `mlx5dv.h`) are at the end,
//! with byte offsets from docs/firmware.md §5, §7.2 and §9.4.
//!
//! Queue pairs and send WQEs, memory keys, and the port/vport/RoCE structures
//! live in the submodules `qp`, `mkey` and `vport` (checked against
//! `tests/data/mlx5-qp-layouts.csv`) and are re-exported here, so every layout
//! is `mlx5_regs::layouts::NAME`.
#![allow(missing_docs)] // every field carries a generated doc line

use crate::layouts;

mod devx;
mod mkey;
mod qp;
mod vport;
pub use devx::*;
pub use mkey::*;
pub use qp::*;
pub use vport::*;

layouts! {
    /// Command queue entry (64 bytes), docs/firmware.md §2.2.
    cmd_queue_entry (64) {
        r#type: u8 @ 0 : 8,
        input_length: u32 @ 32 : 32,
        input_mailbox_pointer_63_32: u32 @ 64 : 32,
        input_mailbox_pointer_31_9: u32 @ 96 : 23,
        command_input_inline_data: bytes @ 128 : 128,
        command_output_inline_data: bytes @ 256 : 128,
        output_mailbox_pointer_63_32: u32 @ 384 : 32,
        output_mailbox_pointer_31_9: u32 @ 416 : 23,
        output_length: u32 @ 448 : 32,
        token: u8 @ 480 : 8,
        signature: u8 @ 488 : 8,
        status: u8 @ 504 : 7,
        ownership: bool @ 511 : 1,
    }
    /// Command mailbox block (576 bytes: 512 data + next pointer, block number, token, signatures), docs/firmware.md §2.3.
    cmd_if_box (576) {
        mailbox_data: bytes @ 0 : 4096,
        next_pointer_63_32: u32 @ 4480 : 32,
        next_pointer_31_10: u32 @ 4512 : 22,
        block_number: u32 @ 4544 : 32,
        token: u8 @ 4584 : 8,
        ctrl_signature: u8 @ 4592 : 8,
        signature: u8 @ 4600 : 8,
    }
    /// Common command input header: opcode, uid, op_mod (docs/firmware.md §2.6).
    cmd_in (8) {
        opcode: u16 @ 0 : 16,
        op_mod: u16 @ 48 : 16,
        command: [u32] @ 64 : 32,
    }
    /// Common command output header: status and syndrome (docs/firmware.md §2.6).
    cmd_out (12) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
        command_output: u32 @ 64 : 32,
    }
    /// Initialization segment at BAR0 offset 0 (docs/firmware.md §1.2).
    initial_seg (16396) {
        fw_rev_minor: u16 @ 0 : 16,
        fw_rev_major: u16 @ 16 : 16,
        cmd_interface_rev: u16 @ 32 : 16,
        fw_rev_subminor: u16 @ 48 : 16,
        cmdq_phy_addr_63_32: u32 @ 128 : 32,
        cmdq_phy_addr_31_12: u32 @ 160 : 20,
        nic_interface: u8 @ 182 : 2,
        log_cmdq_size: u8 @ 184 : 4,
        log_cmdq_stride: u8 @ 188 : 4,
        command_doorbell_vector: u32 @ 192 : 32,
        initializing: bool @ 4064 : 1,
        nic_interface_supported: u8 @ 4069 : 3,
        embedded_cpu: bool @ 4072 : 1,
        health_buffer: {health_buffer} @ 4096 : 512,
        no_dram_nic_offset: u32 @ 4608 : 32,
        /// Command execution timeout (0xff8; Linux `struct mlx5_init_seg`
        /// `cmd_exec_to`, `lib/tout.c`): bits 31:29 unit (0 ms, 1 s, 2 min,
        /// 3 h), bits 19:0 value; 0 = not provided.
        cmd_exec_to: u32 @ 32704 : 32,
        /// Firmware-initialisation timeout (0xffc, `cmd_q_init_to`), same
        /// encoding; non-zero means the device provides its timeouts.
        cmd_q_init_to: u32 @ 32736 : 32,
        clear_int: bool @ 32895 : 1,
        health_syndrome: u8 @ 32896 : 8,
        health_counter: u32 @ 32904 : 24,
    }
    /// Health buffer at BAR0 0x200 (docs/firmware.md §1.3).
    health_buffer (64) {
        assert_existptr: u32 @ 256 : 32,
        assert_callra: u32 @ 288 : 32,
        time: u32 @ 352 : 32,
        fw_version: u32 @ 384 : 32,
        hw_id: u32 @ 416 : 32,
        rfr: bool @ 448 : 1,
        valid: bool @ 452 : 1,
        severity: u8 @ 453 : 3,
        irisc_index: u8 @ 480 : 8,
        synd: u8 @ 488 : 8,
        ext_synd: u16 @ 496 : 16,
    }
    /// Input of the `ENABLE_HCA` command.
    enable_hca_in (16) {
        opcode: u16 @ 0 : 16,
        op_mod: u16 @ 48 : 16,
        embedded_cpu_function: bool @ 64 : 1,
        function_id: u16 @ 80 : 16,
    }
    /// Output of the `ENABLE_HCA` command.
    enable_hca_out (12) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
    }
    /// Input of the `DISABLE_HCA` command.
    disable_hca_in (16) {
        opcode: u16 @ 0 : 16,
        op_mod: u16 @ 48 : 16,
        embedded_cpu_function: bool @ 64 : 1,
        function_id: u16 @ 80 : 16,
    }
    /// Output of the `DISABLE_HCA` command.
    disable_hca_out (12) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
    }
    /// Input of the `QUERY_ISSI` command.
    query_issi_in (16) {
        opcode: u16 @ 0 : 16,
        op_mod: u16 @ 48 : 16,
    }
    /// Output of the `QUERY_ISSI` command.
    query_issi_out (112) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
        current_issi: u16 @ 80 : 16,
        supported_issi_dw0: u32 @ 864 : 32,
    }
    /// Input of the `SET_ISSI` command.
    set_issi_in (16) {
        opcode: u16 @ 0 : 16,
        op_mod: u16 @ 48 : 16,
        current_issi: u16 @ 80 : 16,
    }
    /// Output of the `SET_ISSI` command.
    set_issi_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
    }
    /// Input of the `SET_DRIVER_VERSION` command (`mlx5_ifc.h`
    /// `set_driver_version_in`): a NUL-padded string such as Linux's
    /// `Linux,mlx5_core,<version>` (`mlx5_set_driver_version`).
    set_driver_version_in (80) {
        opcode: u16 @ 0 : 16,
        op_mod: u16 @ 48 : 16,
        driver_version: bytes @ 128 : 512,
    }
    /// Output of the `SET_DRIVER_VERSION` command.
    set_driver_version_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
    }
    /// Input of the `QUERY_PAGES` command.
    query_pages_in (16) {
        opcode: u16 @ 0 : 16,
        op_mod: u16 @ 48 : 16,
        embedded_cpu_function: bool @ 64 : 1,
        function_id: u16 @ 80 : 16,
    }
    /// Output of the `QUERY_PAGES` command.
    query_pages_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
        embedded_cpu_function: bool @ 64 : 1,
        function_id: u16 @ 80 : 16,
        num_pages: u32 @ 96 : 32,
    }
    /// Input of the `MANAGE_PAGES` command.
    manage_pages_in (16) {
        opcode: u16 @ 0 : 16,
        op_mod: u16 @ 48 : 16,
        embedded_cpu_function: bool @ 64 : 1,
        function_id: u16 @ 80 : 16,
        input_num_entries: u32 @ 96 : 32,
        pas: [u64] @ 128 : 64,
    }
    /// Output of the `MANAGE_PAGES` command.
    manage_pages_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
        output_num_entries: u32 @ 64 : 32,
        pas: [u64] @ 128 : 64,
    }
    /// Input of the `QUERY_HCA_CAP` command.
    query_hca_cap_in (16) {
        opcode: u16 @ 0 : 16,
        op_mod: u16 @ 48 : 16,
        other_function: bool @ 64 : 1,
        ec_vf_function: bool @ 65 : 1,
        function_id_type: bool @ 67 : 1,
        function_id: u16 @ 80 : 16,
    }
    /// Output of the `QUERY_HCA_CAP` command.
    query_hca_cap_out (4112) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
        capability: {cmd_hca_cap} @ 128 : 32768,
    }
    /// Input of the `SET_HCA_CAP` command.
    set_hca_cap_in (4112) {
        opcode: u16 @ 0 : 16,
        op_mod: u16 @ 48 : 16,
        other_function: bool @ 64 : 1,
        ec_vf_function: bool @ 65 : 1,
        function_id_type: bool @ 67 : 1,
        function_id: u16 @ 80 : 16,
        capability: {cmd_hca_cap} @ 128 : 32768,
    }
    /// Output of the `SET_HCA_CAP` command.
    set_hca_cap_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
    }
    /// General device capabilities (`QUERY_HCA_CAP` op_mod cap_type 0), docs/firmware.md §4.1.
    cmd_hca_cap (256) {
        page_request_disable: bool @ 6 : 1,
        abs_native_port_num: bool @ 7 : 1,
        shared_object_to_user_object_allowed: bool @ 16 : 1,
        lag_queue_affinity_active_port: bool @ 18 : 1,
        vhca_resource_manager: bool @ 31 : 1,
        hca_cap_2: bool @ 32 : 1,
        create_lag_when_not_master_up: bool @ 33 : 1,
        dtor: bool @ 34 : 1,
        event_on_vhca_state_teardown_request: bool @ 35 : 1,
        event_on_vhca_state_in_use: bool @ 36 : 1,
        event_on_vhca_state_active: bool @ 37 : 1,
        event_on_vhca_state_allocated: bool @ 38 : 1,
        event_on_vhca_state_invalid: bool @ 39 : 1,
        vhca_id: u16 @ 48 : 16,
        log_regexp_scatter_gather_size: u8 @ 99 : 5,
        log_max_srq_sz: u8 @ 128 : 8,
        log_max_qp_sz: u8 @ 136 : 8,
        event_cap: bool @ 144 : 1,
        isolate_vl_tc_new: bool @ 147 : 1,
        prio_tag_required: bool @ 152 : 1,
        log_max_qp: u8 @ 155 : 5,
        ece_support: bool @ 163 : 1,
        regexp_num_of_engines: u8 @ 164 : 4,
        reg_c_preserve: bool @ 169 : 1,
        isolate_vl_tc: bool @ 170 : 1,
        log_max_srq: u8 @ 171 : 5,
        uplink_follow: bool @ 177 : 1,
        ts_cqe_to_dest_cqn: bool @ 178 : 1,
        go_back_n: bool @ 185 : 1,
        max_sgl_for_optimized_performance: u8 @ 192 : 8,
        log_max_cq_sz: u8 @ 200 : 8,
        relaxed_ordering_write_umr: bool @ 208 : 1,
        relaxed_ordering_read_umr: bool @ 209 : 1,
        virtio_net_device_emualtion_manager: bool @ 217 : 1,
        virtio_blk_device_emualtion_manager: bool @ 218 : 1,
        log_max_cq: u8 @ 219 : 5,
        log_max_eq_sz: u8 @ 224 : 8,
        relaxed_ordering_write: bool @ 232 : 1,
        relaxed_ordering_read_pci_enabled: bool @ 233 : 1,
        log_max_mkey: u8 @ 234 : 6,
        tunneled_atomic: bool @ 240 : 1,
        as_notify: bool @ 241 : 1,
        m_pci_port: bool @ 242 : 1,
        m_vhca_mk: bool @ 243 : 1,
        hotplug_manager: bool @ 244 : 1,
        nvme_device_emulation_manager: bool @ 245 : 1,
        terminate_scatter_list_mkey: bool @ 246 : 1,
        repeated_mkey: bool @ 247 : 1,
        dump_fill_mkey: bool @ 248 : 1,
        dpp: bool @ 249 : 1,
        resources_on_nvme_emulation_manager: bool @ 250 : 1,
        fast_teardown: bool @ 251 : 1,
        log_max_eq: u8 @ 252 : 4,
        max_indirection: u8 @ 256 : 8,
        fixed_buffer_size: bool @ 264 : 1,
        log_max_mrw_sz: u8 @ 265 : 7,
        force_teardown: bool @ 272 : 1,
        log_max_bsf_list_size: u8 @ 274 : 6,
        umr_extended_translation_offset: bool @ 280 : 1,
        null_mkey: bool @ 281 : 1,
        log_max_klm_list_size: u8 @ 282 : 6,
        qpc_extension: bool @ 290 : 1,
        log_max_ra_req_dc: u8 @ 298 : 6,
        vhca_trust_level_reg: bool @ 304 : 1,
        eth_wqe_too_small: bool @ 306 : 1,
        vnic_env_cq_overrun: bool @ 313 : 1,
        log_max_ra_res_dc: u8 @ 314 : 6,
        release_all_pages: bool @ 325 : 1,
        must_not_use: bool @ 326 : 1,
        roce_accl: bool @ 329 : 1,
        log_max_ra_req_qp: u8 @ 330 : 6,
        log_max_ra_res_qp: u8 @ 346 : 6,
        end_pad: bool @ 352 : 1,
        cc_query_allowed: bool @ 353 : 1,
        cc_modify_allowed: bool @ 354 : 1,
        start_pad: bool @ 355 : 1,
        cache_line_128byte: bool @ 356 : 1,
        rts2rts_qp_rmp: bool @ 359 : 1,
        rts2rts_qp_counters_set_id: bool @ 361 : 1,
        rts2rts_qp_dscp: bool @ 362 : 1,
        vnic_env_int_rq_oob: bool @ 364 : 1,
        sbcam_reg: bool @ 365 : 1,
        qcam_reg: bool @ 367 : 1,
        gid_table_size: u16 @ 368 : 16,
        out_of_seq_cnt: bool @ 384 : 1,
        vport_counters: bool @ 385 : 1,
        retransmission_q_counters: bool @ 386 : 1,
        debug: bool @ 387 : 1,
        modify_rq_counter_set_id: bool @ 388 : 1,
        rq_delay_drop: bool @ 389 : 1,
        max_qp_cnt: u16 @ 390 : 10,
        pkey_table_size: u16 @ 400 : 16,
        vport_group_manager: bool @ 416 : 1,
        vhca_group_manager: bool @ 417 : 1,
        ib_virt: bool @ 418 : 1,
        eth_virt: bool @ 419 : 1,
        vnic_env_queue_counters: bool @ 420 : 1,
        ets: bool @ 421 : 1,
        nic_flow_table: bool @ 422 : 1,
        eswitch_manager: bool @ 423 : 1,
        device_memory: bool @ 424 : 1,
        mcam_reg: bool @ 425 : 1,
        pcam_reg: bool @ 426 : 1,
        local_ca_ack_delay: u8 @ 427 : 5,
        port_module_event: bool @ 432 : 1,
        enhanced_error_q_counters: bool @ 433 : 1,
        ports_check: bool @ 434 : 1,
        disable_link_up: bool @ 436 : 1,
        beacon_led: bool @ 437 : 1,
        port_type: u8 @ 438 : 2,
        num_ports: u8 @ 440 : 8,
        pps: bool @ 449 : 1,
        pps_modify: bool @ 450 : 1,
        log_max_msg: u8 @ 451 : 5,
        max_tc: u8 @ 460 : 4,
        temp_warn_event: bool @ 464 : 1,
        dcbx: bool @ 465 : 1,
        general_notification_event: bool @ 466 : 1,
        fpga: bool @ 469 : 1,
        rol_s: bool @ 470 : 1,
        rol_g: bool @ 471 : 1,
        wol_s: bool @ 473 : 1,
        wol_g: bool @ 474 : 1,
        wol_a: bool @ 475 : 1,
        wol_b: bool @ 476 : 1,
        wol_m: bool @ 477 : 1,
        wol_u: bool @ 478 : 1,
        wol_p: bool @ 479 : 1,
        stat_rate_support: u16 @ 480 : 16,
        pci_sync_for_fw_update_event: bool @ 497 : 1,
        init2_lag_tx_port_affinity: bool @ 504 : 1,
        wqe_based_flow_table_update_cap: bool @ 507 : 1,
        cqe_version: u8 @ 508 : 4,
        compact_address_vector: bool @ 512 : 1,
        striding_rq: bool @ 513 : 1,
        ipoib_enhanced_offloads: bool @ 515 : 1,
        ipoib_basic_offloads: bool @ 516 : 1,
        repeated_block_disabled: bool @ 518 : 1,
        umr_modify_entity_size_disabled: bool @ 519 : 1,
        umr_modify_atomic_disabled: bool @ 520 : 1,
        umr_indirect_mkey_disabled: bool @ 521 : 1,
        umr_fence: u8 @ 522 : 2,
        dc_req_scat_data_cqe: bool @ 524 : 1,
        drain_sigerr: bool @ 527 : 1,
        cmdif_checksum: u8 @ 528 : 2,
        sigerr_cqe: bool @ 530 : 1,
        wq_signature: bool @ 532 : 1,
        sctr_data_cqe: bool @ 533 : 1,
        sho: bool @ 535 : 1,
        tph: bool @ 536 : 1,
        rf: bool @ 537 : 1,
        dct: bool @ 538 : 1,
        qos: bool @ 539 : 1,
        eth_net_offloads: bool @ 540 : 1,
        roce: bool @ 541 : 1,
        atomic: bool @ 542 : 1,
        cq_oi: bool @ 544 : 1,
        cq_resize: bool @ 545 : 1,
        cq_moderation: bool @ 546 : 1,
        cq_period_mode_modify: bool @ 547 : 1,
        cq_eq_remap: bool @ 550 : 1,
        pg: bool @ 551 : 1,
        block_lb_mc: bool @ 552 : 1,
        scqe_break_moderation: bool @ 554 : 1,
        cq_period_start_from_cqe: bool @ 555 : 1,
        cd: bool @ 556 : 1,
        apm: bool @ 558 : 1,
        vector_calc: bool @ 559 : 1,
        umr_ptr_rlky: bool @ 560 : 1,
        imaicl: bool @ 561 : 1,
        qp_packet_based: bool @ 562 : 1,
        qkv: bool @ 566 : 1,
        pkv: bool @ 567 : 1,
        set_deth_sqpn: bool @ 568 : 1,
        xrc: bool @ 572 : 1,
        ud: bool @ 573 : 1,
        uc: bool @ 574 : 1,
        rc: bool @ 575 : 1,
        uar_4k: bool @ 576 : 1,
        fl_rc_qp_when_roce_disabled: bool @ 584 : 1,
        regexp_params: bool @ 585 : 1,
        uar_sz: u8 @ 586 : 6,
        port_selection_cap: bool @ 592 : 1,
        nic_cap_reg: bool @ 593 : 1,
        umem_uid_0: bool @ 594 : 1,
        log_pg_sz: u8 @ 600 : 8,
        bf: bool @ 608 : 1,
        driver_version: bool @ 609 : 1,
        pad_tx_eth_packet: bool @ 610 : 1,
        mkey_by_name: bool @ 614 : 1,
        log_bf_reg_size: u8 @ 619 : 5,
        qp_error_syndrome: bool @ 627 : 1,
        lag_dct: u8 @ 630 : 2,
        lag_tx_port_affinity: bool @ 632 : 1,
        lag_native_fdb_selection: bool @ 633 : 1,
        lag_master: bool @ 635 : 1,
        num_lag_ports: u8 @ 636 : 4,
        num_of_diagnostic_counters: u16 @ 640 : 16,
        max_wqe_sz_sq: u16 @ 656 : 16,
        shampo: bool @ 683 : 1,
        regexp_mmo_sq: bool @ 684 : 1,
        regexp_version: u8 @ 685 : 3,
        max_wqe_sz_rq: u16 @ 688 : 16,
        max_flow_counter_31_16: u16 @ 704 : 16,
        max_wqe_sz_sq_dc: u16 @ 720 : 16,
        max_qp_mcg: u32 @ 743 : 25,
        flow_counter_bulk_alloc: u8 @ 784 : 8,
        log_max_mcg: u8 @ 792 : 8,
        log_max_transport_domain: u8 @ 803 : 5,
        relaxed_ordering_read: bool @ 810 : 1,
        log_max_pd: u8 @ 811 : 5,
        dp_ordering_ooo_all_ud: bool @ 816 : 1,
        dp_ordering_ooo_all_uc: bool @ 817 : 1,
        dp_ordering_ooo_all_xrc: bool @ 818 : 1,
        dp_ordering_ooo_all_dc: bool @ 819 : 1,
        dp_ordering_ooo_all_rc: bool @ 820 : 1,
        pcie_reset_using_hotreset_method: bool @ 821 : 1,
        pci_sync_for_fw_update_with_driver_unload: bool @ 822 : 1,
        vnic_env_cnt_steering_fail: bool @ 823 : 1,
        vport_counter_local_loopback: bool @ 824 : 1,
        q_counter_aggregation: bool @ 825 : 1,
        q_counter_other_vport: bool @ 826 : 1,
        log_max_xrcd: u8 @ 827 : 5,
        nic_receive_steering_discard: bool @ 832 : 1,
        receive_discard_vport_down: bool @ 833 : 1,
        transmit_discard_vport_down: bool @ 834 : 1,
        eq_overrun_count: bool @ 835 : 1,
        invalid_command_count: bool @ 837 : 1,
        quota_exceeded_count: bool @ 838 : 1,
        log_max_flow_counter_bulk: u8 @ 840 : 8,
        max_flow_counter_15_0: u16 @ 848 : 16,
        log_max_rq: u8 @ 867 : 5,
        log_max_sq: u8 @ 875 : 5,
        log_max_tir: u8 @ 883 : 5,
        log_max_tis: u8 @ 891 : 5,
        basic_cyclic_rcv_wqe: bool @ 896 : 1,
        log_max_rmp: u8 @ 899 : 5,
        pci_sync_for_fw_update_sync2_using_tool_reset: bool @ 905 : 1,
        log_max_rqt: u8 @ 907 : 5,
        log_max_rqt_size: u8 @ 915 : 5,
        vnic_env_cnt_bar_uar_access: bool @ 921 : 1,
        vnic_env_cnt_odp_page_fault: bool @ 922 : 1,
        log_max_tis_per_sq: u8 @ 923 : 5,
        ext_stride_num_range: bool @ 928 : 1,
        roce_rw_supported: bool @ 929 : 1,
        log_max_current_uc_list_wr_supported: bool @ 930 : 1,
        log_max_stride_sz_rq: u8 @ 931 : 5,
        log_min_stride_sz_rq: u8 @ 939 : 5,
        log_max_stride_sz_sq: u8 @ 947 : 5,
        log_min_stride_sz_sq: u8 @ 955 : 5,
        hairpin: bool @ 960 : 1,
        log_max_hairpin_queues: u8 @ 963 : 5,
        log_max_hairpin_wq_data_sz: u8 @ 971 : 5,
        log_max_hairpin_num_packets: u8 @ 979 : 5,
        log_max_wq_sz: u8 @ 987 : 5,
        nic_vport_change_event: bool @ 992 : 1,
        disable_local_lb_uc: bool @ 993 : 1,
        disable_local_lb_mc: bool @ 994 : 1,
        log_min_hairpin_wq_data_sz: u8 @ 995 : 5,
        silent_mode: bool @ 1001 : 1,
        vhca_state: bool @ 1002 : 1,
        log_max_vlan_list: u8 @ 1003 : 5,
        log_max_current_mc_list: u8 @ 1011 : 5,
        log_max_current_uc_list: u8 @ 1019 : 5,
        general_obj_types: u64 @ 1024 : 64,
        sq_ts_format: u8 @ 1088 : 2,
        rq_ts_format: u8 @ 1090 : 2,
        steering_format_version: u8 @ 1092 : 4,
        create_qp_start_hint: u32 @ 1096 : 24,
        ats: bool @ 1121 : 1,
        cross_vhca_rqt: bool @ 1122 : 1,
        log_max_uctx: u8 @ 1123 : 5,
        crypto: bool @ 1129 : 1,
        ipsec_offload: bool @ 1130 : 1,
        log_max_umem: u8 @ 1131 : 5,
        max_num_eqs: u16 @ 1136 : 16,
        tls_tx: bool @ 1153 : 1,
        tls_rx: bool @ 1154 : 1,
        log_max_l2_table: u8 @ 1155 : 5,
        log_uar_page_sz: u16 @ 1168 : 16,
        device_frequency_mhz: u32 @ 1216 : 32,
        device_frequency_khz: u32 @ 1248 : 32,
        nvmf_target_offload: bool @ 1282 : 1,
        num_of_uars_per_page: u32 @ 1312 : 32,
        flex_parser_protocols: u32 @ 1344 : 32,
        max_geneve_tlv_options: u8 @ 1376 : 8,
        max_geneve_tlv_option_data_len: u8 @ 1387 : 5,
        adv_rdma: bool @ 1393 : 1,
        adv_virtualization: bool @ 1401 : 1,
        log_max_dci_stream_channels: u8 @ 1419 : 5,
        log_max_dci_errored_streams: u8 @ 1427 : 5,
        enhanced_cqe_compression: bool @ 1456 : 1,
        crossing_vhca_mkey: bool @ 1458 : 1,
        log_max_dek: u8 @ 1459 : 5,
        mini_cqe_resp_stride_index: bool @ 1468 : 1,
        cqe_128_always: bool @ 1469 : 1,
        cqe_compression_128: bool @ 1470 : 1,
        cqe_compression: bool @ 1471 : 1,
        cqe_compression_timeout: u16 @ 1472 : 16,
        cqe_compression_max_num: u16 @ 1488 : 16,
        flex_parser_id_gtpu_dw_0: u8 @ 1512 : 4,
        tag_matching: bool @ 1520 : 1,
        rndv_offload_rc: bool @ 1521 : 1,
        rndv_offload_dc: bool @ 1522 : 1,
        log_tag_matching_list_sz: u8 @ 1523 : 5,
        log_max_xrq: u8 @ 1531 : 5,
        affiliate_nic_vport_criteria: u8 @ 1536 : 8,
        native_port_num: u8 @ 1544 : 8,
        num_vhca_ports: u8 @ 1552 : 8,
        flex_parser_id_gtpu_teid: u8 @ 1560 : 4,
        sw_owner_id: bool @ 1566 : 1,
        max_num_of_monitor_counters: u16 @ 1568 : 16,
        num_ppcnt_monitor_counters: u16 @ 1584 : 16,
        max_num_sf: u16 @ 1600 : 16,
        num_q_monitor_counters: u16 @ 1616 : 16,
        sf: bool @ 1664 : 1,
        sf_set_partition: bool @ 1665 : 1,
        log_max_sf: u8 @ 1667 : 5,
        apu: bool @ 1672 : 1,
        migration: bool @ 1677 : 1,
        log_min_sf_size: u8 @ 1680 : 8,
        max_num_sf_partitions: u8 @ 1688 : 8,
        uctx_cap: u32 @ 1696 : 32,
        flex_parser_id_geneve_tlv_option_0: u8 @ 1732 : 4,
        flex_parser_id_icmp_dw1: u8 @ 1736 : 4,
        flex_parser_id_icmp_dw0: u8 @ 1740 : 4,
        flex_parser_id_icmpv6_dw1: u8 @ 1744 : 4,
        flex_parser_id_icmpv6_dw0: u8 @ 1748 : 4,
        flex_parser_id_outer_first_mpls_over_gre: u8 @ 1752 : 4,
        flex_parser_id_outer_first_mpls_over_udp_label: u8 @ 1756 : 4,
        max_num_match_definer: u16 @ 1760 : 16,
        sf_base_id: u16 @ 1776 : 16,
        flex_parser_id_gtpu_dw_2: u8 @ 1792 : 4,
        flex_parser_id_gtpu_first_ext_dw_0: u8 @ 1796 : 4,
        num_total_dynamic_vf_msix: u32 @ 1800 : 24,
        dynamic_msix_table_size: u16 @ 1844 : 12,
        regexp_mmo_qp: bool @ 1865 : 1,
        min_dynamic_vf_msix_table_size: u8 @ 1868 : 4,
        data_direct: bool @ 1874 : 1,
        max_dynamic_vf_msix_table_size: u16 @ 1876 : 12,
        log_max_num_header_modify_argument: u8 @ 1891 : 5,
        log_header_modify_argument_granularity_offset: u8 @ 1896 : 4,
        log_header_modify_argument_granularity: u8 @ 1900 : 4,
        log_header_modify_argument_max_alloc: u8 @ 1907 : 5,
        vhca_tunnel_commands: u64 @ 1920 : 64,
        match_definer_format_supported: u64 @ 1984 : 64,
    }
    /// Input of the `INIT_HCA` command.
    init_hca_in (32) {
        opcode: u16 @ 0 : 16,
        op_mod: u16 @ 48 : 16,
        sw_vhca_id: u16 @ 98 : 14,
        sw_owner_id: bytes @ 128 : 128,
    }
    /// Output of the `INIT_HCA` command.
    init_hca_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
    }
    /// Input of the `TEARDOWN_HCA` command.
    teardown_hca_in (16) {
        opcode: u16 @ 0 : 16,
        op_mod: u16 @ 48 : 16,
        profile: u16 @ 80 : 16,
    }
    /// Output of the `TEARDOWN_HCA` command.
    teardown_hca_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
        state: bool @ 127 : 1,
    }
    /// Input of the `QUERY_ADAPTER` command.
    query_adapter_in (16) {
        opcode: u16 @ 0 : 16,
        op_mod: u16 @ 48 : 16,
    }
    /// Output of the `QUERY_ADAPTER` command.
    query_adapter_out (272) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
        query_adapter_struct: {query_adapter_param_block} @ 128 : 2048,
    }
    /// Adapter parameters returned by `QUERY_ADAPTER`.
    query_adapter_param_block (256) {
        ieee_vendor_id: u32 @ 200 : 24,
        vsd_vendor_id: u16 @ 240 : 16,
        vsd: bytes @ 256 : 1664,
        vsd_contd_psid: bytes @ 1920 : 128,
    }
    /// Input of the `NOP` command.
    nop_in (16) {
        opcode: u16 @ 0 : 16,
        op_mod: u16 @ 48 : 16,
    }
    /// Output of the `NOP` command.
    nop_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
    }
    /// Input of the `QUERY_SPECIAL_CONTEXTS` command.
    query_special_contexts_in (16) {
        opcode: u16 @ 0 : 16,
        op_mod: u16 @ 48 : 16,
    }
    /// Output of the `QUERY_SPECIAL_CONTEXTS` command.
    query_special_contexts_out (32) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
        dump_fill_mkey: u32 @ 64 : 32,
        resd_lkey: u32 @ 96 : 32,
        null_mkey: u32 @ 128 : 32,
        terminate_scatter_list_mkey: u32 @ 160 : 32,
        repeated_mkey: u32 @ 192 : 32,
    }
    /// Input of the `ALLOC_UAR` command.
    alloc_uar_in (16) {
        opcode: u16 @ 0 : 16,
        uid: u16 @ 16 : 16,
        op_mod: u16 @ 48 : 16,
    }
    /// Output of the `ALLOC_UAR` command.
    alloc_uar_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
        uar: u32 @ 72 : 24,
    }
    /// Input of the `DEALLOC_UAR` command.
    dealloc_uar_in (16) {
        opcode: u16 @ 0 : 16,
        uid: u16 @ 16 : 16,
        op_mod: u16 @ 48 : 16,
        uar: u32 @ 72 : 24,
    }
    /// Output of the `DEALLOC_UAR` command.
    dealloc_uar_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
    }
    /// Input of the `ALLOC_PD` command.
    alloc_pd_in (16) {
        opcode: u16 @ 0 : 16,
        uid: u16 @ 16 : 16,
        op_mod: u16 @ 48 : 16,
    }
    /// Output of the `ALLOC_PD` command.
    alloc_pd_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
        pd: u32 @ 72 : 24,
    }
    /// Input of the `DEALLOC_PD` command.
    dealloc_pd_in (16) {
        opcode: u16 @ 0 : 16,
        uid: u16 @ 16 : 16,
        op_mod: u16 @ 48 : 16,
        pd: u32 @ 72 : 24,
    }
    /// Output of the `DEALLOC_PD` command.
    dealloc_pd_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
    }
    /// A page address entry split in high and low words.
    cmd_pas (8) {
        pa_h: u32 @ 0 : 32,
        pa_l: u32 @ 32 : 20,
    }
    /// Input of the `ACCESS_REGISTER` command.
    access_register_in (16) {
        opcode: u16 @ 0 : 16,
        op_mod: u16 @ 48 : 16,
        register_id: u16 @ 80 : 16,
        argument: u32 @ 96 : 32,
        register_data: [u32] @ 128 : 32,
    }
    /// Output of the `ACCESS_REGISTER` command.
    access_register_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
        register_data: [u32] @ 128 : 32,
    }
    /// HOST_ENDIANNESS register (id 0x7004) written with `ACCESS_REG`.
    register_host_endianness (16) {
        he: bool @ 0 : 1,
    }
    /// Event queue context (docs/firmware.md §6.1).
    eqc (64) {
        status: u8 @ 0 : 4,
        ec: bool @ 13 : 1,
        oi: bool @ 14 : 1,
        st: u8 @ 20 : 4,
        page_offset: u8 @ 84 : 6,
        log_eq_size: u8 @ 99 : 5,
        uar_page: u32 @ 104 : 24,
        intr: u16 @ 180 : 12,
        log_page_size: u8 @ 195 : 5,
        consumer_counter: u32 @ 328 : 24,
        producer_counter: u32 @ 360 : 24,
    }
    /// Input of the `CREATE_EQ` command.
    create_eq_in (272) {
        opcode: u16 @ 0 : 16,
        uid: u16 @ 16 : 16,
        op_mod: u16 @ 48 : 16,
        eq_context_entry: {eqc} @ 128 : 512,
        event_bitmask: [u64; 4] @ 704 : 64,
        pas: [u64] @ 2176 : 64,
    }
    /// Output of the `CREATE_EQ` command.
    create_eq_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
        eq_number: u8 @ 88 : 8,
    }
    /// Input of the `DESTROY_EQ` command.
    destroy_eq_in (16) {
        opcode: u16 @ 0 : 16,
        op_mod: u16 @ 48 : 16,
        eq_number: u8 @ 88 : 8,
    }
    /// Output of the `DESTROY_EQ` command.
    destroy_eq_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
    }
    /// Input of the `QUERY_EQ` command.
    query_eq_in (16) {
        opcode: u16 @ 0 : 16,
        op_mod: u16 @ 48 : 16,
        eq_number: u8 @ 88 : 8,
    }
    /// Output of the `QUERY_EQ` command.
    query_eq_out (272) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
        eq_context_entry: {eqc} @ 128 : 512,
        event_bitmask: u64 @ 704 : 64,
        pas: [u64] @ 2176 : 64,
    }
    /// Input of the `GEN_EQE` command.
    gen_eqe_in (80) {
        opcode: u16 @ 0 : 16,
        op_mod: u16 @ 48 : 16,
        eq_number: u8 @ 88 : 8,
        eqe: {eqe} @ 128 : 512,
    }
    /// Event queue entry (64 bytes, docs/firmware.md §6.2).
    eqe (64) {
        event_type: u8 @ 8 : 8,
        event_sub_type: u8 @ 24 : 8,
        event_data: (comp_event | qp_events | cq_error | port_state_change_event | cmd_inter_comp_event | pages_req_event) @ 256 : 224,
        signature: u8 @ 496 : 8,
        owner: bool @ 511 : 1,
    }
    /// EQE data of a completion event (type 0x00).
    comp_event (28) {
        cq_number: u32 @ 200 : 24,
    }
    /// EQE data of QP/RQ/SQ/SRQ events (types 0x01-0x05, 0x07, 0x10-0x14).
    qp_events (28) {
        r#type: u8 @ 160 : 8,
        qpn_rqn_sqn: u32 @ 200 : 24,
    }
    /// EQE data of a CQ error event (type 0x04).
    cq_error (28) {
        cqn: u32 @ 8 : 24,
        syndrome: u8 @ 88 : 8,
    }
    /// EQE data of a command completion event (type 0x0a).
    cmd_inter_comp_event (28) {
        command_completion_vector: u32 @ 0 : 32,
    }
    /// EQE data of a page request event (type 0x0b).
    pages_req_event (28) {
        /// Bit 15: the request is for the embedded-CPU function; bit 14:
        /// release all pages (Linux `struct mlx5_eqe_page_req`,
        /// `EC_FUNCTION_MASK`, `RELEASE_ALL_PAGES_MASK`).
        ec_function: u16 @ 0 : 16,
        function_id: u16 @ 16 : 16,
        num_pages: u32 @ 32 : 32,
    }
    /// EQE data of a port change event (type 0x09).
    port_state_change_event (28) {
        port_num: u8 @ 64 : 4,
    }
    /// Completion queue context (docs/firmware.md §7.1).
    cqc (64) {
        status: u8 @ 0 : 4,
        dbr_umem_valid: bool @ 6 : 1,
        apu_cq: bool @ 7 : 1,
        cqe_sz: u8 @ 8 : 3,
        cc: bool @ 11 : 1,
        scqe_break_moderation_en: bool @ 13 : 1,
        oi: bool @ 14 : 1,
        cq_period_mode: u8 @ 15 : 2,
        cqe_comp_en: bool @ 17 : 1,
        mini_cqe_res_format: u8 @ 18 : 2,
        st: u8 @ 20 : 4,
        cqe_compression_layout: u8 @ 30 : 2,
        /// UMEM holding the doorbell record when `dbr_umem_valid` (DevX;
        /// rdma-core `providers/mlx5/mlx5_ifc.h`, DPDK `mlx5_prm.h`);
        /// `dbr_addr` is then an offset into it.
        dbr_umem_id: u32 @ 32 : 32,
        page_offset: u8 @ 84 : 6,
        log_cq_size: u8 @ 99 : 5,
        uar_page: u32 @ 104 : 24,
        cq_period: u16 @ 132 : 12,
        cq_max_count: u16 @ 144 : 16,
        c_eqn_or_apu_element: u32 @ 160 : 32,
        log_page_size: u8 @ 195 : 5,
        last_notified_index: u32 @ 264 : 24,
        last_solicit_index: u32 @ 296 : 24,
        consumer_counter: u32 @ 328 : 24,
        producer_counter: u32 @ 360 : 24,
        dbr_addr: u64 @ 448 : 64,
    }
    /// Input of the `CREATE_CQ` command.
    create_cq_in (272) {
        opcode: u16 @ 0 : 16,
        uid: u16 @ 16 : 16,
        op_mod: u16 @ 48 : 16,
        cq_context: {cqc} @ 128 : 512,
        /// Offset of the CQ buffer in the UMEM `cq_umem_id` (DevX, rdma-core
        /// `mlx5_ifc.h`), used when `cq_umem_valid`.
        cq_umem_offset: u64 @ 640 : 64,
        cq_umem_id: u32 @ 704 : 32,
        /// The buffer is the UMEM `cq_umem_id` instead of `pas[]`.
        cq_umem_valid: bool @ 736 : 1,
        pas: [u64] @ 2176 : 64,
    }
    /// Output of the `CREATE_CQ` command.
    create_cq_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
        cqn: u32 @ 72 : 24,
    }
    /// Input of the `DESTROY_CQ` command.
    destroy_cq_in (16) {
        opcode: u16 @ 0 : 16,
        uid: u16 @ 16 : 16,
        op_mod: u16 @ 48 : 16,
        cqn: u32 @ 72 : 24,
    }
    /// Output of the `DESTROY_CQ` command.
    destroy_cq_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
    }
    /// Input of the `QUERY_CQ` command.
    query_cq_in (16) {
        opcode: u16 @ 0 : 16,
        op_mod: u16 @ 48 : 16,
        cqn: u32 @ 72 : 24,
    }
    /// Output of the `QUERY_CQ` command.
    query_cq_out (272) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
        cq_context: {cqc} @ 128 : 512,
        pas: [u64] @ 2176 : 64,
    }
    /// Input of the `MODIFY_CQ` command.
    modify_cq_in (272) {
        opcode: u16 @ 0 : 16,
        uid: u16 @ 16 : 16,
        op_mod: u16 @ 48 : 16,
        cqn: u32 @ 72 : 24,
        modify_field_select_resize_field_select: (modify_field_select | resize_field_select) @ 96 : 32,
        cq_context: {cqc} @ 128 : 512,
        cq_umem_valid: bool @ 736 : 1,
        pas: [u64] @ 2176 : 64,
    }
    /// Output of the `MODIFY_CQ` command.
    modify_cq_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
    }
    /// `MODIFY_CQ` op_mod 0 field select word.
    modify_field_select (4) {
        modify_field_select: u32 @ 0 : 32,
    }
    /// `MODIFY_CQ` op_mod 1 field select word.
    resize_field_select (4) {
        resize_field_select: u32 @ 0 : 32,
    }
    /// Error syndrome word of an error CQE (bytes 0x34-0x37).
    cqe_error_syndrome (4) {
        hw_error_syndrome: u8 @ 0 : 8,
        hw_syndrome_type: u8 @ 8 : 4,
        vendor_error_syndrome: u8 @ 16 : 8,
        syndrome: u8 @ 24 : 8,
    }
    /// SRQ context used at ISSI 0 (docs/firmware.md §9.2).
    srqc (64) {
        state: u8 @ 0 : 4,
        log_srq_size: u8 @ 4 : 4,
        wq_signature: bool @ 32 : 1,
        cont_srq: bool @ 33 : 1,
        rlky: bool @ 35 : 1,
        log_rq_stride: u8 @ 37 : 3,
        xrcd: u32 @ 40 : 24,
        page_offset: u8 @ 64 : 6,
        cqn: u32 @ 72 : 24,
        log_page_size: u8 @ 130 : 6,
        pd: u32 @ 200 : 24,
        lwm: u16 @ 224 : 16,
        wqe_cnt: u16 @ 240 : 16,
        dbr_addr: u64 @ 320 : 64,
    }
    /// Input of the `CREATE_SRQ` command.
    create_srq_in (272) {
        opcode: u16 @ 0 : 16,
        uid: u16 @ 16 : 16,
        op_mod: u16 @ 48 : 16,
        srq_context_entry: {srqc} @ 128 : 512,
        pas: [u64] @ 2176 : 64,
    }
    /// Output of the `CREATE_SRQ` command.
    create_srq_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
        srqn: u32 @ 72 : 24,
    }
    /// Input of the `DESTROY_SRQ` command.
    destroy_srq_in (16) {
        opcode: u16 @ 0 : 16,
        uid: u16 @ 16 : 16,
        op_mod: u16 @ 48 : 16,
        srqn: u32 @ 72 : 24,
    }
    /// Output of the `DESTROY_SRQ` command.
    destroy_srq_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
    }
    /// Input of the `QUERY_SRQ` command.
    query_srq_in (16) {
        opcode: u16 @ 0 : 16,
        op_mod: u16 @ 48 : 16,
        srqn: u32 @ 72 : 24,
    }
    /// Output of the `QUERY_SRQ` command.
    query_srq_out (272) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
        srq_context_entry: {srqc} @ 128 : 512,
        pas: [u64] @ 2176 : 64,
    }
    /// Input of the `ARM_RQ` command.
    arm_rq_in (16) {
        opcode: u16 @ 0 : 16,
        uid: u16 @ 16 : 16,
        op_mod: u16 @ 48 : 16,
        srq_number: u32 @ 72 : 24,
        lwm: u16 @ 112 : 16,
    }
    /// Output of the `ARM_RQ` command.
    arm_rq_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
    }
    /// Work queue description embedded in `rmpc` (docs/firmware.md §9.3).
    wq (192) {
        wq_type: u8 @ 0 : 4,
        wq_signature: bool @ 4 : 1,
        end_padding_mode: u8 @ 5 : 2,
        cd_slave: bool @ 7 : 1,
        hds_skip_first_sge: bool @ 32 : 1,
        log2_hds_buf_size: u8 @ 33 : 3,
        page_offset: u8 @ 43 : 5,
        lwm: u16 @ 48 : 16,
        pd: u32 @ 72 : 24,
        uar_page: u32 @ 104 : 24,
        dbr_addr: u64 @ 128 : 64,
        hw_counter: u32 @ 192 : 32,
        sw_counter: u32 @ 224 : 32,
        log_wq_stride: u8 @ 268 : 4,
        log_wq_pg_sz: u8 @ 275 : 5,
        log_wq_sz: u8 @ 283 : 5,
        dbr_umem_valid: bool @ 288 : 1,
        wq_umem_valid: bool @ 289 : 1,
        log_hairpin_num_packets: u8 @ 291 : 5,
        log_hairpin_data_sz: u8 @ 299 : 5,
        log_wqe_num_of_strides: u8 @ 308 : 4,
        two_byte_shift_en: bool @ 312 : 1,
        log_wqe_stride_size: u8 @ 317 : 3,
        dbr_umem_id: u32 @ 320 : 32,
        wq_umem_id: u32 @ 352 : 32,
        wq_umem_offset: u64 @ 384 : 64,
        headers_mkey: u32 @ 448 : 32,
        shampo_enable: bool @ 480 : 1,
        shampo_mode: u8 @ 482 : 2,
        log_reservation_size: u8 @ 485 : 3,
        log_max_num_of_packets_per_reservation: u8 @ 493 : 3,
        log_headers_entry_size: u8 @ 502 : 2,
        log_headers_buffer_entry_num: u8 @ 508 : 4,
        pas: [u64] @ 1536 : 64,
    }
    /// Receive memory pool context: the SRQ at ISSI 1 (docs/firmware.md §9.3).
    rmpc (240) {
        state: u8 @ 8 : 4,
        basic_cyclic_rcv_wqe: bool @ 32 : 1,
        wq: {wq} @ 384 : 1536,
    }
    /// `MODIFY_RMP` field bitmask.
    rmp_bitmask (8) {
        lwm: bool @ 63 : 1,
    }
    /// Input of the `CREATE_RMP` command.
    create_rmp_in (272) {
        opcode: u16 @ 0 : 16,
        uid: u16 @ 16 : 16,
        op_mod: u16 @ 48 : 16,
        ctx: {rmpc} @ 256 : 1920,
    }
    /// Output of the `CREATE_RMP` command.
    create_rmp_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
        rmpn: u32 @ 72 : 24,
    }
    /// Input of the `MODIFY_RMP` command.
    modify_rmp_in (272) {
        opcode: u16 @ 0 : 16,
        uid: u16 @ 16 : 16,
        op_mod: u16 @ 48 : 16,
        rmp_state: u8 @ 64 : 4,
        rmpn: u32 @ 72 : 24,
        bitmask: {rmp_bitmask} @ 128 : 64,
        ctx: {rmpc} @ 256 : 1920,
    }
    /// Output of the `MODIFY_RMP` command.
    modify_rmp_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
    }
    /// Input of the `DESTROY_RMP` command.
    destroy_rmp_in (16) {
        opcode: u16 @ 0 : 16,
        uid: u16 @ 16 : 16,
        op_mod: u16 @ 48 : 16,
        rmpn: u32 @ 72 : 24,
    }
    /// Output of the `DESTROY_RMP` command.
    destroy_rmp_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
    }
    /// Input of the `QUERY_RMP` command.
    query_rmp_in (16) {
        opcode: u16 @ 0 : 16,
        op_mod: u16 @ 48 : 16,
        rmpn: u32 @ 72 : 24,
    }
    /// Output of the `QUERY_RMP` command.
    query_rmp_out (272) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
        rmp_context: {rmpc} @ 256 : 1920,
    }

    /// 64-byte completion queue entry (`struct mlx5_cqe64`, docs/firmware.md §7.2).
    /// Not in `mlx5_ifc.h`; offsets from the C struct.
    cqe64 (64) {
        tls_outer_l3_tunneled: u8 @ 0 : 8,
        wqe_id: u16 @ 16 : 16,
        rss_hash_result: u32 @ 96 : 32,
        rss_hash_type: u8 @ 128 : 8,
        ml_path: u8 @ 136 : 8,
        check_sum: u16 @ 160 : 16,
        slid: u16 @ 176 : 16,
        flags_rqpn: u32 @ 192 : 32,
        hds_ip_ext: u8 @ 224 : 8,
        l4_l3_hdr_type: u8 @ 232 : 8,
        vlan_info: u16 @ 240 : 16,
        /// Bits 31:24: LRO segment count; 23:0: SRQ number (or user index).
        lro_num_seg: u8 @ 256 : 8,
        srqn: u32 @ 264 : 24,
        imm_inval_pkey: u32 @ 288 : 32,
        app_info: u32 @ 320 : 32,
        byte_cnt: u32 @ 352 : 32,
        timestamp: u64 @ 384 : 64,
        /// Opcode of the send WQE (requester CQEs).
        sop_opcode: u8 @ 448 : 8,
        qpn: u32 @ 456 : 24,
        wqe_counter: u16 @ 480 : 16,
        signature: u8 @ 496 : 8,
        /// `op_own` bits 7:4: CQE opcode (`CqeOpcode`).
        opcode: u8 @ 504 : 4,
        /// `op_own` bits 3:2: CQE format (compression).
        format: u8 @ 508 : 2,
        /// `op_own` bit 0: ownership.
        owner: bool @ 511 : 1,
    }

    /// Error CQE overlay (`struct mlx5_err_cqe`, docs/firmware.md §7.2).
    err_cqe (64) {
        srqn: u32 @ 264 : 24,
        hw_error_syndrome: u8 @ 416 : 8,
        hw_syndrome_type: u8 @ 424 : 4,
        vendor_err_synd: u8 @ 432 : 8,
        syndrome: u8 @ 440 : 8,
        s_wqe_opcode: u8 @ 448 : 8,
        qpn: u32 @ 456 : 24,
        wqe_counter: u16 @ 480 : 16,
        signature: u8 @ 496 : 8,
        opcode: u8 @ 504 : 4,
        format: u8 @ 508 : 2,
        owner: bool @ 511 : 1,
    }

    /// Output of `GEN_EQE`: `mlx5_ifc.h` declares none, the common 16-byte
    /// output header (status, syndrome) is what firmware returns.
    gen_eqe_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
    }

    /// SRQ WQE next segment (`struct mlx5_wqe_srq_next_seg`, docs/firmware.md §9.4).
    srq_next_seg (16) {
        next_wqe_index: u16 @ 16 : 16,
        signature: u8 @ 32 : 8,
    }

    /// Scatter entry of a receive WQE (`struct mlx5_wqe_data_seg`, docs/firmware.md §9.4).
    wqe_data_seg (16) {
        byte_count: u32 @ 0 : 32,
        lkey: u32 @ 32 : 32,
        addr: u64 @ 64 : 64,
    }

    /// CQ doorbell record in host memory (docs/firmware.md §5): word 0 = consumer index,
    /// word 1 = last arm command.
    cq_doorbell_record (8) {
        set_ci: u32 @ 8 : 24,
        arm_sn: u8 @ 34 : 2,
        arm_cmd: u8 @ 39 : 1,
        arm_ci: u32 @ 40 : 24,
    }

    /// SRQ/RMP doorbell record (docs/firmware.md §5): the 16-bit count of posted WQEs.
    srq_doorbell_record (4) {
        wqe_counter: u16 @ 16 : 16,
    }
}
