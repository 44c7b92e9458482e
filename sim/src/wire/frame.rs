//! Whole frames: the outer headers of RoCE v2 (Ethernet + IPv4/IPv6 + UDP
//! 4791), RoCE v1 (Ethernet 0x8915 + GRH) and native InfiniBand (LRH, GRH
//! when global) around the transport headers, the payload, the pad, the
//! ICRC and, on IB, the VCRC (IBTA vol. 1 ch. 7 and 9, Annex A16/A17).
//! Ethernet, VLAN, IPv4, IPv6 and UDP go through `etherparse`; the LRH and
//! GRH are written here. Parsing borrows the frame and never allocates.

use etherparse::{
    EtherType, Ethernet2Header, Ethernet2HeaderSlice, IpDscp, IpEcn, IpNumber, Ipv4Header,
    Ipv4HeaderSlice, Ipv6FlowLabel, Ipv6Header, Ipv6HeaderSlice, SingleVlanHeader,
    SingleVlanHeaderSlice, UdpHeader, UdpHeaderSlice, VlanId, VlanPcp,
};

use super::crc::{self, Outer, GRH_LEN, ICRC_LEN, IPV4_LEN, LRH_LEN, UDP_LEN, VCRC_LEN};
use super::transport::{headers_of, pad_for, Bth, ExtHeaders, HeaderSet, BTH_LEN};
use super::{BuildError, ParseError};

/// UDP destination port of RoCE v2 (IANA).
pub const ROCE_V2_UDP_PORT: u16 = 4791;
/// Ethernet type of RoCE v1 (Annex A16).
pub const ROCE_V1_ETHERTYPE: u16 = 0x8915;
/// GRH next header value: the BTH follows.
pub const GRH_NEXT_HDR_BTH: u8 = 0x1b;
/// LRH link next header: IBA local (BTH next).
pub const LNH_IBA_LOCAL: u8 = 2;
/// LRH link next header: IBA global (GRH next).
pub const LNH_IBA_GLOBAL: u8 = 3;

/// What a frame starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkType {
    /// An Ethernet II header (RoCE v1 and v2).
    Ethernet,
    /// An InfiniBand LRH.
    Infiniband,
}

/// An 802.1Q tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Vlan {
    /// Priority code point (3 bits).
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN id (12 bits).
    pub id: u16,
}

/// Ethernet addressing of a RoCE frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Eth {
    /// Destination MAC.
    pub dst: [u8; 6],
    /// Source MAC.
    pub src: [u8; 6],
    /// 802.1Q tag, if any.
    pub vlan: Option<Vlan>,
}

/// IPv4 header fields a RoCE v2 sender chooses (no options; DF set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ipv4 {
    /// Source address (the IPv4 part of the source GID).
    pub src: [u8; 4],
    /// Destination address.
    pub dst: [u8; 4],
    /// TOS byte (DSCP << 2 | ECN): the QP's traffic class.
    pub tos: u8,
    /// Time to live (the hop limit).
    pub ttl: u8,
    /// Identification.
    pub id: u16,
}

/// IPv6 header / GRH fields (IBTA vol. 1 §8.3; RFC 8200).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Grh {
    /// Traffic class.
    pub tclass: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
    /// Source GID / IPv6 address.
    pub sgid: [u8; 16],
    /// Destination GID / IPv6 address.
    pub dgid: [u8; 16],
}

/// The network header of a RoCE v2 frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ip {
    /// IPv4 (the GIDs are IPv4-mapped).
    V4(Ipv4),
    /// IPv6 (the GIDs are the addresses).
    V6(Grh),
}

/// Local Route Header fields a sender chooses (IBTA vol. 1 §7.7); LVer is
/// 0, LNH follows from the GRH and PktLen from the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Lrh {
    /// Virtual lane (4 bits).
    pub vl: u8,
    /// Service level (4 bits).
    pub sl: u8,
    /// Destination LID.
    pub dlid: u16,
    /// Source LID.
    pub slid: u16,
}

