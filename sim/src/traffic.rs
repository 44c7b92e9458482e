//! The wire-level side door: receive messages through an SRQ/RMP, send
//! completions and arbitrary events without a QP, for tests that need
//! control below the traffic engine. Every use is counted
//! ([`Traffic::side_door_uses`]) so a test can prove real traffic never
//! needed it. Also the traffic engine's counters ([`TrafficStats`]).

use mlx5_regs::consts::{cqe_syndrome, ctx, CqeOpcode};
use mlx5_regs::layouts::{cqe64, err_cqe};
use mlx5_regs::EventType;

use crate::engine::ScatterError;
use crate::state::State;
use crate::{Device, SimError};

/// Counters of the traffic engine and the side door.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrafficStats {
    /// Send doorbells (8-byte writes into a BlueFlame register area).
    pub doorbells: u64,
    /// Send doorbells dropped (unknown QP, wrong UAR, no send queue, RESET).
    pub dropped_doorbells: u64,
    /// Messages the engine delivered to a responder (SEND, SEND_IMM,
    /// RDMA_WRITE, RDMA_WRITE_IMM).
    pub messages: u64,
    /// RNR NAKs (a responder's SRQ was empty).
    pub rnr_naks: u64,
    /// Transport timeouts (no ACK: peer unreachable or not connected).
    pub ack_timeouts: u64,
    /// Flush CQEs written (REQ_ERR, syndrome 0x05).
    pub flushed: u64,
    /// Calls of the side door (`deliver*`, `complete_send*`, `raise_*`).
    pub side_door_uses: u64,
    /// Receive scatter lists ended by the invalid lkey 0x100
    /// (`MLX5_INVALID_LKEY`, what rdma-core uses).
    pub terminators_invalid_lkey: u64,
    /// Messages a responder QP received complete from the wire.
    pub messages_received: u64,
    /// Packets sent again (go-back-N after a timeout, a sequence NAK or an
    /// RNR NAK).
    pub retransmissions: u64,
    /// NAK PSN sequence errors the requester received.
    pub seq_naks_received: u64,
    /// Frames the port put on the wire.
    pub wire_tx: u64,
    /// Frames that arrived at the port.
    pub wire_rx: u64,
    /// Arrived frames dropped silently (malformed, bad ICRC, not addressed
    /// to this port, wrong P_Key, unknown QP or QP state, not from the
    /// QP's peer).
    pub wire_dropped: u64,
    /// Packets the engine could not build (a path that fits no frame).
    pub wire_build_errors: u64,
    /// Duplicate request packets (re-ACKed, not delivered).
    pub duplicates: u64,
    /// ACKs sent by responders.
    pub acks_sent: u64,
    /// RNR NAKs sent by responders.
    pub rnr_naks_sent: u64,
    /// NAKs sent by responders, by code: PSN sequence error, invalid
    /// request, remote access error, remote operational error.
    pub naks_sent: [u64; 4],
    /// Receive scatter lists ended by the device's own
    /// `terminate_scatter_list_mkey` (what Linux uses when offered).
    pub terminators_device_key: u64,
    /// BlueFlame copies received whole and equal to the WQE in memory.
    pub blueflame_copies: u64,
    /// RDMA READs a responder served (replays included).
    pub reads_served: u64,
    /// Atomics a responder executed (never counts a replay).
    pub atomics_executed: u64,
    /// READ/atomic requests answered again from a saved responder resource.
    pub rd_atomic_replays: u64,
    /// Fenced WQEs executed (fence mode FENCE or SMALL_AND_FENCE), each
    /// after every earlier WQE completed.
    pub fenced_wqes: u64,
}

/// `MLX5_OPCODE_SEND`, reported in requester CQEs.
const WQE_OPCODE_SEND: u8 = 0x0a;

/// What happened to a delivered message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Delivery {
    /// Scattered into WQE `wqe_index`; a RESP_SEND CQE was written.
    Completed {
        /// WQE index (reported in the CQE's `wqe_counter`).
        wqe_index: u16,
    },
    /// The message did not fit: RESP_ERR CQE with syndrome 0x01 (local
    /// length error); the WQE is consumed.
    LengthError {
        /// WQE index.
        wqe_index: u16,
    },
    /// A data segment had a foreign lkey or pointed outside DMA memory
    /// (IOMMU fault recorded): RESP_ERR CQE with syndrome 0x04 (local
    /// protection error); the WQE is consumed.
    ProtectionError {
        /// WQE index.
        wqe_index: u16,
    },
    /// No posted WQE: the message was dropped (receiver not ready) and
    /// counted in [`Traffic::dropped`].
    Dropped,
}

