//! A DevX-style client against the model, written with raw commands the way
//! rdma-core's VFIO driver (`providers/mlx5/mlx5_vfio.c`) drives a card: its
//! bring-up (ISSI 1 required, HOST_ENDIANNESS, SET_HCA_CAP, the
//! `umem_uid_0` check, a 16-byte INIT_HCA, `roce_en` on an Ethernet port,
//! one EQ for commands and page requests), queues built from UMEMs
//! (CREATE_UMEM with 4 KiB or larger pages and a page offset, CQ/RMP/QP
//! contexts naming them), an MTT memory key as `reg_mr` makes it, RC
//! traffic, and its teardown (no page reclaim, no DISABLE_HCA) followed by
//! the function reset VFIO performs on close.

mod common;

use common::qp::*;
use common::*;
use mlx5_hal::Hal;
use mlx5_regs::consts::{ctx, op_mod as om};
use mlx5_regs::doorbell as db;
use mlx5_regs::layouts::*;
use mlx5_regs::{CmdStatus, EventType, Opcode};
use mlx5_sim::syndrome as sy;
use mlx5_sim::{HcaState, Profile, SimConfig, Violation};

const PROFILES: [Profile; 4] = [
    Profile::ConnectX4Lx,
    Profile::ConnectX5,
    Profile::ConnectX6Dx,
    Profile::ConnectX7,
];

/// rdma-core enables RoCE on an Ethernet port; then force loopback is
/// allowed only where the RoCE page says so, else RoCE addressing.
fn mode_for(p: Profile) -> Mode {
    match p {
        Profile::ConnectX6Dx | Profile::ConnectX7 => Mode::FlRoce,
        _ => Mode::Roce,
    }
}