/// The headers around the transport headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encap {
    /// RoCE v2: Ethernet + IPv4/IPv6 + UDP (destination port 4791).
    RoceV2 {
        /// Ethernet addressing.
        eth: Eth,
        /// IPv4 or IPv6 header.
        ip: Ip,
        /// UDP source port (entropy; receivers ignore it).
        udp_sport: u16,
    },
    /// RoCE v1: Ethernet (0x8915) + GRH.
    RoceV1 {
        /// Ethernet addressing.
        eth: Eth,
        /// The GRH.
        grh: Grh,
    },
    /// Native InfiniBand: LRH, GRH when global.
    Ib {
        /// The LRH.
        lrh: Lrh,
        /// The GRH (LNH 3) or none (LNH 2).
        grh: Option<Grh>,
    },
}

impl Encap {
    /// What the frame starts with.
    pub fn link_type(&self) -> LinkType {
        match self {
            Encap::Ib { .. } => LinkType::Infiniband,
            _ => LinkType::Ethernet,
        }
    }

    fn eth_len(eth: &Eth) -> usize {
        Ethernet2Header::LEN + if eth.vlan.is_some() { 4 } else { 0 }
    }

    /// Bytes before the outer headers the ICRC covers (Ethernet + VLAN).
    fn link_len(&self) -> usize {
        match self {
            Encap::RoceV2 { eth, .. } | Encap::RoceV1 { eth, .. } => Encap::eth_len(eth),
            Encap::Ib { .. } => 0,
        }
    }

    fn outer(&self) -> Outer {
        match self {
            Encap::RoceV2 { ip: Ip::V4(_), .. } => Outer::Ipv4,
            Encap::RoceV2 { ip: Ip::V6(_), .. } => Outer::Ipv6,
            Encap::RoceV1 { .. } => Outer::Grh,
            Encap::Ib { grh, .. } => Outer::Lrh { grh: grh.is_some() },
        }
    }

    fn trailer_len(&self) -> usize {
        ICRC_LEN
            + match self {
                Encap::Ib { .. } => VCRC_LEN,
                _ => 0,
            }
    }
}

/// One packet: outer headers, transport headers and payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<'a> {
    /// Outer headers.
    pub encap: Encap,
    /// Base transport header. `pad` is ignored when building (it follows
    /// from the payload length).
    pub bth: Bth,
    /// Extended transport headers; exactly those the opcode names.
    pub ext: ExtHeaders,
    /// Payload (without pad).
    pub payload: &'a [u8],
}

/// A parsed frame with the results of its integrity checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parsed<'a> {
    /// The packet.
    pub packet: Packet<'a>,
    /// The ICRC as received.
    pub icrc: u32,
    /// The received ICRC equals the one computed over the frame.
    pub icrc_ok: bool,
    /// Native IB: the received VCRC equals the computed one.
    pub vcrc_ok: Option<bool>,
}

/// Offsets of a frame's parts, shared by parse and build.
struct Layout {
    /// Start of the outer (ICRC-covered) headers.
    outer_at: usize,
    /// End of the ICRC-covered bytes (where the ICRC starts).
    icrc_at: usize,
}

impl<'a> Packet<'a> {
    /// Bytes from the BTH through the ICRC.
    fn transport_len(&self) -> usize {
        let p = self.payload.len();
        BTH_LEN + self.ext.set().len() + p + pad_for(p) as usize + ICRC_LEN
    }

    /// Length of the frame [`Packet::build`] writes.
    pub fn frame_len(&self) -> usize {
        let e = &self.encap;
        e.link_len() + e.outer().len() + self.transport_len() + e.trailer_len() - ICRC_LEN
    }

