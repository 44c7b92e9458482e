//! SRQ (ISSI 0) and RMP (ISSI 1) commands and the limit event (Linux
//! `drivers/infiniband/hw/mlx5/srq_cmd.c`).

use super::*;

impl State {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn check_srq_common(
        &self,
        log_size: u8,
        log_stride: u8,
        lps: u8,
        pd: u32,
        dbr: u64,
        lwm: u16,
        sig: bool,
    ) -> R {
        ensure(
            log_size <= self.caps.log_max_srq_sz,
            bad_param(sy::SRQ_LOG_SIZE),
        )?;
        ensure(
            (5..=15).contains(&log_stride)
                && (1u32 << log_stride) <= self.caps.max_wqe_sz_rq as u32,
            bad_param(sy::SRQ_STRIDE),
        )?;
        ensure(lps <= MAX_LOG_PAGE_SIZE, bad_param(sy::SRQ_PAGE_SIZE))?;
        ensure(
            !sig || self.caps.wq_signature,
            bad_param(sy::SRQ_SIGNATURE_CAP),
        )?;
        ensure(self.objects.pds.contains(&pd), bad_res(sy::SRQ_PD))?;
        ensure(dbr.is_multiple_of(4), bad_param(sy::SRQ_DBR_ALIGN))?;
        ensure((lwm as u32) < (1u32 << log_size), bad_param(sy::SRQ_LWM))?;
        Ok(())
    }

    pub(super) fn create_srq(&mut self, inp: &[u8], out: &mut [u8]) -> R {
        let s = create_srq_in::srq_context_entry.get(inp);
        ensure(
            srqc::state.get(s) == ctx::SRQ_STATE_GOOD
                && srqc::wqe_cnt.get(s) == 0
                && !srqc::cont_srq.get(s),
            bad_param(sy::SRQ_CTX_FIELD),
        )?;
        let log_size = srqc::log_srq_size.get(s);
        let log_stride = srqc::log_rq_stride.get(s) + 4;
        let lps = srqc::log_page_size.get(s);
        let pd = srqc::pd.get(s);
        let dbr = srqc::dbr_addr.get(s);
        let lwm = srqc::lwm.get(s);
        let nsrq = self.objects.srq_count(false) as u64;
        ensure(
            nsrq < (1u64 << self.caps.log_max_srq),
            lim(sy::SRQ_TOO_MANY),
        )?;
        self.check_srq_common(
            log_size,
            log_stride,
            lps,
            pd,
            dbr,
            lwm,
            srqc::wq_signature.get(s),
        )?;
        let xrcd = srqc::xrcd.get(s);
        ensure(
            xrcd == 0 || self.objects.xrcds.contains(&xrcd),
            bad_res(sy::SRQ_XRCD),
        )?;
        let cqn = srqc::cqn.get(s);
        ensure(self.objects.cqs.contains_key(&cqn), bad_res(sy::SRQ_CQN))?;
        let shift = 12 + lps as u32;
        let pofs = srqc::page_offset.get(s) as u64 * ((1u64 << shift) / 64);
        let npas = QBuf::pages_needed(1u64 << (log_size + log_stride), pofs, shift);
        let pas = read_pas(
            inp,
            create_srq_in::pas,
            npas,
            shift,
            fail(CmdStatus::BAD_INP_LEN_ERR, sy::SRQ_PAS_SHORT),
            bad_param(sy::SRQ_PAS_ALIGN),
        )?;
        let n = self.objects.free_srqn();
        self.objects.srqs.insert(
            n,
            Srq {
                rmp: false,
                log_size,
                log_stride,
                buf: QBuf {
                    pas: pas.into(),
                    page_shift: shift,
                    offset: pofs,
                },
                log_page_size: lps,
                page_offset: srqc::page_offset.get(s),
                pd,
                dbr,
                lwm,
                cqn: Some(cqn),
                xrcd,
                rlky: srqc::rlky.get(s),
                wq_signature: srqc::wq_signature.get(s),
                state: ctx::SRQ_STATE_GOOD,
                consumed: 0,
                next: 0,
                umems: Vec::new(),
            },
        );
        create_srq_out::srqn.set(out, n).expect("24-bit");
        self.srq_check_limit(n);
        Ok(())
    }

