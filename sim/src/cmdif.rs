//! Command queue delivery (docs/firmware.md §2): doorbell vector, ownership, entry and
//! mailbox checks (type, reserved bytes, lengths, pointer alignment, block
//! numbers, tokens, signatures), output write-back, delivery status and the
//! command-completion EQE.

use std::sync::atomic::{fence, Ordering};

use mlx5_regs::layouts::{
    cmd_if_box as bx, cmd_in, cmd_inter_comp_event, cmd_queue_entry as qe, eqe,
};
use mlx5_regs::{DeliveryStatus, EventType};

use crate::inject::Corruption;
use crate::state::State;
use crate::trace::TraceEntry;
use crate::Violation;

/// Mailbox block data bytes (`MLX5_CMD_DATA_BLOCK_SIZE`).
const BLOCK_DATA: usize = 512;
/// Largest command the model accepts (longer ones: length delivery error).
const MAX_CMD_LEN: usize = 1 << 20;

fn xor(b: &[u8]) -> u8 {
    b.iter().fold(0, |a, x| a ^ x)
}

/// Signature byte making the XOR of `b` (with the byte at `sig` zeroed)
/// equal 0xff (docs/firmware.md §2.4).
pub(crate) fn signature(b: &[u8], sig: usize) -> u8 {
    let mut v = b.to_vec();
    v[sig] = 0;
    !xor(&v)
}

/// Command queue geometry reported in BAR0 0x14 (docs/firmware.md §2.1).
pub(crate) const LOG_CMDQ_SIZE: u8 = 5;
/// log2 of the command queue entry stride.
pub(crate) const LOG_CMDQ_STRIDE: u8 = 6;

/// Per-slot state of the command queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    /// Nothing pending.
    Idle,
    /// Will execute at this device time.
    Due(u64),
    /// Never completes (injected).
    Stalled,
    /// Waits until the firmware received the pages it asked for.
    WaitingPages,
}

/// The command interface as BAR0 shows it: the queue's address, the NIC
/// interface mode, and the state of each slot.
#[derive(Debug)]
pub(crate) struct CmdQueue {
    /// `cmdq_phy_addr` high word (BAR0 0x10).
    pub addr_h: u32,
    /// `cmdq_phy_addr` low word with `nic_interface` and the size bits
    /// (BAR0 0x14).
    pub addr_l: u32,
    /// `nic_interface` (BAR0 0x14 bits 9:8).
    pub nic_interface: u8,
    /// Per-slot state.
    pub slots: Vec<Slot>,
    /// Device time each slot's doorbell was rung.
    pub rung_at: Vec<u64>,
}

impl CmdQueue {
    /// A queue the driver has not programmed yet.
    pub fn new() -> CmdQueue {
        CmdQueue {
            addr_h: 0,
            addr_l: 0,
            nic_interface: 0,
            slots: vec![Slot::Idle; 1 << LOG_CMDQ_SIZE],
            rung_at: vec![0; 1 << LOG_CMDQ_SIZE],
        }
    }

    /// Forget the queue (function reset): the driver programs it again.
    pub fn reset(&mut self) {
        *self = CmdQueue::new();
    }
}

struct Delivered {
    input: Vec<u8>,
    out_blocks: Vec<u64>,
}

impl State {
    fn cmdq_base(&self) -> u64 {
        ((self.cmdq.addr_h as u64) << 32) | self.cmdq.addr_l as u64
    }

    fn checksums(&self) -> bool {
        self.cur.cmdif_checksum != 0
    }

