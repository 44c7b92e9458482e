//! perftest's out-of-band exchange without rdma_cm (linux-rdma/perftest
//! `src/perftest_communication.c`): one TCP connection on which every step
//! is lock-step and symmetric — the client writes then reads, the server
//! reads then writes, the same number of bytes each way, each message in
//! one write (perftest reads each with a single `read()`).
//!
//! The messages, in the order a test uses them:
//! - the version, 16 bytes of NUL-padded text (perftest refuses a peer
//!   below 5.70; this side sends `6.06`, the version perftest 4.5-0.17
//!   builds as);
//! - the system data, two 4-byte big-endian integers each in its own
//!   step (the cycle buffer, then the cache line size);
//! - the MTU, the verbs MTU enum as one decimal digit and a NUL;
//! - the key record ("hand shake"), 108 bytes on RoCE (with a GID):
//!   `LLLL:OOOO:QQQQQQ:PPPPPP:RRRRRRRR:VVVVVVVVVVVVVVVV:g0:…:g15:SSSSSSSS:`
//!   and a NUL — LID, outstanding READ/atomic depth, QPN, PSN, R_Key and
//!   address of the buffer the peer targets, the 16 GID bytes, SRQ number,
//!   lowercase hex at fixed widths;
//! - at the close, one more key record, then `done` and a NUL each way,
//!   written and not read.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use mlx5_driver::qp::Mtu;

use crate::common::error::CliError;

/// Bytes of the version message.
pub const VERSION_LEN: usize = 16;
/// The version this side announces.
pub const VERSION: &str = "6.06";
/// The oldest version perftest talks to, and so does this side.
pub const MIN_VERSION: f64 = 5.70;
/// Bytes of a key record with a GID, the NUL included.
pub const KEY_LEN: usize = 108;
/// The closing message, the NUL included.
pub const DONE: &[u8; 5] = b"done\0";

/// One side's key record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRecord {
    /// LID (0 on RoCE).
    pub lid: u16,
    /// READ/atomic requests this side accepts outstanding (the peer's
    /// `max_rd_atomic`).
    pub out_reads: u16,
    /// QP number (24 bits).
    pub qpn: u32,
    /// First PSN (24 bits).
    pub psn: u32,
    /// Remote key of the buffer the peer targets.
    pub rkey: u32,
    /// Address of that buffer.
    pub vaddr: u64,
    /// GID, in wire order.
    pub gid: [u8; 16],
    /// SRQ number (0 unless XRC or DC).
    pub srqn: u32,
}

/// The fixed field widths of a key record, in hex digits: LID, out_reads,
/// QPN, PSN, R_Key, address, 16 GID bytes, SRQ number.
const WIDTHS: [usize; 23] = [
    4, 4, 6, 6, 8, 16, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 8,
];

impl KeyRecord {
    /// The 108-byte record.
    pub fn encode(&self) -> [u8; KEY_LEN] {
        let mut text = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid,
            self.out_reads,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff,
            self.rkey,
            self.vaddr
        );
        for b in self.gid {
            text.push_str(&format!("{b:02x}:"));
        }
        text.push_str(&format!("{:08x}:", self.srqn));
        let mut out = [0u8; KEY_LEN];
        out[..KEY_LEN - 1].copy_from_slice(text.as_bytes());
        out
    }

    /// Parse a 108-byte record; a message of another shape is refused
    /// with what was wrong.
    pub fn decode(rec: &[u8]) -> Result<KeyRecord, String> {
        if rec.len() != KEY_LEN {
            return Err(format!(
                "a key record is {KEY_LEN} bytes, this one {}",
                rec.len()
            ));
        }
        if rec[KEY_LEN - 1] != 0 {
            return Err("a key record ends in a NUL, this one does not".into());
        }
        let text = std::str::from_utf8(&rec[..KEY_LEN - 1])
            .map_err(|_| "a key record is ASCII text, this one is not".to_string())?;
        let fields: Vec<&str> = text.split(':').collect();
        // 23 fields and the empty one after the trailing ':'.
        if fields.len() != WIDTHS.len() + 1 || !fields[WIDTHS.len()].is_empty() {
            return Err(format!(
                "a key record has {} ':'-terminated fields, this one is {text:?}",
                WIDTHS.len()
            ));
        }
        let mut v = [0u64; 23];
        for (i, (f, w)) in fields.iter().zip(WIDTHS).enumerate() {
            if f.len() != w || !f.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!(
                    "field {} of the key record is {f:?}, not {w} hex digits",
                    i + 1
                ));
            }
            v[i] = u64::from_str_radix(f, 16).map_err(|e| e.to_string())?;
        }
        let mut gid = [0u8; 16];
        for (i, b) in gid.iter_mut().enumerate() {
            *b = v[6 + i] as u8;
        }
        Ok(KeyRecord {
            lid: v[0] as u16,
            out_reads: v[1] as u16,
            qpn: v[2] as u32,
            psn: v[3] as u32,
            rkey: v[4] as u32,
            vaddr: v[5],
            gid,
            srqn: v[22] as u32,
        })
    }
}