    pub(super) fn create_rmp(&mut self, inp: &[u8], out: &mut [u8]) -> R {
        let r = create_rmp_in::ctx.tail(inp);
        let w = rmpc::wq.tail(r);
        let zero_fields = !rmpc::basic_cyclic_rcv_wqe.get(r)
            && wq::wq_type.get(w) == 0
            && wq::end_padding_mode.get(w) == 0
            && !wq::cd_slave.get(w)
            && !wq::hds_skip_first_sge.get(w)
            && wq::log2_hds_buf_size.get(w) == 0
            && wq::uar_page.get(w) == 0
            && wq::hw_counter.get(w) == 0
            && wq::sw_counter.get(w) == 0
            && wq::log_hairpin_num_packets.get(w) == 0
            && wq::log_hairpin_data_sz.get(w) == 0
            && wq::log_wqe_num_of_strides.get(w) == 0
            && !wq::two_byte_shift_en.get(w)
            && wq::log_wqe_stride_size.get(w) == 0
            && wq::headers_mkey.get(w) == 0
            && !wq::shampo_enable.get(w)
            && wq::shampo_mode.get(w) == 0
            && wq::log_reservation_size.get(w) == 0
            && wq::log_max_num_of_packets_per_reservation.get(w) == 0
            && wq::log_headers_entry_size.get(w) == 0
            && wq::log_headers_buffer_entry_num.get(w) == 0;
        ensure(
            rmpc::state.get(r) == ctx::RMP_STATE_RDY && zero_fields,
            bad_param(sy::SRQ_CTX_FIELD),
        )?;
        let (buf_umem, dbr_umem) = (wq::wq_umem_valid.get(w), wq::dbr_umem_valid.get(w));
        ensure(
            (buf_umem || (wq::wq_umem_id.get(w) == 0 && wq::wq_umem_offset.get(w) == 0))
                && (dbr_umem || wq::dbr_umem_id.get(w) == 0),
            bad_param(sy::UMEM_FIELDS),
        )?;
        let nrmp = self.objects.srq_count(true) as u64;
        ensure(
            nrmp < (1u64 << self.caps.log_max_rmp),
            lim(sy::SRQ_TOO_MANY),
        )?;
        let log_size = wq::log_wq_sz.get(w);
        let log_stride = wq::log_wq_stride.get(w);
        let lps = wq::log_wq_pg_sz.get(w);
        let pd = wq::pd.get(w);
        let dbr = wq::dbr_addr.get(w);
        let lwm = wq::lwm.get(w);
        self.check_srq_common(
            log_size,
            log_stride,
            lps,
            pd,
            dbr,
            lwm,
            wq::wq_signature.get(w),
        )?;
        let shift = 12 + lps as u32;
        let pofs = wq::page_offset.get(w) as u64 * ((1u64 << shift) / 64);
        let bytes = 1u64 << (log_size + log_stride);
        let mut umems = Vec::new();
        // DevX: doorbell record and WQE ring in UMEMs (the device reads
        // both); `dbr_addr` is then an offset.
        let dbr = if dbr_umem {
            let id = wq::dbr_umem_id.get(w);
            umems.push(id);
            self.umem_dbr(devx::UmemUse {
                id,
                off: dbr,
                len: 4,
                write: false,
            })?
        } else {
            dbr
        };
        let buf = if buf_umem {
            let id = wq::wq_umem_id.get(w);
            umems.push(id);
            self.umem_buf(devx::UmemUse {
                id,
                off: wq::wq_umem_offset.get(w),
                len: bytes,
                write: false,
            })?
        } else {
            let npas = QBuf::pages_needed(bytes, pofs, shift);
            // wq.pas starts right after the rmpc: byte 0x110 of the command.
            let pas_arr = mlx5_regs::Array::<u64>::new(
                "pas",
                create_rmp_in::ctx.bit_off + rmpc::wq.bit_off + wq::pas.bit_off,
                64,
                0,
            );
            let pas = read_pas(
                inp,
                pas_arr,
                npas,
                shift,
                fail(CmdStatus::BAD_INP_LEN_ERR, sy::SRQ_PAS_SHORT),
                bad_param(sy::SRQ_PAS_ALIGN),
            )?;
            QBuf {
                pas: pas.into(),
                page_shift: shift,
                offset: pofs,
            }
        };
        let n = self.objects.free_srqn();
        self.objects.srqs.insert(
            n,
            Srq {
                rmp: true,
                log_size,
                log_stride,
                buf,
                log_page_size: lps,
                page_offset: wq::page_offset.get(w),
                pd,
                dbr,
                lwm,
                cqn: None,
                xrcd: 0,
                rlky: true,
                wq_signature: wq::wq_signature.get(w),
                state: ctx::RMP_STATE_RDY,
                consumed: 0,
                next: 0,
                umems,
            },
        );
        create_rmp_out::rmpn.set(out, n).expect("24-bit");
        self.srq_check_limit(n);
        Ok(())
    }

    pub(super) fn destroy_srq(&mut self, n: u32, rmp: bool) -> R {
        self.objects.destroy_srq(n, rmp).map(drop)
    }

    pub(super) fn posted(&mut self, n: u32) -> Option<u16> {
        let dbr = self.objects.srqs.get(&n)?.dbr;
        self.rd_be32(dbr, &|| format!("SRQ doorbell record read srqn {n:#x}"))
            .ok()
            .map(|v| v as u16)
    }

