//! The firmware page service behind [`Core::service`]: MANAGE_PAGES give
//! and take on the reserved command slot, with the lock held
//! (docs/firmware.md §2.1, §4.2; Linux `pagealloc.c`).

use mlx5_hal::{DmaRegion, Hal};
use mlx5_regs::Opcode;

use super::cmdwait::{backoff, outcome_of, outcome_to_result, record};
use super::service::{Core, NOT_UP};
use super::{HcaConfig, PAGES_PER_COMMAND};
use crate::cmd::encode;
use crate::cmd::{BLOCK_DATA, BLOCK_STRIDE, MAX_CMD_LEN};
use crate::diag::{self, Show};
use crate::error::Error;
use crate::stats::{CmdObserver, CmdOutcome};

/// Offset in a MANAGE_PAGES give chain of page `i`'s address: `pas[]`
/// starts right after the 16 inline bytes, so block `k` carries entries
/// `64k .. 64k + 63`.
fn give_pas_offset(i: usize) -> usize {
    let per_block = BLOCK_DATA / 8;
    (i / per_block) * BLOCK_STRIDE + (i % per_block) * 8
}

impl<H: Hal, const CE: usize, const AE: usize> Core<H, CE, AE> {
    /// Run the command in `scratch_in[..in_len]` on the reserved slot and
    /// wait for it with the lock held (MANAGE_PAGES only; docs/firmware.md §2.1).
    fn exec_reserved<O: CmdObserver>(
        &mut self,
        hal: &H,
        obs: &O,
        cfg: &HcaConfig,
        in_len: usize,
        out_len: usize,
    ) -> Result<(), Error> {
        let cmd = self.cmd.as_mut().ok_or(NOT_UP)?;
        let slot = cmd.reserved_slot();
        cmd.reap();
        if !cmd.is_free(slot) {
            return Err(Error::Timeout {
                opcode: Opcode(encode::header_opcode(&self.scratch_in[..in_len])),
                op_mod: encode::header_op_mod(&self.scratch_in[..in_len]),
                waited_ns: 0,
            });
        }
        self.scratch_out[..out_len].fill(0);
        let p = cmd.post(slot, &self.scratch_in[..in_len], out_len)?;
        self.wait_reserved(hal, obs, cfg, p, in_len, out_len)
    }

    /// [`Core::exec_reserved`] for an input whose first 16 bytes are in
    /// `scratch_in` and the rest in `chain` (MANAGE_PAGES give of any
    /// size). The chain comes back once firmware is done with it; on a
    /// timeout or fatal error it stays with the slot (firmware may still
    /// read it) and `None` comes back.
    fn exec_reserved_chain<O: CmdObserver>(
        &mut self,
        hal: &H,
        obs: &O,
        cfg: &HcaConfig,
        in_len: usize,
        chain: DmaRegion<H>,
    ) -> (Result<(), Error>, Option<DmaRegion<H>>) {
        let Some(cmd) = self.cmd.as_mut() else {
            return (Err(NOT_UP), Some(chain));
        };
        let slot = cmd.reserved_slot();
        cmd.reap();
        let out_len = encode::MANAGE_PAGES_OUT;
        if !cmd.is_free(slot) {
            let e = Error::Timeout {
                opcode: Opcode(encode::header_opcode(&self.scratch_in[..16])),
                op_mod: encode::header_op_mod(&self.scratch_in[..16]),
                waited_ns: 0,
            };
            return (Err(e), Some(chain));
        }
        self.scratch_out[..out_len].fill(0);
        let posted = cmd.post_chain(slot, &self.scratch_in[..16], in_len, out_len, &chain);
        let p = match posted {
            Ok(p) => p,
            Err(e) => return (Err(e), Some(chain)),
        };
        // The trace sees the header and as many page addresses as a
        // command record holds (the first 512).
        let rec_len = in_len.min(MAX_CMD_LEN);
        for k in 0..(rec_len - 16).div_ceil(BLOCK_DATA) {
            let start = 16 + k * BLOCK_DATA;
            let end = (start + BLOCK_DATA).min(rec_len);
            chain.read_bytes(k * BLOCK_STRIDE, &mut self.scratch_in[start..end]);
        }
        match self.wait_reserved(hal, obs, cfg, p, rec_len, out_len) {
            r @ (Ok(()) | Err(Error::Command { .. } | Error::Delivery { .. })) => (r, Some(chain)),
            Err(e) => {
                // (The queue exists: the command was posted on it.)
                if let Some(cmd) = self.cmd.as_mut() {
                    cmd.retain_chain(slot, chain);
                }
                (Err(e), None)
            }
        }
    }

