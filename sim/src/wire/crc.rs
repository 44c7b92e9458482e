//! The invariant CRC (ICRC) of RoCE and InfiniBand packets and the variant
//! CRC (VCRC) of native IB (IBTA vol. 1 §7.8; Annex A16/A17 for RoCE).
//!
//! ICRC: CRC-32 with the Ethernet/zlib parameters (`crc32fast`) over the
//! packet with every field a router may rewrite set to all ones: for RoCE
//! eight 0xFF bytes stand for the missing LRH, then the IPv4 header (TOS,
//! TTL, checksum masked), the IPv6 header or GRH (traffic class, flow label,
//! hop limit masked), the UDP header (checksum masked), the BTH (byte 4:
//! FECN, BECN, reserved masked), then the rest unchanged up to the ICRC.
//! Native IB starts with its real LRH with VL set to 0xF. The result goes on
//! the wire least-significant byte first (Linux rxe `rxe_icrc.c`).

use super::transport::BTH_LEN;

/// Which outer headers precede the BTH, for masking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outer {
    /// RoCE v2 over IPv4 (20-byte header) + UDP.
    Ipv4,
    /// RoCE v2 over IPv6 + UDP.
    Ipv6,
    /// RoCE v1: GRH.
    Grh,
    /// Native IB: LRH, and a GRH when `grh`.
    Lrh {
        /// A GRH follows the LRH.
        grh: bool,
    },
}

/// Length of the LRH.
pub const LRH_LEN: usize = 8;
/// Length of the GRH (and of an IPv6 header).
pub const GRH_LEN: usize = 40;
/// Length of an option-less IPv4 header.
pub const IPV4_LEN: usize = 20;
/// Length of the UDP header.
pub const UDP_LEN: usize = 8;
/// Length of the ICRC.
pub const ICRC_LEN: usize = 4;
/// Length of the VCRC.
pub const VCRC_LEN: usize = 2;

impl Outer {
    /// Bytes from the start of the outer headers to the BTH.
    pub(crate) const fn len(self) -> usize {
        match self {
            Outer::Ipv4 => IPV4_LEN + UDP_LEN,
            Outer::Ipv6 => GRH_LEN + UDP_LEN,
            Outer::Grh => GRH_LEN,
            Outer::Lrh { grh: false } => LRH_LEN,
            Outer::Lrh { grh: true } => LRH_LEN + GRH_LEN,
        }
    }
}

/// The CRC-32 of the eight 0xFF bytes that stand for the LRH a RoCE packet
/// lacks: every RoCE ICRC starts from it (checked against `crc32fast` in
/// the unit test below).
const CRC_OF_MISSING_LRH: u32 = 0x2144_df1c;

/// Mask the traffic class, flow label and hop limit of an IPv6 header/GRH.
fn mask_grh(h: &mut [u8]) {
    h[0] |= 0x0f;
    h[1] = 0xff;
    h[2] = 0xff;
    h[3] = 0xff;
    h[7] = 0xff;
}

/// The ICRC of a packet whose outer headers start at `pkt[0]`, are of kind
/// `outer`, and whose ICRC-covered bytes end at `pkt.len()` (the ICRC itself
/// and any VCRC are not in `pkt`).
pub(crate) fn icrc(outer: Outer, pkt: &[u8]) -> u32 {
    let head = outer.len() + BTH_LEN;
    debug_assert!(pkt.len() >= head);
    // The longest masked prefix: LRH + GRH + BTH = 60 bytes.
    let mut masked = [0xffu8; LRH_LEN + GRH_LEN + UDP_LEN + BTH_LEN];
    let mut h = match outer {
        Outer::Ipv4 | Outer::Ipv6 | Outer::Grh => {
            crc32fast::Hasher::new_with_initial(CRC_OF_MISSING_LRH)
        }
        Outer::Lrh { .. } => crc32fast::Hasher::new(),
    };
    let m = &mut masked[..head];
    m.copy_from_slice(&pkt[..head]);
    match outer {
        Outer::Ipv4 => {
            m[1] = 0xff; // TOS
            m[8] = 0xff; // TTL
            m[10] = 0xff; // header checksum
            m[11] = 0xff;
            m[IPV4_LEN + 6] = 0xff; // UDP checksum
            m[IPV4_LEN + 7] = 0xff;
        }
        Outer::Ipv6 => {
            mask_grh(&mut m[..GRH_LEN]);
            m[GRH_LEN + 6] = 0xff;
            m[GRH_LEN + 7] = 0xff;
        }
        Outer::Grh => mask_grh(&mut m[..GRH_LEN]),
        Outer::Lrh { grh } => {
            m[0] |= 0xf0; // VL
            if grh {
                mask_grh(&mut m[LRH_LEN..LRH_LEN + GRH_LEN]);
            }
        }
    }
    m[outer.len() + 4] = 0xff; // BTH FECN, BECN, reserved
    h.update(m);
    h.update(&pkt[head..]);
    h.finalize()
}

/// CRC-16 polynomial of the VCRC (x^16 + x^12 + x^3 + x + 1), processed
/// least-significant bit first like the ICRC (bit-reversed 0x100B).
const VCRC_POLY_REFLECTED: u16 = 0xd008;

const fn vcrc_table() -> [u16; 256] {
    let mut t = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u16;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ VCRC_POLY_REFLECTED
            } else {
                c >> 1
            };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
}

static VCRC_TABLE: [u16; 256] = vcrc_table();

/// The VCRC over `bytes` (LRH through ICRC): seeded with all ones, the
/// result inverted (IBTA vol. 1 §7.8.2).
pub fn vcrc(bytes: &[u8]) -> u16 {
    let mut c: u16 = 0xffff;
    for &b in bytes {
        c = (c >> 8) ^ VCRC_TABLE[((c ^ b as u16) & 0xff) as usize];
    }
    !c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_missing_lrh_prefix_is_the_crc_of_eight_ones_bytes() {
        assert_eq!(crc32fast::hash(&[0xff; LRH_LEN]), CRC_OF_MISSING_LRH);
        // Continuing from it equals hashing the prefix, for any rest.
        let rest = [0x5a_u8; 77];
        let mut whole = crc32fast::Hasher::new();
        whole.update(&[0xff; LRH_LEN]);
        whole.update(&rest);
        let mut cont = crc32fast::Hasher::new_with_initial(CRC_OF_MISSING_LRH);
        cont.update(&rest);
        assert_eq!(whole.finalize(), cont.finalize());
    }
}
