//! The CQ object: create, poll, arm, resize, query, destroy (docs/firmware.md §7, §8).

use mlx5_hal::Hal;
use mlx5_regs::consts::errno;
use mlx5_regs::doorbell::uar_page_offset;

use super::cmd::{self, CqParams, CqState};
use super::moderation::{self, CqModeration, CqPeriodMode};
use super::ring::{CqReader, CqRing, Cqe, CqeSize, CqeView, DoorbellRecord, WaitingCqe};
use crate::cmd::MAX_CMD_LEN;
use crate::error::{DestroyError, Error};
use crate::hca::Hca;
use crate::pagelist::MAX_CONTEXT_PAGES;
use crate::srq::Srq;
use crate::stats::CmdObserver;

/// Options of a new CQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqOptions {
    /// CQE size (64 or 128 bytes).
    pub cqe_size: CqeSize,
    /// Ignore overrun (`cqc.oi`, capability `cq_oi`): firmware then raises
    /// no CQ error event when the CQ overflows and keeps writing, over
    /// completions not yet polled (PRM: the consumer index and arm
    /// doorbells of such a CQ are not to be used).
    pub overrun_ignore: bool,
    /// Completion event moderation from the start (as Linux mlx5e creates
    /// its CQs); `None` = an event for the first completion after an arm.
    /// Checked as [`Hca::modify_cq_moderation_mode`] does, except that the
    /// mode needs no `cq_period_mode_modify`.
    pub moderation: Option<CqModeration>,
    /// Completion vector whose EQ receives the CQ's completion events
    /// (below [`Hca::num_comp_vectors`], else [`Error::InvalidArgument`]).
    pub comp_vector: u8,
}

impl Default for CqOptions {
    fn default() -> Self {
        CqOptions {
            cqe_size: CqeSize::B64,
            overrun_ignore: false,
            moderation: None,
            comp_vector: 0,
        }
    }
}

/// A completion queue owned by the caller.
///
/// Polling is a method of the CQ (`&mut self`: one poller at a time, no
/// lock on the hot path). Arming ([`Hca::arm_cq`]) and the commands that
/// change the CQ (resize, destroy) go through the [`Hca`], which also keeps
/// the CQ's arm sequence number in step with its completion events. `Cq` is
/// `Send` when the platform handle is: it owns its DMA memory.
pub struct Cq<H: Hal> {
    cqn: u32,
    ring: CqRing<H>,
    dbr: DoorbellRecord<H>,
    hal: H,
    uar_offset: usize,
    eqn: u8,
    arm_sn: u32,
    /// Armed for the next completion since the last event: a solicited
    /// arm does not downgrade it (Linux `mlx5_ib_arm_cq` keeps
    /// `IB_CQ_NEXT_COMP`; IB "Request Completion Notification").
    armed_next: bool,
    users: u32,
}

impl<H: Hal> Cq<H> {
    /// The CQ number firmware assigned.
    pub fn cqn(&self) -> u32 {
        self.cqn
    }

    /// The completions this CQ is sized for: `2^log_size − 1`.
    ///
    /// The ring has `2^log_size` entries and, as in mlx5, one is kept free
    /// (Linux `mlx5_ib_create_cq` reports `entries − 1`): with at most
    /// `capacity()` completions unpolled the device never overruns the CQ.
    ///
    /// One exception: firmware accepts a resize (`Hca::resize_cq`) into a
    /// ring exactly as large as the number of completions waiting, and then
    /// `capacity() + 1` completions wait, all kept and in order. Until one is
    /// polled the ring has no free entry: a further completion overruns the
    /// CQ (CQ error event) and a further resize is refused with
    /// `BAD_SIZE_OUTS_CQES` (no slot for the RESIZE_CQ CQE). Poll before
    /// expecting more completions.
    pub fn capacity(&self) -> u32 {
        self.ring.nent() as u32 - 1
    }

    /// log2 of the ring size.
    pub fn log_size(&self) -> u8 {
        self.ring.log_nent()
    }

    /// CQE size.
    pub fn cqe_size(&self) -> CqeSize {
        self.ring.cqe_size()
    }

    /// The EQ that receives this CQ's events.
    pub fn eqn(&self) -> u8 {
        self.eqn
    }

    /// The running consumer index.
    pub fn consumer_index(&self) -> u32 {
        self.ring.consumer_index()
    }

