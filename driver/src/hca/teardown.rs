//! Teardown in the reverse order of bring-up (docs/firmware.md §4.3).

use core::sync::atomic::Ordering;

use mlx5_hal::Hal;
use mlx5_regs::consts::op_mod;
use mlx5_regs::Opcode;

use super::{Hca, TeardownReport, MAX_COMP_VECTORS};
use crate::cmd::encode;
use crate::diag::{self, Show};
use crate::eq::EventQueue;
use crate::error::Error;
use crate::stats::CmdObserver;

impl<H: Hal, O: CmdObserver, const CE: usize, const AE: usize> Hca<H, O, CE, AE> {
    /// Tear down in the reverse order of bring-up (docs/firmware.md §4.3): the RDMA
    /// resources (GID entry cleared, `roce_en` restored, DEALLOC_XRCD,
    /// DESTROY_MKEY of the DMA key), DEALLOC_PD,
    /// DESTROY_EQ (completion, async), DEALLOC_UAR, TEARDOWN_HCA profile 0,
    /// MANAGE_PAGES take until firmware holds no page (bounded by
    /// [`super::HcaConfig::reclaim_timeout_ns`] without progress), DISABLE_HCA.
    /// Every step is attempted; the first error is returned. On a dead
    /// device no command is sent and the memory is released.
    pub fn teardown(mut self) -> Result<TeardownReport, Error> {
        self.shutdown()
    }

    pub(super) fn shutdown(&mut self) -> Result<TeardownReport, Error> {
        self.torn_down = true;
        let start = self.hal.now_ns();
        let mut first: Option<Error> = None;
        let mut note = |r: Result<(), Error>| {
            if let Err(e) = r {
                first.get_or_insert(e);
            }
        };
        let reclaimed_before = self.core.lock().pages.stats().reclaimed;
        let alive = !self.is_dead();
        // The completion EQs, then the async EQ (it serves page requests
        // until the end, Linux `mlx5_eq_table_destroy` order).
        let mut eqs: heapless::Vec<EventQueue<H>, { MAX_COMP_VECTORS + 1 }> = heapless::Vec::new();

        if alive {
            self.rdma_teardown(&mut note);
            if let Some(pd) = self.pd.take() {
                note(
                    encode::dealloc_pd(pd)
                        .map_err(Error::from)
                        .and_then(|i| self.run(i).map(|_: [u8; encode::DEALLOC_PD_OUT]| ())),
                );
            }
        }
        {
            let mut c = self.core.lock();
            while let Some(eq) = c.comp_eqs.pop() {
                let _ = eqs.push(eq);
            }
            if let Some(eq) = c.async_eq.take() {
                let _ = eqs.push(eq);
            }
        }
        if alive {
            for eq in eqs.iter() {
                note(
                    self.run(encode::destroy_eq(eq.eqn()))
                        .map(|_: [u8; encode::DESTROY_EQ_OUT]| ()),
                );
            }
            if let Some(uar) = self.uar.take() {
                note(
                    encode::dealloc_uar(uar)
                        .map_err(Error::from)
                        .and_then(|i| self.run(i).map(|_: [u8; encode::DEALLOC_UAR_OUT]| ())),
                );
            }
            if self.progress.initialized {
                self.progress.initialized = false;
                let r = self.teardown_hca(op_mod::TEARDOWN_GRACEFUL);
                if let Err(e) = r {
                    note(Err(e));
                    // Without a torn-down HCA firmware keeps its pages. Linux
                    // falls back to a forced teardown on its shutdown path
                    // (docs/firmware.md §4.3); do so when the device has the
                    // capability, else retry the graceful one once.
                    if !e.is_fatal() {
                        let force = self.caps.is_some_and(|c| c.force_teardown);
                        let _ = self.teardown_hca(if force {
                            op_mod::TEARDOWN_FORCE_CLOSE
                        } else {
                            op_mod::TEARDOWN_GRACEFUL
                        });
                    }
                }
            }
            note(self.reclaim_all());
            if self.progress.enabled {
                self.progress.enabled = false;
                note(
                    self.run(encode::disable_hca(self.embedded_cpu))
                        .map(|_: [u8; encode::DISABLE_HCA_OUT]| ()),
                );
            }
        }
        drop(eqs);
        let mut c = self.core.lock();
        let pages_left = c.pages.held();
        if pages_left > 0 && !self.dead.load(Ordering::Acquire) {
            // Firmware may still write these pages: never hand them back to
            // the platform.
            c.pages.leak_all();
        } else {
            c.pages.forget_all();
        }
        let report = TeardownReport {
            pages_reclaimed: c.pages.stats().reclaimed - reclaimed_before,
            pages_left,
            elapsed_ns: self.hal.now_ns().saturating_sub(start),
            stats: c.stats,
            page_stats: c.pages.stats(),
        };
        drop(c);
        if self.is_dead() {
            if let Some(e) = *self.fatal.lock() {
                first.get_or_insert(e);
            }
        }
        diag::info!(
            "teardown: {} pages reclaimed, {} still held by firmware",
            report.pages_reclaimed,
            pages_left
        );
        match first {
            Some(e) => {
                diag::error!("teardown: {}", Show(&e));
                Err(e)
            }
            None => Ok(report),
        }
    }

    fn teardown_hca(&self, profile: u16) -> Result<(), Error> {
        let out: [u8; encode::TEARDOWN_HCA_OUT] = self.run(encode::teardown_hca(profile))?;
        if encode::parse_teardown_hca_failed(&out) {
            return Err(Error::BadResponse {
                opcode: Opcode::TEARDOWN_HCA,
                what: "teardown state: failed",
            });
        }
        Ok(())
    }

    /// MANAGE_PAGES op_mod 2 until firmware holds no page; gives up after
    /// `reclaim_timeout_ns` without progress (Linux
    /// `mlx5_reclaim_startup_pages`). A refused command counts as no
    /// progress and is retried; the first error is returned at the end even
    /// if a retry succeeded. Timeouts and fatal errors end it at once.
    fn reclaim_all(&self) -> Result<(), Error> {
        let mut last_progress = self.hal.now_ns();
        let mut first: Option<Error> = None;
        loop {
            let mut core = self.core.lock();
            let held = core.pages.held();
            if held == 0 {
                return first.map_or(Ok(()), Err);
            }
            let (f, ec) = (core.function_id, core.embedded_cpu);
            let r = core.take_pages(&self.hal, &self.observer, &self.cfg, f, ec, held);
            drop(core);
            match r {
                Ok(n) if n > 0 => {
                    last_progress = self.hal.now_ns();
                    continue;
                }
                Ok(_) => {}
                Err(
                    e
                    @ (Error::Command { .. } | Error::Delivery { .. } | Error::BadResponse { .. }),
                ) => {
                    first.get_or_insert(e);
                }
                Err(e) => {
                    let e = self.note_fatal(e);
                    return Err(first.unwrap_or(e));
                }
            }
            if self.hal.now_ns().saturating_sub(last_progress) > self.cfg.reclaim_timeout_ns {
                return Err(first.unwrap_or(Error::ReclaimStalled { pages_left: held }));
            }
            self.hal.delay_us(self.cfg.poll_max_delay_us.max(1));
        }
    }
}

impl<H: Hal, O: CmdObserver, const CE: usize, const AE: usize> Drop for Hca<H, O, CE, AE> {
    /// An `Hca` dropped without [`Hca::teardown`] is torn down best-effort,
    /// so firmware never keeps pointers into freed memory.
    fn drop(&mut self) {
        if !self.torn_down {
            let _ = self.shutdown();
        }
    }
}
