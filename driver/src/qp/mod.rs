//! RC and UD queue pairs: a send ring, an SRQ, the QP's own receive queue (or
//! nothing) as the receive side, the state machine, the send data path and requester
//! completions.
//!
//! * Internal to the crate: `cmd` (the QP commands as encoders and
//!   parsers), `ring` (the send ring: sizing, WQE building, the doorbell,
//!   the requester-CQE → `wr_id` bookkeeping in the caller's table) and
//!   `recv` (the QP's own receive queue: sizing, receive WQEs, the receive
//!   counter, in-order completion); their sizing types
//!   ([`SqGeometry`], [`RqGeometry`]) are re-exported here.
//! * [`wr`]: send work requests, the caller's table entry, the errors.
//! * [`attr`]: states and the attributes of each transition.
//! * [`ud`]: unreliable datagram QPs, address vectors, UD sends.
//! * [`opt`]: the optional attributes of a transition, INIT2INIT and
//!   RTS2RTS.
//! * The [`Qp`] object and the [`crate::Hca`] methods that create,
//!   transition, query and destroy it.

pub mod attr;
pub(crate) mod cmd;
mod lifecycle;
pub mod opt;
mod queue;
pub(crate) mod recv;
pub(crate) mod ring;
pub(crate) mod sq_size;
pub mod ud;
pub mod wr;

pub use crate::eq::QpEvent;
pub use attr::{
    roce_udp_sport, AddressPath, InitAttr, Mtu, QpAccess, QpState, RtrAttr, RtsAttr, Transition,
};
pub use cmd::{PathQuery, QpQuery};
pub use opt::QpOptional;
pub use queue::{PostSendFailure, Qp, QpLinks, SendCompletion};
pub use recv::{RecvQueueCaps, RqGeometry, RqSizeError};
pub(crate) use ring::SendCompleter;
pub use sq_size::{SendQueueCaps, SqGeometry, SqSizeError};
pub use ud::{AddressVector, Datagram, UdInitAttr, UdSendRequest};
pub use wr::{BadSendCqe, Payload, SendError, SendOp, SendOpcode, SendRequest, SendSlot, SendWork};

#[cfg(test)]
mod cmd_tests;
#[cfg(test)]
pub(crate) mod tests;
