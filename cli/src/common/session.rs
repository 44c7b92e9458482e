//! What every subcommand shares: wait for firmware (with progress), bring
//! the HCA up with the tracer attached, narrate it, tear it down and check
//! that every firmware page came back.

use mlx5_driver::{Hca, HcaConfig};
use mlx5_hal::Hal;
use mlx5_regs::field::read_bits;
use mlx5_regs::layouts::initial_seg;
use mlx5_sim::Device;
use serde_json::json;

use crate::common::error::CliError;
use crate::common::report::Report;
use crate::common::target::Target;
use crate::common::trace::Tracer;

/// The HCA type the tool drives.
pub type TracedHca<'t, H> = Hca<H, &'t Tracer>;

/// The environment of a run.
pub struct Env<'a> {
    /// `--device`.
    pub target: &'a Target,
    /// The model, when the target is the model.
    pub model: Option<&'a Device>,
    /// Driver configuration.
    pub cfg: HcaConfig,
}

fn initializing<H: Hal>(hal: &H) -> bool {
    let f = &initial_seg::initializing;
    let word = hal.mmio_read32(f.byte_offset());
    read_bits(&word.to_be_bytes(), f.bit_off % 32, 1) != 0
}

/// Wait for the init segment's `initializing` bit to clear, with progress
/// on stderr (firmware initialisation takes seconds on a real card after a
/// reset). Returns the time waited (Hal clock).
pub fn wait_firmware<H: Hal>(hal: &H, r: &Report, cfg: &HcaConfig) -> Result<u64, CliError> {
    let start = hal.now_ns();
    let mut announced = false;
    let mut next_report = 1_000_000_000u64;
    loop {
        if !initializing(hal) {
            let waited = hal.now_ns().saturating_sub(start);
            if announced {
                r.progress(format!(
                    "firmware ready after {}",
                    crate::common::trace::fmt_ns(waited)
                ));
            }
            return Ok(waited);
        }
        let waited = hal.now_ns().saturating_sub(start);
        if !announced {
            r.progress("waiting for the firmware to finish initialising (init segment 'initializing' bit is set)");
            announced = true;
        }
        if waited >= next_report {
            r.progress(format!(
                "  still initialising after {} s (gives up after {} s)",
                waited / 1_000_000_000,
                cfg.fw_init_timeout_ns / 1_000_000_000
            ));
            next_report += 1_000_000_000;
        }
        if waited > cfg.fw_init_timeout_ns {
            return Err(CliError::driver(
                "waiting for firmware",
                mlx5_driver::Error::FirmwareInitTimeout { waited_ns: waited },
            ));
        }
        hal.delay_us(cfg.fw_init_poll_us.max(1));
    }
}

/// Wait for firmware and bring the HCA up with the tracer attached.
pub fn bring_up<'t, H: Hal>(
    hal: H,
    env: &Env<'_>,
    tracer: &'t Tracer,
    r: &mut Report,
) -> Result<(TracedHca<'t, H>, u64), CliError> {
    let waited = wait_firmware(&hal, r, &env.cfg)?;
    r.progress(format!(
        "bringing the HCA up on {} (ENABLE_HCA ... INIT_HCA, pages, EQs)",
        env.target.label()
    ));
    tracer.set_counting(true);
    let res = Hca::<H, &Tracer>::bring_up_with(hal, env.cfg, tracer);
    tracer.set_counting(false);
    let hca = res.map_err(|e| CliError::driver("bring-up", e))?;
    r.progress(format!("HCA up after {} commands", tracer.count()));
    Ok((hca, waited))
}

