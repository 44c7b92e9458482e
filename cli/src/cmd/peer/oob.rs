//! The out-of-band exchange of rdma-core's `ibv_rc_pingpong`,
//! `ibv_ud_pingpong` and `ibv_srq_pingpong`: one TCP connection, each
//! side's address as fixed 52-byte records `LLLL:QQQQQQ:PPPPPP:GGGG…`
//! (LID, QPN, PSN in lowercase hex, the 16 GID bytes as 32 hex digits in
//! wire order) each ending in a NUL, then the client's `done` and a NUL
//! (rdma-core `libibverbs/examples/rc_pingpong.c`, `ud_pingpong.c`,
//! `srq_pingpong.c`, `pingpong.c`). rc and ud send one record each way;
//! srq_pingpong always sends 256 (its `MAX_QP`), all-zero past its QPs.
//! The client writes first; the server connects its QPs before it
//! answers. Each side's records go out in one write: rc_pingpong and
//! ud_pingpong read a record with a single `read()`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::common::error::CliError;

/// Bytes of one address record, the NUL included.
pub const RECORD_LEN: usize = 52;
/// The client's closing message, the NUL included.
pub const DONE: &[u8; 5] = b"done\0";

/// One side's address as the record carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dest {
    /// LID (0 on RoCE).
    pub lid: u16,
    /// QP number (24 bits).
    pub qpn: u32,
    /// First PSN (24 bits).
    pub psn: u32,
    /// GID, in wire order.
    pub gid: [u8; 16],
}

impl Dest {
    /// The 52-byte record.
    pub fn record(&self) -> [u8; RECORD_LEN] {
        let mut gid = String::with_capacity(32);
        for b in self.gid {
            gid.push_str(&format!("{b:02x}"));
        }
        let text = format!(
            "{:04x}:{:06x}:{:06x}:{gid}",
            self.lid,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff
        );
        let mut out = [0u8; RECORD_LEN];
        out[..RECORD_LEN - 1].copy_from_slice(text.as_bytes());
        out
    }

    /// Parse a record: exactly `LLLL:QQQQQQ:PPPPPP:` and 32 GID digits,
    /// lowercase or uppercase hex, then a NUL (the form `%04x:%06x:%06x:%s`
    /// gives every value in range). Anything else is refused with what is
    /// wrong with it.
    pub fn parse(rec: &[u8]) -> Result<Dest, String> {
        let shown = || format!("{:?}", String::from_utf8_lossy(rec));
        if rec.len() != RECORD_LEN {
            return Err(format!(
                "{} bytes, not {RECORD_LEN}: {}",
                rec.len(),
                shown()
            ));
        }
        if rec[RECORD_LEN - 1] != 0 {
            return Err(format!("no NUL at byte {}: {}", RECORD_LEN - 1, shown()));
        }
        let text = &rec[..RECORD_LEN - 1];
        let mut fields = text.split(|&b| b == b':');
        let mut field = |name: &str, digits: usize| -> Result<u128, String> {
            let f = fields
                .next()
                .ok_or_else(|| format!("no {name} field: {}", shown()))?;
            if f.len() != digits || !f.iter().all(u8::is_ascii_hexdigit) {
                return Err(format!(
                    "the {name} field is not {digits} hex digits: {}",
                    shown()
                ));
            }
            // ASCII hex digits only, checked above.
            let t = std::str::from_utf8(f).map_err(|_| shown())?;
            u128::from_str_radix(t, 16).map_err(|e| format!("the {name} field: {e}"))
        };
        let lid = field("LID", 4)? as u16;
        let qpn = field("QPN", 6)? as u32;
        let psn = field("PSN", 6)? as u32;
        let gid = field("GID", 32)?.to_be_bytes();
        if fields.next().is_some() {
            return Err(format!("more than four fields: {}", shown()));
        }
        Ok(Dest { lid, qpn, psn, gid })
    }

    /// True for the all-zero record srq_pingpong sends for the QPs it
    /// does not have.
    pub fn is_unused(&self) -> bool {
        *self == Dest::UNUSED
    }

    /// The all-zero record.
    pub const UNUSED: Dest = Dest {
        lid: 0,
        qpn: 0,
        psn: 0,
        gid: [0; 16],
    };
}

/// Parse `count` records from `bytes` (`count` × [`RECORD_LEN`]).
pub fn parse_records(bytes: &[u8]) -> Result<Vec<Dest>, String> {
    bytes
        .chunks(RECORD_LEN)
        .enumerate()
        .map(|(i, r)| Dest::parse(r).map_err(|e| format!("record {}: {e}", i + 1)))
        .collect()
}

