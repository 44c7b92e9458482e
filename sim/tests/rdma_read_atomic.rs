//! RDMA READ and the IB atomics executed by the model: inside one card
//! (every loopback mode) and between two hosts on a wire (every
//! transport): data and original values, requester CQEs, the responder's
//! rights (QP `rre`/`rae`, key `rr`/`a`), misaligned atomics refused with
//! nothing written, the 8-byte endianness mode, READ responses segmented at
//! the MTU, and a repeated atomic answered from the responder's resources
//! without a second execution.

use crate::common::hosts::{Conn, Hosts, ALL, BIG};
use crate::common::qp::*;
use crate::common::wire::{Pair, Wr};
use crate::common::*;

use mlx5_hal::Hal;
use mlx5_regs::consts::wqe as w;
use mlx5_regs::consts::{atomic, cqe_syndrome, op_mod as om, CqeOpcode, OptParam};
use mlx5_regs::layouts::*;
use mlx5_regs::{EventType, Opcode};
use mlx5_sim::wire::{Fault, Faults};
use mlx5_sim::{Profile, QpState};

const MODES: [(Profile, Mode); 4] = [
    (Profile::ConnectX5, Mode::Fl),
    (Profile::ConnectX6Dx, Mode::FlRoce),
    (Profile::ConnectX4Lx, Mode::Roce),
    (Profile::ConnectX5, Mode::Ib),
];

/// A PA key on `f`'s PD with the given remote rights (local read/write).
fn remote_key(f: &mut Fw, variant: u8, rr: bool, rw: bool, a: bool) -> u32 {
    let mut c = mkey_pa_cmd(f.pd, variant, true, true, rr, rw);
    mkc::a
        .set(create_mkey_in::memory_key_mkey_entry.get_mut(&mut c), a)
        .unwrap();
    create_mkey(f, &c)
}

/// RTS2RTS of `qpn` setting its remote rights.
fn set_rights(f: &mut Fw, qpn: u32, rre: bool, rwe: bool, rae: bool) {
    let i = modify_cmd(
        Opcode::RTS2RTS_QP,
        qpn,
        OptParam::RRE | OptParam::RWE | OptParam::RAE,
        |q| {
            qpc::rre.set(q, rre).unwrap();
            qpc::rwe.set(q, rwe).unwrap();
            qpc::rae.set(q, rae).unwrap();
            if rae {
                qpc::atomic_mode.set(q, atomic::MODE_IB_COMP).unwrap();
            }
        },
    );
    f.ok(&i, 16);
}

/// A loopback pair whose responder B has READ and atomic rights, with a
/// remote region and a key with every remote right.
struct Rd {
    p: Pair,
    remote: Region,
    rkey: u32,
}

fn rd_pair(profile: Profile, mode: Mode) -> Rd {
    let mut p = Pair::new(profile, mode, false, 7);
    let b = p.b.qpn;
    set_rights(&mut p.f, b, true, true, true);
    let remote = p.f.hal.alloc_dma(BIG).unwrap();
    let rkey = remote_key(&mut p.f, 0x44, true, true, true);
    Rd { p, remote, rkey }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed) ^ (i >> 9) as u8)
        .collect()
}

