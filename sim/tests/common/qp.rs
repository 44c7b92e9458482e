//! Test helper for queue pairs: raw CREATE_MKEY / CREATE_QP / transition
//! commands, an RMP with posted receives, send WQEs written into the ring and
//! rung through the UAR, and a loopback pair connected per mode. Test code
//! playing the driver at the lowest level; not the driver.
#![allow(dead_code)]

use mlx5_hal::Hal;
use mlx5_regs::consts::{ctx, mkey as mk, op_mod as om, roce, OptParam};
use mlx5_regs::doorbell as db;
use mlx5_regs::layouts::*;
use mlx5_regs::Opcode;
use mlx5_sim::{Profile, SimConfig};

use super::{inp, Fw, Out, Region};

#[allow(unused_imports)] // re-exported for the tests that send
pub use super::wire::*;

/// Loopback addressing of a QP pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Force loopback with RoCE disabled (ConnectX-5).
    Fl,
    /// Force loopback with RoCE enabled (ConnectX-6 Dx / 7).
    FlRoce,
    /// RoCE with the port's own GID (index 0) and MAC (ConnectX-4 Lx).
    Roce,
    /// InfiniBand by the port's own LID.
    Ib,
}

/// Bring a device of `profile` up at ISSI 1 with a UAR and a PD.
pub fn up_profile(profile: Profile, threaded: bool) -> Fw {
    let cfg = SimConfig::profile(profile);
    let mut f = Fw::new(if threaded { cfg.threaded() } else { cfg });
    f.init(1);
    f.uar = f.alloc_uar();
    f.pd = f.alloc_pd();
    f
}

// ------------------------------------------------------------ keys

/// CREATE_MKEY input for a PA key over the whole address space.
pub fn mkey_pa_cmd(pd: u32, variant: u8, lr: bool, lw: bool, rr: bool, rw: bool) -> Vec<u8> {
    let mut i = inp(Opcode::CREATE_MKEY, create_mkey_in::SIZE);
    let m = create_mkey_in::memory_key_mkey_entry.get_mut(&mut i);
    mkc::lr.set(m, lr).unwrap();
    mkc::lw.set(m, lw).unwrap();
    mkc::rr.set(m, rr).unwrap();
    mkc::rw.set(m, rw).unwrap();
    mkc::qpn.set(m, mk::QPN_ANY).unwrap();
    mkc::mkey_7_0.set(m, variant).unwrap();
    mkc::length64.set(m, true).unwrap();
    mkc::pd.set(m, pd).unwrap();
    i
}

/// CREATE_MKEY input for an MTT key at virtual `va`, `len` bytes, 4 KiB
/// pages mapping to `pages` (entries with permission bits when `pg_access`).
pub fn mkey_mtt_cmd(pd: u32, va: u64, len: u64, pages: &[u64], pg_access: bool) -> Vec<u8> {
    let n = pages.len();
    let oct = n.div_ceil(2);
    let mut i = inp(
        Opcode::CREATE_MKEY,
        create_mkey_in::klm_pas_mtt.len_with(2 * 2 * oct),
    );
    create_mkey_in::pg_access.set(&mut i, pg_access).unwrap();
    create_mkey_in::translations_octword_actual_size
        .set(&mut i, oct as u32)
        .unwrap();
    {
        let m = create_mkey_in::memory_key_mkey_entry.get_mut(&mut i);
        mkc::access_mode_1_0.set(m, mk::ACCESS_MODE_MTT).unwrap();
        mkc::lr.set(m, true).unwrap();
        mkc::lw.set(m, true).unwrap();
        mkc::rw.set(m, true).unwrap();
        mkc::qpn.set(m, mk::QPN_ANY).unwrap();
        mkc::mkey_7_0.set(m, 0x5a).unwrap();
        mkc::pd.set(m, pd).unwrap();
        mkc::start_addr.set(m, va).unwrap();
        mkc::len.set(m, len).unwrap();
        mkc::translations_octword_size.set(m, oct as u32).unwrap();
        mkc::log_page_size.set(m, 12).unwrap();
    }
    for (k, &p) in pages.iter().enumerate() {
        let e = if pg_access { p | mk::MTT_PRESENT } else { p };
        create_mkey_in::klm_pas_mtt
            .set(&mut i, 2 * k, (e >> 32) as u32)
            .unwrap();
        create_mkey_in::klm_pas_mtt
            .set(&mut i, 2 * k + 1, e as u32)
            .unwrap();
    }
    i
}

