//! Captures: frames of every opcode in every encapsulation written to pcap
//! files (Ethernet for RoCE, InfiniBand for native IB), read back and
//! re-parsed with the codec, every ICRC (and VCRC) recomputed; and the same
//! files decoded by tshark (Debian package `tshark`, installed by
//! `.ci/run`), which must see every frame as RoCE/InfiniBand with the
//! opcode, destination QP and PSN the codec wrote.

use std::path::PathBuf;

use mlx5_sim::wire::{
    self, headers_of, read_pcap, Aeth, AtomicEth, Bth, Deth, Encap, Eth, ExtHeaders, Grh, Ip, Ipv4,
    LinkType, Lrh, Packet, PcapWriter, Reth, Vlan, LINKTYPE_ETHERNET, LINKTYPE_INFINIBAND,
};

const OPCODES: [u8; 37] = [
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
    0x10, 0x11, 0x12, 0x13, 0x14, 0x16, 0x17, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28,
    0x29, 0x2a, 0x2b, 0x64, 0x65,
];

fn gid(last: u8) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[..2].copy_from_slice(&[0xfe, 0x80]);
    g[15] = last;
    g
}

fn ethernet_encaps() -> Vec<Encap> {
    let eth = Eth {
        dst: [2, 0, 0, 0, 0, 2],
        src: [2, 0, 0, 0, 0, 1],
        vlan: None,
    };
    let grh = Grh {
        tclass: 0,
        flow_label: 0x12345,
        hop_limit: 64,
        sgid: gid(1),
        dgid: gid(2),
    };
    let v4 = Ip::V4(Ipv4 {
        src: [198, 18, 0, 1],
        dst: [198, 18, 0, 2],
        tos: 0,
        ttl: 64,
        id: 0,
    });
    vec![
        Encap::RoceV2 {
            eth,
            ip: v4,
            udp_sport: 0xc121,
        },
        Encap::RoceV2 {
            eth: Eth {
                vlan: Some(Vlan {
                    pcp: 3,
                    dei: false,
                    id: 5,
                }),
                ..eth
            },
            ip: v4,
            udp_sport: 0xc122,
        },
        Encap::RoceV2 {
            eth,
            ip: Ip::V6(grh),
            udp_sport: 0xc123,
        },
        Encap::RoceV1 { eth, grh },
    ]
}

fn ib_encaps() -> Vec<Encap> {
    let lrh = Lrh {
        vl: 0,
        sl: 0,
        dlid: 2,
        slid: 1,
    };
    vec![
        Encap::Ib { lrh, grh: None },
        Encap::Ib {
            lrh,
            grh: Some(Grh {
                tclass: 0,
                flow_label: 0,
                hop_limit: 1,
                sgid: gid(1),
                dgid: gid(2),
            }),
        },
    ]
}

fn ext_for(op: u8) -> ExtHeaders {
    let hs = headers_of(op).unwrap();
    ExtHeaders {
        deth: hs.deth.then_some(Deth {
            qkey: 0x1111_1111,
            src_qp: 0x11,
        }),
        reth: hs.reth.then_some(Reth {
            va: 0x1000,
            rkey: 0x74d,
            dma_len: 3001,
        }),
        atomic_eth: hs.atomic_eth.then_some(AtomicEth {
            va: 0x2000,
            rkey: 0x74d,
            swap_add: 1,
            compare: 0,
        }),
        aeth: hs.aeth.then_some(Aeth {
            syndrome: 0x1f,
            msn: 3,
        }),
        atomic_ack_eth: hs.atomic_ack_eth.then_some(42),
        imm: hs.imm.then_some(0x0102_0304),
        ieth: hs.ieth.then_some(0x0506_0708),
    }
}

/// What each captured frame should decode to: (opcode, dest QP, PSN).
type Expect = Vec<(u8, u32, u32)>;