    /// The ring (geometry and memory, for tools and benchmarks that play
    /// the device); outside the crate through [`crate::unstable::cq::ring`].
    pub(crate) fn ring(&self) -> &CqRing<H> {
        &self.ring
    }

    /// Poll up to `out.len()` completions; the consumer index is published
    /// once for the batch.
    #[inline]
    pub fn poll(&mut self, out: &mut [Cqe]) -> usize {
        self.ring.poll(&self.dbr, out)
    }

    /// True when a completion is waiting (one owner-byte check).
    #[inline(always)]
    pub fn has_next(&self) -> bool {
        self.ring.has_next()
    }

    /// The completion waiting at the consumer index, if any (one owner-byte
    /// check, as [`Cq::has_next`]), kept for the read that takes it
    /// ([`CqReader::take_waiting_if`]).
    #[inline(always)]
    pub(crate) fn waiting(&self) -> Option<WaitingCqe> {
        self.ring.waiting()
    }

    /// Whether the CQE after the one at the consumer index is waiting as
    /// well ([`CqRing::has_second`]; a hint).
    #[inline(always)]
    pub(crate) fn has_second(&self) -> bool {
        self.ring.has_second()
    }

    /// Read CQEs through a [`CqReader`] handed to `f` (the ring's geometry
    /// and the consumer index in registers). The consumer index is not
    /// published: call [`Cq::update_doorbell`] once per batch. Returns
    /// `f`'s result and whether the index moved.
    #[inline(always)]
    pub(crate) fn read<R>(&mut self, f: impl FnOnce(&mut CqReader<'_>) -> R) -> (R, bool) {
        self.ring.read(f)
    }

    /// Publish the consumer index in the doorbell record, after the reads
    /// of the CQEs taken (see [`CqRing::update_doorbell`]).
    #[inline(always)]
    pub(crate) fn update_doorbell(&self) {
        self.ring.update_doorbell(&self.dbr);
    }

    /// [`CqRing::peek_at`]: the CQE at running index `ci` if software
    /// owns it, for a pass that keeps its own consumer index.
    #[inline(always)]
    pub(crate) fn peek_at(&self, ci: u32) -> Option<CqeView<'_>> {
        self.ring.peek_at(ci)
    }

    /// [`CqRing::taken_at`]: the CQE at running index `ci`, taken by the
    /// pass, read in place.
    #[inline(always)]
    pub(crate) fn taken_at(&self, ci: u32) -> CqeView<'_> {
        self.ring.taken_at(ci)
    }

    /// [`CqRing::end_pass`]: the consumer index moves to `ci`, where the
    /// pass reached, and is published (nothing when the pass took
    /// nothing).
    #[inline(always)]
    pub(crate) fn end_pass(&mut self, ci: u32) {
        self.ring.end_pass(&self.dbr, ci);
    }

    /// Take one completion (the consumer index is published at once).
    #[inline]
    pub fn poll_one(&mut self) -> Option<Cqe> {
        let c = self.ring.pop()?;
        self.ring.update_doorbell(&self.dbr);
        Some(c)
    }

    /// Completions waiting, counted by ownership from the consumer index.
    pub fn pending(&self) -> usize {
        self.ring.pending()
    }

    /// Remove the unpolled completions of QP `qpn` from this CQ, keeping
    /// the others in order, and return how many were removed. A receive
    /// completion naming `srq` gives its WQE back to it (the message is
    /// dropped with its QP's state, as Linux `mlx5_ib_cq_clean` does).
    /// [`crate::Hca::qp_to_reset_and_clean`] runs this on a QP's CQs.
    pub fn discard_qp(&mut self, qpn: u32, mut srq: Option<&mut Srq<H>>) -> u32 {
        let qpn = qpn & 0x00ff_ffff;
        self.ring.remove_where(&self.dbr, |c| {
            if c.qpn != qpn {
                return false;
            }
            if let Some(s) = srq.as_deref_mut() {
                if !c.is_requester() && c.srqn == s.srqn() {
                    // The device is not trusted: a WQE the SRQ never posted
                    // is refused and nothing is freed.
                    let _ = s.complete(c.wqe_counter);
                }
            }
            true
        })
    }

    /// Remove the unpolled receive completions naming SRQ/RMP `srqn` from
    /// this CQ, keeping the others in order; returns how many. For an SRQ
    /// just destroyed: firmware reuses its number, and a completion left
    /// here would otherwise be matched to the SRQ that gets it next.
    pub fn discard_srq(&mut self, srqn: u32) -> u32 {
        let srqn = srqn & 0x00ff_ffff;
        self.ring
            .remove_where(&self.dbr, |c| !c.is_requester() && c.srqn == srqn)
    }

    /// The arm sequence number the next arm carries (its low two bits go
    /// on the wire, docs/firmware.md §5): one more for every completion
    /// event of this CQ, counted by [`Hca::arm_cq`].
    pub fn arm_sequence(&self) -> u32 {
        self.arm_sn
    }

    /// Count a completion event of this CQ that the HCA could not count:
    /// one a faulty device wrote under another CQ number. The next arm then
    /// takes the next sequence number (without it, firmware would ignore
    /// the arm as a repeat of the event it raised). Normal operation never
    /// needs this: [`Hca::arm_cq`] counts every event it consumes.
    pub fn count_lost_event(&mut self) {
        self.arm_sn = self.arm_sn.wrapping_add(1);
        self.armed_next = false;
    }

    /// Objects that report to this CQ (SRQs at ISSI 0, queue pairs);
    /// destroy is refused while this is not zero.
    pub fn users(&self) -> u32 {
        self.users
    }

    pub(crate) fn add_user(&mut self) {
        self.users += 1;
    }

    pub(crate) fn remove_user(&mut self) {
        self.users = self.users.saturating_sub(1);
    }
}

