//! `mlx5 peer`: two processes, each a model on its own UDP socket on
//! 127.0.0.1, run rc_pingpong's TCP exchange (one as server, one as
//! client) and ping-pong over the UDP-carried segment; both check every
//! byte and each message's size; the capture re-parses with good ICRCs.
//! The same with 5 % of one side's frames dropped and one corrupted; the
//! same for ud_pingpong's and srq_pingpong's exchanges and loops.

use std::net::{TcpListener, UdpSocket};
use std::process::{Command, Stdio};

use mlx5_sim::wire::{parse, read_pcap, LinkType};
use serde_json::Value;

fn free_udp() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn free_tcp() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Run a server and a client `mlx5 peer`; their JSON documents.
fn pair(size: &str, iters: &str, client_faults: &[&str], pcap: &std::path::Path) -> (Value, Value) {
    pair_of(&[], size, iters, client_faults, pcap)
}

/// [`pair`] with `program` options given to both sides.
fn pair_of(
    program: &[&str],
    size: &str,
    iters: &str,
    client_faults: &[&str],
    pcap: &std::path::Path,
) -> (Value, Value) {
    let (ua, ub, tcp) = (free_udp(), free_udp(), free_tcp());
    let common = |host: &str, seed: &str, local: u16, remote: u16| -> Vec<String> {
        [
            "--json",
            "-q",
            "--seed",
            seed,
            "peer",
            "--host",
            host,
            "--size",
            size,
            "--iters",
            iters,
            "--timeout",
            "60",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([
            "--udp-local".into(),
            format!("127.0.0.1:{local}"),
            "--udp-remote".into(),
            format!("127.0.0.1:{remote}"),
        ])
        .chain(program.iter().map(|s| s.to_string()))
        .collect()
    };
    let mut sargs = common("1", "11", ua, ub);
    sargs.extend(["--listen".into(), format!("127.0.0.1:{tcp}")]);
    let server = Command::new(env!("CARGO_BIN_EXE_mlx5"))
        .args(&sargs)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut cargs = common("2", "22", ub, ua);
    cargs.extend(["--connect".into(), format!("127.0.0.1:{tcp}")]);
    cargs.extend(client_faults.iter().map(|s| s.to_string()));
    cargs.extend(["--pcap".into(), pcap.display().to_string()]);
    let client = Command::new(env!("CARGO_BIN_EXE_mlx5"))
        .args(&cargs)
        .output()
        .unwrap();
    let server = server.wait_with_output().unwrap();
    let doc = |o: &std::process::Output| -> Value {
        serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&o.stdout)))
    };
    let (s, c) = (doc(&server), doc(&client));
    assert!(server.status.success(), "server: {s}");
    assert!(client.status.success(), "client: {c}");
    (s["peer"].clone(), c["peer"].clone())
}

fn check_capture(pcap: &std::path::Path) -> usize {
    let bytes = std::fs::read(pcap).unwrap();
    let (_, records) = read_pcap(&bytes[..]).unwrap();
    for r in &records {
        let p = parse(LinkType::Ethernet, &r.data).unwrap();
        assert!(p.icrc_ok);
    }
    records.len()
}

#[test]
fn two_models_play_rc_pingpong_over_udp_and_tcp() {
    let pcap = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("peer-rc.pcap");
    let (s, c) = pair("4096", "5", &[], &pcap);
    for p in [&s, &c] {
        assert_eq!(p["messages_checked"], 5, "{p}");
        assert_eq!(p["model"]["wire_dropped"], 0, "{p}");
    }
    assert_eq!(s["role"], "server");
    assert_eq!(c["role"], "client");
    // 5 × 4 packets each way, each message ACKed at least once.
    let frames = check_capture(&pcap);
    assert!(frames >= 2 * 5 * 4 + 10, "{frames}");
}