/// Create a key from `cmd`; returns the full key.
pub fn create_mkey(f: &mut Fw, cmd: &[u8]) -> u32 {
    let o = f.ok(cmd, create_mkey_out::SIZE);
    let index = create_mkey_out::mkey_index.get(&o);
    let variant = mkc::mkey_7_0.get(create_mkey_in::memory_key_mkey_entry.get(cmd));
    mk::key(index, variant)
}

/// A PA key with local read/write and remote write on the Fw's PD.
pub fn dma_key(f: &mut Fw) -> u32 {
    let c = mkey_pa_cmd(f.pd, 0x33, true, true, false, true);
    create_mkey(f, &c)
}

pub fn destroy_mkey(f: &mut Fw, key: u32) -> Out {
    let mut d = inp(Opcode::DESTROY_MKEY, destroy_mkey_in::SIZE);
    destroy_mkey_in::mkey_index
        .set(&mut d, mk::index(key))
        .unwrap();
    f.exec(&d, destroy_mkey_out::SIZE)
}

// ------------------------------------------------------------ RMP

pub const RMP_LOG: u8 = 4;
pub const RMP_STRIDE: u8 = 6;
/// Receive buffer bytes per RMP WQE.
pub const RECV_LEN: u32 = 256;

/// An RMP whose WQE `i` scatters into `data + i * 4096` (`RECV_LEN` bytes)
/// through key `lkey`, linked 0 -> 1 -> ... in ring order.
pub struct TRmp {
    pub n: u32,
    pub buf: Region,
    pub dbr: Region,
    pub data: Region,
    pub posted: u16,
}

/// The ring, doorbell record and data area of an RMP (or SRQ) of
/// `2^RMP_LOG` WQEs of `2^RMP_STRIDE` bytes: WQE `i` links to `i + 1` in ring
/// order and scatters `RECV_LEN` bytes into `data + i * 4096` through key
/// `lkey`, then ends its list with an invalid-lkey entry.
pub fn rmp_buffers(f: &Fw, lkey: u32) -> (Region, Region, Region) {
    let buf = f.hal.alloc_dma(4096).unwrap();
    let dbr = f.hal.alloc_dma(4096).unwrap();
    let data = f.hal.alloc_dma(16 * 4096).unwrap();
    let n = 1usize << RMP_LOG;
    for i in 0..n {
        let at = i << RMP_STRIDE;
        let mut next = [0u8; 16];
        srq_next_seg::next_wqe_index
            .set(&mut next, ((i + 1) % n) as u16)
            .unwrap();
        buf.write_bytes(at, &next);
        let mut seg = [0u8; 16];
        wqe_data_seg::byte_count.set(&mut seg, RECV_LEN).unwrap();
        wqe_data_seg::lkey.set(&mut seg, lkey).unwrap();
        wqe_data_seg::addr
            .set(&mut seg, data.iova() + (i as u64) * 4096)
            .unwrap();
        buf.write_bytes(at + 16, &seg);
        let mut term = [0u8; 16];
        wqe_data_seg::lkey
            .set(&mut term, ctx::INVALID_LKEY)
            .unwrap();
        buf.write_bytes(at + 32, &term);
    }
    (buf, dbr, data)
}

/// CREATE_RMP input for a ready RMP of `rmp_buffers`' shape in the PD of
/// `f`, with room for `pas` page addresses; `place` fills in the rest of the
/// WQ context (where the ring and doorbell record are, the limit).
pub fn rmp_cmd_with(f: &Fw, pas: usize, place: impl FnOnce(&mut [u8])) -> Vec<u8> {
    let mut i = inp(Opcode::CREATE_RMP, create_rmp_in::SIZE + 8 * pas);
    {
        let r = create_rmp_in::ctx.tail_mut(&mut i);
        rmpc::state.set(r, ctx::RMP_STATE_RDY).unwrap();
        let wq = rmpc::wq.tail_mut(r);
        wq::log_wq_stride.set(wq, RMP_STRIDE).unwrap();
        wq::log_wq_sz.set(wq, RMP_LOG).unwrap();
        wq::pd.set(wq, f.pd).unwrap();
        place(wq);
    }
    i
}

/// CREATE_RMP input for the ring in `buf` (one physical page) with its
/// doorbell record in `dbr` and limit `lwm`.
pub fn rmp_cmd(f: &Fw, buf: &Region, dbr: &Region, lwm: u16) -> Vec<u8> {
    rmp_cmd_with(f, 1, |wq| {
        wq::dbr_addr.set(wq, dbr.iova()).unwrap();
        wq::lwm.set(wq, lwm).unwrap();
        wq::pas.set(wq, 0, buf.iova()).unwrap();
    })
}

