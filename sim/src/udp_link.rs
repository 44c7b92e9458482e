//! A wire that leaves the process: a port of a [`Wire`] joined to a UDP
//! socket, whole Ethernet frames one per datagram, no FCS, no extra header
//! (what QEMU's `-netdev dgram` and `-netdev socket,udp=` carry). A guest's
//! virtio-net NIC on such a netdev shares an Ethernet segment with the
//! model's port.
//!
//! The link plays the part of the host's IP stack around the port: it
//! answers ARP requests for the port's IPv4 GIDs and neighbour
//! solicitations for its IPv6 GIDs (Linux resolves the peer's address when
//! a QP goes to RTR, `drivers/infiniband/core/addr.c`), learns the peers'
//! MACs from their ARP and neighbour messages ([`UdpLink::resolve_ipv4`]
//! asks when it has not seen one), and drops frames addressed to another
//! MAC (the guest's IPv6 multicast chatter). Everything else goes on the
//! wire to the device, which checks it as it checks any frame.
//!
//! The device must run threaded: a peer outside the process keeps real
//! time (rxe's retransmit timers are kernel jiffies), so the model's ACK
//! and RNR timers must follow the wall clock too.

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::wire::neighbour::{self, Neighbour};
use crate::wire::{Endpoint, PortId, Wire};
use crate::{Device, SimError};

/// The largest datagram taken: a 9216-byte jumbo frame plus headers.
const MAX_FRAME: usize = 9_344;
/// How often the receive thread looks at its stop flag.
const POLL: Duration = Duration::from_millis(20);
/// How often an unanswered ARP request is repeated.
const ARP_RETRY: Duration = Duration::from_millis(200);

/// What a link carried and did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Frames sent to the peer (the model's frames and neighbour replies).
    pub frames_out: u64,
    /// Datagrams received from the peer.
    pub frames_in: u64,
    /// Frames from the peer put on the wire to the device.
    pub to_device: u64,
    /// ARP requests for the port's addresses answered.
    pub arp_replies: u64,
    /// ARP requests the link sent to resolve a peer.
    pub arp_requests: u64,
    /// Neighbour solicitations answered.
    pub adverts: u64,
    /// Frames dropped: another MAC's, multicast that is not neighbour
    /// discovery, runts, or datagrams from an address other than the peer.
    pub dropped: u64,
    /// Datagrams the socket refused to send.
    pub send_errors: u64,
}

struct Shared {
    dev: Device,
    wire: Wire,
    port: PortId,
    dev_port: PortId,
    sock: UdpSocket,
    remote: SocketAddr,
    stop: AtomicBool,
    state: Mutex<State>,
    learned: Condvar,
}

#[derive(Default)]
struct State {
    v4: HashMap<[u8; 4], [u8; 6]>,
    v6: HashMap<[u8; 16], [u8; 6]>,
    stats: LinkStats,
}

/// A device's port joined to a UDP peer on the host (see the module
/// documentation). Dropping it stops the link.
pub struct UdpLink {
    shared: Arc<Shared>,
    rx: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for UdpLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpLink")
            .field("remote", &self.shared.remote)
            .field("stats", &self.stats())
            .finish()
    }
}

/// Why a link could not be set up.
#[derive(Debug)]
pub enum LinkError {
    /// The socket could not be bound or configured.
    Io(std::io::Error),
    /// The model refused (device not threaded, already on a wire, IB port).
    Model(SimError),
}

