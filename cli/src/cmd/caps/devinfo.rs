//! The identity and port state `caps` shows beside the capabilities: the
//! board id (PSID) and IEEE vendor id from QUERY_ADAPTER, the PCI device
//! id, and the port state (QUERY_VPORT_STATE on Ethernet,
//! QUERY_HCA_VPORT_CONTEXT on InfiniBand), with the values under the key
//! names `ibv_devinfo -v` prints, computed as Linux's
//! `mlx5_ib_query_device` and `mlx5_ib_query_port` do
//! (`drivers/infiniband/hw/mlx5/main.c`), so a card's output can be
//! compared with the tool's.

use mlx5_driver::caps::Caps;
use mlx5_driver::hca::FwVersion;
use mlx5_driver::unstable::loopback_cmd::{parse_hca_vport_context, query_hca_vport_context};
use mlx5_hal::Hal;
use mlx5_regs::consts::port::TYPE_ETH;
use mlx5_regs::layouts::{
    query_adapter_in, query_adapter_out, query_adapter_param_block, query_vport_state_in,
    query_vport_state_out,
};
use mlx5_regs::Opcode;
use serde_json::{json, Value};

use crate::common::error::CliError;
use crate::common::session::{Env, TracedHca};
use crate::common::target::Target;

/// One port's state.
pub struct Port {
    /// Port number (1-based).
    pub num: u8,
    /// The IB port state number (1 down, 2 init, 3 armed, 4 active).
    pub state: u8,
    /// The port's LID (InfiniBand only).
    pub lid: Option<u16>,
}

/// What `caps` learns beyond the capability pages.
pub struct DevInfo {
    /// QUERY_ADAPTER `vsd_contd_psid`: the board id.
    pub psid: String,
    /// QUERY_ADAPTER `ieee_vendor_id` (0x02c9 for Mellanox).
    pub ieee_vendor_id: u32,
    /// The PCI device id (the model's profile, or sysfs for a card).
    pub pci_device_id: Option<u16>,
    /// The ports.
    pub ports: Vec<Port>,
}

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

/// The PCI device id: the model's profile, or the card's sysfs entry.
fn pci_device_id(env: &Env<'_>) -> Option<u16> {
    if let Some(m) = env.model {
        return Some(m.caps().pci_device_id);
    }
    let Target::Vfio(addr) = env.target else {
        return None;
    };
    let t = std::fs::read_to_string(format!("/sys/bus/pci/devices/{addr}/device")).ok()?;
    u16::from_str_radix(t.trim().trim_start_matches("0x"), 16).ok()
}

/// Query the board and the port(s).
pub fn query<H: Hal>(hca: &TracedHca<'_, H>, env: &Env<'_>) -> Result<DevInfo, CliError> {
    let mut input = [0u8; query_adapter_in::SIZE];
    header(&mut input, Opcode::QUERY_ADAPTER);
    let mut out = [0u8; query_adapter_out::SIZE];
    exec(hca, &input, &mut out, "querying the adapter")?;
    let pb = query_adapter_out::query_adapter_struct.get(&out);
    let psid = query_adapter_param_block::vsd_contd_psid
        .get(pb)
        .iter()
        .take_while(|b| **b != 0)
        .map(|b| *b as char)
        .collect();
    let ieee_vendor_id = query_adapter_param_block::ieee_vendor_id.get(pb);
    let caps = hca.caps();
    let mut ports = Vec::new();
    if caps.port_type == TYPE_ETH {
        // The function's own vport: one port. Linux reports a RoCE port
        // active when its link is up (`mlx5_query_port_roce`).
        let mut input = [0u8; query_vport_state_in::SIZE];
        header(&mut input, Opcode::QUERY_VPORT_STATE);
        let mut out = [0u8; query_vport_state_out::SIZE];
        exec(hca, &input, &mut out, "querying the port state")?;
        let up = query_vport_state_out::state.get(&out) == 1;
        ports.push(Port {
            num: 1,
            state: if up { 4 } else { 1 },
            lid: None,
        });
    } else {
        for p in 1..=caps.num_ports.max(1) {
            let input = query_hca_vport_context(caps.num_ports, p).map_err(|e| {
                CliError::failed(format!("building QUERY_HCA_VPORT_CONTEXT: {e}"), "a bug")
            })?;
            let mut out = [0u8; mlx5_driver::unstable::loopback_cmd::QUERY_HCA_VPORT_CONTEXT_OUT];
            exec(hca, &input, &mut out, "querying the port state")?;
            let v = parse_hca_vport_context(&out);
            ports.push(Port {
                num: p,
                state: v.vport_state,
                lid: Some(v.lid),
            });
        }
    }
    Ok(DevInfo {
        psid,
        ieee_vendor_id,
        pci_device_id: pci_device_id(env),
        ports,
    })
}

