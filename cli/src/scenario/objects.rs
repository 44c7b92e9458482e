//! The objects a traffic run owns (send and receive CQ, SRQ, the sender
//! and the SRQ-attached receiver QP, an optional memory key, the buffers),
//! how they are created, and how they are destroyed in dependency order
//! (QPs first: a CQ or SRQ a QP still uses is refused with `Busy`).

use mlx5_driver::cq::{Cq, CqOptions};
use mlx5_driver::mkey::Mkey;
use mlx5_driver::qp::{Qp, QpLinks, QpState, SendQueueCaps, SendSlot};
use mlx5_driver::srq::Srq;
use mlx5_hal::{DmaRegion, Hal};

use crate::common::error::CliError;
use crate::common::session::TracedHca;

/// Bytes per buffer slot (one message at most).
pub const BUF: usize = 256;
/// Slots per buffer region (receive wr_ids and message numbers modulo).
pub const NBUF: usize = 64;
/// Send work requests the sender QP holds.
pub const SEND_WR: u32 = 64;

/// The sender QP's type: a send table of its own.
pub type SenderQp<H> = Qp<H, Vec<SendSlot>>;

/// What a run owns; whatever is left after a failure is destroyed before
/// teardown ([`Objects::destroy`]).
pub struct Objects<H: Hal> {
    /// The sender's send CQ.
    pub scq: Option<Cq<H>>,
    /// The receive CQ (the SRQ's and the receiver QP's).
    pub rcq: Option<Cq<H>>,
    /// The shared receive queue (an RMP at ISSI 1).
    pub srq: Option<Srq<H>>,
    /// A memory key of the run's own (selftest: the RDMA WRITE target's).
    pub key: Option<Mkey>,
    /// The sending QP.
    pub sender: Option<SenderQp<H>>,
    /// The receive-only QP on the SRQ.
    pub receiver: Option<Qp<H>>,
    /// Send buffers, [`NBUF`] slots of [`BUF`] bytes.
    pub sbufs: Option<DmaRegion<H>>,
    /// Receive buffers, [`NBUF`] slots of [`BUF`] bytes.
    pub rbufs: Option<DmaRegion<H>>,
    /// RDMA WRITE target buffer, [`NBUF`] slots of [`BUF`] bytes.
    pub tbufs: Option<DmaRegion<H>>,
}

/// Mutable access to every object of a connected pair at once.
pub struct Parts<'a, H: Hal> {
    /// Send CQ.
    pub scq: &'a mut Cq<H>,
    /// Receive CQ.
    pub rcq: &'a mut Cq<H>,
    /// SRQ.
    pub srq: &'a mut Srq<H>,
    /// Sender.
    pub sender: &'a mut SenderQp<H>,
    /// Receiver.
    pub receiver: &'a mut Qp<H>,
    /// Send buffers.
    pub sbufs: &'a DmaRegion<H>,
    /// Receive buffers.
    pub rbufs: &'a DmaRegion<H>,
    /// RDMA WRITE target and its key, when the run made them.
    pub target: Option<(&'a DmaRegion<H>, u32)>,
}

impl<H: Hal> Objects<H> {
    /// Nothing yet.
    pub fn new() -> Self {
        Objects {
            scq: None,
            rcq: None,
            srq: None,
            key: None,
            sender: None,
            receiver: None,
            sbufs: None,
            rbufs: None,
            tbufs: None,
        }
    }

