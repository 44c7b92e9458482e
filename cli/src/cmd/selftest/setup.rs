//! The self-test's own stages 2 and 5, between the mission's steps: the
//! capability checks and the memory key. Each narrates what it did and
//! checked, and fails with the driver's typed error (command, status,
//! syndrome) or a failed check.

use mlx5_driver::mkey::MkeyAccess;
use mlx5_hal::Hal;
use mlx5_regs::layouts::{
    cmd_hca_cap, mkc, query_adapter_in, query_adapter_out, query_adapter_param_block,
    query_mkey_in, query_mkey_out, query_vport_state_in, query_vport_state_out,
};
use mlx5_regs::Opcode;

use crate::common::error::CliError;
use crate::common::loopback::loopback_text;
use crate::common::report::Report;
use crate::common::session::TracedHca;
use crate::scenario::objects::{alloc_bufs, BUF, NBUF};
use crate::scenario::State;

fn exec<H: Hal>(
    hca: &TracedHca<'_, H>,
    input: &[u8],
    out: &mut [u8],
    what: &str,
) -> Result<(), CliError> {
    hca.exec(input, out)
        .map_err(|e| CliError::driver(what.to_string(), e))
}

fn header(buf: &mut [u8], op: Opcode) {
    buf[..2].copy_from_slice(&op.0.to_be_bytes());
}

fn check_failed(missing: &[String]) -> CliError {
    CliError::failed(
        format!("the device lacks what the driver needs: {}", missing.join("; ")),
        "the report lists the capabilities; a card without RDMA (RoCE, force loopback or an InfiniBand port) cannot run the QP stages",
    )
}

/// Stage 2: the board (QUERY_ADAPTER), the port (QUERY_VPORT_STATE on
/// Ethernet), and every capability the later stages need.
pub(super) fn capabilities<H: Hal>(hca: &TracedHca<'_, H>, r: &mut Report) -> Result<(), CliError> {
    let mut input = [0u8; query_adapter_in::SIZE];
    header(&mut input, Opcode::QUERY_ADAPTER);
    let mut out = [0u8; query_adapter_out::SIZE];
    exec(hca, &input, &mut out, "querying the adapter")?;
    let pb = query_adapter_out::query_adapter_struct.get(&out);
    let psid: String = query_adapter_param_block::vsd_contd_psid
        .get(pb)
        .iter()
        .take_while(|b| **b != 0)
        .map(|b| *b as char)
        .collect();
    let vendor = query_adapter_param_block::vsd_vendor_id.get(pb);
    r.say(format!(
        "QUERY_ADAPTER: board PSID {psid:?}, vendor {vendor:#06x}"
    ));
    r.set("psid", psid);
    r.set("vsd_vendor_id", vendor);
    let caps = *hca.caps();
    let ethernet = caps.port_type == mlx5_regs::consts::port::TYPE_ETH;
    if ethernet {
        let mut input = [0u8; query_vport_state_in::SIZE];
        header(&mut input, Opcode::QUERY_VPORT_STATE);
        let mut out = [0u8; query_vport_state_out::SIZE];
        exec(hca, &input, &mut out, "querying the port state")?;
        let state = query_vport_state_out::state.get(&out);
        let admin = query_vport_state_out::admin_state.get(&out);
        let up = |v: u8| if v == 1 { "up" } else { "down" };
        r.say(format!(
            "QUERY_VPORT_STATE: link {} (administratively {}){}",
            up(state),
            up(admin),
            if state != 1
                && matches!(
                    hca.loopback_mode(),
                    Some(mlx5_driver::loopback::LoopbackMode::Roce { .. })
                )
            {
                "; RoCE loopback may need the link up (docs/hardware.md)"
            } else {
                ""
            }
        ));
        r.set("link_up", state == 1);
    }
    let rc = cmd_hca_cap::rc.get(&caps.raw);
    let mut missing = Vec::new();
    let mut line = |ok: bool, what: String, r: &mut Report| {
        r.say(format!("{} {what}", if ok { "ok     " } else { "MISSING" }));
        if !ok {
            missing.push(what);
        }
    };
    line(
        rc && caps.log_max_qp > 0,
        format!(
            "RC queue pairs (rc = {}, 2^{} QPs of up to 2^{} send WQEBBs)",
            rc as u8, caps.log_max_qp, caps.log_max_qp_sz
        ),
        r,
    );
    if hca.issi() >= 1 {
        line(
            caps.log_max_rmp > 0,
            format!("RMPs at ISSI 1 (log_max_rmp = {})", caps.log_max_rmp),
            r,
        );
    } else {
        line(
            caps.log_max_srq > 0,
            format!("SRQs at ISSI 0 (log_max_srq = {})", caps.log_max_srq),
            r,
        );
    }
    line(
        caps.cq_resize,
        format!("CQ resize (cq_resize = {})", caps.cq_resize as u8),
        r,
    );
    line(
        hca.dma_lkey().is_some(),
        match hca.dma_lkey() {
            Some(k) => format!("a memory key for DMA (bring-up's DMA key {k:#x})"),
            None => "a memory key for DMA (bring-up made none: no RDMA support)".into(),
        },
        r,
    );
    line(
        hca.loopback_mode().is_some(),
        format!("a loopback mode: {}", loopback_text(hca)),
        r,
    );
    r.set("rc", rc);
    r.set("missing", missing.clone());
    if missing.is_empty() {
        Ok(())
    } else {
        Err(check_failed(&missing))
    }
}

