//! Hostile requester CQEs through a real QP pair (`tests/tests/hostile.rs`
//! runs these; they live here to keep that file short): the model corrupts
//! the send CQE of a real SEND (`HostileKind::SendCqe*`), the CQ poll
//! reports it as written, the sender's `complete_send` refuses it with the
//! right [`BadSendCqe`] and counts it, and the QP keeps working: the next
//! good completion still maps to the right `wr_id` and retires exactly the
//! requests it covers.

use mlx5_driver::cq::Cqe;
use mlx5_driver::qp::{BadSendCqe, SendOpcode};
use mlx5_regs::CqeOpcode;
use mlx5_sim::{ExecMode, HostileKind, Profile};

use crate::qp::{wait_cqes, Rig, RigConfig};

/// A connected pair with receives posted; SEND 0 (signaled) goes out with
/// `kind` armed. Returns the rig and the send CQEs the device wrote for it
/// (`n`: two when it is duplicated).
fn corrupted_send(kind: HostileKind, n: usize) -> (Rig, Vec<Cqe>) {
    let mut rig = Rig::new(RigConfig::new(Profile::ConnectX5, ExecMode::Synchronous));
    rig.post_recvs(4);
    rig.dev.inject().hostile(kind);
    rig.send(0, 32);
    rig.expect_message(0, 32);
    assert_eq!(rig.dev.inject().hostile_pending(), 0, "{kind:?} applied");
    let cqes = wait_cqes(&rig.hca, &mut rig.scq, n);
    for c in &cqes {
        assert_eq!(
            (c.opcode, c.qpn, c.error()),
            (CqeOpcode::REQ, rig.tx.qpn(), None),
            "{kind:?}: the rest of the CQE is as the device wrote it"
        );
    }
    (rig, cqes)
}

/// After the refusal: SEND 1 completes normally with its own `wr_id`,
/// retiring `retired` requests (2 when the corrupted CQE's request was not
/// retired by the refusal), and nothing else is refused.
fn still_works(mut rig: Rig, retired: u32, what: &str) {
    let rejected = rig.tx.rejected_cqes();
    rig.send(1, 48);
    rig.expect_message(1, 48);
    let c = rig.wait_send(1);
    assert_eq!(
        (c[0].wr_id, c[0].retired, c[0].opcode, c[0].error()),
        (1, retired, SendOpcode::Send, None),
        "{what}: the next good completion"
    );
    assert_eq!(rig.tx.outstanding_sends(), 0, "{what}");
    assert_eq!(rig.tx.rejected_cqes(), rejected, "{what}");
    rig.finish(what);
}

/// `SendCqeWqeCounterNotPosted`: `wqe_counter ^ 0x8000` names the same
/// ring slot but a WQE never posted: refused as not outstanding, nothing
/// retired; the next completion retires both requests.
pub fn wqe_counter_not_posted() {
    let (mut rig, cqes) = corrupted_send(HostileKind::SendCqeWqeCounterNotPosted, 1);
    assert_eq!(cqes[0].wqe_counter, 0x8000);
    assert_eq!(
        rig.tx.complete_send(&cqes[0]),
        Err(BadSendCqe::NotOutstanding {
            wqe_counter: 0x8000
        })
    );
    assert_eq!(rig.tx.rejected_cqes(), 1);
    assert_eq!(rig.tx.outstanding_sends(), 1, "the real request stays");
    still_works(rig, 2, "wqe counter never posted");
}

/// `SendCqeUnknownWqeOpcode`: a good CQE whose opcode byte names no send
/// opcode: refused as an opcode mismatch carrying the request's `wr_id`
/// (the device did complete the WQE, so it is retired).
pub fn unknown_wqe_opcode() {
    let (mut rig, cqes) = corrupted_send(HostileKind::SendCqeUnknownWqeOpcode, 1);
    assert_eq!((cqes[0].send_opcode, cqes[0].wqe_counter), (0x7f, 0));
    assert_eq!(
        rig.tx.complete_send(&cqes[0]),
        Err(BadSendCqe::OpcodeMismatch {
            wr_id: 0,
            opcode: 0x7f,
            posted: SendOpcode::Send
        })
    );
    assert_eq!(rig.tx.rejected_cqes(), 1);
    assert_eq!(rig.tx.outstanding_sends(), 0, "retired");
    still_works(rig, 1, "unknown send opcode");
}

/// `SendCqeDuplicated`: the same CQE twice: the first completes SEND 0,
/// the second is refused as not outstanding (no double completion).
pub fn duplicated() {
    let (mut rig, cqes) = corrupted_send(HostileKind::SendCqeDuplicated, 2);
    assert_eq!(cqes[0], cqes[1], "the device wrote it twice");
    let first = rig.tx.complete_send(&cqes[0]).expect("the first is good");
    assert_eq!((first.wr_id, first.retired), (0, 1));
    assert_eq!(
        rig.tx.complete_send(&cqes[1]),
        Err(BadSendCqe::NotOutstanding { wqe_counter: 0 })
    );
    assert_eq!(rig.tx.rejected_cqes(), 1);
    assert_eq!(rig.tx.outstanding_sends(), 0);
    still_works(rig, 1, "duplicated");
}