/// Traffic injection handle (`Device::traffic`).
pub struct Traffic<'a> {
    pub(crate) dev: &'a Device,
}

impl Traffic<'_> {
    /// Deliver a message "from the wire" through SRQ/RMP `srqn`, completing
    /// on `cqn`, reporting `qpn` (not solicited).
    pub fn deliver(
        &self,
        srqn: u32,
        cqn: u32,
        qpn: u32,
        payload: &[u8],
    ) -> Result<Delivery, SimError> {
        let mut st = self.dev.lock();
        st.stats.side_door_uses += 1;
        st.deliver(srqn, cqn, qpn, payload, false)
    }

    /// As [`Traffic::deliver`], with the solicited-event bit set (wakes a
    /// CQ armed for solicited completions).
    pub fn deliver_solicited(
        &self,
        srqn: u32,
        cqn: u32,
        qpn: u32,
        payload: &[u8],
    ) -> Result<Delivery, SimError> {
        let mut st = self.dev.lock();
        st.stats.side_door_uses += 1;
        st.deliver(srqn, cqn, qpn, payload, true)
    }

    /// Write a requester (opcode REQ) CQE to `cqn`.
    pub fn complete_send(
        &self,
        cqn: u32,
        qpn: u32,
        wqe_counter: u16,
        byte_cnt: u32,
    ) -> Result<(), SimError> {
        let mut st = self.dev.lock();
        st.stats.side_door_uses += 1;
        st.check_cq(cqn)?;
        let mut c = [0u8; 64];
        cqe64::opcode.set(&mut c, CqeOpcode::REQ.0).expect("4-bit");
        cqe64::sop_opcode
            .set(&mut c, WQE_OPCODE_SEND)
            .expect("8-bit");
        cqe64::qpn.set(&mut c, qpn & 0x00ff_ffff).expect("24-bit");
        cqe64::wqe_counter.set(&mut c, wqe_counter).expect("16-bit");
        cqe64::byte_cnt.set(&mut c, byte_cnt).expect("32-bit");
        st.cq_push(cqn, c, false);
        Ok(())
    }

    /// Requester error CQE (opcode REQ_ERR) with `syndrome` and
    /// `vendor_syndrome`. Error completions also wake solicited arms.
    pub fn complete_send_error(
        &self,
        cqn: u32,
        qpn: u32,
        wqe_counter: u16,
        syndrome: u8,
        vendor_syndrome: u8,
    ) -> Result<(), SimError> {
        let mut st = self.dev.lock();
        st.stats.side_door_uses += 1;
        st.check_cq(cqn)?;
        let mut c = [0u8; 64];
        err_cqe::opcode
            .set(&mut c, CqeOpcode::REQ_ERR.0)
            .expect("4-bit");
        err_cqe::syndrome.set(&mut c, syndrome).expect("8-bit");
        err_cqe::vendor_err_synd
            .set(&mut c, vendor_syndrome)
            .expect("8-bit");
        err_cqe::s_wqe_opcode
            .set(&mut c, WQE_OPCODE_SEND)
            .expect("8-bit");
        err_cqe::qpn.set(&mut c, qpn & 0x00ff_ffff).expect("24-bit");
        err_cqe::wqe_counter
            .set(&mut c, wqe_counter)
            .expect("16-bit");
        st.cq_push(cqn, c, true);
        Ok(())
    }

    /// Messages dropped for lack of WQEs (receiver not ready).
    pub fn dropped(&self) -> u64 {
        self.dev.lock().dropped
    }

    /// How often the side door was used (every call of `deliver`,
    /// `deliver_solicited`, `complete_send`, `complete_send_error`,
    /// `raise_event`, `raise_simple_event`), successful or not.
    pub fn side_door_uses(&self) -> u64 {
        self.dev.lock().stats.side_door_uses
    }

    /// Why send WQEs failed locally (malformed WQE, refused gather), one
    /// line each, in order: diagnosis for a local error CQE.
    pub fn send_errors(&self) -> Vec<String> {
        self.dev.lock().records.send_errors.clone()
    }

    /// The traffic engine's counters.
    pub fn stats(&self) -> TrafficStats {
        self.dev.lock().stats
    }

    /// Put any EQE on the EQ subscribed to its type (byte 1).
    pub fn raise_event(&self, eqe: [u8; 64]) -> Result<(), SimError> {
        let mut st = self.dev.lock();
        st.stats.side_door_uses += 1;
        if st.health.fatal.is_some() {
            return Err(SimError::Fatal);
        }
        let t = eqe[1];
        match st.eq_for(t) {
            Some(eqn) => {
                st.eq_write(eqn, eqe);
                Ok(())
            }
            None => Err(SimError::NoEq { event_type: t }),
        }
    }

    /// An event of `event_type` with no data (convenience for tests).
    pub fn raise_simple_event(&self, event_type: EventType, sub_type: u8) -> Result<(), SimError> {
        self.raise_event(State::make_eqe(event_type, sub_type))
    }
}

