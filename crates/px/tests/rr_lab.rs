//! Root smoke test of `px lab rr`: request/response through px gateway and
//! through a plain Linux router in the same run, a short run of the real
//! command (`--json`). The figures are measured on a shared, loaded machine
//! (and a debug build): only their shape and a loose sanity bound are
//! checked here; `docs/merge.md` has a full run's figures.

use std::process::Command;

use px_lab::require_root_or_skip;

#[test]
fn lab_rr_reports_p50_and_p99_through_gateway_and_router() {
    if !require_root_or_skip("lab_rr_reports_p50_and_p99_through_gateway_and_router") {
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_px"))
        .args(["lab", "rr", "--json", "--transactions", "200"])
        .output()
        .expect("px runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "px lab rr failed: {stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    for size in ["1024", "16384", "65536"] {
        let s = &v["sizes"][size];
        let f = |k: &str| s[k].as_f64().unwrap_or_else(|| panic!("{size}: no {k} in {v}"));
        let (gp50, gp99, rp50, rp99) =
            (f("gateway_p50_us"), f("gateway_p99_us"), f("router_p50_us"), f("router_p99_us"));
        assert!(0.0 < gp50 && gp50 <= gp99 && 0.0 < rp50 && rp50 <= rp99, "{size}: {s}");
        assert_eq!(s["transactions"].as_u64(), Some(200));
        // Loose: an answer held for the merge timeout on every transaction
        // would show as a p50 far above the router's; noise on a loaded
        // machine stays well within this.
        eprintln!("px lab rr {size} B: gateway p50 {gp50:.0} p99 {gp99:.0} µs, router p50 {rp50:.0} p99 {rp99:.0} µs");
        assert!(gp50 < rp50 + 5_000.0, "{size}: gateway p50 {gp50} µs vs router {rp50} µs");
    }
}
