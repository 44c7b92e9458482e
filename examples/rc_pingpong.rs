//! rdma-core's `ibv_rc_pingpong`, on the verbs facade: two hosts, an RC QP
//! on an SRQ each, SEND messages back and forth, every byte checked.
//!
//! ```sh
//! cargo run --example rc_pingpong                        # RoCE v2 over IPv4, 4096 B x 1000
//! cargo run --example rc_pingpong -- roce-v1 64 100      # TRANSPORT SIZE ITERS
//! ```
//!
//! Each side is written as a program on its own host: it runs on its own
//! thread, touches only its own device, learns its own address
//! (`query_port`, `query_gid_table`; on RoCE v2 over IPv4 it adds the GID of
//! its IPv4 address, as an IP stack does), and exchanges QPN, PSN, GID, MAC
//! and LID with the peer out of band: rc_pingpong's 52-byte text record
//! `LLLL:QQQQQQ:PPPPPP:GGGG...` (plus `:MMMMMMMMMMMM`, the MAC, because this
//! driver has no neighbour table), here over a channel instead of TCP. On two
//! real hosts, `mlx5_vfio::VfioPlatform::open("0000:03:00.0", ..)` replaces
//! the model's platform and a TCP socket the channel; nothing else changes.
//! Here the two model devices are joined by an `mlx5_sim::wire::Wire`.

use std::error::Error;
use std::sync::mpsc::{Receiver, Sender};

use mlx5_driver::qp::Mtu;
use mlx5_driver::verbs::{
    AccessFlags, AhAttr, GidEntry, GidTableEntry, GidType, GlobalRoute, QpAttr, QpAttrMask, QpCap,
    QpInitAttr, RecvWr, SendFlags, SendWr, Sge, SrqInitAttr, Verbs, WcOpcode, WcStatus,
    WorkCompletion, WrOpcode,
};
use mlx5_driver::{Hca, HcaConfig};
use mlx5_hal::Hal;
use mlx5_sim::wire::{LinkType, Wire};
use mlx5_sim::{Device, Profile, SimConfig, SimHal};

/// A verbs context sized for one QP: 4 CQs, 2 SRQs, 16 events, 2 QPs.
type Ctx<H> = Verbs<H, (), 4, 2, 16, 2, 64>;

/// How the hosts reach each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// RoCE v2 over IPv4 (`::ffff:198.18.0.N` GIDs the program adds).
    RoceV2Ipv4,
    /// RoCE v2 over IPv6 (the port's link-local RoCE v2 GID).
    RoceV2Ipv6,
    /// RoCE v1 (the port's link-local RoCE v1 GID).
    RoceV1,
    /// InfiniBand by LID.
    Ib,
}

/// Receives kept posted.
const RX_DEPTH: usize = 8;
/// The longest wait for one completion: 10 s of device time.
const TIMEOUT_US: u64 = 10_000_000;

/// One side's address, as rc_pingpong exchanges it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Dest {
    lid: u16,
    qpn: u32,
    psn: u32,
    gid: [u8; 16],
    mac: [u8; 6],
}

impl Dest {
    /// `LLLL:QQQQQQ:PPPPPP:` + 32 hex digits of GID + `:` + 12 of MAC.
    fn to_wire(self) -> String {
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        format!(
            "{:04x}:{:06x}:{:06x}:{}:{}",
            self.lid,
            self.qpn,
            self.psn,
            hex(&self.gid),
            hex(&self.mac)
        )
    }

    fn from_wire(s: &str) -> Result<Dest, Box<dyn Error>> {
        let f: Vec<&str> = s.split(':').collect();
        if f.len() != 5 || f[3].len() != 32 || f[4].len() != 12 {
            return Err(format!("malformed peer record {s:?}").into());
        }
        let bytes = |h: &str, out: &mut [u8]| -> Result<(), Box<dyn Error>> {
            for (i, b) in out.iter_mut().enumerate() {
                *b = u8::from_str_radix(&h[2 * i..2 * i + 2], 16)?;
            }
            Ok(())
        };
        let mut d = Dest {
            lid: u16::from_str_radix(f[0], 16)?,
            qpn: u32::from_str_radix(f[1], 16)?,
            psn: u32::from_str_radix(f[2], 16)?,
            gid: [0; 16],
            mac: [0; 6],
        };
        bytes(f[3], &mut d.gid)?;
        bytes(f[4], &mut d.mac)?;
        Ok(d)
    }
}

