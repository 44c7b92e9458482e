//! The InfiniBand transport headers, written by hand because no crate offers
//! them: the Base Transport Header and the extended headers (IBTA vol. 1
//! §9.2-§9.4; RoCE v2 carries them unchanged, Annex A17). Every field is
//! big-endian. Parsing reads from a borrowed slice and never allocates.

use super::{BuildError, ParseError};

/// Length of the Base Transport Header.
pub const BTH_LEN: usize = 12;
/// Length of the RDMA Extended Transport Header (VA, R_Key, DMA length).
pub const RETH_LEN: usize = 16;
/// Length of the ACK Extended Transport Header (syndrome, MSN).
pub const AETH_LEN: usize = 4;
/// Length of the Datagram Extended Transport Header (Q_Key, source QP).
pub const DETH_LEN: usize = 8;
/// Length of the immediate data.
pub const IMM_LEN: usize = 4;
/// Length of the Invalidate Extended Transport Header (R_Key).
pub const IETH_LEN: usize = 4;
/// Length of the Atomic Extended Transport Header.
pub const ATOMIC_ETH_LEN: usize = 28;
/// Length of the Atomic ACK Extended Transport Header (original value).
pub const ATOMIC_ACK_ETH_LEN: usize = 8;

/// The only transport header version (BTH TVer); receivers drop others.
pub const TVER: u8 = 0;
/// The default full-membership partition key.
pub const DEFAULT_PKEY: u16 = 0xffff;
/// A 24-bit mask (QP numbers, PSNs, MSNs).
pub const MASK24: u32 = 0x00ff_ffff;

/// BTH opcodes (IBTA vol. 1 table 38): bits 7-5 the transport, bits 4-0 the
/// operation.
pub mod opcode {
    /// RC SEND_FIRST.
    pub const SEND_FIRST: u8 = 0x00;
    /// RC SEND_MIDDLE.
    pub const SEND_MIDDLE: u8 = 0x01;
    /// RC SEND_LAST.
    pub const SEND_LAST: u8 = 0x02;
    /// RC SEND_LAST_WITH_IMMEDIATE.
    pub const SEND_LAST_IMM: u8 = 0x03;
    /// RC SEND_ONLY.
    pub const SEND_ONLY: u8 = 0x04;
    /// RC SEND_ONLY_WITH_IMMEDIATE.
    pub const SEND_ONLY_IMM: u8 = 0x05;
    /// RC RDMA_WRITE_FIRST.
    pub const WRITE_FIRST: u8 = 0x06;
    /// RC RDMA_WRITE_MIDDLE.
    pub const WRITE_MIDDLE: u8 = 0x07;
    /// RC RDMA_WRITE_LAST.
    pub const WRITE_LAST: u8 = 0x08;
    /// RC RDMA_WRITE_LAST_WITH_IMMEDIATE.
    pub const WRITE_LAST_IMM: u8 = 0x09;
    /// RC RDMA_WRITE_ONLY.
    pub const WRITE_ONLY: u8 = 0x0a;
    /// RC RDMA_WRITE_ONLY_WITH_IMMEDIATE.
    pub const WRITE_ONLY_IMM: u8 = 0x0b;
    /// RC RDMA_READ_REQUEST.
    pub const READ_REQUEST: u8 = 0x0c;
    /// RC RDMA_READ_RESPONSE_FIRST.
    pub const READ_RESPONSE_FIRST: u8 = 0x0d;
    /// RC RDMA_READ_RESPONSE_MIDDLE.
    pub const READ_RESPONSE_MIDDLE: u8 = 0x0e;
    /// RC RDMA_READ_RESPONSE_LAST.
    pub const READ_RESPONSE_LAST: u8 = 0x0f;
    /// RC RDMA_READ_RESPONSE_ONLY.
    pub const READ_RESPONSE_ONLY: u8 = 0x10;
    /// RC ACKNOWLEDGE.
    pub const ACKNOWLEDGE: u8 = 0x11;
    /// RC ATOMIC_ACKNOWLEDGE.
    pub const ATOMIC_ACKNOWLEDGE: u8 = 0x12;
    /// RC CMP_SWAP.
    pub const COMPARE_SWAP: u8 = 0x13;
    /// RC FETCH_ADD.
    pub const FETCH_ADD: u8 = 0x14;
    /// RC SEND_LAST_WITH_INVALIDATE.
    pub const SEND_LAST_INV: u8 = 0x16;
    /// RC SEND_ONLY_WITH_INVALIDATE.
    pub const SEND_ONLY_INV: u8 = 0x17;
    /// The UC transport adds this to the RC SEND/WRITE opcodes.
    pub const UC: u8 = 0x20;
    /// UD SEND_ONLY.
    pub const UD_SEND_ONLY: u8 = 0x64;
    /// UD SEND_ONLY_WITH_IMMEDIATE.
    pub const UD_SEND_ONLY_IMM: u8 = 0x65;
    /// RoCE v2 congestion notification packet (Annex A17.9.3).
    pub const CNP: u8 = 0x81;
}

