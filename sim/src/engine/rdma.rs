//! RDMA READ and the two IB atomics (CMP_SWAP, FETCH_ADD): the responder's
//! checks and execution, its saved responses for replay (responder
//! resources, `log_rra_max`), the requester's local writes (READ data
//! scattered through the WQE's keys, the atomic's original value), and the
//! loopback path inside one card. The wire path is in `rdma_wire.rs`.
//!
//! Sources: IBTA vol. 1 §9.4.3-9.4.5 (READ and atomic operations), §9.7.5
//! (responder resources, duplicate READ/atomic replay); rxe `rxe_resp.c`
//! (`check_rkey`, `atomic_reply`, `find_resource`); Linux
//! `drivers/infiniband/hw/mlx5/qp.c` (`to_mlx5_access_flags`: rre/rae),
//! `main.c` (`get_atomic_caps`: host-endian atomics). Choices where the
//! sources are silent: `docs/fidelity.md` §19.

use std::collections::VecDeque;

use mlx5_regs::consts::wqe as w;
use mlx5_regs::consts::{atomic, cqe_syndrome, mtu};
use mlx5_regs::EventType;

use super::respond::Outcome;
use super::wqe::{Data, Wqe};
use crate::mkey::Access;
use crate::state::State;

const M24: u32 = 0x00ff_ffff;

/// What a responder resource replays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResKind {
    /// A READ: served again from memory at the PSN asked for.
    Read { va: u64, rkey: u32, len: u32 },
    /// An atomic: the original value, never executed twice.
    Atomic { orig: u64 },
}

/// One saved READ or atomic (first PSN, packet count, what it was).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RdRes {
    pub first_psn: u32,
    pub npkts: u32,
    pub kind: ResKind,
}

impl RdRes {
    /// `psn` falls in this request's PSN range.
    pub fn holds(&self, psn: u32) -> bool {
        let d = crate::wire::psn_diff(psn, self.first_psn);
        d >= 0 && (d as u32) < self.npkts
    }
}

/// The responder's saved READ/atomic requests, oldest first.
pub(crate) type Resources = VecDeque<RdRes>;

/// A responder's refusal: the requester's CQE syndrome (and the NAK it
/// travels as) and the responder QP's affiliated event.
#[derive(Debug, Clone, Copy)]
pub(super) struct Refusal {
    pub synd: u8,
    pub event: EventType,
}

impl Refusal {
    fn access() -> Refusal {
        Refusal {
            synd: cqe_syndrome::REMOTE_ACCESS_ERR,
            event: EventType::WQ_ACCESS_ERROR,
        }
    }

    fn invalid() -> Refusal {
        Refusal {
            synd: cqe_syndrome::REMOTE_INVAL_REQ_ERR,
            event: EventType::WQ_INVAL_REQ_ERROR,
        }
    }
}

impl State {
    /// An 8-byte operand as this device lays it out in memory: host
    /// endianness (little endian, the modelled host) once the driver set
    /// `atomic_req_8B_endianness_mode` to 1, big endian before.
    fn atomic_host_order(&self) -> bool {
        self.cur.atomic_req_8b_endianness_mode == atomic::REQ_MODE_HOST_ENDIANNESS
    }

    fn operand_from(&self, b: [u8; 8]) -> u64 {
        if self.atomic_host_order() {
            u64::from_le_bytes(b)
        } else {
            u64::from_be_bytes(b)
        }
    }

    fn operand_to(&self, v: u64) -> [u8; 8] {
        if self.atomic_host_order() {
            v.to_le_bytes()
        } else {
            v.to_be_bytes()
        }
    }

    /// Responder QP `tq` serves a READ of `len` bytes at `va` through
    /// `rkey`: the QP's `rre`, the key's remote-read right and range.
    pub(super) fn serve_read(
        &mut self,
        tq: u32,
        va: u64,
        rkey: u32,
        len: u32,
    ) -> Result<Vec<u8>, Refusal> {
        let t = self.objects.qps.get(&tq).ok_or(Refusal::invalid())?;
        let (rre, pd) = (t.rre, t.pd);
        if !rre {
            // The QP does not support READ: invalid request (rxe
            // `check_op_valid`); a key without `rr` is an access error.
            return Err(Refusal::invalid());
        }
        if len == 0 {
            // A zero-length READ names no memory (rxe `check_rkey`).
            return Ok(Vec::new());
        }
        let plan = self
            .key_translate(rkey, pd, va, len as u64, Access::RemoteRead)
            .map_err(|_| Refusal::access())?;
        let what = || format!("RDMA READ responder qpn {tq:#x} va {va:#x}");
        self.check_mapped(&plan, false, &what)
            .map_err(|_| Refusal::access())?;
        let mut out = vec![0u8; len as usize];
        let mut at = 0usize;
        for (iova, n) in plan {
            let n = n as usize;
            self.rd(iova, &mut out[at..at + n], &what)
                .map_err(|_| Refusal::access())?;
            at += n;
        }
        self.stats.reads_served += 1;
        Ok(out)
    }

