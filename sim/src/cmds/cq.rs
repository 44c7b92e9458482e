//! Completion queue commands: create, query, moderation and resize (Linux
//! `drivers/net/ethernet/mellanox/mlx5/core/cq.c`,
//! `drivers/infiniband/hw/mlx5/cq.c` `mlx5_ib_resize_cq`).

use super::*;

impl State {
    pub(super) fn destroy_cq(&mut self, inp: &[u8]) -> R {
        let cqn = destroy_cq_in::cqn.get(inp);
        self.objects.destroy_cq(cqn).map(drop)
    }

    pub(super) fn create_cq(&mut self, inp: &[u8], out: &mut [u8]) -> R {
        let c = create_cq_in::cq_context.get(inp);
        ensure(
            cqc::status.get(c) == 0
                && cqc::st.get(c) == 0
                && cqc::last_notified_index.get(c) == 0
                && cqc::last_solicit_index.get(c) == 0
                && cqc::consumer_counter.get(c) == 0
                && cqc::producer_counter.get(c) == 0,
            bad_param(sy::CQ_CTX_FIELD),
        )?;
        ensure(
            !cqc::apu_cq.get(c)
                && !cqc::cc.get(c)
                && !cqc::cqe_comp_en.get(c)
                && cqc::mini_cqe_res_format.get(c) == 0
                && cqc::cqe_compression_layout.get(c) == 0,
            bad_param(sy::CQ_UNSUPPORTED_FEATURE),
        )?;
        ensure(
            !cqc::scqe_break_moderation_en.get(c) || self.caps.scqe_break_moderation,
            bad_param(sy::CQ_SCQE_BREAK_CAP),
        )?;
        let buf_umem = create_cq_in::cq_umem_valid.get(inp);
        let dbr_umem = cqc::dbr_umem_valid.get(c);
        ensure(
            (buf_umem
                || (create_cq_in::cq_umem_id.get(inp) == 0
                    && create_cq_in::cq_umem_offset.get(inp) == 0))
                && (dbr_umem || cqc::dbr_umem_id.get(c) == 0),
            bad_param(sy::UMEM_FIELDS),
        )?;
        let cqe_sz = cqc::cqe_sz.get(c);
        ensure(cqe_sz <= ctx::CQE_SIZE_128, bad_param(sy::CQ_CQE_SZ))?;
        let log_size = cqc::log_cq_size.get(c);
        ensure(
            log_size <= self.caps.log_max_cq_sz,
            bad_param(sy::CQ_LOG_SIZE),
        )?;
        ensure(
            (self.objects.cqs.len() as u64) < (1u64 << self.caps.log_max_cq),
            lim(sy::CQ_TOO_MANY),
        )?;
        ensure(!cqc::oi.get(c) || self.caps.cq_oi, bad_param(sy::CQ_OI_CAP))?;
        ensure(
            (cqc::cq_period.get(c) == 0 && cqc::cq_max_count.get(c) == 0)
                || self.caps.cq_moderation,
            bad_param(sy::CQ_MODERATION_CREATE_CAP),
        )?;
        // Mode 1 needs `cq_period_start_from_cqe` (PRM; Linux mlx5e picks
        // the mode at creation from that capability alone).
        self.check_period_mode(cqc::cq_period_mode.get(c))?;
        let uar = cqc::uar_page.get(c);
        ensure(self.objects.uars.contains(&uar), bad_res(sy::CQ_UAR))?;
        let eqn = cqc::c_eqn_or_apu_element.get(c);
        ensure(
            eqn <= 255 && self.objects.eqs.contains_key(&(eqn as u8)),
            bad_res(sy::CQ_EQN),
        )?;
        let dbr = cqc::dbr_addr.get(c);
        ensure(dbr.is_multiple_of(8), bad_param(sy::CQ_DBR_ALIGN))?;
        let lps = cqc::log_page_size.get(c);
        ensure(lps <= MAX_LOG_PAGE_SIZE, bad_param(sy::CQ_PAGE_SIZE))?;
        let shift = 12 + lps as u32;
        let pofs = cqc::page_offset.get(c) as u64 * ((1u64 << shift) / 64);
        let stride = if cqe_sz == 0 { 64u64 } else { 128 };
        let mut umems = Vec::new();
        // DevX: the doorbell record at offset `dbr_addr` of a UMEM (the
        // device reads the consumer index there).
        let dbr = if dbr_umem {
            let id = cqc::dbr_umem_id.get(c);
            umems.push(id);
            self.umem_dbr(devx::UmemUse {
                id,
                off: dbr,
                len: 8,
                write: false,
            })?
        } else {
            dbr
        };
        // DevX: the ring in a UMEM (the device writes CQEs there); the
        // context's page size and offset describe nothing then.
        let buf = if buf_umem {
            let id = create_cq_in::cq_umem_id.get(inp);
            umems.push(id);
            self.umem_buf(devx::UmemUse {
                id,
                off: create_cq_in::cq_umem_offset.get(inp),
                len: stride << log_size,
                write: true,
            })?
        } else {
            let npas = QBuf::pages_needed(stride << log_size, pofs, shift);
            let pas = read_pas(
                inp,
                create_cq_in::pas,
                npas,
                shift,
                fail(CmdStatus::BAD_INP_LEN_ERR, sy::CQ_PAS_SHORT),
                bad_param(sy::CQ_PAS_ALIGN),
            )?;
            QBuf {
                pas: pas.into(),
                page_shift: shift,
                offset: pofs,
            }
        };
        let cqn = self.objects.free_cqn();
        self.objects.cqs.insert(
            cqn,
            Cq {
                log_size,
                cqe_sz,
                uar,
                eqn: eqn as u8,
                dbr,
                buf,
                log_page_size: lps,
                page_offset: cqc::page_offset.get(c),
                oi: cqc::oi.get(c),
                pc: 0,
                arm: None,
                last_fired_sn: None,
                status: 0,
                period: cqc::cq_period.get(c),
                max_count: cqc::cq_max_count.get(c),
                period_mode: cqc::cq_period_mode.get(c),
                moder: crate::moderation::Moderation::new(
                    self.now_ns(),
                    cqc::scqe_break_moderation_en.get(c),
                ),
                last_notified: 0,
                last_solicit: None,
                umems,
                last_arm_solicited: None,
            },
        );
        create_cq_out::cqn.set(out, cqn).expect("24-bit");
        Ok(())
    }

