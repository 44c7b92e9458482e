//! The options `mlx5 peer` and `mlx5 perf` share, flattened into both
//! commands' `Args`: the program's TCP exchange (`--connect`/`--listen`),
//! the UDP link of the model's port, the model's address, the faults on
//! its own frames, the capture and the time limit; and the steps they
//! set up, which both commands take the same way.

use std::net::{SocketAddr, TcpListener};

use mlx5_sim::wire::{Fault, Faults, Wire};
use mlx5_sim::UdpLink;

use crate::cmd::pingpong::host::Host;
use crate::cmd::pingpong::opts::parse_fraction;
use crate::common::error::CliError;

/// The options of the link between the model and the program on the
/// other side, the same for `mlx5 peer` and `mlx5 perf`.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Link options")]
pub struct LinkArgs {
    /// Be the client of the program's TCP exchange: connect to the program
    /// (started as a server, without a host name) at ADDR:PORT
    #[arg(long, value_name = "ADDR:PORT", conflicts_with = "listen")]
    pub connect: Option<SocketAddr>,
    /// Be the server of the program's TCP exchange: listen on ADDR:PORT
    /// for the program started as a client
    #[arg(long, value_name = "ADDR:PORT", required_unless_present = "connect")]
    pub listen: Option<SocketAddr>,
    /// The UDP socket the model's port receives frames on (QEMU's
    /// `-netdev dgram` remote address)
    #[arg(long, value_name = "ADDR:PORT")]
    pub udp_local: SocketAddr,
    /// Where the model's port sends its frames (QEMU's `-netdev dgram`
    /// local address)
    #[arg(long, value_name = "ADDR:PORT")]
    pub udp_remote: SocketAddr,
    /// The model's IPv4 address is 198.18.0.N (its RoCE v2 GID
    /// ::ffff:198.18.0.N)
    #[arg(long, default_value = "2", value_name = "N",
          value_parser = clap::value_parser!(u8).range(1..=254))]
    pub host: u8,
    /// Fraction of the model's own frames dropped, 0 to 1
    #[arg(long, default_value = "0", value_parser = parse_fraction, value_name = "FRACTION")]
    pub drop: f64,
    /// Corrupt the ICRC of the model's Nth frame (from 0)
    #[arg(long, value_name = "N")]
    pub corrupt_frame: Option<u64>,
    /// Write every frame on the link, both directions, to FILE (pcap)
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<std::path::PathBuf>,
    /// Give up after this many seconds in all
    #[arg(long, default_value = "120", value_name = "SECONDS",
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub timeout: u64,
}

/// The model's side of the program's TCP exchange.
pub(crate) enum ExchangeSide {
    /// `--connect`: the program is the server at this address.
    Client(SocketAddr),
    /// `--listen`: the program connects to this socket.
    Server(TcpListener),
}

impl LinkArgs {
    /// The model's role in the JSON: `client` with `--connect`.
    pub(crate) fn role(&self) -> &'static str {
        if self.connect.is_some() {
            "client"
        } else {
            "server"
        }
    }

    /// `--connect`'s address, or the socket bound at `--listen` (said on
    /// stderr with `progress`).
    pub(crate) fn exchange_side(&self, progress: bool) -> Result<ExchangeSide, CliError> {
        match (self.connect, self.listen) {
            (Some(server), _) => Ok(ExchangeSide::Client(server)),
            (None, Some(at)) => {
                let l = TcpListener::bind(at).map_err(|e| {
                    CliError::failed(format!("cannot listen on {at}: {e}"), "choose a free port")
                })?;
                if progress {
                    eprintln!("mlx5: listening on {at}");
                }
                Ok(ExchangeSide::Server(l))
            }
            (None, None) => Err(CliError::usage(
                "give --connect or --listen",
                "--connect ADDR:PORT when the program is the server, --listen ADDR:PORT when it is the client",
            )),
        }
    }

    /// With `--pcap`, start capturing every frame of `wire` to its file.
    pub(crate) fn start_capture(&self, wire: &Wire) -> Result<(), CliError> {
        let Some(path) = &self.pcap else {
            return Ok(());
        };
        std::fs::File::create(path)
            .map(std::io::BufWriter::new)
            .and_then(|f| wire.capture(Box::new(f)))
            .map_err(|e| {
                CliError::failed(
                    format!("cannot write the capture file {}: {e}", path.display()),
                    "name a file in a writable directory",
                )
            })
    }

    /// Joins the model's port (`host`) to the UDP link `--udp-local` ->
    /// `--udp-remote` and sets `wire`'s faults on the model's own frames:
    /// `--drop` of them dropped, the `--corrupt-frame`th with a bad ICRC,
    /// seeded by `seed` (1 when none is given).
    pub(crate) fn join(
        &self,
        host: &Host,
        wire: &Wire,
        seed: Option<u64>,
    ) -> Result<UdpLink, CliError> {
        let (local, remote) = (self.udp_local, self.udp_remote);
        let link = UdpLink::join(&host.dev, local, remote).map_err(|e| {
            CliError::failed(
                format!("joining the UDP link {local} -> {remote}: {e}"),
                "is another program bound to --udp-local?",
            )
        })?;
        link.fault_model_frames_only();
        wire.set_faults(Faults {
            seed: seed.unwrap_or(1),
            drop: self.drop,
            chosen: self
                .corrupt_frame
                .map(|n| vec![(n, Fault::Corrupt)])
                .unwrap_or_default(),
            ..Faults::default()
        });
        Ok(link)
    }
}
