//! A guarded target buffer for the memory-protection tests: three pages of
//! a known pattern with the region under test in the middle page, starting
//! off its page boundary (8-byte aligned, so atomics can hit its ends), so
//! that a key that opens one byte too many shows up as a changed guard byte.

use mlx5_hal::{DmaRegion, Hal};
use mlx5_sim::{Device, SimHal};

/// Size of the whole buffer: three pages.
pub const TARGET: usize = 3 * 4096;
/// Offset of the registered region in the buffer.
pub const MR_AT: usize = 4096 + 40;
/// Length of the registered region.
pub const MR_LEN: usize = 1000;
/// The guard pattern's base byte.
pub const GUARD: u8 = 0xa5;

/// The buffer; every byte starts as `pattern(offset)`.
pub struct GuardedTarget {
    /// The DMA buffer itself.
    pub region: DmaRegion<SimHal>,
}

impl GuardedTarget {
    /// Allocate the buffer on `dev` and fill byte `i` with `pattern(i)`.
    pub fn new(dev: &Device, pattern: impl Fn(usize) -> u8) -> GuardedTarget {
        let region = dev.hal().alloc_dma(TARGET).unwrap();
        let bytes: Vec<u8> = (0..TARGET).map(pattern).collect();
        region.write_bytes(0, &bytes);
        GuardedTarget { region }
    }

    /// I/O address of the region's first byte.
    pub fn start(&self) -> u64 {
        self.region.iova() + MR_AT as u64
    }

    /// I/O address one past the region's last byte.
    pub fn end(&self) -> u64 {
        self.start() + MR_LEN as u64
    }

    /// Offset in the buffer of I/O address `iova`.
    pub fn offset_of(&self, iova: u64) -> usize {
        (iova - self.region.iova()) as usize
    }

    /// Every byte of the buffer as it is now.
    pub fn bytes(&self) -> Vec<u8> {
        let mut v = vec![0u8; TARGET];
        self.region.read_bytes(0, &mut v);
        v
    }

    /// Whether every byte outside the region is the same in `a` and `b`
    /// (two snapshots from [`bytes`](Self::bytes)).
    pub fn guards_equal(a: &[u8], b: &[u8]) -> bool {
        a[..MR_AT] == b[..MR_AT] && a[MR_AT + MR_LEN..] == b[MR_AT + MR_LEN..]
    }
}
