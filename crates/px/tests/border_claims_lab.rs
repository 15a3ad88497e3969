//! Root tests of issue 35 item 5: no iMTU claim, true or false, makes the
//! gateway send a frame that a destination's path cannot carry without
//! the flow recovering by itself, ICMP filtered or not
//! (`px_lab::border::claims`: claims written into the gateway's table 30,
//! routers that drop their "fragmentation needed"). Each skips with a
//! message when not root or nftables is missing; each takes 5-40 s.

use std::time::Duration;

use px_lab::border::claims::{Case, ClaimsOptions, ClaimsResult, run};
use px_lab::require_root_or_skip;

fn run_case(name: &str, case: Case) -> Option<ClaimsResult> {
    if !require_root_or_skip(name) {
        return None;
    }
    if std::process::Command::new("nft").arg("--version").output().is_err() {
        eprintln!("SKIP {name}: nft (nftables) is not installed");
        return None;
    }
    let o = ClaimsOptions { exe: env!("CARGO_BIN_EXE_px").into(), bytes: 4 << 20, stall: Duration::from_secs(8) };
    let r = run(case, &o, &|l| eprintln!("{l}")).expect("the claims lab");
    eprintln!("{}", serde_json::to_string_pretty(&r).unwrap());
    Some(r)
}

/// A host of a verified prefix behind a 1500-byte hop, ICMP "fragmentation
/// needed" filtered: a sha256-checked transfer each way completes (before:
/// both ends used MSS 8948 and it stalled with 0 bytes). The verified
/// responder's own host still gets 9000-byte frames once its path is
/// confirmed.
#[test]
fn a_host_behind_a_smaller_hop_with_icmp_filtered_completes() {
    let Some(r) = run_case("a_host_behind_a_smaller_hop_with_icmp_filtered_completes", Case::Filtered) else {
        return;
    };
    assert!(r.claim_trusted, "the claim toward B's responder must verify: {:?}", r.gateway_log);
    assert!(r.exact, "{:?}", r.transfers);
    assert!(r.imtu_confirmed >= 1, "hB's path was never confirmed");
    assert!(r.time_to_large_ms.is_some(), "no connection to hB ever passed untouched: {r:?}");
    // 4 MiB each way in 8948-byte segments: hundreds of 9000-byte frames
    // (a probe or two are 9000 bytes too).
    assert!(r.jumbo_after_confirm.is_some_and(|j| j > 100), "no jumbo frames toward the confirmed host: {r:?}");
    assert_eq!(r.send_errors, 0);
}

/// A responder behind a 1500-byte hop that says 9000 bytes arrived whole
/// is not believed; hA <-> hC is translated and exact.
#[test]
fn a_lying_responder_is_not_believed() {
    let Some(r) = run_case("a_lying_responder_is_not_believed", Case::Liar) else { return };
    assert!(r.liar_answered > 0, "the liar never answered: the test would prove nothing");
    assert!(!r.claim_trusted, "a lie was believed: {:?}", r.gateway_log);
    assert!(
        r.gateway_log.iter().any(|l| l.contains("203.0.113.128/26") && l.contains("not believed")),
        "{:?}",
        r.gateway_log
    );
    assert!(r.exact, "{:?}", r.transfers);
    assert_eq!(r.imtu_passed, 0, "packets toward the liar passed untranslated");
}

/// A 1500-byte outer port is never exceeded, whatever the gateway host's
/// own probes (through a 9000-byte port) found.
#[test]
fn a_1500_byte_outer_port_is_never_exceeded() {
    let Some(r) = run_case("a_1500_byte_outer_port_is_never_exceeded", Case::OuterPort) else { return };
    assert!(r.exact, "{:?}", r.transfers);
    assert_eq!(r.send_errors, 0, "frames larger than the outer port were sent");
    assert_eq!(r.imtu_passed, 0);
}
