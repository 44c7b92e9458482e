//! The wire between ports: who receives a frame (Ethernet segment, IB
//! point-to-point link, IB switch), faults deterministic by seed (drop,
//! duplicate, reorder, corrupt; fractions and chosen frames) and the
//! capture of what senders put on the wire.

use std::sync::{Arc, Mutex};

use mlx5_sim::wire::{
    self, opcode, read_pcap, Bth, Encap, Eth, ExtHeaders, Fault, Faults, Ip, Ipv4, LinkType, Lrh,
    Packet, PortId, Wire,
};

/// A RoCE v2 SEND_ONLY frame carrying `n` in its PSN.
fn roce_frame(n: u32) -> Vec<u8> {
    let payload = n.to_be_bytes();
    let p = Packet {
        encap: Encap::RoceV2 {
            eth: Eth {
                dst: [2, 0, 0, 0, 0, 2],
                src: [2, 0, 0, 0, 0, 1],
                vlan: None,
            },
            ip: Ip::V4(Ipv4 {
                src: [198, 18, 0, 1],
                dst: [198, 18, 0, 2],
                tos: 0,
                ttl: 64,
                id: 0,
            }),
            udp_sport: 0xc000,
        },
        bth: Bth {
            opcode: opcode::SEND_ONLY,
            pkey: 0xffff,
            dest_qp: 0x11,
            psn: n & 0xff_ffff,
            ..Bth::default()
        },
        ext: ExtHeaders::default(),
        payload: &payload,
    };
    let mut b = vec![0u8; p.frame_len()];
    p.build(&mut b).unwrap();
    b
}

fn ib_frame(dlid: u16, n: u32) -> Vec<u8> {
    let p = Packet {
        encap: Encap::Ib {
            lrh: Lrh {
                vl: 0,
                sl: 0,
                dlid,
                slid: 1,
            },
            grh: None,
        },
        bth: Bth {
            opcode: opcode::SEND_ONLY,
            pkey: 0xffff,
            dest_qp: 0x11,
            psn: n,
            ..Bth::default()
        },
        ext: ExtHeaders::default(),
        payload: &[],
    };
    let mut b = vec![0u8; p.frame_len()];
    p.build(&mut b).unwrap();
    b
}

/// PSNs of the frames waiting for `port`, in arrival order, with whether
/// each one's ICRC holds.
fn drain(w: &Wire, port: PortId, link: LinkType) -> Vec<(u32, bool)> {
    let mut out = Vec::new();
    let mut buf = Vec::new();
    while w.recv(port, &mut buf) {
        let p = wire::parse(link, &buf).unwrap();
        out.push((p.packet.bth.psn, p.icrc_ok));
    }
    out
}

#[test]
fn an_ethernet_segment_reaches_every_other_port() {
    let w = Wire::new(LinkType::Ethernet);
    let ports: Vec<PortId> = (0..3).map(|_| w.connect(0)).collect();
    w.send(ports[0], 0, &roce_frame(1));
    w.send(ports[1], 0, &roce_frame(2));
    assert_eq!(drain(&w, ports[0], LinkType::Ethernet), vec![(2, true)]);
    assert_eq!(drain(&w, ports[1], LinkType::Ethernet), vec![(1, true)]);
    assert_eq!(
        drain(&w, ports[2], LinkType::Ethernet),
        vec![(1, true), (2, true)]
    );
    let s = w.stats();
    assert_eq!((s.frames, s.delivered, s.undeliverable), (2, 4, 0));
}

#[test]
fn ib_links_are_point_to_point_and_switches_forward_by_lid() {
    let w = Wire::new(LinkType::Infiniband);
    let a = w.connect(1);
    let b = w.connect(2);
    // Two ports: a link; the receiver, not the wire, checks the DLID.
    w.send(a, 0, &ib_frame(99, 1));
    assert_eq!(drain(&w, b, LinkType::Infiniband), vec![(1, true)]);
    // Three ports: a switch.
    let c = w.connect(3);
    w.send(a, 0, &ib_frame(3, 2));
    w.send(c, 0, &ib_frame(2, 3));
    w.send(a, 0, &ib_frame(7, 4));
    assert_eq!(drain(&w, c, LinkType::Infiniband), vec![(2, true)]);
    assert_eq!(drain(&w, b, LinkType::Infiniband), vec![(3, true)]);
    assert!(drain(&w, a, LinkType::Infiniband).is_empty());
    assert_eq!(w.stats().undeliverable, 1);
}

