//! `mlx5 peer`'s options, range-checked by clap before anything is created.

use mlx5_driver::qp::Mtu;

use super::link::LinkArgs;
use crate::cmd::pingpong::opts::parse_mtu;

/// The program on the other side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Program {
    /// rdma-core's `ibv_rc_pingpong`: RC SENDs back and forth.
    #[value(name = "rc-pingpong")]
    Rc,
    /// rdma-core's `ibv_ud_pingpong`: UD SENDs back and forth, each
    /// received into a buffer that starts with 40 bytes of GRH space.
    #[value(name = "ud-pingpong")]
    Ud,
    /// rdma-core's `ibv_srq_pingpong`: RC SENDs on several QPs that all
    /// receive through one shared receive queue.
    #[value(name = "srq-pingpong")]
    Srq,
}

impl Program {
    /// The name the program's runs and JSON carry.
    pub fn name(self) -> &'static str {
        match self {
            Program::Rc => "rc-pingpong",
            Program::Ud => "ud-pingpong",
            Program::Srq => "srq-pingpong",
        }
    }
}

/// The options of `mlx5 peer`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The program the model plays the other side of
    #[arg(long, value_enum, default_value = "rc-pingpong")]
    pub program: Program,
    /// Bytes per message (the program's -s) [the program's default: 4096
    /// for rc and srq, 1024 for ud]
    #[arg(long, value_name = "BYTES",
          value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    pub size: Option<u32>,
    /// QPs on the shared receive queue (srq_pingpong's -q; the program
    /// must run with the same number)
    #[arg(long, default_value = "16", value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=255))]
    pub qps: u32,
    /// The program runs with -c (ud_pingpong): its client zeroes the first
    /// byte of every 4096-byte page of its first message and checks those
    /// bytes come back; the model's first message has them zeroed too
    #[arg(long)]
    pub chk: bool,
    /// Round trips (the program's -n; srq_pingpong's count is of all its
    /// QPs together) [the programs' default]
    #[arg(long, default_value = "1000", value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub iters: u32,
    /// Path MTU in bytes (the program's -m): 256, 512, 1024, 2048 or 4096
    #[arg(long, default_value = "1024", value_parser = parse_mtu, value_name = "BYTES")]
    pub mtu: Mtu,
    /// The link to the program: the exchange, the UDP socket, the
    /// model's address, the faults, the capture and the time limit.
    #[command(flatten)]
    pub link: LinkArgs,
}

impl Args {
    /// The message size: `--size`, else the program's default.
    pub fn size(&self) -> u32 {
        self.size.unwrap_or(match self.program {
            Program::Ud => 1024,
            Program::Rc | Program::Srq => 4096,
        })
    }
}
