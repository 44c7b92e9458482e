//! Test helper: a hand-driven command queue in SimHal DMA memory, built with
//! mlx5-regs layouts. This is test code that plays the driver's role at the
//! lowest level; it is not the driver.
#![allow(dead_code)]

use mlx5_hal::{DmaRegion, Hal};
use mlx5_regs::consts::{ctx, op_mod as om};
use mlx5_regs::doorbell as db;
use mlx5_regs::layouts::*;
use mlx5_regs::{CmdStatus, Opcode};
use mlx5_sim::{Device, SimConfig, SimHal};

pub mod devx;
pub mod hosts;
pub mod qp;
pub mod wire;

pub type Region = DmaRegion<SimHal>;

/// Result of one command.
#[derive(Debug, Clone)]
pub struct Out {
    pub delivery: u8,
    pub status: u8,
    pub syndrome: u32,
    pub out: Vec<u8>,
}

impl Out {
    pub fn ok(&self) -> bool {
        self.delivery == 0 && self.status == 0
    }
}

pub struct Fw {
    pub dev: Device,
    pub hal: SimHal,
    pub cmdq: Region,
    pool: Vec<Region>,
    pub token: u8,
    pub slot: usize,
    /// Fill entry and block signatures.
    pub checksums: bool,
    /// Regions handed to firmware (pages) kept alive.
    pub keep: Vec<Region>,
    pub uar: u32,
    pub pd: u32,
    out_len: usize,
    out_blocks: (usize, usize),
}

pub fn inp(op: Opcode, size: usize) -> Vec<u8> {
    let mut v = vec![0u8; size];
    cmd_in::opcode.set(&mut v, op.0).unwrap();
    v
}

pub fn xor(b: &[u8]) -> u8 {
    b.iter().fold(0, |a, x| a ^ x)
}

impl Fw {
    /// A device with its command queue programmed (firmware init waited out).
    pub fn new(cfg: SimConfig) -> Fw {
        let delay = cfg.fw_init_delay_us;
        let dev = Device::new(cfg);
        let hal = dev.hal();
        let mut waited = 0;
        while hal.mmio_read32(0x1fc) >> 31 != 0 {
            hal.delay_us(100);
            waited += 100;
            assert!(waited < delay + 1_000_000, "firmware init never finished");
        }
        let cmdq = hal.alloc_dma(4096).unwrap();
        hal.mmio_write32(0x10, (cmdq.iova() >> 32) as u32);
        hal.mmio_write32(0x14, cmdq.iova() as u32);
        Fw::adopt(dev, cmdq)
    }

    /// A test driver for a device whose command queue is already
    /// programmed at `cmdq` (e.g. after a function reset).
    pub fn adopt(dev: Device, cmdq: Region) -> Fw {
        Fw {
            hal: dev.hal(),
            dev,
            cmdq,
            pool: Vec::new(),
            token: 1,
            slot: 0,
            checksums: false,
            keep: Vec::new(),
            uar: 0,
            pd: 0,
            out_len: 0,
            out_blocks: (0, 0),
        }
    }

    pub fn default() -> Fw {
        Fw::new(SimConfig::default())
    }

    fn block(&mut self, i: usize) -> u64 {
        while self.pool.len() <= i {
            let r = self.hal.alloc_dma(4096).unwrap();
            self.pool.push(r);
        }
        self.pool[i].iova()
    }

    /// Write one mailbox chain (`data` split in 512-byte blocks) starting at
    /// pool index `first`; returns the first block's IOVA.
    fn chain(&mut self, first: usize, data: &[u8], nblocks: usize) -> u64 {
        for b in 0..nblocks {
            let _ = self.block(first + b + 1);
        }
        for b in 0..nblocks {
            let mut blk = vec![0u8; cmd_if_box::SIZE];
            let s = b * 512;
            if s < data.len() {
                let e = (s + 512).min(data.len());
                blk[..e - s].copy_from_slice(&data[s..e]);
            }
            if b + 1 < nblocks {
                let next = self.pool[first + b + 1].iova();
                cmd_if_box::next_pointer_63_32
                    .set(&mut blk, (next >> 32) as u32)
                    .unwrap();
                cmd_if_box::next_pointer_31_10
                    .set(&mut blk, ((next as u32) >> 10) & 0x3f_ffff)
                    .unwrap();
            }
            cmd_if_box::block_number.set(&mut blk, b as u32).unwrap();
            cmd_if_box::token.set(&mut blk, self.token).unwrap();
            if self.checksums {
                let cs = !xor(&blk[0x200..0x23e]);
                blk[0x23e] = cs;
                blk[0x23f] = !xor(&blk[..0x23f]);
            }
            self.pool[first + b].write_bytes(0, &blk);
        }
        self.pool[first].iova()
    }

