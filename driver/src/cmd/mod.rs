//! The command queue transport (docs/firmware.md §2): queue page, slots, ownership,
//! tokens, mailbox chains and the doorbell.
//!
//! This module only moves bytes: it posts an input of any length (16 bytes
//! inline, the rest in a chain of 512-byte mailbox blocks) and collects the
//! output. Building inputs and parsing outputs is the encoders' job (one
//! `fn` per command, internal to the crate), waiting
//! (timeouts, health, page requests) is [`crate::Hca`]'s. Neither knows the
//! other's internals, so a different transport can reuse the encoders.
//!
//! Slots: `0 ..= n−2` carry ordinary commands, slot `n−1` is reserved for
//! MANAGE_PAGES so page traffic is never starved (docs/firmware.md §2.1, Linux
//! `cmd_work_handler`). A slot whose command timed out is *abandoned*: it is
//! not reused until firmware clears its ownership bit.
//!
//! An input too long for the slot's preallocated mailboxes (MANAGE_PAGES
//! giving thousands of pages at once, as Linux does) travels in a chain
//! allocated from DMA memory for that command ([`CmdQueue::alloc_chain`],
//! [`CmdQueue::post_chain`]; Linux allocates every command's mailboxes,
//! `mlx5_alloc_cmd_msg`).

pub(crate) mod encode;

use mlx5_hal::{barrier, DmaRegion, Hal};
use mlx5_regs::consts::ctx;
use mlx5_regs::layouts::{cmd_if_box as mbox, cmd_queue_entry as ent, initial_seg};
use mlx5_regs::{DeliveryStatus, Opcode};

use crate::error::Error;
use crate::health::mmio_field;

/// Bytes of input/output carried inline in the queue entry.
pub const INLINE_LEN: usize = 16;
/// Data bytes per mailbox block.
pub const BLOCK_DATA: usize = 512;
/// Distance between mailbox blocks: the 576-byte block rounded up to the
/// 1 KiB alignment its next pointer requires (docs/firmware.md §2.3).
pub const BLOCK_STRIDE: usize = 1024;
/// Mailbox blocks preallocated per slot and direction.
pub const MAILBOX_BLOCKS: usize = 8;
/// Longest input or output a command can have: 16 + 8 × 512 = 4112 bytes,
/// exactly QUERY_HCA_CAP's output and SET_HCA_CAP's input.
pub const MAX_CMD_LEN: usize = INLINE_LEN + MAILBOX_BLOCKS * BLOCK_DATA;
/// Most slots a queue can have (`MLX5_MAX_COMMANDS`).
pub const MAX_SLOTS: usize = 32;

/// BAR0 offset of the command doorbell (docs/firmware.md §1.2).
pub const CMD_DOORBELL: usize = initial_seg::command_doorbell_vector.byte_offset();

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotState {
    Free,
    Busy {
        token: u8,
        opcode: Opcode,
        op_mod: u16,
        posted_ns: u64,
    },
    /// Timed out; waiting for firmware to give it back.
    Abandoned,
}

/// A posted command, as returned by [`CmdQueue::post`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Posted {
    /// Slot.
    pub slot: usize,
    /// Token written into the entry and every block.
    pub token: u8,
    /// Opcode.
    pub opcode: Opcode,
    /// op_mod.
    pub op_mod: u16,
    /// `Hal::now_ns` at the doorbell.
    pub posted_ns: u64,
}

/// The command queue: one 4 KiB DMA page of entries, and per slot a
/// preallocated mailbox area (8 input + 8 output blocks).
pub struct CmdQueue<H: Hal> {
    hal: H,
    queue: DmaRegion<H>,
    log_stride: u8,
    n_slots: usize,
    slots: [SlotState; MAX_SLOTS],
    mailboxes: heapless::Vec<DmaRegion<H>, MAX_SLOTS>,
    /// Per-command chains of abandoned slots: firmware may still read them,
    /// so they live until the slot is reaped.
    chains: [Option<DmaRegion<H>>; MAX_SLOTS],
    next_token: u8,
}

