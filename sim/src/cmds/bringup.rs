//! Bring-up commands: ENABLE/DISABLE_HCA, ISSI, INIT/TEARDOWN_HCA, pages,
//! capabilities, ACCESS_REG, UAR and PD allocation (Linux
//! `drivers/net/ethernet/mellanox/mlx5/core/{main.c,pagealloc.c,fw.c}`).

use super::*;

impl State {
    pub(super) fn query_issi(&mut self, out: &mut [u8]) -> R {
        query_issi_out::current_issi
            .set(out, self.issi)
            .expect("16-bit");
        query_issi_out::supported_issi_dw0
            .set(out, self.cfg.issi_supported)
            .expect("32-bit");
        Ok(())
    }

    pub(super) fn set_issi(&mut self, inp: &[u8]) -> R {
        let v = set_issi_in::current_issi.get(inp);
        ensure(
            v < 32 && self.cfg.issi_supported & (1 << v) != 0,
            bad_param(sy::SET_ISSI_UNSUPPORTED),
        )?;
        self.issi = v;
        Ok(())
    }

    pub(super) fn query_adapter(&mut self, out: &mut [u8]) -> R {
        let pb = query_adapter_out::query_adapter_struct.get_mut(out);
        query_adapter_param_block::ieee_vendor_id
            .set(pb, 0x0002c9)
            .expect("24-bit");
        query_adapter_param_block::vsd_vendor_id
            .set(pb, 0x15b3)
            .expect("16-bit");
        let psid = query_adapter_param_block::vsd_contd_psid.get_mut(pb);
        for (d, s) in psid.iter_mut().zip(self.caps.psid.bytes()) {
            *d = s;
        }
        Ok(())
    }

    pub(super) fn alloc_uar(&mut self, out: &mut [u8]) -> R {
        let idx = self
            .objects
            .alloc_uar(1u32 << self.caps.uar_sz)
            .ok_or(lim(sy::UAR_EXHAUSTED))?;
        alloc_uar_out::uar.set(out, idx).expect("24-bit");
        Ok(())
    }

    pub(super) fn dealloc_uar(&mut self, inp: &[u8]) -> R {
        self.objects.dealloc_uar(dealloc_uar_in::uar.get(inp))
    }

    pub(super) fn alloc_pd(&mut self, out: &mut [u8]) -> R {
        let pd = self
            .objects
            .alloc_pd(1u64 << self.caps.log_max_pd)
            .ok_or(lim(sy::PD_EXHAUSTED))?;
        alloc_pd_out::pd.set(out, pd).expect("24-bit");
        Ok(())
    }

    pub(super) fn dealloc_pd(&mut self, inp: &[u8]) -> R {
        self.objects.dealloc_pd(dealloc_pd_in::pd.get(inp))
    }

    pub(super) fn enable_hca(&mut self, inp: &[u8]) -> R {
        ensure(
            enable_hca_in::function_id.get(inp) == 0
                && enable_hca_in::embedded_cpu_function.get(inp) == self.caps.embedded_cpu,
            bad_param(sy::ENABLE_FUNC_ID),
        )?;
        self.reset_function();
        self.leaked_at_teardown = None;
        self.hca = HcaState::Enabled;
        Ok(())
    }

    pub(super) fn disable_hca(&mut self, inp: &[u8]) -> R {
        ensure(
            disable_hca_in::function_id.get(inp) == 0
                && disable_hca_in::embedded_cpu_function.get(inp) == self.caps.embedded_cpu,
            bad_param(sy::ENABLE_FUNC_ID),
        )?;
        ensure(
            self.pages.held.is_empty(),
            bad_state(sy::DISABLE_PAGES_HELD),
        )?;
        self.hca = HcaState::Disabled;
        self.reset_function();
        Ok(())
    }

