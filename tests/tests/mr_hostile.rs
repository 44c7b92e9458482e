//! A hostile peer holding one region's rkey: it RDMA-WRITEs at random
//! addresses across the whole DMA space of the responder's device (and
//! around the region's edges) and must change nothing outside that region;
//! the driver keeps working once the QPs are reset. On one card (every
//! profile) and across a wire between two hosts. The accounting (a control
//! run learns the bookkeeping blocks; the hash of every other block must
//! not change) is in `mlx5_tests::hostile_mr`.

use mlx5_tests::verbs_common::*;

use std::collections::BTreeSet;

use mlx5_driver::verbs::{AccessFlags, QpAttr, QpAttrMask, QpState, SendWr, WcStatus, WrOpcode};
use mlx5_hal::Hal;
use mlx5_sim::Device;
use mlx5_tests::hostile_mr::{
    attempts, changed_blocks, explain_escape, hash_outside, marks_in, Block, Snapshot, Target,
    BLOCK,
};
use mlx5_tests::seeds::{say, Seeded};
use mlx5_tests::{Rng, PROFILES};

/// Attempts per phase and profile (four profiles: 4,000 per seed).
const OPS: usize = 1000;
/// Victim buffers of random bytes besides the driver's own memory.
const VICTIMS: usize = 4;
const VICTIM_LEN: usize = 64 * 1024;
/// The region: part of a page of its own buffer.
const MR_BUF: usize = 2 * 4096;
const MR_AT: u64 = 100;
const MR_LEN: u64 = 3000;

fn recover(ctx: &mut Ctx, p: &Pair) {
    for ev in async_events(ctx) {
        ctx.ack_async_event(&ev).unwrap();
    }
    let reset = QpAttr {
        qp_state: QpState::Reset,
        ..QpAttr::default()
    };
    for q in [p.a, p.b] {
        ctx.modify_qp(q, &reset, QpAttrMask::STATE).unwrap();
    }
    drain(ctx, p.scq);
    drain(ctx, p.rcq);
    ctx.connect_loopback(p.a, p.b).unwrap();
}

/// Run the attempts with `key_for(addr, len)` as the rkey; recover after
/// every failure. Returns how many completed successfully.
fn phase(
    dev: &Device,
    ctx: &mut Ctx,
    p: &Pair,
    tries: &[(u64, u32)],
    key_for: impl Fn(u64, u32) -> u32,
) -> usize {
    recover(ctx, p);
    let mut ok = 0;
    for &(addr, len) in tries {
        let sg = [p.sge(0, len)];
        let wr = SendWr {
            opcode: WrOpcode::RdmaWrite,
            remote_addr: addr,
            rkey: key_for(addr, len),
            ..send(1, &sg)
        };
        ctx.post_send(p.a, &[wr]).unwrap();
        let c = poll_n(dev, ctx, p.scq, 1);
        assert_eq!(c.len(), 1);
        match c[0].status {
            WcStatus::Success => ok += 1,
            WcStatus::RemAccessErr => recover(ctx, p),
            other => panic!("write of {len} at {addr:#x}: {other:?}"),
        }
    }
    recover(ctx, p);
    ok
}

/// The control run's changed blocks: the bookkeeping the attack may touch.
/// The attack run: the hash of every other block outside the region is
/// unchanged, and no block of the bookkeeping gained a copy of the
/// attacker's bytes. Returns the bookkeeping blocks.
fn check_attack(
    what: &str,
    control: (&Snapshot, &Snapshot),
    attack: (&Snapshot, &Snapshot),
    t: &Target,
    mark: &[u8],
) -> BTreeSet<Block> {
    let allowed = changed_blocks(control.0, control.1);
    if hash_outside(attack.0, &allowed, t) != hash_outside(attack.1, &allowed, t) {
        explain_escape(what, attack.0, attack.1, &allowed, t);
    }
    assert_eq!(
        marks_in(attack.1, &allowed, mark),
        marks_in(attack.0, &allowed, mark),
        "{what}: the attacker's bytes in a ring"
    );
    allowed
}

