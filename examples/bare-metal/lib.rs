//! # A bare-metal skeleton: the NIC part of a unikernel
//!
//! `no_std`, no heap, no `std::thread`: the unikernel's boot code finds the
//! ConnectX on PCI, maps BAR0 uncached, identity-maps this image (its
//! `.bss` holds the DMA pool), enables bus mastering, knows the TSC
//! frequency, and calls [`mlx5_main`]. From there the driver does the rest:
//!
//! * the 60 KiB `Hca` is a `static`, built in place ([`StaticCell`],
//!   `Hca::new_down`, `Hca::bring_up_in_place`): it never sits on the
//!   boot stack;
//! * DMA memory is a static [`DmaPool`] of 4 MiB in `.bss`;
//! * a CQ and an SRQ with receive buffers, then a polling loop: EQs (no
//!   interrupts), completions, buffers reposted, the CQ re-armed;
//! * teardown, with every firmware page back, before returning.
//!
//! Traffic needs a queue pair on the SRQ (`Hca::create_qp`, as
//! `examples/dataplane.rs` does on the model); the skeleton stops at the
//! receive side. CI builds it for `x86_64-unknown-none`; `cargo test` runs
//! [`run`] on the device model.
#![cfg_attr(target_os = "none", no_std)]

use mlx5_bare_metal::{DmaPool, IdentityHal, StaticCell};
use mlx5_driver::cq::{CqOptions, Cqe};
use mlx5_driver::srq::RecvRequest;
use mlx5_driver::{Error, Event, Hca, HcaConfig};
use mlx5_hal::Hal;

/// DMA memory for firmware pages, queues and buffers: 1024 pages (4 MiB)
/// in `.bss`, identity-mapped by the boot code.
static POOL: DmaPool<1024> = DmaPool::new();

/// The HCA, in `.data` from the start, down until `mlx5_main` brings it up.
static HCA: StaticCell<Hca<IdentityHal>> = StaticCell::new(Hca::new_down(IdentityHal::UNSET, ()));

/// Receive buffers: count and size.
const BUFS: usize = 64;
const BUF: usize = 2048;

/// Entry from the boot code (C ABI). `bar0` maps BAR0 of one ConnectX
/// function uncached for `bar0_len` bytes; `tsc_hz` is the invariant TSC
/// frequency. Polls `iterations` times, tears down, and returns the number
/// of messages received, or a negative errno.
///
/// # Safety
///
/// The promises of `IdentityHal::new`: the mapping is as stated, nothing
/// else drives the function, this image is identity-mapped and the device
/// may DMA to it (bus mastering on).
#[no_mangle]
pub unsafe extern "C" fn mlx5_main(
    bar0: *mut u8,
    bar0_len: usize,
    tsc_hz: u64,
    iterations: u64,
) -> i64 {
    let Some(hca) = HCA.take() else {
        return -16; // EBUSY: called twice
    };
    // SAFETY: the caller's promises (this function's contract) are those
    // of `IdentityHal::new`; the pool is a static of this image.
    let hal = unsafe { IdentityHal::new(bar0, bar0_len, &POOL, tsc_hz, 0) };
    match run(hca, hal, iterations) {
        Ok(n) => n as i64,
        Err(e) => -(e.errno() as i64),
    }
}

/// The driver part, on any platform: bring `hca` up in place on `hal`,
/// receive for `iterations` polls, tear down. Returns the messages
/// received.
pub fn run<H: Hal>(hca: &mut Hca<H>, hal: H, iterations: u64) -> Result<u64, Error> {
    // A small pool: give firmware its pages in 256 KiB chunks, not 2 MiB.
    let cfg = HcaConfig {
        page_chunk_pages: 64,
        ..HcaConfig::DEFAULT
    };
    hca.bring_up_in_place(hal, cfg)?;
    let received = receive(hca, iterations);
    // Tear down whatever `receive` returned: every page comes back.
    let down = hca.teardown_in_place();
    let n = received?;
    down?;
    Ok(n)
}

fn receive<H: Hal>(hca: &Hca<H>, iterations: u64) -> Result<u64, Error> {
    let mut cq = hca.create_cq(255, CqOptions::default())?;
    let mut srq = hca.create_srq(BUFS as u32, 1, Some(&mut cq))?;
    let bufs = hca.hal().alloc_dma(BUFS * BUF)?;
    for i in 0..BUFS {
        let sge = [hca.sge(bufs.iova_at(i * BUF), BUF as u32)];
        srq.post(&[RecvRequest {
            wr_id: i as u64,
            sges: &sge,
        }])?;
    }
    hca.arm_cq(&mut cq, false)?;

    let mut cqes = [Cqe::EMPTY; 16];
    let mut received = 0;
    for _ in 0..iterations {
        // No interrupts: poll the EQs (page requests are served here too).
        hca.poll_events()?;
        let mut woken = false;
        while let Some(ev) = hca.next_completion() {
            woken |= ev == Event::Completion { cqn: cq.cqn() };
        }
        while let Some(_event) = hca.next_event() {
            // SRQ limit, port change, CQ error: the application's business.
        }
        let n = cq.poll(&mut cqes);
        for cqe in &cqes[..n] {
            let r = srq.complete_cqe(cqe)?;
            // The message is in buffer `r.wr_id`, `r.byte_len` bytes: hand
            // it to the stack, then give the buffer back.
            let at = r.wr_id as usize * BUF;
            let sge = [hca.sge(bufs.iova_at(at), BUF as u32)];
            srq.post(&[RecvRequest {
                wr_id: r.wr_id,
                sges: &sge,
            }])?;
            received += 1;
        }
        if woken {
            hca.arm_cq(&mut cq, false)?;
        }
    }
    hca.destroy_srq(srq, Some(&mut cq))?;
    hca.destroy_cq(cq)?;
    drop(bufs);
    Ok(received)
}

/// A `no_std` program has no unwinding: stop the core.
#[cfg(target_os = "none")]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    loop {
        core::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use mlx5_driver::Hca;
    use mlx5_sim::{Device, SimConfig, SimHal};

    /// The skeleton's driver part on the device model: bring-up in place,
    /// the receive side and its polling loop (no QP, so nothing arrives),
    /// teardown with every page back and nothing left in the model.
    #[test]
    fn runs_on_the_model() {
        let dev = Device::new(SimConfig::default());
        let mut hca: Box<Hca<SimHal>> = Box::new(Hca::new_down(dev.hal(), ()));
        assert_eq!(super::run(&mut hca, dev.hal(), 100), Ok(0));
        assert_eq!(dev.pages_held(), 0);
        assert_eq!(dev.objects().total(), 0);
        assert!(dev.violations().is_empty(), "{:?}", dev.violations());
    }
}

/// The code of docs/bare-metal.md, compiled as doc tests of this crate.
#[cfg(doctest)]
#[doc = include_str!("../../docs/bare-metal.md")]
pub struct BareMetalDoc;
