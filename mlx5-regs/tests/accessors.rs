//! Unit tests of the typed accessors: every width, neighbours untouched,
//! overflow refused, 64-bit fields, arrays, byte runs, decoder and hexdump.

use mlx5_regs::decode::{decode, decode_command, hexdump, DecodeOptions, Direction};
use mlx5_regs::field::{Array, Field, RegError};
use mlx5_regs::layouts::*;
use mlx5_regs::{CmdStatus, Opcode};

/// A deterministic byte pattern (xorshift) so "untouched" means something.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Bit `i` (MSB-first numbering, as mlx5_ifc) of `buf`.
fn bit(buf: &[u8], i: u32) -> bool {
    buf[(i / 8) as usize] & (0x80 >> (i % 8)) != 0
}

#[test]
fn every_width_at_every_position_in_a_word_round_trips_and_leaves_neighbours() {
    for width in 1..=32u32 {
        for start in 0..=(32 - width) {
            let bit_off = 64 + start; // word 2 of a 16-byte buffer
            let f: Field<u32> = Field::new("f", bit_off, width);
            let before = pattern(16, (width * 100 + start) as u64);
            let mut buf = before.clone();
            let max = if width == 32 {
                u32::MAX
            } else {
                (1u32 << width) - 1
            };
            for v in [0, 1, max, max / 3, max ^ (max >> 1)] {
                f.set(&mut buf, v).unwrap();
                assert_eq!(f.get(&buf), v, "width {width} start {start} value {v:#x}");
                for i in 0..128 {
                    if i < bit_off || i >= bit_off + width {
                        assert_eq!(bit(&buf, i), bit(&before, i), "bit {i} changed");
                    }
                }
            }
        }
    }
}

#[test]
fn values_that_do_not_fit_are_refused_and_change_nothing() {
    let f: Field<u32> = Field::new("log_cq_size", 99, 5);
    let before = pattern(16, 7);
    let mut buf = before.clone();
    assert_eq!(
        f.set(&mut buf, 32),
        Err(RegError::Overflow {
            field: "log_cq_size",
            width: 5,
            value: 32
        })
    );
    assert_eq!(buf, before);
    assert!(cqc::uar_page.set(&mut buf, 1 << 24).is_err());
    assert!(cqc::uar_page.set(&mut buf, (1 << 24) - 1).is_ok());
    let flag: Field<bool> = Field::new("oi", 14, 1);
    flag.set(&mut buf, true).unwrap();
    assert!(flag.get(&buf));
    flag.set(&mut buf, false).unwrap();
    assert!(!flag.get(&buf));
}

#[test]
fn short_buffers_are_refused_by_setters() {
    let mut buf = [0u8; 8];
    assert!(matches!(
        cqc::dbr_addr.set(&mut buf, 1),
        Err(RegError::BufferTooShort {
            field: "dbr_addr",
            needed: 64,
            len: 8
        })
    ));
}

#[test]
fn sixty_four_bit_fields_are_big_endian_and_exact() {
    let mut buf = pattern(64, 3);
    let before = buf.clone();
    cqc::dbr_addr.set(&mut buf, 0x0123_4567_89ab_cdef).unwrap();
    assert_eq!(
        buf[56..64],
        [0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef]
    );
    assert_eq!(buf[..56], before[..56]);
    assert_eq!(cqc::dbr_addr.get(&buf), 0x0123_4567_89ab_cdef);
    assert_eq!(cqc::dbr_addr.max(), u64::MAX);
}

#[test]
fn flexible_page_arrays_follow_the_fixed_part() {
    let n = 5;
    let mut cmd = vec![0u8; create_cq_in::pas.len_with(n)];
    assert_eq!(cmd.len(), 0x110 + 8 * n);
    for i in 0..n {
        create_cq_in::pas
            .set(&mut cmd, i, 0xfeed_0000_0000 + (i as u64) * 4096)
            .unwrap();
    }
    assert_eq!(create_cq_in::pas.len_in(&cmd), n);
    assert_eq!(create_cq_in::pas.get(&cmd, 4), Some(0xfeed_0000_4000));
    assert_eq!(create_cq_in::pas.get(&cmd, 5), None);
    assert_eq!(cmd[0x110..0x118], 0xfeed_0000_0000u64.to_be_bytes());
    assert!(matches!(
        create_cq_in::pas.set(&mut cmd, 5, 1),
        Err(RegError::BufferTooShort { .. })
    ));
    // manage_pages_in.pas[] starts at byte 0x10 (docs/firmware.md §3).
    assert_eq!(manage_pages_in::pas.byte_offset(0), 0x10);
    // create_rmp_in: the page list of ctx.wq starts at 0x110 too.
    assert_eq!(
        create_rmp_in::ctx.range().start + rmpc::wq.range().start + 0xc0,
        0x110
    );
}