impl std::fmt::Display for LinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LinkError::Io(e) => write!(f, "UDP socket: {e}"),
            LinkError::Model(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for LinkError {}

impl UdpLink {
    /// Join `dev`'s port to a new Ethernet wire whose other end is the
    /// UDP peer `remote`, receiving on `local` (both normally on
    /// 127.0.0.1). The device must be threaded and not yet on a wire.
    pub fn attach(
        dev: &Device,
        local: SocketAddr,
        remote: SocketAddr,
    ) -> Result<UdpLink, LinkError> {
        let wire = Wire::new(crate::wire::LinkType::Ethernet);
        UdpLink::check_threaded(dev)?;
        dev.connect(&wire).map_err(LinkError::Model)?;
        UdpLink::join(dev, local, remote)
    }

    /// Join the Ethernet wire `dev`'s port is already on to the UDP peer
    /// `remote`, receiving on `local`. The device must be threaded.
    pub fn join(dev: &Device, local: SocketAddr, remote: SocketAddr) -> Result<UdpLink, LinkError> {
        UdpLink::check_threaded(dev)?;
        let Some((wire, dev_port)) = dev.lock().port.wire.clone() else {
            return Err(LinkError::Model(SimError::BadState(
                "the port is on no wire (Device::connect first)",
            )));
        };
        if wire.link() != crate::wire::LinkType::Ethernet {
            return Err(LinkError::Model(SimError::BadState(
                "a UDP link carries Ethernet frames; the port is InfiniBand",
            )));
        }
        let sock = UdpSocket::bind(local).map_err(LinkError::Io)?;
        sock.set_read_timeout(Some(POLL)).map_err(LinkError::Io)?;
        let port = wire.connect(0);
        let shared = Arc::new(Shared {
            dev: dev.clone(),
            wire: wire.clone(),
            port,
            dev_port,
            sock,
            remote,
            stop: AtomicBool::new(false),
            state: Mutex::new(State::default()),
            learned: Condvar::new(),
        });
        let ep: std::sync::Weak<dyn Endpoint> =
            Arc::downgrade(&(shared.clone() as Arc<dyn Endpoint>));
        wire.set_endpoint(port, ep);
        let s = shared.clone();
        let rx = std::thread::Builder::new()
            .name("mlx5-sim-udp-link".into())
            .spawn(move || s.receive_loop())
            .map_err(LinkError::Io)?;
        Ok(UdpLink {
            shared,
            rx: Some(rx),
        })
    }

    fn check_threaded(dev: &Device) -> Result<(), LinkError> {
        if dev.lock().clock.threaded {
            return Ok(());
        }
        Err(LinkError::Model(SimError::BadState(
            "a UDP link needs a threaded device: the peer's timers run in real time",
        )))
    }

    /// The wire between the device and the peer: faults
    /// ([`Wire::set_faults`], limited to the model's frames with
    /// [`UdpLink::fault_model_frames_only`]), capture, counters.
    pub fn wire(&self) -> &Wire {
        &self.shared.wire
    }

    /// Apply the wire's fault plan only to the frames the model sends
    /// (the peer's frames reach the device as they came).
    pub fn fault_model_frames_only(&self) {
        self.shared
            .wire
            .set_fault_source(Some(self.shared.dev_port));
    }

    /// The socket's local address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.shared.sock.local_addr()
    }

    /// Counters.
    pub fn stats(&self) -> LinkStats {
        self.shared.lock().stats
    }

    /// The MAC of the peer that owns IPv4 address `ip`: learned from its
    /// ARP traffic, or asked for (an ARP request from the port's first
    /// IPv4 address, repeated every 200 ms) for at most `timeout`.
    pub fn resolve_ipv4(&self, ip: [u8; 4], timeout: Duration) -> Option<[u8; 6]> {
        let s = &self.shared;
        let end = Instant::now() + timeout;
        let mut g = s.lock();
        loop {
            if let Some(m) = g.v4.get(&ip) {
                return Some(*m);
            }
            let now = Instant::now();
            if now >= end {
                return None;
            }
            if let Some((mac, me)) = s.dev.ipv4_addresses().first().copied() {
                let mut f = [0u8; neighbour::ARP_FRAME_LEN];
                let n = neighbour::build_arp(&mut f, 1, (mac, me), ([0; 6], ip));
                g.stats.arp_requests += 1;
                drop(g);
                s.send(&f[..n]);
                g = s.lock();
            }
            let wait = ARP_RETRY.min(end - now);
            g = s
                .learned
                .wait_timeout(g, wait)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// The MAC of the peer that owns IPv6 address `ip`, if its neighbour
    /// messages have shown it.
    pub fn neighbour_ipv6(&self, ip: [u8; 16]) -> Option<[u8; 6]> {
        self.shared.lock().v6.get(&ip).copied()
    }
}

impl Drop for UdpLink {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.rx.take() {
            let _ = t.join();
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn send(&self, frame: &[u8]) {
        let ok = self.sock.send_to(frame, self.remote).is_ok();
        let mut g = self.lock();
        if ok {
            g.stats.frames_out += 1;
        } else {
            g.stats.send_errors += 1;
        }
    }

    fn receive_loop(&self) {
        let mut buf = vec![0u8; MAX_FRAME];
        while !self.stop.load(Ordering::Acquire) {
            let (n, from) = match self.sock.recv_from(&mut buf) {
                Ok(r) => r,
                Err(_) => continue, // the poll timeout, or ICMP port unreachable
            };
            self.lock().stats.frames_in += 1;
            if from != self.remote {
                self.lock().stats.dropped += 1;
                continue;
            }
            self.frame_from_peer(&buf[..n]);
        }
    }

    /// One frame from the peer.
    fn frame_from_peer(&self, frame: &[u8]) {
        if frame.len() < 14 {
            self.lock().stats.dropped += 1;
            return;
        }
        if let Some(nb) = neighbour::parse_neighbour(frame) {
            self.neighbour(nb);
            return;
        }
        let dst: [u8; 6] = frame[0..6].try_into().expect("6 bytes");
        let ours =
            self.dev.port_mac() == dst || self.dev.gid_entries().iter().any(|(_, g)| g.mac == dst);
        if !ours {
            self.lock().stats.dropped += 1;
            return;
        }
        self.lock().stats.to_device += 1;
        self.wire.send(self.port, self.dev.now_ns(), frame);
        self.wire.pump();
    }

    fn neighbour(&self, nb: Neighbour) {
        let mut out = [0u8; neighbour::ND_FRAME_LEN];
        let reply = match nb {
            Neighbour::ArpRequest {
                sender_mac,
                sender_ip,
                target_ip,
            } => {
                self.learn_v4(sender_ip, sender_mac);
                self.dev
                    .ipv4_addresses()
                    .into_iter()
                    .find(|(_, ip)| *ip == target_ip)
                    .map(|(mac, ip)| {
                        self.lock().stats.arp_replies += 1;
                        neighbour::build_arp(&mut out, 2, (mac, ip), (sender_mac, sender_ip))
                    })
            }
            Neighbour::ArpReply {
                sender_mac,
                sender_ip,
            } => {
                self.learn_v4(sender_ip, sender_mac);
                None
            }
            Neighbour::Solicit {
                source,
                source_mac,
                target,
            } => {
                if source != [0; 16] {
                    self.lock().v6.insert(source, source_mac);
                    self.learned.notify_all();
                }
                self.dev
                    .gid_entries()
                    .into_iter()
                    .map(|(_, g)| g)
                    .find(|g| g.l3_type == 1 && g.version == 2 && g.gid == target)
                    .map(|g| {
                        self.lock().stats.adverts += 1;
                        neighbour::build_advert(&mut out, g.mac, g.gid, source_mac, source)
                    })
            }
            Neighbour::Advert { target, mac } => {
                self.lock().v6.insert(target, mac);
                self.learned.notify_all();
                None
            }
        };
        if let Some(n) = reply {
            self.send(&out[..n]);
        }
    }

    fn learn_v4(&self, ip: [u8; 4], mac: [u8; 6]) {
        if ip != [0; 4] {
            self.lock().v4.insert(ip, mac);
            self.learned.notify_all();
        }
    }
}

impl Endpoint for Shared {
    /// The device's frames, out to the peer.
    fn poll_wire(&self) {
        let mut buf = Vec::new();
        while self.wire.recv(self.port, &mut buf) {
            self.send(&buf);
        }
    }
}

impl Device {
    /// The port's IPv4 addresses: (MAC, address) of every RoCE v2 GID
    /// entry that holds an IPv4-mapped address.
    pub fn ipv4_addresses(&self) -> Vec<([u8; 6], [u8; 4])> {
        self.gid_entries()
            .into_iter()
            .map(|(_, g)| g)
            .filter(|g| g.version == 2 && g.l3_type == 0)
            .filter(|g| g.gid[..10] == [0; 10] && g.gid[10..12] == [0xff, 0xff])
            .map(|g| (g.mac, g.gid[12..].try_into().expect("4 bytes")))
            .collect()
    }
}
