//! The demo scenario: the whole mission, narrated step by step, every
//! message sent by a QP and received by an SRQ-attached QP through the
//! device (the model's traffic engine, or a card).

use mlx5_driver::srq::LimitArm;
use mlx5_hal::Hal;
use mlx5_sim::Device;

use super::flow::{demo_len, left, poll_eq, range, wait_limit_event, wait_pending, Kind};
use super::objects::{
    alloc_bufs, create_cq, create_pair, create_srq, state_name, Objects, BUF, NBUF, SEND_WR,
};
use super::{arm_text, destroy_step, say_other, State, Step, Summary};
use crate::common::error::CliError;
use crate::common::loopback::loopback_path;
use crate::common::report::Report;
use crate::common::session::TracedHca;

/// Who carries the messages, for the narration.
pub(super) fn carrier(model: Option<&Device>) -> &'static str {
    if model.is_some() {
        "the model's traffic engine"
    } else {
        "the card"
    }
}

/// Create the send and receive CQs, the SRQ and the buffers (narrated).
pub(crate) fn create_queues<H: Hal>(
    hca: &TracedHca<'_, H>,
    objs: &mut Objects<H>,
    cq_entries: u32,
    srq_wr: u32,
    r: &mut Report,
) -> Result<(), CliError> {
    let scq = objs.scq.insert(create_cq(hca, cq_entries, "send CQ")?);
    let (sn, scap) = (scq.cqn(), scq.capacity());
    let rcq = objs.rcq.insert(create_cq(hca, cq_entries, "receive CQ")?);
    r.say(format!(
        "send CQ {sn:#x} and receive CQ {:#x}: {scap} entries each (rings of 2^{} 64-byte CQEs) reporting to completion EQ {}",
        rcq.cqn(),
        rcq.log_size(),
        rcq.eqn()
    ));
    r.set("send_cqn", sn);
    r.set("recv_cqn", rcq.cqn());
    r.set("cq_capacity", rcq.capacity());
    let srq = objs.srq.insert(create_srq(hca, srq_wr, rcq)?);
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
    let s = objs.sbufs.insert(alloc_bufs(hca, "send buffers")?).iova();
    let rv = objs
        .rbufs
        .insert(alloc_bufs(hca, "receive buffers")?)
        .iova();
    let lkey = hca.default_lkey();
    r.say(format!(
        "send and receive buffers: {NBUF} slots of {BUF} bytes each at IOVA {s:#x} and {rv:#x}, reached through {} {lkey:#x}",
        if hca.dma_lkey().is_some() {
            "the DMA key of bring-up (physical addresses, local read and write), lkey"
        } else {
            "the reserved lkey"
        }
    ));
    r.set("lkey", lkey);
    Ok(())
}

/// Create the two QPs and connect them (narrated).
pub(crate) fn create_qps<H: Hal>(
    hca: &TracedHca<'_, H>,
    objs: &mut Objects<H>,
    inline: u32,
    r: &mut Report,
) -> Result<(), CliError> {
    create_pair(hca, objs, inline)?;
    let p = objs.parts()?;
    let geo = p.sender.send_geometry();
    r.say(format!(
        "sender QP {:#x}: RC, a send queue of {SEND_WR} work requests ({} WQEBBs of 64 bytes) completing on the send CQ, no receive queue",
        p.sender.qpn(),
        geo.map_or(0, |g| g.wqebbs())
    ));
    r.say(format!(
        "receiver QP {:#x}: RC, no send queue, receives through {} {:#x} into the receive CQ",
        p.receiver.qpn(),
        if p.srq.is_rmp() { "RMP" } else { "SRQ" },
        p.srq.srqn()
    ));
    r.say(format!(
        "RST2INIT, INIT2RTR, RTR2RTS on both, each addressing the other {}, path MTU {}: both in {}",
        loopback_path(hca),
        hca.loopback_mtu().bytes(),
        state_name(p.sender.state())
    ));
    r.set("sender_qpn", p.sender.qpn());
    r.set("receiver_qpn", p.receiver.qpn());
    r.set("state", state_name(p.sender.state()));
    Ok(())
}

