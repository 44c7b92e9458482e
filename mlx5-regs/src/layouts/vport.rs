//! Ports and vports: the RoCE capability page and GID table entries, the NIC
//! and HCA vport contexts and the commands that read and change them
//! (`SET/QUERY_ROCE_ADDRESS`, `QUERY/MODIFY_NIC_VPORT_CONTEXT`,
//! `QUERY_HCA_VPORT_CONTEXT`, `QUERY_HCA_VPORT_PKEY`, `QUERY_VPORT_STATE`)
//! and the port registers read with `ACCESS_REG` (PTYS, PMTU).
//!
//! Names, bit offsets and widths follow `mlx5_ifc.h` (checked against
//! `tests/data/mlx5-qp-layouts.csv` and, for PTYS and the P_Key query,
//! `tests/data/mlx5-port-layouts.csv`, by `tests/csv_layouts.rs`); sizes are the
//! full `mlx5_ifc` sizes.
#![allow(missing_docs)] // every field carries a generated doc line

use crate::layouts;

layouts! {
    /// Atomic capability page (`struct mlx5_ifc_atomic_caps_bits`):
    /// `QUERY_HCA_CAP` op_mod `(3 << 1) | mode`, read when the general cap
    /// `atomic` is set; Linux `handle_hca_cap_atomic` sets
    /// `atomic_req_8B_endianness_mode` to host endianness (1) with
    /// SET_HCA_CAP when `supported_atomic_req_8B_endianness_mode_1` says it can.
    atomic_caps (256) {
        /// 0 = big endian, 1 = host endianness (`MLX5_ATOMIC_REQ_MODE_*`).
        atomic_req_8b_endianness_mode: u8 @ 64 : 2,
        supported_atomic_req_8b_endianness_mode_1: bool @ 70 : 1,
        /// Bit mask of `MLX5_ATOMIC_OPS_*` ([`crate::consts::atomic`]).
        atomic_operations: u16 @ 144 : 16,
        /// Bit mask of operand sizes on RC/UC QPs (bit n = 2^n bytes).
        atomic_size_qp: u16 @ 176 : 16,
        /// Bit mask of operand sizes on DC targets.
        atomic_size_dc: u16 @ 208 : 16,
    }
    /// RoCE capability page (`struct mlx5_ifc_roce_cap_bits`): `QUERY_HCA_CAP`
    /// op_mod `(4 << 1) | mode`, in the `capability` field.
    roce_cap (256) {
        roce_apm: bool @ 0 : 1,
        sw_r_roce_src_udp_port: bool @ 4 : 1,
        fl_rc_qp_when_roce_disabled: bool @ 5 : 1,
        fl_rc_qp_when_roce_enabled: bool @ 6 : 1,
        roce_cc_general: bool @ 7 : 1,
        qp_ooo_transmit_default: bool @ 8 : 1,
        qp_ts_format: u8 @ 30 : 2,
        l3_type: u8 @ 140 : 4,
        /// Bit mask: bit 0 RoCE v1, bit 2 RoCE v2 (`MLX5_ROCE_VERSION_*_CAP`).
        roce_version: u8 @ 152 : 8,
        r_roce_dest_udp_port: u16 @ 176 : 16,
        r_roce_max_src_udp_port: u16 @ 192 : 16,
        r_roce_min_src_udp_port: u16 @ 208 : 16,
        roce_address_table_size: u16 @ 240 : 16,
    }
    /// One GID table entry (`struct mlx5_ifc_roce_addr_layout_bits`).
    roce_addr_layout (32) {
        /// The GID, 16 bytes.
        source_l3_address: bytes @ 0 : 128,
        vlan_valid: bool @ 131 : 1,
        vlan_id: u16 @ 132 : 12,
        source_mac_47_32: u16 @ 144 : 16,
        source_mac_31_0: u32 @ 160 : 32,
        /// `MLX5_ROCE_L3_TYPE_*`: 0 IPv4, 1 IPv6.
        roce_l3_type: u8 @ 212 : 4,
        /// `MLX5_ROCE_VERSION_*`: 0 v1, 2 v2.
        roce_version: u8 @ 216 : 8,
    }
    /// Input of the `SET_ROCE_ADDRESS` command.
    set_roce_address_in (48) {
        opcode: u16 @ 0 : 16,
        op_mod: u16 @ 48 : 16,
        roce_address_index: u16 @ 64 : 16,
        vhca_port_num: u8 @ 92 : 4,
        roce_address: {roce_addr_layout} @ 128 : 256,
    }
    /// Output of the `SET_ROCE_ADDRESS` command.
    set_roce_address_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
    }
    /// Input of the `QUERY_ROCE_ADDRESS` command.
    query_roce_address_in (16) {
        opcode: u16 @ 0 : 16,
        op_mod: u16 @ 48 : 16,
        roce_address_index: u16 @ 64 : 16,
        vhca_port_num: u8 @ 92 : 4,
    }
    /// Output of the `QUERY_ROCE_ADDRESS` command.
    query_roce_address_out (48) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
        roce_address: {roce_addr_layout} @ 128 : 256,
    }
    /// NIC vport context (`struct mlx5_ifc_nic_vport_context_bits`, 256 bytes):
    /// RoCE enable, local-loopback controls, MTU, the port MAC.
    nic_vport_context (256) {
        min_wqe_inline_mode: u8 @ 5 : 3,
        disable_mc_local_lb: bool @ 29 : 1,
        disable_uc_local_lb: bool @ 30 : 1,
        /// RoCE enabled on this vport (Linux `mlx5_nic_vport_enable_roce`).
        roce_en: bool @ 31 : 1,
        arm_change_event: bool @ 32 : 1,
        event_on_mtu: bool @ 59 : 1,
        event_on_promisc_change: bool @ 60 : 1,
        event_on_vlan_change: bool @ 61 : 1,
        event_on_mc_address_change: bool @ 62 : 1,
        event_on_uc_address_change: bool @ 63 : 1,
        vhca_id_type: bool @ 64 : 1,
        affiliation_criteria: u8 @ 76 : 4,
        affiliated_vhca_id: u16 @ 80 : 16,
        sd_group: u8 @ 257 : 3,
        mtu: u16 @ 304 : 16,
        system_image_guid: u64 @ 320 : 64,
        port_guid: u64 @ 384 : 64,
        node_guid: u64 @ 448 : 64,
        qkey_violation_counter: u16 @ 832 : 16,
        promisc_uc: bool @ 1920 : 1,
        promisc_mc: bool @ 1921 : 1,
        promisc_all: bool @ 1922 : 1,
        allowed_list_type: u8 @ 1925 : 3,
        allowed_list_size: u16 @ 1940 : 12,
        /// The port MAC (Linux `mlx5_query_nic_vport_mac_address`).
        permanent_address: {mac_address_layout} @ 1952 : 64,
        current_uc_mac_address: [u64] @ 2048 : 64,
    }
    /// A MAC address in 8 bytes, the first two reserved
    /// (`struct mlx5_ifc_mac_address_layout_bits`).
    mac_address_layout (8) {
        mac_addr_47_32: u16 @ 16 : 16,
        mac_addr_31_0: u32 @ 32 : 32,
    }
    /// Which `nic_vport_context` fields `MODIFY_NIC_VPORT_CONTEXT` changes
    /// (`struct mlx5_ifc_modify_nic_vport_field_select_bits`).
    modify_nic_vport_field_select (4) {
        affiliation: bool @ 18 : 1,
        disable_uc_local_lb: bool @ 20 : 1,
        disable_mc_local_lb: bool @ 21 : 1,
        node_guid: bool @ 22 : 1,
        port_guid: bool @ 23 : 1,
        min_inline: bool @ 24 : 1,
        mtu: bool @ 25 : 1,
        change_event: bool @ 26 : 1,
        promisc: bool @ 27 : 1,
        permanent_address: bool @ 28 : 1,
        addresses_list: bool @ 29 : 1,
        roce_en: bool @ 30 : 1,
    }
    /// Input of the `QUERY_NIC_VPORT_CONTEXT` command.
    query_nic_vport_context_in (16) {
        opcode: u16 @ 0 : 16,
        op_mod: u16 @ 48 : 16,
        other_vport: bool @ 64 : 1,
        vport_number: u16 @ 80 : 16,
        allowed_list_type: u8 @ 101 : 3,
    }
    /// Output of the `QUERY_NIC_VPORT_CONTEXT` command.
    query_nic_vport_context_out (272) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
        nic_vport_context: {nic_vport_context} @ 128 : 2048,
    }
    /// Input of the `MODIFY_NIC_VPORT_CONTEXT` command.
    modify_nic_vport_context_in (512) {
        opcode: u16 @ 0 : 16,
        op_mod: u16 @ 48 : 16,
        other_vport: bool @ 64 : 1,
        vport_number: u16 @ 80 : 16,
        field_select: {modify_nic_vport_field_select} @ 96 : 32,
        nic_vport_context: {nic_vport_context} @ 2048 : 2048,
    }
    /// Output of the `MODIFY_NIC_VPORT_CONTEXT` command.
    modify_nic_vport_context_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
    }
    /// HCA vport context (`struct mlx5_ifc_hca_vport_context_bits`, 512 bytes):
    /// the IB port view (state, LID, GUIDs).
    hca_vport_context (512) {
        field_select: u32 @ 0 : 32,
        sm_virt_aware: bool @ 256 : 1,
        has_smi: bool @ 257 : 1,
        has_raw: bool @ 258 : 1,
        grh_required: bool @ 259 : 1,
        num_port_plane: u8 @ 264 : 8,
        port_physical_state: u8 @ 272 : 4,
        vport_state_policy: u8 @ 276 : 4,
        port_state: u8 @ 280 : 4,
        /// IB port state: 1 Down, 2 Init, 3 Armed, 4 Active.
        vport_state: u8 @ 284 : 4,
        system_image_guid: u64 @ 320 : 64,
        port_guid: u64 @ 384 : 64,
        node_guid: u64 @ 448 : 64,
        cap_mask1: u32 @ 512 : 32,
        cap_mask1_field_select: u32 @ 544 : 32,
        cap_mask2: u32 @ 576 : 32,
        cap_mask2_field_select: u32 @ 608 : 32,
        lid: u16 @ 768 : 16,
        init_type_reply: u8 @ 788 : 4,
        lmc: u8 @ 792 : 3,
        subnet_timeout: u8 @ 795 : 5,
        sm_lid: u16 @ 800 : 16,
        sm_sl: u8 @ 816 : 4,
        qkey_violation_counter: u16 @ 832 : 16,
        pkey_violation_counter: u16 @ 848 : 16,
    }
    /// Input of the `QUERY_HCA_VPORT_CONTEXT` command.
    query_hca_vport_context_in (16) {
        opcode: u16 @ 0 : 16,
        op_mod: u16 @ 48 : 16,
        other_vport: bool @ 64 : 1,
        port_num: u8 @ 76 : 4,
        vport_number: u16 @ 80 : 16,
    }
    /// Output of the `QUERY_HCA_VPORT_CONTEXT` command.
    query_hca_vport_context_out (528) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
        hca_vport_context: {hca_vport_context} @ 128 : 4096,
    }
    /// Input of the `QUERY_HCA_VPORT_PKEY` command: one entry, or the whole
    /// table when `pkey_index` is 0xffff (Linux `mlx5_query_hca_vport_pkey`).
    query_hca_vport_pkey_in (16) {
        opcode: u16 @ 0 : 16,
        op_mod: u16 @ 48 : 16,
        other_vport: bool @ 64 : 1,
        port_num: u8 @ 76 : 4,
        vport_number: u16 @ 80 : 16,
        pkey_index: u16 @ 112 : 16,
    }
    /// Output of the `QUERY_HCA_VPORT_PKEY` command: the header, then one
    /// 32-bit `pkey` entry per key asked for (the key in its low 16 bits,
    /// `struct mlx5_ifc_pkey_bits`).
    query_hca_vport_pkey_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
        pkey: [u32] @ 128 : 32,
    }
    /// Port Type and Speed register (PTYS, id 0x5004): what the port can
    /// run and runs, per protocol (`proto_mask`: 1 InfiniBand, 4 Ethernet).
    /// Linux `mlx5_query_port_ptys`.
    ptys_reg (64) {
        an_disable_admin: bool @ 1 : 1,
        an_disable_cap: bool @ 2 : 1,
        local_port: u8 @ 8 : 8,
        plane_ind: u8 @ 24 : 4,
        proto_mask: u8 @ 29 : 3,
        an_status: u8 @ 32 : 4,
        data_rate_oper: u16 @ 48 : 16,
        ext_eth_proto_capability: u32 @ 64 : 32,
        eth_proto_capability: u32 @ 96 : 32,
        ib_link_width_capability: u16 @ 128 : 16,
        ib_proto_capability: u16 @ 144 : 16,
        ext_eth_proto_admin: u32 @ 160 : 32,
        eth_proto_admin: u32 @ 192 : 32,
        ib_link_width_admin: u16 @ 224 : 16,
        ib_proto_admin: u16 @ 240 : 16,
        ext_eth_proto_oper: u32 @ 256 : 32,
        eth_proto_oper: u32 @ 288 : 32,
        ib_link_width_oper: u16 @ 320 : 16,
        ib_proto_oper: u16 @ 336 : 16,
        connector_type: u8 @ 380 : 4,
        eth_proto_lp_advertise: u32 @ 384 : 32,
    }
    /// Port MTU register (PMTU, id 0x5003), in bytes: the largest MTU the
    /// port supports, the one administered and the one in use (Linux
    /// `mlx5_query_port_max_mtu` / `mlx5_query_port_oper_mtu`).
    pmtu_reg (16) {
        local_port: u8 @ 8 : 8,
        max_mtu: u16 @ 32 : 16,
        admin_mtu: u16 @ 64 : 16,
        oper_mtu: u16 @ 96 : 16,
    }
    /// Input of the `QUERY_VPORT_STATE` command (op_mod 0: own vNIC vport).
    query_vport_state_in (16) {
        opcode: u16 @ 0 : 16,
        op_mod: u16 @ 48 : 16,
        other_vport: bool @ 64 : 1,
        vport_number: u16 @ 80 : 16,
    }
    /// Output of the `QUERY_VPORT_STATE` command.
    query_vport_state_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
        admin_state: u8 @ 120 : 4,
        state: u8 @ 124 : 4,
    }
}
