//! What the model's test APIs refuse ([`SimError`]) and the protocol
//! violations it records instead of a command status ([`Violation`]).

/// Errors of the test APIs.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SimError {
    /// The feature is not modelled.
    Unsupported(&'static str),
    /// No such object.
    NoSuchObject {
        /// "srq", "cq", "eq".
        kind: &'static str,
        /// Its number.
        id: u32,
    },
    /// No EQ is subscribed to this event type.
    NoEq {
        /// Event type.
        event_type: u8,
    },
    /// The object is not in a state that allows the operation.
    BadState(&'static str),
    /// The device is in a fatal health state.
    Fatal,
}

impl std::fmt::Display for SimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SimError::Unsupported(what) => write!(f, "not modelled: {what}"),
            SimError::NoSuchObject { kind, id } => write!(f, "no {kind} {id:#x} in the model"),
            SimError::NoEq { event_type } => {
                write!(f, "no EQ subscribes to event type {event_type:#04x}")
            }
            SimError::BadState(what) => write!(f, "wrong state: {what}"),
            SimError::Fatal => f.write_str("the device is in a fatal health state"),
        }
    }
}

impl std::error::Error for SimError {}

/// A protocol violation by the driver that firmware would notice but cannot
/// report through a command status (ignored doorbells, scribbled pages, EQ
/// overruns, ...). Exposed by [`Device::violations`](crate::Device::violations).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Violation {
    /// A command doorbell the firmware ignored.
    Doorbell(String),
    /// A UAR doorbell the firmware ignored (unknown UAR/EQ/CQ, wrong UAR,
    /// stale arm sequence number, consumer index ahead of producer).
    UarDoorbell(String),
    /// A page firmware held was modified by the host (pattern mismatch on
    /// reclaim): the page's IOVA and the first differing byte offset.
    PageScribbled {
        /// IOVA of the page.
        iova: u64,
        /// First differing byte.
        offset: usize,
    },
    /// An EQ received more than its size of unreported EQEs.
    EqOverrun {
        /// EQ number.
        eqn: u8,
    },
    /// A CQ overran (more CQEs than entries beyond the consumer index).
    CqOverrun {
        /// CQ number.
        cqn: u32,
    },
    /// An event was dropped because no EQ subscribes to its type.
    EventDropped {
        /// Event type.
        event_type: u8,
    },
    /// DMA memory freed while the firmware still used it.
    FreedWhileInUse(String),
    /// A send queue the device could not execute (ring or doorbell record
    /// unreadable, producer counter beyond the ring): the QP went to ERR
    /// with a catastrophic-error event.
    SendQueue(String),
    /// A BlueFlame copy that is not the WQE in memory: a word differing
    /// from it, out of order or with no doorbell before it, or a copy cut
    /// short by the next doorbell on the same buffer (torn).
    BlueFlame(String),
    /// A host's MMIO access the device does not decode (outside BAR0,
    /// unaligned, or of a width the register does not take): ignored, reads
    /// return all ones ([`host`](crate::host)).
    Mmio(String),
}
