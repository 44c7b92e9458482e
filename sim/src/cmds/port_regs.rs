//! The port registers read with ACCESS_REG: PTYS (what the link can run and
//! runs) and PMTU (the port's MTUs), and the P_Key table query
//! (QUERY_HCA_VPORT_PKEY). Linux readers: `drivers/net/ethernet/mellanox/
//! mlx5/core/port.c` (`mlx5_query_port_ptys`, `mlx5_query_port_max_mtu`,
//! `mlx5_query_port_oper_mtu`), `vport.c` (`mlx5_query_hca_vport_pkey`),
//! `drivers/infiniband/hw/mlx5/main.c` (`mlx5_query_hca_port`,
//! `mlx5_query_port_roce`).

use mlx5_regs::consts::{port as pt, ptys};

use super::*;
use crate::port::{link, MAX_ETH_MTU};

impl State {
    /// ACCESS_REG of PTYS or PMTU. Both are read-only here: speed and MTU
    /// administration is not modelled, and a write is refused rather than
    /// silently ignored.
    pub(super) fn port_register(&mut self, id: u16, inp: &[u8], op_mod: u16, out: &mut [u8]) -> R {
        let opc = Opcode::ACCESS_REG.0;
        ensure(
            access_register_in::argument.get(inp) == 0,
            bad_param(sy::ACCESS_REG_ARG),
        )?;
        let len = if id == reg_id::PTYS {
            ptys_reg::SIZE
        } else {
            pmtu_reg::SIZE
        };
        ensure(
            inp.len() >= access_register_in::SIZE + len,
            fail(CmdStatus::BAD_INP_LEN_ERR, per_opcode(sy::INP_LEN, opc)),
        )?;
        ensure(
            out.len() >= access_register_out::SIZE + len,
            fail(CmdStatus::BAD_OUTP_LEN_ERR, per_opcode(sy::OUTP_LEN, opc)),
        )?;
        let reg = &inp[access_register_in::SIZE..access_register_in::SIZE + len];
        // Both layouts keep local_port in bits 15:8 of the first dword.
        let local_port = ptys_reg::local_port.get(reg);
        ensure(
            (1..=self.caps.num_ports.max(1)).contains(&local_port),
            bad_param(sy::PORT_REG_LOCAL_PORT),
        )?;
        ensure(op_mod == om::ACCESS_REG_READ, bad_param(sy::PORT_REG_WRITE))?;
        let ib = self.caps.port_type == pt::TYPE_IB;
        let o = &mut out[access_register_out::SIZE..access_register_out::SIZE + len];
        o.copy_from_slice(reg);
        if id == reg_id::PTYS {
            let want = if ib { ptys::PROTO_IB } else { ptys::PROTO_EN };
            ensure(
                ptys_reg::proto_mask.get(reg) == want,
                bad_param(sy::PTYS_PROTO_MASK),
            )?;
            if ib {
                ptys_reg::ib_proto_capability
                    .set(o, link::IB_PROTO_CAPABILITY)
                    .expect("16-bit");
                ptys_reg::ib_link_width_capability
                    .set(o, link::IB_WIDTH_CAPABILITY)
                    .expect("16-bit");
                ptys_reg::ib_proto_admin
                    .set(o, link::IB_PROTO_CAPABILITY)
                    .expect("16-bit");
                ptys_reg::ib_link_width_admin
                    .set(o, link::IB_WIDTH_CAPABILITY)
                    .expect("16-bit");
                ptys_reg::ib_proto_oper
                    .set(o, link::IB_PROTO_OPER)
                    .expect("16-bit");
                ptys_reg::ib_link_width_oper
                    .set(o, link::IB_WIDTH_OPER)
                    .expect("16-bit");
            } else {
                ptys_reg::eth_proto_capability
                    .set(o, link::ETH_PROTO_CAPABILITY)
                    .expect("32-bit");
                ptys_reg::eth_proto_admin
                    .set(o, link::ETH_PROTO_CAPABILITY)
                    .expect("32-bit");
                ptys_reg::eth_proto_oper
                    .set(o, link::ETH_PROTO_OPER)
                    .expect("32-bit");
            }
        } else {
            let (max, oper) = if ib {
                (4096, self.port.ib_mtu)
            } else {
                (MAX_ETH_MTU, self.port.mtu)
            };
            pmtu_reg::max_mtu.set(o, max).expect("16-bit");
            pmtu_reg::admin_mtu.set(o, oper).expect("16-bit");
            pmtu_reg::oper_mtu.set(o, oper).expect("16-bit");
        }
        Ok(())
    }

    /// QUERY_HCA_VPORT_PKEY: one entry of the own vport's P_Key table, or
    /// the whole table for index 0xffff. Entries never programmed read 0
    /// (an invalid key).
    pub(super) fn query_hca_vport_pkey(&mut self, inp: &[u8], out: &mut [u8]) -> R {
        let opc = Opcode::QUERY_HCA_VPORT_PKEY.0;
        let port_num = query_hca_vport_pkey_in::port_num.get(inp);
        ensure(
            !query_hca_vport_pkey_in::other_vport.get(inp)
                && query_hca_vport_pkey_in::vport_number.get(inp) == 0
                && (port_num == 0 || (self.caps.num_ports >= 2 && port_num <= self.caps.num_ports)),
            bad_param(sy::VPORT_OTHER),
        )?;
        // 128 << pkey_table_size entries (Linux `mlx5_to_sw_pkey_sz`).
        let table = 128usize << self.cur.pkey_table_size.min(8);
        let index = query_hca_vport_pkey_in::pkey_index.get(inp);
        let (first, count) = if index == 0xffff {
            (0, table)
        } else {
            ensure((index as usize) < table, bad_param(sy::PKEY_INDEX))?;
            (index as usize, 1)
        };
        ensure(
            out.len() >= query_hca_vport_pkey_out::pkey.len_with(count),
            fail(CmdStatus::BAD_OUTP_LEN_ERR, per_opcode(sy::OUTP_LEN, opc)),
        )?;
        for i in 0..count {
            let key = self
                .port
                .pkeys
                .get(&((first + i) as u16))
                .copied()
                .unwrap_or(0);
            query_hca_vport_pkey_out::pkey
                .set(out, i, u32::from(key))
                .expect("32-bit");
        }
        Ok(())
    }
}
