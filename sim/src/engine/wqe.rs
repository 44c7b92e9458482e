//! Reading and parsing send WQEs exactly as laid out in the send ring
//! (`include/linux/mlx5/qp.h` segments; Linux `mlx5_ib_post_send` in
//! `drivers/infiniband/hw/mlx5/wr.c`, rdma-core `providers/mlx5/qp.c`):
//! a 16-byte control segment, a remote-address segment for RDMA writes,
//! reads and atomics, an atomic segment for the atomics, then data
//! segments or one inline segment; a WQE may wrap the ring end.

use mlx5_regs::consts::wqe as w;
use mlx5_regs::layouts::{
    wqe_atomic_seg as aseg, wqe_ctrl_seg as ctrl, wqe_data_seg as dseg, wqe_raddr_seg as raddr,
};

use crate::state::State;

/// A scatter/gather entry of a send WQE.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sge {
    pub addr: u64,
    pub len: u64,
    pub lkey: u32,
}

/// Where the message bytes come from.
#[derive(Debug, Clone)]
pub(crate) enum Data {
    Sges(Vec<Sge>),
    Inline(Vec<u8>),
}

/// A parsed, well-formed send WQE.
#[derive(Debug, Clone)]
pub(crate) struct Wqe {
    /// Position in the send ring (producer counter at the WQE, 16 bits).
    pub index: u16,
    pub opcode: u8,
    /// Basic blocks the WQE occupies.
    pub wqebbs: u16,
    /// CE != 0: a CQE on success too.
    pub signaled: bool,
    pub solicited: bool,
    /// Immediate data as the WQE holds it (network order value).
    pub imm: u32,
    /// RDMA: (remote address, rkey).
    pub remote: Option<(u64, u32)>,
    /// CMP_SWAP / FETCH_ADD: (swap or add operand, compare operand).
    pub atomic: Option<(u64, u64)>,
    /// Fence mode FENCE or SMALL_AND_FENCE: wait for earlier READs and
    /// atomics before executing.
    pub fence: bool,
    pub data: Data,
}

impl Wqe {
    /// RDMA READ or an atomic: the responder answers with data.
    pub fn is_read_or_atomic(&self) -> bool {
        matches!(
            self.opcode,
            w::OPCODE_RDMA_READ | w::OPCODE_ATOMIC_CS | w::OPCODE_ATOMIC_FA
        )
    }

    /// Message length in bytes.
    pub fn len(&self) -> u64 {
        match &self.data {
            Data::Sges(v) => v.iter().map(|s| s.len).sum(),
            Data::Inline(b) => b.len() as u64,
        }
    }
}

/// Why a WQE could not be executed.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Bad {
    /// The ring (or the page list) could not be read: catastrophic error.
    Unreadable,
    /// A malformed WQE: local QP operation error. `wqebbs` = how far to skip
    /// (1 when the size itself is unusable); `opcode` as found.
    Malformed {
        opcode: u8,
        wqebbs: u16,
        why: &'static str,
    },
}

impl State {
    /// Read WQEBB `index` (masked to the ring) of QP `qpn`'s send ring.
    pub(crate) fn read_wqebb(&mut self, qpn: u32, index: u16) -> Result<[u8; 64], ()> {
        let q = self.objects.qps.get(&qpn).ok_or(())?;
        let n = q.sq_size();
        let buf = q.sq.clone().ok_or(())?;
        let slot = (index as u32) & (n - 1);
        let (iova, _) = buf.at(slot as u64 * w::SEND_WQE_BB as u64).ok_or(())?;
        let mut b = [0u8; 64];
        self.rd(iova, &mut b, &|| {
            format!("send WQE read qpn {qpn:#x} index {index:#x}")
        })?;
        Ok(b)
    }

