//! `mlx5 pingpong`'s options: parsed and range-checked by clap before
//! anything is created, so a hostile value is a usage error (exit 2), never
//! a panic or an unbounded allocation.

use mlx5_driver::qp::Mtu;

/// The largest `--size`: 1 MiB. Each host holds one send area and
/// [`super::host::RECVS`] receive slots of this size, so the tool's DMA
/// memory stays under 20 MiB.
pub const MAX_SIZE: usize = 1 << 20;
/// The most `--iters`.
pub const MAX_ITERS: u32 = 1_000_000;

/// How the two hosts reach each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Transport {
    /// RoCE v2 over IPv4: each side adds an IPv4-mapped GID
    /// (`::ffff:198.18.0.N`) and names the peer's MAC.
    #[value(name = "roce-v2-ipv4")]
    RoceV2Ipv4,
    /// RoCE v2 over IPv6: the port's default link-local RoCE v2 GIDs.
    #[value(name = "roce-v2-ipv6")]
    RoceV2Ipv6,
    /// RoCE v1 (Ethernet type 0x8915): the default link-local RoCE v1 GIDs.
    #[value(name = "roce-v1")]
    RoceV1,
    /// Native InfiniBand, addressed by LID.
    #[value(name = "ib")]
    Ib,
}

impl Transport {
    /// A native InfiniBand transport.
    pub fn ib(self) -> bool {
        self == Transport::Ib
    }

    /// The option value.
    pub fn name(self) -> &'static str {
        match self {
            Transport::RoceV2Ipv4 => "roce-v2-ipv4",
            Transport::RoceV2Ipv6 => "roce-v2-ipv6",
            Transport::RoceV1 => "roce-v1",
            Transport::Ib => "ib",
        }
    }

    /// What it is, in words.
    pub fn describe(self) -> &'static str {
        match self {
            Transport::RoceV2Ipv4 => "RoCE v2 over IPv4",
            Transport::RoceV2Ipv6 => "RoCE v2 over IPv6",
            Transport::RoceV1 => "RoCE v1",
            Transport::Ib => "InfiniBand by LID",
        }
    }
}

/// The options of `mlx5 pingpong` (the global `--seed` seeds the two
/// devices, the PSNs and the wire's faults; `--json` applies as everywhere).
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// How the hosts reach each other
    #[arg(long, value_enum, default_value = "roce-v2-ipv4")]
    pub transport: Transport,
    /// Bytes per message, 0 to 1048576 (K and M suffixes: 4K) [rc_pingpong's default]
    #[arg(long, default_value = "4096", value_parser = parse_size, value_name = "BYTES")]
    pub size: usize,
    /// Round trips, 1 to 1000000 [rc_pingpong's default]
    #[arg(long, default_value = "1000", value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_ITERS)))]
    pub iters: u32,
    /// Path MTU: 256, 512, 1024, 2048 or 4096, at most the port's active MTU
    #[arg(long, default_value = "1024", value_parser = parse_mtu, value_name = "BYTES")]
    pub mtu: Mtu,
    /// Fraction of frames the wire drops, 0 to 1
    #[arg(long, default_value = "0", value_parser = parse_fraction, value_name = "FRACTION")]
    pub drop: f64,
    /// Fraction of frames the wire duplicates, 0 to 1
    #[arg(long, default_value = "0", value_parser = parse_fraction, value_name = "FRACTION")]
    pub dup: f64,
    /// Fraction of frames the wire holds back behind the next one, 0 to 1
    #[arg(long, default_value = "0", value_parser = parse_fraction, value_name = "FRACTION")]
    pub reorder: f64,
    /// Fraction of frames whose ICRC the wire corrupts (the receiver drops
    /// them silently), 0 to 1
    #[arg(long, default_value = "0", value_parser = parse_fraction, value_name = "FRACTION")]
    pub corrupt: f64,
    /// Write every frame to FILE (pcap: link type Ethernet for RoCE,
    /// InfiniBand for IB)
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<std::path::PathBuf>,
}

/// A message size: decimal or 0x hex, optional K or M suffix, at most
/// [`MAX_SIZE`]; zero is a valid (empty) message.
fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let (num, shift) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 10),
        Some((i, 'm' | 'M')) => (&t[..i], 20),
        _ => (t, 0),
    };
    let q = crate::common::error::quote(s);
    let v = crate::common::target::parse_u64(num)
        .map_err(|_| format!("'{q}' is not a byte count (e.g. 64, 0x1000, 4K, 1M)"))?;
    v.checked_mul(1u64 << shift)
        .filter(|b| *b <= MAX_SIZE as u64)
        .map(|b| b as usize)
        .ok_or_else(|| format!("'{q}' is too large (at most {MAX_SIZE} bytes, 1M)"))
}

/// An IB MTU in bytes.
fn parse_mtu(s: &str) -> Result<Mtu, String> {
    match s.trim() {
        "256" => Ok(Mtu::B256),
        "512" => Ok(Mtu::B512),
        "1024" => Ok(Mtu::B1024),
        "2048" => Ok(Mtu::B2048),
        "4096" => Ok(Mtu::B4096),
        _ => Err(format!(
            "'{}' is not an MTU (256, 512, 1024, 2048 or 4096)",
            crate::common::error::quote(s)
        )),
    }
}

/// A fraction of frames: a finite number from 0 to 1.
fn parse_fraction(s: &str) -> Result<f64, String> {
    let q = crate::common::error::quote(s);
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{q}' is not a number (a fraction such as 0.01)"))?;
    if !(0.0..=1.0).contains(&v) {
        return Err(format!("'{q}' is out of range (a fraction from 0 to 1)"));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_fractions_and_mtus_are_range_checked() {
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("1M"), Ok(MAX_SIZE));
        assert!(parse_size("1025K").is_err());
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size("0xffffffffffffffffK").is_err());
        assert!(parse_size("-1").is_err());
        assert_eq!(parse_fraction("0.25"), Ok(0.25));
        for bad in ["NaN", "inf", "-0.1", "1.5", "x"] {
            assert!(parse_fraction(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_mtu("2048"), Ok(Mtu::B2048));
        assert!(parse_mtu("1500").is_err());
    }
}