/// `PORT_ACTIVE (4)`, as `ibv_devinfo` prints a port state.
pub fn state_text(s: u8) -> String {
    let n = match s {
        1 => "PORT_DOWN",
        2 => "PORT_INIT",
        3 => "PORT_ARMED",
        4 => "PORT_ACTIVE",
        5 => "PORT_ACTIVE_DEFER",
        _ => "PORT_NOP",
    };
    format!("{n} ({s})")
}

fn link_layer(c: &Caps) -> &'static str {
    if c.port_type == TYPE_ETH {
        "Ethernet"
    } else {
        "InfiniBand"
    }
}

fn pow2(log: u8) -> u64 {
    1u64 << log.min(63)
}

/// The `ibv_devinfo -v` view: same key names, values as Linux computes them
/// from the capabilities (`mlx5_ib_query_device`): counts are `2^log_max_*`,
/// `max_cqe` and `max_srq_wr` one less than the ring size, `max_sge` the
/// smaller of the receive (`max_wqe_sz_rq / 16`) and send (`(min(max_wqe_sz_sq,
/// 512) - 32) / 16`: control and remote-address segments first) scatter
/// lists (uverbs reports the minimum of the two), `max_srq_sge` the receive
/// list less the SRQ's next-WQE segment.
pub fn ibv_json(c: &Caps, fw: FwVersion, d: &DevInfo) -> Value {
    let rq_sg = u64::from(c.max_wqe_sz_rq) / 16;
    let sq_sg = u64::from(c.max_wqe_sz_sq.min(512)).saturating_sub(32) / 16;
    let ports: Vec<Value> = d
        .ports
        .iter()
        .map(|p| {
            let mut v = json!({
                "port": p.num,
                "state": state_text(p.state),
                "link_layer": link_layer(c),
            });
            if let Some(lid) = p.lid {
                v["port_lid"] = json!(lid);
            }
            v
        })
        .collect();
    json!({
        "transport": "InfiniBand (0)",
        "fw_ver": format!("{}.{}.{:04}", fw.major, fw.minor, fw.subminor),
        "vendor_id": format!("{:#06x}", d.ieee_vendor_id),
        "vendor_part_id": d.pci_device_id,
        "board_id": d.psid,
        "phys_port_cnt": c.num_ports,
        "max_qp": pow2(c.log_max_qp),
        "max_qp_wr": pow2(c.log_max_qp_sz),
        "max_sge": rq_sg.min(sq_sg),
        "max_cq": pow2(c.log_max_cq),
        "max_cqe": pow2(c.log_max_cq_sz) - 1,
        "max_mr": pow2(c.log_max_mkey),
        "max_pd": pow2(c.log_max_pd),
        "max_qp_rd_atom": pow2(c.log_max_ra_res_qp),
        "max_qp_init_rd_atom": pow2(c.log_max_ra_req_qp),
        "max_srq": pow2(c.log_max_srq),
        "max_srq_wr": pow2(c.log_max_srq_sz) - 1,
        "max_srq_sge": rq_sg.saturating_sub(1),
        "max_xrcds": if c.xrc { pow2(c.log_max_xrcd) } else { 0 },
        "ports": ports,
    })
}

/// The human lines of `caps`' identity section.
pub fn print(d: &DevInfo, c: &Caps) {
    outln!("\nIdentity and port");
    outln!("  {:<36} {}", "board id (PSID)", d.psid);
    outln!(
        "  {:<36} {}",
        "PCI device id",
        d.pci_device_id
            .map_or("unknown".into(), |i| format!("{i:04x}"))
    );
    outln!("  {:<36} {:#06x}", "IEEE vendor id", d.ieee_vendor_id);
    for p in &d.ports {
        outln!(
            "  {:<36} {}, {}{}",
            format!("port {}", p.num),
            state_text(p.state),
            link_layer(c),
            p.lid.map_or(String::new(), |l| format!(", LID {l}"))
        );
    }
}
