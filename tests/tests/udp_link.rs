//! The wire that leaves the process (`mlx5_sim::UdpLink`): two threaded
//! hosts, each behind its own UDP socket on 127.0.0.1, find each other by
//! ARP and run RC SENDs through the verbs facade, every byte and every
//! captured frame checked; the same with 5 % of one side's frames dropped
//! and one corrupted; and a raw socket playing a guest's NIC checks the
//! neighbour answers (ARP, IPv6 neighbour solicitation) and the filtering.

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use mlx5_driver::verbs::{SendFlags, SendWr, Sge, WcOpcode, WcStatus, WrOpcode};
use mlx5_sim::wire::neighbour::{self, Neighbour};
use mlx5_sim::wire::{read_pcap, Fault, Faults, LinkType, Wire};
use mlx5_sim::UdpLink;
use mlx5_tests::hosts::*;

/// A pcap capture kept in memory.
#[derive(Clone, Default)]
struct Capture(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Capture {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Two free UDP ports on 127.0.0.1.
fn two_ports() -> (SocketAddr, SocketAddr) {
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    let b = UdpSocket::bind("127.0.0.1:0").unwrap();
    (a.local_addr().unwrap(), b.local_addr().unwrap())
}

fn ip4(g: &[u8; 16]) -> [u8; 4] {
    [g[12], g[13], g[14], g[15]]
}

/// `count` messages of `size` bytes from `from` to `to`, each checked.
fn send_checked(from: &mut Host, to: &mut Host, size: usize, count: u8) {
    for m in 0..count {
        let data = pattern(size, m.wrapping_mul(7).wrapping_add(size as u8));
        from.buf.write_bytes(0, &data);
        let sg = [Sge {
            addr: from.buf.iova(),
            length: size as u32,
            lkey: from.lkey(),
        }];
        let wr = SendWr {
            wr_id: u64::from(m),
            opcode: WrOpcode::Send,
            send_flags: SendFlags::SIGNALED,
            sg_list: &sg,
            ..SendWr::EMPTY
        };
        from.ctx.post_send(from.qp, &[wr]).unwrap();
        let r = wait_one(to, false, &from.dev).expect("a receive completion");
        assert_eq!(r.status, WcStatus::Success, "message {m} of {size}");
        assert_eq!((r.opcode, r.byte_len), (WcOpcode::Recv, size as u32));
        let slot = r.wr_id as usize;
        let mut got = vec![0u8; size];
        to.buf.read_bytes(RECV_AT + slot * BIG, &mut got);
        assert!(got == data, "message {m} of {size} bytes arrived intact");
        to.post_recv(slot).unwrap();
        let s = wait_one(from, true, &to.dev).expect("a send completion");
        assert_eq!((s.status, s.wr_id), (WcStatus::Success, u64::from(m)));
    }
}

/// Two threaded hosts behind two linked sockets; host 1's wire captures
/// into the returned buffer. Each resolves the other's MAC by ARP.
fn linked_pair() -> (Host, Host, UdpLink, UdpLink, Capture) {
    let t = Transport::RoceV2Ipv4;
    let (pa, pb) = two_ports();
    let (wa, wb) = (Wire::new(LinkType::Ethernet), Wire::new(LinkType::Ethernet));
    let mut a = threaded_host(t, 1, &wa, 0xff_fff0);
    let mut b = threaded_host(t, 2, &wb, 0x1234);
    let la = UdpLink::join(&a.dev, pa, pb).unwrap();
    let lb = UdpLink::join(&b.dev, pb, pa).unwrap();
    let cap = Capture::default();
    la.wire().capture(Box::new(cap.clone())).unwrap();
    let (mut aa, mut ba) = (a.addr, b.addr);
    // Each learns the other's MAC the way an IP stack does.
    let mac_b = la.resolve_ipv4(ip4(&ba.gid), Duration::from_secs(5));
    let mac_a = lb.resolve_ipv4(ip4(&aa.gid), Duration::from_secs(5));
    assert_eq!(
        mac_b,
        Some(b.dev.port_mac()),
        "host 1 resolved host 2 by ARP"
    );
    assert_eq!(
        mac_a,
        Some(a.dev.port_mac()),
        "host 2 resolved host 1 by ARP"
    );
    ba.mac = mac_b.unwrap();
    aa.mac = mac_a.unwrap();
    let mtu = aa.mtu.min(ba.mtu);
    let (to_b, to_a) = (a.ah_to(&ba), b.ah_to(&aa));
    connect(&mut a, to_b, &ba, mtu, 7, 0);
    connect(&mut b, to_a, &aa, mtu, 7, 0);
    for i in 0..RECVS {
        a.post_recv(i).unwrap();
        b.post_recv(i).unwrap();
    }
    // Host 1 asked; host 2 answered and learned host 1 from the question.
    assert!(la.stats().arp_requests >= 1 && lb.stats().arp_replies >= 1);
    (a, b, la, lb, cap)
}

/// Every captured frame parses with a good ICRC; returns how many.
fn check_capture(la: &UdpLink, cap: &Capture) -> usize {
    la.wire().end_capture().unwrap();
    let bytes = cap.0.lock().unwrap().clone();
    let (link, records) = read_pcap(&bytes[..]).unwrap();
    assert_eq!(link, mlx5_sim::wire::LINKTYPE_ETHERNET);
    for r in &records {
        let p = mlx5_sim::wire::parse(LinkType::Ethernet, &r.data).unwrap();
        assert!(p.icrc_ok);
    }
    records.len()
}

#[test]
fn two_processes_worth_of_hosts_talk_over_udp() {
    big_stack(|| {
        let (mut a, mut b, la, lb, cap) = linked_pair();
        for size in [64, 4096, 3001] {
            send_checked(&mut a, &mut b, size, 3);
            send_checked(&mut b, &mut a, size, 3);
        }
        // Frames went out of one process-local socket and in at the other.
        let (sa, sb) = (la.stats(), lb.stats());
        assert!(sa.frames_out > 0 && sb.frames_in >= sa.frames_out - sa.send_errors);
        assert!(sb.to_device > 0 && sa.to_device > 0);
        let frames = check_capture(&la, &cap);
        // 9 messages each way of 1, 4 and 3 packets, each acknowledged.
        assert!(frames >= 2 * 3 * (1 + 4 + 3), "{frames} frames captured");
        drop((la, lb));
        close(a, "host 1");
        close(b, "host 2");
    });
}

#[test]
fn model_frame_faults_are_recovered_over_udp() {
    big_stack(|| {
        let (mut a, mut b, la, lb, cap) = linked_pair();
        la.fault_model_frames_only();
        la.wire().set_faults(Faults {
            seed: 3,
            drop: 0.05,
            chosen: vec![(2, Fault::Corrupt)],
            ..Faults::default()
        });
        for size in [64, 4096] {
            send_checked(&mut a, &mut b, size, 10);
            send_checked(&mut b, &mut a, size, 10);
        }
        let w = la.wire().stats();
        assert_eq!(w.corrupted, 1, "the chosen frame was corrupted");
        assert!(w.dropped > 0, "5 % of host 1's frames dropped: {w:?}");
        let retried =
            a.dev.traffic().stats().retransmissions + b.dev.traffic().stats().retransmissions;
        assert!(retried > 0, "the losses were recovered by retransmission");
        check_capture(&la, &cap);
        drop((la, lb));
        close(a, "host 1");
        close(b, "host 2");
    });
}

#[test]
fn the_link_answers_neighbours_and_drops_what_is_not_its_own() {
    big_stack(|| {
        let t = Transport::RoceV2Ipv4;
        let guest = UdpSocket::bind("127.0.0.1:0").unwrap();
        guest
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let (model_at, _) = two_ports();
        let wire = Wire::new(LinkType::Ethernet);
        let h = threaded_host(t, 1, &wire, 1);
        let link = UdpLink::join(&h.dev, model_at, guest.local_addr().unwrap()).unwrap();
        let mac = h.dev.port_mac();
        let me = ip4(&h.addr.gid);
        let gmac = [0x52, 0x54, 0, 0, 0, 1];
        let gip = [198, 18, 0, 9];
        let mut f = [0u8; neighbour::ND_FRAME_LEN];
        let mut r = [0u8; 2048];

        // ARP for the port's IPv4 address: answered, the asker learned.
        let n = neighbour::build_arp(&mut f, 1, (gmac, gip), ([0; 6], me));
        guest.send_to(&f[..n], model_at).unwrap();
        let k = guest.recv(&mut r).unwrap();
        assert_eq!(
            neighbour::parse_neighbour(&r[..k]),
            Some(Neighbour::ArpReply {
                sender_mac: mac,
                sender_ip: me
            })
        );
        assert_eq!(&r[..6], &gmac, "the reply goes to the asker");
        assert_eq!(link.resolve_ipv4(gip, Duration::ZERO), Some(gmac));

        // ARP for someone else's address: no answer.
        let n = neighbour::build_arp(&mut f, 1, (gmac, gip), ([0; 6], [198, 18, 0, 77]));
        guest.send_to(&f[..n], model_at).unwrap();

        // Neighbour solicitation for the port's link-local RoCE v2 GID.
        let ll = h
            .dev
            .gid_entries()
            .into_iter()
            .map(|(_, g)| g)
            .find(|g| g.version == 2 && g.l3_type == 1)
            .expect("a link-local RoCE v2 GID");
        let mut gip6 = [0u8; 16];
        gip6[..2].copy_from_slice(&[0xfe, 0x80]);
        gip6[15] = 9;
        let n = solicit(&mut f, gmac, gip6, ll.gid);
        guest.send_to(&f[..n], model_at).unwrap();
        let k = guest.recv(&mut r).unwrap();
        assert_eq!(
            neighbour::parse_neighbour(&r[..k]),
            Some(Neighbour::Advert {
                target: ll.gid,
                mac: ll.mac
            }),
            "only the advertisement came back (nothing for the foreign ARP)"
        );
        assert_eq!(link.neighbour_ipv6(gip6), Some(gmac));

        // A frame for another MAC, and a datagram from a stranger: dropped.
        let before = link.stats();
        let mut other = [0u8; 60];
        other[..6].copy_from_slice(&[0x52, 0x54, 0, 0, 0, 0x42]);
        other[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        guest.send_to(&other, model_at).unwrap();
        let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
        stranger.send_to(&f[..n], model_at).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while link.stats().dropped < before.dropped + 2 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let s = link.stats();
        assert_eq!(s.dropped, before.dropped + 2, "{s:?}");
        assert_eq!(s.to_device, 0);
        assert_eq!((s.arp_replies, s.adverts), (1, 1));
        drop(link);
        close(h, "host");
    });
}

#[test]
fn a_synchronous_device_is_refused() {
    big_stack(|| {
        let wire = Wire::new(LinkType::Ethernet);
        let h = host(Transport::RoceV2Ipv4, 1, &wire, 1);
        let (pa, pb) = two_ports();
        let e = UdpLink::join(&h.dev, pa, pb).unwrap_err();
        assert!(e.to_string().contains("threaded"), "{e}");
        close(h, "host");
        // attach: a new wire of its own, for a device on none yet.
        let sync = mlx5_sim::Device::new(mlx5_sim::SimConfig::default());
        assert!(UdpLink::attach(&sync, pa, pb).is_err());
        let threaded = mlx5_sim::Device::new(mlx5_sim::SimConfig::default().threaded());
        let l = UdpLink::attach(&threaded, pa, pb).unwrap();
        assert_eq!(l.wire().link(), LinkType::Ethernet);
        assert!(
            UdpLink::attach(&threaded, pb, pa).is_err(),
            "a port joins one wire"
        );
    });
}

/// A neighbour solicitation from `src` (at `mac`) for `target`, to its
/// solicited-node multicast address.
fn solicit(out: &mut [u8], mac: [u8; 6], src: [u8; 16], target: [u8; 16]) -> usize {
    let mut dst = [0u8; 16];
    dst[..2].copy_from_slice(&[0xff, 0x02]);
    dst[11] = 1;
    dst[12] = 0xff;
    dst[13..].copy_from_slice(&target[13..]);
    let f = &mut out[..86];
    f[..6].copy_from_slice(&[0x33, 0x33, 0xff, target[13], target[14], target[15]]);
    f[6..12].copy_from_slice(&mac);
    f[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
    f[14..18].copy_from_slice(&[0x60, 0, 0, 0]);
    f[18..20].copy_from_slice(&32u16.to_be_bytes());
    f[20] = 58;
    f[21] = 255;
    f[22..38].copy_from_slice(&src);
    f[38..54].copy_from_slice(&dst);
    let icmp = &mut f[54..86];
    icmp.fill(0);
    icmp[0] = 135;
    icmp[8..24].copy_from_slice(&target);
    icmp[24] = 1;
    icmp[25] = 1;
    icmp[26..32].copy_from_slice(&mac);
    let sum = neighbour::icmpv6_checksum(&src, &dst, icmp);
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    86
}
