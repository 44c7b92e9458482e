//! The demo scenario: the whole mission, narrated step by step.

use std::collections::VecDeque;

use mlx5_driver::srq::LimitArm;
use mlx5_hal::Hal;
use mlx5_sim::Device;

use super::kit::{
    arm_text, create_cq_and_srq, destroy_all, left, poll_eq, poll_receives, post, say_other,
    seq_range, Wire,
};
use super::{Objects, Summary, BUF, NO_TRAFFIC, QPN};
use crate::error::CliError;
use crate::report::Report;
use crate::session::TracedHca;

pub(super) fn demo<H: Hal>(
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
    hca.arm_cq(cq, false)
        .map_err(|e| CliError::driver("arming the CQ", e))?;
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
