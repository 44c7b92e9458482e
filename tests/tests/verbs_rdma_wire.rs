//! READ and atomics through the facade between two modelled hosts on one
//! wire (RoCE v2 over IPv6 link-local GIDs, each host's bring-up GID):
//! READ responses cut at the path MTU, and an atomic whose ATOMIC_ACKNOWLEDGE
//! is dropped by the wire is sent again and answered from the responder's
//! saved result, executed once; the requester never has more READs and
//! atomics in flight than `max_rd_atomic`, and a repeated request is
//! answered from the responder's resources only while it is among the
//! last `max_dest_rd_atomic` (docs/fidelity.md, responder resources).

use mlx5_tests::hosts::{self, RecvQueue, Transport};
use mlx5_tests::verbs_common::*;

use crate::verbs_rdma::{atomic_wr, connect_rd};
use mlx5_driver::verbs::{
    AccessFlags, CqHandle, Mr, QpCap, QpHandle, QpInitAttr, SendFlags, SendWr, Sge, Verbs,
    WcOpcode, WcStatus, WrOpcode,
};
use mlx5_hal::{DmaRegion, Hal};
use mlx5_sim::wire::{Fault, Faults, LinkType, Wire};
use mlx5_sim::{Device, Profile, SimConfig, SimHal};

/// One host: a device on the wire, a context, a CQ, a QP, a buffer.
struct Host {
    dev: Device,
    ctx: Ctx,
    cq: CqHandle,
    qp: QpHandle,
    buf: DmaRegion<SimHal>,
    mr: Option<Mr>,
}

const BUF: usize = 256 * 1024;

impl Host {
    fn new(seed: u64, wire: &Wire) -> Host {
        // ConnectX-4 Lx: bring-up programs a RoCE v2 link-local GID.
        let dev = Device::new(SimConfig {
            seed,
            ..SimConfig::profile(Profile::ConnectX4Lx)
        });
        dev.connect(wire).unwrap();
        let mut ctx = Verbs::open(mlx5_tests::bring_up(&dev));
        let (cq, _) = ctx.create_cq(63).unwrap();
        let (qp, _) = ctx
            .create_qp(&QpInitAttr {
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: 16,
                    max_send_sge: 2,
                    max_recv_wr: 4,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: false,
            })
            .unwrap();
        let buf = dev.hal().alloc_dma(BUF).unwrap();
        let all = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC;
        let mr = ctx.reg_mr(buf.iova(), BUF as u64, all).unwrap();
        Host {
            dev,
            ctx,
            cq,
            qp,
            buf,
            mr: Some(mr),
        }
    }

    fn sge(&self, off: usize, len: u32) -> Sge {
        Sge {
            addr: self.buf.iova() + off as u64,
            length: len,
            lkey: self.mr.as_ref().unwrap().lkey(),
        }
    }

    fn close(mut self) {
        while let Ok(ev) = self.ctx.get_async_event() {
            self.ctx.ack_async_event(&ev).unwrap();
        }
        self.ctx.destroy_qp(self.qp).unwrap();
        self.ctx.destroy_cq(self.cq).unwrap();
        self.ctx
            .dereg_mr(self.mr.take().unwrap())
            .map_err(|(_, e)| e)
            .unwrap();
        close(&self.dev, self.ctx, "wire host");
    }
}

/// Two hosts whose QPs are connected to each other over the wire.
fn hosts() -> (Wire, Host, Host) {
    hosts_with(4)
}

/// [`hosts`] with `depth` reads/atomics each way (`max_rd_atomic` and
/// `max_dest_rd_atomic`).
fn hosts_with(depth: u8) -> (Wire, Host, Host) {
    let wire = Wire::new(LinkType::Ethernet);
    let mut a = Host::new(11, &wire);
    let mut b = Host::new(22, &wire);
    let all = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    // Each host's loopback address vector names its own GID: the peer's is
    // the one to reach it.
    let (ah_a, ah_b) = (a.ctx.loopback_ah().unwrap(), b.ctx.loopback_ah().unwrap());
    let (qa, qb) = (a.ctx.qp_num(a.qp).unwrap(), b.ctx.qp_num(b.qp).unwrap());
    connect_rd(&mut a.ctx, a.qp, qb, ah_b, all, depth).unwrap();
    connect_rd(&mut b.ctx, b.qp, qa, ah_a, all, depth).unwrap();
    (wire, a, b)
}