/// `mlx5_vfio_setup_function` + the EQ and PD of `mlx5_vfio_alloc_context`.
fn vfio_bring_up(p: Profile) -> (Fw, TEq) {
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
fn reg_umem(f: &mut Fw, r: &Region, off: usize, size: usize, shift: u32, write: bool) -> u32 {
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

fn destroy_umem(f: &mut Fw, id: u32) -> Out {
    let mut i = inp(Opcode::DESTROY_UMEM, destroy_umem_in::SIZE);
    destroy_umem_in::umem_id.set(&mut i, id).unwrap();
    f.exec(&i, destroy_umem_out::SIZE)
}

/// A CQ whose ring sits `base` bytes into `ring` (a UMEM with a page
/// offset) and whose doorbell record is at `dbr_off` of `dbr` (a UMEM).
struct UCq {
    cqn: u32,
    ring: Region,
    base: usize,
    dbr: Region,
    dbr_off: usize,
    log_size: u8,
    ci: u32,
    umems: [u32; 2],
}

impl UCq {
    fn new(f: &mut Fw, eqn: u8, log_size: u8) -> UCq {
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

    fn poll(&mut self) -> Option<[u8; 64]> {
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

    fn wait(&mut self, f: &Fw) -> [u8; 64] {
        for _ in 0..20_000 {
            if let Some(c) = self.poll() {
                return c;
            }
            f.hal.delay_us(50);
        }
        panic!("no CQE on CQ {:#x}", self.cqn);
    }

    fn arm(&self, f: &Fw) {
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
fn umem_rmp(f: &mut Fw, lkey: u32) -> (TRmp, [u32; 2]) {
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
    // One 64 KiB UMEM page over the 4 KiB ring: rdma-core rounds the UMEM
    // up to a power of two spanning the range, beyond what is mapped.
    let ring_umem = reg_umem(f, &buf, 0, 4096, 16, false);
    let dbr_umem = reg_umem(f, &dbr, 0, 4096, 12, false);
    let mut i = inp(Opcode::CREATE_RMP, create_rmp_in::SIZE);
    {
        let r = create_rmp_in::ctx.tail_mut(&mut i);
        rmpc::state.set(r, ctx::RMP_STATE_RDY).unwrap();
        let wq = rmpc::wq.tail_mut(r);
        wq::log_wq_stride.set(wq, RMP_STRIDE).unwrap();
        wq::log_wq_sz.set(wq, RMP_LOG).unwrap();
        wq::pd.set(wq, f.pd).unwrap();
        wq::dbr_umem_valid.set(wq, true).unwrap();
        wq::dbr_umem_id.set(wq, dbr_umem).unwrap();
        wq::dbr_addr.set(wq, 0).unwrap();
        wq::wq_umem_valid.set(wq, true).unwrap();
        wq::wq_umem_id.set(wq, ring_umem).unwrap();
    }
    let o = f.ok(&i, create_rmp_out::SIZE);
    let rmp = TRmp {
        n: create_rmp_out::rmpn.get(&o),
        buf,
        dbr,
        data,
        posted: 0,
    };
    (rmp, [ring_umem, dbr_umem])
}

/// A QP whose send ring (if any) and doorbell record are UMEMs.
fn umem_qp(
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
    let o = f.ok(&i, create_qp_out::SIZE);
    let qp = TQp {
        qpn: create_qp_out::qpn.get(&o),
        ring,
        dbr,
        log_sq: log_sq.unwrap_or(0),
        pc: 0,
        uar: f.uar,
        bf: db::UAR_BF_OFFSET,
    };
    (qp, umems)
}

fn freed_while_in_use(v: &[Violation]) -> Vec<&Violation> {
    v.iter()
        .filter(|v| matches!(v, Violation::FreedWhileInUse(_)))
        .collect()
}

/// CQ, RMP and QPs from UMEMs pass traffic on every profile; the client
/// tears down the rdma-core way and VFIO's function reset cleans up.
#[test]
fn devx_queues_from_umems_pass_traffic_on_every_profile() {
    for p in PROFILES {
        let (mut f, mut eq) = vfio_bring_up(p);
        let mode = mode_for(p);
        prepare_mode(&mut f, mode);
        let mut scq = UCq::new(&mut f, eq.eqn, 6);
        let mut rcq = UCq::new(&mut f, eq.eqn, 6);
        let rkey = dma_key(&mut f);
        let (mut rmp, rmp_umems) = umem_rmp(&mut f, rkey);
        let (mut a, a_umems) = umem_qp(&mut f, Some(4), None, scq.cqn, 0);
        let (b, b_umems) = umem_qp(&mut f, None, Some(rmp.n), 0, rcq.cqn);
        connect(&mut f, mode, &a, &b, 7);
        // reg_mr: an MTT key with page access bits over the send buffer,
        // at a virtual address unlike its IOVA.
        let src = f.hal.alloc_dma(4 * 4096).unwrap();
        let va = 0x7f00_1234_0000u64;
        let pages: Vec<u64> = (0..4).map(|k| src.iova() + 4096 * k).collect();
        let cmd = mkey_mtt_cmd(f.pd, va, 4 * 4096, &pages, true);
        let skey = create_mkey(&mut f, &cmd);
        rmp.post(8);
        rcq.arm(&f);
        for m in 0..6u32 {
            let len = 40 + 30 * m;
            let payload: Vec<u8> = (0..len).map(|i| (i as u8) ^ (m as u8 * 17)).collect();
            src.write_bytes(m as usize * 512, &payload);
            a.post(&f, &Wr::send(va + m as u64 * 512, len, skey));
            let r = rcq.wait(&f);
            assert_eq!(cqe64::opcode.get(&r), 2, "{p:?}: RESP_SEND");
            assert_eq!(cqe64::byte_cnt.get(&r), len);
            let idx = cqe64::wqe_counter.get(&r) as usize;
            assert_eq!(
                rmp.received(idx, len as usize),
                payload,
                "{p:?} message {m}"
            );
            let s = scq.wait(&f);
            assert_eq!(cqe64::opcode.get(&s), 0, "{p:?}: requester CQE");
        }
        // The completion event of the armed receive CQ went to the EQ.
        let comp = f
            .drain_eq(&mut eq)
            .iter()
            .filter(|e| eqe_type(e) == EventType::COMP.0)
            .count();
        assert_eq!(comp, 1, "{p:?}: one event per arm");
        // QUERY_QP with rdma-core's 272-byte output (no QPC extension).
        let mut q = inp(Opcode::QUERY_QP, query_qp_in::SIZE);
        query_qp_in::qpn.set(&mut q, a.qpn).unwrap();
        let o = f.ok(&q, 272);
        assert_eq!(o.len(), 272);
        assert_eq!(qpc::state.get(query_qp_out::qpc.get(&o)), 3, "RTS");
        // A UMEM in use cannot go.
        let busy = destroy_umem(&mut f, rmp_umems[0]);
        assert_eq!(
            (CmdStatus(busy.status), busy.syndrome),
            (CmdStatus::RES_BUSY, sy::UMEM_IN_USE)
        );
        assert!(f.dev.objects().umems >= 9);
        // Application cleanup, then rdma-core's context teardown.
        for qpn in [a.qpn, b.qpn] {
            f.ok(&qpn_cmd(Opcode::DESTROY_QP, qpn), destroy_qp_out::SIZE);
        }
        let mut d = inp(Opcode::DESTROY_RMP, destroy_rmp_in::SIZE);
        destroy_rmp_in::rmpn.set(&mut d, rmp.n).unwrap();
        f.ok(&d, destroy_rmp_out::SIZE);
        for cq in [&scq, &rcq] {
            let mut d = inp(Opcode::DESTROY_CQ, destroy_cq_in::SIZE);
            destroy_cq_in::cqn.set(&mut d, cq.cqn).unwrap();
            f.ok(&d, destroy_cq_out::SIZE);
        }
        let all: Vec<u32> = scq
            .umems
            .iter()
            .chain(&rcq.umems)
            .chain(&rmp_umems)
            .chain(&a_umems)
            .chain(&b_umems)
            .copied()
            .collect();
        for id in all {
            assert!(destroy_umem(&mut f, id).ok());
        }
        assert_eq!(f.dev.objects().umems, 0);
        let mut d = inp(Opcode::DESTROY_EQ, destroy_eq_in::SIZE);
        destroy_eq_in::eq_number.set(&mut d, eq.eqn).unwrap();
        f.ok(&d, destroy_eq_out::SIZE);
        let mut d = inp(Opcode::DEALLOC_UAR, dealloc_uar_in::SIZE);
        dealloc_uar_in::uar.set(&mut d, f.uar).unwrap();
        f.ok(&d, dealloc_uar_out::SIZE);
        let mut t = inp(Opcode::TEARDOWN_HCA, teardown_hca_in::SIZE);
        let fast = f.dev.caps().fast_teardown;
        teardown_hca_in::profile
            .set(&mut t, if fast { 2 } else { 0 })
            .unwrap();
        f.ok(&t, teardown_hca_out::SIZE);
        assert!(f.dev.pages_held() > 0, "rdma-core never reclaims");
        // VFIO closes the device: function reset. Then every buffer,
        // including the pages firmware held, may be freed.
        let r = f.hal.reset();
        assert_eq!(r.hca_state, Some(HcaState::TornDown));
        assert!(r.pages > 0);
        let dev = f.dev.clone();
        drop((f, scq, rcq, rmp, a, b, src));
        assert!(
            freed_while_in_use(&dev.violations()).is_empty(),
            "{p:?}: {:?}",
            dev.violations()
        );
        assert_eq!(dev.hca_state(), HcaState::Disabled);
        assert_eq!(dev.pages_held(), 0);
        assert_eq!(dev.objects().total(), 0);
    }
}

/// An application that exits without destroying anything: the reset on
/// close drops its live UMEM-based queues too.
#[test]
fn reset_drops_live_devx_objects() {
    let (mut f, eq) = vfio_bring_up(Profile::ConnectX6Dx);
    let cq = UCq::new(&mut f, eq.eqn, 4);
    let rkey = dma_key(&mut f);
    let (rmp, _) = umem_rmp(&mut f, rkey);
    let (qp, _) = umem_qp(&mut f, None, Some(rmp.n), 0, cq.cqn);
    let before = f.dev.objects();
    assert_eq!((before.qps, before.rmps, before.cqs), (1, 1, 1));
    assert_eq!(before.umems, 5);
    let r = f.hal.reset();
    assert_eq!(r.objects, before);
    assert_eq!(r.hca_state, Some(HcaState::Initialized));
    let dev = f.dev.clone();
    drop((f, cq, rmp, qp));
    assert!(freed_while_in_use(&dev.violations()).is_empty());
    assert_eq!(dev.objects().total(), 0);
}

/// Freeing a UMEM's memory while a CQ keeps its ring there is caught.
#[test]
fn freeing_umem_memory_in_use_is_a_violation() {
    let (mut f, eq) = vfio_bring_up(Profile::ConnectX5);
    let cq = UCq::new(&mut f, eq.eqn, 4);
    let dev = f.dev.clone();
    drop(cq.ring);
    assert!(!freed_while_in_use(&dev.violations()).is_empty());
}

#[test]
fn umem_refusals() {
    let (mut f, eq) = vfio_bring_up(Profile::ConnectX5);
    let r = f.hal.alloc_dma(8192).unwrap();
    let mk = |n: u64, shift: u8, off: u32, entry: u64| {
        let mut i = inp(Opcode::CREATE_UMEM, create_umem_in::mtt.len_with(1));
        let u = create_umem_in::umem.get_mut(&mut i);
        umem::log_page_size.set(u, shift).unwrap();
        umem::page_offset.set(u, off).unwrap();
        umem::num_of_mtt.set(u, n).unwrap();
        create_umem_in::mtt.set(&mut i, 0, entry).unwrap();
        i
    };
    let base = r.iova();
    let out = create_umem_out::SIZE;
    f.refused(
        &mk(0, 0, 0, base | 3),
        out,
        CmdStatus::BAD_PARAM_ERR,
        sy::UMEM_NUM_MTT,
    );
    f.refused(
        &mk(2, 0, 0, base | 3),
        out,
        CmdStatus::BAD_INP_LEN_ERR,
        sy::UMEM_MTT_SHORT,
    );
    f.refused(
        &mk(1, 20, 0, base | 3),
        out,
        CmdStatus::BAD_PARAM_ERR,
        sy::UMEM_PAGE_SIZE,
    );
    f.refused(
        &mk(1, 0, 4096, base | 3),
        out,
        CmdStatus::BAD_PARAM_ERR,
        sy::UMEM_PAGE_OFFSET,
    );
    f.refused(
        &mk(1, 0, 0, (base + 64) | 3),
        out,
        CmdStatus::BAD_PARAM_ERR,
        sy::UMEM_MTT_ALIGN,
    );
    f.refused(
        &mk(1, 0, 0, base | 0x10),
        out,
        CmdStatus::BAD_PARAM_ERR,
        sy::UMEM_MTT_ALIGN,
    );
    let mut i = mk(1, 0, 0, base | 3);
    create_umem_in::uid.set(&mut i, 1).unwrap();
    f.refused(
        &i,
        out,
        CmdStatus::BAD_PARAM_ERR,
        sy::per_opcode(sy::UID, Opcode::CREATE_UMEM.0),
    );
    let mut d = inp(Opcode::DESTROY_UMEM, destroy_umem_in::SIZE);
    destroy_umem_in::umem_id.set(&mut d, 0x77_7777).unwrap();
    f.refused(
        &d,
        destroy_umem_out::SIZE,
        CmdStatus::BAD_RES_ERR,
        sy::UMEM_NOT_FOUND,
    );

    // Contexts: unknown UMEM, a ring beyond it, a read-only CQ ring, ids
    // without the valid bit.
    let ro = reg_umem(&mut f, &r, 0, 4096, 12, false);
    let rw = reg_umem(&mut f, &r, 0, 4096, 12, true);
    let cq_cmd = |ring: u32, off: u64, log: u8, edit: &dyn Fn(&mut [u8])| {
        let mut i = inp(Opcode::CREATE_CQ, create_cq_in::SIZE);
        let c = create_cq_in::cq_context.get_mut(&mut i);
        cqc::log_cq_size.set(c, log).unwrap();
        cqc::c_eqn_or_apu_element.set(c, eq.eqn as u32).unwrap();
        cqc::dbr_umem_valid.set(c, true).unwrap();
        cqc::dbr_umem_id.set(c, ro).unwrap();
        create_cq_in::cq_umem_valid.set(&mut i, true).unwrap();
        create_cq_in::cq_umem_id.set(&mut i, ring).unwrap();
        create_cq_in::cq_umem_offset.set(&mut i, off).unwrap();
        edit(&mut i);
        i
    };
    let uar = f.uar;
    let with_uar = |i: &mut [u8]| {
        cqc::uar_page
            .set(create_cq_in::cq_context.get_mut(i), uar)
            .unwrap()
    };
    let o = create_cq_out::SIZE;
    f.refused(
        &cq_cmd(0x55_5555, 0, 4, &with_uar),
        o,
        CmdStatus::BAD_RES_ERR,
        sy::UMEM_NOT_FOUND,
    );
    f.refused(
        &cq_cmd(rw, 0, 7, &with_uar),
        o,
        CmdStatus::BAD_PARAM_ERR,
        sy::UMEM_RANGE,
    );
    f.refused(
        &cq_cmd(rw, 4000, 4, &with_uar),
        o,
        CmdStatus::BAD_PARAM_ERR,
        sy::UMEM_RANGE,
    );
    f.refused(
        &cq_cmd(ro, 0, 4, &with_uar),
        o,
        CmdStatus::BAD_PARAM_ERR,
        sy::UMEM_RANGE,
    );
    let dbr_beyond = |i: &mut [u8]| {
        with_uar(i);
        cqc::dbr_addr
            .set(create_cq_in::cq_context.get_mut(i), 4096)
            .unwrap()
    };
    f.refused(
        &cq_cmd(rw, 0, 4, &dbr_beyond),
        o,
        CmdStatus::BAD_PARAM_ERR,
        sy::UMEM_RANGE,
    );
    let id_without_valid = |i: &mut [u8]| {
        with_uar(i);
        create_cq_in::cq_umem_valid.set(i, false).unwrap()
    };
    f.refused(
        &cq_cmd(rw, 0, 4, &id_without_valid),
        o,
        CmdStatus::BAD_PARAM_ERR,
        sy::UMEM_FIELDS,
    );
    let o2 = f.ok(&cq_cmd(rw, 0, 4, &with_uar), o);
    assert_ne!(create_cq_out::cqn.get(&o2), 0);
    // Without the capability, uid-0 UMEMs are refused.
    f.dev.caps_mut(|c| c.umem_uid_0 = false);
    f.refused(
        &mk(1, 0, 0, base | 3),
        out,
        CmdStatus::BAD_PARAM_ERR,
        sy::UMEM_UID_0_CAP,
    );
    drop(r);
}

/// rdma-core's 16-byte INIT_HCA is taken; a shorter one is still refused,
/// and the longer layout's missing bytes read as zero.
#[test]
fn older_command_forms() {
    let mut f = Fw::default();
    f.enable();
    let boot = f.query_pages(om::QUERY_PAGES_BOOT);
    assert!(f.give_pages(boot as usize).ok());
    let init = f.query_pages(om::QUERY_PAGES_INIT);
    assert!(f.give_pages(init as usize).ok());
    f.refused(
        &inp(Opcode::INIT_HCA, 8),
        init_hca_out::SIZE,
        CmdStatus::BAD_INP_LEN_ERR,
        sy::per_opcode(sy::INP_LEN, Opcode::INIT_HCA.0),
    );
    f.ok(&inp(Opcode::INIT_HCA, 16), init_hca_out::SIZE);
    assert_eq!(f.dev.hca_state(), HcaState::Initialized);
    // QUERY_QP below the older 272-byte output is refused.
    f.uar = f.alloc_uar();
    f.pd = f.alloc_pd();
    let mut q = inp(Opcode::QUERY_QP, query_qp_in::SIZE);
    query_qp_in::qpn.set(&mut q, 0x1234).unwrap();
    f.refused(
        &q,
        256,
        CmdStatus::BAD_OUTP_LEN_ERR,
        sy::per_opcode(sy::OUTP_LEN, Opcode::QUERY_QP.0),
    );
}
