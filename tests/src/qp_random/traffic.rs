//! Posting sends in the QP random test: random work requests (opcodes,
//! gather lists, inline data, keys), the driver's acceptance predicted
//! request by request, the reference's execution, and in threaded mode a
//! resize or poll while the doorbell may still be in flight.

use mlx5_driver::qp::{Payload, PostSendFailure, QpState, SendError, SendOp, SendRequest};
use mlx5_driver::srq::Sge;
use mlx5_regs::consts::wqe;

use super::model::{Id, Need, Seg, Wr};
use super::{Run, RDMA_LEN, SLOT};

/// What the test posts before the driver sees it.
struct Planned {
    wr: Wr,
    /// Gather entries as given (zero-length ones included).
    sges: Vec<Sge>,
    inline: bool,
}

impl Run {
    /// A key for `need`: mostly the DMA key, sometimes the reserved lkey, a
    /// created key (with or without the right) or a destroyed one.
    pub(super) fn choose_key(&mut self, need: Need) -> u32 {
        let dma = self.hca.dma_lkey().expect("DMA key");
        let created: Vec<u32> = self.mkeys.iter().map(|k| k.key()).collect();
        let dead = self.dead_keys.clone();
        if matches!(need, Need::Remote | Need::RemoteRead | Need::Atomic) {
            let good: Vec<u32> = created
                .iter()
                .copied()
                .filter(|k| self.m.key_ok(*k, need))
                .collect();
            if self.rng.below(30) != 0 {
                if let Some(k) = self.pick(&good) {
                    return k;
                }
            }
        }
        match self.rng.below(100) {
            0..=2 => self.m.reserved,
            3 | 4 => self.pick(&created).unwrap_or(dma),
            5 => self.pick(&dead).unwrap_or(dma),
            _ => dma,
        }
    }

