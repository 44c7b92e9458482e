//! Shared helpers for the driver-against-model integration tests
//! (`tests/tests/`, one binary: `cargo test -p mlx5-tests --test
//! integration`). Everything a test of that binary shares with another lives
//! here; `tests/README.md` says which module a new test goes in.

use mlx5_driver::cq::{Cq, Cqe};
use mlx5_driver::{Hca, HcaConfig};

pub mod fuzz;
mod fuzz_send;
pub mod guarded;
pub mod hostile_mr;
pub mod hostile_send;
pub mod hosts;
pub mod qp;
pub mod qp_random;
pub mod rdma_pair;
pub mod seeds;
pub mod ud;
pub mod verbs_common;
pub mod verbs_cq_srq_common;
use mlx5_sim::{Device, ExecMode, Profile, SimConfig, SimHal};

/// Every capability profile of the model.
pub const PROFILES: [Profile; 4] = [
    Profile::ConnectX4Lx,
    Profile::ConnectX5,
    Profile::ConnectX6Dx,
    Profile::ConnectX7,
];

/// Both execution modes of the model.
pub const MODES: [ExecMode; 2] = [ExecMode::Synchronous, ExecMode::Threaded];

/// A model device.
pub fn device(profile: Profile, mode: ExecMode) -> Device {
    let cfg = SimConfig::profile(profile);
    Device::new(match mode {
        ExecMode::Synchronous => cfg,
        ExecMode::Threaded => cfg.threaded(),
    })
}

/// Driver configuration for tests: default timeouts (virtual time makes
/// them free in synchronous mode), smaller EQs so wrap-around is cheap.
pub fn config() -> HcaConfig {
    HcaConfig {
        async_eq_log_size: 8,
        comp_eq_log_size: 7,
        ..HcaConfig::default()
    }
}

/// Bring a device up with [`config`], panicking with the error's text.
pub fn bring_up(dev: &Device) -> Hca<SimHal> {
    match Hca::bring_up(dev.hal(), config()) {
        Ok(h) => h,
        Err(e) => panic!("bring-up failed: {e}"),
    }
}

/// The model holds no page, no object, saw no protocol violation and no
/// IOMMU fault.
pub fn assert_clean(dev: &Device, what: &str) {
    assert_eq!(dev.pages_held(), 0, "{what}: model still holds pages");
    assert_eq!(
        dev.objects().total(),
        0,
        "{what}: model still holds objects {:?}",
        dev.objects()
    );
    assert!(
        dev.violations().is_empty(),
        "{what}: protocol violations {:#?}",
        dev.violations()
    );
    assert!(
        dev.iommu_faults().is_empty(),
        "{what}: IOMMU faults {:#?}",
        dev.iommu_faults()
    );
}

/// The opcodes of the model's trace, in order.
pub fn traced_opcodes(dev: &Device) -> Vec<u16> {
    dev.trace().iter().map(|t| t.opcode).collect()
}

/// A small seeded generator (xorshift64*) for the random-sequence tests, so
/// a failing seed replays exactly.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    #[allow(clippy::should_implement_trait)] // not an Iterator: never ends
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Inject `n` send completions on `cq`, numbered from `*seq` on: the
/// number's low 16 bits are the `wqe_counter` and the whole number is the
/// byte count, so [`drain_byte_lens`] returns the sequence.
pub fn inject_sends(dev: &Device, cq: &Cq<SimHal>, seq: &mut u32, n: u32) {
    for _ in 0..n {
        dev.traffic()
            .complete_send(cq.cqn(), 0x77, *seq as u16, *seq)
            .expect("inject");
        *seq += 1;
    }
}

/// Poll everything waiting on `cq` and return the byte counts.
pub fn drain_byte_lens(cq: &mut Cq<SimHal>) -> Vec<u32> {
    let mut out = [Cqe::EMPTY; 16];
    let mut got = Vec::new();
    loop {
        let n = cq.poll(&mut out);
        if n == 0 {
            return got;
        }
        got.extend(out[..n].iter().map(|c| c.byte_len));
    }
}
