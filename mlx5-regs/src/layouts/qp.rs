//! Queue pairs: the QP context and address path, the QP commands
//! (`CREATE_QP`, the state transitions, `QUERY_QP`, `DESTROY_QP`), XRC domains,
//! and the send-WQE segments and QP doorbell record.
//!
//! Names, bit offsets and widths follow `mlx5_ifc.h` (checked field by field
//! against `tests/data/mlx5-qp-layouts.csv` by `tests/csv_layouts.rs`); sizes
//! are the full `mlx5_ifc` sizes. The tables were drafted from that CSV by a
//! script and reviewed by hand. The WQE segments and the doorbell record are C
//! structs of `include/linux/mlx5/qp.h` (not bit layouts in `mlx5_ifc.h`);
//! they are at the end with their byte offsets.
#![allow(missing_docs)] // every field carries a generated doc line

use crate::layouts;
// Embedded by `qpc_extension` (the error syndrome word of a QP in error).
use crate::layouts::cqe_error_syndrome;

layouts! {
    /// Address path (`struct mlx5_ifc_ads_bits`, 44 bytes): port, peer LID or
    /// GID/MAC, force-loopback bit. `qpc.primary_address_path` sits at byte
    /// 0x30 of the QP commands.
    ads (44) {
        /// Force loopback (RC only; allowed per the `fl_rc_qp_when_roce_*` caps).
        fl: bool @ 0 : 1,
        free_ar: bool @ 1 : 1,
        pkey_index: u16 @ 16 : 16,
        plane_index: u8 @ 32 : 8,
        grh: bool @ 40 : 1,
        mlid: u8 @ 41 : 7,
        rlid: u16 @ 48 : 16,
        ack_timeout: u8 @ 64 : 5,
        src_addr_index: u8 @ 72 : 8,
        stat_rate: u8 @ 84 : 4,
        hop_limit: u8 @ 88 : 8,
        tclass: u8 @ 100 : 8,
        flow_label: u32 @ 108 : 20,
        /// Destination GID (RoCE) or IP address, 16 bytes.
        rgid_rip: bytes @ 128 : 128,
        f_dscp: bool @ 260 : 1,
        f_ecn: bool @ 261 : 1,
        f_eth_prio: bool @ 263 : 1,
        ecn: u8 @ 264 : 2,
        dscp: u8 @ 266 : 6,
        udp_sport: u16 @ 272 : 16,
        dei_cfi: bool @ 288 : 1,
        eth_prio: u8 @ 289 : 3,
        sl: u8 @ 292 : 4,
        /// Port number, 1-based.
        vhca_port_num: u8 @ 296 : 8,
        rmac_47_32: u16 @ 304 : 16,
        rmac_31_0: u32 @ 320 : 32,
    }
    /// Queue pair context (`struct mlx5_ifc_qpc_bits`, 232 bytes), at byte 0x18
    /// of `CREATE_QP`, the modify-QP commands and `QUERY_QP`'s output.
    qpc (232) {
        /// `MLX5_QPC_STATE_*`: 0 RST, 1 INIT, 2 RTR, 3 RTS, 4 SQER, 6 ERR, 7 SQD.
        state: u8 @ 0 : 4,
        lag_tx_port_affinity: u8 @ 4 : 4,
        /// Service type, `MLX5_QPC_ST_*` (0 = RC).
        st: u8 @ 8 : 8,
        isolate_vl_tc: bool @ 18 : 1,
        /// Path-migration state; Linux creates kernel QPs migrated (3).
        pm_state: u8 @ 19 : 2,
        req_e2e_credit_mode: u8 @ 22 : 2,
        offload_type: u8 @ 24 : 4,
        end_padding_mode: u8 @ 28 : 2,
        wq_signature: bool @ 32 : 1,
        block_lb_mc: bool @ 33 : 1,
        atomic_like_write_en: bool @ 34 : 1,
        latency_sensitive: bool @ 35 : 1,
        drain_sigerr: bool @ 37 : 1,
        dp_ordering_force: bool @ 39 : 1,
        pd: u32 @ 40 : 24,
        /// Path MTU code `MLX5_QPC_MTU_*` (1 = 256 B ... 5 = 4096 B), set at INIT2RTR.
        mtu: u8 @ 64 : 3,
        log_msg_max: u8 @ 67 : 5,
        log_rq_size: u8 @ 73 : 4,
        log_rq_stride: u8 @ 77 : 3,
        /// The QP has no send ring.
        no_sq: bool @ 80 : 1,
        /// log2 of the send ring size in 64-byte basic blocks.
        log_sq_size: u8 @ 81 : 4,
        retry_mode: u8 @ 86 : 2,
        /// `MLX5_TIMESTAMP_FORMAT_*`: 0 free-running, 1 default, 2 real-time.
        ts_format: u8 @ 88 : 2,
        /// Reserved-lkey enable (Linux sets it on every kernel QP).
        rlky: bool @ 91 : 1,
        ulp_stateless_offload_mode: u8 @ 92 : 4,
        counter_set_id: u8 @ 96 : 8,
        /// UAR page whose BlueFlame registers ring this QP's send doorbell.
        uar_page: u32 @ 104 : 24,
        /// 0xffffff asks for version-0 CQEs when cap `cqe_version` = 1
        /// (Linux `MLX5_IB_DEFAULT_UIDX`, `drivers/infiniband/hw/mlx5/qp.c`).
        user_index: u32 @ 136 : 24,
        /// log2(buffer page size) - 12.
        log_page_size: u8 @ 163 : 5,
        remote_qpn: u32 @ 168 : 24,
        primary_address_path: {ads} @ 192 : 352,
        secondary_address_path: {ads} @ 544 : 352,
        log_ack_req_freq: u8 @ 896 : 4,
        log_sra_max: u8 @ 904 : 3,
        retry_count: u8 @ 909 : 3,
        rnr_retry: u8 @ 912 : 3,
        fre: bool @ 916 : 1,
        cur_rnr_retry: u8 @ 917 : 3,
        cur_retry_count: u8 @ 920 : 3,
        next_send_psn: u32 @ 968 : 24,
        log_num_dci_stream_channels: u8 @ 995 : 5,
        cqn_snd: u32 @ 1000 : 24,
        log_num_dci_errored_streams: u8 @ 1027 : 5,
        deth_sqpn: u32 @ 1032 : 24,
        last_acked_psn: u32 @ 1096 : 24,
        ssn: u32 @ 1128 : 24,
        log_rra_max: u8 @ 1160 : 3,
        atomic_mode: u8 @ 1164 : 4,
        rre: bool @ 1168 : 1,
        rwe: bool @ 1169 : 1,
        rae: bool @ 1170 : 1,
        page_offset: u8 @ 1172 : 6,
        dp_ordering_1: bool @ 1180 : 1,
        cd_slave_receive: bool @ 1181 : 1,
        cd_slave_send: bool @ 1182 : 1,
        cd_master: bool @ 1183 : 1,
        min_rnr_nak: u8 @ 1187 : 5,
        next_rcv_psn: u32 @ 1192 : 24,
        xrcd: u32 @ 1224 : 24,
        cqn_rcv: u32 @ 1256 : 24,
        /// DMA address of the 8-byte doorbell record (`qp_doorbell_record`).
        dbr_addr: u64 @ 1280 : 64,
        q_key: u32 @ 1344 : 32,
        /// `MLX5_*_RQ` of `include/linux/mlx5/qp.h`: 0 regular, 1 SRQ/RMP, 3 zero-length.
        rq_type: u8 @ 1381 : 3,
        /// SRQ number (ISSI 0) or RMP number (ISSI 1) when `rq_type` = 1.
        srqn_rmpn_xrqn: u32 @ 1384 : 24,
        rmsn: u32 @ 1416 : 24,
        hw_sq_wqebb_counter: u16 @ 1440 : 16,
        sw_sq_wqebb_counter: u16 @ 1456 : 16,
        hw_rq_counter: u32 @ 1472 : 32,
        sw_rq_counter: u32 @ 1504 : 32,
        cgs: bool @ 1583 : 1,
        cs_req: u8 @ 1584 : 8,
        cs_res: u8 @ 1592 : 8,
        dc_access_key: u64 @ 1600 : 64,
        dbr_umem_valid: bool @ 1667 : 1,
        /// UMEM holding the doorbell record when `dbr_umem_valid` (DevX,
        /// rdma-core `providers/mlx5/mlx5_ifc.h`); `dbr_addr` is then an
        /// offset into it.
        dbr_umem_id: u32 @ 1824 : 32,
    }
    /// Input of the `CREATE_QP` command; the page list `pas[]` starts at 0x110
    /// (Linux `mlx5_qpc_create_qp`, `drivers/infiniband/hw/mlx5/qpc.c`).
    create_qp_in (272) {
        opcode: u16 @ 0 : 16,
        uid: u16 @ 16 : 16,
        op_mod: u16 @ 48 : 16,
        qpc_ext: bool @ 64 : 1,
        /// 0: the firmware picks the QP number.
        input_qpn: u32 @ 72 : 24,
        opt_param_mask: u32 @ 128 : 32,
        ece: u32 @ 160 : 32,
        qpc: {qpc} @ 192 : 1856,
        wq_umem_offset: u64 @ 2048 : 64,
        wq_umem_id: u32 @ 2112 : 32,
        wq_umem_valid: bool @ 2144 : 1,
        /// One big-endian page address per page of the QP buffer.
        pas: [u64] @ 2176 : 64,
    }
    /// Output of the `CREATE_QP` command.
    create_qp_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
        qpn: u32 @ 72 : 24,
        ece: u32 @ 96 : 32,
    }
    /// Input of the `DESTROY_QP` command.
    destroy_qp_in (16) {
        opcode: u16 @ 0 : 16,
        uid: u16 @ 16 : 16,
        op_mod: u16 @ 48 : 16,
        qpn: u32 @ 72 : 24,
    }
    /// Output of the `DESTROY_QP` command.
    destroy_qp_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
    }
    /// Input of the `RST2INIT_QP` command.
    rst2init_qp_in (272) {
        opcode: u16 @ 0 : 16,
        uid: u16 @ 16 : 16,
        op_mod: u16 @ 48 : 16,
        qpn: u32 @ 72 : 24,
        opt_param_mask: u32 @ 128 : 32,
        ece: u32 @ 160 : 32,
        qpc: {qpc} @ 192 : 1856,
    }
    /// Output of the `RST2INIT_QP` command.
    rst2init_qp_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
        ece: u32 @ 96 : 32,
    }
    /// Input of the `INIT2INIT_QP` command.
    init2init_qp_in (272) {
        opcode: u16 @ 0 : 16,
        uid: u16 @ 16 : 16,
        op_mod: u16 @ 48 : 16,
        qpn: u32 @ 72 : 24,
        opt_param_mask: u32 @ 128 : 32,
        ece: u32 @ 160 : 32,
        qpc: {qpc} @ 192 : 1856,
    }
    /// Output of the `INIT2INIT_QP` command.
    init2init_qp_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
        ece: u32 @ 96 : 32,
    }
    /// Input of the `INIT2RTR_QP` command.
    init2rtr_qp_in (272) {
        opcode: u16 @ 0 : 16,
        uid: u16 @ 16 : 16,
        op_mod: u16 @ 48 : 16,
        qpn: u32 @ 72 : 24,
        opt_param_mask: u32 @ 128 : 32,
        ece: u32 @ 160 : 32,
        qpc: {qpc} @ 192 : 1856,
    }
    /// Output of the `INIT2RTR_QP` command.
    init2rtr_qp_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
        ece: u32 @ 96 : 32,
    }
    /// Input of the `RTR2RTS_QP` command.
    rtr2rts_qp_in (272) {
        opcode: u16 @ 0 : 16,
        uid: u16 @ 16 : 16,
        op_mod: u16 @ 48 : 16,
        qpn: u32 @ 72 : 24,
        opt_param_mask: u32 @ 128 : 32,
        ece: u32 @ 160 : 32,
        qpc: {qpc} @ 192 : 1856,
    }
    /// Output of the `RTR2RTS_QP` command.
    rtr2rts_qp_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
        ece: u32 @ 96 : 32,
    }
    /// Input of the `RTS2RTS_QP` command.
    rts2rts_qp_in (272) {
        opcode: u16 @ 0 : 16,
        uid: u16 @ 16 : 16,
        op_mod: u16 @ 48 : 16,
        qpn: u32 @ 72 : 24,
        opt_param_mask: u32 @ 128 : 32,
        ece: u32 @ 160 : 32,
        qpc: {qpc} @ 192 : 1856,
    }
    /// Output of the `RTS2RTS_QP` command.
    rts2rts_qp_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
        ece: u32 @ 96 : 32,
    }
    /// Input of the `SQERR2RTS_QP` command.
    sqerr2rts_qp_in (272) {
        opcode: u16 @ 0 : 16,
        uid: u16 @ 16 : 16,
        op_mod: u16 @ 48 : 16,
        qpn: u32 @ 72 : 24,
        opt_param_mask: u32 @ 128 : 32,
        qpc: {qpc} @ 192 : 1856,
    }
    /// Output of the `SQERR2RTS_QP` command.
    sqerr2rts_qp_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
    }
    /// Input of the `2ERR_QP` command.
    qp_2err_in (16) {
        opcode: u16 @ 0 : 16,
        uid: u16 @ 16 : 16,
        op_mod: u16 @ 48 : 16,
        qpn: u32 @ 72 : 24,
    }
    /// Output of the `2ERR_QP` command.
    qp_2err_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
    }
    /// Input of the `2RST_QP` command.
    qp_2rst_in (16) {
        opcode: u16 @ 0 : 16,
        uid: u16 @ 16 : 16,
        op_mod: u16 @ 48 : 16,
        qpn: u32 @ 72 : 24,
    }
    /// Output of the `2RST_QP` command.
    qp_2rst_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
    }
    /// Input of the `QUERY_QP` command.
    query_qp_in (16) {
        opcode: u16 @ 0 : 16,
        op_mod: u16 @ 48 : 16,
        qpc_ext: bool @ 64 : 1,
        qpn: u32 @ 72 : 24,
    }
    /// Output of the `QUERY_QP` command (464 bytes in current `mlx5_ifc.h`;
    /// older headers end it with `pas[]` at 0x110, which is where
    /// `qp_pas_list` puts it).
    query_qp_out (464) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
        opt_param_mask: u32 @ 128 : 32,
        ece: u32 @ 160 : 32,
        qpc: {qpc} @ 192 : 1856,
        /// `query_qp_in.qpc_ext` = 0: `qp_pas_list` (the page list starts right
        /// here, at byte 0x110); 1: `qpc_ext_and_pas_list`.
        qp_pas_or_qpc_ext_and_pas: (qp_pas_list | qpc_ext_and_pas_list) @ 2176 : 1536,
    }
    /// `query_qp_out` page list when `qpc_ext` = 0
    /// (`struct mlx5_ifc_qp_pas_list_in_bits`: only a page list).
    qp_pas_list (0) {
        pas: [u64] @ 0 : 64,
    }
    /// `query_qp_out` with `qpc_ext` = 1: the QPC extension, then the page list
    /// (`struct mlx5_ifc_qpc_extension_and_pas_list_in_bits`).
    qpc_ext_and_pas_list (192) {
        qpc_data_extension: {qpc_extension} @ 0 : 1536,
        pas: [u64] @ 1536 : 64,
    }
    /// QPC extension (`struct mlx5_ifc_qpc_extension_bits`): the error
    /// syndrome of a QP in error (cap `qp_error_syndrome`).
    qpc_extension (192) {
        error_syndrome: {cqe_error_syndrome} @ 96 : 32,
    }
    /// Input of the `ALLOC_XRCD` command.
    alloc_xrcd_in (16) {
        opcode: u16 @ 0 : 16,
        uid: u16 @ 16 : 16,
        op_mod: u16 @ 48 : 16,
    }
    /// Output of the `ALLOC_XRCD` command.
    alloc_xrcd_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
        xrcd: u32 @ 72 : 24,
    }
    /// Input of the `DEALLOC_XRCD` command.
    dealloc_xrcd_in (16) {
        opcode: u16 @ 0 : 16,
        uid: u16 @ 16 : 16,
        op_mod: u16 @ 48 : 16,
        xrcd: u32 @ 72 : 24,
    }
    /// Output of the `DEALLOC_XRCD` command.
    dealloc_xrcd_out (16) {
        status: u8 @ 0 : 8,
        syndrome: u32 @ 32 : 32,
    }

    /// Control segment: the first 16 bytes of every send WQE
    /// (`struct mlx5_wqe_ctrl_seg`, `include/linux/mlx5/qp.h`). Dword 0 is
    /// `opmod_idx_opcode`, dword 1 `qpn_ds` ([`crate::consts::wqe`] composes
    /// both); these 8 bytes are also the value of the send doorbell.
    wqe_ctrl_seg (16) {
        opmod: u8 @ 0 : 8,
        /// The producer counter (in 64-byte basic blocks) at this WQE.
        wqe_index: u16 @ 8 : 16,
        /// Send opcode (`MLX5_OPCODE_*`, [`crate::consts::wqe`]).
        opcode: u8 @ 24 : 8,
        qpn: u32 @ 32 : 24,
        /// WQE size in 16-byte units (`MLX5_WQE_CTRL_DS_MASK` = 0x3f).
        ds: u8 @ 58 : 6,
        signature: u8 @ 64 : 8,
        /// Fence mode (bits 7:5), completion request (3:2), solicited (1).
        fm_ce_se: u8 @ 88 : 8,
        /// Immediate data, or the rkey to invalidate (`SEND_INVAL`).
        imm: u32 @ 96 : 32,
    }

    /// Remote-address segment of RDMA operations, after the control segment
    /// (`struct mlx5_wqe_raddr_seg`, `include/linux/mlx5/qp.h`).
    wqe_raddr_seg (16) {
        raddr: u64 @ 0 : 64,
        rkey: u32 @ 64 : 32,
    }

    /// Datagram segment (the UD address vector), after the control segment
    /// of a UD send WQE (`struct mlx5_av`, `include/linux/mlx5/qp.h`; Linux
    /// `set_datagram_seg`, rdma-core `set_datagram_seg`): 48 bytes.
    wqe_datagram_seg (48) {
        /// The destination's Q_Key.
        qkey: u32 @ 0 : 32,
        /// Bit 31: extended address vector (`MLX5_EXTENDED_UD_AV`).
        ext: bool @ 64 : 1,
        /// The destination QP number.
        dqpn: u32 @ 72 : 24,
        /// Static rate (bits 7:4) and IB SL (3:0), or the RoCE priority << 1.
        stat_rate_sl: u8 @ 96 : 8,
        /// Force-loopback (bit 7) and source path bits (6:0).
        fl_mlid: u8 @ 104 : 8,
        /// IB destination LID, or the RoCE v2 UDP source port.
        rlid_udp_sport: u16 @ 112 : 16,
        /// The destination MAC (RoCE), bytes 0..4.
        rmac_47_16: u32 @ 160 : 32,
        /// The destination MAC, bytes 4..6.
        rmac_15_0: u16 @ 192 : 16,
        /// Traffic class.
        tclass: u8 @ 208 : 8,
        /// Hop limit.
        hop_limit: u8 @ 216 : 8,
        /// GRH present (bit 30 of `grh_gid_fl`).
        grh: bool @ 225 : 1,
        /// Source GID table index (bits 27:20).
        sgid_index: u8 @ 228 : 8,
        /// Flow label (bits 19:0).
        flow_label: u32 @ 236 : 20,
        /// The destination GID.
        rgid: bytes @ 256 : 128,
    }

    /// Atomic segment of CMP_SWAP / FETCH_ADD, after the remote-address
    /// segment (`struct mlx5_wqe_atomic_seg`, `include/linux/mlx5/qp.h`;
    /// Linux `set_atomic_seg`): the swap or add operand, then the compare
    /// operand (0 for FETCH_ADD), both big-endian.
    wqe_atomic_seg (16) {
        swap_add: u64 @ 0 : 64,
        compare: u64 @ 64 : 64,
    }

    /// Inline-data segment header (`struct mlx5_wqe_inline_seg`): the byte
    /// count with `MLX5_INLINE_SEG` (bit 31) set, then the data, the segment
    /// padded to a multiple of 16 bytes (Linux `set_data_inl_seg`,
    /// `drivers/infiniband/hw/mlx5/wr.c`).
    wqe_inline_seg (4) {
        byte_count: u32 @ 0 : 32,
    }

    /// QP doorbell record (8 bytes at `qpc.dbr_addr`): dword 0 receive counter
    /// (`MLX5_RCV_DBR`), dword 1 send counter (`MLX5_SND_DBR`,
    /// `include/linux/mlx5/qp.h`), each the 16-bit producer counter stored as a
    /// big-endian dword (Linux `mlx5r_ring_db`, rdma-core `post_send_db`).
    qp_doorbell_record (8) {
        rcv_counter: u16 @ 16 : 16,
        snd_counter: u16 @ 48 : 16,
    }
}
