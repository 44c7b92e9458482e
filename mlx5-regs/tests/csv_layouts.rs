//! Every field defined in mlx5-regs against the kernel-derived CSV
//! (`tests/data/mlx5-layouts.csv`, a copy of `shared/ref/mlx5-layouts.csv`,
//! extracted from `mlx5_ifc.h`): same bit offset, same width; and every CSV
//! row of the layouts we define is defined here, or on the commented
//! allow-list below.

use std::collections::{BTreeMap, BTreeSet};

use mlx5_regs::{all_layouts, Kind, Layout};

type Csv = BTreeMap<(String, String), (u32, u32)>;

fn load_csv() -> Csv {
    let text = include_str!("data/mlx5-layouts.csv");
    let mut rows = Csv::new();
    for (n, line) in text.lines().enumerate().skip(1) {
        let cols: Vec<&str> = line.split(',').collect();
        assert_eq!(cols.len(), 4, "CSV line {} malformed: {line}", n + 1);
        let prev = rows.insert(
            (cols[0].to_string(), cols[1].to_string()),
            (cols[2].parse().unwrap(), cols[3].parse().unwrap()),
        );
        assert!(prev.is_none(), "duplicate CSV row {line}");
    }
    rows
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
}

impl Checker<'_> {
    fn expect(&mut self, s: &str, name: &str, off: u32, width: u32) {
        self.checked += 1;
        let key = (s.to_string(), name.to_string());
        match self.csv.get(&key) {
            Some(&(o, w)) if o == off && w == width => {
                self.matched.insert(key);
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
    let csv = load_csv();
    let mut c = Checker {
        csv: &csv,
        matched: BTreeSet::new(),
        errors: Vec::new(),
        checked: 0,
    };
    let ours: BTreeSet<&str> = all_layouts().iter().map(|l| l.name).collect();
    for l in all_layouts() {
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
            c.errors.push(format!("CSV structure {s} is not defined"));
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
    // 1,080 rows minus the allow-listed union alternatives' rows.
    assert!(c.checked >= 1000, "only {} fields checked", c.checked);
    println!("{} fields checked against the CSV", c.checked);
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
    // Sizes from facts §12.1 (summed `mlx5_ifc.h` member widths).
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
    // facts §7.2 (offsets compiled from struct mlx5_cqe64 / mlx5_err_cqe).
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
    // facts §9.4.
    assert_eq!(srq_next_seg::next_wqe_index.bit_off, 2 * 8);
    assert_eq!(srq_next_seg::signature.bit_off, 4 * 8);
    assert_eq!(wqe_data_seg::lkey.byte_offset(), 4);
    assert_eq!(wqe_data_seg::addr.byte_offset(), 8);
    // facts §5: CQ doorbell record word 0 = ci, word 1 = arm word.
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