/// Narrate a brought-up HCA (the demo's first step, also `caps` and `cmd`).
pub fn narrate_bring_up<H: Hal>(
    hca: &TracedHca<'_, H>,
    waited_ns: u64,
    t: &Tracer,
    r: &mut Report,
) {
    let fw = hca.fw_version();
    let caps = hca.caps();
    let pages = hca.page_stats();
    let stats = t.stats();
    let failed: u64 = stats.iter().map(|s| s.failures).sum();
    r.say(format!(
        "firmware ready after {} (init segment 'initializing' bit cleared)",
        crate::common::trace::fmt_ns(waited_ns)
    ));
    r.say(format!(
        "firmware {fw}, command interface revision {}",
        fw.cmdif_rev
    ));
    r.say(format!(
        "ISSI {} ({})",
        hca.issi(),
        if hca.issi() >= 1 {
            "shared receive queues are RMPs"
        } else {
            "shared receive queues are CREATE_SRQ SRQs"
        }
    ));
    r.say(format!(
        "pages given to firmware: {} ({} KiB, boot + init + regular), {} page requests served",
        pages.given,
        pages.given * 4,
        pages.requests
    ));
    r.say(format!(
        "capabilities: {} CQs of up to {} CQEs, {} SRQs of up to {} WQEs x {} SGEs, CQ resize {}, {} port(s) {}",
        caps.max_cq(),
        caps.max_cqe(),
        caps.max_srq(),
        caps.max_srq_wr(),
        caps.max_srq_sge.saturating_sub(1),
        yes(caps.cq_resize),
        caps.num_ports,
        if caps.port_type == 1 { "Ethernet" } else { "InfiniBand" }
    ));
    r.say(format!(
        "{} commands, {} failed; UAR {:#x}, async EQ {}, completion EQ {}, PD {:#x}, reserved lkey {:#x}",
        stats.total(),
        failed,
        hca.uar(),
        hca.async_eqn(),
        hca.comp_eqn(),
        hca.pd(),
        hca.reserved_lkey()
    ));
    match hca.dma_lkey() {
        Some(k) => r.say(format!(
            "RDMA: DMA key {k:#x} (CREATE_MKEY: physical addresses, local read and write on PD {:#x}){}",
            hca.pd(),
            hca.xrcd()
                .map_or(String::new(), |x| format!(", XRC domain {x:#x} (ALLOC_XRCD)"))
        )),
        None => r.say("RDMA: none (no InfiniBand port, no RoCE, no force loopback): no DMA key, QPs cannot connect"),
    }
    r.say(format!(
        "loopback mode: {}",
        crate::common::loopback::loopback_text(hca)
    ));
    r.set("dma_lkey", hca.dma_lkey());
    r.set("xrcd", hca.xrcd());
    r.set("loopback_mode", crate::common::loopback::loopback_name(hca));
    r.set("roce_enabled", hca.roce_enabled());
    r.set("firmware_ready_after_ns", waited_ns);
    r.set("firmware_version", fw.to_string());
    r.set("cmdif_rev", fw.cmdif_rev);
    r.set("issi", hca.issi());
    r.set("pages_given", pages.given);
    r.set("commands", stats.total());
    r.set("failed_commands", failed);
    r.set(
        "capabilities",
        json!({
            "max_cq": caps.max_cq(), "max_cqe": caps.max_cqe(),
            "max_srq": caps.max_srq(), "max_srq_wr": caps.max_srq_wr(),
            "max_srq_sge": caps.max_srq_sge.saturating_sub(1),
            "cq_resize": caps.cq_resize, "num_ports": caps.num_ports,
        }),
    );
    r.set(
        "objects",
        json!({"uar": hca.uar(), "async_eqn": hca.async_eqn(), "comp_eqn": hca.comp_eqn(), "pd": hca.pd()}),
    );
}

/// "yes"/"no".
pub fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// What teardown showed, or, after a failure, the accounting still known.
#[derive(Debug, Clone, Default)]
pub struct TeardownSummary {
    /// Pages given to firmware over the whole run.
    pub pages_given: u64,
    /// Pages taken back over the whole run.
    pub pages_returned: u64,
    /// Pages firmware still holds (driver's count).
    pub pages_left: usize,
    /// On the model: pages the model says firmware holds.
    pub model_pages_held: Option<usize>,
    /// On the model: live firmware objects.
    pub model_objects: Option<usize>,
    /// On the model: protocol violations the model saw.
    pub violations: Vec<String>,
    /// Teardown (or bring-up) failed: why. The page counts then come from
    /// the command trace.
    pub failed: Option<String>,
}

impl TeardownSummary {
    /// Every page back and nothing left behind.
    pub fn clean(&self) -> bool {
        self.failed.is_none()
            && self.pages_left == 0
            && self.pages_given == self.pages_returned
            && self.model_pages_held.unwrap_or(0) == 0
            && self.model_objects.unwrap_or(0) == 0
            && self.violations.is_empty()
    }

    /// Every page given came back.
    pub fn pages_ok(&self) -> bool {
        self.pages_left == 0 && self.pages_given == self.pages_returned
    }

    /// The one-line teardown result of `caps` and `cmd`.
    pub fn print_line(&self) {
        match &self.failed {
            None => outln!(
                "\nteardown: {} pages given, {} returned{}",
                self.pages_given,
                self.pages_returned,
                if self.clean() { ", all back" } else { "" }
            ),
            Some(why) => outln!(
                "\nteardown failed ({why}): {} pages given, {} returned, {} still held by firmware",
                self.pages_given,
                self.pages_returned,
                self.pages_left
            ),
        }
    }