/// `log2(roundup_pow2(entries + 1))`: mlx5 keeps one entry free.
fn log_for(entries: u32) -> u8 {
    let n = (entries as u64 + 1).next_power_of_two();
    n.trailing_zeros() as u8
}

impl<H: Hal, O: CmdObserver, const CE: usize, const AE: usize> Hca<H, O, CE, AE> {
    fn cq_log_size(&self, entries: u32) -> Result<u8, Error> {
        if entries < 1 {
            return Err(Error::InvalidArgument("a CQ needs at least one entry"));
        }
        let max_log = self.caps().log_max_cq_sz;
        let log = log_for(entries);
        if log > max_log {
            return Err(Error::InvalidArgument(
                "CQ size above the device's log_max_cq_sz",
            ));
        }
        Ok(log)
    }

    /// Create a CQ of at least `entries` entries on the completion EQ of
    /// `opts.comp_vector` (docs/firmware.md §7.1): ring initialised to
    /// invalid CQEs, doorbell record, CREATE_CQ. The CQ gets `2^k − 1`
    /// usable entries, `2^k ≥ entries + 1`. Moderation values
    /// ([`CqOptions::moderation`]) are checked before anything is allocated.
    pub fn create_cq(&self, entries: u32, opts: CqOptions) -> Result<Cq<H>, Error> {
        let eqn = self
            .comp_eqn_of(opts.comp_vector)
            .ok_or(Error::InvalidArgument(
                "completion vector not below Hca::num_comp_vectors",
            ))?;
        let log = self.cq_log_size(entries)?;
        if let Some(m) = &opts.moderation {
            moderation::check(self.caps(), m)?;
        }
        let hal = self.hal().clone();
        let (ring, pages) = CqRing::new_paged(&hal, log, opts.cqe_size, MAX_CONTEXT_PAGES)?;
        let dbr = DoorbellRecord::new(&hal)?;
        let uar = self.uar();
        let mut input = [0u8; MAX_CMD_LEN];
        let len = cmd::create_cq(
            &mut input,
            &CqParams {
                log_size: log,
                cqe_size: opts.cqe_size,
                uar_page: uar,
                eqn,
                dbr_addr: dbr.iova(),
                pages,
                overrun_ignore: opts.overrun_ignore,
                moderation: opts.moderation,
            },
        )?;
        let mut out = [0u8; cmd::CREATE_CQ_OUT];
        self.exec(&input[..len], &mut out)?;
        Ok(Cq {
            cqn: cmd::parse_create_cq(&out),
            ring,
            dbr,
            hal,
            uar_offset: uar_page_offset(uar),
            eqn,
            arm_sn: 0,
            armed_next: false,
            users: 0,
        })
    }

