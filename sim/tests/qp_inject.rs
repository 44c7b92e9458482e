//! Fault injection on every queue-pair, memory-key, XRC-domain and vport
//! opcode: an injected failure returns the chosen status and syndrome and
//! changes nothing; a stalled command never completes; a delayed one
//! completes after the delay.

use crate::common::qp::*;
use crate::common::*;

use mlx5_hal::Hal;
use mlx5_regs::consts::{mkey as mk, OptParam};
use mlx5_regs::layouts::*;
use mlx5_regs::{EventMask, Opcode};
use mlx5_sim::{ObjectCounts, Profile, QpState};

const OPCODES: [Opcode; 22] = [
    Opcode::CREATE_MKEY,
    Opcode::QUERY_MKEY,
    Opcode::DESTROY_MKEY,
    Opcode::ALLOC_XRCD,
    Opcode::DEALLOC_XRCD,
    Opcode::CREATE_QP,
    Opcode::RST2INIT_QP,
    Opcode::INIT2INIT_QP,
    Opcode::INIT2RTR_QP,
    Opcode::RTR2RTS_QP,
    Opcode::RTS2RTS_QP,
    Opcode::SQERR2RTS_QP,
    Opcode::QP_2ERR,
    Opcode::QP_2RST,
    Opcode::QUERY_QP,
    Opcode::DESTROY_QP,
    Opcode::QUERY_VPORT_STATE,
    Opcode::QUERY_NIC_VPORT_CONTEXT,
    Opcode::MODIFY_NIC_VPORT_CONTEXT,
    Opcode::QUERY_ROCE_ADDRESS,
    Opcode::SET_ROCE_ADDRESS,
    Opcode::QUERY_HCA_VPORT_CONTEXT,
];

struct Env {
    f: Fw,
    _eq: TEq,
    cq: TCq,
    rmp: TRmp,
}

fn env() -> Env {
    // ConnectX-4 Lx: RoCE addressing exercises the vport commands.
    let mut f = up_profile(Profile::ConnectX4Lx, false);
    let eq = f.create_eq(6, EventMask::LINUX_ASYNC.bits());
    let cq = f.create_cq(6, eq.eqn);
    let key = dma_key(&mut f);
    let rmp = TRmp::new(&mut f, key, 0);
    Env {
        f,
        _eq: eq,
        cq,
        rmp,
    }
}

/// A new QP (send ring + RMP) driven to `s`; its buffers stay alive.
fn qp_in(e: &mut Env, s: QpState) -> u32 {
    let q = create_qp(&mut e.f, Some(2), Some(e.rmp.n), e.cq.cqn, e.cq.cqn);
    let n = q.qpn;
    e.f.keep.extend(q.ring);
    e.f.keep.push(q.dbr);
    if s != QpState::Reset {
        e.f.ok(&rst2init(n), 16);
    }
    if matches!(s, QpState::Rtr | QpState::Rts) {
        assert!(set_roce_en(&mut e.f, true).ok());
        let mac = e.f.dev.port_mac();
        assert!(set_gid(&mut e.f, 0, gid_of(mac), mac, 2).ok());
        let c = init2rtr(&e.f, Mode::Roce, n, n, 0);
        e.f.ok(&c, 16);
    }
    if s == QpState::Rts {
        e.f.ok(&rtr2rts(n, 0, 7), 16);
    }
    n
}

/// An input for `op` that succeeds in `e`, and its output length.
fn cmd_for(e: &mut Env, op: Opcode) -> (Vec<u8>, usize) {
    let pd = e.f.pd;
    match op {
        Opcode::CREATE_MKEY => (mkey_pa_cmd(pd, 1, true, true, false, false), 16),
        Opcode::QUERY_MKEY | Opcode::DESTROY_MKEY => {
            let c = mkey_pa_cmd(pd, 2, true, true, false, false);
            let key = create_mkey(&mut e.f, &c);
            let mut i = inp(op, 16);
            destroy_mkey_in::mkey_index
                .set(&mut i, mk::index(key))
                .unwrap();
            (i, query_mkey_out::SIZE)
        }
        Opcode::ALLOC_XRCD => (inp(op, 16), 16),
        Opcode::DEALLOC_XRCD => {
            let o = e.f.ok(&inp(Opcode::ALLOC_XRCD, 16), 16);
            let mut i = inp(op, 16);
            dealloc_xrcd_in::xrcd
                .set(&mut i, alloc_xrcd_out::xrcd.get(&o))
                .unwrap();
            (i, 16)
        }
        Opcode::CREATE_QP => {
            let ring = e.f.hal.alloc_dma(4096).unwrap();
            let dbr = e.f.hal.alloc_dma(4096).unwrap();
            let i = qp_cmd(&e.f, Some((2, &ring)), None, e.cq.cqn, 0, &dbr);
            e.f.keep.extend([ring, dbr]);
            (i, 16)
        }
        Opcode::RST2INIT_QP => (rst2init(qp_in(e, QpState::Reset)), 16),
        Opcode::INIT2INIT_QP => {
            let n = qp_in(e, QpState::Init);
            (modify_cmd(op, n, OptParam::empty(), |_| {}), 16)
        }
        Opcode::INIT2RTR_QP => {
            let n = qp_in(e, QpState::Init);
            assert!(set_roce_en(&mut e.f, true).ok());
            let mac = e.f.dev.port_mac();
            assert!(set_gid(&mut e.f, 0, gid_of(mac), mac, 2).ok());
            (init2rtr(&e.f, Mode::Roce, n, n, 0), 16)
        }
        Opcode::RTR2RTS_QP => (rtr2rts(qp_in(e, QpState::Rtr), 0, 7), 16),
        Opcode::RTS2RTS_QP | Opcode::SQERR2RTS_QP => {
            let n = qp_in(e, QpState::Rts);
            (modify_cmd(op, n, OptParam::empty(), |_| {}), 16)
        }
        Opcode::QP_2ERR | Opcode::QP_2RST | Opcode::QUERY_QP | Opcode::DESTROY_QP => {
            (qpn_cmd(op, qp_in(e, QpState::Init)), query_qp_out::SIZE)
        }
        Opcode::MODIFY_NIC_VPORT_CONTEXT => (roce_en_cmd(true), 16),
        Opcode::SET_ROCE_ADDRESS => {
            let mut i = inp(op, set_roce_address_in::SIZE);
            set_roce_address_in::roce_address_index
                .set(&mut i, 7)
                .unwrap();
            let a = set_roce_address_in::roce_address.get_mut(&mut i);
            roce_addr_layout::source_mac_31_0.set(a, 0x1234).unwrap();
            (i, 16)
        }
        _ => (inp(op, 16), 600),
    }
}

