//! The command line (clap), and the exits that happen before a run: the
//! parser's own errors and panics, each with the JSON error document when
//! `--json` was given.

use clap::{Args, Parser, Subcommand};
use serde_json::{json, Value};

use crate::common::error::{CliError, EXIT_CODES};
use crate::scenario::Scenario;

const ABOUT: &str = "Drive an NVIDIA/Mellanox ConnectX (mlx5) NIC at register level: \
on the built-in device model (default) or on real hardware through VFIO";

const LONG_ABOUT: &str = "Drive an NVIDIA/Mellanox ConnectX (mlx5) NIC at register level, \
with the mlx5-driver crate: bring the HCA up through the firmware command interface, create \
completion and shared receive queues and RC queue pairs, send traffic between them, poll event \
queues, tear down.

Every subcommand runs on --device sim[:PROFILE] (the built-in device model; profiles cx4lx, \
cx5, cx6dx, cx7; the default, runs on any machine) or --device vfio:DDDD:BB:DD.F (a ConnectX \
bound to vfio-pci, see docs/hardware.md).

Start with: mlx5 demo. First time on a card: mlx5 selftest --device vfio:DDDD:BB:DD.F";

/// Upper bound of `--cmd-timeout-ms`: an hour. Linux waits 60 s for a
/// command (`MLX5_CMD_TIMEOUT_MSEC`) and 120 s for firmware initialisation;
/// anything longer than an hour is a typo, and an unbounded value would make
/// the driver's deadline unreachable.
const MAX_CMD_TIMEOUT_MS: u64 = 3_600_000;

const SELFTEST_HELP: &str = "The demo's steps, inside ten stages (stage N failing exits 10 + N):
   1 bring-up            ENABLE_HCA ... INIT_HCA, pages, EQs, PD, DMA key, loopback set-up
   2 capability checks   QUERY_ADAPTER, QUERY_VPORT_STATE; RC QPs, SRQ/RMP, CQ resize, loopback
   3 CQ                  a send CQ and a receive CQ
   4 SRQ                 an SRQ (RMP at ISSI 1) and the buffers
   5 memory key          CREATE_MKEY, QUERY_MKEY of it and of the DMA key
   6 QP pair             a sender and an SRQ-attached receiver, RESET -> RTS
   7 traffic             32 receives, the demo's 20 SENDs, then SENDs of 1..256 bytes,
                         inline SENDs, RDMA WRITE with immediate; payloads checked; QUERY_QP
   8 SRQ limit           the limit event by consumption, through the async EQ; re-arm
   9 CQ resize           MODIFY_CQ with completions waiting, none lost, order kept
  10 teardown            destroy everything, TEARDOWN_HCA, every page back

Exit codes: 0 every stage passed; 2 bad command line; 3 device not
available; 4 a model fault option never fired; 5 the report could not be
written; 11-20 stage 1-10 failed. The report is written in every case.

Examples:
  mlx5 selftest --device vfio:0000:03:00.0
  mlx5 selftest --device sim:cx7 --report cx7.json
  mlx5 selftest --fail-opcode create-qp:bad_param_err:0x1234   (exit 16)";

const PEER_HELP: &str = "The model's port joins a UDP socket that carries one Ethernet frame per
datagram (QEMU -netdev dgram), answers ARP for 198.18.0.N (--host), and runs
on the wall clock. The program's address exchange runs over TCP: --connect
when the program is the server, --listen when it is the client.

Examples:
  (guest) ibv_rc_pingpong -d rxe0 -g 1 -s 64 -n 4
  (host)  mlx5 peer --connect 127.0.0.1:18515 --udp-local 127.0.0.1:47341 \\
            --udp-remote 127.0.0.1:47342 --size 64 --iters 4 --pcap rc.pcap";

const PERF_HELP: &str =
    "As mlx5 peer: the model's port on a UDP socket (QEMU -netdev dgram), ARP for
198.18.0.N (--host), the wall clock. The exchange is perftest's own over TCP
(not rdma_cm): --connect when the program is the server, --listen when it is
the client. Give the program its RoCE v2 IPv4 GID with -x.

Examples:
  (guest) ib_write_lat -d rxe0 -x 1 -n 100
  (host)  mlx5 perf write-lat --connect 127.0.0.1:18515 --udp-local 127.0.0.1:47341 \\
            --udp-remote 127.0.0.1:47342 --iters 100 --pcap write-lat.pcap";