fn hostile_run(seed: u64) -> (usize, usize, usize) {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let (mut refused, mut landed, mut bookkeeping) = (0, 0, 0);
    for prof in PROFILES {
        let what = format!("{prof:?} seed {seed}");
        let (dev, mut ctx) = open(prof);
        let p = Pair::new(&dev, &mut ctx, cap(8, 1, 0));
        let victims: Vec<_> = (0..VICTIMS)
            .map(|_| {
                let v = dev.hal().alloc_dma(VICTIM_LEN).unwrap();
                let bytes: Vec<u8> = (0..VICTIM_LEN / 8)
                    .flat_map(|_| rng.next().to_le_bytes())
                    .collect();
                v.write_bytes(0, &bytes);
                (v, bytes)
            })
            .collect();
        let buf = dev.hal().alloc_dma(MR_BUF).unwrap();
        buf.fill(0, MR_BUF, 0x5c);
        let (start, end) = (buf.iova() + MR_AT, buf.iova() + MR_AT + MR_LEN);
        let mr = ctx
            .reg_mr(
                start,
                MR_LEN,
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
            )
            .unwrap();
        let rkey = mr.rkey();
        // The payload the attacker writes: its own pattern.
        let attack = p.fill(0, 64, 0xe7);
        let t = Target::around(&dev.dma_snapshot(), start, end);
        let tries = attempts(&mut rng, OPS, &t);

        // Control: nothing outside the region can be reached.
        let s0 = dev.dma_snapshot();
        let no_key = rkey ^ 0x80;
        let control_ok = phase(&dev, &mut ctx, &p, &tries, |a, l| {
            if t.inside(a, l) {
                rkey
            } else {
                no_key
            }
        });
        let s1 = dev.dma_snapshot();
        // Attack: the real rkey on every write.
        let attack_ok = phase(&dev, &mut ctx, &p, &tries, |_, _| rkey);
        let s2 = dev.dma_snapshot();
        let allowed = check_attack(&what, (&s0, &s1), (&s1, &s2), &t, &attack[..4]);
        assert_eq!(attack_ok, control_ok, "{what}: the same writes landed");
        let expect_ok = tries.iter().filter(|w| t.inside(w.0, w.1)).count();
        assert_eq!(attack_ok, expect_ok, "{what}: exactly the writes inside");
        for (v, bytes) in &victims {
            let mut b = vec![0u8; VICTIM_LEN];
            v.read_bytes(0, &mut b);
            assert!(b == *bytes, "{what}: a victim buffer changed");
        }
        let mut guard = vec![0u8; MR_BUF];
        buf.read_bytes(0, &mut guard);
        assert!(
            guard[..MR_AT as usize]
                .iter()
                .chain(&guard[(MR_AT + MR_LEN) as usize..])
                .all(|&b| b == 0x5c),
            "{what}: the region's own buffer changed outside it"
        );
        assert!(
            dev.iommu_faults().is_empty(),
            "{what}: {:?}",
            dev.iommu_faults()
        );

        // The driver keeps working: a SEND and a write inside the region.
        p.post_recv(&mut ctx, 0, 1);
        let data = p.fill(0, 100, 3);
        let sg = [p.sge(0, 100)];
        ctx.post_send(p.a, &[send(9, &sg)]).unwrap();
        let s = poll_n(&dev, &mut ctx, p.scq, 1);
        assert_eq!((s[0].wr_id, s[0].status), (9, WcStatus::Success), "{what}");
        let r = poll_n(&dev, &mut ctx, p.rcq, 1);
        assert_eq!(r[0].status, WcStatus::Success, "{what}");
        assert_eq!(p.received(0, 100), data, "{what}");
        let wr = SendWr {
            opcode: WrOpcode::RdmaWrite,
            remote_addr: start,
            rkey,
            ..send(10, &sg)
        };
        ctx.post_send(p.a, &[wr]).unwrap();
        let s = poll_n(&dev, &mut ctx, p.scq, 1);
        assert_eq!(s[0].status, WcStatus::Success, "{what}");
        let mut got = vec![0u8; 100];
        buf.read_bytes(MR_AT as usize, &mut got);
        assert_eq!(got, data, "{what}");

        refused += OPS - attack_ok;
        landed += attack_ok;
        bookkeeping = bookkeeping.max(allowed.len() * BLOCK);
        ctx.dereg_mr(mr).map_err(|(_, e)| e).unwrap();
        p.destroy(&mut ctx);
        drop((buf, victims));
        close(&dev, ctx, &what);
    }
    (refused, landed, bookkeeping)
}

#[test]
fn a_hostile_peer_with_one_rkey_reaches_only_that_region() {
    let runs = Seeded::new(
        module_path!(),
        "a_hostile_peer_with_one_rkey_reaches_only_that_region",
        &[0x6d72_7072],
    )
    .run(hostile_run);
    for (seed, (refused, landed, book)) in runs {
        say(&format!(
            "hostile peer seed {seed}: {refused} writes refused, {landed} inside the region landed, \
             at most {book} bookkeeping bytes changed per profile"
        ));
        assert!(
            refused > landed,
            "most random writes fall outside the region"
        );
    }
}