/// The demo's steps, in order: each narrates itself through the report.
pub(super) fn steps<H: Hal>() -> Vec<Step<H>> {
    vec![
        Step::new("create", "Create the CQs, the SRQ and the buffers", create),
        Step::new("connect", "Create and connect the queue pair", connect),
        Step::new("post", "Post receives", post),
        Step::new("arm", "Arm the SRQ limit and the receive CQ", arm),
        Step::new("traffic", "Send 20 messages", traffic),
        Step::new("poll", "Poll completions", poll),
        Step::new(
            "limit",
            "SRQ limit event by consumption, through EQ polling, and re-arm",
            limit,
        ),
        Step::new(
            "resize",
            "Resize the receive CQ while completions are waiting",
            resize,
        ),
        Step::new("destroy", "Destroy everything", destroy),
    ]
}

fn create<H: Hal>(
    hca: &TracedHca<'_, H>,
    st: &mut State<'_, H>,
    r: &mut Report,
    _sum: &mut Summary,
) -> Result<(), CliError> {
    create_queues(hca, &mut st.objs, 255, 63, r)?;
    Ok(())
}

fn connect<H: Hal>(
    hca: &TracedHca<'_, H>,
    st: &mut State<'_, H>,
    r: &mut Report,
    sum: &mut Summary,
) -> Result<(), CliError> {
    create_qps(hca, &mut st.objs, 0, r)?;
    let p = st.objs.parts()?;
    sum.qps = Some((p.sender.qpn(), p.receiver.qpn()));
    Ok(())
}

fn post<H: Hal>(
    hca: &TracedHca<'_, H>,
    st: &mut State<'_, H>,
    r: &mut Report,
    _sum: &mut Summary,
) -> Result<(), CliError> {
    let p = st.objs.parts()?;
    st.flow.post_recvs(hca, p.srq, p.rbufs, 32)?;
    r.say(format!(
        "posted 32 receive requests (wr_id 0..=31), one {BUF}-byte buffer each, lkey {:#x}; {} outstanding",
        hca.default_lkey(),
        p.srq.outstanding()
    ));
    r.set("posted", 32);
    Ok(())
}

fn arm<H: Hal>(
    hca: &TracedHca<'_, H>,
    st: &mut State<'_, H>,
    r: &mut Report,
    sum: &mut Summary,
) -> Result<(), CliError> {
    let p = st.objs.parts()?;
    let arm = hca
        .arm_srq_limit(p.srq, 8)
        .map_err(|e| CliError::driver("arming the SRQ limit", e))?;
    let lwm = hca
        .query_srq(p.srq)
        .map_err(|e| CliError::driver("querying the SRQ", e))?
        .lwm;
    r.say(format!(
        "SRQ limit 8: {} (query_srq: lwm = {lwm}); firmware raises SRQ_RQ_LIMIT once fewer than 8 receives remain posted",
        arm_text(arm)
    ));
    hca.arm_cq(p.rcq, false)
        .map_err(|e| CliError::driver("arming the receive CQ", e))?;
    r.say("receive CQ armed: exactly one completion event follows the next completion");
    r.set("limit", 8);
    r.set("lwm", lwm);
    sum.traffic = true;
    Ok(())
}

