//! The self-test's stages 7 to 10: traffic, the SRQ limit event, the CQ
//! resize under traffic, and the destroy half of teardown.

use mlx5_driver::srq::LimitArm;
use mlx5_hal::Hal;
use serde_json::json;

use super::setup::{State, POSTED};
use crate::common::error::CliError;
use crate::common::report::Report;
use crate::common::session::TracedHca;
use crate::common::trace::fmt_ns;
use crate::scenario::arm_text;
use crate::scenario::flow::{left, poll_eq, range, wait_limit_event, wait_pending, Kind, WAIT_NS};
use crate::scenario::objects::state_name;

/// QUERY_QP of the sender: its state and the WQEBB counters that tell a
/// doorbell that never arrived from a completion that never came
/// (docs/hardware.md).
fn query_sender<H: Hal>(hca: &TracedHca<'_, H>, s: &mut State<'_, H>) -> Result<String, CliError> {
    let p = s.objs.parts()?;
    let q = hca
        .query_qp(p.sender)
        .map_err(|e| CliError::driver("querying the sender QP", e))?;
    Ok(format!(
        "QUERY_QP {:#x}: {}, WQEBBs posted as the device read them {}, executed {}",
        p.sender.qpn(),
        state_name(q.state),
        q.sw_sq_wqebb_counter,
        q.hw_sq_wqebb_counter
    ))
}

/// Stage 7: SENDs of 1 to 256 bytes through the DMA key, inline SENDs, an
/// RDMA WRITE with immediate through the new key; every payload, `wr_id`
/// and completion checked; QUERY_QP afterwards.
pub fn traffic<H: Hal>(
    hca: &TracedHca<'_, H>,
    s: &mut State<'_, H>,
    r: &mut Report,
) -> Result<(), CliError> {
    let mut msgs: Vec<(Kind, usize)> = [1, 2, 63, 64, 65, 128, 255, 256]
        .iter()
        .map(|&l| (Kind::Send, l))
        .collect();
    msgs.extend([
        (Kind::Inline, 16),
        (Kind::Inline, 64),
        (Kind::WriteImm, 200),
    ]);
    let mut p = s.objs.parts()?;
    s.flow.post(hca, &mut p, &msgs)?;
    let done = s.flow.complete_all(hca, &mut p);
    let (seqs, ids) = match done {
        Ok(x) => x,
        Err(e) => {
            // The counters say whether the doorbell or the completion is missing.
            if let Ok(q) = query_sender(hca, s) {
                r.say(q);
            }
            return Err(e);
        }
    };
    r.say(format!(
        "posted {} messages with one doorbell: 8 SENDs of 1..256 bytes through lkey {:#x}, 2 inline SENDs (16, 64 bytes), an RDMA WRITE with immediate of 200 bytes through rkey {:#x}",
        msgs.len(),
        hca.default_lkey(),
        s.objs.key.as_ref().map_or(0, |k| k.key())
    ));
    r.say(format!(
        "{} receive completions ({}) and {} send completions ({}); {} good, {} wrong",
        seqs.len(),
        range("messages", &seqs),
        ids.len(),
        range("wr_id", &ids),
        s.flow.received,
        s.flow.bad
    ));
    for pr in &s.flow.problems {
        r.say(format!("wrong: {pr}"));
    }
    let q = query_sender(hca, s)?;
    r.say(q);
    r.set("sent", s.flow.sent);
    r.set("received", s.flow.received);
    r.set("send_completions", s.flow.send_completions);
    r.set("problems", s.flow.problems.clone());
    if let Some(dev) = s.model {
        r.set("model_side_door_uses", dev.traffic().side_door_uses());
    }
    let n = msgs.len() as u64;
    if s.flow.bad > 0 || s.flow.received != n || s.flow.send_completions != n {
        return Err(CliError::check(format!(
            "{} of {n} messages received intact, {} of {n} sends completed: {}",
            s.flow.received,
            s.flow.send_completions,
            s.flow.problems.join("; ")
        )));
    }
    Ok(())
}