/// Which extended headers follow the BTH, in wire order (IBTA vol. 1
/// §9.2: DETH, RETH or AtomicETH, AETH, AtomicAckETH, ImmDt or IETH).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeaderSet {
    /// DETH.
    pub deth: bool,
    /// RETH.
    pub reth: bool,
    /// AtomicETH.
    pub atomic_eth: bool,
    /// AETH.
    pub aeth: bool,
    /// AtomicAckETH.
    pub atomic_ack_eth: bool,
    /// ImmDt.
    pub imm: bool,
    /// IETH.
    pub ieth: bool,
    /// The packet carries no payload (requests and acknowledgements
    /// whose meaning is all in their headers).
    pub no_payload: bool,
}

impl HeaderSet {
    /// Total length of the extended headers in this set.
    pub const fn len(&self) -> usize {
        (self.deth as usize) * DETH_LEN
            + (self.reth as usize) * RETH_LEN
            + (self.atomic_eth as usize) * ATOMIC_ETH_LEN
            + (self.aeth as usize) * AETH_LEN
            + (self.atomic_ack_eth as usize) * ATOMIC_ACK_ETH_LEN
            + (self.imm as usize) * IMM_LEN
            + (self.ieth as usize) * IETH_LEN
    }

    /// True when no extended header follows the BTH.
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

const fn set(reth: bool, aeth: bool, imm: bool) -> HeaderSet {
    HeaderSet {
        deth: false,
        reth,
        atomic_eth: false,
        aeth,
        atomic_ack_eth: false,
        imm,
        ieth: false,
        no_payload: false,
    }
}

/// The extended headers an opcode carries; `None` for opcodes this codec
/// does not know (RD, reserved, manufacturer-specific): rxe's
/// `rxe_opcode.c` table and IBTA vol. 1 table 38 for RC/UC/UD, Annex A17
/// for the CNP (whose 16 reserved bytes are its payload).
pub const fn headers_of(op: u8) -> Option<HeaderSet> {
    use opcode::*;
    let (uc, base) = if op >= UC && op < UC + 0x0c {
        (true, op - UC)
    } else {
        (false, op)
    };
    let mut h = match base {
        SEND_FIRST | SEND_MIDDLE | SEND_LAST | SEND_ONLY | WRITE_MIDDLE | WRITE_LAST => {
            set(false, false, false)
        }
        SEND_LAST_IMM | SEND_ONLY_IMM | WRITE_LAST_IMM => set(false, false, true),
        WRITE_FIRST | WRITE_ONLY => set(true, false, false),
        WRITE_ONLY_IMM => set(true, false, true),
        READ_REQUEST if !uc => HeaderSet {
            no_payload: true,
            ..set(true, false, false)
        },
        READ_RESPONSE_FIRST | READ_RESPONSE_LAST | READ_RESPONSE_ONLY if !uc => {
            set(false, true, false)
        }
        READ_RESPONSE_MIDDLE if !uc => set(false, false, false),
        ACKNOWLEDGE if !uc => HeaderSet {
            no_payload: true,
            ..set(false, true, false)
        },
        ATOMIC_ACKNOWLEDGE if !uc => HeaderSet {
            atomic_ack_eth: true,
            no_payload: true,
            ..set(false, true, false)
        },
        COMPARE_SWAP | FETCH_ADD if !uc => HeaderSet {
            atomic_eth: true,
            no_payload: true,
            ..set(false, false, false)
        },
        SEND_LAST_INV | SEND_ONLY_INV if !uc => HeaderSet {
            ieth: true,
            ..set(false, false, false)
        },
        UD_SEND_ONLY => HeaderSet {
            deth: true,
            ..set(false, false, false)
        },
        UD_SEND_ONLY_IMM => HeaderSet {
            deth: true,
            ..set(false, false, true)
        },
        CNP => set(false, false, false),
        _ => return None,
    };
    if uc {
        h.no_payload = false;
    }
    Some(h)
}

/// The Base Transport Header (IBTA vol. 1 §9.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Bth {
    /// OpCode.
    pub opcode: u8,
    /// SE: the requester asks for a solicited event.
    pub solicited: bool,
    /// M: migration request (APM); 0 without path migration.
    pub mig_req: bool,
    /// PadCnt: pad bytes after the payload (0-3).
    pub pad: u8,
    /// TVer: transport header version (0).
    pub tver: u8,
    /// P_Key.
    pub pkey: u16,
    /// FECN (forward congestion notification).
    pub fecn: bool,
    /// BECN (backward congestion notification).
    pub becn: bool,
    /// Destination QP (24 bits).
    pub dest_qp: u32,
    /// AckReq: the requester asks for an acknowledgement of this packet.
    pub ack_req: bool,
    /// Packet sequence number (24 bits).
    pub psn: u32,
}

