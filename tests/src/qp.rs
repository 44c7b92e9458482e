//! Queue-pair rigs for the driver-against-model tests: a sender QP and an
//! SRQ-attached receiver QP connected through the driver's loopback helper,
//! guarded DMA buffers, payloads that carry their sequence number, bounded
//! waits for completions that let device time pass, and a teardown that
//! checks the model's whole accounting.
//!
//! Everything goes through the driver and the model's traffic engine: no
//! helper here uses the model's side door (`Device::traffic().deliver`).

use std::time::{Duration, Instant};

use mlx5_driver::cq::{Cq, CqOptions, Cqe};
use mlx5_driver::qp::{
    Payload, PostSendFailure, Qp, QpLinks, SendOp, SendQueueCaps, SendRequest, SendSlot,
};
use mlx5_driver::srq::{RecvCompletion, RecvRequest, Srq};
use mlx5_driver::{Event, Hca};
use mlx5_hal::{DmaRegion, Hal};
use mlx5_sim::{Device, ExecMode, ObjectCounts, Profile, SimConfig, SimHal};

use crate::{assert_clean, bring_up};

/// Bytes of guard before, between and after the buffers of [`Bufs`].
pub const GUARD: usize = 64;
/// The value every guard byte holds.
pub const GUARD_BYTE: u8 = 0xee;

/// `n` buffers of `size` bytes in one DMA region, each between guard bytes
/// (`[G][b0][G][b1]…[G]`), so a write past a buffer's end is caught.
pub struct Bufs {
    /// The region.
    pub region: DmaRegion<SimHal>,
    size: usize,
    n: usize,
}

impl Bufs {
    /// Allocate and fill everything (buffers too) with [`GUARD_BYTE`].
    pub fn new(dev: &Device, n: usize, size: usize) -> Bufs {
        let len = GUARD + n * (size + GUARD);
        let region = dev.hal().alloc_dma(len).expect("buffer memory");
        region.fill(0, region.len(), GUARD_BYTE);
        Bufs { region, size, n }
    }

    /// Buffers.
    pub fn count(&self) -> usize {
        self.n
    }

    /// Bytes per buffer.
    pub fn size(&self) -> usize {
        self.size
    }

    fn offset(&self, i: usize) -> usize {
        assert!(i < self.n, "buffer {i} of {}", self.n);
        GUARD + i * (self.size + GUARD)
    }

    /// Device address of buffer `i`.
    pub fn iova(&self, i: usize) -> u64 {
        self.region.iova_at(self.offset(i))
    }

    /// Write `data` at the start of buffer `i`.
    pub fn write(&self, i: usize, data: &[u8]) {
        assert!(data.len() <= self.size);
        self.region.write_bytes(self.offset(i), data);
    }

    /// The first `len` bytes of buffer `i`.
    pub fn read(&self, i: usize, len: usize) -> Vec<u8> {
        assert!(len <= self.size);
        let mut v = vec![0; len];
        self.region.read_bytes(self.offset(i), &mut v);
        v
    }

    /// Fill buffer `i` with `byte`.
    pub fn clear(&self, i: usize, byte: u8) {
        self.region.fill(self.offset(i), self.size, byte);
    }

    /// Every guard byte still holds [`GUARD_BYTE`].
    pub fn assert_guards(&self, what: &str) {
        let mut all = vec![0; self.region.len()];
        self.region.read_bytes(0, &mut all);
        for k in 0..=self.n {
            let start = k * (self.size + GUARD);
            let end = if k == self.n {
                all.len()
            } else {
                start + GUARD
            };
            if let Some(p) = all[start..end].iter().position(|&b| b != GUARD_BYTE) {
                panic!(
                    "{what}: guard byte at region offset {} overwritten ({:#x})",
                    start + p,
                    all[start + p]
                );
            }
        }
    }
}

/// The payload of message `seq`: its sequence number (little-endian, first
/// 4 bytes when it is that long) then bytes derived from `seq` and the
/// position, so two messages never share a byte pattern.
pub fn payload(seq: u64, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len)
        .map(|k| (seq as u8).wrapping_mul(31) ^ (k as u8).wrapping_mul(7) ^ 0x5a)
        .collect();
    let head = (seq as u32).to_le_bytes();
    let n = len.min(4);
    v[..n].copy_from_slice(&head[..n]);
    v
}