const PINGPONG_HELP: &str = "Each host learns its own address (query_port, query_gid_table, add_gid
for an IPv4 address), the two exchange QPN, PSN, GID, MAC and LID
in-process as rc_pingpong does over TCP, and connect. The global --seed
seeds both devices, the PSNs and the wire's faults. --op picks the
operation (send, send-imm, write, write-imm, read, fetch-add, cmp-swap),
--rq the receive queue (an SRQ, or each QP's own).

Exit codes: 0 every message arrived once and intact; 1 the driver or
firmware failed (or the capture file could not be written); 2 bad command
line (also --mtu above the ports' MTU, --device vfio:..., --threaded);
4 a message was lost beyond the retry budget, duplicated, reordered or
damaged, or teardown left something behind.

Examples:
  mlx5 pingpong --transport roce-v2-ipv4 --size 64 --iters 100
  mlx5 pingpong --transport ib --mtu 4096 --size 64K --iters 10
  mlx5 pingpong --drop 0.02 --corrupt 0.01 --seed 7
  mlx5 pingpong --op read --rq own --transport ib-grh --size 3000 --iters 20
  mlx5 pingpong --op fetch-add --iters 50 --drop 0.05
  mlx5 pingpong --transport roce-v1 --iters 3 --pcap v1.pcap   (tshark -r v1.pcap)";

/// `mlx5 --version`: the crate version and the git commit it was built
/// from (`unknown commit` outside a git checkout).
pub fn version() -> &'static str {
    static V: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    V.get_or_init(|| {
        format!(
            "{} (commit {})",
            env!("CARGO_PKG_VERSION"),
            option_env!("MLX5_GIT_COMMIT").unwrap_or("unknown")
        )
    })
}

/// A byte count: decimal or 0x hex, with an optional K, M or G suffix
/// (powers of 1024).
fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let (num, shift) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 10),
        Some((i, 'm' | 'M')) => (&t[..i], 20),
        Some((i, 'g' | 'G')) => (&t[..i], 30),
        _ => (t, 0),
    };
    let v = crate::common::target::parse_u64(num).map_err(|_| {
        format!(
            "'{}' is not a byte count (e.g. 65536, 0x10000, 64K, 4M, 1G)",
            crate::common::error::quote(s)
        )
    })?;
    v.checked_mul(1u64 << shift)
        .and_then(|b| usize::try_from(b).ok())
        .filter(|b| *b > 0)
        .ok_or_else(|| format!("'{}' is zero or too large", crate::common::error::quote(s)))
}

/// A 16-bit value: decimal or 0x hex, refused past 0xffff.
fn parse_u16(s: &str) -> Result<u16, String> {
    let v = crate::common::target::parse_u64(s).map_err(|_| {
        format!(
            "'{}' is not a number (decimal or 0x hex)",
            crate::common::error::quote(s)
        )
    })?;
    u16::try_from(v).map_err(|_| format!("{v:#x} is out of range (at most 0xffff)"))
}

/// The command line.
#[derive(Parser)]
#[command(name = "mlx5", version = version(), about = ABOUT, long_about = LONG_ABOUT, after_help = EXIT_CODES)]
pub struct Cli {
    /// Options of every subcommand.
    #[command(flatten)]
    pub global: Global,
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// Options of every subcommand.
#[derive(Args)]
pub struct Global {
    /// The device: sim, sim:PROFILE (cx4lx, cx5, cx6dx, cx7) or vfio:DDDD:BB:DD.F
    #[arg(long, global = true, default_value = "sim", value_name = "DEVICE")]
    pub device: String,

    /// JSON on stdout, for scripts (progress and errors still go to stderr)
    #[arg(long, global = true)]
    pub json: bool,

    /// No progress lines on stderr
    #[arg(long, short, global = true)]
    pub quiet: bool,

    /// Model only: the next command NAME (or its NTH from the start) fails
    /// with STATUS and SYNDROME (e.g. create-cq:bad_param_err:0x1234,
    /// create-mkey:bad_param_err:0x1:2); repeatable
    #[arg(long, global = true, value_name = "NAME:STATUS:SYNDROME[:NTH]")]
    pub fail_opcode: Vec<String>,

    /// Model only: the next command NAME never completes (the driver times
    /// out); repeatable
    #[arg(long, global = true, value_name = "NAME")]
    pub stall_opcode: Vec<String>,

