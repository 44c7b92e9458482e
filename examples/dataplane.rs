//! A dataplane on the device model: the whole receive/send loop through real
//! queue pairs, the way a program on a ConnectX runs it.
//!
//! ```sh
//! cargo run --example dataplane            # ConnectX-5 profile, 1000 messages
//! cargo run --example dataplane -- cx7 5000
//! ```
//!
//! 1. bring the HCA up (on hardware: `mlx5_vfio::VfioPlatform::open(..)`
//!    instead of the model's platform, nothing else changes);
//! 2. a send CQ, a receive CQ and an SRQ (an RMP at ISSI 1);
//! 3. two RC queue pairs connected to each other in the loopback mode the
//!    driver chose at bring-up: a sender with a send queue, a receiver whose
//!    receive side is the SRQ;
//! 4. post receive buffers, send messages in batches, wait for the receive
//!    CQ's completion event through EQ polling, poll both CQs, check every
//!    payload, repost each buffer as soon as its message is read;
//! 5. destroy everything and tear down: every firmware page comes back.
//!
//! Every fallible call uses `?`: the driver's errors convert into
//! `mlx5_driver::Error`, and every error type implements `Error`, so a
//! `Box<dyn Error>` takes them all.

use std::error::Error;

use mlx5_driver::cq::{CqOptions, Cqe};
use mlx5_driver::qp::{Payload, QpLinks, SendOp, SendQueueCaps, SendRequest, SendSlot};
use mlx5_driver::srq::RecvRequest;
use mlx5_driver::{Event, Hca, HcaConfig};
use mlx5_hal::Hal;
use mlx5_sim::{Device, Profile, SimConfig};

/// Receive buffers (one per posted receive) and their size.
const RECV_BUFS: usize = 64;
const BUF: usize = 256;
/// Messages per batch: one send doorbell each.
const BATCH: usize = 16;
/// Every wait is bounded (device time: virtual on the synchronous model).
const TIMEOUT_NS: u64 = 1_000_000_000;

/// What a run did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Messages sent and received, payloads checked.
    pub messages: u64,
    /// Send completions (one per signaled send).
    pub send_completions: u64,
    /// Completion events of the receive CQ taken through EQ polling.
    pub completion_events: u64,
    /// Firmware pages still held after teardown (0).
    pub pages_left: usize,
    /// Objects the model still holds after teardown (0).
    pub model_objects_left: usize,
}

/// The payload of message `n`: its length varies (16..=BUF bytes), its
/// bytes name it.
fn payload(n: u64, out: &mut [u8; BUF]) -> usize {
    let len = 16 + (n as usize * 37) % (BUF - 15);
    for (i, b) in out[..len].iter_mut().enumerate() {
        *b = (n as u8).wrapping_mul(31).wrapping_add(i as u8);
    }
    len
}

