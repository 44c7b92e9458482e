//! Shared helpers for the benchmarks in `benches/`: the benchmark plays the
//! device by writing CQEs straight into ring memory, as a DMA engine would.

use mlx5_driver::cq::CqRing;
use mlx5_hal::host::HostHal;

/// Fill every slot of `ring` with a receive CQE owned by software for the pass
/// that starts at running index `first` (which must be a multiple of the ring
/// size), with distinct byte counts and WQE counters.
pub fn prefill_cq(ring: &CqRing<HostHal>, first: u32) {
    let nent = ring.nent();
    let stride = ring.cqe_size().stride();
    let owner = ((first >> ring.log_nent()) & 1) as u8;
    let base = ring.region().as_ptr();
    for slot in 0..nent {
        let cqe = slot * stride + stride - 64;
        let p = first.wrapping_add(slot as u32);
        let fields: [(usize, &[u8]); 5] = [
            (0x20, &0x0000_0042u32.to_be_bytes()),
            (0x2c, &(p & 0xffff).to_be_bytes()),
            (0x38, &0x0000_1234u32.to_be_bytes()),
            (0x3c, &(p as u16).to_be_bytes()),
            (0x3f, &[(2 << 4) | owner]),
        ];
        for (off, bytes) in fields {
            for (i, b) in bytes.iter().enumerate() {
                // SAFETY: `cqe + off + i` < ring length (slot < nent, off < 64);
                // the region is live DMA memory of the host platform.
                unsafe { base.add(cqe + off + i).write_volatile(*b) };
            }
        }
    }
}