    /// Wait for the command `p` on the reserved slot with the lock held.
    fn wait_reserved<O: CmdObserver>(
        &mut self,
        hal: &H,
        obs: &O,
        cfg: &HcaConfig,
        p: crate::cmd::Posted,
        in_len: usize,
        out_len: usize,
    ) -> Result<(), Error> {
        let slot = p.slot;
        let cmd = self.cmd.as_mut().ok_or(NOT_UP)?;
        let mut delay = 0;
        loop {
            let now = hal.now_ns();
            if cmd.is_done(slot) {
                let d = cmd.finish(slot, &mut self.scratch_out[..out_len]);
                let o = outcome_of(d, &self.scratch_out[..out_len]);
                let lat = now.saturating_sub(p.posted_ns);
                record(
                    &mut self.stats,
                    obs,
                    &p,
                    &self.scratch_in[..in_len],
                    &self.scratch_out[..out_len],
                    o,
                    lat,
                );
                return outcome_to_result(&p, o, lat);
            }
            if let Err(e) = self.heartbeat.check(hal) {
                cmd.abandon(slot);
                record(
                    &mut self.stats,
                    obs,
                    &p,
                    &self.scratch_in[..in_len],
                    &[],
                    CmdOutcome::Fatal,
                    now.saturating_sub(p.posted_ns),
                );
                return Err(e);
            }
            let waited = now.saturating_sub(p.posted_ns);
            if waited > cfg.cmd_timeout_ns {
                cmd.abandon(slot);
                record(
                    &mut self.stats,
                    obs,
                    &p,
                    &self.scratch_in[..in_len],
                    &[],
                    CmdOutcome::Timeout,
                    waited,
                );
                return outcome_to_result(&p, CmdOutcome::Timeout, waited);
            }
            backoff(hal, &mut delay, cfg.poll_max_delay_us);
        }
    }

    /// Give `n` pages to firmware in one MANAGE_PAGES op_mod 1, as Linux
    /// does (`give_pages`: a real ConnectX-4 takes its 12,868 init pages in
    /// one command). Up to 512 pages fit the slot's own mailboxes; beyond,
    /// the page addresses are written straight into a mailbox chain
    /// allocated from DMA memory for this command, and the command record
    /// the observer sees holds the header and the first 512 addresses. Pages are
    /// accounted as held once the command succeeds, or when its fate is
    /// unknown (timeout, fatal). `ec`: the embedded-CPU function's pages.
    pub(super) fn give_pages<O: CmdObserver>(
        &mut self,
        hal: &H,
        obs: &O,
        cfg: &HcaConfig,
        function_id: u16,
        ec: bool,
        n: usize,
    ) -> Result<(), Error> {
        if n == 0 {
            return Ok(());
        }
        // A count beyond what the manager may hold is refused before any
        // page is given (a hostile or broken device asking for 8 TiB).
        self.pages.check_room(n)?;
        let in_len = encode::manage_pages_give_len(n);
        let header = encode::manage_pages_give_header(function_id, ec, n as u32);
        if in_len <= MAX_CMD_LEN {
            // Fits the slot's own mailboxes: built in place, as any command.
            for i in 0..n {
                match self.pages.alloc_page(hal) {
                    Ok(pa) => {
                        let at = header.len() + 8 * i;
                        self.scratch_in[at..at + 8].copy_from_slice(&pa.to_be_bytes());
                    }
                    Err(e) => {
                        self.free_given_inline(i);
                        return Err(e);
                    }
                }
            }
            self.scratch_in[..header.len()].copy_from_slice(&header);
            return match self.exec_reserved(hal, obs, cfg, in_len, encode::MANAGE_PAGES_OUT) {
                Ok(()) => {
                    self.pages.note_given(n);
                    Ok(())
                }
                Err(e @ (Error::Command { .. } | Error::Delivery { .. })) => {
                    // Firmware refused: the pages are ours again.
                    self.free_given_inline(n);
                    Err(e)
                }
                // Timeout / fatal: firmware may hold them; keep them held.
                Err(e) => Err(e),
            };
        }
        let chain = self
            .cmd
            .as_mut()
            .ok_or(NOT_UP)?
            .alloc_chain(in_len)
            .map_err(|_| Error::OutOfPages { requested: n })?;
        for i in 0..n {
            match self.pages.alloc_page(hal) {
                Ok(pa) => chain.write_be64(give_pas_offset(i), pa),
                Err(e) => {
                    self.free_given(&chain, i);
                    return Err(e);
                }
            }
        }
        self.scratch_in[..header.len()].copy_from_slice(&header);
        match self.exec_reserved_chain(hal, obs, cfg, in_len, chain) {
            (Ok(()), _) => {
                self.pages.note_given(n);
                Ok(())
            }
            (Err(e @ (Error::Command { .. } | Error::Delivery { .. })), Some(chain)) => {
                // Firmware refused: the pages are ours again.
                self.free_given(&chain, n);
                Err(e)
            }
            // Not posted: nothing reached firmware.
            (Err(e), Some(chain)) => {
                self.free_given(&chain, n);
                Err(e)
            }
            // Timeout / fatal: firmware may hold them; keep them held.
            (Err(e), None) => Err(e),
        }
    }