impl Bth {
    /// Read a BTH from the first 12 bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<Bth, ParseError> {
        let b: &[u8; BTH_LEN] = b
            .get(..BTH_LEN)
            .and_then(|s| s.try_into().ok())
            .ok_or(ParseError::Truncated)?;
        Ok(Bth {
            opcode: b[0],
            solicited: b[1] & 0x80 != 0,
            mig_req: b[1] & 0x40 != 0,
            pad: (b[1] >> 4) & 3,
            tver: b[1] & 0xf,
            pkey: u16::from_be_bytes([b[2], b[3]]),
            fecn: b[4] & 0x80 != 0,
            becn: b[4] & 0x40 != 0,
            dest_qp: be24(&b[5..8]),
            ack_req: b[8] & 0x80 != 0,
            psn: be24(&b[9..12]),
        })
    }

    /// The 12 wire bytes; fields wider than their bit field are refused.
    pub fn to_bytes(&self) -> Result<[u8; BTH_LEN], BuildError> {
        if self.pad > 3 || self.tver > 0xf || self.dest_qp > MASK24 || self.psn > MASK24 {
            return Err(BuildError::FieldTooWide);
        }
        let qp = self.dest_qp.to_be_bytes();
        let psn = self.psn.to_be_bytes();
        let pkey = self.pkey.to_be_bytes();
        Ok([
            self.opcode,
            (self.solicited as u8) << 7 | (self.mig_req as u8) << 6 | self.pad << 4 | self.tver,
            pkey[0],
            pkey[1],
            (self.fecn as u8) << 7 | (self.becn as u8) << 6,
            qp[1],
            qp[2],
            qp[3],
            (self.ack_req as u8) << 7,
            psn[1],
            psn[2],
            psn[3],
        ])
    }
}

/// RDMA Extended Transport Header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reth {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// DMA length: the whole message, not this packet.
    pub dma_len: u32,
}

