//! The options `mlx5 peer` and `mlx5 perf` share, flattened into both
//! commands' `Args`: the program's TCP exchange (`--connect`/`--listen`),
//! the UDP link of the model's port, the model's address, the faults on
//! its own frames, the capture and the time limit; and what both
//! commands do with them the same way: the model's host brought up and
//! joined to the link, and at the end its counters and its teardown.

use std::net::{SocketAddr, TcpListener};

use mlx5_sim::wire::{Fault, Faults, LinkType, Wire, WireStats};
use mlx5_sim::{LinkStats, TrafficStats, UdpLink};
use mlx5_testbed::HostSpec;
use serde_json::{json, Value};

use crate::cmd::pingpong::host::{setup_error, Host};
use crate::cmd::pingpong::opts::parse_fraction;
use crate::common::error::CliError;
use crate::common::target::{self, ModelOpts, ModelRun};

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

    /// The model's host of `spec` (its device always threaded: the program
    /// on the other side runs on the wall clock), on a wire captured to
    /// `--pcap`, its port joined to the UDP link.
    pub(crate) fn bring_up<A>(
        &self,
        r: &ModelRun<'_, A>,
        spec: HostSpec,
    ) -> Result<LinkedHost, CliError> {
        let model = ModelOpts {
            threaded: true,
            ..r.model
        };
        let dev = target::model(r.profile, &model);
        let wire = Wire::new(LinkType::Ethernet);
        self.start_capture(&wire)?;
        if r.progress {
            eprintln!("mlx5: bringing up the model's host");
        }
        let host = Host::new(dev, &wire, r.cfg, spec).map_err(setup_error)?;
        match self.join(&host, &wire, r.model.seed) {
            Ok(link) => Ok(LinkedHost {
                host,
                link,
                wire,
                capturing: self.pcap.is_some(),
            }),
            Err(e) => {
                let _ = host.close();
                Err(e)
            }
        }
    }

    /// With `--pcap`, start capturing every frame of `wire` to its file.
    fn start_capture(&self, wire: &Wire) -> Result<(), CliError> {
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
    fn join(&self, host: &Host, wire: &Wire, seed: Option<u64>) -> Result<UdpLink, CliError> {
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

/// The model's host on the UDP link, for one run.
pub(crate) struct LinkedHost {
    /// The host: one model device, driven through the verbs facade.
    pub host: Host,
    /// Its port's UDP link.
    pub link: UdpLink,
    wire: Wire,
    capturing: bool,
}

impl LinkedHost {
    /// The counters, then the link left, the capture ended and the host
    /// closed: the first failure of the last two.
    pub(crate) fn close(self) -> (Counters, Result<(), CliError>) {
        let counters = Counters {
            link: self.link.stats(),
            wire: self.wire.stats(),
            model: self.host.dev.traffic().stats(),
        };
        drop(self.link);
        let captured = if self.capturing {
            self.wire.end_capture().map(|_| ())
        } else {
            Ok(())
        };
        let closed = self.host.close().map(|_| ()).map_err(setup_error);
        let res = closed.and(captured.map_err(|e| {
            CliError::failed(
                format!("writing the capture file: {e}"),
                "check the disk space",
            )
        }));
        (counters, res)
    }
}

/// What the UDP link, the faults on the wire and the model counted.
pub(crate) struct Counters {
    /// The UDP link's frames and ARP.
    pub link: LinkStats,
    /// The wire's frames and the faults on the model's.
    pub wire: WireStats,
    /// The model's traffic and recovery.
    pub model: TrafficStats,
}

impl Counters {
    /// The wire's faults, as the runs' `wire` JSON.
    pub(crate) fn wire_json(&self) -> Value {
        let w = &self.wire;
        json!({"frames": w.frames, "dropped": w.dropped, "corrupted": w.corrupted})
    }

    /// The model's counters, as the runs' `model` JSON.
    pub(crate) fn model_json(&self) -> Value {
        let m = &self.model;
        json!({
            "wire_tx": m.wire_tx, "wire_rx": m.wire_rx,
            "wire_dropped": m.wire_dropped, "retransmissions": m.retransmissions,
            "ack_timeouts": m.ack_timeouts, "duplicates": m.duplicates,
            "seq_naks_received": m.seq_naks_received, "rnr_naks": m.rnr_naks,
        })
    }

    /// The lines of the faults on the model's frames and of its counters.
    pub(crate) fn print_faults_and_model(&self) {
        let (w, m) = (&self.wire, &self.model);
        println!(
            "faults on the model's frames: {} dropped, {} corrupted",
            w.dropped, w.corrupted
        );
        println!(
            "model: {} frames sent, {} received ({} dropped), {} retransmissions, {} ACK timeouts, {} duplicates, {} sequence NAKs received, {} RNR NAKs received",
            m.wire_tx, m.wire_rx, m.wire_dropped, m.retransmissions,
            m.ack_timeouts, m.duplicates, m.seq_naks_received, m.rnr_naks
        );
    }
}
