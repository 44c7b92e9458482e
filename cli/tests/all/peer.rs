//! `mlx5 peer`: two processes, each a model on its own UDP socket on
//! 127.0.0.1, run rc_pingpong's TCP exchange (one as server, one as
//! client) and ping-pong over the UDP-carried segment; both check every
//! byte and each message's size; the capture re-parses with good ICRCs.
//! The same with 5 % of one side's frames dropped and one corrupted.

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