    /// A write to the command doorbell (BAR0 0x18).
    pub(crate) fn cmd_doorbell(&mut self, vector: u32) {
        if self.health.fatal.is_some() {
            self.records.violations.push(Violation::Doorbell(format!(
                "command doorbell {vector:#x} while the device is in a fatal state (ignored)"
            )));
            return;
        }
        if self.initializing() {
            self.records.violations.push(Violation::Doorbell(format!(
                "command doorbell {vector:#x} while firmware is initializing (ignored)"
            )));
            return;
        }
        if self.cmdq_base() == 0 {
            self.records.violations.push(Violation::Doorbell(
                "command doorbell before the command queue address was written".into(),
            ));
            return;
        }
        let nslots = 1u32 << LOG_CMDQ_SIZE;
        if nslots < 32 && vector >> nslots != 0 {
            self.records.violations.push(Violation::Doorbell(format!(
                "doorbell vector {vector:#x} names slots beyond {nslots}"
            )));
        }
        for slot in 0..nslots as usize {
            if vector & (1 << slot) == 0 {
                continue;
            }
            if self.cmdq.slots[slot] != Slot::Idle {
                self.records.violations.push(Violation::Doorbell(format!(
                    "doorbell for slot {slot} whose previous command has not completed"
                )));
                continue;
            }
            let Some(ent) = self.read_entry(slot) else {
                continue;
            };
            if !qe::ownership.get(&ent) {
                self.records.violations.push(Violation::Doorbell(format!(
                    "doorbell for slot {slot} whose entry is owned by software (ownership bit 0)"
                )));
                continue;
            }
            let inline = qe::command_input_inline_data.get(&ent);
            let opcode = cmd_in::opcode.get(inline);
            let now = self.now_ns();
            self.cmdq.rung_at[slot] = now;
            if self.inj.take_stall(opcode) {
                self.cmdq.slots[slot] = Slot::Stalled;
                self.records.trace.push(TraceEntry::stalled(
                    slot,
                    opcode,
                    cmd_in::op_mod.get(inline),
                    now,
                ));
                continue;
            }
            if let Some(n) = self.inj.take_page_request_on(opcode) {
                self.cmdq.slots[slot] = Slot::WaitingPages;
                self.page_request(n);
                continue;
            }
            if self.inj.delay_ns > 0 {
                self.cmdq.slots[slot] = Slot::Due(now + self.inj.delay_ns);
                continue;
            }
            self.exec_slot(slot);
        }
    }

    /// Commands waiting for pages run once no positive request is pending.
    pub(crate) fn release_waiting(&mut self) {
        if self.pages.regular_needed > 0 {
            return;
        }
        for s in 0..self.cmdq.slots.len() {
            if self.cmdq.slots[s] == Slot::WaitingPages {
                self.cmdq.slots[s] = Slot::Idle;
                self.exec_slot(s);
            }
        }
    }

    /// Device address of the command queue entry of `slot`.
    fn entry_iova(&self, slot: usize) -> u64 {
        self.cmdq_base() + ((slot as u64) << LOG_CMDQ_STRIDE)
    }

    /// The 64-byte command queue entry of `slot`, read through the IOMMU; a
    /// fault is recorded by `rd` and yields `None`.
    fn read_entry(&mut self, slot: usize) -> Option<[u8; 64]> {
        let eiova = self.entry_iova(slot);
        let mut ent = [0u8; 64];
        self.rd(eiova, &mut ent, &|| {
            format!("command entry read slot {slot}")
        })
        .ok()?;
        Some(ent)
    }

