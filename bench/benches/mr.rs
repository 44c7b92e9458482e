//! Memory registration on the device model: `reg_mr` + `dereg_mr` of
//! 4 KiB, 1 MiB and 1 GiB through the verbs facade, beside the bare command
//! round trips they cost (the same CREATE_MKEY input, encoded once, and a
//! DESTROY_MKEY through `Hca::exec`) in the same run. Before timing it prints
//! what one registration of each size sends: the commands (counted by the
//! driver's per-opcode table), the MTT page size and entries.
//!
//! The region is device memory the model allocated (`SimHal::alloc_dma`:
//! zeroed, page aligned, contiguous in device addresses), so Linux's page
//! choice (`ib_umem_find_best_pgsz`: the smallest power-of-two page holding
//! the region where device and virtual addresses agree) gives one or two
//! MTT entries at every size; host 2 MiB pages would change nothing here,
//! since the device sees one contiguous range. The 1 GiB region is never
//! touched by the driver or the model (the model checks DMA only on
//! access), so its host memory stays uncommitted.
//!
//! `cargo bench -p mlx5-bench --bench mr`; ids `mr/<size>/{verbs,raw_cmds}`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use mlx5_driver::mkey::MkeyAccess;
use mlx5_driver::unstable::mkey_cmd as mk;
use mlx5_driver::verbs::{AccessFlags, Verbs};
use mlx5_driver::{CmdStats, Hca, HcaConfig};
use mlx5_hal::{DmaRegion, Hal};
use mlx5_sim::{Device, SimConfig, SimHal};

/// The sizes the issue asks for.
const SIZES: [(&str, usize); 3] = [("4KiB", 4 << 10), ("1MiB", 1 << 20), ("1GiB", 1 << 30)];

/// Every command the driver ran so far.
fn total(s: &CmdStats) -> u64 {
    s.iter().map(|o| o.count).sum::<u64>() + s.untracked
}

/// The opcodes (and counts) run between two snapshots.
fn ran(before: &CmdStats, after: &CmdStats) -> Vec<String> {
    after
        .iter()
        .filter_map(|o| {
            let n = o.count - before.get(o.opcode).map_or(0, |b| b.count);
            (n > 0).then(|| format!("{:?} x{n}", o.opcode))
        })
        .collect()
}

fn registration(c: &mut Criterion) {
    // Room for bring-up and the 1 GiB region (the default limit is 1 GiB).
    let cfg = SimConfig {
        dma_limit: 2 << 30,
        ..SimConfig::default()
    };
    let dev = Device::new(cfg);
    let hca = Hca::bring_up(dev.hal(), HcaConfig::default()).expect("bring-up");
    let mut ctx: Verbs<SimHal> = Verbs::open(hca);
    let rights = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let regions: Vec<(&str, DmaRegion<SimHal>)> = SIZES
        .iter()
        .map(|&(name, len)| (name, dev.hal().alloc_dma(len).expect("DMA region")))
        .collect();

    println!("| region | commands per reg_mr + dereg_mr | MTT page | MTT entries |");
    println!("|---|---|---|---|");
    for (name, r) in &regions {
        let len = r.len() as u64;
        let before = ctx.hca().stats();
        let mr = ctx.reg_mr(r.iova(), len, rights).expect("reg_mr");
        ctx.dereg_mr(mr).map_err(|(_, e)| e).expect("dereg_mr");
        let after = ctx.hca().stats();
        let layout = mk::MttLayout::for_region(r.iova(), len).expect("a layout");
        println!(
            "| {name} | {} ({}) | 2^{} | {} |",
            total(&after) - total(&before),
            ran(&before, &after).join(", "),
            layout.log_page_size,
            layout.entries
        );
    }

    let mut g = c.benchmark_group("mr");
    g.throughput(Throughput::Elements(1));
    for (name, r) in &regions {
        let len = r.len() as u64;
        g.bench_function(BenchmarkId::new(*name, "verbs"), |b| {
            b.iter(|| {
                let mr = ctx.reg_mr(r.iova(), len, rights).unwrap();
                black_box(mr.rkey());
                ctx.dereg_mr(mr).map_err(|(_, e)| e).unwrap();
            })
        });
        // The baseline: the same two commands, the CREATE_MKEY input
        // encoded once (a fixed variant: every create gets a fresh index).
        let key = mk::MttKey {
            pd: ctx.hca().pd(),
            access: MkeyAccess::LOCAL_READ
                | MkeyAccess::LOCAL_WRITE
                | MkeyAccess::REMOTE_WRITE
                | MkeyAccess::REMOTE_READ,
            variant: 0x5a,
            start: r.iova(),
            len,
            pg_access: ctx.hca().caps().pg,
        };
        let layout = mk::MttLayout::for_region(r.iova(), len).expect("a layout");
        let mut input = [0u8; mk::CREATE_MKEY_MTT_MAX];
        let n = mk::create_mkey_mtt(&mut input, &key, &layout).expect("encoded");
        let hca = ctx.hca();
        g.bench_function(BenchmarkId::new(*name, "raw_cmds"), |b| {
            b.iter(|| {
                let mut out = [0u8; mk::CREATE_MKEY_OUT];
                hca.exec(&input[..n], &mut out).unwrap();
                let k = mlx5_regs::consts::mkey::key(mk::parse_create_mkey(&out), 0x5a);
                let d = mk::destroy_mkey(k).unwrap();
                let mut dout = [0u8; mk::DESTROY_MKEY_OUT];
                hca.exec(&d, &mut dout).unwrap();
            })
        });
    }
    g.finish();
    drop(regions);
    ctx.close().expect("close");
}

criterion_group!(benches, registration);
criterion_main!(benches);