    /// Write the frame to the start of `out`: lengths, pad, IPv4 header
    /// checksum, UDP checksum (0 over IPv4 as rxe sends; computed over
    /// IPv6), ICRC and VCRC are filled in. Returns the frame length.
    pub fn build(&self, out: &mut [u8]) -> Result<usize, BuildError> {
        let need = self.frame_len();
        if out.len() < need {
            return Err(BuildError::BufferTooSmall { need });
        }
        let hs = headers_of(self.bth.opcode).ok_or(BuildError::UnknownOpcode)?;
        let present = self.ext.set();
        if (HeaderSet {
            no_payload: false,
            ..hs
        }) != present
        {
            return Err(BuildError::HeadersDoNotMatchOpcode);
        }
        if hs.no_payload && !self.payload.is_empty() {
            return Err(BuildError::PayloadNotAllowed);
        }
        let out = &mut out[..need];
        let transport = self.transport_len();
        let mut at = 0usize;
        match &self.encap {
            Encap::RoceV2 { eth, ip, udp_sport } => {
                let ether_type = match ip {
                    Ip::V4(_) => EtherType::IPV4,
                    Ip::V6(_) => EtherType::IPV6,
                };
                put_eth(out, &mut at, eth, ether_type)?;
                let udp_len = UDP_LEN + transport;
                match ip {
                    Ip::V4(v4) => put(out, &mut at, &ipv4_header(v4, udp_len)?),
                    Ip::V6(g) => put(
                        out,
                        &mut at,
                        &ipv6_header(g, udp_len, IpNumber::UDP)?.to_bytes(),
                    ),
                }
                let udp = UdpHeader::without_ipv4_checksum(*udp_sport, ROCE_V2_UDP_PORT, transport)
                    .map_err(|_| BuildError::TooLong)?;
                put(out, &mut at, &udp.to_bytes());
            }
            Encap::RoceV1 { eth, grh } => {
                put_eth(out, &mut at, eth, EtherType(ROCE_V1_ETHERTYPE))?;
                put(out, &mut at, &grh_bytes(grh, transport)?);
            }
            Encap::Ib { lrh, grh } => {
                let words = (LRH_LEN + grh.map_or(0, |_| GRH_LEN) + transport) / 4;
                put(out, &mut at, &lrh_bytes(lrh, grh.is_some(), words)?);
                if let Some(g) = grh {
                    put(out, &mut at, &grh_bytes(g, transport)?);
                }
            }
        }
        let mut bth = self.bth;
        bth.pad = pad_for(self.payload.len());
        put(out, &mut at, &bth.to_bytes()?);
        at += self.ext.write(&mut out[at..])?;
        put(out, &mut at, self.payload);
        let pad = bth.pad as usize;
        out[at..at + pad].fill(0);
        at += pad;
        let layout = Layout {
            outer_at: self.encap.link_len(),
            icrc_at: at,
        };
        seal(&self.encap, &layout, out);
        Ok(need)
    }
}

/// Fill in the ICRC, the IPv6 UDP checksum (which covers the ICRC) and the
/// VCRC of a frame whose headers and payload are written.
fn seal(encap: &Encap, l: &Layout, out: &mut [u8]) {
    let icrc = crc::icrc(encap.outer(), &out[l.outer_at..l.icrc_at]);
    out[l.icrc_at..l.icrc_at + ICRC_LEN].copy_from_slice(&icrc.to_le_bytes());
    match encap {
        Encap::RoceV2 { ip: Ip::V6(g), .. } => {
            let udp_at = l.outer_at + GRH_LEN;
            let end = l.icrc_at + ICRC_LEN;
            let udp = UdpHeader::from_bytes(out[udp_at..udp_at + UDP_LEN].try_into().unwrap());
            let sum = udp
                .calc_checksum_ipv6_raw(g.sgid, g.dgid, &out[udp_at + UDP_LEN..end])
                .unwrap_or(0);
            out[udp_at + 6..udp_at + 8].copy_from_slice(&sum.to_be_bytes());
        }
        Encap::Ib { .. } => {
            let end = l.icrc_at + ICRC_LEN;
            let v = crc::vcrc(&out[..end]);
            out[end..end + VCRC_LEN].copy_from_slice(&v.to_le_bytes());
        }
        _ => {}
    }
}

fn put(out: &mut [u8], at: &mut usize, bytes: &[u8]) {
    out[*at..*at + bytes.len()].copy_from_slice(bytes);
    *at += bytes.len();
}

