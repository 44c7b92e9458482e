//! A wire between ports: one Ethernet L2 segment (every frame reaches every
//! other port, as on a shared segment or a switch flooding; each card keeps
//! the frames for its own MAC), or an InfiniBand link (two ports:
//! point-to-point, every packet reaches the other end; more ports: a
//! switch forwarding by destination LID and dropping unknown LIDs).
//!
//! The wire queues frames in per-port inboxes; a device takes what arrived
//! for its port with [`Wire::recv`]. Faults are deterministic by seed
//! ([`Faults`]): drop, duplicate, reorder (hold a frame back behind the
//! next one) and corrupt (flip an ICRC bit, so the receiver drops it
//! silently), as a fraction of frames or for chosen frame numbers. A
//! capture ([`Wire::capture`]) records every frame as its sender put it on
//! the wire, before faults.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use super::crc::{ICRC_LEN, VCRC_LEN};
use super::pcap::PcapWriter;
use super::LinkType;

/// A port's handle on a wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortId(pub usize);

/// What a fault does to one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The frame is lost.
    Drop,
    /// The frame arrives twice.
    Duplicate,
    /// The frame arrives after the next frame put on the wire.
    Reorder,
    /// One bit of the ICRC flips: the receiver drops the frame silently.
    Corrupt,
}

/// Fault injection: fractions of frames (each in 0.0..=1.0, drawn from a
/// generator seeded with `seed`) and faults on chosen frames (numbered
/// from 0 in the order senders put them on the wire).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Faults {
    /// Seed of the fault generator: the same seed and traffic give the
    /// same faults.
    pub seed: u64,
    /// Fraction of frames dropped.
    pub drop: f64,
    /// Fraction of frames duplicated.
    pub duplicate: f64,
    /// Fraction of frames reordered.
    pub reorder: f64,
    /// Fraction of frames corrupted.
    pub corrupt: f64,
    /// Faults on chosen frame numbers.
    pub chosen: Vec<(u64, Fault)>,
}

/// What a wire carried.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WireStats {
    /// Frames senders put on the wire.
    pub frames: u64,
    /// Bytes senders put on the wire.
    pub bytes: u64,
    /// Frames delivered to a port's inbox (a flooded frame counts once per
    /// port, a duplicate twice).
    pub delivered: u64,
    /// Frames lost to a drop fault.
    pub dropped: u64,
    /// Frames duplicated.
    pub duplicated: u64,
    /// Frames held back behind a later one.
    pub reordered: u64,
    /// Frames whose ICRC was corrupted.
    pub corrupted: u64,
    /// IB frames for a LID no port has (dropped by the switch), or frames
    /// sent on a wire with no other port.
    pub undeliverable: u64,
}

/// Whatever owns a port on the wire: takes the frames waiting for it.
pub(crate) trait Endpoint: Send + Sync {
    /// Process every frame waiting in the port's inbox.
    fn poll_wire(&self);
}

/// One port's place on the wire.
struct Port {
    /// IB: the port's LID (switch forwarding).
    lid: u16,
    inbox: VecDeque<Vec<u8>>,
    /// The device behind the port, if one is attached.
    endpoint: Option<Weak<dyn Endpoint>>,
}

struct Inner {
    link: LinkType,
    ports: Vec<Port>,
    faults: Faults,
    rng: u64,
    /// A reordered frame waiting for the next one: (sender, frame).
    held: Option<(PortId, Vec<u8>)>,
    capture: Option<PcapWriter<Box<dyn Write + Send>>>,
    capture_error: Option<std::io::Error>,
    stats: WireStats,
    /// Spent frame buffers, reused.
    pool: Vec<Vec<u8>>,
    /// Faults apply only to frames this port sends (and chosen frame
    /// numbers count only its frames); `None`: every frame.
    fault_source: Option<PortId>,
    /// Frames the fault plan has numbered.
    faultable: u64,
    /// The endpoints `pump` polls in one round (kept for its capacity: a
    /// frame's delivery allocates nothing).
    ready: Vec<Arc<dyn Endpoint>>,
}

/// A wire joining device ports; cheap to clone (a shared handle).
#[derive(Clone)]
pub struct Wire {
    inner: Arc<Mutex<Inner>>,
    /// A [`Wire::pump`] is running.
    pumping: Arc<AtomicBool>,
}

impl std::fmt::Debug for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = self.lock();
        f.debug_struct("Wire")
            .field("link", &g.link)
            .field("ports", &g.ports.len())
            .field("stats", &g.stats)
            .finish()
    }
}

