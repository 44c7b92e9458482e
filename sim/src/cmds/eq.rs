//! Event queue commands (Linux `drivers/net/ethernet/mellanox/mlx5/core/eq.c`).

use super::*;

impl State {
    pub(super) fn destroy_eq(&mut self, inp: &[u8]) -> R {
        let eqn = destroy_eq_in::eq_number.get(inp);
        self.objects.destroy_eq(eqn).map(drop)
    }

    pub(super) fn gen_eqe(&mut self, inp: &[u8]) -> R {
        let eqn = gen_eqe_in::eq_number.get(inp);
        ensure(
            self.objects.eqs.contains_key(&eqn),
            bad_res(sy::EQ_NOT_FOUND),
        )?;
        let mut img = [0u8; 64];
        img.copy_from_slice(gen_eqe_in::eqe.get(inp));
        self.eq_write(eqn, img);
        Ok(())
    }

    pub(super) fn allowed_events(&self) -> u64 {
        let mut m = 0u64;
        for t in [
            EventType::PATH_MIG,
            EventType::COMM_EST,
            EventType::SQ_DRAINED,
            EventType::CQ_ERROR,
            EventType::WQ_CATAS_ERROR,
            EventType::PATH_MIG_FAILED,
            EventType::INTERNAL_ERROR,
            EventType::PORT_CHANGE,
            EventType::CMD,
            EventType::PAGE_REQUEST,
            EventType::WQ_INVAL_REQ_ERROR,
            EventType::WQ_ACCESS_ERROR,
            EventType::SRQ_CATAS_ERROR,
            EventType::SRQ_LAST_WQE,
            EventType::SRQ_RQ_LIMIT,
        ] {
            m |= t.mask_bit();
        }
        m
    }

    pub(super) fn create_eq(&mut self, inp: &[u8], out: &mut [u8]) -> R {
        let e = create_eq_in::eq_context_entry.get(inp);
        ensure(
            eqc::status.get(e) == 0
                && !eqc::ec.get(e)
                && matches!(eqc::st.get(e), 0 | ctx::ST_ARMED | ctx::ST_ALWAYS_ARMED)
                && eqc::consumer_counter.get(e) == 0
                && eqc::producer_counter.get(e) == 0,
            bad_param(sy::EQ_CTX_FIELD),
        )?;
        let log_size = eqc::log_eq_size.get(e);
        ensure(
            log_size <= self.caps.log_max_eq_sz,
            bad_param(sy::EQ_LOG_SIZE),
        )?;
        // `max_num_eqs`, when set, replaces `2^log_max_eq` (Linux
        // `mlx5_max_eq_cap_get`).
        let max_eqs = match self.caps.max_num_eqs {
            0 => 1usize << self.caps.log_max_eq,
            n => n as usize,
        };
        ensure(self.objects.eqs.len() < max_eqs, lim(sy::EQ_TOO_MANY))?;
        let uar = eqc::uar_page.get(e);
        ensure(self.objects.uars.contains(&uar), bad_res(sy::EQ_UAR))?;
        let intr = eqc::intr.get(e);
        ensure(intr < self.caps.msix_vectors, bad_param(sy::EQ_INTR))?;
        let lps = eqc::log_page_size.get(e);
        ensure(lps <= MAX_LOG_PAGE_SIZE, bad_param(sy::EQ_PAGE_SIZE))?;
        let mut mask = [0u64; 4];
        for (i, m) in mask.iter_mut().enumerate() {
            *m = create_eq_in::event_bitmask
                .get(inp, i)
                .expect("fixed array");
        }
        ensure(
            mask[0] & !self.allowed_events() == 0 && mask[1..].iter().all(|&m| m == 0),
            bad_param(sy::EQ_EVENT_MASK),
        )?;
        let shift = 12 + lps as u32;
        let pofs = eqc::page_offset.get(e) as u64 * ((1u64 << shift) / 64);
        let npas = QBuf::pages_needed(64u64 << log_size, pofs, shift);
        let pas = read_pas(
            inp,
            create_eq_in::pas,
            npas,
            shift,
            fail(CmdStatus::BAD_INP_LEN_ERR, sy::EQ_PAS_SHORT),
            bad_param(sy::EQ_PAS_ALIGN),
        )?;
        let eqn = self.objects.free_eqn().ok_or(lim(sy::EQ_TOO_MANY))?;
        let st = eqc::st.get(e);
        self.objects.eqs.insert(
            eqn,
            Eq {
                log_size,
                uar,
                intr,
                mask,
                buf: QBuf {
                    pas: pas.into(),
                    page_shift: shift,
                    offset: pofs,
                },
                log_page_size: lps,
                page_offset: eqc::page_offset.get(e),
                pc: 0,
                ci: 0,
                st: if st == 0 { ctx::ST_FIRED } else { st },
                oi: eqc::oi.get(e),
                status: 0,
            },
        );
        create_eq_out::eq_number.set(out, eqn).expect("8-bit");
        if self.objects.eqs[&eqn].subscribes(EventType::PAGE_REQUEST.0) {
            while let Some(n) = self.pages.queued_requests.pop_front() {
                self.send_page_request(n);
            }
        }
        Ok(())
    }

    pub(super) fn query_eq(&mut self, inp: &[u8], out: &mut [u8]) -> R {
        let eqn = query_eq_in::eq_number.get(inp);
        let eq = self
            .objects
            .eqs
            .get(&eqn)
            .ok_or(bad_res(sy::EQ_NOT_FOUND))?;
        let c = query_eq_out::eq_context_entry.get_mut(out);
        eqc::status.set(c, eq.status).expect("4-bit");
        eqc::oi.set(c, eq.oi).expect("flag");
        eqc::st.set(c, eq.st).expect("4-bit");
        eqc::page_offset.set(c, eq.page_offset).expect("6-bit");
        eqc::log_eq_size.set(c, eq.log_size).expect("5-bit");
        eqc::uar_page.set(c, eq.uar).expect("24-bit");
        eqc::intr.set(c, eq.intr).expect("12-bit");
        eqc::log_page_size.set(c, eq.log_page_size).expect("5-bit");
        eqc::consumer_counter.set(c, eq.ci & M24).expect("24-bit");
        eqc::producer_counter.set(c, eq.pc & M24).expect("24-bit");
        query_eq_out::event_bitmask
            .set(out, eq.mask[0])
            .expect("64-bit");
        let pas = eq.buf.pas.clone();
        write_pas(out, query_eq_out::pas, &pas);
        Ok(())
    }
}
