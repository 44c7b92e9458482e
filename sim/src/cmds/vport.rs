//! Port and vport commands: QUERY/MODIFY_NIC_VPORT_CONTEXT,
//! SET/QUERY_ROCE_ADDRESS (the GID table), QUERY_HCA_VPORT_CONTEXT,
//! QUERY_VPORT_STATE, and the settable field of the RoCE capability page.
//! Linux users: `drivers/net/ethernet/mellanox/mlx5/core/vport.c`
//! (`mlx5_nic_vport_update_roce_state`, `mlx5_query_nic_vport_mac_address`,
//! `mlx5_query_hca_vport_context`), `lib/gid.c` (`mlx5_core_roce_gid_set`),
//! `main.c` (`handle_hca_cap_roce`).

use mlx5_regs::consts::{port as pt, roce};

use super::*;
use crate::port::{GidEntry, MAX_ETH_MTU};

fn mac_of(hi: u16, lo: u32) -> [u8; 6] {
    let h = hi.to_be_bytes();
    let l = lo.to_be_bytes();
    [h[0], h[1], l[0], l[1], l[2], l[3]]
}

fn mac_parts(m: [u8; 6]) -> (u16, u32) {
    (
        u16::from_be_bytes([m[0], m[1]]),
        u32::from_be_bytes([m[2], m[3], m[4], m[5]]),
    )
}

impl State {
    pub(super) fn query_nic_vport_context(&mut self, inp: &[u8], out: &mut [u8]) -> R {
        ensure(
            !query_nic_vport_context_in::other_vport.get(inp)
                && query_nic_vport_context_in::vport_number.get(inp) == 0,
            bad_param(sy::VPORT_OTHER),
        )?;
        let p = &self.port;
        let c = query_nic_vport_context_out::nic_vport_context.get_mut(out);
        nic_vport_context::roce_en.set(c, p.roce_en).expect("flag");
        nic_vport_context::disable_uc_local_lb
            .set(c, p.disable_uc_local_lb)
            .expect("flag");
        nic_vport_context::disable_mc_local_lb
            .set(c, p.disable_mc_local_lb)
            .expect("flag");
        nic_vport_context::mtu.set(c, p.mtu).expect("16-bit");
        let g = p.guid();
        nic_vport_context::system_image_guid
            .set(c, g)
            .expect("64-bit");
        nic_vport_context::port_guid.set(c, g).expect("64-bit");
        nic_vport_context::node_guid.set(c, g).expect("64-bit");
        let (hi, lo) = mac_parts(p.mac);
        let m = nic_vport_context::permanent_address.get_mut(c);
        mac_address_layout::mac_addr_47_32
            .set(m, hi)
            .expect("16-bit");
        mac_address_layout::mac_addr_31_0
            .set(m, lo)
            .expect("32-bit");
        Ok(())
    }

    pub(super) fn modify_nic_vport_context(&mut self, inp: &[u8]) -> R {
        use modify_nic_vport_field_select as fs;
        ensure(
            !modify_nic_vport_context_in::other_vport.get(inp)
                && modify_nic_vport_context_in::vport_number.get(inp) == 0,
            bad_param(sy::VPORT_OTHER),
        )?;
        let sel = modify_nic_vport_context_in::field_select.get(inp);
        let unmodelled = fs::affiliation.get(sel)
            || fs::node_guid.get(sel)
            || fs::port_guid.get(sel)
            || fs::min_inline.get(sel)
            || fs::change_event.get(sel)
            || fs::promisc.get(sel)
            || fs::permanent_address.get(sel)
            || fs::addresses_list.get(sel);
        let (roce_en, uc, mc, mtu) = (
            fs::roce_en.get(sel),
            fs::disable_uc_local_lb.get(sel),
            fs::disable_mc_local_lb.get(sel),
            fs::mtu.get(sel),
        );
        ensure(
            !unmodelled && (roce_en || uc || mc || mtu),
            bad_param(sy::VPORT_FIELD_SELECT),
        )?;
        ensure(
            !roce_en || self.caps.has_roce_page(),
            bad_param(sy::VPORT_ROCE_CAP),
        )?;
        ensure(
            (!uc || self.caps.disable_local_lb_uc) && (!mc || self.caps.disable_local_lb_mc),
            bad_param(sy::VPORT_LB_CAP),
        )?;
        let c = modify_nic_vport_context_in::nic_vport_context.get(inp);
        let new_mtu = nic_vport_context::mtu.get(c);
        ensure(
            !mtu || (68..=MAX_ETH_MTU).contains(&new_mtu),
            bad_param(sy::VPORT_MTU),
        )?;
        let p = &mut self.port;
        if roce_en {
            p.roce_en = nic_vport_context::roce_en.get(c);
        }
        if uc {
            p.disable_uc_local_lb = nic_vport_context::disable_uc_local_lb.get(c);
        }
        if mc {
            p.disable_mc_local_lb = nic_vport_context::disable_mc_local_lb.get(c);
        }
        if mtu {
            p.mtu = new_mtu;
        }
        Ok(())
    }

