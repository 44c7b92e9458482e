//! READ and atomics through the facade between two modelled hosts on one
//! wire (RoCE v2 over IPv6 link-local GIDs, each host's bring-up GID):
//! READ responses cut at the path MTU, and an atomic whose ATOMIC_ACKNOWLEDGE
//! is dropped by the wire is sent again and answered from the responder's
//! saved result, executed once.

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
    connect_rd(&mut a.ctx, a.qp, qb, ah_b, all, 4).unwrap();
    connect_rd(&mut b.ctx, b.qp, qa, ah_a, all, 4).unwrap();
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

#[test]
fn an_atomic_whose_acknowledge_is_lost_is_retried_and_executes_once() {
    big_stack(lost_atomic_acknowledge);
}

fn lost_atomic_acknowledge() {
    let (wire, mut a, b) = hosts();
    b.buf.write_bytes(4096, &500u64.to_ne_bytes());
    // The next frames: 0 the FETCH_ADD, 1 its ATOMIC_ACKNOWLEDGE (dropped),
    // 2 the FETCH_ADD again, 3 the acknowledge replayed.
    wire.set_faults(Faults {
        chosen: vec![(wire.stats().frames + 1, Fault::Drop)],
        ..Faults::default()
    });
    let result = [a.sge(64, 8)];
    let wr = atomic_wr(
        8,
        WrOpcode::AtomicFetchAndAdd,
        &result,
        b.buf.iova() + 4096,
        b.mr.as_ref().unwrap().rkey(),
        25,
        0,
    );
    a.ctx.post_send(a.qp, &[wr]).unwrap();
    let wc = wait_one(&mut a, &b);
    assert_eq!(
        (wc.status, wc.opcode),
        (WcStatus::Success, WcOpcode::FetchAdd)
    );
    let mut v = [0u8; 8];
    a.buf.read_bytes(64, &mut v);
    assert_eq!(u64::from_ne_bytes(v), 500, "the original value");
    b.buf.read_bytes(4096, &mut v);
    assert_eq!(u64::from_ne_bytes(v), 525, "added once");
    let (sa, sb) = (a.dev.traffic().stats(), b.dev.traffic().stats());
    assert_eq!(sa.retransmissions, 1, "the request was sent again");
    assert_eq!((sb.atomics_executed, sb.rd_atomic_replays), (1, 1));
    assert_eq!(wire.stats().dropped, 1);
    a.close();
    b.close();
}