/// The sequence number a payload starts with.
pub fn payload_seq(data: &[u8]) -> u64 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&data[..4]);
    u32::from_le_bytes(b) as u64
}

/// What a [`Rig`] is made of.
#[derive(Debug, Clone, Copy)]
pub struct RigConfig {
    /// Model profile.
    pub profile: Profile,
    /// Execution mode.
    pub mode: ExecMode,
    /// ISSI the model offers at most (1: RMP, 0: SRQ).
    pub issi: u16,
    /// Receive WQEs the SRQ must hold.
    pub srq_wr: u32,
    /// Send queue request.
    pub sq: SendQueueCaps,
    /// Entries of the send CQ and the receive CQ.
    pub cq_entries: (u32, u32),
    /// Buffers on each side and their size.
    pub nbufs: usize,
    /// Bytes per buffer.
    pub buf_size: usize,
    /// Make the port InfiniBand (`port_type` 0) before bring-up.
    pub ib_port: bool,
}

impl RigConfig {
    /// A small rig on `profile` in `mode`.
    pub fn new(profile: Profile, mode: ExecMode) -> RigConfig {
        RigConfig {
            profile,
            mode,
            issi: 1,
            srq_wr: 63,
            sq: SendQueueCaps {
                max_send_wr: 64,
                max_send_sge: 2,
                max_inline_data: 64,
            },
            cq_entries: (255, 255),
            nbufs: 128,
            buf_size: 256,
            ib_port: false,
        }
    }

    /// The same rig on an InfiniBand port (addressed by LID).
    pub fn ib(self) -> RigConfig {
        RigConfig {
            ib_port: true,
            ..self
        }
    }

    /// A name for messages: the profile (with "IB" for an IB port) and the
    /// mode.
    pub fn name(&self) -> String {
        let ib = if self.ib_port { " IB" } else { "" };
        format!("{:?}{ib} {:?}", self.profile, self.mode)
    }

    /// The model device this configuration describes.
    pub fn device(&self) -> Device {
        let cfg = SimConfig {
            issi_supported: if self.issi == 0 { 0b01 } else { 0b11 },
            ..SimConfig::profile(self.profile)
        };
        let dev = Device::new(match self.mode {
            ExecMode::Synchronous => cfg,
            ExecMode::Threaded => cfg.threaded(),
        });
        if self.ib_port {
            dev.caps_mut(|c| c.port_type = mlx5_regs::consts::port::TYPE_IB);
        }
        dev
    }

    /// Every port set-up in `mode`: each profile on Ethernet, and a
    /// ConnectX-5 with an InfiniBand port.
    pub fn every_port(mode: ExecMode) -> Vec<RigConfig> {
        let mut v: Vec<RigConfig> = crate::PROFILES
            .iter()
            .map(|&p| RigConfig::new(p, mode))
            .collect();
        v.push(RigConfig::new(Profile::ConnectX5, mode).ib());
        v
    }
}

/// The sender's QP type (it owns its send table).
pub type SendQp = Qp<SimHal, Vec<SendSlot>>;

/// A brought-up HCA with a sender QP (send CQ `scq`) connected to an
/// SRQ-attached, receive-only QP (receive CQ `rcq`, SRQ `srq`), source
/// buffers `src` and receive buffers `dst`.
pub struct Rig {
    /// The model.
    pub dev: Device,
    /// The driver.
    pub hca: Hca<SimHal>,
    /// The sender's CQ.
    pub scq: Cq<SimHal>,
    /// The receiver's CQ.
    pub rcq: Cq<SimHal>,
    /// The receiver's SRQ.
    pub srq: Srq<SimHal>,
    /// The sender.
    pub tx: SendQp,
    /// The receiver.
    pub rx: Qp<SimHal>,
    /// Send buffers (message `seq` comes from buffer `seq % count`).
    pub src: Bufs,
    /// Receive buffers (receive `wr_id` lands in buffer `wr_id % count`).
    pub dst: Bufs,
    /// The `wr_id` of the next receive posted.
    pub next_recv: u64,
    /// The configuration.
    pub cfg: RigConfig,
}

impl Rig {
    /// Bring up a device of `cfg` and build the rig, connected.
    pub fn new(cfg: RigConfig) -> Rig {
        Rig::on(cfg.device(), cfg)
    }