/// Check a key as firmware has it (QUERY_MKEY): the HCA's PD, the rights
/// asked for, and either physical addresses over the whole address space
/// (`range` `None`: the DMA key) or a translated key over exactly `range`
/// (start, length).
fn query_key<H: Hal>(
    hca: &TracedHca<'_, H>,
    key: u32,
    rights: MkeyAccess,
    range: Option<(u64, u64)>,
    what: &str,
    r: &mut Report,
) -> Result<Vec<String>, CliError> {
    let mut input = [0u8; query_mkey_in::SIZE];
    header(&mut input, Opcode::QUERY_MKEY);
    query_mkey_in::mkey_index
        .set(&mut input, key >> 8)
        .map_err(|_| CliError::failed("internal error: key index", ""))?;
    let mut out = [0u8; query_mkey_out::SIZE];
    exec(hca, &input, &mut out, &format!("querying the {what}"))?;
    let m = query_mkey_out::memory_key_mkey_entry.get(&out);
    let mode = (mkc::access_mode_4_2.get(m) << 2) | mkc::access_mode_1_0.get(m);
    let got = [
        (
            mkc::lr.get(m),
            rights.contains(MkeyAccess::LOCAL_READ),
            "local read",
        ),
        (
            mkc::lw.get(m),
            rights.contains(MkeyAccess::LOCAL_WRITE),
            "local write",
        ),
        (
            mkc::rr.get(m),
            rights.contains(MkeyAccess::REMOTE_READ),
            "remote read",
        ),
        (
            mkc::rw.get(m),
            rights.contains(MkeyAccess::REMOTE_WRITE),
            "remote write",
        ),
    ];
    let mut wrong = Vec::new();
    let shape = match range {
        None => {
            if mode != 0 {
                wrong.push(format!(
                    "{what}: access mode {mode} (expected 0, physical addresses)"
                ));
            }
            if !mkc::length64.get(m) {
                wrong.push(format!("{what}: length64 clear"));
            }
            "physical addresses, whole address space".to_string()
        }
        Some((start, len)) => {
            if mode != 1 {
                wrong.push(format!("{what}: access mode {mode} (expected 1, MTT)"));
            }
            let (have_start, have_len) = (mkc::start_addr.get(m), mkc::len.get(m));
            if mkc::length64.get(m) || (have_start, have_len) != (start, len) {
                wrong.push(format!(
                    "{what}: covers {have_len:#x} bytes at {have_start:#x} (expected {len:#x} at {start:#x})"
                ));
            }
            format!(
                "translated, {have_len:#x} bytes at {have_start:#x} in {} B pages",
                1u64 << mkc::log_page_size.get(m)
            )
        }
    };
    if mkc::pd.get(m) != hca.pd() {
        wrong.push(format!(
            "{what}: PD {:#x} (expected {:#x})",
            mkc::pd.get(m),
            hca.pd()
        ));
    }
    if mkc::mkey_7_0.get(m) != key as u8 {
        wrong.push(format!(
            "{what}: variant {:#x} (key {key:#x})",
            mkc::mkey_7_0.get(m)
        ));
    }
    for (have, want, name) in got {
        if have != want {
            wrong.push(format!(
                "{what}: {name} {}",
                if have { "granted" } else { "missing" }
            ));
        }
    }
    let rights: Vec<&str> = got.iter().filter(|g| g.0).map(|g| g.2).collect();
    r.say(format!(
        "QUERY_MKEY {key:#x} ({what}): {shape}, PD {:#x}, {}",
        mkc::pd.get(m),
        rights.join(", ")
    ));
    Ok(wrong)
}

/// Stage 5: a key of the run's own (local read/write, remote write: the
/// RDMA WRITE target's), and firmware's view of it and of the DMA key.
pub(super) fn memory_key<H: Hal>(
    hca: &TracedHca<'_, H>,
    s: &mut State<'_, H>,
    r: &mut Report,
) -> Result<(), CliError> {
    let rights = MkeyAccess::LOCAL_READ | MkeyAccess::LOCAL_WRITE | MkeyAccess::REMOTE_WRITE;
    let t = s
        .objs
        .tbufs
        .insert(alloc_bufs(hca, "RDMA WRITE target")?)
        .iova();
    let span = (NBUF * BUF) as u64;
    let key = hca
        .register(t, span, rights)
        .map_err(|e| CliError::driver("creating the memory key", e))?;
    let k = s.objs.key.insert(key).key();
    r.say(format!(
        "CREATE_MKEY: key {k:#x} (local read and write, remote write) on PD {:#x}",
        hca.pd()
    ));
    r.say(format!(
        "RDMA WRITE target: {NBUF} x {BUF} bytes at IOVA {t:#x}, reached through key {k:#x} and only there"
    ));
    let mut wrong = query_key(hca, k, rights, Some((t, span)), "new key", r)?;
    if let Some(dma) = hca.dma_lkey() {
        wrong.extend(query_key(
            hca,
            dma,
            MkeyAccess::LOCAL_READ | MkeyAccess::LOCAL_WRITE,
            None,
            "DMA key",
            r,
        )?);
    }
    r.set("key", k);
    r.set("dma_lkey", hca.dma_lkey());
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(CliError::check(format!(
            "firmware's view of the keys differs: {}",
            wrong.join("; ")
        )))
    }
}
