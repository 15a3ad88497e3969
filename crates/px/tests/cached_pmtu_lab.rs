//! Root test of issue 38 item 2: translation that stops without a word.
//! The b-network host sends one large non-TCP packet with DF set toward
//! the legacy host (a `ping -M do`, as `px probe --method icmp` does); the
//! gateway answers "fragmentation needed, MTU 1500", the host caches that
//! path MTU for the peer and advertises MSS 1460 on its next connections,
//! so the gateway cannot merge toward it. `px status --json` must name
//! such a flow and count it; the remedy of the deploy guide (an `advmss`
//! on the host's route toward the outside, which its path MTU cache does
//! not touch) must bring translation back with the cache still poisoned.
//! Topology and helpers as in `gateway_lab.rs`; skips when not root.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::*;
use px_lab::observe::FrameObserver;
use px_lab::require_root_or_skip;

/// The b-network host's route to the legacy host, as `ip route get`
/// prints it.
fn route_get(lab: &GwLab) -> String {
    lab.ns(lab.bnet).ip(&["route", "get", LEGACY_V4]).unwrap()
}

/// One 3000-byte echo with DF set from the b-network host: the gateway
/// answers "fragmentation needed" and the host caches a path MTU of 1500.
fn poison(lab: &GwLab) {
    let (ok, out) = run_in(lab.ns(lab.bnet), "ping", &["-M", "do", "-s", "3000", "-c", "1", "-W", "1", LEGACY_V4]);
    assert!(!ok, "a 3000-byte DF ping passed a 1500-byte outer port: {out}");
    let route = route_get(lab);
    assert!(route.contains("mtu 1500"), "the host cached no path MTU: {route}");
}

/// What one paced transfer from the legacy host to the b-network host
/// showed: `px status --json` in its middle, and the frames the b-network
/// host received (L3 sizes).
fn transfer_and_status(lab: &GwLab, port: u16) -> (serde_json::Value, px_lab::observe::SizeCounts) {
    let progress = AtomicU64::new(0);
    let spec = BulkSpec {
        server: sock(BNET_V4, port),
        flows: 1,
        bytes_per_flow: 16 << 20,
        pace: Pace { chunk: 16 << 10, gap: Duration::from_millis(1) },
        stall_timeout: Duration::from_secs(15),
        sha256: true,
    };
    let obs = FrameObserver::start(lab.ns(lab.bnet), BNET_DEV).unwrap();
    let json = std::thread::scope(|s| {
        let t = s.spawn(|| transfer(lab.ns(lab.legacy), lab.ns(lab.bnet), spec, &progress));
        while progress.load(Ordering::Relaxed) < 4 << 20 {
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = lab.ns(lab.gw).command(env!("CARGO_BIN_EXE_px")).args(["status", "--json"]).output().unwrap();
        assert!(out.status.success(), "px status: {}", String::from_utf8_lossy(&out.stderr));
        assert_exact(&t.join().unwrap(), 16 << 20);
        String::from_utf8_lossy(&out.stdout).into_owned()
    });
    let rx = obs.stop().rx;
    (serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}")), rx)
}

fn flow_to(v: &serde_json::Value, port: u16) -> serde_json::Value {
    let inner = format!("{BNET_V4}:{port}");
    v["flows"].as_array().unwrap().iter().find(|f| f["inner"] == inner.as_str()).cloned().unwrap_or_else(|| {
        panic!("no flow to {inner} in {v}");
    })
}

#[test]
fn a_host_that_cached_the_gateways_too_big_is_flagged_and_advmss_brings_translation_back() {
    if !require_root_or_skip("a_host_that_cached_the_gateways_too_big_is_flagged_and_advmss_brings_translation_back") {
        return;
    }
    let _serial = serialize();
    let lab = GwLab::build(None);
    let gw = Gateway::start(&lab, &[]);
    lab.ping_both();

    // Before: translated (merged frames toward the b-network host).
    let (v, rx) = transfer_and_status(&lab, 5491);
    eprintln!("before: {rx:?}, inner MSS {}", flow_to(&v, 5491)["inner_mss"]);
    assert!(rx.up_to_9000 + rx.above_9000 > 100, "not translated even before: {rx:?}");

    // The cache poisoned: the host advertises 1460, nothing merges, and
    // px status says so.
    poison(&lab);
    let (v, rx) = transfer_and_status(&lab, 5492);
    eprintln!("poisoned: {rx:?}\n{}", serde_json::to_string_pretty(&v["engine"]).unwrap());
    let f = flow_to(&v, 5492);
    assert_eq!(f["inner_mss"], 1460, "{f}");
    assert_eq!(f["not_translated"], "the inner host advertised MSS 1460", "{f}");
    assert!(v["engine"]["inner_mss_small"].as_u64().unwrap() >= 1, "{}", v["engine"]);
    assert_eq!(rx.up_to_9000 + rx.above_9000, 0, "merged frames to a host that advertised 1460: {rx:?}");

    // The remedy: an advmss on the host's route toward the outside,
    // then the cache poisoned again (a new route starts with none).
    let route = format!("{LEGACY_V4}/32");
    lab.ns(lab.bnet).ip(&["route", "replace", &route, "dev", BNET_DEV, "advmss", "8960"]).unwrap();
    poison(&lab);
    let (v, rx) = transfer_and_status(&lab, 5493);
    eprintln!("advmss 8960: {rx:?}\n{}", route_get(&lab));
    let f = flow_to(&v, 5493);
    assert_eq!(f["inner_mss"], 8960, "{f}");
    assert_eq!(f["not_translated"], serde_json::Value::Null, "{f}");
    assert!(rx.up_to_9000 + rx.above_9000 > 100, "advmss did not bring translation back: {rx:?}");
    assert!(route_get(&lab).contains("mtu 1500"), "the cache must still hold 1500 for the remedy to mean anything");
    gw.stop().assert_clean();
}