#[test]
fn chosen_faults_hit_exactly_the_chosen_frames() {
    let w = Wire::new(LinkType::Ethernet);
    let a = w.connect(0);
    let b = w.connect(0);
    w.set_faults(Faults {
        chosen: vec![
            (1, Fault::Drop),
            (2, Fault::Duplicate),
            (3, Fault::Reorder),
            (5, Fault::Corrupt),
        ],
        ..Faults::default()
    });
    for n in 0..7 {
        w.send(a, 0, &roce_frame(n));
    }
    assert_eq!(
        drain(&w, b, LinkType::Ethernet),
        vec![
            (0, true),
            (2, true),
            (2, true),
            (4, true),
            (3, true),
            (5, false),
            (6, true)
        ]
    );
    let s = w.stats();
    assert_eq!(
        (s.frames, s.dropped, s.duplicated, s.reordered, s.corrupted),
        (7, 1, 1, 1, 1)
    );
    // A frame held back with nothing after it is released, not lost.
    w.set_faults(Faults {
        chosen: vec![(7, Fault::Reorder)],
        ..Faults::default()
    });
    w.send(a, 0, &roce_frame(7));
    assert_eq!(w.pending(), 1);
    assert!(drain(&w, b, LinkType::Ethernet).is_empty());
    assert!(w.release_held());
    assert_eq!(drain(&w, b, LinkType::Ethernet), vec![(7, true)]);
}

fn run_random(seed: u64, frames: u32) -> (Vec<(u32, bool)>, wire::WireStats) {
    let w = Wire::new(LinkType::Ethernet);
    let a = w.connect(0);
    let b = w.connect(0);
    w.set_faults(Faults {
        seed,
        drop: 0.05,
        duplicate: 0.03,
        reorder: 0.04,
        corrupt: 0.02,
        chosen: Vec::new(),
    });
    let mut got = Vec::new();
    for n in 0..frames {
        w.send(a, 0, &roce_frame(n));
        got.extend(drain(&w, b, LinkType::Ethernet));
    }
    w.release_held();
    got.extend(drain(&w, b, LinkType::Ethernet));
    (got, w.stats())
}

#[test]
fn random_faults_are_deterministic_by_seed_and_near_their_fractions() {
    let (a, sa) = run_random(42, 10_000);
    let (b, sb) = run_random(42, 10_000);
    assert_eq!(a, b, "same seed, same faults");
    assert_eq!(sa, sb);
    let (c, _) = run_random(43, 10_000);
    assert_ne!(a, c, "another seed, other faults");
    // Each fault kind is drawn independently; the first hit wins, so the
    // observed rates are a little below the later fractions. Bounds: about
    // four standard deviations.
    let near = |got: u64, p: f64| {
        let mean = 10_000.0 * p;
        let sd = (mean * (1.0 - p)).sqrt();
        (got as f64 - mean).abs() < 4.0 * sd + 0.1 * mean
    };
    assert!(near(sa.dropped, 0.05), "dropped {}", sa.dropped);
    assert!(near(sa.duplicated, 0.03 * 0.95), "dup {}", sa.duplicated);
    assert!(near(sa.reordered, 0.04 * 0.92), "reorder {}", sa.reordered);
    assert!(near(sa.corrupted, 0.02 * 0.88), "corrupt {}", sa.corrupted);
    // Every frame not dropped arrived (twice if duplicated); the corrupted
    // ones fail their ICRC.
    assert_eq!(
        a.len() as u64,
        sa.frames - sa.dropped + sa.duplicated,
        "frames arrived"
    );
    assert_eq!(a.iter().filter(|(_, ok)| !ok).count() as u64, sa.corrupted);
    assert_eq!(sa.delivered, a.len() as u64);
}

/// A `Write` whose bytes a test can read afterwards.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn the_capture_holds_every_frame_as_sent_before_faults() {
    let w = Wire::new(LinkType::Ethernet);
    let a = w.connect(0);
    let _b = w.connect(0);
    let sink = Shared::default();
    w.capture(Box::new(sink.clone())).unwrap();
    w.set_faults(Faults {
        chosen: vec![(0, Fault::Drop), (1, Fault::Corrupt)],
        ..Faults::default()
    });
    for n in 0..4 {
        w.send(a, 1_000 * n as u64, &roce_frame(n));
    }
    assert_eq!(w.end_capture().unwrap(), 4);
    let bytes = sink.0.lock().unwrap().clone();
    let (link, recs) = read_pcap(&bytes[..]).unwrap();
    assert_eq!(link, wire::LINKTYPE_ETHERNET);
    assert_eq!(recs.len(), 4);
    for (n, r) in recs.iter().enumerate() {
        assert_eq!(r.time_ns, 1_000 * n as u64);
        let p = wire::parse(LinkType::Ethernet, &r.data).unwrap();
        assert!(p.icrc_ok);
        assert_eq!(p.packet.bth.psn, n as u32);
    }
}
