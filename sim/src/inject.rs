//! Fault injection (the contract's `Injector`).

use crate::{Device, HostileKind};

/// How the next command delivery is corrupted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Corruption {
    /// The firmware sees a token mismatch: delivery status 0x2.
    Token,
    /// The firmware sees a bad signature: delivery status 0x1.
    Signature,
}

#[derive(Debug, Default)]
pub(crate) struct Injections {
    /// (opcode, commands of that opcode still to skip, status, syndrome).
    pub fails: Vec<(u16, usize, u8, u32)>,
    pub stalls: Vec<u16>,
    pub delay_ns: u64,
    pub corrupt: Option<Corruption>,
    pub fw_init_never: bool,
    pub page_req_on: Vec<(u16, i32)>,
    /// Armed hostile-device corruptions, in request order.
    pub hostile: Vec<crate::HostileKind>,
    /// While `Some`: the device fetches no send WQE; the QPs whose send
    /// queues it would have run, in order (`Injector::hold_send_queues`).
    pub held_sqs: Option<Vec<u32>>,
}

impl Injections {
    /// Called once per executed command.
    pub fn take_fail(&mut self, opcode: u16) -> Option<(u8, u32)> {
        let mut hit = None;
        for f in self.fails.iter_mut().filter(|f| f.0 == opcode) {
            if f.1 == 0 {
                if hit.is_none() {
                    hit = Some((f.2, f.3));
                    f.0 = u16::MAX; // consumed
                    f.1 = usize::MAX;
                }
            } else {
                f.1 -= 1;
            }
        }
        self.fails.retain(|f| f.1 != usize::MAX);
        hit
    }

    pub fn take_stall(&mut self, opcode: u16) -> bool {
        match self.stalls.iter().position(|&o| o == opcode) {
            Some(i) => {
                self.stalls.remove(i);
                true
            }
            None => false,
        }
    }

    pub fn take_page_request_on(&mut self, opcode: u16) -> Option<i32> {
        let i = self.page_req_on.iter().position(|p| p.0 == opcode)?;
        Some(self.page_req_on.remove(i).1)
    }
}

/// Fault injection handle (`Device::inject`).
pub struct Injector<'a> {
    pub(crate) dev: &'a Device,
}

impl Injector<'_> {
    /// Fail the next command with this opcode with `status` and `syndrome`
    /// (the command has no effect).
    pub fn fail_next(&self, opcode: u16, status: u8, syndrome: u32) {
        self.fail_nth(opcode, 0, status, syndrome);
    }

    /// Fail the `nth` (0-based) future command with this opcode.
    pub fn fail_nth(&self, opcode: u16, nth: usize, status: u8, syndrome: u32) {
        self.dev
            .lock()
            .inj
            .fails
            .push((opcode, nth, status, syndrome));
    }

    /// The next command with this opcode never completes (its ownership bit
    /// stays with the hardware and its slot stays busy).
    pub fn stall_next(&self, opcode: u16) {
        self.dev.lock().inj.stalls.push(opcode);
    }

    /// Every later command completes `us` microseconds (device time) after
    /// its doorbell; 0 turns the delay off.
    pub fn delay_completions_us(&self, us: u64) {
        self.dev.lock().inj.delay_ns = us * 1000;
    }

    /// Hold every send queue: doorbells are taken (and checked) as before,
    /// but the device fetches and executes no send WQE until
    /// [`Injector::release_send_queues`]. A card fetches WQEs by DMA some
    /// time after their doorbell (PRM "Send Doorbell"; rdma-core and Linux
    /// keep the WQE buffer until its completion for that reason); this
    /// makes that time as long as a test needs, e.g. to change host
    /// memory a posted WQE no longer depends on.
    pub fn hold_send_queues(&self) {
        let mut st = self.dev.lock();
        st.inj.held_sqs.get_or_insert_with(Vec::new);
    }

    /// End [`Injector::hold_send_queues`]: the send queues that were rung
    /// or due meanwhile run now, in the order they first were. Returns
    /// how many.
    pub fn release_send_queues(&self) -> usize {
        let mut st = self.dev.lock();
        let held = st.inj.held_sqs.take().unwrap_or_default();
        for &qpn in &held {
            st.qp_kick(qpn);
        }
        held.len()
    }

    /// Corrupt the next command delivery.
    pub fn corrupt_next_delivery(&self, kind: Corruption) {
        self.dev.lock().inj.corrupt = Some(kind);
    }

    /// Enter a fatal state: the health syndrome shows in the health buffer
    /// with the reset-requested (RFR) bit, the health counter stops and the
    /// command interface stops answering.
    pub fn fatal(&self, health_syndrome: u8) {
        self.dev.lock().go_fatal(health_syndrome);
    }

    /// Show a non-fatal health syndrome (valid, severity WARNING, no
    /// reset requested): firmware reports a condition and keeps working
    /// (Linux `poll_health` reports such a syndrome; it is fatal only with
    /// the RFR bit, `mlx5_health_check_fatal_sensors`). `None` clears it.
    pub fn health_syndrome(&self, syndrome: Option<(u8, u16)>) {
        self.dev.lock().health.warning = syndrome;
    }

    /// The next SRQ limit event that an arm above the current count would
    /// raise at once is raised only after `commands` more commands have
    /// completed (a firmware that fires late), so a driver's own fallback
    /// and a late firmware event can meet.
    pub fn srq_limit_late(&self, commands: u32) {
        self.dev.lock().limit_late = Some(commands);
    }

    /// The initializing bit never clears.
    pub fn fw_init_never_finishes(&self) {
        self.dev.lock().inj.fw_init_never = true;
    }

    /// One PAGE_REQUEST EQE (`num_pages` > 0: give, < 0: take) on the EQ
    /// subscribed to 0x0b; queued until such an EQ exists.
    pub fn page_request(&self, num_pages: i32) {
        self.dev.lock().page_request(num_pages);
    }

    /// `count` PAGE_REQUEST EQEs of `num_pages_each`.
    pub fn page_request_storm(&self, count: usize, num_pages_each: i32) {
        let mut st = self.dev.lock();
        for _ in 0..count {
            st.page_request(num_pages_each);
        }
    }

    /// The next command with this opcode does not complete until the
    /// firmware received `num_pages` more pages: it raises the PAGE_REQUEST
    /// first.
    pub fn page_request_on_next(&self, opcode: u16, num_pages: i32) {
        self.dev.lock().inj.page_req_on.push((opcode, num_pages));
    }

    /// Hostile device mode: arm one corruption of `kind`; the model applies
    /// it to the next CQE, EQE or command output of the matching class
    /// (see [`HostileKind`]) and then forgets it.
    pub fn hostile(&self, kind: HostileKind) {
        self.dev.lock().inj.hostile.push(kind);
    }

    /// Hostile corruptions armed and not yet applied.
    pub fn hostile_pending(&self) -> usize {
        self.dev.lock().hostile_pending()
    }
}
