//! A hostile peer holding one region's rkey: it RDMA-WRITEs at random
//! addresses across the whole DMA space (and around the region's edges)
//! and must change nothing outside that region. The driver keeps working
//! once the QPs are reset.
//!
//! Which bytes a run may change besides the region: the rings, doorbell
//! records, event queue and command mailboxes that every refused write
//! touches (a requester error CQE, the responder's access-error event, the
//! commands that reset and reconnect the QPs). They are learned from a
//! control run of the same operations in which every write that is not
//! wholly inside the region carries a key of no region: those writes cannot
//! reach memory at all, so whatever the control run changes is bookkeeping,
//! counted in 64-byte blocks (a CQE, an EQE, a WQE basic block: an owner
//! bit may flip in one run and be rewritten unchanged in the other). The
//! attack run, with the real rkey on every write, must change no byte
//! outside the region and those blocks, and leave no new copy of its
//! payload inside the blocks.

use mlx5_tests::verbs_common::*;

use std::collections::BTreeSet;

use mlx5_driver::verbs::{AccessFlags, QpAttr, QpAttrMask, QpState, SendWr, WcStatus, WrOpcode};
use mlx5_hal::Hal;
use mlx5_sim::Device;
use mlx5_tests::seeds::{say, Seeded};
use mlx5_tests::{Rng, PROFILES};

/// Attempts per phase and profile.
const OPS: usize = 400;
/// Victim buffers of random bytes besides the driver's own memory.
const VICTIMS: usize = 4;
const VICTIM_LEN: usize = 64 * 1024;
/// The region: part of a page of its own buffer.
const MR_BUF: usize = 2 * 4096;
const MR_AT: u64 = 100;
const MR_LEN: u64 = 3000;

/// The unit of bookkeeping: a CQE, an EQE, a WQE basic block.
const BLOCK: usize = 64;

type Snapshot = Vec<(u64, Vec<u8>)>;

/// One write attempt: remote address and length.
fn attempts(rng: &mut Rng, lo: u64, hi: u64, start: u64, end: u64) -> Vec<(u64, u32)> {
    (0..OPS)
        .map(|_| {
            let len = 1 + rng.below(64) as u32;
            let addr = match rng.below(8) {
                // Around the region's edges.
                0 => start - 64 + rng.below(128),
                1 => end - 64 + rng.below(128),
                // Inside it.
                2 => start + rng.below(MR_LEN - len as u64 + 1),
                // Anywhere in (and just around) the DMA space.
                _ => lo + rng.below(hi - lo),
            };
            (addr, len)
        })
        .collect()
}

/// The (region, offset) of every byte that differs between two snapshots
/// of the same regions.
fn changed(before: &Snapshot, after: &Snapshot) -> BTreeSet<(u64, usize)> {
    assert_eq!(
        before.iter().map(|r| (r.0, r.1.len())).collect::<Vec<_>>(),
        after.iter().map(|r| (r.0, r.1.len())).collect::<Vec<_>>(),
        "the set of DMA regions changed during a phase"
    );
    let mut out = BTreeSet::new();
    for ((iova, a), (_, b)) in before.iter().zip(after) {
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            if x != y {
                out.insert((*iova, i));
            }
        }
    }
    out
}

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
                for off in (0..VICTIM_LEN).step_by(8) {
                    v.write_bytes(off, &rng.next().to_le_bytes());
                }
                v
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
        let attack_mark = [attack[0], attack[1], attack[2], attack[3]];
        let snap = dev.dma_snapshot();
        let lo = dev.iova_base().saturating_sub(4096);
        let last = snap.last().expect("DMA regions");
        let hi = last.0 + last.1.len() as u64 + 4096;
        let tries = attempts(&mut rng, lo, hi, start, end);
        let inside = |a: u64, l: u32| a >= start && a + l as u64 <= end;

        // Control: nothing outside the region can be reached.
        let s0 = dev.dma_snapshot();
        let no_key = rkey ^ 0x80;
        let control_ok = phase(&dev, &mut ctx, &p, &tries, |a, l| {
            if inside(a, l) {
                rkey
            } else {
                no_key
            }
        });
        let allowed: BTreeSet<(u64, usize)> = changed(&s0, &dev.dma_snapshot())
            .into_iter()
            .map(|(iova, off)| (iova, off / BLOCK))
            .collect();

        // Attack: the real rkey on every write.
        let s1 = dev.dma_snapshot();
        let attack_ok = phase(&dev, &mut ctx, &p, &tries, |_, _| rkey);
        let s2 = dev.dma_snapshot();
        let in_mr = |(iova, off): &(u64, usize)| {
            let a = iova + *off as u64;
            a >= start && a < end
        };
        let escaped: Vec<_> = changed(&s1, &s2)
            .into_iter()
            .filter(|c| !in_mr(c) && !allowed.contains(&(c.0, c.1 / BLOCK)))
            .collect();
        // Inside the bookkeeping blocks, no new copy of the attacker's
        // pattern (its first four bytes).
        let marks = |snap: &Snapshot| -> usize {
            snap.iter()
                .map(|(iova, b)| {
                    b.windows(4)
                        .enumerate()
                        .filter(|(i, w)| {
                            allowed.contains(&(*iova, i / BLOCK)) && *w == &attack_mark[..]
                        })
                        .count()
                })
                .sum()
        };
        assert_eq!(
            marks(&s2),
            marks(&s1),
            "{what}: the attacker's bytes in a ring"
        );
        if let Some(&(iova, _)) = escaped.first() {
            let len = s1.iter().find(|r| r.0 == iova).map_or(0, |r| r.1.len());
            let offs: Vec<usize> = escaped
                .iter()
                .filter(|c| c.0 == iova)
                .map(|c| c.1)
                .take(40)
                .collect();
            let before: Vec<u8> = offs
                .iter()
                .map(|&o| s1.iter().find(|r| r.0 == iova).unwrap().1[o])
                .collect();
            let after: Vec<u8> = offs
                .iter()
                .map(|&o| s2.iter().find(|r| r.0 == iova).unwrap().1[o])
                .collect();
            panic!(
                "{what}: {} bytes outside the region changed, first in the {len}-byte region at {iova:#x}, offsets {offs:?} {before:x?} -> {after:x?}; MR region at {:#x}",
                escaped.len(), buf.iova()
            );
        }
        assert_eq!(attack_ok, control_ok, "{what}: the same writes landed");
        let expect_ok = tries.iter().filter(|t| inside(t.0, t.1)).count();
        assert_eq!(attack_ok, expect_ok, "{what}: exactly the writes inside");
        for v in &victims {
            let mut b = vec![0u8; VICTIM_LEN];
            v.read_bytes(0, &mut b);
            assert!(
                s0.iter()
                    .any(|(iova, bytes)| *iova == v.iova() && *bytes == b),
                "{what}: a victim buffer changed"
            );
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