    fn random_bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n);
        while v.len() < n {
            v.extend_from_slice(&self.rng.next().to_le_bytes());
        }
        v.truncate(n);
        v
    }

    /// Plan one send work request of QP `qpn` (`None`: no buffer slot free).
    fn plan_wr(&mut self, qpn: u32) -> Option<Planned> {
        let sq = self.m.qps[&qpn].sq.expect("a send queue");
        // RDMA WRITEs mostly when a key with remote write exists.
        let rw_key = self
            .mkeys
            .iter()
            .any(|k| self.m.key_ok(k.key(), Need::Remote));
        let rr_key = self
            .mkeys
            .iter()
            .any(|k| self.m.key_ok(k.key(), Need::RemoteRead));
        let a_key = self
            .mkeys
            .iter()
            .any(|k| self.m.key_ok(k.key(), Need::Atomic));
        let opcode = match self.rng.below(14) {
            6 | 7 if rw_key || self.rng.below(8) == 0 => wqe::OPCODE_RDMA_WRITE,
            8 | 9 if rw_key || self.rng.below(8) == 0 => wqe::OPCODE_RDMA_WRITE_IMM,
            10 | 11 if rr_key || self.rng.below(8) == 0 => wqe::OPCODE_RDMA_READ,
            12 if a_key || self.rng.below(8) == 0 => wqe::OPCODE_ATOMIC_FA,
            13 if a_key || self.rng.below(8) == 0 => wqe::OPCODE_ATOMIC_CS,
            0..=2 | 6 | 8 | 10 | 12 => wqe::OPCODE_SEND,
            _ => wqe::OPCODE_SEND_IMM,
        };
        let atomic = matches!(opcode, wqe::OPCODE_ATOMIC_CS | wqe::OPCODE_ATOMIC_FA);
        if atomic {
            return self.plan_atomic(opcode);
        }
        let read = opcode == wqe::OPCODE_RDMA_READ;
        // A READ's entries are written by the device: no inline data, keys
        // with (or without) local write.
        let inline = !read && sq.max_inline > 0 && self.rng.below(3) == 0;
        let mut sges = Vec::new();
        let mut slot = None;
        let payload = if inline {
            let len = if self.rng.below(15) == 0 {
                sq.max_inline + 1 + self.rng.below(8) as u32
            } else {
                self.rng.below(sq.max_inline as u64 + 1) as u32
            };
            self.random_bytes(len as usize)
        } else {
            let s = self.free_src.pop()?;
            slot = Some(s);
            let n = if self.rng.below(15) == 0 {
                sq.max_sge as usize + 1
            } else {
                self.rng.below(sq.max_sge.min(4) as u64 + 1) as usize
            };
            let base = self.mem.iova() + (s * SLOT) as u64;
            let mut off = 0;
            for _ in 0..n {
                let len = if self.rng.below(5) == 0 {
                    0
                } else {
                    let max = if self.rng.below(4) == 0 { 120 } else { 40 };
                    1 + self.rng.below(max) as u32
                };
                // The whole list stays in its slot (a refused one too: its
                // bytes are written before the driver refuses it).
                let len = len.min((SLOT as u64 - off) as u32 / 2);
                let lkey = self.choose_key(if read { Need::Write } else { Need::Read });
                sges.push(Sge {
                    addr: base + off,
                    length: len,
                    lkey,
                });
                off += len as u64;
            }
            let bytes = self.random_bytes(off as usize);
            self.mem.write_bytes(s * SLOT, &bytes);
            bytes
        };
        let remote = matches!(
            opcode,
            wqe::OPCODE_RDMA_WRITE | wqe::OPCODE_RDMA_WRITE_IMM | wqe::OPCODE_RDMA_READ
        )
        .then(|| {
            let room = RDMA_LEN.saturating_sub(payload.len()) as u64;
            let raddr = self.m.rdma_base + self.rng.below(room + 1);
            let need = if read { Need::RemoteRead } else { Need::Remote };
            (raddr, self.choose_key(need))
        });
        let wr_id = self.next_wr;
        self.next_wr += 1;
        let gather = (!inline).then(|| {
            sges.iter()
                .map(|s| Seg {
                    addr: s.addr,
                    len: s.length,
                    lkey: s.lkey,
                })
                .collect()
        });
        Some(Planned {
            wr: Wr {
                wr_id,
                opcode,
                operands: (0, 0),
                imm: self.rng.next() as u32,
                remote,
                gather,
                payload,
                signaled: self.rng.below(4) != 0,
                index: 0,
                wqebbs: 0,
                slot,
            },
            sges,
            inline,
        })
    }

    /// An atomic: one 8-byte entry in a source slot (a key with or without
    /// local write), an 8-byte target in the RDMA area (now and then
    /// misaligned), a key with or without the atomic right.
    fn plan_atomic(&mut self, opcode: u8) -> Option<Planned> {
        let s = self.free_src.pop()?;
        let lkey = self.choose_key(Need::Write);
        let sges = vec![Sge {
            addr: self.mem.iova() + (s * SLOT) as u64,
            length: 8,
            lkey,
        }];
        // A few 8-byte words of the area, so atomics meet each other.
        let mut off = 8 * self.rng.below(4);
        if self.rng.below(12) == 0 {
            off += 1 + self.rng.below(7);
        }
        let raddr = self.m.rdma_base + off;
        let rkey = self.choose_key(Need::Atomic);
        // CMP_SWAP: half the time the value the area holds now.
        let at = off as usize;
        let mut now = [0u8; 8];
        now.copy_from_slice(&self.m.rdma[at..at + 8]);
        let compare = if self.rng.below(2) == 0 {
            u64::from_le_bytes(now)
        } else {
            self.rng.next()
        };
        let operands = (self.rng.next() >> self.rng.below(64), compare);
        let wr_id = self.next_wr;
        self.next_wr += 1;
        Some(Planned {
            wr: Wr {
                wr_id,
                opcode,
                operands,
                imm: 0,
                remote: Some((raddr, rkey)),
                gather: Some(vec![Seg {
                    addr: sges[0].addr,
                    len: 8,
                    lkey,
                }]),
                payload: vec![0; 8],
                signaled: self.rng.below(4) != 0,
                index: 0,
                wqebbs: 0,
                slot: Some(s),
            },
            sges,
            inline: false,
        })
    }

    pub(super) fn post_send(&mut self) {
        let with_sq: Vec<u32> = self
            .m
            .qps
            .values()
            .filter(|q| q.sq.is_some())
            .map(|q| q.qpn)
            .collect();
        // Mostly a QP whose connection works (both ends up, connected to
        // each other), so most messages get through.
        let healthy: Vec<u32> = with_sq
            .iter()
            .copied()
            .filter(|n| {
                let q = &self.m.qps[n];
                q.fw == super::model::Fw::Rts
                    && q.view == QpState::Rts
                    && self.m.qps.get(&q.remote).is_some_and(|t| {
                        t.remote == q.qpn
                            && t.receives()
                            && matches!(t.fw, super::model::Fw::Rtr | super::model::Fw::Rts)
                    })
            })
            .collect();
        let prefer = self.rng.below(8) != 0 && !healthy.is_empty();
        let qpn = match self.pick(if prefer { &healthy } else { &with_sq }) {
            Some(q) => q,
            None => return,
        };
        let k = if self.rng.below(8) == 0 {
            16
        } else {
            1 + self.rng.below(6) as usize
        };
        let mut plan = Vec::new();
        for _ in 0..k {
            match self.plan_wr(qpn) {
                Some(p) => plan.push(p),
                None => break,
            }
        }
        // What the driver accepts: the state first, then per request room,
        // gather count, inline size. Requests that could overrun a CQ are
        // not posted at all (the list is cut before them).
        let q = &self.m.qps[&qpn];
        let sq = q.sq.unwrap();
        let view = q.view;
        let mut out = q.drv_out;
        let mut expect = Ok(());
        let mut accepted = 0;
        let mut call_len = plan.len();
        let send_cq = q.send_cq.unwrap();
        let target_cq = self.m.qps.get(&q.remote).and_then(|t| t.rcq());
        let mut send_room = self.m.cqs[&send_cq].cap as i64 - self.m.reserved(send_cq) as i64;
        let mut recv_room =
            target_cq.map(|c| self.m.cqs[&c].cap as i64 - self.m.reserved(c) as i64);
        if !view.can_post_send() {
            expect = Err(PostSendFailure {
                index: 0,
                error: SendError::BadState { state: view },
            });
        } else {
            for (i, p) in plan.iter().enumerate() {
                let error = if out == sq.max_wr {
                    Some(SendError::Full)
                } else if !p.inline && p.sges.len() > sq.max_sge as usize {
                    Some(SendError::TooManySges {
                        given: p.sges.len(),
                        max: sq.max_sge,
                    })
                } else if p.inline && p.wr.payload.len() > sq.max_inline as usize {
                    Some(SendError::InlineTooLarge {
                        len: p.wr.payload.len(),
                        max: sq.max_inline,
                    })
                } else {
                    None
                };
                if let Some(error) = error {
                    expect = Err(PostSendFailure { index: i, error });
                    call_len = i + 1;
                    break;
                }
                let recv = !matches!(
                    p.wr.opcode,
                    wqe::OPCODE_RDMA_WRITE
                        | wqe::OPCODE_RDMA_READ
                        | wqe::OPCODE_ATOMIC_CS
                        | wqe::OPCODE_ATOMIC_FA
                ) && recv_room.is_some();
                let shared = recv && target_cq == Some(send_cq);
                send_room -= 1 + shared as i64;
                if recv && !shared {
                    *recv_room.as_mut().unwrap() -= 1;
                }
                if send_room < 0 || recv_room.is_some_and(|r| r < 0) {
                    call_len = i;
                    break;
                }
                out += 1;
                accepted += 1;
            }
        }
        for p in plan.drain(call_len..) {
            self.free_src.extend(p.wr.slot);
        }
        if plan.is_empty() {
            return;
        }
        // Number the accepted requests as the driver will.
        let mut cur = self.m.qps[&qpn].cur_post;
        for p in plan.iter_mut().take(accepted) {
            p.wr.index = cur;
            p.wr.wqebbs = wqebbs(&p.wr);
            cur = cur.wrapping_add(p.wr.wqebbs);
        }
        if self.threaded && accepted > 0 {
            // Nothing that would wait for a timer: its retry would run on
            // the device thread at a time the test does not know.
            let mut dry = self.m.clone();
            let q = dry.qps.get_mut(&qpn).unwrap();
            q.pending
                .extend(plan.iter().take(accepted).map(|p| p.wr.clone()));
            dry.doorbell(qpn);
            if dry.qps.values().any(|q| q.wait.is_some()) {
                for p in plan.drain(..) {
                    self.free_src.extend(p.wr.slot);
                }
                return;
            }
        }
        let reqs: Vec<SendRequest<'_>> = plan.iter().map(request).collect();
        let pre_len = self.m.cqs[&send_cq].q.len() as u32;
        let r = self.qps.get_mut(&qpn).expect("driver QP").post_send(&reqs);
        assert_eq!(
            r,
            expect,
            "{}: post_send of {} on QP {qpn:#x}",
            self.at,
            reqs.len()
        );
        if r.is_err() {
            self.stats.refusals += 1;
        }
        drop(reqs);
        for p in plan.drain(accepted..) {
            self.free_src.extend(p.wr.slot);
        }
        if plan.is_empty() {
            return;
        }
        self.stats.sends += plan.len() as u64;
        let q = self.m.qps.get_mut(&qpn).unwrap();
        q.cur_post = cur;
        q.drv_out += plan.len() as u32;
        q.pending.extend(plan.into_iter().map(|p| p.wr));
        self.m.doorbell(qpn);
        if self.threaded {
            self.in_flight(send_cq, pre_len);
        }
    }

    /// Threaded mode, right after a doorbell the device thread may not have
    /// taken yet: resize the send CQ (to a size accepted whether the new
    /// completions are already there or not) or poll it.
    fn in_flight(&mut self, cq: Id, pre_len: u32) {
        match self.rng.below(4) {
            0 => {
                let c = &self.m.cqs[&cq];
                let post_len = c.q.len() as u32;
                let old_nent = c.cap + 1;
                let floor = self.m.reserved(cq).max(post_len).max(pre_len);
                if post_len >= old_nent {
                    return;
                }
                let n = floor + self.rng.below(floor as u64 + 64) as u32;
                if (n + 1).next_power_of_two() == old_nent || n == 0 {
                    return;
                }
                self.resize_to(cq, n, false);
            }
            1 => {
                let k = 1 + self.rng.below(16) as usize;
                self.poll_cq(cq, k, false);
            }
            _ => {}
        }
    }
}

