//! Bring-up in the order of docs/firmware.md §4.1.

use mlx5_hal::Hal;
use mlx5_regs::consts::op_mod;
use mlx5_regs::layouts::{cmd_hca_cap, initial_seg};
use mlx5_regs::{EventMask, Opcode};

use super::{async_event_mask, vectors, FwVersion, Hca, HcaConfig};
use crate::caps::{AtomicCaps, Caps};
use crate::cmd::encode;
use crate::cmd::{CmdQueue, MAX_CMD_LEN};
use crate::diag::{self, Show};
use crate::eq::EventQueue;
use crate::error::Error;
use crate::health::{mmio_field, Heartbeat};
use crate::stats::CmdObserver;

/// Wait until the initializing bit clears, at most `limit_ns`
/// (docs/firmware.md §1.2).
fn wait_fw_init<H: Hal>(hal: &H, cfg: &HcaConfig, limit_ns: u64) -> Result<(), Error> {
    let start = hal.now_ns();
    loop {
        if !mmio_field(hal, 0, &initial_seg::initializing) {
            return Ok(());
        }
        let waited = hal.now_ns().saturating_sub(start);
        if waited > limit_ns {
            return Err(Error::FirmwareInitTimeout { waited_ns: waited });
        }
        hal.delay_us(cfg.fw_init_poll_us.max(1));
    }
}

/// An init-segment timeout register in nanoseconds: bits 31:29 the unit
/// (0 ms, 1 s, 2 min, 3 h; bit 31 ignored as Linux masks it), bits 19:0
/// the count (Linux `tout_convert_iseg_to_ms`).
pub(crate) fn iseg_timeout_ns(reg: u32) -> u64 {
    let value = (reg & 0xf_ffff) as u64;
    let ms = match (reg >> 29) & 3 {
        0 => value,
        1 => value * 1_000,
        2 => value * 60_000,
        _ => value * 3_600_000,
    };
    ms * 1_000_000
}

/// The device's own (command, fw-init) timeouts, if it publishes them: only
/// when `cmd_q_init_to` is non-zero (Linux `tout_is_supported`).
fn read_device_timeouts<H: Hal>(hal: &H) -> Option<(u64, u64)> {
    let init = mmio_field::<H, u32>(hal, 0, &initial_seg::cmd_q_init_to);
    if init == 0 {
        return None;
    }
    let cmd = mmio_field::<H, u32>(hal, 0, &initial_seg::cmd_exec_to);
    Some((iseg_timeout_ns(cmd), iseg_timeout_ns(init)))
}

impl<H: Hal> Hca<H> {
    /// Bring the HCA up with no trace hook and default event capacities.
    /// See [`Hca::bring_up_with`].
    pub fn bring_up(hal: H, cfg: HcaConfig) -> Result<Self, Error> {
        Self::bring_up_with(hal, cfg, ())
    }
}

impl<H: Hal, O: CmdObserver, const CE: usize, const AE: usize> Hca<H, O, CE, AE> {
    /// Bring the HCA up in the order of docs/firmware.md §4.1: wait for firmware, set
    /// up the command queue, ENABLE_HCA, ISSI, boot pages, host endianness,
    /// QUERY/SET_HCA_CAP, init pages, INIT_HCA, capabilities, regular pages,
    /// ALLOC_UAR, the async EQ (page requests + async events) and the
    /// completion EQs ([`HcaConfig::comp_vectors`]), ALLOC_PD,
    /// QUERY_SPECIAL_CONTEXTS; then, on a device
    /// that can carry RC traffic ([`Caps::rdma_capable`]), the RDMA
    /// resources: the DMA key (CREATE_MKEY), an XRC domain (ALLOC_XRCD, with
    /// the `xrc` capability) and the loopback addressing
    /// ([`crate::loopback`]).
    ///
    /// On failure everything done so far is undone (objects destroyed, pages
    /// taken back, HCA disabled) and the first error is returned.
    pub fn bring_up_with(hal: H, cfg: HcaConfig, observer: O) -> Result<Self, Error> {
        let mut hca = Self::new_down(hal, observer);
        hca.cfg = cfg;
        hca.start()?;
        Ok(hca)
    }