    /// Execute the command in `slot` and complete it.
    pub(crate) fn exec_slot(&mut self, slot: usize) {
        if self.health.fatal.is_some() {
            // The command interface stopped answering.
            self.cmdq.slots[slot] = Slot::Stalled;
            return;
        }
        let eiova = self.entry_iova(slot);
        let Some(mut ent) = self.read_entry(slot) else {
            return;
        };
        let t0 = self.cmdq.rung_at[slot];
        let inline = qe::command_input_inline_data.get(&ent);
        let opcode = cmd_in::opcode.get(inline);
        let op_mod = cmd_in::op_mod.get(inline);

        // The completion EQE goes to the EQ subscribed when the command was
        // issued (CREATE_EQ does not signal its own completion).
        let cmd_eq = self.eq_for(EventType::CMD.0);
        let (deliv, input, output, status, synd) = match self.deliver_cmd(&ent) {
            Err(d) => (d, Vec::new(), Vec::new(), 0, 0),
            Ok(d) => {
                let out_len = qe::output_length.get(&ent) as usize;
                let mut out = vec![0u8; out_len];
                let (status, synd) = self.execute(&d.input, &mut out);
                match self.write_output(&ent, &out, &d.out_blocks) {
                    Ok(()) => {
                        qe::command_output_inline_data
                            .get_mut(&mut ent)
                            .iter_mut()
                            .zip(out.iter().chain(std::iter::repeat(&0)))
                            .for_each(|(d, s)| *d = *s);
                        (DeliveryStatus::OK, d.input, out, status, synd)
                    }
                    Err(dst) => (dst, d.input, out, status, synd),
                }
            }
        };
        // Status last: output first, then (checksums) the entry signature,
        // then status_own with ownership back to software.
        qe::status.set(&mut ent, deliv.0).expect("7-bit");
        qe::ownership.set(&mut ent, false).expect("flag");
        if self.checksums() {
            let s = signature(&ent, 0x3d);
            qe::signature.set(&mut ent, s).expect("8-bit");
        }
        let _ = self.wr(eiova, &ent[..63], &|| {
            format!("command entry write slot {slot}")
        });
        fence(Ordering::Release);
        let _ = self.wr(eiova + 63, &ent[63..], &|| {
            format!("command entry write slot {slot}")
        });
        let now = self.now_ns();
        self.records.trace.push(TraceEntry {
            slot,
            opcode,
            op_mod,
            input,
            output,
            status,
            syndrome: synd,
            delivery_status: deliv.0,
            start_ns: t0,
            duration_ns: now.saturating_sub(t0),
            stalled: false,
        });
        // Command-completion EQE (type 0x0a) if an EQ subscribes to it.
        if let Some(eqn) = cmd_eq.filter(|e| self.objects.eqs.contains_key(e)) {
            let mut e = State::make_eqe(EventType::CMD, 0);
            cmd_inter_comp_event::command_completion_vector
                .set(eqe::event_data.get_mut(&mut e), 1u32 << slot)
                .expect("32-bit");
            self.eq_write(eqn, e);
        }
        if opcode == mlx5_regs::Opcode::MANAGE_PAGES.0 {
            self.release_waiting();
        }
    }