/// Poll `a`'s CQ for one completion, letting device time pass on both.
fn wait_one(a: &mut Host, b: &Host) -> mlx5_driver::verbs::WorkCompletion {
    let mut wc = [mlx5_driver::verbs::WorkCompletion::EMPTY; 1];
    for _ in 0..20_000 {
        if a.ctx.poll_cq(a.cq, &mut wc).unwrap() == 1 {
            return wc[0];
        }
        a.dev.advance_us(50);
        b.dev.advance_us(50);
    }
    panic!("no completion");
}

/// Run `f` on a thread with room for two verbs contexts (their tables are
/// arrays held by value).
fn big_stack(f: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new()
        .stack_size(64 << 20)
        .spawn(f)
        .unwrap()
        .join()
        .unwrap();
}

#[test]
fn reads_cross_the_wire_segmented_at_the_mtu() {
    big_stack(reads_cross_the_wire);
}

fn reads_cross_the_wire() {
    let (_wire, mut a, b) = hosts();
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 3 % 253) as u8).collect();
    b.buf.write_bytes(1000, &data);
    let dst = [a.sge(0, 2500), a.sge(8192, 2500)];
    let wr = SendWr {
        wr_id: 5,
        opcode: WrOpcode::RdmaRead,
        send_flags: SendFlags::SIGNALED,
        sg_list: &dst,
        remote_addr: b.buf.iova() + 1000,
        rkey: b.mr.as_ref().unwrap().rkey(),
        ..SendWr::EMPTY
    };
    let before = b.dev.traffic().stats().wire_tx;
    a.ctx.post_send(a.qp, &[wr]).unwrap();
    let wc = wait_one(&mut a, &b);
    assert_eq!(
        (wc.status, wc.opcode, wc.byte_len),
        (WcStatus::Success, WcOpcode::RdmaRead, 5000)
    );
    let mut got = vec![0u8; 5000];
    a.buf.read_bytes(0, &mut got[..2500]);
    a.buf.read_bytes(8192, &mut got[2500..]);
    assert!(got == data, "the remote bytes");
    // 5000 bytes at MTU 1024: FIRST, three MIDDLE, LAST.
    assert_eq!(b.dev.traffic().stats().wire_tx - before, 5);
    a.close();
    b.close();
}

/// On every model profile (two cards of the profile on one Ethernet wire,
/// RoCE v2 over their link-local GIDs, set up as `mlx5 pingpong` does),
/// with the QP's own receive queue and with an SRQ.
#[test]
fn an_atomic_whose_acknowledge_is_lost_is_retried_and_executes_once() {
    big_stack(|| {
        for profile in mlx5_tests::PROFILES {
            for rq in [RecvQueue::Own, RecvQueue::Srq] {
                lost_atomic_acknowledge(profile, rq);
            }
        }
    });
}

fn lost_atomic_acknowledge(profile: Profile, rq: RecvQueue) {
    let at = format!("{profile:?}, {rq:?}");
    let (wire, mut a, b) = hosts::rd_pair_of([profile; 2], Transport::RoceV2Ipv6, rq, 4);
    b.buf.write_bytes(hosts::WRITE_AT, &500u64.to_ne_bytes());
    // The next frames: 0 the FETCH_ADD, 1 its ATOMIC_ACKNOWLEDGE (dropped),
    // 2 the FETCH_ADD again, 3 the acknowledge replayed.
    wire.set_faults(Faults {
        chosen: vec![(wire.stats().frames + 1, Fault::Drop)],
        ..Faults::default()
    });
    let result = [Sge {
        addr: a.buf.iova() + hosts::SEND_AT as u64,
        length: 8,
        lkey: a.lkey(),
    }];
    let wr = atomic_wr(
        8,
        WrOpcode::AtomicFetchAndAdd,
        &result,
        b.addr.addr + hosts::WRITE_AT as u64,
        b.addr.rkey,
        25,
        0,
    );
    a.ctx.post_send(a.qp, &[wr]).unwrap();
    let wc = hosts::wait_one(&mut a, true, &b.dev).unwrap_or_else(|| panic!("{at}: no completion"));
    assert_eq!(
        (wc.status, wc.opcode, wc.wr_id),
        (WcStatus::Success, WcOpcode::FetchAdd, 8),
        "{at}"
    );
    let mut v = [0u8; 8];
    a.buf.read_bytes(hosts::SEND_AT, &mut v);
    assert_eq!(u64::from_ne_bytes(v), 500, "{at}: the original value");
    b.buf.read_bytes(hosts::WRITE_AT, &mut v);
    assert_eq!(u64::from_ne_bytes(v), 525, "{at}: added once");
    let (sa, sb) = (a.dev.traffic().stats(), b.dev.traffic().stats());
    assert_eq!(sa.retransmissions, 1, "{at}: the request was sent again");
    assert_eq!(
        (sb.atomics_executed, sb.rd_atomic_replays),
        (1, 1),
        "{at}: executed once, answered again from the saved result"
    );
    assert_eq!(wire.stats().dropped, 1, "{at}");
    hosts::close(a, "host 1");
    hosts::close(b, "host 2");
}

