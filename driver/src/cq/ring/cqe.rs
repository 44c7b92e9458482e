//! One CQE: its layout, the decoded [`Cqe`], and [`CqeView`], a
//! software-owned CQE read field by field in place (docs/firmware.md §7.2,
//! `struct mlx5_cqe64` in Linux `include/linux/mlx5/device.h`).

use mlx5_hal::DmaWindow;
use mlx5_regs::CqeOpcode;

/// Byte offsets inside a 64-byte CQE (docs/firmware.md §7.2, `struct mlx5_cqe64`).
pub(super) mod off {
    pub const ML_PATH: usize = 0x11;
    pub const SLID: usize = 0x16;
    pub const FLAGS_RQPN: usize = 0x18;
    pub const SRQN: usize = 0x20;
    pub const IMM: usize = 0x24;
    pub const BYTE_CNT: usize = 0x2c;
    pub const TIMESTAMP: usize = 0x30;
    pub const SYNDROME_WORD: usize = 0x34;
    pub const QPN: usize = 0x38;
    pub const WQE_COUNTER: usize = 0x3c;
    pub const OP_OWN: usize = 0x3f;
}

/// Outcome of a completion, as the CQE reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CqeStatus {
    /// The work request completed.
    Success,
    /// An error CQE (opcode REQ_ERR or RESP_ERR).
    Error {
        /// `syndrome` (docs/firmware.md §7.2 error syndromes, e.g. 0x01 local length).
        syndrome: u8,
        /// Vendor syndrome.
        vendor_syndrome: u8,
    },
}

/// One decoded CQE: every field the consumer needs, read once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cqe {
    /// CQE opcode (`op_own` bits 7:4).
    pub opcode: CqeOpcode,
    /// Success or error with syndromes.
    pub status: CqeStatus,
    /// Bytes received (responder) or transferred.
    pub byte_len: u32,
    /// WQE index (SQ index for requester CQEs, SRQ WQE index for receives).
    pub wqe_counter: u16,
    /// QP number (24 bits): the sending QP of a requester CQE, the
    /// receiving QP of a responder CQE.
    pub qpn: u32,
    /// Top byte of `sop_drop_qpn`: the send WQE opcode of a requester CQE
    /// (`MLX5_OPCODE_*`), 0 for a responder CQE.
    pub send_opcode: u8,
    /// `flags_rqpn` bits 23:0: the sender's QP number of a responder CQE.
    pub src_qpn: u32,
    /// SRQ number (24 bits; meaningful for SRQ receives).
    pub srqn: u32,
    /// Immediate data / invalidated rkey (big-endian value as the CQE holds it).
    pub imm: u32,
}

/// [`Cqe::EMPTY`].
impl Default for Cqe {
    fn default() -> Self {
        Cqe::EMPTY
    }
}

impl Cqe {
    /// An all-zero CQE, handy to initialise output arrays
    /// (also [`Cqe::default`]).
    pub const EMPTY: Cqe = Cqe {
        opcode: CqeOpcode(0),
        status: CqeStatus::Success,
        byte_len: 0,
        wqe_counter: 0,
        qpn: 0,
        send_opcode: 0,
        src_qpn: 0,
        srqn: 0,
        imm: 0,
    };

    /// True for a send-side completion (opcode REQ or REQ_ERR).
    #[inline(always)]
    pub fn is_requester(&self) -> bool {
        self.opcode == CqeOpcode::REQ || self.opcode == CqeOpcode::REQ_ERR
    }

    /// The typed error of an error CQE, `None` for a successful one.
    pub fn error(&self) -> Option<crate::cq::CqeError> {
        match self.status {
            CqeStatus::Success => None,
            CqeStatus::Error { syndrome, .. } => Some(crate::cq::CqeError::from_syndrome(syndrome)),
        }
    }
}

/// A software-owned CQE in the ring, handed out after the ownership check
/// and its read barrier: each accessor is one volatile load of one field,
/// so a consumer that needs four fields reads four (as rdma-core's
/// `mlx5_parse_cqe` reads `cqe64` in place); [`CqeView::decode`] reads
/// them all. It borrows the ring, and is valid until the consumer index
/// moves past it.
pub struct CqeView<'a> {
    w: DmaWindow<'a, 64>,
    op_own: u8,
}

impl<'a> CqeView<'a> {
    #[inline(always)]
    pub(super) fn new(w: DmaWindow<'a, 64>, op_own: u8) -> Self {
        CqeView { w, op_own }
    }

    /// The opcode (`op_own` bits 7:4, read by the ownership check).
    #[inline(always)]
    pub fn opcode(&self) -> CqeOpcode {
        CqeOpcode(self.op_own >> 4)
    }