fn put_eth(out: &mut [u8], at: &mut usize, eth: &Eth, inner: EtherType) -> Result<(), BuildError> {
    let outer_type = if eth.vlan.is_some() {
        EtherType::VLAN_TAGGED_FRAME
    } else {
        inner
    };
    let h = Ethernet2Header {
        source: eth.src,
        destination: eth.dst,
        ether_type: outer_type,
    };
    out[*at..*at + Ethernet2Header::LEN].copy_from_slice(&h.to_bytes());
    *at += Ethernet2Header::LEN;
    if let Some(v) = eth.vlan {
        let tag = SingleVlanHeader {
            pcp: VlanPcp::try_new(v.pcp).map_err(|_| BuildError::FieldTooWide)?,
            drop_eligible_indicator: v.dei,
            vlan_id: VlanId::try_new(v.id).map_err(|_| BuildError::FieldTooWide)?,
            ether_type: inner,
        };
        out[*at..*at + 4].copy_from_slice(&tag.to_bytes());
        *at += 4;
    }
    Ok(())
}

fn ipv4_header(v4: &Ipv4, payload_len: usize) -> Result<[u8; IPV4_LEN], BuildError> {
    let len = u16::try_from(payload_len).map_err(|_| BuildError::TooLong)?;
    let mut h = Ipv4Header::new(len, v4.ttl, IpNumber::UDP, v4.src, v4.dst)
        .map_err(|_| BuildError::TooLong)?;
    h.dscp = IpDscp::try_new(v4.tos >> 2).map_err(|_| BuildError::FieldTooWide)?;
    h.ecn = IpEcn::try_new(v4.tos & 3).map_err(|_| BuildError::FieldTooWide)?;
    h.identification = v4.id;
    h.dont_fragment = true;
    h.header_checksum = h.calc_header_checksum();
    let mut b = [0u8; IPV4_LEN];
    b.copy_from_slice(&h.to_bytes());
    Ok(b)
}

fn ipv6_header(g: &Grh, payload_len: usize, next: IpNumber) -> Result<Ipv6Header, BuildError> {
    Ok(Ipv6Header {
        traffic_class: g.tclass,
        flow_label: Ipv6FlowLabel::try_new(g.flow_label).map_err(|_| BuildError::FieldTooWide)?,
        payload_length: u16::try_from(payload_len).map_err(|_| BuildError::TooLong)?,
        next_header: next,
        hop_limit: g.hop_limit,
        source: g.sgid,
        destination: g.dgid,
    })
}

/// The GRH has the IPv6 header's layout with next header 0x1B.
fn grh_bytes(g: &Grh, payload_len: usize) -> Result<[u8; GRH_LEN], BuildError> {
    Ok(ipv6_header(g, payload_len, IpNumber(GRH_NEXT_HDR_BTH))?.to_bytes())
}

fn lrh_bytes(l: &Lrh, grh: bool, words: usize) -> Result<[u8; LRH_LEN], BuildError> {
    if l.vl > 0xf || l.sl > 0xf || words > 0x7ff {
        return Err(BuildError::FieldTooWide);
    }
    let lnh = if grh { LNH_IBA_GLOBAL } else { LNH_IBA_LOCAL };
    let d = l.dlid.to_be_bytes();
    let s = l.slid.to_be_bytes();
    let w = (words as u16).to_be_bytes();
    Ok([
        l.vl << 4,
        l.sl << 4 | lnh,
        d[0],
        d[1],
        w[0],
        w[1],
        s[0],
        s[1],
    ])
}

fn parse_grh(b: &[u8]) -> Result<(Grh, u8, usize), ParseError> {
    let h = Ipv6HeaderSlice::from_slice(b).map_err(|_| ParseError::Truncated)?;
    Ok((
        Grh {
            tclass: h.traffic_class(),
            flow_label: h.flow_label().value(),
            hop_limit: h.hop_limit(),
            sgid: h.source(),
            dgid: h.destination(),
        },
        h.next_header().0,
        h.payload_length() as usize,
    ))
}

