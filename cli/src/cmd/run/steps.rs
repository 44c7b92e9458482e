//! The driver steps of a script: the same calls the demo makes (CQs, an
//! SRQ, a loopback QP pair, posts, polls, resize, the SRQ limit), on the
//! session's one set of objects. Each step's results are named fields
//! (`expect received=4`); the objects become variables (`$scq`, `$rcq`,
//! `$srq`, `$sender`, `$receiver`).

use mlx5_driver::srq::LimitArm;
use mlx5_hal::Hal;

use super::{Outcome, Session};
use crate::common::error::{quote, CliError};
use crate::common::report::Report;
use crate::common::target::parse_u64;
use crate::scenario::flow::{demo_len, poll_eq, Kind};
use crate::scenario::mission::{create_qps, create_queues};
use crate::scenario::objects::{BUF, NBUF};

/// Argument `name` of a step (default when absent), refused with a range
/// error when it is not a number within `max` (every count is parsed into
/// its real width: nothing is truncated).
fn arg(
    args: &[(String, String)],
    name: &str,
    default: u64,
    max: u64,
    no: usize,
) -> Result<u64, CliError> {
    match args.iter().find(|(k, _)| k == name) {
        None => Ok(default),
        Some((_, v)) => {
            let n = parse_u64(v).map_err(|_| {
                CliError::usage(
                    format!("line {no}: {name}={} is not a number", quote(v)),
                    "decimal or 0x hex",
                )
            })?;
            if n > max {
                return Err(CliError::usage(
                    format!("line {no}: {name}={n} is out of range (at most {max})"),
                    format!("give {name} from 0 to {max}"),
                ));
            }
            Ok(n)
        }
    }
}

/// [`arg`] for a 32-bit quantity (CQ and SRQ sizes, inline size, limit).
fn arg32(args: &[(String, String)], name: &str, default: u32, no: usize) -> Result<u32, CliError> {
    // `arg` refused anything above u32::MAX.
    Ok(arg(args, name, default.into(), u32::MAX.into(), no)? as u32)
}

fn kind(args: &[(String, String)], no: usize) -> Result<Kind, CliError> {
    match args
        .iter()
        .find(|(k, _)| k == "kind")
        .map(|(_, v)| v.as_str())
    {
        None | Some("send") => Ok(Kind::Send),
        Some("inline") => Ok(Kind::Inline),
        Some(k) => Err(CliError::usage(
            format!("line {no}: kind={k}"),
            "kind=send (a gather list through the DMA key) or kind=inline",
        )),
    }
}

impl<H: Hal> Session<'_, '_, H> {
    fn bind(&mut self, name: &str, v: u32) {
        self.vars.insert(
            name.into(),
            Outcome {
                status: Some(0),
                primary: Some(v as u64),
                ..Outcome::default()
            },
        );
    }

    /// Run a step. A driver error becomes the outcome's error (with the
    /// firmware status and syndrome when a command failed).
    pub(super) fn step(
        &mut self,
        kind_: super::parse::StepKind,
        args: &[(String, String)],
        no: usize,
    ) -> Result<Outcome, CliError> {
        let mut o = Outcome {
            status: Some(0),
            ..Outcome::default()
        };
        match self.step_inner(kind_, args, no, &mut o) {
            Ok(()) => {}
            Err(e @ CliError::Usage { .. }) => return Err(e),
            Err(e) => {
                o.status = None;
                if let CliError::Driver {
                    err:
                        mlx5_driver::Error::Command {
                            status, syndrome, ..
                        },
                    ..
                } = &e
                {
                    o.status = Some(status.0);
                    o.syndrome = *syndrome;
                }
                o.error = Some(e.message());
            }
        }
        Ok(o)
    }

