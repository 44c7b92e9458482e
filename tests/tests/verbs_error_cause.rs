//! A facade refusal keeps its cause: the errno a verb returns, and for a
//! command firmware refused, the opcode, status and syndrome through
//! `Verbs::last_error`. The two post paths agree on a dead device.

use mlx5_driver::verbs::{AccessFlags, Errno, QpAttr, QpAttrMask, QpState, RecvWr};
use mlx5_driver::Error;
use mlx5_regs::{CmdStatus, Opcode};
use mlx5_sim::Profile;
use mlx5_tests::verbs_common::{cap, close, open, send, Pair};

#[test]
fn a_refused_modify_qp_exposes_opcode_status_and_syndrome() {
    let (dev, mut ctx) = open(Profile::ConnectX5);
    let p = Pair::unconnected(&dev, &mut ctx, cap(8, 1, 0));
    assert_eq!(ctx.last_error(), None, "nothing failed yet");
    // BAD_PARAM (0x03) with a syndrome of our choosing.
    dev.inject()
        .fail_next(Opcode::RST2INIT_QP.0, 0x03, 0x00c0_ffee);
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: AccessFlags::REMOTE_WRITE,
        ..QpAttr::default()
    };
    let mask = QpAttrMask(1 | 1 << 3 | 1 << 4 | 1 << 5);
    assert_eq!(ctx.modify_qp(p.a, &init, mask).unwrap_err(), Errno::EINVAL);
    match ctx.last_error() {
        Some(Error::Command {
            opcode,
            status,
            syndrome,
            ..
        }) => {
            assert_eq!(opcode, Opcode::RST2INIT_QP);
            assert_eq!(status, CmdStatus(0x03));
            assert_eq!(syndrome, 0x00c0_ffee);
        }
        other => panic!("the cause of the refusal: {other:?}"),
    }
    // The QP is where it was; the same call now succeeds.
    ctx.modify_qp(p.a, &init, mask).unwrap();
    p.destroy(&mut ctx);
    close(&dev, ctx, "modify_qp cause");
}

#[test]
fn both_post_paths_say_eio_on_a_dead_device_before_the_handle() {
    let (dev, mut ctx) = open(Profile::ConnectX5);
    let p = Pair::new(&dev, &mut ctx, cap(8, 1, 0));
    let (gone_qp, gone_srq) = {
        let q = Pair::unconnected(&dev, &mut ctx, cap(8, 1, 0));
        let ids = (q.a, q.srq);
        q.destroy(&mut ctx);
        ids
    };
    dev.inject().fatal(0x01);
    // The driver learns of it at its next command.
    let _ = ctx.query_srq(p.srq);
    assert!(ctx.hca().is_dead());
    let sg = [p.sge(0, 8)];
    let rsg = [p.sge(4096, 64)];
    let rwr = [RecvWr {
        wr_id: 1,
        sges: &rsg,
    }];
    for qp in [p.a, gone_qp] {
        let e = ctx.post_send(qp, &[send(1, &sg)]).unwrap_err();
        assert_eq!((e.index, e.errno), (0, Errno::EIO));
    }
    for srq in [p.srq, gone_srq] {
        let e = ctx.post_srq_recv(srq, &rwr).unwrap_err();
        assert_eq!((e.index, e.errno), (0, Errno::EIO));
    }
    // An empty list posts nothing and fails nothing on either path.
    assert_eq!(ctx.post_send(p.a, &[]), Ok(()));
    assert_eq!(ctx.post_srq_recv(p.srq, &[]), Ok(()));
    assert!(matches!(ctx.last_error(), Some(Error::Fatal { .. })));
    // Destroys succeed on a dead device (Linux); teardown reports the death.
    p.destroy(&mut ctx);
    assert_eq!(ctx.close().unwrap_err(), Errno::EIO);
}

#[test]
fn every_facade_error_is_a_core_error() {
    fn is_error<E: core::error::Error>() {}
    is_error::<Errno>();
    is_error::<mlx5_driver::verbs::PostSendError>();
    is_error::<mlx5_driver::verbs::PostSrqError>();
    is_error::<mlx5_driver::verbs::PostRecvError>();
    is_error::<Error>();
}