fn traffic<H: Hal>(
    hca: &TracedHca<'_, H>,
    st: &mut State<'_, H>,
    r: &mut Report,
    _sum: &mut Summary,
) -> Result<(), CliError> {
    let mut p = st.objs.parts()?;
    let srq_name = if p.srq.is_rmp() { "RMP" } else { "SRQ" };
    let msgs: Vec<(Kind, usize)> = (0..20).map(|s| (Kind::Send, demo_len(s))).collect();
    st.flow.post(hca, &mut p, &msgs)?;
    wait_pending(hca, p.rcq, 20, "receive")?;
    wait_pending(hca, p.scq, 20, "send")?;
    r.say(format!(
        "post_send: 20 SENDs (wr_id 1000..=1019, 32..255 bytes from the send buffers) in one call, one doorbell; {} carried each from QP {:#x} to QP {:#x}, which took the next {srq_name} WQE, scattered the payload into its buffer and wrote a receive CQE; the sender got a send CQE per message",
        carrier(st.model),
        p.sender.qpn(),
        p.receiver.qpn()
    ));
    r.say(format!(
        "{} receives still posted (limit 8: no event yet); waiting: {} receive completions, {} send completions",
        left(p.srq, p.rcq),
        p.rcq.pending(),
        p.scq.pending()
    ));
    r.set("sent", 20);
    r.set("recv_waiting", p.rcq.pending());
    r.set("send_waiting", p.scq.pending());
    Ok(())
}

fn poll<H: Hal>(
    hca: &TracedHca<'_, H>,
    st: &mut State<'_, H>,
    r: &mut Report,
    sum: &mut Summary,
) -> Result<(), CliError> {
    let mut p = st.objs.parts()?;
    let srq_name = if p.srq.is_rmp() { "RMP" } else { "SRQ" };
    let (limit, comp, other) = poll_eq(hca, Some(p.srq.srqn()), Some(p.rcq.cqn()))?;
    sum.limit_events += limit;
    sum.comp_events += comp;
    r.say(format!(
        "poll_events: {comp} completion event for receive CQ {:#x} through the completion EQ (the CQ was armed), {limit} SRQ limit events",
        p.rcq.cqn()
    ));
    say_other(r, &other);
    let (seqs, ids) = st.flow.complete_all(hca, &mut p)?;
    r.say(format!(
        "receive CQ: polled {} completions ({}): RESP_SEND from QP {:#x}, wr_id in posting order, byte counts and payloads checked byte for byte; each WQE returned to the {srq_name}",
        seqs.len(),
        range("messages", &seqs),
        p.sender.qpn()
    ));
    r.say(format!(
        "send CQ: polled {} completions beside them ({}): SEND, in posting order, one work request retired each",
        ids.len(),
        range("wr_id", &ids)
    ));
    r.set("completion_events", comp);
    r.set("received", seqs.len());
    r.set("send_completions", ids.len());
    Ok(())
}

fn limit<H: Hal>(
    hca: &TracedHca<'_, H>,
    st: &mut State<'_, H>,
    r: &mut Report,
    sum: &mut Summary,
) -> Result<(), CliError> {
    let mut p = st.objs.parts()?;
    let srq_name = if p.srq.is_rmp() { "RMP" } else { "SRQ" };
    let mut fired_after = None;
    for i in 1..=5u64 {
        let want = p.rcq.pending() + 1;
        st.flow
            .post(hca, &mut p, &[(Kind::Send, demo_len(st.flow.next_seq()))])?;
        wait_pending(hca, p.rcq, want, "receive")?;
        let (limit, comp, other) = poll_eq(hca, Some(p.srq.srqn()), Some(p.rcq.cqn()))?;
        sum.comp_events += comp;
        say_other(r, &other);
        if limit > 0 {
            sum.limit_events += limit;
            fired_after.get_or_insert((i, left(p.srq, p.rcq)));
        }
    }
    if fired_after.is_none() {
        // The fifth message took the SRQ below the limit; its event may
        // trail its completion (a card, or the threaded model).
        let (limit, comp, other, _) = wait_limit_event(hca, p.srq.srqn(), Some(p.rcq.cqn()))?;
        sum.comp_events += comp;
        say_other(r, &other);
        if limit > 0 {
            sum.limit_events += limit;
            fired_after = Some((5, left(p.srq, p.rcq)));
        }
    }
    match fired_after {
        Some((i, l)) => r.say(format!(
            "5 more messages, one post_send each; after message {i} of them only {l} receives were posted (< 8) and poll_events returned SRQ_RQ_LIMIT for {srq_name} {:#x} from the async EQ",
            p.srq.srqn()
        )),
        None => r.say("5 more messages; NO limit event arrived"),
    }
    let lwm = hca
        .query_srq(p.srq)
        .map_err(|e| CliError::driver("querying the SRQ", e))?
        .lwm;
    r.say(format!(
        "query_srq: lwm = {lwm} (the limit is one-shot: firmware disarmed it)"
    ));
    let (seqs, ids) = st.flow.complete_all(hca, &mut p)?;
    r.say(format!(
        "polled {} receive completions ({}) and {} send completions ({})",
        seqs.len(),
        range("messages", &seqs),
        ids.len(),
        range("wr_id", &ids)
    ));
    st.flow.post_recvs(hca, p.srq, p.rbufs, 24)?;
    let arm = hca
        .arm_srq_limit(p.srq, 8)
        .map_err(|e| CliError::driver("re-arming the SRQ limit", e))?;
    let lwm = hca
        .query_srq(p.srq)
        .map_err(|e| CliError::driver("querying the SRQ", e))?
        .lwm;
    sum.limit_rearmed = arm == LimitArm::Armed && lwm == 8;
    r.say(format!(
        "posted 24 more receives (wr_id 32..=55, {} outstanding) and re-armed the limit at 8: {} (lwm = {lwm})",
        p.srq.outstanding(),
        arm_text(arm)
    ));
    r.set("limit_event_after_message", fired_after.map(|(i, _)| i));
    r.set("limit_events", sum.limit_events);
    r.set("rearmed", sum.limit_rearmed);
    Ok(())
}

