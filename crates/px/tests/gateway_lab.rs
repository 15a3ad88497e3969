//! Root integration tests of `px gateway` on real Linux ports: the real
//! binary in a gateway namespace between a legacy host (MTU 1500) and a
//! b-network host (MTU 9000) on one subnet (the topology of `px lab demo`).
//! Each test skips with a message when not root, and tears down its
//! namespaces and processes on every path (guards). The tests take a
//! shared lock: they are CPU-bound on a 2-core machine.

mod common;

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use common::*;
use px_lab::{FrameObserver, require_root_or_skip};

/// Both directions, one flow and 32 parallel flows, with SHA-256 computed
/// at each end of every flow.
fn transfers_both_ways(lab: &GwLab, legacy_addr: &str, bnet_addr: &str, base_port: u16) {
    let cases = [(1usize, 8u64 << 20), (32, 512 << 10)];
    for (k, (flows, bytes)) in cases.into_iter().enumerate() {
        let p = base_port + 2 * k as u16;
        let progress = AtomicU64::new(0);
        let stall = Duration::from_secs(10);
        let inbound = Transfer { server: sock(bnet_addr, p), flows, bytes_per_flow: bytes, pace: Pace::FULL, stall };
        let ends = transfer(lab.ns(lab.legacy), lab.ns(lab.bnet), inbound, &progress);
        assert_exact(&ends, bytes);
        let outbound = Transfer { server: sock(legacy_addr, p + 1), ..inbound };
        let ends = transfer(lab.ns(lab.bnet), lab.ns(lab.legacy), outbound, &progress);
        assert_exact(&ends, bytes);
    }
}

fn check_translated(exit: &GatewayExit) {
    exit.assert_clean();
    // The gateway did its job on this traffic, not merely forwarded it.
    assert!(exit.counter("mss_raised") >= 1, "{}", exit.stats);
    assert!(exit.counter("mss_clamped") >= 1, "{}", exit.stats);
    assert!(exit.counter("merged_out") > 0, "{}", exit.stats);
    // Outbound 9000-byte segments reach the legacy host cut to 1500 (the
    // observers of the MSS test count that; here the bytes are what matter).
}

#[test]
fn ipv4_transfers_are_sha256_exact_both_ways() {
    if !require_root_or_skip("ipv4_transfers_are_sha256_exact_both_ways") {
        return;
    }
    let _serial = serialize();
    let lab = GwLab::build(None);
    let gw = Gateway::start(&lab, &[]);
    lab.ping_both();
    transfers_both_ways(&lab, LEGACY_V4, BNET_V4, 5301);
    check_translated(&gw.stop());
}

#[test]
fn ipv6_transfers_are_sha256_exact_both_ways() {
    if !require_root_or_skip("ipv6_transfers_are_sha256_exact_both_ways") {
        return;
    }
    let _serial = serialize();
    let lab = GwLab::build(None);
    let gw = Gateway::start(&lab, &[]);
    lab.ping_both();
    transfers_both_ways(&lab, LEGACY_V6, BNET_V6, 5311);
    check_translated(&gw.stop());
}

/// The b-network host's sockets use the large MSS while the legacy host's
/// use the small one, and independent observers in the hosts' namespaces
/// see no frame above 1500 bytes on the outer link and 9000-byte frames on
/// the inner link, in both directions, IPv4 and IPv6.
#[test]
fn bnet_host_uses_the_large_mss_and_links_carry_their_mtu() {
    if !require_root_or_skip("bnet_host_uses_the_large_mss_and_links_carry_their_mtu") {
        return;
    }
    let _serial = serialize();
    let lab = GwLab::build(None);
    let gw = Gateway::start(&lab, &[]);
    lab.ping_both();
    // MSS = MTU - IP header - TCP header - 12 bytes of timestamps (the
    // kernel's snd_mss excludes the options every segment carries).
    for (legacy, bnet, small, large, port) in
        [(LEGACY_V4, BNET_V4, 1448, 8948, 5321), (LEGACY_V6, BNET_V6, 1428, 8928, 5323)]
    {
        let obs_outer = FrameObserver::start(lab.ns(lab.legacy), LEGACY_DEV).unwrap();
        let obs_inner = FrameObserver::start(lab.ns(lab.bnet), BNET_DEV).unwrap();
        let progress = AtomicU64::new(0);
        let bytes = 8 << 20;
        let t = Transfer {
            server: sock(bnet, port),
            flows: 1,
            bytes_per_flow: bytes,
            pace: Pace::FULL,
            stall: Duration::from_secs(10),
        };
        let inbound = transfer(lab.ns(lab.legacy), lab.ns(lab.bnet), t, &progress);
        assert_exact(&inbound, bytes);
        let t = Transfer { server: sock(legacy, port + 1), ..t };
        let outbound = transfer(lab.ns(lab.bnet), lab.ns(lab.legacy), t, &progress);
        assert_exact(&outbound, bytes);
        let (outer, inner) = (obs_outer.stop(), obs_inner.stop());
        let (i, o) = (&inbound[0], &outbound[0]);
        eprintln!("{legacy}: inbound sender {:?} receiver {:?}", i.sender, i.receiver);
        eprintln!("{legacy}: outbound sender {:?} receiver {:?}", o.sender, o.receiver);
        eprintln!("{legacy}: outer link {outer:?}\n{legacy}: inner link {inner:?}");
        // Inbound: the legacy host sends small segments, the b-network host
        // receives merged ones.
        assert_eq!(i.sender.snd_mss, small, "legacy sender");
        assert_eq!(i.receiver.rcv_mss, large, "b-network receiver: merged segments");
        // Outbound: the b-network host sends with the large MSS (its peer's
        // SYN MSS was raised), the legacy host receives split segments.
        assert_eq!(o.sender.snd_mss, large, "b-network sender");
        assert_eq!(o.receiver.rcv_mss, small, "legacy receiver: split segments");
        // The observers count what crosses each link in each direction.
        assert!(outer.tx.max_l3 <= EMTU as usize && outer.rx.max_l3 <= EMTU as usize, "{outer:?}");
        assert!(outer.tx.frames > 5000 && outer.rx.frames > 5000, "{outer:?}");
        assert_eq!(inner.rx.max_l3, IMTU as usize, "merged frames on the inner link: {inner:?}");
        assert_eq!(inner.tx.max_l3, IMTU as usize, "large frames sent by the b-network host: {inner:?}");
        // Most data frames on the inner link are full: ~8 MB in 9000-byte frames.
        assert!(inner.rx.up_to_9000 > 700 && inner.tx.up_to_9000 > 700, "{inner:?}");
    }
    let exit = gw.stop();
    exit.assert_clean();
    let y = exit.stats["yield"].as_f64().unwrap_or(0.0);
    eprintln!("gateway yield {y:.3}");
    assert!(y > 0.5, "conversion yield {y}: {}", exit.stats);
}