    /// `sop_drop_qpn`: the send opcode in bits 31:24, the QP number in 23:0.
    #[inline(always)]
    pub fn sop_drop_qpn(&self) -> u32 {
        self.w.read_be32::<{ off::QPN }>()
    }

    /// The SRQ number (24 bits).
    #[inline(always)]
    pub fn srqn(&self) -> u32 {
        self.w.read_be32::<{ off::SRQN }>() & 0x00ff_ffff
    }

    /// True when the CQE names QP `qpn` and SRQ `srqn` (24 bits each).
    /// Compared as the CQE holds them: `qpn` and `srqn` are byte-swapped
    /// instead of the CQE's words (a loop comparing many CQEs with the same
    /// numbers swaps them once).
    #[inline(always)]
    pub fn names(&self, qpn: u32, srqn: u32) -> bool {
        const M: u32 = 0x00ff_ffff;
        // `read_be32().to_be()` is the word's raw bits (the swaps cancel).
        let q = self.w.read_be32::<{ off::QPN }>().to_be() & M.to_be();
        let s = self.w.read_be32::<{ off::SRQN }>().to_be() & M.to_be();
        q == qpn.to_be() && s == srqn.to_be()
    }

    /// Bytes received or transferred.
    #[inline(always)]
    pub fn byte_len(&self) -> u32 {
        self.w.read_be32::<{ off::BYTE_CNT }>()
    }

    /// The WQE index.
    #[inline(always)]
    pub fn wqe_counter(&self) -> u16 {
        self.w.read_be16::<{ off::WQE_COUNTER }>()
    }

    /// Immediate data or invalidated rkey, as the CQE holds it.
    #[inline(always)]
    pub fn imm(&self) -> u32 {
        self.w.read_be32::<{ off::IMM }>()
    }

    /// `flags_rqpn`: the packet's GRH type in bits 29:28, its SL in bits
    /// 27:24, the sender's QP number in bits 23:0 (a responder CQE).
    #[inline(always)]
    pub fn flags_rqpn(&self) -> u32 {
        self.w.read_be32::<{ off::FLAGS_RQPN }>()
    }

    /// The sender's LID (a responder CQE on an IB port).
    #[inline(always)]
    pub fn slid(&self) -> u16 {
        self.w.read_be16::<{ off::SLID }>()
    }

    /// `ml_path`: the destination LID path bits in bits 6:0.
    #[inline(always)]
    pub fn ml_path(&self) -> u8 {
        self.w.read_u8::<{ off::ML_PATH }>()
    }

    /// The completion timestamp in device clock ticks, as the CQE holds
    /// it (not valid in an error CQE, whose syndromes overlay its low
    /// word).
    #[inline(always)]
    pub fn timestamp(&self) -> u64 {
        self.w.read_be64::<{ off::TIMESTAMP }>()
    }

    /// Success, or the syndromes of an error CQE (REQ_ERR, RESP_ERR: the
    /// syndrome word is read only then).
    #[inline(always)]
    pub fn status(&self) -> CqeStatus {
        let opcode = self.opcode();
        if opcode == CqeOpcode::REQ_ERR || opcode == CqeOpcode::RESP_ERR {
            let s = self.w.read_be32::<{ off::SYNDROME_WORD }>();
            CqeStatus::Error {
                syndrome: s as u8,
                vendor_syndrome: (s >> 8) as u8,
            }
        } else {
            CqeStatus::Success
        }
    }

    /// The fields a requester CQE carries, each read once; `src_qpn`,
    /// `srqn` and `imm` (a receive's) are not read and are 0.
    #[inline(always)]
    pub fn decode_requester(&self) -> Cqe {
        let status = self.status();
        let sop_drop_qpn = self.sop_drop_qpn();
        Cqe {
            opcode: self.opcode(),
            status,
            byte_len: self.byte_len(),
            wqe_counter: self.wqe_counter(),
            qpn: sop_drop_qpn & 0x00ff_ffff,
            send_opcode: (sop_drop_qpn >> 24) as u8,
            ..Cqe::EMPTY
        }
    }

    /// Every field, each read once.
    #[inline(always)]
    pub fn decode(&self) -> Cqe {
        // The requester's fields first: the loads stay in CQE order.
        let c = self.decode_requester();
        Cqe {
            src_qpn: self.w.read_be32::<{ off::FLAGS_RQPN }>() & 0x00ff_ffff,
            srqn: self.srqn(),
            imm: self.imm(),
            ..c
        }
    }
}