    /// Responder QP `tq` executes an atomic (`opcode` CMP_SWAP or
    /// FETCH_ADD) on the 8 bytes at `va`; the original value comes back.
    /// Under the device lock the read-modify-write is one step, so atomics
    /// on this device never interleave. Misaligned: invalid request,
    /// nothing read or written.
    pub(super) fn serve_atomic(
        &mut self,
        tq: u32,
        compare_swap: bool,
        va: u64,
        rkey: u32,
        (swap_add, compare): (u64, u64),
    ) -> Result<u64, Refusal> {
        let t = self.objects.qps.get(&tq).ok_or(Refusal::invalid())?;
        let (rae, pd) = (t.rae, t.pd);
        if !rae || !self.caps.atomic {
            // The QP does not support atomics: invalid request (rxe
            // `check_op_valid`); a key without `a` is an access error.
            return Err(Refusal::invalid());
        }
        if !va.is_multiple_of(8) {
            return Err(Refusal::invalid());
        }
        let plan = self
            .key_translate(rkey, pd, va, 8, Access::RemoteAtomic)
            .map_err(|_| Refusal::access())?;
        let what = || format!("atomic responder qpn {tq:#x} va {va:#x}");
        self.check_mapped(&plan, true, &what)
            .map_err(|_| Refusal::access())?;
        // 8-byte aligned: one page, one range.
        let (iova, _) = plan[0];
        let mut b = [0u8; 8];
        self.rd(iova, &mut b, &what)
            .map_err(|_| Refusal::access())?;
        let orig = self.operand_from(b);
        let new = if compare_swap {
            if orig == compare {
                Some(swap_add)
            } else {
                None
            }
        } else {
            Some(orig.wrapping_add(swap_add))
        };
        if let Some(v) = new {
            let bytes = self.operand_to(v);
            self.wr(iova, &bytes, &what)
                .map_err(|_| Refusal::access())?;
        }
        self.stats.atomics_executed += 1;
        Ok(orig)
    }

    /// Keep a served READ/atomic for replay; the oldest is recycled beyond
    /// `1 << log_rra_max` (rxe recycles its resource ring the same way).
    pub(super) fn save_resource(&mut self, tq: u32, res: RdRes) {
        let Some(t) = self.objects.qps.get_mut(&tq) else {
            return;
        };
        let cap = 1usize << t.log_rra_max;
        let r = &mut t.wire.rx.resources;
        while r.len() >= cap {
            r.pop_front();
        }
        r.push_back(res);
    }

    /// The saved request whose PSN range holds `psn`.
    pub(super) fn find_resource(&self, tq: u32, psn: u32) -> Option<RdRes> {
        let t = self.objects.qps.get(&tq)?;
        t.wire
            .rx
            .resources
            .iter()
            .rev()
            .find(|r| r.holds(psn))
            .copied()
    }

    /// Requester: write a READ's data through the WQE's local SGEs (local
    /// write rights) or an atomic's original value into its 8-byte buffer.
    /// Error = CQE syndrome (local protection).
    pub(super) fn requester_write_back(
        &mut self,
        qpn: u32,
        wq: &Wqe,
        data: &[u8],
    ) -> Result<(), u8> {
        let q = self
            .objects
            .qps
            .get(&qpn)
            .ok_or(cqe_syndrome::LOCAL_QP_OP_ERR)?;
        let (pd, rlky) = (q.pd, q.rlky);
        let Data::Sges(sges) = &wq.data else {
            return Err(cqe_syndrome::LOCAL_QP_OP_ERR);
        };
        let index = wq.index;
        let what = || format!("READ/atomic response qpn {qpn:#x} WQE {index:#x}");
        let mut plan = Vec::new();
        let mut left = data.len() as u64;
        for s in sges {
            if left == 0 {
                break;
            }
            let n = s.len.min(left);
            if s.lkey == self.resd_lkey {
                if !rlky {
                    return Err(cqe_syndrome::LOCAL_PROT_ERR);
                }
                plan.push((s.addr, n));
            } else {
                let p = self
                    .key_translate(s.lkey, pd, s.addr, n, Access::LocalWrite)
                    .map_err(|_| cqe_syndrome::LOCAL_PROT_ERR)?;
                plan.extend(p);
            }
            left -= n;
        }
        if left != 0 {
            return Err(cqe_syndrome::LOCAL_LENGTH_ERR);
        }
        self.check_mapped(&plan, true, &what)
            .map_err(|_| cqe_syndrome::LOCAL_PROT_ERR)?;
        self.write_plan(&plan, data, &what);
        Ok(())
    }