    /// Model only: the device dies (health syndrome FW_INTERNAL_ERR) after
    /// the Nth firmware command
    #[arg(long, global = true, value_name = "N")]
    pub fatal_after: Option<u64>,

    /// Model only: the model's random seed (object numbers, DMA
    /// addresses) [default: the profile's]
    #[arg(long, global = true, value_name = "N")]
    pub seed: Option<u64>,

    /// Model only: the device supports ISSI 0 only (supported_issi =
    /// 0b01, as older firmware), so the driver stays at ISSI 0 (SRQs
    /// instead of RMPs)
    #[arg(long, global = true)]
    pub issi0: bool,

    /// Model only: run the model in threaded mode (a device thread
    /// processes doorbells and timed work on the real clock) instead of
    /// synchronously on a virtual clock
    #[arg(long, global = true)]
    pub threaded: bool,

    /// Model only: the most DMA memory the model's platform hands out, in
    /// bytes (K, M, G suffixes: 4M) [default: 1G]
    #[arg(long, global = true, value_name = "BYTES", value_parser = parse_size)]
    pub dma_limit: Option<usize>,

    /// Command timeout in milliseconds, 1 to 3600000 (one hour)
    /// [default: 60000, as Linux]
    #[arg(long, global = true, value_name = "MS",
          value_parser = clap::value_parser!(u64).range(1..=MAX_CMD_TIMEOUT_MS))]
    pub cmd_timeout_ms: Option<u64>,
}

/// The subcommands.
#[derive(Subcommand)]
pub enum Command {
    /// The whole mission, narrated: bring-up, CQs and an SRQ, a loopback
    /// QP pair, messages sent through it, the SRQ limit event, CQ resize
    /// with completions waiting, teardown with every firmware page back
    #[command(after_help = EXIT_CODES)]
    Demo,

    /// First run on a card: the demo's steps inside numbered stages from
    /// bring-up to teardown, a pass/fail table, and a report file to attach
    /// to a bug report
    #[command(after_help = SELFTEST_HELP)]
    Selftest {
        /// Where to write the report (JSON) [default:
        /// ./mlx5-selftest-DEVICE-YYYYMMDD-HHMMSS.json]
        #[arg(long, value_name = "FILE")]
        report: Option<std::path::PathBuf>,
    },

    /// The device's capabilities, decoded and grouped
    #[command(after_help = EXIT_CODES)]
    Caps {
        /// Also list every non-zero field of the raw cmd_hca_cap block
        #[arg(long)]
        all: bool,
    },

    /// Send one firmware command by name with field values, print the
    /// decoded output, status and syndrome
    #[command(after_help = "Examples:
  mlx5 cmd query-hca-cap op_mod=1            (current general capabilities; op_mod=0: maximum)
  mlx5 cmd create-cq cq_context.log_cq_size=10
  mlx5 cmd access-reg register_id=0x7004 op_mod=1                  (read HOST_ENDIANNESS)
  mlx5 cmd access-reg register_id=0x7004 register_data=0x00000000  (write it, he=0)
  mlx5 cmd nop
  mlx5 cmd query-eq eq_number=5 --json
  mlx5 cmd query-hca-cap op_mod=roce.cur      (op_mod names: max, cur, TYPE.max, TYPE.cur)
  mlx5 cmd --list                             (every command with a layout)
  mlx5 cmd create-qp --fields                 (fields, widths, what the tool fills)

Field names are the mlx5-regs (mlx5_ifc.h) layout names, dotted for
sub-structures (cq_context.log_cq_size) and indexed for arrays (pas[0]);
a whole array is one hex number of whole elements (register_data=0x...).
Values are decimal or 0x hex. A field given twice is refused. Bring-up
provides pages, the UAR and the EQs; for create-cq and create-eq the tool
also provides the ring, its page list and the doorbell record unless given,
for access-reg the register data up to the register's size when it knows
the register, and it destroys what a command created before tearing down.

Exit codes: 0 status OK, 1 the command failed (status and syndrome shown),
2 bad command line, 3 device not available.")]
    Cmd {
        /// Command name (query-hca-cap, create-cq, nop, ... or a number)
        #[arg(required_unless_present = "list")]
        name: Option<String>,
        /// List every command with a layout, without a device
        #[arg(long)]
        list: bool,
        /// Show the command's input and output fields (bit offset, width,
        /// default, what the tool fills) and op_mod names, without a device
        #[arg(long = "fields")]
        show_fields: bool,
        /// field=value pairs
        fields: Vec<String>,
        /// Print zero fields of the output too
        #[arg(long)]
        all_fields: bool,
    },