/// The out-of-band channel to the peer (rc_pingpong: a TCP connection).
pub struct OutOfBand {
    /// To the peer.
    pub tx: Sender<String>,
    /// From the peer.
    pub rx: Receiver<String>,
}

/// Byte `i` of the `n`th message a side sends (`server` tells the sides apart).
fn byte(server: bool, n: u32, i: usize) -> u8 {
    (i as u32)
        .wrapping_mul(7)
        .wrapping_add(n.wrapping_mul(13))
        .wrapping_add(u32::from(server) * 101) as u8
}

/// Poll `cq` until one completion, sleeping a microsecond between polls
/// (on the model the sleep lets the device's clock run), bounded.
fn wait<H: Hal>(
    ctx: &mut Ctx<H>,
    cq: mlx5_driver::verbs::CqHandle,
) -> Result<WorkCompletion, Box<dyn Error>> {
    let mut wc = [WorkCompletion::EMPTY; 1];
    let start = ctx.hca().hal().now_ns();
    loop {
        if ctx.poll_cq(cq, &mut wc)? == 1 {
            if wc[0].status != WcStatus::Success {
                return Err(format!("completion {:?}", wc[0].status).into());
            }
            return Ok(wc[0]);
        }
        if ctx.hca().hal().now_ns() - start > TIMEOUT_US * 1000 {
            return Err("no completion within 10 s".into());
        }
        ctx.hca().hal().delay_us(10);
    }
}

