//! The reference of the QP random test: what the device and the driver must
//! do, written from the model's specification (docs/fidelity.md §9, §10 and
//! §14: send execution, loopback delivery, RNR and transport retries,
//! errors, flushes, events) and the IB semantics it cites, not from the
//! model's code. Pure data: the test drives the driver and this reference
//! side by side and compares every completion, event, refusal and the
//! device's QP state after every step.
//!
//! One simplification the test arranges rather than models: a retry timer
//! never expires inside a step. In synchronous mode the test lets device
//! time pass only between steps ([`Model::pump`], `Device::advance_us` past
//! every timer), so each waiting QP retries exactly once per pump, in QP
//! number order (the device's order). In threaded mode nothing is posted
//! that would wait.

use std::collections::{BTreeMap, VecDeque};

use mlx5_driver::eq::QpEvent;
use mlx5_regs::consts::wqe;
use mlx5_regs::CqeOpcode;

mod engine;

/// A stable id of a CQ or SRQ in one run.
pub type Id = usize;

/// A QP's state as firmware has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fw {
    /// RESET.
    Reset,
    /// INIT.
    Init,
    /// RTR.
    Rtr,
    /// RTS.
    Rts,
    /// ERR.
    Err,
}

/// A responder's saved READ or atomic (first PSN, packets, what).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RdRes {
    /// First PSN.
    pub first: u32,
    /// Packets (PSNs) it took.
    pub npkts: u32,
    /// A READ (address, key, length) or an atomic's original value.
    pub kind: ResKind,
}

/// What a saved request replays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResKind {
    /// Served again from memory.
    Read(u64, u32, u32),
    /// Answered with the saved original value.
    Atomic(u64),
}

/// Rights of a memory key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rights {
    /// Local read (send gather).
    pub lr: bool,
    /// Local write (receive scatter).
    pub lw: bool,
    /// Remote write (RDMA WRITE target).
    pub rw: bool,
    /// Remote read (RDMA READ source).
    pub rr: bool,
    /// Remote atomic (atomic target).
    pub a: bool,
}

/// What a key is used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Send gather.
    Read,
    /// Receive scatter.
    Write,
    /// RDMA WRITE target.
    Remote,
    /// RDMA READ source.
    RemoteRead,
    /// Atomic target.
    Atomic,
}

/// One scatter/gather entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seg {
    /// Device address.
    pub addr: u64,
    /// Bytes.
    pub len: u32,
    /// Key.
    pub lkey: u32,
}

/// A posted send work request.
#[derive(Debug, Clone)]
pub struct Wr {
    /// The caller's id.
    pub wr_id: u64,
    /// `MLX5_OPCODE_*`.
    pub opcode: u8,
    /// Immediate data.
    pub imm: u32,
    /// Atomics: (swap or add, compare).
    pub operands: (u64, u64),
    /// RDMA: remote address and key.
    pub remote: Option<(u64, u32)>,
    /// Gather list (`None`: inline).
    pub gather: Option<Vec<Seg>>,
    /// The message bytes.
    pub payload: Vec<u8>,
    /// Asked for a completion.
    pub signaled: bool,
    /// WQE index (producer counter at the WQE).
    pub index: u16,
    /// WQEBBs of the WQE.
    pub wqebbs: u16,
    /// Source slot of the gather buffers, freed once the WQE is done.
    pub slot: Option<usize>,
}

impl Wr {
    fn read(&self) -> bool {
        self.opcode == wqe::OPCODE_RDMA_READ
    }

    fn atomic(&self) -> bool {
        matches!(self.opcode, wqe::OPCODE_ATOMIC_CS | wqe::OPCODE_ATOMIC_FA)
    }

    fn rdma(&self) -> bool {
        matches!(
            self.opcode,
            wqe::OPCODE_RDMA_WRITE | wqe::OPCODE_RDMA_WRITE_IMM
        )
    }
}

/// A posted receive WQE.
#[derive(Debug, Clone)]
pub struct RecvWqe {
    /// The caller's id.
    pub wr_id: u64,
    /// Scatter list (every length ≥ 1).
    pub segs: Vec<Seg>,
    /// Buffer slot.
    pub slot: usize,
}