    /// Read and check the WQE at position `index`; `avail` = WQEBBs posted
    /// from there (doorbell-record producer minus `index`).
    pub(crate) fn parse_wqe(&mut self, qpn: u32, index: u16, avail: u16) -> Result<Wqe, Bad> {
        let first = self.read_wqebb(qpn, index).map_err(|_| Bad::Unreadable)?;
        let opcode = ctrl::opcode.get(&first);
        let ds = ctrl::ds.get(&first);
        let bad = |wqebbs: u16, why| Bad::Malformed {
            opcode,
            wqebbs,
            why,
        };
        let ring = self.objects.qps.get(&qpn).map(|q| q.sq_size()).unwrap_or(0);
        let max_ds = (self.caps.max_wqe_sz_sq as usize / w::SEND_WQE_DS).min(0x3f);
        let wqebbs = w::wqebbs(ds) as u16;
        if ds == 0 || ds as usize > max_ds || wqebbs as usize > w::SEND_WQE_MAX_WQEBBS {
            return Err(bad(1, "DS 0 or beyond max_wqe_sz_sq"));
        }
        if wqebbs as u32 > ring || wqebbs > avail {
            return Err(bad(1, "WQE larger than the ring or than what was posted"));
        }
        if ctrl::wqe_index.get(&first) != index {
            return Err(bad(wqebbs, "WQE index is not the producer position"));
        }
        if ctrl::qpn.get(&first) != qpn {
            return Err(bad(wqebbs, "qpn_ds names another QP"));
        }
        if ctrl::opmod.get(&first) != 0 {
            return Err(bad(wqebbs, "opcode modifier not 0"));
        }
        let atomic = matches!(opcode, w::OPCODE_ATOMIC_CS | w::OPCODE_ATOMIC_FA);
        let rdma = atomic
            || matches!(
                opcode,
                w::OPCODE_RDMA_WRITE | w::OPCODE_RDMA_WRITE_IMM | w::OPCODE_RDMA_READ
            );
        let known = rdma || matches!(opcode, w::OPCODE_NOP | w::OPCODE_SEND | w::OPCODE_SEND_IMM);
        if !known {
            return Err(bad(wqebbs, "send opcode not modelled for RC"));
        }
        // The whole WQE, following the ring across its end.
        // (On the stack: a WQE is at most SEND_WQE_MAX_WQEBBS WQEBBs.)
        let mut whole = [0u8; w::SEND_WQE_MAX_WQEBBS * w::SEND_WQE_BB];
        whole[..w::SEND_WQE_BB].copy_from_slice(&first);
        for k in 1..wqebbs {
            let b = self
                .read_wqebb(qpn, index.wrapping_add(k))
                .map_err(|_| Bad::Unreadable)?;
            let at = k as usize * w::SEND_WQE_BB;
            whole[at..at + w::SEND_WQE_BB].copy_from_slice(&b);
        }
        let bytes = &whole[..ds as usize * w::SEND_WQE_DS];
        let fm_ce_se = ctrl::fm_ce_se.get(&first);
        let mut wqe = Wqe {
            index,
            opcode,
            wqebbs,
            signaled: (fm_ce_se >> 2) & 3 != 0,
            solicited: fm_ce_se & w::CTRL_SOLICITED != 0,
            imm: ctrl::imm.get(&first),
            remote: None,
            atomic: None,
            fence: matches!(
                fm_ce_se & 0xe0,
                w::FENCE_MODE_FENCE | w::FENCE_MODE_SMALL_AND_FENCE
            ),
            data: Data::Sges(Vec::new()),
        };
        if opcode == w::OPCODE_NOP {
            return Ok(wqe);
        }
        let mut off = w::SEND_WQE_DS;
        if rdma {
            if bytes.len() < 2 * w::SEND_WQE_DS {
                return Err(bad(
                    wqebbs,
                    "RDMA operation without a remote-address segment",
                ));
            }
            let r = &bytes[off..off + 16];
            wqe.remote = Some((raddr::raddr.get(r), raddr::rkey.get(r)));
            off += w::SEND_WQE_DS;
        }
        if atomic {
            // ctrl, raddr, atomic, exactly one 8-byte local data segment
            // (Linux `set_atomic_seg` + one `set_data_ptr_seg`).
            if bytes.len() != 4 * w::SEND_WQE_DS {
                return Err(bad(
                    wqebbs,
                    "atomic WQE is not ctrl + raddr + atomic + one SGE",
                ));
            }
            let a = &bytes[off..off + 16];
            wqe.atomic = Some((aseg::swap_add.get(a), aseg::compare.get(a)));
            off += w::SEND_WQE_DS;
            let s = &bytes[off..off + 16];
            if dseg::byte_count.get(s) != 8 {
                return Err(bad(wqebbs, "atomic local buffer is not 8 bytes"));
            }
        }
        if opcode == w::OPCODE_RDMA_READ && off < bytes.len() {
            let bc = dseg::byte_count.get(&bytes[off..off + 16]);
            if bc & w::INLINE_SEG != 0 {
                return Err(bad(wqebbs, "inline segment in an RDMA READ"));
            }
        }
        if off < bytes.len() {
            let bc = dseg::byte_count.get(&bytes[off..off + 16]);
            if bc & w::INLINE_SEG != 0 {
                let len = (bc & !w::INLINE_SEG) as usize;
                let units = (len + 4).div_ceil(w::SEND_WQE_DS);
                if off + units * w::SEND_WQE_DS != bytes.len() {
                    return Err(bad(wqebbs, "inline segment size disagrees with DS"));
                }
                wqe.data = Data::Inline(bytes[off + 4..off + 4 + len].to_vec());
                return Ok(wqe);
            }
            let mut sges = Vec::new();
            for s in bytes[off..].chunks_exact(w::SEND_WQE_DS) {
                let bc = dseg::byte_count.get(s);
                if bc & w::INLINE_SEG != 0 {
                    return Err(bad(wqebbs, "inline segment after data segments"));
                }
                // byte_count 0 means 2 GiB (as in receive scatter entries).
                let len = if bc == 0 { 1u64 << 31 } else { bc as u64 };
                sges.push(Sge {
                    addr: dseg::addr.get(s),
                    len,
                    lkey: dseg::lkey.get(s),
                });
            }
            wqe.data = Data::Sges(sges);
        }
        Ok(wqe)
    }
}