/// WQEBBs of a send WQE: control, remote address (RDMA), then one unit
/// per non-empty gather entry or the inline header and data in units.
fn wqebbs(w: &Wr) -> u16 {
    let atomic = matches!(w.opcode, wqe::OPCODE_ATOMIC_CS | wqe::OPCODE_ATOMIC_FA);
    let mut ds = 1 + w.remote.is_some() as usize + atomic as usize;
    ds += match &w.gather {
        Some(g) => g.iter().filter(|s| s.len > 0).count(),
        None if w.payload.is_empty() => 0,
        None => (4 + w.payload.len()).div_ceil(16),
    };
    (ds * 16).div_ceil(64) as u16
}

fn request(p: &Planned) -> SendRequest<'_> {
    let w = &p.wr;
    let op = match (w.opcode, w.remote) {
        (wqe::OPCODE_SEND, _) => SendOp::Send,
        (wqe::OPCODE_SEND_IMM, _) => SendOp::SendImm { imm: w.imm },
        (wqe::OPCODE_RDMA_WRITE, Some((raddr, rkey))) => SendOp::RdmaWrite { raddr, rkey },
        (wqe::OPCODE_RDMA_READ, Some((raddr, rkey))) => SendOp::RdmaRead { raddr, rkey },
        (wqe::OPCODE_ATOMIC_FA, Some((raddr, rkey))) => SendOp::AtomicFetchAdd {
            raddr,
            rkey,
            add: w.operands.0,
        },
        (wqe::OPCODE_ATOMIC_CS, Some((raddr, rkey))) => SendOp::AtomicCmpSwap {
            raddr,
            rkey,
            compare: w.operands.1,
            swap: w.operands.0,
        },
        (_, Some((raddr, rkey))) => SendOp::RdmaWriteImm {
            raddr,
            rkey,
            imm: w.imm,
        },
        _ => unreachable!("RDMA has a remote address"),
    };
    SendRequest {
        wr_id: w.wr_id,
        op,
        payload: if p.inline {
            Payload::Inline(&w.payload)
        } else {
            Payload::Sges(&p.sges)
        },
        signaled: w.signaled,
        solicited: false,
    }
}