    pub(super) fn init_hca(&mut self, inp: &[u8]) -> R {
        let owner_set = init_hca_in::sw_owner_id.get(inp).iter().any(|&b| b != 0)
            || init_hca_in::sw_vhca_id.get(inp) != 0;
        ensure(!owner_set, bad_param(sy::INIT_HCA_SW_OWNER))?;
        ensure(
            self.pages.boot_needed <= 0 && self.pages.init_needed <= 0,
            fail(CmdStatus::BAD_SYS_STATE_ERR, sy::INIT_HCA_NO_PAGES),
        )?;
        self.hca = HcaState::Initialized;
        self.pages.regular_needed = self.caps.regular_pages;
        Ok(())
    }

    pub(super) fn teardown_hca(&mut self, inp: &[u8]) -> R {
        let profile = teardown_hca_in::profile.get(inp);
        let ok = match profile {
            om::TEARDOWN_GRACEFUL => true,
            om::TEARDOWN_FORCE_CLOSE => self.caps.force_teardown,
            om::TEARDOWN_PREPARE_FAST => self.caps.fast_teardown,
            _ => false,
        };
        ensure(ok, bad_param(sy::TEARDOWN_PROFILE))?;
        self.leaked_at_teardown = Some(self.object_counts());
        self.forget_objects();
        self.hca = HcaState::TornDown;
        self.pages.regular_needed = -(self.pages.held.len() as i32);
        self.pages.queued_requests.clear();
        Ok(())
    }

    pub(super) fn query_pages(&mut self, inp: &[u8], op_mod: u16, out: &mut [u8]) -> R {
        ensure(
            query_pages_in::function_id.get(inp) == 0
                && query_pages_in::embedded_cpu_function.get(inp) == self.caps.embedded_cpu,
            bad_param(sy::ENABLE_FUNC_ID),
        )?;
        let n = match op_mod {
            om::QUERY_PAGES_BOOT => self.pages.boot_needed,
            om::QUERY_PAGES_INIT => self.pages.init_needed,
            _ => self.pages.regular_needed,
        };
        query_pages_out::num_pages
            .set(out, n as u32)
            .expect("32-bit");
        Ok(())
    }