    fn step_inner(
        &mut self,
        k: super::parse::StepKind,
        args: &[(String, String)],
        no: usize,
        o: &mut Outcome,
    ) -> Result<(), CliError> {
        use super::parse::StepKind as S;
        let hca = self.hca;
        let mut quiet = Report::new(true, false, false);
        let need = |what: &str| {
            CliError::usage(
                format!("line {no}: no {what} yet"),
                "run `queues` (and `pair` for sends) first",
            )
        };
        match k {
            S::Queues => {
                if self.objs.scq.is_some() {
                    return Err(CliError::usage(
                        format!("line {no}: the queues exist already"),
                        "one set of queues a session; `destroy` first",
                    ));
                }
                let cq = arg32(args, "cq", 63, no)?;
                let wr = arg32(args, "wr", 63, no)?;
                create_queues(hca, &mut self.objs, cq, wr, &mut quiet)?;
                let (s, r, q) = (
                    self.objs.scq.as_ref().map_or(0, |c| c.cqn()),
                    self.objs.rcq.as_ref().map_or(0, |c| c.cqn()),
                    self.objs.srq.as_ref().map_or(0, |c| c.srqn()),
                );
                self.bind("scq", s);
                self.bind("rcq", r);
                self.bind("srq", q);
                o.fields.insert("scq".into(), s as u64);
                o.fields.insert("rcq".into(), r as u64);
                o.fields.insert("srq".into(), q as u64);
                o.fields.insert(
                    "cq_capacity".into(),
                    self.objs.rcq.as_ref().map_or(0, |c| c.capacity()) as u64,
                );
            }
            S::Pair => {
                if self.objs.srq.is_none() {
                    return Err(need("queues"));
                }
                // A second pair would replace the first's handles and
                // leave its QPs holding the SRQ and CQs.
                if self.objs.sender.is_some() {
                    return Err(CliError::usage(
                        format!("line {no}: the QP pair exists already"),
                        "one QP pair a session; `destroy` first",
                    ));
                }
                let inline = arg32(args, "inline", 0, no)?;
                create_qps(hca, &mut self.objs, inline, &mut quiet)?;
                let p = self.objs.parts()?;
                let (s, r) = (p.sender.qpn(), p.receiver.qpn());
                self.bind("sender", s);
                self.bind("receiver", r);
                o.fields.insert("sender".into(), s as u64);
                o.fields.insert("receiver".into(), r as u64);
            }
            S::PostRecv => {
                // Bounded by the SRQ's free entries before anything is
                // built for the requests.
                let n = arg(args, "n", 16, u64::from(u32::MAX), no)?;
                let (Some(srq), Some(rb)) = (self.objs.srq.as_mut(), self.objs.rbufs.as_ref())
                else {
                    return Err(need("SRQ"));
                };
                let free = srq.max_wr().saturating_sub(srq.outstanding()) as u64;
                if n > free {
                    return Err(CliError::usage(
                        format!(
                            "line {no}: post-recv n={n}: the SRQ has room for {free} more \
                             receives ({} of {} posted)",
                            srq.outstanding(),
                            srq.max_wr()
                        ),
                        "poll first, or create the queues with a larger wr=",
                    ));
                }
                self.flow.post_recvs(hca, srq, rb, n)?;
                o.fields.insert("posted".into(), n);
                o.fields
                    .insert("outstanding".into(), srq.outstanding() as u64);
            }
            S::Post | S::Send => {
                // Bounded by the send buffer's free slots before anything
                // is built for the messages.
                let n = arg(args, "n", 1, u64::from(u32::MAX), no)?;
                let kd = kind(args, no)?;
                let len = args
                    .iter()
                    .any(|(k, _)| k == "len")
                    .then(|| arg(args, "len", 0, BUF as u64, no))
                    .transpose()?;
                if self.objs.sender.is_none() {
                    return Err(need("QP pair"));
                }
                let free = NBUF.saturating_sub(self.flow.in_flight()) as u64;
                if n > free {
                    return Err(CliError::usage(
                        format!(
                            "line {no}: {} n={n}: {} sends are in flight and the send \
                             buffer has {NBUF} slots, so at most {free} more",
                            if k == S::Send { "send" } else { "post" },
                            self.flow.in_flight()
                        ),
                        "`poll` to complete the sends in flight first",
                    ));
                }
                let seq0 = self.flow.next_seq();
                let msgs: Vec<(Kind, usize)> = (seq0..seq0 + n)
                    .map(|s| (kd, len.map_or(demo_len(s), |l| l as usize)))
                    .collect();
                let mut p = self.objs.parts()?;
                self.flow.post(hca, &mut p, &msgs)?;
                o.fields.insert("posted".into(), n);
                if k == S::Send {
                    let (seqs, ids) = self.flow.complete_all(hca, &mut p)?;
                    o.fields.insert("received".into(), seqs.len() as u64);
                    o.fields.insert("send_completions".into(), ids.len() as u64);
                    o.fields.insert("bad".into(), self.flow.bad);
                }
            }
            S::Poll => {
                if self.objs.sender.is_none() {
                    return Err(need("QP pair"));
                }
                let mut p = self.objs.parts()?;
                let (seqs, ids) = self.flow.complete_all(hca, &mut p)?;
                o.fields.insert("received".into(), seqs.len() as u64);
                o.fields.insert("send_completions".into(), ids.len() as u64);
                o.fields.insert("bad".into(), self.flow.bad);
            }
            S::Resize => {
                let which = args
                    .iter()
                    .find(|(k, _)| k == "cq")
                    .map_or("rcq", |(_, v)| v.as_str());
                let entries = arg32(args, "entries", 255, no)?;
                let cq = match which {
                    "scq" | "$scq" => self.objs.scq.as_mut(),
                    "rcq" | "$rcq" => self.objs.rcq.as_mut(),
                    w => {
                        return Err(CliError::usage(
                            format!("line {no}: cq={w}"),
                            "cq=scq (the send CQ) or cq=rcq (the receive CQ)",
                        ))
                    }
                }
                .ok_or_else(|| need("CQs"))?;
                let from = cq.capacity();
                hca.resize_cq(cq, entries)
                    .map_err(|e| CliError::driver("resizing the CQ", e))?;
                o.fields.insert("from".into(), from as u64);
                o.fields.insert("capacity".into(), cq.capacity() as u64);
                o.primary = Some(cq.cqn() as u64);
            }
            S::Arm => {
                let limit = arg32(args, "limit", 1, no)?;
                let srq = self.objs.srq.as_mut().ok_or_else(|| need("SRQ"))?;
                let a = hca
                    .arm_srq_limit(srq, limit)
                    .map_err(|e| CliError::driver("arming the SRQ limit", e))?;
                o.fields
                    .insert("armed".into(), (a == LimitArm::Armed) as u64);
                o.fields
                    .insert("raise_now".into(), (a == LimitArm::RaiseNow) as u64);
                let lwm = hca
                    .query_srq(srq)
                    .map_err(|e| CliError::driver("querying the SRQ", e))?
                    .lwm;
                o.fields.insert("lwm".into(), lwm as u64);
            }
            S::Events => {
                let srqn = self.objs.srq.as_ref().map(|s| s.srqn());
                let (limit, _, other) = poll_eq(hca, srqn, None)?;
                o.fields.insert("limit_events".into(), limit);
                o.fields.insert("other_events".into(), other.len() as u64);
            }
            S::Destroy => {
                let (lines, res) = self.objs.destroy(hca);
                o.fields.insert("destroyed".into(), lines.len() as u64);
                self.flow = crate::scenario::flow::Flow::new();
                res?;
            }
        }
        Ok(())
    }
}
