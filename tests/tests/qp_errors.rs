//! Data-path errors through real queue pairs, driver against model, with
//! the error CQE, QP states and events docs/fidelity.md §14.5–§14.8 give
//! (IB semantics): a bad lkey on a send, a key of another protection
//! domain on either side, a message longer than the receive buffer, and
//! RDMA WRITE rkey violations. Nothing may be written where it should not:
//! every buffer sits between guard bytes, and a refused message leaves its
//! target untouched.

use mlx5_driver::cq::{CqeError, CqeStatus};
use mlx5_driver::mkey::MkeyAccess;
use mlx5_driver::qp::{Payload, QpEvent, QpLinks, QpState, SendOp, SendOpcode, SendRequest};
use mlx5_driver::srq::{RecvRequest, Sge};
use mlx5_driver::unstable::encode;
use mlx5_driver::unstable::mkey_cmd as mkcmd;
use mlx5_driver::Event;
use mlx5_regs::consts::mkey;
use mlx5_regs::CqeOpcode;
use mlx5_sim::{ExecMode, Profile, QpState as SimState};
use mlx5_tests::qp::{drain, payload, Bufs, Rig, RigConfig};
use mlx5_tests::MODES;

/// Both QPs back to RESET and connected again.
fn reconnect(rig: &mut Rig) {
    rig.hca.qp_to_reset(&mut rig.tx).unwrap();
    rig.hca.qp_to_reset(&mut rig.rx).unwrap();
    rig.hca
        .connect_loopback_pair(&mut rig.tx, &mut rig.rx)
        .unwrap();
}

/// The QP events that came, waiting (bounded) for at least `n`, as (QPN,
/// event); any other event fails.
fn qp_events(rig: &Rig, n: usize) -> Vec<(u32, QpEvent)> {
    rig.wait_events(n)
        .iter()
        .map(|e: &Event| e.qp_event().unwrap_or_else(|| panic!("event {e:?}")))
        .collect()
}

/// Driver and model agree on both QPs' states.
fn assert_states(rig: &Rig, tx: QpState, rx: QpState, what: &str) {
    let sim = |s| match s {
        QpState::Rts => SimState::Rts,
        QpState::Error => SimState::Err,
        other => unreachable!("{other:?}"),
    };
    assert_eq!((rig.tx.state(), rig.rx.state()), (tx, rx), "{what}: driver");
    assert_eq!(
        (
            rig.dev.qp_state(rig.tx.qpn()),
            rig.dev.qp_state(rig.rx.qpn())
        ),
        (Some(sim(tx)), Some(sim(rx))),
        "{what}: model"
    );
}

/// Post one receive of `len` bytes at `addr` with `lkey`, `wr_id`.
fn post_recv(rig: &mut Rig, wr_id: u64, addr: u64, len: u32, lkey: u32) {
    let s = [Sge {
        addr,
        length: len,
        lkey,
    }];
    rig.srq.post(&[RecvRequest { wr_id, sges: &s }]).unwrap();
}

/// Post a SEND of `len` bytes from source buffer 0 through `lkey` (wr_id
/// 10) followed by a good one (wr_id 11); the first fails with `synd`
/// locally, the second is flushed, nothing reaches the receiver.
fn bad_gather(rig: &mut Rig, lkey: u32, addr: u64, what: &str) {
    let before = rig.srq.outstanding();
    let data = payload(10, 64);
    rig.src.write(0, &data);
    let bad = [Sge {
        addr,
        length: 64,
        lkey,
    }];
    let good = [rig.hca.sge(rig.src.iova(0), 64)];
    let reqs = [(10, &bad[..]), (11, &good[..])].map(|(wr_id, s)| SendRequest {
        wr_id,
        op: SendOp::Send,
        payload: Payload::Sges(s),
        signaled: true,
        solicited: false,
    });
    rig.tx.post_send(&reqs).unwrap();
    let c = rig.wait_send(2);
    assert_eq!(
        (c[0].wr_id, c[0].retired, c[0].error()),
        (10, 1, Some(CqeError::LocalProtection)),
        "{what}"
    );
    assert_eq!(
        (c[1].wr_id, c[1].error()),
        (11, Some(CqeError::WrFlush)),
        "{what}"
    );
    assert_states(rig, QpState::Error, QpState::Rts, what);
    assert_eq!(rig.srq.outstanding(), before, "{what}: no receive consumed");
    assert!(drain(&mut rig.rcq).is_empty(), "{what}");
    assert!(
        qp_events(rig, 0).is_empty(),
        "{what}: reported by the CQE only"
    );
    assert_eq!(rig.dev.traffic().stats().messages, 0, "{what}");
}

