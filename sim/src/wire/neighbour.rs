//! Neighbour resolution frames: ARP (RFC 826) for IPv4 and ICMPv6
//! neighbour solicitation/advertisement (RFC 4861) for IPv6. A port that
//! talks to a real IP stack must answer them for its addresses: Linux
//! resolves the destination GID's IP address through its neighbour table
//! when an RC QP goes to RTR, and `ibv_modify_qp` fails when nobody
//! answers (Linux `drivers/infiniband/core/addr.c`).
//!
//! Parsing borrows the frame; building writes into a caller-owned buffer.

/// Ethernet type of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// Ethernet type of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// Length of an ARP frame for IPv4 over Ethernet (14 + 28; no padding).
pub const ARP_FRAME_LEN: usize = 42;
/// Length of a neighbour advertisement or solicitation frame with one
/// link-layer address option (14 + 40 + 32).
pub const ND_FRAME_LEN: usize = 86;

const ICMPV6: u8 = 58;
const ND_SOLICIT: u8 = 135;
const ND_ADVERT: u8 = 136;
/// Option types: source / target link-layer address.
const OPT_SOURCE_LLA: u8 = 1;
const OPT_TARGET_LLA: u8 = 2;

/// A neighbour-resolution message seen on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Neighbour {
    /// ARP request: who has `target_ip`? tell `sender_ip` at `sender_mac`.
    ArpRequest {
        /// The asker's MAC.
        sender_mac: [u8; 6],
        /// The asker's IPv4 address.
        sender_ip: [u8; 4],
        /// The address being resolved.
        target_ip: [u8; 4],
    },
    /// ARP reply: `sender_ip` is at `sender_mac`.
    ArpReply {
        /// The answerer's MAC.
        sender_mac: [u8; 6],
        /// The answerer's IPv4 address.
        sender_ip: [u8; 4],
    },
    /// Neighbour solicitation for `target` from `source` (all zeros for
    /// duplicate address detection), with the asker's MAC when the frame
    /// carries a source link-layer address option.
    Solicit {
        /// The asker's IPv6 address.
        source: [u8; 16],
        /// The asker's MAC (its Ethernet source).
        source_mac: [u8; 6],
        /// The address being resolved.
        target: [u8; 16],
    },
    /// Neighbour advertisement: `target` is at `mac`.
    Advert {
        /// The advertised address.
        target: [u8; 16],
        /// Its MAC (the target link-layer option, else the Ethernet source).
        mac: [u8; 6],
    },
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// The neighbour message a frame carries, if it is one (untagged
/// Ethernet; other frames, and malformed ones, are `None`).
pub fn parse_neighbour(frame: &[u8]) -> Option<Neighbour> {
    if frame.len() < 14 {
        return None;
    }
    let src_mac: [u8; 6] = frame[6..12].try_into().ok()?;
    match be16(frame, 12) {
        ETHERTYPE_ARP => {
            let a = frame.get(14..42)?;
            // Ethernet (1), IPv4 (0x0800), lengths 6 and 4.
            if be16(a, 0) != 1 || be16(a, 2) != 0x0800 || a[4] != 6 || a[5] != 4 {
                return None;
            }
            let sender_mac = a[8..14].try_into().ok()?;
            let sender_ip = a[14..18].try_into().ok()?;
            match be16(a, 6) {
                1 => Some(Neighbour::ArpRequest {
                    sender_mac,
                    sender_ip,
                    target_ip: a[24..28].try_into().ok()?,
                }),
                2 => Some(Neighbour::ArpReply {
                    sender_mac,
                    sender_ip,
                }),
                _ => None,
            }
        }
        ETHERTYPE_IPV6 => {
            let ip = frame.get(14..54)?;
            if ip[0] >> 4 != 6 || ip[6] != ICMPV6 || ip[7] != 255 {
                return None; // RFC 4861 §7.1.1: hop limit must be 255
            }
            let plen = be16(ip, 4) as usize;
            let icmp = frame.get(54..54 + plen)?;
            if icmp.len() < 24 || icmp[1] != 0 {
                return None;
            }
            let source: [u8; 16] = ip[8..24].try_into().ok()?;
            let dest: [u8; 16] = ip[24..40].try_into().ok()?;
            if icmpv6_checksum(&source, &dest, icmp) != 0 {
                return None;
            }
            let target: [u8; 16] = icmp[8..24].try_into().ok()?;
            let lla = |kind: u8| -> Option<[u8; 6]> {
                let mut opts = &icmp[24..];
                while opts.len() >= 8 {
                    let len = opts[1] as usize * 8;
                    if len == 0 || len > opts.len() {
                        return None;
                    }
                    if opts[0] == kind && len >= 8 {
                        return opts[2..8].try_into().ok();
                    }
                    opts = &opts[len..];
                }
                None
            };
            match icmp[0] {
                ND_SOLICIT => Some(Neighbour::Solicit {
                    source,
                    source_mac: lla(OPT_SOURCE_LLA).unwrap_or(src_mac),
                    target,
                }),
                ND_ADVERT => Some(Neighbour::Advert {
                    target,
                    mac: lla(OPT_TARGET_LLA).unwrap_or(src_mac),
                }),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Write an ARP frame (`op` 1 request, 2 reply) into `out` (at least
/// [`ARP_FRAME_LEN`] bytes); returns its length. A request goes to the
/// broadcast MAC with a zero target MAC.
pub fn build_arp(
    out: &mut [u8],
    op: u16,
    sender: ([u8; 6], [u8; 4]),
    target: ([u8; 6], [u8; 4]),
) -> usize {
    let f = &mut out[..ARP_FRAME_LEN];
    let eth_dst = if op == 1 { [0xff; 6] } else { target.0 };
    f[0..6].copy_from_slice(&eth_dst);
    f[6..12].copy_from_slice(&sender.0);
    f[12..14].copy_from_slice(&ETHERTYPE_ARP.to_be_bytes());
    f[14..16].copy_from_slice(&1u16.to_be_bytes());
    f[16..18].copy_from_slice(&0x0800u16.to_be_bytes());
    f[18] = 6;
    f[19] = 4;
    f[20..22].copy_from_slice(&op.to_be_bytes());
    f[22..28].copy_from_slice(&sender.0);
    f[28..32].copy_from_slice(&sender.1);
    let tmac = if op == 1 { [0; 6] } else { target.0 };
    f[32..38].copy_from_slice(&tmac);
    f[38..42].copy_from_slice(&target.1);
    ARP_FRAME_LEN
}

/// Write a solicited neighbour advertisement for `addr` at `mac`, to
/// `dst` (at `dst_mac`; the all-nodes address when the solicitation came
/// from the unspecified address), into `out` (at least [`ND_FRAME_LEN`]
/// bytes); returns its length.
pub fn build_advert(
    out: &mut [u8],
    mac: [u8; 6],
    addr: [u8; 16],
    dst_mac: [u8; 6],
    dst: [u8; 16],
) -> usize {
    let solicited = dst != [0; 16];
    let (dst, dst_mac) = if solicited {
        (dst, dst_mac)
    } else {
        let mut all = [0u8; 16];
        all[0] = 0xff;
        all[1] = 0x02;
        all[15] = 1;
        (all, [0x33, 0x33, 0, 0, 0, 1])
    };
    let f = &mut out[..ND_FRAME_LEN];
    f[0..6].copy_from_slice(&dst_mac);
    f[6..12].copy_from_slice(&mac);
    f[12..14].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
    f[14..18].copy_from_slice(&[0x60, 0, 0, 0]);
    f[18..20].copy_from_slice(&32u16.to_be_bytes());
    f[20] = ICMPV6;
    f[21] = 255;
    f[22..38].copy_from_slice(&addr);
    f[38..54].copy_from_slice(&dst);
    let icmp = &mut f[54..86];
    icmp.fill(0);
    icmp[0] = ND_ADVERT;
    // Solicited (S) when answering a unicast asker, override (O).
    icmp[4] = if solicited { 0x60 } else { 0x20 };
    icmp[8..24].copy_from_slice(&addr);
    icmp[24] = OPT_TARGET_LLA;
    icmp[25] = 1;
    icmp[26..32].copy_from_slice(&mac);
    let sum = icmpv6_checksum(&addr, &dst, icmp);
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    ND_FRAME_LEN
}

/// The Internet checksum of an ICMPv6 message with its pseudo-header
/// (RFC 8200 §8.1); 0 when `msg` carries a correct checksum.
pub fn icmpv6_checksum(src: &[u8; 16], dst: &[u8; 16], msg: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut add = |b: &[u8]| {
        for c in b.chunks(2) {
            let w = if c.len() == 2 {
                u16::from_be_bytes([c[0], c[1]])
            } else {
                u16::from_be_bytes([c[0], 0])
            };
            sum += u32::from(w);
        }
    };
    add(src);
    add(dst);
    add(&(msg.len() as u32).to_be_bytes());
    add(&[0, 0, 0, ICMPV6]);
    add(msg);
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arp_round_trips() {
        let mut f = [0u8; ARP_FRAME_LEN];
        let me = ([2, 0, 0, 0, 0, 2], [198, 18, 0, 2]);
        let them = ([0x52, 0x54, 0, 0, 0, 1], [198, 18, 0, 1]);
        build_arp(&mut f, 1, them, (Default::default(), me.1));
        assert_eq!(&f[0..6], &[0xff; 6]);
        assert_eq!(
            parse_neighbour(&f),
            Some(Neighbour::ArpRequest {
                sender_mac: them.0,
                sender_ip: them.1,
                target_ip: me.1
            })
        );
        build_arp(&mut f, 2, me, them);
        assert_eq!(&f[0..6], &them.0);
        assert_eq!(
            parse_neighbour(&f),
            Some(Neighbour::ArpReply {
                sender_mac: me.0,
                sender_ip: me.1
            })
        );
        // Not Ethernet/IPv4 ARP.
        f[15] = 6;
        assert_eq!(parse_neighbour(&f), None);
    }

    #[test]
    fn advert_checksum_verifies_and_parses() {
        let mut f = [0u8; ND_FRAME_LEN];
        let mac = [2, 0xc9, 1, 2, 3, 4];
        let mut addr = [0u8; 16];
        addr[0] = 0xfe;
        addr[1] = 0x80;
        addr[15] = 9;
        let mut peer = addr;
        peer[15] = 7;
        build_advert(&mut f, mac, addr, [0x52, 0x54, 0, 0, 0, 1], peer);
        assert_eq!(
            parse_neighbour(&f),
            Some(Neighbour::Advert { target: addr, mac })
        );
        // A flipped bit breaks the checksum: no longer a neighbour message.
        f[60] ^= 1;
        assert_eq!(parse_neighbour(&f), None);
    }
}