    /// Bring up an HCA that is down and was never up (from
    /// [`Hca::new_down`]), in place: the command queue and the bring-up
    /// steps; on failure everything done is undone.
    pub(super) fn start(&mut self) -> Result<(), Error> {
        // 1. Pre-init wait, 2. command queue, 3. the device's timeouts and
        // the wait again (docs/firmware.md §4.1, Linux `mlx5_function_enable`).
        wait_fw_init(&self.hal, &self.cfg, self.cfg.fw_init_timeout_ns)?;
        let cmd = CmdQueue::new(&self.hal)?;
        self.device_timeouts = if self.cfg.device_timeouts {
            read_device_timeouts(&self.hal)
        } else {
            None
        };
        let mut init_limit = self.cfg.fw_init_timeout_ns;
        if let Some((cmd_ns, init_ns)) = self.device_timeouts {
            self.cfg.cmd_timeout_ns = cmd_ns;
            init_limit = init_ns;
        }
        wait_fw_init(&self.hal, &self.cfg, init_limit)?;
        let hal = &self.hal;
        self.fw = FwVersion {
            major: mmio_field(hal, 0, &initial_seg::fw_rev_major),
            minor: mmio_field(hal, 0, &initial_seg::fw_rev_minor),
            subminor: mmio_field(hal, 0, &initial_seg::fw_rev_subminor),
            cmdif_rev: mmio_field(hal, 0, &initial_seg::cmd_interface_rev),
        };
        self.embedded_cpu = mmio_field(hal, 0, &initial_seg::embedded_cpu);
        diag::info!(
            "firmware {}.{}.{} ready, command interface revision {}",
            self.fw.major,
            self.fw.minor,
            self.fw.subminor,
            self.fw.cmdif_rev
        );
        let now = hal.now_ns();
        let cfg = self.cfg;
        let embedded_cpu = self.embedded_cpu;
        {
            // Field by field: the big parts (page manager, event queues,
            // scratch buffers) stay where they are, never copied.
            let core = self.core.get_mut();
            core.cmd = Some(cmd);
            core.embedded_cpu = embedded_cpu;
            core.pages
                .set_limits(cfg.page_chunk_pages, cfg.max_fw_pages);
            core.heartbeat = Heartbeat::new(cfg.heartbeat_timeout_ns, now);
        }
        self.torn_down = false;
        match self.bring_up_steps() {
            Ok(()) => {
                diag::info!(
                    "bring-up complete: ISSI {}, {} firmware pages, UAR {}, PD {:#x}",
                    self.issi,
                    self.pages_held_by_firmware(),
                    self.uar(),
                    self.pd()
                );
                Ok(())
            }
            Err(e) => {
                diag::error!("bring-up failed: {}", Show(&e));
                // Unwind; the original error is what the caller needs.
                let _ = self.shutdown();
                Err(e)
            }
        }
    }

    fn startup_pages(&self, kind: u16) -> Result<(), Error> {
        let ec = self.embedded_cpu;
        let out: [u8; encode::QUERY_PAGES_OUT] = self.run(encode::query_pages(kind, ec))?;
        let (function_id, n) = encode::parse_query_pages(&out);
        let mut core = self.core.lock();
        core.function_id = function_id;
        if n > 0 {
            let r = core.give_pages(
                &self.hal,
                &self.observer,
                &self.cfg,
                function_id,
                ec,
                n as usize,
            );
            drop(core);
            if let Err(e) = r {
                return Err(self.note_fatal(e));
            }
        }
        diag::info!("QUERY_PAGES op_mod {}: {} pages given", kind, n);
        Ok(())
    }

    fn query_caps(&self, current: bool) -> Result<Caps, Error> {
        let out: [u8; encode::QUERY_HCA_CAP_OUT] =
            self.run(encode::query_hca_cap(op_mod::CAP_GENERAL, current))?;
        let caps = Caps::parse(encode::parse_query_hca_cap(&out));
        caps.validate()?;
        Ok(caps)
    }

