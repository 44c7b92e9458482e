//! Fault sweep of the queue-pair commands, driver against model, on every
//! port set-up (the four profiles on Ethernet, a ConnectX-5 on an IB port).
//!
//! A scenario (bring-up with its DMA key, XRC domain and loopback set-up;
//! CQs, an SRQ, a sender and an SRQ-attached receiver connected in
//! loopback; a memory key; a SEND checked byte for byte; a QP with its own
//! receive queue connected to itself, a SEND into that queue, a flush of
//! its posted receives, with read and atomic rights and one resource each
//! way, an RDMA READ and a FETCH_ADD through a key made for them; a UD QP
//! created and moved to RTS; QUERY_QP; 2ERR; 2RST; destroy everything; teardown with its vport/RoCE undo) runs once
//! cleanly to record the commands it issues, then once per command with
//! exactly that command failed by the model. Each faulted run must return
//! the typed error naming that opcode, status and syndrome; the driver's
//! view of every QP must still match the model's; and afterwards the model
//! must hold no page and no object, the platform no DMA memory, TEARDOWN_HCA
//! must have found nothing the driver forgot, no GID entry may remain and
//! `roce_en` must be back to 0. The only exceptions are the ones a refused
//! teardown command forces: the object it failed to destroy is left to
//! TEARDOWN_HCA, and a refused `roce_en` restore leaves RoCE on.

use std::cell::Cell;

use mlx5_driver::cq::{Cq, CqOptions};
use mlx5_driver::mkey::MkeyAccess;
use mlx5_driver::qp::{
    InitAttr, Payload, Qp, QpAccess, QpLinks, QpState, RecvQueueCaps, RtsAttr, SendOp,
    SendQueueCaps, SendSlot,
};
use mlx5_driver::srq::{RecvRequest, Srq};
use mlx5_driver::{Error, Hca};
use mlx5_regs::{CmdStatus, Opcode};
use mlx5_sim::{Device, ExecMode, ObjectCounts, QpState as SimState, SimHal};
use mlx5_tests::config;
use mlx5_tests::qp::{payload, wait_cqes, Bufs, RigConfig};

/// What the scenario created and has not destroyed yet.
#[derive(Default)]
struct Objs {
    scq: Option<Cq<SimHal>>,
    rcq: Option<Cq<SimHal>>,
    srq: Option<Srq<SimHal>>,
    tx: Option<Qp<SimHal, Vec<SendSlot>>>,
    rx: Option<Qp<SimHal>>,
    /// A QP with its own receive queue (send CQ `scq`, receive CQ `rcq`).
    own: Option<Qp<SimHal, Vec<SendSlot>>>,
    /// A UD QP with its own receive queue (send CQ `scq`, receive CQ `rcq`).
    ud: Option<Qp<SimHal, Vec<SendSlot>>>,
}

fn sim_state(s: QpState) -> SimState {
    match s {
        QpState::Reset => SimState::Reset,
        QpState::Init => SimState::Init,
        QpState::Rtr => SimState::Rtr,
        QpState::Rts => SimState::Rts,
        QpState::Error => SimState::Err,
        other => unreachable!("{other:?}"),
    }
}

/// Run a destroy; if firmware refuses it (the fault is one-shot), it is
/// handed back and destroyed again. The first error is kept.
macro_rules! destroy {
    ($first:expr, $call:expr, $again:ident) => {
        if let Err(failed) = $call {
            let ($again, e) = failed.into_parts();
            $first.get_or_insert(e);
            if let Err(e2) = $call {
                panic!("second destroy failed: {e2}");
            }
        }
    };
}