/// Run the dataplane on a model with `cfg`, sending `messages` messages.
pub fn run(cfg: SimConfig, messages: u64) -> Result<Summary, Box<dyn Error>> {
    let dev = Device::new(cfg);
    // On hardware: let hal = mlx5_vfio::VfioPlatform::open("0000:03:00.0", Default::default())?;
    let hca = Hca::bring_up(dev.hal(), HcaConfig::default())?;
    let hal = hca.hal().clone();

    // CQs and the SRQ the receiver's messages land in.
    let mut send_cq = hca.create_cq(255, CqOptions::default())?;
    let mut recv_cq = hca.create_cq(255, CqOptions::default())?;
    let mut srq = hca.create_srq(RECV_BUFS as u32, 1, Some(&mut recv_cq))?;

    // The queue pairs: the send table has one slot per send WQEBB.
    let sq = SendQueueCaps {
        max_send_wr: 64,
        ..SendQueueCaps::default()
    };
    let table = vec![SendSlot::EMPTY; hca.send_queue_geometry(&sq)?.wqebbs()];
    let mut sender = hca.create_qp(
        Some(sq),
        QpLinks {
            send_cq: Some(&mut send_cq),
            ..QpLinks::default()
        },
        table,
    )?;
    let mut receiver = hca.create_qp(
        None,
        QpLinks {
            recv_cq: Some(&mut recv_cq),
            srq: Some(&mut srq),
            ..QpLinks::default()
        },
        [],
    )?;
    hca.connect_loopback_pair(&mut sender, &mut receiver)?;

    // Buffers in DMA memory: RECV_BUFS receive buffers, then BATCH send
    // buffers, all under the DMA key of bring-up (`Hca::sge`).
    let mem = hal.alloc_dma((RECV_BUFS + BATCH) * BUF)?;
    let recv_at = |i: u64| i as usize * BUF;
    let send_at = |i: usize| (RECV_BUFS + i) * BUF;
    for i in 0..RECV_BUFS as u64 {
        let sge = [hca.sge(mem.iova_at(recv_at(i)), BUF as u32)];
        srq.post(&[RecvRequest {
            wr_id: i,
            sges: &sge,
        }])?;
    }

    let mut sum = Summary::default();
    let mut cqes = [Cqe::EMPTY; BATCH];
    let mut sent = 0u64;
    let mut data = [0u8; BUF];
    let mut got = [0u8; BUF];
    while sum.messages < messages {
        // Ask for one event at the next receive completion, then send a batch.
        hca.arm_cq(&mut recv_cq, false)?;
        let n = (messages - sent).min(BATCH as u64) as usize;
        let mut sges = [hca.sge(0, 0); BATCH];
        for (k, sge) in sges[..n].iter_mut().enumerate() {
            let len = payload(sent + k as u64, &mut data);
            mem.write_bytes(send_at(k), &data[..len]);
            *sge = hca.sge(mem.iova_at(send_at(k)), len as u32);
        }
        let reqs: Vec<SendRequest<'_>> = (0..n)
            .map(|k| SendRequest {
                wr_id: sent + k as u64,
                op: SendOp::Send,
                payload: Payload::Sges(&sges[k..k + 1]),
                signaled: true,
                solicited: false,
            })
            .collect();
        sender.post_send(&reqs)?;
        sent += n as u64;

        // No interrupts: poll the event queues until the receive CQ's event.
        let deadline = hal.now_ns() + TIMEOUT_NS;
        'wait: loop {
            hca.poll_events()?;
            while let Some(ev) = hca.next_completion() {
                if ev == (Event::Completion { cqn: recv_cq.cqn() }) {
                    break 'wait;
                }
            }
            if hal.now_ns() > deadline {
                return Err("no completion event for the receive CQ within 1 s".into());
            }
            hal.delay_us(10);
        }
        sum.completion_events += 1;

        // Send completions: every request retired in order.
        let deadline = hal.now_ns() + TIMEOUT_NS;
        let mut done = 0;
        while done < n {
            if hal.now_ns() > deadline {
                return Err("send completions missing after 1 s".into());
            }
            let k = send_cq.poll(&mut cqes);
            for cqe in &cqes[..k] {
                let c = sender.complete_send(cqe)?;
                if let Some(e) = c.error() {
                    return Err(e.into());
                }
                done += c.retired as usize;
                sum.send_completions += 1;
            }
        }

        // Receive completions: check the payload, repost the buffer.
        let deadline = hal.now_ns() + TIMEOUT_NS;
        let mut received = 0;
        while received < n {
            if hal.now_ns() > deadline {
                return Err("receive completions missing after 1 s".into());
            }
            let k = recv_cq.poll(&mut cqes);
            for cqe in &cqes[..k] {
                let r = receiver.complete_recv(&mut srq, cqe)?;
                if let Some(e) = r.error() {
                    return Err(e.into());
                }
                let want = payload(sum.messages, &mut data);
                mem.read_bytes(recv_at(r.wr_id), &mut got[..r.byte_len as usize]);
                if got[..r.byte_len as usize] != data[..want] {
                    return Err(format!("message {} arrived altered", sum.messages).into());
                }
                let sge = [hca.sge(mem.iova_at(recv_at(r.wr_id)), BUF as u32)];
                srq.post(&[RecvRequest {
                    wr_id: r.wr_id,
                    sges: &sge,
                }])?;
                sum.messages += 1;
                received += 1;
            }
        }
    }

    // Teardown, in reverse: the QPs first (they use the CQs and the SRQ).
    hca.destroy_qp(
        sender,
        QpLinks {
            send_cq: Some(&mut send_cq),
            ..QpLinks::default()
        },
    )?;
    hca.destroy_qp(
        receiver,
        QpLinks {
            recv_cq: Some(&mut recv_cq),
            srq: Some(&mut srq),
            ..QpLinks::default()
        },
    )?;
    hca.destroy_srq(srq, Some(&mut recv_cq))?;
    hca.destroy_cq(send_cq)?;
    hca.destroy_cq(recv_cq)?;
    drop(mem);
    sum.pages_left = hca.teardown()?.pages_left;
    sum.model_objects_left = dev.objects().total();
    Ok(sum)
}

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let profile = match args.next().as_deref() {
        None | Some("cx5") => Profile::ConnectX5,
        Some("cx4lx") => Profile::ConnectX4Lx,
        Some("cx6dx") => Profile::ConnectX6Dx,
        Some("cx7") => Profile::ConnectX7,
        Some(p) => return Err(format!("unknown profile {p:?} (cx4lx, cx5, cx6dx, cx7)").into()),
    };
    let messages = match args.next() {
        Some(n) => n.parse()?,
        None => 1000,
    };
    let s = run(SimConfig::profile(profile), messages)?;
    println!(
        "{profile:?}: {} messages sent and received through a loopback queue pair, payloads checked",
        s.messages
    );
    println!(
        "  {} send completions, {} completion events, {} firmware pages left, {} model objects left",
        s.send_completions, s.completion_events, s.pages_left, s.model_objects_left
    );
    Ok(())
}

/// The example runs in `cargo test`: every model profile, synchronous and
/// threaded, so it cannot rot.
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
            for cfg in [SimConfig::profile(p), SimConfig::profile(p).threaded()] {
                let s = run(cfg, 100).unwrap_or_else(|e| panic!("{p:?}: {e}"));
                assert_eq!(s.messages, 100, "{p:?}");
                assert_eq!(s.send_completions, 100, "{p:?}: one per signaled send");
                assert_eq!(s.completion_events, 7, "{p:?}: one per batch of 16");
                assert_eq!((s.pages_left, s.model_objects_left), (0, 0), "{p:?}");
            }
        }
    }
}
