//! The demo and the self-test on an InfiniBand port of the model (the
//! command line has no switch for the port type, so these run in-process):
//! the QPs connect by the port's own LID and every stage passes.

use mlx5_driver::HcaConfig;
use mlx5_sim::{Device, Profile, SimConfig};

use super::{run, Opts};
use crate::common::report::Report;
use crate::common::session::Env;
use crate::common::target::{Faults, Target};
use crate::common::trace::Tracer;
use crate::scenario::{self, Scenario};

fn ib_device() -> Device {
    let dev = Device::new(SimConfig::profile(Profile::ConnectX5));
    dev.caps_mut(|c| c.port_type = 0);
    dev
}

#[test]
fn the_demo_on_an_infiniband_port_connects_by_lid_without_the_side_door() {
    let dev = ib_device();
    let target = Target::Sim(Profile::ConnectX5);
    let env = Env {
        target: &target,
        model: Some(&dev),
        cfg: HcaConfig::default(),
    };
    let t = Tracer::new(None, false, None);
    let mut r = Report::new(true, false, false);
    let (sum, res) = scenario::run(Scenario::Demo, dev.hal(), &env, &t, &mut r);
    res.expect("the demo on an IB port");
    assert_eq!(sum.loopback, "ib");
    assert_eq!((sum.sent, sum.received, sum.send_completions), (41, 41, 41));
    assert_eq!(sum.bad, 0);
    let e = sum.engine.expect("model counters");
    assert_eq!((e.messages, e.side_door_uses), (41, 0));
    let steps = r.take_steps();
    assert_eq!(steps[0]["loopback_mode"], "ib");
    assert!(sum.teardown.clean(), "{:?}", sum.teardown);
}

#[test]
fn the_selftest_on_an_infiniband_port_passes_every_stage() {
    let dev = ib_device();
    let target = Target::Sim(Profile::ConnectX5);
    let env = Env {
        target: &target,
        model: Some(&dev),
        cfg: HcaConfig::default(),
    };
    let t = Tracer::new(None, false, None);
    let path = std::env::temp_dir().join(format!("mlx5-selftest-ib-{}.json", std::process::id()));
    let faults = Faults::default();
    let opts = Opts {
        json: true,
        progress: false,
        report: Some(path.clone()),
        faults: &faults,
    };
    let (v, res) = run(dev.hal(), &env, &t, &opts);
    res.expect("every stage");
    assert!(
        v["stages"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["result"] == "pass"),
        "{v}"
    );
    let b: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(b["capabilities"]["loopback"]["mode"], "ib");
    assert_eq!(b["capabilities"]["loopback"]["lid"], dev.port_lid());
    let caps = &b["stages"][1]["details"];
    // No QUERY_VPORT_STATE on an InfiniBand port: only QUERY_ADAPTER.
    assert_eq!(b["stages"][1]["commands"], 1, "{caps}");
    assert!(
        caps["lines"][1]
            .as_str()
            .unwrap()
            .contains("RC queue pairs"),
        "{caps}"
    );
    assert_eq!(b["model"]["traffic"]["side_door_uses"], 0);
}

/// A message that never completes (no receive posted: the responder
/// answers RNR forever) ends the wait after the bounded time with the
/// count that did arrive, and a 2 s wait costs little wall time on the
/// model's clock.
#[test]
fn a_message_that_never_completes_ends_a_bounded_wait() {
    use crate::scenario::flow::{Flow, Kind};
    use crate::scenario::objects::{alloc_bufs, create_cq, create_pair, create_srq, Objects};
    let dev = Device::new(SimConfig::profile(Profile::ConnectX5));
    let t = Tracer::new(None, false, None);
    let hca = mlx5_driver::Hca::bring_up_with(dev.hal(), HcaConfig::default(), &t).unwrap();
    let mut objs = Objects::new();
    objs.scq = Some(create_cq(&hca, 63, "send CQ").unwrap());
    let rcq = objs.rcq.insert(create_cq(&hca, 63, "receive CQ").unwrap());
    objs.srq = Some(create_srq(&hca, 15, rcq).unwrap());
    objs.sbufs = Some(alloc_bufs(&hca, "send buffers").unwrap());
    objs.rbufs = Some(alloc_bufs(&hca, "receive buffers").unwrap());
    create_pair(&hca, &mut objs, 0).unwrap();
    let mut flow = Flow::new();
    let mut p = objs.parts().unwrap();
    flow.post(&hca, &mut p, &[(Kind::Send, 10)]).unwrap();
    let start = std::time::Instant::now();
    let e = flow.complete_all(&hca, &mut p).unwrap_err();
    assert!(
        e.message()
            .starts_with("only 0 of 1 receive completions arrived on CQ"),
        "{}",
        e.message()
    );
    assert!(start.elapsed() < std::time::Duration::from_secs(20));
    let st = dev.traffic().stats();
    assert_eq!(st.messages, 0);
    assert!(st.rnr_naks > 0, "{st:?}");
    let (lines, res) = objs.destroy(&hca);
    res.unwrap();
    assert_eq!(lines.len(), 5, "{lines:?}");
    assert!(hca.teardown().unwrap().pages_left == 0);
}