    /// Destroy a CQ. Refused with [`Error::Busy`] while an SRQ or a QP
    /// reports to it (before any command is sent);
    /// on any failure the CQ is handed back unchanged inside the
    /// [`DestroyError`] and keeps working.
    /// Unpolled completions and a pending arm do not prevent destruction.
    // No heap to box into: handing the object back on failure is the point.
    #[allow(clippy::result_large_err)]
    pub fn destroy_cq(&self, cq: Cq<H>) -> Result<(), DestroyError<Cq<H>>> {
        if cq.users > 0 {
            return Err(DestroyError::new(
                cq,
                Error::Busy("CQ still used by an SRQ or a QP"),
            ));
        }
        let input = match cmd::destroy_cq(cq.cqn) {
            Ok(i) => i,
            Err(e) => return Err(DestroyError::new(cq, e.into())),
        };
        let mut out = [0u8; cmd::DESTROY_CQ_OUT];
        match self.exec(&input, &mut out) {
            // The ring and record are freed when `cq` drops here, after
            // firmware stopped using them; its events still queued go too.
            Ok(()) => {
                // Also drops its record of arms (Hca::arm_cq).
                self.forget_events(crate::hca::Gone::Cq(cq.cqn));
                Ok(())
            }
            Err(e) => Err(DestroyError::new(cq, e)),
        }
    }

    /// Request one completion event for `cq` (docs/firmware.md §5): for its
    /// next CQE, or with `solicited_only` for its next solicited (or error)
    /// CQE. Exactly one event follows each arm; a solicited-only request
    /// after a request for the next completion, with no event in between,
    /// stays a request for the next completion (Linux `mlx5_ib_arm_cq`).
    /// The event arrives through [`Hca::poll_events`] as
    /// [`crate::Event::Completion`] and [`Hca::next_completion`].
    ///
    /// The arm sequence number needs no help from the caller: firmware
    /// ignores an arm that repeats the number of the event it already
    /// raised, so the number goes up by one per completion event. The HCA
    /// notes each completion event of an armed CQ when it consumes the EQE
    /// (in [`Hca::poll_events`], a command wait, or here: the completion EQ
    /// is polled first, so an event already written is counted), and this
    /// call applies it before ringing the doorbell, as Linux's EQ handler
    /// and rdma-core's `mlx5_cq_event` do. Events lost to a full
    /// completion-event queue are counted all the same.
    ///
    /// The HCA remembers up to `CE` armed CQs (its completion-event queue
    /// capacity, 256 by default); arming one more is
    /// [`Error::TableFull`] (`ENOMEM`) until an armed CQ is destroyed.
    pub fn arm_cq(&self, cq: &mut Cq<H>, solicited_only: bool) -> Result<(), Error> {
        let fired = {
            let mut core = self.core_lock();
            core.poll_comp_eq(self.hal(), self.config().eq_poll_budget, cq.eqn);
            core.cq_arms.arm(cq.cqn)
        };
        match fired {
            None => Err(Error::TableFull {
                what: "armed CQs (Hca parameter CE)",
                capacity: CE,
            }),
            Some(fired) => {
                if fired {
                    cq.arm_sn = cq.arm_sn.wrapping_add(1);
                    cq.armed_next = false;
                }
                // Once armed for the next completion, a solicited-only
                // request does not narrow it until the event comes (Linux
                // `mlx5_ib_arm_cq`, IB semantics).
                let solicited_only = solicited_only && !cq.armed_next;
                cq.armed_next |= !solicited_only;
                cq.ring.arm(
                    &cq.hal,
                    &cq.dbr,
                    cq.uar_offset,
                    cq.cqn,
                    cq.arm_sn,
                    solicited_only,
                );
                Ok(())
            }
        }
    }

    /// Query the CQ context.
    pub fn query_cq(&self, cq: &Cq<H>) -> Result<CqState, Error> {
        let input = cmd::query_cq(cq.cqn)?;
        let mut out = [0u8; cmd::QUERY_CQ_OUT];
        self.exec(&input, &mut out)?;
        Ok(cmd::parse_query_cq(&out))
    }

    /// Completion moderation (MODIFY_CQ op_mod 0, `modify_field_select`
    /// PERIOD | COUNT, as Linux `mlx5_core_modify_cq_moderation`): an armed
    /// CQ's event waits for `max_count` completions since the last event or
    /// `period` microseconds, whichever first; 0 disables either; the period
    /// mode stays. Refused before any command without `cq_moderation`
    /// ([`Error::Unsupported`], `EOPNOTSUPP`) or with a period above 4 095
    /// ([`Error::InvalidArgument`], `EINVAL`), as `mlx5_ib_modify_cq` does.
    pub fn modify_cq_moderation(
        &self,
        cq: &Cq<H>,
        period: u16,
        max_count: u16,
    ) -> Result<(), Error> {
        let m = CqModeration {
            period,
            max_count,
            mode: CqPeriodMode::StartFromEqe,
        };
        moderation::check(self.caps(), &m)?;
        let input = cmd::modify_cq_moderation(cq.cqn, period, max_count)?;
        let mut out = [0u8; cmd::MODIFY_CQ_OUT];
        self.exec(&input, &mut out)
    }