/// What a command may change, to prove an injected failure changed nothing.
fn snapshot(f: &Fw) -> (ObjectCounts, Vec<Option<QpState>>, bool) {
    let states = f.dev.qpns().iter().map(|&n| f.dev.qp_state(n)).collect();
    (f.dev.objects(), states, f.dev.roce_enabled())
}

#[test]
fn injected_failure_on_every_new_opcode_has_no_effect() {
    for op in OPCODES {
        let mut e = env();
        let (i, ol) = cmd_for(&mut e, op);
        let before = snapshot(&e.f);
        let synd = 0x7e00_0000 | op.0 as u32;
        e.f.dev.inject().fail_next(op.0, 0x06, synd);
        let o = e.f.exec(&i, ol);
        assert_eq!((o.status, o.syndrome), (0x06, synd), "{op:?}");
        assert_eq!(snapshot(&e.f), before, "{op:?}: no effect");
        if op == Opcode::SQERR2RTS_QP {
            // Never legal for RC here: the real answer is the state error.
            assert_eq!(e.f.exec(&i, ol).status, 0x10);
            continue;
        }
        let o = e.f.exec(&i, ol);
        assert!(o.ok(), "{op:?} after the injected failure: {o:?}");
        assert!(
            e.f.dev.violations().is_empty(),
            "{op:?}: {:?}",
            e.f.dev.violations()
        );
    }
}

#[test]
fn stall_and_delay_on_every_new_opcode() {
    for op in OPCODES {
        let mut e = env();
        let (i, ol) = cmd_for(&mut e, op);
        let before = snapshot(&e.f);
        e.f.dev.inject().stall_next(op.0);
        e.f.prepare(3, &i, ol);
        e.f.ring(3);
        e.f.hal.delay_us(100_000);
        assert!(e.f.owned_by_hw(3), "{op:?} stalled");
        assert!(e.f.dev.trace().last().unwrap().stalled);
        assert_eq!(
            snapshot(&e.f),
            before,
            "{op:?}: a stalled command did nothing"
        );
        // Other slots keep working; a delayed completion arrives later.
        e.f.dev.inject().delay_completions_us(5_000);
        let o = e.f.try_exec(4, &i, ol).expect("delayed, not lost");
        e.f.dev.inject().delay_completions_us(0);
        if op != Opcode::SQERR2RTS_QP {
            assert!(o.ok(), "{op:?}: {o:?}");
        }
        let t = e.f.dev.trace();
        let last = t.iter().rev().find(|t| t.opcode == op.0).unwrap();
        assert!(last.duration_ns >= 5_000_000, "{op:?}");
    }
}

#[test]
fn fault_on_set_hca_cap_roce_page() {
    let mut f = Fw::new(mlx5_sim::SimConfig::profile(Profile::ConnectX5));
    f.enable();
    f.dev
        .inject()
        .fail_next(Opcode::QUERY_HCA_CAP.0, 0x03, 0xabc);
    let mut i = inp(Opcode::QUERY_HCA_CAP, query_hca_cap_in::SIZE);
    cmd_in::op_mod.set(&mut i, roce_cap_op_mod(true)).unwrap();
    let o = f.exec(&i, query_hca_cap_out::SIZE);
    assert_eq!((o.status, o.syndrome), (0x03, 0xabc));
    let cur = f.ok(&i, query_hca_cap_out::SIZE);
    let mut s = inp(Opcode::SET_HCA_CAP, set_hca_cap_in::SIZE);
    cmd_in::op_mod.set(&mut s, 8).unwrap();
    s[0x10..0x10 + roce_cap::SIZE].copy_from_slice(&cur[0x10..0x10 + roce_cap::SIZE]);
    roce_cap::sw_r_roce_src_udp_port
        .set(&mut s[0x10..], true)
        .unwrap();
    f.dev.inject().fail_next(Opcode::SET_HCA_CAP.0, 0x04, 0xdef);
    let o = f.exec(&s, 16);
    assert_eq!((o.status, o.syndrome), (0x04, 0xdef));
    let now = f.ok(&i, query_hca_cap_out::SIZE);
    assert!(
        !roce_cap::sw_r_roce_src_udp_port.get(&now[0x10..]),
        "unchanged"
    );
    assert!(f.exec(&s, 16).ok());
}