    pub(super) fn manage_pages(&mut self, inp: &[u8], op_mod: u16, out: &mut [u8]) -> R {
        let opc = Opcode::MANAGE_PAGES.0;
        ensure(
            manage_pages_in::function_id.get(inp) == 0
                && manage_pages_in::embedded_cpu_function.get(inp) == self.caps.embedded_cpu,
            bad_param(sy::ENABLE_FUNC_ID),
        )?;
        let n = manage_pages_in::input_num_entries.get(inp) as usize;
        match op_mod {
            om::MANAGE_PAGES_ALLOC_FAIL => {
                ensure(n == 0, bad_param(sy::PAGES_ALLOC_FAIL_ENTRIES))?;
                ensure(
                    self.pages.regular_needed > 0,
                    bad_param(sy::PAGES_ALLOC_FAIL_NOT_PENDING),
                )?;
                self.pages.regular_needed = 0;
                Ok(())
            }
            om::MANAGE_PAGES_GIVE => {
                ensure(n > 0, bad_param(sy::PAGES_ZERO_ENTRIES))?;
                ensure(
                    inp.len() >= manage_pages_in::pas.len_with(n),
                    fail(CmdStatus::BAD_INP_LEN_ERR, per_opcode(sy::INP_LEN, opc)),
                )?;
                let wanted = self.pages.boot_needed.max(0)
                    + self.pages.init_needed.max(0)
                    + self.pages.regular_needed.max(0);
                let mut list = Vec::with_capacity(n);
                for i in 0..n {
                    let a = manage_pages_in::pas.get(inp, i).expect("length checked");
                    ensure(
                        a.is_multiple_of(PAGE_SIZE as u64),
                        bad_param(sy::PAGES_NOT_ALIGNED),
                    )?;
                    ensure(
                        !self.pages.held.contains(&a) && !list.contains(&a),
                        bad_param(sy::PAGES_DUPLICATE),
                    )?;
                    list.push(a);
                }
                for &a in &list {
                    if !self.dma.mapped(a, PAGE_SIZE) {
                        self.fault(
                            a,
                            PAGE_SIZE,
                            true,
                            "MANAGE_PAGES give: firmware page write".into(),
                        );
                        return Err(bad_param(sy::PAGES_NOT_MAPPED));
                    }
                }
                ensure(
                    n as i64 <= wanted as i64,
                    bad_param(sy::PAGES_NOT_REQUESTED),
                )?;
                for &a in &list {
                    let pat = page_pattern(a);
                    let _ = self.dma.write(a, &pat);
                    self.pages.held.insert(a);
                }
                let mut k = n as i32;
                for need in [
                    &mut self.pages.boot_needed,
                    &mut self.pages.init_needed,
                    &mut self.pages.regular_needed,
                ] {
                    let take = (*need).max(0).min(k);
                    *need -= take;
                    k -= take;
                }
                Ok(())
            }
            _ => {
                // Take (reclaim).
                ensure(n > 0, bad_param(sy::PAGES_ZERO_ENTRIES))?;
                ensure(
                    out.len() >= manage_pages_out::pas.len_with(n),
                    fail(CmdStatus::BAD_OUTP_LEN_ERR, per_opcode(sy::OUTP_LEN, opc)),
                )?;
                let returnable = match self.hca {
                    HcaState::Initialized => (-self.pages.regular_needed).max(0) as usize,
                    _ => self.pages.held.len(),
                };
                let count = n.min(returnable).min(self.pages.held.len());
                let pages: Vec<u64> = self.pages.held.iter().rev().take(count).copied().collect();
                for (i, &a) in pages.iter().enumerate() {
                    let mut got = vec![0u8; PAGE_SIZE];
                    if self.dma.read(a, &mut got).is_none() {
                        self.records
                            .violations
                            .push(Violation::FreedWhileInUse(format!(
                                "firmware page {a:#x} was freed by the host while firmware held it"
                            )));
                        self.fault(
                            a,
                            PAGE_SIZE,
                            false,
                            "MANAGE_PAGES take: page pattern check".into(),
                        );
                    } else if let Some(off) =
                        got.iter().zip(page_pattern(a)).position(|(x, y)| *x != y)
                    {
                        self.records.violations.push(Violation::PageScribbled {
                            iova: a,
                            offset: off,
                        });
                    }
                    self.pages.held.remove(&a);
                    manage_pages_out::pas
                        .set(out, i, a)
                        .expect("length checked");
                }
                manage_pages_out::output_num_entries
                    .set(out, count as u32)
                    .expect("32-bit");
                match self.hca {
                    HcaState::Initialized | HcaState::TornDown => {
                        self.pages.regular_needed += count as i32;
                        if self.hca == HcaState::TornDown {
                            self.pages.regular_needed = -(self.pages.held.len() as i32);
                        }
                    }
                    _ => {
                        // Enabled: pages go back to what boot/init still need.
                        let mut k = count as i32;
                        let init_given = self.caps.init_pages - self.pages.init_needed;
                        let t = init_given.min(k);
                        self.pages.init_needed += t;
                        k -= t;
                        self.pages.boot_needed += k;
                    }
                }
                Ok(())
            }
        }
    }

    /// Raise a PAGE_REQUEST (docs/firmware.md §4.2) or queue it until an EQ subscribes.
    pub(crate) fn page_request(&mut self, n: i32) {
        self.pages.regular_needed += n;
        if self.eq_for(EventType::PAGE_REQUEST.0).is_some() {
            self.send_page_request(n);
        } else {
            self.pages.queued_requests.push_back(n);
        }
    }

    pub(super) fn send_page_request(&mut self, n: i32) {
        let mut e = State::make_eqe(EventType::PAGE_REQUEST, 0);
        let d = eqe::event_data.get_mut(&mut e);
        pages_req_event::function_id.set(d, 0).expect("16-bit");
        // Bit 15: the request is the embedded-CPU function's own (Linux
        // `EC_FUNCTION_MASK`).
        let ec = if self.caps.embedded_cpu { 0x8000 } else { 0 };
        pages_req_event::ec_function.set(d, ec).expect("16-bit");
        pages_req_event::num_pages.set(d, n as u32).expect("32-bit");
        self.raise(e);
    }

