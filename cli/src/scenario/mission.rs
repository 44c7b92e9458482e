//! The mission's steps, narrated: every message sent by a QP and received
//! by an SRQ-attached QP through the device (the model's traffic engine,
//! or a card). `demo` runs them all, the `limit` and `resize` scenarios
//! the ones they need, the self-test all of them inside its stages.

use mlx5_driver::srq::LimitArm;
use mlx5_hal::Hal;
use mlx5_sim::Device;

use super::flow::{demo_len, left, poll_eq, range, wait_limit_event, wait_pending, Kind};
use super::objects::{
    alloc_bufs, create_cq, create_pair, create_srq as create_srq_on, state_name, Objects, BUF,
    NBUF, SEND_WR,
};
use super::{arm_text, say_other, LimitSeen, ResizeSeen, State, Step, Summary};
use crate::common::error::CliError;
use crate::common::loopback::loopback_path;
use crate::common::report::Report;
use crate::common::session::TracedHca;

/// Who carries the messages, for the narration.
pub(crate) fn carrier(model: Option<&Device>) -> &'static str {
    if model.is_some() {
        "the model's traffic engine"
    } else {
        "the card"
    }
}

/// The receive CQ's and the send CQ's entries before the resize.
const CQ_ENTRIES: u32 = 255;
/// The SRQ's receive WQEs.
const SRQ_WR: u32 = 63;
/// Bytes the sender QP sends inline (the self-test's inline SENDs).
pub(crate) const INLINE: u32 = 64;

/// Create the send and receive CQs, the SRQ and the buffers (narrated;
/// the `queues` step of `mlx5 run`).
pub(crate) fn create_queues<H: Hal>(
    hca: &TracedHca<'_, H>,
    objs: &mut Objects<H>,
    cq_entries: u32,
    srq_wr: u32,
    r: &mut Report,
) -> Result<(), CliError> {
    cq_pair(hca, objs, cq_entries, r)?;
    srq_and_buffers(hca, objs, srq_wr, r)
}

fn create_cqs<H: Hal>(
    hca: &TracedHca<'_, H>,
    st: &mut State<'_, H>,
    r: &mut Report,
    _sum: &mut Summary,
) -> Result<(), CliError> {
    cq_pair(hca, &mut st.objs, CQ_ENTRIES, r)
}

fn create_srq<H: Hal>(
    hca: &TracedHca<'_, H>,
    st: &mut State<'_, H>,
    r: &mut Report,
    _sum: &mut Summary,
) -> Result<(), CliError> {
    srq_and_buffers(hca, &mut st.objs, SRQ_WR, r)
}

fn cq_pair<H: Hal>(
    hca: &TracedHca<'_, H>,
    objs: &mut Objects<H>,
    entries: u32,
    r: &mut Report,
) -> Result<(), CliError> {
    let scq = objs.scq.insert(create_cq(hca, entries, "send CQ")?);
    let (sn, scap) = (scq.cqn(), scq.capacity());
    let rcq = objs.rcq.insert(create_cq(hca, entries, "receive CQ")?);
    r.say(format!(
        "send CQ {sn:#x} and receive CQ {:#x}: {scap} entries each (rings of 2^{} 64-byte CQEs) reporting to completion EQ {}",
        rcq.cqn(),
        rcq.log_size(),
        rcq.eqn()
    ));
    r.set("send_cqn", sn);
    r.set("recv_cqn", rcq.cqn());
    r.set("cq_capacity", rcq.capacity());
    Ok(())
}

