//! Root test of a border of two gateways behind ECMP (issue 30,
//! `px lab border`): BIRD 2 on both routers with eBGP and BFD across each
//! gateway, `kill -9` of one gateway during sha256-checked transfers in
//! both directions, then its restart. Every transfer must complete exact,
//! the flows on the dead gateway must move within a bound, and the flow
//! hash must be symmetric with equal seeds. Skips with a message when not
//! root or BIRD 2 is missing. About 30 s.

use std::time::Duration;

use px_lab::border::ecmp::{EcmpOptions, run};
use px_lab::require_root_or_skip;

#[test]
fn ecmp_failover_loses_no_byte() {
    if !require_root_or_skip("ecmp_failover_loses_no_byte") {
        return;
    }
    if !px_lab::border::bird::require_or_skip("ecmp_failover_loses_no_byte") {
        return;
    }
    let o = EcmpOptions {
        exe: env!("CARGO_BIN_EXE_px").into(),
        flows: 3,
        rate_mbps: 30.0,
        before_kill: Duration::from_secs(2),
        down: Duration::from_secs(4),
        after_restart: Duration::from_secs(3),
        hash_tuples: 32,
        gateway_args: Vec::new(),
        // Detection in 300 ms: robust on a loaded CI machine, where the
        // gateways (debug builds) can delay a BFD packet by tens of ms.
        bfd_ms: 100,
        hash_policy: 3,
    };
    // The flows' ports are the kernel's choice, and the hash may put none
    // of them behind the gateway that is killed (six flows on an even
    // hash: 1 run in 64; it happened in a CI run): then the run shows
    // nothing and is made again. Every run is checked whole.
    let mut tries = 0;
    loop {
        tries += 1;
        let r = run(&o, &|l| eprintln!("{l}")).expect("the ECMP run");
        check(&r);
        if r.stalled_flows > 0 {
            break;
        }
        assert!(tries < 3, "in {tries} runs no flow was on the killed gateway: the test shows nothing");
        eprintln!("run {tries}: no flow was on the killed gateway; once more");
    }
    assert!(px_lab::list_px_namespaces().unwrap().iter().all(|n| !n.contains(&format!("-{}-", std::process::id()))));
}

/// What every run must show, whether or not a flow was on the killed
/// gateway.
fn check(r: &px_lab::border::ecmp::EcmpResult) {
    eprintln!(
        "{}",
        serde_json::to_string_pretty(&serde_json::json!({
        "failover_ms": r.failover_ms, "stalled": r.stalled_flows, "route_ms": r.route_converged_ms,
        "failback_ms": r.failback_ms, "yield_before": r.yield_before_failover, "yield_after": r.yield_after_failover,
        "hash": r.hash, "bfd_flaps": r.bfd_flaps, "ra_events": r.ra_events, "transfers": r.transfers }))
        .unwrap()
    );
    assert!(r.transfers_exact, "{:?}", r.transfers);
    assert!(r.transfers.iter().all(|t| t.bytes > 0 && t.sent_sha256 == t.received_sha256));
    assert!(r.failover_ms < 3000.0, "failover took {} ms", r.failover_ms);
    assert_eq!(r.hash.same_seed, 1.0, "{:?}", r.hash);
}
