//! Seeded random sequences mixing UD datagrams with RC traffic on two
//! hosts (a transport per seed): UD sends between four UD QPs (two per
//! host, to the other host or the same card), with the right or a wrong
//! Q_Key, to QPs with or without a receive posted, receives posted at
//! random, address handles destroyed and made again, and RC SENDs on a
//! connected pair in between, and on that pair RDMA READs (0 to 8 KiB) and
//! atomics (FETCH_ADD, CAS that matches or not) on the peer's memory; the
//! RC pair receives through its own receive queues or SRQs and has 1 to 4
//! READ/atomic resources, per seed. Checked against a reference: every
//! datagram the reference says is delivered arrives once, in order per QP,
//! with its bytes; every send completes once, a READ with the peer's bytes
//! and an atomic with the value the reference says was there; each host's
//! counter ends at the reference's; the model's drop counters equal the
//! reference's. Seeds replay with `MLX5_PROP_SEED=n` (`mlx5_tests::seeds`).

use std::collections::VecDeque;

use mlx5_driver::verbs::{SendFlags, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion, WrOpcode};
use mlx5_tests::hosts::*;
use mlx5_tests::seeds::Seeded;
use mlx5_tests::ud::*;
use mlx5_tests::Rng;

const STEPS: usize = 300;
/// UD receive slots per UD QP.
const UD_SLOTS: usize = 6;
/// RC receive slots (SRQ slots 0..RC_SLOTS of the host buffer).
const RC_SLOTS: usize = 16;
/// In each host's RDMA area (`WRITE_AT`, `BIG` bytes): the 8-byte counter
/// the peer's atomics work on, the bytes the peer READs, the atomics'
/// result words, and (upper half) four READ destinations.
const COUNTER_AT: usize = WRITE_AT;
const READ_SRC_AT: usize = WRITE_AT + 4096;
const READ_MAX: usize = 8192;
const RESULT_AT: usize = WRITE_AT + 16384;
const READ_DST_AT: usize = WRITE_AT + BIG / 2;

/// A send completion the reference expects: its `wr_id`, opcode, and the
/// bytes it must have left in the local buffer (a READ's data, an
/// atomic's original value) at that offset.
#[derive(Debug, Clone, PartialEq)]
struct Tx {
    wr_id: u64,
    opcode: WcOpcode,
    lands: Option<(usize, Vec<u8>)>,
}

#[derive(Debug, Clone, PartialEq)]
enum Rx {
    Ud {
        wr_id: u64,
        src_qp: u32,
        data: Vec<u8>,
    },
    Rc {
        len: u32,
    },
}

struct Side {
    h: Host,
    ud: [UdQp; 2],
    /// Posted, not consumed UD receive slots per UD QP (slot numbers).
    ud_posted: [VecDeque<usize>; 2],
    ud_next: [usize; 2],
    rc_posted: usize,
    rc_next: usize,
    /// Expected receive completions per local QP number.
    rx: Vec<(u32, VecDeque<Rx>)>,
    /// Expected send completions per local QP number.
    tx: Vec<(u32, VecDeque<Tx>)>,
    /// The value of this host's counter (changed by the peer's atomics).
    counter: u64,
    /// The bytes this host's READ source holds.
    read_src: Vec<u8>,
    qkey_drops: u64,
    no_recv_drops: u64,
}

fn queue<T>(v: &mut Vec<(u32, VecDeque<T>)>, qpn: u32) -> &mut VecDeque<T> {
    if let Some(i) = v.iter().position(|(q, _)| *q == qpn) {
        return &mut v[i].1;
    }
    v.push((qpn, VecDeque::new()));
    &mut v.last_mut().unwrap().1
}

