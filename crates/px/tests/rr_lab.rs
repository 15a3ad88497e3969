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

/// `px lab rr --json` with `ARGS` for the gateway; the JSON.
fn rr_json(gateway_args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_px"))
        .args(["lab", "rr", "--json", "--transactions", "400", "--sizes", "1024"])
        .args(gateway_args.iter().map(|a| format!("--gateway-arg={a}")))
        .output()
        .expect("px runs");
    assert!(out.status.success(), "px lab rr {gateway_args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

/// `busy_poll_us` reaches the worker: with a spin longer than the time
/// between two transactions the worker never sleeps while they run, and
/// spends nothing once traffic has stopped (the idle window before the
/// first). Sleeps are counted, not CPU time: a spinning worker's share of a
/// core depends on what else the machine runs (0.38-1.10 at loads 4-10,
/// against 0.00-1.02 for a sleeping one, in 10 ms ticks), its sleeps do
/// not (0.00 per transaction in every run). The worker without the spin is
/// shown for comparison, not asserted: it slept 1.3-2.1 times per
/// transaction in most runs, but 0.04-0.09 in 4 of 15 (why is open, noted
/// in issue 37's closing note). Mutation (`with_busy_poll` ignores the
/// spin): 0.06 and 1.57 sleeps per transaction, the test fails.
#[test]
fn busy_poll_spins_while_traffic_comes_and_not_when_idle() {
    if !require_root_or_skip("busy_poll_spins_while_traffic_comes_and_not_when_idle") {
        return;
    }
    let get = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or_else(|| panic!("no {k} in {v}"));
    let sleeping = rr_json(&[]);
    let spinning = rr_json(&["--set=busy_poll_us=10ms"]);
    let (sleep_sleeps, spin_sleeps) = (get(&sleeping, "gateway_busy_sleeps"), get(&spinning, "gateway_busy_sleeps"));
    let spin_idle = get(&spinning, "gateway_idle_cpu");
    eprintln!(
        "gateway sleeps per transaction: sleeping worker {sleep_sleeps:.2}, spinning {spin_sleeps:.2}; \
         CPU during transactions: {:.2} and {:.2}; idle, spinning: {spin_idle:.3}; idle, sleeping: {:.3}",
        get(&sleeping, "gateway_busy_cpu"),
        get(&spinning, "gateway_busy_cpu"),
        get(&sleeping, "gateway_idle_cpu"),
    );
    assert!(spin_sleeps <= 0.02, "a spinning worker slept {spin_sleeps:.2} times per transaction");
    assert!(spin_idle < 0.2, "an idle gateway spent {spin_idle:.2} of a core");
}
