//! What the self-test adds to the mission's traffic, SRQ limit, CQ resize
//! and destroy steps: the other kinds of message (SENDs of 1 to 256 bytes,
//! inline SENDs, an RDMA WRITE with immediate through the stage-5 key) and
//! QUERY_QP, and the checks that turn what the steps saw into a pass or a
//! fail.

use mlx5_driver::srq::LimitArm;
use mlx5_hal::Hal;
use serde_json::json;

use crate::common::error::CliError;
use crate::common::report::Report;
use crate::common::session::TracedHca;
use crate::scenario::flow::{range, Kind};
use crate::scenario::objects::state_name;
use crate::scenario::State;

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

/// The end of stage 7, after the mission's 20 messages: SENDs of 1 to 256
/// bytes through the DMA key, inline SENDs, an RDMA WRITE with immediate
/// through the new key, one doorbell; every payload, `wr_id` and
/// completion of the run so far checked; the receives they took posted
/// again (the limit step counts on the mission's number); QUERY_QP.
pub(super) fn kinds<H: Hal>(
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
        "{} receive completions ({}) and {} send completions ({}); of the {} messages so far {} good, {} wrong",
        seqs.len(),
        range("messages", &seqs),
        ids.len(),
        range("wr_id", &ids),
        s.flow.sent,
        s.flow.received,
        s.flow.bad
    ));
    for pr in &s.flow.problems {
        r.say(format!("wrong: {pr}"));
    }
    let first = s.flow.next_recv_wr();
    let n = msgs.len() as u64;
    let p = s.objs.parts()?;
    s.flow.post_recvs(hca, p.srq, p.rbufs, n)?;
    r.say(format!(
        "re-posted the {n} receives they took ({}): {} outstanding again, as the limit step expects",
        range("wr_id", &[first, first + n - 1]),
        p.srq.outstanding()
    ));
    let q = query_sender(hca, s)?;
    r.say(q);
    r.set("sent", s.flow.sent);
    r.set("received", s.flow.received);
    r.set("send_completions", s.flow.send_completions);
    r.set("problems", s.flow.problems.clone());
    if let Some(dev) = s.model {
        r.set("model_side_door_uses", dev.traffic().side_door_uses());
    }
    let n = s.flow.sent;
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

/// The end of stage 8: the mission's limit step saw the event after the
/// message that left fewer receives posted than the limit (not before,
/// not never), and the re-arm took.
pub(super) fn check_limit<H: Hal>(s: &State<'_, H>, r: &mut Report) -> Result<(), CliError> {
    let Some(l) = s.limit else {
        return Err(CliError::failed(
            "internal error: the limit step left no result",
            "this is a bug in mlx5; please report it",
        ));
    };
    r.set("event_after_message", l.fired_after);
    r.set("expected_after_message", l.expected_after);
    if l.fired_after != Some(l.expected_after) {
        return Err(CliError::check(match l.fired_after {
            None => "the SRQ limit event never arrived".to_string(),
            Some(i) => format!(
                "the SRQ limit event came after message {i} (limit {}): expected after message {}, the first to leave fewer receives posted than the limit",
                l.limit, l.expected_after
            ),
        }));
    }
    if l.rearm != LimitArm::Armed || l.lwm_after_rearm != l.limit {
        return Err(CliError::check(format!(
            "re-arming the limit at {} gave {:?}, lwm {}",
            l.limit, l.rearm, l.lwm_after_rearm
        )));
    }
    Ok(())
}

/// The end of stage 9: every message of the resize step came back intact
/// and in order across the resize.
pub(super) fn check_resize<H: Hal>(s: &State<'_, H>, r: &mut Report) -> Result<(), CliError> {
    let Some(z) = s.resize else {
        return Err(CliError::failed(
            "internal error: the resize step left no result",
            "this is a bug in mlx5; please report it",
        ));
    };
    r.set("in_order", z.in_order);
    if z.received != z.sent || !z.in_order || s.flow.bad > 0 {
        return Err(CliError::check(format!(
            "{} of {} messages came back intact{} across the resize: {}",
            z.received,
            z.sent,
            if z.in_order { "" } else { ", out of order" },
            s.flow.problems.join("; ")
        )));
    }
    Ok(())
}

/// The end of the destroy step (stage 10, before teardown): what the
/// model's traffic engine carried.
pub(super) fn model_traffic<H: Hal>(s: &State<'_, H>, r: &mut Report) {
    if let Some(dev) = s.model {
        r.set(
            "model_traffic",
            json!({
                "messages": dev.traffic().stats().messages,
                "side_door_uses": dev.traffic().side_door_uses(),
            }),
        );
    }
}
