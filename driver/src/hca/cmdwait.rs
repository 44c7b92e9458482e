//! The bounded command wait: post on a free slot, wait for ownership to come
//! back while serving events and page requests, turn the outcome into a
//! typed error, record it (docs/firmware.md §2).

use core::sync::atomic::Ordering;

use mlx5_hal::Hal;
use mlx5_regs::{CmdStatus, DeliveryStatus, Opcode};

use super::service::NOT_UP;
use super::Hca;
use crate::cmd::encode;
use crate::cmd::Posted;
use crate::diag::{self, Show};
use crate::error::Error;
use crate::stats::{CmdObserver, CmdOutcome, CmdRecord, CmdStats};

/// Commands that succeed, without reaching the device, once it is dead:
/// the ones that free an object, so software can release each object's
/// memory (Linux `mlx5_internal_err_ret_value`: destroy, dealloc, 2ERR,
/// 2RST, MANAGE_PAGES, TEARDOWN/DISABLE_HCA, MODIFY_NIC_VPORT_CONTEXT).
/// Every other command fails with the fatal error.
pub fn succeeds_when_dead(op: Opcode) -> bool {
    matches!(
        op,
        Opcode::TEARDOWN_HCA
            | Opcode::DISABLE_HCA
            | Opcode::MANAGE_PAGES
            | Opcode::DESTROY_MKEY
            | Opcode::DESTROY_EQ
            | Opcode::DESTROY_CQ
            | Opcode::DESTROY_QP
            | Opcode::DESTROY_SRQ
            | Opcode::DESTROY_RMP
            | Opcode::DEALLOC_PD
            | Opcode::DEALLOC_UAR
            | Opcode::DEALLOC_XRCD
            | Opcode::QP_2ERR
            | Opcode::QP_2RST
            | Opcode::MODIFY_NIC_VPORT_CONTEXT
            | Opcode::DESTROY_UMEM
    )
}

pub(super) fn outcome_of(delivery: DeliveryStatus, output: &[u8]) -> CmdOutcome {
    if delivery != DeliveryStatus::OK {
        return CmdOutcome::Delivery(delivery);
    }
    let (status, syndrome) = encode::out_status(output);
    if status == CmdStatus::OK {
        CmdOutcome::Ok
    } else {
        CmdOutcome::Status { status, syndrome }
    }
}

