//! `mlx5 pingpong`: every transport runs and checks every byte; wire faults
//! below the retry budget still end in exit 0 with the retransmissions
//! counted, above it in exit 4; hostile options are refused (exit 2); the
//! capture decodes as RoCE/InfiniBand in tshark with the expected opcodes
//! and re-parses with the project's codec, every ICRC recomputed.

use std::path::{Path, PathBuf};

use mlx5_sim::wire::{parse, read_pcap, tshark_fields, tshark_number, LinkType, TsharkError};
use serde_json::{json, Value};

use crate::common::{code, docs_examples, mlx5, stderr, stdout};

const TRANSPORTS: [&str; 5] = ["roce-v2-ipv4", "roce-v2-ipv6", "roce-v1", "ib", "ib-grh"];

/// Run `mlx5 pingpong ARGS --json -q`: the exit code and the `pingpong`
/// object (the whole document when the run stopped before it).
fn pingpong_json(args: &[&str]) -> (i32, Value) {
    let mut all = vec!["pingpong", "--json", "-q"];
    all.extend_from_slice(args);
    let o = mlx5(&all);
    let doc: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {}", stdout(&o)));
    assert_eq!(doc["exit_code"], code(&o), "{args:?}");
    let mut p = doc.get("pingpong").cloned().unwrap_or(doc.clone());
    if let Some(e) = doc.get("error") {
        p["error"] = e.clone();
        p["ok"] = doc["ok"].clone();
    }
    (code(&o), p)
}