    /// Build the rig on `dev` (e.g. after `caps_mut`), connected.
    pub fn on(dev: Device, cfg: RigConfig) -> Rig {
        let mut rig = Rig::unconnected(dev, cfg);
        rig.hca
            .connect_loopback_pair(&mut rig.tx, &mut rig.rx)
            .unwrap_or_else(|e| panic!("connect: {e}"));
        rig
    }

    /// Build the rig on `dev` with both QPs in RESET.
    pub fn unconnected(dev: Device, cfg: RigConfig) -> Rig {
        let hca = bring_up(&dev);
        let mut scq = hca
            .create_cq(cfg.cq_entries.0, CqOptions::default())
            .unwrap();
        let mut rcq = hca
            .create_cq(cfg.cq_entries.1, CqOptions::default())
            .unwrap();
        let mut srq = hca.create_srq(cfg.srq_wr, 2, Some(&mut rcq)).unwrap();
        let g = hca.send_queue_geometry(&cfg.sq).unwrap();
        let tx = hca
            .create_qp(
                Some(cfg.sq),
                QpLinks {
                    send_cq: Some(&mut scq),
                    ..QpLinks::default()
                },
                vec![SendSlot::EMPTY; g.wqebbs()],
            )
            .unwrap_or_else(|e| panic!("create sender: {e}"));
        let rx = hca
            .create_qp(
                None,
                QpLinks {
                    recv_cq: Some(&mut rcq),
                    srq: Some(&mut srq),
                    ..QpLinks::default()
                },
                [],
            )
            .unwrap_or_else(|e| panic!("create receiver: {e}"));
        let src = Bufs::new(&dev, cfg.nbufs, cfg.buf_size);
        let dst = Bufs::new(&dev, cfg.nbufs, cfg.buf_size);
        Rig {
            dev,
            hca,
            scq,
            rcq,
            srq,
            tx,
            rx,
            src,
            dst,
            next_recv: 0,
            cfg,
        }
    }

    /// Post `n` receives with the next `wr_id`s, each a whole buffer of
    /// `dst` with the HCA's default key, cleared to 0 first.
    pub fn post_recvs(&mut self, n: u64) {
        let sges: Vec<[_; 1]> = (self.next_recv..self.next_recv + n)
            .map(|id| {
                let slot = id as usize % self.dst.count();
                self.dst.clear(slot, 0);
                [self.hca.sge(self.dst.iova(slot), self.dst.size() as u32)]
            })
            .collect();
        let reqs: Vec<RecvRequest> = sges
            .iter()
            .zip(self.next_recv..)
            .map(|(s, wr_id)| RecvRequest { wr_id, sges: s })
            .collect();
        self.srq.post(&reqs).expect("post receives");
        self.next_recv += n;
    }

    /// Post SENDs of messages `seqs` (`wr_id` = seq, payload [`payload`]
    /// of `len` bytes from `src`), signaled when `signaled(seq)`, in one
    /// doorbell.
    pub fn send_batch(
        &mut self,
        seqs: std::ops::Range<u64>,
        len: usize,
        signaled: impl Fn(u64) -> bool,
    ) -> Result<(), PostSendFailure> {
        let sges: Vec<[_; 1]> = seqs
            .clone()
            .map(|seq| {
                let slot = seq as usize % self.src.count();
                self.src.write(slot, &payload(seq, len));
                [self.hca.sge(self.src.iova(slot), len as u32)]
            })
            .collect();
        let reqs: Vec<SendRequest> = sges
            .iter()
            .zip(seqs)
            .map(|(s, seq)| SendRequest {
                wr_id: seq,
                op: SendOp::Send,
                payload: Payload::Sges(s),
                signaled: signaled(seq),
                solicited: false,
            })
            .collect();
        self.tx.post_send(&reqs)
    }

    /// Post one signaled SEND of message `seq`.
    pub fn send(&mut self, seq: u64, len: usize) {
        self.send_batch(seq..seq + 1, len, |_| true)
            .expect("post send");
    }

    /// Let the device run for about `us` microseconds of its time (virtual
    /// in synchronous mode, real on the device thread).
    pub fn settle(&self, us: u32) {
        let mut left = us;
        while left > 0 {
            let step = left.min(100);
            self.hca.hal().delay_us(step);
            left -= step;
        }
        self.dev.quiesce();
    }