/// A completion the CQ must return next.
#[derive(Debug, Clone)]
pub enum Exp {
    /// Requester (REQ or REQ_ERR).
    Req {
        /// Sending QP.
        qpn: u32,
        /// Its incarnation (bumped by every 2RST).
        gen: u32,
        /// `wr_id` of the request.
        wr_id: u64,
        /// Send opcode posted.
        opcode: u8,
        /// WQE index.
        index: u16,
        /// Error syndrome, `None` on success.
        syndrome: Option<u8>,
        /// Work requests the CQE retires (1 + unsignaled ones before it).
        retired: u32,
        /// The request was signaled.
        signaled: bool,
    },
    /// Responder (RESP_* or RESP_ERR).
    Resp {
        /// Receiving QP.
        qpn: u32,
        /// Its incarnation.
        gen: u32,
        /// Sending QP.
        src_qpn: u32,
        /// The SRQ (id), `None` for the QP's own receive queue.
        srq: Option<Id>,
        /// SRQ number (0 for the QP's own receive queue).
        srqn: u32,
        /// The receive WQE.
        recv: RecvWqe,
        /// CQE opcode.
        opcode: CqeOpcode,
        /// Message length (success).
        len: u32,
        /// Immediate data (IMM opcodes).
        imm: u32,
        /// Error syndrome.
        syndrome: Option<u8>,
        /// Bytes that must be in the receive buffers (SEND, SEND_IMM).
        payload: Option<Vec<u8>>,
    },
}

/// An async event the driver must report next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpEvent {
    /// A QP event.
    Qp(u32, QpEvent),
    /// SRQ limit reached (SRQ number).
    Limit(u32),
}

/// A CQ.
#[derive(Debug, Clone)]
pub struct MCq {
    /// CQ number.
    pub cqn: u32,
    /// `Cq::capacity()`.
    pub cap: u32,
    /// Completions in the ring, oldest first.
    pub q: VecDeque<Exp>,
    /// Armed, no completion since.
    pub armed: bool,
    /// Completion events owed.
    pub events_due: u32,
    /// QPs and ISSI-0 SRQs reporting to it.
    pub users: u32,
}

/// An SRQ.
#[derive(Debug, Clone)]
pub struct MSrq {
    /// SRQ (RMP) number.
    pub srqn: u32,
    /// The CQ an ISSI-0 SRQ names.
    pub cq: Option<Id>,
    /// `Srq::max_wr()`.
    pub max_wr: u32,
    /// `Srq::max_sge()`.
    pub max_sge: u32,
    /// Posted, not consumed (the device's order).
    pub fifo: VecDeque<RecvWqe>,
    /// Consumed, completion not yet handed to the driver.
    pub consumed: u32,
    /// Armed limit (0: none).
    pub lwm: u32,
    /// Attached QPs.
    pub users: u32,
}

impl MSrq {
    /// What `Srq::outstanding()` says.
    pub fn outstanding(&self) -> u32 {
        self.fifo.len() as u32 + self.consumed
    }
}

/// A QP's own receive queue.
#[derive(Debug, Clone, Default)]
pub struct MRq {
    /// `RqGeometry::max_recv_wr`.
    pub max_wr: u32,
    /// `RqGeometry::max_recv_sge`.
    pub max_sge: u32,
    /// Posted, not consumed (the device takes them in order).
    pub fifo: VecDeque<RecvWqe>,
    /// Consumed (or flushed), completion not yet handed to the driver.
    pub consumed: u32,
}

impl MRq {
    /// What `Qp::outstanding_recvs()` says.
    pub fn outstanding(&self) -> u32 {
        self.fifo.len() as u32 + self.consumed
    }
}

/// Why a head WQE waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitKind {
    /// RNR NAK.
    Rnr,
    /// No ACK.
    Ack,
}

/// A waiting head WQE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    /// Why.
    pub kind: WaitKind,
    /// Retries left (`None`: forever).
    pub left: Option<u8>,
}

