//! The steps every perftest test's `main` takes before its traffic
//! (linux-rdma/perftest `src/*_lat.c`, `src/*_bw.c`, without rdma_cm and
//! with one QP): the exchange's opening (version, system data, MTU), the
//! test's key records before the connect ([`Test::hand_shakes`]), the
//! GID-type check and the connect (`ctx_connect`: timeout 14, retry 7, RNR
//! retry 7, min RNR timer 12, the READ/atomic depths from the records),
//! then the test's key records after it.
//!
//! [`Test::hand_shakes`]: super::opts::Test::hand_shakes

use std::time::{Duration, Instant};

use mlx5_sim::UdpLink;
use mlx5_testbed::ConnectOpts;

use super::exchange::{Conn, KeyRecord, Opening};
use super::opts::{Args, Test};
use crate::cmd::peer::link::ExchangeSide;
use crate::cmd::pingpong::host::{setup_error, Addr, Host};
use crate::common::error::CliError;

/// The READ/atomic depth this side offers as responder in READ and
/// atomic tests (perftest's `MAX_OUT_READ_HERMON`), capped by the
/// device's `max_qp_rd_atom`.
pub const OUT_READS: u16 = 16;

/// A connected session, ready for traffic.
pub struct Connected {
    /// The exchange connection, for the close.
    pub conn: Conn,
    /// What the opening settled.
    pub opening: Opening,
    /// This side's key record.
    pub me: KeyRecord,
    /// The program's key record.
    pub peer: KeyRecord,
}

impl Connected {
    /// The key records after the connect; the program's must not change.
    pub fn after_connect(&mut self, test: Test) -> Result<(), CliError> {
        for _ in 0..test.hand_shakes().1 {
            let again = self.conn.hand_shake(&self.me)?;
            if again.qpn != self.peer.qpn || again.gid != self.peer.gid {
                return Err(CliError::check(format!(
                    "the program's key record changed after the connect: {:?} then {again:?}",
                    self.peer
                )));
            }
        }
        Ok(())
    }
}

/// Open the exchange (`--connect` or `--listen`) and exchange versions.
fn open(a: &Args, deadline: Instant, progress: bool) -> Result<(Conn, String), CliError> {
    match a.link.exchange_side(progress)? {
        ExchangeSide::Client(server) => Conn::connect(server, deadline),
        ExchangeSide::Server(l) => {
            let mut c = Conn::accept(&l, deadline)?;
            let v = c.version()?;
            Ok((c, v))
        }
    }
}

/// Whether `gid` is IPv4-mapped (`::ffff:a.b.c.d`).
fn v4_mapped(gid: &[u8; 16]) -> bool {
    gid[..10] == [0; 10] && gid[10..12] == [0xff, 0xff]
}

/// Move the QP to RTS toward `peer`, whose MAC is resolved on the link.
fn connect_qp(
    host: &mut Host,
    link: &UdpLink,
    opening: &Opening,
    me: &KeyRecord,
    peer: &KeyRecord,
) -> Result<(), CliError> {
    // perftest's ctx_check_gid_compatibility: both IPv4-mapped or neither.
    if !v4_mapped(&peer.gid) {
        return Err(CliError::failed(
            format!(
                "the program's GID {} is not IPv4-mapped, this side's is",
                std::net::Ipv6Addr::from(peer.gid)
            ),
            "run it with -x naming its RoCE v2 IPv4 GID (index 1 on rxe)",
        ));
    }
    let g = peer.gid;
    let ip = [g[12], g[13], g[14], g[15]];
    let mac = link
        .resolve_ipv4(ip, Duration::from_secs(10))
        .ok_or_else(|| {
            CliError::failed(
                format!("no ARP answer for {}.{}.{}.{}", ip[0], ip[1], ip[2], ip[3]),
                "is the peer's NIC on the same UDP-carried segment (--udp-local/--udp-remote)?",
            )
        })?;
    let addr = Addr {
        qpn: peer.qpn,
        psn: peer.psn,
        gid: g,
        mac,
        lid: 0,
        mtu: opening.mtu,
        addr: peer.vaddr,
        rkey: peer.rkey,
    };
    let ah = host.ah_to(&addr);
    let max_rd = u16::try_from(host.ctx.query_device().max_qp_rd_atom).unwrap_or(u16::MAX);
    let opts = ConnectOpts {
        // The program's depth as responder bounds this side's requests;
        // this side's advertised depth is what it serves.
        max_rd_atomic: peer.out_reads.clamp(1, max_rd).min(255) as u8,
        max_dest_rd_atomic: me.out_reads.min(255) as u8,
        ..ConnectOpts::new(opening.mtu)
    };
    host.connect(ah, &addr, &opts).map_err(setup_error)
}

/// The exchange up to the connect; the caller posts its receives, if any,
/// then calls [`Connected::after_connect`].
pub fn establish(
    a: &Args,
    host: &mut Host,
    link: &UdpLink,
    deadline: Instant,
    progress: bool,
) -> Result<Connected, CliError> {
    let (mut conn, version) = open(a, deadline, progress)?;
    let opening = conn.opening(version, host.addr.mtu)?;
    let depth = u16::try_from(host.ctx.query_device().max_qp_rd_atom).unwrap_or(u16::MAX);
    let me = KeyRecord {
        lid: host.addr.lid,
        out_reads: if a.test.reads() {
            OUT_READS.min(depth)
        } else {
            1
        },
        qpn: host.addr.qpn,
        psn: host.addr.psn,
        rkey: host.rkey(),
        vaddr: host.buf.iova() + host.spec.target_at() as u64,
        gid: host.addr.gid,
        srqn: 0,
    };
    let (before, _) = a.test.hand_shakes();
    let mut peer = conn.hand_shake(&me)?;
    for _ in 1..before {
        peer = conn.hand_shake(&me)?;
    }
    connect_qp(host, link, &opening, &me, &peer)?;
    Ok(Connected {
        conn,
        opening,
        me,
        peer,
    })
}
