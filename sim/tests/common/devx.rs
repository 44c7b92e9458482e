//! Test helper: a DevX-style client the way rdma-core's VFIO driver
//! (`providers/mlx5/mlx5_vfio.c`) drives a card: its bring-up, UMEM
//! registration (`_vfio_devx_umem_reg`), and CQ, RMP and QP built from
//! UMEMs. Test code playing a client; not the driver.
#![allow(dead_code)]

use mlx5_hal::Hal;
use mlx5_regs::consts::{ctx, op_mod as om};
use mlx5_regs::doorbell as db;
use mlx5_regs::layouts::*;
use mlx5_regs::Opcode;
use mlx5_sim::{HcaState, Profile, SimConfig, Violation};

use super::qp::*;
use super::{inp, Fw, Out, Region, TEq};

pub const PROFILES: [Profile; 4] = [
    Profile::ConnectX4Lx,
    Profile::ConnectX5,
    Profile::ConnectX6Dx,
    Profile::ConnectX7,
];

/// rdma-core enables RoCE on an Ethernet port; then force loopback is
/// allowed only where the RoCE page says so, else RoCE addressing.
pub fn mode_for(p: Profile) -> Mode {
    match p {
        Profile::ConnectX6Dx | Profile::ConnectX7 => Mode::FlRoce,
        _ => Mode::Roce,
    }
}

/// `mlx5_vfio_setup_function` + the EQ and PD of `mlx5_vfio_alloc_context`.
pub fn vfio_bring_up(p: Profile) -> (Fw, TEq) {
    let mut f = Fw::new(SimConfig::profile(p));
    f.enable();
    let o = f.ok(
        &inp(Opcode::QUERY_ISSI, query_issi_in::SIZE),
        query_issi_out::SIZE,
    );
    assert_ne!(query_issi_out::supported_issi_dw0.get(&o) & 2, 0);
    assert!(f.set_issi(1).ok());
    let boot = f.query_pages(om::QUERY_PAGES_BOOT);
    assert!(f.give_pages(boot as usize).ok());
    let mut he = inp(Opcode::ACCESS_REG, access_register_in::SIZE + 16);
    access_register_in::register_id
        .set(&mut he, 0x7004)
        .unwrap();
    register_host_endianness::he
        .set(&mut he[16..], cfg!(target_endian = "big"))
        .unwrap();
    f.ok(&he, access_register_out::SIZE + 16);
    let cur = f.query_cap(true);
    assert!(
        cmd_hca_cap::umem_uid_0.get(&cur),
        "{p:?}: rdma-core refuses a device without umem_uid_0"
    );
    let o = f.set_cap(|c| {
        cmd_hca_cap::cmdif_checksum.set(c, 0).unwrap();
        cmd_hca_cap::log_uar_page_sz.set(c, 0).unwrap();
    });
    assert!(o.ok());
    let init = f.query_pages(om::QUERY_PAGES_INIT);
    assert!(f.give_pages(init as usize).ok());
    // rdma-core's `init_hca_in` is the older 16-byte layout.
    f.ok(&inp(Opcode::INIT_HCA, 16), init_hca_out::SIZE);
    assert_eq!(f.dev.hca_state(), HcaState::Initialized);
    assert!(set_roce_en(&mut f, true).ok());
    f.uar = f.alloc_uar();
    let eq = f.create_eq(5, (1 << 0x0a) | (1 << 0x0b));
    f.pd = f.alloc_pd();
    (f, eq)
}