fn xor(bytes: &[u8]) -> u8 {
    // XOR is associative: fold 8 bytes at a time, then the lanes.
    let mut words = bytes.chunks_exact(8);
    let wide = (&mut words).fold(0u64, |a, w| {
        a ^ u64::from_ne_bytes(w.try_into().expect("8-byte chunk"))
    });
    let tail = words.remainder().iter().fold(0u8, |a, b| a ^ b);
    wide.to_ne_bytes().iter().fold(tail, |a, b| a ^ b)
}

impl<H: Hal> CmdQueue<H> {
    /// Read the queue geometry from the init segment, check it, allocate the
    /// queue page and mailboxes, and program the queue address (high word,
    /// then low word, then a write barrier; docs/firmware.md §1.2, §2.1).
    pub fn new(hal: &H) -> Result<Self, Error> {
        let rev = mmio_field(hal, 0, &initial_seg::cmd_interface_rev);
        if rev != ctx::CMD_IF_REV {
            return Err(Error::UnsupportedCmdIf { rev });
        }
        let log_size: u8 = mmio_field(hal, 0, &initial_seg::log_cmdq_size);
        let log_stride: u8 = mmio_field(hal, 0, &initial_seg::log_cmdq_stride);
        // Linux refuses more than 32 entries and a queue larger than a page;
        // an entry is 64 bytes, and one regular slot plus the reserved one
        // are needed.
        if (1usize << log_size) > MAX_SLOTS
            || log_size as u32 + log_stride as u32 > 12
            || log_stride < 6
            || log_size < 1
        {
            return Err(Error::BadCmdQueue {
                log_size,
                log_stride,
            });
        }
        let n_slots = 1usize << log_size;
        let queue = hal.alloc_dma(mlx5_hal::PAGE_SIZE)?;
        let mut mailboxes = heapless::Vec::new();
        for _ in 0..n_slots {
            let r = hal.alloc_dma(2 * MAILBOX_BLOCKS * BLOCK_STRIDE)?;
            if mailboxes.push(r).is_err() {
                unreachable!("n_slots <= MAX_SLOTS");
            }
        }
        let iova = queue.iova();
        hal.mmio_write32(
            initial_seg::cmdq_phy_addr_63_32.byte_offset(),
            (iova >> 32) as u32,
        );
        // Low word: address bits 31:12, nic_interface 0 (full driver), the
        // read-only size/stride bits written as 0 like Linux does.
        hal.mmio_write32(
            initial_seg::cmdq_phy_addr_31_12.byte_offset(),
            (iova as u32) & !0xfff,
        );
        barrier::mmio_wmb();
        Ok(CmdQueue {
            hal: hal.clone(),
            queue,
            log_stride,
            n_slots,
            slots: [SlotState::Free; MAX_SLOTS],
            mailboxes,
            chains: core::array::from_fn(|_| None),
            next_token: 0,
        })
    }

    /// Number of slots (`2^log_cmdq_size`).
    pub fn slots(&self) -> usize {
        self.n_slots
    }

    /// The slot reserved for MANAGE_PAGES (the last one).
    pub fn reserved_slot(&self) -> usize {
        self.n_slots - 1
    }

    /// Device address of the queue page.
    pub fn queue_iova(&self) -> u64 {
        self.queue.iova()
    }

    /// Is the slot free for a new command?
    pub fn is_free(&self, slot: usize) -> bool {
        self.slots[slot] == SlotState::Free
    }

    /// Number of abandoned (timed-out, not yet returned) slots.
    pub fn abandoned(&self) -> usize {
        self.slots[..self.n_slots]
            .iter()
            .filter(|s| **s == SlotState::Abandoned)
            .count()
    }

    /// A free ordinary slot, if any (abandoned slots whose ownership came
    /// back are freed first).
    pub fn alloc_regular(&mut self) -> Option<usize> {
        self.reap();
        (0..self.n_slots - 1).find(|&s| self.slots[s] == SlotState::Free)
    }