    fn roce_addr_checks(&self, index: u16, vhca_port: u8) -> R {
        ensure(
            self.caps.has_roce_page(),
            bad_param(sy::ROCE_ADDR_PORT_TYPE),
        )?;
        ensure(vhca_port == 0, bad_param(sy::ROCE_ADDR_VHCA_PORT))?;
        ensure(
            index < self.caps.roce_caps.roce_address_table_size,
            bad_param(sy::ROCE_ADDR_INDEX),
        )
    }

    pub(super) fn set_roce_address(&mut self, inp: &[u8]) -> R {
        let index = set_roce_address_in::roce_address_index.get(inp);
        self.roce_addr_checks(index, set_roce_address_in::vhca_port_num.get(inp))?;
        let a = set_roce_address_in::roce_address.get(inp);
        let mut gid = [0u8; 16];
        gid.copy_from_slice(roce_addr_layout::source_l3_address.get(a));
        let mac = mac_of(
            roce_addr_layout::source_mac_47_32.get(a),
            roce_addr_layout::source_mac_31_0.get(a),
        );
        if gid == [0; 16] && mac == [0; 6] {
            // Linux deletes an entry by setting it without GID and MAC.
            self.port.gids.remove(&index);
            return Ok(());
        }
        let version = roce_addr_layout::roce_version.get(a);
        ensure(
            (version == roce::VERSION_1 || version == roce::VERSION_2)
                && self.caps.roce_caps.roce_version & (1 << version) != 0,
            bad_param(sy::ROCE_ADDR_VERSION),
        )?;
        let l3_type = roce_addr_layout::roce_l3_type.get(a);
        ensure(
            l3_type == roce::L3_TYPE_IPV4 || l3_type == roce::L3_TYPE_IPV6,
            bad_param(sy::ROCE_ADDR_L3_TYPE),
        )?;
        let vlan = roce_addr_layout::vlan_valid
            .get(a)
            .then(|| roce_addr_layout::vlan_id.get(a));
        self.port.gids.insert(
            index,
            GidEntry {
                gid,
                mac,
                vlan,
                l3_type,
                version,
            },
        );
        Ok(())
    }

    pub(super) fn query_roce_address(&mut self, inp: &[u8], out: &mut [u8]) -> R {
        let index = query_roce_address_in::roce_address_index.get(inp);
        self.roce_addr_checks(index, query_roce_address_in::vhca_port_num.get(inp))?;
        let Some(e) = self.port.gids.get(&index).copied() else {
            return Ok(());
        };
        let a = query_roce_address_out::roce_address.get_mut(out);
        roce_addr_layout::source_l3_address
            .get_mut(a)
            .copy_from_slice(&e.gid);
        let (hi, lo) = mac_parts(e.mac);
        roce_addr_layout::source_mac_47_32
            .set(a, hi)
            .expect("16-bit");
        roce_addr_layout::source_mac_31_0
            .set(a, lo)
            .expect("32-bit");
        if let Some(v) = e.vlan {
            roce_addr_layout::vlan_valid.set(a, true).expect("flag");
            roce_addr_layout::vlan_id.set(a, v).expect("12-bit");
        }
        roce_addr_layout::roce_l3_type
            .set(a, e.l3_type)
            .expect("4-bit");
        roce_addr_layout::roce_version
            .set(a, e.version)
            .expect("8-bit");
        Ok(())
    }