fn bad_lkeys(cfg: RigConfig) {
    let what = cfg.name();
    let mut rig = Rig::new(cfg);
    rig.post_recvs(1);
    let dma = rig.hca.dma_lkey().expect("a DMA key");
    let src = rig.src.iova(0);
    // The DMA key with another variant byte (a stale key).
    bad_gather(&mut rig, dma ^ 0x01, src, &format!("{what}: stale key"));
    reconnect(&mut rig);
    // A key index never created.
    let never = mkey::key(0xf0_0000, 0x01);
    bad_gather(&mut rig, never, src, &format!("{what}: unknown key"));
    reconnect(&mut rig);
    // A good key but an address outside DMA memory.
    let outside = rig.dev.iova_base() - 0x10_0000;
    bad_gather(&mut rig, dma, outside, &format!("{what}: unmapped address"));
    // The posted receive is untouched (all zero) and still works.
    assert!(rig.dst.read(0, 256).iter().all(|&b| b == 0), "{what}");
    reconnect(&mut rig);
    rig.send(0, 64);
    rig.expect_message(0, 64);
    // The unmapped gather was seen (and refused) by the IOMMU.
    rig.finish_with_faults(&what, 1);
}

#[test]
fn bad_lkey_on_a_send_is_a_local_protection_error_and_writes_nothing() {
    for mode in MODES {
        bad_lkeys(RigConfig::new(Profile::ConnectX5, mode));
    }
    bad_lkeys(RigConfig::new(Profile::ConnectX4Lx, ExecMode::Synchronous));
    bad_lkeys(RigConfig::new(Profile::ConnectX7, ExecMode::Synchronous).ib());
}

/// ALLOC_PD and a PA key with every local and remote-write right on that
/// PD, both raw (the driver has one PD): (pd, key).
fn foreign_key(rig: &Rig) -> (u32, u32) {
    let mut out = [0u8; encode::ALLOC_PD_OUT];
    rig.hca.exec(&encode::alloc_pd(), &mut out).unwrap();
    let pd = encode::parse_alloc_pd(&out);
    assert_ne!(pd, rig.hca.pd());
    let access = MkeyAccess::LOCAL_READ | MkeyAccess::LOCAL_WRITE | MkeyAccess::REMOTE_WRITE;
    let input = mkcmd::create_mkey_pa(pd, access, 0x42).unwrap();
    let mut out = [0u8; mkcmd::CREATE_MKEY_OUT];
    rig.hca.exec(&input, &mut out).unwrap();
    (pd, mkey::key(mkcmd::parse_create_mkey(&out), 0x42))
}

#[test]
fn a_key_of_another_protection_domain_is_refused_on_every_side() {
    for mode in MODES {
        let cfg = RigConfig::new(Profile::ConnectX6Dx, mode);
        let what = cfg.name();
        let mut rig = Rig::new(cfg);
        let (pd, key) = foreign_key(&rig);

        // As the sender's lkey: local protection, nothing sent.
        rig.post_recvs(1);
        let src = rig.src.iova(0);
        bad_gather(&mut rig, key, src, &format!("{what}: send lkey"));
        assert!(rig.dst.read(0, 256).iter().all(|&b| b == 0), "{what}");

        // As the receive WQE's lkey: the responder's CQE names the WQE with
        // a local protection error, the sender gets a remote operation
        // error, both QPs go to ERR, nothing is written.
        reconnect(&mut rig);
        rig.send(0, 64); // consumes the good receive posted above
        rig.expect_message(0, 64);
        rig.wait_send(1);
        rig.dst.clear(1, 0);
        let at = rig.dst.iova(1);
        post_recv(&mut rig, 77, at, 256, key);
        rig.send(1, 64);
        let (r, _) = rig.wait_recv(1).pop().unwrap();
        assert_eq!(r.wr_id, 77, "{what}: the WQE is named and freed");
        assert!(
            matches!(r.status, CqeStatus::Error { syndrome: 0x04, .. }),
            "{what}: {r:?}"
        );
        assert_eq!(r.opcode, CqeOpcode::RESP_ERR, "{what}");
        let s = rig.wait_send(1);
        assert_eq!(
            (s[0].wr_id, s[0].error()),
            (1, Some(CqeError::RemoteOperation)),
            "{what}"
        );
        assert_states(&rig, QpState::Error, QpState::Error, &what);
        let rx = rig.rx.qpn();
        assert_eq!(
            qp_events(&rig, 1),
            [(rx, QpEvent::LastWqeReached)],
            "{what}"
        );
        assert!(rig.dst.read(1, 256).iter().all(|&b| b == 0), "{what}");
        assert_eq!(rig.srq.outstanding(), 0, "{what}");

        // As an RDMA WRITE rkey (it has remote write, on the wrong PD).
        reconnect(&mut rig);
        let target = rig.dst.iova(2);
        bad_rdma_write(&mut rig, key, target, &format!("{what}: rkey"));

        // Clean up the raw objects.
        let mut out = [0u8; mkcmd::DESTROY_MKEY_OUT];
        let input = mkcmd::destroy_mkey(key).unwrap();
        rig.hca.exec(&input, &mut out).unwrap();
        let mut out = [0u8; encode::DEALLOC_PD_OUT];
        let input = encode::dealloc_pd(pd).unwrap();
        rig.hca.exec(&input, &mut out).unwrap();
        rig.finish(&what);
    }
}

