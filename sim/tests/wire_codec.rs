//! The wire codec against frames Linux soft-RoCE (rxe) put on a wire
//! (three RoCE v2 frames captured between two rxe hosts, each one's IPv4
//! checksum and ICRC verified): the same bytes when rebuilt, the same ICRC;
//! then round trips of every opcode through every encapsulation, the ICRC
//! masking rules and the parse errors a receiver drops frames for.

use mlx5_sim::wire::{
    self, headers_of, opcode, pad_for, psn_diff, syndrome, AckKind, Aeth, AtomicEth, Bth, Deth,
    Encap, Eth, ExtHeaders, Grh, Ip, Ipv4, LinkType, Lrh, Packet, ParseError, Reth, Vlan,
};

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

const MAC_A: [u8; 6] = [0x52, 0x54, 0, 0, 0, 1];
const MAC_B: [u8; 6] = [0x52, 0x54, 0, 0, 0, 2];
const IP_A: [u8; 4] = [198, 18, 0, 1];
const IP_B: [u8; 4] = [198, 18, 0, 2];

/// Vector 1: ACKNOWLEDGE A -> B, 62 bytes, ICRC 0xC75C7EB5.
const ACK: &str = "525400000002525400000001080045000030e45040004011ca44c6120001c612
                   0002c14412b7001c00001100ffff00000012008574dd1f000001b57e5cc7";
/// The bytes vector 1's ICRC covers (8 x 0xFF, masked IPv4, UDP, BTH, AETH).
const ACK_MASKED: &str = "ffffffffffffffff45ff0030e4504000ff11ffffc6120001c6120002c14412b7
                          001cffff1100ffffff000012008574dd1f000001";
/// Vector 2: SEND_ONLY B -> A, 64 x 0x7B, 122 bytes, ICRC 0xB8B18194.
const SEND: &str = "52540000000152540000000208004500006ccec740004011df91c6120002c612
    0001c14412b7005800000400ffff00000012808574dd7b7b7b7b7b7b7b7b7b7b
    7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b
    7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b9481b1b8";
/// Vector 3: RDMA_WRITE_ONLY A -> B, 138 bytes, ICRC 0x963DE613.
const WRITE: &str = "52540000000252540000000108004500007ce65d40004011c7ebc6120001c612
    0002c1fa12b7006800000a00ffff0000001780904255000055c37fb3e0000000
    074d000000400000000000000000000000000000000000000000000000000000
    0000000000000000000000000000000000000000000000000000000000000000
    00000000000113e63d96";

fn roce_v2(src: ([u8; 6], [u8; 4]), dst: ([u8; 6], [u8; 4]), id: u16, sport: u16) -> Encap {
    Encap::RoceV2 {
        eth: Eth {
            dst: dst.0,
            src: src.0,
            vlan: None,
        },
        ip: Ip::V4(Ipv4 {
            src: src.1,
            dst: dst.1,
            tos: 0,
            ttl: 64,
            id,
        }),
        udp_sport: sport,
    }
}

fn build(p: &Packet<'_>) -> Vec<u8> {
    let mut out = vec![0u8; p.frame_len()];
    let n = p.build(&mut out).expect("build");
    assert_eq!(n, out.len());
    out
}

#[test]
fn golden_ack_rebuilds_byte_for_byte() {
    let golden = hex(ACK);
    assert_eq!(golden.len(), 62);
    let p = Packet {
        encap: roce_v2((MAC_A, IP_A), (MAC_B, IP_B), 0xe450, 49476),
        bth: Bth {
            opcode: opcode::ACKNOWLEDGE,
            pkey: 0xffff,
            dest_qp: 0x12,
            psn: 0x8574dd,
            ..Bth::default()
        },
        ext: ExtHeaders {
            aeth: Some(Aeth {
                syndrome: syndrome::ACK_UNLIMITED,
                msn: 1,
            }),
            ..ExtHeaders::default()
        },
        payload: &[],
    };
    assert_eq!(build(&p), golden);
    let parsed = wire::parse(LinkType::Ethernet, &golden).unwrap();
    assert!(parsed.icrc_ok);
    assert_eq!(parsed.icrc, 0xc75c_7eb5);
    assert_eq!(parsed.packet, p);
    assert_eq!(
        parsed.packet.ext.aeth.unwrap().kind(),
        AckKind::Ack { credits: 0x1f }
    );
    // The ICRC is the zlib CRC-32 of the masked string the facts give.
    assert_eq!(crc32fast::hash(&hex(ACK_MASKED)), 0xc75c_7eb5);
}

