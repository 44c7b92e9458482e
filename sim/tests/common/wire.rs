//! Test helper: send work requests written into a QP's ring and rung
//! through the UAR, and a connected loopback pair with its CQs, key, RMP
//! and buffers. Test code playing the driver; not the driver.
#![allow(dead_code)]

use mlx5_hal::Hal;
use mlx5_regs::consts::wqe as w;
use mlx5_regs::doorbell as db;
use mlx5_regs::layouts::*;
use mlx5_regs::EventMask;
use mlx5_sim::{Profile, SimConfig};

use super::qp::{connect, create_qp, dma_key, prepare_mode, Mode, TQp, TRmp};
use super::{Fw, Region, TCq, TEq};

// ------------------------------------------------------------ send WQEs

/// One send work request.
#[derive(Debug, Clone, Default)]
pub struct Wr {
    pub opcode: u8,
    pub signaled: bool,
    pub solicited: bool,
    pub imm: u32,
    pub remote: Option<(u64, u32)>,
    pub sges: Vec<(u64, u32, u32)>,
    pub inline: Option<Vec<u8>>,
    /// Atomic segment: (swap or add, compare).
    pub atomic: Option<(u64, u64)>,
    /// Fence mode FENCE.
    pub fence: bool,
}

impl Wr {
    pub fn send(addr: u64, len: u32, lkey: u32) -> Wr {
        Wr {
            opcode: w::OPCODE_SEND,
            signaled: true,
            sges: vec![(addr, len, lkey)],
            ..Wr::default()
        }
    }

    /// The WQE bytes for position `index` of QP `qpn` (whole WQEBBs).
    pub fn bytes(&self, qpn: u32, index: u16) -> Vec<u8> {
        let mut segs: Vec<u8> = Vec::new();
        if let Some((addr, rkey)) = self.remote {
            let mut r = [0u8; 16];
            wqe_raddr_seg::raddr.set(&mut r, addr).unwrap();
            wqe_raddr_seg::rkey.set(&mut r, rkey).unwrap();
            segs.extend_from_slice(&r);
        }
        if let Some((swap_add, compare)) = self.atomic {
            let mut a = [0u8; 16];
            wqe_atomic_seg::swap_add.set(&mut a, swap_add).unwrap();
            wqe_atomic_seg::compare.set(&mut a, compare).unwrap();
            segs.extend_from_slice(&a);
        }
        if let Some(data) = &self.inline {
            let mut h = (data.len() as u32 | w::INLINE_SEG).to_be_bytes().to_vec();
            h.extend_from_slice(data);
            h.resize(h.len().div_ceil(16) * 16, 0);
            segs.extend_from_slice(&h);
        }
        for &(addr, len, lkey) in &self.sges {
            let mut s = [0u8; 16];
            wqe_data_seg::byte_count.set(&mut s, len).unwrap();
            wqe_data_seg::lkey.set(&mut s, lkey).unwrap();
            wqe_data_seg::addr.set(&mut s, addr).unwrap();
            segs.extend_from_slice(&s);
        }
        let ds = (1 + segs.len() / 16) as u8;
        let mut c = [0u8; 16];
        wqe_ctrl_seg::wqe_index.set(&mut c, index).unwrap();
        wqe_ctrl_seg::opcode.set(&mut c, self.opcode).unwrap();
        wqe_ctrl_seg::qpn.set(&mut c, qpn).unwrap();
        wqe_ctrl_seg::ds.set(&mut c, ds).unwrap();
        let mut fm = 0;
        if self.signaled {
            fm |= w::CTRL_CQ_UPDATE;
        }
        if self.solicited {
            fm |= w::CTRL_SOLICITED;
        }
        if self.fence {
            fm |= w::FENCE_MODE_FENCE;
        }
        wqe_ctrl_seg::fm_ce_se.set(&mut c, fm).unwrap();
        wqe_ctrl_seg::imm.set(&mut c, self.imm).unwrap();
        let mut v = c.to_vec();
        v.extend_from_slice(&segs);
        v.resize(v.len().div_ceil(64) * 64, 0);
        v
    }
}

impl TQp {
    /// Write WQE bytes at the producer position (wrapping the ring) and
    /// advance the producer counter; no doorbell.
    pub fn write_wqe(&mut self, bytes: &[u8]) {
        let ring = self.ring.as_ref().expect("a send queue");
        let n = 1usize << self.log_sq;
        for (k, bb) in bytes.chunks(64).enumerate() {
            let slot = (self.pc as usize + k) & (n - 1);
            ring.write_bytes(slot * 64, bb);
        }
        self.pc = self.pc.wrapping_add((bytes.len() / 64) as u16);
    }

