//! `mlx5 perf`'s options, range-checked by clap before anything is created.

use crate::cmd::peer::link::LinkArgs;

/// The perftest program on the other side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Test {
    /// `ib_write_lat`: RDMA WRITEs back and forth, each side polling the
    /// last byte of its buffer for the peer's count.
    #[value(name = "write-lat")]
    WriteLat,
    /// `ib_read_lat`: the client READs the server's buffer, one at a time.
    #[value(name = "read-lat")]
    ReadLat,
    /// `ib_atomic_lat`: the client's FETCH_AND_ADDs (add 1) on the
    /// server's buffer, one at a time.
    #[value(name = "atomic-lat")]
    AtomicLat,
    /// `ib_send_bw`: the client's SENDs into the server's receives.
    #[value(name = "send-bw")]
    SendBw,
    /// `ib_write_bw`: the client's RDMA WRITEs into the server's buffer.
    #[value(name = "write-bw")]
    WriteBw,
    /// `ib_read_bw`: the client's RDMA READs of the server's buffer.
    #[value(name = "read-bw")]
    ReadBw,
}

impl Test {
    /// The program's name.
    pub fn program(self) -> &'static str {
        match self {
            Test::WriteLat => "ib_write_lat",
            Test::ReadLat => "ib_read_lat",
            Test::AtomicLat => "ib_atomic_lat",
            Test::SendBw => "ib_send_bw",
            Test::WriteBw => "ib_write_bw",
            Test::ReadBw => "ib_read_bw",
        }
    }

    /// The program's default message size (perftest's `DEF_SIZE_LAT`,
    /// `DEF_SIZE_ATOMIC`, `DEF_SIZE_BW`).
    pub fn default_size(self) -> u32 {
        match self {
            Test::WriteLat | Test::ReadLat => 2,
            Test::AtomicLat => 8,
            Test::SendBw | Test::WriteBw | Test::ReadBw => 65536,
        }
    }

    /// Whether it is a bandwidth test.
    pub fn bw(self) -> bool {
        matches!(self, Test::SendBw | Test::WriteBw | Test::ReadBw)
    }

    /// Key records before the connect and after it (before the traffic),
    /// as the program's `main` exchanges them with one QP: the latency
    /// tests send one extra record first; `ib_send_bw` one more after the
    /// connect and one once its receives are posted.
    pub fn hand_shakes(self) -> (usize, usize) {
        match self {
            Test::WriteLat | Test::ReadLat | Test::AtomicLat => (2, 2),
            Test::WriteBw | Test::ReadBw => (1, 2),
            Test::SendBw => (1, 3),
        }
    }

    /// Whether the peer's READ/atomic depth matters (perftest advertises
    /// its device's maximum then, else 1).
    pub fn reads(self) -> bool {
        matches!(self, Test::ReadLat | Test::AtomicLat | Test::ReadBw)
    }
}

/// The options of `mlx5 perf`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The program on the other side
    #[arg(value_enum)]
    pub test: Test,
    /// Bytes per message (the program's -s) [the program's default: 2, 8
    /// for atomic-lat, 65536 for the bandwidth tests]
    #[arg(long, value_name = "BYTES",
          value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    pub size: Option<u32>,
    /// Iterations (the program's -n) [perftest's default, 1000]
    #[arg(long, default_value = "1000", value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub iters: u32,
    /// The link to the program: the exchange, the UDP socket, the
    /// model's address, the faults, the capture and the time limit.
    #[command(flatten)]
    pub link: LinkArgs,
}

impl Args {
    /// The message size: `--size`, else the program's default.
    pub fn size(&self) -> u32 {
        self.size.unwrap_or(self.test.default_size())
    }
}
