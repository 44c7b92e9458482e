//! The wire codec: build and parse RoCE v2, RoCE v1 and native InfiniBand
//! frames (IBTA vol. 1 ch. 7-9; Annex A16 RoCE, Annex A17 RoCE v2), with
//! the ICRC and VCRC. `docs/wire.md` describes what the model puts on the
//! wire and what it checks.
//!
//! Written in a no_std style: parsing borrows the frame and never
//! allocates; building writes into a caller-owned buffer. Ethernet, VLAN,
//! IPv4, IPv6 and UDP come from `etherparse`, the CRC-32 from `crc32fast`;
//! only the InfiniBand headers (LRH, GRH, BTH and the extended transport
//! headers) are written here.
//!
//! ```
//! use mlx5_sim::wire::{self, opcode, Bth, Encap, Eth, ExtHeaders, Ip, Ipv4, LinkType, Packet};
//!
//! let payload = [0x7b; 64];
//! let pkt = Packet {
//!     encap: Encap::RoceV2 {
//!         eth: Eth { dst: [2, 0, 0, 0, 0, 2], src: [2, 0, 0, 0, 0, 1], vlan: None },
//!         ip: Ip::V4(Ipv4 { src: [198, 18, 0, 1], dst: [198, 18, 0, 2], tos: 0, ttl: 64, id: 1 }),
//!         udp_sport: 0xc000,
//!     },
//!     bth: Bth { opcode: opcode::SEND_ONLY, pkey: 0xffff, dest_qp: 0x12, ack_req: true, psn: 7, ..Bth::default() },
//!     ext: ExtHeaders::default(),
//!     payload: &payload,
//! };
//! let mut buf = [0u8; 256];
//! let n = pkt.build(&mut buf).unwrap();
//! let parsed = wire::parse(LinkType::Ethernet, &buf[..n]).unwrap();
//! assert!(parsed.icrc_ok);
//! assert_eq!(parsed.packet.payload, &payload[..]);
//! ```

mod crc;
mod frame;
pub mod neighbour;
mod pcap;
mod segment;
mod transport;
mod tshark;

pub use crc::{vcrc, GRH_LEN, ICRC_LEN, IPV4_LEN, LRH_LEN, UDP_LEN, VCRC_LEN};
pub use frame::{
    parse, Encap, Eth, Grh, Ip, Ipv4, LinkType, Lrh, Packet, Parsed, Vlan, GRH_NEXT_HDR_BTH,
    LNH_IBA_GLOBAL, LNH_IBA_LOCAL, ROCE_V1_ETHERTYPE, ROCE_V2_UDP_PORT,
};
pub use pcap::{
    read_pcap, PcapRecord, PcapWriter, LINKTYPE_ETHERNET, LINKTYPE_INFINIBAND, SNAPLEN,
};
pub(crate) use segment::Endpoint;
pub use segment::{Fault, Faults, PortId, Wire, WireStats};
pub use transport::{
    headers_of, opcode, pad_for, psn_diff, syndrome, AckKind, Aeth, AtomicEth, Bth, Deth,
    ExtHeaders, HeaderSet, Reth, AETH_LEN, ATOMIC_ACK_ETH_LEN, ATOMIC_ETH_LEN, BTH_LEN,
    DEFAULT_PKEY, DETH_LEN, IETH_LEN, IMM_LEN, MASK24, RETH_LEN, TVER,
};
pub use tshark::{tshark_fields, tshark_installed, tshark_number, TsharkError};

/// Why a frame could not be parsed. A receiver drops such a frame silently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// Shorter than its headers, pad and ICRC say.
    Truncated,
    /// Not a RoCE/IB transport packet (ARP, other IP traffic, raw IB...).
    NotRdma,
    /// A form this codec does not take (IPv4 options or fragments, LVer
    /// other than 0).
    Unsupported,
    /// The IPv4 header checksum is wrong.
    Ipv4Checksum,
    /// A non-zero UDP checksum is wrong.
    UdpChecksum,
    /// A length field disagrees with the frame.
    BadLength,
    /// An opcode the codec does not know (RD, reserved).
    UnknownOpcode(u8),
}

/// Why a packet could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuildError {
    /// The output buffer is shorter than the frame (`need` bytes).
    BufferTooSmall {
        /// Bytes the frame needs.
        need: usize,
    },
    /// The extended headers present are not the ones the opcode carries.
    HeadersDoNotMatchOpcode,
    /// The opcode carries no payload (READ request, ACK, atomics).
    PayloadNotAllowed,
    /// An opcode the codec does not know.
    UnknownOpcode,
    /// A value does not fit its field (24-bit QPN/PSN/MSN, VLAN id, ...).
    FieldTooWide,
    /// The packet does not fit the length fields.
    TooLong,
}

impl core::fmt::Display for ParseError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Debug::fmt(self, f)
    }
}

impl core::fmt::Display for BuildError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Debug::fmt(self, f)
    }
}

impl std::error::Error for ParseError {}
impl std::error::Error for BuildError {}
