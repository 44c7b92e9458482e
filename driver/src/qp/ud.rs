//! Unreliable datagram QPs: the address vector a UD send carries (the
//! WQE's 48-byte datagram segment, `struct mlx5_av` in
//! `include/linux/mlx5/qp.h`, filled as Linux `create_ib_ah` /
//! `set_datagram_seg` and rdma-core `mlx5_create_ah` do), the send work
//! request that names one, and the [`Hca`] methods that create a UD QP and
//! move it through its three transitions with exactly the fields Linux
//! `__mlx5_ib_modify_qp` sends for UD (RST2INIT: port, P_Key index, Q_Key;
//! INIT2RTR: nothing but the `mtu`/`log_msg_max` Linux forces; RTR2RTS:
//! the first send PSN).
//!
//! A WQE carries its own copy of the address vector: once posted, the
//! [`AddressVector`] it was built from may be dropped or reused.

use mlx5_hal::Hal;
use mlx5_regs::consts::qp_st;

use super::attr::{AddressPath, QpState, Transition};
use super::cmd;
use super::queue::{Qp, QpLinks};
use super::recv::RecvQueueCaps;
use super::sq_size::{SendQueueCaps, SqGeometry};
use super::wr::{Payload, SendOpcode, SendSlot, SendWork};
use crate::error::Error;
use crate::hca::Hca;
use crate::stats::CmdObserver;

/// `MLX5_EXTENDED_UD_AV`: bit 31 of `dqp_dct`, set by both Linux and
/// rdma-core on every UD send.
const EXTENDED_AV: u32 = 0x8000_0000;
/// `grh_gid_fl` bit 30: a GRH follows the LRH / the RoCE network header.
const AV_GRH: u32 = 1 << 30;

/// Where a UD send goes, as the device reads it: the part of the datagram
/// segment that does not change per work request (bytes 12..48 of `struct
/// mlx5_av`: SL and rate, LID or RoCE v2 UDP source port, MAC, traffic
/// class, hop limit, GRH flag, source GID index, flow label, destination
/// GID). Built once per destination (an address handle) and copied into
/// every WQE that uses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressVector {
    /// Bytes 12..16, big-endian.
    head: u32,
    /// Bytes 16..48 as they lie in the WQE: four words loaded from the
    /// bytes in memory order (`u64::from_ne_bytes`), stored as they are,
    /// with no byte swap per send.
    wire_tail: [u64; 4],
}

impl AddressVector {
    /// The address vector of `path`: RoCE (the GRH fields, the MAC, the
    /// priority `sl & 7` in bits 3:1 of `stat_rate_sl`, the UDP source port
    /// in the LID field), InfiniBand (LID and SL) or InfiniBand with a GRH
    /// (Linux `create_ib_ah`). Force loopback names no destination QP's
    /// address: refused.
    pub fn from_path(path: &AddressPath) -> Result<AddressVector, Error> {
        let mut b = [0u8; 48];
        let grh = |b: &mut [u8; 48], sgid: u8, tclass: u8, hop: u8, fl: u32, dgid: &[u8; 16]| {
            b[26] = tclass;
            b[27] = hop;
            let w = (fl & 0xf_ffff) | AV_GRH | (u32::from(sgid) << 20);
            b[28..32].copy_from_slice(&w.to_be_bytes());
            b[32..48].copy_from_slice(dgid);
        };
        match *path {
            AddressPath::ForceLoopback { .. } => {
                return Err(Error::InvalidArgument(
                    "a UD address vector needs a destination address, not force loopback",
                ))
            }
            AddressPath::Roce {
                sgid_index,
                dgid,
                dmac,
                hop_limit,
                udp_sport,
                traffic_class,
                flow_label,
                sl,
                ..
            } => {
                b[12] = (sl & 7) << 1;
                b[14..16].copy_from_slice(&udp_sport.to_be_bytes());
                b[20..26].copy_from_slice(&dmac);
                grh(
                    &mut b,
                    sgid_index,
                    traffic_class,
                    hop_limit,
                    flow_label,
                    &dgid,
                );
            }
            AddressPath::Ib { dlid, sl, .. } => {
                b[12] = sl & 0xf;
                b[14..16].copy_from_slice(&dlid.to_be_bytes());
            }
            AddressPath::IbGlobal {
                dlid,
                sl,
                sgid_index,
                dgid,
                hop_limit,
                traffic_class,
                flow_label,
                ..
            } => {
                b[12] = sl & 0xf;
                b[14..16].copy_from_slice(&dlid.to_be_bytes());
                grh(
                    &mut b,
                    sgid_index,
                    traffic_class,
                    hop_limit,
                    flow_label,
                    &dgid,
                );
            }
        }
        let wire = |i: usize| u64::from_ne_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Ok(AddressVector {
            head: u32::from_be_bytes([b[12], b[13], b[14], b[15]]),
            wire_tail: [wire(16), wire(24), wire(32), wire(40)],
        })
    }