    /// Take back from the page manager the first `n` pages of a give built
    /// in `scratch_in`.
    fn free_given_inline(&mut self, n: usize) {
        for i in 0..n {
            let at = 16 + 8 * i;
            let mut b = [0u8; 8];
            b.copy_from_slice(&self.scratch_in[at..at + 8]);
            let _ = self.pages.free(u64::from_be_bytes(b));
        }
        self.pages.release_empty();
    }

    /// Take back from the page manager the first `n` pages written into a
    /// give chain.
    fn free_given(&mut self, chain: &DmaRegion<H>, n: usize) {
        for i in 0..n {
            let _ = self.pages.free(chain.read_be64(give_pas_offset(i)));
        }
        self.pages.release_empty();
    }

    /// Take up to `n` pages back (one MANAGE_PAGES op_mod 2); returns how
    /// many firmware returned.
    pub(super) fn take_pages<O: CmdObserver>(
        &mut self,
        hal: &H,
        obs: &O,
        cfg: &HcaConfig,
        function_id: u16,
        ec: bool,
        n: usize,
    ) -> Result<usize, Error> {
        let k = n.min(PAGES_PER_COMMAND);
        let input = encode::manage_pages_take(function_id, ec, k as u32);
        self.scratch_in[..input.len()].copy_from_slice(&input);
        let out_len = encode::manage_pages_take_out_len(k);
        self.exec_reserved(hal, obs, cfg, input.len(), out_len)?;
        let got = encode::parse_manage_pages_count(&self.scratch_out[..out_len]) as usize;
        if got > k {
            self.pages.note_bad_return();
            return Err(Error::BadResponse {
                opcode: Opcode::MANAGE_PAGES,
                what: "more pages returned than requested",
            });
        }
        let mut bad = false;
        let mut freed = 0;
        for i in 0..got {
            let pa = encode::parse_manage_pages_pa(&self.scratch_out[..out_len], i).unwrap_or(0);
            if self.pages.free(pa) {
                freed += 1;
            } else {
                bad = true;
            }
        }
        // Only pages the driver gave and got back count as reclaimed.
        self.pages.note_reclaimed(freed);
        self.pages.release_empty();
        if bad {
            self.pages.note_bad_return();
            return Err(Error::BadResponse {
                opcode: Opcode::MANAGE_PAGES,
                what: "returned a page the driver never gave",
            });
        }
        Ok(got)
    }

    /// Serve queued page requests. Only a fatal error is returned; other
    /// failures are counted and the request is dropped (give: answered
    /// "cannot give") or retried later (reserved slot still busy).
    pub(super) fn serve_pages<O: CmdObserver>(
        &mut self,
        hal: &H,
        obs: &O,
        cfg: &HcaConfig,
    ) -> Result<u32, Error> {
        let mut served = 0;
        while let Some(req) = self.pages.pop_request() {
            served += 1;
            diag::debug!(
                "page request: {} pages for function {}",
                req.num_pages,
                req.function_id
            );
            let r = if req.num_pages > 0 {
                let (f, ec, n) = (req.function_id, req.ec_function, req.num_pages as usize);
                match self.give_pages(hal, obs, cfg, f, ec, n) {
                    Err(e @ (Error::OutOfPages { .. } | Error::Dma(_))) => {
                        diag::warn!(
                            "cannot give {} pages ({}): firmware is told so",
                            req.num_pages,
                            Show(&e)
                        );
                        // Linux `page_notify_fail`: MANAGE_PAGES op_mod 0.
                        self.pages.note_give_failure();
                        let f = encode::manage_pages_fail(req.function_id, req.ec_function);
                        self.scratch_in[..f.len()].copy_from_slice(&f);
                        self.exec_reserved(hal, obs, cfg, f.len(), encode::MANAGE_PAGES_OUT)
                    }
                    r => r,
                }
            } else if req.num_pages < 0 {
                let mut left = req.num_pages.unsigned_abs() as usize;
                let mut r = Ok(());
                while left > 0 {
                    match self.take_pages(hal, obs, cfg, req.function_id, req.ec_function, left) {
                        Ok(0) => break,
                        Ok(got) => left -= got,
                        Err(e) => {
                            r = Err(e);
                            break;
                        }
                    }
                }
                r
            } else {
                Ok(())
            };
            match r {
                Err(e @ Error::Fatal { .. }) => return Err(e),
                Err(Error::Timeout { waited_ns: 0, .. }) => {
                    // Reserved slot still owned by firmware: retry later.
                    self.pages.unpop_request(req);
                    return Ok(served);
                }
                _ => {}
            }
        }
        Ok(served)
    }
}