/// AETH syndrome values (IBTA vol. 1 §9.7.5.1, table 42).
pub mod syndrome {
    /// ACK with "invalid" (unlimited) credits: what rxe always sends.
    pub const ACK_UNLIMITED: u8 = 0x1f;
    /// Bits 6-5 = 00: ACK, low 5 bits a credit count code.
    pub const ACK: u8 = 0x00;
    /// Bits 6-5 = 01: RNR NAK, low 5 bits the RNR timer code.
    pub const RNR_NAK: u8 = 0x20;
    /// Bits 6-5 = 11: NAK, low 5 bits the NAK code.
    pub const NAK: u8 = 0x60;
    /// NAK code: PSN sequence error.
    pub const NAK_PSN_SEQ: u8 = 0;
    /// NAK code: invalid request.
    pub const NAK_INVALID_REQUEST: u8 = 1;
    /// NAK code: remote access error.
    pub const NAK_REMOTE_ACCESS: u8 = 2;
    /// NAK code: remote operational error.
    pub const NAK_REMOTE_OP: u8 = 3;
    /// NAK code: invalid RD request.
    pub const NAK_INVALID_RD: u8 = 4;
}

/// What an AETH syndrome says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckKind {
    /// Positive acknowledgement with a credit code (0x1f = unlimited).
    Ack {
        /// Credit count code.
        credits: u8,
    },
    /// Receiver not ready, retry after the timer of this code.
    RnrNak {
        /// RNR timer code.
        timer: u8,
    },
    /// Negative acknowledgement with this NAK code.
    Nak {
        /// NAK code ([`syndrome::NAK_PSN_SEQ`], ...).
        code: u8,
    },
    /// Bits 6-5 = 10 or bit 7 set: reserved.
    Reserved,
}

/// ACK Extended Transport Header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Aeth {
    /// Syndrome byte.
    pub syndrome: u8,
    /// Message sequence number (24 bits).
    pub msn: u32,
}

impl Aeth {
    /// Decode the syndrome.
    pub fn kind(&self) -> AckKind {
        let low = self.syndrome & 0x1f;
        match self.syndrome & 0xe0 {
            syndrome::ACK => AckKind::Ack { credits: low },
            syndrome::RNR_NAK => AckKind::RnrNak { timer: low },
            syndrome::NAK => AckKind::Nak { code: low },
            _ => AckKind::Reserved,
        }
    }
}

/// Datagram Extended Transport Header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Deth {
    /// Q_Key.
    pub qkey: u32,
    /// Source QP (24 bits).
    pub src_qp: u32,
}

/// Atomic Extended Transport Header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AtomicEth {
    /// Remote virtual address (8-byte aligned).
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Swap (COMPARE_SWAP) or add (FETCH_ADD) operand.
    pub swap_add: u64,
    /// Compare operand (COMPARE_SWAP).
    pub compare: u64,
}

/// The extended headers of one packet; exactly those its opcode names
/// ([`headers_of`]) are present.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExtHeaders {
    /// DETH.
    pub deth: Option<Deth>,
    /// RETH.
    pub reth: Option<Reth>,
    /// AtomicETH.
    pub atomic_eth: Option<AtomicEth>,
    /// AETH.
    pub aeth: Option<Aeth>,
    /// AtomicAckETH: the original remote value.
    pub atomic_ack_eth: Option<u64>,
    /// ImmDt (opaque; big-endian on the wire like every header field).
    pub imm: Option<u32>,
    /// IETH: the R_Key to invalidate.
    pub ieth: Option<u32>,
}

impl ExtHeaders {
    /// Which headers are present.
    pub fn set(&self) -> HeaderSet {
        HeaderSet {
            deth: self.deth.is_some(),
            reth: self.reth.is_some(),
            atomic_eth: self.atomic_eth.is_some(),
            aeth: self.aeth.is_some(),
            atomic_ack_eth: self.atomic_ack_eth.is_some(),
            imm: self.imm.is_some(),
            ieth: self.ieth.is_some(),
            no_payload: false,
        }
    }

