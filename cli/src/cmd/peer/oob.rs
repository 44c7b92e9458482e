//! The out-of-band exchange of rdma-core's `ibv_rc_pingpong` (and
//! `ibv_ud_pingpong`): one TCP connection, each side's address as a fixed
//! 52-byte record `LLLL:QQQQQQ:PPPPPP:GGGG…` (LID, QPN, PSN in lowercase
//! hex, the 16 GID bytes as 32 hex digits in wire order) ending in a NUL,
//! then the client's `done` and a NUL (rdma-core
//! `libibverbs/examples/rc_pingpong.c`, `pingpong.c`). The client writes
//! first; the server connects its QP before it answers. Each record goes
//! out in one write: the programs read each with a single `read()`.

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

    /// Parse a record (the NUL and anything after it ignored).
    pub fn parse(rec: &[u8]) -> Option<Dest> {
        let end = rec.iter().position(|&b| b == 0).unwrap_or(rec.len());
        let text = std::str::from_utf8(&rec[..end]).ok()?;
        let mut it = text.split(':');
        let lid = u16::from_str_radix(it.next()?, 16).ok()?;
        let qpn = u32::from_str_radix(it.next()?, 16).ok()?;
        let psn = u32::from_str_radix(it.next()?, 16).ok()?;
        let g = it.next()?;
        if it.next().is_some() || g.len() != 32 || qpn > 0xff_ffff || psn > 0xff_ffff {
            return None;
        }
        let mut gid = [0u8; 16];
        for (i, b) in gid.iter_mut().enumerate() {
            *b = u8::from_str_radix(g.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(Dest { lid, qpn, psn, gid })
    }
}

/// Read exactly `buf.len()` bytes, or fail (EOF, timeout).
fn read_all(s: &mut TcpStream, buf: &mut [u8]) -> std::io::Result<()> {
    s.read_exact(buf)
}

/// The client side: connect to `server` (retrying once a second while the
/// server is not listening yet, until `deadline`), send `me`, read the
/// server's record, send `done`.
pub fn client(server: SocketAddr, me: &Dest, deadline: Instant) -> Result<Dest, CliError> {
    let mut last = String::from("no attempt");
    while Instant::now() < deadline {
        match client_once(server, me) {
            Ok(d) => return Ok(d),
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    Err(CliError::failed(
        format!("the address exchange with {server} did not complete: {last}"),
        "is the peer program running as a server (started without a host name) and reachable at that address?",
    ))
}

fn client_once(server: SocketAddr, me: &Dest) -> std::io::Result<Dest> {
    let mut s = TcpStream::connect_timeout(&server, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    s.write_all(&me.record())?;
    let mut rec = [0u8; RECORD_LEN];
    read_all(&mut s, &mut rec)?;
    s.write_all(DONE)?;
    Dest::parse(&rec).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not an address record: {:?}", String::from_utf8_lossy(&rec)),
        )
    })
}

/// The server side: accept one connection on `listener`, read the
/// client's record, call `connect` with it (the QP goes to RTR/RTS before
/// the answer, as rc_pingpong's server does), send `me`, read `done`.
pub fn server(
    listener: &TcpListener,
    deadline: Instant,
    me: &Dest,
    connect: impl FnOnce(&Dest) -> Result<(), CliError>,
) -> Result<Dest, CliError> {
    let io = |e: std::io::Error| {
        CliError::failed(
            format!("the address exchange failed: {e}"),
            "the peer program must be the client (started with this host's address)",
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
    // A port forward may connect long before the program writes (QEMU's
    // guestfwd connects when QEMU starts): wait until the deadline.
    let left = deadline.saturating_duration_since(Instant::now());
    s.set_read_timeout(Some(left.max(Duration::from_secs(1))))
        .map_err(io)?;
    let mut rec = [0u8; RECORD_LEN];
    read_all(&mut s, &mut rec).map_err(io)?;
    let peer = Dest::parse(&rec).ok_or_else(|| {
        CliError::failed(
            format!("not an address record: {:?}", String::from_utf8_lossy(&rec)),
            "the peer is not running ibv_rc_pingpong's exchange",
        )
    })?;
    connect(&peer)?;
    s.write_all(&me.record()).map_err(io)?;
    let mut done = [0u8; DONE.len()];
    read_all(&mut s, &mut done).map_err(io)?;
    if &done != DONE {
        return Err(CliError::failed(
            format!("expected done, got {:?}", String::from_utf8_lossy(&done)),
            "the peer is not running ibv_rc_pingpong's exchange",
        ));
    }
    Ok(peer)
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
        assert_eq!(Dest::parse(&r), Some(d));
        assert_eq!(Dest::parse(b"0000:1000000:000100:00"), None);
        assert_eq!(Dest::parse(b"garbage"), None);
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
            server(&l, Instant::now() + Duration::from_secs(10), &b, |peer| {
                assert_eq!(peer.qpn, 0x11);
                Ok(())
            })
            .unwrap()
        });
        let got = client(at, &a, Instant::now() + Duration::from_secs(10)).unwrap();
        assert_eq!(got, b);
        assert_eq!(t.join().unwrap(), a);
    }
}