/// A pcap sink the test reads back.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Start capturing `wire`; the returned closure ends it and gives the
/// frames.
fn capture(wire: &Wire) -> impl FnOnce() -> Vec<Vec<u8>> + '_ {
    let sink = Captured::default();
    wire.capture(Box::new(sink.clone())).unwrap();
    move || {
        wire.end_capture().unwrap();
        let bytes = sink.0.lock().unwrap().clone();
        let (_, recs) = mlx5_sim::wire::read_pcap(&bytes[..]).unwrap();
        recs.into_iter().map(|r| r.data).collect()
    }
}

/// The BTH of a captured Ethernet frame.
fn bth_of(frame: &[u8]) -> mlx5_sim::wire::Bth {
    mlx5_sim::wire::parse(LinkType::Ethernet, frame)
        .expect("a RoCE frame")
        .packet
        .bth
}

#[test]
fn a_requester_never_has_more_reads_and_atomics_in_flight_than_max_rd_atomic() {
    big_stack(|| {
        use mlx5_sim::wire::opcode as op;
        for depth in [1u8, 4] {
            let (wire, mut a, b) = hosts_with(depth);
            let (qa, qb) = (a.ctx.qp_num(a.qp).unwrap(), b.ctx.qp_num(b.qp).unwrap());
            let rkey = b.mr.as_ref().unwrap().rkey();
            b.buf
                .write_bytes(8192, &mlx5_tests::hosts::pattern(3000, 7));
            b.buf.write_bytes(4096, &0u64.to_ne_bytes());
            let done = capture(&wire);
            // Eight READs of 3000 bytes (three responses each at MTU 1024)
            // and eight FETCH_ADDs, in one post.
            let sges: Vec<[Sge; 1]> = (0..8).map(|i| [a.sge(16384 + i * 4096, 3000)]).collect();
            let results: Vec<[Sge; 1]> = (0..8).map(|i| [a.sge(64 + i * 8, 8)]).collect();
            let mut wrs = Vec::new();
            for i in 0..8 {
                wrs.push(SendWr {
                    wr_id: 2 * i as u64,
                    opcode: WrOpcode::RdmaRead,
                    send_flags: SendFlags::SIGNALED,
                    sg_list: &sges[i],
                    remote_addr: b.buf.iova() + 8192,
                    rkey,
                    ..SendWr::EMPTY
                });
                wrs.push(atomic_wr(
                    2 * i as u64 + 1,
                    WrOpcode::AtomicFetchAndAdd,
                    &results[i],
                    b.buf.iova() + 4096,
                    rkey,
                    1,
                    0,
                ));
            }
            a.ctx.post_send(a.qp, &wrs).unwrap();
            for i in 0..16u64 {
                let wc = wait_one(&mut a, &b);
                assert_eq!(
                    (wc.wr_id, wc.status),
                    (i, WcStatus::Success),
                    "depth {depth}"
                );
            }
            let frames = done();
            // Walk the wire: a request toward B opens one (a repeat of a
            // PSN already open does not), the last response or the
            // acknowledge toward A closes the oldest.
            let mut open: std::collections::VecDeque<u32> = Default::default();
            let (mut most, mut requests) = (0, 0);
            for f in &frames {
                let bth = bth_of(f);
                match bth.opcode {
                    op::READ_REQUEST | op::FETCH_ADD | op::COMPARE_SWAP
                        if bth.dest_qp == qb && !open.contains(&bth.psn) =>
                    {
                        open.push_back(bth.psn);
                        requests += 1;
                    }
                    op::READ_RESPONSE_LAST | op::READ_RESPONSE_ONLY | op::ATOMIC_ACKNOWLEDGE
                        if bth.dest_qp == qa =>
                    {
                        open.pop_front().expect("a response to an open request");
                    }
                    _ => {}
                }
                most = most.max(open.len());
            }
            assert_eq!(requests, 16, "depth {depth}: every request on the wire");
            assert!(
                (1..=depth as usize).contains(&most),
                "depth {depth}: {most} READs/atomics were in flight at once"
            );
            let mut v = [0u8; 8];
            b.buf.read_bytes(4096, &mut v);
            assert_eq!(u64::from_ne_bytes(v), 8, "eight adds");
            for i in 0..8 {
                let mut got = vec![0u8; 3000];
                a.buf.read_bytes(16384 + i * 4096, &mut got);
                assert_eq!(got, mlx5_tests::hosts::pattern(3000, 7), "READ {i}");
            }
            a.close();
            b.close();
        }
    });
}