impl Objs {
    /// Destroy everything left, checking first that the driver's QP states
    /// are the model's.
    fn cleanup(&mut self, dev: &Device, hca: &Hca<SimHal>) -> Result<(), Error> {
        let mut first = None;
        if let Some(q) = &self.tx {
            assert_eq!(dev.qp_state(q.qpn()), Some(sim_state(q.state())), "tx");
        }
        if let Some(q) = &self.rx {
            assert_eq!(dev.qp_state(q.qpn()), Some(sim_state(q.state())), "rx");
        }
        if let Some(q) = &self.own {
            assert_eq!(dev.qp_state(q.qpn()), Some(sim_state(q.state())), "own");
        }
        if let Some(q) = &self.ud {
            assert_eq!(dev.qp_state(q.qpn()), Some(sim_state(q.state())), "ud");
        }
        for mut qp in [self.ud.take(), self.own.take()].into_iter().flatten() {
            loop {
                let links = QpLinks {
                    send_cq: self.scq.as_mut(),
                    recv_cq: self.rcq.as_mut(),
                    ..QpLinks::default()
                };
                match hca.destroy_qp(qp, links) {
                    Ok(_) => break,
                    Err(failed) => {
                        let (back, e) = failed.into_parts();
                        assert!(first.is_none(), "destroy failed twice: {e}");
                        first = Some(e);
                        qp = back;
                    }
                }
            }
        }
        if let Some(mut qp) = self.tx.take() {
            loop {
                let links = QpLinks {
                    send_cq: self.scq.as_mut(),
                    ..QpLinks::default()
                };
                match hca.destroy_qp(qp, links) {
                    Ok(_) => break,
                    Err(failed) => {
                        let (back, e) = failed.into_parts();
                        assert!(first.is_none(), "destroy failed twice: {e}");
                        first = Some(e);
                        qp = back;
                    }
                }
            }
        }
        if let Some(mut qp) = self.rx.take() {
            loop {
                let links = QpLinks {
                    recv_cq: self.rcq.as_mut(),
                    srq: self.srq.as_mut(),
                    ..QpLinks::default()
                };
                match hca.destroy_qp(qp, links) {
                    Ok(_) => break,
                    Err(failed) => {
                        let (back, e) = failed.into_parts();
                        assert!(first.is_none(), "destroy failed twice: {e}");
                        first = Some(e);
                        qp = back;
                    }
                }
            }
        }
        if let Some(srq) = self.srq.take() {
            let user = srq.cqn().is_some();
            destroy!(
                first,
                hca.destroy_srq(srq, user.then_some(self.rcq.as_mut().unwrap())),
                srq
            );
        }
        for cq in [self.rcq.take(), self.scq.take()].into_iter().flatten() {
            destroy!(first, hca.destroy_cq(cq), cq);
        }
        first.map_or(Ok(()), Err)
    }
}

