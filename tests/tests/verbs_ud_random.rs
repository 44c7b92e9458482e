//! Seeded random sequences mixing UD datagrams with RC traffic on two
//! hosts (a transport per seed): UD sends between four UD QPs (two per
//! host, to the other host or the same card), with the right or a wrong
//! Q_Key, to QPs with or without a receive posted, receives posted at
//! random, address handles destroyed and made again, and RC SENDs on a
//! connected pair in between. Checked against a reference: every datagram
//! the reference says is delivered arrives once, in order per QP, with its
//! bytes; every send completes once; the model's drop counters equal the
//! reference's. Seeds replay with `MLX5_PROP_SEED=n` (`mlx5_tests::seeds`).

use std::collections::VecDeque;

use mlx5_driver::verbs::{SendFlags, SendWr, Sge, WcStatus, WorkCompletion, WrOpcode};
use mlx5_tests::hosts::*;
use mlx5_tests::seeds::Seeded;
use mlx5_tests::ud::*;
use mlx5_tests::Rng;

const STEPS: usize = 300;
/// UD receive slots per UD QP.
const UD_SLOTS: usize = 6;
/// RC receive slots (SRQ slots 0..RC_SLOTS of the host buffer).
const RC_SLOTS: usize = 16;

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
    /// Expected send completions per local QP number (wr_ids).
    tx: Vec<(u32, VecDeque<u64>)>,
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
            let want = queue(&mut s.tx, w.qp_num).pop_front();
            assert_eq!(want, Some(w.wr_id), "seed {seed} step {step}: send {w:?}");
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

fn side(mut h: Host) -> Side {
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
    }
}

fn one_seed(seed: u64) -> (u64, u64, u64) {
    let mut rng = Rng(seed | 1);
    let t = TRANSPORTS[rng.below(TRANSPORTS.len() as u64) as usize];
    let (_wire, a, b) = pair(t);
    let (mut a, mut b) = (side(a), side(b));
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
                queue(&mut s.tx, src.qpn).push_back(wr);
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
            // An RC SEND to the peer's SRQ (a receive posted first).
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
                queue(&mut s.tx, qpn).push_back(wr);
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
    }
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
    (delivered, drops, rc_msgs)
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
        let (d, x, r) = all
            .iter()
            .fold((0, 0, 0), |t, (_, v)| (t.0 + v.0, t.1 + v.1, t.2 + v.2));
        mlx5_tests::seeds::say(&format!(
            "ud random: {d} datagrams delivered, {x} dropped, {r} RC messages"
        ));
        assert!(
            d > 0 && x > 0 && r > 0,
            "the mix delivered, dropped and ran RC: {d} {x} {r}"
        );
    }
}
