//! The driver's `log` feature: bring-up steps, page requests, command
//! failures, health and teardown reach the application's logger, with the
//! target `mlx5`. A module of the integration binary only with the
//! feature: `cargo test -p mlx5-tests --features driver-log --test
//! integration diag_log::`.
//!
//! A logger is process-wide and every test of the binary shares the process:
//! with the feature on, the other tests' driver calls log too. Each record
//! keeps the thread that wrote it and the checks read only this test's own
//! (the driver logs on the caller's thread).

use std::sync::Mutex;
use std::thread::ThreadId;

use mlx5_driver::Hca;
use mlx5_regs::{CmdStatus, Opcode};
use mlx5_sim::{Device, SimConfig};
use mlx5_tests::config;

/// Every record: (thread, level, target, message).
type Record = (ThreadId, log::Level, String, String);
static RECORDS: Mutex<Vec<Record>> = Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, r: &log::Record<'_>) {
        RECORDS.lock().unwrap().push((
            std::thread::current().id(),
            r.level(),
            r.target().to_string(),
            r.args().to_string(),
        ));
    }
    fn flush(&self) {}
}

static LOGGER: Capture = Capture;

/// True when this thread logged `text` at `level` with the target `mlx5`.
fn find(level: log::Level, text: &str) -> bool {
    let me = std::thread::current().id();
    RECORDS
        .lock()
        .unwrap()
        .iter()
        .any(|(id, l, t, m)| *id == me && *l == level && t == "mlx5" && m.contains(text))
}

#[test]
fn bring_up_pages_failures_health_and_teardown_are_logged() {
    log::set_logger(&LOGGER).unwrap();
    log::set_max_level(log::LevelFilter::Trace);

    let dev = Device::new(SimConfig::default());
    let hca = Hca::bring_up(dev.hal(), config()).unwrap();
    for (level, text) in [
        (log::Level::Info, "firmware 16.35.2000 ready"),
        (log::Level::Info, "ISSI 1"),
        (log::Level::Info, "INIT_HCA done"),
        (log::Level::Info, "pages given"),
        (log::Level::Info, "bring-up complete"),
    ] {
        assert!(find(level, text), "no {level} record with {text:?}");
    }

    // A page request served while polling.
    dev.inject().page_request(3);
    hca.poll_events().unwrap();
    assert!(find(log::Level::Debug, "page request: 3 pages"));

    // A command firmware refuses: opcode, status and syndrome.
    dev.inject()
        .fail_next(Opcode::QUERY_ISSI.0, CmdStatus::BAD_PARAM_ERR.0, 0x77);
    let mut out = [0u8; mlx5_driver::unstable::encode::QUERY_ISSI_OUT];
    assert!(hca
        .exec(&mlx5_driver::unstable::encode::query_issi(), &mut out)
        .is_err());
    assert!(
        find(
            log::Level::Warn,
            "QUERY_ISSI op_mod 0x0: status BAD_PARAM_ERR"
        ),
        "{:#?}",
        RECORDS.lock().unwrap()
    );

    // The device dies: one error record, then teardown is logged.
    dev.inject().fatal(0x1);
    assert!(hca.check_health().is_err());
    assert!(find(log::Level::Error, "device fatal"));
    let _ = hca.teardown();
    assert!(find(log::Level::Info, "teardown:"));
}