impl TRmp {
    pub fn new(f: &mut Fw, lkey: u32, lwm: u16) -> TRmp {
        let (buf, dbr, data) = rmp_buffers(f, lkey);
        let i = rmp_cmd(f, &buf, &dbr, lwm);
        TRmp::create(f, &i, buf, dbr, data)
    }

    /// Run the CREATE_RMP input `cmd` made for these buffers (it must
    /// succeed).
    pub fn create(f: &mut Fw, cmd: &[u8], buf: Region, dbr: Region, data: Region) -> TRmp {
        let o = f.ok(cmd, create_rmp_out::SIZE);
        TRmp {
            n: create_rmp_out::rmpn.get(&o),
            buf,
            dbr,
            data,
            posted: 0,
        }
    }

    /// Make `k` more WQEs available (doorbell record).
    pub fn post(&mut self, k: u16) {
        self.posted = self.posted.wrapping_add(k);
        mlx5_hal::barrier::dma_wmb();
        self.dbr.write_be32(0, self.posted as u32);
    }

    /// Rewrite WQE `i`'s scatter entry.
    pub fn set_seg(&self, i: usize, addr: u64, len: u32, lkey: u32) {
        let mut seg = [0u8; 16];
        wqe_data_seg::byte_count.set(&mut seg, len).unwrap();
        wqe_data_seg::lkey.set(&mut seg, lkey).unwrap();
        wqe_data_seg::addr.set(&mut seg, addr).unwrap();
        self.buf.write_bytes((i << RMP_STRIDE) + 16, &seg);
    }

    /// The bytes received into WQE `i`.
    pub fn received(&self, i: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.data.read_bytes(i * 4096, &mut v);
        v
    }

    pub fn arm(&self, f: &mut Fw, lwm: u16) {
        f.ok(&arm_rmp_cmd(self.n, lwm), modify_rmp_out::SIZE);
    }
}

/// MODIFY_RMP input that arms RMP `rmpn`'s limit event at `lwm` (ready to
/// ready, only the `lwm` bit of the bitmask set).
pub fn arm_rmp_cmd(rmpn: u32, lwm: u16) -> Vec<u8> {
    let mut i = inp(Opcode::MODIFY_RMP, modify_rmp_in::SIZE);
    modify_rmp_in::rmp_state
        .set(&mut i, ctx::RMP_STATE_RDY)
        .unwrap();
    modify_rmp_in::rmpn.set(&mut i, rmpn).unwrap();
    rmp_bitmask::lwm
        .set(modify_rmp_in::bitmask.get_mut(&mut i), true)
        .unwrap();
    let r = modify_rmp_in::ctx.tail_mut(&mut i);
    rmpc::state.set(r, ctx::RMP_STATE_RDY).unwrap();
    wq::lwm.set(rmpc::wq.tail_mut(r), lwm).unwrap();
    i
}

// ------------------------------------------------------------ QPs

/// A QP the test drives: its send ring (if any) and doorbell record.
pub struct TQp {
    pub qpn: u32,
    pub ring: Option<Region>,
    pub dbr: Region,
    pub log_sq: u8,
    /// Producer counter (WQEBBs).
    pub pc: u16,
    pub uar: u32,
    /// BlueFlame offset used for the next doorbell (alternating halves).
    pub bf: usize,
}

/// CREATE_QP input. `sq`: log2 send WQEBBs (None = no_sq); `srq`: receive
/// through this SRQ/RMP (None = zero-length RQ).
pub fn qp_cmd(
    f: &Fw,
    sq: Option<(u8, &Region)>,
    srq: Option<u32>,
    cqn_snd: u32,
    cqn_rcv: u32,
    dbr: &Region,
) -> Vec<u8> {
    let npas = sq.map_or(0, |(l, _)| ((64usize << l) / 4096).max(1));
    let mut i = inp(Opcode::CREATE_QP, create_qp_in::pas.len_with(npas));
    {
        let c = create_qp_in::qpc.get_mut(&mut i);
        qpc::st.set(c, 0).unwrap();
        qpc::pm_state.set(c, 3).unwrap();
        qpc::pd.set(c, f.pd).unwrap();
        qpc::uar_page.set(c, f.uar).unwrap();
        qpc::rlky.set(c, true).unwrap();
        qpc::user_index.set(c, 0x00ff_ffff).unwrap();
        qpc::dbr_addr.set(c, dbr.iova()).unwrap();
        match sq {
            Some((l, _)) => {
                qpc::log_sq_size.set(c, l).unwrap();
                qpc::cqn_snd.set(c, cqn_snd).unwrap();
            }
            None => qpc::no_sq.set(c, true).unwrap(),
        }
        match srq {
            Some(n) => {
                qpc::rq_type.set(c, 1).unwrap();
                qpc::srqn_rmpn_xrqn.set(c, n).unwrap();
                qpc::cqn_rcv.set(c, cqn_rcv).unwrap();
            }
            None => qpc::rq_type.set(c, 3).unwrap(),
        }
    }
    if let Some((_, ring)) = sq {
        for k in 0..npas {
            create_qp_in::pas
                .set(&mut i, k, ring.iova() + 4096 * k as u64)
                .unwrap();
        }
    }
    i
}