/// The version message.
pub fn encode_version(v: &str) -> [u8; VERSION_LEN] {
    let mut out = [0u8; VERSION_LEN];
    let n = v.len().min(VERSION_LEN - 1);
    out[..n].copy_from_slice(&v.as_bytes()[..n]);
    out
}

/// The peer's version, refused when it is not a number or older than
/// [`MIN_VERSION`] (as perftest refuses it).
pub fn decode_version(msg: &[u8; VERSION_LEN]) -> Result<String, String> {
    let end = msg.iter().position(|&b| b == 0).unwrap_or(VERSION_LEN);
    let text = std::str::from_utf8(&msg[..end])
        .map_err(|_| format!("the version message is not text: {msg:02x?}"))?;
    let n: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("the version {text:?} is not a number"))?;
    if n < MIN_VERSION {
        return Err(format!(
            "perftest version {text} is older than {MIN_VERSION:.2}, which perftest's exchange needs"
        ));
    }
    Ok(text.to_string())
}

/// The MTU message: the verbs enum (1 = 256 … 5 = 4096) as a digit.
pub fn encode_mtu(mtu: Mtu) -> [u8; 2] {
    // The enum's discriminants are the verbs codes (IBV_MTU_256 = 1).
    [b'0' + mtu as u8, 0]
}

/// The peer's MTU message.
pub fn decode_mtu(msg: &[u8; 2]) -> Result<Mtu, String> {
    let bad = || format!("the MTU message {msg:02x?} is not a digit 1-5 and a NUL");
    if msg[1] != 0 || !(b'1'..=b'5').contains(&msg[0]) {
        return Err(bad());
    }
    Ok(match msg[0] - b'0' {
        1 => Mtu::B256,
        2 => Mtu::B512,
        3 => Mtu::B1024,
        4 => Mtu::B2048,
        _ => Mtu::B4096,
    })
}

/// A bandwidth test's report (perftest's `struct bw_report_data`, the
/// fields `xchg_bw_reports` sends to a peer of version 5.33 or later):
/// each field its own lock-step step of 8 bytes, big-endian (the
/// doubles' bits too).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BwReport {
    /// Bytes per message.
    pub size: u64,
    /// Messages.
    pub iters: u64,
    /// Peak bandwidth, MB/s.
    pub bw_peak: f64,
    /// Average bandwidth, MB/s.
    pub bw_avg: f64,
    /// Average message rate, millions per second.
    pub msg_rate: f64,
}

impl BwReport {
    /// The five 8-byte messages, in order.
    pub fn encode(&self) -> [[u8; 8]; 5] {
        [
            self.size.to_be_bytes(),
            self.iters.to_be_bytes(),
            self.bw_peak.to_bits().to_be_bytes(),
            self.bw_avg.to_bits().to_be_bytes(),
            self.msg_rate.to_bits().to_be_bytes(),
        ]
    }

    /// From the five messages.
    pub fn decode(m: &[[u8; 8]; 5]) -> BwReport {
        let f = |b: [u8; 8]| f64::from_bits(u64::from_be_bytes(b));
        BwReport {
            size: u64::from_be_bytes(m[0]),
            iters: u64::from_be_bytes(m[1]),
            bw_peak: f(m[2]),
            bw_avg: f(m[3]),
            msg_rate: f(m[4]),
        }
    }
}

/// What the opening steps settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opening {
    /// The peer's version text.
    pub version: String,
    /// The larger of the two cycle buffers.
    pub cycle_buffer: u32,
    /// The larger of the two cache line sizes.
    pub cache_line: u32,
    /// The smaller of the two MTUs.
    pub mtu: Mtu,
}

/// One exchange connection.
pub struct Conn {
    stream: TcpStream,
    client: bool,
}

fn io_error(step: &str, e: std::io::Error) -> CliError {
    CliError::failed(
        format!("perftest exchange, {step}: {e}"),
        "is the program perftest's (same test, no -R) and still running?",
    )
}

fn protocol_error(step: &str, e: String) -> CliError {
    CliError::check(format!("perftest exchange, {step}: {e}"))
}