/// READ `len` bytes of B's remote region into three SGEs of A's buffer.
fn read_into_three(r: &mut Rd, len: u32, seed: u8) {
    let data = pattern(len as usize, seed);
    r.remote.write_bytes(0, &data);
    r.p.src.write_bytes(0, &vec![0xEE; 16 * 4096]);
    let third = len / 3;
    let base = r.p.src.iova();
    let sges: Vec<(u64, u32, u32)> = [
        (base, third),
        (base + 16384, third),
        (base + 32768, len - 2 * third),
    ]
    .into_iter()
    .filter(|&(_, n)| n > 0)
    .map(|(a, n)| (a, n, r.p.key))
    .collect();
    let wr = Wr {
        opcode: w::OPCODE_RDMA_READ,
        signaled: true,
        remote: Some((r.remote.iova(), r.rkey)),
        sges,
        ..Wr::default()
    };
    let idx = r.p.a.post(&r.p.f, &wr);
    let c = r.p.wait_cqe(true);
    assert_eq!(
        cqe64::opcode.get(&c),
        CqeOpcode::REQ.0,
        "READ {len}: {:#x}",
        err_cqe::syndrome.get(&c)
    );
    assert_eq!(cqe64::sop_opcode.get(&c), w::OPCODE_RDMA_READ);
    assert_eq!(cqe64::byte_cnt.get(&c), len, "READ byte count");
    assert_eq!(cqe64::wqe_counter.get(&c), idx);
    let mut got = vec![0u8; len as usize];
    let t = third as usize;
    r.p.src.read_bytes(0, &mut got[..t]);
    r.p.src.read_bytes(16384, &mut got[t..2 * t]);
    r.p.src.read_bytes(32768, &mut got[2 * t..]);
    assert!(got == data, "READ {len}: the remote bytes, in SGE order");
}

fn atomic_wr(r: &Rd, opcode: u8, off: u64, ops: (u64, u64), result_off: u64) -> Wr {
    Wr {
        opcode,
        signaled: true,
        remote: Some((r.remote.iova() + off, r.rkey)),
        atomic: Some(ops),
        sges: vec![(r.p.src.iova() + result_off, 8, r.p.key)],
        ..Wr::default()
    }
}

/// Run one atomic; returns the original value written back (host order).
fn run_atomic(r: &mut Rd, opcode: u8, off: u64, ops: (u64, u64)) -> u64 {
    let wr = atomic_wr(r, opcode, off, ops, 4096);
    r.p.a.post(&r.p.f, &wr);
    let c = r.p.wait_cqe(true);
    assert_eq!(
        cqe64::opcode.get(&c),
        CqeOpcode::REQ.0,
        "{:#x}",
        err_cqe::syndrome.get(&c)
    );
    assert_eq!(cqe64::sop_opcode.get(&c), opcode);
    assert_eq!(cqe64::byte_cnt.get(&c), 8, "atomics report 8 bytes");
    let mut b = [0u8; 8];
    r.p.src.read_bytes(4096, &mut b);
    u64::from_le_bytes(b)
}

fn remote_u64(r: &Rd, off: usize) -> u64 {
    let mut b = [0u8; 8];
    r.remote.read_bytes(off, &mut b);
    u64::from_le_bytes(b)
}

#[test]
fn loopback_reads_of_every_size_into_several_sges_in_every_mode() {
    for (profile, mode) in MODES {
        let mut r = rd_pair(profile, mode);
        // The pair's path MTU is 256 (INIT2RTR of the helper).
        for (k, len) in [0u32, 1, 257, 40_000].into_iter().enumerate() {
            read_into_three(&mut r, len, k as u8);
        }
        let st = r.p.f.dev.traffic().stats();
        assert_eq!(
            st.reads_served, 3,
            "{mode:?}: a zero-length READ reads nothing"
        );
        assert!(
            r.p.f.dev.violations().is_empty(),
            "{:?}",
            r.p.f.dev.violations()
        );
    }
}

#[test]
fn loopback_atomics_return_the_original_value_and_change_memory_as_asked() {
    for (profile, mode) in MODES {
        let mut r = rd_pair(profile, mode);
        r.remote.write_bytes(0, &41u64.to_le_bytes());
        // CAS that matches: swapped, the old value back.
        assert_eq!(run_atomic(&mut r, w::OPCODE_ATOMIC_CS, 0, (7, 41)), 41);
        assert_eq!(remote_u64(&r, 0), 7);
        // CAS that does not: unchanged, the current value back.
        assert_eq!(run_atomic(&mut r, w::OPCODE_ATOMIC_CS, 0, (9, 41)), 7);
        assert_eq!(remote_u64(&r, 0), 7);
        // FETCH_ADD wraps around 2^64.
        r.remote.write_bytes(8, &(u64::MAX - 1).to_le_bytes());
        assert_eq!(
            run_atomic(&mut r, w::OPCODE_ATOMIC_FA, 8, (3, 0)),
            u64::MAX - 1
        );
        assert_eq!(remote_u64(&r, 8), 1);
        assert_eq!(r.p.f.dev.traffic().stats().atomics_executed, 3, "{mode:?}");
    }
}