/// Stage 8: arm the limit two below what is posted, send until it fires
/// (after the third message), re-post, re-arm, read it back, disarm.
pub fn srq_limit<H: Hal>(
    hca: &TracedHca<'_, H>,
    s: &mut State<'_, H>,
    r: &mut Report,
) -> Result<(), CliError> {
    let mut p = s.objs.parts()?;
    let posted = left(p.srq, p.rcq) as u32;
    let limit = posted.saturating_sub(2);
    let arm = hca
        .arm_srq_limit(p.srq, limit)
        .map_err(|e| CliError::driver("arming the SRQ limit", e))?;
    r.say(format!(
        "{posted} receives posted; limit armed at {limit}: {}",
        arm_text(arm)
    ));
    let mut fired = None;
    let mut other = Vec::new();
    for i in 1..=3u64 {
        let want = p.rcq.pending() + 1;
        s.flow.post(hca, &mut p, &[(Kind::Send, 100)])?;
        wait_pending(hca, p.rcq, want, "receive")?;
        let (n, _, o) = poll_eq(hca, Some(p.srq.srqn()), None)?;
        other.extend(o);
        if n > 0 && fired.is_none() {
            fired = Some(i);
        }
    }
    // On a card the event may trail the third completion a little: it
    // still belongs to the third message (nothing else was consumed).
    let mut late = None;
    if fired.is_none() {
        let (n, _, o, waited) = wait_limit_event(hca, p.srq.srqn(), None)?;
        other.extend(o);
        if n > 0 {
            fired = Some(3);
            late = Some(waited);
        }
    }
    for e in &other {
        r.say(format!("other event: {e:?}"));
    }
    let after = hca
        .query_srq(p.srq)
        .map_err(|e| CliError::driver("querying the SRQ", e))?
        .lwm;
    match fired {
        Some(i) => r.say(format!(
            "SRQ_RQ_LIMIT through the async EQ after message {i} ({} receives left < {limit}){}; the limit reads {after} afterwards",
            posted as u64 - i,
            late.map_or(String::new(), |ns| format!(", {} after its completion", fmt_ns(ns)))
        )),
        None => r.say(format!("NO SRQ_RQ_LIMIT event within {} s", WAIT_NS / 1_000_000_000)),
    }
    let (seqs, _) = s.flow.complete_all(hca, &mut p)?;
    let refill = POSTED - left(p.srq, p.rcq) as u64;
    s.flow.post_recvs(hca, p.srq, p.rbufs, refill)?;
    let rearm = hca
        .arm_srq_limit(p.srq, limit)
        .map_err(|e| CliError::driver("re-arming the SRQ limit", e))?;
    let lwm = hca
        .query_srq(p.srq)
        .map_err(|e| CliError::driver("querying the SRQ", e))?
        .lwm;
    r.say(format!(
        "polled {}; re-posted {refill}, re-armed at {limit}: {} (the limit reads {lwm}), then disarmed",
        range("messages", &seqs),
        arm_text(rearm)
    ));
    hca.arm_srq_limit(p.srq, 0)
        .map_err(|e| CliError::driver("disarming the SRQ limit", e))?;
    r.set("limit", limit);
    r.set("event_after_message", fired);
    r.set("event_late_ns", late);
    r.set("lwm_after_event", after);
    r.set("lwm_after_rearm", lwm);
    if fired != Some(3) {
        return Err(CliError::check(match fired {
            None => "the SRQ limit event never arrived".to_string(),
            Some(i) => format!(
                "the SRQ limit event came after message {i}, while {} receives were still posted (limit {limit}): expected after message 3",
                posted as u64 - i
            ),
        }));
    }
    if rearm != LimitArm::Armed || lwm as u32 != limit {
        return Err(CliError::check(format!(
            "re-arming the limit at {limit} gave {rearm:?}, lwm {lwm}"
        )));
    }
    Ok(())
}

/// Stage 9: 12 completions waiting, 4 more sends in flight, MODIFY_CQ
/// resize of the receive CQ, 4 more sends; all 20 in order, none lost.
pub fn cq_resize<H: Hal>(
    hca: &TracedHca<'_, H>,
    s: &mut State<'_, H>,
    r: &mut Report,
) -> Result<(), CliError> {
    let mut p = s.objs.parts()?;
    let before = s.flow.received;
    let first = s.flow.next_seq();
    s.flow.post(hca, &mut p, &[(Kind::Send, 77); 12])?;
    wait_pending(hca, p.rcq, 12, "receive")?;
    s.flow.post(hca, &mut p, &[(Kind::Send, 88); 4])?;
    let (from, waiting) = (p.rcq.capacity(), p.rcq.pending());
    hca.resize_cq(p.rcq, 1023)
        .map_err(|e| CliError::driver("resizing the CQ", e))?;
    s.flow.post(hca, &mut p, &[(Kind::Send, 99); 4])?;
    let (seqs, ids) = s.flow.complete_all(hca, &mut p)?;
    let got = s.flow.received - before;
    let in_order = seqs.iter().copied().eq(first..first + 20);
    r.say(format!(
        "12 messages left unpolled, 4 more posted without waiting, then MODIFY_CQ resize {from} -> {} with {waiting} receive completions waiting; 4 more messages after it",
        p.rcq.capacity()
    ));
    r.say(format!(
        "polled {} receive completions ({}){}, {} send completions; {got} of 20 intact",
        seqs.len(),
        range("messages", &seqs),
        if in_order {
            " in order"
        } else {
            " OUT OF ORDER"
        },
        ids.len()
    ));
    r.set("from", from);
    r.set("to", p.rcq.capacity());
    r.set("waiting", waiting);
    r.set("received", got);
    if got != 20 || !in_order || s.flow.bad > 0 {
        return Err(CliError::check(format!(
            "{got} of 20 messages came back intact{} across the resize: {}",
            if in_order { "" } else { ", out of order" },
            s.flow.problems.join("; ")
        )));
    }
    Ok(())
}

/// The stage-10 destroy half: every object, then what the model holds.
pub fn destroy<H: Hal>(
    hca: &TracedHca<'_, H>,
    s: &mut State<'_, H>,
    r: &mut Report,
) -> Result<(), CliError> {
    let (lines, res) = s.objs.destroy(hca);
    for l in lines {
        r.say(l);
    }
    if let Some(dev) = s.model {
        r.set(
            "model_traffic",
            json!({
                "messages": dev.traffic().stats().messages,
                "side_door_uses": dev.traffic().side_door_uses(),
            }),
        );
    }
    res
}