    /// Run a scenario printing every firmware command with decoded input
    /// and output, status, syndrome and latency
    #[command(after_help = EXIT_CODES)]
    Trace {
        /// Which scenario
        #[arg(long, value_enum, default_value = "demo")]
        scenario: Scenario,
        /// Add the Linux mlx5_core-style hexdump of every command
        #[arg(long)]
        hexdump: bool,
        /// Also write the trace to FILE (JSON lines, for replay and diff)
        #[arg(long, value_name = "FILE")]
        save: Option<String>,
    },

    /// Re-send a saved trace's commands on a fresh bring-up (object
    /// numbers and addresses remapped) and report where the answers differ
    #[command(
        after_help = "Exit codes: 0 the same answers, 1 a command could not be re-sent or
bring-up/teardown failed, 2 bad command line or trace file, 3 device not
available, 4 the answers differ (each difference is listed).

Example:
  mlx5 trace --scenario limit --save limit.trace
  mlx5 replay limit.trace --device vfio:0000:03:00.0"
    )]
    Replay {
        /// The trace file (from `mlx5 trace --save`)
        file: String,
    },

    /// Compare two saved traces field by field (a card against the model),
    /// ignoring object numbers consistently remapped, addresses and timings
    #[command(after_help = "Exit codes: 0 no difference, 2 bad trace file, 4 the traces differ.")]
    Diff {
        /// The first trace
        a: String,
        /// The second trace
        b: String,
    },

    /// Run a script of firmware commands and driver steps on one
    /// brought-up device, with expect checks and variables
    #[command(after_help = crate::cmd::run::parse::HELP)]
    Run {
        /// The script file, or - for stdin
        file: String,
        /// Print zero output fields too
        #[arg(long)]
        all_fields: bool,
    },

    /// Type the script language one line at a time on one brought-up
    /// device (history, quit)
    #[command(after_help = crate::cmd::run::parse::HELP)]
    Shell,

    /// Decode a hexdump (the tool's, Linux's dump_buf or print_hex_dump,
    /// plain hex) of a command, context, CQE or EQE into named fields,
    /// without a device
    #[command(after_help = crate::cmd::decode::HELP)]
    Decode {
        /// The file holding the hexdump, or - for stdin
        #[arg(default_value = "-")]
        file: String,
        /// What the bytes are [default: what the dump's `dump command
        /// data` headers say]
        #[arg(long = "as", value_enum, value_name = "KIND")]
        kind: Option<crate::cmd::decode::Kind>,
        /// The opcode of an output (name or number)
        #[arg(long)]
        opcode: Option<String>,
        /// The op_mod of an output (query-hca-cap's capability type), decimal or 0x hex
        #[arg(long, value_parser = parse_u16)]
        op_mod: Option<u16>,
        /// Print zero fields too
        #[arg(long)]
        all_fields: bool,
    },

    /// List the ConnectX functions (PCI vendor 15b3) with their driver,
    /// IOMMU group and what is missing to open them through vfio-pci,
    /// without a device
    #[command(
        after_help = "Reads sysfs: bus/pci/devices/*/{vendor,device}, the driver and
iommu_group links, kernel/iommu_groups/N/devices; opens /dev/vfio/N to check
the permissions. docs/hardware.md explains each step.

Exit codes: 0 listed (also when there is none), 3 sysfs cannot be read."
    )]
    Devices {
        /// The sysfs root (for tests: a fake tree)
        #[arg(long, value_name = "DIR", default_value = "/sys")]
        sysfs_root: std::path::PathBuf,
        /// The /dev root holding vfio/N (for tests: a fake tree)
        #[arg(long, value_name = "DIR", default_value = "/dev")]
        dev_root: std::path::PathBuf,
    },

    /// Print the shell completion script for SHELL, generated from these
    /// options, without a device
    #[command(after_help = "Install, for example:
  mlx5 completions bash > ~/.local/share/bash-completion/completions/mlx5
  mlx5 completions zsh  > ~/.zfunc/_mlx5          (with fpath+=~/.zfunc)
  mlx5 completions fish > ~/.config/fish/completions/mlx5.fish")]
    Completions {
        /// The shell
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },

    /// Print the man page (roff), generated from these options, without a
    /// device: the tool's page, or a subcommand's
    #[command(after_help = "Read it with: mlx5 man | man -l -