/// The scenario body on a brought-up HCA; objects go into `o`.
fn body(dev: &Device, hca: &Hca<SimHal>, o: &mut Objs) -> Result<(), Error> {
    let scq = o.scq.insert(hca.create_cq(63, CqOptions::default())?);
    let rcq = o.rcq.insert(hca.create_cq(63, CqOptions::default())?);
    let srq = o.srq.insert(hca.create_srq(15, 1, Some(&mut *rcq))?);
    let caps = SendQueueCaps::default();
    let g = hca.send_queue_geometry(&caps)?;
    let links = QpLinks {
        send_cq: Some(&mut *scq),
        ..QpLinks::default()
    };
    let tx =
        o.tx.insert(hca.create_qp(Some(caps), links, vec![SendSlot::EMPTY; g.wqebbs()])?);
    let links = QpLinks {
        recv_cq: Some(&mut *rcq),
        srq: Some(&mut *srq),
        ..QpLinks::default()
    };
    let rx = o.rx.insert(hca.create_qp(None, links, [])?);
    hca.connect_loopback_pair(tx, rx)?;

    // A key made and destroyed on demand.
    let bufs = Bufs::new(dev, 2, 128);
    let key = hca.register(
        bufs.iova(0),
        128,
        MkeyAccess::LOCAL_WRITE | MkeyAccess::REMOTE_WRITE,
    )?;
    if let Err(failed) = hca.destroy_mkey(key) {
        let (key, e) = failed.into_parts();
        hca.destroy_mkey(key)?;
        return Err(e);
    }

    // One SEND, checked byte for byte.
    bufs.write(0, &payload(3, 100));
    let sge = [hca.sge(bufs.iova(1), 128)];
    srq.post(&[RecvRequest {
        wr_id: 9,
        sges: &sge,
    }])
    .unwrap();
    let send = [hca.sge(bufs.iova(0), 100)];
    tx.post_send(&[mlx5_driver::qp::SendRequest {
        wr_id: 3,
        op: mlx5_driver::qp::SendOp::Send,
        payload: mlx5_driver::qp::Payload::Sges(&send),
        signaled: true,
        solicited: false,
    }])
    .unwrap();
    let c = wait_cqes(hca, rcq, 1);
    let r = rx.complete_recv(srq, &c[0]).unwrap();
    assert_eq!((r.wr_id, r.byte_len), (9, 100));
    assert_eq!(bufs.read(1, 100), payload(3, 100));
    let c = wait_cqes(hca, scq, 1);
    assert_eq!(tx.complete_send(&c[0]).unwrap().wr_id, 3);
    bufs.assert_guards("fault scenario");

    // A UD QP with its own receive queue: CREATE_QP with `st` UD and the
    // three UD transitions (Q_Key at RST2INIT, no path).
    let links = QpLinks {
        send_cq: Some(&mut *scq),
        recv_cq: Some(&mut *rcq),
        ..QpLinks::default()
    };
    let ug = hca.ud_send_queue_geometry(&caps)?;
    let ud = o.ud.insert(hca.create_ud_qp(
        Some(caps),
        Some(RecvQueueCaps {
            max_recv_wr: 4,
            max_recv_sge: 1,
        }),
        links,
        vec![SendSlot::EMPTY; ug.wqebbs()],
    )?);
    hca.ud_qp_activate(
        ud,
        &mlx5_driver::qp::UdInitAttr {
            port: 1,
            pkey_index: 0,
            qkey: 0x1111_1111,
        },
    )?;
    let q = hca.query_qp(ud)?;
    assert_eq!((q.state, q.st, q.q_key), (QpState::Rts, 2, 0x1111_1111));

    // A QP with its own receive queue, connected to itself: a SEND into
    // the queue, then a flush of the receives still posted.
    let links = QpLinks {
        send_cq: Some(&mut *scq),
        recv_cq: Some(&mut *rcq),
        ..QpLinks::default()
    };
    let rq = RecvQueueCaps {
        max_recv_wr: 4,
        max_recv_sge: 1,
    };
    let own = o.own.insert(hca.create_qp_with(
        Some(caps),
        Some(rq),
        links,
        vec![SendSlot::EMPTY; g.wqebbs()],
    )?);
    // Connected to itself with read and atomic rights and one resource
    // each way (the RTR and RTS commands carry log_rra_max/log_sra_max).
    let rts = RtsAttr {
        max_rd_atomic: 1,
        ..RtsAttr::default()
    };
    let mut rtr = hca.loopback_rtr(own.qpn(), own.qpn(), rts.sq_psn)?;
    rtr.max_dest_rd_atomic = 1;
    let init = InitAttr {
        access: QpAccess {
            remote_read: true,
            remote_write: true,
            remote_atomic: true,
        },
        ..InitAttr::default()
    };
    hca.qp_to_init(own, &init)?;
    hca.qp_to_rtr(own, &rtr)?;
    hca.qp_to_rts(own, &rts)?;
    let wrs: Vec<RecvRequest> = (20..23)
        .map(|wr_id| RecvRequest { wr_id, sges: &sge })
        .collect();
    hca.post_recv(own, &wrs).unwrap();
    own.post_send(&[mlx5_driver::qp::SendRequest {
        wr_id: 4,
        op: mlx5_driver::qp::SendOp::Send,
        payload: mlx5_driver::qp::Payload::Sges(&send),
        signaled: true,
        solicited: false,
    }])
    .unwrap();
    let c = wait_cqes(hca, rcq, 1);
    let r = own.complete_own_recv(&c[0]).unwrap();
    assert_eq!((r.wr_id, r.byte_len), (20, 100));
    let c = wait_cqes(hca, scq, 1);
    assert_eq!(own.complete_send(&c[0]).unwrap().wr_id, 4);
    rd_atomic(dev, hca, own, scq)?;
    hca.qp_to_error(own)?;
    let c = wait_cqes(hca, rcq, 2);
    for (cqe, want) in c.iter().zip([21, 22]) {
        let r = own.complete_own_recv(cqe).unwrap();
        assert_eq!(r.wr_id, want);
        assert!(r.error().is_some(), "flushed");
    }
    assert_eq!(own.outstanding_recvs(), 0);

    assert_eq!(hca.query_qp(tx)?.state, QpState::Rts);
    hca.qp_to_error(tx)?;
    let links = QpLinks {
        send_cq: Some(&mut *scq),
        ..QpLinks::default()
    };
    hca.qp_to_reset_and_clean(tx, links)?;
    hca.qp_to_reset(rx)?;
    o.cleanup(dev, hca)
}