    /// Every object of a connected pair, or an internal error naming what
    /// is missing (a step ran before the one that creates it).
    pub fn parts(&mut self) -> Result<Parts<'_, H>, CliError> {
        let missing = |what: &str| {
            CliError::failed(
                format!("internal error: no {what} at this step"),
                "this is a bug in mlx5; please report it with the output of `mlx5 trace`",
            )
        };
        let target = match (&self.tbufs, &self.key) {
            (Some(b), Some(k)) => Some((b, k.key())),
            _ => None,
        };
        Ok(Parts {
            scq: self.scq.as_mut().ok_or_else(|| missing("send CQ"))?,
            rcq: self.rcq.as_mut().ok_or_else(|| missing("receive CQ"))?,
            srq: self.srq.as_mut().ok_or_else(|| missing("SRQ"))?,
            sender: self.sender.as_mut().ok_or_else(|| missing("sender QP"))?,
            receiver: self
                .receiver
                .as_mut()
                .ok_or_else(|| missing("receiver QP"))?,
            sbufs: self.sbufs.as_ref().ok_or_else(|| missing("send buffer"))?,
            rbufs: self
                .rbufs
                .as_ref()
                .ok_or_else(|| missing("receive buffer"))?,
            target,
        })
    }

    /// Destroy everything left, in dependency order, each step attempted
    /// once. Returns one line per object (destroyed, or why not) and the
    /// first error.
    pub fn destroy(&mut self, hca: &TracedHca<'_, H>) -> (Vec<String>, Result<(), CliError>) {
        let mut lines = Vec::new();
        let mut first: Option<CliError> = None;
        let mut note = |lines: &mut Vec<String>, r: Result<String, (String, CliError)>| match r {
            Ok(l) => lines.push(l),
            Err((l, e)) => {
                lines.push(l);
                first.get_or_insert(e);
            }
        };
        if let Some(qp) = self.sender.take() {
            let n = qp.qpn();
            let links = QpLinks {
                send_cq: self.scq.as_mut(),
                ..QpLinks::default()
            };
            let r = match hca.destroy_qp(qp, links) {
                Ok(_) => Ok(format!("DESTROY_QP: sender QP {n:#x} destroyed")),
                Err(failed) => {
                    let (qp, e) = failed.into_parts();
                    self.sender = Some(qp);
                    Err((
                        format!("could not destroy QP {n:#x} ({e})"),
                        CliError::driver("destroying the sender QP", e),
                    ))
                }
            };
            note(&mut lines, r);
        }
        if let Some(qp) = self.receiver.take() {
            let n = qp.qpn();
            let links = QpLinks {
                recv_cq: self.rcq.as_mut(),
                srq: self.srq.as_mut(),
                ..QpLinks::default()
            };
            let r = match hca.destroy_qp(qp, links) {
                Ok(_) => Ok(format!("DESTROY_QP: receiver QP {n:#x} destroyed")),
                Err(failed) => {
                    let (qp, e) = failed.into_parts();
                    self.receiver = Some(qp);
                    Err((
                        format!("could not destroy QP {n:#x} ({e})"),
                        CliError::driver("destroying the receiver QP", e),
                    ))
                }
            };
            note(&mut lines, r);
        }
        if let Some(srq) = self.srq.take() {
            let (n, rmp) = (srq.srqn(), srq.is_rmp());
            let name = if rmp { "RMP" } else { "SRQ" };
            let r = match hca.destroy_srq(srq, self.rcq.as_mut()) {
                Ok(()) => Ok(format!("DESTROY_{name}: {name} {n:#x} destroyed")),
                Err(failed) => {
                    let (srq, e) = failed.into_parts();
                    self.srq = Some(srq);
                    Err((
                        format!("could not destroy {name} {n:#x} ({e})"),
                        CliError::driver("destroying the SRQ", e),
                    ))
                }
            };
            note(&mut lines, r);
        }
        for (slot, what) in [(&mut self.scq, "send CQ"), (&mut self.rcq, "receive CQ")] {
            if let Some(cq) = slot.take() {
                let n = cq.cqn();
                let r = match hca.destroy_cq(cq) {
                    Ok(()) => Ok(format!("DESTROY_CQ: {what} {n:#x} destroyed")),
                    Err(failed) => {
                        let (cq, e) = failed.into_parts();
                        *slot = Some(cq);
                        Err((
                            format!("could not destroy {what} {n:#x} ({e})"),
                            CliError::driver(format!("destroying the {what}"), e),
                        ))
                    }
                };
                note(&mut lines, r);
            }
        }
        if let Some(key) = self.key.take() {
            let k = key.key();
            let r = match hca.destroy_mkey(key) {
                Ok(()) => Ok(format!("DESTROY_MKEY: key {k:#x} destroyed")),
                Err(failed) => {
                    let (key, e) = failed.into_parts();
                    self.key = Some(key);
                    Err((
                        format!("could not destroy key {k:#x} ({e})"),
                        CliError::driver("destroying the memory key", e),
                    ))
                }
            };
            note(&mut lines, r);
        }
        // Buffers only after the objects that point at them.
        if self.sender.is_none() && self.receiver.is_none() && self.srq.is_none() {
            self.sbufs = None;
            self.rbufs = None;
            self.tbufs = None;
        }
        (lines, first.map_or(Ok(()), Err))
    }
}

