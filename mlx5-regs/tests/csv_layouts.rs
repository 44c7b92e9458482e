//! Every field defined in mlx5-regs against the kernel-derived CSVs
//! (`tests/data/mlx5-layouts.csv` and `tests/data/mlx5-qp-layouts.csv`, both
//! extracted from `mlx5_ifc.h`) and the DevX CSV (`tests/data/mlx5-devx-layouts.csv`:
//! the fields the kernel header leaves reserved or does not describe, taken
//! from rdma-core `providers/mlx5/mlx5_ifc.h` — the UMEM structures and the
//! `*_umem_id` fields, `create_umem_in`'s translation entries flattened to
//! `mtt[]` — and from Linux `include/linux/mlx5/device.h` — the page
//! request's `ec_function` and the init segment's `cmd_exec_to` /
//! `cmd_q_init_to`) and the port CSV (`tests/data/mlx5-port-layouts.csv`:
//! PTYS and the P_Key query, hand-copied from `mlx5_ifc.h`): same bit
//! offset, same width; and every CSV
//! row of the layouts we define is defined here, or on the commented
//! allow-list below. Every structure of the first CSV is defined; the second
//! also describes Ethernet and flow-steering structures this crate does not
//! define yet, so only the structures we define are held to it.

use std::collections::{BTreeMap, BTreeSet};

use mlx5_regs::{all_layouts, Kind, Layout};

type Csv = BTreeMap<(String, String), (u32, u32)>;

/// The first CSV (command transport, EQ/CQ/SRQ/RMP, capabilities).
const BASE_CSV: &str = include_str!("data/mlx5-layouts.csv");
/// The second CSV (queue pairs, memory keys, vports, RoCE; also Ethernet and
/// flow-steering structures).
const QP_CSV: &str = include_str!("data/mlx5-qp-layouts.csv");
/// Fields outside the kernel's `mlx5_ifc.h` (see the module docs).
const DEVX_CSV: &str = include_str!("data/mlx5-devx-layouts.csv");
/// Port structures neither of the first two CSVs holds, copied by hand from
/// `mlx5_ifc.h` (`ptys_reg`, `query_hca_vport_pkey_in/out`); their byte
/// places are also checked in `tests/qp_layouts.rs`.
const PORT_CSV: &str = include_str!("data/mlx5-port-layouts.csv");

fn parse_csv(text: &str, rows: &mut Csv) -> BTreeSet<String> {
    let mut structs = BTreeSet::new();
    for (n, line) in text.lines().enumerate().skip(1) {
        let cols: Vec<&str> = line.split(',').collect();
        assert_eq!(cols.len(), 4, "CSV line {} malformed: {line}", n + 1);
        let prev = rows.insert(
            (cols[0].to_string(), cols[1].to_string()),
            (cols[2].parse().unwrap(), cols[3].parse().unwrap()),
        );
        assert!(prev.is_none(), "duplicate CSV row {line}");
        structs.insert(cols[0].to_string());
    }
    structs
}

/// Both CSVs in one map, and the structure names of the first one. A
/// structure in both files is refused (a duplicate row).
fn load_csvs() -> (Csv, BTreeSet<String>) {
    let mut rows = Csv::new();
    let base = parse_csv(BASE_CSV, &mut rows);
    let qp = parse_csv(QP_CSV, &mut rows);
    parse_csv(DEVX_CSV, &mut rows);
    parse_csv(PORT_CSV, &mut rows);
    assert!(base.len() > 50 && qp.len() > 100, "CSVs not loaded");
    assert!(
        base.is_disjoint(&qp),
        "structures in both CSVs: {:?}",
        base.intersection(&qp).collect::<Vec<_>>()
    );
    (rows, base)
}

fn load_csv() -> Csv {
    load_csvs().0
}

/// CSV rows the project deliberately does not define, with the reason.
const ALLOW_LIST: &[(&str, &str)] = &[
    // Union alternatives of eqe.event_data for features this driver does not
    // use (DCT, on-demand paging, packet drop logging, GPIO, doorbell
    // congestion, VL stall). The alternatives it uses (comp_event, qp_events,
    // cq_error, port_state_change_event, cmd_inter_comp_event) are checked.
    ("eqe", "event_data.dct_events"),
    ("eqe", "event_data.wqe_associated_page_fault_event"),
    ("eqe", "event_data.rdma_page_fault_event"),
    ("eqe", "event_data.dropped_packet_logged"),
    ("eqe", "event_data.gpio_event"),
    ("eqe", "event_data.db_bf_congestion_event"),
    ("eqe", "event_data.stall_vl_event"),
];