#[test]
fn big_endian_mode_lays_operands_out_in_network_order() {
    // A device that cannot switch to host endianness works big endian.
    let mut p = Pair::with(Profile::ConnectX5, Mode::Fl, false, 7, |c| {
        c.atomic_caps.supported_atomic_req_8b_endianness_mode_1 = false
    });
    let b = p.b.qpn;
    set_rights(&mut p.f, b, true, true, true);
    let remote = p.f.hal.alloc_dma(4096).unwrap();
    let rkey = remote_key(&mut p.f, 0x45, true, true, true);
    let mut r = Rd { p, remote, rkey };
    r.remote
        .write_bytes(0, &0x0102_0304_0506_0708u64.to_be_bytes());
    let got = run_atomic(&mut r, w::OPCODE_ATOMIC_FA, 0, (1, 0));
    assert_eq!(
        got.swap_bytes(),
        0x0102_0304_0506_0708,
        "written back big endian"
    );
    let mut b = [0u8; 8];
    r.remote.read_bytes(0, &mut b);
    assert_eq!(u64::from_be_bytes(b), 0x0102_0304_0506_0709);
}

#[test]
fn fenced_atomics_execute_in_order() {
    let mut r = rd_pair(Profile::ConnectX5, Mode::Fl);
    r.remote.write_bytes(0, &0u64.to_le_bytes());
    for k in 0..4u64 {
        let mut wr = atomic_wr(&r, w::OPCODE_ATOMIC_FA, 0, (1, 0), 4096 + 8 * k);
        wr.fence = k % 2 == 1;
        r.p.a.put(&wr);
    }
    let last = r.p.a.pc.wrapping_sub(1);
    r.p.a.ring_db(&r.p.f, last);
    for _ in 0..4 {
        let c = r.p.wait_cqe(true);
        assert_eq!(cqe64::opcode.get(&c), CqeOpcode::REQ.0);
    }
    for k in 0..4usize {
        let mut b = [0u8; 8];
        r.p.src.read_bytes(4096 + 8 * k, &mut b);
        assert_eq!(u64::from_le_bytes(b), k as u64, "the k-th add saw k");
    }
    assert_eq!(r.p.f.dev.traffic().stats().fenced_wqes, 2);
}

/// The requester's error CQE syndrome of one WR, and the responder QP's
/// state and events after it.
fn refused(r: &mut Rd, wr: &Wr) -> (u8, QpState, Vec<u8>) {
    r.p.a.post(&r.p.f, wr);
    let c = r.p.wait_cqe(true);
    assert_eq!(cqe64::opcode.get(&c), CqeOpcode::REQ_ERR.0);
    assert_eq!(err_cqe::s_wqe_opcode.get(&c), wr.opcode);
    let events =
        r.p.events()
            .iter()
            .map(|e| eqe::event_type.get(e))
            .collect();
    (
        err_cqe::syndrome.get(&c),
        r.p.f.dev.qp(r.p.b.qpn).unwrap().state,
        events,
    )
}

