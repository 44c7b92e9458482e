//! What the scenarios share: the model's wire (messages with checkable
//! payloads), posting receives, polling completions and events, creating
//! and destroying the CQ and SRQ.

use std::collections::VecDeque;

use mlx5_driver::cq::{Cq, CqOptions, Cqe, CqeStatus};
use mlx5_driver::srq::{LimitArm, RecvRequest, Sge, Srq};
use mlx5_driver::Event;
use mlx5_hal::{DmaRegion, Hal};
use mlx5_regs::CqeOpcode;
use mlx5_sim::{Delivery, Device};

use super::{Objects, Summary, BUF, NBUF, QPN};
use crate::error::CliError;
use crate::report::Report;
use crate::session::TracedHca;

pub(super) fn payload(seq: u64) -> Vec<u8> {
    let mut p = format!("mlx5 demo message {seq:05} ").into_bytes();
    let len = 32 + (seq as usize * 37) % (BUF - 32);
    let mut i = 0u8;
    while p.len() < len {
        p.push(b'a' + i % 26);
        i = i.wrapping_add(1);
    }
    p
}

/// Model traffic state: what was sent, in order.
pub(super) struct Wire<'d> {
    dev: &'d Device,
    seq: u64,
    pub(super) expect: VecDeque<(u64, Vec<u8>)>,
}

impl<'d> Wire<'d> {
    pub(super) fn new(dev: &'d Device) -> Self {
        Wire {
            dev,
            seq: 0,
            expect: VecDeque::new(),
        }
    }

    /// Deliver `n` messages through the SRQ.
    pub(super) fn deliver<H: Hal>(
        &mut self,
        srq: &Srq<H>,
        cq: &Cq<H>,
        n: u64,
        sum: &mut Summary,
    ) -> Result<(), CliError> {
        for _ in 0..n {
            let p = payload(self.seq);
            match self.dev.traffic().deliver(srq.srqn(), cq.cqn(), QPN, &p) {
                Ok(Delivery::Completed { .. }) => {
                    self.expect.push_back((self.seq, p));
                    sum.delivered += 1;
                }
                Ok(other) => {
                    return Err(CliError::check(format!(
                        "message {} was not received: the model says {other:?}",
                        self.seq
                    )))
                }
                Err(e) => return Err(CliError::failed(
                    format!("the model could not deliver message {}: {e}", self.seq),
                    "this is a model or tool bug; please report it with the output of `mlx5 trace`",
                )),
            }
            self.seq += 1;
        }
        Ok(())
    }
}

/// Poll every completion waiting, return each WQE to the SRQ and check it
/// against what was sent. Returns (first seq, last seq, count).
pub(super) fn poll_receives<H: Hal>(
    cq: &mut Cq<H>,
    srq: &mut Srq<H>,
    bufs: &DmaRegion<H>,
    wire: &mut Wire<'_>,
    next_wr: &mut VecDeque<u64>,
    sum: &mut Summary,
) -> Result<Vec<u64>, CliError> {
    let mut out = [Cqe::EMPTY; 16];
    let mut seqs = Vec::new();
    loop {
        let n = cq.poll(&mut out);
        if n == 0 {
            return Ok(seqs);
        }
        for c in &out[..n] {
            let wr_id = srq.complete(c.wqe_counter).map_err(|e| {
                CliError::check(format!(
                    "a completion names WQE {} which is not posted: {e:?}",
                    c.wqe_counter
                ))
            })?;
            let Some((seq, p)) = wire.expect.pop_front() else {
                sum.bad += 1;
                continue;
            };
            let mut data = vec![0u8; p.len()];
            bufs.read_bytes((wr_id as usize % NBUF) * BUF, &mut data);
            let in_order = next_wr.pop_front() == Some(wr_id);
            let good = c.opcode == CqeOpcode::RESP_SEND
                && c.status == CqeStatus::Success
                && c.byte_len as usize == p.len()
                && c.qpn == QPN
                && c.srqn == srq.srqn()
                && data == p
                && in_order;
            if good {
                sum.polled += 1;
            } else {
                sum.bad += 1;
            }
            seqs.push(seq);
        }
    }
}

pub(super) fn post<H: Hal>(
    hca: &TracedHca<'_, H>,
    srq: &mut Srq<H>,
    bufs: &DmaRegion<H>,
    ids: std::ops::Range<u64>,
    next_wr: &mut VecDeque<u64>,
) -> Result<(), CliError> {
    let sges: Vec<[Sge; 1]> = ids
        .clone()
        .map(|id| {
            [Sge {
                addr: bufs.iova() + (id as usize % NBUF * BUF) as u64,
                length: BUF as u32,
                lkey: hca.reserved_lkey(),
            }]
        })
        .collect();
    let reqs: Vec<RecvRequest<'_>> = sges
        .iter()
        .zip(ids.clone())
        .map(|(s, wr_id)| RecvRequest { wr_id, sges: s })
        .collect();
    srq.post(&reqs).map_err(|f| {
        CliError::failed(
            format!(
                "posting receive {} failed: {:?}",
                ids.start + f.index as u64,
                f.error
            ),
            "the SRQ is full or the request has too many scatter entries",
        )
    })?;
    next_wr.extend(ids);
    Ok(())
}

