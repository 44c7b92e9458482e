use super::*;

fn sample() -> KeyRecord {
    let mut gid = [0u8; 16];
    gid[10] = 0xff;
    gid[11] = 0xff;
    gid[12..].copy_from_slice(&[198, 18, 0, 1]);
    KeyRecord {
        lid: 0,
        out_reads: 0x10,
        qpn: 0x11,
        psn: 0xabcdef,
        rkey: 0x1234_5678,
        vaddr: 0x5555_dead_beef_0040,
        gid,
        srqn: 0,
    }
}

#[test]
fn key_record_has_perftests_form_and_round_trips() {
    let r = sample().encode();
    let want = "0000:0010:000011:abcdef:12345678:5555deadbeef0040:\
                00:00:00:00:00:00:00:00:00:00:ff:ff:c6:12:00:01:00000000:";
    assert_eq!(want.len(), KEY_LEN - 1);
    assert_eq!(&r[..KEY_LEN - 1], want.as_bytes());
    assert_eq!(r[KEY_LEN - 1], 0);
    assert_eq!(KeyRecord::decode(&r), Ok(sample()));
}

#[test]
fn hostile_key_records_are_refused_with_a_reason() {
    let good = sample().encode();
    // Too short, not NUL-terminated, not text, a field too wide, a
    // non-hex digit, a missing trailing ':'.
    assert!(KeyRecord::decode(&good[..58])
        .unwrap_err()
        .contains("108 bytes"));
    let mut no_nul = good;
    no_nul[KEY_LEN - 1] = b'x';
    assert!(KeyRecord::decode(&no_nul).unwrap_err().contains("NUL"));
    let mut binary = good;
    binary[3] = 0xff;
    assert!(KeyRecord::decode(&binary).unwrap_err().contains("ASCII"));
    let mut wide = good;
    wide[4] = b'0'; // "00000010:..." merges LID and out_reads
    assert!(KeyRecord::decode(&wide).is_err());
    let mut not_hex = good;
    not_hex[12] = b'g';
    let e = KeyRecord::decode(&not_hex).unwrap_err();
    assert!(e.contains("field 3"), "{e}");
    let mut no_tail = good;
    no_tail[KEY_LEN - 2] = b'0';
    assert!(KeyRecord::decode(&no_tail).is_err());
    assert!(KeyRecord::decode(&[0u8; KEY_LEN]).is_err());
    // The 59-byte record without a GID is not the RoCE form.
    let mut short = [0u8; KEY_LEN];
    short[..58].copy_from_slice(b"0000:0001:000011:abcdef:12345678:5555deadbeef0040:00000000");
    assert!(KeyRecord::decode(&short).is_err());
}

#[test]
fn every_single_byte_change_is_decoded_or_refused_without_panic() {
    let good = sample().encode();
    for i in 0..KEY_LEN {
        for b in [0u8, b':', b'f', b'G', 0x80, b' '] {
            let mut m = good;
            m[i] = b;
            let _ = KeyRecord::decode(&m);
        }
    }
}

#[test]
fn versions_and_mtus() {
    let v = encode_version(VERSION);
    assert_eq!(&v[..5], b"6.06\0");
    assert_eq!(decode_version(&v), Ok("6.06".to_string()));
    assert!(decode_version(&encode_version("5.60"))
        .unwrap_err()
        .contains("older than 5.70"));
    assert!(decode_version(&encode_version("abc"))
        .unwrap_err()
        .contains("not a number"));
    assert!(decode_version(&[0xff; VERSION_LEN]).is_err());
    assert_eq!(encode_mtu(Mtu::B1024), *b"3\0");
    assert_eq!(decode_mtu(b"3\0"), Ok(Mtu::B1024));
    assert_eq!(decode_mtu(b"5\0"), Ok(Mtu::B4096));
    assert!(decode_mtu(b"6\0").is_err());
    assert!(decode_mtu(b"33").is_err());
}

#[test]
fn bandwidth_reports_are_big_endian_and_round_trip() {
    let r = BwReport {
        size: 65536,
        iters: 100,
        bw_peak: 12.5,
        bw_avg: 11.25,
        msg_rate: 0.000172,
    };
    let m = r.encode();
    assert_eq!(m[0], [0, 0, 0, 0, 0, 1, 0, 0]);
    assert_eq!(m[1], [0, 0, 0, 0, 0, 0, 0, 100]);
    // 12.5 is 0x4029000000000000.
    assert_eq!(m[2], [0x40, 0x29, 0, 0, 0, 0, 0, 0]);
    assert_eq!(BwReport::decode(&m), r);
}

#[test]
fn client_and_server_step_in_lock_step_over_loopback() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = l.local_addr().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut theirs = sample();
    theirs.qpn = 0x22;
    let t = std::thread::spawn(move || {
        let mut c = Conn::accept(&l, deadline).unwrap();
        assert!(!c.is_client());
        let v = c.version().unwrap();
        let o = c.opening(v, Mtu::B4096).unwrap();
        let got = c.hand_shake(&theirs).unwrap();
        let rep = c.reports(&BwReport::default()).unwrap();
        c.close(&theirs).unwrap();
        (o, got, rep)
    });
    let (mut c, v) = Conn::connect(at, deadline).unwrap();
    let o = c.opening(v, Mtu::B1024).unwrap();
    assert_eq!(o.mtu, Mtu::B1024);
    assert_eq!(o.version, VERSION);
    assert_eq!(c.hand_shake(&sample()).unwrap(), theirs);
    let mine = BwReport {
        size: 2,
        iters: 7,
        ..BwReport::default()
    };
    assert_eq!(c.reports(&mine).unwrap(), BwReport::default());
    c.close(&sample()).unwrap();
    let (so, sgot, srep) = t.join().unwrap();
    assert_eq!(srep, mine);
    assert_eq!(so.mtu, Mtu::B1024, "each side keeps the smaller MTU");
    assert_eq!(sgot, sample());
}

#[test]
fn a_peer_that_is_not_perftest_is_refused() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = l.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        let mut s = TcpStream::connect(at).unwrap();
        // rc_pingpong's 52-byte record where perftest's version goes.
        s.write_all(b"0000:0000aa:000100:00000000000000000000ffffc6120009\0")
            .unwrap();
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
    });
    let mut c = Conn::accept(&l, Instant::now() + Duration::from_secs(10)).unwrap();
    let e = c.version().unwrap_err();
    assert!(format!("{e:?}").contains("version"), "{e:?}");
    drop(c);
    t.join().unwrap();
}