#[test]
fn golden_send_only_rebuilds_byte_for_byte() {
    let golden = hex(SEND);
    assert_eq!(golden.len(), 122);
    let payload = [0x7b; 64];
    let p = Packet {
        encap: roce_v2((MAC_B, IP_B), (MAC_A, IP_A), 0xcec7, 49476),
        bth: Bth {
            opcode: opcode::SEND_ONLY,
            pkey: 0xffff,
            dest_qp: 0x12,
            ack_req: true,
            psn: 0x8574dd,
            ..Bth::default()
        },
        ext: ExtHeaders::default(),
        payload: &payload,
    };
    assert_eq!(build(&p), golden);
    let parsed = wire::parse(LinkType::Ethernet, &golden).unwrap();
    assert!(parsed.icrc_ok);
    assert_eq!(parsed.icrc, 0xb8b1_8194);
    assert_eq!(parsed.packet, p);
}

#[test]
fn golden_write_only_rebuilds_byte_for_byte() {
    let golden = hex(WRITE);
    assert_eq!(golden.len(), 138);
    let mut payload = [0u8; 64];
    payload[63] = 1;
    let p = Packet {
        encap: roce_v2((MAC_A, IP_A), (MAC_B, IP_B), 0xe65d, 49658),
        bth: Bth {
            opcode: opcode::WRITE_ONLY,
            pkey: 0xffff,
            dest_qp: 0x17,
            ack_req: true,
            psn: 0x904255,
            ..Bth::default()
        },
        ext: ExtHeaders {
            reth: Some(Reth {
                va: 0x0000_55c3_7fb3_e000,
                rkey: 0x74d,
                dma_len: 64,
            }),
            ..ExtHeaders::default()
        },
        payload: &payload,
    };
    assert_eq!(build(&p), golden);
    let parsed = wire::parse(LinkType::Ethernet, &golden).unwrap();
    assert!(parsed.icrc_ok);
    assert_eq!(parsed.icrc, 0x963d_e613);
    assert_eq!(parsed.packet, p);
}

#[test]
fn icrc_masks_the_variant_fields_and_covers_the_rest() {
    let golden = hex(SEND);
    // FECN/BECN (BTH byte 4, frame byte 46) are masked: still valid.
    let mut f = golden.clone();
    f[46] = 0xc0;
    assert!(wire::parse(LinkType::Ethernet, &f).unwrap().icrc_ok);
    // TOS and TTL are masked (the IPv4 checksum must follow them).
    let mut f = golden.clone();
    f[15] = 0x02;
    f[22] = 1;
    fix_ipv4_checksum(&mut f);
    assert!(wire::parse(LinkType::Ethernet, &f).unwrap().icrc_ok);
    // The UDP source port, a payload byte and the PSN are covered.
    for at in [34, 60, 53] {
        let mut f = golden.clone();
        f[at] ^= 1;
        let p = wire::parse(LinkType::Ethernet, &f).unwrap();
        assert!(!p.icrc_ok, "flip at {at} not caught");
    }
    // The ICRC itself.
    let mut f = golden.clone();
    *f.last_mut().unwrap() ^= 0x80;
    assert!(!wire::parse(LinkType::Ethernet, &f).unwrap().icrc_ok);
}

