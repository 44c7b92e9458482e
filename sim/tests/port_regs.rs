//! ACCESS_REG and the port's tables: a register's bytes in the firmware's
//! byte order whatever the host's, PTYS and PMTU read as Linux reads them,
//! QUERY_HCA_VPORT_PKEY for one entry or the whole table, and the refusals.

use crate::common::*;

use mlx5_regs::layouts::*;
use mlx5_regs::{CmdStatus, Opcode};
use mlx5_sim::syndrome as sy;

#[test]
fn access_reg_host_endianness() {
    let mut f = Fw::default();
    f.enable();
    let mk = |he: bool, op: u16| {
        let mut i = inp(Opcode::ACCESS_REG, access_register_in::SIZE + 16);
        cmd_in::op_mod.set(&mut i, op).unwrap();
        access_register_in::register_id.set(&mut i, 0x7004).unwrap();
        register_host_endianness::he.set(&mut i[16..], he).unwrap();
        i
    };
    f.ok(&mk(cfg!(target_endian = "big"), 0), 32);
    f.refused(
        &mk(!cfg!(target_endian = "big"), 0),
        32,
        CmdStatus::BAD_PARAM_ERR,
        sy::ACCESS_REG_ENDIANNESS,
    );
    f.ok(&mk(false, 1), 32);
    let mut i = mk(false, 0);
    access_register_in::register_id.set(&mut i, 0xc00e).unwrap();
    f.refused(&i, 32, CmdStatus::BAD_PARAM_ERR, sy::ACCESS_REG_ID);
    let mut i = mk(false, 0);
    access_register_in::argument.set(&mut i, 1).unwrap();
    f.refused(&i, 32, CmdStatus::BAD_PARAM_ERR, sy::ACCESS_REG_ARG);
    let mut i = mk(false, 0);
    i[20] = 1;
    f.refused(
        &i,
        32,
        CmdStatus::BAD_PARAM_ERR,
        sy::per_opcode(sy::RESERVED, 0x805),
    );
    f.refused(
        &mk(false, 0)[..16],
        32,
        CmdStatus::BAD_INP_LEN_ERR,
        sy::per_opcode(sy::INP_LEN, 0x805),
    );
    f.refused(
        &mk(false, 0),
        16,
        CmdStatus::BAD_OUTP_LEN_ERR,
        sy::per_opcode(sy::OUTP_LEN, 0x805),
    );
    let mut i = mk(false, 0);
    cmd_in::op_mod.set(&mut i, 2).unwrap();
    f.refused(
        &i,
        32,
        CmdStatus::BAD_PARAM_ERR,
        sy::per_opcode(sy::BAD_OP_MOD, 0x805),
    );
}

/// PTYS and PMTU are served for reads of the own port and the port's
/// protocol, refused for writes and for other ports; QUERY_HCA_VPORT_PKEY
/// answers one entry or the whole table and refuses an index beyond it.
#[test]
fn port_registers_and_the_pkey_table_are_read_as_linux_reads_them() {
    use mlx5_regs::consts::{ptys, reg_id};
    let mut f = Fw::default();
    f.init(1);
    let reg = |id: u16, len: usize, port: u8, proto: u8, op: u16| {
        let mut i = inp(Opcode::ACCESS_REG, access_register_in::SIZE + len);
        cmd_in::op_mod.set(&mut i, op).unwrap();
        access_register_in::register_id.set(&mut i, id).unwrap();
        ptys_reg::local_port.set(&mut i[16..], port).unwrap();
        if id == reg_id::PTYS {
            ptys_reg::proto_mask.set(&mut i[16..], proto).unwrap();
        }
        i
    };
    let out = f.ok(&reg(reg_id::PTYS, 64, 1, ptys::PROTO_EN, 1), 16 + 64);
    let r = &out[16..];
    assert_eq!(ptys_reg::local_port.get(r), 1, "the key echoed");
    assert_eq!(
        ptys_reg::eth_proto_oper.get(r),
        1 << ptys::eth::B100GBASE_CR4
    );
    let cap = ptys_reg::eth_proto_capability.get(r);
    assert_eq!(
        cap & ptys_reg::eth_proto_oper.get(r),
        ptys_reg::eth_proto_oper.get(r)
    );
    let out = f.ok(&reg(reg_id::PMTU, 16, 1, 0, 1), 32);
    let m = &out[16..];
    assert_eq!(
        (pmtu_reg::max_mtu.get(m), pmtu_reg::oper_mtu.get(m)),
        (9978, 1500),
        "the vport MTU"
    );
    let bad = CmdStatus::BAD_PARAM_ERR;
    f.refused(
        &reg(reg_id::PTYS, 64, 1, ptys::PROTO_IB, 1),
        80,
        bad,
        sy::PTYS_PROTO_MASK,
    );
    f.refused(
        &reg(reg_id::PTYS, 64, 2, ptys::PROTO_EN, 1),
        80,
        bad,
        sy::PORT_REG_LOCAL_PORT,
    );
    f.refused(
        &reg(reg_id::PMTU, 16, 0, 0, 1),
        32,
        bad,
        sy::PORT_REG_LOCAL_PORT,
    );
    f.refused(&reg(reg_id::PMTU, 16, 1, 0, 0), 32, bad, sy::PORT_REG_WRITE);
    f.refused(
        &reg(reg_id::PTYS, 64, 1, ptys::PROTO_EN, 0),
        80,
        bad,
        sy::PORT_REG_WRITE,
    );
    f.refused(
        &reg(reg_id::PTYS, 64, 1, ptys::PROTO_EN, 1),
        32,
        CmdStatus::BAD_OUTP_LEN_ERR,
        sy::per_opcode(sy::OUTP_LEN, 0x805),
    );

    f.dev.set_pkey(3, 0x8001);
    let pk = |index: u16| {
        let mut i = inp(Opcode::QUERY_HCA_VPORT_PKEY, query_hca_vport_pkey_in::SIZE);
        query_hca_vport_pkey_in::pkey_index
            .set(&mut i, index)
            .unwrap();
        i
    };
    let out = f.ok(&pk(3), 20);
    assert_eq!(query_hca_vport_pkey_out::pkey.get(&out, 0), Some(0x8001));
    let out = f.ok(&pk(0), 20);
    assert_eq!(query_hca_vport_pkey_out::pkey.get(&out, 0), Some(0xffff));
    let out = f.ok(&pk(0xffff), 16 + 4 * 128);
    let keys: Vec<u32> = (0..128)
        .map(|i| query_hca_vport_pkey_out::pkey.get(&out, i).unwrap())
        .collect();
    assert_eq!(
        (keys[0], keys[1], keys[3], keys[127]),
        (0xffff, 0, 0x8001, 0)
    );
    f.refused(&pk(128), 20, bad, sy::PKEY_INDEX);
    f.refused(
        &pk(0xffff),
        20,
        CmdStatus::BAD_OUTP_LEN_ERR,
        sy::per_opcode(sy::OUTP_LEN, 0x765),
    );
}