    /// The original value an atomic's requester writes back, laid out as
    /// this device's endianness mode says.
    pub(super) fn atomic_result_bytes(&self, orig: u64) -> [u8; 8] {
        self.operand_to(orig)
    }

    /// PSNs a READ/atomic consumes on `qpn`'s path: ⌈len / MTU⌉ (at least
    /// 1) for a READ, 1 for an atomic.
    pub(super) fn rd_atomic_npkts(&self, qpn: u32, wq: &Wqe) -> u32 {
        if wq.opcode != w::OPCODE_RDMA_READ {
            return 1;
        }
        let m = self
            .objects
            .qps
            .get(&qpn)
            .and_then(|q| mtu::bytes(q.mtu))
            .unwrap_or(256) as u64;
        wq.len().div_ceil(m).max(1) as u32
    }

    /// Execute a READ/atomic WQE of `sqpn` whose peer is in this function.
    /// Returns the outcome and the response bytes on success.
    pub(super) fn loopback_rd_atomic(&mut self, sqpn: u32, wq: &Wqe) -> (Outcome, Vec<u8>) {
        let npkts = self.rd_atomic_npkts(sqpn, wq);
        let Some((tq, at)) = self.route(sqpn, npkts) else {
            return (Outcome::NoAck, Vec::new());
        };
        let first_psn = self.objects.qps[&sqpn].next_send_psn;
        let (va, rkey) = wq.remote.expect("parsed with a remote address");
        let len = wq.len() as u32;
        let served = if at == super::respond::Psn::Duplicate {
            // A repeated request: answered from the saved resource.
            self.stats.duplicates += 1;
            self.stats.rd_atomic_replays += 1;
            match self.find_resource(tq, first_psn).map(|r| r.kind) {
                Some(ResKind::Atomic { orig }) => Ok(self.atomic_result_bytes(orig).to_vec()),
                Some(ResKind::Read { va, rkey, len }) => self.serve_read(tq, va, rkey, len),
                None => Err(Refusal::invalid()),
            }
        } else if wq.opcode == w::OPCODE_RDMA_READ {
            let r = self.serve_read(tq, va, rkey, len);
            if r.is_ok() {
                let kind = ResKind::Read { va, rkey, len };
                self.save_resource(
                    tq,
                    RdRes {
                        first_psn,
                        npkts,
                        kind,
                    },
                );
            }
            r
        } else {
            let cs = wq.opcode == w::OPCODE_ATOMIC_CS;
            let ops = wq.atomic.expect("parsed with an atomic segment");
            let r = self.serve_atomic(tq, cs, va, rkey, ops);
            r.map(|orig| {
                let kind = ResKind::Atomic { orig };
                self.save_resource(
                    tq,
                    RdRes {
                        first_psn,
                        npkts,
                        kind,
                    },
                );
                self.atomic_result_bytes(orig).to_vec()
            })
        };
        match served {
            Ok(bytes) => {
                if let Some(s) = self.objects.qps.get_mut(&sqpn) {
                    s.next_send_psn = (s.next_send_psn + npkts) & M24;
                }
                if at != super::respond::Psn::Duplicate {
                    if let Some(r) = self.objects.qps.get_mut(&tq) {
                        r.next_rcv_psn = (r.next_rcv_psn + npkts) & M24;
                    }
                }
                (Outcome::Done, bytes)
            }
            Err(f) => (
                Outcome::Failed {
                    synd: f.synd,
                    responder: Some((tq, Some(f.event))),
                },
                Vec::new(),
            ),
        }
    }
}