    /// Completions of the send CQ (requester), matched by the sender:
    /// wait for exactly `n`.
    pub fn wait_send(&mut self, n: usize) -> Vec<mlx5_driver::qp::SendCompletion> {
        let cqes = wait_cqes(&self.hca, &mut self.scq, n);
        cqes.iter()
            .map(|c| {
                self.tx
                    .complete_send(c)
                    .unwrap_or_else(|e| panic!("send CQE {c:?} refused: {e:?}"))
            })
            .collect()
    }

    /// Wait for exactly `n` receive completions; each is matched by the
    /// receiver and returned with the bytes it put in its buffer.
    pub fn wait_recv(&mut self, n: usize) -> Vec<(RecvCompletion, Vec<u8>)> {
        let cqes = wait_cqes(&self.hca, &mut self.rcq, n);
        cqes.iter()
            .map(|c| {
                let r = self
                    .rx
                    .complete_recv(&mut self.srq, c)
                    .unwrap_or_else(|e| panic!("receive CQE {c:?} refused: {e:?}"));
                let slot = r.wr_id as usize % self.dst.count();
                let len = (r.byte_len as usize).min(self.dst.size());
                (r, self.dst.read(slot, len))
            })
            .collect()
    }

    /// Receive message `seq` of `len` bytes and check it byte for byte.
    pub fn expect_message(&mut self, seq: u64, len: usize) -> RecvCompletion {
        let (r, data) = self.wait_recv(1).pop().expect("one");
        assert_eq!(r.status, mlx5_driver::cq::CqeStatus::Success, "{r:?}");
        assert_eq!(r.byte_len as usize, len, "message {seq}: length");
        assert_eq!(r.src_qpn, self.tx.qpn(), "message {seq}: sender");
        assert_eq!(r.qpn, self.rx.qpn(), "message {seq}: receiver");
        assert!(data == payload(seq, len), "message {seq}: payload differs");
        r
    }

    /// Poll the EQs and return every async event waiting.
    pub fn events(&self) -> Vec<Event> {
        self.hca.poll_events().expect("poll events");
        std::iter::from_fn(|| self.hca.next_event()).collect()
    }

    /// Poll the EQs until at least `n` async events came, and return every
    /// one that did; bounded as [`wait_cqes`] (5 s of device time, 10 s of
    /// real time), after which whatever came is returned for the caller's
    /// assertion to report. An event can trail the completion that showed
    /// its cause: the device writes CQEs and EQEs as separate DMA writes (the
    /// threaded model's device thread as real hardware), and a test thread
    /// reads the CQ ring without the model's lock, so a test that expects an
    /// event after a completion waits for it.
    pub fn wait_events(&self, n: usize) -> Vec<Event> {
        let mut got = self.events();
        let patience = Patience::new(self.hca.hal());
        while got.len() < n {
            if patience.check(self.hca.hal()).is_err() {
                break;
            }
            self.hca.hal().delay_us(20);
            got.extend(self.events());
        }
        got
    }

    /// Destroy everything, tear down, and check the model is back to
    /// nothing ([`assert_torn_down`]); the side door was never used.
    pub fn finish(self, what: &str) {
        self.finish_with_faults(what, 0)
    }

    /// [`Rig::finish`] for a test that made the device touch memory
    /// outside DMA space on purpose: exactly `iommu_faults` were recorded.
    pub fn finish_with_faults(self, what: &str, iommu_faults: usize) {
        let Rig {
            dev,
            hca,
            mut scq,
            mut rcq,
            mut srq,
            tx,
            rx,
            src,
            dst,
            ..
        } = self;
        src.assert_guards(what);
        dst.assert_guards(what);
        hca.destroy_qp(
            tx,
            QpLinks {
                send_cq: Some(&mut scq),
                ..QpLinks::default()
            },
        )
        .map_err(|e| e.error())
        .unwrap();
        hca.destroy_qp(
            rx,
            QpLinks {
                recv_cq: Some(&mut rcq),
                srq: Some(&mut srq),
                ..QpLinks::default()
            },
        )
        .map_err(|e| e.error())
        .unwrap();
        let at_issi0 = srq.cqn().is_some();
        hca.destroy_srq(srq, at_issi0.then_some(&mut rcq))
            .map_err(|e| e.error())
            .unwrap();
        hca.destroy_cq(scq).map_err(|e| e.error()).unwrap();
        hca.destroy_cq(rcq).map_err(|e| e.error()).unwrap();
        drop((src, dst));
        hca.teardown()
            .unwrap_or_else(|e| panic!("{what}: teardown: {e}"));
        assert_eq!(
            dev.traffic().side_door_uses(),
            0,
            "{what}: the side door was used"
        );
        let faults = dev.iommu_faults();
        assert_eq!(faults.len(), iommu_faults, "{what}: {faults:#?}");
        assert_torn_down_except_faults(&dev, what);
    }
}

