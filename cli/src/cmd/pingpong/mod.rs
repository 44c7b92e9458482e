//! `mlx5 pingpong`: two modelled hosts joined by a wire, an RC QP pair on
//! SRQs or the QPs' own receive queues through the verbs facade, messages
//! back and forth as rdma-core's `ibv_rc_pingpong` sends them (SENDs, or
//! RDMA WRITEs, READs or atomics with `--op`), every byte checked; prints
//! what `ibv_rc_pingpong` prints plus the wire's and the ports' counters.
//! With `--qp ud`, a UD QP per host and SENDs as `ibv_ud_pingpong` sends
//! them (`ud.rs`).
//!
//! Each host learns its own address (`query_port`, `query_gid_table`,
//! `add_gid` for RoCE v2 over IPv4), hands QPN, PSN, GID, MAC and LID to
//! the other in-process (rc_pingpong's TCP exchange), and connects.

pub mod exchange;
pub mod host;
pub mod opts;
pub mod report;
pub mod ud;

use mlx5_driver::verbs::AccessFlags;
use mlx5_sim::wire::{Faults, Wire};
use mlx5_sim::Profile;
use mlx5_testbed::{ConnectOpts, HostSpec};
use serde_json::Value;

use crate::common::error::CliError;
use crate::common::target::{self, ModelOpts, ModelRun};
use host::{setup_error, Addr, Host, RECVS};
use opts::{Args, Op, QpKind};

/// The seed when `--seed` is not given.
const DEFAULT_SEED: u64 = 1;

/// How `mlx5 pingpong` runs: both hosts are models of `profile`.
pub type Run<'a> = ModelRun<'a, Args>;