pub fn create_qp(
    f: &mut Fw,
    log_sq: Option<u8>,
    srq: Option<u32>,
    cqn_snd: u32,
    cqn_rcv: u32,
) -> TQp {
    let ring = log_sq.map(|l| f.hal.alloc_dma((64usize << l).max(4096)).unwrap());
    let dbr = f.hal.alloc_dma(4096).unwrap();
    let i = qp_cmd(f, log_sq.zip(ring.as_ref()), srq, cqn_snd, cqn_rcv, &dbr);
    TQp::create(f, &i, ring, dbr, log_sq)
}

impl TQp {
    /// Run the CREATE_QP input `cmd` made for this send ring (`log_sq`
    /// WQEBBs, `None` = no send queue) and doorbell record (it must
    /// succeed); doorbells go through the UAR of `f`.
    pub fn create(
        f: &mut Fw,
        cmd: &[u8],
        ring: Option<Region>,
        dbr: Region,
        log_sq: Option<u8>,
    ) -> TQp {
        let o = f.ok(cmd, create_qp_out::SIZE);
        TQp {
            qpn: create_qp_out::qpn.get(&o),
            ring,
            dbr,
            log_sq: log_sq.unwrap_or(0),
            pc: 0,
            uar: f.uar,
            bf: db::UAR_BF_OFFSET,
        }
    }
}

/// A modify-QP command (`op`) for `qpn` with the QPC edited by `edit`.
pub fn modify_cmd(op: Opcode, qpn: u32, opt: OptParam, edit: impl FnOnce(&mut [u8])) -> Vec<u8> {
    let mut i = inp(op, rst2init_qp_in::SIZE);
    rst2init_qp_in::qpn.set(&mut i, qpn).unwrap();
    rst2init_qp_in::opt_param_mask
        .set(&mut i, opt.bits())
        .unwrap();
    edit(rst2init_qp_in::qpc.get_mut(&mut i));
    i
}

pub fn qpn_cmd(op: Opcode, qpn: u32) -> Vec<u8> {
    let mut i = inp(op, 16);
    qp_2err_in::qpn.set(&mut i, qpn).unwrap();
    i
}

pub fn rst2init(qpn: u32) -> Vec<u8> {
    modify_cmd(Opcode::RST2INIT_QP, qpn, OptParam::empty(), |c| {
        let a = qpc::primary_address_path.get_mut(c);
        ads::vhca_port_num.set(a, 1).unwrap();
        qpc::rre.set(c, true).unwrap();
        qpc::rwe.set(c, true).unwrap();
    })
}

/// The address path fields of a mode, for a peer `remote`.
pub fn set_path(f: &Fw, mode: Mode, a: &mut [u8]) {
    ads::vhca_port_num.set(a, 1).unwrap();
    match mode {
        Mode::Fl | Mode::FlRoce => ads::fl.set(a, true).unwrap(),
        Mode::Ib => ads::rlid.set(a, f.dev.port_lid()).unwrap(),
        Mode::Roce => {
            let gid = gid_of(f.dev.port_mac());
            ads::rgid_rip.get_mut(a).copy_from_slice(&gid);
            let m = f.dev.port_mac();
            ads::rmac_47_32
                .set(a, u16::from_be_bytes([m[0], m[1]]))
                .unwrap();
            ads::rmac_31_0
                .set(a, u32::from_be_bytes([m[2], m[3], m[4], m[5]]))
                .unwrap();
            ads::src_addr_index.set(a, 0).unwrap();
            ads::hop_limit.set(a, 64).unwrap();
            ads::udp_sport.set(a, 0xc123).unwrap();
        }
    }
}

pub fn init2rtr(f: &Fw, mode: Mode, qpn: u32, remote: u32, rcv_psn: u32) -> Vec<u8> {
    modify_cmd(Opcode::INIT2RTR_QP, qpn, OptParam::empty(), |c| {
        qpc::mtu.set(c, 3).unwrap();
        qpc::log_msg_max.set(c, 30).unwrap();
        qpc::remote_qpn.set(c, remote).unwrap();
        qpc::next_rcv_psn.set(c, rcv_psn).unwrap();
        qpc::min_rnr_nak.set(c, 12).unwrap();
        set_path(f, mode, qpc::primary_address_path.get_mut(c));
    })
}

