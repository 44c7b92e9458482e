//! A receiver that sleeps while it waits: the verbs facade's completion
//! channel, a completion vector of its own, CQ moderation and the blocking
//! `get_cq_event_on`, on the device model in threaded mode (the model's
//! device thread executes the sends while the program sleeps in its
//! interrupt wait), or on a ConnectX bound to vfio-pci, where the sleep is a
//! wait on the MSI-X vector's eventfd.
//!
//! ```sh
//! cargo run --example sleeping_receiver            # ConnectX-5 profile, 256 messages
//! cargo run --example sleeping_receiver -- cx7 1000
//! cargo run --example sleeping_receiver -- vfio:0000:03:00.0 256   # a ConnectX through VFIO
//! ```
//!
//! 1. bring the HCA up with two completion vectors on a platform with
//!    interrupts (the model: four vectors; VFIO: the MSI-X vectors
//!    `mlx5_vfio::VfioPlatform::open` enabled);
//! 2. a completion channel, and the receive CQ on it and on vector 1, with
//!    moderation: one event per batch of completions instead of one per
//!    completion (when the device has the `cq_moderation` capability);
//! 3. two RC queue pairs connected in the loopback mode bring-up chose, a
//!    sender and a receiver on an SRQ;
//! 4. per batch: post the sends, arm the receive CQ, poll it, and when it is
//!    empty sleep in `get_cq_event_on` until the device's interrupt; check
//!    every payload, repost each buffer;
//! 5. count the interrupts of the receive CQ's vector (the model's counter;
//!    through VFIO the kernel's, from `/proc/interrupts`): a sleep that
//!    ended without one is an error;
//! 6. destroy everything and tear down: every firmware page comes back.

use std::error::Error;

use mlx5_driver::verbs::{
    AccessFlags, CqHandle, CqInitAttrEx, ModerateCq, ModifyCqAttr, QpCap, QpInitAttr, RecvWr,
    SendFlags, SendWr, Sge, SrqInitAttr, Verbs, WcStatus, WorkCompletion,
};
use mlx5_driver::{Hca, HcaConfig};
use mlx5_hal::{Hal, MAX_IRQ_VECTORS};
use mlx5_sim::{Device, Profile, SimConfig};
use mlx5_vfio::{VfioOptions, VfioPlatform};

/// Receive buffers (one per posted receive) and their size.
const RECV_BUFS: usize = 64;
const BUF: usize = 256;
/// Messages per batch: one send doorbell, one completion event (with
/// moderation).
const BATCH: usize = 16;
/// Every wait is bounded.
const TIMEOUT_NS: u64 = 1_000_000_000;
/// The receive CQ's vector and context value.
const VECTOR: u32 = 1;
const CQ_CONTEXT: u64 = 0x5eed;

/// Interrupts raised so far on a vector (the model's counter, or the
/// kernel's for a VFIO device).
type IrqCount<'a> = &'a dyn Fn(u16) -> Result<u64, Box<dyn Error>>;

/// What a run did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Messages sent and received, payloads checked.
    pub messages: u64,
    /// Completion events read from the channel (each one a wake-up).
    pub events: u64,
    /// Blocking reads that had to sleep (the CQ was empty when armed).
    pub sleeps: u64,
    /// Whether the receive CQ was moderated (`cq_count` = one batch).
    pub moderated: bool,
    /// The receive CQ's interrupt vector.
    pub vector: u16,
    /// Interrupts on the receive CQ's vector during the run.
    pub interrupts: u64,
    /// Firmware pages still held after teardown (0).
    pub pages_left: usize,
    /// Objects the model still holds after teardown (0; `None` on a device
    /// other than the model).
    pub model_objects_left: Option<usize>,
}

/// The payload of message `n`: 16..=BUF bytes that name it.
fn payload(n: u64, out: &mut [u8; BUF]) -> usize {
    let len = 16 + (n as usize * 37) % (BUF - 15);
    for (i, b) in out[..len].iter_mut().enumerate() {
        *b = (n as u8).wrapping_mul(13) ^ i as u8;
    }
    len
}

/// Poll `cq` into `wc` until it is empty; returns the completions.
fn drain<H: Hal>(
    ctx: &mut Verbs<H>,
    cq: CqHandle,
    wc: &mut Vec<WorkCompletion>,
) -> Result<(), Box<dyn Error>> {
    let mut batch = [WorkCompletion::EMPTY; BATCH];
    loop {
        let n = ctx.poll_cq(cq, &mut batch)?;
        wc.extend_from_slice(&batch[..n]);
        if n < batch.len() {
            return Ok(());
        }
    }
}