    /// Free abandoned slots that firmware has given back (and the chains
    /// their commands used).
    pub fn reap(&mut self) {
        for s in 0..self.n_slots {
            if self.slots[s] == SlotState::Abandoned && self.owner_is_sw(s) {
                self.slots[s] = SlotState::Free;
                self.chains[s] = None;
            }
        }
    }

    fn entry_off(&self, slot: usize) -> usize {
        slot << self.log_stride
    }

    fn owner_is_sw(&self, slot: usize) -> bool {
        let b = self
            .queue
            .read_u8(self.entry_off(slot) + ent::ownership.bit_off as usize / 8);
        b & 1 == 0
    }

    fn token(&mut self) -> u8 {
        // Per command, never 0 (Linux `alloc_token`, docs/firmware.md §2.4).
        self.next_token = self.next_token.wrapping_add(1);
        if self.next_token == 0 {
            self.next_token = 1;
        }
        self.next_token
    }

    fn blocks_for(len: usize) -> usize {
        len.saturating_sub(INLINE_LEN).div_ceil(BLOCK_DATA)
    }

    /// Write a chain of `n` blocks starting at block index `first` of the
    /// slot's mailbox area, carrying `data` (zero-filled past its end).
    fn write_chain(&self, slot: usize, first: usize, n: usize, data: &[u8], token: u8) {
        Self::write_blocks(&self.mailboxes[slot], first, n, Some(data), token);
    }

    /// Write the blocks `first..first + n` of `area`: their data from
    /// `data` (zero-filled past its end), or, with `None`, the data already
    /// in the area; then the control part (next pointer, block number,
    /// token, signatures).
    fn write_blocks(area: &DmaRegion<H>, first: usize, n: usize, data: Option<&[u8]>, token: u8) {
        let mut block = [0u8; mbox::SIZE];
        for k in 0..n {
            block.fill(0);
            match data {
                Some(data) => {
                    let start = k * BLOCK_DATA;
                    if start < data.len() {
                        let end = (start + BLOCK_DATA).min(data.len());
                        block[..end - start].copy_from_slice(&data[start..end]);
                    }
                }
                None => area.read_bytes((first + k) * BLOCK_STRIDE, &mut block[..BLOCK_DATA]),
            }
            let next = if k + 1 < n {
                area.iova_at((first + k + 1) * BLOCK_STRIDE)
            } else {
                0
            };
            // All values fit their fields by construction (1 KiB-aligned
            // pointers, block numbers < 8), so `set` cannot fail.
            let _ = mbox::next_pointer_63_32.set(&mut block, (next >> 32) as u32);
            let _ = mbox::next_pointer_31_10.set(&mut block, (next as u32) >> 10);
            let _ = mbox::block_number.set(&mut block, k as u32);
            let _ = mbox::token.set(&mut block, token);
            // Signatures (docs/firmware.md §2.4): firmware checks them only with
            // cmdif_checksum enabled; filled anyway, like Linux with
            // checksums on, so either setting works.
            let ctrl = !xor(&block[0x200..0x23e]);
            let _ = mbox::ctrl_signature.set(&mut block, ctrl);
            let sig = !xor(&block[..0x23f]);
            let _ = mbox::signature.set(&mut block, sig);
            area.write_bytes((first + k) * BLOCK_STRIDE, &block);
        }
    }

    /// Post `input` on `slot` expecting `out_len` output bytes, and ring the
    /// doorbell (docs/firmware.md §2.5 steps 1–2). The slot must be free.
    pub fn post(&mut self, slot: usize, input: &[u8], out_len: usize) -> Result<Posted, Error> {
        let opcode = Opcode(encode::header_opcode(input));
        if input.len() < 8 || out_len < 8 {
            return Err(Error::InvalidArgument("command shorter than its header"));
        }
        for len in [input.len(), out_len] {
            if len > MAX_CMD_LEN {
                return Err(Error::CommandTooLarge {
                    opcode,
                    len,
                    max: MAX_CMD_LEN,
                });
            }
        }
        assert!(slot < self.n_slots && self.slots[slot] == SlotState::Free);
        let token = self.token();
        let n_in = Self::blocks_for(input.len());
        let in_tail = &input[input.len().min(INLINE_LEN)..];
        self.write_chain(slot, 0, n_in, in_tail, token);
        let in_ptr = if n_in > 0 {
            self.mailboxes[slot].iova()
        } else {
            0
        };
        let inl = input.len().min(INLINE_LEN);
        Ok(self.post_entry(slot, &input[..inl], input.len(), in_ptr, out_len, token))
    }