    pub(super) fn query_hca_cap(&mut self, inp: &[u8], op_mod: u16, out: &mut [u8]) -> R {
        let roce = op_mod >> 1 == om::CAP_ROCE && self.caps.has_roce_page();
        let odp = op_mod >> 1 == om::CAP_ODP && self.caps.pg;
        let atomic = op_mod >> 1 == om::CAP_ATOMIC && self.caps.atomic;
        ensure(
            op_mod >> 1 == om::CAP_GENERAL || roce || odp || atomic,
            bad_param(sy::CAP_TYPE),
        )?;
        ensure(
            !query_hca_cap_in::other_function.get(inp)
                && !query_hca_cap_in::ec_vf_function.get(inp)
                && !query_hca_cap_in::function_id_type.get(inp)
                && query_hca_cap_in::function_id.get(inp) == 0,
            bad_param(sy::CAP_OTHER_FUNC),
        )?;
        let blk = query_hca_cap_out::capability.get_mut(out);
        if odp {
            // The ODP page with no transport able to take page faults: all
            // zero, maximum and current alike (docs/fidelity.md §3).
            blk.fill(0);
            return Ok(());
        }
        if atomic {
            let mode = if op_mod & 1 == om::HCA_CAP_CUR {
                self.cur.atomic_req_8b_endianness_mode
            } else {
                0
            };
            self.caps
                .atomic_caps
                .to_block(&mut blk[..mlx5_regs::layouts::atomic_caps::SIZE], mode);
            return Ok(());
        }
        if roce {
            let cur = (op_mod & 1 == om::HCA_CAP_CUR).then_some(self.cur.sw_r_roce_src_udp_port);
            self.caps
                .roce_caps
                .to_block(&mut blk[..roce_cap::SIZE], cur);
            return Ok(());
        }
        self.caps.to_block(blk);
        if op_mod & 1 == om::HCA_CAP_CUR {
            self.cur.apply(blk);
        }
        Ok(())
    }

    pub(super) fn set_hca_cap(&mut self, inp: &[u8], op_mod: u16) -> R {
        let roce = op_mod >> 1 == om::CAP_ROCE && self.caps.has_roce_page();
        let odp = op_mod >> 1 == om::CAP_ODP && self.caps.pg;
        let atomic = op_mod >> 1 == om::CAP_ATOMIC && self.caps.atomic;
        ensure(
            op_mod >> 1 == om::CAP_GENERAL || roce || odp || atomic,
            bad_param(sy::CAP_TYPE),
        )?;
        ensure(
            op_mod & 1 == 0,
            bad_param(per_opcode(sy::BAD_OP_MOD, Opcode::SET_HCA_CAP.0)),
        )?;
        ensure(
            !set_hca_cap_in::other_function.get(inp)
                && !set_hca_cap_in::ec_vf_function.get(inp)
                && !set_hca_cap_in::function_id_type.get(inp)
                && set_hca_cap_in::function_id.get(inp) == 0,
            bad_param(sy::CAP_OTHER_FUNC),
        )?;
        let given = set_hca_cap_in::capability.get(inp);
        if odp {
            // Every ODP maximum is zero: setting any bit goes above it.
            return ensure(
                given.iter().all(|&b| b == 0),
                bad_param(sy::SET_CAP_ABOVE_MAX),
            );
        }
        if roce {
            return self.set_roce_cap(given);
        }
        if atomic {
            return self.set_atomic_cap(given);
        }
        use mlx5_regs::layouts::cmd_hca_cap as c;
        let mut new = self.cur;
        new.cmdif_checksum = c::cmdif_checksum.get(given);
        new.log_uar_page_sz = c::log_uar_page_sz.get(given);
        new.pkey_table_size = c::pkey_table_size.get(given);
        new.log_max_qp = c::log_max_qp.get(given);
        new.drain_sigerr = c::drain_sigerr.get(given);
        new.uar_4k = c::uar_4k.get(given);
        new.cache_line_128byte = c::cache_line_128byte.get(given);
        let mut expect = vec![0u8; given.len()];
        self.caps.to_block(&mut expect);
        new.apply(&mut expect);
        ensure(expect == given, bad_param(sy::SET_CAP_NOT_SETTABLE))?;
        ensure(new.log_uar_page_sz == 0, bad_param(sy::SET_CAP_UAR_PAGE_SZ))?;
        let within = new.cmdif_checksum <= self.caps.cmdif_checksum
            && new.pkey_table_size <= self.caps.pkey_table_size
            && new.log_max_qp <= self.caps.log_max_qp
            && (!new.drain_sigerr || self.caps.drain_sigerr)
            && (!new.uar_4k || self.caps.uar_4k);
        ensure(within, bad_param(sy::SET_CAP_ABOVE_MAX))?;
        self.cur = new;
        Ok(())
    }