    /// Moderation values and period mode in one MODIFY_CQ op_mod 0 with
    /// `modify_field_select` PERIOD | COUNT | PERIOD_MODE (Linux
    /// `mlx5e_modify_cq_moderation`). Refused before any command:
    /// no `cq_moderation` or no `cq_period_mode_modify` (mlx5e's
    /// `set_coalesce` asks for both), or CQE-based timing without
    /// `cq_period_start_from_cqe`: [`Error::Unsupported`] (`EOPNOTSUPP`); a
    /// period above 4 095: [`Error::InvalidArgument`] (`EINVAL`).
    /// [`Hca::modify_cq_moderation`] changes period and count only.
    pub fn modify_cq_moderation_mode(&self, cq: &Cq<H>, m: &CqModeration) -> Result<(), Error> {
        moderation::check(self.caps(), m)?;
        if !self.caps().cq_period_mode_modify {
            return Err(Error::Unsupported {
                what: "CQ period mode change (cq_period_mode_modify capability)",
                errno: errno::EOPNOTSUPP,
            });
        }
        let input = cmd::modify_cq_moderation_mode(cq.cqn(), m)?;
        let mut out = [0u8; cmd::MODIFY_CQ_OUT];
        self.exec(&input, &mut out)
    }

    /// Resize a CQ to at least `entries` entries with MODIFY_CQ op_mod 1,
    /// keeping every unpolled completion, in order (docs/firmware.md §8):
    ///
    /// 1. a size that rounds to the current one changes nothing;
    /// 2. the new ring is allocated and initialised (invalid CQEs);
    /// 3. MODIFY_CQ points firmware at it; firmware writes a RESIZE_CQ CQE
    ///    into the old ring and continues in the new one;
    /// 4. the unpolled CQEs of the old ring are copied in front of firmware's
    ///    first new CQE, owner bits fixed for the new size, and the old ring
    ///    is freed.
    ///
    /// `&mut Cq` keeps pollers out for the whole operation. If the command
    /// fails (too few entries for the completions waiting: firmware status
    /// 0x40, `EINVAL`; no `cq_resize`: [`Error::Unsupported`], `ENOSYS`; no
    /// memory: `ENOMEM`), the CQ is exactly as it was and keeps working.
    pub fn resize_cq(&self, cq: &mut Cq<H>, entries: u32) -> Result<(), Error> {
        if !self.caps().cq_resize {
            return Err(Error::Unsupported {
                what: "CQ resize (cq_resize capability)",
                errno: errno::ENOSYS,
            });
        }
        let log = self.cq_log_size(entries)?;
        if log == cq.ring.log_nent() {
            return Ok(());
        }
        let cqe_size = cq.ring.cqe_size();
        let (mut new_ring, pages) = CqRing::new_paged(&cq.hal, log, cqe_size, MAX_CONTEXT_PAGES)?;
        let mut input = [0u8; MAX_CMD_LEN];
        let len = cmd::resize_cq(&mut input, cq.cqn, log, cqe_size, &pages)?;
        let mut out = [0u8; cmd::MODIFY_CQ_OUT];
        // On failure `new_ring` drops here and the CQ is untouched.
        self.exec(&input[..len], &mut out)?;
        let copied = cq.ring.copy_into_resized(&mut new_ring);
        // Firmware now writes to the new ring whatever the copy found.
        core::mem::swap(&mut cq.ring, &mut new_ring);
        cq.ring.update_doorbell(&cq.dbr);
        drop(new_ring);
        copied.map(|_| ()).map_err(Error::ResizeCopy)
    }
}

#[cfg(test)]
mod tests {
    use super::log_for;

    #[test]
    fn sizes_round_like_mlx5() {
        assert_eq!(log_for(1), 1);
        assert_eq!(log_for(3), 2);
        assert_eq!(log_for(4), 3);
        assert_eq!(log_for(100), 7);
        assert_eq!(log_for(127), 7);
        assert_eq!(log_for(2000), 11);
    }
}
