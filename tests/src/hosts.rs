//! Two hosts on one wire for the driver-against-model tests: the shared
//! setup `mlx5_testbed::Host` (the one `mlx5 pingpong` and the two-host
//! benchmark use), with the buffer layout these tests use and the checks
//! every test makes of what each host learns about itself.

use mlx5_driver::qp::Mtu;
use mlx5_driver::verbs::{AccessFlags, AhAttr, LinkLayer, PortState, WorkCompletion};
use mlx5_driver::HcaConfig;
use mlx5_sim::wire::Wire;
use mlx5_sim::{Device, Profile, SimConfig};
pub use mlx5_testbed::{Addr, ConnectOpts, Host, HostSpec, RecvQueue, Transport, TRANSPORTS};

/// Bytes of the largest message.
pub const BIG: usize = 64 * 1024;
/// Receive WQEs posted on each SRQ (its `max_wr`).
pub const RECVS: usize = 31;
/// Buffer layout (each area [`BIG`] bytes): the send area's offset.
pub const SEND_AT: usize = 0;
/// The RDMA WRITE target's offset.
pub const WRITE_AT: usize = BIG;
/// The first receive slot's offset.
pub const RECV_AT: usize = 2 * BIG;

/// `len` bytes of a pattern that differs per `seed`.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed) ^ (i >> 9) as u8)
        .collect()
}

/// Host `n` on `wire`: a ConnectX-5 (host 1) or ConnectX-4 Lx (host 2)
/// Ethernet port, or a ConnectX-5 InfiniBand port; its own address as a
/// program learns it, checked against the model.
pub fn host(t: Transport, n: u8, wire: &Wire, psn: u32) -> Host {
    host_with(t, n, wire, psn, HcaConfig::default())
}

/// [`host`] with the driver configured by `cfg`.
pub fn host_with(t: Transport, n: u8, wire: &Wire, psn: u32, cfg: HcaConfig) -> Host {
    host_on(t, n, wire, psn, cfg, false)
}

/// Every right a responder of READs and atomics needs, on the QP and the
/// buffer.
pub const RD_ACCESS: AccessFlags = AccessFlags(
    AccessFlags::LOCAL_WRITE.0
        | AccessFlags::REMOTE_WRITE.0
        | AccessFlags::REMOTE_READ.0
        | AccessFlags::REMOTE_ATOMIC.0,
);

/// [`pair`] whose QPs receive through `rq`, grant [`RD_ACCESS`] and have
/// `depth` READ/atomic resources each way.
pub fn rd_pair(t: Transport, rq: RecvQueue, depth: u8) -> (Wire, Host, Host) {
    rd_pair_of([profile_of(t, 1), profile_of(t, 2)], t, rq, depth)
}

/// [`rd_pair`] with host 1 a `profiles[0]` card and host 2 a
/// `profiles[1]` card.
pub fn rd_pair_of(
    profiles: [Profile; 2],
    t: Transport,
    rq: RecvQueue,
    depth: u8,
) -> (Wire, Host, Host) {
    let wire = Wire::new(t.link_type());
    let mut a = host_spec(profiles[0], t, 1, &wire, 0xff_fff0, rq);
    let mut b = host_spec(profiles[1], t, 2, &wire, 0x1234, rq);
    let (aa, ba) = (a.addr, b.addr);
    let opts = ConnectOpts {
        timeout: 10,
        max_rd_atomic: depth,
        max_dest_rd_atomic: depth,
        ..ConnectOpts::new(aa.mtu.min(ba.mtu))
    };
    let (to_b, to_a) = (a.ah_to(&ba), b.ah_to(&aa));
    a.connect(to_b, &ba, &opts)
        .unwrap_or_else(|e| panic!("{e}"));
    b.connect(to_a, &aa, &opts)
        .unwrap_or_else(|e| panic!("{e}"));
    (wire, a, b)
}

fn host_spec(profile: Profile, t: Transport, n: u8, wire: &Wire, psn: u32, rq: RecvQueue) -> Host {
    let dev = Device::new(SimConfig {
        seed: 0x7a0_0000 + u64::from(n),
        ..SimConfig::profile(profile)
    });
    let spec = HostSpec {
        slot: BIG,
        recvs: RECVS,
        cq_entries: 255,
        access: RD_ACCESS,
        rq,
        ..HostSpec::new(t, n, psn)
    };
    Host::new(dev, wire, HcaConfig::default(), spec)
        .unwrap_or_else(|e| panic!("{t:?} host {n}: {e}"))
}

/// The card host `n` is on transport `t`.
fn profile_of(t: Transport, n: u8) -> Profile {
    if n == 2 && !t.ib() {
        Profile::ConnectX4Lx
    } else {
        Profile::ConnectX5
    }
}