    pub(super) fn query_cq(&mut self, inp: &[u8], out: &mut [u8]) -> R {
        let cqn = query_cq_in::cqn.get(inp);
        let cq = self
            .objects
            .cqs
            .get(&cqn)
            .ok_or(bad_res(sy::CQ_NOT_FOUND))?
            .clone();
        let ci = self.dma.read(cq.dbr, &mut [0u8; 4]).map(|_| {
            let mut b = [0u8; 4];
            let _ = self.dma.read(cq.dbr, &mut b);
            u32::from_be_bytes(b) & M24
        });
        let c = query_cq_out::cq_context.get_mut(out);
        cqc::status.set(c, cq.status).expect("4-bit");
        cqc::cqe_sz.set(c, cq.cqe_sz).expect("3-bit");
        cqc::oi.set(c, cq.oi).expect("flag");
        cqc::cq_period_mode.set(c, cq.period_mode).expect("2-bit");
        cqc::st.set(c, cq.st()).expect("4-bit");
        cqc::page_offset.set(c, cq.page_offset).expect("6-bit");
        cqc::log_cq_size.set(c, cq.log_size).expect("5-bit");
        cqc::uar_page.set(c, cq.uar).expect("24-bit");
        cqc::cq_period.set(c, cq.period).expect("12-bit");
        cqc::cq_max_count.set(c, cq.max_count).expect("16-bit");
        cqc::c_eqn_or_apu_element
            .set(c, cq.eqn as u32)
            .expect("32-bit");
        cqc::log_page_size.set(c, cq.log_page_size).expect("5-bit");
        cqc::last_notified_index
            .set(c, cq.last_notified & M24)
            .expect("24-bit");
        cqc::last_solicit_index
            .set(c, cq.last_solicit.unwrap_or(0) & M24)
            .expect("24-bit");
        cqc::consumer_counter
            .set(c, ci.unwrap_or(0))
            .expect("24-bit");
        cqc::producer_counter.set(c, cq.pc & M24).expect("24-bit");
        cqc::dbr_addr.set(c, cq.dbr).expect("64-bit");
        write_pas(out, query_cq_out::pas, &cq.buf.pas);
        Ok(())
    }