fn sum_hosts(p: &Value, key: &str) -> u64 {
    p["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h[key].as_u64().unwrap())
        .sum()
}

#[test]
fn every_transport_exits_0_with_every_byte_checked() {
    for t in TRANSPORTS {
        // 3000 bytes at MTU 1024: FIRST, MIDDLE, LAST packets each way.
        let (c, p) = pingpong_json(&["--transport", t, "--size", "3000", "--iters", "20"]);
        assert_eq!(c, 0, "{t}: {p}");
        assert_eq!(p["result"], "OK", "{t}");
        assert_eq!(p["messages"]["sent"], 40, "{t}");
        assert_eq!(p["messages"]["received_intact"], 40, "{t}");
        assert_eq!(p["iterations"], 20, "{t}");
        assert_eq!(p["bytes"], 3000 * 40, "{t}");
        assert_eq!(sum_hosts(&p, "retransmissions"), 0, "{t}: a clean wire");
        assert_eq!(sum_hosts(&p, "frames_dropped"), 0, "{t}");
        // 3 data packets and at least one ACK per message.
        let frames = p["wire"]["frames"].as_u64().unwrap();
        assert!((40 * 4..=40 * 6).contains(&frames), "{t}: {frames} frames");
        assert_eq!(p["transport"], t);
        let local = &p["local"];
        if t.starts_with("ib") {
            assert_ne!(local["lid"], 0, "{t}: a LID");
        } else {
            assert_eq!(local["lid"], 0, "{t}: no LID on RoCE");
        }
        if t == "roce-v2-ipv4" {
            assert_eq!(local["gid"], "::ffff:198.18.0.1");
            assert_eq!(p["remote"]["gid"], "::ffff:198.18.0.2");
        }
    }
}

/// Every `--op` on an SRQ and on the QPs' own receive queues, over RoCE
/// and InfiniBand with a GRH, through a lossy wire: every message checked
/// where it must land (a SEND in the receive slot, a WRITE in the target,
/// a READ in the requester's buffer, an atomic's original value and the
/// word it leaves), with the retransmissions counted. A retried atomic
/// must not execute twice: FETCH_AND_ADD's running total would be off.
#[test]
fn every_op_on_either_receive_queue_exits_0() {
    let ops = [
        ("send", 2500),
        ("send-imm", 2500),
        ("write", 2500),
        ("write-imm", 2500),
        ("read", 2500),
        ("fetch-add", 8),
        ("cmp-swap", 8),
    ];
    for (op, size) in ops {
        for rq in ["srq", "own"] {
            for t in ["roce-v2-ipv4", "ib-grh"] {
                let what = format!("{op} {rq} {t}");
                let mut args = vec!["--op", op, "--rq", rq, "--transport", t];
                args.extend(["--iters", "30", "--drop", "0.04", "--dup", "0.04"]);
                args.extend(["--seed", "3"]);
                let sz = size.to_string();
                if size != 8 {
                    args.extend(["--size", &sz]);
                }
                let (c, p) = pingpong_json(&args);
                assert_eq!(c, 0, "{what}: {p}");
                assert_eq!((&p["op"], &p["rq"]), (&json!(op), &json!(rq)), "{what}");
                assert_eq!(p["size"], size, "{what}");
                assert_eq!(p["messages"]["received_intact"], 60, "{what}");
                assert_eq!(p["bytes"], size * 60, "{what}");
                assert!(sum_hosts(&p, "retransmissions") > 0, "{what}: {p}");
                assert!(p["wire"]["dropped"].as_u64().unwrap() > 0, "{what}");
                // The consumed receive WQEs are reposted: never an RNR.
                assert_eq!(sum_hosts(&p, "rnr_naks_sent"), 0, "{what}");
            }
        }
    }
}

#[test]
fn ud_datagrams_on_every_transport_and_either_receive_queue_exit_0() {
    for t in TRANSPORTS {
        for (rq, op) in [("own", "send"), ("srq", "send-imm")] {
            let what = format!("{t} {rq} {op}");
            let (c, p) = pingpong_json(&[
                "--qp",
                "ud",
                "--transport",
                t,
                "--rq",
                rq,
                "--op",
                op,
                "--iters",
                "25",
            ]);
            assert_eq!(c, 0, "{what}: {p}");
            assert_eq!(
                (&p["qp"], &p["rq"], &p["op"]),
                (&json!("ud"), &json!(rq), &json!(op))
            );
            assert_eq!(p["size"], 1024, "{what}: the default UD size");
            assert_eq!(p["messages"]["sent"], 50, "{what}");
            assert_eq!(p["messages"]["received_intact"], 50, "{what}");
            assert_eq!(p["bytes"], 1024 * 50, "{what}");
            // One frame per datagram: no ACK, no retransmission.
            assert_eq!(p["wire"]["frames"], 50, "{what}");
            assert_eq!(sum_hosts(&p, "acks_sent"), 0, "{what}");
            assert_eq!(sum_hosts(&p, "retransmissions"), 0, "{what}");
            // The addresses carry the UD QPs' numbers, not the RC ones.
            assert_ne!(p["local"]["qpn"], p["remote"]["qpn"], "{what}");
        }
    }
    // The text: ud_pingpong's address and rate lines, then the counters.
    let o = mlx5(&[
        "pingpong", "-q", "--qp", "ud", "--size", "512", "--iters", "10",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("  local address:  LID 0x"), "{out}");
    assert!(lines[1].starts_with("  remote address: LID 0x"), "{out}");
    assert!(lines[2].starts_with("10240 bytes in "), "{out}");
    assert!(lines[3].starts_with("10 iters in "), "{out}");
    assert!(out.contains("512-byte UD SENDs"), "{out}");
    assert!(out.contains("result            OK"), "{out}");
}

#[test]
fn the_text_is_rc_pingpongs_then_the_counters() {
    let o = mlx5(&["pingpong", "-q", "--size", "64", "--iters", "10"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("  local address:  LID 0x0000, QPN 0x"),
        "{out}"
    );
    assert!(lines[0].ends_with("GID ::ffff:198.18.0.1"), "{out}");
    assert!(
        lines[1].starts_with("  remote address: LID 0x0000, QPN 0x"),
        "{out}"
    );
    // rc_pingpong: bytes = size * iters * 2.
    assert!(lines[2].starts_with("1280 bytes in "), "{out}");
    assert!(lines[2].ends_with(" Mbit/sec"), "{out}");
    assert!(lines[3].starts_with("10 iters in "), "{out}");
    assert!(lines[3].ends_with(" usec/iter"), "{out}");
    assert!(out.contains("messages          20 sent, 20 received once and intact"));
    assert!(
        out.contains("retransmissions   0 (host 1: 0, host 2: 0)"),
        "{out}"
    );
    assert!(out.ends_with("result            OK\n"), "{out}");
}

#[test]
fn faults_below_the_retry_budget_still_exit_0_with_retransmissions() {
    for t in TRANSPORTS {
        for seed in ["1", "2"] {
            let (c, p) = pingpong_json(&[
                "--transport",
                t,
                "--size",
                "2500",
                "--iters",
                "40",
                "--seed",
                seed,
                "--drop",
                "0.03",
                "--dup",
                "0.03",
                "--reorder",
                "0.03",
                "--corrupt",
                "0.03",
            ]);
            let what = format!("{t} seed {seed}");
            assert_eq!(c, 0, "{what}: {p}");
            assert_eq!(p["messages"]["received_intact"], 80, "{what}");
            let w = &p["wire"];
            for k in ["dropped", "duplicated", "reordered", "corrupted"] {
                assert!(w[k].as_u64().unwrap() > 0, "{what}: no frame {k}");
            }
            assert!(sum_hosts(&p, "retransmissions") > 0, "{what}");
            assert!(sum_hosts(&p, "duplicates") > 0, "{what}");
            // Every corrupted frame is dropped silently by the receiving port.
            assert!(
                sum_hosts(&p, "frames_dropped") >= w["corrupted"].as_u64().unwrap(),
                "{what}"
            );
        }
    }
    // The same seed gives the same faults.
    let args = ["--iters", "30", "--drop", "0.05", "--seed", "5"];
    let (_, a) = pingpong_json(&args);
    let (_, b) = pingpong_json(&args);
    assert_eq!(a["wire"], b["wire"]);
    assert_eq!(a["hosts"], b["hosts"]);
}

#[test]
fn a_wire_that_loses_everything_exits_4_after_the_retry_budget() {
    let (c, p) = pingpong_json(&["--drop", "1", "--iters", "5", "--size", "64"]);
    assert_eq!(c, 4, "{p}");
    let msg = p["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("message 1") && msg.contains("RetryExcErr"),
        "{msg}"
    );
    // The first transmission and retry_cnt (7) retransmissions.
    let o = mlx5(&[
        "pingpong", "-q", "--drop", "1", "--iters", "5", "--size", "64",
    ]);
    assert_eq!(code(&o), 4);
    let out = stdout(&o);
    assert!(
        out.contains("retransmissions   7 (host 1: 7, host 2: 0)"),
        "{out}"
    );
    assert!(out.contains("result            FAILED: "), "{out}");
}

#[test]
fn hostile_options_are_refused_with_exit_2() {
    let cases: &[(&[&str], &str)] = &[
        (&["--size", "2M"], "too large"),
        (&["--size", "18446744073709551615"], "too large"),
        (&["--size=-1"], "not a byte count"),
        (&["--iters", "0"], "iters"),
        (&["--iters", "1000001"], "iters"),
        (&["--mtu", "1500"], "not an MTU"),
        (&["--drop", "NaN"], "out of range"),
        (&["--corrupt", "1.01"], "out of range"),
        (&["--reorder=-0.5"], "out of range"),
        (&["--transport", "iwarp"], "iwarp"),
        (&["--op", "atomic"], "atomic"),
        (&["--rq", "xrc"], "xrc"),
        (&["--op", "fetch-add", "--size", "64"], "moves 8 bytes"),
        (
            &["--transport", "ib-grh", "--device", "sim:cx6dx"],
            "Ethernet only",
        ),
        (
            &["--transport", "ib", "--device", "sim:cx4lx"],
            "Ethernet only",
        ),
        (&["--device", "vfio:0000:03:00.0"], "device model"),
        (
            &["--fail-opcode", "create-qp:bad_param_err:0x1"],
            "--fail-opcode",
        ),
        (&["--threaded"], "threaded"),
        (&["--qp", "ud", "--op", "read"], "needs a connected QP"),
        (&["--qp", "ud", "--drop", "0.1"], "not retried"),
        (
            &["--qp", "ud", "--size", "1025"],
            "larger than the ports' MTU",
        ),
        (&["--qp", "xrc"], "xrc"),
        // The Ethernet ports' active MTU is 1024.
        (&["--mtu", "4096"], "larger than the ports' active MTU"),
    ];
    for (args, says) in cases {
        let mut all = vec!["pingpong", "-q"];
        all.extend_from_slice(args);
        let o = mlx5(&all);
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{args:?}");
        let (c, doc) = pingpong_json(args);
        assert_eq!((c, &doc["ok"]), (2, &Value::Bool(false)), "{args:?}");
    }
    let o = mlx5(&["pingpong", "-q", "--pcap", "/nonexistent-dir/x.pcap"]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot create the capture file"));
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("mlx5-pingpong-{}-{name}", std::process::id()))
}

/// Capture a 3-round-trip ping-pong of 2500-byte messages over `t`: the
/// file, its frames' count (from the tool), the link type.
fn capture(t: &str) -> (PathBuf, u64, LinkType) {
    let path = tmp(&format!("{t}.pcap"));
    let p = path.to_str().unwrap();
    let (c, v) = pingpong_json(&[
        "--transport",
        t,
        "--size",
        "2500",
        "--iters",
        "3",
        "--pcap",
        p,
    ]);
    assert_eq!(c, 0, "{t}: {v}");
    let frames = v["wire"]["frames"].as_u64().unwrap();
    assert_eq!(v["capture"]["frames"], frames, "{t}: every frame captured");
    let link = if t.starts_with("ib") {
        LinkType::Infiniband
    } else {
        LinkType::Ethernet
    };
    (path, frames, link)
}

/// SEND_FIRST, SEND_MIDDLE, SEND_LAST and ACKNOWLEDGE (IBTA opcodes 0, 1,
/// 2, 17): what 2500-byte SENDs at MTU 1024 put on the wire.
const OPCODES: [u32; 4] = [0, 1, 2, 17];

#[test]
fn the_capture_reparses_with_the_codec_and_every_icrc_recomputes() {
    for t in TRANSPORTS {
        let (path, frames, link) = capture(t);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let (linktype, records) = read_pcap(&bytes[..]).unwrap();
        assert_eq!(linktype, link.pcap_linktype(), "{t}");
        assert_eq!(records.len() as u64, frames, "{t}");
        let mut seen = std::collections::BTreeSet::new();
        for (i, r) in records.iter().enumerate() {
            let p = parse(link, &r.data).unwrap_or_else(|e| panic!("{t} frame {i}: {e}"));
            assert!(
                p.icrc_ok,
                "{t} frame {i}: ICRC {:#010x} does not recompute",
                p.icrc
            );
            assert_eq!(
                p.vcrc_ok,
                t.starts_with("ib").then_some(true),
                "{t} frame {i}: VCRC"
            );
            seen.insert(u32::from(p.packet.bth.opcode));
            // One flipped payload bit and the recomputed ICRC no longer
            // matches: the check is real.
            let mut bad = r.data.clone();
            let at = bad.len() - 8;
            bad[at] ^= 1;
            if let Ok(q) = parse(link, &bad) {
                assert!(!q.icrc_ok, "{t} frame {i}: a damaged frame passed");
            }
        }
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), OPCODES, "{t}");
    }
}

/// Each frame's protocols and BTH opcode as tshark decodes them (the
/// decode `mlx5_sim::wire::tshark_fields` shares with the codec's capture
/// test), or a loud failure: this test needs the Debian package `tshark`
/// (`.ci/run` installs it) and does not pass without it.
fn tshark_rows(path: &Path, link: LinkType) -> Vec<(String, String)> {
    let fields = ["frame.protocols", "infiniband.bth.opcode"];
    let rows = match tshark_fields(path, link, &fields) {
        Ok(rows) => rows,
        Err(TsharkError::NotInstalled) => panic!(
            "THIS TEST NEEDS tshark (Debian package `tshark`; `.ci/run` installs it): \
             not found, so the capture could not be checked by an independent decoder"
        ),
        Err(e) => panic!("{e}"),
    };
    rows.into_iter()
        .map(|r| (r[0].clone(), r.get(1).cloned().unwrap_or_default()))
        .collect()
}

#[test]
fn tshark_decodes_every_frame_as_roce_or_infiniband_with_the_expected_opcodes() {
    for t in TRANSPORTS {
        let (path, frames, link) = capture(t);
        let bytes = std::fs::read(&path).unwrap();
        let (_, records) = read_pcap(&bytes[..]).unwrap();
        let rows = tshark_rows(&path, link);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(rows.len() as u64, frames, "{t}: frames tshark read");
        let stack = match t {
            "roce-v2-ipv4" => "eth:ethertype:ip:udp:infiniband",
            "roce-v2-ipv6" => "eth:ethertype:ipv6:udp:infiniband",
            "roce-v1" => "eth:ethertype:infiniband",
            _ => "user_dlt:infiniband",
        };
        for (i, ((protocols, opcode), r)) in rows.iter().zip(&records).enumerate() {
            assert!(
                protocols.starts_with(stack),
                "{t} frame {i}: tshark sees {protocols}"
            );
            let ours = parse(link, &r.data).unwrap().packet.bth.opcode;
            let theirs =
                tshark_number(opcode).unwrap_or_else(|| panic!("{t} frame {i}: opcode {opcode:?}"));
            assert_eq!(theirs, u32::from(ours), "{t} frame {i}: opcode");
            assert!(OPCODES.contains(&theirs), "{t} frame {i}: opcode {theirs}");
        }
    }
}

#[test]
fn docs_examples_run_as_shown() {
    assert!(docs_examples("## `pingpong`") >= 2);
}