    /// SET_DRIVER_VERSION (with cap `driver_version`): the firmware keeps the
    /// string (up to its first NUL) for its diagnostics; Linux sends
    /// `Linux,mlx5_core,<major>.<minor>.<sublevel>` right after INIT_HCA
    /// (`mlx5_set_driver_version`).
    pub(super) fn set_driver_version(&mut self, inp: &[u8]) -> R {
        ensure(
            self.caps.driver_version,
            bad_op(per_opcode(sy::UNKNOWN_OPCODE, Opcode::SET_DRIVER_VERSION.0)),
        )?;
        let s = set_driver_version_in::driver_version.get(inp);
        let n = s.iter().position(|&b| b == 0).unwrap_or(s.len());
        self.driver_version = Some(String::from_utf8_lossy(&s[..n]).into_owned());
        Ok(())
    }

    pub(super) fn access_reg(&mut self, inp: &[u8], op_mod: u16, out: &mut [u8]) -> R {
        let opc = Opcode::ACCESS_REG.0;
        let id = access_register_in::register_id.get(inp);
        if id == reg_id::PTYS || id == reg_id::PMTU {
            return self.port_register(id, inp, op_mod, out);
        }
        ensure(id == reg_id::HOST_ENDIANNESS, bad_param(sy::ACCESS_REG_ID))?;
        // The host-endianness register belongs to the PF; Linux writes it
        // only there (`mlx5_function_setup`: `if (mlx5_core_is_pf(dev))`).
        ensure(
            !self.caps.virtual_function,
            bad_param(sy::HOST_ENDIANNESS_VF),
        )?;
        ensure(
            access_register_in::argument.get(inp) == 0,
            bad_param(sy::ACCESS_REG_ARG),
        )?;
        let data_len = register_host_endianness::SIZE;
        ensure(
            inp.len() >= access_register_in::SIZE + data_len,
            fail(CmdStatus::BAD_INP_LEN_ERR, per_opcode(sy::INP_LEN, opc)),
        )?;
        ensure(
            out.len() >= access_register_out::SIZE + data_len,
            fail(CmdStatus::BAD_OUTP_LEN_ERR, per_opcode(sy::OUTP_LEN, opc)),
        )?;
        let reg = &inp[access_register_in::SIZE..access_register_in::SIZE + data_len];
        let oreg = &mut out[access_register_out::SIZE..access_register_out::SIZE + data_len];
        if op_mod == om::ACCESS_REG_WRITE {
            ensure(
                !reserved_set(&register_host_endianness::LAYOUT, reg, 0),
                bad_param(per_opcode(sy::RESERVED, opc)),
            )?;
            let he = register_host_endianness::he.get(reg);
            ensure(
                he == cfg!(target_endian = "big"),
                bad_param(sy::ACCESS_REG_ENDIANNESS),
            )?;
            self.host_be = he;
        }
        register_host_endianness::he
            .set(oreg, self.host_be)
            .expect("flag");
        Ok(())
    }
}