    /// DMA memory for the input chain of a command of `in_len` bytes that
    /// does not fit the slot's mailboxes: the caller writes the data of
    /// block `k` (input bytes `16 + 512k ..`) at offset `k *`
    /// [`BLOCK_STRIDE`], then posts with [`CmdQueue::post_chain`].
    pub fn alloc_chain(&self, in_len: usize) -> Result<DmaRegion<H>, Error> {
        let n = Self::blocks_for(in_len).max(1);
        Ok(self.hal.alloc_dma(n * BLOCK_STRIDE)?)
    }

    /// Post a command whose first 16 input bytes are `inline` and whose
    /// other `in_len - 16` bytes are in `chain` (from
    /// [`CmdQueue::alloc_chain`]): the control part of every block is
    /// written, then the entry, then the doorbell. The output must fit the
    /// slot's mailboxes. `chain` must live until the command completes; a
    /// caller that gives up on the command hands it to
    /// [`CmdQueue::retain_chain`].
    pub fn post_chain(
        &mut self,
        slot: usize,
        inline: &[u8],
        in_len: usize,
        out_len: usize,
        chain: &DmaRegion<H>,
    ) -> Result<Posted, Error> {
        let opcode = Opcode(encode::header_opcode(inline));
        if inline.len() != INLINE_LEN || in_len <= INLINE_LEN || out_len < 8 {
            return Err(Error::InvalidArgument("chained command shape"));
        }
        let n_in = Self::blocks_for(in_len);
        if out_len > MAX_CMD_LEN || chain.len() < n_in * BLOCK_STRIDE {
            return Err(Error::CommandTooLarge {
                opcode,
                len: out_len.max(in_len),
                max: MAX_CMD_LEN,
            });
        }
        assert!(slot < self.n_slots && self.slots[slot] == SlotState::Free);
        let token = self.token();
        Self::write_blocks(chain, 0, n_in, None, token);
        Ok(self.post_entry(slot, inline, in_len, chain.iova(), out_len, token))
    }

    /// Keep the chain of a command given up on (timeout, fatal) until its
    /// slot is reaped: firmware may still read it.
    pub fn retain_chain(&mut self, slot: usize, chain: DmaRegion<H>) {
        self.chains[slot] = Some(chain);
    }