    /// The model's view: pages, objects, state, violations (model only).
    fn model_view(&mut self, env: &Env<'_>, r: &mut Report) {
        let Some(dev) = env.model else { return };
        self.model_pages_held = Some(dev.pages_held());
        self.model_objects = Some(dev.objects().total());
        self.violations = dev
            .violations()
            .iter()
            .map(crate::common::error::violation_text)
            .collect();
        r.say(format!(
            "the model {}: it holds {} pages and {} objects, HCA state {:?}, {} protocol violations",
            if self.failed.is_none() {
                "agrees"
            } else {
                "says"
            },
            dev.pages_held(),
            dev.objects().total(),
            dev.hca_state(),
            self.violations.len()
        ));
        for v in &self.violations {
            r.say(format!("  violation: {v}"));
        }
        r.set("model_pages_held", dev.pages_held());
        r.set("model_objects", dev.objects().total());
        r.set("violations", self.violations.clone());
    }

    fn record(&self, r: &mut Report) {
        r.set("pages_given", self.pages_given);
        r.set("pages_returned", self.pages_returned);
        r.set("pages_left", self.pages_left);
        r.set("all_pages_returned", self.pages_ok());
        if let Some(f) = &self.failed {
            r.set("failed", f.as_str());
        }
    }
}

/// Tear down, narrate, and check that every page came back. The summary
/// comes back in every case: when teardown fails (a dead device) it holds
/// the pages the command trace shows moving and the model's view.
pub fn teardown<H: Hal>(
    hca: TracedHca<'_, H>,
    env: &Env<'_>,
    r: &mut Report,
) -> (TeardownSummary, Result<(), CliError>) {
    let held_before = hca.pages_held_by_firmware();
    r.progress("tearing down (TEARDOWN_HCA, reclaiming pages, DISABLE_HCA)");
    let tracer = *hca.observer();
    tracer.set_counting(true);
    let rep = hca.teardown();
    tracer.set_counting(false);
    let mut s = TeardownSummary::default();
    let res = match rep {
        Ok(rep) => {
            s.pages_given = rep.page_stats.given;
            s.pages_returned = rep.page_stats.reclaimed;
            s.pages_left = rep.pages_left;
            r.say(format!(
                "TEARDOWN_HCA, MANAGE_PAGES (take) and DISABLE_HCA in {}: firmware held {held_before} pages, returned {}",
                crate::common::trace::fmt_ns(rep.elapsed_ns),
                rep.pages_reclaimed
            ));
            r.say(format!(
                "firmware pages over the run: {} given, {} returned, {} still held{}",
                s.pages_given,
                s.pages_returned,
                s.pages_left,
                if s.pages_ok() {
                    ": every page came back"
                } else {
                    ": PAGES MISSING"
                }
            ));
            r.set("elapsed_ns", rep.elapsed_ns);
            Ok(())
        }
        Err(e) => {
            let (given, returned) = tracer.pages_moved();
            s.pages_given = given;
            s.pages_returned = returned;
            s.pages_left = given.saturating_sub(returned) as usize;
            s.failed = Some(format!(
                "{} (errno {})",
                crate::common::error::driver_text(&e),
                e.errno()
            ));
            r.say(format!(
                "teardown failed: {} (errno {})",
                crate::common::error::driver_text(&e),
                e.errno()
            ));
            let err = CliError::driver("teardown", e);
            r.say(format!(
                "firmware pages over the run (from the command trace): {given} given, {returned} returned, {} still held by firmware",
                s.pages_left
            ));
            Err(err)
        }
    };
    s.model_view(env, r);
    s.record(r);
    (s, res)
}

/// After a failed bring-up (the driver undoes what it did before it
/// returns the error): narrate the pages the command trace shows moving and
/// the model's view, so a failure still shows what was left behind.
pub fn after_failed_bring_up(
    err: &CliError,
    env: &Env<'_>,
    t: &Tracer,
    r: &mut Report,
) -> TeardownSummary {
    let (given, returned) = t.pages_moved();
    let mut s = TeardownSummary {
        pages_given: given,
        pages_returned: returned,
        pages_left: given.saturating_sub(returned) as usize,
        failed: Some(err.message()),
        ..TeardownSummary::default()
    };
    r.say(format!(
        "bring-up failed after {} commands: {}",
        t.count(),
        err.message()
    ));
    r.say(format!(
        "firmware pages (from the command trace): {given} given, {returned} returned, {} still held by firmware",
        s.pages_left
    ));
    s.model_view(env, r);
    s.record(r);
    s
}
