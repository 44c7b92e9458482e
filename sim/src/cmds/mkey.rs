//! Memory keys (CREATE/QUERY/DESTROY_MKEY) and XRC domains
//! (ALLOC/DEALLOC_XRCD). Physical-address keys as Linux's DMA MR
//! (`mlx5_ib_get_dma_mr`, `drivers/infiniband/hw/mlx5/mr.c`), MTT keys as
//! rdma-core's VFIO `reg_mr` (`providers/mlx5/mlx5_vfio.c`); layouts
//! `mkc`, `create_mkey_in` of `mlx5_ifc.h`.

use mlx5_regs::consts::mkey as mk;

use super::*;
use crate::mkey::Mkey;

/// Largest MTT page: 2^31 bytes (rdma-core `mlx5_vfio_reg_mr` never picks
/// more).
const MAX_MTT_LOG_PAGE: u8 = 31;

impl State {
    pub(super) fn create_mkey(&mut self, inp: &[u8], out: &mut [u8]) -> R {
        let m = create_mkey_in::memory_key_mkey_entry.get(inp);
        ensure(!mkc::free.get(m), bad_param(sy::MKEY_FREE))?;
        let mode = mk::access_mode(mkc::access_mode_4_2.get(m), mkc::access_mode_1_0.get(m));
        ensure(
            mode == mk::ACCESS_MODE_PA || mode == mk::ACCESS_MODE_MTT,
            bad_param(sy::MKEY_ACCESS_MODE),
        )?;
        let unsupported = create_mkey_in::mkey_umem_valid.get(inp)
            || create_mkey_in::data_direct.get(inp)
            || mkc::umr_en.get(m)
            || mkc::bsf_en.get(m)
            || mkc::sync_umr.get(m)
            || mkc::expected_sigerr_count.get(m)
            || mkc::en_rinval.get(m)
            || mkc::bsf_octword_size.get(m) != 0
            || mkc::crossing_target_vhca_id.get(m) != 0
            || mkc::ma_translation_mode.get(m) != 0
            || mkc::relaxed_ordering_write.get(m)
            || mkc::relaxed_ordering_read.get(m);
        ensure(!unsupported, bad_param(sy::MKEY_UNSUPPORTED))?;
        let pd = mkc::pd.get(m);
        ensure(self.objects.pds.contains(&pd), bad_res(sy::MKEY_PD))?;
        ensure(mkc::qpn.get(m) == mk::QPN_ANY, bad_param(sy::MKEY_QPN))?;
        ensure(
            (self.objects.mkeys.len() as u64) < (1u64 << self.caps.log_max_mkey),
            lim(sy::MKEY_TOO_MANY),
        )?;
        let pg_access = create_mkey_in::pg_access.get(inp);
        let length64 = mkc::length64.get(m);
        let start = mkc::start_addr.get(m);
        let len = mkc::len.get(m);
        let octwords = mkc::translations_octword_size.get(m);
        let actual = create_mkey_in::translations_octword_actual_size.get(inp);
        let lps = mkc::log_page_size.get(m);
        let mut mtt = Vec::new();
        if mode == mk::ACCESS_MODE_PA {
            ensure(!pg_access, bad_param(sy::MKEY_PG_ACCESS_CAP))?;
            ensure(
                length64 || (len > 0 && start.checked_add(len).is_some()),
                bad_param(sy::MKEY_PA_LENGTH),
            )?;
            ensure(octwords == 0 && actual == 0, bad_param(sy::MKEY_MTT_SIZE))?;
        } else {
            ensure(
                !length64 && len > 0 && start.checked_add(len).is_some(),
                bad_param(sy::MKEY_MTT_LENGTH64),
            )?;
            ensure(
                (12..=MAX_MTT_LOG_PAGE).contains(&lps),
                bad_param(sy::MKEY_MTT_PAGE_SIZE),
            )?;
            ensure(
                !pg_access || self.caps.pg,
                bad_param(sy::MKEY_PG_ACCESS_CAP),
            )?;
            let ps = 1u64 << lps;
            let pages = ((start & (ps - 1)) + len).div_ceil(ps);
            ensure(
                actual as u64 >= pages.div_ceil(2) && actual <= octwords,
                bad_param(sy::MKEY_MTT_SIZE),
            )?;
            ensure(
                inp.len() >= create_mkey_in::klm_pas_mtt.len_with(2 * pages as usize),
                fail(CmdStatus::BAD_INP_LEN_ERR, sy::MKEY_MTT_SHORT),
            )?;
            let perms = if pg_access { mk::MTT_PRESENT } else { 0 };
            for i in 0..pages as usize {
                let hi = create_mkey_in::klm_pas_mtt.get(inp, 2 * i).unwrap_or(0) as u64;
                let lo = create_mkey_in::klm_pas_mtt.get(inp, 2 * i + 1).unwrap_or(0) as u64;
                let e = (hi << 32) | lo;
                ensure(e & (ps - 1) & !perms == 0, bad_param(sy::MKEY_MTT_ALIGN))?;
                mtt.push(e);
            }
        }
        let index = self.objects.next_mkey_index();
        self.objects.mkeys.insert(
            index,
            Mkey {
                key: mk::key(index, mkc::mkey_7_0.get(m)),
                pd,
                access_mode: mode,
                lr: mkc::lr.get(m),
                lw: mkc::lw.get(m),
                rr: mkc::rr.get(m),
                rw: mkc::rw.get(m),
                a: mkc::a.get(m),
                length64,
                start,
                len,
                log_page_size: lps,
                mtt,
                pg_access,
                octwords,
                qpn: mk::QPN_ANY,
            },
        );
        create_mkey_out::mkey_index.set(out, index).expect("24-bit");
        Ok(())
    }