    /// The first two words of the datagram segment for a send to
    /// `remote_qpn` with `qkey`, as big-endian values: Q_Key, then
    /// `dqp_dct` (extended AV) and bytes 12..16.
    #[inline(always)]
    pub(super) fn head_words(&self, remote_qpn: u32, qkey: u32) -> [u64; 2] {
        let dqp = (remote_qpn & 0x00ff_ffff) | EXTENDED_AV;
        [
            u64::from(qkey) << 32,
            (u64::from(dqp) << 32) | u64::from(self.head),
        ]
    }

    /// Bytes 16..48 of the datagram segment as four words in memory order
    /// (store them without a byte swap).
    #[inline(always)]
    pub(super) fn wire_tail(&self) -> &[u64; 4] {
        &self.wire_tail
    }

    /// The 48 bytes of the datagram segment a send to `remote_qpn` with
    /// `qkey` carries (what the WQE holds after its control segment).
    pub fn segment(&self, remote_qpn: u32, qkey: u32) -> [u8; 48] {
        let mut out = [0u8; 48];
        for (i, w) in self.head_words(remote_qpn, qkey).iter().enumerate() {
            out[i * 8..i * 8 + 8].copy_from_slice(&w.to_be_bytes());
        }
        for (i, w) in self.wire_tail.iter().enumerate() {
            out[16 + i * 8..24 + i * 8].copy_from_slice(&w.to_ne_bytes());
        }
        out
    }
}

/// The destination of one UD send ([`SendWork::datagram`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram<'a> {
    /// The address vector, copied into the WQE.
    pub av: &'a AddressVector,
    /// The destination QP (24 bits).
    pub remote_qpn: u32,
    /// The destination's Q_Key; with bit 31 set the device sends the QP's
    /// own Q_Key instead (a controlled Q_Key, IBTA vol. 1 §10.2.5).
    pub remote_qkey: u32,
}

/// A UD send work request: SEND, or SEND with immediate data, to one
/// destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdSendRequest<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where to.
    pub dest: Datagram<'a>,
    /// Immediate data (SEND_IMM), as the receiver's completion reports it.
    pub imm: Option<u32>,
    /// The message: at most the port's MTU, or the send completes with a
    /// local length error.
    pub payload: Payload<'a>,
    /// A completion on success too.
    pub signaled: bool,
    /// The receiver's completion is solicited.
    pub solicited: bool,
}

impl SendWork for UdSendRequest<'_> {
    #[inline(always)]
    fn wr_id(&self) -> u64 {
        self.wr_id
    }

    #[inline(always)]
    fn opcode(&self) -> SendOpcode {
        if self.imm.is_some() {
            SendOpcode::SendImm
        } else {
            SendOpcode::Send
        }
    }

    #[inline(always)]
    fn imm(&self) -> u32 {
        self.imm.unwrap_or(0)
    }

    #[inline(always)]
    fn remote(&self) -> (u64, u32) {
        (0, 0)
    }

    #[inline(always)]
    fn payload(&self) -> Payload<'_> {
        self.payload
    }

    #[inline(always)]
    fn datagram(&self) -> Option<Datagram<'_>> {
        Some(self.dest)
    }

    #[inline(always)]
    fn signaled(&self) -> bool {
        self.signaled
    }

    #[inline(always)]
    fn solicited(&self) -> bool {
        self.solicited
    }
}

/// The RST2INIT attributes of a UD QP (`ibv_modify_qp` with `STATE |
/// PKEY_INDEX | PORT | QKEY`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdInitAttr {
    /// Port, 1-based.
    pub port: u8,
    /// P_Key table index.
    pub pkey_index: u16,
    /// The QP's Q_Key: datagrams whose DETH carries another are dropped.
    pub qkey: u32,
}

