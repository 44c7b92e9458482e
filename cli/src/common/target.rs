//! `--device`: the built-in model (`sim[:PROFILE]`) or a real ConnectX
//! through VFIO (`vfio:DDDD:BB:DD.F`), and the model-only fault options.

use mlx5_driver::HcaConfig;
use mlx5_regs::{CmdStatus, Opcode};
use mlx5_sim::{Device, Profile, SimConfig};

use crate::common::error::CliError;

/// What `--device` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The device model with a capability profile.
    Sim(Profile),
    /// A PCI function bound to vfio-pci.
    Vfio(String),
}

/// Profile names accepted after `sim:`.
pub const PROFILES: &[(&str, Profile)] = &[
    ("cx4lx", Profile::ConnectX4Lx),
    ("cx5", Profile::ConnectX5),
    ("cx6dx", Profile::ConnectX6Dx),
    ("cx7", Profile::ConnectX7),
];

/// Human name of a profile.
pub fn profile_name(p: Profile) -> &'static str {
    p.name()
}

/// Short name of a profile (`cx5`).
pub fn profile_short(p: Profile) -> &'static str {
    PROFILES
        .iter()
        .find(|(_, q)| *q == p)
        .map_or("?", |(n, _)| n)
}

impl Target {
    /// Parse `sim`, `sim:cx7`, `vfio:0000:03:00.0`.
    pub fn parse(s: &str) -> Result<Target, CliError> {
        let profiles = PROFILES
            .iter()
            .map(|(n, _)| *n)
            .collect::<Vec<_>>()
            .join(", ");
        if s == "sim" {
            return Ok(Target::Sim(Profile::ConnectX5));
        }
        if let Some(p) = s.strip_prefix("sim:") {
            let p = p.to_ascii_lowercase();
            return PROFILES
                .iter()
                .find(|(n, _)| *n == p)
                .map(|(_, prof)| Target::Sim(*prof))
                .ok_or_else(|| {
                    CliError::usage(
                        format!(
                            "unknown model profile '{}'",
                            crate::common::error::quote(&p)
                        ),
                        format!("use one of: {profiles} (e.g. --device sim:cx7)"),
                    )
                });
        }
        if let Some(addr) = s.strip_prefix("vfio:") {
            if addr.is_empty() {
                return Err(CliError::usage(
                    "--device vfio: needs a PCI address",
                    "e.g. --device vfio:0000:03:00.0 (find it with lspci -D -d 15b3:)",
                ));
            }
            return parse_pci_addr(addr).map(Target::Vfio);
        }
        Err(CliError::usage(
            format!("unknown device '{}'", crate::common::error::quote(s)),
            format!(
                "use --device sim (the built-in model), sim:PROFILE ({profiles}) or vfio:DDDD:BB:DD.F (a ConnectX bound to vfio-pci)"
            ),
        ))
    }

    /// `sim:cx5` / `vfio:0000:03:00.0`.
    pub fn label(&self) -> String {
        match self {
            Target::Sim(p) => format!("sim:{}", profile_short(*p)),
            Target::Vfio(a) => format!("vfio:{a}"),
        }
    }

    /// One line for humans.
    pub fn describe(&self) -> String {
        match self {
            Target::Sim(p) => format!("the device model, {} profile", profile_name(*p)),
            Target::Vfio(a) => format!("the ConnectX at {a} (VFIO)"),
        }
    }
}

/// A PCI address as sysfs names it (`0000:03:00.0`, lower-case hex), from
/// `DDDD:BB:DD.F` or the short `BB:DD.F` that plain `lspci` prints. Checked
/// here so a typo is a usage error (exit 2) with the format, not a failed
/// open (exit 3) pointing at IOMMU set-up.
pub fn parse_pci_addr(s: &str) -> Result<String, CliError> {
    let bad = |why: &str| {
        CliError::usage(
            format!("'{}' is not a PCI address: {why}", crate::common::error::quote(s)),
            "write it as vfio:DDDD:BB:DD.F in hex (domain, bus, device 00-1f, function 0-7), e.g. vfio:0000:03:00.0; `lspci -D -d 15b3:` lists the ConnectX functions",
        )
    };
    let hex = |part: &str, max_digits: usize, max: u32, what: &str| {
        if part.is_empty()
            || part.len() > max_digits
            || !part.bytes().all(|b| b.is_ascii_hexdigit())
        {
            return Err(bad(&format!(
                "the {what} '{}' is not 1 to {max_digits} hex digits",
                crate::common::error::quote(part)
            )));
        }
        let v = u32::from_str_radix(part, 16).map_err(|_| bad(what))?;
        if v > max {
            return Err(bad(&format!("the {what} {v:#x} is above {max:#x}")));
        }
        Ok(v)
    };
    let (slot, func) = s
        .rsplit_once('.')
        .ok_or_else(|| bad("the '.F' function number is missing"))?;
    let parts: Vec<&str> = slot.split(':').collect();
    let (dom, bus, dev) = match parts[..] {
        [d, b, v] => (hex(d, 8, u32::MAX, "domain")?, b, v),
        [b, v] => (0, b, v),
        _ => return Err(bad("expected domain:bus:device.function")),
    };
    let bus = hex(bus, 2, 0xff, "bus")?;
    let dev = hex(dev, 2, 0x1f, "device")?;
    let func = hex(func, 1, 7, "function")?;
    Ok(format!("{dom:04x}:{bus:02x}:{dev:02x}.{func}"))
}

