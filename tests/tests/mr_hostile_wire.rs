//! The hostile peer on another host: host A, given one rkey of a small
//! region on host B, RDMA-WRITEs over RoCE v2 at random addresses across B's
//! whole DMA space and around the region's edges. Nothing on B outside the
//! region changes (the hash of every block outside the region and the
//! bookkeeping a control run learns stays the same; `mlx5_tests::hostile_mr`),
//! and both drivers keep working after their QPs are reset.

use std::collections::BTreeSet;

use mlx5_driver::verbs::{
    AccessFlags, QpAttr, QpAttrMask, QpState, SendFlags, SendWr, Sge, WcStatus, WrOpcode,
};
use mlx5_hal::Hal;
use mlx5_tests::hostile_mr::{
    attempts, changed_blocks, explain_escape, hash_outside, marks_in, Target,
};
use mlx5_tests::hosts::*;
use mlx5_tests::seeds::{say, Seeded};
use mlx5_tests::Rng;

/// Attempts per phase (control and attack) and seed.
const OPS: usize = 2500;
/// The region on B: part of a page of its own buffer.
const MR_BUF: usize = 2 * 4096;
const MR_AT: u64 = 100;
const MR_LEN: u64 = 3000;

/// Both QPs to RESET (their error events acknowledged, their CQs drained)
/// and connected again.
fn recover(a: &mut Host, b: &mut Host) {
    let reset = QpAttr {
        qp_state: QpState::Reset,
        ..QpAttr::default()
    };
    for h in [&mut *a, &mut *b] {
        while let Ok(ev) = h.ctx.get_async_event() {
            h.ctx.ack_async_event(&ev).unwrap();
        }
        h.ctx.modify_qp(h.qp, &reset, QpAttrMask::STATE).unwrap();
        let mut wc = [mlx5_driver::verbs::WorkCompletion::EMPTY; 8];
        for cq in [h.scq, h.rcq] {
            while h.ctx.poll_cq(cq, &mut wc).unwrap() > 0 {}
        }
    }
    let (aa, ba) = (a.addr, b.addr);
    let mtu = aa.mtu.min(ba.mtu);
    let (to_b, to_a) = (a.ah_to(&ba), b.ah_to(&aa));
    connect(a, to_b, &ba, mtu, 7, 0);
    connect(b, to_a, &aa, mtu, 7, 0);
}

/// A writes each attempt from its send area with `key_for(addr, len)` as
/// the rkey; both QPs are reset after every refusal. Returns how many
/// landed.
fn phase(
    a: &mut Host,
    b: &mut Host,
    tries: &[(u64, u32)],
    key_for: impl Fn(u64, u32) -> u32,
) -> usize {
    recover(a, b);
    let mut ok = 0;
    for (i, &(addr, len)) in tries.iter().enumerate() {
        let sg = [Sge {
            addr: a.buf.iova() + SEND_AT as u64,
            length: len,
            lkey: a.lkey(),
        }];
        let wr = SendWr {
            wr_id: i as u64,
            opcode: WrOpcode::RdmaWrite,
            send_flags: SendFlags::SIGNALED,
            sg_list: &sg,
            remote_addr: addr,
            rkey: key_for(addr, len),
            ..SendWr::EMPTY
        };
        a.ctx.post_send(a.qp, &[wr]).unwrap();
        let c = wait_one(a, true, &b.dev).expect("a completion for every write");
        assert_eq!(c.wr_id, i as u64);
        match c.status {
            WcStatus::Success => ok += 1,
            WcStatus::RemAccessErr => recover(a, b),
            other => panic!("write of {len} at {addr:#x}: {other:?}"),
        }
    }
    recover(a, b);
    ok
}

