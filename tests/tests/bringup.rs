//! Bring-up and teardown against the model: every profile, both execution
//! modes; the model holds nothing afterwards.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use mlx5_driver::stats::{CmdObserver, CmdRecord};
use mlx5_driver::{CmdOutcome, Hca};
use mlx5_regs::Opcode;
use mlx5_sim::{Device, ExecMode, HcaState, Profile, SimConfig};
use mlx5_tests::{assert_clean, bring_up, config, device, traced_opcodes, MODES, PROFILES};

#[test]
fn bring_up_and_teardown_on_every_profile_in_both_modes() {
    for mode in MODES {
        for profile in PROFILES {
            let what = format!("{profile:?}/{mode:?}");
            let dev = device(profile, mode);
            let hca = bring_up(&dev);
            assert_eq!(dev.hca_state(), HcaState::Initialized, "{what}");
            assert_eq!(hca.issi(), 1, "{what}: ISSI 1 preferred");
            assert_eq!(dev.issi(), 1, "{what}");
            let held = hca.pages_held_by_firmware();
            assert!(held > 0, "{what}: firmware got pages");
            assert_eq!(held, dev.pages_held(), "{what}: page accounting agrees");
            let objs = dev.objects();
            assert_eq!(
                (objs.eqs, objs.uars, objs.pds),
                (2, 1, 1),
                "{what}: {objs:?}"
            );
            assert_eq!(hca.reserved_lkey(), dev.reserved_lkey(), "{what}");

            let model = dev.caps();
            let caps = hca.caps();
            assert_eq!(caps.log_max_cq_sz, model.log_max_cq_sz, "{what}");
            assert_eq!(caps.log_max_srq_sz, model.log_max_srq_sz, "{what}");
            assert_eq!(caps.max_wqe_sz_rq, model.max_wqe_sz_rq, "{what}");
            assert_eq!(caps.max_srq_sge, model.max_wqe_sz_rq as u32 / 16, "{what}");
            assert_eq!(caps.cq_resize, model.cq_resize, "{what}");
            assert_eq!(caps.cqe_version, model.cqe_version, "{what}");
            assert_eq!(
                caps.cmdif_checksum, 0,
                "{what}: SET_HCA_CAP turned checksums off"
            );
            let fw = hca.fw_version();
            assert_eq!((fw.major, fw.minor, fw.subminor), model.fw_rev, "{what}");
            assert_eq!(fw.cmdif_rev, 5);

            let report = hca
                .teardown()
                .unwrap_or_else(|e| panic!("{what}: teardown: {e}"));
            assert_eq!(report.pages_left, 0, "{what}");
            assert_eq!(report.pages_reclaimed as usize, held, "{what}");
            assert_eq!(dev.hca_state(), HcaState::Disabled, "{what}");
            assert_clean(&dev, &what);
            let leaked = dev.leaked_at_teardown().unwrap_or_default();
            assert_eq!(
                leaked.total(),
                0,
                "{what}: objects left for TEARDOWN_HCA: {leaked:?}"
            );
        }
    }
}

#[test]
fn bring_up_follows_the_linux_order() {
    let dev = device(Profile::ConnectX5, ExecMode::Synchronous);
    let hca = bring_up(&dev);
    let ops = traced_opcodes(&dev);
    // MANAGE_PAGES appears after each QUERY_PAGES that asked for pages.
    let no_pages: Vec<u16> = ops
        .iter()
        .copied()
        .filter(|&o| o != Opcode::MANAGE_PAGES.0)
        .collect();
    let expect = [
        Opcode::ENABLE_HCA,
        Opcode::QUERY_ISSI,
        Opcode::SET_ISSI,
        Opcode::QUERY_PAGES,
        Opcode::ACCESS_REG,
        Opcode::QUERY_HCA_CAP,
        Opcode::QUERY_HCA_CAP,
        Opcode::SET_HCA_CAP,
        // The atomic page (cap `atomic`): read, host endianness set, read
        // back (Linux `handle_hca_cap_atomic`).
        Opcode::QUERY_HCA_CAP,
        Opcode::SET_HCA_CAP,
        Opcode::QUERY_HCA_CAP,
        Opcode::QUERY_PAGES,
        Opcode::INIT_HCA,
        Opcode::QUERY_HCA_CAP,
        Opcode::QUERY_PAGES,
        Opcode::ALLOC_UAR,
        Opcode::CREATE_EQ,
        Opcode::CREATE_EQ,
        Opcode::ALLOC_PD,
        Opcode::QUERY_SPECIAL_CONTEXTS,
        // The RDMA resources (the ConnectX-5 profile can carry RC traffic):
        // the DMA key, the XRC domain, then the loopback choice from the
        // RoCE capability page and the NIC vport context (force-loopback
        // with RoCE disabled: nothing to configure), and the default GIDs
        // (link-local, RoCE v1 at 0 and v2 at 1, as ib core reserves them).
        Opcode::CREATE_MKEY,
        Opcode::ALLOC_XRCD,
        Opcode::QUERY_HCA_CAP,
        Opcode::QUERY_NIC_VPORT_CONTEXT,
        Opcode::SET_ROCE_ADDRESS,
        Opcode::SET_ROCE_ADDRESS,
    ]
    .map(|o| o.0);
    assert_eq!(no_pages, expect, "bring-up order (docs/firmware.md §4.1)");
    let first_pages = ops.iter().position(|&o| o == Opcode::MANAGE_PAGES.0);
    let first_query = ops.iter().position(|&o| o == Opcode::QUERY_PAGES.0);
    assert!(
        first_pages > first_query,
        "boot pages given right after QUERY_PAGES"
    );
    dev.clear_trace();
    hca.teardown().unwrap();
    let ops = traced_opcodes(&dev);
    let no_pages: Vec<u16> = ops
        .iter()
        .copied()
        .filter(|&o| o != Opcode::MANAGE_PAGES.0)
        .collect();
    let expect = [
        // The RDMA resources first, in reverse: the default GIDs deleted
        // (highest index first), the XRC domain, the DMA key.
        Opcode::SET_ROCE_ADDRESS,
        Opcode::SET_ROCE_ADDRESS,
        Opcode::DEALLOC_XRCD,
        Opcode::DESTROY_MKEY,
        Opcode::DEALLOC_PD,
        Opcode::DESTROY_EQ,
        Opcode::DESTROY_EQ,
        Opcode::DEALLOC_UAR,
        Opcode::TEARDOWN_HCA,
        Opcode::DISABLE_HCA,
    ]
    .map(|o| o.0);
    assert_eq!(no_pages, expect, "teardown order (docs/firmware.md §4.3)");
    let last = ops.len() - 1;
    assert!(
        ops[..last]
            .iter()
            .rposition(|&o| o == Opcode::MANAGE_PAGES.0)
            > ops.iter().position(|&o| o == Opcode::TEARDOWN_HCA.0),
        "pages reclaimed after TEARDOWN_HCA, before DISABLE_HCA"
    );
    assert_clean(&dev, "order");
}