    pub(super) fn query_mkey(&mut self, inp: &[u8], out: &mut [u8]) -> R {
        let index = query_mkey_in::mkey_index.get(inp);
        let k = self
            .objects
            .mkeys
            .get(&index)
            .ok_or(bad_res(sy::MKEY_NOT_FOUND))?;
        let m = query_mkey_out::memory_key_mkey_entry.get_mut(out);
        let (hi, lo) = mk::split_access_mode(k.access_mode);
        mkc::access_mode_4_2.set(m, hi).expect("3-bit");
        mkc::access_mode_1_0.set(m, lo).expect("2-bit");
        mkc::a.set(m, k.a).expect("flag");
        mkc::rw.set(m, k.rw).expect("flag");
        mkc::rr.set(m, k.rr).expect("flag");
        mkc::lw.set(m, k.lw).expect("flag");
        mkc::lr.set(m, k.lr).expect("flag");
        mkc::qpn.set(m, k.qpn).expect("24-bit");
        mkc::mkey_7_0.set(m, mk::variant(k.key)).expect("8-bit");
        mkc::length64.set(m, k.length64).expect("flag");
        mkc::pd.set(m, k.pd).expect("24-bit");
        mkc::start_addr.set(m, k.start).expect("64-bit");
        mkc::len.set(m, k.len).expect("64-bit");
        mkc::translations_octword_size
            .set(m, k.octwords)
            .expect("32-bit");
        mkc::log_page_size.set(m, k.log_page_size).expect("6-bit");
        // The first four translation entries (two octwords).
        let first = query_mkey_out::bsf0_klm0_pas_mtt0_1.range().start;
        for (i, e) in k.mtt.iter().take(4).enumerate() {
            let at = first + 8 * i;
            out[at..at + 8].copy_from_slice(&e.to_be_bytes());
        }
        Ok(())
    }

    pub(super) fn destroy_mkey(&mut self, inp: &[u8]) -> R {
        let index = destroy_mkey_in::mkey_index.get(inp);
        self.objects.destroy_mkey(index).map(drop)
    }

    pub(super) fn alloc_xrcd(&mut self, out: &mut [u8]) -> R {
        ensure(self.caps.xrc, bad_op(sy::XRCD_CAP))?;
        let x = self
            .objects
            .alloc_xrcd(1u64 << self.caps.log_max_xrcd)
            .ok_or(lim(sy::XRCD_TOO_MANY))?;
        alloc_xrcd_out::xrcd.set(out, x).expect("24-bit");
        Ok(())
    }

    pub(super) fn dealloc_xrcd(&mut self, inp: &[u8]) -> R {
        self.objects.dealloc_xrcd(dealloc_xrcd_in::xrcd.get(inp))
    }
}