#[test]
fn fixed_arrays_refuse_indices_past_their_end() {
    let mut cmd = vec![0u8; create_eq_in::SIZE];
    let mask: &Array<u64> = &create_eq_in::event_bitmask;
    assert_eq!(mask.count, 4);
    mask.set(&mut cmd, 0, 1 << 0x14).unwrap();
    mask.set(&mut cmd, 3, u64::MAX).unwrap();
    assert_eq!(
        mask.byte_offset(0),
        0x58,
        "docs/firmware.md §3: event_bitmask at 0x58"
    );
    assert_eq!(
        mask.set(&mut cmd, 4, 0),
        Err(RegError::IndexOutOfRange {
            field: "event_bitmask",
            index: 4,
            count: 4
        })
    );
    assert_eq!(mask.get(&cmd, 0), Some(1 << 0x14));
    assert_eq!(mask.len_in(&cmd), 4);
}

#[test]
fn embedded_structures_are_views_at_the_right_place() {
    let mut cmd = vec![0u8; modify_rmp_in::SIZE];
    modify_rmp_in::bitmask
        .get_mut(&mut cmd)
        .copy_from_slice(&[0, 0, 0, 0, 0, 0, 0, 1]);
    assert!(rmp_bitmask::lwm.get(modify_rmp_in::bitmask.get(&cmd)));
    // docs/firmware.md §9.3: bitmask.lwm is bit 191 of the command = byte 0x17 bit 0.
    assert_eq!(cmd[0x17], 1);
    let ctx = modify_rmp_in::ctx.get_mut(&mut cmd);
    rmpc::state.set(ctx, 1).unwrap();
    wq::lwm.set(rmpc::wq.get_mut(ctx), 0xbeef).unwrap();
    // ctx.wq.lwm at bit 688 (docs/firmware.md §12.3).
    assert_eq!(cmd[688 / 8..688 / 8 + 2], [0xbe, 0xef]);
}

#[test]
fn the_decoder_names_every_field_and_flattens_contexts() {
    let mut cmd = vec![0u8; create_cq_in::pas.len_with(1)];
    create_cq_in::opcode.set(&mut cmd, 0x400).unwrap();
    let ctx = create_cq_in::cq_context.get_mut(&mut cmd);
    cqc::log_cq_size.set(ctx, 7).unwrap();
    cqc::dbr_addr.set(ctx, 0xdead_0000).unwrap();
    create_cq_in::pas.set(&mut cmd, 0, 0x1000).unwrap();
    let mut s = String::new();
    decode_command(
        Opcode::CREATE_CQ,
        0,
        Direction::Input,
        &cmd,
        DecodeOptions::default(),
        &mut s,
    )
    .unwrap();
    assert!(s.contains("opcode = 0x400\n"), "{s}");
    assert!(s.contains("cq_context.log_cq_size = 0x7\n"), "{s}");
    assert!(s.contains("cq_context.dbr_addr = 0xdead0000\n"), "{s}");
    assert!(s.contains("pas[0] = 0x1000\n"), "{s}");
    assert!(s.contains("cq_context.oi = 0\n"), "{s}");
    let mut quiet = String::new();
    decode(
        &create_cq_in::LAYOUT,
        &cmd,
        DecodeOptions {
            skip_zero: true,
            ..Default::default()
        },
        &mut quiet,
    )
    .unwrap();
    assert_eq!(quiet.lines().count(), 4, "{quiet}");
}

