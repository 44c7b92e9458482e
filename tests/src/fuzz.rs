//! Fuzz harnesses: one function per target, taking arbitrary
//! bytes. The cargo-fuzz targets in `fuzz/` and the proptest versions in
//! `tests/tests/fuzz_props.rs` (stable, part of `cargo test --workspace`)
//! call the same functions, so a crash found by either reproduces in both.
//!
//! Every harness plays a hostile device: the bytes are what the device
//! writes (CQEs, EQEs, command outputs, mailbox blocks) or, for
//! [`sim_cmd`], what a buggy driver sends to the model. A harness panics
//! only when an invariant it checks fails (or the code under test panics).

use std::fmt::Write as _;

use mlx5_driver::caps::Caps;
use mlx5_driver::cmd::{CmdQueue, BLOCK_STRIDE, MAILBOX_BLOCKS, MAX_CMD_LEN};
use mlx5_driver::cq::{Cqe, CqeSize};
use mlx5_driver::eq::{decode, Event, EventQueue, EventSink, EQE_SIZE};
use mlx5_driver::srq::{CompleteError, Sge, SrqGeometry};
use mlx5_driver::unstable::cq::{CqRing, DoorbellRecord};
use mlx5_driver::unstable::encode;
use mlx5_driver::unstable::srq::SrqRing;
use mlx5_hal::host::HostHal;
use mlx5_hal::Hal;
use mlx5_regs::decode::{decode_command, DecodeOptions, Direction};
use mlx5_regs::layouts::{cmd_queue_entry as ent, initial_seg};
use mlx5_regs::{DeliveryStatus, Opcode};

#[path = "../../sim/tests/common/mod.rs"]
#[allow(
    dead_code,
    missing_docs,
    clippy::all,
    clippy::undocumented_unsafe_blocks
)]
mod simfw;