    /// Build the entry for `input` in `slot` without ringing.
    pub fn prepare(&mut self, slot: usize, input: &[u8], out_len: usize) {
        let nin = input.len().saturating_sub(16).div_ceil(512);
        let nout = out_len.saturating_sub(16).div_ceil(512);
        let in_ptr = if nin > 0 {
            self.chain(0, &input[16..], nin)
        } else {
            0
        };
        let out_ptr = if nout > 0 {
            self.chain(nin + 1, &[], nout)
        } else {
            0
        };
        let mut e = [0u8; 64];
        cmd_queue_entry::r#type
            .set(&mut e, ctx::CMD_TRANSPORT_PCIE)
            .unwrap();
        cmd_queue_entry::input_length
            .set(&mut e, input.len() as u32)
            .unwrap();
        cmd_queue_entry::input_mailbox_pointer_63_32
            .set(&mut e, (in_ptr >> 32) as u32)
            .unwrap();
        cmd_queue_entry::input_mailbox_pointer_31_9
            .set(&mut e, (in_ptr as u32) >> 9)
            .unwrap();
        let n = input.len().min(16);
        cmd_queue_entry::command_input_inline_data.get_mut(&mut e)[..n]
            .copy_from_slice(&input[..n]);
        cmd_queue_entry::output_mailbox_pointer_63_32
            .set(&mut e, (out_ptr >> 32) as u32)
            .unwrap();
        cmd_queue_entry::output_mailbox_pointer_31_9
            .set(&mut e, (out_ptr as u32) >> 9)
            .unwrap();
        cmd_queue_entry::output_length
            .set(&mut e, out_len as u32)
            .unwrap();
        cmd_queue_entry::token.set(&mut e, self.token).unwrap();
        cmd_queue_entry::ownership.set(&mut e, true).unwrap();
        if self.checksums {
            e[0x3d] = !xor(&e);
        }
        self.cmdq.write_bytes(slot * 64, &e);
        self.out_len = out_len;
        self.out_blocks = (nin + 1, nout);
    }

    /// Run `f` on the test-owned region (command queue, mailbox pool, kept
    /// regions) containing `iova`.
    pub fn with_iova(&self, iova: u64, f: impl FnOnce(&Region, usize)) {
        let all = std::iter::once(&self.cmdq)
            .chain(self.pool.iter())
            .chain(self.keep.iter());
        for r in all {
            if iova >= r.iova() && iova < r.iova() + r.len() as u64 {
                return f(r, (iova - r.iova()) as usize);
            }
        }
        panic!("{iova:#x} not in a test region");
    }

    pub fn ring(&self, slot: usize) {
        mlx5_hal::barrier::mmio_wmb();
        self.hal.mmio_write32(0x18, 1 << slot);
    }

    pub fn owned_by_hw(&self, slot: usize) -> bool {
        self.cmdq.read_u8(slot * 64 + 0x3f) & 1 == 1
    }

    /// Collect the output of a completed command in `slot`.
    pub fn collect(&mut self, slot: usize) -> Out {
        let mut e = [0u8; 64];
        self.cmdq.read_bytes(slot * 64, &mut e);
        let mut out = cmd_queue_entry::command_output_inline_data.get(&e).to_vec();
        let (first, nout) = self.out_blocks;
        for b in 0..nout {
            let mut d = vec![0u8; 512];
            self.pool[first + b].read_bytes(0, &mut d);
            out.extend_from_slice(&d);
        }
        out.truncate(self.out_len);
        if out.len() < 8 {
            out.resize(8, 0);
        }
        Out {
            delivery: cmd_queue_entry::status.get(&e),
            status: cmd_out::status.get(&out),
            syndrome: cmd_out::syndrome.get(&out),
            out,
        }
    }