/// The model-only fault options.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// `--fail-opcode NAME:STATUS:SYNDROME[:NTH]`: opcode, status,
    /// syndrome, and which command of that opcode from now (1 = the next).
    pub fail: Vec<(Opcode, CmdStatus, u32, u32)>,
    /// `--stall-opcode NAME`.
    pub stall: Vec<Opcode>,
    /// `--fatal-after N`.
    pub fatal_after: Option<u64>,
}

impl Faults {
    /// Any fault requested?
    pub fn any(&self) -> bool {
        !self.fail.is_empty() || !self.stall.is_empty() || self.fatal_after.is_some()
    }

    /// The faults asked for, as the JSON of every subcommand on the model
    /// gives them (`injected_faults`).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "fail": self.fail.iter().map(|(o, s, y, n)| serde_json::json!({
                "opcode": o.to_string(), "status": s.name(), "syndrome": format!("{y:#x}"),
                "nth": n,
            })).collect::<Vec<_>>(),
            "stall": self.stall.iter().map(|o| o.to_string()).collect::<Vec<_>>(),
            "fatal_after": self.fatal_after,
        })
    }

    /// Arm the model (fatal-after is done by the tracer).
    pub fn apply(&self, dev: &Device) {
        for (op, st, syn, nth) in &self.fail {
            dev.inject()
                .fail_nth(op.0, nth.saturating_sub(1) as usize, st.0, *syn);
        }
        for op in &self.stall {
            dev.inject().stall_next(op.0);
        }
    }
}

impl Faults {
    /// The fault options that never fired, each with the reason, judged by
    /// what the model saw: a `--fail-opcode` fired when a command of that
    /// opcode completed with its status and syndrome, a `--stall-opcode`
    /// when a command of that opcode was stalled, `--fatal-after` when the
    /// Nth command was reached (`fatal_fired` and `commands`, from the
    /// tracer).
    pub fn unfired(&self, dev: &Device, fatal_fired: bool, commands: u64) -> Vec<String> {
        let trace = dev.trace();
        let mut used = vec![false; trace.len()];
        let mut take = |pred: &dyn Fn(&mlx5_sim::TraceEntry) -> bool| {
            let hit = trace
                .iter()
                .enumerate()
                .position(|(i, e)| !used[i] && pred(e));
            if let Some(i) = hit {
                used[i] = true;
            }
            hit.is_some()
        };
        let sent = |op: Opcode| trace.iter().filter(|e| e.opcode == op.0).count();
        let mut out = Vec::new();
        for (op, st, syn, nth) in &self.fail {
            let fired =
                take(&|e| e.opcode == op.0 && !e.stalled && e.status == st.0 && e.syndrome == *syn);
            if !fired {
                out.push(format!(
                    "--fail-opcode {}:{}:{syn:#x}{} never fired: {}",
                    cli_name(*op),
                    st.name().map_or_else(|| format!("{:#x}", st.0), str::to_ascii_lowercase),
                    if *nth > 1 { format!(":{nth}") } else { String::new() },
                    match sent(*op) {
                        0 => format!("the run sent no {op} command"),
                        n => format!("the run sent {n} {op} command(s), none failed with that status and syndrome"),
                    }
                ));
            }
        }
        for op in &self.stall {
            if !take(&|e| e.opcode == op.0 && e.stalled) {
                out.push(format!(
                    "--stall-opcode {} never fired: {}",
                    cli_name(*op),
                    match sent(*op) {
                        0 => format!("the run sent no {op} command"),
                        n => format!("the run sent {n} {op} command(s), none was stalled"),
                    }
                ));
            }
        }
        if let (Some(n), false) = (self.fatal_after, fatal_fired) {
            out.push(format!(
                "--fatal-after {n} never fired: the run sent only {commands} command(s)"
            ));
        }
        out
    }
}