/// A cursor over the fuzz input: every read is total (0 when exhausted).
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }
    /// Up to `n` bytes (fewer when the input runs out).
    fn take(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// `src` copied into a zeroed buffer of exactly `len` bytes (the device
/// controls the contents of an output, never its length).
fn exact(src: &[u8], len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    let n = src.len().min(len);
    v[..n].copy_from_slice(&src[..n]);
    v
}

// ------------------------------------------------------------------ CQEs

/// CQE decode through [`CqRing`] on a host-memory ring: the input is a
/// script of device writes (arbitrary bytes into any slot, including the
/// ownership byte) and driver operations (pop, poll, pending, resize copy).
/// Checks: the consumer index moves by exactly the CQEs returned, a CQE is
/// returned only when its owner bit matches the pass and its opcode is not
/// INVALID, decoded numbers are masked to 24 bits, `pending` never exceeds
/// the ring, the published doorbell record equals the consumer index.
pub fn cqe_ring(data: &[u8]) {
    let mut b = Bytes(data);
    let hal = HostHal::new(1 << 16);
    let log = 1 + b.u8() % 6;
    let size = if b.u8() & 1 == 0 {
        CqeSize::B64
    } else {
        CqeSize::B128
    };
    let mut ring = CqRing::new(&hal, log, size).expect("ring");
    let dbr = DoorbellRecord::new(&hal).expect("dbr");
    let stride = size.stride();
    let mut out = [Cqe::EMPTY; 8];
    let mut steps = 0;
    while !b.is_empty() && steps < 256 {
        steps += 1;
        // The ring may have been replaced by a resized one.
        let nent = ring.nent();
        match b.u8() % 6 {
            0 | 1 => {
                // Device writes `len` bytes at an arbitrary offset of a slot.
                let slot = b.u8() as usize % nent;
                let off = b.u8() as usize % stride;
                let len = 1 + b_len(&mut b, stride - off);
                let bytes = b.take(len);
                let at = ring.base_offset() + slot * stride + off;
                ring.region().write_bytes(at, bytes);
            }
            2 => {
                let ci = ring.consumer_index();
                let ready = ring.has_next();
                match ring.pop() {
                    Some(c) => {
                        assert!(ready, "pop returned a CQE has_next denied");
                        assert_eq!(ring.consumer_index(), ci.wrapping_add(1));
                        assert_ne!(c.opcode.0, 0xf, "INVALID opcode returned");
                        assert!(c.opcode.0 <= 0xf && c.qpn <= 0xff_ffff && c.srqn <= 0xff_ffff);
                    }
                    None => {
                        assert!(!ready);
                        assert_eq!(ring.consumer_index(), ci);
                    }
                }
            }
            3 => {
                let ci = ring.consumer_index();
                let k = 1 + b.u8() as usize % out.len();
                let n = ring.poll(&dbr, &mut out[..k]);
                assert!(n <= k);
                assert_eq!(ring.consumer_index(), ci.wrapping_add(n as u32));
                if n > 0 {
                    assert_eq!(dbr.ci(), ring.consumer_index() & 0xff_ffff);
                }
            }
            4 => assert!(ring.pending() <= nent),
            _ => {
                let new_log = 1 + b.u8() % 6;
                if let Ok(mut new) = CqRing::new(&hal, new_log, size) {
                    let ci = ring.consumer_index();
                    if let Ok(n) = ring.copy_into_resized(&mut new) {
                        assert!(n <= nent.min(new.nent()));
                        assert_eq!(new.consumer_index(), ci.wrapping_add(1));
                    }
                    if b.u8() & 1 == 1 {
                        ring = new;
                    }
                }
            }
        }
    }
}

fn b_len(b: &mut Bytes<'_>, max: usize) -> usize {
    if max == 0 {
        0
    } else {
        b.u8() as usize % max
    }
}

/// The SRQ ring against completions naming arbitrary WQE indices (what a
/// hostile CQE's `wqe_counter` does): a WQE is handed back only if it is
/// posted, exactly once, and `outstanding` always equals posts − completions.
pub fn srq_ring(data: &[u8]) {
    let mut b = Bytes(data);
    let hal = HostHal::new(1 << 16);
    let Some(geo) = SrqGeometry::for_request(1 + b.u8() as usize % 64, 1 + b.u8() as usize % 3)
    else {
        return;
    };
    let mut ring = SrqRing::new(&hal, geo).expect("ring");
    let mut posted = std::collections::BTreeMap::new();
    let mut next_id = 0u64;
    let mut steps = 0;
    while !b.is_empty() && steps < 512 {
        steps += 1;
        if b.u8() & 1 == 0 {
            let sge = Sge {
                addr: 0x1000,
                length: b.u16() as u32,
                lkey: 1,
            };
            match ring.post(next_id, &[sge]) {
                Ok(idx) => {
                    assert!((idx as usize) < geo.wqe_cnt());
                    assert!(posted.insert(idx, next_id).is_none(), "WQE posted twice");
                    next_id += 1;
                }
                Err(_) => assert_eq!(posted.len(), geo.max_wr),
            }
            ring.ring_doorbell();
        } else {
            // Mostly plausible indices, sometimes anything.
            let raw = b.u16();
            let idx = if raw & 0x8000 == 0 {
                raw % geo.wqe_cnt() as u16
            } else {
                raw
            };
            match ring.complete(idx) {
                Ok(wr_id) => assert_eq!(posted.remove(&idx), Some(wr_id)),
                Err(CompleteError::OutOfRange { index }) => {
                    assert!(index as usize >= geo.wqe_cnt())
                }
                Err(CompleteError::NotPosted { index }) => {
                    assert!(!posted.contains_key(&index))
                }
                Err(e) => panic!("a refusal this test does not know: {e:?}"),
            }
        }
        assert_eq!(ring.outstanding(), posted.len());
    }
}

// ------------------------------------------------------------------ EQEs

/// EQE decode: every 64-byte chunk through [`decode`] (which must keep an
/// unknown type as [`Event::Unknown`] with the raw bytes), the event sinks
/// (loss accounting: nothing vanishes), and an [`EventQueue`] polled over a
/// ring the device fills with the input.
pub fn eqe(data: &[u8]) {
    let mut sink: EventSink<Event, 4> = EventSink::new();
    let mut pushed = 0u64;
    for chunk in data.chunks(EQE_SIZE) {
        let raw: [u8; EQE_SIZE] = exact(chunk, EQE_SIZE).try_into().expect("64");
        let ev = decode(&raw);
        if let Event::Unknown { event_type, raw: r } = ev {
            assert_eq!(event_type, raw[1]);
            assert_eq!(r, raw);
        }
        if let Event::Completion { cqn } = ev {
            assert!(cqn <= 0xff_ffff);
        }
        sink.push(ev);
        pushed += 1;
    }
    let mut seen = 0u64;
    while let Some(ev) = sink.pop() {
        seen += match ev {
            Event::EventsLost { count } => count,
            _ => 1,
        };
    }
    assert_eq!(seen, pushed, "every event delivered or counted lost");

    // The same bytes as the contents of a polled EQ.
    let hal = HostHal::new(1 << 16);
    let log = 1 + data.first().copied().unwrap_or(0) % 4;
    let mut cmd = [0u8; MAX_CMD_LEN];
    let (mut eq, _) = EventQueue::prepare(&hal, log, 2, 0, &mut cmd).expect("eq");
    // The ring is the first region of a fresh platform.
    assert_eq!(hal.live_regions(), 1);
    let ring_iova = mlx5_hal::host::HOST_IOVA_BASE;
    eq.created(&hal, 3);
    let mut b = Bytes(data.get(1..).unwrap_or(&[]));
    let mut steps = 0;
    let mut consumed = 0u64;
    while !b.is_empty() && steps < 64 {
        steps += 1;
        // Device: write some bytes into one EQE of the ring; driver: poll.
        let slot = b.u8() as usize % (1 << log);
        let raw = exact(b.take(EQE_SIZE), EQE_SIZE);
        write_iova(&hal, ring_iova + (slot * EQE_SIZE) as u64, &raw);
        let budget = 1 + b.u8() as u32 % 8;
        let c = eq.poll(&hal, budget, |_| {});
        assert!(c.eqes <= budget);
        consumed += c.eqes as u64;
        assert_eq!(eq.consumed(), consumed);
    }
}

// -------------------------------------------------------- command outputs

/// Every output parser on outputs of their exact length filled by the
/// device, [`Caps::parse`] + [`Caps::validate`] on any length, and
/// `mlx5_regs::decode::decode_command` on any opcode, op_mod and length.
pub fn cmd_output(data: &[u8]) {
    use mlx5_driver::unstable::cq::cmd as cq;
    use mlx5_driver::unstable::srq::cmd as srq;
    let _ = encode::out_status(data);
    let _ = encode::parse_query_issi(&exact(data, encode::QUERY_ISSI_OUT));
    let _ = encode::parse_query_pages(&exact(data, encode::QUERY_PAGES_OUT));
    let _ = encode::parse_alloc_uar(&exact(data, encode::ALLOC_UAR_OUT));
    let _ = encode::parse_alloc_pd(&exact(data, encode::ALLOC_PD_OUT));
    let _ = encode::parse_create_eq(&exact(data, encode::CREATE_EQ_OUT));
    let _ = encode::parse_query_special_contexts(&exact(data, encode::QUERY_SPECIAL_CONTEXTS_OUT));
    let _ = encode::parse_teardown_hca_failed(&exact(data, encode::TEARDOWN_HCA_OUT));
    // MANAGE_PAGES take: the count is the device's, the buffer the driver's.
    let asked = 1 + data.first().copied().unwrap_or(0) as usize % 512;
    let out = exact(data, encode::manage_pages_take_out_len(asked));
    let n = encode::parse_manage_pages_count(&out) as usize;
    for i in 0..n.min(asked + 8) {
        let got = encode::parse_manage_pages_pa(&out, i);
        assert_eq!(got.is_some(), i < asked, "entry {i} of {asked}");
    }
    let caps_out = exact(data, encode::QUERY_HCA_CAP_OUT);
    let caps = Caps::parse(encode::parse_query_hca_cap(&caps_out));
    if caps.validate().is_ok() {
        assert!(caps.log_max_cq_sz <= 24 && caps.log_max_srq_sz <= 24);
    }
    let _ = (
        caps.max_cqe(),
        caps.max_cq(),
        caps.max_srq(),
        caps.max_srq_wr(),
    );
    let short = Caps::parse(data);
    let _ = short.validate();
    let _ = cq::parse_create_cq(&exact(data, cq::CREATE_CQ_OUT));
    let _ = cq::parse_query_cq(&exact(data, cq::QUERY_CQ_OUT));
    let _ = srq::parse_create_rmp(&exact(data, srq::CREATE_RMP_OUT));
    let _ = srq::parse_query_rmp(&exact(data, srq::QUERY_RMP_OUT));
    let _ = srq::parse_create_srq(&exact(data, srq::CREATE_SRQ_OUT));
    let _ = srq::parse_query_srq(&exact(data, srq::QUERY_SRQ_OUT));

    // The trace decoder (cli, observers) on whatever the device returned.
    let mut b = Bytes(data);
    let op = match b.u8() {
        x if (x as usize) < Opcode::ALL.len() => Opcode::ALL[x as usize],
        _ => Opcode(b.u16()),
    };
    let op_mod = b.u16();
    let dir = if b.u8() & 1 == 0 {
        Direction::Input
    } else {
        Direction::Output
    };
    let opts = DecodeOptions {
        skip_zero: b.u8() & 1 == 1,
        max_array: b.u8() as usize,
    };
    let mut s = String::new();
    let _ = decode_command(op, op_mod, dir, b.0, opts, &mut s);
    let _ = mlx5_regs::decode::hexdump(b.0, 0, 0, &mut s);
    let _ = write!(s, "{op:?}");
}

// ------------------------------------------------------------ mailboxes

/// A HostHal with an init segment the command queue accepts.
fn cmdq_platform(log_size: u8) -> HostHal {
    let hal = HostHal::new(1 << 16);
    let mut seg = vec![0u8; 0x20];
    let _ = initial_seg::cmd_interface_rev.set(&mut seg, 5);
    let _ = initial_seg::log_cmdq_size.set(&mut seg, log_size);
    let _ = initial_seg::log_cmdq_stride.set(&mut seg, 6);
    for w in 0..seg.len() / 4 {
        hal.mmio_write32(
            w * 4,
            u32::from_be_bytes(seg[w * 4..w * 4 + 4].try_into().expect("4")),
        );
    }
    hal
}

/// The driver's command transport reading outputs a hostile device wrote:
/// a command of fuzz-chosen lengths is posted, then the "device" writes
/// arbitrary bytes over the queue entry (status, ownership, inline output,
/// pointers, lengths) and over every output mailbox block (block numbers,
/// tokens, next pointers, data), and the driver collects. Checks: the
/// transport never reads outside its own mailboxes (it ignores the device's
/// pointers), delivers `output` only on delivery status OK, and the slot is
/// free again afterwards.
pub fn mailbox(data: &[u8]) {
    let mut b = Bytes(data);
    let hal = cmdq_platform(1 + b.u8() % 5);
    let mut q = CmdQueue::new(&hal).expect("cmdq");
    let in_len = 8 + b.u16() as usize % (MAX_CMD_LEN - 7);
    let out_len = 8 + b.u16() as usize % (MAX_CMD_LEN - 7);
    let slot = b.u8() as usize % q.slots();
    let mut input = vec![0u8; in_len];
    input[..2].copy_from_slice(&Opcode::NOP.0.to_be_bytes());
    let p = q.post(slot, &input, out_len).expect("post");
    assert_eq!(p.slot, slot);
    assert!(!q.is_free(slot));

    // The device: the entry of the slot and the slot's output blocks.
    let entry_iova = q.queue_iova() + (slot as u64) * 64;
    // The output chain the driver posted (read before the scribble).
    let mut posted = [0u8; ent::SIZE];
    read_iova(&hal, entry_iova, &mut posted);
    let area = ((ent::output_mailbox_pointer_63_32.get(&posted) as u64) << 32)
        | ((ent::output_mailbox_pointer_31_9.get(&posted) as u64) << 9);
    let entry = exact(b.take(ent::SIZE), ent::SIZE);
    write_iova(&hal, entry_iova, &entry);
    for k in 0..MAILBOX_BLOCKS {
        if b.is_empty() || area == 0 {
            break;
        }
        let blk = b.take(576);
        write_iova(&hal, area + (k * BLOCK_STRIDE) as u64, blk);
    }
    let done = q.is_done(slot);
    if done {
        let mut out = vec![0x5au8; out_len];
        let d = q.finish(slot, &mut out);
        if d != DeliveryStatus::OK {
            assert!(out.iter().all(|&x| x == 0x5a), "output written on {d:?}");
        }
        assert!(q.is_free(slot));
    } else {
        q.abandon(slot);
        assert_eq!(q.abandoned(), 1);
        q.reap();
    }
}

fn read_iova(hal: &HostHal, iova: u64, out: &mut [u8]) {
    for (i, b) in out.iter_mut().enumerate() {
        let Some(p) = hal.host_ptr(iova + i as u64) else {
            panic!("harness read outside DMA memory at {:#x}", iova + i as u64)
        };
        // SAFETY: `p` points into a live DMA region of `hal`; the harness
        // plays the device with volatile byte loads.
        *b = unsafe { p.read_volatile() };
    }
}

fn write_iova(hal: &HostHal, iova: u64, bytes: &[u8]) {
    for (i, b) in bytes.iter().enumerate() {
        let Some(p) = hal.host_ptr(iova + i as u64) else {
            panic!("harness write outside DMA memory at {:#x}", iova + i as u64)
        };
        // SAFETY: `p` points into a live DMA region of `hal`; the harness
        // plays the device with volatile byte stores.
        unsafe { p.write_volatile(*b) };
    }
}

// ------------------------------------------------------- the model's parser

/// The model executing arbitrary command bytes, as a driver under
/// development might send them: a fresh device (disabled) or one brought up
/// at ISSI 0/1 by the raw harness, then up to 16 commands with a known or
/// random opcode, random op_mod, lengths and body. Checks: every command
/// completes (the model never hangs on garbage) unless the garbage made the
/// device fatal, and a NOP still completes afterwards.
pub fn sim_cmd(data: &[u8]) {
    let mut b = Bytes(data);
    let mut fw = match b.u8() % 3 {
        0 => simfw::Fw::default(),
        1 => simfw::Fw::up(0),
        _ => simfw::Fw::up(1),
    };
    fw.checksums = b.u8() & 1 == 1;
    let mut steps = 0;
    while !b.is_empty() && steps < 16 {
        steps += 1;
        let op = match b.u8() {
            x if (x as usize) < Opcode::ALL.len() => Opcode::ALL[x as usize].0,
            _ => b.u16(),
        };
        let in_len = 8 + b.u16() as usize % 2048;
        let out_len = 8 + b.u16() as usize % 4200;
        let mut input = exact(b.take(in_len), in_len);
        input[..2].copy_from_slice(&op.to_be_bytes());
        // Usually a zero uid/reserved word so deeper checks are reached.
        if b.u8() & 3 != 0 {
            input[2..6].fill(0);
        }
        let slot = fw.slot;
        match fw.try_exec(slot, &input, out_len) {
            Some(o) => assert_eq!(o.out.len(), out_len.max(8)),
            None => assert!(
                fw.dev.is_fatal(),
                "{:?} never completed on a live device",
                Opcode(op)
            ),
        }
        if fw.dev.is_fatal() {
            return;
        }
    }
    let nop = simfw::inp(Opcode::NOP, mlx5_regs::layouts::nop_in::SIZE);
    let o = fw.try_exec(fw.slot, &nop, mlx5_regs::layouts::nop_out::SIZE);
    assert!(
        o.is_some() || fw.dev.is_fatal(),
        "the model stopped answering"
    );
}