impl Wire {
    /// A wire for `link` frames without faults.
    pub fn new(link: LinkType) -> Wire {
        Wire {
            inner: Arc::new(Mutex::new(Inner {
                link,
                ports: Vec::new(),
                faults: Faults::default(),
                rng: 0,
                held: None,
                capture: None,
                capture_error: None,
                stats: WireStats::default(),
                pool: Vec::new(),
                fault_source: None,
                faultable: 0,
                ready: Vec::new(),
            })),
            pumping: Arc::new(AtomicBool::new(false)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the wire carries.
    pub fn link(&self) -> LinkType {
        self.lock().link
    }

    /// Join a port. `lid` is the port's LID on an IB wire (ignored on
    /// Ethernet, where each card filters by its MAC).
    pub fn connect(&self, lid: u16) -> PortId {
        let mut g = self.lock();
        g.ports.push(Port {
            lid,
            inbox: VecDeque::new(),
            endpoint: None,
        });
        PortId(g.ports.len() - 1)
    }

    /// Attach the device that takes `port`'s frames.
    pub(crate) fn set_endpoint(&self, port: PortId, ep: Weak<dyn Endpoint>) {
        if let Some(p) = self.lock().ports.get_mut(port.0) {
            p.endpoint = Some(ep);
        }
    }

    /// Deliver: let every attached device take the frames waiting for it,
    /// again and again while they answer, until the wire is quiet. A frame
    /// held back for reordering goes out once nothing else moves. Devices
    /// call this after each step (doorbell, clock); a pump already running
    /// (here or on another thread) picks up what a nested call would have.
    pub fn pump(&self) {
        loop {
            if self.pumping.swap(true, Ordering::AcqRel) {
                return;
            }
            loop {
                let mut ready = {
                    let mut g = self.lock();
                    let mut ready = std::mem::take(&mut g.ready);
                    ready.extend(
                        g.ports
                            .iter()
                            .filter(|p| !p.inbox.is_empty())
                            .filter_map(|p| p.endpoint.as_ref().and_then(Weak::upgrade)),
                    );
                    ready
                };
                if ready.is_empty() {
                    self.lock().ready = ready;
                    if self.release_held() {
                        continue;
                    }
                    break;
                }
                for ep in ready.drain(..) {
                    ep.poll_wire();
                }
                self.lock().ready = ready;
            }
            self.pumping.store(false, Ordering::Release);
            // Frames that arrived between the last look and the release.
            let more = {
                let g = self.lock();
                g.held.is_some()
                    || g.ports
                        .iter()
                        .any(|p| !p.inbox.is_empty() && p.endpoint.is_some())
            };
            if !more {
                return;
            }
        }
    }

    /// Change the LID the switch forwards to `port` by.
    pub fn set_lid(&self, port: PortId, lid: u16) {
        if let Some(p) = self.lock().ports.get_mut(port.0) {
            p.lid = lid;
        }
    }

    /// Replace the fault plan (and restart its generator from its seed).
    pub fn set_faults(&self, faults: Faults) {
        let mut g = self.lock();
        g.rng = faults.seed;
        g.faults = faults;
    }

    /// Apply the fault plan only to frames `port` sends (a link to a
    /// peer outside the process: only the model's own frames are faulted,
    /// and chosen frame numbers count only those); `None` restores faults
    /// on every frame.
    pub fn set_fault_source(&self, port: Option<PortId>) {
        let mut g = self.lock();
        g.fault_source = port;
        g.faultable = 0;
    }

    /// Record every frame put on the wire from now on into a pcap stream.
    pub fn capture(&self, out: Box<dyn Write + Send>) -> std::io::Result<()> {
        let mut g = self.lock();
        let link = g.link;
        g.capture = Some(PcapWriter::new(out, link)?);
        Ok(())
    }

    /// Stop capturing: flush and close the capture; reports the first
    /// write error the capture met.
    pub fn end_capture(&self) -> std::io::Result<u64> {
        let mut g = self.lock();
        if let Some(e) = g.capture_error.take() {
            g.capture = None;
            return Err(e);
        }
        match g.capture.take() {
            Some(mut c) => {
                c.flush()?;
                Ok(c.frames())
            }
            None => Ok(0),
        }
    }

    /// Counters.
    pub fn stats(&self) -> WireStats {
        self.lock().stats
    }

    /// Put a frame on the wire from `from` at `time_ns` (the sender's
    /// device time, for the capture).
    pub fn send(&self, from: PortId, time_ns: u64, frame: &[u8]) {
        let mut g = self.lock();
        let g = &mut *g;
        let n = g.stats.frames;
        g.stats.frames += 1;
        g.stats.bytes += frame.len() as u64;
        if let Some(c) = g.capture.as_mut() {
            if let Err(e) = c.write_frame(time_ns, frame) {
                g.capture_error.get_or_insert(e);
            }
        }
        let mut buf = g.pool.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(frame);
        let fault = match g.fault_source {
            None => g.fault_for(n),
            Some(p) if p == from => {
                let k = g.faultable;
                g.faultable += 1;
                g.fault_for(k)
            }
            Some(_) => None,
        };
        // A frame held back goes out after this one.
        let held = g.held.take();
        match fault {
            Some(Fault::Drop) => {
                g.stats.dropped += 1;
                g.pool.push(buf);
            }
            Some(Fault::Reorder) => {
                g.stats.reordered += 1;
                g.held = Some((from, buf));
            }
            Some(Fault::Duplicate) => {
                g.stats.duplicated += 1;
                g.deliver(from, &buf);
                g.deliver(from, &buf);
                g.pool.push(buf);
            }
            Some(Fault::Corrupt) => {
                g.stats.corrupted += 1;
                let trailer = match g.link {
                    LinkType::Ethernet => ICRC_LEN,
                    LinkType::Infiniband => ICRC_LEN + VCRC_LEN,
                };
                if buf.len() >= trailer {
                    let at = buf.len() - trailer + (g.next_random() % 4) as usize;
                    buf[at] ^= 1 << (g.next_random() % 8);
                }
                g.deliver(from, &buf);
                g.pool.push(buf);
            }
            None => {
                g.deliver(from, &buf);
                g.pool.push(buf);
            }
        }
        if let Some((hfrom, hbuf)) = held {
            g.deliver(hfrom, &hbuf);
            g.pool.push(hbuf);
        }
    }

    /// Deliver a frame held back for reordering when no later frame came
    /// (so reordering delays, never loses). True if one was released.
    pub fn release_held(&self) -> bool {
        let mut g = self.lock();
        match g.held.take() {
            Some((from, buf)) => {
                g.deliver(from, &buf);
                g.pool.push(buf);
                true
            }
            None => false,
        }
    }

    /// Take the next frame that arrived for `port` into `buf` (its old
    /// contents replaced); false when none is waiting.
    pub fn recv(&self, port: PortId, buf: &mut Vec<u8>) -> bool {
        let mut g = self.lock();
        let Some(f) = g.ports.get_mut(port.0).and_then(|p| p.inbox.pop_front()) else {
            return false;
        };
        let old = std::mem::replace(buf, f);
        g.pool.push(old);
        true
    }

    /// Frames waiting in every inbox, and a held-back frame.
    pub fn pending(&self) -> usize {
        let g = self.lock();
        g.ports.iter().map(|p| p.inbox.len()).sum::<usize>() + g.held.is_some() as usize
    }
}

impl Inner {
    /// splitmix64 step.
    fn next_random(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform draw in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next_random() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The fault for frame `n`: a chosen one first, else one draw per
    /// fault kind (always four draws, so the sequence does not depend on
    /// which faults hit).
    fn fault_for(&mut self, n: u64) -> Option<Fault> {
        let chosen = self
            .faults
            .chosen
            .iter()
            .find(|(at, _)| *at == n)
            .map(|(_, f)| *f);
        let f = &self.faults;
        let plan = [
            (f.drop, Fault::Drop),
            (f.duplicate, Fault::Duplicate),
            (f.reorder, Fault::Reorder),
            (f.corrupt, Fault::Corrupt),
        ];
        if plan.iter().all(|(p, _)| *p <= 0.0) {
            return chosen;
        }
        let mut hit = None;
        for (p, kind) in plan {
            let u = self.unit();
            if hit.is_none() && u < p {
                hit = Some(kind);
            }
        }
        chosen.or(hit)
    }

    /// Put a copy of `frame` into the inbox of every port it reaches.
    fn deliver(&mut self, from: PortId, frame: &[u8]) {
        let targets: usize = match self.link {
            LinkType::Ethernet => usize::MAX,
            LinkType::Infiniband if self.ports.len() <= 2 => usize::MAX,
            LinkType::Infiniband => {
                // A switch: forward by DLID (LRH bytes 2-3).
                let dlid = frame
                    .get(2..4)
                    .map(|b| u16::from_be_bytes([b[0], b[1]]))
                    .unwrap_or(0);
                match self.ports.iter().position(|p| p.lid == dlid && dlid != 0) {
                    Some(i) if i != from.0 => i,
                    _ => {
                        self.stats.undeliverable += 1;
                        return;
                    }
                }
            }
        };
        let mut reached = 0;
        for i in 0..self.ports.len() {
            if i == from.0 || (targets != usize::MAX && targets != i) {
                continue;
            }
            let mut copy = self.pool.pop().unwrap_or_default();
            copy.clear();
            copy.extend_from_slice(frame);
            self.ports[i].inbox.push_back(copy);
            reached += 1;
        }
        if reached == 0 {
            self.stats.undeliverable += 1;
        }
        self.stats.delivered += reached;
    }
}
