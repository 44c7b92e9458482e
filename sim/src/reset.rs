//! Function-level reset (PCIe FLR, what `VFIO_DEVICE_RESET` does when a
//! VFIO device is opened or closed): the function forgets every firmware
//! object, every page it was given and its command queue, and comes back
//! Disabled with the initializing bit set until firmware is ready again.
//! rdma-core's VFIO driver relies on it: it never reclaims pages or sends
//! DISABLE_HCA (`providers/mlx5/mlx5_vfio.c` `mlx5_vfio_free_context`).

use crate::port::Port;
use crate::state::{Health, State};
use crate::{HcaState, ObjectCounts};

/// What a function reset dropped (`Device::function_reset`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResetReport {
    /// The firmware state the reset found.
    pub hca_state: Option<HcaState>,
    /// Objects that were alive.
    pub objects: ObjectCounts,
    /// Pages firmware held.
    pub pages: usize,
    /// The device was in a fatal state.
    pub was_fatal: bool,
}

impl State {
    /// Forget every firmware object of the function and the GIDs of its
    /// port: the one path TEARDOWN_HCA and a function reset share (the
    /// table's rules are in `objects/`).
    pub fn forget_objects(&mut self) {
        self.objects.clear();
        self.port.gids.clear();
    }

    /// Drop all firmware state of the function (see the module docs).
    pub fn function_reset(&mut self) -> ResetReport {
        let report = ResetReport {
            hca_state: Some(self.hca),
            objects: self.object_counts(),
            pages: self.pages.held.len(),
            was_fatal: self.health.fatal.is_some(),
        };
        self.forget_objects();
        // The vport context is the function's: power-on values again.
        // The cable stays plugged in.
        let wire = self.port.wire.take();
        self.port = Port::new(self.cfg.seed);
        self.port.wire = wire;
        self.pages.held.clear();
        self.pages.queued_requests.clear();
        self.hca = HcaState::Disabled;
        self.reset_function();
        self.host_be = false;
        self.driver_version = None;
        // The command queue is forgotten: the driver programs it again.
        self.cmdq.reset();
        self.mmio_queue.clear();
        self.health = Health::default();
        self.late_limits.clear();
        self.leaked_at_teardown = None;
        // Firmware initialises again after the reset.
        self.clock.created_ns = self.now_ns();
        self.resets += 1;
        report
    }
}
