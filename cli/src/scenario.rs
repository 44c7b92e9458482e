//! The scenarios: the demo (the whole mission), and the smaller `limit` and
//! `resize` scenarios for `trace` and `stats`. Each brings the HCA up,
//! works, destroys what it made, tears down and checks that nothing was
//! lost. On the model, traffic is injected; on hardware the steps that
//! need traffic say what they would need and are skipped.

use std::collections::VecDeque;

use mlx5_driver::cq::{Cq, CqOptions, Cqe, CqeStatus};
use mlx5_driver::srq::{LimitArm, RecvRequest, Sge, Srq};
use mlx5_driver::Event;
use mlx5_hal::{DmaRegion, Hal};
use mlx5_regs::CqeOpcode;
use mlx5_sim::{Delivery, Device};
use serde_json::{json, Value};

use crate::error::CliError;
use crate::report::Report;
use crate::session::{bring_up, narrate_bring_up, teardown, Env, TeardownSummary, TracedHca};
use crate::trace::Tracer;

/// Which scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// The whole demo.
    Demo,
    /// CQ resize with completions waiting.
    Resize,
    /// SRQ limit event, through EQ polling, and re-arm.
    Limit,
}

impl Scenario {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Demo => "demo",
            Scenario::Resize => "resize",
            Scenario::Limit => "limit",
        }
    }
}

/// Bytes per receive buffer.
const BUF: usize = 256;
/// Receive buffers (and the largest wr_id + 1).
const NBUF: usize = 64;
/// The QP number the model's messages report.
const QPN: u32 = 0x99;

const NO_TRAFFIC: &str = "a real ConnectX receives into an SRQ only through a QP attached to it and a peer sending on the link; this driver does not create QPs yet, so the traffic steps run on the model only (--device sim)";

/// What a scenario did.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Scenario name.
    pub scenario: &'static str,
    /// Traffic was injected (model) — false on hardware.
    pub traffic: bool,
    /// Messages (or send completions) the model delivered.
    pub delivered: u64,
    /// Completions polled and checked.
    pub polled: u64,
    /// Completions with a wrong payload, wr_id, order or status.
    pub bad: u64,
    /// SRQ limit events seen through EQ polling.
    pub limit_events: u64,
    /// The limit was re-armed after its event.
    pub limit_rearmed: bool,
    /// Completion events seen through EQ polling.
    pub comp_events: u64,
    /// CQ resize: (capacity before, capacity after, completions waiting).
    pub resize: Option<(u32, u32, usize)>,
    /// Teardown result.
    pub teardown: TeardownSummary,
}

impl Summary {
    /// Completions that never came back.
    pub fn lost(&self) -> u64 {
        self.delivered.saturating_sub(self.polled)
    }

    /// JSON form.
    pub fn to_json(&self) -> Value {
        json!({
            "scenario": self.scenario,
            "traffic": self.traffic,
            "delivered": self.delivered,
            "polled": self.polled,
            "lost": self.lost(),
            "bad": self.bad,
            "limit_events": self.limit_events,
            "limit_rearmed": self.limit_rearmed,
            "completion_events": self.comp_events,
            "resize": self.resize.map(|(a, b, w)| json!({"from": a, "to": b, "waiting": w})),
            "pages_given": self.teardown.pages_given,
            "pages_returned": self.teardown.pages_returned,
            "pages_left": self.teardown.pages_left,
            "all_pages_returned": self.teardown.pages_left == 0
                && self.teardown.pages_given == self.teardown.pages_returned,
            "model_objects_left": self.teardown.model_objects,
            "violations": self.teardown.violations,
        })
    }
}

/// Objects a scenario owns; whatever is left after a failure is destroyed
/// before teardown.
struct Objects<H: Hal> {
    cq: Option<Cq<H>>,
    srq: Option<Srq<H>>,
    bufs: Option<DmaRegion<H>>,
}