    /// Post `wr` at the producer position (no doorbell).
    pub fn put(&mut self, wr: &Wr) -> u16 {
        let index = self.pc;
        let b = wr.bytes(self.qpn, index);
        self.write_wqe(&b);
        index
    }

    /// Doorbell record, then the 8-byte doorbell (first 8 bytes of the WQE
    /// at `last`) into the BlueFlame register, alternating halves.
    pub fn ring_db(&mut self, f: &Fw, last: u16) {
        let ring = self.ring.as_ref().expect("a send queue");
        let n = 1usize << self.log_sq;
        let slot = (last as usize) & (n - 1);
        mlx5_hal::barrier::dma_wmb();
        self.dbr.write_be32(4, self.pc as u32);
        mlx5_hal::barrier::mmio_wmb();
        let d0 = ring.read_be32(slot * 64);
        let d1 = ring.read_be32(slot * 64 + 4);
        f.hal.mmio_write64(
            db::uar_page_offset(self.uar) + self.bf,
            db::qp_send_doorbell(d0, d1),
        );
        self.bf ^= 256;
    }

    /// Post and ring.
    pub fn post(&mut self, f: &Fw, wr: &Wr) -> u16 {
        let i = self.put(wr);
        self.ring_db(f, i);
        i
    }
}

// ------------------------------------------------------------ a pair

/// Sender A (send ring, zero-length RQ) and receiver B (no SQ, on an RMP),
/// connected in `mode`, one EQ with the Linux async mask, a send CQ and a
/// receive CQ, a PA key, a data region for sends.
pub struct Pair {
    pub f: Fw,
    pub eq: TEq,
    pub scq: TCq,
    pub rcq: TCq,
    pub key: u32,
    pub rmp: TRmp,
    pub a: TQp,
    pub b: TQp,
    pub src: Region,
}

impl Pair {
    pub fn new(profile: Profile, mode: Mode, threaded: bool, rnr_retry: u8) -> Pair {
        Pair::with(profile, mode, threaded, rnr_retry, |_| {})
    }

    pub fn with(
        profile: Profile,
        mode: Mode,
        threaded: bool,
        rnr_retry: u8,
        caps: impl FnOnce(&mut mlx5_sim::Caps),
    ) -> Pair {
        let cfg = SimConfig::profile(profile);
        let mut f = Fw::new(if threaded { cfg.threaded() } else { cfg });
        f.dev.caps_mut(caps);
        if mode == Mode::Ib {
            f.dev.caps_mut(|c| c.port_type = 0);
        }
        f.init(1);
        f.uar = f.alloc_uar();
        f.pd = f.alloc_pd();
        prepare_mode(&mut f, mode);
        let eq = f.create_eq(7, EventMask::LINUX_ASYNC.bits());
        let scq = f.create_cq(6, eq.eqn);
        let rcq = f.create_cq(6, eq.eqn);
        let key = dma_key(&mut f);
        let rmp = TRmp::new(&mut f, key, 0);
        let a = create_qp(&mut f, Some(4), None, scq.cqn, 0);
        let b = create_qp(&mut f, None, Some(rmp.n), 0, rcq.cqn);
        connect(&mut f, mode, &a, &b, rnr_retry);
        let src = f.hal.alloc_dma(16 * 4096).unwrap();
        Pair {
            f,
            eq,
            scq,
            rcq,
            key,
            rmp,
            a,
            b,
            src,
        }
    }

    /// Fill the send buffer at `off` with a pattern; returns it.
    pub fn payload(&self, off: usize, len: usize, seed: u8) -> Vec<u8> {
        let v: Vec<u8> = (0..len)
            .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
            .collect();
        self.src.write_bytes(off, &v);
        v
    }

    /// Poll a CQ until a CQE arrives (bounded device time).
    pub fn wait_cqe(&mut self, send: bool) -> [u8; 64] {
        for _ in 0..20_000 {
            let cq = if send { &mut self.scq } else { &mut self.rcq };
            if let Some(c) = self.f.poll_cq(cq) {
                return c;
            }
            self.f.hal.delay_us(50);
        }
        panic!("no CQE on the {} CQ", if send { "send" } else { "receive" });
    }

    /// Events on the EQ so far (and report the consumer index).
    pub fn events(&mut self) -> Vec<[u8; 64]> {
        self.f.drain_eq(&mut self.eq)
    }
}