    /// Write the output chain, the entry (with `inline`, the first bytes of
    /// the input, and the input chain at `in_ptr`) and ring the doorbell.
    fn post_entry(
        &mut self,
        slot: usize,
        inline: &[u8],
        in_len: usize,
        in_ptr: u64,
        out_len: usize,
        token: u8,
    ) -> Posted {
        let opcode = Opcode(encode::header_opcode(inline));
        let op_mod = encode::header_op_mod(inline);
        let n_out = Self::blocks_for(out_len);
        // Output blocks zeroed (rdma-core `mlx5_vfio_cmd_prep_out`), chained,
        // tokened.
        self.write_chain(slot, MAILBOX_BLOCKS, n_out, &[], token);
        let area = &self.mailboxes[slot];
        let out_ptr = if n_out > 0 {
            area.iova_at(MAILBOX_BLOCKS * BLOCK_STRIDE)
        } else {
            0
        };
        let mut e = [0u8; ent::SIZE];
        let _ = ent::r#type.set(&mut e, ctx::CMD_TRANSPORT_PCIE);
        let _ = ent::input_length.set(&mut e, in_len as u32);
        let _ = ent::input_mailbox_pointer_63_32.set(&mut e, (in_ptr >> 32) as u32);
        let _ = ent::input_mailbox_pointer_31_9.set(&mut e, (in_ptr as u32) >> 9);
        ent::command_input_inline_data.get_mut(&mut e)[..inline.len()].copy_from_slice(inline);
        let _ = ent::output_mailbox_pointer_63_32.set(&mut e, (out_ptr >> 32) as u32);
        let _ = ent::output_mailbox_pointer_31_9.set(&mut e, (out_ptr as u32) >> 9);
        let _ = ent::output_length.set(&mut e, out_len as u32);
        let _ = ent::token.set(&mut e, token);
        let _ = ent::ownership.set(&mut e, true);
        // Entry signature: XOR of all 64 bytes = 0xff (docs/firmware.md §2.4), computed
        // with ownership already set, as Linux `set_signature` does.
        let sig = !xor(&e);
        let _ = ent::signature.set(&mut e, sig);
        self.queue.write_bytes(self.entry_off(slot), &e);

        // Entry and mailboxes visible before the doorbell (docs/firmware.md §2.5 step 2).
        barrier::dma_wmb();
        barrier::mmio_wmb();
        let posted_ns = self.hal.now_ns();
        self.slots[slot] = SlotState::Busy {
            token,
            opcode,
            op_mod,
            posted_ns,
        };
        self.hal.mmio_write32(CMD_DOORBELL, 1u32 << slot);
        Posted {
            slot,
            token,
            opcode,
            op_mod,
            posted_ns,
        }
    }

    /// Has firmware returned ownership of `slot`?
    pub fn is_done(&self, slot: usize) -> bool {
        self.owner_is_sw(slot)
    }

    /// Collect a completed command's output and free the slot. Returns the
    /// delivery status (docs/firmware.md §2.5 step 4); `output` is filled only when it
    /// is OK. Call only after [`CmdQueue::is_done`].
    pub fn finish(&mut self, slot: usize, output: &mut [u8]) -> DeliveryStatus {
        // Ownership was seen clear: read the body only after a read barrier.
        barrier::dma_rmb();
        let off = self.entry_off(slot);
        let status_own = self.queue.read_u8(off + ent::status.bit_off as usize / 8);
        let delivery = DeliveryStatus(status_own >> 1);
        self.slots[slot] = SlotState::Free;
        if delivery != DeliveryStatus::OK {
            return delivery;
        }
        let inl = output.len().min(INLINE_LEN);
        let r = ent::command_output_inline_data.range();
        self.queue.read_bytes(off + r.start, &mut output[..inl]);
        let area = &self.mailboxes[slot];
        for (k, chunk) in output[inl..].chunks_mut(BLOCK_DATA).enumerate() {
            area.read_bytes((MAILBOX_BLOCKS + k) * BLOCK_STRIDE, chunk);
        }
        delivery
    }

    /// Give up on a busy slot (timeout or fatal): it stays unusable until
    /// firmware clears its ownership bit.
    pub fn abandon(&mut self, slot: usize) {
        self.slots[slot] = SlotState::Abandoned;
    }

    /// The command in flight on `slot`, if any.
    pub fn in_flight(&self, slot: usize) -> Option<(Opcode, u16, u8, u64)> {
        match self.slots[slot] {
            SlotState::Busy {
                token,
                opcode,
                op_mod,
                posted_ns,
            } => Some((opcode, op_mod, token, posted_ns)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod xor_tests {
    #[test]
    fn wide_xor_equals_the_bytewise_xor() {
        let data: [u8; 67] = core::array::from_fn(|i| (i as u8).wrapping_mul(29) ^ 0xc3);
        for start in 0..8 {
            for end in start..data.len() {
                let s = &data[start..end];
                assert_eq!(
                    super::xor(s),
                    s.iter().fold(0, |a, b| a ^ b),
                    "{start}..{end}"
                );
            }
        }
    }
}