    /// Transport checks and input gathering. Errors are delivery statuses.
    fn deliver_cmd(&mut self, ent: &[u8; 64]) -> Result<Delivered, DeliveryStatus> {
        if qe::r#type.get(ent) != mlx5_regs::consts::ctx::CMD_TRANSPORT_PCIE {
            return Err(DeliveryStatus::BAD_CMD_TYPE);
        }
        if ent[1..4].iter().any(|&b| b != 0) || ent[0x3e] != 0 {
            return Err(DeliveryStatus::RESERVED_NOT_ZERO);
        }
        match self.inj.corrupt.take() {
            Some(Corruption::Token) => return Err(DeliveryStatus::TOKEN_ERR),
            Some(Corruption::Signature) => return Err(DeliveryStatus::SIGNATURE_ERR),
            None => {}
        }
        if self.checksums() && xor(ent) != 0xff {
            return Err(DeliveryStatus::SIGNATURE_ERR);
        }
        let in_len = qe::input_length.get(ent) as usize;
        let out_len = qe::output_length.get(ent) as usize;
        if !(8..=MAX_CMD_LEN).contains(&in_len) {
            return Err(DeliveryStatus::INPUT_LEN_ERR);
        }
        if !(8..=MAX_CMD_LEN).contains(&out_len) {
            return Err(DeliveryStatus::OUTPUT_LEN_ERR);
        }
        let token = qe::token.get(ent);
        let mut input = qe::command_input_inline_data.get(ent).to_vec();
        input.truncate(in_len);
        // Input mailboxes: the low 9 bits of the pointer are reserved.
        let in_ptr_lo = u32::from_be_bytes(ent[0x0c..0x10].try_into().expect("4"));
        if in_len > 16 && in_ptr_lo & 0x1ff != 0 {
            return Err(DeliveryStatus::INPUT_POINTER_NOT_ALIGNED);
        }
        if in_len > 16 {
            let first = ((qe::input_mailbox_pointer_63_32.get(ent) as u64) << 32)
                | ((qe::input_mailbox_pointer_31_9.get(ent) as u64) << 9);
            let blocks = self.walk_chain(
                first,
                (in_len - 16).div_ceil(BLOCK_DATA),
                token,
                true,
                DeliveryStatus::INPUT_POINTER_NOT_ALIGNED,
                DeliveryStatus::INPUT_LEN_ERR,
            )?;
            for (i, blk) in blocks.iter().enumerate() {
                let want = (in_len - 16 - i * BLOCK_DATA).min(BLOCK_DATA);
                input.extend_from_slice(&blk.1[..want]);
            }
        }
        let out_ptr_lo = u32::from_be_bytes(ent[0x34..0x38].try_into().expect("4"));
        if out_len > 16 && out_ptr_lo & 0x1ff != 0 {
            return Err(DeliveryStatus::OUTPUT_POINTER_NOT_ALIGNED);
        }
        let mut out_blocks = Vec::new();
        if out_len > 16 {
            let first = ((qe::output_mailbox_pointer_63_32.get(ent) as u64) << 32)
                | ((qe::output_mailbox_pointer_31_9.get(ent) as u64) << 9);
            let blocks = self.walk_chain(
                first,
                (out_len - 16).div_ceil(BLOCK_DATA),
                token,
                false,
                DeliveryStatus::OUTPUT_POINTER_NOT_ALIGNED,
                DeliveryStatus::OUTPUT_LEN_ERR,
            )?;
            out_blocks = blocks.into_iter().map(|b| b.0).collect();
        }
        Ok(Delivered { input, out_blocks })
    }

    /// Walk `count` mailbox blocks from `first`, checking block numbers,
    /// tokens, next-pointer alignment (1 KiB) and, with checksums, the block
    /// signatures of input blocks. Returns (iova, block bytes).
    fn walk_chain(
        &mut self,
        first: u64,
        count: usize,
        token: u8,
        input: bool,
        misaligned: DeliveryStatus,
        short: DeliveryStatus,
    ) -> Result<Vec<(u64, Vec<u8>)>, DeliveryStatus> {
        let mut out = Vec::with_capacity(count);
        let mut ptr = first;
        for i in 0..count {
            if ptr == 0 {
                return Err(short);
            }
            let mut b = vec![0u8; bx::SIZE];
            let dir = if input { "input" } else { "output" };
            if self
                .rd(ptr, &mut b, &|| format!("{dir} mailbox block {i} read"))
                .is_err()
            {
                return Err(DeliveryStatus::FW_INTERNAL_ERR);
            }
            if bx::block_number.get(&b) != i as u32 {
                return Err(DeliveryStatus::BAD_BLOCK_NUMBER);
            }
            if bx::token.get(&b) != token {
                return Err(DeliveryStatus::TOKEN_ERR);
            }
            if input
                && self.checksums()
                && (xor(&b[0x200..0x23f]) != 0xff || xor(&b[..0x240]) != 0xff)
            {
                return Err(DeliveryStatus::SIGNATURE_ERR);
            }
            let next_lo = u32::from_be_bytes(b[0x234..0x238].try_into().expect("4"));
            if i + 1 < count && next_lo & 0x3ff != 0 {
                return Err(misaligned);
            }
            let next = ((bx::next_pointer_63_32.get(&b) as u64) << 32)
                | ((bx::next_pointer_31_10.get(&b) as u64) << 10);
            out.push((ptr, b));
            ptr = next;
        }
        Ok(out)
    }

    /// Write the output beyond the first 16 bytes into the output blocks.
    fn write_output(
        &mut self,
        _ent: &[u8; 64],
        out: &[u8],
        blocks: &[u64],
    ) -> Result<(), DeliveryStatus> {
        if out.len() <= 16 {
            return Ok(());
        }
        let sums = self.checksums();
        for (i, &iova) in blocks.iter().enumerate() {
            let start = 16 + i * BLOCK_DATA;
            let end = (start + BLOCK_DATA).min(out.len());
            if self
                .wr(iova, &out[start..end], &|| {
                    format!("output mailbox block {i} write")
                })
                .is_err()
            {
                return Err(DeliveryStatus::FW_INTERNAL_ERR);
            }
            if sums {
                let mut b = vec![0u8; bx::SIZE];
                if self
                    .rd(iova, &mut b, &|| format!("output mailbox block {i} read"))
                    .is_err()
                {
                    return Err(DeliveryStatus::FW_INTERNAL_ERR);
                }
                b[0x23e] = 0;
                b[0x23f] = 0;
                let cs = !xor(&b[0x200..0x23e]);
                b[0x23e] = cs;
                let s = !xor(&b[..0x23f]);
                let _ = self.wr(iova + 0x23e, &[cs, s], &|| {
                    format!("output mailbox block {i} signature")
                });
            }
        }
        Ok(())
    }
}