/// The send queue's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sq {
    /// Outstanding work requests allowed.
    pub max_wr: u32,
    /// Gather entries per request.
    pub max_sge: u32,
    /// Inline bytes per request.
    pub max_inline: u32,
    /// Ring size in WQEBBs.
    pub wqebbs: u32,
}

/// A QP.
#[derive(Debug, Clone)]
pub struct MQp {
    /// QP number.
    pub qpn: u32,
    /// Incarnation: bumped by every 2RST.
    pub gen: u32,
    /// Send queue.
    pub sq: Option<Sq>,
    /// Send CQ.
    pub send_cq: Option<Id>,
    /// The CQ given as `recv_cq` (not the send CQ).
    pub recv_cq: Option<Id>,
    /// SRQ.
    pub srq: Option<Id>,
    /// Its own receive queue (never with an SRQ).
    pub rq: Option<MRq>,
    /// Firmware state.
    pub fw: Fw,
    /// The state the driver reports (`Qp::state`), as a `QpState`.
    pub view: mlx5_driver::qp::QpState,
    /// Remote write allowed (RST2INIT).
    pub rwe: bool,
    /// Remote read allowed (RST2INIT).
    pub rre: bool,
    /// Remote atomic allowed (RST2INIT).
    pub rae: bool,
    /// The responder's saved READ or atomic: one, as `max_dest_rd_atomic`
    /// 0 (`log_rra_max` 0) keeps; forgotten at RESET and ERR.
    pub rd_res: Option<RdRes>,
    /// Peer (INIT2RTR).
    pub remote: u32,
    /// Next PSN sent.
    pub send_psn: u32,
    /// Next PSN expected.
    pub rcv_psn: u32,
    /// RNR timer code given to requesters.
    pub min_rnr: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (7: forever).
    pub rnr_retry: u8,
    /// Posted, not executed.
    pub pending: VecDeque<Wr>,
    /// The head waits.
    pub wait: Option<Wait>,
    /// Unsignaled successes since the last CQE.
    pub uncovered: u32,
    /// `Qp::outstanding_sends()`.
    pub drv_out: u32,
    /// The driver's producer counter.
    pub cur_post: u16,
    /// The device's consumer counter.
    pub sq_ci: u16,
    /// `Qp::last_wqe_reached()`.
    pub last_wqe: bool,
}

impl MQp {
    /// The CQ receive completions go to.
    pub fn rcq(&self) -> Option<Id> {
        self.receives()
            .then_some(self.recv_cq.or(self.send_cq))
            .flatten()
    }

    /// It takes receive WQEs (from an SRQ or its own receive queue).
    pub fn receives(&self) -> bool {
        self.srq.is_some() || self.rq.is_some()
    }
}

/// Counters to compare with the device's `TrafficStats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Messages delivered.
    pub messages: u64,
    /// RNR NAKs.
    pub rnr_naks: u64,
    /// ACK timeouts.
    pub ack_timeouts: u64,
    /// Flush CQEs.
    pub flushed: u64,
    /// RDMA READs a responder served (replays included; a zero-length
    /// READ reads nothing).
    pub reads: u64,
    /// Atomics a responder executed (never a replay).
    pub atomics: u64,
    /// Of the RNR NAKs, those of an empty own receive queue (the device
    /// does not count them apart).
    pub own_rq_rnr_naks: u64,
}

/// The whole reference.
#[derive(Debug, Clone)]
pub struct Model {
    /// The reserved lkey.
    pub reserved: u32,
    /// Live keys.
    pub keys: BTreeMap<u32, Rights>,
    /// CQs.
    pub cqs: BTreeMap<Id, MCq>,
    /// SRQs.
    pub srqs: BTreeMap<Id, MSrq>,
    /// QPs by number (the device retries waiting QPs in this order).
    pub qps: BTreeMap<u32, MQp>,
    /// Async events due, in order.
    pub events: VecDeque<ExpEvent>,
    /// Path MTU in bytes.
    pub mtu: u32,
    /// RDMA target area: device address and the bytes it must hold.
    pub rdma_base: u64,
    /// The bytes of the RDMA target area.
    pub rdma: Vec<u8>,
    /// Send source slots freed by execution (the test recycles them).
    pub freed_src: Vec<usize>,
    /// Traffic counters.
    pub counts: Counts,
}

