//! Ports and addresses through the verbs facade on one host: what
//! `query_port`, `query_gid`, `query_gid_table` and `query_pkey` report on
//! Ethernet and InfiniBand ports, GID entries added and deleted (and gone
//! after close), RoCE enabled on demand, and the address vectors the
//! facade refuses before any command, each with its reason.

use mlx5_tests::verbs_common::*;

use mlx5_driver::gid::ipv4_gid;
use mlx5_driver::loopback::LoopbackMode;
use mlx5_driver::port::{speed, width};
use mlx5_driver::verbs::{
    AhAttr, Errno, GidEntry, GidTableEntry, GidType, GlobalRoute, LinkLayer, Mtu, PortState,
    QpAttr, QpAttrMask, QpState,
};
use mlx5_regs::Opcode;
use mlx5_sim::{Device, Profile};

const NO_ENTRY: GidTableEntry = GidTableEntry {
    gid: [0; 16],
    gid_index: 0,
    port_num: 0,
    gid_type: GidType::Ib,
};

fn count(dev: &Device, op: Opcode) -> usize {
    dev.trace().iter().filter(|t| t.opcode == op.0).count()
}

fn link_local(mac: [u8; 6]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[..2].copy_from_slice(&[0xfe, 0x80]);
    g[8..11].copy_from_slice(&[mac[0] ^ 2, mac[1], mac[2]]);
    g[11..13].copy_from_slice(&[0xff, 0xfe]);
    g[13..16].copy_from_slice(&mac[3..6]);
    g
}

fn reason(ctx: &Ctx) -> String {
    match ctx.last_error() {
        Some(mlx5_driver::Error::InvalidArgument(why)) => why.to_string(),
        other => panic!("no argument refusal recorded: {other:?}"),
    }
}

