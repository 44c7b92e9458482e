//! The device's clock: virtual time advanced by the driver's waits in
//! synchronous mode, wall time since creation in threaded mode, and when
//! firmware started (or restarted) initialising.

use std::time::Instant;

/// Device time (`Device::now_ns`).
#[derive(Debug)]
pub(crate) struct Clock {
    /// Threaded mode: time is wall time and a worker runs due work.
    pub threaded: bool,
    /// Wall-clock origin of threaded mode.
    origin: Instant,
    /// Virtual time of synchronous mode, in nanoseconds.
    pub vclock_ns: u64,
    /// When firmware started initialising (creation or function reset).
    pub created_ns: u64,
}

impl Clock {
    /// A clock at time 0.
    pub fn new(threaded: bool) -> Clock {
        Clock {
            threaded,
            origin: Instant::now(),
            vclock_ns: 0,
            created_ns: 0,
        }
    }

    /// Device time in nanoseconds.
    pub fn now_ns(&self) -> u64 {
        if self.threaded {
            self.origin.elapsed().as_nanos() as u64
        } else {
            self.vclock_ns
        }
    }
}
