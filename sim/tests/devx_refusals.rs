//! Refusals of the DevX commands and contexts (UMEM checks, ids without
//! their valid bit, a read-only CQ ring, the `umem_uid_0` capability) and
//! the older command forms the model takes (docs/fidelity.md §15.1, §15.3).

use crate::common::devx::*;
use crate::common::*;
use mlx5_hal::Hal;
use mlx5_regs::consts::op_mod as om;
use mlx5_regs::layouts::*;
use mlx5_regs::{CmdStatus, Opcode};
use mlx5_sim::syndrome as sy;
use mlx5_sim::{HcaState, Profile};

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