#[test]
fn ethernet_ports_report_their_gid_table_and_take_new_entries() {
    for p in [
        Profile::ConnectX4Lx,
        Profile::ConnectX5,
        Profile::ConnectX6Dx,
        Profile::ConnectX7,
    ] {
        let (dev, mut ctx) = open(p);
        let what = format!("{p:?}");
        let port = ctx.query_port(1).unwrap();
        assert_eq!(
            (port.state, port.link_layer, port.lid, port.pkey_tbl_len),
            (PortState::Active, LinkLayer::Ethernet, 0, 1),
            "{what}"
        );
        assert_eq!(port.active_mtu, Mtu::B1024, "{what}: a 1500-byte port");
        // PTYS: 100GBASE-CR4, which Linux reports as EDR 4x.
        assert_eq!(
            (port.active_speed, port.active_width),
            (speed::EDR, width::W4X),
            "{what}"
        );
        let table_len = dev.caps().roce_caps.roce_address_table_size;
        assert_eq!(port.gid_tbl_len, table_len, "{what}");
        assert_eq!(ctx.query_pkey(1, 0).unwrap(), 0xffff);
        assert_eq!(ctx.query_pkey(1, 1).unwrap_err(), Errno::EINVAL);
        assert_eq!(ctx.query_port(2).unwrap_err(), Errno::EINVAL);

        // The defaults: link-local, v1 at 0 and v2 at 1.
        let mac = dev.port_mac();
        let mut t = [NO_ENTRY; 4];
        let n = ctx.query_gid_table(&mut t).unwrap();
        let want = [(0, GidType::RoceV1), (1, GidType::RoceV2)];
        assert_eq!(n, 2, "{what}: {t:?}");
        for (e, (i, ty)) in t.iter().zip(want) {
            assert_eq!(
                (e.gid, e.gid_index, e.port_num, e.gid_type),
                (link_local(mac), i, 1, ty),
                "{what}"
            );
        }
        assert_eq!(ctx.query_gid(1, 1).unwrap(), link_local(mac));
        assert_eq!(ctx.query_gid(1, 2).unwrap(), [0; 16], "an empty entry");
        assert_eq!(ctx.query_gid_ex(1, 2).unwrap(), None);
        assert_eq!(ctx.query_gid(1, table_len).unwrap_err(), Errno::EINVAL);
        assert_eq!(
            ctx.query_gid_table(&mut [NO_ENTRY; 1]).unwrap_err(),
            Errno::EINVAL
        );

        // An IPv4 address on VLAN 5, at the first free index.
        let v4 = GidEntry {
            gid: ipv4_gid([198, 18, 0, 7]),
            gid_type: GidType::RoceV2,
            mac,
            vlan: Some(5),
        };
        ctx.add_gid(1, 2, &v4).unwrap();
        assert!(dev.roce_enabled(), "{what}: RoCE on for the new entry");
        assert_eq!(ctx.query_gid_ex(1, 2).unwrap(), Some(v4), "{what}");
        let (index, e) = dev.gid_entries()[2];
        assert_eq!(
            (index, e.gid, e.vlan, e.version, e.l3_type),
            (2, v4.gid, Some(5), 2, 0),
            "{what}: RoCE v2 over IPv4"
        );
        // Refusals, each with its reason and no command.
        let sets = count(&dev, Opcode::SET_ROCE_ADDRESS);
        let refusals: [(u16, GidEntry, &str); 4] = [
            (0, v4, "default"),
            (table_len, v4, "beyond"),
            (3, GidEntry { gid: [0; 16], ..v4 }, "zero GID"),
            (
                3,
                GidEntry {
                    vlan: Some(4096),
                    ..v4
                },
                "VLAN",
            ),
        ];
        for (index, e, why) in refusals {
            assert_eq!(ctx.add_gid(1, index, &e).unwrap_err(), Errno::EINVAL);
            assert!(reason(&ctx).contains(why), "{what}: {}", reason(&ctx));
        }
        assert_eq!(
            ctx.add_gid(
                1,
                3,
                &GidEntry {
                    gid_type: GidType::Ib,
                    ..v4
                }
            )
            .unwrap_err(),
            Errno::EINVAL
        );
        assert_eq!(ctx.del_gid(1, 3).unwrap_err(), Errno::EINVAL);
        assert_eq!(ctx.del_gid(1, 1).unwrap_err(), Errno::EINVAL, "a default");
        assert_eq!(count(&dev, Opcode::SET_ROCE_ADDRESS), sets);

        // Delete: gone from the table; a global IPv6 entry stays for close.
        ctx.del_gid(1, 2).unwrap();
        assert_eq!(ctx.query_gid_ex(1, 2).unwrap(), None);
        assert_eq!(dev.gid_entries().len(), 2, "{what}");
        let mut v6 = [0u8; 16];
        v6[..4].copy_from_slice(&[0xfd, 0x00, 0x5e, 0xed]);
        v6[15] = 7;
        let e6 = GidEntry {
            gid: v6,
            gid_type: GidType::RoceV2,
            mac,
            vlan: None,
        };
        ctx.add_gid(1, 9, &e6).unwrap();
        assert_eq!(dev.gid_entries()[2].1.l3_type, 1, "{what}: IPv6");
        let mut t = [NO_ENTRY; 4];
        assert_eq!(ctx.query_gid_table(&mut t).unwrap(), 3);
        assert_eq!((t[2].gid_index, t[2].gid), (9, v6));

        // The loopback helpers still work, now with RoCE on: on the
        // ConnectX-5 force loopback is allowed only with RoCE off, so
        // loopback goes through the default v2 GID.
        let mode = ctx.hca().loopback_mode();
        match p {
            Profile::ConnectX4Lx | Profile::ConnectX5 => assert!(
                matches!(mode, Some(LoopbackMode::Roce { gid_index: 1, .. })),
                "{what}: {mode:?}"
            ),
            _ => assert_eq!(mode, Some(LoopbackMode::ForceLoopback), "{what}"),
        }
        let pair = Pair::new(&dev, &mut ctx, cap(8, 1, 0));
        pair.post_recv(&mut ctx, 0, 1);
        let data = pair.fill(0, 64, 3);
        let sg = [pair.sge(0, 64)];
        ctx.post_send(pair.a, &[send(1, &sg)]).unwrap();
        assert_eq!(poll_n(&dev, &mut ctx, pair.rcq, 1).len(), 1, "{what}");
        assert_eq!(pair.received(0, 64), data, "{what}");
        pair.destroy(&mut ctx);
        close(&dev, ctx, &what);
        assert!(dev.gid_entries().is_empty(), "{what}: entries left");
        assert!(!dev.roce_enabled(), "{what}: roce_en set back");
    }
}