#[test]
fn issi_0_only_firmware_stays_at_issi_0() {
    let dev = Device::new(SimConfig {
        issi_supported: 0b01,
        ..SimConfig::default()
    });
    let hca = bring_up(&dev);
    assert_eq!(hca.issi(), 0);
    assert_eq!(dev.issi(), 0);
    assert!(
        !traced_opcodes(&dev).contains(&Opcode::SET_ISSI.0),
        "no SET_ISSI when only ISSI 0 is supported (Linux mlx5_core_set_issi)"
    );
    hca.teardown().unwrap();
    assert_clean(&dev, "issi 0");
}

/// (opcode, op_mod, input length, output length, outcome)
type Seen = (u16, u16, usize, usize, CmdOutcome);

#[derive(Default)]
struct Recorder {
    count: AtomicUsize,
    seen: Mutex<Vec<Seen>>,
}

impl CmdObserver for Recorder {
    fn command(&self, rec: &CmdRecord<'_>) {
        self.count.fetch_add(1, Ordering::Relaxed);
        self.seen.lock().unwrap().push((
            rec.opcode.0,
            rec.op_mod,
            rec.input.len(),
            rec.output.len(),
            rec.outcome,
        ));
    }
}

#[test]
fn trace_hook_and_statistics_see_every_command() {
    let dev = device(Profile::ConnectX6Dx, ExecMode::Synchronous);
    let rec = Recorder::default();
    let hca: Hca<_, &Recorder> = Hca::bring_up_with(dev.hal(), config(), &rec).unwrap();
    let model = dev.trace().len();
    assert_eq!(
        rec.count.load(Ordering::Relaxed),
        model,
        "hook saw every command"
    );
    let stats = hca.stats();
    assert_eq!(
        stats.total() as usize,
        model,
        "statistics count every command"
    );
    let qcap = stats.get(Opcode::QUERY_HCA_CAP).unwrap();
    // Maximum and current general caps before INIT_HCA, the atomic page
    // twice, current general caps after INIT_HCA, and the RoCE page for the
    // loopback choice.
    assert_eq!((qcap.count, qcap.failures), (6, 0));
    assert!(qcap.max_ns <= qcap.total_ns);
    {
        let seen = rec.seen.lock().unwrap();
        let q = seen
            .iter()
            .find(|s| s.0 == Opcode::QUERY_HCA_CAP.0)
            .unwrap();
        assert_eq!((q.2, q.3), (16, 4112), "exact lengths per layout");
        assert!(seen.iter().all(|s| s.4 == CmdOutcome::Ok));
    }
    // The raw API the CLI uses.
    let mut out = [0u8; mlx5_driver::unstable::encode::NOP_OUT];
    hca.exec(&mlx5_driver::unstable::encode::nop(), &mut out)
        .unwrap();
    assert_eq!(hca.stats().get(Opcode::NOP).unwrap().count, 1);
    hca.teardown().unwrap();
    assert_clean(&dev, "trace");
}

#[test]
fn commands_from_several_threads() {
    let dev = device(Profile::ConnectX7, ExecMode::Threaded);
    let hca = bring_up(&dev);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..50 {
                    let mut out = [0u8; mlx5_driver::unstable::encode::QUERY_PAGES_OUT];
                    hca.exec(
                        &mlx5_driver::unstable::encode::query_pages(3, false),
                        &mut out,
                    )
                    .unwrap();
                }
            });
        }
    });
    assert_eq!(hca.stats().get(Opcode::QUERY_PAGES).unwrap().count, 3 + 200);
    hca.teardown().unwrap();
    assert_clean(&dev, "threads");
}

#[test]
fn dropping_without_teardown_still_returns_everything() {
    let dev = device(Profile::ConnectX5, ExecMode::Synchronous);
    drop(bring_up(&dev));
    assert_eq!(dev.hca_state(), HcaState::Disabled);
    assert_clean(&dev, "drop");
}