pub fn rtr2rts(qpn: u32, send_psn: u32, rnr_retry: u8) -> Vec<u8> {
    modify_cmd(Opcode::RTR2RTS_QP, qpn, OptParam::empty(), |c| {
        ads::ack_timeout
            .set(qpc::primary_address_path.get_mut(c), 14)
            .unwrap();
        qpc::retry_count.set(c, 7).unwrap();
        qpc::rnr_retry.set(c, rnr_retry).unwrap();
        qpc::next_send_psn.set(c, send_psn).unwrap();
    })
}

/// Link-local GID from a MAC (EUI-64).
pub fn gid_of(m: [u8; 6]) -> [u8; 16] {
    [
        0xfe,
        0x80,
        0,
        0,
        0,
        0,
        0,
        0,
        m[0] ^ 2,
        m[1],
        m[2],
        0xff,
        0xfe,
        m[3],
        m[4],
        m[5],
    ]
}

/// Prepare the port for `mode`: RoCE on where needed, GID 0 programmed for
/// RoCE, port type IB for IB.
pub fn prepare_mode(f: &mut Fw, mode: Mode) {
    if matches!(mode, Mode::FlRoce | Mode::Roce) {
        set_roce_en(f, true);
    }
    if mode == Mode::Roce {
        let o = set_gid(
            f,
            0,
            gid_of(f.dev.port_mac()),
            f.dev.port_mac(),
            roce::VERSION_2,
        );
        assert!(o.ok());
    }
}

pub fn set_roce_en(f: &mut Fw, on: bool) -> Out {
    f.exec(&roce_en_cmd(on), modify_nic_vport_context_out::SIZE)
}

/// MODIFY_NIC_VPORT_CONTEXT input that sets only `roce_en` to `on`.
pub fn roce_en_cmd(on: bool) -> Vec<u8> {
    let mut i = inp(
        Opcode::MODIFY_NIC_VPORT_CONTEXT,
        modify_nic_vport_context_in::SIZE,
    );
    modify_nic_vport_field_select::roce_en
        .set(
            modify_nic_vport_context_in::field_select.get_mut(&mut i),
            true,
        )
        .unwrap();
    nic_vport_context::roce_en
        .set(
            modify_nic_vport_context_in::nic_vport_context.get_mut(&mut i),
            on,
        )
        .unwrap();
    i
}

pub fn set_gid(f: &mut Fw, index: u16, gid: [u8; 16], mac: [u8; 6], version: u8) -> Out {
    let mut i = inp(Opcode::SET_ROCE_ADDRESS, set_roce_address_in::SIZE);
    set_roce_address_in::roce_address_index
        .set(&mut i, index)
        .unwrap();
    let a = set_roce_address_in::roce_address.get_mut(&mut i);
    roce_addr_layout::source_l3_address
        .get_mut(a)
        .copy_from_slice(&gid);
    roce_addr_layout::source_mac_47_32
        .set(a, u16::from_be_bytes([mac[0], mac[1]]))
        .unwrap();
    roce_addr_layout::source_mac_31_0
        .set(a, u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]]))
        .unwrap();
    roce_addr_layout::roce_l3_type
        .set(a, roce::L3_TYPE_IPV6)
        .unwrap();
    roce_addr_layout::roce_version.set(a, version).unwrap();
    f.exec(&i, set_roce_address_out::SIZE)
}

/// Bring `a` (sender) and `b` (receiver) to RTS/RTR connected to each
/// other with equal PSNs.
pub fn connect(f: &mut Fw, mode: Mode, a: &TQp, b: &TQp, rnr_retry: u8) {
    for q in [a, b] {
        f.ok(&rst2init(q.qpn), 16);
    }
    let i = init2rtr(f, mode, a.qpn, b.qpn, 0x222);
    f.ok(&i, 16);
    let i = init2rtr(f, mode, b.qpn, a.qpn, 0x111);
    f.ok(&i, 16);
    f.ok(&rtr2rts(a.qpn, 0x111, rnr_retry), 16);
    f.ok(&rtr2rts(b.qpn, 0x222, rnr_retry), 16);
}

/// The QUERY_HCA_CAP op_mod of the RoCE page.
pub fn roce_cap_op_mod(cur: bool) -> u16 {
    om::query_hca_cap(om::CAP_ROCE, cur)
}
