//! Shared pieces of the QP random test's object operations (a QP's CQs and
//! SRQ taken out for a call, the injected-failure check) and memory keys,
//! created and destroyed with every outcome predicted.

use mlx5_driver::cq::Cq;
use mlx5_driver::mkey::MkeyAccess;
use mlx5_driver::qp::QpLinks;
use mlx5_driver::srq::Srq;
use mlx5_driver::Error;
use mlx5_regs::{CmdStatus, Opcode};
use mlx5_sim::SimHal;

use super::model::{Id, Rights};
use super::Run;

/// Live memory keys at most.
const MAX_KEYS: usize = 4;

/// A QP's CQs and SRQ, taken out of the run's maps for a call that needs
/// them (`QpLinks`), and put back afterwards.
pub(super) struct Taken {
    send: Option<(Id, Cq<SimHal>)>,
    recv: Option<(Id, Cq<SimHal>)>,
    srq: Option<(Id, Srq<SimHal>)>,
}

impl Taken {
    /// The links the QP was created with, or (`wrong`) its CQs swapped and
    /// no SRQ, which never match.
    pub(super) fn links(&mut self, wrong: bool) -> QpLinks<'_, SimHal> {
        let send = self.send.as_mut().map(|(_, c)| c);
        let recv = self.recv.as_mut().map(|(_, c)| c);
        if wrong {
            QpLinks {
                send_cq: recv,
                recv_cq: send,
                srq: None,
            }
        } else {
            QpLinks {
                send_cq: send,
                recv_cq: recv,
                srq: self.srq.as_mut().map(|(_, s)| s),
            }
        }
    }
}

/// The firmware failure an injected fault produces.
pub(super) fn injected(e: &Error, op: Opcode) -> bool {
    matches!(e, Error::Command { opcode, status, syndrome: 0xfa17, .. }
        if *opcode == op && *status == CmdStatus::BAD_PARAM_ERR)
}

impl Run {
    pub(super) fn take_links(&mut self, qpn: u32) -> Taken {
        let q = &self.m.qps[&qpn];
        let (s, r, x) = (q.send_cq, q.recv_cq, q.srq);
        Taken {
            send: s.map(|id| (id, self.cqs.remove(&id).expect("driver CQ"))),
            recv: r.map(|id| (id, self.cqs.remove(&id).expect("driver CQ"))),
            srq: x.map(|id| (id, self.srqs.remove(&id).expect("driver SRQ"))),
        }
    }

    pub(super) fn put_links(&mut self, t: Taken) {
        for (id, c) in [t.send, t.recv].into_iter().flatten() {
            self.cqs.insert(id, c);
        }
        if let Some((id, s)) = t.srq {
            self.srqs.insert(id, s);
        }
    }

    pub(super) fn create_key(&mut self) {
        if self.mkeys.len() >= MAX_KEYS {
            return;
        }
        let mut access = MkeyAccess::empty();
        let r = Rights {
            lr: self.rng.below(2) == 0,
            lw: self.rng.below(2) == 0,
            rw: self.rng.below(3) != 0,
            rr: self.rng.below(3) != 0,
            a: self.rng.below(3) != 0,
        };
        if r.lr {
            access |= MkeyAccess::LOCAL_READ;
        }
        if r.lw {
            access |= MkeyAccess::LOCAL_WRITE;
        }
        if r.rw {
            access |= MkeyAccess::REMOTE_WRITE;
        }
        if r.rr {
            access |= MkeyAccess::REMOTE_READ;
        }
        if r.a {
            access |= MkeyAccess::REMOTE_ATOMIC;
        }
        let fault = !access.is_empty() && self.maybe_fault(Opcode::CREATE_MKEY);
        // A translated key over the run's one buffer (every slot and the
        // RDMA area lie in it), as `ibv_reg_mr` makes.
        let (at, len) = (self.mem.iova(), self.mem.len() as u64);
        match self.hca.register(at, len, access) {
            Ok(k) => {
                assert!(
                    !access.is_empty() && !fault,
                    "{}: create_mkey accepted",
                    self.at
                );
                self.m.keys.insert(k.key(), r);
                self.mkeys.push(k);
            }
            Err(e) => {
                if access.is_empty() {
                    assert!(matches!(e, Error::InvalidArgument(_)), "{}: {e}", self.at);
                } else {
                    assert!(
                        fault && injected(&e, Opcode::CREATE_MKEY),
                        "{}: {e}",
                        self.at
                    );
                }
                self.stats.refusals += 1;
            }
        }
    }

    pub(super) fn destroy_key(&mut self) {
        if self.mkeys.is_empty() {
            return;
        }
        let i = self.rng.below(self.mkeys.len() as u64) as usize;
        let fault = self.maybe_fault(Opcode::DESTROY_MKEY);
        let k = self.mkeys.swap_remove(i);
        let key = k.key();
        match self.hca.destroy_mkey(k) {
            Ok(()) => {
                assert!(!fault, "{}: destroy_mkey despite the failure", self.at);
                // Work already posted with it fails when it executes.
                self.m.keys.remove(&key);
                self.dead_keys.push(key);
            }
            Err(d) => {
                let (k, e) = d.into_parts();
                assert!(
                    fault && injected(&e, Opcode::DESTROY_MKEY),
                    "{}: {e}",
                    self.at
                );
                self.stats.refusals += 1;
                self.mkeys.push(k);
            }
        }
    }
}
