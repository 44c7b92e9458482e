//! The model's syndrome table: every check that refuses a command has its own
//! non-zero 32-bit syndrome, returned in `cmd_out.syndrome` together with the
//! firmware status (docs/firmware.md §2.6). Real firmware syndromes are opaque
//! diagnostics; these values are the model's own and are listed in
//! `docs/fidelity.md`.
//!
//! Checks made the same way for every opcode (length, state, op_mod, reserved
//! bits) carry the opcode in the low 16 bits: `INP_LEN | opcode`. All other
//! values are unique constants.

use mlx5_regs::CmdStatus;

/// One row of the table.
#[derive(Debug, Clone, Copy)]
pub struct SyndromeInfo {
    /// Constant name.
    pub name: &'static str,
    /// Syndrome value.
    pub value: u32,
    /// Status returned with it.
    pub status: CmdStatus,
    /// What was refused.
    pub what: &'static str,
    /// True if the opcode is OR-ed into the low 16 bits.
    pub per_opcode: bool,
}

macro_rules! syndromes {
    ($($(#[$m:meta])* $name:ident = $val:literal, $status:ident, $per:literal, $desc:literal;)*) => {
        $(
            #[doc = $desc]
            $(#[$m])*
            pub const $name: u32 = $val;
        )*
        /// Every syndrome the model returns.
        pub const TABLE: &[SyndromeInfo] = &[$(SyndromeInfo {
            name: stringify!($name),
            value: $val,
            status: CmdStatus::$status,
            what: $desc,
            per_opcode: $per,
        }),*];
    };
}

syndromes! {
    // ---- generic, per opcode (low 16 bits = opcode) ----
    INP_LEN = 0x0101_0000, BAD_INP_LEN_ERR, true, "input_length shorter than the command's input layout (plus its page list)";
    OUTP_LEN = 0x0102_0000, BAD_OUTP_LEN_ERR, true, "output_length shorter than the command's output layout (plus returned entries)";
    STATE_DISABLED = 0x0103_0000, BAD_SYS_STATE_ERR, true, "command not legal before ENABLE_HCA";
    STATE_ENABLED = 0x0104_0000, BAD_SYS_STATE_ERR, true, "command not legal between ENABLE_HCA and INIT_HCA";
    STATE_INITIALIZED = 0x0105_0000, BAD_SYS_STATE_ERR, true, "command not legal after INIT_HCA";
    STATE_TORN_DOWN = 0x0106_0000, BAD_SYS_STATE_ERR, true, "command not legal after TEARDOWN_HCA";
    BAD_OP_MOD = 0x0107_0000, BAD_PARAM_ERR, true, "op_mod value not defined for the command";
    RESERVED = 0x0108_0000, BAD_PARAM_ERR, true, "a reserved bit of the input is not zero";
    UID = 0x0109_0000, BAD_PARAM_ERR, true, "uid not 0 (no user contexts modelled)";
    ISSI_0_ONLY = 0x010a_0000, BAD_OP_ERR, true, "command exists only at ISSI 0 (SRQ family) but ISSI 1 is set";
    ISSI_1_ONLY = 0x010b_0000, BAD_OP_ERR, true, "command exists only at ISSI 1 (RMP family) but ISSI is 0";
    UNKNOWN_OPCODE = 0x010c_0000, BAD_OP_ERR, true, "opcode not implemented by this firmware";
    // ---- bring-up ----
    SET_ISSI_UNSUPPORTED = 0x0200_0001, BAD_PARAM_ERR, false, "SET_ISSI to a value not in supported_issi";
    ENABLE_FUNC_ID = 0x0200_0002, BAD_PARAM_ERR, false, "ENABLE/DISABLE_HCA/QUERY/MANAGE_PAGES function_id not 0, or embedded_cpu_function not the function's own (1 on an embedded-CPU function, else 0)";
    DISABLE_PAGES_HELD = 0x0200_0003, BAD_RES_STATE_ERR, false, "DISABLE_HCA while firmware still holds pages";
    INIT_HCA_NO_PAGES = 0x0200_0004, BAD_SYS_STATE_ERR, false, "INIT_HCA before the boot and init pages were given";
    INIT_HCA_SW_OWNER = 0x0200_0005, BAD_PARAM_ERR, false, "INIT_HCA sw_owner_id/sw_vhca_id set without the sw_owner_id capability";
    TEARDOWN_PROFILE = 0x0200_0006, BAD_PARAM_ERR, false, "TEARDOWN_HCA profile unknown or its capability (force/fast teardown) absent";
    CAP_TYPE = 0x0200_0007, BAD_PARAM_ERR, false, "QUERY/SET_HCA_CAP capability type not supported (only general caps)";
    CAP_OTHER_FUNC = 0x0200_0008, BAD_PARAM_ERR, false, "QUERY/SET_HCA_CAP other_function / function_id not 0";
    SET_CAP_NOT_SETTABLE = 0x0200_0009, BAD_PARAM_ERR, false, "SET_HCA_CAP changes a field that is not settable";
    SET_CAP_ABOVE_MAX = 0x0200_000a, BAD_PARAM_ERR, false, "SET_HCA_CAP sets a settable field above its maximum";
    SET_CAP_UAR_PAGE_SZ = 0x0200_000b, BAD_PARAM_ERR, false, "SET_HCA_CAP log_uar_page_sz not 0 (model has 4 KiB UAR pages)";
    ACCESS_REG_ID = 0x0200_000c, BAD_PARAM_ERR, false, "ACCESS_REG register id not modelled";
    ACCESS_REG_ENDIANNESS = 0x0200_000d, BAD_PARAM_ERR, false, "HOST_ENDIANNESS written with the wrong endianness for this host";
    ACCESS_REG_ARG = 0x0200_000e, BAD_PARAM_ERR, false, "ACCESS_REG argument not 0";
    UAR_EXHAUSTED = 0x0200_000f, LIM_ERR, false, "no UAR index left (2^uar_sz)";
    UAR_NOT_FOUND = 0x0200_0010, BAD_RES_ERR, false, "UAR index not allocated";
    UAR_IN_USE = 0x0200_0011, BAD_RES_STATE_ERR, false, "DEALLOC_UAR while an EQ or CQ uses the UAR";
    PD_EXHAUSTED = 0x0200_0012, LIM_ERR, false, "no PD left (2^log_max_pd)";
    PD_NOT_FOUND = 0x0200_0013, BAD_RES_ERR, false, "PD not allocated";
    PD_IN_USE = 0x0200_0014, BAD_RES_STATE_ERR, false, "DEALLOC_PD while an SRQ/RMP uses the PD";
    // ---- pages ----
    PAGES_NOT_ALIGNED = 0x0300_0001, BAD_PARAM_ERR, false, "MANAGE_PAGES give: page address not 4 KiB aligned";
    PAGES_NOT_MAPPED = 0x0300_0002, BAD_PARAM_ERR, false, "MANAGE_PAGES give: page outside DMA memory (IOMMU fault recorded)";
    PAGES_DUPLICATE = 0x0300_0003, BAD_PARAM_ERR, false, "MANAGE_PAGES give: page already held by firmware or listed twice";
    PAGES_NOT_REQUESTED = 0x0300_0004, BAD_PARAM_ERR, false, "MANAGE_PAGES give: more pages than firmware asked for";
    PAGES_ZERO_ENTRIES = 0x0300_0005, BAD_PARAM_ERR, false, "MANAGE_PAGES give/take with input_num_entries 0";
    PAGES_ALLOC_FAIL_NOT_PENDING = 0x0300_0006, BAD_PARAM_ERR, false, "MANAGE_PAGES op_mod 0 (cannot give) with no page request pending";
    PAGES_ALLOC_FAIL_ENTRIES = 0x0300_0007, BAD_PARAM_ERR, false, "MANAGE_PAGES op_mod 0 with input_num_entries not 0";
    // ---- EQ ----
    EQ_LOG_SIZE = 0x0400_0001, BAD_PARAM_ERR, false, "eqc.log_eq_size above log_max_eq_sz";
    EQ_TOO_MANY = 0x0400_0002, LIM_ERR, false, "more than 2^log_max_eq EQs";
    EQ_UAR = 0x0400_0003, BAD_RES_ERR, false, "eqc.uar_page is not an allocated UAR";
    EQ_INTR = 0x0400_0004, BAD_PARAM_ERR, false, "eqc.intr not below the number of MSI-X vectors";
    EQ_EVENT_MASK = 0x0400_0005, BAD_PARAM_ERR, false, "event_bitmask selects an event type the device does not generate";
    EQ_PAS_SHORT = 0x0400_0006, BAD_INP_LEN_ERR, false, "CREATE_EQ input too short for the page list the size needs";
    EQ_PAS_ALIGN = 0x0400_0007, BAD_PARAM_ERR, false, "EQ page address not aligned to the page size";
    EQ_CTX_FIELD = 0x0400_0008, BAD_PARAM_ERR, false, "eqc field not settable at creation (status, ec, st, counters)";
    EQ_NOT_FOUND = 0x0400_0009, BAD_RES_ERR, false, "EQ number does not exist";
    EQ_IN_USE = 0x0400_000a, BAD_RES_STATE_ERR, false, "DESTROY_EQ while a CQ uses the EQ";
    EQ_PAGE_SIZE = 0x0400_000b, BAD_PARAM_ERR, false, "eqc.log_page_size above the model's limit";
    // ---- CQ ----
    CQ_LOG_SIZE = 0x0500_0001, BAD_PARAM_ERR, false, "cqc.log_cq_size above log_max_cq_sz";
    CQ_TOO_MANY = 0x0500_0002, LIM_ERR, false, "more than 2^log_max_cq CQs";
    CQ_UAR = 0x0500_0003, BAD_RES_ERR, false, "cqc.uar_page is not an allocated UAR";
    CQ_EQN = 0x0500_0004, BAD_RES_ERR, false, "cqc.c_eqn is not an existing EQ";
    CQ_CQE_SZ = 0x0500_0005, BAD_PARAM_ERR, false, "cqc.cqe_sz not 0 (64 B) or 1 (128 B)";
    CQ_DBR_ALIGN = 0x0500_0006, BAD_PARAM_ERR, false, "cqc.dbr_addr not 8-byte aligned";
    CQ_PAS_SHORT = 0x0500_0007, BAD_INP_LEN_ERR, false, "CREATE_CQ/MODIFY_CQ input too short for the page list the size needs";
    CQ_PAS_ALIGN = 0x0500_0008, BAD_PARAM_ERR, false, "CQ page address not aligned to the page size";
    CQ_OI_CAP = 0x0500_0009, BAD_PARAM_ERR, false, "cqc.oi set without the cq_oi capability";
    CQ_MODERATION_CAP = 0x0500_000a, BAD_OP_ERR, false, "CQ moderation requested without the cq_moderation capability";
    CQ_UNSUPPORTED_FEATURE = 0x0500_000b, BAD_PARAM_ERR, false, "cqc asks for an unmodelled feature (compression, collapsed, apu, umem)";
    CQ_CTX_FIELD = 0x0500_000c, BAD_PARAM_ERR, false, "cqc field not settable at creation (status, st, counters, indices)";
    CQ_NOT_FOUND = 0x0500_000d, BAD_RES_ERR, false, "CQ number does not exist";
    CQ_IN_USE = 0x0500_000e, BAD_RES_STATE_ERR, false, "DESTROY_CQ while an SRQ (srqc.cqn) uses the CQ";
    CQ_RESIZE_CAP = 0x0500_000f, BAD_OP_ERR, false, "MODIFY_CQ resize without the cq_resize capability";
    CQ_RESIZE_OUTSTANDING = 0x0500_0010, BAD_SIZE_OUTS_CQES_ERR, false, "resize to fewer entries than outstanding CQEs";
    CQ_RESIZE_SELECT = 0x0500_0011, BAD_PARAM_ERR, false, "resize_field_select without LOG_CQ_SIZE or with unknown bits";
    CQ_RESIZE_CQE_SZ = 0x0500_0012, BAD_PARAM_ERR, false, "resize changes cqe_sz";
    CQ_MODIFY_SELECT = 0x0500_0013, BAD_PARAM_ERR, false, "modify_field_select empty or with unknown/unsupported bits";
    CQ_RESIZE_OLD_FULL = 0x0500_0014, BAD_SIZE_OUTS_CQES_ERR, false, "resize while the old ring is full (no room for the RESIZE_CQ CQE)";
    CQ_IN_ERROR = 0x0500_0015, BAD_RES_STATE_ERR, false, "MODIFY_CQ resize of a CQ in error (overrun / write failure)";
    CQ_PAGE_SIZE = 0x0500_0016, BAD_PARAM_ERR, false, "cqc.log_page_size above the model's limit";
    CQ_MODERATION_CREATE_CAP = 0x0500_0018, BAD_PARAM_ERR, false, "cqc.cq_period/cq_max_count set without the cq_moderation capability";
    CQ_PERIOD_MODE_CAP = 0x0500_0017, BAD_PARAM_ERR, false, "cq_period_mode 1 without cq_period_start_from_cqe, or a reserved mode (2, 3)";
    CQ_SCQE_BREAK_CAP = 0x0500_0020, BAD_PARAM_ERR, false, "cqc.scqe_break_moderation_en without the scqe_break_moderation capability";
    // ---- SRQ / RMP ----
    SRQ_LOG_SIZE = 0x0600_0001, BAD_PARAM_ERR, false, "SRQ/RMP log size above log_max_srq_sz";
    SRQ_TOO_MANY = 0x0600_0002, LIM_ERR, false, "more than 2^log_max_srq SRQs (2^log_max_rmp RMPs)";
    SRQ_STRIDE = 0x0600_0003, BAD_PARAM_ERR, false, "WQE stride below 32 bytes or above max_wqe_sz_rq";
    SRQ_PD = 0x0600_0004, BAD_RES_ERR, false, "pd is not an allocated PD";
    SRQ_CQN = 0x0600_0005, BAD_RES_ERR, false, "srqc.cqn is not an existing CQ";
    SRQ_DBR_ALIGN = 0x0600_0006, BAD_PARAM_ERR, false, "SRQ/RMP dbr_addr not 4-byte aligned";
    SRQ_PAS_SHORT = 0x0600_0007, BAD_INP_LEN_ERR, false, "CREATE_SRQ/RMP input too short for the page list the size needs";
    SRQ_PAS_ALIGN = 0x0600_0008, BAD_PARAM_ERR, false, "SRQ/RMP page address not aligned to the page size";
    SRQ_LWM = 0x0600_0009, BAD_PARAM_ERR, false, "limit (lwm) not below the number of WQEs";
    SRQ_XRCD = 0x0600_000a, BAD_RES_ERR, false, "srqc.xrcd neither 0 nor an allocated XRC domain";
    SRQ_CTX_FIELD = 0x0600_000b, BAD_PARAM_ERR, false, "SRQ/RMP context field not settable (state, wqe_cnt, counters, wq_type, umem, cyclic)";
    SRQ_SIGNATURE_CAP = 0x0600_000c, BAD_PARAM_ERR, false, "wq_signature without the wq_signature capability";
    SRQ_NOT_FOUND = 0x0600_000d, BAD_RES_ERR, false, "SRQ/RMP number does not exist";
    RMP_STATE = 0x0600_000e, BAD_RES_STATE_ERR, false, "MODIFY_RMP rmp_state does not match the current state";
    RMP_BITMASK = 0x0600_000f, BAD_PARAM_ERR, false, "MODIFY_RMP bitmask empty or with bits other than lwm";
    RMP_NEW_STATE = 0x0600_0010, BAD_PARAM_ERR, false, "MODIFY_RMP ctx.state is not a legal transition (RDY -> RDY only)";
    SRQ_PAGE_SIZE = 0x0600_0011, BAD_PARAM_ERR, false, "SRQ/RMP log page size above the model's limit";
    // ---- objects referenced by a QP or a memory key ----
    CQ_USED_BY_QP = 0x0500_0019, RES_BUSY, false, "DESTROY_CQ while a QP uses the CQ (cqn_snd or cqn_rcv)";
    SRQ_USED_BY_QP = 0x0600_0012, RES_BUSY, false, "DESTROY_SRQ/RMP while a QP receives through it";
    PD_USED_BY_QP = 0x0200_0015, RES_BUSY, false, "DEALLOC_PD while a QP uses the PD";
    PD_USED_BY_MKEY = 0x0200_0016, RES_BUSY, false, "DEALLOC_PD while a memory key belongs to the PD";
    UAR_USED_BY_QP = 0x0200_0017, RES_BUSY, false, "DEALLOC_UAR while a QP rings its doorbells there (qpc.uar_page)";
    ROCE_CAP_NOT_SETTABLE = 0x0200_0018, BAD_PARAM_ERR, false, "SET_HCA_CAP (RoCE page) changes a field other than sw_r_roce_src_udp_port";
    // ---- memory keys, XRC domains ----
    MKEY_FREE = 0x0700_0001, BAD_PARAM_ERR, false, "CREATE_MKEY with mkc.free set";
    MKEY_ACCESS_MODE = 0x0700_0002, BAD_PARAM_ERR, false, "mkc access mode not PA (0) or MTT (1)";
    MKEY_PD = 0x0700_0003, BAD_RES_ERR, false, "mkc.pd is not an allocated PD";
    MKEY_TOO_MANY = 0x0700_0004, LIM_ERR, false, "more than 2^log_max_mkey memory keys";
    MKEY_PA_LENGTH = 0x0700_0005, BAD_PARAM_ERR, false, "PA key without length64 whose window is empty or wraps the address space";
    MKEY_MTT_LENGTH64 = 0x0700_0006, BAD_PARAM_ERR, false, "MTT key with length64 set or an empty / wrapping window";
    MKEY_MTT_PAGE_SIZE = 0x0700_0007, BAD_PARAM_ERR, false, "MTT key log_page_size outside 12..=31 (absolute log2)";
    MKEY_MTT_SIZE = 0x0700_0008, BAD_PARAM_ERR, false, "translations_octword_actual_size below the pages the window needs, or above translations_octword_size";
    MKEY_MTT_SHORT = 0x0700_0009, BAD_INP_LEN_ERR, false, "CREATE_MKEY input too short for the MTT entries it announces";
    MKEY_MTT_ALIGN = 0x0700_000a, BAD_PARAM_ERR, false, "MTT entry not aligned to the page size (beyond the permission bits of pg_access)";
    MKEY_PG_ACCESS_CAP = 0x0700_000b, BAD_PARAM_ERR, false, "pg_access without the pg capability, or with a PA key";
    MKEY_QPN = 0x0700_000c, BAD_PARAM_ERR, false, "mkc.qpn not 0xffffff (QP-bound keys are not modelled)";
    MKEY_UNSUPPORTED = 0x0700_000d, BAD_PARAM_ERR, false, "mkc asks for an unmodelled feature (UMR, BSF, signature, crossing, umem, data direct)";
    MKEY_NOT_FOUND = 0x0700_000e, BAD_RES_ERR, false, "mkey_index names no memory key";
    XRCD_CAP = 0x0700_0010, BAD_OP_ERR, false, "ALLOC_XRCD without the xrc capability";
    XRCD_TOO_MANY = 0x0700_0011, LIM_ERR, false, "more than 2^log_max_xrcd XRC domains";
    XRCD_NOT_FOUND = 0x0700_0012, BAD_RES_ERR, false, "XRC domain not allocated";
    XRCD_IN_USE = 0x0700_0013, RES_BUSY, false, "DEALLOC_XRCD while a QP or an SRQ references the domain";
    // ---- QP creation ----
    QP_ST = 0x0800_0001, BAD_PARAM_ERR, false, "qpc.st not RC (the only service type modelled)";
    QP_PD = 0x0800_0002, BAD_RES_ERR, false, "qpc.pd is not an allocated PD";
    QP_CTX_FIELD = 0x0800_0003, BAD_PARAM_ERR, false, "qpc field not settable at creation (state, counters, PSNs, current retry counts)";
    QP_UNSUPPORTED = 0x0800_0004, BAD_PARAM_ERR, false, "CREATE_QP asks for an unmodelled feature (input_qpn, qpc_ext, ece, umem, offloads, cross-channel, signature, DC, non-zero opt_param_mask)";
    QP_UAR = 0x0800_0005, BAD_RES_ERR, false, "qpc.uar_page is not an allocated UAR";
    QP_CQN_SND = 0x0800_0006, BAD_RES_ERR, false, "qpc.cqn_snd is not an existing CQ (needed with a send queue)";
    QP_CQN_RCV = 0x0800_0007, BAD_RES_ERR, false, "qpc.cqn_rcv is not an existing CQ (needed with an SRQ or an own receive queue)";
    QP_SRQN = 0x0800_0008, BAD_RES_ERR, false, "srqn_rmpn_xrqn names no SRQ (ISSI 0) / RMP (ISSI 1) in the ready state";
    QP_RQ_TYPE = 0x0800_0009, BAD_PARAM_ERR, false, "rq_type not regular (0), SRQ (1) or zero-length (3), or a QP with neither send nor receive queue";
    QP_RQ_FIELDS = 0x0800_000a, BAD_PARAM_ERR, false, "log_rq_size/log_rq_stride not 0 without an own RQ, or srqn set without rq_type SRQ";
    QP_SQ_FIELDS = 0x0800_000b, BAD_PARAM_ERR, false, "no_sq with log_sq_size not 0";
    QP_SQ_SIZE = 0x0800_000c, BAD_PARAM_ERR, false, "log_sq_size above log_max_qp_sz";
    QP_PAGE_SIZE = 0x0800_000d, BAD_PARAM_ERR, false, "qpc.log_page_size above the model's limit";
    QP_PAS_SHORT = 0x0800_000e, BAD_INP_LEN_ERR, false, "CREATE_QP input too short for the page list the QP buffer (receive ring, then send ring) needs";
    QP_PAS_ALIGN = 0x0800_000f, BAD_PARAM_ERR, false, "QP page address not aligned to the page size";
    QP_DBR_ALIGN = 0x0800_0010, BAD_PARAM_ERR, false, "qpc.dbr_addr not 8-byte aligned";
    QP_TS_FORMAT = 0x0800_0011, BAD_PARAM_ERR, false, "qpc.ts_format not allowed by the timestamp capability";
    QP_USER_INDEX = 0x0800_0012, BAD_PARAM_ERR, false, "qpc.user_index set while cqe_version is 0";
    QP_TOO_MANY = 0x0800_0013, LIM_ERR, false, "more than 2^log_max_qp QPs (current value)";
    QP_PM_STATE = 0x0800_0014, BAD_PARAM_ERR, false, "pm_state not MIGRATED (3): no alternate path is modelled";
    QP_XRCD = 0x0800_0015, BAD_RES_ERR, false, "qpc.xrcd neither 0 nor an allocated XRC domain";
    QP_NOT_FOUND = 0x0800_0016, BAD_RES_ERR, false, "qpn names no QP";
    QP_RQ_SIZE = 0x0800_0017, BAD_PARAM_ERR, false, "own receive queue with log_rq_size above log_max_qp_sz";
    QP_RQ_STRIDE = 0x0800_0018, BAD_PARAM_ERR, false, "own receive queue whose WQE (16 << log_rq_stride bytes) is above max_wqe_sz_rq";
    // ---- QP transitions ----
    QP_BAD_STATE = 0x0900_0001, BAD_QP_STATE_ERR, false, "transition not legal from the QP's current state";
    QP_OPT_PARAM = 0x0900_0002, BAD_PARAM_ERR, false, "opt_param_mask has bits outside the transition's allowed set";
    QP_PORT = 0x0900_0003, BAD_PARAM_ERR, false, "primary_address_path.vhca_port_num not in 1..=num_ports";
    QP_PKEY_INDEX = 0x0900_0004, BAD_PARAM_ERR, false, "pkey_index beyond the P_Key table";
    QP_COUNTER_SET = 0x0900_0005, BAD_RES_ERR, false, "counter_set_id not 0 (no Q counters are modelled)";
    QP_MTU = 0x0900_0006, BAD_PARAM_ERR, false, "qpc.mtu not 1..=5 or above the port's MTU";
    QP_MSG_MAX = 0x0900_0007, BAD_PARAM_ERR, false, "qpc.log_msg_max above log_max_msg";
    QP_REMOTE_QPN = 0x0900_0008, BAD_PARAM_ERR, false, "RC INIT2RTR with remote_qpn 0";
    QP_RRA_MAX = 0x0900_0009, BAD_PARAM_ERR, false, "log_rra_max above log_max_ra_res_qp";
    QP_SRA_MAX = 0x0900_000a, BAD_PARAM_ERR, false, "log_sra_max above log_max_ra_req_qp";
    QP_FL_NOT_ALLOWED = 0x0900_000b, BAD_PARAM_ERR, false, "address path fl = 1 while the force-loopback capability for the current roce_en is absent";
    QP_ROCE_DISABLED = 0x0900_000c, BAD_PARAM_ERR, false, "RoCE address path (Ethernet port, fl = 0) while roce_en is 0";
    QP_GID_INDEX = 0x0900_000d, BAD_PARAM_ERR, false, "src_addr_index beyond the GID table or naming an unprogrammed entry";
    QP_RMAC = 0x0900_000e, BAD_PARAM_ERR, false, "rmac zero, or not the port's own MAC while the port is on no wire";
    QP_RLID = 0x0900_000f, BAD_PARAM_ERR, false, "IB address path with rlid 0 or not the port's own LID";
    // ---- vports, RoCE addresses ----
    VPORT_OTHER = 0x0a00_0001, BAD_PARAM_ERR, false, "other_vport / vport_number / port_num not the own vport";
    VPORT_FIELD_SELECT = 0x0a00_0002, BAD_PARAM_ERR, false, "MODIFY_NIC_VPORT_CONTEXT field_select empty or selecting an unmodelled field";
    VPORT_LB_CAP = 0x0a00_0003, BAD_PARAM_ERR, false, "disable_*_local_lb selected without its disable_local_lb capability";
    VPORT_ROCE_CAP = 0x0a00_0004, BAD_PARAM_ERR, false, "roce_en selected without RoCE (cap roce on an Ethernet port)";
    VPORT_MTU = 0x0a00_0005, BAD_PARAM_ERR, false, "vport MTU outside 68..=9978";
    ROCE_ADDR_PORT_TYPE = 0x0a00_0006, BAD_PARAM_ERR, false, "SET/QUERY_ROCE_ADDRESS without RoCE (IB port or no roce cap)";
    ROCE_ADDR_INDEX = 0x0a00_0007, BAD_PARAM_ERR, false, "roce_address_index not below roce_address_table_size";
    ROCE_ADDR_VERSION = 0x0a00_0008, BAD_PARAM_ERR, false, "roce_version not 0 (v1) or 2 (v2), or not in the roce_version capability";
    ROCE_ADDR_L3_TYPE = 0x0a00_0009, BAD_PARAM_ERR, false, "roce_l3_type not 0 (IPv4) or 1 (IPv6)";
    ROCE_ADDR_VHCA_PORT = 0x0a00_000a, BAD_PARAM_ERR, false, "vhca_port_num not 0 (num_vhca_ports is 0)";
    PKEY_INDEX = 0x0a00_000b, BAD_PARAM_ERR, false, "QUERY_HCA_VPORT_PKEY pkey_index neither below the P_Key table size nor 0xffff (the whole table)";
    PORT_REG_LOCAL_PORT = 0x0a00_000c, BAD_PARAM_ERR, false, "PTYS/PMTU local_port not a port of the device (1..=num_ports)";
    PTYS_PROTO_MASK = 0x0a00_000d, BAD_PARAM_ERR, false, "PTYS proto_mask not the port's protocol (1 InfiniBand, 4 Ethernet)";
    PORT_REG_WRITE = 0x0a00_000e, BAD_PARAM_ERR, false, "PTYS/PMTU written (speed and MTU administration is not modelled; the registers are read-only here)";
    // ---- UMEM objects (DevX) ----
    UMEM_UID_0_CAP = 0x0b00_0001, BAD_PARAM_ERR, false, "CREATE_UMEM with uid 0 while the umem_uid_0 capability is absent";
    UMEM_PAGE_SIZE = 0x0b00_0002, BAD_PARAM_ERR, false, "umem.log_page_size above 19 (pages larger than 2 GiB)";
    UMEM_NUM_MTT = 0x0b00_0003, BAD_PARAM_ERR, false, "umem.num_of_mtt 0 or above 2^24";
    UMEM_MTT_SHORT = 0x0b00_0004, BAD_INP_LEN_ERR, false, "CREATE_UMEM input too short for the translation entries it announces";
    UMEM_PAGE_OFFSET = 0x0b00_0005, BAD_PARAM_ERR, false, "umem.page_offset not inside the first page";
    UMEM_MTT_ALIGN = 0x0b00_0006, BAD_PARAM_ERR, false, "UMEM translation entry not aligned to the page size, or with reserved bits 7:2 set";
    UMEM_NOT_FOUND = 0x0b00_0007, BAD_RES_ERR, false, "umem_id (or a context's *_umem_id) names no UMEM";
    UMEM_IN_USE = 0x0b00_0008, RES_BUSY, false, "DESTROY_UMEM while a CQ, RMP or QP keeps its buffer or doorbell record there";
    UMEM_RANGE = 0x0b00_0009, BAD_PARAM_ERR, false, "buffer or doorbell record beyond its UMEM, or on pages without the permission the device needs (write for CQ buffers)";
    UMEM_FIELDS = 0x0b00_000a, BAD_PARAM_ERR, false, "*_umem_id or *_umem_offset set while the matching *_umem_valid is clear";
    // ---- platform properties ----
    HOST_ENDIANNESS_VF = 0x0200_0019, BAD_PARAM_ERR, false, "ACCESS_REG HOST_ENDIANNESS on a virtual function (the PF's register; Linux writes it on a PF only)";
}

/// Syndrome of a generic, per-opcode check.
pub const fn per_opcode(base: u32, opcode: u16) -> u32 {
    base | opcode as u32
}

/// Look up the table row for a syndrome (a per-opcode one by its base).
pub fn lookup(syndrome: u32) -> Option<&'static SyndromeInfo> {
    TABLE.iter().find(|s| s.value == syndrome).or_else(|| {
        TABLE
            .iter()
            .find(|s| s.per_opcode && s.value == syndrome & 0xffff_0000)
    })
}