    /// The atomic page (Linux `handle_hca_cap_atomic`, before INIT_HCA):
    /// read it; when the device can answer 8-byte atomics in host
    /// endianness, set `atomic_req_8B_endianness_mode` to 1 and read the
    /// page back.
    fn set_up_atomic_page(&self) -> Result<AtomicCaps, Error> {
        let out: [u8; encode::QUERY_HCA_CAP_OUT] =
            self.run(encode::query_hca_cap(op_mod::CAP_ATOMIC, true))?;
        let page = encode::parse_query_hca_cap(&out);
        let found = AtomicCaps::parse(page);
        if !found.host_endianness_supported {
            return Ok(found);
        }
        let mut cap = [0u8; mlx5_regs::layouts::atomic_caps::SIZE];
        cap.copy_from_slice(&page[..mlx5_regs::layouts::atomic_caps::SIZE]);
        mlx5_regs::layouts::atomic_caps::atomic_req_8b_endianness_mode.set(
            &mut cap,
            mlx5_regs::consts::atomic::REQ_MODE_HOST_ENDIANNESS,
        )?;
        let mut set = [0u8; encode::SET_HCA_CAP_IN];
        encode::set_hca_cap(&mut set, op_mod::CAP_ATOMIC, &cap);
        let _: [u8; encode::SET_HCA_CAP_OUT] = self.run(set)?;
        let out: [u8; encode::QUERY_HCA_CAP_OUT] =
            self.run(encode::query_hca_cap(op_mod::CAP_ATOMIC, true))?;
        Ok(AtomicCaps::parse(encode::parse_query_hca_cap(&out)))
    }

    fn create_eq(&self, log_size: u8, mask: u64, intr: u16) -> Result<EventQueue<H>, Error> {
        let uar = self.uar.ok_or(Error::InvalidArgument("no UAR"))?;
        let mut buf = [0u8; MAX_CMD_LEN];
        let (mut eq, len) = EventQueue::prepare_on(&self.hal, log_size, uar, mask, intr, &mut buf)?;
        let mut out = [0u8; encode::CREATE_EQ_OUT];
        self.exec(&buf[..len], &mut out)?;
        eq.created(&self.hal, encode::parse_create_eq(&out));
        Ok(eq)
    }