/// Two FETCH_ADDs, then the first one's request frame put on the wire
/// again (a duplicate arriving late): returns B's traffic figures before
/// and after, and the value at B.
#[allow(clippy::type_complexity)]
fn late_duplicate(
    depth: u8,
) -> (
    mlx5_sim::TrafficStats,
    mlx5_sim::TrafficStats,
    u64,
    Wire,
    Host,
    Host,
) {
    use mlx5_sim::wire::opcode as op;
    let (wire, mut a, b) = hosts_with(depth);
    let qb = b.ctx.qp_num(b.qp).unwrap();
    let rkey = b.mr.as_ref().unwrap().rkey();
    b.buf.write_bytes(4096, &500u64.to_ne_bytes());
    let done = capture(&wire);
    for (i, add) in [(0u64, 1u64), (1, 10)] {
        let result = [a.sge(64 + i as usize * 8, 8)];
        let wr = atomic_wr(
            i,
            WrOpcode::AtomicFetchAndAdd,
            &result,
            b.buf.iova() + 4096,
            rkey,
            add,
            0,
        );
        a.ctx.post_send(a.qp, &[wr]).unwrap();
        let wc = wait_one(&mut a, &b);
        assert_eq!((wc.wr_id, wc.status), (i, WcStatus::Success));
    }
    let frames = done();
    let first = frames
        .iter()
        .find(|f| {
            let bth = bth_of(f);
            bth.opcode == op::FETCH_ADD && bth.dest_qp == qb
        })
        .expect("the first FETCH_ADD on the wire")
        .clone();
    let before = b.dev.traffic().stats();
    let port = wire.connect(0);
    wire.send(port, 0, &first);
    wire.pump();
    for _ in 0..10 {
        a.dev.advance_us(50);
        b.dev.advance_us(50);
    }
    let after = b.dev.traffic().stats();
    let mut v = [0u8; 8];
    b.buf.read_bytes(4096, &mut v);
    (before, after, u64::from_ne_bytes(v), wire, a, b)
}

/// The responder keeps its last `max_dest_rd_atomic` READs/atomics for
/// replay and recycles the oldest beyond them (rxe's resource ring): a
/// late duplicate of a request still held is answered again with the
/// saved original value, one no longer held is dropped; neither executes
/// again, and the requester (which ignores the stale answer) goes on.
#[test]
fn a_late_duplicate_is_replayed_only_while_the_responder_holds_its_resource() {
    big_stack(|| {
        for (depth, replayed) in [(1u8, false), (2, true)] {
            let (before, after, value, _wire, mut a, b) = late_duplicate(depth);
            let tag = format!("max_dest_rd_atomic {depth}");
            assert_eq!(value, 511, "{tag}: executed once each");
            assert_eq!(after.atomics_executed, before.atomics_executed, "{tag}");
            assert_eq!(after.duplicates, before.duplicates + 1, "{tag}");
            if replayed {
                assert_eq!(
                    after.rd_atomic_replays,
                    before.rd_atomic_replays + 1,
                    "{tag}"
                );
                assert_eq!(after.wire_dropped, before.wire_dropped, "{tag}");
            } else {
                assert_eq!(after.rd_atomic_replays, before.rd_atomic_replays, "{tag}");
                assert_eq!(
                    after.wire_dropped,
                    before.wire_dropped + 1,
                    "{tag}: dropped"
                );
            }
            // Both QPs still work: one more FETCH_ADD sees 511.
            let rkey = b.mr.as_ref().unwrap().rkey();
            let result = [a.sge(200, 8)];
            let wr = atomic_wr(
                9,
                WrOpcode::AtomicFetchAndAdd,
                &result,
                b.buf.iova() + 4096,
                rkey,
                1,
                0,
            );
            a.ctx.post_send(a.qp, &[wr]).unwrap();
            let wc = wait_one(&mut a, &b);
            assert_eq!((wc.wr_id, wc.status), (9, WcStatus::Success), "{tag}");
            let mut v = [0u8; 8];
            a.buf.read_bytes(200, &mut v);
            assert_eq!(u64::from_ne_bytes(v), 511, "{tag}");
            a.close();
            b.close();
        }
    });
}