/// Layouts that `mlx5_ifc.h` does not describe as bit layouts (C structs in
/// `device.h` / `mlx5dv.h`); their byte offsets are checked in `cqe_offsets`.
const NOT_IN_IFC: &[&str] = &[
    "cqe64",
    "err_cqe",
    "srq_next_seg",
    "wqe_data_seg",
    "cq_doorbell_record",
    "srq_doorbell_record",
    "gen_eqe_out",
    // include/linux/mlx5/qp.h C structs; byte offsets checked in
    // `c_struct_layouts_have_the_compiled_byte_offsets`.
    "wqe_ctrl_seg",
    "wqe_raddr_seg",
    "wqe_atomic_seg",
    "wqe_datagram_seg",
    "wqe_inline_seg",
    "qp_doorbell_record",
];

/// `mlx5_ifc.h` structures that the CSVs only show flattened inside their
/// parent (`query_qp_out`'s page-list union and the QPC extension): checked
/// through that parent, and each must be reached by it.
const EMBEDDED_ONLY: &[(&str, &str)] = &[
    ("qp_pas_list", "query_qp_out"),
    ("qpc_ext_and_pas_list", "query_qp_out"),
    ("qpc_extension", "query_qp_out"),
];

fn allowed(s: &str, name: &str) -> bool {
    ALLOW_LIST
        .iter()
        .any(|(ls, ln)| *ls == s && (name == *ln || name.starts_with(&format!("{ln}."))))
}

struct Checker<'a> {
    csv: &'a Csv,
    matched: BTreeSet<(String, String)>,
    errors: Vec<String>,
    checked: usize,
    /// (top-level structure, embedded layout) pairs walked.
    walked: BTreeSet<(String, String)>,
}

