//! `mlx5 caps`: the device's general capabilities, decoded and grouped.

use mlx5_driver::Caps;
use mlx5_regs::decode::{decode, DecodeOptions};
use mlx5_regs::layouts::cmd_hca_cap;
use serde_json::{json, Map, Value};

use crate::common::session::yes;

/// One printed row: label, value for humans, value for JSON.
struct Row {
    key: &'static str,
    label: &'static str,
    text: String,
    json: Value,
}

fn num(key: &'static str, label: &'static str, v: u64) -> Row {
    Row {
        key,
        label,
        text: v.to_string(),
        json: json!(v),
    }
}

fn log2(key: &'static str, label: &'static str, log: u8, minus_one: bool) -> Row {
    let v = (1u64 << log.min(63)) - minus_one as u64;
    Row {
        key,
        label,
        text: format!("{v} (2^{log}{})", if minus_one { " - 1" } else { "" }),
        json: json!(v),
    }
}

fn flag(key: &'static str, label: &'static str, b: bool) -> Row {
    Row {
        key,
        label,
        text: yes(b).into(),
        json: json!(b),
    }
}

fn groups(c: &Caps) -> Vec<(&'static str, &'static str, Vec<Row>)> {
    vec![
        (
            "ports",
            "Ports",
            vec![
                num("num_ports", "ports", c.num_ports as u64),
                Row {
                    key: "port_type",
                    label: "port type",
                    text: if c.port_type == 1 {
                        "Ethernet".into()
                    } else {
                        "InfiniBand".into()
                    },
                    json: json!(if c.port_type == 1 {
                        "ethernet"
                    } else {
                        "infiniband"
                    }),
                },
                flag("roce", "RoCE", c.roce),
                log2("max_msg", "largest message (bytes)", c.log_max_msg, false),
            ],
        ),
        (
            "completion_queues",
            "Completion queues",
            vec![
                log2("max_cq", "CQs", c.log_max_cq, false),
                log2("max_cqe", "entries per CQ", c.log_max_cq_sz, true),
                flag("cq_resize", "resize (MODIFY_CQ op_mod 1)", c.cq_resize),
                flag("cq_moderation", "moderation", c.cq_moderation),
                flag(
                    "cq_period_mode_modify",
                    "period mode modify",
                    c.cq_period_mode_modify,
                ),
                flag("cq_oi", "overrun ignore", c.cq_oi),
                num("cqe_version", "CQE version", c.cqe_version as u64),
            ],
        ),
        (
            "shared_receive_queues",
            "Shared receive queues",
            vec![
                log2("max_srq", "SRQs", c.log_max_srq, false),
                log2("max_rmp", "RMPs (ISSI 1)", c.log_max_rmp, false),
                log2("max_srq_wr", "WQEs per SRQ", c.log_max_srq_sz, true),
                num(
                    "max_srq_sge",
                    "scatter entries per WQE",
                    c.max_srq_sge.saturating_sub(1) as u64,
                ),
                num(
                    "max_wqe_sz_rq",
                    "largest receive WQE (bytes)",
                    c.max_wqe_sz_rq as u64,
                ),
                flag(
                    "basic_cyclic_rcv_wqe",
                    "cyclic receive WQEs",
                    c.basic_cyclic_rcv_wqe,
                ),
                flag("xrc", "XRC", c.xrc),
            ],
        ),
        (
            "event_queues",
            "Event queues",
            vec![
                log2("max_eq", "EQs", c.log_max_eq, false),
                log2("max_eqe", "entries per EQ", c.log_max_eq_sz, false),
            ],
        ),
        (
            "queue_pairs_and_protection",
            "Queue pairs and protection domains",
            vec![
                log2("max_qp", "QPs", c.log_max_qp, false),
                log2("max_pd", "PDs", c.log_max_pd, false),
            ],
        ),
        (
            "firmware_interface",
            "Firmware interface",
            vec![
                flag(
                    "page_requests",
                    "page requests (events 0x0b)",
                    !c.page_request_disable,
                ),
                flag(
                    "release_all_pages",
                    "release all pages",
                    c.release_all_pages,
                ),
                flag("fast_teardown", "fast teardown", c.fast_teardown),
                flag("force_teardown", "force teardown", c.force_teardown),
                flag("sw_owner_id", "sw_owner_id in INIT_HCA", c.sw_owner_id),
                flag(
                    "terminate_scatter_list_mkey",
                    "terminate-scatter-list mkey",
                    c.terminate_scatter_list_mkey,
                ),
                num(
                    "log_uar_page_sz",
                    "UAR page size (log2 - 12, as set)",
                    c.log_uar_page_sz as u64,
                ),
                num(
                    "cmdif_checksum",
                    "command checksums (as set)",
                    c.cmdif_checksum as u64,
                ),
            ],
        ),
    ]
}

/// Print the groups (human).
pub fn print(c: &Caps, max: Option<&Caps>) {
    for (_, title, rows) in groups(c) {
        outln!("\n{title}");
        let max_rows = max.map(groups);
        for (i, row) in rows.iter().enumerate() {
            let m = max_rows
                .as_ref()
                .and_then(|g| g.iter().find(|(_, t, _)| *t == title))
                .map(|(_, _, r)| r[i].text.clone())
                .filter(|m| *m != row.text);
            match m {
                Some(m) => outln!("  {:<36} {}   (max {m})", row.label, row.text),
                None => outln!("  {:<36} {}", row.label, row.text),
            }
        }
    }
}

/// The groups as JSON.
pub fn to_json(c: &Caps) -> Value {
    let mut g = Map::new();
    for (key, _, rows) in groups(c) {
        let mut m = Map::new();
        for row in rows {
            m.insert(row.key.into(), row.json);
        }
        g.insert(key.into(), Value::Object(m));
    }
    Value::Object(g)
}

/// Every non-zero `cmd_hca_cap` field: (name, value).
pub fn raw_fields(c: &Caps) -> Vec<(String, String)> {
    let mut s = String::new();
    let _ = decode(
        &cmd_hca_cap::LAYOUT,
        &c.raw,
        DecodeOptions {
            skip_zero: true,
            max_array: 64,
        },
        &mut s,
    );
    s.lines()
        .filter_map(|l| l.split_once(" = "))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}