#[test]
fn infiniband_ports_report_lid_gid_and_pkeys() {
    let (dev, mut ctx) = open_ib();
    let port = ctx.query_port(1).unwrap();
    assert_eq!(
        (port.state, port.link_layer, port.lid),
        (PortState::Active, LinkLayer::Infiniband, dev.port_lid())
    );
    assert_ne!(port.lid, 0);
    assert_eq!(port.sm_lid, port.lid, "the model's port is its own SM");
    assert_eq!((port.max_mtu, port.active_mtu), (Mtu::B4096, Mtu::B4096));
    assert_eq!(
        (port.active_speed, port.active_width),
        (speed::EDR, width::W4X)
    );
    assert_eq!(port.gid_tbl_len, 8, "8 << gid_table_size (0)");
    assert_eq!(port.pkey_tbl_len, 128, "128 << pkey_table_size (0)");
    let gid = ctx.query_gid(1, 0).unwrap();
    assert_eq!(&gid[..8], &[0xfe, 0x80, 0, 0, 0, 0, 0, 0], "default prefix");
    assert_ne!(&gid[8..], &[0; 8], "the port GUID");
    assert_eq!(
        ctx.query_gid_ex(1, 0).unwrap().unwrap().gid_type,
        GidType::Ib
    );
    assert_eq!(ctx.query_gid(1, 1).unwrap(), [0; 16]);
    assert_eq!(ctx.query_gid(1, 8).unwrap_err(), Errno::EINVAL);
    let mut t = [NO_ENTRY; 2];
    assert_eq!(ctx.query_gid_table(&mut t).unwrap(), 1);
    assert_eq!((t[0].gid, t[0].gid_type), (gid, GidType::Ib));
    let e = GidEntry {
        gid,
        gid_type: GidType::RoceV2,
        mac: [2, 0, 0, 0, 0, 1],
        vlan: None,
    };
    assert_eq!(ctx.add_gid(1, 1, &e).unwrap_err(), Errno::EOPNOTSUPP);
    assert_eq!(ctx.query_pkey(1, 0).unwrap(), 0xffff);
    assert_eq!(ctx.query_pkey(1, 1).unwrap(), 0, "never programmed");
    dev.set_pkey(1, 0x8123);
    dev.set_pkey(127, 0x0042);
    assert_eq!(ctx.query_pkey(1, 1).unwrap(), 0x8123);
    assert_eq!(ctx.query_pkey(1, 127).unwrap(), 0x0042);
    assert_eq!(ctx.query_pkey(1, 128).unwrap_err(), Errno::EINVAL);
    close(&dev, ctx, "ib");
}

/// The subnet runs the IB port at 2048 bytes: query_port reports the PMTU
/// register's operational MTU, and a QP asking for 4096 is refused at
/// INIT→RTR (firmware BAD_PARAM → `EINVAL`) while 2048 is taken.
#[test]
fn an_infiniband_port_reports_its_pmtu_and_refuses_a_larger_path_mtu() {
    let (dev, mut ctx) = open_ib();
    dev.set_ib_port_mtu(2048).unwrap();
    let port = ctx.query_port(1).unwrap();
    assert_eq!((port.max_mtu, port.active_mtu), (Mtu::B4096, Mtu::B2048));
    let p = Pair::unconnected(&dev, &mut ctx, cap(8, 1, 0));
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        ..QpAttr::default()
    };
    ctx.modify_qp(p.a, &init, QpAttrMask::RC_INIT).unwrap();
    let mut rtr = QpAttr {
        qp_state: QpState::Rtr,
        ah_attr: ctx.loopback_ah().unwrap(),
        path_mtu: Mtu::B4096,
        dest_qp_num: ctx.qp_num(p.b).unwrap(),
        min_rnr_timer: 12,
        ..QpAttr::default()
    };
    assert_eq!(
        ctx.modify_qp(p.a, &rtr, RTR).unwrap_err(),
        Errno::EINVAL,
        "path MTU above the port's active MTU"
    );
    rtr.path_mtu = Mtu::B2048;
    ctx.modify_qp(p.a, &rtr, RTR).unwrap();
    assert_eq!(ctx.query_qp(p.a).unwrap().0.path_mtu, Mtu::B2048);
    p.destroy(&mut ctx);
    close(&dev, ctx, "ib pmtu");
}