/// After teardown: [`assert_clean`], TEARDOWN_HCA found nothing left to
/// destroy, no DMA memory is still handed out, `roce_en` is back to its
/// power-on 0 and no GID entry is programmed.
pub fn assert_torn_down(dev: &Device, what: &str) {
    assert_clean(dev, what);
    assert_torn_down_except_faults(dev, what);
}

/// [`assert_torn_down`] without the IOMMU-fault check.
pub fn assert_torn_down_except_faults(dev: &Device, what: &str) {
    assert_eq!(dev.pages_held(), 0, "{what}: model still holds pages");
    assert_eq!(
        dev.objects(),
        ObjectCounts::default(),
        "{what}: model still holds objects"
    );
    assert!(
        dev.violations().is_empty(),
        "{what}: protocol violations {:#?}",
        dev.violations()
    );
    assert_eq!(
        dev.leaked_at_teardown(),
        Some(ObjectCounts::default()),
        "{what}: objects left to TEARDOWN_HCA"
    );
    assert_eq!(dev.dma_bytes_live(), 0, "{what}: DMA memory not freed");
    assert!(!dev.roce_enabled(), "{what}: roce_en not restored");
    assert!(
        dev.gid_entries().is_empty(),
        "{what}: GID entries left {:?}",
        dev.gid_entries()
    );
}

/// The bound of the rig's waits: 5 s of device time or 10 s of real time,
/// whichever comes first (a threaded model's device time is real time; a
/// synchronous one's moves only with the waiter's delays).
struct Patience {
    start_ns: u64,
    real: Instant,
}

impl Patience {
    fn new(hal: &SimHal) -> Patience {
        Patience {
            start_ns: hal.now_ns(),
            real: Instant::now(),
        }
    }

    /// The device time waited so far: `Ok` within the bound, `Err` past it.
    fn check(&self, hal: &SimHal) -> Result<u64, u64> {
        let waited = hal.now_ns().saturating_sub(self.start_ns);
        if waited > 5_000_000_000 || self.real.elapsed() > Duration::from_secs(10) {
            Err(waited)
        } else {
            Ok(waited)
        }
    }
}

/// Poll `cq` until exactly `n` CQEs arrived, letting device time pass
/// between empty polls (RNR and ACK retries run then). Panics after 5 s of
/// device time or 10 s of real time, or when more than `n` arrive.
pub fn wait_cqes(hca: &Hca<SimHal>, cq: &mut Cq<SimHal>, n: usize) -> Vec<Cqe> {
    let mut got = Vec::with_capacity(n);
    let mut out = [Cqe::EMPTY; 16];
    let patience = Patience::new(hca.hal());
    while got.len() < n {
        let k = cq.poll(&mut out[..(n - got.len()).min(16)]);
        if k > 0 {
            got.extend_from_slice(&out[..k]);
            continue;
        }
        if let Err(waited) = patience.check(hca.hal()) {
            panic!(
                "CQ {:#x}: {} of {n} CQEs after {waited} ns: {got:?}",
                cq.cqn(),
                got.len()
            );
        }
        hca.hal().delay_us(20);
    }
    got
}

/// Poll whatever `cq` holds now (no waiting).
pub fn drain(cq: &mut Cq<SimHal>) -> Vec<Cqe> {
    let mut got = Vec::new();
    let mut out = [Cqe::EMPTY; 16];
    loop {
        let k = cq.poll(&mut out);
        if k == 0 {
            return got;
        }
        got.extend_from_slice(&out[..k]);
    }
}