/// CREATE_UMEM over `size` bytes at `off` of region `r`, in pages of
/// 2^`shift` bytes, as `_vfio_devx_umem_reg` builds it.
pub fn reg_umem(f: &mut Fw, r: &Region, off: usize, size: usize, shift: u32, write: bool) -> u32 {
    let addr = r.iova() + off as u64;
    let page = 1u64 << shift;
    let aligned = addr & !(page - 1);
    let n = (addr - aligned + size as u64).div_ceil(page) as usize;
    let mut i = inp(Opcode::CREATE_UMEM, create_umem_in::mtt.len_with(n));
    {
        let u = create_umem_in::umem.get_mut(&mut i);
        umem::log_page_size.set(u, (shift - 12) as u8).unwrap();
        umem::page_offset.set(u, (addr - aligned) as u32).unwrap();
        umem::num_of_mtt.set(u, n as u64).unwrap();
    }
    let perms = 1 | if write { 2 } else { 0 };
    for k in 0..n {
        create_umem_in::mtt
            .set(&mut i, k, (aligned + k as u64 * page) | perms)
            .unwrap();
    }
    let o = f.ok(&i, create_umem_out::SIZE);
    create_umem_out::umem_id.get(&o)
}

pub fn destroy_umem(f: &mut Fw, id: u32) -> Out {
    let mut i = inp(Opcode::DESTROY_UMEM, destroy_umem_in::SIZE);
    destroy_umem_in::umem_id.set(&mut i, id).unwrap();
    f.exec(&i, destroy_umem_out::SIZE)
}

/// A CQ whose ring sits `base` bytes into `ring` (a UMEM with a page
/// offset) and whose doorbell record is at `dbr_off` of `dbr` (a UMEM).
pub struct UCq {
    pub cqn: u32,
    pub ring: Region,
    pub base: usize,
    pub dbr: Region,
    pub dbr_off: usize,
    pub log_size: u8,
    pub ci: u32,
    pub umems: [u32; 2],
}

impl UCq {
    pub fn new(f: &mut Fw, eqn: u8, log_size: u8) -> UCq {
        // The ring starts 0x100 into its region (the UMEM's page offset)
        // and 0x40 into the UMEM: CQE 0 at region offset 0x140.
        let (page_off, umem_off) = (0x100, 0x40);
        let bytes = 64usize << log_size;
        let ring = f.hal.alloc_dma(page_off + umem_off + bytes).unwrap();
        let base = page_off + umem_off;
        for k in 0..(1usize << log_size) {
            ring.write_u8(base + k * 64 + 63, ctx::CQE_OP_OWN_INIT);
        }
        let ring_umem = reg_umem(f, &ring, page_off, umem_off + bytes, 12, true);
        let dbr = f.hal.alloc_dma(4096).unwrap();
        let dbr_off = 0x80;
        let dbr_umem = reg_umem(f, &dbr, 0, 4096, 12, false);
        let mut i = inp(Opcode::CREATE_CQ, create_cq_in::SIZE);
        {
            let c = create_cq_in::cq_context.get_mut(&mut i);
            cqc::log_cq_size.set(c, log_size).unwrap();
            cqc::uar_page.set(c, f.uar).unwrap();
            cqc::c_eqn_or_apu_element.set(c, eqn as u32).unwrap();
            cqc::dbr_umem_valid.set(c, true).unwrap();
            cqc::dbr_umem_id.set(c, dbr_umem).unwrap();
            cqc::dbr_addr.set(c, dbr_off as u64).unwrap();
        }
        create_cq_in::cq_umem_valid.set(&mut i, true).unwrap();
        create_cq_in::cq_umem_id.set(&mut i, ring_umem).unwrap();
        create_cq_in::cq_umem_offset
            .set(&mut i, umem_off as u64)
            .unwrap();
        let o = f.ok(&i, create_cq_out::SIZE);
        UCq {
            cqn: create_cq_out::cqn.get(&o),
            ring,
            base,
            dbr,
            dbr_off,
            log_size,
            ci: 0,
            umems: [ring_umem, dbr_umem],
        }
    }

    pub fn poll(&mut self) -> Option<[u8; 64]> {
        let n = 1u32 << self.log_size;
        let at = self.base + (self.ci & (n - 1)) as usize * 64;
        let op_own = self.ring.read_u8(at + 63);
        if op_own >> 4 == 15 || (op_own & 1) as u32 != (self.ci >> self.log_size) & 1 {
            return None;
        }
        mlx5_hal::barrier::dma_rmb();
        let mut e = [0u8; 64];
        self.ring.read_bytes(at, &mut e);
        self.ci += 1;
        self.dbr
            .write_be32(self.dbr_off + db::CQ_DBR_SET_CI, self.ci & 0xff_ffff);
        Some(e)
    }

