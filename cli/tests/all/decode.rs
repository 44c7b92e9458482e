//! `mlx5 decode`: the tool's own hexdump, a Linux kernel log of the same
//! bytes, print_hex_dump and plain hex all decode to the same fields, and
//! to the fields `mlx5 trace` decoded when it sent them; the docs/cli.md
//! examples of the section run.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::common::{docs_examples, mlx5_stdin};

fn decode_json(args: &[&str], input: &str) -> Value {
    let mut a = vec!["decode", "-", "--json"];
    a.extend_from_slice(args);
    let o = mlx5_stdin(&a, input);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{args:?}: {}\n{input}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

fn fields(v: &Value, i: usize) -> BTreeMap<String, String> {
    v["buffers"][i]["fields"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, x)| (k.clone(), x.as_str().unwrap().to_string()))
        .collect()
}

/// The bytes back from a block of `cmd[N]: OFF: w0 w1 w2 w3` lines, by the
/// test's own reading (big-endian words).
fn words_to_bytes(block: &[&str]) -> Vec<u8> {
    let mut b = Vec::new();
    for l in block {
        let after = l.split(": ").nth(2).unwrap();
        for w in after.split_whitespace() {
            b.extend(u32::from_str_radix(w, 16).unwrap().to_be_bytes());
        }
    }
    b
}

fn linux_log(op: &str, dir: &str, bytes: &[u8]) -> String {
    let mut s = String::from("[  100.000001] mlx5_core 0000:03:00.0: cmd[5]: start dump\n");
    s += &format!("[  100.000002] mlx5_core 0000:03:00.0: cmd[5]: dump command data {op} {dir}\n");
    for (i, c) in bytes.chunks(16).enumerate() {
        let w: Vec<String> = c
            .chunks(4)
            .map(|x| format!("{:08x}", u32::from_be_bytes(x.try_into().unwrap())))
            .collect();
        s += &format!(
            "[  100.{:06}] mlx5_core 0000:03:00.0: cmd[5]: {:03x}: {}\n",
            i + 3,
            i * 16,
            w.join(" ")
        );
    }
    s += "[  100.999999] mlx5_core 0000:03:00.0: cmd[5]: slot 5 done\n";
    s
}

fn print_hex_dump(bytes: &[u8]) -> String {
    let mut s = String::new();
    for (i, c) in bytes.chunks(16).enumerate() {
        let h: Vec<String> = c.iter().map(|x| format!("{x:02x}")).collect();
        let a: String = c
            .iter()
            .map(|&x| if x.is_ascii_graphic() { x as char } else { '.' })
            .collect();
        s += &format!("{:08x}: {:<47}  {a}\n", i * 16, h.join(" "));
    }
    s
}

#[test]
fn own_hexdump_and_linux_formats_decode_to_the_same_fields() {
    let o = mlx5_stdin(&["trace", "-q", "--scenario", "resize", "--hexdump"], "");
    assert_eq!(o.status.code(), Some(0));
    let text = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut checked = 0;
    for (op, dir) in [
        ("CREATE_CQ(0x400)", "INPUT"),
        ("CREATE_CQ(0x400)", "OUTPUT"),
        ("MODIFY_CQ(0x403)", "INPUT"),
        ("CREATE_EQ(0x301)", "INPUT"),
        ("CREATE_EQ(0x301)", "OUTPUT"),
        ("QUERY_HCA_CAP(0x100)", "OUTPUT"),
    ] {
        {
            let head = format!("dump command data {op} {dir}");
            let at = lines.iter().position(|l| l.trim() == head).unwrap();
            let block: Vec<&str> = lines[at + 1..]
                .iter()
                .take_while(|l| l.trim_start().starts_with("cmd["))
                .copied()
                .collect();
            let own = format!("{}\n{}\n", lines[at], block.join("\n"));
            let a = decode_json(&[], &own);
            let want = fields(&a, 0);
            assert!(!want.is_empty(), "{op} {dir}: nothing decoded");
            let bytes = words_to_bytes(&block);
            let kind = if dir == "INPUT" { "in" } else { "out" };
            let name = op.split('(').next().unwrap();
            let extra: Vec<&str> = if kind == "out" {
                vec!["--as", kind, "--opcode", name]
            } else {
                vec!["--as", kind]
            };
            let b = decode_json(&[], &linux_log(op, dir, &bytes));
            let c = decode_json(&extra, &print_hex_dump(&bytes));
            let hex: String = bytes.iter().map(|x| format!("{x:02x} ")).collect();
            let d = decode_json(&extra, &hex);
            assert_eq!(fields(&b, 0), want, "{op} {dir}: Linux log");
            assert_eq!(fields(&c, 0), want, "{op} {dir}: print_hex_dump");
            assert_eq!(fields(&d, 0), want, "{op} {dir}: plain hex");
            assert_eq!(b["buffers"][0]["format"], "dump_buf");
            assert_eq!(c["buffers"][0]["format"], "print_hex_dump");
            // The trace printed the same fields when it sent the command.
            let trace_dir = if dir == "INPUT" { "in:" } else { "out:" };
            let hdr = lines[..at]
                .iter()
                .rposition(|l| l.starts_with('[') && l.contains(op))
                .unwrap();
            let sect = lines[hdr..at]
                .iter()
                .position(|l| l.trim() == trace_dir)
                .unwrap();
            for l in lines[hdr + sect + 1..at]
                .iter()
                .take_while(|l| l.starts_with("        "))
            {
                // `name[..] (N more elements)` lines carry no value.
                let Some((k, v)) = l.trim().split_once(" = ") else {
                    continue;
                };
                assert_eq!(want.get(k).map(String::as_str), Some(v), "{op} {dir} {k}");
                checked += 1;
            }
        }
    }
    assert!(checked >= 10, "{checked} fields compared with the trace");
}

#[test]
fn cqe_and_eqe_pick_their_variant() {
    let mut cqe = [0u8; 64];
    cqe[55] = 0x05; // syndrome
    cqe[56] = 0x0a; // s_wqe_opcode
    cqe[59] = 0x7e; // qpn low byte
    cqe[63] = 0xd0; // opcode 0xd (requester error), owner 0
    let v = decode_json(&["--as", "cqe"], &print_hex_dump(&cqe));
    let f = fields(&v, 0);
    assert_eq!(f["syndrome"], "0x5");
    assert_eq!(f["qpn"], "0x7e");
    assert!(v["buffers"][0]["what"]
        .as_str()
        .unwrap()
        .starts_with("err_cqe"));
    let mut eqe = [0u8; 64];
    eqe[1] = 0x14; // SRQ limit
    eqe[32 + 27] = 0x42;
    let v = decode_json(&["--as", "eqe"], &print_hex_dump(&eqe));
    let f = fields(&v, 0);
    assert_eq!(f["event_data.qp_events.qpn_rqn_sqn"], "0x42");
    assert!(!f.contains_key("event_data"));
    // A bare context.
    let mut cqc = [0u8; 64];
    cqc[12] = 0x06; // log_cq_size bits 28:24 of dword 3
    let v = decode_json(&["--as", "cqc"], &print_hex_dump(&cqc));
    assert_eq!(fields(&v, 0)["log_cq_size"], "0x6");
}

#[test]
fn refusals() {
    let o = mlx5_stdin(&["decode", "-", "--as", "out"], "00 00 00 00\n");
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--opcode"));
    let o = mlx5_stdin(&["decode", "-"], "0000: 123 45\n");
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("line 1"));
}

#[test]
fn docs_examples_run() {
    assert!(docs_examples("## `decode`") >= 4);
}
