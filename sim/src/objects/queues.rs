//! The queue objects of the table: EQ, CQ, SRQ/RMP, and the queue-buffer
//! address helper.

/// A queue buffer described by a page list (`pas[]`), a page size and a page
/// offset (docs/firmware.md §6.1, §7.1, §9.2).
#[derive(Debug, Clone)]
pub(crate) struct QBuf {
    /// The page addresses (shared: the data path clones a queue's `QBuf`
    /// for every entry it writes, which must not allocate).
    pub pas: std::sync::Arc<[u64]>,
    /// log2 of the page size in bytes (log_page_size + 12).
    pub page_shift: u32,
    /// Offset of the first entry inside the first page, in bytes.
    pub offset: u64,
}

impl QBuf {
    /// The device address of byte `off` of the queue and how many bytes are
    /// contiguous from there (to the end of the page).
    pub fn at(&self, off: u64) -> Option<(u64, u64)> {
        let o = off + self.offset;
        let page = (o >> self.page_shift) as usize;
        let within = o & ((1u64 << self.page_shift) - 1);
        Some((
            self.pas.get(page)? + within,
            (1u64 << self.page_shift) - within,
        ))
    }

    /// Number of pages a buffer of `bytes` starting at `offset` needs.
    pub fn pages_needed(bytes: u64, offset: u64, page_shift: u32) -> u64 {
        (bytes + offset).div_ceil(1u64 << page_shift)
    }
}

/// Event queue.
#[derive(Debug, Clone)]
pub(crate) struct Eq {
    pub log_size: u8,
    pub uar: u32,
    pub intr: u16,
    pub mask: [u64; 4],
    pub buf: QBuf,
    pub log_page_size: u8,
    pub page_offset: u8,
    /// EQEs written so far (24-bit arithmetic when compared).
    pub pc: u32,
    /// Consumer index last reported through the doorbell (24 bits).
    pub ci: u32,
    pub st: u8,
    pub oi: bool,
    pub status: u8,
}

impl Eq {
    pub fn subscribes(&self, event_type: u8) -> bool {
        let w = (event_type / 64) as usize;
        w < 4 && self.mask[w] & (1u64 << (event_type % 64)) != 0
    }
    pub fn is_async(&self) -> bool {
        self.mask.iter().any(|&m| m != 0)
    }
}

/// Arm request of a CQ (docs/firmware.md §5 CQ arm).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Arm {
    pub sn: u8,
    pub solicited: bool,
}

/// Completion queue.
#[derive(Debug, Clone)]
pub(crate) struct Cq {
    pub log_size: u8,
    pub cqe_sz: u8,
    pub uar: u32,
    pub eqn: u8,
    pub dbr: u64,
    pub buf: QBuf,
    pub log_page_size: u8,
    pub page_offset: u8,
    pub oi: bool,
    /// Producer counter: CQEs written so far.
    pub pc: u32,
    pub arm: Option<Arm>,
    pub last_fired_sn: Option<u8>,
    pub status: u8,
    pub period: u16,
    pub max_count: u16,
    pub period_mode: u8,
    /// Moderation counters and timer (moderation.rs).
    pub moder: crate::moderation::Moderation,
    pub last_notified: u32,
    /// Index of the last solicited CQE.
    pub last_solicit: Option<u32>,
    /// UMEMs holding the buffer or doorbell record (DevX).
    pub umems: Vec<u32>,
    /// What the last arm doorbell asked for: `Some(true)` solicited only
    /// (test API `Device::cq_last_arm`).
    pub last_arm_solicited: Option<bool>,
}

impl Cq {
    pub fn stride(&self) -> u64 {
        if self.cqe_sz == 0 {
            64
        } else {
            128
        }
    }
    pub fn st(&self) -> u8 {
        match self.arm {
            Some(a) if a.solicited => mlx5_regs::consts::ctx::ST_SOLICITED_ARMED,
            Some(_) => mlx5_regs::consts::ctx::ST_ARMED,
            None => mlx5_regs::consts::ctx::ST_FIRED,
        }
    }
}

/// SRQ (ISSI 0) or RMP (ISSI 1).
#[derive(Debug, Clone)]
pub(crate) struct Srq {
    pub rmp: bool,
    /// log2 of the number of WQEs.
    pub log_size: u8,
    /// log2 of the WQE stride in bytes.
    pub log_stride: u8,
    pub buf: QBuf,
    pub log_page_size: u8,
    pub page_offset: u8,
    pub pd: u32,
    pub dbr: u64,
    pub lwm: u16,
    /// srqc.cqn (ISSI 0).
    pub cqn: Option<u32>,
    pub xrcd: u32,
    pub rlky: bool,
    pub wq_signature: bool,
    /// rmpc.state / srqc.state.
    pub state: u8,
    /// WQEs consumed so far (16-bit running counter like the doorbell record).
    pub consumed: u16,
    /// Index of the WQE the device consumes next: 0 at creation, then the
    /// `next_wqe_index` read from each WQE at the moment it is consumed
    /// (docs/firmware.md §9.4; see docs/fidelity.md "SRQ free-list walk").
    pub next: u16,
    /// UMEMs holding the buffer or doorbell record (DevX).
    pub umems: Vec<u32>,
}