impl Checker<'_> {
    fn expect(&mut self, s: &str, name: &str, off: u32, width: u32) {
        self.checked += 1;
        let key = (s.to_string(), name.to_string());
        match self.csv.get(&key) {
            Some(&(o, w)) if o == off && w == width => {
                self.matched.insert(key);
            }
            // An old-style zero-length array (`pas[0]` in `mlx5_ifc.h`) is a
            // row without `[]` and of width 0; ours is the flexible `pas[]`.
            None if name.ends_with("[]") => {
                let old = (s.to_string(), name.trim_end_matches("[]").to_string());
                match self.csv.get(&old) {
                    Some(&(o, 0)) if o == off => {
                        self.matched.insert(old);
                    }
                    _ => self.errors.push(format!("{s}.{name}: not in the CSV")),
                }
            }
            Some(&(o, w)) => self
                .errors
                .push(format!("{s}.{name}: ours @{off}:{width}, CSV @{o}:{w}")),
            None => self.errors.push(format!("{s}.{name}: not in the CSV")),
        }
    }

    fn csv_has_prefix(&self, s: &str, prefix: &str) -> bool {
        self.csv
            .keys()
            .any(|(cs, cn)| cs == s && cn.starts_with(prefix))
    }

    fn walk(&mut self, top: &str, l: &Layout, prefix: &str, base: u32) {
        self.walked.insert((top.to_string(), l.name.to_string()));
        for f in l.fields {
            let off = base + f.bit_off;
            match f.kind {
                Kind::Array { count: 0 } => {
                    self.expect(top, &format!("{prefix}{}[]", f.name), off, f.width)
                }
                Kind::Array { count } => {
                    self.expect(top, &format!("{prefix}{}", f.name), off, f.width * count)
                }
                Kind::Scalar | Kind::Bytes => {
                    self.expect(top, &format!("{prefix}{}", f.name), off, f.width)
                }
                Kind::Sub(sub) => {
                    let name = format!("{prefix}{}", f.name);
                    self.expect(top, &name, off, f.width);
                    let inner = format!("{name}.");
                    // The CSV flattens some embedded structures and not others
                    // (the capability union is not); check what it has.
                    if self.csv_has_prefix(top, &inner) {
                        self.walk(top, sub, &inner, off);
                    }
                }
                Kind::Union(alts) => {
                    let name = format!("{prefix}{}", f.name);
                    self.expect(top, &name, off, f.width);
                    for alt in alts {
                        let alt_name = format!("{name}.{}", alt.name);
                        if self.csv.contains_key(&(top.to_string(), alt_name.clone())) {
                            self.expect(top, &alt_name, off, (alt.size * 8) as u32);
                            self.walk(top, alt, &format!("{alt_name}."), off);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn every_defined_field_matches_the_csv_and_every_csv_row_is_defined() {
    let (csv, base_structs) = load_csvs();
    let mut c = Checker {
        csv: &csv,
        matched: BTreeSet::new(),
        errors: Vec::new(),
        checked: 0,
        walked: BTreeSet::new(),
    };
    let ours: BTreeSet<&str> = all_layouts().iter().map(|l| l.name).collect();
    for l in all_layouts() {
        if let Some((_, parent)) = EMBEDDED_ONLY.iter().find(|(n, _)| *n == l.name) {
            assert!(
                !csv.keys().any(|(s, _)| s == l.name),
                "{} is in the CSV after all: check it there",
                l.name
            );
            assert!(ours.contains(parent), "{} without its parent", l.name);
            continue;
        }
        if NOT_IN_IFC.contains(&l.name) {
            assert!(
                !csv.keys().any(|(s, _)| s == l.name),
                "{} is in the CSV after all: check it there",
                l.name
            );
            continue;
        }
        assert!(
            csv.keys().any(|(s, _)| s == l.name),
            "layout {} is neither in the CSV nor listed in NOT_IN_IFC",
            l.name
        );
        c.walk(l.name, l, "", 0);
    }
    for (s, name) in csv.keys() {
        if !ours.contains(s.as_str()) {
            if base_structs.contains(s) {
                c.errors.push(format!("CSV structure {s} is not defined"));
            }
            continue;
        }
        if !c.matched.contains(&(s.clone(), name.clone())) && !allowed(s, name) {
            c.errors.push(format!("CSV row {s}.{name} is not defined"));
        }
    }
    assert!(
        c.errors.is_empty(),
        "{} mismatches:\n{}",
        c.errors.len(),
        c.errors.join("\n")
    );
    // Every embedded-only structure was walked through its parent.
    for (n, parent) in EMBEDDED_ONLY {
        assert!(
            c.walked.contains(&(parent.to_string(), n.to_string())),
            "{n} not checked through {parent}"
        );
    }
    // 1,080 rows of the first CSV minus the allow-listed union alternatives'
    // rows, plus the 1,632 rows of the 53 structures of the second CSV
    // defined here.
    assert!(c.checked >= 2650, "only {} fields checked", c.checked);
    println!("{} fields checked against the CSVs", c.checked);
}

#[test]
fn allow_list_entries_are_real_csv_rows() {
    let csv = load_csv();
    for (s, n) in ALLOW_LIST {
        assert!(
            csv.contains_key(&(s.to_string(), n.to_string())),
            "stale allow-list entry {s}.{n}"
        );
    }
}

#[test]
fn structure_sizes_match_mlx5_ifc() {
    // Sizes from docs/firmware.md §12.1 (summed `mlx5_ifc.h` member widths).
    let expected: &[(&str, usize)] = &[
        ("cmd_queue_entry", 64),
        ("cmd_if_box", 576),
        ("eqe", 64),
        ("cqc", 64),
        ("eqc", 64),
        ("srqc", 64),
        ("wq", 192),
        ("rmpc", 240),
        ("cmd_hca_cap", 256),
        ("create_eq_in", 272),
        ("create_cq_in", 272),
        ("create_srq_in", 272),
        ("create_rmp_in", 272),
        ("modify_cq_in", 272),
        ("modify_rmp_in", 272),
        ("initial_seg", 16396),
        ("health_buffer", 64),
        ("query_hca_cap_out", 4112),
        ("set_hca_cap_in", 4112),
        // Queue pairs, memory keys, vports (the second CSV's sizes, summed
        // from `mlx5_ifc.h` by the same extractor).
        ("qpc", 232),
        // DevX user memory (rdma-core `providers/mlx5/mlx5_ifc.h`).
        ("umem", 32),
        ("mtt", 8),
        ("create_umem_in", 48),
        ("create_umem_out", 16),
        ("destroy_umem_in", 16),
        ("destroy_umem_out", 16),
        ("ads", 44),
        ("create_qp_in", 272),
        ("create_qp_out", 16),
        ("destroy_qp_in", 16),
        ("destroy_qp_out", 16),
        ("rst2init_qp_in", 272),
        ("init2init_qp_in", 272),
        ("init2rtr_qp_in", 272),
        ("rtr2rts_qp_in", 272),
        ("rts2rts_qp_in", 272),
        ("sqerr2rts_qp_in", 272),
        ("rst2init_qp_out", 16),
        ("init2init_qp_out", 16),
        ("init2rtr_qp_out", 16),
        ("rtr2rts_qp_out", 16),
        ("rts2rts_qp_out", 16),
        ("sqerr2rts_qp_out", 16),
        ("qp_2err_in", 16),
        ("qp_2err_out", 16),
        ("qp_2rst_in", 16),
        ("qp_2rst_out", 16),
        ("query_qp_in", 16),
        ("query_qp_out", 464),
        ("alloc_xrcd_in", 16),
        ("alloc_xrcd_out", 16),
        ("dealloc_xrcd_in", 16),
        ("dealloc_xrcd_out", 16),
        ("mkc", 64),
        ("create_mkey_in", 272),
        ("create_mkey_out", 16),
        ("destroy_mkey_in", 16),
        ("destroy_mkey_out", 16),
        ("query_mkey_in", 16),
        ("query_mkey_out", 304),
        ("atomic_caps", 256),
        ("roce_cap", 256),
        ("roce_addr_layout", 32),
        ("set_roce_address_in", 48),
        ("set_roce_address_out", 16),
        ("query_roce_address_in", 16),
        ("query_roce_address_out", 48),
        ("nic_vport_context", 256),
        ("mac_address_layout", 8),
        ("modify_nic_vport_field_select", 4),
        ("query_nic_vport_context_in", 16),
        ("query_nic_vport_context_out", 272),
        ("modify_nic_vport_context_in", 512),
        ("modify_nic_vport_context_out", 16),
        ("hca_vport_context", 512),
        ("query_hca_vport_context_in", 16),
        ("query_hca_vport_context_out", 528),
        ("query_vport_state_in", 16),
        ("query_vport_state_out", 16),
        // include/linux/mlx5/qp.h C structs.
        ("wqe_ctrl_seg", 16),
        ("wqe_raddr_seg", 16),
        ("wqe_atomic_seg", 16),
        ("wqe_datagram_seg", 48),
        ("wqe_inline_seg", 4),
        ("qp_doorbell_record", 8),
    ];
    for (name, size) in expected {
        let l = all_layouts()
            .iter()
            .find(|l| l.name == *name)
            .unwrap_or_else(|| panic!("{name} not defined"));
        assert_eq!(l.size, *size, "size of {name}");
    }
}

#[test]
fn c_struct_layouts_have_the_compiled_byte_offsets() {
    use mlx5_regs::layouts::*;
    // docs/firmware.md §7.2 (offsets compiled from struct mlx5_cqe64 / mlx5_err_cqe).
    assert_eq!(cqe64::srqn.byte_offset(), 0x20);
    assert_eq!(cqe64::byte_cnt.byte_offset(), 0x2c);
    assert_eq!(cqe64::timestamp.byte_offset(), 0x30);
    assert_eq!(cqe64::qpn.byte_offset(), 0x38);
    assert_eq!(cqe64::wqe_counter.bit_off, 0x3c * 8);
    assert_eq!(cqe64::opcode.bit_off, 0x3f * 8);
    assert_eq!(cqe64::owner.bit_off, 0x3f * 8 + 7);
    assert_eq!(err_cqe::vendor_err_synd.bit_off, 0x36 * 8);
    assert_eq!(err_cqe::syndrome.bit_off, 0x37 * 8);
    // The error-syndrome word of an error CQE is the ifc cqe_error_syndrome.
    assert_eq!(
        err_cqe::hw_syndrome_type.bit_off - err_cqe::hw_error_syndrome.bit_off,
        cqe_error_syndrome::hw_syndrome_type.bit_off
    );
    // docs/firmware.md §9.4.
    assert_eq!(srq_next_seg::next_wqe_index.bit_off, 2 * 8);
    assert_eq!(srq_next_seg::signature.bit_off, 4 * 8);
    assert_eq!(wqe_data_seg::lkey.byte_offset(), 4);
    assert_eq!(wqe_data_seg::addr.byte_offset(), 8);
    // docs/firmware.md §5: CQ doorbell record word 0 = ci, word 1 = arm word.
    let mut dbr = [0u8; 8];
    cq_doorbell_record::set_ci.set(&mut dbr, 0xabcdef).unwrap();
    cq_doorbell_record::arm_sn.set(&mut dbr, 2).unwrap();
    cq_doorbell_record::arm_cmd.set(&mut dbr, 1).unwrap();
    cq_doorbell_record::arm_ci.set(&mut dbr, 0x12).unwrap();
    assert_eq!(
        u32::from_be_bytes(dbr[4..8].try_into().unwrap()),
        mlx5_regs::doorbell::cq_arm_word(2, mlx5_regs::doorbell::CQ_ARM_SOLICITED, 0x12)
    );
    assert_eq!(dbr[..4], [0x00, 0xab, 0xcd, 0xef]);
}

#[test]
fn qp_c_struct_layouts_have_the_compiled_byte_offsets() {
    use mlx5_regs::consts::wqe;
    use mlx5_regs::doorbell;
    use mlx5_regs::layouts::*;
    // struct mlx5_wqe_ctrl_seg (include/linux/mlx5/qp.h): opmod_idx_opcode
    // 0, qpn_ds 4, signature 8, fm_ce_se 11, imm 12; 16 bytes.
    assert_eq!(wqe_ctrl_seg::opmod.bit_off, 0);
    assert_eq!(wqe_ctrl_seg::wqe_index.bit_off, 8);
    assert_eq!(wqe_ctrl_seg::opcode.bit_off, 3 * 8);
    assert_eq!(wqe_ctrl_seg::qpn.byte_offset(), 4);
    assert_eq!(wqe_ctrl_seg::ds.bit_off, 7 * 8 + 2);
    assert_eq!(wqe_ctrl_seg::signature.bit_off, 8 * 8);
    assert_eq!(wqe_ctrl_seg::fm_ce_se.bit_off, 11 * 8);
    assert_eq!(wqe_ctrl_seg::imm.byte_offset(), 12);
    // struct mlx5_av: qkey 0, dqp_dct 8, stat_rate_sl 12, fl_mlid 13,
    // rlid/udp_sport 14, rmac 20, tclass 26, hop_limit 27, grh_gid_fl 28
    // (grh bit 30, sgid index 27:20, flow label 19:0), rgid 32; 48 bytes.
    assert_eq!(wqe_datagram_seg::qkey.byte_offset(), 0);
    assert_eq!(wqe_datagram_seg::ext.bit_off, 8 * 8);
    assert_eq!(wqe_datagram_seg::dqpn.bit_off, 9 * 8);
    assert_eq!(wqe_datagram_seg::stat_rate_sl.bit_off, 12 * 8);
    assert_eq!(wqe_datagram_seg::fl_mlid.bit_off, 13 * 8);
    assert_eq!(wqe_datagram_seg::rlid_udp_sport.bit_off, 14 * 8);
    assert_eq!(wqe_datagram_seg::rmac_47_16.bit_off, 20 * 8);
    assert_eq!(wqe_datagram_seg::rmac_15_0.bit_off, 24 * 8);
    assert_eq!(wqe_datagram_seg::tclass.bit_off, 26 * 8);
    assert_eq!(wqe_datagram_seg::hop_limit.bit_off, 27 * 8);
    assert_eq!(wqe_datagram_seg::grh.bit_off, 28 * 8 + 1);
    assert_eq!(wqe_datagram_seg::sgid_index.bit_off, 28 * 8 + 4);
    assert_eq!(wqe_datagram_seg::flow_label.bit_off, 29 * 8 + 4);
    assert_eq!(wqe_datagram_seg::rgid.bit_off, 32 * 8);
    // The fields and the dword composition agree, byte for byte.
    let mut ctrl = [0u8; 16];
    wqe_ctrl_seg::wqe_index.set(&mut ctrl, 0xbeef).unwrap();
    wqe_ctrl_seg::opcode
        .set(&mut ctrl, wqe::OPCODE_SEND_IMM)
        .unwrap();
    wqe_ctrl_seg::qpn.set(&mut ctrl, 0x12_3456).unwrap();
    wqe_ctrl_seg::ds.set(&mut ctrl, 3).unwrap();
    wqe_ctrl_seg::fm_ce_se
        .set(&mut ctrl, wqe::CTRL_CQ_UPDATE)
        .unwrap();
    wqe_ctrl_seg::imm.set(&mut ctrl, 0xcafe_f00d).unwrap();
    let w0 = wqe::opmod_idx_opcode(0, 0xbeef, wqe::OPCODE_SEND_IMM);
    let w1 = wqe::qpn_ds(0x12_3456, 3);
    assert_eq!(ctrl[0..4], w0.to_be_bytes());
    assert_eq!(ctrl[4..8], w1.to_be_bytes());
    assert_eq!(ctrl[8..16], [0, 0, 0, 0x08, 0xca, 0xfe, 0xf0, 0x0d]);
    assert_eq!(wqe::split_opmod_idx_opcode(w0), (0, 0xbeef, 0x0b));
    assert_eq!(wqe::split_qpn_ds(w1), (0x12_3456, 3));
    // The doorbell is the first 8 bytes of the control segment.
    assert_eq!(doorbell::qp_send_doorbell(w0, w1).to_be_bytes(), ctrl[0..8]);
    // struct mlx5_wqe_raddr_seg: raddr 0, rkey 8; 16 bytes.
    assert_eq!(wqe_raddr_seg::raddr.byte_offset(), 0);
    assert_eq!(wqe_raddr_seg::rkey.byte_offset(), 8);
    assert_eq!(wqe_raddr_seg::SIZE, 16);
    // struct mlx5_wqe_atomic_seg: swap_add 0, compare 8; 16 bytes.
    assert_eq!(wqe_atomic_seg::swap_add.byte_offset(), 0);
    assert_eq!(wqe_atomic_seg::compare.byte_offset(), 8);
    assert_eq!(wqe_atomic_seg::SIZE, 16);
    // struct mlx5_wqe_inline_seg: byte_count 0, data from 4.
    let mut inl = [0u8; 4];
    wqe_inline_seg::byte_count
        .set(&mut inl, 13 | wqe::INLINE_SEG)
        .unwrap();
    assert_eq!(inl, [0x80, 0, 0, 13]);
    // QP doorbell record: receive counter dword 0, send counter dword 1,
    // each the 16-bit counter as a big-endian dword.
    let mut dbr = [0u8; 8];
    qp_doorbell_record::rcv_counter
        .set(&mut dbr, 0x0102)
        .unwrap();
    qp_doorbell_record::snd_counter
        .set(&mut dbr, 0xfffe)
        .unwrap();
    assert_eq!(dbr, [0, 0, 1, 2, 0, 0, 0xff, 0xfe]);
    assert_eq!(
        qp_doorbell_record::snd_counter.byte_offset(),
        doorbell::QP_DBR_SND
    );
    assert_eq!(
        qp_doorbell_record::rcv_counter.byte_offset(),
        doorbell::QP_DBR_RCV
    );
    assert_eq!(qp_doorbell_record::SIZE, doorbell::QP_DBR_SIZE);
    // WQE sizing: SEND with one SGE (ctrl + data, ds 2) is one basic block;
    // ds 5 needs two.
    assert_eq!(wqe::wqebbs(2), 1);
    assert_eq!(wqe::wqebbs(4), 1);
    assert_eq!(wqe::wqebbs(5), 2);
    assert_eq!(wqe_data_seg::SIZE, wqe::SEND_WQE_DS);
}