/// Write a capture of every opcode in each of `encaps`; returns its path
/// and what each frame carries.
fn write_capture(name: &str, link: LinkType, encaps: &[Encap]) -> (PathBuf, Expect) {
    let path = std::env::temp_dir().join(format!("mlx5-wire-{}-{name}.pcap", std::process::id()));
    let file = std::fs::File::create(&path).unwrap();
    let mut w = PcapWriter::new(std::io::BufWriter::new(file), link).unwrap();
    let payload: Vec<u8> = (0..1001u32).map(|i| i as u8).collect();
    let mut expect = Vec::new();
    let mut buf = vec![0u8; 2048];
    for (e, encap) in encaps.iter().enumerate() {
        for (i, &op) in OPCODES.iter().enumerate() {
            let psn = (0xff_fff0 + i as u32) & 0xff_ffff;
            let qp = 0x100 + e as u32;
            let p = Packet {
                encap: *encap,
                bth: Bth {
                    opcode: op,
                    pkey: 0xffff,
                    dest_qp: qp,
                    ack_req: true,
                    psn,
                    ..Bth::default()
                },
                ext: ext_for(op),
                payload: if headers_of(op).unwrap().no_payload {
                    &[]
                } else {
                    &payload[..(i * 37) % 1002]
                },
            };
            let n = p.build(&mut buf).unwrap();
            w.write_frame(1_000 * (expect.len() as u64 + 1), &buf[..n])
                .unwrap();
            expect.push((op, qp, psn));
        }
    }
    assert_eq!(w.frames(), expect.len() as u64);
    w.flush().unwrap();
    (path, expect)
}

#[test]
fn captures_reparse_and_every_icrc_recomputes() {
    for (name, link, encaps, linktype) in [
        (
            "eth",
            LinkType::Ethernet,
            ethernet_encaps(),
            LINKTYPE_ETHERNET,
        ),
        ("ib", LinkType::Infiniband, ib_encaps(), LINKTYPE_INFINIBAND),
    ] {
        let (path, expect) = write_capture(&format!("reparse-{name}"), link, &encaps);
        let (lt, records) = read_pcap(std::fs::File::open(&path).unwrap()).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(lt, linktype);
        assert_eq!(records.len(), expect.len());
        for (i, (r, &(op, qp, psn))) in records.iter().zip(&expect).enumerate() {
            assert_eq!(r.time_ns, 1_000 * (i as u64 + 1));
            assert_eq!(r.orig_len as usize, r.data.len());
            let p = wire::parse(link, &r.data).unwrap_or_else(|e| panic!("frame {i}: {e:?}"));
            assert!(p.icrc_ok, "{name} frame {i}: ICRC");
            assert_eq!(p.vcrc_ok, (link == LinkType::Infiniband).then_some(true));
            assert_eq!(
                (p.packet.bth.opcode, p.packet.bth.dest_qp, p.packet.bth.psn),
                (op, qp, psn)
            );
        }
    }
}

/// The opcode, destination QP and PSN tshark decodes from each frame, or
/// a loud failure: this test needs the Debian package `tshark` (`.ci/run`
/// installs it) and does not pass without it.
fn tshark_rows(path: &std::path::Path, link: LinkType) -> Vec<Vec<String>> {
    let fields = [
        "frame.protocols",
        "infiniband.bth.opcode",
        "infiniband.bth.destqp",
        "infiniband.bth.psn",
    ];
    match wire::tshark_fields(path, link, &fields) {
        Ok(rows) => rows,
        Err(wire::TsharkError::NotInstalled) => panic!(
            "THIS TEST NEEDS tshark (Debian package `tshark`; `.ci/run` installs it): \
             not found, so the capture could not be checked by an independent decoder"
        ),
        Err(e) => panic!("{e}"),
    }
}

fn num(s: &str) -> u32 {
    wire::tshark_number(s).unwrap_or_else(|| panic!("not a number: {s:?}"))
}

#[test]
fn tshark_decodes_every_frame_as_roce_or_infiniband() {
    for (name, link, encaps) in [
        ("eth", LinkType::Ethernet, ethernet_encaps()),
        ("ib", LinkType::Infiniband, ib_encaps()),
    ] {
        let (path, expect) = write_capture(&format!("tshark-{name}"), link, &encaps);
        let rows = tshark_rows(&path, link);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(rows.len(), expect.len(), "{name}: frames tshark read");
        for (i, (row, &(op, qp, psn))) in rows.iter().zip(&expect).enumerate() {
            assert!(
                row[0].contains("infiniband"),
                "{name} frame {i}: tshark sees {}",
                row[0]
            );
            assert_eq!(
                (num(&row[1]), num(&row[2]), num(&row[3])),
                (u32::from(op), qp, psn),
                "{name} frame {i}: opcode, dest QP, PSN as tshark reads them ({})",
                row[0]
            );
        }
    }
}