    pub(super) fn moderate_cq(&mut self, inp: &[u8]) -> R {
        ensure(self.caps.cq_moderation, bad_op(sy::CQ_MODERATION_CAP))?;
        let cqn = modify_cq_in::cqn.get(inp);
        ensure(
            self.objects.cqs.contains_key(&cqn),
            bad_res(sy::CQ_NOT_FOUND),
        )?;
        let sel_raw = modify_field_select::modify_field_select
            .get(modify_cq_in::modify_field_select_resize_field_select.get(inp));
        let sel = ModifyCqFields::from_bits(sel_raw).ok_or(bad_param(sy::CQ_MODIFY_SELECT))?;
        ensure(!sel.is_empty(), bad_param(sy::CQ_MODIFY_SELECT))?;
        ensure(
            !sel.contains(ModifyCqFields::OVERRUN) || self.caps.cq_oi,
            bad_param(sy::CQ_MODIFY_SELECT),
        )?;
        ensure(
            !sel.contains(ModifyCqFields::PERIOD_MODE) || self.caps.cq_period_mode_modify,
            bad_param(sy::CQ_MODIFY_SELECT),
        )?;
        let c = modify_cq_in::cq_context.get(inp);
        if sel.contains(ModifyCqFields::PERIOD_MODE) {
            self.check_period_mode(cqc::cq_period_mode.get(c))?;
        }
        let cq = self.objects.cqs.get_mut(&cqn).expect("checked");
        if sel.contains(ModifyCqFields::PERIOD) {
            cq.period = cqc::cq_period.get(c);
        }
        if sel.contains(ModifyCqFields::COUNT) {
            cq.max_count = cqc::cq_max_count.get(c);
        }
        if sel.contains(ModifyCqFields::OVERRUN) {
            cq.oi = cqc::oi.get(c);
        }
        if sel.contains(ModifyCqFields::PERIOD_MODE) {
            cq.period_mode = cqc::cq_period_mode.get(c);
        }
        self.cq_moderation_changed(cqn);
        Ok(())
    }

    /// `cq_period_mode`: 0 always, 1 with `cq_period_start_from_cqe`, 2 and 3
    /// reserved (PRM CQ context).
    fn check_period_mode(&self, mode: u8) -> R {
        ensure(
            mode == 0 || (mode == 1 && self.caps.cq_period_start_from_cqe),
            bad_param(sy::CQ_PERIOD_MODE_CAP),
        )
    }

    /// MODIFY_CQ op_mod 1 (docs/firmware.md §8).
    pub(super) fn resize_cq(&mut self, inp: &[u8]) -> R {
        ensure(self.caps.cq_resize, bad_op(sy::CQ_RESIZE_CAP))?;
        let cqn = modify_cq_in::cqn.get(inp);
        let cq = self
            .objects
            .cqs
            .get(&cqn)
            .ok_or(bad_res(sy::CQ_NOT_FOUND))?
            .clone();
        let sel_raw = resize_field_select::resize_field_select
            .get(modify_cq_in::modify_field_select_resize_field_select.get(inp));
        let sel = ResizeCqFields::from_bits(sel_raw).ok_or(bad_param(sy::CQ_RESIZE_SELECT))?;
        ensure(
            sel.contains(ResizeCqFields::LOG_CQ_SIZE),
            bad_param(sy::CQ_RESIZE_SELECT),
        )?;
        ensure(
            !modify_cq_in::cq_umem_valid.get(inp),
            bad_param(sy::CQ_UNSUPPORTED_FEATURE),
        )?;
        ensure(cq.status == ctx::CQ_STATUS_OK, bad_state(sy::CQ_IN_ERROR))?;
        let c = modify_cq_in::cq_context.get(inp);
        ensure(
            cqc::cqe_sz.get(c) == cq.cqe_sz,
            bad_param(sy::CQ_RESIZE_CQE_SZ),
        )?;
        let log_size = cqc::log_cq_size.get(c);
        ensure(
            log_size <= self.caps.log_max_cq_sz,
            bad_param(sy::CQ_LOG_SIZE),
        )?;
        let lps = if sel.contains(ResizeCqFields::LOG_PAGE_SIZE) {
            cqc::log_page_size.get(c)
        } else {
            cq.log_page_size
        };
        ensure(lps <= MAX_LOG_PAGE_SIZE, bad_param(sy::CQ_PAGE_SIZE))?;
        let po = if sel.contains(ResizeCqFields::PAGE_OFFSET) {
            cqc::page_offset.get(c)
        } else {
            cq.page_offset
        };
        let shift = 12 + lps as u32;
        let pofs = po as u64 * ((1u64 << shift) / 64);
        let npas = QBuf::pages_needed(cq.stride() << log_size, pofs, shift);
        let pas = read_pas(
            inp,
            modify_cq_in::pas,
            npas,
            shift,
            fail(CmdStatus::BAD_INP_LEN_ERR, sy::CQ_PAS_SHORT),
            bad_param(sy::CQ_PAS_ALIGN),
        )?;
        // Outstanding CQEs: producer minus the consumer index the driver
        // published in the doorbell record.
        let Ok(ci) = self.rd_be32(cq.dbr, &|| {
            format!("resize: CQ doorbell record cqn {cqn:#x}")
        }) else {
            return Err(bad_state(sy::CQ_IN_ERROR));
        };
        let outstanding = cq.pc.wrapping_sub(ci) & M24;
        ensure(
            outstanding <= 1u32 << log_size,
            fail(CmdStatus::BAD_SIZE_OUTS_CQES_ERR, sy::CQ_RESIZE_OUTSTANDING),
        )?;
        ensure(
            outstanding < 1u32 << cq.log_size,
            fail(CmdStatus::BAD_SIZE_OUTS_CQES_ERR, sy::CQ_RESIZE_OLD_FULL),
        )?;
        // The RESIZE_CQ CQE goes into the OLD buffer at the producer index;
        // it does not generate a completion event.
        let mut cqe = [0u8; 64];
        cqe64::opcode
            .set(&mut cqe, CqeOpcode::RESIZE_CQ.0)
            .expect("4-bit");
        let saved_arm = cq.arm;
        if let Some(x) = self.objects.cqs.get_mut(&cqn) {
            x.arm = None;
        }
        let written = self.cq_push_raw(cqn, cqe);
        let x = self.objects.cqs.get_mut(&cqn).expect("exists");
        x.arm = saved_arm;
        if !written {
            return Err(bad_state(sy::CQ_IN_ERROR));
        }
        x.log_size = log_size;
        x.log_page_size = lps;
        x.page_offset = po;
        x.buf = QBuf {
            pas: pas.into(),
            page_shift: shift,
            offset: pofs,
        };
        Ok(())
    }