impl<H: Hal> Objects<H> {
    fn new() -> Self {
        Objects {
            cq: None,
            srq: None,
            bufs: None,
        }
    }
}

fn cleanup<H: Hal>(hca: &TracedHca<'_, H>, objs: &mut Objects<H>) {
    if let Some(srq) = objs.srq.take() {
        let _ = hca.destroy_srq(srq, objs.cq.as_mut());
    }
    if let Some(cq) = objs.cq.take() {
        let _ = hca.destroy_cq(cq);
    }
    objs.bufs = None;
}

/// Run a scenario end to end.
pub fn run<H: Hal>(
    which: Scenario,
    hal: H,
    env: &Env<'_>,
    t: &Tracer,
    r: &mut Report,
) -> Result<Summary, CliError> {
    r.step("bring-up", "Bring-up");
    let (hca, waited) = bring_up(hal, env, t, r)?;
    narrate_bring_up(&hca, waited, t, r);
    let mut objs = Objects::new();
    let mut sum = Summary {
        scenario: which.name(),
        ..Summary::default()
    };
    let body = match which {
        Scenario::Demo => demo(&hca, &mut objs, env.model, r, &mut sum),
        Scenario::Limit => limit(&hca, &mut objs, env.model, r, &mut sum),
        Scenario::Resize => resize(&hca, &mut objs, env.model, r, &mut sum),
    };
    if body.is_err() {
        cleanup(&hca, &mut objs);
    }
    r.step("teardown", "Tear down");
    let td = teardown(hca, env, r);
    body?;
    sum.teardown = td?;
    Ok(sum)
}

/// Print the summary and turn failed checks into an error.
pub fn conclude(sum: &Summary, env: &Env<'_>, t: &Tracer, r: &mut Report) -> Result<(), CliError> {
    let stats = t.stats();
    let failed: u64 = stats.iter().map(|s| s.failures).sum();
    let td = &sum.teardown;
    let pages_ok = td.pages_left == 0 && td.pages_given == td.pages_returned;
    r.heading("Summary");
    r.say(format!("device           {}", env.target.describe()));
    r.say(format!(
        "commands         {} sent, {} failed",
        stats.total(),
        failed
    ));
    if sum.traffic {
        r.say(format!(
            "completions      {} delivered, {} polled and checked, {} lost, {} wrong",
            sum.delivered,
            sum.polled,
            sum.lost(),
            sum.bad
        ));
    } else {
        r.say("completions      traffic skipped (no QP on hardware: see above)");
    }
    if sum.scenario != "resize" {
        r.say(format!(
            "SRQ limit        {} event(s) through EQ polling{}",
            sum.limit_events,
            if sum.limit_rearmed { ", re-armed" } else { "" }
        ));
    }
    if let Some((a, b, w)) = sum.resize {
        r.say(format!(
            "CQ resize        {a} -> {b} entries with {w} completions waiting, {} lost",
            if sum.traffic { sum.lost() } else { 0 }
        ));
    }
    r.say(format!(
        "firmware pages   {} given, {} returned, {} still held{}",
        td.pages_given,
        td.pages_returned,
        td.pages_left,
        if pages_ok { ": all returned" } else { "" }
    ));
    if let Some(o) = td.model_objects {
        r.say(format!(
            "model            {} objects left, {} violations",
            o,
            td.violations.len()
        ));
    }
    let mut problems = Vec::new();
    if sum.lost() > 0 {
        problems.push(format!("{} completions lost", sum.lost()));
    }
    if sum.bad > 0 {
        problems.push(format!("{} completions wrong", sum.bad));
    }
    if sum.traffic && sum.scenario != "resize" && sum.limit_events == 0 {
        problems.push("the SRQ limit event never arrived".into());
    }
    if !pages_ok {
        problems.push(format!(
            "firmware pages not all returned ({} given, {} returned)",
            td.pages_given, td.pages_returned
        ));
    }
    if !td.clean() && pages_ok {
        problems.push(format!(
            "the model reports {} objects, {} pages left and {} violations",
            td.model_objects.unwrap_or(0),
            td.model_pages_held.unwrap_or(0),
            td.violations.len()
        ));
    }
    let ok = problems.is_empty();
    r.say(format!(
        "result           {}",
        if ok {
            "OK".to_string()
        } else {
            format!("FAILED: {}", problems.join("; "))
        }
    ));
    if ok {
        Ok(())
    } else {
        Err(CliError::check(problems.join("; ")))
    }
}

