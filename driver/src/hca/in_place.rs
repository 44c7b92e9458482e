//! An HCA built where it lives: a `static` on bare metal, so the 55-60 KiB
//! `Hca` never passes through a small stack (docs/bare-metal.md).
//!
//! [`Hca::new_down`] is a `const fn`: it makes an HCA that is down (no
//! command queue, nothing given to firmware) and can initialise a `static`.
//! [`Hca::bring_up_in_place`] then brings it up through `&mut self`, writing
//! each part where it already is, and [`Hca::teardown_in_place`] takes it
//! down again. `mlx5-bare-metal`'s `StaticCell` hands out the one `&'static
//! mut` to such a `static` (that is where the `unsafe` lives).

use core::sync::atomic::{AtomicBool, AtomicU8};

use crate::cmd::MAX_CMD_LEN;
use mlx5_hal::Hal;

use super::rdma::RdmaState;
use super::{Core, FwVersion, Hca, HcaConfig, Progress, TeardownReport};
use crate::cq::ArmTable;
use crate::eq::EventSink;
use crate::error::Error;
use crate::health::Heartbeat;
use crate::pages::PageManager;
use crate::stats::{CmdObserver, CmdStats};

impl<H: Hal, O: CmdObserver, const CE: usize, const AE: usize> Hca<H, O, CE, AE> {
    /// An HCA that is down: nothing allocated, no command sent. Usable in a
    /// `static` initialiser (a `const fn`); bring it up with
    /// [`Hca::bring_up_in_place`]. Until then it answers no command
    /// ([`Error::InvalidArgument`]), and [`Hca::caps`] panics.
    ///
    /// `hal` may be a placeholder that reaches nothing (for example
    /// `mlx5_bare_metal::IdentityHal::UNSET`): bring-up replaces it.
    pub const fn new_down(hal: H, observer: O) -> Self {
        let cfg = HcaConfig::DEFAULT;
        Hca {
            hal,
            cfg,
            core: spin::Mutex::new(Core {
                cmd: None,
                async_eq: None,
                comp_eqs: heapless::Vec::new(),
                pages: PageManager::new(cfg.page_chunk_pages, cfg.max_fw_pages),
                completions: EventSink::new(),
                cq_arms: ArmTable::new(),
                events: EventSink::new(),
                stats: CmdStats::new(),
                heartbeat: Heartbeat::new(cfg.heartbeat_timeout_ns, 0),
                polls_since_health: 0,
                function_id: 0,
                embedded_cpu: false,
                scratch_in: [0; MAX_CMD_LEN],
                scratch_out: [0; MAX_CMD_LEN],
                limit_watch: heapless::Vec::new(),
            }),
            dead: AtomicBool::new(false),
            fatal: spin::Mutex::new(None),
            observer,
            progress: Progress {
                enabled: false,
                initialized: false,
            },
            // Nothing to undo when dropped.
            torn_down: true,
            fw: FwVersion {
                major: 0,
                minor: 0,
                subminor: 0,
                cmdif_rev: 0,
            },
            device_timeouts: None,
            embedded_cpu: false,
            issi: 0,
            caps: None,
            max_caps: None,
            atomic_caps: None,
            uar: None,
            pd: None,
            resd_lkey: 0,
            terminate_mkey: 0,
            rdma: RdmaState::new(),
            mkey_variant: AtomicU8::new(0),
            irq_mask: 0,
        }
    }

    /// Bring up, in place, an HCA made by [`Hca::new_down`] on the platform
    /// `hal` (which replaces the one given there) with `cfg`: the same
    /// steps as [`Hca::bring_up_with`], no copy of the `Hca` on the stack.
    /// On failure everything done is undone and the error returned.
    ///
    /// Once per `Hca`: an HCA that was brought up before (even if the
    /// attempt failed, or it was torn down since) is refused with
    /// [`Error::Busy`] and left as it is.
    ///
    /// ```no_run
    /// # fn demo<H: mlx5_hal::Hal + Clone>(placeholder: H, hal: H) -> Result<(), mlx5_driver::Error> {
    /// use mlx5_driver::{Hca, HcaConfig};
    /// // Usually a `static` (see mlx5-bare-metal's StaticCell); any place works.
    /// let mut hca: Hca<H> = Hca::new_down(placeholder, ());
    /// hca.bring_up_in_place(hal, HcaConfig::DEFAULT)?;
    /// assert!(hca.pages_held_by_firmware() > 0);
    /// hca.teardown_in_place()?;
    /// # Ok(()) }
    /// ```
    pub fn bring_up_in_place(&mut self, hal: H, cfg: HcaConfig) -> Result<(), Error> {
        if self.core.get_mut().cmd.is_some() {
            return Err(Error::Busy("this Hca was brought up before"));
        }
        self.hal = hal;
        self.cfg = cfg;
        self.start()
    }

    /// [`Hca::teardown`] without moving the HCA: the same steps, and the
    /// `Hca` stays where it is, down (a later drop does nothing more).
    pub fn teardown_in_place(&mut self) -> Result<TeardownReport, Error> {
        self.shutdown()
    }
}