    /// Post, wait (bounded, device time) and collect.
    pub fn exec(&mut self, input: &[u8], out_len: usize) -> Out {
        let slot = self.slot;
        self.try_exec(slot, input, out_len)
            .expect("command timed out")
    }

    pub fn try_exec(&mut self, slot: usize, input: &[u8], out_len: usize) -> Option<Out> {
        self.token = self.token.wrapping_add(1).max(1);
        self.prepare(slot, input, out_len);
        self.ring(slot);
        self.wait(slot, 2_000_000)
    }

    pub fn wait(&mut self, slot: usize, timeout_us: u64) -> Option<Out> {
        let t0 = self.hal.now_ns();
        while self.owned_by_hw(slot) {
            if self.hal.now_ns() - t0 > timeout_us * 1000 {
                return None;
            }
            self.hal.delay_us(10);
        }
        mlx5_hal::barrier::dma_rmb();
        Some(self.collect(slot))
    }

    /// Run and require success.
    pub fn ok(&mut self, input: &[u8], out_len: usize) -> Vec<u8> {
        let o = self.exec(input, out_len);
        assert!(
            o.ok(),
            "{:?} failed: delivery {:#x} status {:?} syndrome {:#x}",
            Opcode(cmd_in::opcode.get(input)),
            o.delivery,
            CmdStatus(o.status),
            o.syndrome
        );
        o.out
    }

    /// Run and require a refusal with this status and syndrome.
    pub fn refused(&mut self, input: &[u8], out_len: usize, status: CmdStatus, syndrome: u32) {
        let o = self.exec(input, out_len);
        assert_eq!(o.delivery, 0, "delivery status");
        assert_eq!(
            (CmdStatus(o.status), o.syndrome),
            (status, syndrome),
            "{:?}: expected {:?}/{:#x}, got {:?}/{:#x} ({:?})",
            Opcode(cmd_in::opcode.get(input)),
            status,
            syndrome,
            CmdStatus(o.status),
            o.syndrome,
            mlx5_sim::syndrome::lookup(o.syndrome).map(|s| s.what)
        );
    }

    // ------------------------------------------------------------ bring-up

    pub fn enable(&mut self) {
        self.ok(
            &inp(Opcode::ENABLE_HCA, enable_hca_in::SIZE),
            enable_hca_out::SIZE,
        );
    }

    pub fn query_pages(&mut self, kind: u16) -> i32 {
        let mut i = inp(Opcode::QUERY_PAGES, query_pages_in::SIZE);
        cmd_in::op_mod.set(&mut i, kind).unwrap();
        let o = self.ok(&i, query_pages_out::SIZE);
        query_pages_out::num_pages.get(&o) as i32
    }

    /// MANAGE_PAGES give of `n` fresh pages (one region), returns the outcome.
    pub fn give_pages(&mut self, n: usize) -> Out {
        let r = self.hal.alloc_dma(n.max(1) * 4096).unwrap();
        let mut i = inp(Opcode::MANAGE_PAGES, manage_pages_in::pas.len_with(n));
        cmd_in::op_mod.set(&mut i, om::MANAGE_PAGES_GIVE).unwrap();
        manage_pages_in::input_num_entries
            .set(&mut i, n as u32)
            .unwrap();
        for k in 0..n {
            manage_pages_in::pas
                .set(&mut i, k, r.iova() + 4096 * k as u64)
                .unwrap();
        }
        let o = self.exec(&i, manage_pages_out::SIZE);
        self.keep.push(r);
        o
    }