fn hostile_wire_run(seed: u64) -> (usize, usize, usize) {
    let t = Transport::RoceV2Ipv4;
    let what = format!("{t:?} seed {seed}");
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    // The tests' small event queues (`mlx5_tests::config`): the control
    // run wraps them many times, so every EQE slot the attack run may write
    // is learned as bookkeeping.
    let (_wire, mut a, mut b) = pair_with(t, mlx5_tests::config());
    let attack = pattern(64, 0xe7);
    a.buf.write_bytes(SEND_AT, &attack);
    let buf_len = b.buf.len();
    b.buf.write_bytes(0, &pattern(buf_len, 0x31));
    let region = b.dev.hal().alloc_dma(MR_BUF).unwrap();
    region.fill(0, MR_BUF, 0x5c);
    let (start, end) = (region.iova() + MR_AT, region.iova() + MR_AT + MR_LEN);
    let mr = b
        .ctx
        .reg_mr(
            start,
            MR_LEN,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
    let rkey = mr.rkey();
    let target = Target::around(&b.dev.dma_snapshot(), start, end);
    let tries = attempts(&mut rng, OPS, &target);

    let s0 = b.dev.dma_snapshot();
    let no_key = rkey ^ 0x80;
    let control_ok = phase(&mut a, &mut b, &tries, |x, l| {
        if target.inside(x, l) {
            rkey
        } else {
            no_key
        }
    });
    let s1 = b.dev.dma_snapshot();
    let attack_ok = phase(&mut a, &mut b, &tries, |_, _| rkey);
    let s2 = b.dev.dma_snapshot();

    let allowed = changed_blocks(&s0, &s1);
    if hash_outside(&s1, &allowed, &target) != hash_outside(&s2, &allowed, &target) {
        explain_escape(&what, &s1, &s2, &allowed, &target);
    }
    assert_eq!(
        marks_in(&s2, &allowed, &attack[..4]),
        marks_in(&s1, &allowed, &attack[..4]),
        "{what}: the attacker's bytes in B's rings"
    );
    assert_eq!(attack_ok, control_ok, "{what}: the same writes landed");
    let inside = tries.iter().filter(|w| target.inside(w.0, w.1)).count();
    assert_eq!(attack_ok, inside, "{what}: exactly the writes inside");
    let mut guard = vec![0u8; MR_BUF];
    region.read_bytes(0, &mut guard);
    assert!(
        guard[..MR_AT as usize]
            .iter()
            .chain(&guard[(MR_AT + MR_LEN) as usize..])
            .all(|&x| x == 0x5c),
        "{what}: the region's own buffer changed outside it"
    );
    let mut rest = vec![0u8; buf_len];
    b.buf.read_bytes(0, &mut rest);
    assert!(
        rest == pattern(buf_len, 0x31),
        "{what}: B's other buffer changed"
    );
    assert!(b.dev.iommu_faults().is_empty(), "{what}");

    // Both drivers keep working: a SEND A → B and a write inside the region.
    b.post_recv(0).unwrap();
    let data = pattern(100, 3);
    a.buf.write_bytes(SEND_AT, &data);
    let sg = [Sge {
        addr: a.buf.iova() + SEND_AT as u64,
        length: 100,
        lkey: a.lkey(),
    }];
    for (wr_id, opcode) in [(9, WrOpcode::Send), (10, WrOpcode::RdmaWrite)] {
        let wr = SendWr {
            wr_id,
            opcode,
            send_flags: SendFlags::SIGNALED,
            sg_list: &sg,
            remote_addr: start,
            rkey,
            ..SendWr::EMPTY
        };
        a.ctx.post_send(a.qp, &[wr]).unwrap();
        let s = wait_one(&mut a, true, &b.dev).expect("completion");
        assert_eq!((s.wr_id, s.status), (wr_id, WcStatus::Success), "{what}");
    }
    let r = wait_one(&mut b, false, &a.dev).expect("receive");
    assert_eq!(r.status, WcStatus::Success, "{what}");
    let mut got = vec![0u8; 100];
    b.buf.read_bytes(RECV_AT, &mut got);
    assert_eq!(got, data, "{what}: the SEND");
    region.read_bytes(MR_AT as usize, &mut got);
    assert_eq!(got, data, "{what}: the write inside the region");

    b.ctx.dereg_mr(mr).map_err(|(_, e)| e).unwrap();
    drop(region);
    close(a, &format!("{what}: A"));
    close(b, &format!("{what}: B"));
    let book: BTreeSet<_> = allowed;
    (
        OPS - attack_ok,
        attack_ok,
        book.len() * mlx5_tests::hostile_mr::BLOCK,
    )
}

#[test]
fn a_hostile_peer_on_another_host_reaches_only_the_region_it_was_given() {
    big_stack(|| {
        let runs = Seeded::new(
            module_path!(),
            "a_hostile_peer_on_another_host_reaches_only_the_region_it_was_given",
            &[0x7769_7265],
        )
        .run(hostile_wire_run);
        for (seed, (refused, landed, book)) in runs {
            say(&format!(
                "hostile peer on another host, seed {seed}: {refused} writes refused, {landed} \
                 inside the region landed, {book} bookkeeping bytes changed on B"
            ));
            assert!(
                refused > landed,
                "most random writes fall outside the region"
            );
        }
    });
}