/// [`host`] with its device threaded (on the wall clock).
pub fn threaded_host(t: Transport, n: u8, wire: &Wire, psn: u32) -> Host {
    host_on(t, n, wire, psn, HcaConfig::default(), true)
}

fn host_on(t: Transport, n: u8, wire: &Wire, psn: u32, cfg: HcaConfig, threaded: bool) -> Host {
    let sim = SimConfig {
        seed: 0x7a0_0000 + u64::from(n),
        ..SimConfig::profile(profile_of(t, n))
    };
    let dev = Device::new(if threaded { sim.threaded() } else { sim });
    let spec = HostSpec {
        slot: BIG,
        recvs: RECVS,
        cq_entries: 255,
        access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        ..HostSpec::new(t, n, psn)
    };
    let mut h = Host::new(dev, wire, cfg, spec).unwrap_or_else(|e| panic!("{t:?} host {n}: {e}"));
    assert_eq!(spec.target_at(), WRITE_AT);
    assert_eq!(spec.recv_at(0), RECV_AT);
    let port = h.port;
    assert_eq!(port.state, PortState::Active, "{t:?}");
    let ll = if t.ib() {
        LinkLayer::Infiniband
    } else {
        LinkLayer::Ethernet
    };
    assert_eq!(port.link_layer, ll);
    assert!(port.gid_tbl_len > 0);
    assert_eq!(h.ctx.query_pkey(1, 0).unwrap(), 0xffff);
    if t.ib() {
        assert_ne!(port.lid, 0);
        assert_eq!(port.lid, h.dev.port_lid());
    } else {
        // Bring-up's default link-local GIDs (v1 at 0, v2 at 1), plus the
        // IPv4 one RoCE v2 over IPv4 adds.
        let extra = usize::from(t == Transport::RoceV2Ipv4);
        assert_eq!(h.dev.gid_entries().len(), 2 + extra, "{t:?}");
        assert_eq!(h.addr.mac, h.dev.port_mac());
        if extra == 1 {
            let index = h.ctx.hca().default_gid_count();
            assert_eq!(u16::from(h.sgid_index), index);
            let e = h.ctx.query_gid_ex(1, index).unwrap().unwrap();
            assert_eq!((e.gid, e.mac), (h.addr.gid, h.addr.mac));
        }
    }
    h
}

/// RESET → INIT → RTR (toward `peer` by `ah`) → RTS, with timeout 10 and
/// no READ/atomic resources.
pub fn connect(h: &mut Host, ah: AhAttr, peer: &Addr, mtu: Mtu, retry_cnt: u8, pkey_index: u16) {
    let opts = ConnectOpts {
        pkey_index,
        timeout: 10,
        retry_cnt,
        max_rd_atomic: 0,
        max_dest_rd_atomic: 0,
        ..ConnectOpts::new(mtu)
    };
    if let Err(e) = h.connect(ah, peer, &opts) {
        panic!("{e}");
    }
}

/// Poll the send (or receive) CQ of `h` for one completion, letting 100 µs
/// of device time pass on both hosts between polls (at most 2 s).
pub fn wait_one(h: &mut Host, send: bool, other: &Device) -> Option<WorkCompletion> {
    h.wait_one(send, other, 100, 20_000).unwrap()
}

/// Destroy everything, close the context, and check the model is clean:
/// no object, no page, no GID entry, `roce_en` set back, no violation.
pub fn close(h: Host, what: &str) {
    let dev = h.close().unwrap_or_else(|e| panic!("{what}: {e}"));
    crate::assert_clean(&dev, what);
}

/// Two hosts on a new wire, connected.
pub fn pair(t: Transport) -> (Wire, Host, Host) {
    pair_with(t, HcaConfig::default())
}

/// [`pair`] with both drivers configured by `cfg`.
pub fn pair_with(t: Transport, cfg: HcaConfig) -> (Wire, Host, Host) {
    let wire = Wire::new(t.link_type());
    let mut a = host_with(t, 1, &wire, 0xff_fff0, cfg);
    let mut b = host_with(t, 2, &wire, 0x1234, cfg);
    let (aa, ba) = (a.addr, b.addr);
    let mtu = aa.mtu.min(ba.mtu);
    let (to_b, to_a) = (a.ah_to(&ba), b.ah_to(&aa));
    connect(&mut a, to_b, &ba, mtu, 7, 0);
    connect(&mut b, to_a, &aa, mtu, 7, 0);
    (wire, a, b)
}

/// Run `f` on a thread with room for two verbs contexts on its stack.
pub fn big_stack(f: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new()
        .stack_size(64 << 20)
        .spawn(f)
        .unwrap()
        .join()
        .unwrap();
}