#[test]
fn a_misaligned_atomic_is_an_invalid_request_and_writes_nothing() {
    for off in [1u64, 4, 12] {
        let mut r = rd_pair(Profile::ConnectX5, Mode::Fl);
        r.remote.write_bytes(0, &[0x5A; 32]);
        r.p.src.write_bytes(4096, &[0xC3; 8]);
        let wr = atomic_wr(&r, w::OPCODE_ATOMIC_FA, off, (1, 0), 4096);
        let (synd, state, events) = refused(&mut r, &wr);
        assert_eq!(synd, cqe_syndrome::REMOTE_INVAL_REQ_ERR, "offset {off}");
        assert_eq!(state, QpState::Err);
        assert!(events.contains(&EventType::WQ_INVAL_REQ_ERROR.0));
        let mut m = [0u8; 32];
        r.remote.read_bytes(0, &mut m);
        assert_eq!(m, [0x5A; 32], "responder memory unchanged");
        let mut l = [0u8; 8];
        r.p.src.read_bytes(4096, &mut l);
        assert_eq!(l, [0xC3; 8], "nothing written back");
        assert_eq!(r.p.f.dev.traffic().stats().atomics_executed, 0);
    }
}

#[test]
fn reads_and_atomics_need_the_qp_right_and_the_key_right() {
    type Case = (&'static str, (bool, bool, bool), (bool, bool), u8);
    let cases: [Case; 4] = [
        (
            "READ, QP without rre",
            (false, true, true),
            (true, true),
            w::OPCODE_RDMA_READ,
        ),
        (
            "READ, key without rr",
            (true, true, true),
            (false, true),
            w::OPCODE_RDMA_READ,
        ),
        (
            "atomic, QP without rae",
            (true, true, false),
            (true, true),
            w::OPCODE_ATOMIC_CS,
        ),
        (
            "atomic, key without a",
            (true, true, true),
            (true, false),
            w::OPCODE_ATOMIC_CS,
        ),
    ];
    for (what, (rre, rwe, rae), (rr, a), opcode) in cases {
        let mut r = rd_pair(Profile::ConnectX5, Mode::Fl);
        let b = r.p.b.qpn;
        set_rights(&mut r.p.f, b, rre, rwe, rae);
        r.rkey = remote_key(&mut r.p.f, 0x46, rr, true, a);
        r.remote.write_bytes(0, &[0x11; 64]);
        let wr = if opcode == w::OPCODE_RDMA_READ {
            Wr {
                opcode,
                signaled: true,
                remote: Some((r.remote.iova(), r.rkey)),
                sges: vec![(r.p.src.iova(), 64, r.p.key)],
                ..Wr::default()
            }
        } else {
            atomic_wr(&r, opcode, 0, (2, 0x1111_1111_1111_1111), 4096)
        };
        // A right the QP lacks makes the operation unsupported there:
        // invalid request (rxe `check_op_valid`); a right the key lacks is a
        // remote access error.
        let qp_lacks_it = !(rre && rae);
        let (want_synd, want_event) = if qp_lacks_it {
            (
                cqe_syndrome::REMOTE_INVAL_REQ_ERR,
                EventType::WQ_INVAL_REQ_ERROR,
            )
        } else {
            (cqe_syndrome::REMOTE_ACCESS_ERR, EventType::WQ_ACCESS_ERROR)
        };
        let (synd, state, events) = refused(&mut r, &wr);
        assert_eq!(synd, want_synd, "{what}");
        assert_eq!(state, QpState::Err, "{what}");
        assert!(events.contains(&want_event.0), "{what}: {events:?}");
        let mut m = [0u8; 64];
        r.remote.read_bytes(0, &mut m);
        assert_eq!(m, [0x11; 64], "{what}: responder memory unchanged");
    }
}

#[test]
fn an_atomic_local_buffer_must_be_one_8_byte_sge() {
    let mut r = rd_pair(Profile::ConnectX5, Mode::Fl);
    let mut wr = atomic_wr(&r, w::OPCODE_ATOMIC_FA, 0, (1, 0), 4096);
    wr.sges[0].1 = 16;
    let (synd, _, _) = refused(&mut r, &wr);
    assert_eq!(synd, cqe_syndrome::LOCAL_QP_OP_ERR);
}

#[test]
fn the_atomic_page_is_served_and_only_its_endianness_mode_is_settable() {
    let mut p = Pair::new(Profile::ConnectX7, Mode::FlRoce, false, 7);
    for cur in [false, true] {
        let mut i = inp(Opcode::QUERY_HCA_CAP, query_hca_cap_in::SIZE);
        cmd_in::op_mod
            .set(&mut i, om::query_hca_cap(om::CAP_ATOMIC, cur))
            .unwrap();
        let o = p.f.ok(&i, query_hca_cap_out::SIZE);
        let page = query_hca_cap_out::capability.get(&o);
        assert_eq!(atomic_caps::atomic_operations.get(page), 3);
        assert_eq!(atomic_caps::atomic_size_qp.get(page), 8);
        // The harness set host endianness before INIT_HCA, as Linux does.
        let mode = if cur { 1 } else { 0 };
        assert_eq!(atomic_caps::atomic_req_8b_endianness_mode.get(page), mode);
    }
    // Anything else in the page is not settable.
    let mut s = inp(Opcode::SET_HCA_CAP, set_hca_cap_in::SIZE);
    cmd_in::op_mod
        .set(&mut s, om::set_hca_cap(om::CAP_ATOMIC))
        .unwrap();
    atomic_caps::atomic_operations
        .set(set_hca_cap_in::capability.get_mut(&mut s), 0xf)
        .unwrap();
    let o = p.f.exec(&s, set_hca_cap_out::SIZE);
    assert_eq!(o.status, 4, "after INIT_HCA: BAD_SYS_STATE");
    let mut fresh = Fw::new(mlx5_sim::SimConfig::default());
    fresh.enable();
    assert!(fresh.set_issi(1).ok());
    let o = fresh.exec(&s, set_hca_cap_out::SIZE);
    assert_eq!(o.status, 3, "not settable: BAD_PARAM");
    atomic_caps::atomic_operations
        .set(set_hca_cap_in::capability.get_mut(&mut s), 3)
        .unwrap();
    atomic_caps::atomic_req_8b_endianness_mode
        .set(set_hca_cap_in::capability.get_mut(&mut s), 2)
        .unwrap();
    atomic_caps::atomic_size_qp
        .set(set_hca_cap_in::capability.get_mut(&mut s), 8)
        .unwrap();
    atomic_caps::atomic_size_dc
        .set(set_hca_cap_in::capability.get_mut(&mut s), 8)
        .unwrap();
    atomic_caps::supported_atomic_req_8b_endianness_mode_1
        .set(set_hca_cap_in::capability.get_mut(&mut s), true)
        .unwrap();
    let o = fresh.exec(&s, set_hca_cap_out::SIZE);
    assert_eq!(o.status, 3, "mode 2 does not exist: BAD_PARAM");
    // Without cap `atomic` the page is refused.
    let mut q = Pair::with(Profile::ConnectX5, Mode::Fl, false, 7, |c| c.atomic = false);
    let mut i = inp(Opcode::QUERY_HCA_CAP, query_hca_cap_in::SIZE);
    cmd_in::op_mod
        .set(&mut i, om::query_hca_cap(om::CAP_ATOMIC, true))
        .unwrap();
    assert_eq!(q.f.exec(&i, query_hca_cap_out::SIZE).status, 3);
}

// ------------------------------------------------------------ on a wire

/// Host B's remote region is its big receive area, slot 5; its key gets
/// every remote right and its QP rre/rwe/rae.
fn wire_hosts(t: crate::common::hosts::Transport, faults: Option<Faults>) -> (Hosts, u32) {
    let mut h = Hosts::new(t, Conn::default(), 0xff_fff0, 0x10);
    let qb = h.b.qp.qpn;
    set_rights(&mut h.b.f, qb, true, true, true);
    let rkey = remote_key(&mut h.b.f, 0x47, true, true, true);
    if let Some(f) = faults {
        h.wire.set_faults(f);
    }
    (h, rkey)
}

const SLOT: u64 = 5 * BIG as u64;

#[test]
fn reads_are_segmented_on_the_wire_in_every_transport() {
    for t in ALL {
        let (mut h, rkey) = wire_hosts(t, None);
        // The path MTU is 1024 (Conn::default).
        for (k, len) in [0u32, 1, 1025, 40_000].into_iter().enumerate() {
            let data = pattern(len as usize, k as u8);
            h.b.big.write_bytes(SLOT as usize, &data);
            h.a.src.write_bytes(0, &vec![0; BIG]);
            let half = len / 2;
            let sges: Vec<(u64, u32, u32)> = [(0u64, half), (32_768, len - half)]
                .into_iter()
                .filter(|&(_, n)| n > 0)
                .map(|(o, n)| (h.a.src.iova() + o, n, h.a.key))
                .collect();
            let wr = Wr {
                opcode: w::OPCODE_RDMA_READ,
                signaled: true,
                remote: Some((h.b.big.iova() + SLOT, rkey)),
                sges,
                ..Wr::default()
            };
            let before = h.b.f.dev.traffic().stats().wire_tx;
            h.a.qp.post(&h.a.f, &wr);
            let c = h.wait_cqe(true, true).expect("READ CQE");
            assert_eq!(cqe64::opcode.get(&c), CqeOpcode::REQ.0, "{t:?} {len}");
            assert_eq!(cqe64::byte_cnt.get(&c), len, "{t:?}");
            let mut got = vec![0u8; len as usize];
            h.a.src.read_bytes(0, &mut got[..half as usize]);
            h.a.src.read_bytes(32_768, &mut got[half as usize..]);
            assert!(got == data, "{t:?} {len}: the remote bytes");
            let responses = h.b.f.dev.traffic().stats().wire_tx - before;
            assert_eq!(
                responses,
                u64::from(len.div_ceil(1024).max(1)),
                "{t:?} {len}"
            );
        }
        // The PSNs a READ consumes: ⌈len / MTU⌉, at least 1.
        let psn = h.a.f.dev.qp(h.a.qp.qpn).unwrap().next_send_psn;
        assert_eq!(psn, (0xff_fff0 + 1 + 1 + 2 + 40) & 0xff_ffff, "{t:?}");
        assert_eq!(h.b.f.dev.qp(h.b.qp.qpn).unwrap().next_rcv_psn, psn);
    }
}

#[test]
fn atomics_travel_the_wire_and_misalignment_is_naked() {
    for t in ALL {
        let (mut h, rkey) = wire_hosts(t, None);
        h.b.big.write_bytes(SLOT as usize, &100u64.to_le_bytes());
        for (k, (op, ops, want_old, want_new)) in [
            (w::OPCODE_ATOMIC_FA, (5, 0), 100u64, 105u64),
            (w::OPCODE_ATOMIC_CS, (1, 105), 105, 1),
            (w::OPCODE_ATOMIC_CS, (2, 105), 1, 1),
        ]
        .into_iter()
        .enumerate()
        {
            let wr = Wr {
                opcode: op,
                signaled: true,
                remote: Some((h.b.big.iova() + SLOT, rkey)),
                atomic: Some(ops),
                sges: vec![(h.a.src.iova() + 8 * k as u64, 8, h.a.key)],
                ..Wr::default()
            };
            h.a.qp.post(&h.a.f, &wr);
            let c = h.wait_cqe(true, true).expect("atomic CQE");
            assert_eq!(cqe64::opcode.get(&c), CqeOpcode::REQ.0, "{t:?}");
            let mut b = [0u8; 8];
            h.a.src.read_bytes(8 * k, &mut b);
            assert_eq!(u64::from_le_bytes(b), want_old, "{t:?} #{k}");
            h.b.big.read_bytes(SLOT as usize, &mut b);
            assert_eq!(u64::from_le_bytes(b), want_new, "{t:?} #{k}");
        }
        let wr = Wr {
            opcode: w::OPCODE_ATOMIC_FA,
            signaled: true,
            remote: Some((h.b.big.iova() + SLOT + 4, rkey)),
            atomic: Some((1, 0)),
            sges: vec![(h.a.src.iova(), 8, h.a.key)],
            ..Wr::default()
        };
        h.a.qp.post(&h.a.f, &wr);
        let c = h.wait_cqe(true, true).expect("error CQE");
        assert_eq!(cqe64::opcode.get(&c), CqeOpcode::REQ_ERR.0, "{t:?}");
        assert_eq!(
            err_cqe::syndrome.get(&c),
            cqe_syndrome::REMOTE_INVAL_REQ_ERR
        );
        let mut b = [0u8; 8];
        h.b.big.read_bytes(SLOT as usize, &mut b);
        assert_eq!(u64::from_le_bytes(b), 1, "{t:?}: nothing written");
        assert_eq!(h.b.f.dev.qp(h.b.qp.qpn).unwrap().state, QpState::Err);
        assert_eq!(h.b.f.dev.traffic().stats().naks_sent[1], 1, "{t:?}");
    }
}

#[test]
fn a_retried_atomic_whose_ack_was_lost_executes_once() {
    for t in ALL {
        // Frame 0: the FETCH_ADD; frame 1: its ATOMIC_ACKNOWLEDGE, dropped.
        let faults = Faults {
            chosen: vec![(1, Fault::Drop)],
            ..Faults::default()
        };
        let (mut h, rkey) = wire_hosts(t, None);
        h.b.big.write_bytes(SLOT as usize, &10u64.to_le_bytes());
        h.wire.set_faults(faults);
        let wr = Wr {
            opcode: w::OPCODE_ATOMIC_FA,
            signaled: true,
            remote: Some((h.b.big.iova() + SLOT, rkey)),
            atomic: Some((1, 0)),
            sges: vec![(h.a.src.iova(), 8, h.a.key)],
            ..Wr::default()
        };
        h.a.qp.post(&h.a.f, &wr);
        let c = h.wait_cqe(true, true).expect("atomic CQE after the retry");
        assert_eq!(cqe64::opcode.get(&c), CqeOpcode::REQ.0, "{t:?}");
        let mut b = [0u8; 8];
        h.a.src.read_bytes(0, &mut b);
        assert_eq!(u64::from_le_bytes(b), 10, "{t:?}: the original value");
        h.b.big.read_bytes(SLOT as usize, &mut b);
        assert_eq!(u64::from_le_bytes(b), 11, "{t:?}: added once");
        let (a, bs) = (h.a.f.dev.traffic().stats(), h.b.f.dev.traffic().stats());
        assert_eq!(a.retransmissions, 1, "{t:?}");
        assert_eq!(bs.atomics_executed, 1, "{t:?}");
        assert_eq!(bs.rd_atomic_replays, 1, "{t:?}");
        assert_eq!(h.wire.stats().dropped, 1, "{t:?}");
    }
}

#[test]
fn a_read_whose_middle_response_was_lost_is_read_again() {
    for t in ALL {
        // Frame 0: READ_REQUEST; 1..=4: FIRST, MIDDLE (lost), MIDDLE, LAST.
        let (mut h, rkey) = wire_hosts(t, None);
        let data = pattern(4000, 9);
        h.b.big.write_bytes(SLOT as usize, &data);
        h.wire.set_faults(Faults {
            chosen: vec![(2, Fault::Drop)],
            ..Faults::default()
        });
        let wr = Wr {
            opcode: w::OPCODE_RDMA_READ,
            signaled: true,
            remote: Some((h.b.big.iova() + SLOT, rkey)),
            sges: vec![(h.a.src.iova(), 4000, h.a.key)],
            ..Wr::default()
        };
        h.a.qp.post(&h.a.f, &wr);
        let c = h.wait_cqe(true, true).expect("READ CQE after the retry");
        assert_eq!(cqe64::opcode.get(&c), CqeOpcode::REQ.0, "{t:?}");
        let mut got = vec![0u8; 4000];
        h.a.src.read_bytes(0, &mut got);
        assert!(got == data, "{t:?}: the remote bytes");
        let bs = h.b.f.dev.traffic().stats();
        assert_eq!((bs.reads_served, bs.rd_atomic_replays), (2, 1), "{t:?}");
    }
}
