//! A two-host RC ping-pong on the model beside the same ping-pong inside
//! one card, in one run (the ratio is the wire's share):
//!
//! - `pingpong_model/loopback/64`: one device, two RC QPs on SRQs
//!   connected to each other in bring-up's loopback mode (the card's
//!   frames loop inside it), through the verbs facade: QP 1 sends 64
//!   bytes, QP 2 receives them and sends 64 back, QP 1 receives them,
//!   both send completions polled, both receives reposted.
//! - `pingpong_model/two_hosts/64`: the same round trip between two
//!   devices, each with its own driver and verbs context, joined by a
//!   `Wire` and connected over RoCE v2 (IPv4 GIDs, the peer's MAC named)
//!   by the setup `mlx5 pingpong` uses (`mlx5_testbed::Host`): every packet is a built, sent,
//!   parsed and checked Ethernet frame, and each message is ACKed.
//!
//! One iteration is one round trip; criterion's throughput is round trips
//! per second.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use mlx5_driver::qp::Mtu;
use mlx5_driver::verbs::{
    AccessFlags, AhAttr, CqHandle, Mr, QpAttr, QpAttrMask, QpCap, QpHandle, QpInitAttr, RecvWr,
    SendFlags, SendWr, Sge, SrqHandle, SrqInitAttr, Verbs, WcStatus, WorkCompletion, WrOpcode,
};
use mlx5_driver::{Hca, HcaConfig};
use mlx5_hal::{DmaRegion, Hal};
use mlx5_sim::wire::Wire;
use mlx5_sim::{Device, SimConfig, SimHal};
use mlx5_testbed::{ConnectOpts, Host, HostSpec, Transport};

type Ctx = Verbs<SimHal, (), 4, 4, 16, 4, 64>;

const SIZE: usize = 64;
const RECVS: usize = 16;

/// One end: its CQs, SRQ, QP and buffer (send area, then receive slots).
struct End {
    ctx: usize,
    scq: CqHandle,
    rcq: CqHandle,
    srq: SrqHandle,
    qp: QpHandle,
    buf: DmaRegion<SimHal>,
    mr: Mr,
}

/// Two ends in one context (loopback).
struct Rig {
    devs: Vec<Device>,
    ctxs: Vec<Box<Ctx>>,
    ends: Vec<End>,
}

/// Two hosts on a wire.
struct TwoHosts {
    hosts: [Host; 2],
    _wire: Wire,
}

fn end(ctx: &mut Ctx, i: usize, hal: &SimHal) -> End {
    let (scq, _) = ctx.create_cq(63).unwrap();
    let (rcq, _) = ctx.create_cq(63).unwrap();
    let (srq, _) = ctx
        .create_srq(&SrqInitAttr {
            max_wr: RECVS as u32,
            max_sge: 1,
            srq_limit: 0,
            cq: Some(rcq),
        })
        .unwrap();
    let (qp, _) = ctx
        .create_qp(&QpInitAttr {
            send_cq: scq,
            recv_cq: rcq,
            srq: Some(srq),
            cap: QpCap {
                max_send_wr: 8,
                max_send_sge: 1,
                ..QpCap::default()
            },
            sq_sig_all: false,
        })
        .unwrap();
    let buf = hal.alloc_dma(SIZE * (1 + RECVS)).unwrap();
    let mr = ctx
        .reg_mr(
            buf.iova(),
            (SIZE * (1 + RECVS)) as u64,
            AccessFlags::LOCAL_WRITE,
        )
        .unwrap();
    let e = End {
        ctx: i,
        scq,
        rcq,
        srq,
        qp,
        buf,
        mr,
    };
    for s in 0..RECVS {
        post_recv(ctx, &e, s);
    }
    e
}

fn post_recv(ctx: &mut Ctx, e: &End, slot: usize) {
    let sg = [Sge {
        addr: e.buf.iova() + (SIZE * (1 + slot)) as u64,
        length: SIZE as u32,
        lkey: e.mr.lkey(),
    }];
    let wr = RecvWr {
        wr_id: slot as u64,
        sges: &sg,
    };
    ctx.post_srq_recv(e.srq, &[wr]).unwrap();
}

fn connect(ctx: &mut Ctx, e: &End, ah: AhAttr, dest: u32) {
    let a = QpAttr {
        port_num: 1,
        qp_access_flags: AccessFlags::LOCAL_WRITE,
        ah_attr: ah,
        path_mtu: Mtu::B1024,
        dest_qp_num: dest,
        min_rnr_timer: 12,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        ..QpAttr::default()
    };
    for (s, m) in QpAttrMask::RC_CONNECT {
        ctx.modify_qp(e.qp, &QpAttr { qp_state: s, ..a }, m)
            .unwrap();
    }
}

fn open(seed: u64) -> (Device, Box<Ctx>) {
    let dev = Device::new(SimConfig {
        seed,
        ..SimConfig::default()
    });
    let hca = Hca::bring_up(dev.hal(), HcaConfig::default()).unwrap();
    (dev, Box::new(Verbs::open(hca)))
}