/// DMA memory for `NBUF` slots of `BUF` bytes.
pub fn alloc_bufs<H: Hal>(hca: &TracedHca<'_, H>, what: &str) -> Result<DmaRegion<H>, CliError> {
    hca.hal().alloc_dma(NBUF * BUF).map_err(|e| {
        CliError::failed(
            format!("no DMA memory for the {what}: {e}"),
            "on hardware raise the locked-memory limit (ulimit -l)",
        )
    })
}

/// A CQ of `entries` completions.
pub fn create_cq<H: Hal>(
    hca: &TracedHca<'_, H>,
    entries: u32,
    what: &str,
) -> Result<Cq<H>, CliError> {
    hca.create_cq(entries, CqOptions::default())
        .map_err(|e| CliError::driver(format!("creating the {what}"), e))
}

/// The SRQ (an RMP at ISSI 1) of `wr` receive WQEs with one scatter entry,
/// reporting to `rcq`.
pub fn create_srq<H: Hal>(
    hca: &TracedHca<'_, H>,
    wr: u32,
    rcq: &mut Cq<H>,
) -> Result<Srq<H>, CliError> {
    hca.create_srq(wr, 1, Some(rcq))
        .map_err(|e| CliError::driver("creating the SRQ", e))
}

/// Create the sender (a send queue of [`SEND_WR`] requests, `inline` bytes
/// of inline data, completions on the send CQ) and the receiver (no send
/// queue, receives through the SRQ into the receive CQ), and connect them
/// to each other in the loopback mode bring-up chose.
pub fn create_pair<H: Hal>(
    hca: &TracedHca<'_, H>,
    objs: &mut Objects<H>,
    inline: u32,
) -> Result<(), CliError> {
    let caps = SendQueueCaps {
        max_send_wr: SEND_WR,
        max_send_sge: 1,
        max_inline_data: inline,
    };
    let geo = hca
        .send_queue_geometry(&caps)
        .map_err(|e| CliError::driver("sizing the send queue", e))?;
    let (Some(scq), Some(rcq), Some(srq)) = (&mut objs.scq, &mut objs.rcq, &mut objs.srq) else {
        return Err(CliError::failed(
            "internal error: the QPs need the CQs and the SRQ first",
            "this is a bug in mlx5; please report it",
        ));
    };
    let links = QpLinks {
        send_cq: Some(scq),
        ..QpLinks::default()
    };
    let sender = hca
        .create_qp(Some(caps), links, vec![SendSlot::EMPTY; geo.wqebbs()])
        .map_err(|e| CliError::driver("creating the sender QP", e))?;
    let sender = objs.sender.insert(sender);
    let links = QpLinks {
        recv_cq: Some(rcq),
        srq: Some(srq),
        ..QpLinks::default()
    };
    let receiver = hca
        .create_qp(None, links, [])
        .map_err(|e| CliError::driver("creating the receiver QP", e))?;
    let receiver = objs.receiver.insert(receiver);
    hca.connect_loopback_pair(sender, receiver)
        .map_err(|e| CliError::driver("connecting the QPs (RST2INIT, INIT2RTR, RTR2RTS)", e))
}

/// The IB name of a QP state (`RTS`).
pub fn state_name(s: QpState) -> String {
    match s {
        QpState::Reset => "RESET".into(),
        QpState::Init => "INIT".into(),
        QpState::Rtr => "RTR".into(),
        QpState::Rts => "RTS".into(),
        QpState::SqError => "SQE".into(),
        QpState::SqDrained => "SQD".into(),
        QpState::Error => "ERR".into(),
        QpState::Unknown(x) => format!("unknown state {x}"),
    }
}