/// Poll both CQs of `s` dry, each completion checked against the reference.
fn drain(s: &mut Side, seed: u64, step: usize) {
    let mut wc = [WorkCompletion::EMPTY; 8];
    loop {
        let n = s.h.ctx.poll_cq(s.h.scq, &mut wc).unwrap();
        for w in &wc[..n] {
            assert_eq!(
                w.status,
                WcStatus::Success,
                "seed {seed} step {step}: {w:?}"
            );
            let want = queue(&mut s.tx, w.qp_num)
                .pop_front()
                .unwrap_or_else(|| panic!("seed {seed} step {step}: unexpected send {w:?}"));
            assert_eq!(
                (w.wr_id, w.opcode),
                (want.wr_id, want.opcode),
                "seed {seed} step {step}: send {w:?}"
            );
            if let Some((at, bytes)) = want.lands {
                assert_eq!(
                    read_bytes(&s.h, at, bytes.len()),
                    bytes,
                    "seed {seed} step {step}: what {:?} {} left",
                    w.opcode,
                    w.wr_id
                );
            }
        }
        let m = s.h.ctx.poll_cq(s.h.rcq, &mut wc).unwrap();
        for w in &wc[..m] {
            assert_eq!(
                w.status,
                WcStatus::Success,
                "seed {seed} step {step}: {w:?}"
            );
            let want = queue(&mut s.rx, w.qp_num).pop_front();
            match want {
                Some(Rx::Ud {
                    wr_id,
                    src_qp,
                    data,
                }) => {
                    assert_eq!(
                        (w.wr_id, w.src_qp),
                        (wr_id, src_qp),
                        "seed {seed} step {step}"
                    );
                    assert_eq!(w.byte_len as usize, GRH + data.len());
                    let k = s.ud.iter().position(|u| u.qpn == w.qp_num).unwrap();
                    let at = s.ud[k].slots_at + wr_id as usize * SLOT + GRH;
                    assert_eq!(
                        read_bytes(&s.h, at, data.len()),
                        data,
                        "seed {seed} step {step}"
                    );
                }
                Some(Rx::Rc { len }) => {
                    assert_eq!(w.byte_len, len, "seed {seed} step {step}");
                    s.rc_posted -= 1;
                }
                None => panic!("seed {seed} step {step}: unexpected receive {w:?}"),
            }
        }
        if n == 0 && m == 0 {
            return;
        }
    }
}

fn settle(a: &mut Side, b: &mut Side, seed: u64, step: usize) {
    for _ in 0..40 {
        a.h.dev.advance_us(50);
        b.h.dev.advance_us(50);
        drain(a, seed, step);
        drain(b, seed, step);
    }
}

fn side(mut h: Host, fill: u8) -> Side {
    let read_src = pattern(READ_MAX, fill);
    h.buf.write_bytes(READ_SRC_AT, &read_src);
    h.buf.write_bytes(COUNTER_AT, &0u64.to_ne_bytes());
    let ud = [
        ud_qp(&mut h, QKEY, RECV_AT + RC_SLOTS * BIG),
        ud_qp(&mut h, QKEY, RECV_AT + RC_SLOTS * BIG + UD_SLOTS * SLOT),
    ];
    Side {
        h,
        ud,
        ud_posted: [VecDeque::new(), VecDeque::new()],
        ud_next: [0, 0],
        rc_posted: 0,
        rc_next: 0,
        rx: Vec::new(),
        tx: Vec::new(),
        qkey_drops: 0,
        no_recv_drops: 0,
        counter: 0,
        read_src,
    }
}

/// One RDMA READ or atomic from `s` on `o`'s memory, posted, with what it
/// must complete with queued.
fn rd_atomic(s: &mut Side, o: &mut Side, rng: &mut Rng, wr: u64) {
    let (raddr, rkey) = (o.h.addr.addr, o.h.addr.rkey);
    let lkey = s.h.lkey();
    let local = |at: usize, len: usize| Sge {
        addr: s.h.buf.iova() + at as u64,
        length: len as u32,
        lkey,
    };
    let tx: (WcOpcode, Option<(usize, Vec<u8>)>) = match rng.below(3) {
        0 => {
            let off = rng.below(READ_MAX as u64 / 2) as usize;
            let len = rng.below((READ_MAX - off) as u64 + 1) as usize;
            let at = READ_DST_AT + (wr % 4) as usize * READ_MAX;
            s.h.buf.write_bytes(at, &vec![0xee; len]);
            let sg = [local(at, len)];
            let w = SendWr {
                wr_id: wr,
                opcode: WrOpcode::RdmaRead,
                send_flags: SendFlags::SIGNALED,
                sg_list: &sg,
                remote_addr: raddr + (READ_SRC_AT + off) as u64,
                rkey,
                ..SendWr::EMPTY
            };
            s.h.ctx.post_send(s.h.qp, &[w]).unwrap();
            let bytes = o.read_src[off..off + len].to_vec();
            (WcOpcode::RdmaRead, Some((at, bytes)))
        }
        k => {
            let at = RESULT_AT + (wr % 8) as usize * 8;
            s.h.buf.write_bytes(at, &[0xee; 8]);
            let sg = [local(at, 8)];
            let orig = o.counter;
            let (opcode, compare_add, swap, wc) = if k == 1 {
                let add = rng.next();
                o.counter = orig.wrapping_add(add);
                (WrOpcode::AtomicFetchAndAdd, add, 0, WcOpcode::FetchAdd)
            } else {
                let matches = rng.below(2) == 0;
                let compare = if matches { orig } else { orig ^ 1 };
                let swap = rng.next();
                if matches {
                    o.counter = swap;
                }
                (WrOpcode::AtomicCmpAndSwp, compare, swap, WcOpcode::CompSwap)
            };
            let w = SendWr {
                wr_id: wr,
                opcode,
                send_flags: SendFlags::SIGNALED,
                sg_list: &sg,
                remote_addr: raddr + COUNTER_AT as u64,
                rkey,
                compare_add,
                swap,
                ..SendWr::EMPTY
            };
            s.h.ctx.post_send(s.h.qp, &[w]).unwrap();
            (wc, Some((at, orig.to_ne_bytes().to_vec())))
        }
    };
    let qpn = s.h.addr.qpn;
    queue(&mut s.tx, qpn).push_back(Tx {
        wr_id: wr,
        opcode: tx.0,
        lands: tx.1,
    });
}