/// One host's whole program: `server` waits for the first message and
/// answers it, the client sends first. Returns the messages it received,
/// every byte checked.
pub fn host<H: Hal>(
    hal: H,
    t: Transport,
    server: bool,
    oob: OutOfBand,
    size: usize,
    iters: u32,
) -> Result<u32, Box<dyn Error>> {
    let mut ctx: Ctx<H> = Verbs::open(Hca::bring_up(hal.clone(), HcaConfig::default())?);

    // Who am I: the port, and the GID to send from.
    let port = ctx.query_port(1)?;
    let ib = t == Transport::Ib;
    let (sgid_index, gid, mac) = if ib {
        (0u8, ctx.query_gid(1, 0)?, [0u8; 6])
    } else {
        let mut table = [GidTableEntry {
            gid: [0; 16],
            gid_index: 0,
            port_num: 0,
            gid_type: GidType::Ib,
        }; 8];
        let n = ctx.query_gid_table(&mut table)?;
        let ty = if t == Transport::RoceV1 {
            GidType::RoceV1
        } else {
            GidType::RoceV2
        };
        let e = *table[..n]
            .iter()
            .find(|e| e.gid_type == ty)
            .ok_or("no default GID of that RoCE version")?;
        let mac = ctx
            .query_gid_ex(1, e.gid_index)?
            .ok_or("empty GID entry")?
            .mac;
        if t == Transport::RoceV2Ipv4 {
            // The interface's IPv4 address, as an IP stack would add it.
            let index = ctx.hca().default_gid_count();
            let ip = [198, 18, 0, if server { 2 } else { 1 }];
            let gid = mlx5_driver::gid::ipv4_gid(ip);
            let entry = GidEntry {
                gid,
                gid_type: GidType::RoceV2,
                mac,
                vlan: None,
            };
            ctx.add_gid(1, index, &entry)?;
            (index as u8, gid, mac)
        } else {
            (e.gid_index as u8, e.gid, mac)
        }
    };

    let (scq, _) = ctx.create_cq(31)?;
    let (rcq, _) = ctx.create_cq(31)?;
    let (srq, _) = ctx.create_srq(&SrqInitAttr {
        max_wr: RX_DEPTH as u32,
        max_sge: 1,
        srq_limit: 0,
        cq: Some(rcq),
    })?;
    let (qp, _) = ctx.create_qp(&QpInitAttr {
        send_cq: scq,
        recv_cq: rcq,
        srq: Some(srq),
        cap: QpCap {
            max_send_wr: 4,
            max_send_sge: 1,
            ..QpCap::default()
        },
        sq_sig_all: false,
    })?;
    let slot = size.max(1);
    let buf = hal.alloc_dma(slot * (1 + RX_DEPTH))?;
    let mr = ctx.reg_mr(
        buf.iova(),
        (slot * (1 + RX_DEPTH)) as u64,
        AccessFlags::LOCAL_WRITE,
    )?;
    let recv = |ctx: &mut Ctx<H>, i: usize| {
        let sg = [Sge {
            addr: buf.iova() + (slot * (1 + i)) as u64,
            length: slot as u32,
            lkey: mr.lkey(),
        }];
        let wr = RecvWr {
            wr_id: i as u64,
            sges: &sg,
        };
        ctx.post_srq_recv(srq, &[wr]).map_err(|e| e.errno)
    };
    for i in 0..RX_DEPTH {
        recv(&mut ctx, i)?;
    }

    // The exchange: mine out, the peer's in.
    let me = Dest {
        lid: port.lid,
        qpn: ctx.qp_num(qp)?,
        psn: if server { 0x2345 } else { 0xab_cdef },
        gid,
        mac,
    };
    oob.tx.send(me.to_wire())?;
    let peer = Dest::from_wire(&oob.rx.recv()?)?;
    println!(
        "  local address:  LID {:#06x}, QPN {:#08x}, PSN {:#08x}, GID {}",
        me.lid,
        me.qpn,
        me.psn,
        std::net::Ipv6Addr::from(me.gid)
    );

    // Connect: RESET -> INIT -> RTR -> RTS with rc_pingpong's values.
    let ah = if ib {
        AhAttr {
            dlid: peer.lid,
            port_num: 1,
            ..AhAttr::default()
        }
    } else {
        AhAttr {
            is_global: true,
            grh: GlobalRoute {
                dgid: peer.gid,
                sgid_index,
                hop_limit: 1,
                ..GlobalRoute::default()
            },
            dmac: Some(peer.mac),
            port_num: 1,
            ..AhAttr::default()
        }
    };
    let attr = QpAttr {
        port_num: 1,
        qp_access_flags: AccessFlags::LOCAL_WRITE,
        ah_attr: ah,
        path_mtu: Mtu::B1024.min(port.active_mtu),
        dest_qp_num: peer.qpn,
        rq_psn: peer.psn,
        sq_psn: me.psn,
        min_rnr_timer: 12,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 1,
        max_dest_rd_atomic: 1,
        ..QpAttr::default()
    };
    // The attributes each transition needs (`ibv_modify_qp(3)`).
    for (state, mask) in QpAttrMask::RC_CONNECT {
        ctx.modify_qp(
            qp,
            &QpAttr {
                qp_state: state,
                ..attr
            },
            mask,
        )?;
    }
    // rc_pingpong synchronises here so neither side sends before the other is ready.
    oob.tx.send("ready".into())?;
    oob.rx.recv()?;

    let start = std::time::Instant::now();
    let mut received = 0;
    let mut data = vec![0u8; size];
    for n in 0..iters {
        let send = |ctx: &mut Ctx<H>, data: &mut [u8]| -> Result<(), Box<dyn Error>> {
            for (i, b) in data.iter_mut().enumerate() {
                *b = byte(server, n, i);
            }
            buf.write_bytes(0, data);
            let sg = [Sge {
                addr: buf.iova(),
                length: size as u32,
                lkey: mr.lkey(),
            }];
            let wr = SendWr {
                wr_id: u64::from(n),
                opcode: WrOpcode::Send,
                send_flags: SendFlags::SIGNALED,
                sg_list: if size == 0 { &[] } else { &sg },
                ..SendWr::EMPTY
            };
            ctx.post_send(qp, &[wr]).map_err(|e| e.errno)?;
            wait(ctx, scq)?;
            Ok(())
        };
        if !server {
            send(&mut ctx, &mut data)?;
        }
        let wc = wait(&mut ctx, rcq)?;
        if wc.opcode != WcOpcode::Recv || wc.byte_len as usize != size {
            return Err(format!("message {n}: {:?} of {} bytes", wc.opcode, wc.byte_len).into());
        }
        buf.read_bytes(slot * (1 + wc.wr_id as usize), &mut data);
        if let Some(i) = (0..size).find(|&i| data[i] != byte(!server, n, i)) {
            return Err(format!("message {n}: byte {i} differs").into());
        }
        received += 1;
        recv(&mut ctx, wc.wr_id as usize)?;
        if server {
            send(&mut ctx, &mut data)?;
        }
    }
    let usec = start.elapsed().as_secs_f64() * 1e6;
    if !server {
        let bytes = size as u64 * u64::from(iters) * 2;
        println!(
            "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
            usec / 1e6,
            bytes as f64 * 8.0 / usec
        );
        println!(
            "{iters} iters in {:.2} seconds = {:.2} usec/iter",
            usec / 1e6,
            usec / f64::from(iters)
        );
    }

    ctx.destroy_qp(qp)?;
    ctx.destroy_srq(srq)?;
    ctx.destroy_cq(scq)?;
    ctx.destroy_cq(rcq)?;
    ctx.dereg_mr(mr).map_err(|(_, e)| e)?;
    drop(buf);
    ctx.close()?;
    Ok(received)
}