/// Poll the EQs once; returns (SRQ limit events for `srqn`, completion
/// events for `cqn`, other events).
pub(super) fn poll_eq<H: Hal>(
    hca: &TracedHca<'_, H>,
    srqn: Option<u32>,
    cqn: Option<u32>,
) -> Result<(u64, u64, Vec<Event>), CliError> {
    hca.poll_events()
        .map_err(|e| CliError::driver("polling the event queues", e))?;
    let (mut limit, mut comp, mut other) = (0, 0, Vec::new());
    while let Some(ev) = hca.next_event() {
        match ev {
            Event::SrqLimit { srqn: n } if Some(n) == srqn => limit += 1,
            e => other.push(e),
        }
    }
    while let Some(ev) = hca.next_completion() {
        match ev {
            Event::Completion { cqn: n } if Some(n) == cqn => comp += 1,
            e => other.push(e),
        }
    }
    Ok((limit, comp, other))
}

/// Receives still posted on the device: posted and not completed, minus
/// the completions waiting unpolled.
pub(super) fn left<H: Hal>(srq: &Srq<H>, cq: &Cq<H>) -> usize {
    srq.outstanding().saturating_sub(cq.pending())
}

pub(super) fn say_other(r: &mut Report, other: &[Event]) {
    for e in other {
        r.say(format!("other event: {e:?}"));
    }
}

pub(super) fn seq_range(seqs: &[u64]) -> String {
    match (seqs.first(), seqs.last()) {
        (Some(a), Some(b)) => format!("messages {a}..={b}"),
        _ => "nothing".into(),
    }
}

pub(super) fn arm_text(a: LimitArm) -> &'static str {
    match a {
        LimitArm::Armed => "armed",
        LimitArm::Disarmed => "disarmed",
        LimitArm::RaiseNow => {
            "firmware did not fire although fewer WQEs are posted than the limit: the driver disarmed it and raises the event itself"
        }
    }
}

pub(super) fn create_cq_and_srq<H: Hal>(
    hca: &TracedHca<'_, H>,
    objs: &mut Objects<H>,
    cq_entries: u32,
    srq_wr: u32,
    r: &mut Report,
) -> Result<(), CliError> {
    let mut cq = hca
        .create_cq(cq_entries, CqOptions::default())
        .map_err(|e| CliError::driver("creating the CQ", e))?;
    r.say(format!(
        "CQ {:#x}: {} entries (ring of 2^{} 64-byte CQEs) reporting to completion EQ {}",
        cq.cqn(),
        cq.capacity(),
        cq.log_size(),
        cq.eqn()
    ));
    r.set("cqn", cq.cqn());
    r.set("cq_capacity", cq.capacity());
    let srq = hca.create_srq(srq_wr, 1, Some(&mut cq));
    objs.cq = Some(cq);
    let srq = srq.map_err(|e| CliError::driver("creating the SRQ", e))?;
    r.say(format!(
        "{} {:#x}: {} receive WQEs of {} scatter entry each{}",
        if srq.is_rmp() { "RMP" } else { "SRQ" },
        srq.srqn(),
        srq.max_wr(),
        srq.max_sge(),
        if srq.is_rmp() {
            " (CREATE_RMP: the device runs ISSI 1)"
        } else {
            " (CREATE_SRQ: the device runs ISSI 0)"
        }
    ));
    r.set("srqn", srq.srqn());
    r.set("srq_is_rmp", srq.is_rmp());
    r.set("srq_max_wr", srq.max_wr());
    objs.srq = Some(srq);
    let bufs = hca.hal().alloc_dma(NBUF * BUF).map_err(|e| {
        CliError::failed(
            format!("no DMA memory for receive buffers: {e}"),
            "on hardware raise the locked-memory limit (ulimit -l)",
        )
    })?;
    r.say(format!(
        "{NBUF} receive buffers of {BUF} bytes in DMA memory at IOVA {:#x}",
        bufs.iova()
    ));
    objs.bufs = Some(bufs);
    Ok(())
}

pub(super) fn destroy_all<H: Hal>(
    hca: &TracedHca<'_, H>,
    objs: &mut Objects<H>,
    model: Option<&Device>,
    r: &mut Report,
) -> Result<(), CliError> {
    if let Some(srq) = objs.srq.take() {
        let srqn = srq.srqn();
        let rmp = srq.is_rmp();
        if let Err(failed) = hca.destroy_srq(srq, objs.cq.as_mut()) {
            let (srq, e) = failed.into_parts();
            objs.srq = Some(srq);
            return Err(CliError::driver("destroying the SRQ", e));
        }
        r.say(format!(
            "{} {srqn:#x} destroyed",
            if rmp {
                "DESTROY_RMP: RMP"
            } else {
                "DESTROY_SRQ: SRQ"
            }
        ));
    }
    if let Some(cq) = objs.cq.take() {
        let cqn = cq.cqn();
        if let Err(failed) = hca.destroy_cq(cq) {
            let (cq, e) = failed.into_parts();
            objs.cq = Some(cq);
            return Err(CliError::driver("destroying the CQ", e));
        }
        r.say(format!("DESTROY_CQ: CQ {cqn:#x} destroyed"));
    }
    objs.bufs = None;
    if let Some(dev) = model {
        let o = dev.objects();
        r.say(format!(
            "the model now holds {} CQs and {} SRQs/RMPs (the EQs, UAR and PD of bring-up remain)",
            o.cqs,
            o.srqs + o.rmps
        ));
        r.set("model_cqs", o.cqs);
        r.set("model_srqs", o.srqs + o.rmps);
    }
    Ok(())
}
