//! BlueFlame through the verbs facade on every model profile: a single
//! inline send goes whole into the BlueFlame buffer on a write-combining
//! platform, and the model checks the copy equals the WQE in memory; the
//! same program on an uncached platform rings only 8-byte doorbells; both
//! deliver the same bytes with the same completions (rdma-core
//! `post_send_db`, `mlx5_bf_copy`).

use mlx5_tests::verbs_common::*;

use mlx5_driver::verbs::{SendFlags, SendWr, Verbs, WcOpcode, WcStatus, WorkCompletion};
use mlx5_sim::{Device, SimConfig};
use mlx5_tests::{bring_up, PROFILES};

/// What one run saw: per message the receive completion and bytes, then
/// the send completions.
type Seen = Vec<(WcOpcode, WcStatus, u32, Vec<u8>)>;

/// Inline sends of these sizes, one per post, then a list of two.
const SIZES: [usize; 5] = [1, 16, 60, 120, 200];

fn run(cfg: SimConfig) -> (Seen, u64, u64) {
    let what = format!("{:?} write_combining={}", cfg.profile, cfg.write_combining);
    let dev = Device::new(cfg);
    let mut ctx = Verbs::open(bring_up(&dev));
    let p = Pair::new(&dev, &mut ctx, cap(8, 1, 200));
    p.post_recv(&mut ctx, 0, SIZES.len() as u64 + 2);
    let mut seen = Seen::new();
    let data: Vec<Vec<u8>> = (0..SIZES.len() + 2)
        .map(|i| {
            (0..SIZES[i % SIZES.len()])
                .map(|k| (k * 7 + i) as u8)
                .collect()
        })
        .collect();
    let inline = |i: usize| SendWr {
        send_flags: SendFlags::SIGNALED | SendFlags::INLINE,
        inline_data: &data[i],
        ..send(i as u64, &[])
    };
    for i in 0..SIZES.len() {
        ctx.post_send(p.a, &[inline(i)]).unwrap();
    }
    let n = SIZES.len();
    ctx.post_send(p.a, &[inline(n), inline(n + 1)]).unwrap();
    let recvs: Vec<WorkCompletion> = poll_n(&dev, &mut ctx, p.rcq, n + 2);
    for (i, r) in recvs.iter().enumerate() {
        let got = p.received(r.wr_id, r.byte_len as usize);
        assert_eq!(got, data[i], "{what}: message {i} byte for byte");
        seen.push((r.opcode, r.status, r.byte_len, got));
    }
    let sends = poll_n(&dev, &mut ctx, p.scq, n + 2);
    for s in &sends {
        seen.push((
            s.opcode,
            s.status,
            s.byte_len,
            s.wr_id.to_le_bytes().to_vec(),
        ));
    }
    let stats = dev.traffic().stats();
    assert!(
        dev.violations().is_empty(),
        "{what}: {:?}",
        dev.violations()
    );
    p.destroy(&mut ctx);
    close(&dev, ctx, &what);
    (seen, stats.blueflame_copies, stats.doorbells)
}

#[test]
fn both_routes_deliver_the_same_and_the_model_checks_every_copy() {
    for prof in PROFILES {
        let wc = SimConfig::profile(prof);
        let uc = SimConfig {
            write_combining: false,
            ..SimConfig::profile(prof)
        };
        let (seen_wc, copies, doorbells) = run(wc);
        let (seen_uc, none, doorbells_uc) = run(uc);
        assert_eq!(seen_wc, seen_uc, "{prof:?}: the same completions and bytes");
        // Every single post fits one 256-byte buffer (200 inline bytes:
        // 16 + 4 + 200 = 220); the list of two rings one doorbell.
        assert_eq!(
            copies,
            SIZES.len() as u64,
            "{prof:?}: one copy per single post"
        );
        assert_eq!(none, 0, "{prof:?}: no copy on an uncached mapping");
        assert_eq!(
            doorbells, doorbells_uc,
            "{prof:?}: one doorbell per post either way"
        );
    }
}
