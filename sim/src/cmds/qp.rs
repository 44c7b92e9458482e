//! CREATE_QP, DESTROY_QP, QUERY_QP. Kernel QP creation is Linux
//! `create_kernel_qp` / `_create_kernel_qp` (`drivers/infiniband/hw/mlx5/qp.c`)
//! and `mlx5_qpc_create_qp` (`qpc.c`); the minimal shapes (send ring +
//! zero-length RQ, `no_sq` + SRQ) are DPDK's `mlx5_devx_cmd_create_qp` and
//! vDPA event QPs. Layouts: `create_qp_in`, `qpc` of `mlx5_ifc.h`.

use mlx5_regs::consts::{pm_state, qp_st, rq_type as rqt, ts_format as tsf};

use super::*;
use crate::qp::{Path, Qp, QpState, RecvQueue};

/// First QP number the model hands out is seed-derived above this; QP 0
/// and 1 (the special QPs) are never issued.
const MIN_QPN: u32 = 2;

impl State {
    /// The timestamp capability (`MLX5_TIMESTAMP_FORMAT_CAP_*`): the RoCE
    /// page's `qp_ts_format` while RoCE is on, else `sq_ts_format` (Linux
    /// `mlx5_get_qp_default_ts`).
    pub(crate) fn ts_cap(&self) -> u8 {
        if self.port.roce_en && self.caps.has_roce_page() {
            self.caps.roce_caps.qp_ts_format
        } else {
            self.caps.sq_ts_format
        }
    }

    /// Does the timestamp capability allow `ts` (`MLX5_TIMESTAMP_FORMAT_*`)?
    /// The capability is the RoCE page's `qp_ts_format` while RoCE is on,
    /// else `sq_ts_format` (Linux `mlx5_get_qp_default_ts`).
    fn ts_allowed(&self, ts: u8) -> bool {
        match self.ts_cap() {
            tsf::CAP_FREE_RUNNING => ts == tsf::FREE_RUNNING || ts == tsf::DEFAULT,
            tsf::CAP_REAL_TIME => ts == tsf::DEFAULT || ts == tsf::REAL_TIME,
            _ => ts <= tsf::REAL_TIME,
        }
    }