// ------------------------------------------------------------ helpers

fn payload(seq: u64) -> Vec<u8> {
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
struct Wire<'d> {
    dev: &'d Device,
    seq: u64,
    expect: VecDeque<(u64, Vec<u8>)>,
}

impl<'d> Wire<'d> {
    fn new(dev: &'d Device) -> Self {
        Wire {
            dev,
            seq: 0,
            expect: VecDeque::new(),
        }
    }

    /// Deliver `n` messages through the SRQ.
    fn deliver<H: Hal>(
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
fn poll_receives<H: Hal>(
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

fn post<H: Hal>(
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
fn poll_eq<H: Hal>(
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
fn left<H: Hal>(srq: &Srq<H>, cq: &Cq<H>) -> usize {
    srq.outstanding().saturating_sub(cq.pending())
}

fn say_other(r: &mut Report, other: &[Event]) {
    for e in other {
        r.say(format!("other event: {e:?}"));
    }
}

fn seq_range(seqs: &[u64]) -> String {
    match (seqs.first(), seqs.last()) {
        (Some(a), Some(b)) => format!("messages {a}..={b}"),
        _ => "nothing".into(),
    }
}

fn arm_text(a: LimitArm) -> &'static str {
    match a {
        LimitArm::Armed => "armed",
        LimitArm::Disarmed => "disarmed",
        LimitArm::RaiseNow => {
            "firmware did not fire although fewer WQEs are posted than the limit: the driver disarmed it and raises the event itself"
        }
    }
}

fn create_cq_and_srq<H: Hal>(
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

fn destroy_all<H: Hal>(
    hca: &TracedHca<'_, H>,
    objs: &mut Objects<H>,
    model: Option<&Device>,
    r: &mut Report,
) -> Result<(), CliError> {
    if let Some(srq) = objs.srq.take() {
        let srqn = srq.srqn();
        let rmp = srq.is_rmp();
        if let Err((srq, e)) = hca.destroy_srq(srq, objs.cq.as_mut()) {
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
        if let Err((cq, e)) = hca.destroy_cq(cq) {
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

// ------------------------------------------------------------ the demo

fn demo<H: Hal>(
    hca: &TracedHca<'_, H>,
    objs: &mut Objects<H>,
    model: Option<&Device>,
    r: &mut Report,
    sum: &mut Summary,
) -> Result<(), CliError> {
    r.step("create", "Create a CQ and an SRQ");
    create_cq_and_srq(hca, objs, 255, 63, r)?;
    let (Some(cq), Some(srq), Some(bufs)) = (&mut objs.cq, &mut objs.srq, &objs.bufs) else {
        unreachable!("created above")
    };
    let mut next_wr = VecDeque::new();

    r.step("post", "Post receives");
    post(hca, srq, bufs, 0..32, &mut next_wr)?;
    r.say(format!(
        "posted 32 receive requests (wr_id 0..=31), one {BUF}-byte buffer each, lkey {:#x} (reserved lkey); {} outstanding",
        hca.reserved_lkey(),
        srq.outstanding()
    ));
    r.set("posted", 32);

    r.step("arm", "Arm the SRQ limit and the CQ");
    let arm = hca
        .arm_srq_limit(srq, 8)
        .map_err(|e| CliError::driver("arming the SRQ limit", e))?;
    let lwm = hca
        .query_srq(srq)
        .map_err(|e| CliError::driver("querying the SRQ", e))?
        .lwm;
    r.say(format!(
        "SRQ limit 8: {} (query_srq: lwm = {lwm}); firmware raises SRQ_RQ_LIMIT once fewer than 8 receives remain posted",
        arm_text(arm)
    ));
    cq.arm(false);
    r.say("CQ armed: exactly one completion event follows the next completion");
    r.set("limit", 8);
    r.set("lwm", lwm);

    let Some(dev) = model else {
        r.step("traffic", "Traffic");
        r.say(format!("skipped: {NO_TRAFFIC}"));
        r.set("skipped", NO_TRAFFIC);
        r.step("resize", "Resize the CQ");
        let from = cq.capacity();
        hca.resize_cq(cq, 1023)
            .map_err(|e| CliError::driver("resizing the CQ", e))?;
        r.say(format!(
            "MODIFY_CQ (resize): {from} -> {} entries (no completions waiting without traffic)",
            cq.capacity()
        ));
        sum.resize = Some((from, cq.capacity(), 0));
        r.step("destroy", "Destroy everything");
        return destroy_all(hca, objs, model, r);
    };
    sum.traffic = true;
    let mut wire = Wire::new(dev);

    r.step("traffic", "Traffic arrives (injected by the model)");
    wire.deliver(srq, cq, 20, sum)?;
    r.say(format!(
        "the model delivered 20 messages from the wire (QPN {QPN:#x}, 32..256 bytes) into the SRQ: each took the next posted WQE, was scattered into its buffer, and wrote a CQE"
    ));
    r.say(format!(
        "{} receives still posted (limit 8: no event yet); {} completions waiting on the CQ",
        left(srq, cq),
        cq.pending()
    ));
    r.set("delivered", 20);
    r.set("waiting", cq.pending());

    r.step("poll", "Poll completions");
    let (limit, comp, other) = poll_eq(hca, Some(srq.srqn()), Some(cq.cqn()))?;
    sum.limit_events += limit;
    sum.comp_events += comp;
    if comp > 0 {
        cq.event_received();
    }
    r.say(format!(
        "poll_events: {comp} completion event for CQ {:#x} through the completion EQ (the CQ was armed), {limit} SRQ limit events",
        cq.cqn()
    ));
    say_other(r, &other);
    let seqs = poll_receives(cq, srq, bufs, &mut wire, &mut next_wr, sum)?;
    r.say(format!(
        "polled {} completions ({}): RESP_SEND, wr_id in posting order, byte counts and payloads checked byte for byte; each WQE returned to the SRQ",
        seqs.len(),
        seq_range(&seqs)
    ));
    r.set("completion_events", comp);
    r.set("polled", seqs.len());

    r.step("limit", "SRQ limit event through EQ polling, and re-arm");
    let mut fired_after = None;
    for i in 1..=5u64 {
        wire.deliver(srq, cq, 1, sum)?;
        let (limit, comp, other) = poll_eq(hca, Some(srq.srqn()), Some(cq.cqn()))?;
        sum.comp_events += comp;
        say_other(r, &other);
        if limit > 0 {
            sum.limit_events += limit;
            fired_after.get_or_insert((i, left(srq, cq)));
        }
    }
    match fired_after {
        Some((i, left)) => r.say(format!(
            "5 more messages; after message {i} only {left} receives were posted (< 8) and poll_events returned SRQ_RQ_LIMIT for {} {:#x} from the async EQ",
            if srq.is_rmp() { "RMP" } else { "SRQ" },
            srq.srqn()
        )),
        None => r.say("5 more messages; NO limit event arrived"),
    }
    let lwm = hca
        .query_srq(srq)
        .map_err(|e| CliError::driver("querying the SRQ", e))?
        .lwm;
    r.say(format!(
        "query_srq: lwm = {lwm} (the limit is one-shot: firmware disarmed it)"
    ));
    let seqs = poll_receives(cq, srq, bufs, &mut wire, &mut next_wr, sum)?;
    r.say(format!(
        "polled {} completions ({})",
        seqs.len(),
        seq_range(&seqs)
    ));
    post(hca, srq, bufs, 32..56, &mut next_wr)?;
    let arm = hca
        .arm_srq_limit(srq, 8)
        .map_err(|e| CliError::driver("re-arming the SRQ limit", e))?;
    let lwm = hca
        .query_srq(srq)
        .map_err(|e| CliError::driver("querying the SRQ", e))?
        .lwm;
    sum.limit_rearmed = arm == LimitArm::Armed && lwm == 8;
    r.say(format!(
        "posted 24 more receives (wr_id 32..=55, {} outstanding) and re-armed the limit at 8: {} (lwm = {lwm})",
        srq.outstanding(),
        arm_text(arm)
    ));
    r.set("limit_event_after_message", fired_after.map(|(i, _)| i));
    r.set("limit_events", sum.limit_events);
    r.set("rearmed", sum.limit_rearmed);

    r.step("resize", "Resize the CQ while completions are waiting");
    let polled_before = sum.polled;
    wire.deliver(srq, cq, 12, sum)?;
    let waiting = cq.pending();
    let from = cq.capacity();
    r.say(format!(
        "12 more messages, not polled: {waiting} completions waiting in the {from}-entry CQ"
    ));
    hca.resize_cq(cq, 1023)
        .map_err(|e| CliError::driver("resizing the CQ", e))?;
    r.say(format!(
        "MODIFY_CQ (resize) to {} entries: firmware switched rings; the driver copied the {waiting} unpolled CQEs in front of firmware's first new one",
        cq.capacity()
    ));
    wire.deliver(srq, cq, 4, sum)?;
    let seqs = poll_receives(cq, srq, bufs, &mut wire, &mut next_wr, sum)?;
    let got = sum.polled - polled_before;
    r.say(format!(
        "4 messages after the resize; polled {} completions ({}): the {waiting} from before the resize, then the 4 after, in order; {} lost",
        seqs.len(),
        seq_range(&seqs),
        16u64.saturating_sub(got)
    ));
    sum.resize = Some((from, cq.capacity(), waiting));
    r.set("from", from);
    r.set("to", cq.capacity());
    r.set("waiting", waiting);
    r.set("polled", got);
    r.set("lost", 16u64.saturating_sub(got));

    r.step("destroy", "Destroy everything");
    destroy_all(hca, objs, model, r)
}

// ------------------------------------------------------------ limit

fn limit<H: Hal>(
    hca: &TracedHca<'_, H>,
    objs: &mut Objects<H>,
    model: Option<&Device>,
    r: &mut Report,
    sum: &mut Summary,
) -> Result<(), CliError> {
    r.step("create", "Create a CQ and an SRQ");
    create_cq_and_srq(hca, objs, 63, 15, r)?;
    let (Some(cq), Some(srq), Some(bufs)) = (&mut objs.cq, &mut objs.srq, &objs.bufs) else {
        unreachable!("created above")
    };
    let mut next_wr = VecDeque::new();
    r.step("arm", "Post 10 receives, arm the limit at 7");
    post(hca, srq, bufs, 0..10, &mut next_wr)?;
    let arm = hca
        .arm_srq_limit(srq, 7)
        .map_err(|e| CliError::driver("arming the SRQ limit", e))?;
    r.say(format!("10 posted; limit 7: {}", arm_text(arm)));
    let Some(dev) = model else {
        r.step("traffic", "Traffic");
        r.say(format!("skipped: {NO_TRAFFIC}"));
        r.step("destroy", "Destroy everything");
        return destroy_all(hca, objs, model, r);
    };
    sum.traffic = true;
    let mut wire = Wire::new(dev);
    r.step("limit", "Receive until the limit event");
    for i in 1..=4u64 {
        wire.deliver(srq, cq, 1, sum)?;
        let (limit, _, other) = poll_eq(hca, Some(srq.srqn()), None)?;
        say_other(r, &other);
        sum.limit_events += limit;
        r.say(format!(
            "message {i}: {} receives posted, {limit} limit event(s)",
            left(srq, cq)
        ));
    }
    let seqs = poll_receives(cq, srq, bufs, &mut wire, &mut next_wr, sum)?;
    r.say(format!("polled {} completions", seqs.len()));
    post(hca, srq, bufs, 10..14, &mut next_wr)?;
    let arm = hca
        .arm_srq_limit(srq, 7)
        .map_err(|e| CliError::driver("re-arming the SRQ limit", e))?;
    let lwm = hca
        .query_srq(srq)
        .map_err(|e| CliError::driver("querying the SRQ", e))?
        .lwm;
    sum.limit_rearmed = arm == LimitArm::Armed && lwm == 7;
    r.say(format!(
        "re-posted 4, re-armed at 7: {} (lwm = {lwm})",
        arm_text(arm)
    ));
    r.set("limit_events", sum.limit_events);
    r.step("destroy", "Destroy everything");
    destroy_all(hca, objs, model, r)
}

// ------------------------------------------------------------ resize

fn resize<H: Hal>(
    hca: &TracedHca<'_, H>,
    objs: &mut Objects<H>,
    model: Option<&Device>,
    r: &mut Report,
    sum: &mut Summary,
) -> Result<(), CliError> {
    r.step("create", "Create a CQ");
    let cq = hca
        .create_cq(63, CqOptions::default())
        .map_err(|e| CliError::driver("creating the CQ", e))?;
    r.say(format!("CQ {:#x}: {} entries", cq.cqn(), cq.capacity()));
    let cq = objs.cq.insert(cq);
    let mut seq = 0u32;
    if let Some(dev) = model {
        sum.traffic = true;
        for _ in 0..40 {
            dev.traffic()
                .complete_send(cq.cqn(), QPN, seq as u16, seq)
                .map_err(|e| {
                    CliError::failed(format!("the model refused a completion: {e}"), "")
                })?;
            seq += 1;
            sum.delivered += 1;
        }
        r.say(format!(
            "the model wrote 40 send completions; {} waiting",
            cq.pending()
        ));
    } else {
        r.say(format!("no completions: {NO_TRAFFIC}"));
    }
    r.step("resize", "Resize with completions waiting");
    let (from, waiting) = (cq.capacity(), cq.pending());
    hca.resize_cq(cq, 255)
        .map_err(|e| CliError::driver("resizing the CQ", e))?;
    r.say(format!(
        "resized {from} -> {} with {waiting} waiting",
        cq.capacity()
    ));
    sum.resize = Some((from, cq.capacity(), waiting));
    if let Some(dev) = model {
        for _ in 0..5 {
            dev.traffic()
                .complete_send(cq.cqn(), QPN, seq as u16, seq)
                .map_err(|e| {
                    CliError::failed(format!("the model refused a completion: {e}"), "")
                })?;
            seq += 1;
            sum.delivered += 1;
        }
        let mut out = [Cqe::EMPTY; 16];
        let mut expect = 0u32;
        loop {
            let n = cq.poll(&mut out);
            if n == 0 {
                break;
            }
            for c in &out[..n] {
                if c.byte_len == expect && c.opcode == CqeOpcode::REQ {
                    sum.polled += 1;
                } else {
                    sum.bad += 1;
                }
                expect += 1;
            }
        }
        r.say(format!(
            "5 more after the resize; polled {} in order, {} lost",
            sum.polled,
            sum.lost()
        ));
    }
    r.step("destroy", "Destroy everything");
    destroy_all(hca, objs, model, r)
}