fn parse_eth(frame: &[u8]) -> Result<(Eth, u16, usize), ParseError> {
    let e = Ethernet2HeaderSlice::from_slice(frame).map_err(|_| ParseError::Truncated)?;
    let mut eth = Eth {
        dst: e.destination(),
        src: e.source(),
        vlan: None,
    };
    let mut at = Ethernet2Header::LEN;
    let mut ty = e.ether_type();
    if ty == EtherType::VLAN_TAGGED_FRAME {
        let v =
            SingleVlanHeaderSlice::from_slice(&frame[at..]).map_err(|_| ParseError::Truncated)?;
        eth.vlan = Some(Vlan {
            pcp: v.priority_code_point().value(),
            dei: v.drop_eligible_indicator(),
            id: v.vlan_identifier().value(),
        });
        ty = v.ether_type();
        at += 4;
    }
    Ok((eth, ty.0, at))
}

/// Parse a frame of `link` type. Frames that are not RoCE/IB transport
/// packets (ARP, other IP traffic, raw IB) are [`ParseError::NotRdma`].
/// Trailing bytes after the length the network header states (Ethernet
/// minimum-size padding) are ignored.
pub fn parse(link: LinkType, frame: &[u8]) -> Result<Parsed<'_>, ParseError> {
    let (encap, outer_at, bth_at, end) = match link {
        LinkType::Ethernet => {
            let (eth, ty, at) = parse_eth(frame)?;
            match ty {
                0x0800 => {
                    let h = Ipv4HeaderSlice::from_slice(&frame[at..])
                        .map_err(|_| ParseError::Truncated)?;
                    if h.ihl() != 5 || h.is_fragmenting_payload() {
                        return Err(ParseError::Unsupported);
                    }
                    if h.protocol() != IpNumber::UDP {
                        return Err(ParseError::NotRdma);
                    }
                    // The header checksum over the 20 bytes with the
                    // checksum field as zero (what `calc_header_checksum`
                    // computes, without building a header value first).
                    let raw = h.slice();
                    let sum = etherparse::checksum::Sum16BitWords::new()
                        .add_slice(&raw[..10])
                        .add_slice(&raw[12..IPV4_LEN])
                        .ones_complement()
                        .to_be();
                    if sum != h.header_checksum() {
                        return Err(ParseError::Ipv4Checksum);
                    }
                    let end = at + h.total_len() as usize;
                    let v4 = Ipv4 {
                        src: h.source(),
                        dst: h.destination(),
                        tos: h.dcp().value() << 2 | h.ecn().value(),
                        ttl: h.ttl(),
                        id: h.identification(),
                    };
                    let (sport, udp_end) = parse_udp(frame, at + IPV4_LEN, end, None)?;
                    let encap = Encap::RoceV2 {
                        eth,
                        ip: Ip::V4(v4),
                        udp_sport: sport,
                    };
                    (encap, at, at + IPV4_LEN + UDP_LEN, udp_end)
                }
                0x86dd => {
                    let (g, next, plen) = parse_grh(&frame[at..])?;
                    if next != IpNumber::UDP.0 {
                        return Err(ParseError::NotRdma);
                    }
                    let end = at + GRH_LEN + plen;
                    let (sport, udp_end) = parse_udp(frame, at + GRH_LEN, end, Some(&g))?;
                    let encap = Encap::RoceV2 {
                        eth,
                        ip: Ip::V6(g),
                        udp_sport: sport,
                    };
                    (encap, at, at + GRH_LEN + UDP_LEN, udp_end)
                }
                ROCE_V1_ETHERTYPE => {
                    let (grh, next, plen) = parse_grh(&frame[at..])?;
                    if next != GRH_NEXT_HDR_BTH {
                        return Err(ParseError::NotRdma);
                    }
                    let encap = Encap::RoceV1 { eth, grh };
                    (encap, at, at + GRH_LEN, at + GRH_LEN + plen)
                }
                _ => return Err(ParseError::NotRdma),
            }
        }
        LinkType::Infiniband => {
            let b = frame.get(..LRH_LEN).ok_or(ParseError::Truncated)?;
            if b[0] & 0xf != 0 {
                return Err(ParseError::Unsupported); // LVer
            }
            let lnh = b[1] & 3;
            let lrh = Lrh {
                vl: b[0] >> 4,
                sl: b[1] >> 4,
                dlid: u16::from_be_bytes([b[2], b[3]]),
                slid: u16::from_be_bytes([b[6], b[7]]),
            };
            let words = (u16::from_be_bytes([b[4], b[5]]) & 0x7ff) as usize;
            // PktLen counts LRH through ICRC; the VCRC follows.
            let end = words * 4;
            let (grh, bth_at) = match lnh {
                LNH_IBA_LOCAL => (None, LRH_LEN),
                LNH_IBA_GLOBAL => {
                    let (g, next, _) = parse_grh(&frame[LRH_LEN..])?;
                    if next != GRH_NEXT_HDR_BTH {
                        return Err(ParseError::NotRdma);
                    }
                    (Some(g), LRH_LEN + GRH_LEN)
                }
                _ => return Err(ParseError::NotRdma),
            };
            (Encap::Ib { lrh, grh }, 0, bth_at, end)
        }
    };
    if end > frame.len() || end < bth_at + BTH_LEN + ICRC_LEN {
        return Err(ParseError::Truncated);
    }
    let bth = Bth::parse(&frame[bth_at..])?;
    let hs = headers_of(bth.opcode).ok_or(ParseError::UnknownOpcode(bth.opcode))?;
    let ext_at = bth_at + BTH_LEN;
    let icrc_at = end - ICRC_LEN;
    let pay_at = ext_at + hs.len();
    let pay_end = icrc_at
        .checked_sub(bth.pad as usize)
        .filter(|&e| e >= pay_at)
        .ok_or(ParseError::Truncated)?;
    let ext = ExtHeaders::parse(hs, &frame[ext_at..])?;
    if hs.no_payload && icrc_at != pay_at {
        return Err(ParseError::BadLength);
    }
    let icrc = u32::from_le_bytes(frame[icrc_at..end].try_into().unwrap());
    let icrc_ok = crc::icrc(encap.outer(), &frame[outer_at..icrc_at]) == icrc;
    let vcrc_ok = match encap {
        Encap::Ib { .. } => {
            let v = frame
                .get(end..end + VCRC_LEN)
                .ok_or(ParseError::Truncated)?;
            Some(crc::vcrc(&frame[..end]) == u16::from_le_bytes([v[0], v[1]]))
        }
        _ => None,
    };
    Ok(Parsed {
        packet: Packet {
            encap,
            bth,
            ext,
            payload: &frame[pay_at..pay_end],
        },
        icrc,
        icrc_ok,
        vcrc_ok,
    })
}