/// The interrupt vector completion vector `comp` signals on a platform with
/// `irqs` vectors: vector 0 is the async EQ's, completions spread over the
/// others (Linux's `MLX5_IRQ_VEC_COMP_BASE`, as the driver assigns them).
fn comp_irq(irqs: u16, comp: u32) -> u16 {
    let irqs = irqs.min(MAX_IRQ_VECTORS);
    if irqs <= 1 {
        0
    } else {
        1 + (comp % u32::from(irqs - 1)) as u16
    }
}

/// Run `messages` messages (a multiple of [`BATCH`]) on a model of
/// `cfg` (forced to threaded mode with four interrupt vectors).
pub fn run(cfg: SimConfig, messages: u64) -> Result<Summary, Box<dyn Error>> {
    let dev = Device::new(SimConfig {
        irq_vectors: 4,
        ..cfg.threaded()
    });
    let counter = dev.clone();
    let mut s = run_on(dev.hal(), messages, &move |v| Ok(counter.interrupts(v)))?;
    s.model_objects_left = Some(dev.objects().total());
    let v = dev.violations();
    if !v.is_empty() {
        return Err(format!("the model saw protocol violations: {v:?}").into());
    }
    Ok(s)
}

/// Run `messages` messages on the function at `addr` bound to vfio-pci;
/// the interrupts are what the kernel counted on the vector's MSI-X line.
pub fn run_vfio(addr: &str, messages: u64) -> Result<Summary, Box<dyn Error>> {
    let plat = VfioPlatform::open(addr, VfioOptions::default())?;
    let counter = plat.clone();
    run_on(plat, messages, &move |v| {
        Ok(counter
            .kernel_irq_counts()?
            .get(usize::from(v))
            .copied()
            .unwrap_or(0))
    })
}