impl State {
    fn check_cq(&self, cqn: u32) -> Result<(), SimError> {
        if self.health.fatal.is_some() {
            return Err(SimError::Fatal);
        }
        if !self.objects.cqs.contains_key(&cqn) {
            return Err(SimError::NoSuchObject {
                kind: "cq",
                id: cqn,
            });
        }
        Ok(())
    }

    fn deliver(
        &mut self,
        srqn: u32,
        cqn: u32,
        qpn: u32,
        payload: &[u8],
        solicited: bool,
    ) -> Result<Delivery, SimError> {
        self.check_cq(cqn)?;
        let pd = self
            .objects
            .srqs
            .get(&srqn)
            .ok_or(SimError::NoSuchObject {
                kind: "srq",
                id: srqn,
            })?
            .pd;
        if !self.srq_good(srqn) {
            return Err(SimError::BadState("SRQ/RMP in error state"));
        }
        if self.srq_available(srqn) == 0 {
            self.dropped += 1;
            return Ok(Delivery::Dropped);
        }
        let (idx, wqe) = match self.srq_take(srqn) {
            Ok(x) => x,
            Err(why) => return self.srq_catastrophe(srqn, why),
        };
        // The side door has no QP: keys are checked against the SRQ's PD.
        let what = || format!("receive scatter srqn {srqn:#x} WQE {idx}");
        let result = match self.plan_scatter(&wqe[16..], pd, payload.len() as u64, &what) {
            Ok(plan) => {
                self.write_plan(&plan, payload, &what);
                Delivery::Completed { wqe_index: idx }
            }
            Err(ScatterError::Length) => Delivery::LengthError { wqe_index: idx },
            Err(ScatterError::Protection) => Delivery::ProtectionError { wqe_index: idx },
        };
        let mut c = [0u8; 64];
        let err_synd = match result {
            Delivery::LengthError { .. } => Some(cqe_syndrome::LOCAL_LENGTH_ERR),
            Delivery::ProtectionError { .. } => Some(cqe_syndrome::LOCAL_PROT_ERR),
            _ => None,
        };
        match err_synd {
            Some(sy) => {
                err_cqe::opcode
                    .set(&mut c, CqeOpcode::RESP_ERR.0)
                    .expect("4-bit");
                err_cqe::syndrome.set(&mut c, sy).expect("8-bit");
                err_cqe::srqn.set(&mut c, srqn).expect("24-bit");
                err_cqe::qpn.set(&mut c, qpn & 0x00ff_ffff).expect("24-bit");
                err_cqe::wqe_counter.set(&mut c, idx).expect("16-bit");
            }
            None => {
                cqe64::opcode
                    .set(&mut c, CqeOpcode::RESP_SEND.0)
                    .expect("4-bit");
                cqe64::byte_cnt
                    .set(&mut c, payload.len() as u32)
                    .expect("32-bit");
                cqe64::srqn.set(&mut c, srqn).expect("24-bit");
                cqe64::qpn.set(&mut c, qpn & 0x00ff_ffff).expect("24-bit");
                cqe64::wqe_counter.set(&mut c, idx).expect("16-bit");
            }
        }
        self.cq_push(cqn, c, solicited || err_synd.is_some());
        self.srq_check_limit(srqn);
        Ok(result)
    }

    fn srq_catastrophe(&mut self, srqn: u32, why: &'static str) -> Result<Delivery, SimError> {
        self.srq_catastrophe_event(srqn, why);
        Err(SimError::BadState(why))
    }

    /// The SRQ/RMP enters its error state and SRQ_CATAS_ERROR (0x12) is
    /// raised (a corrupt free list or an unreadable WQE).
    pub(crate) fn srq_catastrophe_event(&mut self, srqn: u32, _why: &'static str) {
        if let Some(s) = self.objects.srqs.get_mut(&srqn) {
            s.state = if s.rmp {
                ctx::RMP_STATE_ERR
            } else {
                ctx::SRQ_STATE_ERROR
            };
        }
        let mut e = State::make_eqe(EventType::SRQ_CATAS_ERROR, 0);
        let d = mlx5_regs::layouts::eqe::event_data.get_mut(&mut e);
        mlx5_regs::layouts::qp_events::r#type
            .set(d, ctx::EVENT_QUEUE_TYPE_RQ)
            .expect("8-bit");
        mlx5_regs::layouts::qp_events::qpn_rqn_sqn
            .set(d, srqn)
            .expect("24-bit");
        self.raise(e);
    }
}