    pub fn wait(&mut self, f: &Fw) -> [u8; 64] {
        for _ in 0..20_000 {
            if let Some(c) = self.poll() {
                return c;
            }
            f.hal.delay_us(50);
        }
        panic!("no CQE on CQ {:#x}", self.cqn);
    }

    pub fn arm(&self, f: &Fw) {
        let w = db::cq_arm_word(0, db::CQ_ARM_NEXT, self.ci);
        self.dbr.write_be32(self.dbr_off + db::CQ_DBR_ARM, w);
        mlx5_hal::barrier::mmio_wmb();
        f.hal.mmio_write64(
            db::uar_page_offset(f.uar) + db::UAR_CQ_DOORBELL,
            db::cq_arm_doorbell(w, self.cqn),
        );
    }
}

/// An RMP whose WQE ring and doorbell record are UMEMs (WQE `i` scatters
/// into `data + i * 4096` through `lkey`).
pub fn umem_rmp(f: &mut Fw, lkey: u32) -> (TRmp, [u32; 2]) {
    let (buf, dbr, data) = rmp_buffers(f, lkey);
    // One 64 KiB UMEM page over the 4 KiB ring: rdma-core rounds the UMEM
    // up to a power of two spanning the range, beyond what is mapped.
    let ring_umem = reg_umem(f, &buf, 0, 4096, 16, false);
    let dbr_umem = reg_umem(f, &dbr, 0, 4096, 12, false);
    let i = rmp_cmd_with(f, 0, |wq| {
        wq::dbr_umem_valid.set(wq, true).unwrap();
        wq::dbr_umem_id.set(wq, dbr_umem).unwrap();
        wq::dbr_addr.set(wq, 0).unwrap();
        wq::wq_umem_valid.set(wq, true).unwrap();
        wq::wq_umem_id.set(wq, ring_umem).unwrap();
    });
    let rmp = TRmp::create(f, &i, buf, dbr, data);
    (rmp, [ring_umem, dbr_umem])
}

/// A QP whose send ring (if any) and doorbell record are UMEMs.
pub fn umem_qp(
    f: &mut Fw,
    log_sq: Option<u8>,
    srq: Option<u32>,
    cqn_snd: u32,
    cqn_rcv: u32,
) -> (TQp, Vec<u32>) {
    let ring = log_sq.map(|l| f.hal.alloc_dma((64usize << l).max(4096)).unwrap());
    let dbr = f.hal.alloc_dma(4096).unwrap();
    let mut umems = vec![reg_umem(f, &dbr, 0, 4096, 12, false)];
    // The command without a page list: the send ring is a UMEM.
    let mut i = qp_cmd(f, log_sq.zip(ring.as_ref()), srq, cqn_snd, cqn_rcv, &dbr);
    i.truncate(create_qp_in::SIZE);
    {
        let c = create_qp_in::qpc.get_mut(&mut i);
        qpc::dbr_umem_valid.set(c, true).unwrap();
        qpc::dbr_umem_id.set(c, umems[0]).unwrap();
        qpc::dbr_addr.set(c, 0).unwrap();
    }
    if let (Some(l), Some(r)) = (log_sq, ring.as_ref()) {
        let id = reg_umem(f, r, 0, 64 << l, 12, false);
        umems.push(id);
        create_qp_in::wq_umem_valid.set(&mut i, true).unwrap();
        create_qp_in::wq_umem_id.set(&mut i, id).unwrap();
    }
    let qp = TQp::create(f, &i, ring, dbr, log_sq);
    (qp, umems)
}

pub fn freed_while_in_use(v: &[Violation]) -> Vec<&Violation> {
    v.iter()
        .filter(|v| matches!(v, Violation::FreedWhileInUse(_)))
        .collect()
}