/// An RDMA READ and a FETCH_ADD from `own` on its own memory through a key
/// made (and destroyed) for them: the bytes and the original value land.
fn rd_atomic(
    dev: &Device,
    hca: &Hca<SimHal>,
    own: &mut Qp<SimHal, Vec<SendSlot>>,
    scq: &mut Cq<SimHal>,
) -> Result<(), Error> {
    let b = Bufs::new(dev, 4, 64);
    b.write(0, &payload(5, 64));
    b.write(2, &41u64.to_ne_bytes());
    let span = b.iova(3) + 64 - b.iova(0);
    let key = hca.register(
        b.iova(0),
        span,
        MkeyAccess::LOCAL_WRITE | MkeyAccess::REMOTE_READ | MkeyAccess::REMOTE_ATOMIC,
    )?;
    let (read_to, result) = ([hca.sge(b.iova(1), 64)], [hca.sge(b.iova(3), 8)]);
    let reqs = [
        mlx5_driver::qp::SendRequest {
            wr_id: 5,
            op: SendOp::RdmaRead {
                raddr: b.iova(0),
                rkey: key.key(),
            },
            payload: Payload::Sges(&read_to),
            signaled: true,
            solicited: false,
        },
        mlx5_driver::qp::SendRequest {
            wr_id: 6,
            op: SendOp::AtomicFetchAdd {
                raddr: b.iova(2),
                rkey: key.key(),
                add: 1,
            },
            payload: Payload::Sges(&result),
            signaled: true,
            solicited: false,
        },
    ];
    own.post_send(&reqs).unwrap();
    let c = wait_cqes(hca, scq, 2);
    for (cqe, want) in c.iter().zip([5, 6]) {
        let s = own.complete_send(cqe).unwrap();
        assert_eq!((s.wr_id, s.error()), (want, None));
    }
    assert_eq!(b.read(1, 64), payload(5, 64), "READ landed");
    assert_eq!(b.read(3, 8), 41u64.to_ne_bytes(), "the original value");
    assert_eq!(b.read(2, 8), 42u64.to_ne_bytes(), "added once");
    if let Err(failed) = hca.destroy_mkey(key) {
        let (key, e) = failed.into_parts();
        hca.destroy_mkey(key)?;
        return Err(e);
    }
    Ok(())
}

/// Bring up, run the body, clean up, tear down; `teardown_at` gets the
/// trace length when teardown starts. The first error wins.
fn scenario(dev: &Device, teardown_at: &Cell<Option<usize>>) -> Result<(), Error> {
    let hca = Hca::bring_up(dev.hal(), config())?;
    let mut o = Objs::default();
    let r = body(dev, &hca, &mut o);
    let c = o.cleanup(dev, &hca);
    drop(o);
    teardown_at.set(Some(dev.trace().len()));
    let t = hca.teardown().map(|_| ());
    r.and(c).and(t)
}

/// The objects a refused teardown command leaves to TEARDOWN_HCA: the one
/// it destroys, and what that one keeps referenced: the HCA's PD for the
/// DMA key (a PD that keys belong to cannot be deallocated,
/// docs/fidelity.md §14.2), the UAR for an EQ (§7).
fn destroyed_by(op: Opcode) -> Option<fn(&mut ObjectCounts)> {
    Some(match op {
        Opcode::DESTROY_MKEY => |c| {
            c.mkeys += 1;
            c.pds += 1;
        },
        Opcode::DEALLOC_XRCD => |c| c.xrcds += 1,
        Opcode::DEALLOC_PD => |c| c.pds += 1,
        Opcode::DESTROY_EQ => |c| {
            c.eqs += 1;
            c.uars += 1;
        },
        Opcode::DEALLOC_UAR => |c| c.uars += 1,
        Opcode::SET_ROCE_ADDRESS => |c| c.gids += 1,
        _ => return None,
    })
}

/// Commands whose failure the driver survives by design (docs/firmware.md
/// §4.1 step 6: a QUERY_ISSI refusal means an ISSI-0 device).
const TOLERATED: [Opcode; 1] = [Opcode::QUERY_ISSI];

