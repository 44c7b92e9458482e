//! Memory: the size of every driver object, and the DMA memory each CQ and
//! SRQ size needs (measured, not computed: objects are created on the
//! device model through a platform wrapper that counts the bytes of every
//! live DMA region). Prints markdown tables; `cargo bench -p mlx5-bench
//! --bench memory`.

use std::mem::size_of;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use mlx5_driver::cmd::CmdQueue;
use mlx5_driver::cq::{Cq, CqOptions, Cqe, CqeSize};
use mlx5_driver::eq::{Event, EventQueue, EventSink};
use mlx5_driver::pages::PageManager;
use mlx5_driver::srq::Srq;
use mlx5_driver::unstable;
use mlx5_driver::unstable::cq::{CqRing, DoorbellRecord};
use mlx5_driver::unstable::srq::SrqRing;
use mlx5_driver::{Caps, CmdStats, Hca, HcaConfig};
use mlx5_hal::host::HostHal;
use mlx5_hal::{DmaRegion, Hal, HalError, RawDma};
use mlx5_sim::{Device, SimConfig, SimHal};

/// A platform that forwards to the model and counts live DMA bytes.
#[derive(Clone)]
struct Counting {
    inner: SimHal,
    live: Arc<AtomicUsize>,
}

// SAFETY: every method forwards to `SimHal`, which upholds the `Hal`
// contract; the wrapper only adds a counter and changes no memory or
// register behaviour.
unsafe impl Hal for Counting {
    fn bar0_size(&self) -> usize {
        self.inner.bar0_size()
    }
    fn mmio_read32(&self, offset: usize) -> u32 {
        self.inner.mmio_read32(offset)
    }
    fn mmio_write32(&self, offset: usize, value: u32) {
        self.inner.mmio_write32(offset, value)
    }
    fn mmio_write64(&self, offset: usize, value: u64) {
        self.inner.mmio_write64(offset, value)
    }
    fn alloc_dma_raw(&self, size: usize) -> Result<RawDma, HalError> {
        let r = self.inner.alloc_dma_raw(size)?;
        self.live.fetch_add(r.len, Ordering::Relaxed);
        Ok(r)
    }
    unsafe fn free_dma_raw(&self, region: RawDma) {
        self.live.fetch_sub(region.len, Ordering::Relaxed);
        // SAFETY: forwarded unchanged under the caller's guarantees.
        unsafe { self.inner.free_dma_raw(region) }
    }
    fn now_ns(&self) -> u64 {
        self.inner.now_ns()
    }
    fn delay_us(&self, us: u32) {
        self.inner.delay_us(us)
    }
}

fn kib(b: usize) -> String {
    if b >= 1 << 20 {
        format!("{:.2} MiB", b as f64 / (1 << 20) as f64)
    } else {
        format!("{:.1} KiB", b as f64 / 1024.0)
    }
}

macro_rules! sizes {
    ($($t:ty),* $(,)?) => {
        $(println!("| `{}` | {} |", stringify!($t), size_of::<$t>());)*
    };
}

fn main() {
    // Criterion's arguments (`--bench`, `--test`) are accepted and ignored:
    // this target only prints.
    println!("### Driver object sizes (bytes, x86_64; H = SimHal, an Arc: 8 bytes)\n");
    println!("| type | size_of |");
    println!("|---|---|");
    sizes!(
        Hca<SimHal>,
        CmdQueue<SimHal>,
        EventQueue<SimHal>,
        EventSink<Event, 256>,
        EventSink<Event, 64>,
        PageManager<SimHal>,
        CmdStats,
        Caps,
        Cq<SimHal>,
        CqRing<SimHal>,
        DoorbellRecord<SimHal>,
        Srq<SimHal>,
        SrqRing<SimHal>,
        DmaRegion<SimHal>,
        DmaRegion<HostHal>,
        Cqe,
        Event,
    );

    let dev = Device::new(SimConfig::default());
    let live = Arc::new(AtomicUsize::new(0));
    let hal = Counting {
        inner: dev.hal(),
        live: live.clone(),
    };
    let before = live.load(Ordering::Relaxed);
    let hca = Hca::bring_up(hal, HcaConfig::default()).unwrap();
    let up = live.load(Ordering::Relaxed) - before;
    println!(
        "\n### DMA memory\n\nHca after bring-up: {} (command queue + mailboxes, EQs, \
         firmware pages: {} pages held by firmware)\n",
        kib(up),
        hca.pages_held_by_firmware()
    );

    println!("| CQ entries asked | ring entries | CQE size | DMA bytes (ring + doorbell record) |");
    println!("|---|---|---|---|");
    for entries in [64u32, 256, 1024, 4096, 65536, 1 << 20] {
        for size in [CqeSize::B64, CqeSize::B128] {
            let b0 = live.load(Ordering::Relaxed);
            let cq = hca
                .create_cq(
                    entries,
                    CqOptions {
                        cqe_size: size,
                        ..CqOptions::default()
                    },
                )
                .unwrap();
            let used = live.load(Ordering::Relaxed) - b0;
            println!(
                "| {entries} | {} | {} | {} ({used}) |",
                1u64 << cq.log_size(),
                size.stride(),
                kib(used)
            );
            hca.destroy_cq(cq).map_err(|e| e.error()).unwrap();
        }
    }

    let issi0 = hca.issi() == 0;
    let mut cq = hca.create_cq(64, CqOptions::default()).unwrap();
    println!(
        "\n| SRQ max_wr | max_sge | WQEs | stride | DMA bytes (WQEs + wr_id/state book + doorbell record) |"
    );
    println!("|---|---|---|---|---|");
    for max_wr in [63u32, 255, 1023, 4095, 32767] {
        for max_sge in [1u32, 4] {
            let b0 = live.load(Ordering::Relaxed);
            let srq: Srq<Counting> = hca
                .create_srq(max_wr, max_sge, issi0.then_some(&mut cq))
                .unwrap();
            let used = live.load(Ordering::Relaxed) - b0;
            let geo = unstable::srq::ring(&srq).geometry();
            println!(
                "| {max_wr} | {max_sge} | {} | {} | {} ({used}) |",
                geo.wqe_cnt(),
                geo.stride(),
                kib(used)
            );
            hca.destroy_srq(srq, issi0.then_some(&mut cq))
                .map_err(|e| e.error())
                .unwrap();
        }
    }
    hca.destroy_cq(cq).map_err(|e| e.error()).unwrap();
    hca.teardown().unwrap();
    println!();
}