/// An opcode as the command line writes it (`create-cq`, or `0x9ff`).
fn cli_name(op: Opcode) -> String {
    op.name().map_or_else(
        || format!("{:#x}", op.0),
        |n| n.to_ascii_lowercase().replace('_', "-"),
    )
}

/// Parse an opcode name (`create-cq`, `CREATE_CQ`) or number (`0x400`).
pub fn parse_opcode(s: &str) -> Result<Opcode, CliError> {
    if let Some(op) = Opcode::from_name(s) {
        return Ok(op);
    }
    if let Ok(v) = parse_u64(s) {
        if v <= 0xffff {
            return Ok(Opcode(v as u16));
        }
    }
    let close: Vec<String> = Opcode::ALL
        .iter()
        .filter_map(|o| o.name())
        .filter(|n| {
            let n = n.to_ascii_lowercase().replace('_', "-");
            let q = s.to_ascii_lowercase().replace('_', "-");
            q.split('-').any(|w| w.len() > 2 && n.contains(w))
        })
        .map(|n| n.to_ascii_lowercase().replace('_', "-"))
        .collect();
    // Typos first: the names a few edits away.
    let names: Vec<String> = Opcode::ALL
        .iter()
        .filter_map(|o| o.name())
        .map(|n| n.to_ascii_lowercase().replace('_', "-"))
        .collect();
    let mut near = crate::common::text::suggest(s, names.iter().map(String::as_str), 4);
    near.extend(
        close
            .into_iter()
            .filter(|n| !near.contains(n))
            .collect::<Vec<_>>(),
    );
    let mut close = near;
    close.truncate(8);
    let hint = if close.is_empty() {
        "names are the mlx5_ifc.h command names, e.g. query-hca-cap, create-cq, nop (or a number such as 0x80d)".to_string()
    } else {
        format!("did you mean: {}?", close.join(", "))
    };
    Err(CliError::usage(
        format!(
            "unknown command opcode '{}'",
            crate::common::error::quote(s)
        ),
        hint,
    ))
}

/// Parse a status name (`bad_param_err`, `BAD_PARAM`) or number.
pub fn parse_status(s: &str) -> Result<CmdStatus, CliError> {
    if let Some(st) = CmdStatus::from_name(s) {
        return Ok(st);
    }
    let with_err = format!("{s}_ERR");
    if let Some(st) = CmdStatus::from_name(&with_err) {
        return Ok(st);
    }
    if let Ok(v) = parse_u64(s) {
        if v <= 0xff {
            return Ok(CmdStatus(v as u8));
        }
    }
    let names: Vec<&str> = CmdStatus::all().filter_map(|s| s.name()).collect();
    Err(CliError::usage(
        format!(
            "unknown command status '{}'",
            crate::common::error::quote(s)
        ),
        format!("use a name ({}) or a number", names.join(", ")),
    ))
}

/// Decimal or `0x` hex.
pub fn parse_u64(s: &str) -> Result<u64, std::num::ParseIntError> {
    let s = s.trim().replace('_', "");
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    }
}

/// Build [`Faults`] from the option strings; refuse them on hardware.
pub fn parse_faults(
    target: &Target,
    fail: &[String],
    stall: &[String],
    fatal_after: Option<u64>,
) -> Result<Faults, CliError> {
    let mut f = Faults {
        fatal_after,
        ..Faults::default()
    };
    for s in fail {
        let parts: Vec<&str> = s.split(':').collect();
        if !(3..=4).contains(&parts.len()) {
            return Err(CliError::usage(
                format!("--fail-opcode '{}' is not NAME:STATUS:SYNDROME[:NTH]", crate::common::error::quote(s)),
                "e.g. --fail-opcode create-cq:bad_param_err:0x1234, or create-mkey:bad_param_err:0x1:2 for the second CREATE_MKEY",
            ));
        }
        let nth = match parts.get(3) {
            None => 1,
            Some(n) => parse_u64(n)
                .ok()
                .filter(|v| (1..=1_000_000).contains(v))
                .ok_or_else(|| {
                    CliError::usage(
                        format!("'{}' in --fail-opcode '{}' is not a command count of 1 or more", crate::common::error::quote(n), crate::common::error::quote(s)),
                        "NTH counts the commands of that opcode from the start: 1 the first (the default), 2 the second",
                    )
                })? as u32,
        };
        let op = parse_opcode(parts[0])?;
        let st = parse_status(parts[1])?;
        if st.0 == 0 {
            return Err(CliError::usage(
                "--fail-opcode with status OK injects nothing",
                "give a failing status such as bad_param_err or bad_res_state_err",
            ));
        }
        let syn = parse_u64(parts[2])
            .ok()
            .filter(|v| *v <= u32::MAX as u64)
            .ok_or_else(|| {
                CliError::usage(
                    format!("syndrome '{}' is not a 32-bit number", parts[2]),
                    "e.g. 0x1234 or 4660",
                )
            })?;
        f.fail.push((op, st, syn as u32, nth));
    }
    for s in stall {
        f.stall.push(parse_opcode(s)?);
    }
    if f.fatal_after == Some(0) {
        return Err(CliError::usage(
            "--fatal-after 0 would kill the device before it exists",
            "give N >= 1: the device dies after the Nth firmware command",
        ));
    }
    if let Target::Vfio(addr) = target {
        if f.any() {
            return Err(CliError::usage(
                "--fail-opcode, --stall-opcode and --fatal-after work only on the device model",
                format!(
                    "a real ConnectX ({addr}) cannot be told to fail; drop these options, or run them on the model with --device sim"
                ),
            ));
        }
    }
    Ok(f)
}