fn sweep(cfg: RigConfig) -> (usize, Vec<u16>) {
    let name = cfg.name();
    let dev = cfg.device();
    let mark = Cell::new(None);
    scenario(&dev, &mark).unwrap_or_else(|e| panic!("{name}: clean run: {e}"));
    mlx5_tests::qp::assert_torn_down(&dev, &name);
    let teardown_at = mark.get().expect("reached teardown");
    let mut seen = std::collections::HashMap::<u16, usize>::new();
    let commands: Vec<(u16, usize)> = dev
        .trace()
        .iter()
        .map(|t| {
            let n = seen.entry(t.opcode).or_default();
            *n += 1;
            (t.opcode, *n - 1)
        })
        .collect();
    for (k, &(opcode, nth)) in commands.iter().enumerate() {
        let op = Opcode(opcode);
        let in_teardown = k >= teardown_at;
        let ctx = format!("{name}: command #{k} {op} (occurrence {nth}, teardown {in_teardown})");
        let dev = cfg.device();
        let syndrome = 0x0fa1_0000 | k as u32;
        dev.inject()
            .fail_nth(opcode, nth, CmdStatus::BAD_RES_ERR.0, syndrome);
        let mark = Cell::new(None);
        match scenario(&dev, &mark) {
            Ok(()) if TOLERATED.contains(&op) => {}
            Ok(()) => panic!("{ctx}: succeeded; the failure was swallowed"),
            Err(e) => {
                assert_eq!(
                    e,
                    Error::Command {
                        opcode: op,
                        op_mod: dev.trace()[k].op_mod,
                        status: CmdStatus::BAD_RES_ERR,
                        syndrome
                    },
                    "{ctx}"
                );
                let text = e.to_string();
                for part in [
                    op.to_string(),
                    "BAD_RES_ERR".into(),
                    format!("{syndrome:#x}"),
                ] {
                    assert!(text.contains(&part), "{ctx}: {text:?} lacks {part}");
                }
            }
        }
        // The model's accounting.
        assert_eq!(dev.pages_held(), 0, "{ctx}: pages");
        assert_eq!(dev.objects(), ObjectCounts::default(), "{ctx}: objects");
        assert_eq!(dev.dma_bytes_live(), 0, "{ctx}: DMA memory");
        assert!(dev.violations().is_empty(), "{ctx}: {:?}", dev.violations());
        assert!(dev.iommu_faults().is_empty(), "{ctx}");
        let mut expect = ObjectCounts::default();
        if in_teardown {
            if let Some(f) = destroyed_by(op) {
                f(&mut expect);
            }
        }
        assert_eq!(
            dev.leaked_at_teardown().unwrap_or_default(),
            expect,
            "{ctx}: left to TEARDOWN_HCA"
        );
        assert!(dev.gid_entries().is_empty(), "{ctx}: GID entries");
        let roce_left_on = in_teardown && op == Opcode::MODIFY_NIC_VPORT_CONTEXT;
        assert_eq!(dev.roce_enabled(), roce_left_on, "{ctx}: roce_en");
    }
    let ops = commands.iter().map(|c| c.0).collect();
    (commands.len(), ops)
}

#[test]
fn every_command_of_a_qp_scenario_failed_once_on_every_port_set_up() {
    let mut runs = 0;
    for cfg in RigConfig::every_port(ExecMode::Synchronous) {
        let (n, ops) = sweep(cfg);
        runs += n;
        // The sweep covered every new command this set-up sends.
        let caps = cfg.device().caps();
        let mut need = vec![
            Opcode::CREATE_MKEY,
            Opcode::DESTROY_MKEY,
            Opcode::CREATE_QP,
            Opcode::RST2INIT_QP,
            Opcode::INIT2RTR_QP,
            Opcode::RTR2RTS_QP,
            Opcode::QP_2ERR,
            Opcode::QP_2RST,
            Opcode::QUERY_QP,
            Opcode::DESTROY_QP,
        ];
        if caps.xrc {
            need.extend([Opcode::ALLOC_XRCD, Opcode::DEALLOC_XRCD]);
        }
        let count = |op: Opcode| ops.iter().filter(|&&o| o == op.0).count();
        if cfg.ib_port {
            need.push(Opcode::QUERY_HCA_VPORT_CONTEXT);
        } else {
            need.push(Opcode::QUERY_NIC_VPORT_CONTEXT);
            // roce_en set and cleared where bring-up enables RoCE; the
            // default GIDs (one per RoCE version) programmed and deleted on
            // every RoCE port.
            let modify = match cfg.profile {
                mlx5_sim::Profile::ConnectX5 => 0,
                _ => 2,
            };
            let set_gid = 2 * (caps.roce_caps.roce_version & 0b101).count_ones() as usize;
            assert!(set_gid > 0, "{}: a RoCE profile", cfg.name());
            let w = cfg.name();
            assert_eq!(count(Opcode::MODIFY_NIC_VPORT_CONTEXT), modify, "{w}");
            assert_eq!(count(Opcode::SET_ROCE_ADDRESS), set_gid, "{w}");
        }
        for op in need {
            assert!(count(op) > 0, "{}: {op} never sent", cfg.name());
        }
    }
    println!("QP scenarios: {runs} faulted runs");
}