/// The program on any platform with interrupts.
fn run_on<H: Hal>(hal: H, messages: u64, irqs: IrqCount<'_>) -> Result<Summary, Box<dyn Error>> {
    if hal.irq_vectors() == 0 {
        return Err("the platform has no interrupt vectors: there is nothing to sleep on".into());
    }
    let vector = comp_irq(hal.irq_vectors(), VECTOR);
    let irqs_before = irqs(vector)?;
    let hca = Hca::bring_up(
        hal.clone(),
        HcaConfig {
            comp_vectors: 2,
            ..HcaConfig::default()
        },
    )?;
    let mut ctx: Box<Verbs<H>> = Box::new(Verbs::open(hca));
    let mut s = Summary {
        vector,
        ..Summary::default()
    };

    // 2. The channel and the CQs: sends complete on a CQ nobody sleeps on.
    let ch = ctx.create_comp_channel()?;
    let (rcq, _) = ctx.create_cq_ex(&CqInitAttrEx {
        cq_context: CQ_CONTEXT,
        channel: Some(ch),
        comp_vector: VECTOR,
        ..CqInitAttrEx::new(255)
    })?;
    let (scq, _) = ctx.create_cq(255)?;
    if ctx.cq_moderation_caps().max_cq_count as usize >= BATCH {
        let moderate = ModerateCq {
            cq_count: BATCH as u16,
            // Count only: a period would also let a partial batch out.
            cq_period: 0,
        };
        ctx.modify_cq(
            rcq,
            &ModifyCqAttr {
                attr_mask: ModifyCqAttr::MODERATE,
                moderate,
            },
        )?;
        s.moderated = true;
    }

    // 3. The SRQ, the queue pairs and the buffers.
    let (srq, _) = ctx.create_srq(&SrqInitAttr {
        max_wr: RECV_BUFS as u32 - 1,
        max_sge: 1,
        srq_limit: 0,
        cq: Some(rcq),
    })?;
    let cap = QpCap {
        max_send_wr: 2 * BATCH as u32,
        max_send_sge: 1,
        ..QpCap::default()
    };
    let attr = |send_cq| QpInitAttr {
        send_cq,
        recv_cq: rcq,
        srq: Some(srq),
        cap,
        sq_sig_all: false,
    };
    let (tx, _) = ctx.create_qp(&attr(scq))?;
    let (rx, _) = ctx.create_qp(&attr(scq))?;
    ctx.connect_loopback(tx, rx)?;
    let sbuf = hal.alloc_dma(BATCH * BUF)?;
    let rbuf = hal.alloc_dma(RECV_BUFS * BUF)?;
    let smr = ctx.reg_mr(sbuf.iova(), (BATCH * BUF) as u64, AccessFlags::LOCAL_WRITE)?;
    let rmr = ctx.reg_mr(
        rbuf.iova(),
        (RECV_BUFS * BUF) as u64,
        AccessFlags::LOCAL_WRITE,
    )?;
    let recv_sge = |slot: u64| Sge {
        addr: rbuf.iova() + slot * BUF as u64,
        length: BUF as u32,
        lkey: rmr.lkey(),
    };
    // An SRQ of `max_wr` 63 holds 63 receives (one WQE stays unposted, the
    // ring's tail).
    for slot in 0..RECV_BUFS as u64 - 1 {
        let sge = [recv_sge(slot)];
        ctx.post_srq_recv(
            srq,
            &[RecvWr {
                wr_id: slot,
                sges: &sge,
            }],
        )
        .map_err(|e| e.errno)?;
    }

    // 4. Batches: send, then sleep until the receive CQ's event.
    let mut bytes = [0u8; BUF];
    let mut wc = Vec::with_capacity(BATCH);
    let mut armed = false;
    for first in (0..messages).step_by(BATCH) {
        let mut sges = [[Sge {
            addr: 0,
            length: 0,
            lkey: 0,
        }; 1]; BATCH];
        let mut lens = [0usize; BATCH];
        for (i, sge) in sges.iter_mut().enumerate() {
            lens[i] = payload(first + i as u64, &mut bytes);
            sbuf.write_bytes(i * BUF, &bytes[..lens[i]]);
            sge[0] = Sge {
                addr: sbuf.iova() + (i * BUF) as u64,
                length: lens[i] as u32,
                lkey: smr.lkey(),
            };
        }
        let wrs: Vec<SendWr> = (0..BATCH)
            .map(|i| SendWr {
                wr_id: first + i as u64,
                // The last request of a batch is signaled and retires the others.
                send_flags: if i == BATCH - 1 {
                    SendFlags::SIGNALED
                } else {
                    SendFlags::default()
                },
                sg_list: &sges[i],
                ..SendWr::EMPTY
            })
            .collect();
        ctx.post_send(tx, &wrs).map_err(|e| e.errno)?;

        // The verbs loop: arm, poll, sleep only when the CQ is empty. An
        // arm stays outstanding until its event is read: arming again
        // before that repeats the arm's sequence number, which the device
        // takes as a stale arm (the event of a batch that was polled in
        // full is read, without sleeping, at the next batch's first wait).
        wc.clear();
        while wc.len() < BATCH {
            if !armed {
                ctx.req_notify_cq(rcq, false)?;
                armed = true;
            }
            let had = wc.len();
            drain(&mut ctx, rcq, &mut wc)?;
            if wc.len() >= BATCH {
                break;
            }
            if wc.len() == had {
                s.sleeps += 1;
            }
            let ev = ctx.get_cq_event_on(ch, TIMEOUT_NS)?;
            if (ev.cq, ev.cq_context) != (rcq, CQ_CONTEXT) {
                return Err("an event of another CQ on this channel".into());
            }
            ctx.ack_cq_events(rcq, 1)?;
            s.events += 1;
            armed = false;
            drain(&mut ctx, rcq, &mut wc)?;
        }
        // RC delivers in order: the batch's k-th receive completion is
        // message first + k, in whichever buffer the SRQ gave it.
        for (k, w) in wc.iter().enumerate() {
            if w.status != WcStatus::Success {
                return Err(format!("receive {} failed: {:?}", w.wr_id, w.status).into());
            }
            let n = first + k as u64;
            let len = payload(n, &mut bytes);
            let mut got = [0u8; BUF];
            rbuf.read_bytes(w.wr_id as usize * BUF, &mut got[..len]);
            if w.byte_len as usize != len || got[..len] != bytes[..len] {
                return Err(format!("message {n}: payload differs").into());
            }
            let sge = [recv_sge(w.wr_id)];
            ctx.post_srq_recv(
                srq,
                &[RecvWr {
                    wr_id: w.wr_id,
                    sges: &sge,
                }],
            )
            .map_err(|e| e.errno)?;
            s.messages += 1;
        }
        // The batch's one send completion frees the send queue.
        let mut sent = [WorkCompletion::EMPTY; 1];
        let start = hal.now_ns();
        while ctx.poll_cq(scq, &mut sent)? == 0 {
            if hal.now_ns() - start > TIMEOUT_NS {
                return Err("no send completion".into());
            }
            hal.delay_us(10);
        }
    }
    // 5. The interrupts of the receive CQ's vector, before teardown (a VFIO
    // device's lines go away when its vectors are disabled).
    s.interrupts = irqs(vector)?.saturating_sub(irqs_before);
    if s.sleeps > 0 && s.interrupts == 0 {
        return Err(format!(
            "{} sleeps ended without an interrupt on vector {vector}",
            s.sleeps
        )
        .into());
    }

    // 6. Teardown.
    ctx.destroy_qp(tx)?;
    ctx.destroy_qp(rx)?;
    ctx.destroy_srq(srq)?;
    ctx.destroy_cq(rcq)?;
    ctx.destroy_cq(scq)?;
    ctx.destroy_comp_channel(ch)?;
    ctx.dereg_mr(smr).map_err(|(_, e)| e)?;
    ctx.dereg_mr(rmr).map_err(|(_, e)| e)?;
    drop((sbuf, rbuf));
    let report = ctx.close()?;
    s.pages_left = report.pages_left;
    Ok(s)
}

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let device = args.next();
    let messages: u64 = match args.next() {
        Some(n) => n.parse()?,
        None => 256,
    };
    let messages = messages.div_ceil(BATCH as u64) * BATCH as u64;
    let (name, s) = match device.as_deref() {
        Some(d) if d.starts_with("vfio:") => (d.to_string(), run_vfio(&d[5..], messages)?),
        p => {
            let profile = match p {
                None | Some("cx5") => Profile::ConnectX5,
                Some("cx4lx") => Profile::ConnectX4Lx,
                Some("cx6dx") => Profile::ConnectX6Dx,
                Some("cx7") => Profile::ConnectX7,
                Some(p) => {
                    return Err(format!(
                        "unknown device {p:?} (cx4lx, cx5, cx6dx, cx7, or vfio:DDDD:BB:DD.F)"
                    )
                    .into())
                }
            };
            (
                format!("{profile:?}"),
                run(SimConfig::profile(profile), messages)?,
            )
        }
    };
    println!(
        "{name}: {} messages received by a receiver that slept in get_cq_event_on, payloads checked",
        s.messages
    );
    println!(
        "  {} completion events ({} waits found the CQ empty), moderation {}, {} interrupts on the receive CQ's vector {}",
        s.events,
        s.sleeps,
        if s.moderated { "one event per batch" } else { "off (no cq_moderation capability)" },
        s.interrupts,
        s.vector
    );
    match s.model_objects_left {
        Some(o) => println!(
            "  {} firmware pages left, {o} model objects left",
            s.pages_left
        ),
        None => println!("  {} firmware pages left", s.pages_left),
    }
    if s.pages_left != 0 {
        return Err(format!("{} firmware pages were not returned", s.pages_left).into());
    }
    Ok(())
}

/// The example runs in `cargo test` on every model profile, so it cannot
/// rot.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_on_every_profile() {
        for p in [
            Profile::ConnectX4Lx,
            Profile::ConnectX5,
            Profile::ConnectX6Dx,
            Profile::ConnectX7,
        ] {
            let s = run(SimConfig::profile(p), 8 * BATCH as u64)
                .unwrap_or_else(|e| panic!("{p:?}: {e}"));
            assert_eq!(s.messages, 8 * BATCH as u64, "{p:?}");
            // Every sleep ended in an event (a lost wake-up is ETIMEDOUT).
            assert!(s.sleeps <= s.events, "{p:?}: {s:?}");
            if s.moderated {
                // At most one event per batch of 16, plus the one extra
                // event an arm may give (verbs allows it): never one per
                // completion.
                assert!(s.events <= 16, "{p:?}: moderation: {s:?}");
            }
            assert!(
                s.sleeps == 0 || s.interrupts > 0,
                "{p:?}: slept without an interrupt: {s:?}"
            );
            assert_eq!((s.pages_left, s.model_objects_left), (0, Some(0)), "{p:?}");
            assert_eq!(s.vector, 2, "completion vector 1 of 4 interrupt vectors");
        }
    }
}
