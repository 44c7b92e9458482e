//! A dead device (fatal health) as Linux's mlx5_core treats it: destroy and
//! dealloc commands succeed without reaching the device, so software frees
//! every object (`mlx5_internal_err_ret_value`); other commands fail with
//! the fatal error; a post fails with `EIO` at its first request
//! (`mlx5_ib_post_send`, `mlx5_ib_post_srq_recv`).

use mlx5_driver::cq::CqOptions;
use mlx5_driver::mkey::MkeyAccess;
use mlx5_driver::qp::{Payload, QpLinks, SendError, SendOp, SendQueueCaps, SendRequest, SendSlot};
use mlx5_driver::srq::{PostError, RecvRequest, Sge};
use mlx5_driver::{Error, Hca};
use mlx5_hal::Hal;
use mlx5_regs::consts::errno;
use mlx5_regs::Opcode;
use mlx5_sim::{ExecMode, Profile, SimConfig, SimHal, Violation};
use mlx5_tests::{bring_up, config, device, MODES};

fn freed_while_in_use(dev: &mlx5_sim::Device) -> Vec<Violation> {
    dev.violations()
        .into_iter()
        .filter(|v| matches!(v, Violation::FreedWhileInUse(_)))
        .collect()
}

/// Every object destroyed after the device died: each destroy succeeds,
/// nothing reaches the device, and all memory goes back to the platform.
#[test]
fn destroy_after_fatal_frees_everything() {
    for mode in MODES {
        for issi in [0u32, 1] {
            let dev = mlx5_sim::Device::new(SimConfig {
                issi_supported: if issi == 0 { 0b01 } else { 0b11 },
                mode,
                ..SimConfig::profile(Profile::ConnectX5)
            });
            let base = dev.dma_bytes_live();
            let hca: Hca<SimHal> = Hca::bring_up(dev.hal(), config()).unwrap();
            let mut scq = hca.create_cq(63, CqOptions::default()).unwrap();
            let mut rcq = hca.create_cq(63, CqOptions::default()).unwrap();
            let mut srq = hca.create_srq(15, 1, Some(&mut rcq)).unwrap();
            let key = hca
                .create_mkey(MkeyAccess::LOCAL_READ | MkeyAccess::LOCAL_WRITE)
                .unwrap();
            let g = hca.send_queue_geometry(&SendQueueCaps::default()).unwrap();
            let links = QpLinks {
                send_cq: Some(&mut scq),
                recv_cq: Some(&mut rcq),
                srq: Some(&mut srq),
            };
            let mut qp = hca
                .create_qp(
                    Some(SendQueueCaps::default()),
                    links,
                    vec![SendSlot::EMPTY; g.wqebbs()],
                )
                .unwrap();
            hca.connect_loopback_self(&mut qp).unwrap();
            let buf = dev.hal().alloc_dma(4096).unwrap();
            let sge = [Sge {
                addr: buf.iova(),
                length: 64,
                lkey: key.key(),
            }];
            hca.post_srq_recv(
                &mut srq,
                &[RecvRequest {
                    wr_id: 1,
                    sges: &sge,
                }],
            )
            .unwrap();

            dev.inject().fatal(0x08);
            let e = hca.check_health().unwrap_err();
            assert!(e.is_fatal() && hca.is_dead());

            // The data path reports the error at the first request.
            let req = SendRequest {
                wr_id: 7,
                op: SendOp::Send,
                payload: Payload::Sges(&sge),
                signaled: true,
                solicited: false,
            };
            let f = hca.post_send(&mut qp, &[req, req]).unwrap_err();
            assert_eq!((f.index, f.error), (0, SendError::DeviceDead));
            assert_eq!(f.error.errno(), errno::EIO);
            let f = hca
                .post_srq_recv(
                    &mut srq,
                    &[RecvRequest {
                        wr_id: 2,
                        sges: &sge,
                    }],
                )
                .unwrap_err();
            assert_eq!((f.index, f.error), (0, PostError::DeviceDead));
            // Commands that create or query fail with the fatal error.
            assert_eq!(
                hca.create_cq(7, CqOptions::default()).err(),
                Some(e),
                "{mode:?}"
            );
            // Commands that free succeed; no command reaches the device.
            let sent = dev.trace().len();
            hca.qp_to_error(&mut qp).unwrap();
            let links = QpLinks {
                send_cq: Some(&mut scq),
                recv_cq: Some(&mut rcq),
                srq: Some(&mut srq),
            };
            hca.destroy_qp(qp, links).map_err(|e| e.error()).unwrap();
            hca.destroy_srq(srq, Some(&mut rcq))
                .map_err(|e| e.error())
                .unwrap();
            hca.destroy_cq(scq).map_err(|e| e.error()).unwrap();
            hca.destroy_cq(rcq).map_err(|e| e.error()).unwrap();
            hca.destroy_mkey(key).map_err(|e| e.error()).unwrap();
            assert_eq!(dev.trace().len(), sent, "{mode:?}: nothing sent");
            // Teardown reports the death and releases the rest.
            assert_eq!(hca.teardown().unwrap_err(), e);
            drop(buf);
            assert_eq!(
                dev.dma_bytes_live(),
                base,
                "{mode:?} ISSI {issi}: memory left"
            );
            assert!(freed_while_in_use(&dev).is_empty());
        }
    }
}

/// A destroy waiting when the device dies frees its object all the same
/// (Linux flushes it with the same answer).
#[test]
fn a_destroy_in_flight_when_the_device_dies_succeeds() {
    let dev = device(Profile::ConnectX6Dx, ExecMode::Threaded);
    let hca = bring_up(&dev);
    let cq = hca.create_cq(7, CqOptions::default()).unwrap();
    let cq2 = hca.create_cq(7, CqOptions::default()).unwrap();
    dev.inject().stall_next(Opcode::DESTROY_CQ.0);
    dev.inject().stall_next(Opcode::QUERY_CQ.0);
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(30));
            dev.inject().fatal(0x01);
        });
        hca.destroy_cq(cq).map_err(|e| e.error()).unwrap();
    });
    // A query in flight fails with the fatal error instead.
    assert!(matches!(hca.query_cq(&cq2), Err(Error::Fatal { .. })));
    hca.destroy_cq(cq2).map_err(|e| e.error()).unwrap();
    let _ = hca.teardown();
    assert!(freed_while_in_use(&dev).is_empty());
}