/// What a seed did: datagrams delivered, dropped, RC messages, READs and
/// atomics served.
type Figures = (u64, u64, u64, u64, u64);

fn one_seed(seed: u64) -> Figures {
    let mut rng = Rng(seed | 1);
    let t = TRANSPORTS[rng.below(TRANSPORTS.len() as u64) as usize];
    let rq = if rng.below(2) == 0 {
        RecvQueue::Own
    } else {
        RecvQueue::Srq
    };
    let depth = 1 + rng.below(4) as u8;
    let (_wire, a, b) = rd_pair(t, rq, depth);
    let (mut a, mut b) = (side(a, 0x41), side(b, 0x42));
    let mtu = 128usize << (a.h.addr.mtu.min(b.h.addr.mtu) as usize);
    let mut ahs = [
        a.h.ctx.create_ah(&a.h.ah_to(&b.h.addr)).unwrap(),
        a.h.ctx.create_ah(&a.h.ah_to(&a.h.addr)).unwrap(),
        b.h.ctx.create_ah(&b.h.ah_to(&a.h.addr)).unwrap(),
        b.h.ctx.create_ah(&b.h.ah_to(&b.h.addr)).unwrap(),
    ];
    let (mut delivered, mut rc_msgs) = (0u64, 0u64);
    let mut wr = 1000u64;
    for step in 0..STEPS {
        let from_a = rng.next() & 1 == 0;
        let (s, o) = if from_a {
            (&mut a, &mut b)
        } else {
            (&mut b, &mut a)
        };
        match rng.below(10) {
            // Post a UD receive.
            0..=2 => {
                let k = rng.below(2) as usize;
                if s.ud_posted[k].len() < UD_SLOTS {
                    let slot = s.ud_next[k];
                    s.ud_next[k] = (slot + 1) % UD_SLOTS;
                    let u = s.ud[k];
                    post_slot(&mut s.h, &u, slot, 0xee);
                    s.ud_posted[k].push_back(slot);
                }
            }
            // A UD datagram, to the other host or this one.
            3..=6 => {
                let same = rng.below(4) == 0;
                let (k_from, k_to) = (rng.below(2) as usize, rng.below(2) as usize);
                let wrong = rng.below(8) == 0;
                let len = 1 + rng.below(mtu as u64) as usize;
                let data = pattern(len, rng.next() as u8);
                let ah = ahs[if from_a { 0 } else { 2 } + same as usize];
                let src = s.ud[k_from];
                let dst = if same { s.ud[k_to] } else { o.ud[k_to] };
                wr += 1;
                let qkey = if wrong { QKEY ^ 0x10 } else { QKEY };
                ud_send(&mut s.h, &src, (ah, dst.qpn, qkey), &data, None, wr);
                queue(&mut s.tx, src.qpn).push_back(Tx {
                    wr_id: wr,
                    opcode: WcOpcode::Send,
                    lands: None,
                });
                let r = if same { &mut *s } else { &mut *o };
                if wrong {
                    r.qkey_drops += 1;
                } else if let Some(slot) = r.ud_posted[k_to].pop_front() {
                    delivered += 1;
                    queue(&mut r.rx, dst.qpn).push_back(Rx::Ud {
                        wr_id: slot as u64,
                        src_qp: src.qpn,
                        data,
                    });
                } else {
                    r.no_recv_drops += 1;
                }
            }
            // An RDMA READ or an atomic on the peer.
            7 if rng.below(2) == 0 => {
                wr += 1;
                rd_atomic(s, o, &mut rng, wr);
            }
            // An RC SEND to the peer's receive queue or SRQ (a receive
            // posted first).
            7 | 8 => {
                if o.rc_posted < RC_SLOTS / 2 {
                    o.h.post_recv(o.rc_next).unwrap();
                    o.rc_next = (o.rc_next + 1) % RC_SLOTS;
                    o.rc_posted += 1;
                }
                let len = 1 + rng.below(3000) as u32;
                s.h.buf.write_bytes(SEND_AT, &pattern(len as usize, 3));
                wr += 1;
                let sg = [Sge {
                    addr: s.h.buf.iova() + SEND_AT as u64,
                    length: len,
                    lkey: s.h.lkey(),
                }];
                let w = SendWr {
                    wr_id: wr,
                    opcode: WrOpcode::Send,
                    send_flags: SendFlags::SIGNALED,
                    sg_list: &sg,
                    ..SendWr::EMPTY
                };
                s.h.ctx.post_send(s.h.qp, &[w]).unwrap();
                let qpn = s.h.addr.qpn;
                queue(&mut s.tx, qpn).push_back(Tx {
                    wr_id: wr,
                    opcode: WcOpcode::Send,
                    lands: None,
                });
                let oq = o.h.addr.qpn;
                queue(&mut o.rx, oq).push_back(Rx::Rc { len });
                rc_msgs += 1;
            }
            // Destroy an address handle and make it again.
            _ => {
                let i = rng.below(4) as usize;
                let (aa, ba) = (a.h.addr, b.h.addr);
                let (h, peer) = match i {
                    0 => (&mut a.h, ba),
                    1 => (&mut a.h, aa),
                    2 => (&mut b.h, aa),
                    _ => (&mut b.h, ba),
                };
                h.ctx.destroy_ah(ahs[i]).unwrap();
                ahs[i] = h.ctx.create_ah(&h.ah_to(&peer)).unwrap();
            }
        }
        settle(&mut a, &mut b, seed, step);
    }
    settle(&mut a, &mut b, seed, STEPS);
    for s in [&a, &b] {
        for (_, q) in &s.rx {
            assert!(q.is_empty(), "seed {seed}: receives missing {q:?}");
        }
        for (_, q) in &s.tx {
            assert!(q.is_empty(), "seed {seed}: sends missing {q:?}");
        }
        let st = s.h.dev.traffic().stats();
        assert_eq!(st.ud_qkey_drops, s.qkey_drops, "seed {seed} {t:?}");
        assert_eq!(st.ud_no_recv_drops, s.no_recv_drops, "seed {seed} {t:?}");
        assert_eq!(st.ud_dropped, 0, "seed {seed} {t:?}");
        let mut v = [0u8; 8];
        s.h.buf.read_bytes(COUNTER_AT, &mut v);
        assert_eq!(
            u64::from_ne_bytes(v),
            s.counter,
            "seed {seed} {t:?}: counter"
        );
        assert_eq!(
            read_bytes(&s.h, READ_SRC_AT, READ_MAX),
            s.read_src,
            "seed {seed}: READ source"
        );
    }
    let served = |f: fn(&mlx5_sim::TrafficStats) -> u64| {
        f(&a.h.dev.traffic().stats()) + f(&b.h.dev.traffic().stats())
    };
    let (reads, atomics) = (served(|s| s.reads_served), served(|s| s.atomics_executed));
    for ah in ahs[..2].iter() {
        a.h.ctx.destroy_ah(*ah).unwrap();
    }
    for ah in ahs[2..].iter() {
        b.h.ctx.destroy_ah(*ah).unwrap();
    }
    let drops = a.qkey_drops + b.qkey_drops + a.no_recv_drops + b.no_recv_drops;
    for mut s in [a, b] {
        for u in s.ud {
            s.h.ctx.destroy_qp(u.qp).unwrap();
        }
        mlx5_tests::hosts::close(s.h, &format!("seed {seed} {t:?}"));
    }
    (delivered, drops, rc_msgs, reads, atomics)
}

#[test]
fn ud_and_rc_mixed_random_sequences_match_the_reference() {
    let seeded = Seeded::new(
        module_path!(),
        "ud_and_rc_mixed_random_sequences_match_the_reference",
        &[1, 2, 3, 4, 5],
    );
    let all = seeded.run(|seed| {
        let (tx, rx) = std::sync::mpsc::channel();
        big_stack(move || tx.send(one_seed(seed)).unwrap());
        rx.recv().unwrap()
    });
    if seeded.is_default_list() {
        let (d, x, r, rd, at) = all.iter().fold((0, 0, 0, 0, 0), |t, (_, v)| {
            (t.0 + v.0, t.1 + v.1, t.2 + v.2, t.3 + v.3, t.4 + v.4)
        });
        mlx5_tests::seeds::say(&format!(
            "ud random: {d} datagrams delivered, {x} dropped, {r} RC messages, \
             {rd} READs, {at} atomics"
        ));
        assert!(
            d > 0 && x > 0 && r > 0 && rd > 0 && at > 0,
            "the mix delivered, dropped, ran RC, READs and atomics: {d} {x} {r} {rd} {at}"
        );
    }
}