pub(super) fn outcome_to_result(p: &Posted, o: CmdOutcome, waited_ns: u64) -> Result<(), Error> {
    match o {
        CmdOutcome::Ok => Ok(()),
        CmdOutcome::Status { status, syndrome } => Err(Error::Command {
            opcode: p.opcode,
            op_mod: p.op_mod,
            status,
            syndrome,
        }),
        CmdOutcome::Delivery(status) => Err(Error::Delivery {
            opcode: p.opcode,
            op_mod: p.op_mod,
            status,
        }),
        CmdOutcome::Timeout => Err(Error::Timeout {
            opcode: p.opcode,
            op_mod: p.op_mod,
            waited_ns,
        }),
        // The caller substitutes the health error.
        CmdOutcome::Fatal => Ok(()),
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn record<O: CmdObserver>(
    stats: &mut CmdStats,
    obs: &O,
    p: &Posted,
    input: &[u8],
    output: &[u8],
    outcome: CmdOutcome,
    latency_ns: u64,
) {
    stats.record(p.opcode, outcome, latency_ns);
    if !outcome.is_ok() {
        stats.last_failure = Some(crate::stats::CmdFailure {
            opcode: p.opcode,
            op_mod: p.op_mod,
            outcome,
            latency_ns,
        });
    }
    match outcome {
        CmdOutcome::Ok => {}
        CmdOutcome::Status { status, syndrome } => diag::warn!(
            "{} op_mod {:#x}: status {}, syndrome {:#x}",
            Show(&p.opcode),
            p.op_mod,
            Show(&status),
            syndrome
        ),
        CmdOutcome::Delivery(_) => {
            diag::warn!("{} op_mod {:#x}: not delivered", Show(&p.opcode), p.op_mod)
        }
        CmdOutcome::Timeout => diag::warn!(
            "{} op_mod {:#x}: no answer after {} us",
            Show(&p.opcode),
            p.op_mod,
            latency_ns / 1000
        ),
        CmdOutcome::Fatal => {}
    }
    obs.command(&CmdRecord {
        opcode: p.opcode,
        op_mod: p.op_mod,
        slot: p.slot as u8,
        token: p.token,
        input,
        output,
        outcome,
        latency_ns,
    });
}

/// Exponential backoff between checks: spin once, then sleep 1, 2, 4 …
/// up to `max` microseconds.
pub(super) fn backoff<H: Hal>(hal: &H, delay: &mut u32, max: u32) {
    if *delay == 0 {
        core::hint::spin_loop();
        *delay = 1;
    } else {
        hal.delay_us(*delay);
        *delay = (*delay * 2).min(max.max(1));
    }
}

impl<H: Hal, O: CmdObserver, const CE: usize, const AE: usize> Hca<H, O, CE, AE> {
    /// Run a fixed-size command.
    pub(crate) fn run<const I: usize, const OUT: usize>(
        &self,
        input: [u8; I],
    ) -> Result<[u8; OUT], Error> {
        let mut out = [0u8; OUT];
        self.exec(&input, &mut out)?;
        Ok(out)
    }

    /// Remember a fatal error so every later call fails fast.
    pub(super) fn note_fatal(&self, e: Error) -> Error {
        if e.is_fatal() {
            let mut f = self.fatal.lock();
            if f.is_none() {
                diag::error!("{}", Show(&e));
                *f = Some(e);
            }
            self.dead.store(true, Ordering::Release);
        }
        e
    }

    pub(super) fn check_alive(&self) -> Result<(), Error> {
        if self.dead.load(Ordering::Acquire) {
            if let Some(e) = *self.fatal.lock() {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Execute a raw command: `input` is the whole command input (header
    /// included), `output` receives the whole output; its length is the
    /// output length sent to firmware (exact per layout). On a firmware
    /// status error `output` still holds what firmware wrote.
    ///
    /// MANAGE_PAGES is refused: pages belong to the page manager.
    ///
    /// Build the input with `mlx5-regs`' layouts (exact lengths: firmware
    /// checks them):
    ///
    /// ```no_run
    /// # fn demo<H: mlx5_hal::Hal>(hca: &mlx5_driver::Hca<H>) -> Result<(), mlx5_driver::Error> {
    /// use mlx5_regs::layouts::{cmd_in, query_issi_in, query_issi_out};
    /// use mlx5_regs::Opcode;
    /// let mut input = [0u8; query_issi_in::SIZE];
    /// cmd_in::opcode.set(&mut input, Opcode::QUERY_ISSI.0)?;
    /// let mut out = [0u8; query_issi_out::SIZE];
    /// hca.exec(&input, &mut out)?;
    /// let current = query_issi_out::current_issi.get(&out);
    /// # let _ = current; Ok(()) }
    /// ```
    pub fn exec(&self, input: &[u8], output: &mut [u8]) -> Result<(), Error> {
        self.exec_timeout(input, output, self.cfg.cmd_timeout_ns)
    }

    /// [`Hca::exec`] with an explicit timeout in nanoseconds.
    pub fn exec_timeout(
        &self,
        input: &[u8],
        output: &mut [u8],
        timeout_ns: u64,
    ) -> Result<(), Error> {
        if input.len() < 8 || output.len() < 8 {
            return Err(Error::InvalidArgument("command shorter than its header"));
        }
        let op = Opcode(encode::header_opcode(input));
        if self.is_dead() && succeeds_when_dead(op) {
            // Dead device: the object is gone with it; software frees it
            // (Linux `mlx5_internal_err_ret_value`). Nothing is sent.
            output.fill(0);
            return Ok(());
        }
        self.check_alive()?;
        if encode::header_opcode(input) == Opcode::MANAGE_PAGES.0 {
            return Err(Error::InvalidArgument(
                "MANAGE_PAGES is issued by the page manager only",
            ));
        }
        output.fill(0);
        let hal = &self.hal;
        let max_delay = self.cfg.poll_max_delay_us;
        let start = hal.now_ns();
        let mut delay = 0;
        // Get a slot and post.
        let p = loop {
            {
                let mut core = self.core.lock();
                let cmd = core.cmd.as_mut().ok_or(NOT_UP)?;
                if let Some(slot) = cmd.alloc_regular() {
                    break cmd.post(slot, input, output.len())?;
                }
                core.service(hal, &self.observer, &self.cfg)
                    .map_err(|e| self.note_fatal(e))?;
            }
            let waited = hal.now_ns().saturating_sub(start);
            if waited > timeout_ns {
                return Err(Error::Timeout {
                    opcode: Opcode(encode::header_opcode(input)),
                    op_mod: encode::header_op_mod(input),
                    waited_ns: waited,
                });
            }
            backoff(hal, &mut delay, max_delay);
        };
        // Wait for it, serving events and page requests meanwhile.
        delay = 0;
        loop {
            {
                let mut core = self.core.lock();
                let now = hal.now_ns();
                let waited = now.saturating_sub(p.posted_ns);
                let cmd = core.cmd.as_mut().ok_or(NOT_UP)?;
                if cmd.is_done(p.slot) {
                    let d = cmd.finish(p.slot, output);
                    let o = outcome_of(d, output);
                    record(
                        &mut core.stats,
                        &self.observer,
                        &p,
                        input,
                        output,
                        o,
                        waited,
                    );
                    return outcome_to_result(&p, o, waited);
                }
                if let Err(e) = core.service(hal, &self.observer, &self.cfg) {
                    if e.is_fatal() {
                        if let Some(c) = core.cmd.as_mut() {
                            c.abandon(p.slot);
                        }
                        record(
                            &mut core.stats,
                            &self.observer,
                            &p,
                            input,
                            &[],
                            CmdOutcome::Fatal,
                            waited,
                        );
                        drop(core);
                        let e = self.note_fatal(e);
                        // A destroy in flight when the device died frees
                        // its object all the same (Linux flushes it with
                        // the same answer, `mlx5_cmd_flush`).
                        if succeeds_when_dead(p.opcode) {
                            output.fill(0);
                            return Ok(());
                        }
                        return Err(e);
                    }
                }
                if waited > timeout_ns {
                    if let Some(c) = core.cmd.as_mut() {
                        c.abandon(p.slot);
                    }
                    record(
                        &mut core.stats,
                        &self.observer,
                        &p,
                        input,
                        &[],
                        CmdOutcome::Timeout,
                        waited,
                    );
                    return outcome_to_result(&p, CmdOutcome::Timeout, waited);
                }
            }
            backoff(hal, &mut delay, max_delay);
        }
    }
}