fn srq_and_buffers<H: Hal>(
    hca: &TracedHca<'_, H>,
    objs: &mut Objects<H>,
    wr: u32,
    r: &mut Report,
) -> Result<(), CliError> {
    let Some(rcq) = objs.rcq.as_mut() else {
        return Err(CliError::failed(
            "internal error: no receive CQ at this step",
            "this is a bug in mlx5; please report it",
        ));
    };
    let srq = objs.srq.insert(create_srq_on(hca, wr, rcq)?);
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

fn connect<H: Hal>(
    hca: &TracedHca<'_, H>,
    st: &mut State<'_, H>,
    r: &mut Report,
    sum: &mut Summary,
) -> Result<(), CliError> {
    create_qps(hca, &mut st.objs, INLINE, r)?;
    let p = st.objs.parts()?;
    sum.qps = Some((p.sender.qpn(), p.receiver.qpn()));
    Ok(())
}

/// Create the two QPs and connect them (narrated; the `pair` step of
/// `mlx5 run`).
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
        "sender QP {:#x}: RC, a send queue of {SEND_WR} work requests ({} WQEBBs of 64 bytes, up to {inline} bytes inline) completing on the send CQ, no receive queue",
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

/// The SRQ limit the limit step arms (and re-arms after its event).
pub(crate) const LIMIT: u32 = 8;

/// The mission's steps, in order: each part narrates itself through the
/// report.
pub(super) fn steps<H: Hal>() -> Vec<Step<H>> {
    const CREATE: &str = "Create the CQs, the SRQ and the buffers";
    const LIMIT_TITLE: &str = "SRQ limit event by consumption, through EQ polling, and re-arm";
    vec![
        Step::new("create", CREATE, "cq", create_cqs),
        Step::new("create", CREATE, "srq", create_srq),
        Step::new(
            "connect",
            "Create and connect the queue pair",
            "connect",
            connect,
        ),
        Step::new("post", "Post receives", "post", post),
        Step::new("arm", "Arm the receive CQ", "arm", arm),
        Step::new("traffic", "Send 20 messages", "traffic", traffic),
        Step::new("poll", "Poll completions", "poll", poll),
        Step::new("limit", LIMIT_TITLE, "limit", limit),
        Step::new(
            "resize",
            "Resize the receive CQ while completions are waiting",
            "resize",
            resize,
        ),
        Step::new("destroy", "Destroy everything", "destroy", destroy),
    ]
}

/// Receives the post step posts.
const POSTED: u64 = 32;

fn post<H: Hal>(
    hca: &TracedHca<'_, H>,
    st: &mut State<'_, H>,
    r: &mut Report,
    sum: &mut Summary,
) -> Result<(), CliError> {
    let p = st.objs.parts()?;
    let first = st.flow.next_recv_wr();
    st.flow.post_recvs(hca, p.srq, p.rbufs, POSTED)?;
    r.say(format!(
        "posted {POSTED} receive requests ({}), one {BUF}-byte buffer each, lkey {:#x}; {} outstanding",
        range("wr_id", &[first, first + POSTED - 1]),
        hca.default_lkey(),
        p.srq.outstanding()
    ));
    r.set("posted", POSTED);
    sum.traffic = true;
    Ok(())
}

fn arm<H: Hal>(
    hca: &TracedHca<'_, H>,
    st: &mut State<'_, H>,
    r: &mut Report,
    _sum: &mut Summary,
) -> Result<(), CliError> {
    let p = st.objs.parts()?;
    hca.arm_cq(p.rcq, false)
        .map_err(|e| CliError::driver("arming the receive CQ", e))?;
    r.say("receive CQ armed: exactly one completion event follows the next completion");
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
        "{} receives still posted; waiting: {} receive completions, {} send completions",
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
    let posted = left(p.srq, p.rcq) as u64;
    let arm = hca
        .arm_srq_limit(p.srq, LIMIT)
        .map_err(|e| CliError::driver("arming the SRQ limit", e))?;
    let lwm = hca
        .query_srq(p.srq)
        .map_err(|e| CliError::driver("querying the SRQ", e))?
        .lwm;
    r.say(format!(
        "SRQ limit {LIMIT}: {} (query_srq: lwm = {lwm}) with {posted} receives posted; firmware raises SRQ_RQ_LIMIT once fewer than {LIMIT} remain posted",
        arm_text(arm)
    ));
    // One message at a time until fewer than LIMIT receives remain: the
    // event belongs to the last of them.
    let n = (posted + 1).saturating_sub(u64::from(LIMIT)).max(1);
    let more = if st.flow.sent > 0 { " more" } else { "" };
    let mut fired_after = None;
    for i in 1..=n {
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
        // The last message took the SRQ below the limit; its event may
        // trail its completion (a card, or the threaded model).
        let (limit, comp, other, _) = wait_limit_event(hca, p.srq.srqn(), Some(p.rcq.cqn()))?;
        sum.comp_events += comp;
        say_other(r, &other);
        if limit > 0 {
            sum.limit_events += limit;
            fired_after = Some((n, left(p.srq, p.rcq)));
        }
    }
    match fired_after {
        Some((i, l)) => r.say(format!(
            "{n}{more} messages, one post_send each; after message {i} of them only {l} receives were posted (< {LIMIT}) and poll_events returned SRQ_RQ_LIMIT for {srq_name} {:#x} from the async EQ",
            p.srq.srqn()
        )),
        None => r.say(format!("{n}{more} messages; NO limit event arrived")),
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
    let first = st.flow.next_recv_wr();
    st.flow.post_recvs(hca, p.srq, p.rbufs, 24)?;
    let arm = hca
        .arm_srq_limit(p.srq, LIMIT)
        .map_err(|e| CliError::driver("re-arming the SRQ limit", e))?;
    let lwm = hca
        .query_srq(p.srq)
        .map_err(|e| CliError::driver("querying the SRQ", e))?
        .lwm;
    sum.limit_rearmed = arm == LimitArm::Armed && u32::from(lwm) == LIMIT;
    r.say(format!(
        "posted 24 more receives ({}, {} outstanding) and re-armed the limit at {LIMIT}: {} (lwm = {lwm})",
        range("wr_id", &[first, first + 23]),
        p.srq.outstanding(),
        arm_text(arm)
    ));
    st.limit = Some(LimitSeen {
        limit: LIMIT,
        expected_after: n,
        fired_after: fired_after.map(|(i, _)| i),
        rearm: arm,
        lwm_after_rearm: u32::from(lwm),
    });
    r.set("limit", LIMIT);
    r.set("limit_event_after_message", fired_after.map(|(i, _)| i));
    r.set("limit_events", sum.limit_events);
    r.set("rearmed", sum.limit_rearmed);
    r.set("lwm_after_rearm", lwm);
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
    let first = st.flow.next_seq();
    let msgs: Vec<(Kind, usize)> = (0..12).map(|i| (Kind::Send, demo_len(first + i))).collect();
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
    let msgs: Vec<(Kind, usize)> = (12..16)
        .map(|i| (Kind::Send, demo_len(first + i)))
        .collect();
    st.flow.post(hca, &mut p, &msgs)?;
    let (seqs, ids) = st.flow.complete_all(hca, &mut p)?;
    let got = st.flow.received - received_before;
    let in_order = seqs.iter().copied().eq(first..first + 16);
    r.say(format!(
        "4 messages after the resize; polled {} receive completions ({}): the {waiting} from before the resize, then the 4 after, {}; {} lost",
        seqs.len(),
        range("messages", &seqs),
        if in_order { "in order" } else { "OUT OF ORDER" },
        16u64.saturating_sub(got)
    ));
    r.say(format!(
        "and {} send completions ({})",
        ids.len(),
        range("wr_id", &ids)
    ));
    sum.resize = Some((from, p.rcq.capacity(), waiting));
    st.resize = Some(ResizeSeen {
        sent: 16,
        received: got,
        in_order,
    });
    r.set("from", from);
    r.set("to", p.rcq.capacity());
    r.set("waiting", waiting);
    r.set("received", got);
    r.set("lost", 16u64.saturating_sub(got));
    Ok(())
}

/// Destroy every object (QPs, SRQ, CQs, key) and say what the model
/// holds (every scenario ends with it).
fn destroy<H: Hal>(
    hca: &TracedHca<'_, H>,
    st: &mut State<'_, H>,
    r: &mut Report,
    _sum: &mut Summary,
) -> Result<(), CliError> {
    let (lines, res) = st.objs.destroy(hca);
    for l in lines {
        r.say(l);
    }
    res?;
    if let Some(dev) = st.model {
        let o = dev.objects();
        r.say(format!(
            "the model now holds {} QPs, {} CQs and {} SRQs/RMPs (the EQs, UAR, PD, DMA key and XRC domain of bring-up remain)",
            o.qps,
            o.cqs,
            o.srqs + o.rmps
        ));
        r.set("model_qps", o.qps);
        r.set("model_cqs", o.cqs);
        r.set("model_srqs", o.srqs + o.rmps);
    }
    Ok(())
}