#[test]
fn model_frame_faults_still_pass() {
    let pcap = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("peer-faults.pcap");
    let (_, c) = pair(
        "1024",
        "40",
        &["--drop", "0.05", "--corrupt-frame", "3"],
        &pcap,
    );
    assert_eq!(c["messages_checked"], 40, "{c}");
    assert_eq!(c["wire"]["corrupted"], 1, "{c}");
    assert!(c["wire"]["dropped"].as_u64().unwrap() > 0, "{c}");
    check_capture(&pcap);
}

/// Every frame of the capture: its BTH opcode.
fn opcodes(pcap: &std::path::Path) -> Vec<u8> {
    let bytes = std::fs::read(pcap).unwrap();
    let (_, records) = read_pcap(&bytes[..]).unwrap();
    records
        .iter()
        .map(|r| {
            let p = parse(LinkType::Ethernet, &r.data).unwrap();
            assert!(p.icrc_ok);
            p.packet.bth.opcode
        })
        .collect()
}

#[test]
fn two_models_play_ud_pingpong_with_its_page_check() {
    let pcap = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("peer-ud.pcap");
    let prog = ["--program", "ud-pingpong", "--chk"];
    let (s, c) = pair_of(&prog, "1001", "10", &[], &pcap);
    for p in [&s, &c] {
        assert_eq!(p["program"], "ud-pingpong", "{p}");
        assert_eq!(p["messages_checked"], 10, "{p}");
        assert_eq!(p["size"], 1001, "{p}");
    }
    // One UD SEND_ONLY (0x64) per message, no ACK: UD is unacknowledged.
    let ops = opcodes(&pcap);
    assert_eq!(ops, vec![0x64; 20]);
}

#[test]
fn two_models_play_srq_pingpong_on_four_qps() {
    let pcap = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("peer-srq.pcap");
    let prog = ["--program", "srq-pingpong", "--qps", "4"];
    let (s, c) = pair_of(&prog, "3000", "16", &[], &pcap);
    for p in [&s, &c] {
        assert_eq!(p["program"], "srq-pingpong", "{p}");
        assert_eq!(p["qps"], 4, "{p}");
        let per: Vec<u64> = p["received_per_qp"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(per.len(), 4, "{p}");
        // At least the 16 round trips, spread over every QP.
        assert!(
            per.iter().sum::<u64>() >= 16 && per.iter().all(|&n| n >= 4),
            "{p}"
        );
        assert_eq!(p["messages_checked"], per.iter().sum::<u64>(), "{p}");
    }
    // 3000 bytes at MTU 1024: SEND_FIRST, MIDDLE, LAST, and ACKs.
    let ops = opcodes(&pcap);
    for op in [0x00, 0x01, 0x02, 0x11] {
        assert!(ops.contains(&op), "{op:#x} missing");
    }
}

#[test]
fn srq_pingpong_survives_the_model_frame_faults() {
    let pcap = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("peer-srq-faults.pcap");
    let prog = ["--program", "srq-pingpong", "--qps", "4"];
    let faults = ["--drop", "0.05", "--corrupt-frame", "3"];
    let (s, c) = pair_of(&prog, "1024", "40", &faults, &pcap);
    assert!(s["messages_checked"].as_u64().unwrap() >= 40, "{s}");
    assert!(c["messages_checked"].as_u64().unwrap() >= 40, "{c}");
    assert_eq!(c["wire"]["corrupted"], 1, "{c}");
    assert!(c["wire"]["dropped"].as_u64().unwrap() > 0, "{c}");
    assert!(c["model"]["retransmissions"].as_u64().unwrap() > 0, "{c}");
    check_capture(&pcap);
}

/// `mlx5 peer` with `args` alone: it must fail, saying `want`.
fn refused(args: &[&str], want: &str) {
    let (ua, ub) = (free_udp(), free_udp());
    let o = Command::new(env!("CARGO_BIN_EXE_mlx5"))
        .args(["-q", "peer", "--timeout", "5"])
        .args(["--udp-local", &format!("127.0.0.1:{ua}")])
        .args(["--udp-remote", &format!("127.0.0.1:{ub}")])
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stderr).to_string() + &String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success(), "{text}");
    assert!(text.contains(want), "{want:?} not in: {text}");
}