fn check_ud<H: Hal, T: AsMut<[SendSlot]>>(
    qp: &Qp<H, T>,
    t: Transition,
    ud: bool,
) -> Result<(), Error> {
    let typed = !matches!(t, Transition::ToError | Transition::ToReset);
    if typed && qp.ud != ud {
        return Err(Error::InvalidArgument(if ud {
            "a UD transition on a connected QP"
        } else {
            "a connected transition on a UD QP"
        }));
    }
    if t.allowed_from(qp.state) {
        Ok(())
    } else {
        Err(Error::QpState {
            qpn: qp.qpn,
            state: qp.state,
            op: t.command(),
        })
    }
}

pub(super) fn check_rc<H: Hal, T: AsMut<[SendSlot]>>(
    qp: &Qp<H, T>,
    t: Transition,
) -> Result<(), Error> {
    check_ud(qp, t, false)
}

impl<H: Hal, O: CmdObserver, const CE: usize, const AE: usize> Hca<H, O, CE, AE> {
    /// The send ring a UD QP with `req` needs: a WQE holds the control
    /// segment and the 48-byte datagram segment before its data (rdma-core
    /// `sq_overhead` for UD: 64 bytes).
    pub fn ud_send_queue_geometry(&self, req: &SendQueueCaps) -> Result<SqGeometry, Error> {
        let caps = self.caps();
        SqGeometry::for_transport(req, true, caps.max_wqe_sz_sq, caps.log_max_qp_sz)
            .map_err(Error::SqSize)
    }

    /// CREATE_QP of a UD QP (`st` UD): as [`Hca::create_qp_with`], the
    /// send ring sized by [`Hca::ud_send_queue_geometry`]; receives through
    /// its own receive queue or an SRQ.
    pub fn create_ud_qp<T: AsMut<[SendSlot]>>(
        &self,
        send: Option<SendQueueCaps>,
        recv: Option<RecvQueueCaps>,
        links: QpLinks<'_, H>,
        table: T,
    ) -> Result<Qp<H, T>, Error> {
        self.create_qp_of(
            qp_st::UD,
            send,
            super::sq_size::UD_OVERHEAD,
            recv,
            links,
            table,
        )
    }

    /// RST2INIT of a UD QP: port, P_Key index, Q_Key.
    pub fn ud_qp_to_init<T: AsMut<[SendSlot]>>(
        &self,
        qp: &mut Qp<H, T>,
        attr: &UdInitAttr,
    ) -> Result<(), Error> {
        check_ud(qp, Transition::Rst2Init, true)?;
        self.check_port(attr.port)?;
        let input = cmd::rst2init_ud_qp(qp.qpn, attr.port, attr.pkey_index, attr.qkey)?;
        let mut out = [0u8; cmd::MODIFY_QP_OUT];
        self.exec(&input, &mut out)?;
        qp.state = QpState::Init;
        Ok(())
    }

    /// INIT2RTR of a UD QP (no peer, no path).
    pub fn ud_qp_to_rtr<T: AsMut<[SendSlot]>>(&self, qp: &mut Qp<H, T>) -> Result<(), Error> {
        check_ud(qp, Transition::Init2Rtr, true)?;
        let input = cmd::init2rtr_ud_qp(qp.qpn)?;
        let mut out = [0u8; cmd::MODIFY_QP_OUT];
        self.exec(&input, &mut out)?;
        qp.state = QpState::Rtr;
        Ok(())
    }

    /// RTR2RTS of a UD QP: the first send PSN.
    pub fn ud_qp_to_rts<T: AsMut<[SendSlot]>>(
        &self,
        qp: &mut Qp<H, T>,
        sq_psn: u32,
    ) -> Result<(), Error> {
        check_ud(qp, Transition::Rtr2Rts, true)?;
        let input = cmd::rtr2rts_ud_qp(qp.qpn, sq_psn & 0x00ff_ffff)?;
        let mut out = [0u8; cmd::MODIFY_QP_OUT];
        self.exec(&input, &mut out)?;
        qp.state = QpState::Rts;
        Ok(())
    }

    /// All three UD transitions: RST → INIT (`attr`) → RTR → RTS (PSN 0).
    pub fn ud_qp_activate<T: AsMut<[SendSlot]>>(
        &self,
        qp: &mut Qp<H, T>,
        attr: &UdInitAttr,
    ) -> Result<(), Error> {
        self.ud_qp_to_init(qp, attr)?;
        self.ud_qp_to_rtr(qp)?;
        self.ud_qp_to_rts(qp, 0)
    }
}
