//! Errors compose: every public error type of every crate is a
//! `std::error::Error` (so `Box<dyn Error>` takes it with `?`), and every
//! error of the driver converts into `mlx5_driver::Error` with `?`, a failed
//! destroy included (its object handed back, or leaked when not taken).

use std::error::Error as StdError;

use mlx5_driver::cq::{Cq, CqOptions, CqeError, ResizeCopyError};
use mlx5_driver::qp::{BadSendCqe, PostSendFailure, QpState, SendError, SqSizeError};
use mlx5_driver::srq::{BadRecvCqe, CompleteError, PostError, PostFailure};
use mlx5_driver::verbs::{Errno, PostSrqError};
use mlx5_driver::{DestroyError, Error, Hca, HcaConfig};
use mlx5_hal::HalError;
use mlx5_regs::RegError;
use mlx5_sim::{Device, SimConfig, SimError, SimHal};

/// `?` into `Box<dyn Error>`: compiles only if `E: Error + 'static`.
fn boxed<E: StdError + 'static>(e: E) -> Result<(), Box<dyn StdError>> {
    Err(e)?
}

/// `?` into the driver's error: compiles only if `Error: From<E>`.
fn driver<E>(e: E) -> Result<(), Error>
where
    Error: From<E>,
{
    Err(e)?
}

#[test]
fn every_error_type_boxes_with_its_message() {
    let cases: Vec<(Box<dyn StdError>, &str)> = vec![
        (
            boxed(HalError::OutOfDmaMemory { requested: 8192 }).unwrap_err(),
            "8192 bytes",
        ),
        (
            boxed(RegError::IndexOutOfRange {
                field: "pas",
                index: 9,
                count: 4,
            })
            .unwrap_err(),
            "pas[4]",
        ),
        (boxed(Error::Busy("in use")).unwrap_err(), "busy: in use"),
        (boxed(PostError::Full).unwrap_err(), "every receive WQE"),
        (
            boxed(CompleteError::OutOfRange { index: 70 }).unwrap_err(),
            "outside the ring",
        ),
        (
            boxed(BadRecvCqe::UnexpectedOpcode { opcode: 0xd }).unwrap_err(),
            "not a receive",
        ),
        (boxed(SendError::NoSendQueue).unwrap_err(), "no send queue"),
        (
            boxed(BadSendCqe::NotOutstanding { wqe_counter: 3 }).unwrap_err(),
            "WQE 3",
        ),
        (
            boxed(CqeError::RemoteAccess).unwrap_err(),
            "remote access error",
        ),
        (
            boxed(ResizeCopyError::CqeSizeMismatch).unwrap_err(),
            "CQE size",
        ),
        (
            boxed(SqSizeError::NoWorkRequests).unwrap_err(),
            "max_send_wr",
        ),
        (boxed(Errno::EBUSY).unwrap_err(), "EBUSY"),
        (
            boxed(PostSrqError {
                index: 1,
                errno: Errno::ENOMEM,
            })
            .unwrap_err(),
            "request 1",
        ),
        (
            boxed(SimError::NoSuchObject { kind: "cq", id: 5 }).unwrap_err(),
            "no cq 0x5",
        ),
        (
            boxed(mlx5_vfio::iova::IovaError::ZeroSize).unwrap_err(),
            "zero-sized",
        ),
        (
            boxed(mlx5_vfio::Error::InvalidAddress {
                input: "03:00".into(),
            })
            .unwrap_err(),
            "03:00",
        ),
    ];
    for (e, text) in cases {
        assert!(e.to_string().contains(text), "{e:?}: {e} lacks {text:?}");
    }
}

#[test]
fn every_driver_error_converts_with_question_mark() {
    let errs = [
        driver(HalError::InvalidRequest).unwrap_err(),
        driver(RegError::Overflow {
            field: "f",
            width: 1,
            value: 2,
        })
        .unwrap_err(),
        driver(PostError::Full).unwrap_err(),
        driver(PostFailure {
            index: 4,
            error: PostError::Full,
        })
        .unwrap_err(),
        driver(CompleteError::NotPosted { index: 1 }).unwrap_err(),
        driver(BadRecvCqe::WrongQp { qpn: 1 }).unwrap_err(),
        driver(SendError::Full).unwrap_err(),
        driver(PostSendFailure {
            index: 2,
            error: SendError::BadState {
                state: QpState::Reset,
            },
        })
        .unwrap_err(),
        driver(BadSendCqe::NoSendQueue).unwrap_err(),
        driver(CqeError::WrFlush).unwrap_err(),
        driver(ResizeCopyError::ResizeCqeMissing).unwrap_err(),
        driver(SqSizeError::WqeTooLarge).unwrap_err(),
    ];
    let errnos: Vec<i32> = errs.iter().map(|e| e.errno()).collect();
    // EINVAL 22, EIO 5, ENOMEM 12, as ibv_post_* / the kernel report them.
    assert_eq!(errnos, [22, 22, 12, 12, 5, 5, 12, 22, 5, 5, 5, 22]);
    // The wrapped error is the source.
    assert_eq!(
        errs[3].source().map(|s| s.to_string()).as_deref(),
        Some("receive post stopped at request 4: every receive WQE is posted")
    );
}

fn destroy_boxed(hca: &Hca<SimHal>, cq: Cq<SimHal>) -> Result<(), Box<dyn StdError>> {
    hca.destroy_cq(cq)?;
    Ok(())
}

fn destroy_driver(hca: &Hca<SimHal>, cq: Cq<SimHal>) -> Result<(), Error> {
    hca.destroy_cq(cq)?;
    Ok(())
}

/// A refused destroy is an error `?` takes (into the driver's error or a
/// box); taken back, the object still works and the destroy succeeds.
#[test]
fn refused_destroy_hands_the_object_back_and_composes() {
    let dev = Device::new(SimConfig {
        issi_supported: 0b01,
        ..SimConfig::default()
    });
    let hca = Hca::bring_up(dev.hal(), HcaConfig::default()).unwrap();
    let mut cq = hca.create_cq(15, CqOptions::default()).unwrap();
    let srq = hca.create_srq(7, 1, Some(&mut cq)).unwrap();
    // The ISSI 0 SRQ names the CQ: destroying the CQ first is refused.
    let refused: DestroyError<_> = hca.destroy_cq(cq).unwrap_err();
    assert_eq!(refused.error().errno(), 16, "EBUSY");
    assert!(refused.to_string().contains("busy"), "{refused}");
    assert!(format!("{refused:?}").contains("Cq"), "{refused:?}");
    let cq = refused.into_object();
    // The same refusal through `?` into a box: nothing is lost, the CQ is
    // inside and comes back with a downcast.
    let boxed = destroy_boxed(&hca, cq).unwrap_err();
    assert!(boxed.to_string().contains("busy"), "{boxed}");
    let mut cq = boxed
        .downcast::<DestroyError<Cq<SimHal>>>()
        .expect("the destroy error")
        .into_object();
    hca.destroy_srq(srq, Some(&mut cq)).unwrap();
    destroy_driver(&hca, cq).unwrap();
    assert_eq!(hca.teardown().unwrap().pages_left, 0);
    assert!(dev.violations().is_empty(), "{:?}", dev.violations());
}