#[test]
fn ud_sizes_above_the_mtu_and_misplaced_options_are_refused() {
    let to = format!("127.0.0.1:{}", free_tcp());
    refused(
        &[
            "--program",
            "ud-pingpong",
            "--size",
            "4097",
            "--connect",
            &to,
        ],
        "larger than the port's MTU",
    );
    refused(&["--chk", "--connect", &to], "--chk is ud-pingpong's");
    refused(
        &[
            "--program",
            "srq-pingpong",
            "--qps",
            "256",
            "--connect",
            &to,
        ],
        "256",
    );
}

#[test]
fn srq_pingpong_with_a_different_qp_count_is_refused() {
    let (ua, ub, tcp) = (free_udp(), free_udp(), free_tcp());
    let side = |qps: &str, local: u16, remote: u16, role: &str| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_mlx5"));
        c.args(["-q", "peer", "--program", "srq-pingpong", "--timeout", "5"])
            .args(["--qps", qps, role, &format!("127.0.0.1:{tcp}")])
            .args(["--udp-local", &format!("127.0.0.1:{local}")])
            .args(["--udp-remote", &format!("127.0.0.1:{remote}")]);
        c
    };
    let server = side("4", ua, ub, "--listen")
        .args(["--host", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let client = side("2", ub, ua, "--connect").output().unwrap();
    let server = server.wait_with_output().unwrap();
    assert!(!server.status.success() && !client.status.success());
    let text = String::from_utf8_lossy(&server.stderr);
    assert!(text.contains("names 2 QPs, the model has 4"), "{text}");
}

/// `mlx5 peer` and `mlx5 perf` share their link options: the same ranges,
/// refused the same way (exit 2), the same `--connect`/`--listen` rule, and
/// the same help section.
#[test]
fn peer_and_perf_take_the_same_link_options() {
    let udp = [
        "--udp-local",
        "127.0.0.1:47341",
        "--udp-remote",
        "127.0.0.1:47342",
    ];
    let to = ["--connect", "127.0.0.1:47343"];
    let cases: [(&[&str], &str); 7] = [
        (&["--host", "0"], "0 is not in 1..=254"),
        (&["--host", "255"], "255 is not in 1..=254"),
        (&["--drop", "1.5"], "a fraction from 0 to 1"),
        (&["--timeout", "0"], "0 is not in 1..=3600"),
        (&["--timeout", "3601"], "3601 is not in 1..=3600"),
        (&["--listen", "127.0.0.1:47344"], "cannot be used with"),
        (&["--corrupt-frame", "x"], "for '--corrupt-frame <N>'"),
    ];
    for cmd in [&["peer"][..], &["perf", "write-lat"]] {
        let mlx5 = |args: &[&str]| {
            Command::new(env!("CARGO_BIN_EXE_mlx5"))
                .args(cmd)
                .args(args)
                .output()
                .unwrap()
        };
        for (bad, want) in cases {
            let o = mlx5(&[&udp[..], &to, bad].concat());
            let text = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{cmd:?} {bad:?}: {text}");
            assert!(
                text.contains(want),
                "{cmd:?} {bad:?}: {want:?} not in {text}"
            );
        }
        let o = mlx5(&udp);
        let text = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{cmd:?}: {text}");
        assert!(text.contains("--listen <ADDR:PORT>"), "{cmd:?}: {text}");
        let help = String::from_utf8_lossy(&mlx5(&["--help"]).stdout).to_string();
        let link = help.split("Link options:").nth(1).unwrap_or_default();
        for opt in [
            "--connect <ADDR:PORT>",
            "--listen <ADDR:PORT>",
            "--udp-local <ADDR:PORT>",
            "--udp-remote <ADDR:PORT>",
            "--host <N>",
            "--drop <FRACTION>",
            "--corrupt-frame <N>",
            "--pcap <FILE>",
            "--timeout <SECONDS>",
        ] {
            assert!(
                link.contains(opt),
                "{cmd:?}: {opt} not under Link options in {help}"
            );
        }
    }
}