    pub(super) fn query_hca_vport_context(&mut self, inp: &[u8], out: &mut [u8]) -> R {
        let port_num = query_hca_vport_context_in::port_num.get(inp);
        ensure(
            !query_hca_vport_context_in::other_vport.get(inp)
                && query_hca_vport_context_in::vport_number.get(inp) == 0
                && (port_num == 0 || (self.caps.num_ports >= 2 && port_num <= self.caps.num_ports)),
            bad_param(sy::VPORT_OTHER),
        )?;
        let ib = self.caps.port_type == pt::TYPE_IB;
        let c = query_hca_vport_context_out::hca_vport_context.get_mut(out);
        hca_vport_context::port_physical_state
            .set(c, pt::PHYS_STATE_LINK_UP)
            .expect("4-bit");
        hca_vport_context::vport_state
            .set(c, pt::STATE_ACTIVE)
            .expect("4-bit");
        hca_vport_context::port_state
            .set(c, pt::STATE_ACTIVE)
            .expect("4-bit");
        let g = self.port.guid();
        hca_vport_context::port_guid.set(c, g).expect("64-bit");
        hca_vport_context::node_guid.set(c, g).expect("64-bit");
        hca_vport_context::system_image_guid
            .set(c, g)
            .expect("64-bit");
        if ib {
            hca_vport_context::lid
                .set(c, self.port.lid)
                .expect("16-bit");
            hca_vport_context::sm_lid
                .set(c, self.port.lid)
                .expect("16-bit");
        }
        Ok(())
    }

    pub(super) fn query_vport_state(&mut self, inp: &[u8], out: &mut [u8]) -> R {
        ensure(
            !query_vport_state_in::other_vport.get(inp)
                && query_vport_state_in::vport_number.get(inp) == 0,
            bad_param(sy::VPORT_OTHER),
        )?;
        // MLX5_VPORT_STATE_UP / MLX5_VPORT_ADMIN_STATE_UP.
        query_vport_state_out::state.set(out, 1).expect("4-bit");
        query_vport_state_out::admin_state
            .set(out, 1)
            .expect("4-bit");
        Ok(())
    }

    /// SET_HCA_CAP op_mod 8 (RoCE page): the current page with only
    /// `sw_r_roce_src_udp_port` changed (Linux `handle_hca_cap_roce`).
    pub(super) fn set_roce_cap(&mut self, given: &[u8]) -> R {
        let opc = Opcode::SET_HCA_CAP.0;
        let (page, rest) = given.split_at(roce_cap::SIZE);
        ensure(
            !reserved_set(&roce_cap::LAYOUT, page, 0) && rest.iter().all(|&b| b == 0),
            bad_param(per_opcode(sy::RESERVED, opc)),
        )?;
        let want = roce_cap::sw_r_roce_src_udp_port.get(page);
        let mut expect = vec![0u8; roce_cap::SIZE];
        self.caps.roce_caps.to_block(&mut expect, Some(want));
        ensure(expect == page, bad_param(sy::ROCE_CAP_NOT_SETTABLE))?;
        ensure(
            !want || self.caps.roce_caps.sw_r_roce_src_udp_port,
            bad_param(sy::SET_CAP_ABOVE_MAX),
        )?;
        self.cur.sw_r_roce_src_udp_port = want;
        Ok(())
    }

    /// SET_HCA_CAP op_mod 6 (atomic page): the page as read with only
    /// `atomic_req_8B_endianness_mode` changed, to 0 or, when
    /// `supported_atomic_req_8B_endianness_mode_1`, to 1 (Linux
    /// `handle_hca_cap_atomic`).
    pub(super) fn set_atomic_cap(&mut self, given: &[u8]) -> R {
        use mlx5_regs::layouts::atomic_caps;
        let opc = Opcode::SET_HCA_CAP.0;
        let (page, rest) = given.split_at(atomic_caps::SIZE);
        ensure(
            !reserved_set(&atomic_caps::LAYOUT, page, 0) && rest.iter().all(|&b| b == 0),
            bad_param(per_opcode(sy::RESERVED, opc)),
        )?;
        let want = atomic_caps::atomic_req_8b_endianness_mode.get(page);
        // The page as read back with the new mode, or zero but for the mode:
        // Linux's `handle_hca_cap_atomic` sends its zeroed buffer with only
        // the mode set (docs/fidelity.md, atomic capability page).
        let mut expect = vec![0u8; atomic_caps::SIZE];
        self.caps.atomic_caps.to_block(&mut expect, want);
        let mut only_mode = vec![0u8; atomic_caps::SIZE];
        atomic_caps::atomic_req_8b_endianness_mode
            .set(&mut only_mode, want)
            .expect("the field holds what it gave");
        ensure(
            expect == page || only_mode == page,
            bad_param(sy::SET_CAP_NOT_SETTABLE),
        )?;
        let supported = match want {
            0 => true,
            1 => {
                self.caps
                    .atomic_caps
                    .supported_atomic_req_8b_endianness_mode_1
            }
            _ => false,
        };
        ensure(supported, bad_param(sy::SET_CAP_ABOVE_MAX))?;
        self.cur.atomic_req_8b_endianness_mode = want;
        Ok(())
    }
}