    /// Read the headers `hs` names from the start of `b`.
    pub fn parse(hs: HeaderSet, b: &[u8]) -> Result<ExtHeaders, ParseError> {
        if b.len() < hs.len() {
            return Err(ParseError::Truncated);
        }
        let mut at = 0usize;
        let mut take = |n: usize| {
            let s = &b[at..at + n];
            at += n;
            s
        };
        let mut e = ExtHeaders::default();
        if hs.deth {
            let s = take(DETH_LEN);
            e.deth = Some(Deth {
                qkey: be32(&s[0..4]),
                src_qp: be24(&s[5..8]),
            });
        }
        if hs.reth {
            let s = take(RETH_LEN);
            e.reth = Some(Reth {
                va: be64(&s[0..8]),
                rkey: be32(&s[8..12]),
                dma_len: be32(&s[12..16]),
            });
        }
        if hs.atomic_eth {
            let s = take(ATOMIC_ETH_LEN);
            e.atomic_eth = Some(AtomicEth {
                va: be64(&s[0..8]),
                rkey: be32(&s[8..12]),
                swap_add: be64(&s[12..20]),
                compare: be64(&s[20..28]),
            });
        }
        if hs.aeth {
            let s = take(AETH_LEN);
            e.aeth = Some(Aeth {
                syndrome: s[0],
                msn: be24(&s[1..4]),
            });
        }
        if hs.atomic_ack_eth {
            e.atomic_ack_eth = Some(be64(take(ATOMIC_ACK_ETH_LEN)));
        }
        if hs.imm {
            e.imm = Some(be32(take(IMM_LEN)));
        }
        if hs.ieth {
            e.ieth = Some(be32(take(IETH_LEN)));
        }
        Ok(e)
    }

    /// Write the present headers in wire order to the start of `out`;
    /// returns the bytes written.
    pub fn write(&self, out: &mut [u8]) -> Result<usize, BuildError> {
        let need = self.set().len();
        if out.len() < need {
            return Err(BuildError::BufferTooSmall { need });
        }
        let mut at = 0usize;
        let mut put = |bytes: &[u8]| {
            out[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
        };
        if let Some(d) = self.deth {
            if d.src_qp > MASK24 {
                return Err(BuildError::FieldTooWide);
            }
            put(&d.qkey.to_be_bytes());
            put(&d.src_qp.to_be_bytes());
        }
        if let Some(r) = self.reth {
            put(&r.va.to_be_bytes());
            put(&r.rkey.to_be_bytes());
            put(&r.dma_len.to_be_bytes());
        }
        if let Some(a) = self.atomic_eth {
            put(&a.va.to_be_bytes());
            put(&a.rkey.to_be_bytes());
            put(&a.swap_add.to_be_bytes());
            put(&a.compare.to_be_bytes());
        }
        if let Some(a) = self.aeth {
            if a.msn > MASK24 {
                return Err(BuildError::FieldTooWide);
            }
            put(&(u32::from(a.syndrome) << 24 | a.msn).to_be_bytes());
        }
        if let Some(v) = self.atomic_ack_eth {
            put(&v.to_be_bytes());
        }
        if let Some(v) = self.imm {
            put(&v.to_be_bytes());
        }
        if let Some(v) = self.ieth {
            put(&v.to_be_bytes());
        }
        Ok(at)
    }
}

/// Pad bytes after a payload of `len` bytes (IBTA vol. 1 §9.2: to a
/// multiple of 4).
pub const fn pad_for(len: usize) -> u8 {
    ((4 - len % 4) % 4) as u8
}

/// Signed distance `a - b` between two 24-bit PSNs (positive: `a` is later).
pub const fn psn_diff(a: u32, b: u32) -> i32 {
    ((a.wrapping_sub(b)) << 8) as i32 >> 8
}

pub(crate) fn be24(b: &[u8]) -> u32 {
    u32::from_be_bytes([0, b[0], b[1], b[2]])
}

pub(crate) fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

pub(crate) fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}