/// Check the UDP header at `at` (within the IP payload ending at `end`):
/// destination port 4791, length consistent, a non-zero checksum correct.
/// Returns the source port and the end of the UDP datagram.
fn parse_udp(
    frame: &[u8],
    at: usize,
    end: usize,
    v6: Option<&Grh>,
) -> Result<(u16, usize), ParseError> {
    if end > frame.len() {
        return Err(ParseError::Truncated);
    }
    let u = UdpHeaderSlice::from_slice(&frame[at..end]).map_err(|_| ParseError::Truncated)?;
    if u.destination_port() != ROCE_V2_UDP_PORT {
        return Err(ParseError::NotRdma);
    }
    let udp_end = at + u.length() as usize;
    if udp_end > end || (u.length() as usize) < UDP_LEN {
        return Err(ParseError::BadLength);
    }
    if u.checksum() != 0 {
        let payload = &frame[at + UDP_LEN..udp_end];
        let h = u.to_header();
        let sum = match v6 {
            Some(g) => h.calc_checksum_ipv6_raw(g.sgid, g.dgid, payload),
            None => {
                let ip = &frame[at - IPV4_LEN..at];
                h.calc_checksum_ipv4_raw(
                    ip[12..16].try_into().unwrap(),
                    ip[16..20].try_into().unwrap(),
                    payload,
                )
            }
        };
        if sum.ok() != Some(u.checksum()) {
            return Err(ParseError::UdpChecksum);
        }
    }
    Ok((u.source_port(), udp_end))
}
