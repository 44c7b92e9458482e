//! Traffic injection: receive messages through an SRQ/RMP, send
//! completions, arbitrary events.

use mlx5_regs::consts::{cqe_syndrome, ctx, CqeOpcode};
use mlx5_regs::layouts::{cqe64, err_cqe, srq_next_seg, wqe_data_seg};
use mlx5_regs::EventType;

use crate::state::State;
use crate::{Device, SimError};

/// `MLX5_OPCODE_SEND`, reported in requester CQEs.
const WQE_OPCODE_SEND: u8 = 0x0a;

/// What happened to a delivered message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
        self.dev.lock().deliver(srqn, cqn, qpn, payload, false)
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
        self.dev.lock().deliver(srqn, cqn, qpn, payload, true)
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

    /// Put any EQE on the EQ subscribed to its type (byte 1).
    pub fn raise_event(&self, eqe: [u8; 64]) -> Result<(), SimError> {
        let mut st = self.dev.lock();
        if st.fatal.is_some() {
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
        if self.fatal.is_some() {
            return Err(SimError::Fatal);
        }
        if !self.cqs.contains_key(&cqn) {
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
        let s = self
            .srqs
            .get(&srqn)
            .ok_or(SimError::NoSuchObject {
                kind: "srq",
                id: srqn,
            })?
            .clone();
        let good = if s.rmp {
            s.state == ctx::RMP_STATE_RDY
        } else {
            s.state == ctx::SRQ_STATE_GOOD
        };
        if !good {
            return Err(SimError::BadState("SRQ/RMP in error state"));
        }
        let size = 1u32 << s.log_size;
        let posted = self
            .rd_be32(s.dbr, &|| {
                format!("SRQ doorbell record read srqn {srqn:#x}")
            })
            .map(|v| v as u16)
            .unwrap_or(s.consumed);
        if posted.wrapping_sub(s.consumed) == 0 {
            self.dropped += 1;
            return Ok(Delivery::Dropped);
        }
        // The WQE the device is positioned on. Its next pointer is read
        // together with the WQE, at consumption: once consumed the driver may
        // complete it out of order, make it the free-list tail and rewrite
        // that pointer, so a later read would follow the wrong link.
        let stride = 1u64 << s.log_stride;
        let idx = s.next;
        if idx as u32 >= size {
            return self.srq_catastrophe(srqn, "next_wqe_index beyond the SRQ size");
        }
        let mut wqe = vec![0u8; stride as usize];
        let Some((wiova, _)) = s.buf.at(idx as u64 * stride) else {
            return self.srq_catastrophe(srqn, "WQE outside the page list");
        };
        if self
            .rd(wiova, &mut wqe, &|| {
                format!("SRQ WQE read srqn {srqn:#x} index {idx}")
            })
            .is_err()
        {
            return self.srq_catastrophe(srqn, "WQE unreadable");
        }
        {
            let sm = self.srqs.get_mut(&srqn).expect("exists");
            sm.consumed = sm.consumed.wrapping_add(1);
            sm.next = srq_next_seg::next_wqe_index.get(&wqe[..16]);
        }
        // Scatter list: data segments after the 16-byte next segment, up to
        // the terminator (byte_count 0, lkey MLX5_INVALID_LKEY) or the end.
        let mut segs = Vec::new();
        let mut prot = false;
        for seg in wqe[16..].chunks_exact(16) {
            let bc = wqe_data_seg::byte_count.get(seg);
            let lkey = wqe_data_seg::lkey.get(seg);
            let addr = wqe_data_seg::addr.get(seg);
            if bc == 0 && lkey == ctx::INVALID_LKEY {
                break;
            }
            if lkey != self.resd_lkey {
                prot = true;
                break;
            }
            let len = if bc & 0x7fff_ffff == 0 {
                1u64 << 31
            } else {
                (bc & 0x7fff_ffff) as u64
            };
            segs.push((addr, len));
        }
        let cap: u64 = segs.iter().map(|s| s.1).sum();
        let mut result = if prot {
            Delivery::ProtectionError { wqe_index: idx }
        } else if payload.len() as u64 > cap {
            Delivery::LengthError { wqe_index: idx }
        } else {
            Delivery::Completed { wqe_index: idx }
        };
        if let Delivery::Completed { .. } = result {
            let mut done = 0usize;
            for (addr, len) in segs {
                if done == payload.len() {
                    break;
                }
                let n = (len as usize).min(payload.len() - done);
                if self
                    .wr(addr, &payload[done..done + n], &|| {
                        format!("receive scatter srqn {srqn:#x} WQE {idx}")
                    })
                    .is_err()
                {
                    result = Delivery::ProtectionError { wqe_index: idx };
                    break;
                }
                done += n;
            }
        }
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
        if let Some(s) = self.srqs.get_mut(&srqn) {
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
        Err(SimError::BadState(why))
    }
}