impl Model {
    /// Is `key` good for `need` right now?
    pub fn key_ok(&self, key: u32, need: Need) -> bool {
        if key == self.reserved {
            // Identity translation; sends need qpc.rlky, which the driver sets.
            return !matches!(need, Need::Remote | Need::RemoteRead | Need::Atomic);
        }
        self.keys.get(&key).is_some_and(|r| match need {
            Need::Read => r.lr,
            Need::Write => r.lw,
            Need::Remote => r.rw,
            Need::RemoteRead => r.rr,
            Need::Atomic => r.a,
        })
    }

    fn push_cqe(&mut self, cq: Option<Id>, e: Exp) {
        let Some(c) = cq.and_then(|c| self.cqs.get_mut(&c)) else {
            return;
        };
        assert!(
            (c.q.len() as u32) <= c.cap,
            "test bug: CQ {:#x} would overrun ({} waiting, capacity {})",
            c.cqn,
            c.q.len(),
            c.cap
        );
        c.q.push_back(e);
        if c.armed {
            c.armed = false;
            c.events_due += 1;
        }
    }

    /// The driver removed QP `qpn`'s unpolled completions from its CQs
    /// (`qp_to_reset_and_clean`, as Linux does at 2RST); a receive
    /// completion's WQE went back to its SRQ; its own receive queue is
    /// emptied. Returns the receive buffer
    /// slots freed and how many completions were removed.
    pub fn remove_qp_cqes(&mut self, qpn: u32) -> (Vec<usize>, u32) {
        let q = &self.qps[&qpn];
        let mut cqs = vec![q.send_cq, q.rcq()];
        cqs.dedup();
        let mut slots = Vec::new();
        let mut removed = 0;
        for c in cqs.into_iter().flatten() {
            let Some(cq) = self.cqs.get_mut(&c) else {
                continue;
            };
            let old = std::mem::take(&mut cq.q);
            for e in old {
                match e {
                    Exp::Req { qpn: n, .. } if n == qpn => removed += 1,
                    Exp::Resp {
                        qpn: n, srq, recv, ..
                    } if n == qpn => {
                        if let Some(s) = srq.and_then(|s| self.srqs.get_mut(&s)) {
                            s.consumed -= 1;
                        }
                        slots.push(recv.slot);
                        removed += 1;
                    }
                    e => cq.q.push_back(e),
                }
            }
        }
        // Its own receive ring starts over empty (Linux `mlx5_ib_qp_reset`
        // / rdma-core reset the receive queue's head and tail at 2RST).
        if let Some(rq) = self.qps.get_mut(&qpn).and_then(|q| q.rq.as_mut()) {
            slots.extend(rq.fifo.drain(..).map(|r| r.slot));
            rq.consumed = 0;
        }
        (slots, removed)
    }

    /// CQEs this CQ may still receive from work already posted: every
    /// unexecuted send of a QP reporting to it (a success, an error or a
    /// flush each), and every unexecuted message to a QP receiving on it.
    pub fn future_cqes(&self, cq: Id) -> u32 {
        let mut n = 0;
        for q in self.qps.values() {
            if q.send_cq == Some(cq) {
                n += q.pending.len() as u32;
            }
            if let (Some(rq), true) = (&q.rq, q.rcq() == Some(cq)) {
                // Each a completion or a flush.
                n += rq.fifo.len() as u32;
            }
            let to_here = self.qps.get(&q.remote).is_some_and(|t| t.rcq() == Some(cq));
            if to_here {
                n += q
                    .pending
                    .iter()
                    .filter(|w| {
                        !matches!(
                            w.opcode,
                            wqe::OPCODE_RDMA_WRITE
                                | wqe::OPCODE_RDMA_READ
                                | wqe::OPCODE_ATOMIC_CS
                                | wqe::OPCODE_ATOMIC_FA
                        )
                    })
                    .count() as u32;
            }
        }
        n
    }

    /// Completions waiting plus those that may still come.
    pub fn reserved(&self, cq: Id) -> u32 {
        self.cqs[&cq].q.len() as u32 + self.future_cqes(cq)
    }
}