    /// Write a CQE without overrun check or notification (resize CQE).
    pub(super) fn cq_push_raw(&mut self, cqn: u32, mut cqe: [u8; 64]) -> bool {
        let cq = self.objects.cqs.get(&cqn).expect("exists").clone();
        let n = 1u32 << cq.log_size;
        let slot = cq.pc & (n - 1);
        let owner = (cq.pc >> cq.log_size) & 1 == 1;
        cqe64::owner.set(&mut cqe, owner).expect("flag");
        let stride = cq.stride();
        let mut e = vec![0u8; stride as usize];
        e[stride as usize - 64..].copy_from_slice(&cqe);
        let mut ok = true;
        for (i, chunk) in [(0usize, e.len() - 1), (e.len() - 1, e.len())]
            .iter()
            .enumerate()
        {
            let (a, b) = *chunk;
            let Some((iova, contig)) = cq.buf.at(slot as u64 * stride + a as u64) else {
                ok = false;
                break;
            };
            if (contig as usize) < b - a {
                // Crosses a page: write byte by byte through the page list.
                for k in a..b {
                    let (iv, _) = cq.buf.at(slot as u64 * stride + k as u64).expect("in list");
                    ok &= self
                        .wr(iv, &e[k..k + 1], &|| format!("RESIZE_CQ CQE cqn {cqn:#x}"))
                        .is_ok();
                }
            } else {
                ok &= self
                    .wr(iova, &e[a..b], &|| format!("RESIZE_CQ CQE cqn {cqn:#x}"))
                    .is_ok();
            }
            if i == 0 {
                std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
            }
        }
        if ok {
            self.objects.cqs.get_mut(&cqn).expect("exists").pc = cq.pc.wrapping_add(1);
        }
        ok
    }
}

impl State {
    /// The timestamp the device writes into a successful CQE (REQ and the
    /// responder opcodes; an error CQE's syndromes overlay the field):
    /// the free-running clock in ticks of `device_frequency_khz` (the
    /// internal timer's value, docs/firmware.md §1.2), or nanoseconds for
    /// a QP whose `ts_format` is real time (asked for, or the default of a
    /// device that has only real time; `MLX5_TIMESTAMP_FORMAT_*`;
    /// Linux `mlx5_timecounter_cyc2time` and `mlx5_real_time_cyc2time`
    /// read the two). `None` for an error CQE and for a device without a
    /// clock.
    pub(crate) fn completion_timestamp(&self, cqe: &[u8; 64]) -> Option<u64> {
        use mlx5_regs::consts::ts_format as tsf;
        let op = CqeOpcode(cqe64::opcode.get(cqe));
        if op.0 > CqeOpcode::RESP_SEND_INV.0 || self.caps.device_frequency_khz == 0 {
            return None;
        }
        let now = self.now_ns();
        let real_time = self.objects.qps.get(&cqe64::qpn.get(cqe)).is_some_and(|q| {
            q.ts_format == tsf::REAL_TIME
                || (q.ts_format == tsf::DEFAULT && self.ts_cap() == tsf::CAP_REAL_TIME)
        });
        if real_time {
            return Some(now);
        }
        Some((now as u128 * self.caps.device_frequency_khz as u128 / 1_000_000) as u64)
    }
}