impl Rig {
    fn loopback() -> Rig {
        let (dev, mut ctx) = open(1);
        let hal = dev.hal();
        let a = end(&mut ctx, 0, &hal);
        let b = end(&mut ctx, 0, &hal);
        let ah = ctx.loopback_ah().unwrap();
        let (qa, qb) = (ctx.qp_num(a.qp).unwrap(), ctx.qp_num(b.qp).unwrap());
        connect(&mut ctx, &a, ah, qb);
        connect(&mut ctx, &b, ah, qa);
        Rig {
            devs: vec![dev],
            ctxs: vec![ctx],
            ends: vec![a, b],
        }
    }

    /// Wait for one completion on `cq` of end `i`, letting device time pass.
    fn wait(&mut self, i: usize, send: bool) -> WorkCompletion {
        let e = &self.ends[i];
        let cq = if send { e.scq } else { e.rcq };
        let mut wc = [WorkCompletion::EMPTY; 1];
        for _ in 0..1_000_000 {
            if self.ctxs[e.ctx].poll_cq(cq, &mut wc).unwrap() == 1 {
                assert_eq!(wc[0].status, WcStatus::Success);
                return wc[0];
            }
            for d in &self.devs {
                d.advance_us(1);
            }
        }
        panic!("no completion");
    }

    /// End `from` sends 64 bytes to the other; it receives and reposts.
    fn one_way(&mut self, from: usize) {
        let to = 1 - from;
        let e = &self.ends[from];
        let sg = [Sge {
            addr: e.buf.iova(),
            length: SIZE as u32,
            lkey: e.mr.lkey(),
        }];
        let wr = SendWr {
            opcode: WrOpcode::Send,
            send_flags: SendFlags::SIGNALED,
            sg_list: &sg,
            ..SendWr::EMPTY
        };
        self.ctxs[e.ctx].post_send(e.qp, &[wr]).unwrap();
        let r = self.wait(to, false);
        let t = &self.ends[to];
        post_recv(&mut self.ctxs[t.ctx], t, r.wr_id as usize);
        black_box(self.wait(from, true));
    }

    #[inline(never)]
    fn round_trip(&mut self) {
        self.one_way(0);
        self.one_way(1);
    }
}

impl TwoHosts {
    fn new() -> TwoHosts {
        let wire = Wire::new(Transport::RoceV2Ipv4.link_type());
        let host = |n: u8| {
            let dev = Device::new(SimConfig {
                seed: 9 + u64::from(n),
                ..SimConfig::default()
            });
            let spec = HostSpec {
                slot: SIZE,
                recvs: RECVS,
                ..HostSpec::new(Transport::RoceV2Ipv4, n, 0)
            };
            let mut h = Host::new(dev, &wire, HcaConfig::default(), spec).unwrap();
            for s in 0..RECVS {
                h.post_recv(s).unwrap();
            }
            h
        };
        let mut hosts = [host(1), host(2)];
        let (a, b) = (hosts[0].addr, hosts[1].addr);
        let opts = ConnectOpts::new(Mtu::B1024);
        let ah = hosts[0].ah_to(&b);
        hosts[0].connect(ah, &b, &opts).unwrap();
        let ah = hosts[1].ah_to(&a);
        hosts[1].connect(ah, &a, &opts).unwrap();
        TwoHosts { hosts, _wire: wire }
    }

    /// Wait for one completion of host `i`, letting device time pass.
    fn wait(&mut self, i: usize, send: bool) -> WorkCompletion {
        let [a, b] = &mut self.hosts;
        let (h, other) = if i == 0 { (a, &*b) } else { (b, &*a) };
        let wc = h.wait_one(send, &other.dev, 1, 1_000_000).unwrap();
        let wc = wc.expect("no completion");
        assert_eq!(wc.status, WcStatus::Success);
        wc
    }

    /// Host `from` sends 64 bytes to the other; it receives and reposts.
    fn one_way(&mut self, from: usize) {
        let to = 1 - from;
        let h = &mut self.hosts[from];
        let sg = [Sge {
            addr: h.buf.iova() + h.spec.send_at() as u64,
            length: SIZE as u32,
            lkey: h.lkey(),
        }];
        let wr = SendWr {
            opcode: WrOpcode::Send,
            send_flags: SendFlags::SIGNALED,
            sg_list: &sg,
            ..SendWr::EMPTY
        };
        h.ctx.post_send(h.qp, &[wr]).unwrap();
        let r = self.wait(to, false);
        self.hosts[to].post_recv(r.wr_id as usize).unwrap();
        black_box(self.wait(from, true));
    }

    // Not inlined: a profiler (callgrind's --toggle-collect) can count
    // the instructions of exactly one round trip.
    #[inline(never)]
    fn round_trip(&mut self) {
        self.one_way(0);
        self.one_way(1);
    }
}

fn pingpong(c: &mut Criterion) {
    let mut group = c.benchmark_group("pingpong_model");
    group.throughput(Throughput::Elements(1));
    let mut rig = Rig::loopback();
    group.bench_function(format!("loopback/{SIZE}"), |b| b.iter(|| rig.round_trip()));
    let mut rig = TwoHosts::new();
    group.bench_function(format!("two_hosts/{SIZE}"), |b| b.iter(|| rig.round_trip()));
    group.finish();
}

criterion_group!(benches, pingpong);
criterion_main!(benches);