#[test]
fn the_decoder_reads_general_and_roce_capabilities_and_not_other_cap_pages() {
    let mut out = vec![0u8; query_hca_cap_out::SIZE];
    let caps = query_hca_cap_out::capability.get_mut(&mut out);
    cmd_hca_cap::log_max_cq_sz.set(caps, 24).unwrap();
    let opts = DecodeOptions {
        skip_zero: true,
        ..Default::default()
    };
    let mut s = String::new();
    decode_command(
        Opcode::QUERY_HCA_CAP,
        1,
        Direction::Output,
        &out,
        opts,
        &mut s,
    )
    .unwrap();
    assert!(s.contains("capability.log_max_cq_sz = 0x18"), "{s}");
    // Capability type 2 (ODP) has no layout here: raw bytes.
    let mut t = String::new();
    decode_command(
        Opcode::QUERY_HCA_CAP,
        2 << 1,
        Direction::Output,
        &out,
        opts,
        &mut t,
    )
    .unwrap();
    assert!(t.contains("capability (type 0x2) = "), "{t}");
    assert!(!t.contains("log_max_cq_sz"), "{t}");
    // Capability type 4 (RoCE) is decoded as `roce_cap`.
    let mut roce = vec![0u8; query_hca_cap_out::SIZE];
    let page = query_hca_cap_out::capability.get_mut(&mut roce);
    roce_cap::roce_address_table_size.set(page, 256).unwrap();
    roce_cap::fl_rc_qp_when_roce_enabled
        .set(page, true)
        .unwrap();
    let mut r = String::new();
    decode_command(
        Opcode::QUERY_HCA_CAP,
        (4 << 1) | 1,
        Direction::Output,
        &roce,
        opts,
        &mut r,
    )
    .unwrap();
    assert!(
        r.contains("capability.roce_address_table_size = 0x100\n"),
        "{r}"
    );
    assert!(
        r.contains("capability.fl_rc_qp_when_roce_enabled = 1\n"),
        "{r}"
    );
    assert!(!r.contains("log_max_cq_sz"), "{r}");
    let mut u = String::new();
    assert!(!decode_command(Opcode(0x999), 0, Direction::Input, &out, opts, &mut u).unwrap());
    assert!(u.is_empty());
}

#[test]
fn hexdump_matches_the_linux_dump_buf_format() {
    let buf: Vec<u8> = (0u8..20).collect();
    let mut s = String::new();
    hexdump(&buf, 3, 0x10, &mut s).unwrap();
    assert_eq!(
        s,
        "cmd[3]: 010: 00010203 04050607 08090a0b 0c0d0e0f\n\
         cmd[3]: 020: 10111213 00000000 00000000 00000000\n"
    );
}

#[test]
fn names_and_errnos_follow_linux() {
    assert_eq!(Opcode::from_name("create-cq"), Some(Opcode::CREATE_CQ));
    assert_eq!(
        Opcode::from_name("QUERY_HCA_CAP"),
        Some(Opcode::QUERY_HCA_CAP)
    );
    assert_eq!(Opcode::from_name("create-c"), None);
    assert_eq!(format!("{:?}", Opcode(0x403)), "MODIFY_CQ(0x403)");
    assert_eq!(CmdStatus::BAD_SIZE_OUTS_CQES_ERR.errno(), 22);
    assert_eq!(CmdStatus::RES_BUSY.errno(), 16);
    assert_eq!(CmdStatus::LIM_ERR.errno(), 12);
    assert_eq!(CmdStatus(0x77).errno(), 5);
    assert_eq!(CmdStatus::from_name("bad_param_err"), Some(CmdStatus(3)));
    assert_eq!(CmdStatus(4).text(), "bad system state");
    assert_eq!(mlx5_regs::EventMask::LINUX_ASYNC.bits(), 0x1f02be);
    // Every opcode with layouts has an input that starts with the opcode
    // field and an output that starts with status + syndrome.
    for op in Opcode::ALL {
        if let Some((i, o)) = op.layouts() {
            assert_eq!(i.fields[0].name, "opcode", "{op:?}");
            assert_eq!(o.fields[0].name, "status", "{op:?}");
            assert_eq!(o.fields[1].name, "syndrome", "{op:?}");
            assert!(i.size >= 8 && o.size >= 8, "{op:?}");
        }
    }
}
