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
    /// Native InfiniBand with a GRH (the peer's LID and port GID).
    #[value(name = "ib-grh")]
    IbGrh,
}

impl Transport {
    /// A native InfiniBand transport.
    pub fn ib(self) -> bool {
        self.testbed().ib()
    }

    /// The two-host setup's name for it.
    pub fn testbed(self) -> mlx5_testbed::Transport {
        use mlx5_testbed::Transport as T;
        match self {
            Transport::RoceV2Ipv4 => T::RoceV2Ipv4,
            Transport::RoceV2Ipv6 => T::RoceV2Ipv6,
            Transport::RoceV1 => T::RoceV1,
            Transport::Ib => T::IbLid,
            Transport::IbGrh => T::IbGrh,
        }
    }

    /// The option value.
    pub fn name(self) -> &'static str {
        match self {
            Transport::RoceV2Ipv4 => "roce-v2-ipv4",
            Transport::RoceV2Ipv6 => "roce-v2-ipv6",
            Transport::RoceV1 => "roce-v1",
            Transport::Ib => "ib",
            Transport::IbGrh => "ib-grh",
        }
    }

    /// What it is, in words.
    pub fn describe(self) -> &'static str {
        self.testbed().describe()
    }
}

/// The operation each message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Op {
    /// SEND into the peer's receive WQE (rc_pingpong's operation).
    #[value(name = "send")]
    Send,
    /// SEND with immediate data (the message number).
    #[value(name = "send-imm")]
    SendImm,
    /// RDMA WRITE into the peer's buffer; its ACK (the send completion)
    /// says the data is placed, then the peer checks it.
    #[value(name = "write")]
    Write,
    /// RDMA WRITE with immediate: the data placed, and a receive WQE of the
    /// peer consumed for the immediate.
    #[value(name = "write-imm")]
    WriteImm,
    /// RDMA READ of the peer's buffer (the peer prepares the message).
    #[value(name = "read")]
    Read,
    /// ATOMIC FETCH_AND_ADD on an 8-byte counter of the peer.
    #[value(name = "fetch-add")]
    FetchAdd,
    /// ATOMIC COMPARE_AND_SWAP on an 8-byte word of the peer.
    #[value(name = "cmp-swap")]
    CmpSwap,
}

impl Op {
    /// The option value.
    pub fn name(self) -> &'static str {
        match self {
            Op::Send => "send",
            Op::SendImm => "send-imm",
            Op::Write => "write",
            Op::WriteImm => "write-imm",
            Op::Read => "read",
            Op::FetchAdd => "fetch-add",
            Op::CmpSwap => "cmp-swap",
        }
    }

    /// An atomic: 8 bytes, always.
    pub fn atomic(self) -> bool {
        matches!(self, Op::FetchAdd | Op::CmpSwap)
    }

    /// Each message consumes a receive WQE of the peer.
    pub fn consumes_recv(self) -> bool {
        matches!(self, Op::Send | Op::SendImm | Op::WriteImm)
    }

    /// What the messages are, in words.
    pub fn describe(self) -> &'static str {
        match self {
            Op::Send => "SENDs",
            Op::SendImm => "SENDs with immediate",
            Op::Write => "RDMA WRITEs",
            Op::WriteImm => "RDMA WRITEs with immediate",
            Op::Read => "RDMA READs",
            Op::FetchAdd => "FETCH_AND_ADDs",
            Op::CmpSwap => "COMPARE_AND_SWAPs",
        }
    }
}

/// The QP type the two hosts talk through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum QpKind {
    /// A connected RC pair (rdma-core's `ibv_rc_pingpong`).
    #[value(name = "rc")]
    Rc,
    /// One UD QP per host and an address handle to the other
    /// (`ibv_ud_pingpong`): SENDs only, at most the ports' MTU, every
    /// receive buffer 40 bytes longer for the GRH.
    #[value(name = "ud")]
    Ud,
}

impl QpKind {
    /// The option value.
    pub fn name(self) -> &'static str {
        match self {
            QpKind::Rc => "rc",
            QpKind::Ud => "ud",
        }
    }
}

/// Where each QP takes its receive WQEs from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Rq {
    /// An SRQ per host.
    #[value(name = "srq")]
    Srq,
    /// The QP's own receive queue (as rc_pingpong and perftest create
    /// their QPs).
    #[value(name = "own")]
    Own,
}

impl Rq {
    /// The option value.
    pub fn name(self) -> &'static str {
        match self {
            Rq::Srq => "srq",
            Rq::Own => "own",
        }
    }

    /// The two-host setup's name for it.
    pub fn testbed(self) -> mlx5_testbed::RecvQueue {
        match self {
            Rq::Srq => mlx5_testbed::RecvQueue::Srq,
            Rq::Own => mlx5_testbed::RecvQueue::Own,
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
    /// The QP type: RC (ibv_rc_pingpong) or UD (ibv_ud_pingpong)
    #[arg(long, value_enum, default_value = "rc")]
    pub qp: QpKind,
    /// The operation of each message
    #[arg(long, value_enum, default_value = "send")]
    pub op: Op,
    /// Where each QP receives: an SRQ, or the QP's own receive queue
    #[arg(long, value_enum, default_value = "srq")]
    pub rq: Rq,
    /// Bytes per message, 0 to 1048576 (K and M suffixes: 4K); the
    /// atomics move 8; UD at most the ports' MTU [default: 4096,
    /// rc_pingpong's; UD 1024, the model's Ethernet port MTU]
    #[arg(long, value_parser = parse_size, value_name = "BYTES")]
    pub size: Option<usize>,
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

impl Args {
    /// Bytes per message: `--size`, else 8 for the atomics, 1024 on UD
    /// and 4096 for the rest.
    pub fn message_size(&self) -> usize {
        self.size.unwrap_or(if self.op.atomic() {
            8
        } else if self.qp == QpKind::Ud {
            DEFAULT_UD_SIZE
        } else {
            DEFAULT_SIZE
        })
    }
}

/// `--size`'s default (rc_pingpong's).
pub const DEFAULT_SIZE: usize = 4096;
/// `--size`'s default with `--qp ud`: ud_pingpong's 2048 is larger than
/// the model's Ethernet ports' active MTU (1024), which a UD message may
/// not exceed; 1024 fits every port.
pub const DEFAULT_UD_SIZE: usize = 1024;

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

/// An IB MTU in bytes (also `mlx5 peer`'s).
pub(crate) fn parse_mtu(s: &str) -> Result<Mtu, String> {
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

/// A fraction of frames: a finite number from 0 to 1 (also `mlx5 peer`'s).
pub(crate) fn parse_fraction(s: &str) -> Result<f64, String> {
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