/// The bytes of an exchange of `count` records: `mine`, then all-zero
/// records up to `count` (srq_pingpong always sends its `MAX_QP`).
fn records(mine: &[Dest], count: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(count * RECORD_LEN);
    for i in 0..count {
        out.extend_from_slice(&mine.get(i).copied().unwrap_or(Dest::UNUSED).record());
    }
    out
}

fn invalid(e: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, e)
}

/// The client side: connect to `server` (retrying once a second while the
/// server is not listening yet, until `deadline`), send `mine` padded to
/// `count` records, read the server's `count` records, send `done`.
pub fn client(
    server: SocketAddr,
    mine: &[Dest],
    count: usize,
    deadline: Instant,
) -> Result<Vec<Dest>, CliError> {
    let mut last = String::from("no attempt");
    while Instant::now() < deadline {
        match client_once(server, mine, count) {
            Ok(d) => return Ok(d),
            // The server answered with something that is not a record:
            // trying again would not change that.
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                return Err(CliError::failed(
                    format!("the address exchange with {server}: {e}"),
                    "the peer is not running the chosen program's exchange (--program)",
                ));
            }
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    Err(CliError::failed(
        format!("the address exchange with {server} did not complete: {last}"),
        "is the peer program running as a server (started without a host name) and reachable at that address?",
    ))
}

fn client_once(server: SocketAddr, mine: &[Dest], count: usize) -> std::io::Result<Vec<Dest>> {
    let mut s = TcpStream::connect_timeout(&server, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    // One write: rc_pingpong and ud_pingpong read each record with one read().
    s.write_all(&records(mine, count))?;
    let mut got = vec![0u8; count * RECORD_LEN];
    s.read_exact(&mut got)?;
    s.write_all(DONE)?;
    parse_records(&got).map_err(invalid)
}

/// The server side: accept one connection on `listener`, read the
/// client's `count` records, call `connect` with them (the QPs go to
/// RTR/RTS before the answer, as the programs' servers do), send `mine`
/// padded to `count` records, read `done`.
pub fn server(
    listener: &TcpListener,
    deadline: Instant,
    mine: &[Dest],
    count: usize,
    connect: impl FnOnce(&[Dest]) -> Result<(), CliError>,
) -> Result<Vec<Dest>, CliError> {
    let io = |e: std::io::Error| {
        CliError::failed(
            format!("the address exchange failed: {e}"),
            "the peer program must be the client (started with this host's address)",
        )
    };
    let not_ours = |e: String| {
        CliError::failed(
            format!("the address exchange: {e}"),
            "the peer is not running the chosen program's exchange (--program)",
        )
    };
    listener.set_nonblocking(true).map_err(io)?;
    let mut s = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return Err(CliError::failed(
                        "no client connected before the deadline (--timeout)",
                        "start the program as a client with this host's address",
                    ));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(io(e)),
        }
    };
    s.set_nonblocking(false).map_err(io)?;
    // A port forward may connect long before the program writes: wait
    // until the deadline.
    let left = deadline.saturating_duration_since(Instant::now());
    s.set_read_timeout(Some(left.max(Duration::from_secs(1))))
        .map_err(io)?;
    let mut got = vec![0u8; count * RECORD_LEN];
    s.read_exact(&mut got).map_err(io)?;
    let peers = parse_records(&got).map_err(not_ours)?;
    connect(&peers)?;
    s.write_all(&records(mine, count)).map_err(io)?;
    let mut done = [0u8; DONE.len()];
    s.read_exact(&mut done).map_err(io)?;
    if &done != DONE {
        return Err(not_ours(format!(
            "expected done, got {:?}",
            String::from_utf8_lossy(&done)
        )));
    }
    Ok(peers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_match_rdma_cores_form() {
        let mut gid = [0u8; 16];
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12..].copy_from_slice(&[198, 18, 0, 9]);
        let d = Dest {
            lid: 0,
            qpn: 0xaa,
            psn: 0x100,
            gid,
        };
        let r = d.record();
        assert_eq!(
            &r[..],
            &b"0000:0000aa:000100:00000000000000000000ffffc6120009\0"[..]
        );
        assert_eq!(Dest::parse(&r), Ok(d));
    }

    #[test]
    fn client_and_server_exchange_over_loopback() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        let a = Dest {
            lid: 0,
            qpn: 0x11,
            psn: 0xabcdef,
            gid: [1; 16],
        };
        let b = Dest {
            lid: 0,
            qpn: 0x22,
            psn: 0x123456,
            gid: [2; 16],
        };
        let t = std::thread::spawn(move || {
            server(
                &l,
                Instant::now() + Duration::from_secs(10),
                &[b],
                1,
                |peer| {
                    assert_eq!(peer[0].qpn, 0x11);
                    Ok(())
                },
            )
            .unwrap()
        });
        let got = client(at, &[a], 1, Instant::now() + Duration::from_secs(10)).unwrap();
        assert_eq!(got, vec![b]);
        assert_eq!(t.join().unwrap(), vec![a]);
    }

    fn rec(text: &str) -> Vec<u8> {
        let mut v = text.as_bytes().to_vec();
        v.push(0);
        v
    }

    #[test]
    fn malformed_records_are_refused_with_the_reason() {
        let good = "0000:0000aa:000100:00000000000000000000ffffc6120009";
        assert!(Dest::parse(&rec(good)).is_ok());
        assert_eq!(Dest::parse(&rec(&good.to_uppercase())).unwrap().qpn, 0xaa);
        let cases: &[(&[u8], &str)] = &[
            (b"", "0 bytes"),
            (b"garbage", "7 bytes"),
            (&[0xff; RECORD_LEN], "no NUL"),
            (&[0; RECORD_LEN], "LID field is not 4 hex digits"),
            (
                &rec("0000:1000000:00100:00000000000000000000ffffc6120009"),
                "QPN field is not 6",
            ),
            (
                &rec("000g:0000aa:000100:00000000000000000000ffffc6120009"),
                "LID field",
            ),
            (
                &rec("0000:0000aa:-00100:00000000000000000000ffffc6120009"),
                "PSN field",
            ),
            (
                &rec("0000:0000aa:000100:00000000000000000000ffffc612000:"),
                "GID field",
            ),
            (
                &rec("0000:0000aa:000100+00000000000000000000ffffc6120009"),
                "PSN field",
            ),
            (
                &rec("0000:0000aa:000100:00000000000000000000ffffc61200\u{e9}"),
                "GID field",
            ),
        ];
        for (input, want) in cases {
            let e = Dest::parse(input).expect_err(want);
            assert!(e.contains(want), "{e:?} lacks {want:?}");
        }
        // Multi-byte UTF-8 where a digit should be.
        let mut r = rec(good);
        r[5..7].copy_from_slice("é".as_bytes());
        assert!(Dest::parse(&r).unwrap_err().contains("QPN field"));
    }

    #[test]
    fn a_run_of_records_names_the_bad_one() {
        let d = Dest {
            lid: 0,
            qpn: 1,
            psn: 2,
            gid: [3; 16],
        };
        let mut bytes = records(&[d], 4);
        assert_eq!(bytes.len(), 4 * RECORD_LEN);
        let got = parse_records(&bytes).unwrap();
        assert_eq!(got[0], d);
        assert!(got[1..].iter().all(Dest::is_unused));
        bytes[2 * RECORD_LEN + 3] = b'x';
        let e = parse_records(&bytes).unwrap_err();
        assert!(e.starts_with("record 3: the LID field"), "{e}");
    }

    #[test]
    fn a_server_that_answers_garbage_is_refused_at_once() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut got = [0u8; RECORD_LEN];
            s.read_exact(&mut got).unwrap();
            s.write_all(&[b'z'; RECORD_LEN]).unwrap();
            let mut done = [0u8; DONE.len()];
            let _ = s.read_exact(&mut done);
        });
        let started = Instant::now();
        let e = client(at, &[Dest::UNUSED], 1, started + Duration::from_secs(20)).unwrap_err();
        t.join().unwrap();
        assert!(e.to_string().contains("no NUL"), "{e}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "retried garbage"
        );
    }

    #[test]
    fn a_client_that_sends_garbage_is_refused_before_connecting() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let mut s = TcpStream::connect(at).unwrap();
            s.write_all(b"0000:0000aa:000100:not-a-gid-at-all-but-long-enough\0")
                .unwrap();
        });
        let e = server(
            &l,
            Instant::now() + Duration::from_secs(10),
            &[Dest::UNUSED],
            1,
            |_| panic!("connected toward a malformed record"),
        )
        .unwrap_err();
        t.join().unwrap();
        assert!(e.to_string().contains("GID field"), "{e}");
    }
}