fn fix_ipv4_checksum(f: &mut [u8]) {
    f[24] = 0;
    f[25] = 0;
    let mut sum = 0u32;
    for i in (14..34).step_by(2) {
        sum += u32::from(u16::from_be_bytes([f[i], f[i + 1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    f[24..26].copy_from_slice(&(!(sum as u16)).to_be_bytes());
}

#[test]
fn receivers_refuse_what_is_not_a_good_roce_frame() {
    let golden = hex(SEND);
    // A wrong IPv4 header checksum.
    let mut f = golden.clone();
    f[22] = 1; // TTL without fixing the checksum
    assert_eq!(
        wire::parse(LinkType::Ethernet, &f),
        Err(ParseError::Ipv4Checksum)
    );
    // Another UDP port.
    let mut f = golden.clone();
    f[37] = 0xb8;
    assert_eq!(
        wire::parse(LinkType::Ethernet, &f),
        Err(ParseError::NotRdma)
    );
    // ARP.
    let mut f = golden[..42].to_vec();
    f[12..14].copy_from_slice(&[0x08, 0x06]);
    assert_eq!(
        wire::parse(LinkType::Ethernet, &f),
        Err(ParseError::NotRdma)
    );
    // Cut short: the IPv4 length says more than the frame holds.
    assert_eq!(
        wire::parse(LinkType::Ethernet, &golden[..100]),
        Err(ParseError::Truncated)
    );
    // An RD opcode.
    let mut f = golden.clone();
    f[42] = 0x40;
    assert_eq!(
        wire::parse(LinkType::Ethernet, &f),
        Err(ParseError::UnknownOpcode(0x40))
    );
    // A non-zero UDP checksum must be right.
    let mut f = golden.clone();
    f[40] = 0x12;
    assert_eq!(
        wire::parse(LinkType::Ethernet, &f),
        Err(ParseError::UdpChecksum)
    );
    // Ethernet minimum-size padding after the IP datagram is ignored.
    let mut f = hex(ACK);
    f.extend_from_slice(&[0; 4]);
    assert!(wire::parse(LinkType::Ethernet, &f).unwrap().icrc_ok);
}

fn gid(last: u8) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[0] = 0xfe;
    g[1] = 0x80;
    g[15] = last;
    g
}

fn grh(s: u8, d: u8) -> Grh {
    Grh {
        tclass: 0x28,
        flow_label: 0xabcde,
        hop_limit: 64,
        sgid: gid(s),
        dgid: gid(d),
    }
}

/// Every encapsulation the model speaks.
fn encaps() -> Vec<Encap> {
    let eth = Eth {
        dst: MAC_B,
        src: MAC_A,
        vlan: None,
    };
    vec![
        roce_v2((MAC_A, IP_A), (MAC_B, IP_B), 7, 0xc121),
        Encap::RoceV2 {
            eth: Eth {
                vlan: Some(Vlan {
                    pcp: 3,
                    dei: false,
                    id: 100,
                }),
                ..eth
            },
            ip: Ip::V4(Ipv4 {
                src: IP_A,
                dst: IP_B,
                tos: 0x8a,
                ttl: 64,
                id: 9,
            }),
            udp_sport: 0xc144,
        },
        Encap::RoceV2 {
            eth,
            ip: Ip::V6(grh(1, 2)),
            udp_sport: 0xc1fa,
        },
        Encap::RoceV1 {
            eth,
            grh: grh(1, 2),
        },
        Encap::Ib {
            lrh: Lrh {
                vl: 0,
                sl: 0,
                dlid: 2,
                slid: 1,
            },
            grh: None,
        },
        Encap::Ib {
            lrh: Lrh {
                vl: 1,
                sl: 5,
                dlid: 0x12,
                slid: 0x34,
            },
            grh: Some(grh(3, 4)),
        },
    ]
}

/// Extended headers filled for `op` with distinct values.
fn ext_for(op: u8) -> ExtHeaders {
    let hs = headers_of(op).unwrap();
    ExtHeaders {
        deth: hs.deth.then_some(Deth {
            qkey: 0x1111_1111,
            src_qp: 0xabcdef,
        }),
        reth: hs.reth.then_some(Reth {
            va: 0x1122_3344_5566_7788,
            rkey: 0x99aa_bbcc,
            dma_len: 3001,
        }),
        atomic_eth: hs.atomic_eth.then_some(AtomicEth {
            va: 0x1000,
            rkey: 0x42,
            swap_add: 5,
            compare: 6,
        }),
        aeth: hs.aeth.then_some(Aeth {
            syndrome: syndrome::RNR_NAK | 12,
            msn: 0xfffffe,
        }),
        atomic_ack_eth: hs.atomic_ack_eth.then_some(0x3d68_9e0f_5a6b_91e6),
        imm: hs.imm.then_some(0xdead_beef),
        ieth: hs.ieth.then_some(0x1234_5678),
    }
}

const OPCODES: [u8; 39] = [
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
    0x10, 0x11, 0x12, 0x13, 0x14, 0x16, 0x17, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28,
    0x29, 0x2a, 0x2b, 0x64, 0x65, 0x81, 0x02,
];

#[test]
fn every_opcode_round_trips_through_every_encapsulation() {
    let data: Vec<u8> = (0..=255u8).cycle().take(1029).collect();
    let mut frames = 0;
    for encap in encaps() {
        for &op in &OPCODES {
            let hs = headers_of(op).unwrap();
            for len in [0usize, 1, 2, 3, 4, 255, 1024, 1029] {
                let payload = if hs.no_payload {
                    &data[..0]
                } else {
                    &data[..len]
                };
                let p = Packet {
                    encap,
                    bth: Bth {
                        opcode: op,
                        solicited: op == opcode::SEND_ONLY,
                        pkey: 0x8001,
                        dest_qp: 0xfe_dcba,
                        ack_req: len == 4,
                        psn: 0xff_ffff,
                        pad: pad_for(payload.len()),
                        ..Bth::default()
                    },
                    ext: ext_for(op),
                    payload,
                };
                let f = build(&p);
                let parsed = wire::parse(encap.link_type(), &f)
                    .unwrap_or_else(|e| panic!("{encap:?} op {op:#x} len {len}: {e:?}"));
                assert!(parsed.icrc_ok, "{encap:?} op {op:#x} len {len}");
                let ib = matches!(encap, Encap::Ib { .. });
                assert_eq!(parsed.vcrc_ok, ib.then_some(true));
                assert_eq!(parsed.packet, p, "{encap:?} op {op:#x} len {len}");
                // A corrupted payload or header is caught by the ICRC.
                let mut bad = f.clone();
                let n = bad.len();
                bad[n - 7 - if ib { 2 } else { 0 }] ^= 0x10;
                let r = wire::parse(encap.link_type(), &bad);
                assert!(
                    r.map(|p| !p.icrc_ok).unwrap_or(true),
                    "{encap:?} op {op:#x} len {len}: corruption not caught"
                );
                frames += 1;
            }
        }
    }
    assert_eq!(frames, 6 * 39 * 8);
}

#[test]
fn ib_frames_carry_lrh_lengths_and_a_vcrc() {
    let payload = [0x55u8; 13];
    let p = Packet {
        encap: Encap::Ib {
            lrh: Lrh {
                vl: 0,
                sl: 0,
                dlid: 0x0102,
                slid: 0x0304,
            },
            grh: None,
        },
        bth: Bth {
            opcode: opcode::SEND_ONLY,
            pkey: 0xffff,
            dest_qp: 5,
            psn: 1,
            ..Bth::default()
        },
        ext: ExtHeaders::default(),
        payload: &payload,
    };
    let f = build(&p);
    // LRH 8 + BTH 12 + 13 + pad 3 + ICRC 4 = 40 bytes = 10 words, + VCRC 2.
    assert_eq!(f.len(), 42);
    assert_eq!(&f[..8], &[0x00, 0x02, 0x01, 0x02, 0x00, 10, 0x03, 0x04]);
    assert_eq!((f[9] >> 4) & 3, 3, "pad count");
    assert_eq!(
        u16::from_le_bytes([f[40], f[41]]),
        wire::vcrc(&f[..40]),
        "VCRC over LRH..ICRC"
    );
    // The VCRC is variant: a changed VL breaks it but not the ICRC.
    let mut g = f.clone();
    g[0] = 0x30;
    let r = wire::parse(LinkType::Infiniband, &g).unwrap();
    assert!(r.icrc_ok);
    assert_eq!(r.vcrc_ok, Some(false));
}

#[test]
fn build_refuses_headers_the_opcode_does_not_carry() {
    let mut out = [0u8; 256];
    let mut p = Packet {
        encap: encaps()[0],
        bth: Bth {
            opcode: opcode::SEND_ONLY,
            ..Bth::default()
        },
        ext: ext_for(opcode::WRITE_ONLY),
        payload: &[],
    };
    assert_eq!(
        p.build(&mut out),
        Err(wire::BuildError::HeadersDoNotMatchOpcode)
    );
    p.bth.opcode = opcode::ACKNOWLEDGE;
    p.ext = ext_for(opcode::ACKNOWLEDGE);
    p.payload = &[1];
    assert_eq!(p.build(&mut out), Err(wire::BuildError::PayloadNotAllowed));
    p.payload = &[];
    p.bth.psn = 1 << 24;
    assert_eq!(p.build(&mut out), Err(wire::BuildError::FieldTooWide));
    p.bth.psn = 0;
    assert!(matches!(
        p.build(&mut out[..10]),
        Err(wire::BuildError::BufferTooSmall { need: 62 })
    ));
}

#[test]
fn psn_distance_wraps_at_24_bits() {
    assert_eq!(psn_diff(0, 0xff_ffff), 1);
    assert_eq!(psn_diff(0xff_ffff, 0), -1);
    assert_eq!(psn_diff(5, 3), 2);
    assert_eq!(psn_diff(0x80_0000, 0), -0x80_0000);
    assert_eq!(psn_diff(0x7f_ffff, 0), 0x7f_ffff);
    assert_eq!(pad_for(1001), 3);
    assert_eq!(pad_for(953), 3);
    assert_eq!(pad_for(1024), 0);
}