    /// MANAGE_PAGES take of up to `n` pages.
    pub fn take_pages(&mut self, n: usize) -> (Out, Vec<u64>) {
        let mut i = inp(Opcode::MANAGE_PAGES, manage_pages_in::SIZE);
        cmd_in::op_mod.set(&mut i, om::MANAGE_PAGES_TAKE).unwrap();
        manage_pages_in::input_num_entries
            .set(&mut i, n as u32)
            .unwrap();
        let o = self.exec(&i, manage_pages_out::pas.len_with(n));
        let cnt = manage_pages_out::output_num_entries.get(&o.out) as usize;
        let pages = (0..cnt)
            .map(|k| manage_pages_out::pas.get(&o.out, k).unwrap())
            .collect();
        (o, pages)
    }

    pub fn query_cap(&mut self, cur: bool) -> Vec<u8> {
        let mut i = inp(Opcode::QUERY_HCA_CAP, query_hca_cap_in::SIZE);
        cmd_in::op_mod
            .set(&mut i, om::query_hca_cap(0, cur))
            .unwrap();
        let o = self.ok(&i, query_hca_cap_out::SIZE);
        query_hca_cap_out::capability.get(&o).to_vec()
    }

    /// SET_HCA_CAP with the current caps edited by `f`.
    pub fn set_cap(&mut self, f: impl FnOnce(&mut [u8])) -> Out {
        let mut cap = self.query_cap(true);
        f(&mut cap);
        let mut i = inp(Opcode::SET_HCA_CAP, set_hca_cap_in::SIZE);
        set_hca_cap_in::capability
            .get_mut(&mut i)
            .copy_from_slice(&cap);
        self.exec(&i, set_hca_cap_out::SIZE)
    }

    pub fn set_issi(&mut self, v: u16) -> Out {
        let mut i = inp(Opcode::SET_ISSI, set_issi_in::SIZE);
        set_issi_in::current_issi.set(&mut i, v).unwrap();
        self.exec(&i, set_issi_out::SIZE)
    }

    /// Linux-order bring-up up to INIT_HCA, at ISSI `issi`.
    pub fn init(&mut self, issi: u16) {
        self.enable();
        self.init_after_enable(issi);
    }

    /// Bring-up after ENABLE_HCA at ISSI 1, plus a UAR and a PD.
    pub fn init_rest(&mut self) {
        self.init_after_enable(1);
        self.uar = self.alloc_uar();
        self.pd = self.alloc_pd();
    }

    fn init_after_enable(&mut self, issi: u16) {
        if issi == 1 {
            assert!(self.set_issi(1).ok());
        }
        let boot = self.query_pages(om::QUERY_PAGES_BOOT);
        assert!(self.give_pages(boot as usize).ok());
        let o = self.set_cap(|c| {
            cmd_hca_cap::cmdif_checksum.set(c, 0).unwrap();
            cmd_hca_cap::log_uar_page_sz.set(c, 0).unwrap();
        });
        assert!(o.ok());
        self.host_endian_atomics();
        let init = self.query_pages(om::QUERY_PAGES_INIT);
        assert!(self.give_pages(init as usize).ok());
        self.ok(
            &inp(Opcode::INIT_HCA, init_hca_in::SIZE),
            init_hca_out::SIZE,
        );
    }

    /// As Linux `handle_hca_cap_atomic` before INIT_HCA: with cap `atomic`
    /// and `supported_atomic_req_8B_endianness_mode_1`, set the atomic
    /// page's endianness mode to host endianness.
    pub fn host_endian_atomics(&mut self) {
        let general = self.query_cap(true);
        if !cmd_hca_cap::atomic.get(&general) {
            return;
        }
        let mut i = inp(Opcode::QUERY_HCA_CAP, query_hca_cap_in::SIZE);
        cmd_in::op_mod
            .set(&mut i, om::query_hca_cap(om::CAP_ATOMIC, true))
            .unwrap();
        let o = self.ok(&i, query_hca_cap_out::SIZE);
        let mut page = query_hca_cap_out::capability.get(&o).to_vec();
        if !atomic_caps::supported_atomic_req_8b_endianness_mode_1.get(&page) {
            return;
        }
        atomic_caps::atomic_req_8b_endianness_mode
            .set(
                &mut page,
                mlx5_regs::consts::atomic::REQ_MODE_HOST_ENDIANNESS,
            )
            .unwrap();
        let mut s = inp(Opcode::SET_HCA_CAP, set_hca_cap_in::SIZE);
        cmd_in::op_mod
            .set(&mut s, om::set_hca_cap(om::CAP_ATOMIC))
            .unwrap();
        set_hca_cap_in::capability
            .get_mut(&mut s)
            .copy_from_slice(&page);
        self.ok(&s, set_hca_cap_out::SIZE);
    }