    pub(super) fn create_qp(&mut self, inp: &[u8], out: &mut [u8]) -> R {
        let c = create_qp_in::qpc.get(inp);
        let unsupported = create_qp_in::qpc_ext.get(inp)
            || create_qp_in::input_qpn.get(inp) != 0
            || create_qp_in::opt_param_mask.get(inp) != 0
            || create_qp_in::ece.get(inp) != 0
            || qpc::offload_type.get(c) != 0
            || qpc::end_padding_mode.get(c) != 0
            || qpc::wq_signature.get(c)
            || qpc::cd_slave_receive.get(c)
            || qpc::cd_slave_send.get(c)
            || qpc::cd_master.get(c)
            || qpc::cgs.get(c)
            || qpc::cs_req.get(c) != 0
            || qpc::cs_res.get(c) != 0
            || qpc::dc_access_key.get(c) != 0
            || qpc::ulp_stateless_offload_mode.get(c) != 0
            || qpc::atomic_like_write_en.get(c)
            || qpc::retry_mode.get(c) != 0;
        ensure(!unsupported, bad_param(sy::QP_UNSUPPORTED))?;
        let (buf_umem, dbr_umem) = (
            create_qp_in::wq_umem_valid.get(inp),
            qpc::dbr_umem_valid.get(c),
        );
        ensure(
            (buf_umem
                || (create_qp_in::wq_umem_id.get(inp) == 0
                    && create_qp_in::wq_umem_offset.get(inp) == 0))
                && (dbr_umem || qpc::dbr_umem_id.get(c) == 0),
            bad_param(sy::UMEM_FIELDS),
        )?;
        let ctx_set = qpc::state.get(c) != 0
            || qpc::hw_sq_wqebb_counter.get(c) != 0
            || qpc::sw_sq_wqebb_counter.get(c) != 0
            || qpc::hw_rq_counter.get(c) != 0
            || qpc::sw_rq_counter.get(c) != 0
            || qpc::cur_rnr_retry.get(c) != 0
            || qpc::cur_retry_count.get(c) != 0
            || qpc::last_acked_psn.get(c) != 0
            || qpc::ssn.get(c) != 0
            || qpc::rmsn.get(c) != 0;
        ensure(!ctx_set, bad_param(sy::QP_CTX_FIELD))?;
        let st = qpc::st.get(c);
        ensure(st == qp_st::RC || st == qp_st::UD, bad_param(sy::QP_ST))?;
        let pd = qpc::pd.get(c);
        ensure(self.objects.pds.contains(&pd), bad_res(sy::QP_PD))?;
        ensure(
            qpc::pm_state.get(c) == pm_state::MIGRATED,
            bad_param(sy::QP_PM_STATE),
        )?;
        ensure(
            (self.objects.qps.len() as u64) < (1u64 << self.cur.log_max_qp),
            lim(sy::QP_TOO_MANY),
        )?;
        let uar = qpc::uar_page.get(c);
        ensure(self.objects.uars.contains(&uar), bad_res(sy::QP_UAR))?;
        ensure(qpc::counter_set_id.get(c) == 0, bad_res(sy::QP_COUNTER_SET))?;
        let rq = qpc::rq_type.get(c);
        let no_sq = qpc::no_sq.get(c);
        let own_rq = rq == rqt::NON_ZERO;
        ensure(
            (own_rq || rq == rqt::SRQ || rq == rqt::ZERO_LEN) && !(no_sq && rq == rqt::ZERO_LEN),
            bad_param(sy::QP_RQ_TYPE),
        )?;
        let srqn = qpc::srqn_rmpn_xrqn.get(c);
        let (log_rq, log_rq_stride) = (qpc::log_rq_size.get(c), qpc::log_rq_stride.get(c));
        ensure(
            (own_rq || (log_rq == 0 && log_rq_stride == 0)) && (rq == rqt::SRQ || srqn == 0),
            bad_param(sy::QP_RQ_FIELDS),
        )?;
        if own_rq {
            // A receive WQE is 16 << log_rq_stride bytes, at most
            // max_wqe_sz_rq; the ring at most 2^log_max_qp_sz WQEs (Linux
            // `set_rq_size` refuses the same before asking firmware).
            ensure(log_rq <= self.caps.log_max_qp_sz, bad_param(sy::QP_RQ_SIZE))?;
            ensure(
                (16u32 << log_rq_stride) <= self.caps.max_wqe_sz_rq as u32,
                bad_param(sy::QP_RQ_STRIDE),
            )?;
        }
        let log_sq = qpc::log_sq_size.get(c);
        if no_sq {
            ensure(log_sq == 0, bad_param(sy::QP_SQ_FIELDS))?;
        } else {
            ensure(log_sq <= self.caps.log_max_qp_sz, bad_param(sy::QP_SQ_SIZE))?;
        }
        let cq = |n: u32| if n == 0 { None } else { Some(n) };
        let (cqn_snd, cqn_rcv) = (cq(qpc::cqn_snd.get(c)), cq(qpc::cqn_rcv.get(c)));
        let known = |n: Option<u32>| n.is_none_or(|n| self.objects.cqs.contains_key(&n));
        ensure(
            known(cqn_snd) && (no_sq || cqn_snd.is_some()),
            bad_res(sy::QP_CQN_SND),
        )?;
        ensure(
            known(cqn_rcv) && (rq == rqt::ZERO_LEN || cqn_rcv.is_some()),
            bad_res(sy::QP_CQN_RCV),
        )?;
        if rq == rqt::SRQ {
            let rmp = self.issi >= 1;
            let ok = self.objects.srq(srqn, rmp).is_ok() && self.srq_good(srqn);
            ensure(ok, bad_res(sy::QP_SRQN))?;
        }
        let xrcd = qpc::xrcd.get(c);
        ensure(
            xrcd == 0 || self.objects.xrcds.contains(&xrcd),
            bad_res(sy::QP_XRCD),
        )?;
        ensure(
            self.ts_allowed(qpc::ts_format.get(c)),
            bad_param(sy::QP_TS_FORMAT),
        )?;
        let user_index = qpc::user_index.get(c);
        ensure(
            self.caps.cqe_version != 0 || user_index == 0,
            bad_param(sy::QP_USER_INDEX),
        )?;
        let dbr = qpc::dbr_addr.get(c);
        ensure(dbr.is_multiple_of(8), bad_param(sy::QP_DBR_ALIGN))?;
        let lps = qpc::log_page_size.get(c);
        ensure(lps <= MAX_LOG_PAGE_SIZE, bad_param(sy::QP_PAGE_SIZE))?;
        let shift = 12 + lps as u32;
        let po = qpc::page_offset.get(c);
        let pofs = po as u64 * ((1u64 << shift) / 64);
        let mut umems = Vec::new();
        // DevX: the doorbell record at offset `dbr_addr` of a UMEM.
        let dbr = if dbr_umem {
            let id = qpc::dbr_umem_id.get(c);
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
        // The QP buffer: the own receive ring first, the send ring right
        // after it (Linux `_create_kernel_qp`), in one page list.
        let rq_bytes = if own_rq {
            1u64 << (log_rq as u32 + log_rq_stride as u32 + 4)
        } else {
            0
        };
        let sq_bytes = if no_sq { 0 } else { 64u64 << log_sq };
        let buf = if rq_bytes + sq_bytes == 0 {
            // A UMEM named without a ring holds nothing the model uses.
            ensure(!buf_umem, bad_param(sy::UMEM_FIELDS))?;
            None
        } else if buf_umem {
            let id = create_qp_in::wq_umem_id.get(inp);
            umems.push(id);
            Some(self.umem_buf(devx::UmemUse {
                id,
                off: create_qp_in::wq_umem_offset.get(inp),
                len: rq_bytes + sq_bytes,
                write: false,
            })?)
        } else {
            let npas = QBuf::pages_needed(rq_bytes + sq_bytes, pofs, shift);
            let pas = read_pas(
                inp,
                create_qp_in::pas,
                npas,
                shift,
                fail(CmdStatus::BAD_INP_LEN_ERR, sy::QP_PAS_SHORT),
                bad_param(sy::QP_PAS_ALIGN),
            )?;
            Some(QBuf {
                pas: pas.into(),
                page_shift: shift,
                offset: pofs,
            })
        };
        let sq = buf.as_ref().filter(|_| !no_sq).map(|b| QBuf {
            pas: b.pas.clone(),
            page_shift: b.page_shift,
            offset: b.offset + rq_bytes,
        });
        let own = buf.filter(|_| own_rq).map(|buf| RecvQueue {
            buf,
            log_size: log_rq,
            log_stride: log_rq_stride + 4,
            ci: 0,
        });
        let qpn = self.objects.free_qpn(MIN_QPN);
        self.objects.qps.insert(
            qpn,
            Qp {
                state: QpState::Reset,
                st,
                pd,
                pm_state: pm_state::MIGRATED,
                uar,
                cqn_snd,
                cqn_rcv,
                no_sq,
                log_sq_size: log_sq,
                sq,
                log_page_size: lps,
                page_offset: po,
                rq_type: rq,
                rq: own,
                srqn: (rq == rqt::SRQ).then_some(srqn),
                xrcd,
                dbr,
                user_index,
                ts_format: qpc::ts_format.get(c),
                rlky: qpc::rlky.get(c),
                fre: qpc::fre.get(c),
                counter_set_id: 0,
                rre: false,
                rwe: false,
                rae: false,
                mtu: 0,
                log_msg_max: 0,
                remote_qpn: 0,
                next_rcv_psn: 0,
                min_rnr_nak: 0,
                log_rra_max: 0,
                path: Path::default(),
                retry_count: 0,
                rnr_retry: 0,
                next_send_psn: 0,
                log_sra_max: 0,
                log_ack_req_freq: 0,
                q_key: 0,
                sq_ci: 0,
                wait: None,
                umems,
                wire: Default::default(),
            },
        );
        create_qp_out::qpn.set(out, qpn).expect("24-bit");
        Ok(())
    }

    pub(super) fn destroy_qp(&mut self, inp: &[u8]) -> R {
        let qpn = destroy_qp_in::qpn.get(inp);
        self.objects.destroy_qp(qpn).map(drop)
    }

    pub(super) fn query_qp(&mut self, inp: &[u8], out: &mut [u8]) -> R {
        let qpn = query_qp_in::qpn.get(inp);
        ensure(
            !query_qp_in::qpc_ext.get(inp),
            bad_param(sy::QP_UNSUPPORTED),
        )?;
        let q = self
            .objects
            .qps
            .get(&qpn)
            .ok_or(bad_res(sy::QP_NOT_FOUND))?
            .clone();
        let pc = self
            .rd_be32(q.dbr + 4, &|| {
                format!("QUERY_QP doorbell record qpn {qpn:#x}")
            })
            .map(|v| v as u16)
            .unwrap_or(0);
        // The receive counter (dword 0) of a QP with its own receive ring.
        let rq_pc = match &q.rq {
            Some(_) => self
                .rd_be32(q.dbr, &|| format!("QUERY_QP doorbell record qpn {qpn:#x}"))
                .map(|v| v as u16)
                .unwrap_or(0),
            None => 0,
        };
        let c = query_qp_out::qpc.get_mut(out);
        macro_rules! put {
            ($($f:ident = $v:expr),* $(,)?) => {$(
                qpc::$f.set(c, $v).expect(concat!("QPC value fits ", stringify!($f)));
            )*};
        }
        put!(
            state = q.state.code(),
            st = q.st,
            pm_state = q.pm_state,
            pd = q.pd,
            mtu = q.mtu,
            log_msg_max = q.log_msg_max,
            no_sq = q.no_sq,
            log_sq_size = q.log_sq_size,
            ts_format = q.ts_format,
            rlky = q.rlky,
            counter_set_id = q.counter_set_id,
            uar_page = q.uar,
            user_index = q.user_index,
            log_page_size = q.log_page_size,
            remote_qpn = q.remote_qpn,
            log_ack_req_freq = q.log_ack_req_freq,
            log_sra_max = q.log_sra_max,
            retry_count = q.retry_count,
            rnr_retry = q.rnr_retry,
            fre = q.fre,
            next_send_psn = q.next_send_psn,
            cqn_snd = q.cqn_snd.unwrap_or(0),
            log_rra_max = q.log_rra_max,
            rre = q.rre,
            rwe = q.rwe,
            rae = q.rae,
            page_offset = q.page_offset,
            min_rnr_nak = q.min_rnr_nak,
            next_rcv_psn = q.next_rcv_psn,
            q_key = q.q_key,
            xrcd = q.xrcd,
            cqn_rcv = q.cqn_rcv.unwrap_or(0),
            dbr_addr = q.dbr,
            rq_type = q.rq_type,
            srqn_rmpn_xrqn = q.srqn.unwrap_or(0),
            hw_sq_wqebb_counter = q.sq_ci,
            sw_sq_wqebb_counter = pc,
            log_rq_size = q.rq.as_ref().map_or(0, |r| r.log_size),
            log_rq_stride = q.rq.as_ref().map_or(0, |r| r.log_stride - 4),
            hw_rq_counter = q.rq.as_ref().map_or(0, |r| r.ci as u32),
            sw_rq_counter = rq_pc as u32,
        );
        let a = qpc::primary_address_path.get_mut(c);
        let p = q.path;
        ads::fl.set(a, p.fl).expect("flag");
        ads::pkey_index.set(a, p.pkey_index).expect("16-bit");
        ads::grh.set(a, p.grh).expect("flag");
        ads::rlid.set(a, p.rlid).expect("16-bit");
        ads::ack_timeout.set(a, p.ack_timeout).expect("5-bit");
        ads::src_addr_index.set(a, p.src_addr_index).expect("8-bit");
        ads::hop_limit.set(a, p.hop_limit).expect("8-bit");
        ads::rgid_rip.get_mut(a).copy_from_slice(&p.rgid);
        ads::udp_sport.set(a, p.udp_sport).expect("16-bit");
        ads::tclass.set(a, p.tclass).expect("8-bit");
        ads::flow_label.set(a, p.flow_label).expect("20-bit");
        ads::sl.set(a, p.sl).expect("4-bit");
        ads::vhca_port_num.set(a, p.port).expect("8-bit");
        ads::rmac_47_32
            .set(a, u16::from_be_bytes([p.rmac[0], p.rmac[1]]))
            .expect("16-bit");
        ads::rmac_31_0
            .set(
                a,
                u32::from_be_bytes([p.rmac[2], p.rmac[3], p.rmac[4], p.rmac[5]]),
            )
            .expect("32-bit");
        // The page list follows at 0x110 (`qpc_ext` = 0), as far as the
        // output holds it.
        // The whole QP buffer's list (the own receive ring's covers both).
        if let Some(b) = q.rq.as_ref().map(|r| &r.buf).or(q.sq.as_ref()) {
            let arr = mlx5_regs::Array::<u64>::new("pas", 0x110 * 8, 64, 0);
            write_pas(out, arr, &b.pas);
        }
        Ok(())
    }
}