/// A PSN from the seed (rc_pingpong draws `lrand48() & 0xffffff`).
fn psn(seed: u64, n: u64) -> u32 {
    let mut z = seed.wrapping_add(n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((z ^ (z >> 31)) & 0xff_ffff) as u32
}

/// Refusals that need no device: options `pingpong` cannot honour.
fn check_options(r: &Run<'_>) -> Result<(), CliError> {
    let t = r.args.transport;
    if t.ib() && matches!(r.profile, Profile::ConnectX4Lx | Profile::ConnectX6Dx) {
        return Err(CliError::usage(
            format!(
                "--transport {} needs an InfiniBand-capable (VPI) profile; {} ports are Ethernet only",
                t.name(),
                r.profile.name()
            ),
            "use --device sim:cx5 or sim:cx7 (the default is cx5)",
        ));
    }
    if let (true, Some(size)) = (r.args.op.atomic(), r.args.size) {
        if size != 8 {
            return Err(CliError::usage(
                format!(
                    "--op {} moves 8 bytes; --size {size} cannot be honoured",
                    r.args.op.name()
                ),
                "leave out --size (or give --size 8)",
            ));
        }
    }
    if r.args.qp == QpKind::Ud {
        let a = r.args;
        if !matches!(a.op, Op::Send | Op::SendImm) {
            return Err(CliError::usage(
                format!(
                    "--qp ud sends datagrams; --op {} needs a connected QP",
                    a.op.name()
                ),
                "use --op send or send-imm with --qp ud, or --qp rc",
            ));
        }
        if a.drop + a.dup + a.reorder + a.corrupt > 0.0 {
            return Err(CliError::usage(
                "--qp ud with wire faults: a lost or duplicated datagram is not retried or \
                 filtered (ibv_ud_pingpong would wait forever)",
                "leave out --drop, --dup, --reorder and --corrupt with --qp ud",
            ));
        }
    }
    if r.model.threaded {
        return Err(CliError::usage(
            "pingpong does not run the model threaded (--threaded)",
            "leave out --threaded: the two hosts run on the model's virtual clocks",
        ));
    }
    Ok(())
}

/// Run it: the JSON value and the result (exit 0 only when every message
/// arrived once and intact).
pub fn run(r: &Run<'_>) -> (Value, Result<(), CliError>) {
    let mut rep = report::Report::new(r.args, r.model.seed.unwrap_or(DEFAULT_SEED));
    if let Err(e) = check_options(r) {
        return (Value::Null, Err(e));
    }
    let res = session(r, &mut rep);
    let res = match (res, rep.teardown.take()) {
        (Ok(()), Some(Err(e))) => Err(e),
        (res, _) => res,
    };
    let value = rep.to_json(&res);
    if !r.json {
        rep.print(&res);
    }
    (value, res)
}

/// The rights each host grants its peer (on the buffer and the QP): only
/// what the operation needs.
fn access_for(op: Op) -> AccessFlags {
    let local = AccessFlags::LOCAL_WRITE;
    match op {
        Op::Send | Op::SendImm => local,
        Op::Write | Op::WriteImm => local | AccessFlags::REMOTE_WRITE,
        Op::Read => local | AccessFlags::REMOTE_READ,
        Op::FetchAdd | Op::CmpSwap => local | AccessFlags::REMOTE_ATOMIC,
    }
}

fn progress(r: &Run<'_>, what: &str) {
    if r.progress {
        eprintln!("mlx5: {what}");
    }
}

fn session(r: &Run<'_>, rep: &mut report::Report) -> Result<(), CliError> {
    let a = r.args;
    let t = a.transport;
    let seed = rep.seed;
    let wire = Wire::new(t.testbed().link_type());
    if let Some(path) = &a.pcap {
        let file = std::fs::File::create(path).map_err(|e| {
            CliError::failed(
                format!("cannot create the capture file {}: {e}", path.display()),
                "name a file in a writable directory",
            )
        })?;
        let out = std::io::BufWriter::new(file);
        wire.capture(Box::new(out)).map_err(|e| {
            CliError::failed(
                format!("cannot write the capture file {}: {e}", path.display()),
                "name a file in a writable directory",
            )
        })?;
    }
    let host = |n: u8| -> Result<Host, CliError> {
        let opts = ModelOpts {
            seed: Some(seed.wrapping_mul(2).wrapping_add(u64::from(n))),
            ..r.model
        };
        let dev = target::model(r.profile, &opts);
        // A UD receive buffer holds the GRH before the message.
        let grh = if a.qp == QpKind::Ud { ud::GRH } else { 0 };
        let spec = HostSpec {
            slot: (a.message_size() + grh).max(8),
            recvs: RECVS,
            rq: a.rq.testbed(),
            access: access_for(a.op),
            ..HostSpec::new(t.testbed(), n, psn(seed, u64::from(n)))
        };
        Host::new(dev, &wire, r.cfg, spec).map_err(setup_error)
    };
    progress(r, "bringing up host 1");
    let mut h1 = host(1)?;
    progress(r, "bringing up host 2");
    let mut h2 = match host(2) {
        Ok(h) => h,
        Err(e) => {
            let _ = h1.close();
            return Err(e);
        }
    };
    let res = match a.qp {
        QpKind::Rc => connected(r, rep, &wire, &mut h1, &mut h2),
        QpKind::Ud => datagrams(r, rep, &mut h1, &mut h2),
    };
    // The counters before teardown; the capture ends with the traffic.
    rep.counters(&wire, &h1.dev, &h2.dev);
    if a.pcap.is_some() {
        match wire.end_capture() {
            Ok(n) => rep.captured = Some(n),
            Err(e) => {
                rep.teardown = Some(Err(CliError::failed(
                    format!("writing the capture file: {e}"),
                    "check the disk space and the file's directory",
                )))
            }
        }
    }
    progress(r, "tearing down both hosts");
    let closed = h1.close().and(h2.close());
    if let Err(e) = closed {
        rep.teardown = Some(Err(setup_error(e)));
    }
    res
}

fn connected(
    r: &Run<'_>,
    rep: &mut report::Report,
    wire: &Wire,
    h1: &mut Host,
    h2: &mut Host,
) -> Result<(), CliError> {
    let a = r.args;
    // The out-of-band exchange: each side's address, as rc_pingpong's
    // 52-byte records carry them over TCP.
    let (l, p) = (h1.addr, h2.addr);
    rep.local = Some(l);
    rep.remote = Some(p);
    let port_mtu = l.mtu.min(p.mtu);
    if a.mtu > port_mtu {
        return Err(CliError::usage(
            format!(
                "--mtu {} is larger than the ports' active MTU ({})",
                a.mtu.bytes(),
                port_mtu.bytes()
            ),
            format!("use --mtu {} or less", port_mtu.bytes()),
        ));
    }
    let opts = ConnectOpts::new(a.mtu);
    h1.connect(h1.ah_to(&p), &p, &opts).map_err(setup_error)?;
    h2.connect(h2.ah_to(&l), &l, &opts).map_err(setup_error)?;
    wire.set_faults(Faults {
        seed: rep.seed,
        drop: a.drop,
        duplicate: a.dup,
        reorder: a.reorder,
        corrupt: a.corrupt,
        chosen: Vec::new(),
    });
    progress(r, "connected; ping-pong");
    let start = std::time::Instant::now();
    let (tally, res) = exchange::run(h1, h2, a.op, a.message_size(), a.iters);
    rep.elapsed = start.elapsed();
    rep.tally = tally;
    res
}

/// `--qp ud`: each host's UD QP and address handle to the other, the
/// datagrams, and the UD objects destroyed again.
fn datagrams(
    r: &Run<'_>,
    rep: &mut report::Report,
    h1: &mut Host,
    h2: &mut Host,
) -> Result<(), CliError> {
    let a = r.args;
    let (l, p) = (h1.addr, h2.addr);
    let port_mtu = l.mtu.min(p.mtu).bytes() as usize;
    if a.message_size() > port_mtu {
        return Err(CliError::usage(
            format!(
                "--size {} is larger than the ports' MTU ({port_mtu}): a UD message is one packet",
                a.message_size()
            ),
            format!("use --size {port_mtu} or less (ibv_ud_pingpong refuses it too)"),
        ));
    }
    let s1 = ud::setup(h1, &p)?;
    let s2 = match ud::setup(h2, &l) {
        Ok(s) => s,
        Err(e) => {
            let _ = ud::teardown(h1, &s1);
            return Err(e);
        }
    };
    // The out-of-band exchange carries the UD QPs' numbers.
    rep.local = Some(Addr { qpn: s1.qpn, ..l });
    rep.remote = Some(Addr { qpn: s2.qpn, ..p });
    progress(r, "UD QPs in RTS; ping-pong");
    let start = std::time::Instant::now();
    let (tally, res) = ud::run((h1, h2), (&s1, &s2), a.op, a.message_size(), a.iters);
    rep.elapsed = start.elapsed();
    rep.tally = tally;
    let t1 = ud::teardown(h1, &s1);
    let t2 = ud::teardown(h2, &s2);
    res.and(t1).and(t2)
}

#[cfg(test)]
mod tests {
    #[test]
    fn psns_are_24_bits_and_differ() {
        let (a, b) = (super::psn(1, 1), super::psn(1, 2));
        assert!(a <= 0xff_ffff && b <= 0xff_ffff);
        assert_ne!(a, b);
        assert_eq!(a, super::psn(1, 1));
    }

    #[test]
    fn transports_name_themselves() {
        use clap::ValueEnum;
        for t in super::opts::Transport::value_variants() {
            assert_eq!(t.to_possible_value().unwrap().get_name(), t.name());
        }
    }
}