/// An RDMA WRITE of 64 bytes to `raddr` through `rkey` that the responder
/// refuses: remote access error at the sender, the responder in ERR with
/// an access-error and a last-WQE event, the target untouched.
fn bad_rdma_write(rig: &mut Rig, rkey: u32, raddr: u64, what: &str) {
    rig.dst.clear(2, 0x33);
    let data = payload(5, 64);
    rig.src.write(3, &data);
    let sge = [rig.hca.sge(rig.src.iova(3), 64)];
    rig.tx
        .post_send(&[SendRequest {
            wr_id: 55,
            op: SendOp::RdmaWrite { raddr, rkey },
            payload: Payload::Sges(&sge),
            signaled: true,
            solicited: false,
        }])
        .unwrap();
    let s = rig.wait_send(1);
    assert_eq!(
        (s[0].wr_id, s[0].opcode, s[0].error()),
        (55, SendOpcode::RdmaWrite, Some(CqeError::RemoteAccess)),
        "{what}"
    );
    // The responder's error reaches the driver through events only.
    assert_eq!(
        rig.rx.state(),
        QpState::Rts,
        "{what}: no CQE for the responder"
    );
    let rx = rig.rx.qpn();
    let evs = rig.wait_events(2);
    let got: Vec<_> = evs.iter().map(|e| rig.rx.handle_event(e)).collect();
    assert_eq!(
        got,
        [Some(QpEvent::AccessError), Some(QpEvent::LastWqeReached)],
        "{what}: {evs:?}"
    );
    assert!(evs.iter().all(|e| e.qp_event().unwrap().0 == rx));
    assert_states(rig, QpState::Error, QpState::Error, what);
    assert!(
        rig.dst.read(2, 256).iter().all(|&b| b == 0x33),
        "{what}: target written"
    );
    assert!(drain(&mut rig.rcq).is_empty(), "{what}");
}