    pub(super) fn query_srq(&mut self, inp: &[u8], out: &mut [u8]) -> R {
        let n = query_srq_in::srqn.get(inp);
        let s = self.objects.srq(n, false)?.clone();
        let c = query_srq_out::srq_context_entry.get_mut(out);
        srqc::state.set(c, s.state).expect("4-bit");
        srqc::log_srq_size.set(c, s.log_size).expect("4-bit");
        srqc::wq_signature.set(c, s.wq_signature).expect("flag");
        srqc::rlky.set(c, s.rlky).expect("flag");
        srqc::log_rq_stride.set(c, s.log_stride - 4).expect("3-bit");
        srqc::xrcd.set(c, s.xrcd).expect("24-bit");
        srqc::page_offset.set(c, s.page_offset).expect("6-bit");
        srqc::cqn.set(c, s.cqn.unwrap_or(0)).expect("24-bit");
        srqc::log_page_size.set(c, s.log_page_size).expect("6-bit");
        srqc::pd.set(c, s.pd).expect("24-bit");
        srqc::lwm.set(c, s.lwm).expect("16-bit");
        srqc::wqe_cnt.set(c, s.consumed).expect("16-bit");
        srqc::dbr_addr.set(c, s.dbr).expect("64-bit");
        write_pas(out, query_srq_out::pas, &s.buf.pas);
        Ok(())
    }

    pub(super) fn query_rmp(&mut self, inp: &[u8], out: &mut [u8]) -> R {
        let n = query_rmp_in::rmpn.get(inp);
        let s = self.objects.srq(n, true)?.clone();
        let posted = self.posted(n).unwrap_or(0);
        let r = query_rmp_out::rmp_context.tail_mut(out);
        rmpc::state.set(r, s.state).expect("4-bit");
        let w = rmpc::wq.tail_mut(r);
        wq::wq_signature.set(w, s.wq_signature).expect("flag");
        wq::page_offset.set(w, s.page_offset).expect("5-bit");
        wq::lwm.set(w, s.lwm).expect("16-bit");
        wq::pd.set(w, s.pd).expect("24-bit");
        wq::dbr_addr.set(w, s.dbr).expect("64-bit");
        wq::hw_counter.set(w, s.consumed as u32).expect("32-bit");
        wq::sw_counter.set(w, posted as u32).expect("32-bit");
        wq::log_wq_stride.set(w, s.log_stride).expect("4-bit");
        wq::log_wq_pg_sz.set(w, s.log_page_size).expect("5-bit");
        wq::log_wq_sz.set(w, s.log_size).expect("5-bit");
        write_pas(w, wq::pas, &s.buf.pas);
        Ok(())
    }

    pub(super) fn modify_rmp(&mut self, inp: &[u8]) -> R {
        let n = modify_rmp_in::rmpn.get(inp);
        let s = self.objects.srq(n, true)?;
        ensure(
            modify_rmp_in::rmp_state.get(inp) == s.state,
            bad_state(sy::RMP_STATE),
        )?;
        let bm = modify_rmp_in::bitmask.get(inp);
        ensure(rmp_bitmask::lwm.get(bm), bad_param(sy::RMP_BITMASK))?;
        let r = modify_rmp_in::ctx.tail(inp);
        ensure(
            rmpc::state.get(r) == ctx::RMP_STATE_RDY,
            bad_param(sy::RMP_NEW_STATE),
        )?;
        let lwm = wq::lwm.get(rmpc::wq.tail(r));
        self.set_limit(n, true, lwm)
    }

    /// Arm (or disarm with 0) the SRQ limit (docs/firmware.md §9.3, §9.6).
    pub(super) fn set_limit(&mut self, n: u32, rmp: bool, lwm: u16) -> R {
        let s = self.objects.srq_mut(n, rmp)?;
        ensure((lwm as u32) < (1u32 << s.log_size), bad_param(sy::SRQ_LWM))?;
        s.lwm = lwm;
        if self.caps.limit_event_on_arm {
            match self.limit_late.take() {
                // Injected: fire only after more commands completed (+1:
                // this command's own completion counts down first).
                Some(k) if lwm > 0 => self.late_limits.push((k + 1, n)),
                _ => self.srq_check_limit(n),
            }
        }
        Ok(())
    }

    /// Count a completed command down for the deferred limit events and
    /// raise those that are due (if still armed and below the limit).
    pub(crate) fn late_limits_tick(&mut self) {
        if self.late_limits.is_empty() {
            return;
        }
        let mut due = Vec::new();
        for (k, n) in self.late_limits.iter_mut() {
            *k = k.saturating_sub(1);
            if *k == 0 {
                due.push(*n);
            }
        }
        self.late_limits.retain(|(k, _)| *k > 0);
        for n in due {
            self.srq_check_limit(n);
        }
    }

    /// Raise the limit event once the posted-but-unconsumed count is below
    /// the armed limit, and disarm (one-shot).
    pub(crate) fn srq_check_limit(&mut self, n: u32) {
        let Some(s) = self.objects.srqs.get(&n) else {
            return;
        };
        if s.lwm == 0 {
            return;
        }
        let consumed = s.consumed;
        let lwm = s.lwm;
        let Some(posted) = self.posted(n) else {
            return;
        };
        let count = posted.wrapping_sub(consumed);
        if count < lwm {
            self.objects.srqs.get_mut(&n).expect("exists").lwm = 0;
            self.srq_limit_event(n);
        }
    }
}