Install: mlx5 man > /usr/local/share/man/man1/mlx5.1; mlx5 man caps > mlx5-caps.1")]
    Man {
        /// A subcommand whose page to print (mlx5-SUBCOMMAND(1))
        subcommand: Option<String>,
    },

    /// Two modelled hosts joined by a wire: an RC QP pair on SRQs, SEND
    /// messages back and forth as ibv_rc_pingpong sends them, every byte
    /// checked; the wire's counters, faults and a pcap capture
    #[command(after_help = PINGPONG_HELP)]
    Pingpong(crate::cmd::pingpong::opts::Args),

    /// The model as the other side of an RDMA program on another stack
    /// (ibv_rc_pingpong on Linux soft-RoCE in a QEMU guest): the port on a
    /// UDP-carried Ethernet segment, the program's own TCP address exchange
    #[command(after_help = PEER_HELP)]
    Peer(crate::cmd::peer::opts::Args),

    /// The model as the other side of perftest's latency and bandwidth
    /// programs (ib_write_lat, ib_read_lat, ib_atomic_lat, ib_send_bw,
    /// ib_write_bw, ib_read_bw) on another stack, through perftest's own
    /// TCP exchange
    #[command(after_help = PERF_HELP)]
    Perf(crate::cmd::perf::opts::Args),

    /// Re-parse every frame of pcap captures with the model's codec, every
    /// ICRC recomputed; exit 0 only when all parse and match
    PcapCheck {
        /// The capture files
        #[arg(required = true)]
        files: Vec<std::path::PathBuf>,
    },

    /// Run a scenario, then print per-opcode counts, failures and latencies
    #[command(after_help = EXIT_CODES)]
    Stats {
        /// Which scenario
        #[arg(long, value_enum, default_value = "demo")]
        scenario: Scenario,
    },
}

/// `--json` on the raw command line (before a `--`), for the paths where
/// the parsed options are not available: argument errors and panics.
fn json_requested() -> bool {
    std::env::args()
        .skip(1)
        .take_while(|a| a != "--")
        .any(|a| a == "--json")
}

/// The JSON document of a failed run that produced nothing else.
fn error_document(e: &CliError) -> Value {
    json!({"ok": false, "exit_code": e.exit_code(), "error": e.to_json()})
}

pub fn print_json(doc: &Value) {
    outln!(
        "{}",
        serde_json::to_string_pretty(doc).unwrap_or_else(|_| "{}".into())
    );
}

/// With `--json`, a panic still ends with the error document on stdout
/// (exit code 101, Rust's for a panic), after the usual message on stderr.
pub fn install_panic_hook() {
    if !json_requested() {
        return;
    }
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default(info);
        let e = CliError::failed(
            format!("internal error: {info}"),
            "this is a bug in mlx5; please report it with the command line and its stderr",
        );
        let mut doc = error_document(&e);
        doc["exit_code"] = json!(101);
        doc["error"]["kind"] = json!("internal");
        doc["error"]["exit_code"] = json!(101);
        print_json(&doc);
    }));
}

/// clap's own errors (unknown option, bad value, an option given twice)
/// become usage errors: exit 2, and with `--json` the error document.
pub fn parse_args() -> Cli {
    let e = match Cli::try_parse() {
        Ok(cli) => return cli,
        Err(e) => e,
    };
    use clap::error::ErrorKind;
    let help = matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion);
    if help
        || (e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand && !json_requested())
    {
        e.exit();
    }
    let rendered = e.render().to_string();
    let what = rendered
        .lines()
        .next()
        .unwrap_or("bad command line")
        .trim_start_matches("error: ")
        .to_string();
    let mut hint: Vec<&str> = rendered
        .lines()
        .skip(1)
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("For more information"))
        .collect();
    hint.push("`mlx5 --help` and `mlx5 SUBCOMMAND --help` list every option");
    let hint = hint.join("; ");
    let err = CliError::usage(what, hint);
    if json_requested() {
        print_json(&error_document(&err));
    }
    // clap's text, as without --json (usage line and the --help pointer).
    eprint!("{rendered}");
    std::process::exit(err.exit_code());
}