fn resize<H: Hal>(
    hca: &TracedHca<'_, H>,
    st: &mut State<'_, H>,
    r: &mut Report,
    sum: &mut Summary,
) -> Result<(), CliError> {
    let mut p = st.objs.parts()?;
    let received_before = st.flow.received;
    let msgs: Vec<(Kind, usize)> = (0..12)
        .map(|i| (Kind::Send, demo_len(st.flow.next_seq() + i)))
        .collect();
    st.flow.post(hca, &mut p, &msgs)?;
    wait_pending(hca, p.rcq, 12, "receive")?;
    let waiting = p.rcq.pending();
    let from = p.rcq.capacity();
    r.say(format!(
        "12 more messages, not polled: {waiting} completions waiting in the {from}-entry receive CQ"
    ));
    hca.resize_cq(p.rcq, 1023)
        .map_err(|e| CliError::driver("resizing the CQ", e))?;
    r.say(format!(
        "MODIFY_CQ (resize) to {} entries: firmware switched rings; the driver copied the {waiting} unpolled CQEs in front of firmware's first new one",
        p.rcq.capacity()
    ));
    let msgs: Vec<(Kind, usize)> = (0..4)
        .map(|i| (Kind::Send, demo_len(st.flow.next_seq() + i)))
        .collect();
    st.flow.post(hca, &mut p, &msgs)?;
    let (seqs, ids) = st.flow.complete_all(hca, &mut p)?;
    let got = st.flow.received - received_before;
    r.say(format!(
        "4 messages after the resize; polled {} receive completions ({}): the {waiting} from before the resize, then the 4 after, in order; {} lost",
        seqs.len(),
        range("messages", &seqs),
        16u64.saturating_sub(got)
    ));
    r.say(format!(
        "and {} send completions ({})",
        ids.len(),
        range("wr_id", &ids)
    ));
    sum.resize = Some((from, p.rcq.capacity(), waiting));
    r.set("from", from);
    r.set("to", p.rcq.capacity());
    r.set("waiting", waiting);
    r.set("received", got);
    r.set("lost", 16u64.saturating_sub(got));
    Ok(())
}

/// Destroy every object and say what the model holds (every scenario ends
/// with it).
pub(super) fn destroy<H: Hal>(
    hca: &TracedHca<'_, H>,
    st: &mut State<'_, H>,
    r: &mut Report,
    _sum: &mut Summary,
) -> Result<(), CliError> {
    destroy_step(hca, &mut st.objs, st.model, r)
}