#[test]
fn rdma_write_lands_exactly_and_bad_rkeys_are_remote_access_errors() {
    for mode in MODES {
        let cfg = RigConfig::new(Profile::ConnectX4Lx, mode);
        let what = cfg.name();
        let mut rig = Rig::new(cfg);
        let rights = MkeyAccess::LOCAL_WRITE | MkeyAccess::REMOTE_WRITE;
        let (first, last) = (rig.dst.iova(0), rig.dst.iova(rig.dst.count() - 1));
        let span = last + rig.dst.size() as u64 - first;
        let rw = rig.hca.register(first, span, rights).unwrap();

        // Good: 100 bytes at offset 8 of buffer 2, nothing else changes; no
        // receive consumed. Then WRITE with immediate: one receive.
        rig.dst.clear(2, 0x33);
        let data = payload(9, 100);
        rig.src.write(4, &data);
        let sge = [rig.hca.sge(rig.src.iova(4), 100)];
        let raddr = rig.dst.iova(2) + 8;
        rig.post_recvs(1);
        let write = |imm: Option<u32>, wr_id| SendRequest {
            wr_id,
            op: match imm {
                None => SendOp::RdmaWrite {
                    raddr,
                    rkey: rw.key(),
                },
                Some(imm) => SendOp::RdmaWriteImm {
                    raddr,
                    rkey: rw.key(),
                    imm,
                },
            },
            payload: Payload::Sges(&sge),
            signaled: true,
            solicited: false,
        };
        rig.tx.post_send(&[write(None, 1)]).unwrap();
        let s = rig.wait_send(1);
        assert_eq!((s[0].wr_id, s[0].error()), (1, None), "{what}");
        let got = rig.dst.read(2, 256);
        assert_eq!(&got[8..108], &data[..], "{what}: written");
        assert!(got[..8].iter().chain(&got[108..]).all(|&b| b == 0x33));
        assert_eq!(rig.srq.outstanding(), 1, "{what}: no receive consumed");
        rig.dst.clear(2, 0x33);
        rig.tx.post_send(&[write(Some(0xabcd_0123), 2)]).unwrap();
        let (r, _) = rig.wait_recv(1).pop().unwrap();
        assert_eq!(
            (r.opcode, r.imm, r.byte_len, r.status),
            (CqeOpcode::RESP_WR_IMM, 0xabcd_0123, 100, CqeStatus::Success),
            "{what}"
        );
        assert_eq!(&rig.dst.read(2, 256)[8..108], &data[..], "{what}");
        assert_eq!(rig.wait_send(1)[0].wr_id, 2, "{what}");

        // Refused: the DMA key (no remote write), a stale variant, an
        // address outside DMA memory.
        let dma = rig.hca.dma_lkey().unwrap();
        let target = rig.dst.iova(2);
        bad_rdma_write(&mut rig, dma, target, &format!("{what}: no rw right"));
        reconnect(&mut rig);
        let stale = rw.key() ^ 0x80;
        bad_rdma_write(&mut rig, stale, target, &format!("{what}: stale rkey"));
        reconnect(&mut rig);
        // A key registered over memory the device cannot reach: the
        // access faults in the IOMMU.
        let outside = rig.dev.iova_base() - 0x10_0000;
        let far = rig.hca.register(outside, 4096, rights).unwrap();
        bad_rdma_write(&mut rig, far.key(), outside, &format!("{what}: unmapped"));
        rig.hca.destroy_mkey(far).map_err(|e| e.error()).unwrap();
        rig.hca.destroy_mkey(rw).map_err(|e| e.error()).unwrap();
        rig.finish_with_faults(&what, 1);
    }
}

#[test]
fn a_message_longer_than_the_receive_buffer_is_a_length_error_on_both_sides() {
    for mode in MODES {
        let cfg = RigConfig::new(Profile::ConnectX5, mode);
        let what = cfg.name();
        let mut rig = Rig::new(cfg);
        let small = Bufs::new(&rig.dev, 3, 64);
        // Exactly the buffer: fits, guards intact.
        small.clear(0, 0);
        let lkey = rig.hca.default_lkey();
        post_recv(&mut rig, 100, small.iova(0), 64, lkey);
        rig.send(0, 64);
        let (r, _) = rig.wait_recv(1).pop().unwrap();
        assert_eq!((r.wr_id, r.byte_len), (100, 64), "{what}");
        assert_eq!(small.read(0, 64), payload(0, 64), "{what}");
        rig.wait_send(1);
        small.assert_guards(&what);

        // One byte more, into one buffer; then into two 32-byte entries.
        for (k, sges) in [
            vec![Sge {
                addr: small.iova(1),
                length: 64,
                lkey,
            }],
            vec![
                Sge {
                    addr: small.iova(2),
                    length: 32,
                    lkey,
                },
                Sge {
                    addr: small.iova(2) + 32,
                    length: 32,
                    lkey,
                },
            ],
        ]
        .iter()
        .enumerate()
        {
            let w = format!("{what}: {} entries", sges.len());
            let wr_id = 200 + k as u64;
            rig.srq
                .post(&[RecvRequest {
                    wr_id,
                    sges: sges.as_slice(),
                }])
                .unwrap();
            rig.send(1 + k as u64, 65);
            let (r, _) = rig.wait_recv(1).pop().unwrap();
            assert_eq!(r.wr_id, wr_id, "{w}: the WQE is named and freed");
            assert!(
                matches!(r.status, CqeStatus::Error { syndrome: 0x01, .. }),
                "{w}: local length error, got {r:?}"
            );
            let s = rig.wait_send(1);
            assert_eq!(
                (s[0].wr_id, s[0].error()),
                (1 + k as u64, Some(CqeError::RemoteInvalidRequest)),
                "{w}"
            );
            assert_states(&rig, QpState::Error, QpState::Error, &w);
            let rx = rig.rx.qpn();
            assert_eq!(qp_events(&rig, 1), [(rx, QpEvent::LastWqeReached)], "{w}");
            small.assert_guards(&w);
            assert_eq!(rig.srq.outstanding(), 0, "{w}");
            reconnect(&mut rig);
        }
        drop(small);
        rig.finish(&what);
    }
}