    pub fn alloc_uar(&mut self) -> u32 {
        let o = self.ok(
            &inp(Opcode::ALLOC_UAR, alloc_uar_in::SIZE),
            alloc_uar_out::SIZE,
        );
        alloc_uar_out::uar.get(&o)
    }

    pub fn alloc_pd(&mut self) -> u32 {
        let o = self.ok(
            &inp(Opcode::ALLOC_PD, alloc_pd_in::SIZE),
            alloc_pd_out::SIZE,
        );
        alloc_pd_out::pd.get(&o)
    }

    /// Full bring-up plus a UAR and a PD.
    pub fn up(issi: u16) -> Fw {
        let mut f = Fw::default();
        f.init(issi);
        f.uar = f.alloc_uar();
        f.pd = f.alloc_pd();
        f
    }

    // ------------------------------------------------------------ EQ

    pub fn create_eq_cmd(&mut self, buf: &Region, log_size: u8, uar: u32, mask: u64) -> Vec<u8> {
        let npas = (buf.len() / 4096).max(1);
        let mut i = inp(Opcode::CREATE_EQ, create_eq_in::pas.len_with(npas));
        {
            let e = create_eq_in::eq_context_entry.get_mut(&mut i);
            eqc::log_eq_size.set(e, log_size).unwrap();
            eqc::uar_page.set(e, uar).unwrap();
            eqc::log_page_size.set(e, 0).unwrap();
        }
        create_eq_in::event_bitmask.set(&mut i, 0, mask).unwrap();
        for k in 0..npas {
            create_eq_in::pas
                .set(&mut i, k, buf.iova() + 4096 * k as u64)
                .unwrap();
        }
        i
    }

    pub fn create_eq(&mut self, log_size: u8, mask: u64) -> TEq {
        let buf = self.hal.alloc_dma((64usize << log_size).max(4096)).unwrap();
        for k in 0..(1usize << log_size) {
            buf.write_u8(k * 64 + 63, ctx::EQE_OWNER_INIT);
        }
        let uar = self.uar;
        let i = self.create_eq_cmd(&buf, log_size, uar, mask);
        let o = self.ok(&i, create_eq_out::SIZE);
        let eq = TEq {
            eqn: create_eq_out::eq_number.get(&o),
            buf,
            log_size,
            ci: 0,
            uar,
        };
        self.eq_doorbell(&eq, true);
        eq
    }

    pub fn eq_doorbell(&self, eq: &TEq, arm: bool) {
        let off = db::uar_page_offset(eq.uar)
            + if arm {
                db::UAR_EQ_DOORBELL_ARM
            } else {
                db::UAR_EQ_DOORBELL_NO_ARM
            };
        self.hal.mmio_write32(off, db::eq_doorbell(eq.eqn, eq.ci));
    }

    /// Next software-owned EQE (does not report the consumer index).
    pub fn poll_eq(&self, eq: &mut TEq) -> Option<[u8; 64]> {
        let n = 1u32 << eq.log_size;
        let slot = (eq.ci & (n - 1)) as usize;
        let owner = eq.buf.read_u8(slot * 64 + 63) & 1;
        if owner as u32 != (eq.ci >> eq.log_size) & 1 {
            return None;
        }
        mlx5_hal::barrier::dma_rmb();
        let mut e = [0u8; 64];
        eq.buf.read_bytes(slot * 64, &mut e);
        eq.ci += 1;
        Some(e)
    }

    /// Poll all pending EQEs and report the consumer index.
    pub fn drain_eq(&self, eq: &mut TEq) -> Vec<[u8; 64]> {
        let mut v = Vec::new();
        while let Some(e) = self.poll_eq(eq) {
            v.push(e);
        }
        self.eq_doorbell(eq, true);
        v
    }