    fn bring_up_steps(&mut self) -> Result<(), Error> {
        // 5. ENABLE_HCA.
        let _: [u8; encode::ENABLE_HCA_OUT] = self.run(encode::enable_hca(self.embedded_cpu))?;
        self.progress.enabled = true;
        diag::debug!("ENABLE_HCA done");

        // 6. ISSI (Linux `mlx5_core_set_issi`): a firmware status on
        // QUERY_ISSI means ISSI 0; prefer 1.
        let issi: Result<[u8; encode::QUERY_ISSI_OUT], Error> = self.run(encode::query_issi());
        let supported = match issi {
            Ok(out) => encode::parse_query_issi(&out).1,
            Err(Error::Command { .. }) => 0,
            Err(e) => return Err(e),
        };
        if supported & 2 != 0 {
            let _: [u8; encode::SET_ISSI_OUT] = self.run(encode::set_issi(1))?;
            self.issi = 1;
        } else if supported & 1 != 0 || supported == 0 {
            self.issi = 0;
        } else {
            return Err(Error::IssiNotSupported { supported });
        }
        diag::info!("ISSI {} (supported {:#x})", self.issi, supported);

        // 7. Boot pages.
        self.startup_pages(op_mod::QUERY_PAGES_BOOT)?;

        // 9. Host endianness: a PF register, skipped on a VF as Linux does
        // (`mlx5_function_setup`: `if (mlx5_core_is_pf(dev))`).
        if !self.cfg.virtual_function {
            let _: [u8; encode::ACCESS_REG_HOST_ENDIANNESS_LEN] = self.run(
                encode::access_reg_host_endianness(cfg!(target_endian = "big")),
            )?;
        }

        // 10. QUERY_HCA_CAP max + current, SET_HCA_CAP (general). Changed
        // from current: cmdif_checksum = 0 (Linux and rdma-core: firmware
        // must not require mailbox signatures), log_uar_page_sz = 0 (4 KiB
        // UAR pages: the doorbell offsets of docs/firmware.md §5 assume them).
        let max = self.query_caps(false)?;
        self.max_caps = Some(max);
        let cur = self.query_caps(true)?;
        let mut cap = cur.raw;
        cmd_hca_cap::cmdif_checksum.set(&mut cap, 0)?;
        cmd_hca_cap::log_uar_page_sz.set(&mut cap, 0)?;
        let mut set = [0u8; encode::SET_HCA_CAP_IN];
        encode::set_hca_cap(&mut set, op_mod::CAP_GENERAL, &cap);
        let _: [u8; encode::SET_HCA_CAP_OUT] = self.run(set)?;
        if cur.atomic {
            self.atomic_caps = Some(self.set_up_atomic_page()?);
        }

        // 11. Init pages, 12. INIT_HCA.
        self.startup_pages(op_mod::QUERY_PAGES_INIT)?;
        let owner = if cur.sw_owner_id {
            self.cfg.sw_owner_id
        } else {
            None
        };
        let _: [u8; encode::INIT_HCA_OUT] = self.run(encode::init_hca(owner))?;
        self.progress.initialized = true;
        diag::info!("INIT_HCA done");

        // 13. Capabilities as the HCA now runs with them.
        let caps = self.query_caps(true)?;
        self.caps = Some(caps);

        // Regular pages.
        self.startup_pages(op_mod::QUERY_PAGES_REGULAR)?;

        // 14. UAR, async EQ, completion EQs.
        let out: [u8; encode::ALLOC_UAR_OUT] = self.run(encode::alloc_uar())?;
        let uar = encode::parse_alloc_uar(&out);
        // The UAR's doorbells are MMIO writes at uar × 4 KiB: an index
        // beyond BAR0 (untrusted output) must never be used.
        if uar as usize >= self.hal.bar0_size() / mlx5_regs::doorbell::UAR_PAGE_SIZE {
            return Err(Error::BadResponse {
                opcode: Opcode::ALLOC_UAR,
                what: "UAR index beyond BAR0",
            });
        }
        self.uar = Some(uar);

        let max_log = if caps.log_max_eq_sz == 0 {
            self.cfg.async_eq_log_size
        } else {
            caps.log_max_eq_sz
        };
        let mut mask = async_event_mask();
        if caps.page_request_disable {
            mask.remove(EventMask::PAGE_REQUEST);
        }
        let irqs = self.hal.irq_vectors().min(mlx5_hal::MAX_IRQ_VECTORS);
        let intr = vectors::async_intr();
        let eq = self.create_eq(self.cfg.async_eq_log_size.min(max_log), mask.bits(), intr)?;
        self.core.lock().async_eq = Some(eq);
        // Completion EQs: mask 0, CQs route to them through cqc.c_eqn.
        let n = vectors::comp_vector_count(self.cfg.comp_vectors, &caps);
        for i in 0..n {
            let intr = vectors::comp_intr(irqs, i);
            let eq = self.create_eq(self.cfg.comp_eq_log_size.min(max_log), 0, intr)?;
            // Cannot fail: `n` is at most the capacity.
            let _ = self.core.lock().comp_eqs.push(eq);
        }
        self.irq_mask = self.eq_irq_mask(irqs);

        let out: [u8; encode::ALLOC_PD_OUT] = self.run(encode::alloc_pd())?;
        self.pd = Some(encode::parse_alloc_pd(&out));

        let out: [u8; encode::QUERY_SPECIAL_CONTEXTS_OUT] =
            self.run(encode::query_special_contexts())?;
        let (resd, term) = encode::parse_query_special_contexts(&out);
        diag::debug!("UAR, EQs and PD allocated; reserved lkey {:#x}", resd);
        self.resd_lkey = resd;
        self.terminate_mkey = term;

        // RDMA resources: DMA key, XRC domain, loopback addressing.
        self.rdma_bring_up()
    }
}
