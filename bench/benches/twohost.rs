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
//!   `Wire` and connected over RoCE v2 (IPv4 GIDs, the peer's MAC named),
//!   as `mlx5 pingpong` connects them: every packet is a built, sent,
//!   parsed and checked Ethernet frame, and each message is ACKed.
//!
//! One iteration is one round trip; criterion's throughput is round trips
//! per second.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use mlx5_driver::qp::Mtu;
use mlx5_driver::verbs::{
    AccessFlags, AhAttr, CqHandle, GidEntry, GidType, GlobalRoute, Mr, QpAttr, QpAttrMask, QpCap,
    QpHandle, QpInitAttr, RecvWr, SendFlags, SendWr, Sge, SrqHandle, SrqInitAttr, Verbs, WcStatus,
    WorkCompletion, WrOpcode,
};
use mlx5_driver::{Hca, HcaConfig};
use mlx5_hal::{DmaRegion, Hal};
use mlx5_sim::wire::{LinkType, Wire};
use mlx5_sim::{Device, SimConfig, SimHal};

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

/// Two ends and the contexts they live in (one or two).
struct Rig {
    devs: Vec<Device>,
    ctxs: Vec<Box<Ctx>>,
    ends: Vec<End>,
    _wire: Option<Wire>,
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
            _wire: None,
        }
    }

    fn two_hosts() -> Rig {
        let wire = Wire::new(LinkType::Ethernet);
        let (mut devs, mut ctxs, mut ends, mut addrs) = (vec![], vec![], vec![], vec![]);
        for n in 0..2u8 {
            let (dev, mut ctx) = open(10 + u64::from(n));
            dev.connect(&wire).unwrap();
            let mac = ctx.query_gid_ex(1, 0).unwrap().unwrap().mac;
            let index = ctx.hca().default_gid_count();
            let gid = mlx5_driver::gid::ipv4_gid([198, 18, 0, n + 1]);
            let entry = GidEntry {
                gid,
                gid_type: GidType::RoceV2,
                mac,
                vlan: None,
            };
            ctx.add_gid(1, index, &entry).unwrap();
            let e = end(&mut ctx, usize::from(n), &dev.hal());
            addrs.push((ctx.qp_num(e.qp).unwrap(), gid, mac, index as u8));
            devs.push(dev);
            ctxs.push(ctx);
            ends.push(e);
        }
        for (me, peer) in [(0, 1), (1, 0)] {
            let (qpn, dgid, mac, _) = addrs[peer];
            let ah = AhAttr {
                is_global: true,
                grh: GlobalRoute {
                    dgid,
                    sgid_index: addrs[me].3,
                    hop_limit: 64,
                    ..GlobalRoute::default()
                },
                dmac: Some(mac),
                port_num: 1,
                ..AhAttr::default()
            };
            connect(&mut ctxs[me], &ends[me], ah, qpn);
        }
        Rig {
            devs,
            ctxs,
            ends,
            _wire: Some(wire),
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

    fn round_trip(&mut self) {
        self.one_way(0);
        self.one_way(1);
    }
}

fn pingpong(c: &mut Criterion) {
    let mut group = c.benchmark_group("pingpong_model");
    group.throughput(Throughput::Elements(1));
    for (name, make) in [
        ("loopback", Rig::loopback as fn() -> Rig),
        ("two_hosts", Rig::two_hosts),
    ] {
        let mut rig = make();
        group.bench_function(format!("{name}/{SIZE}"), |b| b.iter(|| rig.round_trip()));
    }
    group.finish();
}

criterion_group!(benches, pingpong);
criterion_main!(benches);