    // ------------------------------------------------------------ CQ

    pub fn create_cq_cmd(&mut self, cq: &TCq, eqn: u8) -> Vec<u8> {
        let npas = cq.buf.len() / 4096;
        let mut i = inp(Opcode::CREATE_CQ, create_cq_in::pas.len_with(npas));
        {
            let c = create_cq_in::cq_context.get_mut(&mut i);
            cqc::cqe_sz.set(c, cq.cqe_sz).unwrap();
            cqc::log_cq_size.set(c, cq.log_size).unwrap();
            cqc::uar_page.set(c, cq.uar).unwrap();
            cqc::c_eqn_or_apu_element.set(c, eqn as u32).unwrap();
            cqc::dbr_addr.set(c, cq.dbr.iova()).unwrap();
        }
        for k in 0..npas {
            create_cq_in::pas
                .set(&mut i, k, cq.buf.iova() + 4096 * k as u64)
                .unwrap();
        }
        i
    }

    pub fn new_cq_buf(&self, log_size: u8, cqe_sz: u8) -> Region {
        let stride = if cqe_sz == 0 { 64 } else { 128 };
        let buf = self.hal.alloc_dma((stride << log_size).max(4096)).unwrap();
        for k in 0..(1usize << log_size) {
            buf.write_u8(k * stride + stride - 1, ctx::CQE_OP_OWN_INIT);
        }
        buf
    }

    pub fn cq_shell(&self, log_size: u8, cqe_sz: u8) -> TCq {
        TCq {
            cqn: 0,
            buf: self.new_cq_buf(log_size, cqe_sz),
            dbr: self.hal.alloc_dma(4096).unwrap(),
            log_size,
            cqe_sz,
            ci: 0,
            uar: self.uar,
            arm_sn: 0,
        }
    }

    pub fn create_cq(&mut self, log_size: u8, eqn: u8) -> TCq {
        let mut cq = self.cq_shell(log_size, 0);
        let i = self.create_cq_cmd(&cq, eqn);
        let o = self.ok(&i, create_cq_out::SIZE);
        cq.cqn = create_cq_out::cqn.get(&o);
        cq
    }

    pub fn arm_cq(&self, cq: &TCq, solicited: bool) {
        let cmd = if solicited {
            db::CQ_ARM_SOLICITED
        } else {
            db::CQ_ARM_NEXT
        };
        let w = db::cq_arm_word(cq.arm_sn, cmd, cq.ci);
        cq.dbr.write_be32(db::CQ_DBR_ARM, w);
        mlx5_hal::barrier::mmio_wmb();
        self.hal.mmio_write64(
            db::uar_page_offset(cq.uar) + db::UAR_CQ_DOORBELL,
            db::cq_arm_doorbell(w, cq.cqn),
        );
    }

    pub fn poll_cq(&self, cq: &mut TCq) -> Option<[u8; 64]> {
        let n = 1u32 << cq.log_size;
        let stride = if cq.cqe_sz == 0 { 64 } else { 128 };
        let slot = (cq.ci & (n - 1)) as usize;
        let op_own = cq.buf.read_u8(slot * stride + stride - 1);
        if op_own >> 4 == 15 || (op_own & 1) as u32 != (cq.ci >> cq.log_size) & 1 {
            return None;
        }
        mlx5_hal::barrier::dma_rmb();
        let mut e = [0u8; 64];
        cq.buf.read_bytes(slot * stride + stride - 64, &mut e);
        cq.ci += 1;
        cq.dbr.write_be32(db::CQ_DBR_SET_CI, cq.ci & 0xff_ffff);
        Some(e)
    }
}

pub struct TEq {
    pub eqn: u8,
    pub buf: Region,
    pub log_size: u8,
    pub ci: u32,
    pub uar: u32,
}

pub struct TCq {
    pub cqn: u32,
    pub buf: Region,
    pub dbr: Region,
    pub log_size: u8,
    pub cqe_sz: u8,
    pub ci: u32,
    pub uar: u32,
    pub arm_sn: u32,
}

pub fn eqe_type(e: &[u8; 64]) -> u8 {
    eqe::event_type.get(e)
}