/// A fresh receive-only QP on the rig's SRQ, in RESET.
fn spare_receiver(rig: &mut Rig) -> mlx5_driver::qp::Qp<mlx5_sim::SimHal> {
    let links = QpLinks {
        recv_cq: Some(&mut rig.rcq),
        srq: Some(&mut rig.srq),
        ..QpLinks::default()
    };
    rig.hca.create_qp(None, links, []).unwrap()
}

#[test]
fn a_destroyed_peer_ends_in_transport_retry_exceeded_and_a_destroyed_sender_sends_nothing() {
    for mode in MODES {
        let what = format!("{mode:?}");
        let mut rig = Rig::new(RigConfig::new(Profile::ConnectX5, mode));
        // The receiver goes away while 5 SENDs wait on its empty SRQ.
        rig.send_batch(0..5, 32, |_| true).unwrap();
        rig.settle(3_000);
        assert!(rig.dev.qp(rig.tx.qpn()).unwrap().waiting, "{what}");
        let spare = spare_receiver(&mut rig);
        let gone = std::mem::replace(&mut rig.rx, spare);
        let links = QpLinks {
            recv_cq: Some(&mut rig.rcq),
            srq: Some(&mut rig.srq),
            ..QpLinks::default()
        };
        rig.hca
            .destroy_qp(gone, links)
            .map_err(|e| e.error())
            .unwrap();
        rig.post_recvs(5);
        // No ACK any more: 7 retries of the ACK timeout, then 0x15; the
        // rest are flushed.
        let c = rig.wait_send(5);
        assert_eq!(
            (c[0].wr_id, c[0].error()),
            (0, Some(CqeError::TransportRetryExceeded)),
            "{what}"
        );
        for (k, c) in c.iter().enumerate().skip(1) {
            assert_eq!((c.wr_id, c.error()), (k as u64, Some(CqeError::WrFlush)));
        }
        let stats = rig.dev.traffic().stats();
        assert_eq!((stats.ack_timeouts, stats.messages), (8, 0), "{what}");
        assert!(drain(&mut rig.rcq).is_empty(), "{what}");

        // Now the sender goes away while SENDs wait: nothing is delivered
        // afterwards and its freed ring is never touched.
        reconnect(&mut rig);
        let waiting = rig.srq.outstanding();
        assert_eq!(waiting, 5, "{what}: the receives are still posted");
        rig.send_batch(10..15, 32, |_| true).unwrap();
        for seq in 10..15 {
            rig.expect_message(seq, 32);
        }
        rig.wait_send(5);
        rig.send_batch(20..23, 32, |_| true).unwrap();
        rig.settle(3_000);
        assert!(rig.dev.qp(rig.tx.qpn()).unwrap().waiting, "{what}");
        let caps = rig.cfg.sq;
        let g = rig.hca.send_queue_geometry(&caps).unwrap();
        let links = QpLinks {
            send_cq: Some(&mut rig.scq),
            ..QpLinks::default()
        };
        let fresh = rig
            .hca
            .create_qp(
                Some(caps),
                links,
                vec![mlx5_driver::qp::SendSlot::EMPTY; g.wqebbs()],
            )
            .unwrap();
        let gone = std::mem::replace(&mut rig.tx, fresh);
        let links = QpLinks {
            send_cq: Some(&mut rig.scq),
            ..QpLinks::default()
        };
        rig.hca
            .destroy_qp(gone, links)
            .map_err(|e| e.error())
            .unwrap();
        rig.post_recvs(3);
        rig.settle(5_000);
        assert!(drain(&mut rig.rcq).is_empty(), "{what}: nothing arrives");
        assert!(drain(&mut rig.scq).is_empty(), "{what}: no CQE");
        assert_eq!(rig.dev.traffic().stats().messages, 5, "{what}");
        rig.finish(&what);
    }
}