/// The model-only knobs of the command line (`--seed`, `--issi0`,
/// `--threaded`, `--dma-limit`): fields of [`SimConfig`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ModelOpts {
    /// `--seed`: the model's random seed.
    pub seed: Option<u64>,
    /// `--issi0`: the device supports ISSI 0 only.
    pub issi0: bool,
    /// `--threaded`: the device thread and the real clock.
    pub threaded: bool,
    /// `--dma-limit`: bytes of DMA memory the platform hands out.
    pub dma_limit: Option<usize>,
}

impl ModelOpts {
    /// The options given, as the command line spells them.
    pub fn given(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.seed.is_some() {
            v.push("--seed");
        }
        if self.issi0 {
            v.push("--issi0");
        }
        if self.threaded {
            v.push("--threaded");
        }
        if self.dma_limit.is_some() {
            v.push("--dma-limit");
        }
        v
    }

    /// Refuse them on real hardware (exit 2), as the fault options.
    pub fn check(&self, target: &Target) -> Result<(), CliError> {
        let given = self.given();
        if given.is_empty() || matches!(target, Target::Sim(_)) {
            return Ok(());
        }
        Err(CliError::usage(
            if given.len() == 1 {
                format!("{} is an option of the device model only", given[0])
            } else {
                format!("{} are options of the device model only", given.join(", "))
            },
            "real firmware has no seed, ISSI switch, execution mode or DMA limit to set: leave them out, or use --device sim",
        ))
    }

    /// As JSON, for the run's document.
    pub fn to_json(self) -> serde_json::Value {
        serde_json::json!({
            "seed": self.seed,
            "issi0": self.issi0,
            "threaded": self.threaded,
            "dma_limit": self.dma_limit,
        })
    }
}

/// How a subcommand that runs on the model only (`pingpong`, `peer`,
/// `perf`) runs: its own options `A` and what it takes of the global ones.
pub struct ModelRun<'a, A> {
    /// Its own options.
    pub args: &'a A,
    /// The model profile (of every host it brings up).
    pub profile: Profile,
    /// The global model options (`--seed`, `--issi0`, `--threaded`,
    /// `--dma-limit`).
    pub model: ModelOpts,
    /// The driver's configuration (`--cmd-timeout-ms`).
    pub cfg: HcaConfig,
    /// `--json`.
    pub json: bool,
    /// Progress lines on stderr (no `--quiet`).
    pub progress: bool,
}

/// A model device for a profile.
pub fn model(profile: Profile, o: &ModelOpts) -> Device {
    let mut cfg = SimConfig::profile(profile);
    if let Some(s) = o.seed {
        cfg.seed = s;
    }
    if o.issi0 {
        // supported_issi_dw0 bit 0 only (docs/firmware.md, QUERY_ISSI).
        cfg.issi_supported = 0b01;
    }
    if let Some(l) = o.dma_limit {
        cfg.dma_limit = l;
    }
    if o.threaded {
        cfg = cfg.threaded();
    }
    Device::new(cfg)
}

/// Open the VFIO platform, with the platform's own message and what to do.
pub fn open_vfio(addr: &str) -> Result<mlx5_vfio::VfioPlatform, CliError> {
    mlx5_vfio::VfioPlatform::open(addr, mlx5_vfio::VfioOptions::default()).map_err(|e| {
        CliError::NoDevice {
            what: format!("cannot open {addr} through VFIO: {e}"),
            hint: "docs/hardware.md walks through IOMMU, vfio-pci binding and permissions; without a ConnectX, run on the built-in model: --device sim".into(),
        }
    })
}