/// Two model hosts on one wire, each side on its own thread: the messages
/// each received.
pub fn run(t: Transport, size: usize, iters: u32) -> Result<(u32, u32), Box<dyn Error>> {
    let ib = t == Transport::Ib;
    let wire = Wire::new(if ib {
        LinkType::Infiniband
    } else {
        LinkType::Ethernet
    });
    let device = |seed| {
        // Threaded: each device runs its own thread on the real clock, as
        // two cards do; a virtual clock per host would let one host's
        // timers run ahead of the other host's work.
        let dev = Device::new(
            SimConfig {
                seed,
                ..SimConfig::profile(Profile::ConnectX5)
            }
            .threaded(),
        );
        if ib {
            dev.caps_mut(|c| c.port_type = 0);
        }
        dev.connect(&wire).map(|_| dev)
    };
    let (client, server) = (device(11)?, device(12)?);
    let (to_server, from_client) = std::sync::mpsc::channel();
    let (to_client, from_server) = std::sync::mpsc::channel();
    let side = |hal: SimHal, server: bool, oob: OutOfBand| {
        std::thread::Builder::new()
            .stack_size(16 << 20)
            .spawn(move || host(hal, t, server, oob, size, iters).map_err(|e| e.to_string()))
    };
    let s = side(
        server.hal(),
        true,
        OutOfBand {
            tx: to_client,
            rx: from_client,
        },
    )?;
    let c = side(
        client.hal(),
        false,
        OutOfBand {
            tx: to_server,
            rx: from_server,
        },
    )?;
    let c = c.join().map_err(|_| "client panicked")??;
    let s = s.join().map_err(|_| "server panicked")??;
    Ok((c, s))
}

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let t = match args.next().as_deref() {
        None | Some("roce-v2-ipv4") => Transport::RoceV2Ipv4,
        Some("roce-v2-ipv6") => Transport::RoceV2Ipv6,
        Some("roce-v1") => Transport::RoceV1,
        Some("ib") => Transport::Ib,
        Some(other) => return Err(format!("unknown transport {other:?}").into()),
    };
    let size: usize = args.next().map_or(Ok(4096), |s| s.parse())?;
    let iters: u32 = args.next().map_or(Ok(1000), |s| s.parse())?;
    if size > 1 << 20 || iters == 0 {
        return Err("SIZE at most 1048576, ITERS at least 1".into());
    }
    let (c, s) = run(t, size, iters)?;
    println!("client received {c}, server received {s}: every byte as sent");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_transport_between_two_threads() {
        for t in [
            Transport::RoceV2Ipv4,
            Transport::RoceV2Ipv6,
            Transport::RoceV1,
            Transport::Ib,
        ] {
            for size in [0, 64, 3000] {
                assert_eq!(run(t, size, 20).unwrap(), (20, 20), "{t:?} {size}");
            }
        }
    }

    #[test]
    fn the_record_round_trips() {
        let d = Dest {
            lid: 0x12,
            qpn: 0xab_cdef,
            psn: 0x12_3456,
            gid: mlx5_driver::gid::ipv4_gid([198, 18, 0, 9]),
            mac: [2, 0xc9, 0x63, 1, 2, 3],
        };
        let s = d.to_wire();
        assert!(s.starts_with("0012:abcdef:123456:00000000000000000000ffffc6120009:"));
        assert_eq!(Dest::from_wire(&s).unwrap(), d);
        assert!(Dest::from_wire("0012:zz").is_err());
    }
}