impl Conn {
    /// Be the client: connect to the program's server at `server` and
    /// exchange versions, retrying while it is not listening yet (a port
    /// forward accepts the connection, then closes it) until `deadline`.
    pub fn connect(server: SocketAddr, deadline: Instant) -> Result<(Conn, String), CliError> {
        let mut last = String::from("no attempt");
        while Instant::now() < deadline {
            match TcpStream::connect_timeout(&server, Duration::from_secs(5)) {
                Ok(s) => {
                    let mut c = Conn::over(s, true, deadline)?;
                    match c.version() {
                        Ok(v) => return Ok((c, v)),
                        // A protocol error is the program's answer: final.
                        Err(e @ CliError::Check { .. }) => return Err(e),
                        Err(e) => last = format!("{e:?}"),
                    }
                }
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        Err(CliError::failed(
            format!("no perftest exchange with the program at {server}: {last}"),
            "start it as a server (without a host name) first",
        ))
    }

    /// Be the server: accept one client on `listener` until `deadline`.
    pub fn accept(listener: &TcpListener, deadline: Instant) -> Result<Conn, CliError> {
        listener
            .set_nonblocking(true)
            .map_err(|e| io_error("listen", e))?;
        loop {
            match listener.accept() {
                Ok((s, _)) => {
                    s.set_nonblocking(false)
                        .map_err(|e| io_error("accept", e))?;
                    return Conn::over(s, false, deadline);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        return Err(CliError::failed(
                            "no client connected before the deadline (--timeout)",
                            "start the program as a client with this host's address",
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(io_error("accept", e)),
            }
        }
    }

    fn over(stream: TcpStream, client: bool, deadline: Instant) -> Result<Conn, CliError> {
        let left = deadline.saturating_duration_since(Instant::now());
        stream
            .set_read_timeout(Some(left.max(Duration::from_secs(1))))
            .map_err(|e| io_error("socket", e))?;
        stream
            .set_nodelay(true)
            .map_err(|e| io_error("socket", e))?;
        Ok(Conn { stream, client })
    }

    /// Whether this side is the exchange's client.
    pub fn is_client(&self) -> bool {
        self.client
    }

    /// One lock-step step: `mine` out, `theirs.len()` bytes in.
    pub fn xchg(&mut self, step: &str, mine: &[u8], theirs: &mut [u8]) -> Result<(), CliError> {
        if self.client {
            self.stream.write_all(mine).map_err(|e| io_error(step, e))?;
            self.stream
                .read_exact(theirs)
                .map_err(|e| io_error(step, e))
        } else {
            self.stream
                .read_exact(theirs)
                .map_err(|e| io_error(step, e))?;
            self.stream.write_all(mine).map_err(|e| io_error(step, e))
        }
    }

    /// The version step: the program's version.
    pub fn version(&mut self) -> Result<String, CliError> {
        let mut v = [0u8; VERSION_LEN];
        self.xchg("version", &encode_version(VERSION), &mut v)?;
        decode_version(&v).map_err(|e| protocol_error("version", e))
    }

    /// The system data and MTU steps, after [`Conn::version`] gave
    /// `version`.
    pub fn opening(&mut self, version: String, mtu: Mtu) -> Result<Opening, CliError> {
        // perftest's own defaults: the page size and a 64-byte line.
        let mut cycle = [0u8; 4];
        self.xchg("cycle buffer", &4096u32.to_be_bytes(), &mut cycle)?;
        let mut line = [0u8; 4];
        self.xchg("cache line size", &64u32.to_be_bytes(), &mut line)?;
        let mut m = [0u8; 2];
        self.xchg("MTU", &encode_mtu(mtu), &mut m)?;
        let theirs = decode_mtu(&m).map_err(|e| protocol_error("MTU", e))?;
        Ok(Opening {
            version,
            cycle_buffer: u32::from_be_bytes(cycle).max(4096),
            cache_line: u32::from_be_bytes(line).max(64),
            mtu: if theirs < mtu { theirs } else { mtu },
        })
    }

    /// One key-record step.
    pub fn hand_shake(&mut self, me: &KeyRecord) -> Result<KeyRecord, CliError> {
        let mut rec = [0u8; KEY_LEN];
        self.xchg("key record", &me.encode(), &mut rec)?;
        KeyRecord::decode(&rec).map_err(|e| protocol_error("key record", e))
    }

    /// The report exchange of the bandwidth tests.
    pub fn reports(&mut self, mine: &BwReport) -> Result<BwReport, CliError> {
        let out = mine.encode();
        let mut theirs = [[0u8; 8]; 5];
        for (o, t) in out.iter().zip(theirs.iter_mut()) {
            self.xchg("bandwidth report", o, t)?;
        }
        Ok(BwReport::decode(&theirs))
    }

    /// The close: one more key record, then `done` (written, not read).
    pub fn close(mut self, me: &KeyRecord) -> Result<(), CliError> {
        self.hand_shake(me)?;
        self.stream.write_all(DONE).map_err(|e| io_error("done", e))
    }
}

#[cfg(test)]
#[path = "exchange_tests.rs"]
mod tests;
