//! Capture files: the classic pcap format (the `pcap-savefile(5)` man page
//! of libpcap; link types from tcpdump.org's `LINKTYPE_*` list) with
//! nanosecond timestamps, so Wireshark/tshark and tcpdump read what a wire
//! carried. RoCE frames go in an Ethernet capture (`LINKTYPE_ETHERNET`),
//! native IB packets in an InfiniBand one (`LINKTYPE_INFINIBAND`, the
//! packet from the LRH through the VCRC).

use std::io::{self, Read, Write};

use super::LinkType;

/// `LINKTYPE_ETHERNET`.
pub const LINKTYPE_ETHERNET: u32 = 1;
/// `LINKTYPE_INFINIBAND`.
pub const LINKTYPE_INFINIBAND: u32 = 247;
/// Magic number of a pcap file with nanosecond timestamps.
const MAGIC_NS: u32 = 0xa1b2_3c4d;
/// Magic number of a pcap file with microsecond timestamps.
const MAGIC_US: u32 = 0xa1b2_c3d4;
/// Largest frame a capture record holds (a 9 KiB jumbo frame and more).
pub const SNAPLEN: u32 = 65_535;

impl LinkType {
    /// The pcap link type of frames of this kind.
    pub fn pcap_linktype(self) -> u32 {
        match self {
            LinkType::Ethernet => LINKTYPE_ETHERNET,
            LinkType::Infiniband => LINKTYPE_INFINIBAND,
        }
    }
}

/// Writes frames to a pcap file.
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    out: W,
    link: LinkType,
    frames: u64,
}

impl<W: Write> PcapWriter<W> {
    /// Start a capture of `link` frames: writes the file header.
    pub fn new(mut out: W, link: LinkType) -> io::Result<Self> {
        let mut h = [0u8; 24];
        h[0..4].copy_from_slice(&MAGIC_NS.to_le_bytes());
        h[4..6].copy_from_slice(&2u16.to_le_bytes());
        h[6..8].copy_from_slice(&4u16.to_le_bytes());
        // thiszone and sigfigs stay 0.
        h[16..20].copy_from_slice(&SNAPLEN.to_le_bytes());
        h[20..24].copy_from_slice(&link.pcap_linktype().to_le_bytes());
        out.write_all(&h)?;
        Ok(PcapWriter {
            out,
            link,
            frames: 0,
        })
    }

    /// The kind of frames this capture holds.
    pub fn link(&self) -> LinkType {
        self.link
    }

    /// Frames written so far.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Record one frame seen at `time_ns` (device time, nanoseconds). A
    /// frame longer than [`SNAPLEN`] is cut to it, as a capture does.
    pub fn write_frame(&mut self, time_ns: u64, frame: &[u8]) -> io::Result<()> {
        let caught = frame.len().min(SNAPLEN as usize);
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&((time_ns / 1_000_000_000) as u32).to_le_bytes());
        h[4..8].copy_from_slice(&((time_ns % 1_000_000_000) as u32).to_le_bytes());
        h[8..12].copy_from_slice(&(caught as u32).to_le_bytes());
        h[12..16].copy_from_slice(&(frame.len() as u32).to_le_bytes());
        self.out.write_all(&h)?;
        self.out.write_all(&frame[..caught])?;
        self.frames += 1;
        Ok(())
    }

    /// Flush the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The underlying writer.
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// One record of a capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PcapRecord {
    /// Timestamp in nanoseconds.
    pub time_ns: u64,
    /// Length of the frame on the wire.
    pub orig_len: u32,
    /// The captured bytes.
    pub data: Vec<u8>,
}

/// Read a whole pcap file (either timestamp resolution, either byte
/// order): its link type and records. For tests and tools that check a
/// capture.
pub fn read_pcap(mut input: impl Read) -> io::Result<(u32, Vec<PcapRecord>)> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
    let mut h = [0u8; 24];
    input.read_exact(&mut h)?;
    let le_magic = u32::from_le_bytes(h[0..4].try_into().unwrap());
    let be_magic = u32::from_be_bytes(h[0..4].try_into().unwrap());
    let (le, ns) = match (le_magic, be_magic) {
        (MAGIC_NS, _) => (true, true),
        (MAGIC_US, _) => (true, false),
        (_, MAGIC_NS) => (false, true),
        (_, MAGIC_US) => (false, false),
        _ => return Err(bad("not a pcap file")),
    };
    let word = |b: &[u8]| {
        let a: [u8; 4] = b.try_into().unwrap();
        if le {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    };
    let link = word(&h[20..24]);
    let mut records = Vec::new();
    loop {
        let mut r = [0u8; 16];
        match input.read_exact(&mut r) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(e),
        }
        let secs = u64::from(word(&r[0..4]));
        let frac = u64::from(word(&r[4..8]));
        let incl = word(&r[8..12]) as usize;
        if incl > 1 << 20 {
            return Err(bad("record longer than 1 MiB"));
        }
        let mut data = vec![0u8; incl];
        input.read_exact(&mut data)?;
        records.push(PcapRecord {
            time_ns: secs * 1_000_000_000 + if ns { frac } else { frac * 1000 },
            orig_len: word(&r[12..16]),
            data,
        });
    }
    Ok((link, records))
}