/// A pair on the ConnectX-4 Lx (RoCE), both QPs in INIT.
fn roce_pair_in_init() -> (Device, Ctx, Pair) {
    let (dev, mut ctx) = open(Profile::ConnectX4Lx);
    let p = Pair::unconnected(&dev, &mut ctx, cap(8, 1, 0));
    for q in [p.a, p.b] {
        let a = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            ..QpAttr::default()
        };
        ctx.modify_qp(q, &a, QpAttrMask::RC_INIT).unwrap();
    }
    (dev, ctx, p)
}

const RTR: QpAttrMask = QpAttrMask::RC_RTR;

#[test]
fn roce_address_vectors_are_checked_and_explained() {
    let (dev, mut ctx, p) = roce_pair_in_init();
    let mac = dev.port_mac();
    let peer = ctx.qp_num(p.b).unwrap();
    let global = {
        let mut g = [0u8; 16];
        g[..4].copy_from_slice(&[0xfd, 0, 0x5e, 0xed]);
        g[15] = 1;
        g
    };
    let ah = AhAttr {
        is_global: true,
        port_num: 1,
        grh: GlobalRoute {
            dgid: global,
            sgid_index: 1,
            hop_limit: 0,
            traffic_class: 0x28,
            flow_label: 0x12345,
        },
        ..AhAttr::default()
    };
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        ah_attr: ah,
        path_mtu: Mtu::B1024,
        dest_qp_num: peer,
        min_rnr_timer: 12,
        ..QpAttr::default()
    };
    let sent = count(&dev, Opcode::INIT2RTR_QP);
    let refused: [(AhAttr, &str); 5] = [
        (ah, "MAC"),
        (
            AhAttr {
                is_global: false,
                ..ah
            },
            "GRH",
        ),
        (
            AhAttr {
                grh: GlobalRoute {
                    sgid_index: 200,
                    ..ah.grh
                },
                dmac: Some(mac),
                ..ah
            },
            "empty",
        ),
        (
            AhAttr {
                grh: GlobalRoute {
                    flow_label: 1 << 20,
                    ..ah.grh
                },
                dmac: Some(mac),
                ..ah
            },
            "flow label",
        ),
        (
            AhAttr {
                grh: GlobalRoute {
                    sgid_index: 2,
                    ..ah.grh
                },
                dmac: Some(mac),
                ..ah
            },
            "empty",
        ),
    ];
    for (bad, why) in refused {
        let a = QpAttr {
            ah_attr: bad,
            ..rtr
        };
        assert_eq!(ctx.modify_qp(p.a, &a, RTR).unwrap_err(), Errno::EINVAL);
        let r = reason(&ctx);
        assert!(r.contains(why), "{why}: {r}");
    }
    assert_eq!(
        count(&dev, Opcode::INIT2RTR_QP),
        sent,
        "refused before any command"
    );

    // With the MAC (the model's port is on no wire: its own MAC), the
    // global GID is fine: hop limit 0 becomes 64, class and label kept.
    let ok = QpAttr {
        ah_attr: AhAttr {
            dmac: Some(mac),
            ..ah
        },
        ..rtr
    };
    ctx.modify_qp(p.a, &ok, RTR).unwrap();
    let (q, _) = ctx.query_qp(p.a).unwrap();
    let g = q.ah_attr.grh;
    assert_eq!(
        (
            g.dgid,
            g.sgid_index,
            g.hop_limit,
            g.traffic_class,
            g.flow_label
        ),
        (global, 1, 64, 0x28, 0x12345)
    );
    assert_eq!(q.ah_attr.dmac, Some(mac));
    p.destroy(&mut ctx);
    close(&dev, ctx, "roce ah");
}
